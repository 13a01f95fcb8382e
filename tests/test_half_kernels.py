"""GPU tests of the native fp16 / bf16 tensor-core prefill kernels (csrc/cuda/kernels/half/
spmm_tc_prefill.cuh), which ``nmspmm.spmm`` takes for 16-bit inputs with m >= 17 on sm_80+ unless
the decode kernels take the call first (m <= 64 on sm_90): every case here has m > 64.

Every case draws a fresh random weight and input and compares against an fp64 dense matmul of the
decompressed weight. Accuracy rule (the flash-attention convention): the kernel's largest error
against the fp64 reference is at most twice that of ``F.linear`` in the same dtype on the same
inputs and the same (decompressed) weight, plus a small absolute floor (2^-12 of the output scale
|x| @ |W|^T), so the kernels lose nothing to cuBLAS in accuracy. The kernels' plans (tile
configuration, split-K) are exercised through shapes that steer the heuristic: small grids take
split-K, large ones do not.
"""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

ops = torch.ops.nmspmm
pytestmark = pytest.mark.cuda

HALF = [torch.float16, torch.bfloat16]


def _check(x, values, indices, N, M, L, bias, nm):
    nm.assert_within_twice_linear(ops.spmm(x, values, indices, N, M, L, bias), x, values, indices, N, M, L, bias)


