"""GPU tests of the 2:4 kernels on the sparse tensor cores, which ``nmspmm.spmm`` takes for fp16 /
bf16 2:4 calls on Hopper, any L: ``sparse_tc_*`` (csrc/cuda/kernels/sparse_tc/, wgmma.sp on
sm_90a) and the decode kernels ``decode_sparse_tc_*`` (csrc/cuda/kernels/half/decode_half.cuh,
mma.sp, m <= 64).

Every case draws a fresh random weight and input and compares against an fp64 dense matmul of the
decompressed weight, with the flash-attention accuracy rule of tests/test_half_kernels.py: the
kernel's largest error against the fp64 reference is at most twice that of ``F.linear`` in the same
dtype on the same inputs and (decompressed) weight, plus 2^-12 of the output scale |x| @ |W|^T.
Each kernel runs through ``spmm_with_plan`` with every split it takes, with and without the
weight's metadata (``tc_meta``; without it the call builds it from indices).
"""
import pytest
import torch
import torch.nn.functional as F

import nmspmm

ops = torch.ops.nmspmm
pytestmark = pytest.mark.cuda

HALF = [torch.float16, torch.bfloat16]
TILES = (256, 128, 64, 16)


def _hopper():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


needs_hopper = pytest.mark.skipif(not _hopper(), reason="the sparse tensor-core kernels are built for sm_90a")


def _kernel(dtype, tile):
    return f"sparse_tc_{'bf16' if dtype == torch.bfloat16 else 'f16'}_{tile}x128_sm90a"


def _check(y, x, values, indices, L, bias, nm):
    ref, scale = nm.ref_spmm64(x, values, indices, 2, 4, L, bias)
    assert y.dtype == x.dtype and y.shape == ref.shape
    assert torch.isfinite(y).all(), "output has NaN/Inf"
    dense = nm.ref_decompress(values, indices, 2, 4, L)
    lin = F.linear(x, dense, bias)
    err = (y.double() - ref).abs().max().item() if y.numel() else 0.0
    err_lin = (lin.double() - ref).abs().max().item() if y.numel() else 0.0
    floor = 2.0 ** -12 * scale
    assert err <= 2 * err_lin + floor, f"error {err:.3e} > 2 x F.linear's {err_lin:.3e} + {floor:.3e}"


@needs_hopper
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("L", [1, 2, 4, 32, 64, 128])
@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("split", [1, 2, 4, 8])
def test_every_kernel_and_split(tile, split, L, dtype, nm):
    # Token tail (m not a multiple of the tile), an output count that is not a multiple of the
    # 128-output block, k not a multiple of the 64-input stage; bias on half the cases.
    m = {256: 300, 128: 133, 64: 70, 16: 5}[tile] + split
    out = max(L, 8) * (3 if L >= 64 else 5) if L > 1 else 200
    out = (out + 7) // 8 * 8
    inp = 8 * (71 + 13 * split)
    values, indices = nm.random_packed(out, inp, 2, 4, L, dtype, "cuda")
    meta = ops.sparse_tc_meta(indices, 2, 4, L, inp)
    x = torch.randn(m, inp, device="cuda").to(dtype)
    bias = torch.randn(out, device="cuda").to(dtype) if (split + L) % 2 else None
    y = ops.spmm_with_plan(x, values, indices, 2, 4, L, bias, None, None, _kernel(dtype, tile), split, meta)
    _check(y, x, values, indices, L, bias, nm)
    y_raw = ops.spmm_with_plan(x, values, indices, 2, 4, L, bias, None, None, _kernel(dtype, tile), split)
    assert torch.equal(y, y_raw)


@needs_hopper
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("m", [1, 2, 8, 16, 17, 64, 100, 256, 513, 1024, 2047, 4096])
@pytest.mark.parametrize("L", [1, 32])
def test_the_heuristic_takes_them_for_every_m(m, L, dtype, nm):
    # L = 1: always the sparse tensor cores (decode_sparse_tc up to m = 16); L = 32: they or, by
    # cost, the vector-wise decode kernels.
    out, inp = 1024, 2048
    kernel, split = ops.spmm_heuristic(m, out, inp, 2, 4, L, dtype, 90, torch.cuda.get_device_properties(0).multi_processor_count, 16)
    assert kernel.startswith(("sparse_tc_", "decode_sparse_tc_")) or (L == 32 and kernel.startswith("decode_tc_")), kernel
    packed = nmspmm.compress(torch.randn(out, inp, device="cuda").to(dtype), 2, 4, L)
    x = torch.randn(m, inp, device="cuda").to(dtype)
    bias = torch.randn(out, device="cuda").to(dtype)
    y = nmspmm.spmm(x, packed, bias)
    _check(y, x, packed.values, packed.indices, L, bias, nm)


