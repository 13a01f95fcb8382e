"""Speed of light per benchmark cell: the time a cell cannot beat on the card, and the bound of the
plan's own design.

For a call y[m, n] = x[m, k] @ W[n, k]^T with N:M (vector length L) sparse W:

* compute: the useful MACs, m * n * k * N / M, at the card's measured tensor rate (cuBLAS at its best
  shape; bf16 and fp16 share the tensor cores, so the faster of the two). 2:4 in 16 bits runs on the
  sparse tensor cores, which skip the zeros at the dense rate of useful MACs, so the same formula holds:
  its limit is half the dense product's time.
* memory: the bytes the call must move once, the resident weight (values, plus the metadata that
  the plan reads: `tc_meta` for 2:4 in 16 bits, one index byte per kept value per vector
  otherwise) plus x and y, at the measured HBM rate (a device-to-device copy).
* sol = max(compute, memory); every row reports sol_frac = sol / measured time (1.0 = at the limit).

Design bounds explain where a plan sits below that limit. The one modelled here is the `sparse_tc`
family's shared-memory reads: per dense-equivalent MAC, a block of 128 outputs x BN tokens has its
wgmma read 1/32 B of x (each m64 instruction reads the whole x tile) and 1/BN B of the weight. At
128 B/clk/SM against 2048 dense MAC/clk/SM this bounds the kernel at 16 * bytes-per-MAC times the
dense product's time at the full wgmma rate: 0.5625 for the 256-token tile, 0.625 for 128, 0.75
for 64 and 1.5 for 16. A wgmma.sp loop with resident operands reaches exactly this (88.8%, 80.0%
and 66.6% of the sparse rate for n = 256, 128, 64 on an H200), and the tensor copies' writes into
shared memory do not count against it (docs/kernels.md, "2:4 on the sparse tensor cores").
The full wgmma rate is cuBLAS's best rate divided by the tensor-pipe fraction ncu measured for it
(--cublas-pipe, 0.94 on the H200 at 8192 x 8192, m = 4096).

Usage:
    python benchmarks/speed_of_light.py CSV [--peaks PEAKS.json] [--out OUT.csv]
    python benchmarks/speed_of_light.py --measure --peaks-out PEAKS.json     (on the GPU)

Without --peaks, the tensor rate is the fastest cuBLAS row of the CSV itself in each dtype (the
same run), and the HBM rate is --hbm-gbps (default: 4300 GB/s, the device-to-device copy measured
on the H200 machines here).
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
from typing import Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import geomean  # noqa: E402

ELT = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}
SMEM_BYTES_PER_CLK_SM = 128.0   # Hopper shared-memory reads by the wgmma (measured: docs/kernels.md)
DENSE_MAC_PER_CLK_SM = 2048.0   # bf16 / fp16 wgmma, dense
DEFAULT_HBM_GBPS = 4300.0


def uses_sparse_tensor_cores(N: int, M: int, dtype: str) -> bool:
    return (N, M) == (2, 4) and dtype in ("bf16", "fp16")


def min_bytes(m: int, n: int, k: int, N: int, M: int, L: int, dtype: str) -> int:
    """Bytes a call must move at least once: resident weight, x and y."""
    e = ELT[dtype]
    kept = n * (k // M) * N
    if uses_sparse_tensor_cores(N, M, dtype):
        meta = math.ceil(k / 32) * math.ceil(n / L) * 4
    else:
        meta = math.ceil(n / L) * (k // M) * N
    return kept * e + meta + m * k * e + m * n * e


def compute_us(m: int, n: int, k: int, N: int, M: int, tflops: float) -> float:
    """Useful MACs at the measured tensor rate."""
    return 2.0 * m * n * k * N / M / (tflops * 1e12) * 1e6


def sparse_tc_bytes_per_mac(tile_tokens: int) -> float:
    """Shared-memory bytes the wgmma reads per dense-equivalent MAC of a sparse_tc block (see the
    module text): the x tile per m64 instruction, and the weight."""
    return 1.0 / 32 + 1.0 / tile_tokens


def sparse_tc_tile_tokens(kernel: str) -> Optional[int]:
    # sparse_tc_{bf16,f16}_{T}x128_sm90a
    if not kernel.startswith("sparse_tc_"):
        return None
    return int(kernel.split("_")[3].split("x")[0])


def sparse_tc_smem_us(m: int, n: int, k: int, tile_tokens: int, wgmma_tflops: float) -> float:
    """The shared-memory bound of a sparse_tc plan: a multiple of the dense product's time at the
    full wgmma rate."""
    dense_peak_us = 2.0 * m * n * k / (wgmma_tflops * 1e12) * 1e6
    return dense_peak_us * DENSE_MAC_PER_CLK_SM * sparse_tc_bytes_per_mac(tile_tokens) / SMEM_BYTES_PER_CLK_SM


def peaks_from_rows(rows: List[Dict[str, str]]) -> Dict[str, float]:
    """Fastest cuBLAS row per dtype of a bench_spmm CSV (TF/s); bf16 and fp16 take the faster."""
    best: Dict[str, float] = {}
    for r in rows:
        if str(r.get("impl", "")).startswith("dense_") and r.get("status") == "ok" and r.get("tflops_eff") not in (None, ""):
            best[r["dtype"]] = max(best.get(r["dtype"], 0.0), float(r["tflops_eff"]))
    return half_shared(best)


def half_shared(best: Dict[str, float]) -> Dict[str, float]:
    half = max((best[d] for d in ("bf16", "fp16") if d in best), default=None)
    return {d: (half if d in ("bf16", "fp16") else v) for d, v in best.items()}


def cell_pattern(r: Dict) -> Optional[tuple]:
    """(N, M, L) of a bench_spmm row: the dense rows are 1:1, PyTorch's 2:4 rows 2:4 L = 1."""
    impl = str(r.get("impl", ""))
    if impl.startswith("dense_"):
        return 1, 1, 1
    if impl.startswith("semi24_"):
        return 2, 4, 1
    if r.get("N") in (None, "") or r.get("M") in (None, ""):
        return None
    return int(r["N"]), int(r["M"]), int(r["L"])


