"""Fit the warp-packed kernels' (ids 18-20) cost constants for the heuristic (csrc/dispatch.h,
kWarpPackedCosts, choose_warp_packed) from tools/ab_warp_packed.py runs, and replay its picks
(session 23; the session-25 model, both families in one, is tools/fit_joint_cost.py's):

    python tools/fit_warp_packed_cost.py AB.csv [AB2.csv ...]

The heuristic takes the warp-packed kernels at L >= 32 and 4N <= M; only those cells (here N:32
with N <= 8) are used. Model, per warp-packed kernel c and split s:

    us = waves * stages * (a_c + r * g_c) + waves * b_c + reduction(s)

stages = ceil(ceil(w / WB_c) / s) with w = k * N / M compressed rows and WB_c the kernel's rows per
stage, waves and r as for the tiled kernels (blocks_per_sm_c from registers and shared memory), the
reduction the tiled kernels' (cluster at s = 2, workspace above, + traffic). Weighted least squares
on relative error over every timed warp-packed plan. The replay restricts the candidates as
choose_warp_packed does: the 128x128 kernel alone where its grid without a split is at least
FULL_WAVES waves of 2 blocks per SM. Prints the constants and the pick quality (in-sample and
two-fold over the (n, k) pairs) against the tiled kernels' pick ("auto") and the best timed plan."""
import argparse
import csv
import math
import os
import sys
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from fit_cost_model import COMMITTED, RED_CLUSTER, RED_PER_MB, RED_WORKSPACE, SMS, replay  # noqa: E402

TILED_MODEL = ({c: np.array(v[1:]) for c, v in COMMITTED.items()}, np.array([RED_CLUSTER, RED_WORKSPACE]),
               {c: v[0] for c, v in COMMITTED.items()})
# kernel -> (BM, WB, blocks per SM, NMSPMM_WP_VARIANT of the committed config in the A/B csv)
WP = {18: (128, 12, 2, 1), 19: (64, 16, 3, 0), 20: (32, 16, 4, 1)}
SPLITS = (1, 2, 4, 8, 16)
NF = 3  # features per kernel: (a, g, b)
FULL_WAVES = 4  # kWarpPackedFullWaves


def wp_terms(shape, c, s):
    m, n, k, N, M = shape
    bm, wb, bps, _ = WP[c]
    chunks = math.ceil(k // M * N / wb)
    ctas = math.ceil(m / bm) * math.ceil(n / 128) * s
    waves = math.ceil(ctas / (SMS * bps))
    r = min(bps, math.ceil(ctas / SMS))
    stages = math.ceil(chunks / s)
    red = (RED_CLUSTER if s == 2 else RED_WORKSPACE) + RED_PER_MB * (s + 1) * m * n * 4 / 1e6 if s > 1 else 0.0
    return np.array([waves * stages, waves * stages * r, waves]), red


def wp_candidates(shape):
    m, n, k, N, M = shape
    out = []
    # A grid of 128x128 tiles that fills every SM's two block slots without a split runs them alone:
    # the smaller tiles re-read the weight more often (the model, linear per stage, misses that).
    full = math.ceil(m / 128) * math.ceil(n / 128) >= FULL_WAVES * 2 * SMS
    for c in ((18,) if full else WP):
        chunks = math.ceil(k // M * N / WP[c][1])
        for s in SPLITS:
            if s > 1 and chunks // s < 4:
                break
            out.append((c, s))
    return out


def load(paths):
    cells = []
    for path in paths:
        for r in csv.DictReader(open(path)):
            shape = (int(r["m"]), int(r["n"]), int(r["k"]), int(r["N"]), 32)
            wp = {}
            for c, (_, _, _, v) in WP.items():
                for s in SPLITS:
                    key = f"k{c}s{s}v{v}"
                    if r.get(key):
                        wp[(c, s)] = float(r[key]) * 1e3
            cells.append(dict(shape=shape, auto=(int(r["auto_kernel"]), int(r["auto_split"])),
                              t_auto=float(r["auto_ms"]) * 1e3, wp=wp))
    return cells


def fit(cells):
    rows, ys, ws = [], [], []
    for cell in cells:
        for (c, s), t in cell["wp"].items():
            feats, red = wp_terms(cell["shape"], c, s)
            x = np.zeros(NF * len(WP))
            j = list(WP).index(c)
            x[NF * j:NF * j + NF] = feats
            rows.append(x)
            ys.append(t - red)
            ws.append(1.0 / t)
    X, y, w = np.array(rows), np.array(ys), np.array(ws)
    theta, *_ = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)
    return {c: theta[NF * j:NF * j + NF] for j, c in enumerate(WP)}


def pick(cell, consts):
    """choose_warp_packed's plan (ties go to the earlier candidate, as in C++)."""
    shape = cell["shape"]
    best, best_us = None, math.inf
    for c, s in wp_candidates(shape):
        feats, red = wp_terms(shape, c, s)
        us = float(feats @ consts[c]) + red
        if us < best_us:
            best, best_us = (c, s), us
    return best


def quality(cells, consts, label):
    by = defaultdict(list)
    unknown = 0
    for cell in cells:
        assert replay(cell["shape"], TILED_MODEL) == cell["auto"], (cell["shape"], cell["auto"])
        p = pick(cell, consts)
        t = cell["t_auto"] if p == cell["auto"] else cell["wp"].get(p)
        if t is None:
            unknown += 1
            continue
        oracle = min([cell["t_auto"]] + list(cell["wp"].values()))
        m, N = cell["shape"][0], cell["shape"][3]
        by[(N, m)].append((cell["t_auto"] / t, t / oracle, p[0] in WP))
    print(f"{label}: picks with no measured time: {unknown}")
    allv = []
    for (N, m), v in sorted(by.items(), key=lambda kv: (-kv[0][0], kv[0][1])):
        g = math.exp(sum(math.log(a) for a, _, _ in v) / len(v))
        o = math.exp(sum(math.log(b) for _, b, _ in v) / len(v))
        print(f"  {N:2d}:32 m={m:5d}  auto/pick {g:.3f} (min {min(a for a, _, _ in v):.3f})  pick/best {o:.3f}  "
              f"warp-packed picks {sum(x for _, _, x in v)}/{len(v)}")
        allv += v
    g = math.exp(sum(math.log(a) for a, _, _ in allv) / len(allv))
    o = math.exp(sum(math.log(b) for _, b, _ in allv) / len(allv))
    print(f"  all: auto/pick {g:.3f} (min {min(a for a, _, _ in allv):.3f}), pick/best {o:.3f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", nargs="+")
    a = ap.parse_args()
    cells = [c for c in load(a.csv) if 4 * c["shape"][3] <= c["shape"][4]]
    consts = fit(cells)
    for c, v in consts.items():
        print(f"kernel {c}: " + ", ".join(f"{x:.4f}" for x in v) + f" (stage of {WP[c][1]} rows; blocks per SM {WP[c][2]})")
    quality(cells, consts, "in-sample")
    pairs = sorted({cell["shape"][1:3] for cell in cells})
    halves = [set(pairs[0::2]), set(pairs[1::2])]
    oos = []
    for i in range(2):
        train = [cl for cl in cells if cl["shape"][1:3] in halves[i]]
        test = [cl for cl in cells if cl["shape"][1:3] not in halves[i]]
        oos.append((test, fit(train)))
    print("two-fold (fit on half of the (n, k) pairs, picks on the other half):")
    for test, cst in oos:
        quality(test, cst, "  fold")


if __name__ == "__main__":
    main()