@needs_hopper
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_strided_and_3d_inputs(dtype, nm):
    values, indices = nm.random_packed(256, 512, 2, 4, 2, dtype, "cuda")
    base = torch.randn(3, 40, 1100, device="cuda").to(dtype)
    x = base[:, :, 16:528]  # row stride 1100 (not a multiple of 8): the call copies it
    y = ops.spmm(x, values, indices, 2, 4, 2)
    _check(y.reshape(-1, 256), x.reshape(-1, 512), values, indices, 2, None, nm)
    x8 = torch.randn(120, 1032, device="cuda").to(dtype)[:, 8:520]  # row stride 1032: read in place
    _check(ops.spmm(x8, values, indices, 2, 4, 2), x8, values, indices, 2, None, nm)
    xt = torch.randn(512, 77, device="cuda").to(dtype).t()  # column stride != 1
    _check(ops.spmm(xt, values, indices, 2, 4, 2), xt, values, indices, 2, None, nm)


@needs_hopper
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_pruned_non_finite_inputs_do_not_reach_the_output(dtype, nm):
    # The sparse tensor cores select the kept inputs; a NaN or Inf at a pruned position is not read.
    L = 1
    values, indices = nm.random_packed(128, 256, 2, 4, L, dtype, "cuda")
    x = torch.randn(300, 256, device="cuda").to(dtype)
    kept = torch.zeros(128, 256, dtype=torch.bool, device="cuda")
    cols = nm.ref_columns(indices, 2, 4, L)
    kept.scatter_(1, cols.t().long(), True)
    pruned_everywhere = ~kept.any(0)
    if not pruned_everywhere.any():
        pytest.skip("every input column is kept by some output")
    x[:, pruned_everywhere.nonzero()[0, 0]] = float("nan")
    y = ops.spmm_with_plan(x, values, indices, 2, 4, L, None, None, None, _kernel(dtype, 256), 1)
    assert torch.isfinite(y).all()


@needs_hopper
def test_corrupted_index_bytes_are_masked(nm):
    # Index bytes read as b & 3: the result is the product with the masked positions (where those
    # repeat, the hardware's pattern for them), every access in bounds; checked against the fp64
    # product of the masked, valid case where the masking yields a valid pattern.
    dtype = torch.bfloat16
    values, indices = nm.random_packed(256, 512, 2, 4, 1, dtype, "cuda")
    x = torch.randn(70, 512, device="cuda").to(dtype)
    y_ok = ops.spmm_with_plan(x, values, indices, 2, 4, 1, None, None, None, _kernel(dtype, 64), 1)
    bad = indices + 4 * torch.randint(1, 63, indices.shape, device="cuda", dtype=torch.uint8)
    y_bad = ops.spmm_with_plan(x, values, bad, 2, 4, 1, None, None, None, _kernel(dtype, 64), 1)
    assert torch.equal(y_ok, y_bad)


@needs_hopper
def test_cuda_graph_capture(nm):
    dtype = torch.bfloat16
    layer = nmspmm.NMLinear.from_dense(torch.nn.Linear(512, 384, device="cuda", dtype=dtype), 2, 4, 1)
    x = torch.randn(4, 512, device="cuda", dtype=dtype)
    y0 = layer(x)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = layer(x)
    x.copy_(torch.randn_like(x))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, layer(x)) and not torch.equal(y, y0)


@needs_hopper
def test_refuses_shapes_the_copies_cannot_take(nm):
    values, indices = nm.random_packed(12, 64, 2, 4, 1, torch.bfloat16, "cuda")
    x = torch.randn(3, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="divisible by 8"):
        ops.spmm_with_plan(x, values, indices, 2, 4, 1, None, None, None, "sparse_tc_bf16_16x128_sm90a", 1)
    with pytest.raises(RuntimeError, match="must be 1, 2, 4 or 8"):
        ops.spmm_with_plan(x, values, indices, 2, 4, 1, None, None, None, "sparse_tc_bf16_16x128_sm90a", 3)
    # Other shapes still run (the heuristic plans another family).
    y = ops.spmm(x, values, indices, 2, 4, 1)
    assert y.shape == (3, 12)


