"""Quick kernel probe for the GPU machine: times forced plans (and the heuristic's pick, printed
last per pattern) at a few shapes against cuBLAS FP32 (TF32 off); prints executed TFLOP/s and the
error against fp64.   python tools/probe.py [--plans 2,9:2] [--shapes 4096x4096x4096,...]"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from kernel_check import NAMES, make, run  # noqa: E402

import triton.testing as tt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plans", default="2,9", help="kernel[:split], comma-separated")
    ap.add_argument("--shapes", default="4096x4096x4096")
    ap.add_argument("--patterns", default="16:32,12:32,8:32,4:32")
    ap.add_argument("--L", type=int, default=32)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for shape in args.shapes.split(","):
        m, n, k = map(int, shape.split("x"))
        x = torch.randn(m, k, device="cuda")
        wd = torch.randn(n, k, device="cuda")
        t_dense = tt.do_bench(lambda: torch.nn.functional.linear(x, wd), warmup=10, rep=40, return_mode="median")
        print(f"{m}x{n}x{k} cuBLAS fp32 {t_dense:.4f} ms {2*m*n*k/t_dense/1e9:.1f} TFLOP/s", flush=True)
        for pat in args.patterns.split(","):
            N, M = map(int, pat.split(":"))
            p, wdn = make(n, k, N, M, args.L)
            ref = x.double() @ wdn.double().t()
            heur = torch.ops.nmspmm.spmm_heuristic(m, n, k, N, M, args.L, True, sms)
            plans = [tuple(map(int, (pl + ":1").split(":")[:2])) for pl in args.plans.split(",")]
            plans.append(tuple(heur))
            for kern, split in plans:
                try:
                    y = run(x, p, kern, split)
                except RuntimeError as e:
                    print(f"  {N}:{M} {NAMES[kern]}/{split}: {str(e).splitlines()[0][:80]}")
                    continue
                err = ((y.double() - ref).norm() / ref.norm()).item()
                t = tt.do_bench(lambda: run(x, p, kern, split), warmup=10, rep=40, return_mode="median")
                ex = 2 * m * n * k * N / M / t / 1e9
                print(f"  {N}:{M} L={args.L} {NAMES[kern]:>10s}/{split} {t:.4f} ms  exec {ex:5.1f} TFLOP/s "
                      f"({100*ex/66.9:4.1f}% of 66.9)  vs cuBLAS {t_dense/t:.2f}x  err {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
