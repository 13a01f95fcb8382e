"""A/B of the warp-packed kernels (ids 18-20) against the heuristic's plan, on one GPU build:
    python tools/ab_warp_packed.py --ms 256,1024,4096 --out DIR

For each shape (NM-SpMM's 20 (n, k) pairs at the given m, plus 4096^3) and pattern N:32 (L = 32) it
times the heuristic's plan ("auto") and every warp-packed plan given by --plans (kernel/split/variant;
the variant was NMSPMM_WP_VARIANT, read per call by the session-23 experiment builds 8603d60-7362851,
which instantiated several (WB, stages) per tile; the final build has one config per kernel and
ignores it, so pass variant 0), each as the median of 3
CUDA-event timings of 3-10 back-to-back calls (about 2 ms) after 2 warm-ups, and checks each plan's output against
the auto plan's (max |diff| / (|x| @ |W|^T) max). Writes ab_warp_packed.csv and prints per pattern
and m the geomean of auto time / best warp-packed time."""
import argparse
import csv
import math
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import nmspmm  # noqa: E402
from shapes import NMSPMM100_NK  # noqa: E402

ops = torch.ops.nmspmm


def time_ms(fn, reps=None):
    fn()
    if reps is None:  # about 2 ms or more per batch of back-to-back calls, 10 calls at most
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        reps = max(3, min(10, int(2.0 / max(s.elapsed_time(e), 1e-3))))
    out = []
    for _ in range(3):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e) / reps)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ms", default="256,1024,4096")
    ap.add_argument("--Ns", default="16,12,8,4")
    ap.add_argument("--plans", default="18/1/0,18/2/0,19/1/0,19/2/0,19/4/0,20/1/0,20/2/0,20/4/0")
    ap.add_argument("--pairs", default="all", help="indices into NMSPMM100_NK, or 'all'")
    ap.add_argument("--cube", action="store_true", help="add 4096^3")
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    ms = [int(v) for v in a.ms.split(",")]
    Ns = [int(v) for v in a.Ns.split(",")]
    plans = [tuple(int(v) for v in p.split("/")) for p in a.plans.split(",")]
    pairs = list(NMSPMM100_NK) if a.pairs == "all" else [NMSPMM100_NK[int(i)] for i in a.pairs.split(",")]
    shapes = ([(4096, 4096, 4096)] if a.cube else []) + [(m, n, k) for m in ms for n, k in pairs]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    os.makedirs(a.out, exist_ok=True)
    rows = []
    torch.manual_seed(0)
    for N in Ns:
        for n, k in dict.fromkeys((n, k) for _, n, k in shapes):
            p = nmspmm.compress(torch.randn(n, k, device="cuda"), N, 32, 32)  # magnitude pruning, on the GPU
            dense = nmspmm.decompress(p)
            values, indices = p.values, p.indices
            for m in sorted({m for m, n2, k2 in shapes if (n2, k2) == (n, k)}):
                x = torch.randn(m, k, device="cuda")
                heur = ops.spmm_heuristic(m, n, k, N, 32, 32, False, sms)
                y0 = ops.spmm(x, values, indices, N, 32, 32)
                scale = (x.abs() @ dense.abs().t()).max().item()
                t_auto = time_ms(lambda: ops.spmm(x, values, indices, N, 32, 32))
                rec = dict(m=m, n=n, k=k, N=N, auto_kernel=heur[0], auto_split=heur[1], auto_ms=t_auto)
                best = (math.inf, None)
                for kern, split, var in plans:
                    os.environ["NMSPMM_WP_VARIANT"] = str(var)
                    f = lambda: ops.spmm_with_plan(x, values, indices, N, 32, 32, None, None, None, kern, split)
                    err = ((f() - y0).abs().max().item()) / max(scale, 1e-30)
                    t = time_ms(f)
                    rec[f"k{kern}s{split}v{var}"] = t
                    rec[f"k{kern}s{split}v{var}_err"] = err
                    if err > 1e-4:
                        print(f"MISMATCH m={m} n={n} k={k} {N}:32 plan {kern}/{split}/{var}: rel err {err:.2e}", flush=True)
                    if t < best[0]:
                        best = (t, f"{kern}/{split}/{var}")
                rec["best_wp_ms"], rec["best_wp"] = best
                rows.append(rec)
                print(f"{m:5d}x{n:5d}x{k:5d} {N:2d}:32 auto k{heur[0]}/s{heur[1]} {t_auto * 1e3:9.1f} us | best wp "
                      f"{best[1]:>8s} {best[0] * 1e3:9.1f} us | auto/wp {t_auto / best[0]:.3f}", flush=True)
    os.environ.pop("NMSPMM_WP_VARIANT", None)
    keys = sorted({key for r in rows for key in r}, key=lambda s: (not s[0].isalpha() or s in ("m", "n", "k", "N"), s))
    with open(os.path.join(a.out, "ab_warp_packed.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    print("\nauto time / best warp-packed time, geomean (min-max); and per plan auto/plan geomean")
    for N in Ns:
        for m in sorted({r["m"] for r in rows}):
            sel = [r for r in rows if r["N"] == N and r["m"] == m]
            if not sel:
                continue
            rat = [r["auto_ms"] / r["best_wp_ms"] for r in sel]
            g = math.exp(sum(math.log(v) for v in rat) / len(rat))
            per = []
            for kern, split, var in plans:
                key = f"k{kern}s{split}v{var}"
                v = [r["auto_ms"] / r[key] for r in sel]
                per.append(f"{kern}/{split}/{var} {math.exp(sum(math.log(t) for t in v) / len(v)):.3f}")
            print(f"{N:2d}:32 m={m:5d} n={len(sel):2d}: best {g:.3f} ({min(rat):.3f}-{max(rat):.3f}) | " + "  ".join(per))


if __name__ == "__main__":
    main()
