"""Kernel benchmark: nmspmm (vector-wise N:M SpMM, fp32) against dense cuBLAS and PyTorch 2:4.

  python benchmarks/bench_spmm.py --quick                 # < 3 min: 4096^3, a few Llama points, decode
  python benchmarks/bench_spmm.py --suite all             # 100 NM-SpMM points + 7 Llama models x 13 m
  python benchmarks/bench_spmm.py --suite all --dry-run   # list configs and estimate, no GPU needed

For every (m, n, k): dense F.linear in fp32 with TF32 off (NM-SpMM's cuBLAS baseline), TF32, bf16
and fp16, and PyTorch's 2:4 semi-structured sparse (fp16/bf16, compared only at 50%). For every
pattern: nmspmm, checked against an fp64 reference on the decompressed weight before it is timed
(a mismatch aborts the run). Timing: triton.testing.do_bench (L2 flushed before every rep, median;
the lowest of --timings 2 medians per config, for every implementation alike);
for m <= 64 also a CUDA-graph replay (weights rotated through >= 4x L2 of copies, no launch gaps).
Results: <out>/bench_spmm.csv, <out>/bench_spmm.json (env block + rows + summary), console summary.
See docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import shapes as S  # noqa: E402
from common import (ClockSampler, Progress, collect_env, default_out_dir, log, set_tf32,  # noqa: E402
                    tf32_setting, write_csv, write_json)
from report import format_summary, summarize  # noqa: E402
from speed_of_light import SOL_COLUMNS, add_sol_columns  # noqa: E402

DENSE_DTYPES = ("fp32", "tf32", "bf16", "fp16")
SEMI_DTYPES = ("fp16", "bf16")
NM_DTYPES = ("fp32", "bf16", "fp16")
SWEEP_SPLITS = (1, 2, 4, 8, 16)
# bf16 / fp16 rows: relative error allowed above twice F.linear's (an output rounding's worth, 2^-12).
NUMERICS_FLOOR = 2.0 ** -12


def above_linear(err: float, err_linear: float) -> bool:
    """The numerics rule: more than twice F.linear's error in the same dtype (+NUMERICS_FLOOR)."""
    return err > 2 * err_linear + NUMERICS_FLOOR

CSV_COLUMNS = [
    "suite", "model", "layer", "m", "n", "k", "impl", "variant", "dtype", "pattern", "N", "M", "L",
    "sparsity", "ideal", "status", "kernel", "split_k", "heuristic_kernel",
    "heuristic_split_k", "ms", "ms_graph", "graph_copies", "tflops_eff", "tflops_exec", "gbps",
    "gbps_graph", "bytes", "rel_err", "rel_err_linear", "err_over_linear", "speedup_vs_fp32", "speedup_vs_tf32",
    "speedup_vs_bf16", "speedup_vs_fp16", "speedup_vs_semi24_fp16", "speedup_vs_semi24_bf16", "speedup_graph_vs_fp32",
    "speedup_graph_vs_tf32", "speedup_graph_vs_bf16", "speedup_graph_vs_fp16", "note",
]


class BenchAbort(RuntimeError):
    pass


# ------------------------------------------------------------------------------------ CLI
@dataclass(frozen=True)
class Variant:
    """How nmspmm is called: 'auto' (nmspmm.spmm, the heuristic), a forced registry kernel
    ('tiled_f32_64x128', 'tiled_f32_64x128:s2', 'tiled_f32_64x128:best'), or the 'tiled'/'packed'
    pair of --compare-paths."""
    label: str
    kernel: Optional[str] = None
    split: Optional[int] = None   # None: default split (see _forced_plan); -1: sweep SWEEP_SPLITS


def registry_kernels() -> Optional[List[str]]:
    """The kernel names of the registry (torch.ops.nmspmm.kernels()), or None where nmspmm does not load."""
    try:
        import nmspmm
    except Exception:  # noqa: BLE001
        return None
    return nmspmm.kernels()


def counterpart(kernel: str) -> Optional[str]:
    """The packing kernel of a tiled kernel's tile (the nearest tile where none matches) and the tiled
    kernel of a packing kernel's tile, from the registry; None for the other families."""
    import nmspmm

    info = nmspmm.kernel_info(kernel)
    want = {"tiled": "packed", "packed": "tiled"}.get(info.family)
    if want is None:
        return None
    cands = [k for k in nmspmm.kernels() if nmspmm.kernel_info(k).family == want]
    return min(cands, key=lambda k: (abs(nmspmm.kernel_info(k).tile_m - info.tile_m),
                                     abs(nmspmm.kernel_info(k).tile_n - info.tile_n),
                                     nmspmm.kernel_info(k).warps != info.warps))


