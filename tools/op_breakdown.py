"""Where an op call's GPU time goes: per-kernel durations and the span from the first kernel's start to
the last kernel's end, with L2 flushed before every call (as the benchmark's do_bench does).

    python tools/op_breakdown.py --shapes 256x2048x2048,512x2048x2048 --Ns 16,12,8,4 [--plans 20:1,19:2]

For each shape and pattern it profiles the heuristic's plan (and any forced plans) with torch.profiler
(CUPTI kernel timestamps), 20 calls each after a 256 MB flush, and prints per call: the do_bench median
(the benchmark's number), the median span, each kernel's median duration and the idle time between
the op's kernels. The cuBLAS FP32 time of the same shape is printed for scale."""
import argparse
import os
import statistics
import sys

import torch
import triton.testing as tt

sys.path.insert(0, os.path.dirname(__file__))
from kernel_check import NAMES, make, run  # noqa: E402

FLUSH = None


def flush():
    FLUSH.zero_()


def profile_calls(fn, calls=20):
    """Per call: list of (name, start_us, end_us) for the kernels launched by fn (flush excluded)."""
    for _ in range(3):
        flush()
        fn()
    torch.cuda.synchronize()
    marks = []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush()
            fn()
        torch.cuda.synchronize()
    kernels = []
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA and ev.time_range.elapsed_us() >= 0:
            kernels.append((ev.time_range.start, ev.time_range.end, ev.name))
    kernels.sort()
    groups, cur = [], None
    for s, e, name in kernels:
        if "fill" in name.lower() or "zero" in name.lower() or "memset" in name.lower():
            cur = []
            groups.append(cur)
        elif cur is not None:
            cur.append((name, s, e))
    return [g for g in groups if g], marks


def short(name):
    name = name.split("(")[0]
    for key in ("transpose_x", "warp_packed", "tiled", "reduce_splits", "decode", "generic", "packed"):
        if key in name:
            return key
    return name[:24]


def main():
    global FLUSH
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="256x2048x2048,512x2048x2048,256x2048x5632,256x5632x2048")
    ap.add_argument("--Ns", default="16,12,8,4")
    ap.add_argument("--plans", default="", help="extra kernel:split plans to profile")
    ap.add_argument("--L", type=int, default=32)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    FLUSH = torch.empty(256 * 2**20 // 4, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for shape in args.shapes.split(","):
        m, n, k = map(int, shape.split("x"))
        x = torch.randn(m, k, device="cuda")
        wd = torch.randn(n, k, device="cuda")
        t_dense = tt.do_bench(lambda: torch.nn.functional.linear(x, wd), warmup=10, rep=30, return_mode="median")
        print(f"{m}x{n}x{k}: cuBLAS fp32 {t_dense*1e3:.1f} us", flush=True)
        for N in map(int, args.Ns.split(",")):
            p, _ = make(n, k, N, 32, args.L)
            heur = tuple(torch.ops.nmspmm.spmm_heuristic(m, n, k, N, 32, args.L, True, sms))
            plans = [heur] + [tuple(map(int, pl.split(":"))) for pl in args.plans.split(",") if pl]
            for kern, split in plans:
                fn = lambda: run(x, p, kern, split)  # noqa: E731
                try:
                    fn()
                except RuntimeError as e:
                    print(f"  {N}:32 {NAMES[kern]}/{split}: {str(e).splitlines()[0][:80]}")
                    continue
                t = tt.do_bench(fn, warmup=10, rep=30, return_mode="median")
                groups, _ = profile_calls(fn)
                spans = [g[-1][2] - g[0][1] for g in groups]
                per = {}
                gaps = []
                for g in groups:
                    for i, (name, s, e) in enumerate(g):
                        per.setdefault(f"{i}:{short(name)}", []).append(e - s)
                        if i:
                            gaps.append(s - g[i - 1][2])
                parts = "  ".join(f"{key.split(':')[1]} {statistics.median(v):.1f}" for key, v in per.items())
                gap = statistics.median(gaps) if gaps else 0.0
                tag = "auto" if (kern, split) == heur else "plan"
                print(f"  {N}:32 {tag} {NAMES[kern]:>16s}/{split}: do_bench {t*1e3:6.1f} us  span "
                      f"{statistics.median(spans):6.1f} us  [{parts}]  gap {gap:.1f} us  "
                      f"x{t_dense/t:.2f} vs cuBLAS", flush=True)


if __name__ == "__main__":
    main()
