"""Decode benchmark of 2:4 weights on the sparse tensor cores: nmspmm.spmm against cuBLAS
(F.linear on the dense weight) in the same dtype, the cells of the 2:4 issue's decode floor.

Cells: the six Llama layers (out x in) 4096x4096, 11008x4096, 4096x11008 (Llama-2-7B), 1024x4096,
14336x4096, 4096x14336 (Llama-3-8B) x 2:4 at L = 1 and 32 x m = 1, 8, 16, bf16 (and fp16 with
--dtypes). Per cell: time per call in CUDA graphs with the weights cycled past L2 (as many copies
of values and tc_meta as make 256 MB, bench_decode_half.time_graph: the median over replays), the
heuristic's plan, speedup over F.linear, r = dense bytes / resident bytes (values + tc_meta words),
speedup / r, the resident bytes' GB/s, and the floor (0.8 r on layers of 64 MB or more, 1.2x on the
rest). With --previous also the sparse_tc 16-token tile at its best split of 1-8 (the plan before
the decode kernels); with --splits the decode kernels of 64- and 256-column blocks forced at each
cluster size.

    python benchmarks/bench_decode_24.py                  # every cell -> stdout + decode_24.csv
    python benchmarks/bench_decode_24.py --quick          # 4096x4096 and 14336x4096, m = 1, 16
    python benchmarks/bench_decode_24.py --previous --splits 1,2,4,8,16 --out DIR
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

SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008), (1024, 4096), (14336, 4096), (4096, 14336)]
LS = [1, 32]
MS = [1, 8, 16]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
ROTATE_BYTES = 256e6
ops = torch.ops.nmspmm


def meta_bytes(n, k, L):
    return 4 * ((k + 31) // 32) * ((n // L + 3) // 4 * 4)


def floor_of(dense_bytes, r):
    return 0.8 * r if dense_bytes >= 64e6 else 1.2


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="4096x4096 and 14336x4096, m = 1, 16 only")
    ap.add_argument("--previous", action="store_true", help="also the sparse_tc 16-token tile at its best split")
    ap.add_argument("--splits", default="", help="comma list: the decode kernels forced at these cluster sizes")
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--ls", default="1,32")
    ap.add_argument("--out", default=None, help="directory for decode_24.csv (default: results dir)")
    args = ap.parse_args(argv)
    shapes, ms = ([SHAPES[0], SHAPES[4]], [1, 16]) if args.quick else (SHAPES, MS)
    ls = [int(v) for v in args.ls.split(",")]
    splits = [int(s) for s in args.splits.split(",") if s]
    out = args.out or common.default_out_dir("decode_24")
    os.makedirs(out, exist_ok=True)
    major, minor = torch.cuda.get_device_capability()
    cc, sms = major * 10 + minor, torch.cuda.get_device_properties(0).multi_processor_count
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__}; graphs, weights cycled past L2; us per call")
    bdh.warm_up()
    rows = []
    for dname, (n, k), L in itertools.product(args.dtypes.split(","), shapes, ls):
        dtype = DTYPES[dname]
        esize = torch.finfo(dtype).bits // 8
        resident = k // 2 * n * esize + meta_bytes(n, k, L)
        copies = max(2, min(400, math.ceil(ROTATE_BYTES / resident)))
        values, ind = bdh.random_compressed(copies, n, k, 2, 4, L, dtype)
        meta = ops.sparse_tc_meta(ind[0], 2, 4, L, k).unsqueeze(0).repeat(copies, 1, 1)  # one copy per weight
        dense = torch.randn(max(2, math.ceil(ROTATE_BYTES / (n * k * esize))), n, k, device="cuda").to(dtype)
        ref_values, ref_ind = values[0], ind[0]
        for m in ms:
            x = torch.randn(m, k, device="cuda").to(dtype)
            t_dense = bdh.time_graph([lambda i=i: F.linear(x, dense[i]) for i in range(dense.shape[0])])

            def run(plan=None):
                if plan is None:
                    fns = [lambda i=i: ops.spmm(x, values[i], ind[i], 2, 4, L, None, None, None, meta[i])
                           for i in range(copies)]
                else:
                    fns = [lambda i=i: ops.spmm_with_plan(x, values[i], ind[i], 2, 4, L, None, None, None, plan[0],
                                                          plan[1], meta[i]) for i in range(copies)]
                return bdh.time_graph(fns)

            plan = tuple(ops.spmm_heuristic(m, n, k, 2, 4, L, dtype, cc, sms, 16))
            # Check the picked plan once against the fp64 product of the decompressed weight.
            y = ops.spmm(x, ref_values, ref_ind, 2, 4, L, None, None, None, meta[0])
            ref, scale = bdh.reference64(x, ref_values, ref_ind, 2, 4, L)
            err = (y.double() - ref).abs().max().item()
            t = run()
            r = n * k * esize / resident
            row = dict(dtype=dname, n=n, k=k, L=L, m=m, plan=f"{plan[0]}:{plan[1]}", us=round(t, 2),
                       dense_us=round(t_dense, 2), speedup=round(t_dense / t, 3), r=round(r, 3),
                       speedup_over_r=round(t_dense / t / r, 3), GBps=round(resident / t / 1e3, 1),
                       floor=round(floor_of(n * k * esize, r), 3), err_rel=f"{err / max(scale, 1e-30):.3g}")
            row["meets"] = int(row["speedup"] >= row["floor"])
            if args.previous:
                name = f"sparse_tc_{'bf16' if dtype == torch.bfloat16 else 'f16'}_16x128_sm90a"
                prev = min((run((name, s)), s) for s in (1, 2, 4, 8))
                row["previous_us"] = round(prev[0], 2)
                row["previous_split"] = prev[1]
            for cols, s in itertools.product((64, 256), splits):
                row[f"d{cols}_s{s}_us"] = round(run((f"decode_sparse_tc_{dname.replace('fp', 'f')}_{cols}", s)), 2)
            rows.append(row)
            print(" ".join(f"{key}={val}" for key, val in row.items()), flush=True)
    path = os.path.join(out, "decode_24.csv")
    common.write_csv(path, rows, columns=list(dict.fromkeys(c for r in rows for c in r)))
    for dname in args.dtypes.split(","):
        sel = [r for r in rows if r["dtype"] == dname]
        if sel:
            print(f"# {dname}: {sum(r['meets'] for r in sel)} / {len(sel)} cells meet the floor; speedup "
                  f"{min(r['speedup'] for r in sel):.2f}-{max(r['speedup'] for r in sel):.2f}x, geomean "
                  f"{common.geomean(r['speedup'] for r in sel):.2f}x")
    print(f"# wrote {path}")


if __name__ == "__main__":
    main()