def parse_kernels(text: str) -> List[Variant]:
    out: List[Variant] = []
    for tok in text.split(","):
        tok = tok.strip().lower()
        if not tok:
            continue
        if tok == "auto":
            v = Variant("auto")
        elif tok.startswith("family="):
            # Every registry kernel of one family, each with its best split-K (e.g. family=packed).
            fam = tok.partition("=")[2]
            import nmspmm

            members = [k for k in nmspmm.kernels() if nmspmm.kernel_info(k).family == fam]
            if not members:
                raise ValueError(f"--kernel: no registry kernel of family {fam!r}")
            out += [v for v in (Variant(f"{k}:best", k, -1) for k in members) if v not in out]
            continue
        else:
            kernel, _, split = tok.partition(":")
            names = registry_kernels()
            if names is not None and kernel not in names:
                raise ValueError(f"--kernel: unknown kernel {kernel!r} (one of {', '.join(names)})")
            if split in ("", None):
                v = Variant(kernel, kernel)
            elif split == "best":
                v = Variant(f"{kernel}:best", kernel, -1)
            else:
                v = Variant(f"{kernel}:s{int(split)}", kernel, int(split))
        if v not in out:
            out.append(v)
    if not out:
        raise ValueError("--kernel: nothing given")
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", default="all", choices=S.SUITES,
                    help="nmspmm100: the paper's 100 points; llama: 7 models' projections x 13 m; "
                         "decode: same projections, m<=64; all: nmspmm100 + llama (default)")
    ap.add_argument("--models", default=None,
                    help=f"comma list for llama/decode (default all: {','.join(S.LLAMA_MODELS)})")
    ap.add_argument("--m", default=None, help="comma list of token counts overriding the suite's m list")
    ap.add_argument("--shapes", default=None, help="custom 'm,n,k;m,n,k' (replaces --suite)")
    ap.add_argument("--patterns", default=S.DEFAULT_PATTERNS,
                    help="comma list of N:M or N:M:L (L defaults to 32), e.g. 16:32,2:4:1,8:32:64")
    ap.add_argument("--dtypes", default=",".join(DENSE_DTYPES),
                    help="dense baselines: fp32 (TF32 off), tf32, bf16, fp16 (default all)")
    ap.add_argument("--semi24", default=",".join(SEMI_DTYPES),
                    help="PyTorch 2:4 semi-structured baseline dtypes, or 'none' (run only if a pattern is 50%%)")
    ap.add_argument("--nm-dtypes", default="fp32",
                    help="dtypes nmspmm is called with (default fp32; bf16/fp16 take the native tensor-core "
                         "kernels where they cover the call, else are upcast inside the op)")
    ap.add_argument("--kernel", default="auto",
                    help="comma list: auto (heuristic), a registry kernel name (nmspmm.kernels()), "
                         "name:split or name:best (sweep split-K 1..16), family=NAME (every kernel of a "
                         "registry family, each name:best); e.g. auto,packed_f32_128x128,tiled_f32_32x128:4 "
                         "or auto,family=packed (the packing kernels against the heuristic's plans; "
                         "make_table.py prints the comparison)")
    ap.add_argument("--compare-paths", action="store_true",
                    help="also time the packed and the non-packed kernel of the heuristic's tile size")
    ap.add_argument("--quick", action="store_true", help="small subset, < 3 min")
    ap.add_argument("--out", default=None, help="results folder (default benchmarks/results/spmm_<time>)")
    ap.add_argument("--warmup", type=float, default=None, help="do_bench warmup ms (default 10)")
    ap.add_argument("--rep", type=float, default=None, help="do_bench rep ms (default 30)")
    ap.add_argument("--timings", type=int, default=2,
                    help="do_bench medians per config, the lowest kept (default 2; same for every impl)")
    ap.add_argument("--graph-max-m", type=int, default=S.DECODE_M[-1],
                    help="CUDA-graph timing for m <= this (default 64; 0 disables)")
    ap.add_argument("--graph-replays", type=int, default=None, help="graph replays (default 10, quick 5)")
    ap.add_argument("--weights", default="random", choices=("random", "compress"),
                    help="random: random values + random sorted N-of-M indices per window and vector "
                         "(NM-SpMM's methodology, fast); compress: nmspmm.compress of a random dense weight")
    ap.add_argument("--tol", type=float, default=1e-5, help="relative Frobenius error bound, fp32")
    ap.add_argument("--tol-half", type=float, default=1e-2, help="bound for bf16/fp16 nmspmm calls")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (pipeline smoke test only)")
    ap.add_argument("--dry-run", action="store_true", help="list configs and estimate the run; no GPU")
    ap.add_argument("--list", action="store_true", help="with --dry-run: print every (m,n,k)")
    ap.add_argument("--verbose", "-v", action="store_true", help="one console line per timed config")
    return ap


@dataclass
class Settings:
    shapes: List[S.Shape]
    patterns: List[S.Pattern]
    dense: List[str]
    semi: List[str]
    nm_dtypes: List[str]
    variants: List[Variant]
    compare_paths: bool
    warmup: float
    rep: float
    graph_max_m: int
    graph_replays: int
    timings: int = 2


def resolve(args) -> Settings:
    m_list = S.parse_int_list(args.m) if args.m else None
    models = [x for x in args.models.split(",") if x.strip()] if args.models else None
    if args.shapes:
        shapes = S.parse_custom_shapes(args.shapes)
    else:
        shapes = S.build_suite(args.suite, models, m_list, args.quick)
    patterns = S.parse_patterns(args.patterns)
    dense = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    for d in dense:
        if d not in DENSE_DTYPES:
            raise ValueError(f"--dtypes: {d!r} not in {DENSE_DTYPES}")
    semi = [] if args.semi24.strip().lower() in ("", "none", "off") else \
        [d.strip() for d in args.semi24.split(",") if d.strip()]
    for d in semi:
        if d not in SEMI_DTYPES:
            raise ValueError(f"--semi24: {d!r} not in {SEMI_DTYPES}")
    if not any(abs(p.sparsity - 0.5) < 1e-9 for p in patterns):
        semi = []  # the 2:4 baseline is only compared at 50%
    nm_dtypes = [d.strip() for d in args.nm_dtypes.split(",") if d.strip()]
    for d in nm_dtypes:
        if d not in NM_DTYPES:
            raise ValueError(f"--nm-dtypes: {d!r} not in {NM_DTYPES}")
    variants = parse_kernels(args.kernel)
    if args.compare_paths:
        variants = variants + [v for v in (Variant("tiled"), Variant("packed")) if v not in variants]
    warmup = args.warmup if args.warmup is not None else 10
    rep = args.rep if args.rep is not None else 30
    replays = args.graph_replays if args.graph_replays is not None else (5 if args.quick else 10)
    if args.timings < 1:
        raise ValueError(f"--timings must be >= 1, got {args.timings}")
    return Settings(shapes, patterns, dense, semi, nm_dtypes, variants, args.compare_paths, warmup, rep,
                    args.graph_max_m, replays, args.timings)


