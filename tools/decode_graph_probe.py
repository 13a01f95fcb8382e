"""Per-call time of the heuristic's decode plan at m = 1 from one CUDA graph of back-to-back calls
(weight copies rotated past 4x L2, as bench_spmm.py's CUDA-graph column), for a few Llama layer
shapes; prints one line per (shape, pattern). For A/B runs of two builds on one machine:

    PYTHONPATH=other_build python tools/decode_graph_probe.py --tag old
"""
import argparse
import math
import os
import sys

import torch

import nmspmm

sys.path.insert(0, os.path.dirname(__file__))
from decode_sweep import graph_us  # noqa: E402

ops = torch.ops.nmspmm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tag", default="")
    ap.add_argument("--m", type=int, default=1)
    ap.add_argument("--shapes", default="4096x4096,4096x11008,11008x4096,13824x5120,2048x2048,5120x5120")
    a = ap.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    torch.manual_seed(0)
    print(f"# {a.tag} nmspmm from {nmspmm.__file__}")
    for shape in a.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        for N in (16, 12, 8, 4):
            w = nmspmm.compress(torch.randn(n, k, device="cuda"), N, 32, 32)
            nbytes = w.values.numel() * 4 + w.indices.numel()
            copies = max(1, min(64, math.ceil(4 * l2 / nbytes)))
            vals = [w.values.clone() for _ in range(copies)]
            idxs = [w.indices.clone() for _ in range(copies)]
            x = torch.randn(a.m, k, device="cuda")
            fns = [lambda v=v, i=i: ops.spmm(x, v, i, N, 32, 32) for v, i in zip(vals, idxs)]
            plan = tuple(ops.spmm_heuristic(a.m, n, k, N, 32, 32, False, sms))
            calls = copies * max(1, 400 // copies)
            us = graph_us([fns[i % copies] for i in range(calls)], reps=15)
            print(f"{a.tag} m={a.m} {n}x{k} {N}:32 plan {plan[0]}/{plan[1]} graph {us:.2f} us", flush=True)
            del vals, idxs, fns


if __name__ == "__main__":
    main()
