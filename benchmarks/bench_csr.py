"""Unstructured sparsity in CSR (nmspmm.CSRWeight, torch.ops.nmspmm.csr_spmm) against what a user
would otherwise run: cuBLAS on the dense weight (F.linear, same dtype), torch's CSR path
(torch.sparse.mm, i.e. cuSPARSE; in fp32 where torch has no 16-bit CSR product on the device) and
nmspmm's element-wise N:M at about the same density (N:32, L = 1).

Matrices (DLMC-like, built here): Llama layer shapes (out x in) pruned four ways at 50-98%:
"magnitude" (the largest |w| of each row: nonzeros spread evenly), "random" (each entry kept with
probability 1 - s), "heavy" (nonzeros per row heavy-tailed, as variational dropout leaves them:
row fractions from a Pareto law scaled to the target, capped at the row) and "even" (the heavy
matrix's nonzero count spread evenly, every row the same count: heavy_us / even_us is the load
balance). Per cell: microseconds per call (CUDA graphs with the weights cycled past L2 for nmspmm
and cuBLAS; torch CSR eagerly, its calls allocate), speedups, the CSR bytes' GB/s, r (dense bytes
over CSR bytes) and the fraction of r reached (speedup over cuBLAS / r), and the error against an
fp32 product with the dense weight.

    python benchmarks/bench_csr.py --out DIR            # every cell -> CSV + console
    python benchmarks/bench_csr.py --quick              # 4096 x 4096, m = 1, 256
    python benchmarks/bench_csr.py --decode             # six Llama layers, m = 1, 8, 16, 70-98%
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

import nmspmm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_decode_half as bdh  # noqa: E402
import common  # noqa: E402
from nmspmm.csr import _trusted as csr_trusted  # noqa: E402
from nmspmm.format import _trusted as nm_trusted  # noqa: E402

SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008)]
DECODE_SHAPES = [(n, k) for _, n, k in bdh.SHAPES]  # the six Llama-2-7B / Llama-3-8B layers
SPARSITIES = [0.5, 0.7, 0.8, 0.9, 0.95, 0.98]
DECODE_SPARSITIES = [0.7, 0.8, 0.9, 0.95, 0.98]
STRUCTURES = ["magnitude", "random", "heavy", "even"]
MS = [1, 16, 256, 4096]
DECODE_MS = [1, 8, 16]
ROTATE_BYTES = 256e6
ops = torch.ops.nmspmm


def make_mask(structure: str, out: int, inp: int, s: float, g: torch.Generator, w: torch.Tensor) -> torch.Tensor:
    """The keep-mask of one structure at sparsity s ("even": s is the heavy matrix's own sparsity,
    every row keeping the same count at random positions)."""
    if structure == "magnitude":
        return nmspmm.pruning.unstructured_mask(w.abs(), s)
    if structure == "even":
        return nmspmm.pruning.unstructured_mask(torch.rand(out, inp, generator=g, device=w.device), s)
    if structure == "random":
        return torch.rand(out, inp, generator=g, device=w.device) >= s
    # heavy: row j keeps a fraction f_j ~ Pareto(alpha = 1.5), scaled so that the mean is 1 - s
    f = (torch.rand(out, 1, generator=g, device=w.device).clamp_min(1e-6) ** (-1 / 1.5))
    f = (f / f.mean() * (1 - s)).clamp(max=1.0)
    return torch.rand(out, inp, generator=g, device=w.device) < f


def torch_csr_call(w: nmspmm.CSRWeight, x: torch.Tensor):
    """torch's CSR product in the dtype if it runs there, else in fp32: (fn, dtype)."""
    for dtype in (x.dtype, torch.float32):
        t = w.to(dtype=dtype).to_sparse_csr()
        xt = x.to(dtype).t().contiguous()
        try:
            torch.sparse.mm(t, xt)
            torch.cuda.synchronize()
            return (lambda t=t, xt=xt: torch.sparse.mm(t, xt)), dtype
        except (RuntimeError, NotImplementedError):
            continue
    return None, None


def clone_csr(w):
    return csr_trusted(crow_indices=w.crow_indices.clone(), col_indices=w.col_indices.clone(),
                       values=w.values.clone(), shape=w.shape, max_row_nnz=w.max_row_nnz)


def clone_nm(w):
    return nm_trusted(nmspmm.NMWeight, values=w.values.clone(), indices=w.indices.clone(), N=w.N, M=w.M, L=w.L,
                      shape=w.shape, tc_meta=None if w.tc_meta is None else w.tc_meta.clone())


def nm_pattern(s: float):
    N = max(1, round(32 * (1 - s)))
    return N, 32


