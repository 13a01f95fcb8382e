"""Fit the heuristic's cost model (csrc/dispatch.h, kTiledCosts) to plan sweeps
(tools/sweep_plans.py) and report how close its picks come to the best measured plan.

    python tools/fit_cost_model.py SWEEP.csv [SWEEP2.csv ...]        # committed constants + a refit
    python tools/fit_cost_model.py SWEEP.csv --check-op              # replay == the C++ heuristic?

Model, per kernel c and split s (session 16: occupancy-aware):

    us = waves * stages * (alpha_c + beta_c * wb + r * (gamma_c + delta_c * wb)) + reduction(s)

waves = ceil(ctas / (sms * blocks_per_sm_c)) (whole waves), r = min(blocks_per_sm_c,
ceil(ctas / sms)) the blocks that share an SM (fewer than blocks_per_sm_c only when the grid is under
one full wave: small m), stages = ceil(k-blocks / s), wb = compressed rows per k-block (the alpha and
gamma terms doubled for k-blocks of 64). The reduction (s > 1) is red_cluster (s = 2 on sm_90: inside
a thread-block cluster) or red_workspace (s > 2: a second launch), + 0.9 us per MB of partial tiles.
Linear in (alpha, beta, gamma, delta, red_cluster, red_workspace), so a weighted least-squares fit on
relative error does it. Until session 15 the model had no r terms (every block priced as if the
SM were full) and mispriced grids under one wave: 14% above the best plan at m = 32.

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
COMMITTED = {9: (1, 0.3075, 0.1710, 0.0, 0.0), 10: (1, 0.5017, 0.1568, 0.0, 0.0),
             11: (2, 0.2529, 0.0237, 0.0583, 0.0677), 2: (2, -0.2060, 0.1000, 0.1901, 0.0345),
             3: (2, 0.2283, 0.0240, -0.0570, 0.0309), 4: (4, 0.0668, 0.0290, 0.0266, 0.0153),
             5: (4, 0.5199, 0.0141, -0.0390, 0.0140)}
RED_CLUSTER, RED_WORKSPACE, RED_PER_MB = 2.69, 6.03, 0.900
# choose_plan's split-K candidates: 1, 2, 4, ..., MAX_SPLIT (kMaxTiledSplit; each split keeping >= 4
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


def replay(shape, model):
    """choose_plan's tiled pick for shape (m, n, k, N, M): (kernel, split)."""
    m, n, k, N, M = shape
    best, best_us = None, None
    for c in ORDER:
        if M > 64 or (c in (9, 10) and M > 32):
            continue
        kblocks = math.ceil(k / (32 if M <= 32 else 64))
        s = 1
        while s <= MAX_SPLIT:
            if s > 1 and kblocks // s < 4:
                break
            bm, bn = TILE[c]
            ctas = math.ceil(m / bm) * math.ceil(n / bn) * s
            if not (c == 11 and ctas >= SMS):
                us = predict(shape, c, s, model)
                if best_us is None or us < best_us:
                    best, best_us = (c, s), us
            s *= 2
    return best


def fit(rows, bps):
    """Weighted least squares of every kernel's (alpha, beta, gamma, delta) and the two reductions'
    fixed costs, on relative error. For kernels with blocks_per_sm 1 the gamma / delta columns
    equal the alpha / beta ones (r = 1); their minimum-norm split is kept as is."""
    X = np.zeros((len(rows), 4 * len(KERNELS) + 2))
    y = np.zeros(len(rows))
    for i, r in enumerate(rows):
        feats, ind, traffic = plan_terms(r["shape"], r["kernel"], r["split"], bps)
        j = KERNELS.index(r["kernel"])
        X[i, 4 * j:4 * j + 4] = feats
        X[i, -2:] = ind
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sweeps", nargs="+")
    ap.add_argument("--bps", default="", help="blocks per SM overrides, e.g. 3:3,5:6")
    ap.add_argument("--check-op", action="store_true", help="compare the replay with the built op")
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
    consts, red, _ = model
    print(f"refit, blocks per SM {bps}, red_cluster {red[0]:.2f} us, red_workspace {red[1]:.2f} us:")
    for c in ORDER:
        a, b, g, d = consts[c]
        print(f"    {{{NAMES[c]}, {bps[c]}, {a:.4f}, {b:.4f}, {g:.4f}, {d:.4f}, ...}},")
    summary(pick_quality(shapes, model), "refit, in-sample")
    # Two-fold by (n, k) pair: fit on one half's shapes, pick on the other's.
    pairs = sorted({s[1:3] for s in shapes})
    out = {}
    for fold in (0, 1):
        train = {p for i, p in enumerate(pairs) if i % 2 == fold}
        fold_model = fit([r for r in rows if r["shape"][1:3] in train], bps)
        out.update(pick_quality({s: p for s, p in shapes.items() if s[1:3] not in train}, fold_model))
    summary(out, "refit, out-of-sample (two-fold over (n, k) pairs)")


if __name__ == "__main__":
    main()
