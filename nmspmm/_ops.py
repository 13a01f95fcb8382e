"""Loads the compiled op library and registers what lives in Python: the fake (meta) kernels for
torch.compile. The schemas are in csrc/nmspmm_ops.cpp; autograd of ``spmm``, ``spmm_with_plan`` and
``csr_spmm`` (the input and the bias; the weight is frozen) in csrc/autograd.cpp."""
from __future__ import annotations

import functools

import torch

from . import _C  # noqa: F401  (loading the extension registers torch.ops.nmspmm.*)

# Mirrors csrc/pattern.h: the packing metadata's column-tile width and k-block depth.
PACK_TILE_N = 128
PACK_K_BLOCK = 64

ops = torch.ops.nmspmm


def _cdiv(a, b):
    return (a + b - 1) // b


# The fake kernels check what the real ones check (csrc/checks.h) that does not need the data:
# devices, dtypes, ranks, shapes and the pattern, with the same messages, so that a call refused on
# a real device is refused under torch.compile and on meta tensors too. torch._check keeps a
# symbolic size symbolic (it becomes a runtime assertion instead of a guard).
_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _is_pow2(v):
    return v > 0 and (v & (v - 1)) == 0


def _check_pattern(N, M, L):
    torch._check(_is_pow2(M) and 2 <= M <= 64,
                 lambda: f"nmspmm: M must be a power of two in [2, 64], got M={M}")
    torch._check(1 <= N <= M, lambda: f"nmspmm: N must satisfy 1 <= N <= M, got N={N}, M={M}")
    torch._check(_is_pow2(L) and L <= 128, lambda: f"nmspmm: L must be a power of two in [1, 128], got L={L}")


def _check_same_device(op, first, *named):
    """Every (name, tensor) of ``named`` (None skipped) is on ``first``'s device."""
    fname, ft = first
    for name, t in named:
        if t is not None:
            torch._check(t.device == ft.device,
                         lambda: f"nmspmm.{op}: {name} is on {t.device} but {fname} is on {ft.device}")


def _check_weight(weight, N, M, L):
    _check_pattern(N, M, L)
    torch._check(weight.dim() == 2,
                 lambda: f"nmspmm: weight must be 2-D [out_features, in_features], got {weight.dim()}-D")
    torch._check(weight.dtype in _FLOAT_DTYPES,
                 lambda: f"nmspmm: weight must be float32, float16 or bfloat16, got {weight.dtype}")
    torch._check(weight.shape[1] % M == 0,
                 lambda: f"nmspmm: weight in_features ({weight.shape[1]}) must be divisible by M={M}")
    torch._check(weight.shape[0] % L == 0,
                 lambda: f"nmspmm: weight out_features ({weight.shape[0]}) must be divisible by L={L}")


def _indices_compact(values, indices):
    """Mirror of checks.h::indices_compact: the compact 2:4 form [0, out/L] (positions in tc_meta)."""
    return values.dim() == 2 and indices.dim() == 2 and values.shape[0] > 0 and indices.shape[0] == 0


def _check_compressed(op, values, indices, N, M, L, compact_ok=False):
    """Mirror of checks.h::check_compressed; returns in_features."""
    _check_pattern(N, M, L)
    torch._check(values.dim() == 2, lambda: f"nmspmm: values must be 2-D [in*N/M, out], got {values.dim()}-D")
    torch._check(values.dtype in _FLOAT_DTYPES,
                 lambda: f"nmspmm: values must be float32, float16 or bfloat16, got {values.dtype}")
    torch._check(indices.dim() == 2,
                 lambda: f"nmspmm: indices must be 2-D [in*N/M, out/L], got {indices.dim()}-D")
    torch._check(indices.dtype == torch.uint8, lambda: f"nmspmm: indices must be uint8, got {indices.dtype}")
    _check_same_device(op, ("values", values), ("indices", indices))
    w, out = values.shape
    torch._check(w % N == 0, lambda: f"nmspmm: values.size(0)={w} is not a multiple of N={N} "
                 "(expected in_features*N/M rows)")
    torch._check(out % L == 0, lambda: f"nmspmm: values.size(1)={out} (out_features) must be divisible by L={L}")
    if compact_ok and _indices_compact(values, indices):
        torch._check(N == 2 and M == 4, lambda: f"nmspmm: indices of shape [0, out/L] (the compact 2:4 form, "
                     f"positions in tc_meta) are for N:M = 2:4, got {N}:{M}")
        torch._check(indices.shape[1] == out // L, lambda: f"nmspmm: compact 2:4 indices must have shape "
                     f"[0, {out // L}] to match values {tuple(values.shape)} and L={L}, got {tuple(indices.shape)}")
        return w // N * M
    torch._check(indices.shape[0] == w and indices.shape[1] == out // L,
                 lambda: f"nmspmm: indices must have shape [{w}, {out // L}] to match values "
                 f"{tuple(values.shape)} and L={L}, got {tuple(indices.shape)}")
    return w // N * M


