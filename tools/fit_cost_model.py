"""Fit the heuristic's cost model (csrc/dispatch.h, kTiledCosts) to a plan sweep
(tools/sweep_plans.py) and report how close its picks come to the best measured plan.

    python tools/fit_cost_model.py benchmarks/results/h100/plan_sweep.csv

Model, per kernel c and split s:  us = waves * stages * (alpha_c + beta_c * wb)
                                       + [s > 1] * (red0 + red1 * (s + 1) * m * n * 4 bytes)
with waves = ceil(ctas / (sms * blocks_per_sm)) (whole waves: this fit's picks came closest to the
best plan among the wave models tried). It is linear in (alpha, beta, red0, red1),
so a weighted least-squares fit on relative error does it. The fitted reduction is the workspace one
(session-4 sweep); on sm_90 split 2 reduces in a cluster, whose fixed cost (kClusterReduceUs) was fitted
separately from the same-plan A/B in benchmarks/results/h100/experiments/cluster_split_ab.txt."""
import csv
import math
import sys
from collections import defaultdict

import numpy as np

SMS = 132
TILE = {2: (128, 128), 3: (64, 128), 4: (32, 128), 5: (64, 64), 9: (128, 256), 10: (256, 128), 11: (128, 128)}
BPS = {2: 2, 3: 2, 4: 4, 5: 4, 9: 1, 10: 1, 11: 2}
NAMES = {2: "kTiled128x128", 3: "kTiled64x128", 4: "kTiled32x128", 5: "kTiled64x64", 9: "kTiled128x256",
         10: "kTiled256x128", 11: "kTiled128x128w8"}
KERNELS = sorted(TILE)


def features(r):
    m, n, k, N, M, c, s = (int(r[x]) for x in ("m", "n", "k", "N", "M", "kernel", "split"))
    kb = 32 if M <= 32 else 64
    wb = kb // M * N
    bm, bn = TILE[c]
    ctas = math.ceil(m / bm) * math.ceil(n / bn) * s
    waves = math.ceil(ctas / (SMS * BPS[c]))
    stages = math.ceil(math.ceil(k / kb) / s)
    f = np.zeros(2 * len(KERNELS) + 2)
    i = KERNELS.index(c)
    scale = 2.0 if kb == 64 else 1.0
    f[2 * i] = waves * stages * scale
    f[2 * i + 1] = waves * stages * wb
    if s > 1:
        f[-2] = 1.0
        f[-1] = (s + 1) * m * n * 4 / 1e6
    return f


def main(path):
    rows = [r for r in csv.DictReader(open(path)) if int(r["kernel"]) in TILE]
    X = np.array([features(r) for r in rows])
    y = np.array([float(r["ms"]) * 1e3 for r in rows])
    w = 1.0 / y
    theta, *_ = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)
    pred = X @ theta
    print(f"fit: {len(rows)} timings, median |rel err| {np.median(np.abs(pred / y - 1)):.3f}")
    for i, c in enumerate(KERNELS):
        print(f"    {{{NAMES[c]}, {BPS[c]}, {theta[2 * i]:.3f}, {theta[2 * i + 1]:.4f}, ...}},")
    print(f"reduction: {theta[-2]:.2f} us + {theta[-1]:.3f} us per MB")
    # Pick quality: per shape, the plan with the lowest prediction vs the fastest measured.
    shapes = defaultdict(list)
    for r, p in zip(rows, pred):
        key = (r["m"], r["n"], r["k"], r["N"], r["M"])
        bm, bn = TILE[int(r["kernel"])]
        ctas = math.ceil(int(r["m"]) / bm) * math.ceil(int(r["n"]) / bn) * int(r["split"])
        # choose_plan's rule: the 8-warp 128x128 kernel only while its grid is under 2 blocks per SM.
        if int(r["kernel"]) == 11 and ctas >= 2 * SMS:
            p = float("inf")
        shapes[key].append((p, float(r["ms"]), r["kernel"], r["split"]))
    ratios = []
    for key, c in shapes.items():
        pick = min(c)[1]
        best = min(x[1] for x in c)
        ratios.append(pick / best)
        if pick / best > 1.05:
            print(f"  {key}: pick {min(c)[2:]} {pick:.4f} ms vs best {min(c, key=lambda x: x[1])[2:]} {best:.4f} ms")
    ratios = np.array(ratios)
    print(f"picks vs best: geomean {np.exp(np.log(ratios).mean()):.4f}, worst {ratios.max():.3f}, "
          f"within 2%: {np.mean(ratios < 1.02):.2f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results/h100/plan_sweep.csv")
