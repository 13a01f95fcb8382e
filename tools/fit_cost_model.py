"""Fit the heuristic's cost model (csrc/dispatch.h, kTiledCosts) to plan sweeps
(tools/sweep_plans.py) and report how close its picks come to the best measured plan.

Sessions 15-24. Since session 25 the committed model prices a grid by its rounds and lets the
warp-packed plans compete at every pattern: tools/fit_joint_cost.py replays and refits that one (its
--check-op compares with the op); this script's replay and --check-op follow the session-24 model.

    python tools/fit_cost_model.py SWEEP.csv [SWEEP2.csv ...]        # committed constants + a refit
    python tools/fit_cost_model.py SWEEP.csv --check-op              # replay == the C++ heuristic?
    python tools/fit_cost_model.py SWEEP.csv ... --search            # + tune the constants for the picks

Model, per kernel c and split s (session 16: occupancy-aware):

    us = waves * stages * (alpha_c + beta_c * wb + r * (gamma_c + delta_c * wb)) + reduction(s)

waves = ceil(ctas / (sms * blocks_per_sm_c)) (whole waves), r = min(blocks_per_sm_c,
ceil(ctas / sms)) the blocks that share an SM (fewer than blocks_per_sm_c only when the grid is under
one full wave: small m), stages = ceil(k-blocks / s), wb = compressed rows per k-block (the alpha and
gamma terms doubled for k-blocks of 64). The reduction (s > 1) is red_cluster (s = 2 on sm_90: inside
a thread-block cluster) or red_workspace (s > 2: a second launch), + 0.9 us per MB of partial tiles.
Linear in (alpha, beta, gamma, delta, red_cluster, red_workspace), so a weighted least-squares fit on
relative error does it; --search then tunes the constants for pick quality itself (session 17: the
committed constants come from it, started at the session-16 least-squares ones). Until session 15
the model had no r terms (every block priced as if the SM were full) and mispriced grids under one
wave: 14% above the best plan at m = 32.

`replay` is a Python copy of choose_plan's tiled part (kernel 11 only while its grid is under one
block per SM; split 2 reduced in a cluster); --check-op compares it with torch.ops.nmspmm.spmm_heuristic
on every swept shape (the CPU build has the op). Pick quality is reported in-sample (fit on every shape)
and out-of-sample (two-fold: fit on the shapes of one half of the (n, k) pairs, pick on the other)."""
import argparse
import csv
import math
from collections import defaultdict

import numpy as np

SMS = 132
TILE = {2: (128, 128), 3: (64, 128), 4: (32, 128), 5: (64, 64), 9: (128, 256), 10: (256, 128), 11: (128, 128)}
NAMES = {2: "kTiled128x128", 3: "kTiled64x128", 4: "kTiled32x128", 5: "kTiled64x64", 9: "kTiled128x256",
         10: "kTiled256x128", 11: "kTiled128x128w8"}
KERNELS = sorted(TILE)
# Committed csrc/dispatch.h constants: blocks per SM, alpha, beta, gamma, delta; reductions.
COMMITTED = {9: (1, 0.1537, 0.1710, 0.0, 0.0), 10: (1, 0.5017, 0.1568, 0.0, 0.0),
             11: (2, 0.2529, 0.0237, 0.0583, 0.0677), 2: (2, -0.2269, 0.0925, 0.2051, 0.0345),
             3: (2, 0.2258, 0.0300, -0.0620, 0.0309), 4: (4, 0.0368, 0.0276, 0.0266, 0.0153),
             5: (4, 0.5249, 0.0141, -0.0415, 0.0140)}
RED_CLUSTER, RED_WORKSPACE, RED_PER_MB = 0.672, 3.392, 0.900
# choose_plan's split-K candidates: 1, 2, 4, ..., MAX_SPLIT (the powers of two of kSplitCandidates until session 28; each split keeping >= 4
# k-blocks).
MAX_SPLIT = 16
# kTiledCosts order (ties go to the earlier entry, as in choose_plan).
ORDER = [9, 10, 11, 2, 3, 4, 5]


