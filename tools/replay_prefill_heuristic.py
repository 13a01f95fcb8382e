"""A Python replay of csrc/dispatch.h::choose_plan for prefill (m > 16) at L = 32, M = 32 (all four
N:32 patterns), with the session-30 kernels 21 and 22, and an evaluation of variants on flushed sweeps:

    python tools/replay_prefill_heuristic.py --check-op            # replay == torch.ops.nmspmm.spmm_heuristic
    python tools/replay_prefill_heuristic.py SWEEP.csv [...]       # picks over the best timed plan, variants

SWEEP.csv: tools/sweep_splits.py output (m, n, k, N, kernel, split, ms, ...). For each variant of the
knobs in `V` (here: the factor on the split-K traffic term of a cluster reduction) it prints the picks'
time over the best timed plan and the committed rule's picks over the variant's, geomean per
(pattern, m), on the cells where both picks were timed. Session 30: the replay equals the op on
640 of 640 (m, n, k, N) cells; lowering the cluster traffic term to 0.5x moved the picks 0.4% on
experiments/s30_sweep_all.csv (in-sample), to 0 made them 0.6% worse: not adopted.
The constants are copied from csrc/dispatch.h (--check-op catches a drift)."""
import argparse
import collections
import csv
import math
import sys

SMS = 132
KSPLITS = [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16]  # kSplitCandidates
# kTiledCosts (non-packing): kernel, blocks per SM, alpha, beta, gamma, delta, largest M
TILED = [(9, 1, 0.4257, 0.1552, 0.0, 0.0, 32), (10, 1, 0.3458, 0.1699, 0.0, 0.0, 32),
         (11, 2, 0.1817, 0.0446, 0.1817, 0.0446, 64), (2, 2, -0.2049, 0.1091, 0.1602, 0.0299, 64),
         (3, 2, 0.4085, 0.0193, -0.0674, 0.0324, 64), (4, 4, 0.1554, 0.0244, 0.0148, 0.0174, 64),
         (5, 4, 0.7159, 0.0016, -0.0838, 0.0186, 64)]
TILE = {9: (128, 256), 10: (256, 128), 11: (128, 128), 2: (128, 128), 3: (64, 128), 4: (32, 128), 5: (64, 64),
        18: (128, 128), 19: (64, 128), 20: (32, 128), 21: (128, 256), 22: (128, 256)}
# kWarpPackedCosts: kernel, blocks per SM, rows per stage, a, g, b
WP = [(18, 2, 12, 0.8659, 0.6675, -2.0652), (19, 3, 16, 0.7155, 0.4969, -1.5717), (20, 4, 16, 0.6216, 0.2785, -1.7242)]
WS_US, CL_US = 3.719, 1.083  # kWorkspaceReduceUs, kClusterReduceUs
PRODUCER_STAGE_US, PRODUCER_ROW_US = 0.110, 0.158


class V:
    """Variant knobs (the committed rule: the defaults; tools/tune_prefill_heuristic.py searches them)."""
    cluster_traffic = 1.0  # factor on the traffic term of a split-2 cluster reduction
    ws = 1.0               # factor on the workspace reduction's fixed cost
    tiled = 1.0            # factor on the tiled kernels' cost
    wp = {18: 1.0, 19: 1.0, 20: 1.0}  # factor on each warp-packed kernel's cost
    k21 = 1.0              # factor on kernel 21 / 22's stage time
    k21_n = {16: 1.0, 12: 1.0, 8: 1.0, 4: 1.0}  # the same per pattern
    k21_round = 0.0        # microseconds per round of kernel 21 / 22's grid

    def __init__(self, **knobs):
        self.wp, self.k21_n = dict(V.wp), dict(V.k21_n)
        for name, value in knobs.items():
            setattr(self, name, value)


