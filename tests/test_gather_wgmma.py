"""GPU tests of the Hopper gathered-operand kernels (gather_wgmma_{bf16,f16}_{128,256}x128_sm90a,
csrc/cuda/kernels/half/gather_wgmma_sm90.cuh): L = 64 and 128, every N:M with M a power of two
<= 64, forced through spmm_with_plan.

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
TILES = (128, 256)


def _hopper():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


needs_hopper = pytest.mark.skipif(not _hopper(), reason="the gathered-operand kernels are built for sm_90a")


def _kernel(dtype, tile):
    return f"gather_wgmma_{'bf16' if dtype == torch.bfloat16 else 'f16'}_{tile}x128_sm90a"


def test_registry_rows():
    names = [k for k in nmspmm.kernels() if nmspmm.kernel_info(k).family == "gather_wgmma"]
    assert sorted(names) == sorted(_kernel(d, t) for d in HALF for t in TILES)
    kernel = _kernel(torch.bfloat16, 128)
    for L in (64, 128):
        assert nmspmm.kernel_supports(kernel, 1000, 16, 32, L, False, 90)
    for L in (1, 8, 32, 256):
        assert not nmspmm.kernel_supports(kernel, 1000, 16, 32, L, False, 90)
    assert not nmspmm.kernel_supports(kernel, 1000, 8, 128, 64, False, 90)  # M > 64
    assert not nmspmm.kernel_supports(kernel, 1000, 8, 32, 64, False, 89)


PATTERNS = [(N, M, L) for M in (2, 4, 8, 32, 64) for L in (64, 128) for N in sorted({1, M // 2, M - 1, M})]


@needs_hopper
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: f"{p[0]}:{p[1]}-L{p[2]}")
def test_every_pattern(pattern, dtype, nm):
    # An output tail (a block holding one vector of 64) where L = 64, compressed rows that are not a
    # multiple of the 32-row stage, odd m (token tails, m not a multiple of 8), bias on half the
    # cases; both token tiles, splits 1, 2, 4, 8 (a split larger than the stages leaves blocks
    # without a stage).
    N, M, L = pattern
    out = 3 * L if L == 64 else 2 * L
    inp = M * max(1, 200 // M) + M
    values, indices = nm.random_packed(out, inp, N, M, L, dtype, "cuda")
    bias = torch.randn(out, device="cuda").to(dtype) if (N + M) % 2 else None
    for tile, m, split in [(128, 5, 1), (128, 131, 4), (256, 257, 2), (256, 77, 8)]:
        x = torch.randn(m, inp, device="cuda").to(dtype)
        y = ops.spmm_with_plan(x, values, indices, N, M, L, bias, None, None, _kernel(dtype, tile), split)
        nm.assert_within_twice_linear(y, x, values, indices, N, M, L, bias)


@needs_hopper
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("m", [1, 17, 256, 1000, 2048])
@pytest.mark.parametrize("NL", [(16, 64), (8, 64), (4, 128), (12, 128)], ids=lambda p: f"{p[0]}:32-L{p[1]}")
def test_llama_like_shapes_and_splits(m, NL, dtype, nm):
    N, L = NL
    M = 32
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
    N, M, L = 8, 32, 64
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
def test_unaligned_values_and_bias(dtype, nm):
    # Views whose storage offset breaks 16-byte alignment: the binding copies them, the result holds.
    N, M, L = 4, 8, 64
    out, inp = 128, 256
    values, indices = nm.random_packed(out, inp, N, M, L, dtype, "cuda")
    vbuf = torch.empty(values.numel() + 1, dtype=dtype, device="cuda")
    vbuf[1:].copy_(values.flatten())
    bbuf = torch.randn(out + 1, device="cuda").to(dtype)
    ibuf = torch.empty(indices.numel() + 1, dtype=torch.uint8, device="cuda")
    ibuf[1:].copy_(indices.flatten())
    v_off, b_off, i_off = vbuf[1:].view(values.shape), bbuf[1:], ibuf[1:].view(indices.shape)
    x = torch.randn(70, inp, device="cuda").to(dtype)
    for tile in TILES:
        y = ops.spmm_with_plan(x, v_off, i_off, N, M, L, b_off, None, None, _kernel(dtype, tile), 1)
        nm.assert_within_twice_linear(y, x, values, indices, N, M, L, b_off)


@needs_hopper
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("L", [64, 128])
def test_repeated_positions_add_and_bytes_masked(L, dtype, nm):
    # Unchecked index data (the raw op): a repeated position adds its values, positions need not
    # ascend, and a byte >= M addresses position byte & (M - 1) of its window (nothing outside it).
    N, M = 8, 32
    out, inp = 2 * L, 256
    values, indices = nm.random_packed(out, inp, N, M, L, dtype, "cuda")
    bad = indices.clone()
    bad[1::N] = bad[0::N]  # slot 1 of every window repeats slot 0's position
    bad[5, :] = bad[5, :].flip(0)
    bad[2::N] = bad[2::N] + 64  # the same positions, high bits set
    x = torch.randn(33, inp, device="cuda").to(dtype)
    pos = (bad.long() & (M - 1)).repeat_interleave(L, dim=1)
    cols = (torch.arange(values.shape[0], device="cuda") // N * M)[:, None] + pos
    dense = torch.zeros(inp, out, dtype=torch.float64, device="cuda")
    dense.scatter_add_(0, cols, values.double())
    ref = x.double() @ dense
    scale = (x.double().abs() @ dense.abs()).max().item()
    for tile in TILES:
        y = ops.spmm_with_plan(x, values, bad, N, M, L, None, None, None, _kernel(dtype, tile), 2)
        torch.testing.assert_close(y.double(), ref, rtol=2e-2, atol=2e-2 * scale)


@needs_hopper
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_non_finite_x_at_pruned_positions_unread(dtype, nm):
    # Only kept positions are gathered: an Inf at a position no vector keeps does not reach y.
    N, M, L = 4, 32, 64
    out, inp = 128, 256
    values, indices = nm.random_packed(out, inp, N, M, L, dtype, "cuda")
    kept = torch.zeros(inp, dtype=torch.bool, device="cuda")
    kept[((torch.arange(values.shape[0], device="cuda") // N * M)[:, None] + indices.long()).flatten()] = True
    x = torch.randn(40, inp, device="cuda").to(dtype)
    pruned = (~kept).nonzero().flatten()
    assert pruned.numel() > 0
    x[:, pruned] = float("inf")
    xs = x.clone()
    xs[:, pruned] = 0
    for tile in TILES:
        y = ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, _kernel(dtype, tile), 1)
        nm.assert_within_twice_linear(y, xs, values, indices, N, M, L)


@needs_hopper
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_bitwise_deterministic_and_graphed(dtype, nm):
    N, M, L = 16, 32, 64
    values, indices = nm.random_packed(512, 1024, N, M, L, dtype, "cuda")
    x = torch.randn(300, 1024, device="cuda").to(dtype)
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
    x = torch.randn(3, 64, device="cuda").to(dtype)
    values, indices = nm.random_packed(128, 64, 4, 8, 32, dtype, "cuda")
    with pytest.raises(RuntimeError, match=r"kernel gather_wgmma_\w+"):
        ops.spmm_with_plan(x, values, indices, 4, 8, 32, None, None, None, _kernel(dtype, 128), 1)
    values, indices = nm.random_packed(128, 64, 4, 8, 64, dtype, "cuda")
    with pytest.raises(RuntimeError, match=r"split_k of kernel gather_wgmma_\w+ must be 1, 2, 4 or 8, got 3"):
        ops.spmm_with_plan(x, values, indices, 4, 8, 64, None, None, None, _kernel(dtype, 128), 3)
