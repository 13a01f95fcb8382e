"""GPU tests of the fused-expansion kernels (expand_mma_{bf16,f16}_{16,64,128}x128,
csrc/cuda/kernels/half/expand_mma.cuh): every N:M with L <= 32, forced through spmm_with_plan.

Every case draws a fresh random weight and input and compares against an fp64 dense matmul of the
decompressed weight, with the flash-attention accuracy rule of test_half_kernels.py: the largest
error is at most twice that of ``F.linear`` in the same dtype on the same (decompressed) weight,
plus 2^-12 of the output scale |x| @ |W|^T.
"""
import pytest
import torch

import nmspmm

ops = torch.ops.nmspmm
pytestmark = pytest.mark.cuda

HALF = [torch.float16, torch.bfloat16]
TILES = (16, 64, 128)


def _kernel(dtype, tile):
    return f"expand_mma_{'bf16' if dtype == torch.bfloat16 else 'f16'}_{tile}x128"


def test_registry_rows():
    names = [k for k in nmspmm.kernels() if nmspmm.kernel_info(k).family == "expand_mma"]
    assert sorted(names) == sorted(_kernel(d, t) for d in HALF for t in TILES)
    for L in (1, 2, 4, 8, 16, 32):
        assert nmspmm.kernel_supports(_kernel(torch.bfloat16, 64), 100, 8, 32, L, False, 80)
    assert not nmspmm.kernel_supports(_kernel(torch.bfloat16, 64), 100, 8, 32, 64, False, 90)
    assert not nmspmm.kernel_supports(_kernel(torch.bfloat16, 64), 100, 8, 32, 1, False, 75)


PATTERNS = [(N, M, L) for M in (2, 4, 8, 32, 64) for L in (1, 2, 4, 8, 16, 32)
            for N in sorted({1, M // 2, M - 1, M}) if N >= 1]


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: f"{p[0]}:{p[1]}-L{p[2]}")
def test_every_pattern(pattern, dtype, nm):
    # An output tail (not a multiple of the 128-output tile), a k of several windows that is not a
    # multiple of the 64-input stage where M allows it, odd m (token tail), bias on half the cases;
    # every token tile, split 1 and 3.
    N, M, L = pattern
    out = 4 * L * (5 if L <= 8 else 3) if L > 1 else 200
    inp = max(M, 8) * 9 + (8 if M <= 8 else 0)
    values, indices = nm.random_packed(out, inp, N, M, L, dtype, "cuda")
    bias = torch.randn(out, device="cuda").to(dtype) if (N + L) % 2 else None
    for tile, m, split in [(16, 5, 1), (64, 37, 3), (128, 131, 1)]:
        x = torch.randn(m, inp, device="cuda").to(dtype)
        y = ops.spmm_with_plan(x, values, indices, N, M, L, bias, None, None, _kernel(dtype, tile), split)
        nm.assert_within_twice_linear(y, x, values, indices, N, M, L, bias)


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("m", [1, 2, 16, 17, 64, 100, 256, 1000])
@pytest.mark.parametrize("L", [1, 8])
def test_llama_like_shapes_and_splits(m, L, dtype, nm):
    N, M = 16, 32
    out, inp = 1024, 4096
    values, indices = nm.random_packed(out, inp, N, M, L, dtype, "cuda")
    x = torch.randn(m, inp, device="cuda").to(dtype)
    for tile in TILES:
        for split in (1, 4, 32):
            y = ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, _kernel(dtype, tile), split)
            nm.assert_within_twice_linear(y, x, values, indices, N, M, L)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_strided_and_3d_inputs(dtype, nm):
    N, M, L = 8, 32, 1
    out, inp = 256, 512
    values, indices = nm.random_packed(out, inp, N, M, L, dtype, "cuda")
    base = torch.randn(40, 2 * inp, device="cuda").to(dtype)
    for x in (base[:, :inp], base[:, 3:3 + inp], base[::2, :inp], base[:30, :inp].reshape(3, 10, inp)):
        for tile in TILES:
            y = ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, _kernel(dtype, tile), 2)
            x2 = x.reshape(-1, inp)
            nm.assert_within_twice_linear(y.reshape(-1, out), x2.contiguous(), values, indices, N, M, L)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_bitwise_deterministic_and_graphed(dtype, nm):
    N, M, L = 16, 32, 1
    values, indices = nm.random_packed(512, 1024, N, M, L, dtype, "cuda")
    x = torch.randn(48, 1024, device="cuda").to(dtype)
    for tile in TILES:
        kernel = _kernel(dtype, tile)
        a = ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, kernel, 4)
        b = ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, kernel, 4)
        assert torch.equal(a, b)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, kernel, 4)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, kernel, 4)
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, kernel, 4))


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_refuses_unsupported_shapes(dtype, nm):
    N, M, L = 4, 8, 4
    values, indices = nm.random_packed(72, 64, N, M, L, dtype, "cuda")  # out = 72: not a multiple of 4 L
    x = torch.randn(3, 64, device="cuda").to(dtype)
    with pytest.raises(RuntimeError, match=r"kernel expand_mma_\w+ needs L <= 32, in_features a multiple of 8 and "
                                           r"out_features a multiple of 8 and of 4 \* L"):
        ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, _kernel(dtype, 16), 1)
