"""GPU tests of the Hopper fused-expansion kernels (expand_wgmma_{bf16,f16}_{64,128}x128_sm90a,
csrc/cuda/kernels/half/expand_wgmma_sm90.cuh): every N:M with M <= 64 and L <= 128, forced
through spmm_with_plan.

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
TILES = (64, 128)


def _hopper():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


needs_hopper = pytest.mark.skipif(not _hopper(), reason="the Hopper fused-expansion kernels are built for sm_90a")


def _kernel(dtype, tile):
    return f"expand_wgmma_{'bf16' if dtype == torch.bfloat16 else 'f16'}_{tile}x128_sm90a"


def test_registry_rows():
    names = [k for k in nmspmm.kernels() if nmspmm.kernel_info(k).family == "expand_wgmma"]
    assert sorted(names) == sorted(_kernel(d, t) for d in HALF for t in TILES)
    for L in (1, 2, 4, 8, 16, 32, 64, 128):
        assert nmspmm.kernel_supports(_kernel(torch.bfloat16, 64), 100, 8, 32, L, False, 90)
    assert not nmspmm.kernel_supports(_kernel(torch.bfloat16, 64), 100, 8, 32, 256, False, 90)
    assert not nmspmm.kernel_supports(_kernel(torch.bfloat16, 64), 100, 8, 128, 1, False, 90)
    assert not nmspmm.kernel_supports(_kernel(torch.bfloat16, 64), 100, 8, 32, 1, False, 89)


PATTERNS = [(N, M, L) for M in (2, 4, 8, 32, 64) for L in (1, 2, 4, 8, 16, 32, 64, 128)
            for N in sorted({1, M // 2, M - 1, M})]


def _out_features(L):
    # A multiple of 8 and of 4 L; not a multiple of the 128-output tile where L allows it (a tail).
    return max(8, 4 * L) * (13 if L <= 8 else 3 if L <= 32 else 1)


@needs_hopper
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: f"{p[0]}:{p[1]}-L{p[2]}")
def test_every_pattern(pattern, dtype, nm):
    # An output tail where L allows it, a k that is not a multiple of the 64-input stage where M
    # allows it, odd m (token tail), bias on half the cases; both token tiles, splits 1, 2, 4 (a
    # split larger than the stages leaves blocks without a stage).
    N, M, L = pattern
    out = _out_features(L)
    inp = max(M, 8) * 9 + (8 if M <= 8 else 0)
    values, indices = nm.random_packed(out, inp, N, M, L, dtype, "cuda")
    bias = torch.randn(out, device="cuda").to(dtype) if (N + L) % 2 else None
    for tile, m, split in [(64, 5, 1), (64, 37, 4), (128, 131, 1), (128, 200, 2)]:
        x = torch.randn(m, inp, device="cuda").to(dtype)
        y = ops.spmm_with_plan(x, values, indices, N, M, L, bias, None, None, _kernel(dtype, tile), split)
        nm.assert_within_twice_linear(y, x, values, indices, N, M, L, bias)


@needs_hopper
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("m", [1, 2, 16, 17, 64, 100, 256, 1000])
@pytest.mark.parametrize("L", [1, 8, 64])
def test_llama_like_shapes_and_splits(m, L, dtype, nm):
    N, M = 16, 32
    out, inp = 1024, 4096
    values, indices = nm.random_packed(out, inp, N, M, L, dtype, "cuda")
    x = torch.randn(m, inp, device="cuda").to(dtype)
    for tile in TILES:
        for split in (1, 2, 8):
            y = ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, _kernel(dtype, tile), split)
            nm.assert_within_twice_linear(y, x, values, indices, N, M, L)


@needs_hopper
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_strided_and_3d_inputs(dtype, nm):
    N, M, L = 8, 32, 1
    out, inp = 256, 512
    values, indices = nm.random_packed(out, inp, N, M, L, dtype, "cuda")
    base = torch.randn(40, 2 * inp, device="cuda").to(dtype)
    for x in (base[:, :inp], base[:, 8:8 + inp], base[:, 3:3 + inp], base[::2, :inp],
              base[:30, :inp].reshape(3, 10, inp)):
        for tile in TILES:
            y = ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, _kernel(dtype, tile), 2)
            x2 = x.reshape(-1, inp)
            nm.assert_within_twice_linear(y.reshape(-1, out), x2.contiguous(), values, indices, N, M, L)


@needs_hopper
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_unaligned_indices_and_values(dtype, nm):
    # Views whose storage offset breaks 16-byte alignment: the binding copies them, the result holds.
    N, M, L = 4, 8, 2
    out, inp = 256, 256
    values, indices = nm.random_packed(out, inp, N, M, L, dtype, "cuda")
    vbuf = torch.empty(values.numel() + 1, dtype=dtype, device="cuda")
    vbuf[1:].copy_(values.flatten())
    ibuf = torch.empty(indices.numel() + 1, dtype=torch.uint8, device="cuda")
    ibuf[1:].copy_(indices.flatten())
    v_off, i_off = vbuf[1:].view(values.shape), ibuf[1:].view(indices.shape)
    x = torch.randn(70, inp, device="cuda").to(dtype)
    for tile in TILES:
        y = ops.spmm_with_plan(x, v_off, i_off, N, M, L, None, None, None, _kernel(dtype, tile), 1)
        nm.assert_within_twice_linear(y, x, values, indices, N, M, L)


@needs_hopper
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("L", [1, 4, 16])
def test_repeated_positions_add(L, dtype, nm):
    # Unchecked index data (the raw op): positions that do not ascend within a window take the
    # serial path, in which a repeated position adds its values, as on every other plan.
    N, M = 8, 32
    out, inp = 128 * L if L > 1 else 256, 256
    values, indices = nm.random_packed(out, inp, N, M, L, dtype, "cuda")
    bad = indices.clone()
    bad[1::N] = bad[0::N]  # slot 1 of every window repeats slot 0's position
    bad[5, :] = bad[5, :].flip(0)  # and one row out of order
    x = torch.randn(33, inp, device="cuda").to(dtype)
    cols = (torch.arange(values.shape[0], device="cuda") // N * M)[:, None] + bad.long().repeat_interleave(L, dim=1)
    dense = torch.zeros(inp, out, dtype=torch.float64, device="cuda")
    dense.scatter_add_(0, cols, values.double())
    ref = x.double() @ dense
    scale = (x.double().abs() @ dense.abs()).max().item()
    for tile in TILES:
        y = ops.spmm_with_plan(x, values, bad, N, M, L, None, None, None, _kernel(dtype, tile), 2)
        torch.testing.assert_close(y.double(), ref, rtol=2e-2, atol=2e-2 * scale)


@needs_hopper
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_bitwise_deterministic_and_graphed(dtype, nm):
    N, M, L = 16, 32, 1
    values, indices = nm.random_packed(512, 1024, N, M, L, dtype, "cuda")
    x = torch.randn(150, 1024, device="cuda").to(dtype)
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


@needs_hopper
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_refuses_unsupported_shapes_and_splits(dtype, nm):
    N, M, L = 4, 8, 4
    values, indices = nm.random_packed(72, 64, N, M, L, dtype, "cuda")  # out = 72: not a multiple of 4 L
    x = torch.randn(3, 64, device="cuda").to(dtype)
    with pytest.raises(RuntimeError, match=r"kernel expand_wgmma_\w+ needs M <= 64, L <= 128, in_features a multiple "
                                           r"of 8 and out_features a multiple of 8 and of 4 \* L"):
        ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, _kernel(dtype, 64), 1)
    values, indices = nm.random_packed(128, 64, N, M, L, dtype, "cuda")
    with pytest.raises(RuntimeError, match=r"split_k of kernel expand_wgmma_\w+ must be 1, 2, 4 or 8, got 3"):
        ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, _kernel(dtype, 64), 3)