# ---- decode_sparse_tc_*: the decode kernels' weight stream fed to mma.sp (m <= 64, sm_90) ----


def _decode_kernel(dtype, cols):
    return f"decode_sparse_tc_{'bf16' if dtype == torch.bfloat16 else 'f16'}_{cols}"


def _needs_clusters():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the decode kernels need thread-block clusters (compute capability 9.0)")


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("L", [1, 2, 8, 16, 32, 128])
@pytest.mark.parametrize("cols", [64, 256])
@pytest.mark.parametrize("split", [1, 3, 16])
def test_decode_every_block_and_split(cols, split, L, dtype, nm):
    # Output tails (n not a multiple of the block), k not a multiple of the 32-input step (and k
    # below one step), every 8-token tile count with odd m, contiguous / strided / 2-byte-aligned
    # x, bias on half the cases; with and without the weight's metadata.
    _needs_clusters()
    for i, m in enumerate([1, 3, 8, 13, 16, 33, 64]):
        out = max(L, 8) * (5 + i % 3) if L > 1 else 200 + 8 * i
        out = (out + 7) // 8 * 8
        inp = 12 if i == 2 else 4 * (67 + 29 * i + 7 * split)
        values, indices = nm.random_packed(out, inp, 2, 4, L, dtype, "cuda")
        meta = ops.sparse_tc_meta(indices, 2, 4, L, inp)
        big = torch.randn(m, inp + 9, device="cuda").to(dtype)
        x = big[:, :inp].contiguous() if i % 3 == 0 else big[:, :inp] if i % 3 == 1 else big[:, 1:inp + 1]
        bias = torch.randn(out, device="cuda").to(dtype) if (i + L) % 2 else None
        y = ops.spmm_with_plan(x, values, indices, 2, 4, L, bias, None, None, _decode_kernel(dtype, cols), split, meta)
        _check(y, x, values, indices, L, bias, nm)
        y_raw = ops.spmm_with_plan(x, values, indices, 2, 4, L, bias, None, None, _decode_kernel(dtype, cols), split)
        assert torch.equal(y, y_raw)


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("L", [1, 32])
@pytest.mark.parametrize("m", [1, 8, 16])
def test_decode_llama_layers_through_the_heuristic(m, L, dtype, nm):
    # The heuristic's plan on Llama layer shapes (blocks and clusters as it picks them), bias.
    _needs_clusters()
    for out, inp in ((4096, 4096), (1024, 4096), (11008, 4096), (4096, 11008)):
        packed = nmspmm.compress(torch.randn(out, inp, device="cuda").to(dtype), 2, 4, L)
        x = torch.randn(m, inp, device="cuda").to(dtype)
        bias = torch.randn(out, device="cuda").to(dtype)
        _check(nmspmm.spmm(x, packed, bias), x, packed.values, packed.indices, L, bias, nm)


@pytest.mark.parametrize("cols", [64, 256])
def test_decode_corrupted_index_bytes_are_masked(cols, nm):
    # As the prefill kernels: index bytes are read as b & 3 (through the metadata built from them).
    _needs_clusters()
    dtype = torch.bfloat16
    values, indices = nm.random_packed(256, 512, 2, 4, 1, dtype, "cuda")
    x = torch.randn(5, 512, device="cuda").to(dtype)
    kernel = _decode_kernel(dtype, cols)
    y_ok = ops.spmm_with_plan(x, values, indices, 2, 4, 1, None, None, None, kernel, 2)
    bad = indices + 4 * torch.randint(1, 63, indices.shape, device="cuda", dtype=torch.uint8)
    y_bad = ops.spmm_with_plan(x, values, bad, 2, 4, 1, None, None, None, kernel, 2)
    assert torch.equal(y_ok, y_bad)


def test_decode_refuses_what_it_cannot_run(nm):
    _needs_clusters()
    values, indices = nm.random_packed(12, 64, 2, 4, 1, torch.bfloat16, "cuda")
    x = torch.randn(3, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="divisible by 8"):
        ops.spmm_with_plan(x, values, indices, 2, 4, 1, None, None, None, "decode_sparse_tc_bf16_64", 1)
    values, indices = nm.random_packed(64, 64, 2, 4, 1, torch.bfloat16, "cuda")
    x = torch.randn(65, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="cannot run m=65"):
        ops.spmm_with_plan(x, values, indices, 2, 4, 1, None, None, None, "decode_sparse_tc_bf16_64", 1)
