"""Fit the heuristic's prefill cost models (csrc/dispatch.h: kTiledCosts, kWarpPackedCosts and the two
split-K reduction constants) to flushed plan sweeps (tools/sweep_flushed.py), and replay the picks:

    python tools/fit_joint_cost.py SWEEP.csv [SWEEP_PASS2.csv ...] [--rule joint|split]
        [--grid rounds|waves] [--search [--start lsq|committed]] [--emit] [--check-op]

A plan timed in several files counts at its lowest median (the benchmark keeps the lower of two).
Models (per kernel c, split s; stages as in tools/fit_cost_model.py / fit_warp_packed_cost.py), with
(W, V) = grid_terms(...): (R, B) for --grid rounds (csrc/dispatch.h since session 25: the busiest
SM's B blocks in R rounds) or (waves, waves * r) for --grid waves (until session 24):
    tiled:        us = stages * (W * (alpha + beta * wb) + V * (gamma + delta * wb)) + red(s)
    warp-packed:  us = stages * (W * a + V * g) + W * b + red(s)
    red(s) = [s == 2] red_cluster + [s > 2] red_workspace + 0.9 us per MB of partial tiles (s > 1)
Rules: joint = the cheapest plan of both families at L >= 32 (csrc/dispatch.h since session 25);
split = warp-packed plans only at 4N <= M, tiled plans otherwise (until session 24). The defaults
are the committed model, whose constants are parsed from csrc/dispatch.h; --check-op compares this
replay with torch.ops.nmspmm.spmm_heuristic on every swept shape. Pick quality (pick time over
the best timed plan, geomean) is printed for the committed heuristic (the sweep's heur columns), the
least-squares refit and, with --search, a coordinate search on pick quality started from the refit;
in-sample and two-fold over the (n, k) pairs. --emit prints the constants as C++ initializers."""
import argparse
import csv
import math
import os
import sys
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from fit_cost_model import NAMES, ORDER, SMS, TILE  # noqa: E402
from fit_cost_model import candidate_plans as tiled_candidates  # noqa: E402
from fit_cost_model import coordinate_search  # noqa: E402
from fit_warp_packed_cost import wp_candidates  # noqa: E402

WP = {18: (128, 12, 2), 19: (64, 16, 3), 20: (32, 16, 4)}  # BM, rows per stage, blocks per SM
WP_NAMES = {18: "kWarpPacked128x128", 19: "kWarpPacked64x128", 20: "kWarpPacked32x128"}
TILED_BPS = {9: 1, 10: 1, 11: 2, 2: 2, 3: 2, 4: 4, 5: 4}
RED_PER_MB = 0.900
MODERATE_MAX_MNK = 4.5e10  # kWarpPackedModerateMaxMnk
# Parameter vector: 4 per tiled kernel (ORDER), 3 per warp-packed kernel (18, 19, 20), 2 reductions.
T_OFF = {c: 4 * i for i, c in enumerate(ORDER)}
W_OFF = {c: 4 * len(ORDER) + 3 * i for i, c in enumerate(WP)}
NP = 4 * len(ORDER) + 3 * len(WP) + 2


GRID = "rounds"  # --grid: how a multi-wave grid is charged (below)


def grid_terms(m, n, bm, bn, s, bps):
    """(waves, waves * r): the per-stage model's two multipliers. "waves": whole waves of bps blocks
    per SM, each at r = min(bps, blocks per SM) (csrc/dispatch.h). "rounds": the busiest SM's
    B = ceil(blocks / SMs) blocks in R = ceil(B / bps) rounds, the last one at B - (R - 1) bps
    blocks, so a last partial wave costs what its concurrency costs (the same on one wave)."""
    ctas = math.ceil(m / bm) * math.ceil(n / bn) * s
    per_sm = math.ceil(ctas / SMS)
    if GRID == "rounds":
        return math.ceil(per_sm / bps), per_sm
    waves = math.ceil(ctas / (SMS * bps))
    return waves, waves * min(bps, per_sm)


