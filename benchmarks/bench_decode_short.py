"""Decode benchmark of element-wise and short-vector N:M (the split-K decode family of
csrc/cuda/kernels/decode_splitk/spmm_decode_splitk.cuh): nmspmm.spmm against cuBLAS (F.linear) in the same dtype.

Cells: Llama-2-7B layers (out x in) 4096x4096, 11008x4096, 4096x11008 x L = 1, 8 x N:M = 16:32,
8:32, 4:32, 2:4 x m = 1, 8, 16 x bf16 and fp32. Per cell: time per call in CUDA graphs with the
weights cycled past L2 (bench_decode_half.time_graph: as many copies as make 256 MB, one graph, the
median over replays), the heuristic's plan, speedup over F.linear, r = dense bytes / compressed
bytes (values + uint8 indices), speedup / r, and the compressed weight's GB/s. With --previous also
the plan the call took before this family (fp32: generic_f32 at L < 4; bf16: the fp32 plan on
upcast inputs). With --splits the family's kernel forced at each split-K, to fit the policy.

    python benchmarks/bench_decode_short.py                       # every cell -> stdout + CSV
    python benchmarks/bench_decode_short.py --quick               # 4096x4096, m = 1, 16
    python benchmarks/bench_decode_short.py --previous --splits 1,4,16,32,64 --out DIR
"""
from __future__ import annotations

import argparse
import itertools
import math
import os
import sys

import torch
import torch.nn.functional as F
import nmspmm  # noqa: F401  (registers torch.ops.nmspmm)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_decode_half as bdh  # noqa: E402
import common  # noqa: E402

SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008)]
PATTERNS = [(16, 32), (8, 32), (4, 32), (2, 4)]
LS = [1, 8]
MS = [1, 8, 16]
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
KERNEL = {torch.float32: "decode_f32_splitk", torch.bfloat16: "decode_splitk_bf16", torch.float16: "decode_splitk_f16"}
ROTATE_BYTES = 256e6
ops = torch.ops.nmspmm


def device_plan(m, n, k, N, M, L, dtype):
    major, minor = torch.cuda.get_device_capability()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return tuple(ops.spmm_heuristic(m, n, k, N, M, L, dtype, major * 10 + minor, sms, 16))


def previous_plan(m, n, k, N, M, L, dtype):
    """The plan of the call before the split-K decode family covered it."""
    if L < 4:
        return ("generic_f32", 1)
    if dtype != torch.float32:
        return device_plan(m, n, k, N, M, L, torch.float32)  # run on upcast inputs
    return None


def dense_time(dtype, n, k, m):
    esize = torch.finfo(dtype).bits // 8
    copies = max(2, math.ceil(ROTATE_BYTES / (n * k * esize)))
    w = torch.randn(copies, n, k, device="cuda").to(dtype)
    x = torch.randn(m, k, device="cuda").to(dtype)
    t = bdh.time_graph([lambda i=i: F.linear(x, w[i]) for i in range(copies)])
    del w
    return t


def sparse_time(values, ind, x, N, M, L, plan=None):
    """Per-call time of spmm (plan None: the heuristic) over the weight copies; a 2:4 weight with its
    tc_meta, one copy per weight, as a layer holds it."""
    copies = values.shape[0]
    meta = [None] * copies
    if (N, M) == (2, 4):
        meta = ops.sparse_tc_meta(ind[0], N, M, L, x.shape[1]).unsqueeze(0).repeat(copies, 1, 1)
    if plan is None:
        fns = [lambda i=i: ops.spmm(x, values[i], ind[i], N, M, L, None, None, None, meta[i]) for i in range(copies)]
    else:
        fns = [lambda i=i: ops.spmm_with_plan(x, values[i], ind[i], N, M, L, None, None, None, plan[0], plan[1],
                                              meta[i]) for i in range(copies)]
    return bdh.time_graph(fns)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="4096x4096, m = 1, 16 only")
    ap.add_argument("--previous", action="store_true", help="also time the plan of before this family")
    ap.add_argument("--splits", default="", help="comma list: the family's kernel forced at these split-K")
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--out", default=None, help="directory for decode_short.csv (default: results dir)")
    args = ap.parse_args(argv)
    shapes, ms = (SHAPES[:1], [1, 16]) if args.quick else (SHAPES, MS)
    splits = [int(s) for s in args.splits.split(",") if s]
    out = args.out or common.default_out_dir("decode_short")
    os.makedirs(out, exist_ok=True)
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__}; graphs, weights cycled past L2; us per call")
    bdh.warm_up()
    rows = []
    for dname, (n, k), L, (N, M), m in itertools.product(args.dtypes.split(","), shapes, LS, PATTERNS, ms):
        dtype = DTYPES[dname]
        esize = torch.finfo(dtype).bits // 8
        w = k // M * N
        comp = w * n * esize + w * (n // L)
        copies = max(2, min(400, math.ceil(ROTATE_BYTES / comp)))
        values, ind = bdh.random_compressed(copies, n, k, N, M, L, dtype)
        x = torch.randn(m, k, device="cuda").to(dtype)
        t_dense = dense_time(dtype, n, k, m)
        plan = device_plan(m, n, k, N, M, L, dtype)
        t = sparse_time(values, ind, x, N, M, L)
        r = n * k * esize / comp
        row = dict(dtype=dname, n=n, k=k, N=N, M=M, L=L, m=m, plan=f"{plan[0]}:{plan[1]}", us=round(t, 2),
                   dense_us=round(t_dense, 2), speedup=round(t_dense / t, 3), r=round(r, 2),
                   speedup_over_r=round(t_dense / t / r, 3), GBps=round(comp / t / 1e3, 1))
        if args.previous:
            prev = previous_plan(m, n, k, N, M, L, dtype)
            if prev is not None:
                row["previous_plan"] = f"{prev[0]}:{prev[1]}"
                row["previous_us"] = round(sparse_time(values, ind, x, N, M, L, prev), 2)
        for s in splits:
            row[f"split{s}_us"] = round(sparse_time(values, ind, x, N, M, L, (KERNEL[dtype], s)), 2)
        rows.append(row)
        print(" ".join(f"{key}={val}" for key, val in row.items()), flush=True)
        del values, ind
    common.write_csv(os.path.join(out, "decode_short.csv"), rows, columns=list(dict.fromkeys(c for r in rows for c in r)))
    print(f"# wrote {os.path.join(out, 'decode_short.csv')}")


if __name__ == "__main__":
    main()
