"""The split-K decode family for every vector length on the GPU (csrc/cuda/kernels/decode_splitk/spmm_decode_splitk.cuh):
decode_f32_splitk at L < 4, decode_splitk_bf16 and decode_splitk_f16 at any L, forced through
``spmm_with_plan`` and taken by the heuristic, against an fp64 reference of the decompressed weight
(torch.ops.nmspmm.decompress, then an fp64 matmul). Accuracy rule as in test_half_plans.py: the
error against fp64 is at most twice that of ``F.linear`` in the same dtype on the same inputs, plus
an absolute floor of the output scale |x| @ |W|^T (2^-12 for fp16 / bf16, 2^-16 for fp32).
The CPU side (registry rows, heuristic picks) is tests/test_decode_short_plans.py.
"""
import functools
import itertools

import pytest
import torch
import torch.nn.functional as F

import nmspmm

ops = torch.ops.nmspmm
pytestmark = pytest.mark.cuda

KERNEL = {torch.float32: "decode_f32_splitk", torch.bfloat16: "decode_splitk_bf16", torch.float16: "decode_splitk_f16"}
DTYPES = list(KERNEL)
EXPAND = {torch.float32: "dense_expand_f32", torch.bfloat16: "dense_expand_bf16", torch.float16: "dense_expand_f16"}
LS = [1, 2, 4, 8, 16]
PATTERNS = [(2, 4), (16, 32), (8, 32), (4, 32), (3, 8), (5, 64)]
MS = [1, 2, 3, 5, 8, 13, 16]
FLOOR = {torch.float32: 2.0 ** -16, torch.bfloat16: 2.0 ** -12, torch.float16: 2.0 ** -12}