def cdiv(a, b):
    return -(-a // b)


def rounds(ctas, bps):
    per_sm = cdiv(ctas, SMS)
    return cdiv(per_sm, bps), per_sm


def producer_shape(N):  # k-block, rows per stage, stage factor (M = 32)
    return {16: (32, 16, 1.0), 12: (32, 12, 1.0), 8: (64, 16, 0.973), 4: (128, 16, 0.944)}[N]


def reduction_us(kernel, s, m, n, v):
    if s <= 1:
        return 0.0
    traffic = 0.9 * (s + 1) * m * n * 4 / 1e6
    if s == 2 and kernel not in (21, 22):  # plan_reduces_in_cluster
        return CL_US + v.cluster_traffic * traffic
    return v.ws * WS_US + traffic


def tiled_cost(c, m, n, k, N, s, v):
    kernel, bps, alpha, beta, gamma, delta, _ = c
    bm, bn = TILE[kernel]
    R, B = rounds(cdiv(m, bm) * cdiv(n, bn) * s, bps)
    wb = N  # 32 / M * N rows per k-block of 32
    return v.tiled * cdiv(cdiv(k, 32), s) * (R * (alpha + beta * wb) + B * (gamma + delta * wb)) + \
        reduction_us(kernel, s, m, n, v)


def warp_packed_cost(c, m, n, k, N, s, v):
    kernel, bps, wb, a, g, b = c
    bm, bn = TILE[kernel]
    R, B = rounds(cdiv(m, bm) * cdiv(n, bn) * s, bps)
    return v.wp[kernel] * (cdiv(cdiv(k // 32 * N, wb), s) * (R * a + B * g) + R * b) + reduction_us(kernel, s, m, n, v)


def producer_per_stage(N, v):
    kb, wb, f = producer_shape(N)
    return v.k21 * v.k21_n[N] * f * (PRODUCER_STAGE_US * (kb // 32) + PRODUCER_ROW_US * wb)


def producer_cost(m, n, k, N, s, v):
    kb = producer_shape(N)[0]
    R, _ = rounds(cdiv(m, 128) * cdiv(n, 256) * s, 1)
    return cdiv(cdiv(k, kb), s) * R * producer_per_stage(N, v) + v.k21_round * R + reduction_us(21, s, m, n, v)


def producer_tail_cost(m, n, k, N, s, v):
    kb = producer_shape(N)[0]
    tiles = cdiv(m, 128) * cdiv(n, 256)
    tail = tiles % SMS
    kblocks = cdiv(k, kb)
    per_stage = producer_per_stage(N, v)
    whole = (tiles - tail) // SMS
    us = whole * kblocks * per_stage + v.k21_round * whole
    if tail:
        R, _ = rounds(tail * s, 1)
        us += R * cdiv(kblocks, s) * per_stage + v.k21_round * R
        if s > 1:
            us += v.ws * WS_US + 0.9 * (s + 1) * tail * 128 * 256 * 4 / 1e6
    return us


def choose(m, n, k, N, v):
    """choose_plan(m, n, k, N, 32, 32, has_col_info=False, SMS, clusters=True) for m > 16."""
    best, best_us = None, None
    for c in TILED:
        kernel = c[0]
        bm, bn = TILE[kernel]
        for s in KSPLITS:
            if s > 1 and cdiv(k, 32) // s < 4:
                break
            if kernel == 11 and cdiv(m, bm) * cdiv(n, bn) * s >= SMS:
                continue
            us = tiled_cost(c, m, n, k, N, s, v)
            if best_us is None or us < best_us:
                best, best_us = (kernel, s), us
    if 4 * N <= 32 or m * n * k < 4.5e10:  # warp_packed_candidates
        full = cdiv(m, 128) * cdiv(n, 128) >= 4 * 2 * SMS
        wp, wp_us = None, None
        for c in WP:
            if full and c[0] != 18:
                continue
            for s in KSPLITS:
                if s > 1 and cdiv(k // 32 * N, c[2]) // s < 4:
                    break
                us = warp_packed_cost(c, m, n, k, N, s, v)
                if wp_us is None or us < wp_us:
                    wp, wp_us = (c[0], s), us
        if wp_us < best_us:
            best, best_us = wp, wp_us
    kblocks = cdiv(k, producer_shape(N)[0])
    for s in KSPLITS:
        if s > 1 and kblocks // s < 4:
            break
        us = producer_cost(m, n, k, N, s, v)
        if us < best_us:
            best, best_us = (21, s), us
    tiles = cdiv(m, 128) * cdiv(n, 256)
    if tiles > SMS and tiles % SMS:
        for s in KSPLITS[1:]:
            if kblocks // s < 4:
                break
            us = producer_tail_cost(m, n, k, N, s, v)
            if us < best_us:
                best, best_us = (22, s), us
    return best


def load(path):
    by = collections.defaultdict(dict)
    for r in csv.DictReader(open(path)):
        k = (int(r["m"]), int(r["n"]), int(r["k"]), int(r["N"]))
        by[k][(int(r["kernel"]), int(r["split"]))] = float(r["ms"]) * 1000
    return by


def evaluate(by, v, label):
    g = collections.defaultdict(list)
    miss = changed = 0
    base = V()
    for k, d in by.items():
        m, n, kk, N = k
        p, p0 = choose(m, n, kk, N, v), choose(m, n, kk, N, base)
        if p not in d or p0 not in d:
            miss += 1
            continue
        best = min(d.values())
        g[(N, m)].append((math.log(d[p] / best), math.log(d[p0] / d[p])))
        changed += p != p0
    ge = lambda xs: math.exp(sum(xs) / len(xs))  # noqa: E731
    alla = [a for v_ in g.values() for a, _ in v_]
    allb = [b for v_ in g.values() for _, b in v_]
    print(f"{label}: cells without both picks timed {miss}, changed picks {changed}, "
          f"pick/best {ge(alla):.4f}, committed/variant {ge(allb):.4f}")
    for key in sorted(g):
        print(f"   {key[0]}:32 m={key[1]}: pick/best {ge([a for a, _ in g[key]]):.4f} "
              f"committed/variant {ge([b for _, b in g[key]]):.4f}")


def check_op():
    import os
    import torch
    import nmspmm  # noqa: F401
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    from shapes import NMSPMM100_NK
    bad = total = 0
    for N in (16, 12, 8, 4):
        for m in (32, 64, 128, 256, 512, 1024, 2048, 4096):
            for n, k in NMSPMM100_NK:
                a = tuple(torch.ops.nmspmm.spmm_heuristic(m, n, k, N, 32, 32, False, SMS))
                b = choose(m, n, k, N, V())
                total += 1
                if a != b:
                    bad += 1
                    print(f"differs: m={m} n={n} k={k} {N}:32 op {a} replay {b}")
    print(f"replay == spmm_heuristic on {total - bad} of {total} cells")
    return bad == 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sweeps", nargs="*")
    ap.add_argument("--check-op", action="store_true")
    a = ap.parse_args()
    if a.check_op and not check_op():
        sys.exit(1)
    for path in a.sweeps:
        by = load(path)
        for ct in (1.0, 0.5, 0.0):
            v = V()
            v.cluster_traffic = ct
            evaluate(by, v, f"{path}: cluster_traffic={ct}")


if __name__ == "__main__":
    main()
