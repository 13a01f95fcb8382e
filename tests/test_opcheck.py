"""torch.library.opcheck on every nmspmm op: schema (no undeclared mutation or aliasing),
autograd registration, fake (meta) kernels matching the real kernels' metadata, and AOTAutograd
with dynamic shapes. Numerics are covered by test_ops.py and test_cuda_kernels.py."""
import pytest
import torch
from torch.library import opcheck

import nmspmm

ops = torch.ops.nmspmm


def _weight(out, inp, N, M, L, dtype, device):
    w = torch.randn(out, inp, device=device).to(dtype)
    mask = ops.prune(w, N, M, L)
    values, indices = ops.compress(w, mask, N, M, L)
    return w, mask, values, indices


PATTERNS = [(2, 4, 16), (1, 4, 1), (8, 32, 32), (4, 8, 128), (16, 64, 4)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def pid(p):
    return f"{p[0]}:{p[1]}-L{p[2]}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("pattern", PATTERNS, ids=pid)
def test_opcheck_format_ops(pattern, dtype, device):
    N, M, L = pattern
    w, mask, values, indices = _weight(2 * max(L, 64), 2 * M, N, M, L, dtype, device)
    opcheck(ops.prune, (w, N, M, L))
    opcheck(ops.compress, (w, mask, N, M, L))
    opcheck(ops.decompress, (values, indices, N, M, L))
    opcheck(ops.col_info, (indices, N, M, L))


def test_opcheck_format_ops_non_contiguous(device):
    # Strided (non-dense) views: every output is a fresh contiguous tensor, real and fake.
    N, M, L = 2, 8, 16
    w = torch.randn(64, 128, device=device)[:, ::2]
    mask = ops.prune(w.contiguous(), N, M, L)
    opcheck(ops.prune, (w, N, M, L))
    opcheck(ops.compress, (w, mask, N, M, L))
    values, indices = ops.compress(w, mask, N, M, L)
    v_nc = torch.cat([values, values], 1)[:, : values.shape[1]]
    i_nc = torch.cat([indices, indices], 1)[:, : indices.shape[1]]
    opcheck(ops.decompress, (v_nc, i_nc, N, M, L))
    opcheck(ops.col_info, (i_nc, N, M, L))


def test_opcheck_format_ops_transposed_layout_ok(device):
    # Dense but transposed-layout inputs to the ops whose fake kernels allocate fresh tensors.
    N, M, L = 2, 8, 16
    w = torch.randn(64, 64, device=device).t()
    mask = ops.prune(w.contiguous(), N, M, L)
    opcheck(ops.compress, (w, mask.t().contiguous().t(), N, M, L))
    values, indices = ops.compress(w, mask, N, M, L)
    opcheck(ops.decompress, (values.t().contiguous().t(), indices.t().contiguous().t(), N, M, L))


def test_opcheck_prune_transposed_weight(device):
    w = torch.randn(64, 32, device=device).t()  # [32, 64], strides (1, 32)
    opcheck(ops.prune, (w, 2, 4, 16))


def test_opcheck_col_info_transposed_indices(device):
    _, _, _, indices = _weight(64, 64, 2, 4, 16, torch.float32, device)
    opcheck(ops.col_info, (indices.t().contiguous().t(), 2, 4, 16))


SPMM_VARIANTS = ["2d", "3d-bias", "1d-colinfo", "grad-x-bias", "empty-bias"]


@pytest.mark.parametrize("variant", SPMM_VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck_spmm(variant, dtype, device):
    N, M, L = 2, 8, 16
    _, _, values, indices = _weight(128, 64, N, M, L, dtype, device)
    cols, packed = ops.col_info(indices, N, M, L)
    bias = torch.randn(128, device=device).to(dtype)

    def x(*shape):
        return torch.randn(*shape, device=device).to(dtype)

    args = {
        "2d": (x(5, 64), values, indices, N, M, L),
        "3d-bias": (x(2, 3, 64), values, indices, N, M, L, bias),
        "1d-colinfo": (x(64), values, indices, N, M, L, None, cols, packed),
        "grad-x-bias": (x(4, 64).requires_grad_(), values, indices, N, M, L,
                        bias.clone().requires_grad_(), cols, packed),
        "empty-bias": (x(0, 64), values, indices, N, M, L, bias),
    }[variant]
    opcheck(ops.spmm, args)


@pytest.mark.parametrize("L,inp,out", [(1, 36, 24), (16, 64, 128), (128, 100, 256)])
def test_opcheck_sparse_tc_meta(L, inp, out, device):
    # in = 36, 100: a partial last row of windows; out / L = 24, 8, 2 vectors (2: padded to 4 words).
    indices = torch.randint(0, 256, (inp // 2, out // L), dtype=torch.uint8, device=device)
    opcheck(ops.sparse_tc_meta, (indices, 2, 4, L, inp))
    opcheck(ops.sparse_tc_meta, (torch.cat([indices, indices], 1)[:, : out // L], 2, 4, L, inp))


TC_META_VARIANTS = ["2d", "3d-bias", "1d-colinfo", "grad-x-bias"]


@pytest.mark.parametrize("variant", TC_META_VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck_spmm_tc_meta(variant, dtype, device):
    N, M, L = 2, 4, 16
    _, _, values, indices = _weight(128, 96, N, M, L, dtype, device)
    meta = ops.sparse_tc_meta(indices, N, M, L, 96)
    cols, packed = ops.col_info(indices, N, M, L)
    bias = torch.randn(128, device=device).to(dtype)

    def x(*shape):
        return torch.randn(*shape, device=device).to(dtype)

    args = {
        "2d": (x(5, 96), values, indices, N, M, L, None, None, None, meta),
        "3d-bias": (x(2, 3, 96), values, indices, N, M, L, bias, None, None, meta),
        "1d-colinfo": (x(96), values, indices, N, M, L, None, cols, packed, meta),
        "grad-x-bias": (x(4, 96).requires_grad_(), values, indices, N, M, L, bias.clone().requires_grad_(),
                        None, None, meta),
    }[variant]
    opcheck(ops.spmm, args)


def test_opcheck_spmm_with_plan_tc_meta(device):
    N, M, L = 2, 4, 4
    _, _, values, indices = _weight(64, 64, N, M, L, torch.float32, device)
    meta = ops.sparse_tc_meta(indices, N, M, L, 64)
    x = torch.randn(4, 64, device=device, requires_grad=True)
    opcheck(ops.spmm_with_plan, (x, values, indices, N, M, L, None, None, None, "generic_f32", 1, meta))


def test_opcheck_spmm_generic_pattern_with_grad(device):
    N, M, L = 1, 4, 1
    _, _, values, indices = _weight(32, 64, N, M, L, torch.float32, device)
    x = torch.randn(3, 64, device=device, requires_grad=True)
    opcheck(ops.spmm, (x, values, indices, N, M, L))


# A valid plan for every registry kernel (on the GPU too: m = 2 suits every decode kernel; the
# warp-specialized kernels need a device of compute capability 9.0 with sm_90a code).
# Inputs in the kernel's own dtype, 4:32 or 2:4 by what it runs; rows within its m range (2 for the m <= 2 decode kernels, else 8,
# or its smallest m for a prefill-only kernel).
PLANS = [(k, s) for k in nmspmm.kernels() for s in (1, 2) if s <= nmspmm.kernel_info(k).max_split_k]
DTYPE_OF = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@pytest.mark.parametrize("kernel,split_k", PLANS)
def test_opcheck_spmm_with_plan(kernel, split_k, device):
    # 4:32, or 2:4 for the kernels of the sparse tensor cores.
    N, M, L = (4, 32, 32) if nmspmm.kernel_supports(kernel, 8, 4, 32, 32, True) else (2, 4, 32)
    info = nmspmm.kernel_info(kernel)
    dtype = DTYPE_OF[info.dtype]
    _, _, values, indices = _weight(256, 128, N, M, L, dtype, device)
    cols, packed = ops.col_info(indices, N, M, L)
    bias = torch.randn(256, device=device).to(dtype)
    if torch.device(device).type == "cuda" and info.min_compute_capability > 0 and \
            torch.cuda.get_device_capability() != (9, 0):
        pytest.skip(f"{kernel} needs compute capability 9.0")
    rows = next((r for r in (8, 2, 32, 128) if nmspmm.kernel_supports(kernel, r, N, M, L, True)), None)
    if rows is None:
        pytest.skip(f"{kernel} runs none of the tried m for {N}:{M} L={L}")
    for x in (torch.randn(rows, 128, device=device).to(dtype),
              torch.randn(2, rows // 2, 128, device=device).to(dtype)):
        opcheck(ops.spmm_with_plan, (x, values, indices, N, M, L, bias, cols, packed, kernel, split_k))


def test_opcheck_spmm_with_plan_autograd(device):
    N, M, L = 2, 4, 16
    _, _, values, indices = _weight(64, 64, N, M, L, torch.float32, device)
    x = torch.randn(4, 64, device=device, requires_grad=True)
    opcheck(ops.spmm_with_plan, (x, values, indices, N, M, L, None, None, None, "generic_f32", 1),
            test_utils=("test_autograd_registration",))


def test_opcheck_spmm_heuristic():
    # No tensors: only the schema can be checked; the result is (kernel name, split_k).
    plan = ops.spmm_heuristic(64, 4096, 4096, 2, 4, 32, torch.float32, 90, 132)
    assert isinstance(plan, tuple) and len(plan) == 2 and plan[0] in nmspmm.kernels() and isinstance(plan[1], int)