def _check_col_info(op, col_info, packed_indices, indices, in_features, out_features):
    torch._check((col_info is None) == (packed_indices is None),
                 lambda: f"nmspmm.{op}: col_info and packed_indices must be given together")
    if col_info is None:
        return
    shape = (_cdiv(out_features, PACK_TILE_N), _cdiv(in_features, PACK_K_BLOCK), PACK_K_BLOCK)
    torch._check(col_info.dtype == torch.uint8 and col_info.dim() == 3 and tuple(col_info.shape) == shape,
                 lambda: f"nmspmm: col_info must be uint8 of shape [{shape[0]}, {shape[1]}, {shape[2]}] "
                 f"(from nmspmm.col_info(indices, N, M, L)), got {col_info.dtype} {tuple(col_info.shape)}")
    torch._check(packed_indices.dtype == torch.uint8 and packed_indices.shape == indices.shape,
                 lambda: f"nmspmm: packed_indices must be uint8 with the shape of indices "
                 f"{tuple(indices.shape)}, got {packed_indices.dtype} {tuple(packed_indices.shape)}")
    _check_same_device(op, ("indices", indices), ("col_info", col_info), ("packed_indices", packed_indices))


@torch.library.register_fake("nmspmm::prune")
def _prune_fake(weight, N, M, L):
    _check_weight(weight, N, M, L)
    return weight.new_empty(weight.shape, dtype=torch.bool)


