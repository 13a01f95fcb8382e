"""Loads the compiled op library and registers what lives in Python: fake (meta) kernels for
torch.compile, and autograd for the input (and bias) of ``spmm`` and ``spmm_with_plan``. The
schemas are in csrc/nmspmm_ops.cpp."""
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


# Autograd: the weight is frozen (values and indices are buffers); dL/dx = dL/dy @ W and
# dL/dbias = sum of dL/dy, both through registered ops, so the backward also compiles.
def _spmm_setup_context(ctx, inputs, output):
    x, values, indices, N, M, L, bias = inputs[:7]
    if values.requires_grad:
        raise RuntimeError("nmspmm.spmm: gradients for the compressed weight values are not "
                           "supported; the sparse weight is frozen (values.requires_grad must be False)")
    ctx.save_for_backward(values, indices)
    ctx.pattern = (N, M, L)
    ctx.x_shape = x.shape
    ctx.has_bias = bias is not None


def _spmm_backward(ctx, grad_y):
    values, indices = ctx.saved_tensors
    N, M, L = ctx.pattern
    grad_x = grad_bias = None
    if ctx.needs_input_grad[0]:
        dense = ops.decompress(values, indices, N, M, L)  # [out, in]
        grad_x = (grad_y.reshape(-1, dense.shape[0]) @ dense).reshape(ctx.x_shape)
    if ctx.has_bias and ctx.needs_input_grad[6]:
        grad_bias = grad_y.reshape(-1, grad_y.shape[-1]).sum(0)
    return grad_x, None, None, None, None, None, grad_bias, None, None


def _spmm_with_plan_backward(ctx, grad_y):
    return _spmm_backward(ctx, grad_y) + (None, None)  # kernel, split_k


torch.library.register_autograd("nmspmm::spmm", _spmm_backward, setup_context=_spmm_setup_context)
torch.library.register_autograd("nmspmm::spmm_with_plan", _spmm_with_plan_backward,
                                setup_context=_spmm_setup_context)


@functools.lru_cache(maxsize=None)
def cuda_kernels_built() -> bool:
    """True when this build of nmspmm contains the CUDA kernels."""
    return torch._C._dispatch_has_kernel_for_dispatch_key("nmspmm::spmm", "CUDA")
