"""The measured plan table: every plan the policy compares, timed on this GPU, against cuBLAS.

For each cell of the sweep (dtype, N:M, L, m, Llama layer n x k) it asks the policy for every kernel
family's plan (``nmspmm.plan_candidates``: the registry's candidate kernels, the split-K each
family's plan generator gives, the estimated time), runs each with ``spmm_with_plan``, checks its
output against an fp64 reference of the decompressed weight, times it, and times cuBLAS
(``F.linear`` on the dense weight in the same dtype; TF32 off, the setting ``dense_expand_f32``
follows as ``F.linear`` does). One CSV row per plan, with the plan the heuristic picks for the
cell and cuBLAS's time; tests/test_policy_table.py replays the committed table through the policy
on the CPU. At the end it reports, per dtype, the cells below 0.5x cuBLAS (the issue-64 floor) for
the heuristic's pick and for the best measured plan.

    python benchmarks/plan_table.py                    # the sweep, ~5-6 min on an H200
    python benchmarks/plan_table.py --quick            # a few cells, to try the script
    python benchmarks/plan_table.py --out PATH.csv     # default benchmarks/results/h200/plan_table.csv
    python benchmarks/plan_table.py --patterns 2:4     # those patterns' cells, replacing theirs in --out
    python benchmarks/plan_table.py --ms 8,16 --dtypes bfloat16,float16   # likewise, those m and dtypes
    python benchmarks/plan_table.py --ls 4,8 --ms 1,2,4,8,16              # likewise, those L and m

Sweep: N:M in {2:4, 16:32, 8:32, 4:32} x L in {1, 2, 4, 8, 16, 32, 64} x m in {1, 2, 4, 8, 16, 64, 256,
1024, 4096} x the six Llama layers (out x in: 4096x4096, 11008x4096, 4096x11008, 1024x4096,
14336x4096, 4096x14336), in bf16 and fp32; fp16 (which runs the bf16 kernels' code in another
dtype) on L in {1, 16, 32} and the layers 4096x4096, 4096x14336. Timing: CUDA events around CUDA
graphs of back-to-back calls (eager calls for plans of more than a millisecond), the median of three;
x and the weight stay where the previous call left them (L2 included), for every plan alike. A plan
whose estimate is above --skip-factor times the cell's best estimate is checked but not timed
(``timed`` = 0: the generic kernel at large m takes up to 0.1 s a call); --skip-factor 0 times all.
"""
from __future__ import annotations

import argparse
import itertools
import math
import os
import statistics
import sys
import time
import zlib

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common  # noqa: E402

import nmspmm  # noqa: E402

ops = torch.ops.nmspmm
LAYERS = [(4096, 4096), (11008, 4096), (4096, 11008), (1024, 4096), (14336, 4096), (4096, 14336)]
PATTERNS = [(2, 4), (16, 32), (8, 32), (4, 32)]
LS = [1, 2, 4, 8, 16, 32, 64]
MS = [1, 2, 4, 8, 16, 64, 256, 1024, 4096]
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
COLUMNS = ["device", "cc", "sms", "dtype", "N", "M", "L", "m", "n", "k", "kernel", "split_k", "est_us",
           "time_us", "timed", "ok", "err", "err_cublas", "scale", "picked", "pick_kernel", "pick_split",
           "cublas_us"]


def cells(quick: bool, patterns=PATTERNS, ms=MS, dtypes=tuple(DTYPES), ls_only=None):
    """(dtype name, N, M, L, m, n, k), grouped so one weight serves every m."""
    if quick:
        for dt, (N, M), L, (n, k) in itertools.product(["bfloat16", "float32"], [(2, 4), (8, 32)], [1, 16],
                                                     [(4096, 4096)]):
            for m in (1, 16, 1024):
                yield dt, N, M, L, m, n, k
        return
    for dt in ("bfloat16", "float32", "float16"):
        if dt not in dtypes:
            continue
        layers = LAYERS if dt != "float16" else [(4096, 4096), (4096, 14336)]
        ls = LS if dt != "float16" else [1, 16, 32]
        if ls_only is not None:
            ls = [L for L in ls if L in ls_only]
        for (n, k), (N, M), L in itertools.product(layers, patterns, ls):
            for m in ms:
                yield dt, N, M, L, m, n, k