PATTERNS = [(N, M, L) for M in (8, 16, 32, 64) for L in (16, 32, 64, 128)
            for N in sorted({1, 3, M // 2, M - 1, M})]


def _pid(p):
    return f"{p[0]}:{p[1]}-L{p[2]}"


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("pattern", PATTERNS, ids=_pid)
def test_every_pattern(pattern, dtype, nm):
    # Odd m (token tail), an output tail that is not a multiple of the 256-output tile, a k of
    # several windows that is not a multiple of the stage; bias on half of the cases.
    N, M, L = pattern
    m = 65 + (N * 7 + L) % 150
    out = L * (3 if L >= 64 else 5)
    inp = M * (9 + N % 5)
    values, indices = nm.random_packed(out, inp, N, M, L, dtype, "cuda")
    x = torch.randn(m, inp, device="cuda").to(dtype)
    bias = torch.randn(out, device="cuda").to(dtype) if (N + L) % 2 else None
    _check(x, values, indices, N, M, L, bias, nm)


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("m", [65, 100, 129, 256, 513, 1024, 2047])
def test_shapes_and_split_k(m, dtype, nm):
    # 8:32 with L = 32 across m: small grids (split-K with its reduce kernel), full grids, tails.
    N, M, L = 8, 32, 32
    out, inp = 768, 2048
    values, indices = nm.random_packed(out, inp, N, M, L, dtype, "cuda")
    x = torch.randn(m, inp, device="cuda").to(dtype)
    bias = torch.randn(out, device="cuda").to(dtype)
    _check(x, values, indices, N, M, L, bias, nm)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_llama_like_shape(dtype, nm):
    N, M, L = 16, 32, 32
    values, indices = nm.random_packed(4096, 4096, N, M, L, dtype, "cuda")
    x = torch.randn(300, 4096, device="cuda").to(dtype)
    _check(x, values, indices, N, M, L, None, nm)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_strided_and_3d_inputs(dtype, nm):
    N, M, L = 12, 32, 32
    out, inp = 320, 512
    values, indices = nm.random_packed(out, inp, N, M, L, dtype, "cuda")
    bias = torch.randn(out, device="cuda").to(dtype)
    base = torch.randn(150, inp + 24, device="cuda").to(dtype)
    _check(base[:, :inp], values, indices, N, M, L, bias, nm)           # row stride > k, aligned
    _check(base[:, 3:inp + 3], values, indices, N, M, L, bias, nm)      # misaligned start
    _check(base[::2, :inp], values, indices, N, M, L, bias, nm)         # every other row
    _check(torch.randn(inp, 80, device="cuda").to(dtype).t(), values, indices, N, M, L, bias, nm)  # column-major
    x3 = torch.randn(3, 29, inp, device="cuda").to(dtype)
    _check(x3, values, indices, N, M, L, bias, nm)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_index_bytes_are_masked(dtype, nm):
    # Hand-built indices with high bits set: the kernel masks every byte to its window (& (M - 1)),
    # so it reads nothing outside x and computes the masked pattern.
    N, M, L = 4, 16, 32
    out, inp = 256, 256
    values, indices = nm.random_packed(out, inp, N, M, L, dtype, "cuda")
    noisy = indices | (torch.randint(1, 16, indices.shape, device="cuda", dtype=torch.uint8) << 4)
    x = torch.randn(80, inp, device="cuda").to(dtype)
    y = ops.spmm(x, values, noisy, N, M, L)
    ref, scale = nm.ref_spmm64(x, values, indices, N, M, L)
    dense = nm.ref_decompress(values, indices, N, M, L)
    err_lin = (F.linear(x, dense).double() - ref).abs().max().item()
    assert (y.double() - ref).abs().max().item() <= 2 * err_lin + 2.0 ** -12 * scale


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_cuda_graph_and_stream(dtype, nm):
    N, M, L = 16, 32, 32
    values, indices = nm.random_packed(512, 1024, N, M, L, dtype, "cuda")
    x = torch.randn(200, 1024, device="cuda").to(dtype)
    expected = ops.spmm(x, values, indices, N, M, L)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        ops.spmm(x, values, indices, N, M, L)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = ops.spmm(x, values, indices, N, M, L)
    torch.cuda.current_stream().wait_stream(s)
    x.copy_(torch.randn_like(x))
    g.replay()
    torch.cuda.synchronize()
    fresh = ops.spmm(x, values, indices, N, M, L)
    assert torch.equal(y, fresh)
    assert not torch.equal(y, expected)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_opcheck_and_compile(dtype, nm):
    from torch.library import opcheck
    N, M, L = 8, 32, 64
    values, indices = nm.random_packed(256, 512, N, M, L, dtype, "cuda")
    x = torch.randn(97, 512, device="cuda").to(dtype)
    bias = torch.randn(256, device="cuda").to(dtype)
    opcheck(ops.spmm, (x, values, indices, N, M, L, bias, None, None))

    def f(x):
        return ops.spmm(x, values, indices, N, M, L, bias) * 2

    compiled = torch.compile(f, fullgraph=True)
    torch.testing.assert_close(compiled(x), f(x), rtol=0, atol=0)


_CP_ASYNC_CHILD = r"""
import sys
import torch
import nmspmm
d = torch.load(sys.argv[1])
ops = torch.ops.nmspmm
outs = [ops.spmm_with_plan(d["x"], d["values"], d["indices"], *d["pattern"], d["bias"], None, None, k, s)
        for k, s in d["plans"]]
torch.save(outs, sys.argv[2])
"""


def _plans_in_child(path, x, values, indices, pattern, bias, plans, **env):
    """The outputs of `plans` (kernel, split_k) run in a fresh process with the A/B switches `env`."""
    src, dst = path / "in.pt", path / "out.pt"
    torch.save(dict(x=x, values=values, indices=indices, pattern=pattern, bias=bias, plans=plans), src)
    subprocess.run([sys.executable, "-c", _CP_ASYNC_CHILD, str(src), str(dst)], env=dict(os.environ, **env),
                   check=True, timeout=300)
    return torch.load(dst)


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("pattern", [(16, 32, 32), (12, 32, 32), (4, 32, 32), (8, 32, 64), (3, 8, 128),
                                     (7, 16, 32), (40, 64, 32)], ids=_pid)
def test_warp_specialized_form_bitwise_equals_cp_async_form(pattern, dtype, nm, tmp_path):
    # On sm_90 the prefill plans of L >= 32 run the warp-specialized form (tensor copies, mbarriers);
    # it issues the same mma.sync in the same order as the cp.async form (NMSPMM_NO_TC_TMA=1), so
    # the bits agree: token and output tails, a k that ends inside a stage, bias, split-K.
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the warp-specialized form needs sm_90")
    N, M, L = pattern
    out, inp = 1056 // L * L, M * 37
    values, indices = nm.random_packed(out, inp, N, M, L, dtype, "cuda")
    x = torch.randn(300, inp, device="cuda").to(dtype)
    bias = torch.randn(out, device="cuda").to(dtype)
    kernel = "tc_prefill_bf16_128x256" if dtype == torch.bfloat16 else "tc_prefill_f16_128x256"
    plans = [(kernel, s) for s in (1, 2, 3)]
    here = [ops.spmm_with_plan(x, values, indices, N, M, L, bias, None, None, k, s) for k, s in plans]
    ref, scale = nm.ref_spmm64(x, values, indices, N, M, L, bias)
    dense = nm.ref_decompress(values, indices, N, M, L)
    err_lin = (F.linear(x, dense, bias).double() - ref).abs().max().item()
    for y in here:
        assert (y.double() - ref).abs().max().item() <= 2 * err_lin + 2.0 ** -12 * scale
    there = _plans_in_child(tmp_path, x, values, indices, (N, M, L), bias, plans, NMSPMM_NO_TC_TMA="1")
    for (k, s), a, b in zip(plans, here, there):
        assert torch.equal(a, b.to(a.device)), f"{N}:{M} L={L} split_k={s}: warp-specialized and cp.async forms differ"


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_launch_during_transpose_bitwise_equals_plain_stream_order(dtype, nm, tmp_path):
    # On sm_90 the warp-specialized form launches while the x transpose before it runs
    # (programmatic dependent launch); its producer waits for the transpose before its first copy of
    # x. The bits must be those of plain stream order (NMSPMM_NO_XT_OVERLAP=1), with x written by a
    # kernel just before the op, for grids under one wave, of several waves, and split-K.
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the warp-specialized form needs sm_90")
    N, M, L = 8, 32, 32
    values, indices = nm.random_packed(2048, 1024, N, M, L, dtype, "cuda")
    kernel = "tc_prefill_bf16_128x256" if dtype == torch.bfloat16 else "tc_prefill_f16_128x256"
    plans = [(kernel, s) for s in (1, 3)]
    for m in (40, 1000, 3000):
        x = torch.randn(m, 1024, device="cuda").to(dtype)
        x.mul_(2)  # x comes from a kernel launched just before the op
        here = [ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, k, s) for k, s in plans]
        there = _plans_in_child(tmp_path, x, values, indices, (N, M, L), None, plans, NMSPMM_NO_XT_OVERLAP="1")
        for (k, s), a, b in zip(plans, here, there):
            assert torch.equal(a, b.to(a.device)), f"m={m} split_k={s}: launch during the transpose changes bits"


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_chain_reads_previous_output(dtype, nm):
    # One call's output is the next call's x: the next call's transpose (plain stream order) waits
    # for the previous call, and its main kernel (launched during that transpose) for the transpose.
    N, M, L = 16, 32, 32
    values, indices = nm.random_packed(1024, 1024, N, M, L, dtype, "cuda")
    values.mul_(0.05)  # keeps the chain's magnitudes near 1
    dense = nm.ref_decompress(values, indices, N, M, L)
    kernel = "tc_prefill_bf16_128x256" if dtype == torch.bfloat16 else "tc_prefill_f16_128x256"
    ys = [torch.randn(700, 1024, device="cuda").to(dtype)]
    for _ in range(4):
        ys.append(ops.spmm_with_plan(ys[-1], values, indices, N, M, L, None, None, None, kernel, 1))
    for a, b in zip(ys[:-1], ys[1:]):
        ref, scale = nm.ref_spmm64(a, values, indices, N, M, L, None)
        err_lin = (F.linear(a, dense).double() - ref).abs().max().item()
        assert (b.double() - ref).abs().max().item() <= 2 * err_lin + 2.0 ** -12 * scale