def cell_sol(r: Dict, tensor_tflops: Dict[str, float], hbm_gbps: float,
             cublas_pipe: float = 0.94) -> Optional[Dict[str, object]]:
    """Speed of light (and the design bound where one is modelled) of one timed bench_spmm row."""
    pat = cell_pattern(r)
    dt = str(r.get("dtype", ""))
    if pat is None or dt not in tensor_tflops or r.get("status") != "ok" or r.get("ms") in (None, ""):
        return None
    m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
    N, M, L = pat
    t_us = float(r["ms"]) * 1e3
    c_us = compute_us(m, n, k, N, M, tensor_tflops[dt])
    b_us = min_bytes(m, n, k, N, M, L, dt) / (hbm_gbps * 1e9) * 1e6
    sol = max(c_us, b_us)
    row = {"sol_us": round(sol, 3), "sol_bound": "compute" if c_us >= b_us else "memory",
           "sol_frac": round(sol / t_us, 4), "design_us": "", "design_frac": ""}
    tt = sparse_tc_tile_tokens(str(r.get("kernel") or ""))
    if tt is not None:
        d_us = max(sparse_tc_smem_us(m, n, k, tt, tensor_tflops[dt] / cublas_pipe), b_us)
        row.update(design_us=round(d_us, 3), design_frac=round(d_us / t_us, 4))
    return row


SOL_COLUMNS = ["sol_us", "sol_bound", "sol_frac", "design_us", "design_frac"]


def add_sol_columns(rows: List[Dict], hbm_gbps: float = DEFAULT_HBM_GBPS) -> Dict[str, float]:
    """Adds SOL_COLUMNS to every timed row of a bench_spmm run, the tensor rate taken from the
    run's own fastest cuBLAS rows; returns those rates."""
    tflops = peaks_from_rows(rows)
    for r in rows:
        r.update(cell_sol(r, tflops, hbm_gbps) or {c: "" for c in SOL_COLUMNS})
    return tflops


def annotate(rows: List[Dict[str, str]], tensor_tflops: Dict[str, float], hbm_gbps: float,
             cublas_pipe: float = 0.94) -> List[Dict[str, object]]:
    """The nmspmm rows of a bench_spmm CSV with their speed of light and design bound."""
    out = []
    for r in rows:
        if r.get("impl") != "nmspmm":
            continue
        sol = cell_sol(r, tensor_tflops, hbm_gbps, cublas_pipe)
        if sol is None:
            continue
        out.append({"m": int(r["m"]), "n": int(r["n"]), "k": int(r["k"]), "dtype": r["dtype"],
                    "pattern": r["pattern"], "kernel": r.get("kernel", ""), "split_k": r.get("split_k", ""),
                    "us": round(float(r["ms"]) * 1e3, 3), **sol})
    return out