def plan_terms(shape, c, s, bps):
    """(features, reduction indicators, reduction traffic us) of one plan:
    us = features . (alpha, beta, gamma, delta)_c + [s == 2, s > 2] . (red_cluster, red_workspace) + traffic."""
    m, n, k, N, M = shape
    kb = 32 if M <= 32 else 64
    wb = kb // M * N
    bm, bn = TILE[c]
    ctas = math.ceil(m / bm) * math.ceil(n / bn) * s
    waves = math.ceil(ctas / (SMS * bps[c]))
    r = min(bps[c], math.ceil(ctas / SMS))
    stages = math.ceil(math.ceil(k / kb) / s)
    scale = 2.0 if kb == 64 else 1.0
    w = waves * stages
    feats = np.array([w * scale, w * wb, w * r * scale, w * r * wb])
    traffic = RED_PER_MB * (s + 1) * m * n * 4 / 1e6 if s > 1 else 0.0
    return feats, np.array([float(s == 2), float(s > 2)]), traffic


def predict(shape, c, s, model):
    consts, red, bps = model
    feats, ind, traffic = plan_terms(shape, c, s, bps)
    return float(feats @ consts[c]) + float(ind @ red) + traffic


def candidate_plans(shape):
    """choose_plan's tiled candidates for shape (m, n, k, N, M), in its order: (kernel, split)."""
    m, n, k, N, M = shape
    out = []
    for c in ORDER:
        if M > 64 or (c in (9, 10) and M > 32):
            continue
        kblocks = math.ceil(k / (32 if M <= 32 else 64))
        s = 1
        while s <= MAX_SPLIT:
            if s > 1 and kblocks // s < 4:
                break
            bm, bn = TILE[c]
            if not (c == 11 and math.ceil(m / bm) * math.ceil(n / bn) * s >= SMS):
                out.append((c, s))
            s *= 2
    return out


def replay(shape, model):
    """choose_plan's tiled pick for shape (m, n, k, N, M): (kernel, split); ties go to the earlier."""
    best, best_us = None, None
    for c, s in candidate_plans(shape):
        us = predict(shape, c, s, model)
        if best_us is None or us < best_us:
            best, best_us = (c, s), us
    return best


def plan_row(shape, c, s, bps):
    """One plan as (features over the whole parameter vector, reduction traffic us): us = row . theta
    + traffic, theta = (alpha, beta, gamma, delta) per kernel in KERNELS order, then the reductions."""
    feats, ind, traffic = plan_terms(shape, c, s, bps)
    row = np.zeros(4 * len(KERNELS) + 2)
    j = KERNELS.index(c)
    row[4 * j:4 * j + 4] = feats
    row[-2:] = ind
    return row, traffic


def fit(rows, bps):
    """Weighted least squares of every kernel's (alpha, beta, gamma, delta) and the two reductions'
    fixed costs, on relative error. For kernels with blocks_per_sm 1 the gamma / delta columns
    equal the alpha / beta ones (r = 1); their minimum-norm split is kept as is."""
    X = np.zeros((len(rows), 4 * len(KERNELS) + 2))
    y = np.zeros(len(rows))
    for i, r in enumerate(rows):
        X[i], traffic = plan_row(r["shape"], r["kernel"], r["split"], bps)
        y[i] = r["us"] - traffic
    w = 1.0 / np.array([r["us"] for r in rows])
    theta, *_ = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)
    consts = {c: theta[4 * j:4 * j + 4] for j, c in enumerate(KERNELS)}
    for c in KERNELS:  # fold the collinear r = 1 terms into alpha / beta
        if bps[c] == 1:
            a, b, g, d = consts[c]
            consts[c] = np.array([a + g, b + d, 0.0, 0.0])
    return consts, theta[-2:], bps


