"""Loads the compiled op library and registers what lives in Python: the fake (meta) kernels for
torch.compile. The schemas are in csrc/nmspmm_ops.cpp; autograd of ``spmm`` and ``spmm_with_plan``
(the input and the bias; the weight is frozen) in csrc/autograd.cpp."""
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


@torch.library.register_fake("nmspmm::prune")
def _prune_fake(weight, N, M, L):
    return weight.new_empty(weight.shape, dtype=torch.bool)


@torch.library.register_fake("nmspmm::compress")
def _compress_fake(weight, mask, N, M, L):
    out, inp = weight.shape
    w = inp // M * N
    return weight.new_empty((w, out)), weight.new_empty((w, out // L), dtype=torch.uint8)


@torch.library.register_fake("nmspmm::decompress")
def _decompress_fake(values, indices, N, M, L):
    w, out = values.shape
    return values.new_empty((out, w // N * M))


@torch.library.register_fake("nmspmm::col_info")
def _col_info_fake(indices, N, M, L):
    w, vectors = indices.shape
    out, inp = vectors * L, w // N * M
    cols = indices.new_empty((_cdiv(out, PACK_TILE_N), _cdiv(inp, PACK_K_BLOCK), PACK_K_BLOCK))
    return cols, indices.new_empty(indices.shape)


def _spmm_fake_impl(x, values):
    torch._check(x.dtype == values.dtype, lambda: "nmspmm: x and values must share a dtype")
    return x.new_empty((*x.shape[:-1], values.shape[1]))


@torch.library.register_fake("nmspmm::spmm")
def _spmm_fake(x, values, indices, N, M, L, bias=None, col_info=None, packed_indices=None):
    return _spmm_fake_impl(x, values)


@torch.library.register_fake("nmspmm::spmm_with_plan")
def _spmm_with_plan_fake(x, values, indices, N, M, L, bias, col_info, packed_indices, kernel, split_k):
    return _spmm_fake_impl(x, values)


@functools.lru_cache(maxsize=None)
def cuda_kernels_built() -> bool:
    """True when this build of nmspmm contains the CUDA kernels."""
    return torch._C._dispatch_has_kernel_for_dispatch_key("nmspmm::spmm", "CUDA")