def random_weight(n, k, N, M, L, dtype, seed):
    """values [k N / M, n] in dtype and uint8 indices [k N / M, n / L]: a random N:M pattern per
    (window, vector), ascending in each, on the GPU; and the dense weight in fp64 by a plain scatter
    of the documented layout (independent of the nmspmm ops)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    G, V = k // M, n // L
    pos = torch.rand(G, V, M, device="cuda", generator=g).argsort(dim=-1)[..., :N].sort(dim=-1).values
    indices = pos.permute(0, 2, 1).reshape(G * N, V).to(torch.uint8).contiguous()
    values = torch.randn(G * N, n, device="cuda", generator=g).to(dtype)
    w = G * N
    cols = (torch.arange(w, device="cuda") // N * M)[:, None] + indices.long().repeat_interleave(L, dim=1)
    dense_t = torch.zeros(k, n, dtype=torch.float64, device="cuda")
    dense_t.scatter_(0, cols, values.double())
    return values, indices, dense_t.t().contiguous()


def time_us(fn, slow_us: float) -> float:
    """Median over three measurements of one call's time in microseconds: a CUDA graph of R calls
    (R for about 2 ms), or eager calls for a call of more than slow_us."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    first = (time.perf_counter() - t0) * 1e6
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if first > slow_us:
        reps = 1 if first > 20000 else max(1, int(10000 / first))
        out = []
        for _ in range(3 if first < 200000 else 1):
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) * 1000.0 / reps)
        return statistics.median(out)
    reps = int(min(50, max(5, 2000 / max(first, 1.0))))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    out = []
    for _ in range(3):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) * 1000.0 / reps)
    del graph
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(common.REPO_ROOT, "benchmarks", "results", "h200", "plan_table.csv"))
    ap.add_argument("--quick", action="store_true", help="a few cells only")
    ap.add_argument("--skip-factor", type=float, default=20.0,
                    help="do not time a plan estimated above this many times the cell's best estimate (0: time all)")
    ap.add_argument("--patterns", default=None,
                    help="comma list of N:M: sweep only these and replace their rows in an existing --out")
    ap.add_argument("--ms", default=None, help="comma list of m: sweep only these (rows replaced as --patterns)")
    ap.add_argument("--dtypes", default=None, help="comma list of dtype names: sweep only these (likewise)")
    ap.add_argument("--ls", default=None, help="comma list of L: sweep only these (likewise)")
    args = ap.parse_args()
    patterns, ms, dtypes, ls_only = PATTERNS, MS, tuple(DTYPES), None
    if args.patterns:
        patterns = [tuple(int(v) for v in p.split(":")) for p in args.patterns.split(",")]
        assert all(p in PATTERNS for p in patterns), f"--patterns: choose from {PATTERNS}"
    if args.ms:
        ms = [int(v) for v in args.ms.split(",")]
        assert all(m in MS for m in ms), f"--ms: choose from {MS}"
    if args.dtypes:
        dtypes = tuple(args.dtypes.split(","))
        assert all(d in DTYPES for d in dtypes), f"--dtypes: choose from {list(DTYPES)}"
    if args.ls:
        ls_only = [int(v) for v in args.ls.split(",")]
        assert all(L in LS for L in ls_only), f"--ls: choose from {LS}"
    partial = bool(args.patterns or args.ms or args.dtypes or args.ls)
    assert torch.cuda.is_available() and nmspmm.cuda_kernels_built(), "needs a GPU and nmspmm built with CUDA"
    common.set_tf32(False)
    props = torch.cuda.get_device_properties(0)
    cc = props.major * 10 + props.minor
    sms = props.multi_processor_count
    device = props.name
    common.log(f"{device}, cc {cc}, {sms} SMs, torch {torch.__version__}, {common.tf32_setting()}")

    rows, failures = [], []
    cublas_cache = {}
    weight_key, weight = None, None
    t_start = time.time()
    if partial and not os.path.exists(args.out):
        # A re-sweep of some cells replaces their rows in the full table; without it the written
        # table would hold those cells only.
        sys.exit(f"--patterns / --ms / --dtypes / --ls re-sweep in place: --out {args.out} must hold the full table")
    all_cells = list(cells(args.quick, patterns, ms, dtypes, ls_only))
    for i, (dt, N, M, L, m, n, k) in enumerate(all_cells):
        dtype = DTYPES[dt]
        key = (dt, N, M, L, n, k)
        if key != weight_key:
            weight = None
            torch.cuda.empty_cache()
            weight = random_weight(n, k, N, M, L, dtype, seed=zlib.crc32(repr(key).encode()))
            weight_key = key
        values, indices, dense64 = weight
        # The metadata a 2:4 weight holds (NMWeight.tc_meta), so its plans run as a layer's do.
        tc_meta = ops.sparse_tc_meta(indices, N, M, L, k) if (N, M) == (2, 4) else None
        dense = dense64.to(dtype)
        x = torch.randn(m, k, device="cuda").to(dtype)
        x64 = x.double()
        ref = x64 @ dense64.t()
        scale = max((x64.abs() @ dense64.abs().t()).max().item(), 1e-30)
        y_lin = F.linear(x, dense)
        err_lin = (y_lin.double() - ref).abs().max().item()
        ckey = (dt, m, n, k)
        if ckey not in cublas_cache:
            cublas_cache[ckey] = time_us(lambda: F.linear(x, dense), 1000.0)
        cublas = cublas_cache[ckey]
        cands = nmspmm.plan_candidates(m, n, k, N, M, L, dtype, cc, sms, 16)
        pick = tuple(ops.spmm_heuristic(m, n, k, N, M, L, dtype, cc, sms, 16))
        best_est = min(c[2] for c in cands)
        tol = 2.0 ** -12 if dtype != torch.float32 else 1e-5
        for kernel, split, est in cands:
            def run(kernel=kernel, split=split):
                return ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, kernel, split, tc_meta)
            y = run()
            err = (y.double() - ref).abs().max().item()
            ok = bool(math.isfinite(err) and err <= 2 * err_lin + tol * scale)
            timed = ok and (args.skip_factor <= 0 or est <= args.skip_factor * best_est)
            t = time_us(run, 1000.0) if timed else float("nan")
            if not ok:
                failures.append(f"{dt} {N}:{M} L={L} m={m} {n}x{k} {kernel}/{split}: error {err:.3g} "
                                f"(cuBLAS {err_lin:.3g}, scale {scale:.3g})")
            rows.append(dict(device=device, cc=cc, sms=sms, dtype=dt, N=N, M=M, L=L, m=m, n=n, k=k, kernel=kernel,
                             split_k=split, est_us=round(est, 3), time_us=round(t, 3) if timed else "",
                             timed=int(timed), ok=int(ok), err=f"{err:.4g}", err_cublas=f"{err_lin:.4g}",
                             scale=f"{scale:.4g}", picked=int((kernel, split) == pick), pick_kernel=pick[0],
                             pick_split=pick[1], cublas_us=round(cublas, 3)))
        del x, x64, ref, y_lin, dense
        if (i + 1) % 50 == 0 or i + 1 == len(all_cells):
            common.log(f"{i + 1}/{len(all_cells)} cells, {time.time() - t_start:.0f} s")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    swept = rows
    if partial and os.path.exists(args.out):
        import csv

        def swept_cell(r):
            return ((int(r["N"]), int(r["M"])) in patterns and int(r["m"]) in ms and r["dtype"] in dtypes
                    and (ls_only is None or int(r["L"]) in ls_only))

        with open(args.out, newline="") as f:
            kept = [r for r in csv.DictReader(f) if not swept_cell(r)]
        common.log(f"keeping {len(kept)} rows of the other cells from {args.out}")
        rows = kept + rows
    common.write_csv(args.out, rows, COLUMNS)
    common.log(f"wrote {len(rows)} rows to {args.out}")
    report(swept)
    if failures:
        print(f"{len(failures)} plan(s) FAILED the fp64 check:", *failures[:40], sep="\n  ")
        sys.exit(1)


