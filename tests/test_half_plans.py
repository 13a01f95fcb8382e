"""The native fp16 / bf16 plans of the registry: what the heuristic picks for 16-bit problems (CPU,
no GPU needed), and every native kernel forced through ``spmm_with_plan`` against an fp64
reference of the decompressed weight (CUDA). Accuracy rule as in test_half_kernels.py: the error
against fp64 is at most twice that of ``F.linear`` in the same dtype on the same inputs, plus an
absolute floor of 2^-12 of the output scale |x| @ |W|^T.
"""
import itertools

import pytest
import torch
import torch.nn.functional as F

import nmspmm

ops = torch.ops.nmspmm
INFO = {k: nmspmm.kernel_info(k) for k in nmspmm.kernels()}
NATIVE = {k: i for k, i in INFO.items() if i.dtype != "float32"}
DTYPE_NAME = {torch.float16: "float16", torch.bfloat16: "bfloat16"}


def family(name, dtype):
    return sorted(k for k, i in NATIVE.items() if i.family == name and i.dtype == DTYPE_NAME[dtype])


def plan(m, n, k, N, M, L, dtype, cc=90):
    return tuple(ops.spmm_heuristic(m, n, k, N, M, L, dtype, cc, 132, 16))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_registry_has_native_families(dtype):
    for fam in ("decode_tc", "tc_prefill", "dense_expand"):
        assert family(fam, dtype), fam


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_heuristic_plans_native_kernels(dtype):
    decode, tc, dense = family("decode_tc", dtype), family("tc_prefill", dtype), family("dense_expand", dtype)
    for m, (n, k), N in itertools.product((1, 8, 16, 32), ((4096, 4096), (14336, 4096)), (16, 4)):
        kernel, split = plan(m, n, k, N, 32, 32, dtype)
        assert kernel in decode and 1 <= split <= NATIVE[kernel].max_split_k, (m, n, k, N, kernel)
    # m = 33..64: the decode kernels that stage only kept rows on weights below 2^25 elements, the
    # prefill plans above and where the decode block stages the whole x slab (H200 plan table,
    # 8:32 L = 32 m = 64 4096 x 4096: decode_tc_bf16_256 19.6 us, tc_prefill 16.9 us).
    assert plan(64, 4096, 4096, 8, 32, 32, dtype)[0] in tc
    assert plan(64, 1024, 4096, 8, 32, 32, dtype)[0] in decode
    assert plan(48, 14336, 4096, 8, 32, 32, dtype)[0] in tc + dense
    assert plan(64, 4096, 11008, 4, 32, 32, dtype)[0] in tc + dense
    for m, (n, k), N in itertools.product((65, 256, 4096), ((4096, 4096), (14336, 4096)), (16, 4)):
        kernel, split = plan(m, n, k, N, 32, 32, dtype)
        assert kernel in tc + dense and 1 <= split <= NATIVE[kernel].max_split_k, (m, n, k, N, kernel)
    # Large m at 50%: the expanded weight on dense tensor cores; small layers stay gathered.
    assert plan(4096, 14336, 4096, 16, 32, 32, dtype)[0] in dense
    assert plan(128, 512, 512, 4, 32, 32, dtype)[0] in tc
    # sm_80: no clusters, so small m takes the 16-bit split-K decode kernel; prefill stays native.
    assert plan(1, 4096, 4096, 8, 32, 32, dtype, cc=80)[0] in family("decode_splitk", dtype)
    assert plan(1024, 4096, 4096, 8, 32, 32, dtype, cc=80)[0] in tc + dense
    # Below sm_80: no native kernels at all.
    assert INFO[plan(1024, 4096, 4096, 8, 32, 32, dtype, cc=75)[0]].dtype == "float32"
    # At 75% and large m the warp-specialized gathered kernel (sm_90, L >= 32) beats the expansion;
    # its cp.async form (sm_80, or L = 16 on sm_90) does not.
    assert plan(4096, 14336, 4096, 8, 32, 32, dtype)[0] in tc
    assert plan(4096, 14336, 4096, 8, 32, 32, dtype, cc=80)[0] in dense
    assert plan(4096, 14336, 4096, 8, 32, 16, dtype)[0] in dense
    # Past the prefill kernel's grid (m > 65535 x 64) the expansion takes any pattern.
    tc_name = tc[0]
    assert nmspmm.kernel_supports(tc_name, 65535 * 64, 4, 32, 32, False, 90)
    assert not nmspmm.kernel_supports(tc_name, 65535 * 64 + 1, 4, 32, 32, False, 90)
    assert plan(65535 * 64 + 1, 64, 64, 4, 32, 32, dtype)[0] in dense
    # Short vectors: at large m the expansion; at decode m the 16-bit split-K decode kernel or the
    # tensor-core decode kernel's short-vector form (L = 4, 8 up to m = 16), by cost; L < 4 never the latter.
    assert plan(1024, 4096, 4096, 8, 32, 8, dtype)[0] in dense
    assert plan(8, 4096, 4096, 8, 32, 8, dtype)[0] in family("decode_splitk", dtype) + family("decode_tc", dtype)
    assert plan(8, 4096, 4096, 8, 32, 2, dtype)[0] in family("decode_splitk", dtype)
    assert plan(32, 4096, 4096, 8, 32, 8, dtype)[0] not in family("decode_tc", dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_heuristic_measured_rules(dtype):
    """The plan rules fitted to H100 timings (docs/kernels.md), on cells where they decide."""
    narrow = [k for k in family("decode_tc", dtype) if k.endswith("_64")]
    wide = [k for k in family("decode_tc", dtype) if k.endswith("_256")]
    # m <= 8: a 4096-wide layer takes narrow blocks (clusters of 2) at k = 4096, where each keeps
    # 64 windows, but wide blocks with clusters of 10 at k = 11008 and 14336.
    for m, N in itertools.product((1, 8), (16, 4)):
        assert plan(m, 4096, 4096, N, 32, 32, dtype) == (narrow[0], 2)
        assert plan(m, 4096, 11008, N, 32, 32, dtype) == (wide[0], 10)
        assert plan(m, 4096, 14336, N, 32, 32, dtype) == (wide[0], 10)
    # 9 <= m <= 64 at 4:32 and 8:32 on 1024 columns, and 9 <= m <= 16 at 4:32 on 4096 columns: blocks
    # that stage only their kept x rows; not at m <= 8, nor at 8:32 on 4096 columns, nor at 12:32.
    # At m = 48, 64 on 4096 columns (4:32) their gather of x rows per vector ties them with the
    # gathered prefill kernel (H200 plan table, m = 64: 14.8 against 14.2 us); either may be picked.
    kept = [k for k in family("decode_tc", dtype) if k.endswith("_kept64")]
    for m in (9, 16, 48, 64):
        assert plan(m, 1024, 4096, 4, 32, 32, dtype) == (kept[0], 6)
        assert plan(m, 1024, 4096, 8, 32, 32, dtype) == (kept[0], 6)
        if m <= 16:
            assert plan(m, 4096, 4096, 4, 32, 32, dtype) == (kept[0], 2)
        else:
            assert plan(m, 4096, 4096, 4, 32, 32, dtype) in ((kept[0], 2), (family("tc_prefill", dtype)[0], 4))
        assert plan(m, 4096, 4096, 8, 32, 32, dtype)[0] not in kept
        assert plan(m, 1024, 4096, 12, 32, 32, dtype)[0] not in kept
    assert plan(8, 1024, 4096, 4, 32, 32, dtype)[0] == narrow[0]
    assert plan(16, 11008, 4096, 4, 32, 32, dtype)[0] == wide[0]
    # Split-K of the gathered prefill kernel by estimated time, the fp32 partials included: none at
    # 1024 x 5632 x 2048 (176 tiles; three splits of partials measured 2.5x slower), four where
    # 32 tiles would leave most SMs idle (256 x 4096 x 11008).
    tc = family("tc_prefill", dtype)
    assert plan(1024, 5632, 2048, 4, 32, 32, dtype) == (tc[0], 1)
    assert plan(256, 4096, 11008, 8, 32, 32, dtype) == (tc[0], 4)


def _check(x, values, indices, N, M, L, bias, kernel, split, nm):
    y = ops.spmm_with_plan(x, values, indices, N, M, L, bias, None, None, kernel, split)
    ref, scale = nm.ref_spmm64(x, values, indices, N, M, L, bias)
    assert y.dtype == x.dtype and y.shape == ref.shape
    dense = nm.ref_decompress(values, indices, N, M, L)
    lin = F.linear(x, dense, bias)
    err = (y.double() - ref).abs().max().item()
    err_lin = (lin.double() - ref).abs().max().item()
    assert err <= 2 * err_lin + 2.0 ** -12 * scale, f"{kernel} split {split}: {err:.3e} vs F.linear {err_lin:.3e}"


CASES = [(N, M, L, m) for (N, M, L), m in itertools.product(
    [(16, 32, 32), (4, 32, 32), (3, 16, 16), (7, 8, 64), (33, 64, 128), (1, 32, 32)], (1, 5, 17, 64, 130))]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("N,M,L,m", CASES, ids=lambda v: str(v))
def test_forced_native_plans(N, M, L, m, dtype, nm):
    out, inp = L * 5, M * 11
    values, indices = nm.random_packed(out, inp, N, M, L, dtype, "cuda")
    x = torch.randn(m, inp, device="cuda").to(dtype)
    bias = torch.randn(out, device="cuda").to(dtype) if (N + m) % 2 else None
    for kernel in family("dense_expand", dtype):
        _check(x, values, indices, N, M, L, bias, kernel, 1, nm)
    for kernel in family("tc_prefill", dtype):
        for split in (1, 3):
            _check(x, values, indices, N, M, L, bias, kernel, split, nm)
    if m <= 64:
        for kernel in family("decode_tc", dtype):
            for split in (1, 2, 5):
                _check(x, values, indices, N, M, L, bias, kernel, split, nm)


# Short vectors and element-wise patterns through the dense expansion: output counts that leave a
# partial 32-output block and rows of 2-byte units (37 L outputs), k past two 256-input blocks.
SHORT = [(2, 4, 1), (16, 32, 1), (3, 8, 2), (8, 32, 8), (5, 16, 4), (1, 64, 1), (33, 64, 2)]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("N,M,L", SHORT, ids=lambda v: str(v))
@pytest.mark.parametrize("vectors", [37, 64])
def test_dense_expand_short_vectors(N, M, L, vectors, dtype, nm):
    out, inp = L * vectors, M * (600 // M + 1)
    values, indices = nm.random_packed(out, inp, N, M, L, dtype, "cuda")
    x = torch.randn(3, inp, device="cuda").to(dtype)
    bias = torch.randn(out, device="cuda").to(dtype) if vectors == 37 else None
    for kernel in family("dense_expand", dtype):
        _check(x, values, indices, N, M, L, bias, kernel, 1, nm)


@pytest.mark.cuda
def test_native_kernel_refuses_other_dtype(nm):
    values, indices = nm.random_packed(64, 64, 4, 32, 32, torch.float32, "cuda")
    x = torch.randn(80, 64, device="cuda")
    with pytest.raises(RuntimeError, match="runs bfloat16 inputs"):
        ops.spmm_with_plan(x, values, indices, 4, 32, 32, None, None, None, family("tc_prefill", torch.bfloat16)[0], 1)
