"""Probe (session 34): does running a large-m SpMM as a few m-chunks, each its own op call, save on the
x transpose? Each call's xT scratch comes from the caching allocator, so every chunk reuses the same
block: where a chunk's xT fits in L2, the next chunk's transpose overwrites lines still in L2 and xT
need not go to DRAM, and the kernel reads it from L2. Timed as the benchmark times a call (L2 flushed
before each, median); the chunked variant is the chunk calls back to back, outputs left separate (no
concatenation), each chunk on the heuristic's own plan for its m; outputs checked against the whole
call's.

    python tools/probe_xt_chunks.py --ms 2048,4096 --chunks 512,1024,2048 --Ns 16,12,8,4 [--cube]
"""
import argparse
import math
import os
import statistics
import sys
from collections import defaultdict

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import nmspmm  # noqa: E402
from shapes import NMSPMM100_NK  # noqa: E402

ops = torch.ops.nmspmm


def timed(fn, flush, reps):
    fn()
    evs = []
    for _ in range(reps):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        evs.append((s, e))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in evs) * 1e3  # us


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ms", default="2048,4096")
    ap.add_argument("--chunks", default="512,1024,2048")
    ap.add_argument("--Ns", default="16,12,8,4")
    ap.add_argument("--cube", action="store_true")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    ms = [int(v) for v in a.ms.split(",")]
    chunks = [int(v) for v in a.chunks.split(",")]
    Ns = [int(v) for v in a.Ns.split(",")]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flush = torch.empty(256 * 2**20 // 4, device="cuda")
    torch.manual_seed(0)
    nks = ([(4096, 4096)] if a.cube else []) + list(NMSPMM100_NK)
    ratios = defaultdict(list)
    for N in Ns:
        for n, k in dict.fromkeys(nks):
            p = nmspmm.compress(torch.randn(n, k, device="cuda"), N, 32, 32)
            args = (p.values, p.indices, N, 32, 32)
            for m in ms:
                x = torch.randn(m, k, device="cuda")
                whole = lambda: ops.spmm(x, *args)  # noqa: E731
                y = whole()
                heur = tuple(ops.spmm_heuristic(m, n, k, N, 32, 32, False, sms))
                t0 = timed(whole, flush, a.reps)
                line = f"{m:5d}x{n:5d}x{k:5d} {N:2d}:32 whole {heur[0]}/{heur[1]} {t0:8.1f} us"
                for c in chunks:
                    if c >= m:
                        continue
                    parts = [x[r:r + c] for r in range(0, m, c)]
                    chunked = lambda: [ops.spmm(xp, *args) for xp in parts]  # noqa: E731
                    ys = chunked()
                    diff = (torch.cat(ys) - y).abs().max().item() / (y.abs().max().item() + 1e-30)
                    hc = tuple(ops.spmm_heuristic(c, n, k, N, 32, 32, False, sms))
                    t = timed(chunked, flush, a.reps)
                    ratios[(N, m, c)].append(t0 / t)
                    line += f" | {c}: {hc[0]}/{hc[1]} {t:8.1f} ({t0 / t:.3f}x){' MISMATCH %.1e' % diff if diff > 1e-5 else ''}"
                print(line, flush=True)
    print("whole time / chunked time, geomean over the (n, k):")
    for key in sorted(ratios):
        v = ratios[key]
        print(f"  {key[0]:2d}:32 m={key[1]} chunk {key[2]}: {math.exp(sum(map(math.log, v)) / len(v)):.3f} "
              f"({min(v):.3f}-{max(v):.3f})")


if __name__ == "__main__":
    main()
