"""Replays the m <= 2 decode plan rule (choose_cluster_decode in csrc/dispatch.h) on decode sweeps.

    python tools/fit_cluster_decode_rule.py SWEEP.csv [SWEEP2.csv ...] [--sms 132]

Each SWEEP.csv comes from tools/decode_sweep.py --ms 1,2 (every cluster plan and every staged plan,
timed per shape, pattern and m). For each file and m it prints, over the points, how far the plan of
the session-13 rule and of the session-14 rule (the one in dispatch.h) are from the best plan
(geomean and worst of time / best time), and the session-14 picks' speedup over the session-13 picks.
Both rules are reimplemented here in Python; tests/test_heuristic.py checks the C++ rule's picks.
"""
import argparse
import collections
import csv
import math

CLUSTER_KERNEL = {4: 12, 8: 13, 16: 14}
CLUSTER_WARPS = {v: k for k, v in CLUSTER_KERNEL.items()}


def cdiv(a, b):
    return -(-a // b)


def staged_plan(n, k, M, sms):
    """staged_decode_plan: the most blocks within 1.7 per SM over the 512 / 256 / 128-column tiles."""
    windows = k // M
    max_split = 1 if windows < 1 else min(windows, 8)
    cap = sms * 17 // 10
    best = (17, 1, 0)
    for cw, kernel in ((4, 17), (2, 16), (1, 15)):
        tiles = cdiv(n, 128 * cw)
        s = max_split
        while s > 1 and tiles * s > cap:
            s -= 1
        if tiles * s <= cap and tiles * s > best[2]:
            best = (kernel, s, tiles * s)
    return best[:2]


def overlaps(kernel, split, k, N, M):
    """decode_plan_overlaps_launch for a cluster decode plan: each warp walks <= 64 rows."""
    per_block = cdiv(k // M, split)
    return cdiv(per_block * N, CLUSTER_WARPS[kernel]) <= 64


def rule_session13(m, n, k, N, M, sms):
    tiles, rows = cdiv(n, 128), k // M * N
    max_warps, max_w16 = sms * 17 // 10 * 8, sms * 3 // 4
    narrow = 4 if m <= 1 else 8
    bw, bs = narrow, 1
    for w in (narrow, 16):
        min_rows = (12 if w == 16 else 16) if m <= 1 else (16 if w == 16 else 12)
        for s in range(1, 9):
            p = w * s
            if p <= bw * bs:
                continue
            if tiles * p > max_warps or (w == 16 and tiles * s > max_w16) or rows < p * min_rows:
                continue
            bw, bs = w, s
    if rows > bw * bs * 64 and M <= 512:
        return staged_plan(n, k, M, sms)
    return CLUSTER_KERNEL[bw], bs


def rule_session14(m, n, k, N, M, sms, max_cluster=16):
    tiles, rows = cdiv(n, 128), k // M * N
    max_warps = sms * 17 // 10 * 8
    max_w16 = sms * 3 // 4
    narrow = 4 if m <= 1 else 8
    narrow_max_s = min(max(max_cluster, 1), 16 if tiles <= 16 else 12 if tiles <= 32 else 8) if m <= 1 else 8
    bw, bs, best = narrow, 1, 0
    for w in (narrow, 16):
        min_rows = 14 if w == 4 else 12
        for s in range(1, (8 if w == 16 else narrow_max_s) + 1):
            p = w * s
            if tiles * p > max_warps or (w == 16 and tiles * s > max_w16) or rows < p * min_rows:
                continue
            score = p * (7 if w == 16 else 10)
            if score > best:
                bw, bs, best = w, s, score
    kernel = CLUSTER_KERNEL[bw]
    if not overlaps(kernel, bs, k, N, M) and M <= 512:
        return staged_plan(n, k, M, sms)
    return kernel, bs


def load(path):
    by = collections.defaultdict(dict)
    for r in csv.DictReader(open(path)):
        key = (int(r["m"]), int(r["n"]), int(r["k"]), int(r["N"]), int(r["M"]))
        by[key][(int(r["kernel"]), int(r["split"]))] = float(r["us"])
    return by


def geomean(v):
    return math.exp(sum(math.log(x) for x in v) / len(v))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sweeps", nargs="+")
    ap.add_argument("--sms", type=int, default=132)
    args = ap.parse_args()
    for path in args.sweeps:
        data = load(path)
        for m in (1, 2):
            keys = sorted(key for key in data if key[0] == m)
            if not keys:
                continue
            old, new, gain, missing = [], [], [], 0
            for key in keys:
                times = data[key]
                best = min(times.values())
                po, pn = rule_session13(*key, args.sms), rule_session14(*key, args.sms)
                if po not in times or pn not in times:
                    missing += 1
                    continue
                old.append(times[po] / best)
                new.append(times[pn] / best)
                gain.append(times[po] / times[pn])
            print(f"{path} m={m}: {len(new)} points ({missing} without the picked plan) | session-14 rule "
                  f"{geomean(new):.4f} of best (worst {max(new):.2f}) | session-13 rule {geomean(old):.4f} "
                  f"(worst {max(old):.2f}) | session-14 picks {geomean(gain):.3f}x faster "
                  f"({min(gain):.2f}-{max(gain):.2f})")


if __name__ == "__main__":
    main()
