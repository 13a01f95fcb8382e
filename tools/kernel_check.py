"""Kernel-development check for the GPU machine: correctness of every kernel against fp64 dense,
then timings of every kernel / split-K against cuBLAS FP32 (TF32 off) on a few shapes.

    python tools/kernel_check.py [--quick] [--out DIR]

Prints one line per config; writes kernel_check.csv under --out. Not a test and not the
benchmark (benchmarks/bench_spmm.py is); a tool to pick tile configs and heuristic rules.
"""
import argparse
import csv
import os
import time

import torch

import nmspmm

ops = torch.ops.nmspmm
def make(n, k, N, M, L, device="cuda"):
    w = torch.randn(n, k)
    mask = torch.rand(n // L, k // M, M).argsort(-1).argsort(-1) < N  # random N:M pattern
    mask = mask.repeat_interleave(L, 0).reshape(n, k)
    p = nmspmm.compress(w, N, M, L, mask=mask).with_col_info()  # for the packing kernels too
    return p.to(device), nmspmm.decompress(p).to(device)


def run(x, p, kernel, split):
    return ops.spmm_with_plan(x, p.values, p.indices, p.N, p.M, p.L, None, p.col_info,
                              p.packed_indices, kernel, split)


def supports(kernel, m, p):
    major, minor = torch.cuda.get_device_capability()
    return nmspmm.kernel_supports(kernel, m, p.N, p.M, p.L, p.col_info is not None, major * 10 + minor)


def check(args):
    torch.manual_seed(0)
    bad = 0
    shapes = [(1, 256, 128), (3, 384, 256), (16, 512, 1024), (17, 256, 192), (64, 640, 512),
              (255, 384, 320), (256, 1024, 1024), (1000, 512, 448)]
    patterns = [(16, 32, 32), (12, 32, 32), (8, 32, 32), (4, 32, 32), (2, 4, 16), (1, 4, 64),
                (2, 8, 128), (4, 8, 32), (5, 32, 32), (24, 64, 32), (2, 4, 1), (3, 8, 4)]
    for (m, n, k) in shapes:
        for (N, M, L) in patterns:
            if k % M or n % L:
                continue
            p, wd = make(n, k, N, M, L)
            x = torch.randn(m, k, device="cuda")
            bias = torch.randn(n, device="cuda")
            ref = x.double() @ wd.double().t()
            for kernel in nmspmm.kernels():
                if not supports(kernel, m, p):
                    continue
                family = nmspmm.kernel_info(kernel).family
                for split in (1,) if family == "generic" else (1, 2, 8) if family.startswith("decode_") else (1, 3):
                    y = run(x, p, kernel, split)
                    err = ((y.double() - ref).norm() / ref.norm()).item()
                    ok = err < 1e-5 and not torch.isnan(y).any()
                    if not ok:
                        bad += 1
                        print(f"FAIL m={m} n={n} k={k} {N}:{M} L={L} {kernel} split={split} err={err:.3e}")
            yb = ops.spmm(x, p.values, p.indices, N, M, L, bias, p.col_info, p.packed_indices)
            errb = ((yb.double() - ref - bias.double()).norm() / ref.norm()).item()
            if not errb < 1e-5:
                bad += 1
                print(f"FAIL bias/auto m={m} n={n} k={k} {N}:{M} L={L} err={errb:.3e}")
    print(f"correctness: {bad} failures")
    return bad


def bench(fn, reps=None):
    import triton.testing as tt
    return tt.do_bench(fn, warmup=5, rep=20, return_mode="median")


def perf(args):
    rows = []
    torch.backends.cuda.matmul.allow_tf32 = False
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    shapes = [(4096, 4096, 4096), (256, 2048, 2048), (256, 4096, 4096), (1024, 11008, 4096),
              (2048, 4096, 11008), (512, 5632, 2048)]
    if args.quick:
        shapes = shapes[:2]
    decode = [(1, 4096, 4096), (8, 11008, 4096), (16, 4096, 14336)]
    for (N, M, L) in [(16, 32, 32), (12, 32, 32), (8, 32, 32), (4, 32, 32), (32, 64, 32), (16, 64, 32)]:
        for (m, n, k) in (shapes + decode if M == 32 else shapes[:1]):
            p, wd = make(n, k, N, M, L)
            x = torch.randn(m, k, device="cuda")
            t_dense = bench(lambda: torch.nn.functional.linear(x, wd))
            major, minor = torch.cuda.get_device_capability()
            heur = ops.spmm_heuristic(m, n, k, N, M, L, torch.float32, major * 10 + minor, sms, 16)
            t_auto = bench(lambda: nmspmm.spmm(x, p))
            best = (1e9, None)
            kernels = ["decode_f32_splitk"] if m <= 16 else [
                c for c in nmspmm.kernels() if nmspmm.kernel_info(c).family in ("tiled", "packed") and supports(c, m, p)]
            for kernel in kernels:
                for split in (1, 2, 4, 8) if m > 16 else (1, 4, 8, 16, 32):
                    t = bench(lambda: run(x, p, kernel, split))
                    rows.append(dict(m=m, n=n, k=k, N=N, M=M, L=L, kernel=kernel, split=split,
                                     ms=t, dense_ms=t_dense, speedup=t_dense / t))
                    if t < best[0]:
                        best = (t, (kernel, split))
            eff = 2 * m * n * k * N / M / (best[0] * 1e-3) / 1e12
            print(f"{N}:{M} m={m:5d} n={n:5d} k={k:5d} dense {t_dense:.4f} ms | auto {heur[0]}/{heur[1]} "
                  f"{t_auto:.4f} ms {t_dense / t_auto:.2f}x | best {best[1]} {best[0]:.4f} ms "
                  f"{t_dense / best[0]:.2f}x exec {eff:.1f} TFLOP/s", flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-perf", action="store_true")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    t0 = time.time()
    bad = 0 if args.no_check else check(args)
    print(f"check took {time.time() - t0:.0f} s")
    if not args.no_perf:
        rows = perf(args)
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "kernel_check.csv"), "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            wr.writeheader()
            wr.writerows(rows)
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