def report(rows):
    """Per dtype: the heuristic's pick and the best measured plan against cuBLAS (the floor: no
    cell below 0.5x), and the picks slower than 1.1x the best measured plan."""
    by_cell = {}
    for r in rows:
        by_cell.setdefault((r["dtype"], r["N"], r["M"], r["L"], r["m"], r["n"], r["k"]), []).append(r)
    for dt in DTYPES:
        pick_ratio, best_ratio, slow, below, missing = [], [], 0, [], 0
        for cell, rs in by_cell.items():
            if cell[0] != dt:
                continue
            timed = [r for r in rs if r["timed"]]
            picked = [r for r in rs if r["picked"] and r["timed"]]
            if not timed or not picked:
                missing += 1
                continue
            best = min(r["time_us"] for r in timed)
            p = picked[0]["time_us"]
            cublas = rs[0]["cublas_us"]
            pick_ratio.append(cublas / p)
            best_ratio.append(cublas / best)
            slow += p > 1.1 * best
            if cublas / p < 0.5:
                below.append((cublas / p, cell, picked[0]["kernel"]))
        if not pick_ratio:
            continue
        print(f"{dt}: {len(pick_ratio)} cells; pick vs cuBLAS geomean {common.geomean(pick_ratio):.3f}x, "
              f"min {min(pick_ratio):.3f}x, {len(below)} below 0.5x (floor {'met' if not below else 'NOT met'}); "
              f"best measured plan vs cuBLAS min {min(best_ratio):.3f}x, "
              f"{sum(b < 0.5 for b in best_ratio)} below 0.5x; {slow} picks > 1.1x the best plan"
              + (f"; {missing} cells without a timed pick" if missing else ""))
        for ratio, cell, kernel in sorted(below)[:15]:
            print(f"    {ratio:.3f}x  {cell[0]} {cell[1]}:{cell[2]} L={cell[3]} m={cell[4]} {cell[5]}x{cell[6]}  [{kernel}]")


if __name__ == "__main__":
    main()