def cols_for(target, L):
    """The output width nearest above target that L divides (37 stays 37 at L = 1: n % 4 != 0)."""
    return -(-target // L) * L


@functools.lru_cache(maxsize=64)
def weight(n, k, N, M, L, dtype, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    G, V = k // M, n // L
    pos = torch.rand(G, V, M, generator=g).argsort(dim=-1)[..., :N].sort(dim=-1).values
    indices = pos.permute(0, 2, 1).reshape(G * N, V).to(torch.uint8).contiguous().cuda()
    values = torch.randn(G * N, n, generator=g).to(dtype).cuda()
    dense = ops.decompress(values, indices, N, M, L)  # [n, k] in the values' dtype
    return values, indices, dense


def check(y, x, dense, bias, what):
    ref = F.linear(x.double(), dense.double(), None if bias is None else bias.double())
    scale = (x.double().abs().reshape(-1, x.shape[-1]) @ dense.double().abs().t()).max().item() if ref.numel() else 0.0
    if bias is not None and bias.numel():
        scale += bias.double().abs().max().item()
    lin = F.linear(x, dense, bias)
    assert y.dtype == x.dtype and y.shape == ref.shape, what
    err = (y.double() - ref).abs().max().item() if ref.numel() else 0.0
    err_lin = (lin.double() - ref).abs().max().item() if ref.numel() else 0.0
    assert err <= 2 * err_lin + FLOOR[x.dtype] * max(scale, 1e-30), f"{what}: {err:.3e} vs F.linear {err_lin:.3e}"


def forced(x, values, indices, N, M, L, bias, kernel, split):
    return ops.spmm_with_plan(x, values, indices, N, M, L, bias, None, None, kernel, split)


def heuristic_plan(m, n, k, N, M, L, dtype):
    major, minor = torch.cuda.get_device_capability()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return ops.spmm_heuristic(m, n, k, N, M, L, dtype, major * 10 + minor, sms, 16)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("L", LS)
@pytest.mark.parametrize("N,M", PATTERNS, ids=lambda v: str(v))
@pytest.mark.parametrize("m", MS)
def test_forced_plan_matches_fp64(m, N, M, L, dtype):
    for target, k in itertools.product((4096, 1000, 37), (64, 4096)):
        n = cols_for(target, L)
        values, indices, dense = weight(n, k, N, M, L, dtype, 1)
        x = torch.randn(m, k, device="cuda").to(dtype)
        bias = torch.randn(n, device="cuda").to(dtype) if (m + n) % 2 else None
        _, hsplit = heuristic_plan(m, n, k, N, M, L, dtype)
        # (decode_f32_splitk at L >= 4 is its older kernel, also covered by test_cuda_kernels.py.)
        for split in sorted({1, 3, hsplit}):
            y = forced(x, values, indices, N, M, L, bias, KERNEL[dtype], split)
            check(y, x, dense, bias, f"{KERNEL[dtype]} split {split} m={m} n={n} k={k} {N}:{M} L={L}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("L", LS)
@pytest.mark.parametrize("m", [1, 5, 16])
def test_heuristic_plan_matches_fp64(m, L, dtype):
    for (N, M), (n, k) in itertools.product(PATTERNS, ((4096, 4096), (cols_for(1000, L), 4096), (cols_for(37, L), 64))):
        values, indices, dense = weight(n, k, N, M, L, dtype, 2)
        kernel, split = heuristic_plan(m, n, k, N, M, L, dtype)
        # 16-bit 2:4 on the sparse tensor cores (sm_90): the sparse_tc tiles or the 2:4 decode kernels.
        sparse_tc = nmspmm.kernel_info(kernel).family in ("sparse_tc", "decode_sparse_tc")
        assert not sparse_tc or ((N, M) == (2, 4) and dtype != torch.float32), (m, n, k, N, M, L, kernel)
        if sparse_tc:
            pass
        elif L < 4 or (dtype != torch.float32 and L < 16):
            # The policy's least estimated time: this family, or (larger m, tiny layers) the
            # expansion in the same dtype (per call, or fused: 16-bit), the generic fp32 kernel or
            # (L >= 4) an fp32 decode kernel on upcast inputs; this family at m = 1 on wide layers.
            family = nmspmm.kernel_info(kernel).family
            # At L >= 4 also the fp32 decode kernels on upcast inputs and, for 16-bit inputs on sm_90,
            # the tensor-core decode kernel's short vectors.
            upcast_decode = L >= 4 and family in ("decode_cluster", "decode_staged", "decode_tc")
            fused = dtype != torch.float32 and family in ("expand_mma", "expand_wgmma")
            assert kernel in (KERNEL[dtype], EXPAND[dtype], "generic_f32") or upcast_decode or fused, \
                (m, n, k, N, M, L, kernel)
            if m == 1 and n * k >= 1000 * 4096:
                assert kernel == KERNEL[dtype], (m, n, k, N, M, L, kernel)
        x = torch.randn(m, k, device="cuda").to(dtype)
        bias = torch.randn(n, device="cuda").to(dtype)
        check(ops.spmm(x, values, indices, N, M, L, bias), x, dense, bias, f"auto {kernel} {split} m={m} n={n} {N}:{M} L={L}")
        x3 = x.reshape(1, m, k)
        check(nmspmm.spmm(x3, nmspmm.NMWeight(values, indices, N, M, L, (n, k))).reshape(m, n), x, dense, None,
              f"NMWeight {kernel}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("L", [1, 2, 8])
def test_strided_and_3d_x(L, dtype):
    N, M, n, k = 4, 32, cols_for(1000, L), 4096
    values, indices, dense = weight(n, k, N, M, L, dtype, 3)
    bias = torch.randn(n, device="cuda").to(dtype)
    wide = torch.randn(7, k + 8, device="cuda").to(dtype)
    cases = {
        "column slice": wide[:, 8:],                            # row stride k + 8
        "odd column slice": wide[:, 1:k + 1],                   # x not 16-byte aligned
        "3-D": torch.randn(2, 6, k, device="cuda").to(dtype),   # m = 12
        "3-D transposed": torch.randn(5, 2, k, device="cuda").to(dtype).transpose(0, 1),  # m = 10, not contiguous
        "expanded row": torch.randn(1, k, device="cuda").to(dtype).expand(9, k),        # row stride 0
    }
    for what, x in cases.items():
        m = x.numel() // k
        for split in (1, 4):
            y = forced(x, values, indices, N, M, L, bias, KERNEL[dtype], split)
            assert y.shape == (*x.shape[:-1], n)
            check(y.reshape(m, n), x.reshape(m, k), dense, bias, f"{what} split {split}")
        y = ops.spmm(x, values, indices, N, M, L, bias)
        check(y.reshape(m, n), x.reshape(m, k), dense, bias, f"{what} auto")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("L", [1, 2, 4])
def test_unaligned_weight_takes_scalar_loads(L, dtype):
    """values / indices / bias views at odd offsets: the kernels' scalar fallback, same result."""
    N, M, m, n, k = 2, 4, 3, cols_for(1000, L), 512
    values, indices, dense = weight(n, k, N, M, L, dtype, 4)
    v_buf = torch.empty(values.numel() + 1, dtype=dtype, device="cuda")
    v_buf[1:].copy_(values.flatten())
    i_buf = torch.empty(indices.numel() + 1, dtype=torch.uint8, device="cuda")
    i_buf[1:].copy_(indices.flatten())
    b_buf = torch.randn(n + 1, device="cuda").to(dtype)
    v_odd, i_odd, b_odd = v_buf[1:].view(values.shape), i_buf[1:].view(indices.shape), b_buf[1:]
    x = torch.randn(m, k, device="cuda").to(dtype)
    for split in (1, 2):
        y_odd = forced(x, v_odd, i_odd, N, M, L, b_odd, KERNEL[dtype], split)
        y = forced(x, values, indices, N, M, L, b_odd.clone(), KERNEL[dtype], split)
        check(y_odd, x, dense, b_odd, f"unaligned split {split}")
        assert torch.equal(y_odd, y), "scalar and vector loads sum in the same order"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("L", [1, 2, 8])
def test_deterministic(L, dtype):
    N, M, m, n, k = 8, 32, 13, cols_for(1000, L), 4096
    values, indices, _ = weight(n, k, N, M, L, dtype, 5)
    x = torch.randn(m, k, device="cuda").to(dtype)
    for split in (1, 8, 64):
        a = forced(x, values, indices, N, M, L, None, KERNEL[dtype], split)
        torch.cuda.empty_cache()
        b = forced(x, values, indices, N, M, L, None, KERNEL[dtype], split)
        assert torch.equal(a, b), split


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("L", [1, 2, 8])
@pytest.mark.parametrize("N,M", [(2, 8), (5, 64)], ids=str)
def test_corrupted_index_bytes_are_masked(N, M, L, dtype):
    """Index bytes >= M read as b & (M - 1) (docs/format.md, "Masking guarantee"); repeats add."""
    m, n, k = 4, cols_for(100, L), 256
    values, indices, _ = weight(n, k, N, M, L, dtype, 6)
    bad = torch.randint(0, 256, indices.shape, device="cuda", dtype=torch.uint8)
    masked = (bad & (M - 1)).long()
    w = values.shape[0]
    cols = (torch.arange(w, device="cuda") // N * M)[:, None] + masked.repeat_interleave(L, dim=1)
    dense_t = torch.zeros(k, n, dtype=torch.float64, device="cuda").scatter_add_(0, cols, values.double())
    x = torch.randn(m, k, device="cuda").to(dtype)
    ref = x.double() @ dense_t
    scale = (x.double().abs() @ dense_t.abs()).max().item()
    for split in (1, 3):
        y = forced(x, values, bad, N, M, L, None, KERNEL[dtype], split)
        # Beyond the rounding of y itself (repeated positions make large sums): the accumulation's.
        excess = ((y.double() - ref).abs() - torch.finfo(dtype).eps * ref.abs()).max().item()
        assert excess <= 4 * FLOOR[dtype] * scale + 1e-6, (split, excess)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_cuda_graph_capture(dtype):
    N, M, L, m, n, k = 4, 32, 1, 1, 4096, 4096
    values, indices, dense = weight(n, k, N, M, L, dtype, 7)
    kernel, split = heuristic_plan(m, n, k, N, M, L, dtype)
    assert kernel == KERNEL[dtype] and split > 1
    x = torch.randn(m, k, device="cuda").to(dtype)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        ops.spmm(x, values, indices, N, M, L)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = ops.spmm(x, values, indices, N, M, L)
    x.copy_(torch.randn(m, k, device="cuda").to(dtype))
    g.replay()
    torch.cuda.synchronize()
    check(y, x, dense, None, "graph replay")


def test_refuses_other_dtype():
    values, indices, _ = weight(64, 64, 2, 4, 1, torch.float32, 8)
    x = torch.randn(2, 64, device="cuda")
    with pytest.raises(RuntimeError, match="runs bfloat16 inputs"):
        forced(x, values, indices, 2, 4, 1, None, "decode_splitk_bf16", 1)
    with pytest.raises(RuntimeError, match="cannot run m=17"):
        forced(torch.randn(17, 64, device="cuda").bfloat16(), values.bfloat16(), indices, 2, 4, 1, None,
               "decode_splitk_bf16", 1)