def summary(rows: List[Dict[str, object]]) -> str:
    lines = ["| dtype | pattern | m | cells | sol_frac geomean (min-max) | design_frac geomean (min-max) |",
             "|---|---|---|---|---|---|"]
    keys = sorted({(r["dtype"], r["pattern"], r["m"]) for r in rows}, key=lambda t: (t[0], t[1], t[2]))
    for dt, pat, m in keys:
        sel = [r for r in rows if (r["dtype"], r["pattern"], r["m"]) == (dt, pat, m)]
        s = [float(r["sol_frac"]) for r in sel]
        d = [float(r["design_frac"]) for r in sel if r["design_frac"] != ""]
        dtxt = f"{geomean(d):.2f} ({min(d):.2f}-{max(d):.2f})" if d else "-"
        lines.append(f"| {dt} | {pat} | {m} | {len(sel)} | {geomean(s):.2f} ({min(s):.2f}-{max(s):.2f}) | {dtxt} |")
    return "\n".join(lines)


def measure_peaks() -> Dict[str, object]:
    """cuBLAS at large shapes per dtype and a device-to-device copy, on the current GPU."""
    import torch

    def best_ms(fn, reps=10):
        for _ in range(3):
            fn()
        ts = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            ts.append(a.elapsed_time(b))
        return min(ts)

    peaks: Dict[str, object] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "tensor_tflops": {}}
    for name, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        best = 0.0
        for (m, n, k) in ((8192, 8192, 8192), (16384, 8192, 8192), (8192, 16384, 4096)):
            x = torch.randn(m, k, device="cuda", dtype=dt)
            w = torch.randn(n, k, device="cuda", dtype=dt)
            ms = best_ms(lambda: torch.nn.functional.linear(x, w))
            best = max(best, 2.0 * m * n * k / (ms * 1e-3) / 1e12)
        peaks["tensor_tflops"][name] = round(best, 1)
    src = torch.empty(2 ** 31, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = best_ms(lambda: dst.copy_(src))
    peaks["hbm_gbps"] = round(2 * src.numel() / (ms * 1e-3) / 1e9, 1)  # bytes read + written
    return peaks


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="?", help="a bench_spmm.py CSV")
    ap.add_argument("--peaks", help="a JSON written by --measure (tensor_tflops per dtype, hbm_gbps)")
    ap.add_argument("--hbm-gbps", type=float, default=DEFAULT_HBM_GBPS)
    ap.add_argument("--cublas-pipe", type=float, default=0.94,
                    help="tensor-pipe fraction of cuBLAS at its best shape (ncu), for the design bounds")
    ap.add_argument("--out", help="write the annotated rows here (CSV)")
    ap.add_argument("--measure", action="store_true", help="measure the peaks on this GPU")
    ap.add_argument("--peaks-out", help="with --measure: write them here")
    a = ap.parse_args(argv)
    if a.measure:
        p = measure_peaks()
        print(json.dumps(p, indent=1))
        if a.peaks_out:
            with open(a.peaks_out, "w") as f:
                json.dump(p, f, indent=1)
        if not a.csv:
            return 0
    if not a.csv:
        ap.error("a CSV is needed (or --measure)")
    with open(a.csv) as f:
        rows = list(csv.DictReader(f))
    if a.peaks:
        with open(a.peaks) as f:
            p = json.load(f)
        tflops, hbm = half_shared(p["tensor_tflops"]), float(p["hbm_gbps"])
    else:
        tflops, hbm = peaks_from_rows(rows), a.hbm_gbps
    out = annotate(rows, tflops, hbm, a.cublas_pipe)
    if not out:
        print("no nmspmm rows with a measured dtype peak", file=sys.stderr)
        return 1
    print(f"tensor TF/s {tflops}, HBM {hbm:.0f} GB/s")
    print(summary(out))
    if a.out:
        with open(a.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(out[0]))
            w.writeheader()
            w.writerows(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