def pick_quality(shapes, model):
    ratios = {}
    for shape, plans in shapes.items():
        pick = replay(shape, model)
        ratios[shape] = plans.get(pick, float("nan")) / min(plans.values())
    return ratios


def summary(ratios, label):
    v = np.array([x for x in ratios.values() if not math.isnan(x)])
    by_m = defaultdict(list)
    for shape, x in ratios.items():
        by_m[shape[0]].append(x)
    per_m = " ".join(f"m{m} {np.exp(np.log(by_m[m]).mean()):.3f}" for m in sorted(by_m))
    print(f"{label}: picks vs best geomean {np.exp(np.log(v).mean()):.4f}, worst {v.max():.3f}, "
          f"within 2% {np.mean(v < 1.02):.2f} ({len(v)} shapes; {per_m})")


def check_op(shapes, model):
    """Compare the replay with the C++ heuristic (torch.ops.nmspmm.spmm_heuristic)."""
    import torch
    import nmspmm  # noqa: F401  (registers the ops)
    same = 0
    for (m, n, k, N, M) in shapes:
        op = tuple(torch.ops.nmspmm.spmm_heuristic(m, n, k, N, M, 32, False, SMS))
        same += op == replay((m, n, k, N, M), model)
    print(f"replay == torch.ops.nmspmm.spmm_heuristic on {same} of {len(shapes)} shapes")
    return same == len(shapes)


def model_theta(model):
    """The model as one parameter vector: (alpha, beta, gamma, delta) per kernel in KERNELS order,
    then (red_cluster, red_workspace)."""
    consts, red, _ = model
    return np.concatenate([np.asarray(consts[c], dtype=float) for c in KERNELS] + [np.asarray(red, dtype=float)])


def theta_model(theta, bps):
    return ({c: theta[4 * j:4 * j + 4] for j, c in enumerate(KERNELS)}, theta[-2:], bps)


class PickLoss:
    """Pick quality of a parameter vector on a set of swept shapes, vectorized: for every shape the
    replay's candidate plans (in choose_plan order, so ties resolve the same way) as rows of features,
    and the log of each plan's time over the shape's best time. A pick that was not timed counts
    log(1.5)."""

    UNTIMED = math.log(1.5)

    def __init__(self, shapes, bps):
        self.keys = list(shapes)
        self.tables = []
        for shape in self.keys:
            plans = shapes[shape]
            best = min(plans.values())
            feats, traffic, loss = [], [], []
            for c, s in candidate_plans(shape):
                row, t = plan_row(shape, c, s, bps)
                feats.append(row)
                traffic.append(t)
                loss.append(math.log(plans[(c, s)] / best) if (c, s) in plans else self.UNTIMED)
            self.tables.append((np.array(feats), np.array(traffic), np.array(loss)))

    def per_shape(self, theta):
        return [loss[np.argmin(feats @ theta + traffic)] for feats, traffic, loss in self.tables]

    def __call__(self, theta):
        return float(np.mean(self.per_shape(theta)))


def search(shapes, bps, theta0, passes=10):
    """Coordinate search on pick quality (mean log of pick time over best time) from theta0: each
    parameter in turn is scaled (x0.5 .. x2, sign flip) or shifted (+-0.0025 .. 0.05), a step kept
    when it lowers the loss; until a pass changes nothing. The least-squares fit minimizes the error
    of every plan's time, most of them far from the best; this targets the ranking near the top."""
    return coordinate_search(PickLoss(shapes, bps), theta0, passes, 1e-6)