def group_shapes(shapes: Sequence[S.Shape]) -> "OrderedDict[Tuple[int, int], List[S.Shape]]":
    groups: "OrderedDict[Tuple[int, int], List[S.Shape]]" = OrderedDict()
    for s in shapes:
        groups.setdefault((s.n, s.k), []).append(s)
    return groups


# ------------------------------------------------------------------------------------ dry run
# A rough H100 cost model, only for planning the run time (never reported as a result).
_EST = {"dense_fp32": 48e12, "dense_tf32": 330e12, "dense_bf16": 620e12, "dense_fp16": 620e12}
_BW = 3.0e12
_FLUSH_MS = 0.09  # do_bench zeroes a 256 MB buffer before every rep


def _est_call_ms(impl: str, m: int, n: int, k: int, pat: Optional[S.Pattern] = None) -> float:
    fl = 2.0 * m * n * k
    if impl == "nmspmm":
        d = pat.N / pat.M
        byts = 4 * (n * k * d) + n * k * d / pat.L + 4 * m * (n + k)
        return 1e3 * max(fl * d / 40e12, byts / (0.8 * _BW)) + 0.006
    if impl.startswith("semi24"):
        return max(0.5, 1e3 * fl / 900e12)
    es = 4 if impl in ("dense_fp32", "dense_tf32") else 2
    return 1e3 * max(fl / _EST[impl], es * (n * k + m * (n + k)) / _BW) + 0.005


def _est_do_bench_s(t: float, warmup: float, rep: float) -> float:
    c = t + _FLUSH_MS
    return (t + 5 * c + max(c, warmup) + max(c, rep) + 3.0) / 1e3


def _est_graph_s(t: float, replays: int, copies: int) -> float:
    calls = max(copies, int(math.ceil(2.0 / max(t, 1e-3))))
    return (calls * 0.04 + (replays + 2) * calls * t + copies * 0.05 + 5) / 1e3


def plan_and_estimate(st: Settings, l2_bytes: int = 50 * 2**20) -> Dict:
    groups = group_shapes(st.shapes)
    n_do = n_graph = n_check = 0
    secs = 0.0
    baselines = [f"dense_{d}" for d in st.dense] + [f"semi24_{d}" for d in st.semi]
    skipped = []
    peak_bytes = 0
    for (n, k), entries in groups.items():
        ms = sorted({s.m for s in entries})
        secs += 0.05 + 0.02 * len(st.patterns)  # weight generation, col_info (CPU), decompress
        wbytes = 4 * n * k
        peak_bytes = max(peak_bytes, wbytes * (3 + 8) + 4 * max(ms) * (n + k) * 4)
        for m in ms:
            for b in baselines:
                t = _est_call_ms(b, m, n, k)
                n_do += 1
                secs += st.timings * _est_do_bench_s(t, st.warmup, st.rep)
                if m <= st.graph_max_m:
                    n_graph += 1
                    secs += _est_graph_s(t, st.graph_replays, int(math.ceil(4 * l2_bytes / wbytes)))
            for p in st.patterns:
                if not p.fits(n, k):
                    skipped.append(f"{p} on n={n},k={k}")
                    continue
                for _ in st.nm_dtypes:
                    n_check += len(st.variants)
                    secs += len(st.variants) * (2.0 * m * n * k / 45e12 + 0.002)  # fp64 reference
                    for v in st.variants:
                        t = _est_call_ms("nmspmm", m, n, k, p)
                        reps = len(SWEEP_SPLITS) if v.split == -1 else 1
                        n_do += reps
                        secs += st.timings * reps * _est_do_bench_s(t, st.warmup, st.rep)
                        if m <= st.graph_max_m:
                            n_graph += 1
                            nb = 4 * n * k * p.N / p.M
                            secs += _est_graph_s(t, st.graph_replays, int(math.ceil(4 * l2_bytes / nb)))
    return {"groups": len(groups), "shapes": len(st.shapes),
            "unique_mnk": len({(s.m, s.n, s.k) for s in st.shapes}), "do_bench_calls": n_do,
            "graph_timings": n_graph, "reference_checks": n_check, "est_seconds": secs,
            "skipped": sorted(set(skipped)), "peak_gib_est": peak_bytes / 2**30}


def dry_run(args, st: Settings) -> None:
    est = plan_and_estimate(st)
    log(f"suite={args.suite if not args.shapes else 'custom'} quick={args.quick}  patterns="
        f"{','.join(str(p) for p in st.patterns)}  dense={','.join(st.dense)}  "
        f"2:4={','.join(st.semi) or 'off'}  nmspmm dtypes={','.join(st.nm_dtypes)}  variants="
        f"{','.join(v.label for v in st.variants)}")
    log(f"do_bench warmup={st.warmup} ms rep={st.rep} ms; CUDA graphs for m <= {st.graph_max_m} "
        f"({st.graph_replays} replays)")
    log(f"{est['shapes']} shape rows, {est['unique_mnk']} unique (m,n,k) in {est['groups']} (n,k) groups")
    log(f"timed configs: {est['do_bench_calls']} do_bench + {est['graph_timings']} CUDA-graph timings, "
        f"{est['reference_checks']} fp64 reference checks")
    log(f"estimated run time on an H100: ~{est['est_seconds'] / 60:.1f} min (rough model); "
        f"peak GPU memory ~{est['peak_gib_est']:.1f} GiB")
    if est["skipped"]:
        log(f"patterns that do not fit (skipped, recorded 'unsupported'): {'; '.join(est['skipped'][:8])}"
            + (" ..." if len(est["skipped"]) > 8 else ""))
    try:
        import torch  # noqa: F401
        import nmspmm  # noqa: F401
        heur = lambda s, p: _heuristic(s.m, s.n, s.k, p, 132)  # noqa: E731
    except Exception as e:  # noqa: BLE001
        log(f"(nmspmm not importable here: {type(e).__name__}; heuristic picks not shown)")
        heur = None
    if args.list:
        for (n, k), entries in group_shapes(st.shapes).items():
            for s in entries:
                picks = ""
                if heur is not None:
                    picks = "  " + " ".join(
                        f"{p}->{heur(s, p)[0]}/s{heur(s, p)[1]}" if p.fits(n, k) else f"{p}->n/a"
                        for p in st.patterns)
                log(f"  {s.suite:9s} {s.model:13s} {s.layer:28s} m={s.m:5d} n={n:6d} k={k:6d}{picks}")


