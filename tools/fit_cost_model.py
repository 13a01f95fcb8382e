"""Fit the heuristic's cost model (csrc/dispatch.h, kTiledCosts) to a plan sweep
(tools/sweep_plans.py) and report how close its picks come to the best measured plan.

    python tools/fit_cost_model.py SWEEP.csv                 # committed constants + a refit
    python tools/fit_cost_model.py SWEEP.csv --bps 3:3,5:6   # model other blocks per SM

Model, per kernel c and split s:  us = waves * stages * (alpha_c + beta_c * wb) + reduction(s)
with waves = ceil(ctas / (sms * blocks_per_sm_c)) (whole waves), stages = ceil(k-blocks / s), and
the reduction (s > 1) red_cluster (s = 2 on sm_90: inside a thread-block cluster) or red_workspace
(s > 2: a second launch) + 0.9 us per MB of partial tiles. Linear in (alpha, beta) given the
reduction constants, so a weighted least-squares fit on relative error does it.

`replay` is a Python copy of choose_plan's tiled part (kernel 11 only while its grid is under one
block per SM; split 2 reduced in a cluster); with the committed constants it reproduces the picks
that the sweep recorded (heur_kernel / heur_split), which the script checks. Pick quality is
reported in-sample (fit on every shape) and out-of-sample (two-fold: fit on the shapes of one half
of the (n, k) pairs, pick on the other)."""
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
# Committed csrc/dispatch.h constants: blocks per SM, alpha, beta; reductions.
COMMITTED = {9: (1, 0.392, 0.1713), 10: (1, 0.527, 0.1622), 11: (2, 0.390, 0.1487), 2: (2, 0.248, 0.1645),
             3: (2, 0.190, 0.0862), 4: (4, 0.387, 0.0708), 5: (4, 0.467, 0.0613)}
RED_WORKSPACE, RED_CLUSTER, RED_PER_MB = 8.68, 3.59, 0.900
# kTiledCosts order (ties go to the earlier entry, as in choose_plan).
ORDER = [9, 10, 11, 2, 3, 4, 5]


def plan_terms(m, n, k, N, M, c, s, bps):
    """(alpha multiplier, beta multiplier, reduction us) of one plan: us = a*alpha + b*beta + red."""
    kb = 32 if M <= 32 else 64
    wb = kb // M * N
    bm, bn = TILE[c]
    ctas = math.ceil(m / bm) * math.ceil(n / bn) * s
    waves = math.ceil(ctas / (SMS * bps[c]))
    stages = math.ceil(math.ceil(k / kb) / s)
    scale = 2.0 if kb == 64 else 1.0
    red = 0.0
    if s > 1:
        red = (RED_CLUSTER if s == 2 else RED_WORKSPACE) + RED_PER_MB * (s + 1) * m * n * 4 / 1e6
    return waves * stages * scale, waves * stages * wb, red


def replay(shape, consts, bps):
    """choose_plan's tiled pick for shape (m, n, k, N, M): (kernel, split)."""
    m, n, k, N, M = shape
    best, best_us = None, None
    for c in ORDER:
        if M > 64 or (c in (9, 10) and M > 32):
            continue
        kblocks = math.ceil(k / (32 if M <= 32 else 64))
        s = 1
        while s <= 8:
            if s > 1 and kblocks // s < 4:
                break
            bm, bn = TILE[c]
            ctas = math.ceil(m / bm) * math.ceil(n / bn) * s
            if not (c == 11 and ctas >= SMS):
                a, b, red = plan_terms(m, n, k, N, M, c, s, bps)
                us = a * consts[c][0] + b * consts[c][1] + red
                if best_us is None or us < best_us:
                    best, best_us = (c, s), us
            s *= 2
    return best


def fit(rows, bps):
    """Weighted least squares of (alpha_c, beta_c) with the reductions fixed."""
    X = np.zeros((len(rows), 2 * len(KERNELS)))
    y = np.zeros(len(rows))
    for i, r in enumerate(rows):
        a, b, red = plan_terms(*r["shape"], r["kernel"], r["split"], bps)
        j = KERNELS.index(r["kernel"])
        X[i, 2 * j], X[i, 2 * j + 1] = a, b
        y[i] = r["us"] - red
    w = 1.0 / np.array([r["us"] for r in rows])
    theta, *_ = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)
    return {c: (theta[2 * j], theta[2 * j + 1]) for j, c in enumerate(KERNELS)}


def pick_quality(shapes, consts, bps):
    ratios = {}
    for shape, plans in shapes.items():
        pick = replay(shape, consts, bps)
        best = min(plans.values())
        ratios[shape] = plans.get(pick, float("nan")) / best
    return ratios


def summary(ratios, label):
    v = np.array([x for x in ratios.values() if not math.isnan(x)])
    by_m = defaultdict(list)
    for shape, x in ratios.items():
        by_m[shape[0]].append(x)
    per_m = " ".join(f"m{m} {np.exp(np.log(by_m[m]).mean()):.3f}" for m in sorted(by_m))
    print(f"{label}: picks vs best geomean {np.exp(np.log(v).mean()):.4f}, worst {v.max():.3f}, "
          f"within 2% {np.mean(v < 1.02):.2f} ({len(v)} shapes; {per_m})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sweep")
    ap.add_argument("--bps", default="", help="blocks per SM overrides, e.g. 3:3,5:6")
    args = ap.parse_args()
    rows, shapes, recorded = [], defaultdict(dict), {}
    for r in csv.DictReader(open(args.sweep)):
        c = int(r["kernel"])
        if c not in TILE:
            continue
        shape = tuple(int(r[x]) for x in ("m", "n", "k", "N", "M"))
        row = dict(shape=shape, kernel=c, split=int(r["split"]), us=float(r["ms"]) * 1e3)
        rows.append(row)
        shapes[shape][(c, row["split"])] = row["us"]
        recorded[shape] = (int(r["heur_kernel"]), int(r["heur_split"]))
    committed_bps = {c: v[0] for c, v in COMMITTED.items()}
    committed = {c: v[1:] for c, v in COMMITTED.items()}
    same = sum(replay(s, committed, committed_bps) == recorded[s] for s in shapes)
    print(f"replay of the committed constants reproduces {same} of {len(shapes)} recorded picks")
    summary(pick_quality(shapes, committed, committed_bps), "committed")

    bps = dict(committed_bps)
    for item in filter(None, args.bps.split(",")):
        c, v = item.split(":")
        bps[int(c)] = int(v)
    consts = fit(rows, bps)
    print(f"refit, blocks per SM {bps}:")
    for c in ORDER:
        print(f"    {{{NAMES[c]}, {bps[c]}, {consts[c][0]:.3f}, {consts[c][1]:.4f}, ...}},")
    summary(pick_quality(shapes, consts, bps), "refit, in-sample")
    # Two-fold by (n, k) pair: fit on one half's shapes, pick on the other's.
    pairs = sorted({s[1:3] for s in shapes})
    out = {}
    for fold in (0, 1):
        train = {p for i, p in enumerate(pairs) if i % 2 == fold}
        c_fold = fit([r for r in rows if r["shape"][1:3] in train], bps)
        test = {s: p for s, p in shapes.items() if s[1:3] not in train}
        out.update(pick_quality(test, c_fold, bps))
    summary(out, "refit, out-of-sample (two-fold over (n, k) pairs)")


if __name__ == "__main__":
    main()
