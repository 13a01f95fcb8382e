"""Time every tiled/packed plan (kernel x split-K) on a grid of shapes, for fitting the
heuristic's cost model (csrc/dispatch.h) offline:  python tools/sweep_plans.py --out DIR

Writes plan_sweep.csv (one row per shape x plan: ms = mean of 8 back-to-back runs after 2 warm-ups,
or with --graph of a CUDA graph of back-to-back calls over weight copies exceeding L2; the
heuristic's pick for the shape, and whether split-K reduced in a cluster). --splits, --kernels
and --max-m narrow the sweep; --grid llama --ms 32,64,128 sweeps the llama suite's layers at small
token counts; NMSPMM_NO_CLUSTER_SPLIT=1 times the workspace reduction on sm_90.
The fit is tools/fit_cost_model.py."""
import argparse
import csv
import dataclasses
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import nmspmm  # noqa: E402
from kernel_check import NAMES, run, supports  # noqa: E402
from shapes import NMSPMM100_NK  # noqa: E402

ops = torch.ops.nmspmm


def time_ms(fn, reps=8):
    fn()
    fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / reps


def time_graph_ms(make_fn, copies, reps):
    """ms per call of a CUDA graph of `reps` back-to-back calls cycling over `copies` weights (the
    weights together exceed L2, as in a model's successive layers); mean of 3 replays."""
    fns = [make_fn(i) for i in range(copies)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(reps):
            fns[i % copies]()
    g.replay()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(3):
        g.replay()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / (3 * reps)


def make_on_gpu(n, k, N, M, L):
    """A random weight under a random N:M pattern, compressed on the GPU."""
    w = torch.randn(n, k, device="cuda")
    mask = torch.rand(n // L, k // M, M, device="cuda").argsort(-1).argsort(-1) < N
    return nmspmm.compress(w, N, M, L, mask=mask.repeat_interleave(L, 0).reshape(n, k))


def small_m_grid(ms, patterns):
    """Every distinct (n, k) of the llama suite's models at the given token counts."""
    from shapes import llama_shapes
    nk = sorted({(s.n, s.k) for s in llama_shapes(None, [ms[0]])})
    return [(m, n, k, N, M, 32) for (n, k) in nk for m in ms for (N, M) in patterns]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget-s", type=float, default=330)
    ap.add_argument("--packing", action="store_true", help="also time the packing kernels (6-8)")
    ap.add_argument("--splits", default="1,2,4,8", help="split-K factors to time (comma-separated)")
    ap.add_argument("--kernels", default="2,3,4,5,9,10,11", help="kernel ids to time (comma-separated)")
    ap.add_argument("--max-m", type=int, default=1 << 30, help="skip shapes with more rows")
    ap.add_argument("--name", default="plan_sweep.csv", help="output file name under --out")
    ap.add_argument("--patterns", default="16:32,12:32,8:32,4:32", help="N:M patterns of the grid")
    ap.add_argument("--grid", default="nmspmm", choices=("nmspmm", "llama"),
                    help="nmspmm: the fitting grid on NM-SpMM's (n, k) pairs; llama: every (n, k) of the "
                         "llama suite at the token counts --ms")
    ap.add_argument("--ms", default="32,64,128", help="token counts of --grid llama")
    ap.add_argument("--graph", action="store_true",
                    help="time CUDA graphs of back-to-back calls over weight copies exceeding L2 "
                         "(small calls, where eager timing measures the launch)")
    args = ap.parse_args()
    splits = [int(v) for v in args.splits.split(",")]
    kernels = [int(v) for v in args.kernels.split(",")]
    patterns = [tuple(map(int, v.split(":"))) for v in args.patterns.split(",")]
    # Split-K reduction mode of this process (csrc/dispatch.h::plan_reduces_in_cluster).
    cluster = (torch.cuda.get_device_capability()[0] >= 9 and
               os.environ.get("NMSPMM_NO_CLUSTER_SPLIT") != "1")
    torch.manual_seed(0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grid = []
    if args.grid == "llama":
        grid = small_m_grid([int(v) for v in args.ms.split(",")], patterns)
    else:
        for i, (n, k) in enumerate(NMSPMM100_NK):
            for m in (256, 1024, 4096) if i < 8 else ((512, 2048) if i % 2 == 0 else (256,)):
                for (N, M) in patterns:
                    grid.append((m, n, k, N, M, 32))
        grid += [(1024, 4096, 4096, 2, 32, 32), (1024, 4096, 4096, 1, 32, 32), (4096, 4096, 4096, 2, 32, 32)]
    grid = [g for g in grid if g[0] <= args.max_m]
    rows, t0 = [], time.time()
    path = os.path.join(args.out, args.name)
    os.makedirs(args.out, exist_ok=True)
    for (m, n, k, N, M, L) in grid:
        if time.time() - t0 > args.budget_s:
            print("budget reached")
            break
        p = make_on_gpu(n, k, N, M, L)
        x = torch.randn(m, k, device="cuda")
        copies = 1
        if args.graph:
            wbytes = p.values.numel() * 4 + p.indices.numel()
            copies = max(1, min(8, -(-200 * 2**20 // wbytes)))
            ps = [p] + [dataclasses.replace(p, values=p.values.clone(), indices=p.indices.clone())
                        for _ in range(copies - 1)]
        heur = ops.spmm_heuristic(m, n, k, N, M, L, True, sms)
        best = None
        for kernel in kernels + ([6, 7, 8] if args.packing else []):
            if not supports(kernel, m, p) or (kernel in (6, 7, 8) and N * 4 > M):
                continue
            for split in splits:
                if split > 1 and k // 32 // split < 4:
                    continue
                if args.graph:
                    ms = time_graph_ms(lambda i: (lambda: run(x, ps[i], kernel, split)), copies, max(8, copies))
                else:
                    ms = time_ms(lambda: run(x, p, kernel, split))
                rows.append(dict(m=m, n=n, k=k, N=N, M=M, L=L, kernel=kernel, split=split, ms=ms,
                                 heur_kernel=heur[0], heur_split=heur[1],
                                 cluster=int(cluster and split == 2)))  # plan_reduces_in_cluster
                if best is None or ms < best[0]:
                    best = (ms, kernel, split)
        heur_ms = [r["ms"] for r in rows if (r["m"], r["n"], r["k"], r["N"], r["kernel"], r["split"]) ==
                   (m, n, k, N, heur[0], heur[1])]
        print(f"{N}:{M} {m}x{n}x{k} best {NAMES[best[1]]}/{best[2]} {best[0]:.4f} ms | heuristic "
              f"{NAMES[heur[0]]}/{heur[1]} {heur_ms[0] if heur_ms else float('nan'):.4f} ms", flush=True)
        with open(path, "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            wr.writeheader()
            wr.writerows(rows)


if __name__ == "__main__":
    main()