def run(args) -> list:
    dev = "cuda"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    g = torch.Generator(device=dev).manual_seed(args.seed)
    rows = []
    for (out, inp) in args.shapes:
        w_dense = torch.randn(out, inp, device=dev, generator=g).to(dtype)
        for s in args.sparsities:
            heavy_density = None
            for structure in args.structures:
                # "even" spreads the heavy matrix's nonzeros (drawn just before it) over the rows.
                s_eff = 1 - heavy_density if structure == "even" and heavy_density is not None else s
                mask = make_mask(structure, out, inp, s_eff, g, w_dense)
                w = nmspmm.CSRWeight.from_dense(w_dense, mask=mask)
                if structure == "heavy":
                    heavy_density = w.density
                dense_ref = w.to_dense().float()
                r = out * inp * w_dense.element_size() / w.nbytes()
                copies = max(1, int(ROTATE_BYTES // max(1, w.nbytes())))
                ws = [w] + [clone_csr(w) for _ in range(copies - 1)]
                dcopies = max(1, int(ROTATE_BYTES // (out * inp * w_dense.element_size())))
                dws = [w_dense] + [w_dense.clone() for _ in range(dcopies - 1)]
                N, M = nm_pattern(s)
                nmw = nmspmm.compress(w_dense, N, M, 1) if args.nm else None
                nm_copies = max(1, int(ROTATE_BYTES // max(1, nmw.nbytes(True)))) if nmw is not None else 0
                nmws = [nmw] + [clone_nm(nmw) for _ in range(nm_copies - 1)] if nmw is not None else []
                for m in args.m:
                    x = torch.randn(m, inp, device=dev, generator=g).to(dtype)
                    y = nmspmm.spmm(x, w)
                    ref = x.float() @ dense_ref.T
                    err = ((y.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
                    t_csr = bdh.time_graph([lambda wi=wi: nmspmm.spmm(x, wi) for wi in ws])
                    t_dense = bdh.time_graph([lambda wi=wi: F.linear(x, wi) for wi in dws])
                    fn, csr_dtype = torch_csr_call(w, x)
                    t_torch = bdh.time_eager([fn]) if fn is not None else float("nan")
                    t_nm = bdh.time_graph([lambda wi=wi: nmspmm.spmm(x, wi) for wi in nmws]) if nmws else float("nan")
                    row = {
                        "out": out, "in": inp, "structure": structure, "sparsity": s, "density": round(w.density, 5),
                        "max_row_nnz": int((w.crow_indices[1:] - w.crow_indices[:-1]).max()), "m": m,
                        "dtype": args.dtype, "csr_us": round(t_csr, 2), "cublas_us": round(t_dense, 2),
                        "torch_csr_us": round(t_torch, 2), "torch_csr_dtype": str(csr_dtype).replace("torch.", ""),
                        "nm_pattern": f"{N}:{M}:1" if nmws else "", "nm_us": round(t_nm, 2),
                        "over_cublas": round(t_dense / t_csr, 3), "over_torch_csr": round(t_torch / t_csr, 3),
                        "over_nm": round(t_nm / t_csr, 3) if nmws else float("nan"),
                        "csr_GBps": round(w.nbytes() / t_csr / 1e3, 1), "r": round(r, 2),
                        "frac_of_r": round(t_dense / t_csr / r, 3), "rel_err": f"{err:.2e}",
                    }
                    rows.append(row)
                    common.log(f"{out:5d}x{inp:<5d} {structure:9s} s={s:.2f} m={m:4d}: csr {t_csr:9.1f} us "
                               f"({row['csr_GBps']:6.0f} GB/s) | cuBLAS {t_dense:8.1f} ({row['over_cublas']:.2f}x) | "
                               f"torch CSR[{row['torch_csr_dtype']}] {t_torch:9.1f} ({row['over_torch_csr']:.2f}x) | "
                               f"N:M {row['nm_pattern']} {t_nm:8.1f} | err {err:.1e}")
                del ws, dws, nmws
                torch.cuda.empty_cache()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    ap.add_argument("--m", default=None, help="comma list of token counts")
    ap.add_argument("--sparsities", default=None, help="comma list, e.g. 0.9,0.98")
    ap.add_argument("--shapes", default=None, help="comma list of OUTxIN layer shapes, e.g. 4096x4096")
    ap.add_argument("--structures", default=None, help=f"comma list of {', '.join(STRUCTURES)}")
    ap.add_argument("--no-nm", dest="nm", action="store_false", help="leave out the N:M comparison")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--decode", action="store_true",
                    help="the decode table: six Llama layers, m = 1, 8, 16, magnitude and heavy rows, 70-98%%")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.shapes:
        args.shapes = [tuple(int(v) for v in sh.split("x")) for sh in args.shapes.split(",")]
    else:
        args.shapes = SHAPES[:1] if args.quick else DECODE_SHAPES if args.decode else SHAPES
    default_m = [1, 256] if args.quick else DECODE_MS if args.decode else MS
    args.m = [int(v) for v in args.m.split(",")] if args.m else default_m
    default_s = DECODE_SPARSITIES if args.decode else SPARSITIES
    args.sparsities = [float(v) for v in args.sparsities.split(",")] if args.sparsities else default_s
    args.structures = args.structures.split(",") if args.structures else (
        ["magnitude", "heavy"] if args.decode else STRUCTURES)
    rows = run(args)
    out = args.out or common.default_out_dir("csr")
    os.makedirs(out, exist_ok=True)
    common.write_csv(os.path.join(out, "bench_csr.csv"), rows)
    env = common.collect_env()
    common.write_json(os.path.join(out, "bench_csr.json"), {"env": env, "rows": rows})
    common.log(f"wrote {out}/bench_csr.csv ({len(rows)} rows)")


if __name__ == "__main__":
    main()