def plan_row(shape, c, s):
    m, n, k, N, M = shape
    x = np.zeros(NP)
    if c in WP:
        bm, wb, bps = WP[c]
        waves, wr = grid_terms(m, n, bm, 128, s, bps)
        stages = math.ceil(math.ceil(k // M * N / wb) / s)
        x[W_OFF[c]:W_OFF[c] + 3] = [waves * stages, wr * stages, waves]
    else:
        bm, bn = TILE[c]
        kb = 32 if M <= 32 else 64
        waves, wr = grid_terms(m, n, bm, bn, s, TILED_BPS[c])
        stages = math.ceil(math.ceil(k / kb) / s)
        scale, wb, w, v = (2.0 if kb == 64 else 1.0), kb // M * N, waves * stages, wr * stages
        x[T_OFF[c]:T_OFF[c] + 4] = [w * scale, w * wb, v * scale, v * wb]
    x[-2:] = [float(s == 2), float(s > 2)]
    traffic = RED_PER_MB * (s + 1) * m * n * 4 / 1e6 if s > 1 else 0.0
    return x, traffic


def candidates(shape, rule):
    N, M = shape[3], shape[4]
    if rule == "joint":  # csrc/dispatch.h warp_packed_candidates: at 4N > M only below MODERATE_MAX_MNK
        m, n, k = shape[:3]
        wp = wp_candidates(shape) if 4 * N <= M or m * n * k < MODERATE_MAX_MNK else []
        return tiled_candidates(shape) + wp
    return wp_candidates(shape) if 4 * N <= M else tiled_candidates(shape)


def committed_theta():
    """The constants in csrc/dispatch.h (parsed, so the replay always matches the build)."""
    src = open(os.path.join(os.path.dirname(__file__), "..", "csrc", "dispatch.h")).read()
    theta = np.zeros(NP)
    names = {v: c for c, v in NAMES.items()}
    for line in src.splitlines():
        line = line.strip()
        if line.startswith("{kTiled") or line.startswith("{kWarpPacked"):
            parts = [p.strip() for p in line.strip("{},").split(",")]
            name = parts[0]
            if name in names and names[name] in T_OFF:
                theta[T_OFF[names[name]]:T_OFF[names[name]] + 4] = [float(v) for v in parts[2:6]]
            for c, wn in WP_NAMES.items():
                if name == wn:
                    theta[W_OFF[c]:W_OFF[c] + 3] = [float(v) for v in parts[3:6]]
        if line.startswith("constexpr double kClusterReduceUs"):
            theta[-2] = float(line.split("=")[1].strip(" ;"))
        if line.startswith("constexpr double kWorkspaceReduceUs"):
            theta[-1] = float(line.split("=")[1].strip(" ;"))
    return theta


def load(paths):
    t = defaultdict(lambda: math.inf)
    heur = {}
    for path in paths:
        for r in csv.DictReader(open(path)):
            shape = (int(r["m"]), int(r["n"]), int(r["k"]), int(r["N"]), int(r["M"]))
            key = (shape, int(r["kernel"]), int(r["split"]))
            t[key] = min(t[key], float(r["ms"]) * 1e3)
            heur[shape] = (int(r["heur_kernel"]), int(r["heur_split"]))
    shapes = defaultdict(dict)
    for (shape, c, s), us in t.items():
        shapes[shape][(c, s)] = us
    return shapes, heur


def lsq(shapes):
    X, y, w = [], [], []
    for shape, plans in shapes.items():
        for (c, s), us in plans.items():
            row, traffic = plan_row(shape, c, s)
            X.append(row)
            y.append(us - traffic)
            w.append(1.0 / us)
    X, y, w = np.array(X), np.array(y), np.array(w)
    theta, *_ = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)
    for c, bps in TILED_BPS.items():  # r = 1 always: fold gamma / delta into alpha / beta
        if bps == 1:
            o = T_OFF[c]
            theta[o:o + 4] = [theta[o] + theta[o + 2], theta[o + 1] + theta[o + 3], 0.0, 0.0]
    return theta


class PickLoss:
    UNTIMED = math.log(1.5)

    def __init__(self, shapes, rule):
        self.keys, self.tables = list(shapes), []
        for shape in self.keys:
            plans = shapes[shape]
            best = min(plans.values())
            cands = candidates(shape, rule)
            rows = [plan_row(shape, c, s) for c, s in cands]
            self.tables.append((cands, np.array([r for r, _ in rows]), np.array([t for _, t in rows]),
                                np.array([math.log(plans[p] / best) if p in plans else self.UNTIMED for p in cands])))

    def picks(self, theta):
        return {key: cands[int(np.argmin(X @ theta + tr))] for key, (cands, X, tr, _) in zip(self.keys, self.tables)}

    def __call__(self, theta):
        return float(np.mean([loss[int(np.argmin(X @ theta + tr))] for _, X, tr, loss in self.tables]))


def search(shapes, rule, theta0, passes=8):
    return coordinate_search(PickLoss(shapes, rule), theta0, passes, 1e-7)


def report(shapes, picks, label, groups):
    """picks: shape -> plan. Prints pick / best geomean per (grid, N) and overall."""
    out = []
    for gname, members in groups.items():
        by = defaultdict(list)
        for shape in members:
            plans = shapes[shape]
            p = picks.get(shape)
            t = plans.get(p)
            by[shape[3]].append(t / min(plans.values()) if t is not None else 1.5)
        cells = " ".join(f"{N}:32 {math.exp(np.mean(np.log(v))):.3f}" for N, v in sorted(by.items(), reverse=True))
        allv = [x for v in by.values() for x in v]
        out.append(f"{gname} {math.exp(np.mean(np.log(allv))):.4f} [{cells}] worst {max(allv):.2f}")
    print(f"{label}: pick/best  " + " | ".join(out))


def two_fold(shapes, rule, make_theta):
    pairs = sorted({s[1:3] for s in shapes})
    picks = {}
    for fold in (0, 1):
        train = {s: p for s, p in shapes.items() if pairs.index(s[1:3]) % 2 == fold}
        test = {s: p for s, p in shapes.items() if pairs.index(s[1:3]) % 2 != fold}
        picks.update(PickLoss(test, rule).picks(make_theta(train)))
    return picks


def emit(theta):
    print(f"constexpr double kWorkspaceReduceUs = {theta[-1]:.3f};")
    print(f"constexpr double kClusterReduceUs = {theta[-2]:.3f};")
    for c in ORDER:
        o = T_OFF[c]
        print(f"    {{{NAMES[c]}, {TILED_BPS[c]}, " + ", ".join(f"{v:.4f}" for v in theta[o:o + 4]) + ", ...},")
    for c in WP:
        o = W_OFF[c]
        print(f"    {{{WP_NAMES[c]}, {WP[c][2]}, {WP[c][1]}, " + ", ".join(f"{v:.4f}" for v in theta[o:o + 3]) + "},")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sweeps", nargs="+")
    ap.add_argument("--rule", default="joint", choices=("split", "joint"))
    ap.add_argument("--search", action="store_true")
    ap.add_argument("--emit", action="store_true")
    ap.add_argument("--check-op", action="store_true", help="replay == torch.ops.nmspmm.spmm_heuristic")
    ap.add_argument("--grid", default="rounds", choices=("waves", "rounds"), help="multi-wave grid term (grid_terms)")
    ap.add_argument("--start", default="committed", choices=("committed", "lsq"), help="where --search starts")
    args = ap.parse_args()
    global GRID
    GRID = args.grid
    shapes, heur = load(args.sweeps)
    groups = defaultdict(list)
    for s in shapes:
        groups["m>=256 nmspmm" if s[0] >= 256 and (s[1], s[2]) in NMSPMM_NK else "llama/other"].append(s)
    groups["all"] = list(shapes)
    report(shapes, heur, "committed heuristic (as swept)", groups)
    th0 = committed_theta()
    if args.check_op:
        import torch
        import nmspmm  # noqa: F401  (loads the ops)
        picks = PickLoss(shapes, args.rule).picks(th0)
        same = sum(tuple(torch.ops.nmspmm.spmm_heuristic(m, n, k, N, M, 32, False, SMS)) == picks[(m, n, k, N, M)]
                   for (m, n, k, N, M) in shapes)
        print(f"replay (rule {args.rule}, grid {GRID}) == torch.ops.nmspmm.spmm_heuristic on {same} of {len(shapes)} shapes")
    report(shapes, PickLoss(shapes, args.rule).picks(th0), f"committed constants, rule {args.rule}", groups)
    theta = lsq(shapes)
    report(shapes, PickLoss(shapes, args.rule).picks(theta), f"least squares, rule {args.rule}, in-sample", groups)
    report(shapes, two_fold(shapes, args.rule, lsq), f"least squares, rule {args.rule}, two-fold", groups)
    if args.search:
        start = lsq if args.start == "lsq" else (lambda tr: th0)
        st = search(shapes, args.rule, start(shapes))
        report(shapes, PickLoss(shapes, args.rule).picks(st), f"searched from {args.start}, rule {args.rule}, in-sample", groups)
        report(shapes, two_fold(shapes, args.rule, lambda tr: search(tr, args.rule, start(tr))),
               f"searched from {args.start}, rule {args.rule}, two-fold", groups)
        theta = st
    if args.emit:
        emit(theta)


sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from shapes import NMSPMM100_NK as NMSPMM_NK  # noqa: E402

if __name__ == "__main__":
    main()
