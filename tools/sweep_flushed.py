"""Time the prefill plans of both kernel families (tiled and warp-packed, x split-K)
the way the benchmark times a call: L2 flushed (256 MB zeroed) before every call, CUDA events around
the call alone, median. For fitting the heuristic's cost models.

    python tools/sweep_flushed.py --grid nmspmm100 --ms 256,512,1024,2048,4096 --out DIR
    python tools/sweep_flushed.py --grid llama --ms 32,64,128,256,512,1024 --out DIR

Candidates per shape: every tiled and warp-packed kernel of the registry (nmspmm.kernels()) that runs
the pattern, with splits 1, 2, 4, ..., 16 keeping >= 4 k-blocks of 32 (the 8-warp 128x128 tile only
under one block per SM); a split > 1 is skipped where the grid without it already fills two waves
of 2 blocks per SM, and the 8-warp 128x256 / 256x128 tiles at m <= 512. Writes flushed_sweep.csv (one row per shape x plan: m, n, k, N, M,
L, kernel, split, ms, reps, heur_kernel, heur_split); each plan's output is checked against the
heuristic plan's (a mismatch is printed and recorded in rel_diff). --kernels restricts the candidates
(the heuristic's plan is always timed)."""
import argparse
import csv
import math
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import nmspmm  # noqa: E402
from shapes import NMSPMM100_NK, llama_shapes  # noqa: E402

ops = torch.ops.nmspmm


def candidates(m, n, k, N, M, sms, kernels=None):
    out = []
    for c in nmspmm.kernels():
        info = nmspmm.kernel_info(c)
        if info.family not in ("tiled", "warp_packed") or (kernels is not None and c not in kernels):
            continue
        if not nmspmm.kernel_supports(c, m, N, M, 32, False):
            continue
        units = math.ceil(k / 32)  # k-blocks of 32
        ctas1 = math.ceil(m / info.tile_m) * math.ceil(n / info.tile_n)
        wide = info.tile_m * info.tile_n > 128 * 128
        s = 1
        while s <= 16:
            if s > 1 and (units // s < 4 or ctas1 >= 4 * sms):
                break
            if wide and m <= 512:  # 128x256 / 256x128 tiles under a wave: never the best
                break
            if not (info.family == "tiled" and info.warps == 8 and not wide and ctas1 * s >= sms):
                out.append((c, s))
            s *= 2
    return out


class Flushed:
    def __init__(self):
        self.buf = torch.empty(256 * 2**20 // 4, device="cuda")

    def time_ms(self, fn, budget_ms=20.0):
        fn()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.buf.zero_()
        s.record()
        fn()
        e.record()
        e.synchronize()
        t0 = s.elapsed_time(e)
        reps = max(3, min(10, int(budget_ms / (t0 + 0.12))))
        evs = []
        for _ in range(reps):
            self.buf.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            evs.append((s, e))
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in evs), reps

    def time_plans(self, x, weight, N, M, L, plans, tag=""):
        """Times each (kernel, split) of `plans` on (x, weight: a CompressedWeight) and checks its
        output against the first plan's (a relative max difference above 1e-4 prints MISMATCH).
        Returns [((kernel, split), ms, rel_diff)] in the order of `plans`."""
        ops = torch.ops.nmspmm
        ref, out = None, []
        for c, s in plans:
            fn = lambda: ops.spmm_with_plan(x, weight.values, weight.indices, N, M, L, None, None, None, c, s)  # noqa: E731
            y = fn()
            if ref is None:
                ref = y
            diff = ((y - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
            if diff > 1e-4:
                print(f"MISMATCH {tag} plan {c}/{s}: {diff:.2e}", flush=True)
            out.append(((c, s), self.time_ms(fn)[0], diff))
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grid", default="nmspmm100", choices=("nmspmm100", "llama"))
    ap.add_argument("--ms", default="256,512,1024,2048,4096")
    ap.add_argument("--Ns", default="16,12,8,4")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--name", default="flushed_sweep.csv")
    ap.add_argument("--budget-s", type=float, default=300)
    ap.add_argument("--kernels", default="", help="comma-separated registry kernel names (default: all)")
    args = ap.parse_args()
    kernels = set(args.kernels.split(",")) if args.kernels else None
    ms = [int(v) for v in args.ms.split(",")]
    Ns = [int(v) for v in args.Ns.split(",")]
    if args.grid == "nmspmm100":
        nks = list(NMSPMM100_NK)
    else:
        nks = sorted({(s.n, s.k) for s in llama_shapes(None, [ms[0]])})
    torch.manual_seed(0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    major, minor = torch.cuda.get_device_capability()
    cc = major * 10 + minor
    timer = Flushed()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, args.name)
    fields = ["m", "n", "k", "N", "M", "L", "kernel", "split", "ms", "reps", "rel_diff", "heur_kernel", "heur_split"]
    t_start = time.time()
    done = 0
    with open(path, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=fields)
        wr.writeheader()
        for (n, k) in nks:
            if time.time() - t_start > args.budget_s:
                print("budget reached", flush=True)
                break
            weights = {N: nmspmm.compress(torch.randn(n, k, device="cuda"), N, 32, 32) for N in Ns}
            for m in ms:
                for N in Ns:
                    p = weights[N]
                    x = torch.randn(m, k, device="cuda")
                    heur = tuple(ops.spmm_heuristic(m, n, k, N, 32, 32, torch.float32, cc, sms, 16))
                    y0 = ops.spmm(x, p.values, p.indices, N, 32, 32)
                    scale = y0.abs().max().item() + 1e-30
                    plans = candidates(m, n, k, N, 32, sms, kernels)
                    if heur not in plans:
                        plans.append(heur)
                    best = (math.inf, None)
                    for (c, s) in plans:
                        fn = lambda: ops.spmm_with_plan(x, p.values, p.indices, N, 32, 32, None, None, None, c, s)  # noqa: E731
                        diff = (fn() - y0).abs().max().item() / scale
                        if diff > 1e-4:
                            print(f"MISMATCH {m}x{n}x{k} {N}:32 plan {c}/{s}: {diff:.2e}", flush=True)
                        t, reps = timer.time_ms(fn)
                        wr.writerow(dict(m=m, n=n, k=k, N=N, M=32, L=32, kernel=c, split=s, ms=f"{t:.6f}",
                                         reps=reps, rel_diff=f"{diff:.2e}", heur_kernel=heur[0], heur_split=heur[1]))
                        if t < best[0]:
                            best = (t, (c, s))
                        if (c, s) == heur:
                            t_heur = t
                    f.flush()
                    done += 1
                    print(f"{m:5d}x{n:5d}x{k:5d} {N:2d}:32 heur {heur[0]}/{heur[1]} {t_heur*1e3:8.1f} us  best "
                          f"{best[1][0]}/{best[1][1]} {best[0]*1e3:8.1f} us  heur/best {t_heur/best[0]:.3f}  "
                          f"({len(plans)} plans, {time.time()-t_start:.0f} s)", flush=True)
    print(f"{done} shapes in {time.time()-t_start:.0f} s -> {path}")


if __name__ == "__main__":
    main()