def coordinate_search(loss, theta0, passes, tol):
    """Minimizes loss(theta) one parameter at a time (the steps of search, above), keeping a step
    that lowers it by more than tol; stops after `passes` passes or a pass that changes nothing."""
    theta, best = np.array(theta0, dtype=float), loss(theta0)
    for _ in range(passes):
        improved = False
        for i in range(len(theta)):
            for f in (0.5, 0.8, 0.9, 0.95, 1.05, 1.1, 1.25, 2.0, -1.0):
                for step in (theta[i] * f, theta[i] + (f - 1) * 0.05):
                    trial = theta.copy()
                    trial[i] = step
                    v = loss(trial)
                    if v < best - tol:
                        theta, best, improved = trial, v, True
        if not improved:
            break
    return theta


def print_constants(model):
    consts, red, bps = model
    print(f"    red_cluster {red[0]:.3f} us, red_workspace {red[1]:.3f} us")
    for c in ORDER:
        a, b, g, d = consts[c]
        print(f"    {{{NAMES[c]}, {bps[c]}, {a:.4f}, {b:.4f}, {g:.4f}, {d:.4f}, ...}},")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sweeps", nargs="+")
    ap.add_argument("--bps", default="", help="blocks per SM overrides, e.g. 3:3,5:6")
    ap.add_argument("--check-op", action="store_true", help="compare the replay with the built op")
    ap.add_argument("--search", action="store_true",
                    help="also tune the constants for pick quality (coordinate search from the committed ones)")
    args = ap.parse_args()
    # A plan timed in more than one sweep counts once, at the mean of its timings.
    timings = defaultdict(list)
    for path in args.sweeps:
        for r in csv.DictReader(open(path)):
            c = int(r["kernel"])
            if c not in TILE:
                continue
            shape = tuple(int(r[x]) for x in ("m", "n", "k", "N", "M"))
            timings[(shape, c, int(r["split"]))].append(float(r["ms"]) * 1e3)
    rows, shapes = [], defaultdict(dict)
    for (shape, c, split), v in timings.items():
        us = sum(v) / len(v)
        rows.append(dict(shape=shape, kernel=c, split=split, us=us))
        shapes[shape][(c, split)] = us
    committed_bps = {c: v[0] for c, v in COMMITTED.items()}
    committed = ({c: np.array(v[1:]) for c, v in COMMITTED.items()},
                 np.array([RED_CLUSTER, RED_WORKSPACE]), committed_bps)
    if args.check_op and not check_op(shapes, committed):
        raise SystemExit("the replay does not match the built heuristic")
    summary(pick_quality(shapes, committed), "committed")

    bps = dict(committed_bps)
    for item in filter(None, args.bps.split(",")):
        c, v = item.split(":")
        bps[int(c)] = int(v)
    model = fit(rows, bps)
    print(f"refit (least squares), blocks per SM {bps}:")
    print_constants(model)
    summary(pick_quality(shapes, model), "refit, in-sample")
    summary(two_fold(shapes, lambda train: fit([r for r in rows if r["shape"] in train], bps)),
            "refit, out-of-sample (two-fold over (n, k) pairs)")
    if args.search:
        start = model_theta(committed)
        searched = theta_model(search(shapes, bps, start), bps)
        print("searched (coordinate search on pick quality, from the committed constants):")
        print_constants(searched)
        summary(pick_quality(shapes, searched), "searched, in-sample")
        summary(two_fold(shapes, lambda train: theta_model(search(train, bps, start), bps)),
                "searched, out-of-sample (two-fold over (n, k) pairs)")


def two_fold(shapes, make_model):
    """Pick quality out of sample: the (n, k) pairs split in two halves; a model made from one
    half's shapes (make_model(shapes) -> model) picks on the other half's, and the other way round."""
    pairs = sorted({s[1:3] for s in shapes})
    out = {}
    for fold in (0, 1):
        train = {p for i, p in enumerate(pairs) if i % 2 == fold}
        fold_model = make_model({s: p for s, p in shapes.items() if s[1:3] in train})
        out.update(pick_quality({s: p for s, p in shapes.items() if s[1:3] not in train}, fold_model))
    return out

if __name__ == "__main__":
    main()
