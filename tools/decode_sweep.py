"""Decode (m <= 16) plan sweep for the GPU machine: every cluster decode kernel (warps per block x
cluster size), the pre-cluster decode kernel with its split-K, the heuristic's pick and cuBLAS
FP32 (TF32 off), on Llama layer shapes. Each config is timed from one CUDA graph of back-to-back
calls that rotate through enough weight copies (>= 4x L2) that every call streams its weight
from HBM, as in a model's decode step; every config is first checked against fp64.

    python tools/decode_sweep.py [--out DIR] [--ms 1,2,4,8,16] [--quick]

Writes decode_sweep.csv (one row per timing) and prints, per shape and m, the best plan against
the heuristic's. A tool for fitting choose_cluster_decode, not the benchmark.
"""
import argparse
import csv
import dataclasses
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from kernel_check import NAMES, make  # noqa: E402

ops = torch.ops.nmspmm
SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008), (1024, 4096), (14336, 4096), (4096, 14336),
          (2048, 2048), (8192, 2048), (2048, 8192), (512, 2048)]
CLUSTER = {12: 2, 13: 2, 14: 2, 15: 16, 16: 16, 17: 16}  # kernel -> largest m
MAX_CLUSTER = {12: 16, 13: 16, 14: 16, 15: 16, 16: 16, 17: 16}  # kernel -> largest cluster size


def weight_copies(p, l2):
    """The compressed weight p and clones of it, >= 4x L2 in all (2..512 copies), so that calls
    rotating through them stream every weight from DRAM; also its bytes and the calls per graph."""
    wbytes = p.values.numel() * 4 + p.indices.numel()
    copies = min(512, max(2, math.ceil(4 * l2 / wbytes)))
    ps = [p] + [dataclasses.replace(p, values=p.values.clone(), indices=p.indices.clone())
                for _ in range(copies - 1)]
    return ps, wbytes, max(copies, 32)


def dense_copies(n, k, l2):
    """A dense fp32 weight [n, k] and clones of it, >= 4x L2 in all (at least 2), for the cuBLAS
    baseline timed the same way as the sparse calls."""
    wd = torch.randn(n, k, device="cuda")
    copies = max(2, math.ceil(4 * l2 / (n * k * 4)))
    return [wd] + [wd.clone() for _ in range(copies - 1)]


def graph_us(calls, reps=5):
    """Per-call microseconds of the callables, run back to back from one CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for c in calls[:2]:
            c()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for c in calls:
            c()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3 / len(calls))
    del g
    return sorted(times)[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--ms", default="1,2,4,8,16")
    ap.add_argument("--patterns", default="16:32,12:32,8:32,4:32")
    ap.add_argument("--splits", default="1,2,3,4,5,6,7,8", help="cluster sizes of the cluster kernels")
    ap.add_argument("--quick", action="store_true", help="first 3 shapes only")
    ap.add_argument("--shapes", type=int, default=len(SHAPES), help="first this many shapes")
    ap.add_argument("--shape-list", default="", help="comma-separated NxK shapes instead of SHAPES")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    ms = [int(v) for v in args.ms.split(",")]
    splits = [int(v) for v in args.splits.split(",")]
    rows, bad = [], 0
    shapes = SHAPES[:3] if args.quick else SHAPES[:args.shapes]
    if args.shape_list:
        shapes = [tuple(int(v) for v in sh.split("x")) for sh in args.shape_list.split(",")]
    for n, k in shapes:
        dense = dense_copies(n, k, l2)
        dcopies = len(dense)
        for pat in args.patterns.split(","):
            N, M = map(int, pat.split(":"))
            p, wdn = make(n, k, N, M, 32)
            ps, wbytes, ncalls = weight_copies(p, l2)
            copies = len(ps)
            for m in ms:
                x = torch.randn(m, k, device="cuda")
                ref = x.double() @ wdn.double().t()
                t_dense = graph_us([lambda w=dense[i % dcopies]: torch.nn.functional.linear(x, w)
                                    for i in range(ncalls)])
                old = tuple(ops.spmm_heuristic(m, n, k, N, M, 32, True, sms, False))
                heur = tuple(ops.spmm_heuristic(m, n, k, N, M, 32, True, sms))
                plans = [old] + [(kern, cs) for kern, mmax in CLUSTER.items() if m <= mmax for cs in splits
                                 if cs <= MAX_CLUSTER[kern]]
                res = {}
                for kern, split in plans:
                    def call(q, kern=kern, split=split):
                        return ops.spmm_with_plan(x, q.values, q.indices, N, M, 32, None, None, None, kern, split)
                    try:
                        y = call(p)
                    except RuntimeError as e:  # e.g. a cluster size the GPU cannot place
                        print(f"SKIP {n}x{k} {pat} m={m} {NAMES[kern]}/{split}: {str(e).splitlines()[0]}", flush=True)
                        continue
                    err = ((y.double() - ref).norm() / ref.norm()).item()
                    if not err < 1e-5:
                        bad += 1
                        print(f"FAIL {n}x{k} {pat} m={m} {NAMES[kern]}/{split} err {err:.2e}", flush=True)
                    t = graph_us([lambda q=ps[i % copies]: call(q) for i in range(ncalls)])
                    res[(kern, split)] = t
                    rows.append(dict(n=n, k=k, N=N, M=M, m=m, kernel=kern, name=NAMES[kern], split=split, us=t,
                                     dense_us=t_dense, gbps=wbytes / t / 1e3, heuristic=int((kern, split) == heur),
                                     old=int((kern, split) == old)))
                best = min((v, kp) for kp, v in res.items())
                th = res.get(heur, float("nan"))
                print(f"{n:5d}x{k:5d} {pat:>5s} m={m:2d} dense {t_dense:7.2f} us | old {NAMES[old[0]]}/{old[1]} "
                      f"{res[old]:6.2f} ({t_dense / res[old]:.2f}x) | best {NAMES[best[1][0]]}/{best[1][1]} {best[0]:6.2f} "
                      f"({t_dense / best[0]:.2f}x, {wbytes / best[0] / 1e3:.0f} GB/s) | heur {NAMES[heur[0]]}/{heur[1]} "
                      f"{th:6.2f} ({th / best[0]:.2f} of best)", flush=True)
            del ps
        del dense
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "decode_sweep.csv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0]))
        wr.writeheader()
        wr.writerows(rows)
    print(f"correctness failures: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