# ------------------------------------------------------------------------------------ timing
class Timer:
    """do_bench (L2 flushed, median) as the primary timer; a CUDA-graph replay for small m."""

    def __init__(self, device: str, warmup: float, rep: float, replays: int, l2_bytes: int, timings: int = 1):
        self.device = device
        self.warmup, self.rep, self.replays = warmup, rep, replays
        # Several medians per config, the lowest kept: one median can come out ~2x slow (seen once
        # or twice per full run on H100); the same rule for every implementation.
        self.timings = timings
        self.rot_bytes = 4 * max(l2_bytes, 8 * 2**20)
        self.kind = "cpu-perf_counter"
        self._do_bench = None
        if device.startswith("cuda"):
            try:
                import triton.testing

                self._do_bench = triton.testing.do_bench
                self.kind = "triton.testing.do_bench(return_mode=median)" + \
                    (f", lowest of {timings} medians" if timings > 1 else "")
            except ImportError:
                self.kind = "fallback: CUDA events, 256 MB L2 flush, median (triton not importable)"

    def bench(self, fn: Callable[[], object]) -> float:
        return min(self._bench_once(fn) for _ in range(self.timings))

    def _bench_once(self, fn: Callable[[], object]) -> float:
        if self._do_bench is not None:
            try:
                return float(self._do_bench(fn, warmup=self.warmup, rep=self.rep, return_mode="median"))
            except TypeError:  # a triton without return_mode: use the equivalent fallback
                self._do_bench = None
                self.kind = "fallback: CUDA events, 256 MB L2 flush, median (old triton do_bench)"
        if self.device.startswith("cuda"):
            return self._events(fn)
        fn()
        times = []
        t_end = time.perf_counter() + self.rep / 1e3
        while time.perf_counter() < t_end or len(times) < 3:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    def _events(self, fn) -> float:
        import torch

        cache = torch.empty(256 * 2**20, dtype=torch.int8, device=self.device)
        fn()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(5):
            cache.zero_()
            fn()
        e.record()
        torch.cuda.synchronize()
        est = max(s.elapsed_time(e) / 5, 1e-3)
        for _ in range(max(1, int(self.warmup / est))):
            fn()
        n = max(1, int(self.rep / est))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            cache.zero_()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return statistics.median(a.elapsed_time(b) for a, b in zip(starts, ends))

    def graph(self, make_fn: Callable[[int], Callable[[], object]], set_bytes: int, est_ms: float,
              max_copies: int = 256) -> Tuple[float, int]:
        """Per-call ms of ``fn`` replayed from one CUDA graph. make_fn(i) returns the call on the
        i-th copy of the weights; copies rotate so that every call reads its weight from DRAM
        (>= 4x L2 in total), while the (small) activation stays L2-resident as in a real model."""
        import torch

        copies = int(min(max_copies, max(1, math.ceil(self.rot_bytes / max(set_bytes, 1)))))
        fns = [make_fn(i) for i in range(copies)]
        calls = copies * max(1, int(math.ceil(2.0 / max(est_ms * copies, 1e-4))))
        calls = min(calls, max(copies, 4096))
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for f in fns[: min(3, copies)]:
                f()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(calls):
                fns[i % copies]()
        g.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(self.replays):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            g.replay()
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e) / calls)
        del g, fns
        return statistics.median(times), copies