@torch.library.register_fake("nmspmm::compress")
def _compress_fake(weight, mask, N, M, L):
    _check_weight(weight, N, M, L)
    torch._check(mask.dtype == torch.bool, lambda: f"nmspmm.compress: mask must be bool, got {mask.dtype}")
    torch._check(mask.shape == weight.shape, lambda: f"nmspmm.compress: mask shape {tuple(mask.shape)} "
                 f"must equal weight shape {tuple(weight.shape)}")
    _check_same_device("compress", ("weight", weight), ("mask", mask))
    out, inp = weight.shape
    w = inp // M * N
    return weight.new_empty((w, out)), weight.new_empty((w, out // L), dtype=torch.uint8)


@torch.library.register_fake("nmspmm::decompress")
def _decompress_fake(values, indices, N, M, L):
    inp = _check_compressed("decompress", values, indices, N, M, L)
    return values.new_empty((values.shape[1], inp))


@torch.library.register_fake("nmspmm::col_info")
def _col_info_fake(indices, N, M, L):
    _check_pattern(N, M, L)
    torch._check(indices.dim() == 2 and indices.dtype == torch.uint8,
                 lambda: f"nmspmm.col_info: indices must be a 2-D uint8 tensor, got {indices.dtype} "
                 f"{tuple(indices.shape)}")
    torch._check(indices.shape[0] % N == 0,
                 lambda: f"nmspmm.col_info: indices.size(0)={indices.shape[0]} is not a multiple of N={N}")
    w, vectors = indices.shape
    out, inp = vectors * L, w // N * M
    cols = indices.new_empty((_cdiv(out, PACK_TILE_N), _cdiv(inp, PACK_K_BLOCK), PACK_K_BLOCK))
    return cols, indices.new_empty(indices.shape)


def _check_tc_meta(op, tc_meta, indices, N, M, L, in_features, out_features):
    if tc_meta is None:
        return
    torch._check(N == 2 and M == 4, lambda: f"nmspmm.spmm: tc_meta is the metadata of 2:4 weights "
                 f"(sparse_tc_meta), but the pattern is {N}:{M}")
    shape = (_cdiv(in_features, 32), _cdiv(out_features // L, 4) * 4)
    torch._check(tc_meta.dtype == torch.int32 and tc_meta.dim() == 2 and tuple(tc_meta.shape) == shape,
                 lambda: f"nmspmm.spmm: tc_meta must be int32 of shape [{shape[0]}, {shape[1]}] (from "
                 f"torch.ops.nmspmm.sparse_tc_meta(indices, 2, 4, L, in_features)), got {tc_meta.dtype} {tuple(tc_meta.shape)}")
    _check_same_device(op, ("indices", indices), ("tc_meta", tc_meta))
    torch._check(tc_meta.is_contiguous(), lambda: f"nmspmm.spmm: tc_meta must be contiguous (rows of {shape[1]} "
                 f"words, as sparse_tc_meta returns it), got strides {tuple(tc_meta.stride())}")


@torch.library.register_fake("nmspmm::sparse_tc_meta")
def _sparse_tc_meta_fake(indices, N, M, L, in_features):
    torch._check(N == 2 and M == 4, lambda: f"nmspmm.sparse_tc_meta: the sparse tensor-core metadata is for "
                 f"N:M = 2:4, got N={N}, M={M}")
    torch._check(_is_pow2(L) and 1 <= L <= 128,
                 lambda: f"nmspmm.sparse_tc_meta: L must be a power of two in [1, 128], got L={L}")
    torch._check(indices.dim() == 2 and indices.dtype == torch.uint8,
                 lambda: f"nmspmm.sparse_tc_meta: indices must be a 2-D uint8 tensor, got {indices.dtype} "
                 f"{tuple(indices.shape)}")
    torch._check(in_features >= 0 and in_features % 4 == 0,
                 lambda: f"nmspmm.sparse_tc_meta: in_features must be a non-negative multiple of 4, got {in_features}")
    torch._check(indices.shape[0] == in_features // 2,
                 lambda: f"nmspmm.sparse_tc_meta: indices must have in_features / 2 = {in_features // 2} rows, "
                 f"got {indices.shape[0]}")
    return indices.new_empty((_cdiv(in_features, 32), _cdiv(indices.shape[1], 4) * 4), dtype=torch.int32)


def _spmm_fake_impl(op, x, values, indices, N, M, L, bias, col_info, packed_indices, tc_meta=None):
    inp = _check_compressed(op, values, indices, N, M, L, compact_ok=True)
    torch._check(x.dim() >= 1, lambda: "nmspmm: x must have at least one dimension [..., in_features]")
    torch._check(x.dtype in _FLOAT_DTYPES, lambda: f"nmspmm: x must be float32, float16 or bfloat16, got {x.dtype}")
    torch._check(x.dtype == values.dtype, lambda: f"nmspmm: x has dtype {x.dtype} but the packed weight "
                 f"values have dtype {values.dtype}")
    _check_same_device(op, ("x", x), ("values", values))
    torch._check(x.shape[-1] == inp, lambda: f"nmspmm: x.shape[-1]={x.shape[-1]} does not match the packed "
                 f"weight's in_features={inp}")
    out = values.shape[1]
    if bias is not None:
        torch._check(bias.dim() == 1 and bias.shape[0] == out,
                     lambda: f"nmspmm: bias must have shape [{out}], got {tuple(bias.shape)}")
        torch._check(bias.dtype == x.dtype, lambda: f"nmspmm: bias has dtype {bias.dtype} but x has dtype {x.dtype}")
        _check_same_device(op, ("x", x), ("bias", bias))
    torch._check((col_info is None) == (packed_indices is None),
                 lambda: f"nmspmm.{op}: col_info and packed_indices must be given together")
    if _indices_compact(values, indices):
        torch._check(tc_meta is not None, lambda: "nmspmm.spmm: indices of shape [0, out/L] (the compact 2:4 form) "
                     "need the weight's tc_meta, which holds its positions")
        torch._check(col_info is None, lambda: "nmspmm.spmm: col_info needs the canonical indices [in/2, out/L], "
                     "got the compact 2:4 form [0, out/L] (torch.ops.nmspmm.sparse_tc_indices rebuilds them)")
    _check_col_info(op, col_info, packed_indices, indices, inp, out)
    _check_tc_meta(op, tc_meta, indices, N, M, L, inp, out)
    return x.new_empty((*x.shape[:-1], out))


@torch.library.register_fake("nmspmm::spmm")
def _spmm_fake(x, values, indices, N, M, L, bias=None, col_info=None, packed_indices=None, tc_meta=None):
    return _spmm_fake_impl("spmm", x, values, indices, N, M, L, bias, col_info, packed_indices, tc_meta)


@torch.library.register_fake("nmspmm::spmm_with_plan")
def _spmm_with_plan_fake(x, values, indices, N, M, L, bias, col_info, packed_indices, kernel, split_k, tc_meta=None):
    return _spmm_fake_impl("spmm_with_plan", x, values, indices, N, M, L, bias, col_info, packed_indices, tc_meta)


def _check_csr(op, crow_indices, col_indices, values, in_features):
    """Mirror of csr_checks.h::check_csr; returns out_features."""
    torch._check(crow_indices.dim() == 1 and crow_indices.shape[0] >= 1 and crow_indices.dtype == torch.int32,
                 lambda: f"nmspmm.{op}: crow_indices must be a 1-D int32 tensor of out_features + 1 entries, "
                 f"got {crow_indices.dtype} {tuple(crow_indices.shape)}")
    torch._check(col_indices.dim() == 1 and col_indices.dtype == torch.int32,
                 lambda: f"nmspmm.{op}: col_indices must be a 1-D int32 tensor [nnz], got {col_indices.dtype} "
                 f"{tuple(col_indices.shape)}")
    torch._check(values.dim() == 1 and values.dtype in _FLOAT_DTYPES,
                 lambda: f"nmspmm.{op}: values must be a 1-D float32, float16 or bfloat16 tensor [nnz], got "
                 f"{values.dtype} {tuple(values.shape)}")
    torch._check(values.shape[0] == col_indices.shape[0],
                 lambda: f"nmspmm.{op}: values has {values.shape[0]} entries but col_indices has {col_indices.shape[0]}")
    torch._check(crow_indices.device == values.device and col_indices.device == values.device,
                 lambda: f"nmspmm.{op}: crow_indices ({crow_indices.device}), col_indices ({col_indices.device}) "
                 f"and values ({values.device}) must be on one device")
    torch._check(0 <= in_features <= 2**31 - 1,
                 lambda: f"nmspmm.{op}: in_features must be in [0, 2^31 - 1], got {in_features}")
    return crow_indices.shape[0] - 1


@torch.library.register_fake("nmspmm::csr_spmm")
def _csr_spmm_fake(x, crow_indices, col_indices, values, in_features, bias=None, max_row_nnz=-1):
    out = _check_csr("csr_spmm", crow_indices, col_indices, values, in_features)
    torch._check(x.dim() >= 1, lambda: "nmspmm.csr_spmm: x must have at least one dimension [..., in_features]")
    torch._check(x.dtype == values.dtype, lambda: f"nmspmm.csr_spmm: x has dtype {x.dtype} but the weight values "
                 f"have dtype {values.dtype}")
    torch._check(x.device == values.device, lambda: f"nmspmm.csr_spmm: x is on {x.device} but the weight is on "
                 f"{values.device}")
    torch._check(x.shape[-1] == in_features, lambda: f"nmspmm.csr_spmm: x.shape[-1]={x.shape[-1]} does not match "
                 f"the weight's in_features={in_features}")
    if bias is not None:
        torch._check(bias.dim() == 1 and bias.shape[0] == out,
                     lambda: f"nmspmm.csr_spmm: bias must have shape [{out}], got {tuple(bias.shape)}")
        torch._check(bias.dtype == x.dtype,
                     lambda: f"nmspmm.csr_spmm: bias has dtype {bias.dtype} but x has dtype {x.dtype}")
        torch._check(bias.device == x.device,
                     lambda: f"nmspmm.csr_spmm: bias is on {bias.device} but x is on {x.device}")
    return x.new_empty((*x.shape[:-1], out))


@functools.lru_cache(maxsize=None)
def cuda_kernels_built() -> bool:
    """True when this build of nmspmm contains the CUDA kernels."""
    return torch._C._dispatch_has_kernel_for_dispatch_key("nmspmm::spmm", "CUDA")