# ------------------------------------------------------------------------------------ operands
def _torch_dtype(name: str):
    import torch

    return {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def _heuristic(m: int, n: int, k: int, p: S.Pattern, num_sms: int, dtype: str = "fp32") -> Tuple[str, int]:
    """The heuristic's plan (registry kernel name, split_k) on this GPU (an H100 without one)."""
    import torch
    import nmspmm  # noqa: F401  (registers torch.ops.nmspmm)

    cc = 90
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        cc = major * 10 + minor
    kernel, split = torch.ops.nmspmm.spmm_heuristic(m, n, k, p.N, p.M, p.L, _torch_dtype(dtype), cc, num_sms, 16)
    return str(kernel), int(split)


def make_nm_weight(n: int, k: int, p: S.Pattern, device: str, gen, mode: str):
    """An NMWeight with col_info. 'random': values ~ N(0,1) and, per (window, vector), a uniformly
    random sorted N-subset of the M positions (as in NM-SpMM's benchmark); 'compress': prune and
    compress a random dense weight with the public API."""
    import torch
    import nmspmm

    if mode == "compress":
        w = torch.randn(n, k, device=device, generator=gen)
        try:
            packed = nmspmm.compress(w, p.N, p.M, p.L)
        except RuntimeError:  # no device implementation of prune/compress: do it on the CPU
            packed = nmspmm.compress(w.cpu(), p.N, p.M, p.L).to(device=device)
        return packed
    G, V = k // p.M, n // p.L
    r = torch.rand(G, V, p.M, device=device, generator=gen)
    idx = r.argsort(dim=-1)[..., : p.N].sort(dim=-1).values          # [G, V, N]
    indices = idx.permute(0, 2, 1).reshape(G * p.N, V).to(torch.uint8).contiguous()
    values = torch.randn(G * p.N, n, device=device, generator=gen)
    packed = nmspmm.NMWeight(values, indices, p.N, p.M, p.L, (n, k))
    return with_col_info(packed)


def with_col_info(packed):
    try:
        return packed.with_col_info()
    except RuntimeError:  # col_info has no device implementation: build it on the CPU
        import nmspmm

        cpu = replace(packed, values=packed.values[:0], indices=packed.indices.cpu())
        cols, pidx = nmspmm.col_info(cpu)
        return replace(packed, col_info=cols.to(packed.device), packed_indices=pidx.to(packed.device))


def decompress_t64(values, indices, N: int, M: int, L: int, n: int, k: int):
    """W^T [k, n] in float64 (independent of nmspmm's own decompress): row g*M + idx of window g
    receives value row g*N + s for every output column."""
    import torch

    G = k // M
    vals = values.to(torch.float64).reshape(G, N, n)
    idx = indices.reshape(G, N, n // L).to(torch.int64).repeat_interleave(L, dim=2)
    dense = torch.zeros(G, M, n, dtype=torch.float64, device=values.device)
    dense.scatter_(1, idx, vals)
    return dense.reshape(k, n)


def rel_err(y, ref) -> float:
    import torch

    d = (y.to(torch.float64) - ref).norm().item()
    r = ref.norm().item()
    return d / r if r > 0 else d


def nm_bytes(packed, kernel: str, m: int, es_x: int) -> int:
    import nmspmm

    n, k = packed.shape
    b = packed.values.numel() * packed.values.element_size() + packed.indices.numel()
    if nmspmm.kernel_info(kernel).needs_col_info and packed.col_info is not None:
        b += packed.col_info.numel()
    return b + es_x * m * (n + k)


def prune24(w):
    import torch

    n, k = w.shape
    g = w.reshape(n, k // 4, 4)
    keep = g.abs().topk(2, dim=-1).indices
    mask = torch.zeros_like(g, dtype=torch.bool).scatter_(-1, keep, True)
    return (g * mask).reshape(n, k)


# ------------------------------------------------------------------------------------ the run
class Runner:
    def __init__(self, args, st: Settings):
        import torch

        self.args, self.st = args, st
        self.device = args.device
        self.torch = torch
        self.cuda = self.device.startswith("cuda")
        props = torch.cuda.get_device_properties(torch.cuda.current_device()) if self.cuda else None
        self.num_sms = props.multi_processor_count if props else 132
        l2 = getattr(props, "L2_cache_size", 50 * 2**20) if props else 50 * 2**20
        self.timer = Timer(self.device, st.warmup, st.rep, st.graph_replays, l2, st.timings)
        self.rows: List[Dict] = []
        self.base: Dict[tuple, Dict] = {}
        self.nm: Dict[tuple, Dict] = {}
        self.gen = torch.Generator(device=self.device)
        self._copy_store: Dict[tuple, Dict[int, object]] = {}

    # -------------------------------------------------------------- helpers
    def _seed(self, *key) -> None:
        # Stable across processes (str hashes are salted per process).
        self.gen.manual_seed((zlib.crc32(repr(key).encode()) ^ self.args.seed) & 0x7FFFFFFF)

    def _copies(self, key, first, clone: Callable[[], object]) -> Callable[[int], object]:
        """Weight copies for the CUDA-graph rotation, made once per (n, k) group and reused for
        every m (dropped by ``_drop_copies``); copy 0 is the original."""
        store = self._copy_store.setdefault(key, {0: first})

        def get(i: int):
            if i not in store:
                store[i] = clone()
            return store[i]
        return get

    def _drop_copies(self, prefix=None) -> None:
        for key in [k for k in self._copy_store if prefix is None or k[0] == prefix]:
            del self._copy_store[key]

    def _graph_ok(self, m: int) -> bool:
        return self.cuda and m <= self.st.graph_max_m

    def _vlog(self, msg: str) -> None:
        if self.args.verbose:
            log(msg)

    # -------------------------------------------------------------- baselines
    def run_baselines(self, n: int, k: int, ms: List[int], xs: Dict[int, object], prog: Progress) -> None:
        torch, F = self.torch, self.torch.nn.functional
        if not (self.st.dense or self.st.semi):
            return
        self._seed("W", n, k)
        W = torch.randn(n, k, device=self.device, generator=self.gen)
        weights = {"fp32": W, "tf32": W}
        for d in ("bf16", "fp16"):
            if d in self.st.dense:
                weights[d] = W.to(_torch_dtype(d))
        semi: Dict[str, tuple] = {}
        for d in self.st.semi:
            try:
                if not self.cuda:
                    raise RuntimeError("semi-structured sparsity needs a CUDA device")
                from torch.sparse import to_sparse_semi_structured

                wp = prune24(W.to(_torch_dtype(d)))
                semi[d] = (to_sparse_semi_structured(wp), wp, None)
            except Exception as e:  # noqa: BLE001 -- a missing baseline is recorded, not fatal
                semi[d] = (None, None, f"unavailable: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
        for m in ms:
            x32 = xs[m]
            for d in self.st.dense:
                impl = f"dense_{d}"
                x = x32 if d in ("fp32", "tf32") else x32.to(_torch_dtype(d))
                w = weights[d]
                es = x.element_size()
                rec = {"status": "ok", "bytes": es * (n * k + m * (n + k)), "dtype": d}
                set_tf32(d == "tf32")
                try:
                    rec["ms"] = self.timer.bench(lambda: F.linear(x, w))
                    if self._graph_ok(m):
                        try:
                            copies = self._copies(("dense", d if d != "tf32" else "fp32"), w, w.clone)

                            def make(i, x=x, copies=copies):
                                wi = copies(i)
                                return lambda: F.linear(x, wi)
                            rec["ms_graph"], rec["graph_copies"] = self.timer.graph(
                                make, w.numel() * w.element_size(), rec["ms"])
                        except Exception as e:  # noqa: BLE001
                            rec["note"] = f"graph failed: {type(e).__name__}: {str(e)[:120]}"
                finally:
                    set_tf32(False)
                self.base[(m, n, k, impl)] = rec
                prog.update(1, f"{impl} m={m} n={n} k={k}")
            for d, (ws, wp, why) in semi.items():
                impl = f"semi24_{d}"
                es = 2
                rec = {"status": "ok", "dtype": d, "bytes": es * (n * k // 2 + m * (n + k)) + n * k // 8,
                       "note": "x padded inside torch's semi-structured linear when m is not a tile multiple"}
                if ws is None:
                    rec = {"status": "unavailable", "note": why, "dtype": d}
                else:
                    x = x32.to(_torch_dtype(d))
                    try:
                        y = F.linear(x, ws)
                        rec["rel_err"] = rel_err(y, F.linear(x, wp).to(torch.float64))
                        rec["ms"] = self.timer.bench(lambda: F.linear(x, ws))
                        if self._graph_ok(m):
                            try:
                                from torch.sparse import to_sparse_semi_structured

                                copies = self._copies(("semi", d), ws, lambda wp=wp: to_sparse_semi_structured(wp))

                                def make(i, x=x, copies=copies):
                                    wi = copies(i)
                                    return lambda: F.linear(x, wi)
                                rec["ms_graph"], rec["graph_copies"] = self.timer.graph(
                                    make, n * k * es // 2 + n * k // 8, rec["ms"], max_copies=64)
                            except Exception as e:  # noqa: BLE001
                                rec["note"] += f"; graph failed: {type(e).__name__}: {str(e)[:120]}"
                    except Exception as e:  # noqa: BLE001
                        rec = {"status": "unavailable", "dtype": d,
                               "note": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"}
                self.base[(m, n, k, impl)] = rec
                prog.update(1, f"{impl} m={m}")
        self._drop_copies()
        del W, weights, semi

    # -------------------------------------------------------------- nmspmm
    def _forced_plan(self, v: Variant, heur: Tuple[str, int]) -> Tuple[Optional[str], int]:
        import nmspmm

        hk, hs = heur
        if v.label in ("tiled", "packed"):
            other = counterpart(hk)
            if other is None:
                return None, 0
            tiled = hk if nmspmm.kernel_info(hk).family == "tiled" else other
            return (tiled if v.label == "tiled" else counterpart(tiled)), hs
        split = v.split if v.split not in (None, -1) else (
            hs if (v.kernel == hk or counterpart(v.kernel) == hk) else 1)
        return v.kernel, split

    def run_nm(self, n: int, k: int, ms: List[int], xs: Dict[int, object], prog: Progress) -> None:
        torch = self.torch
        import nmspmm

        ops = torch.ops.nmspmm
        for p in self.st.patterns:
            n_cfg = len(ms) * len(self.st.nm_dtypes) * len(self.st.variants)
            if not p.fits(n, k):
                for m in ms:
                    for d in self.st.nm_dtypes:
                        for v in self.st.variants:
                            self.nm[(m, n, k, str(p), v.label, d)] = {
                                "status": "unsupported", "dtype": d,
                                "note": f"k % M or n % L != 0 for {p}"}
                prog.update(n_cfg)
                continue
            self._seed("nm", n, k, str(p))
            packed32 = make_nm_weight(n, k, p, self.device, self.gen, self.args.weights)
            for d in self.st.nm_dtypes:
                packed = packed32 if d == "fp32" else packed32.to(dtype=_torch_dtype(d))
                wt64 = decompress_t64(packed.values, packed.indices, p.N, p.M, p.L, n, k)
                tol = self.args.tol if d == "fp32" else self.args.tol_half
                # The numerics rule: error at most twice that of F.linear on the same decompressed
                # weight in the same dtype, both against the fp64 reference.
                w_lin = wt64.t().to(_torch_dtype(d)).contiguous()
                for m in ms:
                    x = xs[m] if d == "fp32" else xs[m].to(_torch_dtype(d))
                    ref = x.to(torch.float64) @ wt64
                    err_lin = rel_err(torch.nn.functional.linear(x, w_lin), ref)
                    heur = _heuristic(m, n, k, p, self.num_sms, d)
                    for v in self.st.variants:
                        key = (m, n, k, str(p), v.label, d)
                        self.nm[key] = self._time_variant(nmspmm, ops, packed, p, v, d, m, n, k, x, ref,
                                                          heur, tol, err_lin)
                        prog.update(1, f"{p} {v.label} m={m} n={n} k={k}")
                    del ref
                del wt64, w_lin
            self._drop_copies("nm")
            del packed32
        if self.cuda:
            torch.cuda.empty_cache()

    def _time_variant(self, nmspmm, ops, packed, p, v, d, m, n, k, x, ref, heur, tol, err_lin) -> Dict:
        rec: Dict = {"dtype": d, "heuristic_kernel": heur[0], "heuristic_split_k": heur[1]}
        if v.label == "auto":
            kernel, split = heur
            make = lambda pk: (lambda: nmspmm.spmm(x, pk))  # noqa: E731
        else:
            kernel, split = self._forced_plan(v, heur)
            if kernel is None:
                return dict(rec, status="n/a", note=f"no packed/non-packed pair for heuristic kernel "
                                                    f"{heur[0]}")

            def make(pk, kernel=kernel, split=split):
                return lambda: ops.spmm_with_plan(x, pk.values, pk.indices, p.N, p.M, p.L, None, pk.col_info,
                                                  pk.packed_indices, kernel, split)
        # A sweep keeps >= 4 k-blocks of 64 per split (smaller splits are not meaningful).
        splits = tuple(s for s in SWEEP_SPLITS if s == 1 or k // (64 * s) >= 4) if v.split == -1 else (split,)
        best = None
        for s in splits:
            fn = make(packed) if v.label == "auto" else make(packed, kernel, s)
            try:
                y = fn()
            except RuntimeError as e:
                msg = str(e).splitlines()[0]
                if "cannot run" in msg or "split_k" in msg or "unknown kernel" in msg:
                    if best is None and s == splits[-1]:
                        return dict(rec, kernel=kernel, split_k=s, status="unsupported", note=msg[:200])
                    continue
                raise
            err = rel_err(y, ref)
            if not (err < tol):  # also catches NaN
                raise BenchAbort(
                    f"nmspmm output MISMATCH: pattern {p} variant {v.label} kernel "
                    f"{kernel} split_k={s} dtype={d} m={m} n={n} k={k}: "
                    f"relative Frobenius error {err:.3e} >= tol {tol:.1e}")
            del y
            ms_ = self.timer.bench(fn)
            if best is None or ms_ < best[0]:
                best = (ms_, s, err)
        ms_, split, err = best
        rec.update(status="ok", kernel=kernel, split_k=split, ms=ms_, rel_err=err,
                   bytes=nm_bytes(packed, kernel, m, x.element_size()))
        rec["rel_err_linear"] = err_lin
        rec["err_over_linear"] = err / err_lin if err_lin > 0 else (0.0 if err == 0 else float("inf"))
        if v.split == -1:
            rec["note"] = f"best of split_k {splits}"
        if (v.label == "auto" and d != "fp32" and m >= 17 and p.M in (8, 16, 32, 64)
                and p.L in (16, 32, 64, 128)):
            # nmspmm.spmm takes the native tensor-core prefill kernel (csrc/cuda/spmm_half_prefill.cpp),
            # not the float32 plan recorded in kernel / split_k.
            rec["note"] = "native fp16/bf16 tensor-core prefill (tc_prefill); kernel/split_k are the fp32 plan's"
        if d != "fp32" and above_linear(err, err_lin):
            rec["note"] = (rec.get("note", "") + f"; error {err:.2e} above twice F.linear's {err_lin:.2e}").lstrip("; ")
        if self._graph_ok(m):
            try:
                copies = self._copies(("nm", str(p), d), packed, lambda: replace(
                    packed, values=packed.values.clone(), indices=packed.indices.clone(),
                    col_info=packed.col_info.clone(), packed_indices=packed.packed_indices.clone()))

                def mk(i):
                    pk = copies(i)
                    return make(pk) if v.label == "auto" else make(pk, kernel, split)
                rec["ms_graph"], rec["graph_copies"] = self.timer.graph(
                    mk, packed.nbytes(with_metadata=True), ms_)
            except Exception as e:  # noqa: BLE001
                rec["note"] = (rec.get("note", "") + f"; graph failed: {type(e).__name__}: {str(e)[:120]}").lstrip("; ")
        self._vlog(f"  {p} {v.label:8s} m={m:5d} n={n:6d} k={k:6d}  {ms_:.4f} ms  "
                   f"[{kernel} s{split}] err {err:.1e}"
                   + (f"  graph {rec['ms_graph']:.4f} ms" if rec.get("ms_graph") else ""))
        return rec

    # -------------------------------------------------------------- rows
    def emit_rows(self, entries: List[S.Shape]) -> None:
        for s in entries:
            m, n, k = s.m, s.n, s.k
            common = {"suite": s.suite, "model": s.model, "layer": s.layer, "m": m, "n": n, "k": k}
            for impl in [f"dense_{d}" for d in self.st.dense] + [f"semi24_{d}" for d in self.st.semi]:
                rec = self.base.get((m, n, k, impl))
                if rec is None:
                    continue
                row = dict(common, impl=impl, variant="", **rec)
                self._derive(row, s.flops, 1.0)
                self.rows.append(row)
            for p in self.st.patterns:
                for d in self.st.nm_dtypes:
                    for v in self.st.variants:
                        rec = self.nm.get((m, n, k, str(p), v.label, d))
                        if rec is None:
                            continue
                        row = dict(common, impl="nmspmm", variant=v.label, pattern=str(p), N=p.N, M=p.M,
                                   L=p.L, sparsity=p.sparsity, ideal=p.ideal, **rec)
                        self._derive(row, s.flops, p.N / p.M)
                        self.rows.append(row)

    @staticmethod
    def _derive(row: Dict, flops: int, density: float) -> None:
        t, tg, b = row.get("ms"), row.get("ms_graph"), row.get("bytes")
        if t:
            row["tflops_eff"] = flops / (t * 1e-3) / 1e12
            row["tflops_exec"] = flops * density / (t * 1e-3) / 1e12
            if b:
                row["gbps"] = b / (t * 1e-3) / 1e9
        if tg and b:
            row["gbps_graph"] = b / (tg * 1e-3) / 1e9

    # -------------------------------------------------------------- main loop
    def precision_check(self) -> Dict:
        """Prove the TF32 switch works: fp32 matmul error with TF32 off must be ~1e-7 and with
        TF32 on ~1e-4 (TF32 has a 10-bit mantissa)."""
        torch = self.torch
        if not self.cuda:
            return {"skipped": "cpu"}
        a = torch.randn(1024, 1024, device=self.device, generator=self.gen)
        b = torch.randn(1024, 1024, device=self.device, generator=self.gen)
        ref = a.double() @ b.double()
        out = {}
        for on in (False, True):
            set_tf32(on)
            out["tf32_on" if on else "tf32_off"] = rel_err(a @ b, ref)
        set_tf32(False)
        if not out["tf32_off"] < 1e-5:
            raise BenchAbort(f"TF32 could not be turned off: fp32 matmul error {out['tf32_off']:.2e} "
                             f"({tf32_setting()})")
        out["tf32_effective"] = out["tf32_on"] > 10 * out["tf32_off"]
        return out

    def run(self, prog: Progress) -> None:
        torch = self.torch
        for gi, ((n, k), entries) in enumerate(group_shapes(self.st.shapes).items()):
            ms = sorted({s.m for s in entries})
            xs = {}
            for m in ms:
                self._seed("x", m, k)
                xs[m] = torch.randn(m, k, device=self.device, generator=self.gen)
            t0 = time.time()
            self.run_baselines(n, k, ms, xs, prog)
            self.run_nm(n, k, ms, xs, prog)
            self.emit_rows(entries)
            del xs
            if self.cuda:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            self._group_line(gi, n, k, ms, time.time() - t0)

    def _group_line(self, gi: int, n: int, k: int, ms: List[int], secs: float) -> None:
        m = ms[-1]
        b = self.base.get((m, n, k, "dense_fp32"), {}).get("ms")
        cells = []
        for p in self.st.patterns:
            rec = self.nm.get((m, n, k, str(p), self.st.variants[0].label, self.st.nm_dtypes[0]), {})
            t = rec.get("ms")
            cells.append(f"{p.N}:{p.M} {t:.3f}ms" + (f" ({b / t:.2f}x)" if (b and t) else "") if t else f"{p.N}:{p.M} -")
        if sys.stderr.isatty():
            sys.stderr.write("\n")
        log(f"[{gi + 1}] n={n} k={k} m={ms[0]}..{m} ({secs:.1f}s): at m={m} fp32 "
                + (f"{b:.3f}ms" if b else "-") + " | " + " | ".join(cells))


def total_steps(st: Settings) -> int:
    tot = 0
    for (n, k), entries in group_shapes(st.shapes).items():
        nm_ = len({s.m for s in entries})
        tot += nm_ * (len(st.dense) + len(st.semi))
        tot += nm_ * len(st.patterns) * len(st.nm_dtypes) * len(st.variants)
    return tot


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        st = resolve(args)
    except ValueError as e:
        build_parser().error(str(e))
    if args.dry_run:
        dry_run(args, st)
        return 0

    import torch

    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            log("error: no CUDA device (use --dry-run to plan, or --device cpu for a smoke test)")
            return 2
        import nmspmm

        if not nmspmm.cuda_kernels_built():
            log("error: this nmspmm build has no CUDA kernels (rebuild with nvcc: "
                "pip install --no-build-isolation -e .)")
            return 2
    else:
        log("WARNING: --device cpu runs the CPU reference ops; timings are meaningless (smoke test only)")
    out = args.out or default_out_dir("spmm" + ("_quick" if args.quick else ""))
    os.makedirs(out, exist_ok=True)
    set_tf32(False)
    env = collect_env(args.device)
    runner = Runner(args, st)
    env["timer"] = runner.timer.kind
    env["precision_check"] = runner.precision_check()
    settings = {
        "suite": "custom" if args.shapes else args.suite, "quick": args.quick,
        "patterns": [str(p) for p in st.patterns], "dense": st.dense, "semi24": st.semi,
        "nm_dtypes": st.nm_dtypes, "variants": [v.label for v in st.variants],
        "warmup_ms": st.warmup, "rep_ms": st.rep, "graph_max_m": st.graph_max_m,
        "graph_replays": st.graph_replays, "weights": args.weights, "tol": args.tol,
        "tol_half": args.tol_half, "seed": args.seed, "num_sms_for_heuristic": runner.num_sms,
        "models_shape_source": {m: S.shape_source(m) for m in S.LLAMA_MODELS if S.shape_source(m) != "not derived yet"},
    }
    est = plan_and_estimate(st)
    log(f"nmspmm bench: {env.get('gpu_name', args.device)}, torch {env['torch']}, triton {env['triton']}, "
        f"nmspmm {env['nmspmm_git']['sha'][:10]}{'+dirty' if env['nmspmm_git']['dirty'] else ''}")
    log(f"{est['unique_mnk']} unique (m,n,k), {total_steps(st)} timed configs; estimate "
        f"~{est['est_seconds'] / 60:.1f} min; results -> {out}")
    sampler = ClockSampler(torch.cuda.current_device() if runner.cuda else 0).start() if runner.cuda else None
    prog = Progress(total_steps(st), "bench")
    t0 = time.time()
    aborted = None
    try:
        runner.run(prog)
    except BenchAbort as e:
        aborted = str(e)
    finally:
        prog.close()
        if sampler is not None:
            sampler.stop()
            env["clock_under_load"] = sampler.summary()
        env["wall_seconds"] = round(time.time() - t0, 1)
        try:  # each row's fraction of speed of light; a fault here must not cost the run its results
            env["sol_tensor_tflops"] = add_sol_columns(runner.rows)
        except Exception as e:  # noqa: BLE001
            env["sol_error"] = repr(e)
            log(f"speed-of-light columns not added: {e!r}")
        summary = summarize(runner.rows, env) if runner.rows else {}
        result = {"env": env, "settings": settings, "aborted": aborted, "summary": summary, "rows": runner.rows}
        write_csv(os.path.join(out, "bench_spmm.csv"), runner.rows, CSV_COLUMNS + SOL_COLUMNS)
        write_json(os.path.join(out, "bench_spmm.json"), result)
    if aborted:
        log("\n" + "!" * 100 + f"\nABORTED: {aborted}\npartial results written to {out}\n" + "!" * 100)
        return 3
    log("")
    log(format_summary(summary))
    cl = env.get("clock_under_load") or {}
    log(f"\nSM clock under load: median {cl.get('sm_clock_mhz_median')} MHz "
        f"(min {cl.get('sm_clock_mhz_min')}, max {cl.get('sm_clock_mhz_max')}, {cl.get('n_samples', 0)} samples); "
        f"precision check {env['precision_check']}")
    half = [r for r in runner.rows if r.get("dtype") != "fp32" and r.get("err_over_linear") not in (None, "")]
    if half:
        over = [r for r in half if above_linear(float(r["rel_err"]), float(r["rel_err_linear"]))]
        log(f"numerics: {len(over)} of {len(half)} bf16/fp16 nmspmm rows above twice F.linear's error "
            f"(+2^-12); largest ratio {max(float(r['err_over_linear']) for r in half):.2f}")
    log(f"wrote {out}/bench_spmm.csv and bench_spmm.json ({len(runner.rows)} rows) in {env['wall_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
