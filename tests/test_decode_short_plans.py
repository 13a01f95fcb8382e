"""The split-K decode family for every vector length (decode_f32_splitk at L < 4, decode_splitk_bf16,
decode_splitk_f16; csrc/cuda/kernels/decode_splitk/spmm_decode_splitk.cuh): its registry rows and the heuristic's
picks (csrc/policy.h, plan_decode_splitk). CPU only: no tensors on a device."""
import itertools

import pytest
import torch

import nmspmm

ops = torch.ops.nmspmm
INFO = {k: nmspmm.kernel_info(k) for k in nmspmm.kernels()}
SHORT = {torch.float32: "decode_f32_splitk", torch.bfloat16: "decode_splitk_bf16", torch.float16: "decode_splitk_f16"}
DENSE = {torch.bfloat16: "dense_expand_bf16", torch.float16: "dense_expand_f16"}
DTYPE_NAME = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (1024, 4096), (128, 128), (36, 64), (1000, 4096)]
PATTERNS = [(2, 4), (16, 32), (8, 32), (4, 32), (3, 8), (1, 2), (32, 64)]


def plan(m, n, k, N, M, L, dtype=torch.float32, cc=90, sms=132, max_cluster=16):
    kernel, split = ops.spmm_heuristic(m, n, k, N, M, L, dtype, cc, sms, max_cluster)
    return kernel, split


def expected_split(n, k, N, M, sms=132):
    """csrc/policy.h plan_decode_splitk: powers of two up to about 4 blocks per SM, >= 32 rows each."""
    col_blocks, rows, split = -(-n // 128), k // M * N, 1
    while col_blocks * split < 4 * sms and split < 64 and rows // (split * 2) >= 32:
        split *= 2
    return split


@pytest.mark.parametrize("dtype", list(SHORT), ids=str)
def test_registry_rows(dtype):
    info = INFO[SHORT[dtype]]
    assert info.family == "decode_splitk" and info.dtype == DTYPE_NAME[dtype]
    assert info.min_L == 1 and info.max_m == 16 and info.max_M == 0 and info.max_split_k == 64
    assert info.tile_n == 128 and info.warps == 4 and not info.needs_col_info and not info.needs_sm90a
    assert info.min_compute_capability == (0 if dtype == torch.float32 else 80)


@pytest.mark.parametrize("dtype", list(SHORT), ids=str)
def test_kernel_supports_every_L_up_to_m16(dtype):
    name = SHORT[dtype]
    for L, (N, M), m in itertools.product((1, 2, 4, 8, 16, 32, 64, 128), PATTERNS, (0, 1, 2, 3, 5, 8, 13, 16)):
        assert nmspmm.kernel_supports(name, m, N, M, L, False, 90), (name, m, N, M, L)
        assert nmspmm.kernel_supports(name, m, N, M, L, False, 80), (name, m, N, M, L)
    for m in (17, 64, 4096):
        assert not nmspmm.kernel_supports(name, m, 2, 4, 1, False, 90)
    if dtype != torch.float32:  # the 16-bit kernels: sm_80 and newer, as every native kernel
        assert not nmspmm.kernel_supports(name, 1, 2, 4, 1, False, 75)


def test_fp32_short_vectors_take_the_decode_kernel():
    for (n, k), (N, M), L, m in itertools.product(SHAPES, PATTERNS, (1, 2), (1, 2, 3, 5, 8, 13, 16)):
        if k % M or n % L:
            continue
        for cc in (80, 90):
            kernel, split = plan(m, n, k, N, M, L, cc=cc)
            # The least estimated time among the split-K kernel, the expansion and the generic kernel
            # (tiny layers); the split-K kernel whenever m <= 4 on the Llama layers.
            assert kernel in ("decode_f32_splitk", "dense_expand_f32", "generic_f32"), (m, n, k, N, M, L)
            if kernel == "decode_f32_splitk":
                assert split == expected_split(n, k, N, M), (m, n, k, N, M, L)
            if m <= 4 and n >= 1024:
                assert kernel == "decode_f32_splitk", (m, n, k, N, M, L)
    # Above m = 16 the prefill plans (the expansion or the generic kernel, by cost); at L >= 4 the fitted decode plans.
    for L in (1, 2):
        assert plan(17, 4096, 4096, 2, 4, L) in (("generic_f32", 1), ("dense_expand_f32", 1))
    assert plan(1, 4096, 4096, 2, 4, 4)[0] in {k for k, i in INFO.items() if i.family in ("decode_cluster", "decode_staged")}
    assert plan(8, 4096, 4096, 2, 4, 4, cc=80) == ("decode_f32_splitk", expected_split(4096, 4096, 2, 4))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_half_decode_without_a_native_plan_takes_the_16_bit_kernel(dtype):
    for (n, k), (N, M), L, m in itertools.product(SHAPES, PATTERNS, (1, 2, 4, 8), (1, 2, 3, 5, 8, 13, 16)):
        if k % M or n % L:
            continue
        kernel, split = plan(m, n, k, N, M, L, dtype)
        if (N, M) == (2, 4) and n % 8 == 0 and k % 8 == 0:  # 2:4 on sm_90a: the sparse tensor cores
            assert INFO[kernel].family in ("sparse_tc", "decode_sparse_tc"), (m, n, k, L, kernel)
            continue
        if (N, M) == (2, 4) and n % 8 == 0 and INFO[kernel].family == "decode_sparse_tc":  # k % 8 == 4
            continue
        # The 16-bit split-K kernel, or, where its per-row cost of x makes it dearer (larger m), a
        # fused expansion (H200, 16:32 L = 1 4096 x 4096: 30.5 us at m = 16, the split-K kernel 36.1 /
        # 80.5 us at m = 8 / 16; on sm_90a also the wgmma form) or the expansion + cuBLAS in the same
        # dtype. At L >= 4 the fp32 decode kernels on upcast inputs stay candidates, by cost, and on
        # sm_90 the tensor-core decode kernel's short vectors (decode_tc at L = 4, 8).
        upcast_ok = L >= 4 and INFO[kernel].family in ("decode_cluster", "decode_staged", "decode_splitk", "decode_tc")
        fused = INFO[kernel].family in ("expand_mma", "expand_wgmma") and (
            INFO[kernel].dtype == str(dtype).split(".")[-1]) and (m >= 5 or n < 1024)
        assert kernel in (SHORT[dtype], DENSE[dtype]) or upcast_ok or fused, (m, n, k, N, M, L, kernel)
        if kernel == SHORT[dtype]:
            assert split == expected_split(n, k, N, M), (m, n, k, N, M, L)
        if m <= 4 and n >= 1024:  # tiny layers: every plan is a launch or two, estimates within a few %
            assert kernel == SHORT[dtype] or (L >= 4 and INFO[kernel].family == "decode_tc"), (m, n, k, N, M, L)
    # sm_80 (no clusters, no decode_tc): every L at m <= 16.
    for L in (1, 8, 16, 32, 128):
        assert plan(1, 4096, 4096, 8, 32, L, dtype, cc=80) == (SHORT[dtype], expected_split(4096, 4096, 8, 32))
    # sm_90 at L >= 16: the tensor-core decode kernels stay.
    for L in (16, 32, 64, 128):
        assert INFO[plan(8, 4096, 4096, 8, 32, L, dtype)[0]].family == "decode_tc"
    # m > 16: the prefill plans, here the fused expansion (H200, 8:32 L = 4 4096 x 4096 at m = 16:
    # 16.6 us against the split-K kernel's 29.2 us); below sm_80: the fp32 fallback.
    assert INFO[plan(17, 4096, 4096, 8, 32, 8, dtype)[0]].family == "expand_mma"
    assert INFO[plan(1, 4096, 4096, 8, 32, 8, dtype, cc=75)[0]].dtype == "float32"


def test_split_fills_the_gpu_and_keeps_rows_per_split():
    for (n, k), (N, M), sms, dtype in itertools.product(SHAPES, PATTERNS, (132, 108, 16, 1), SHORT):
        if k % M:
            continue
        # Compute capability 8.0: without the sm_90a 2:4 kernels, which take 16-bit 2:4 calls on sm_90.
        kernel, split = plan(4, n, k, N, M, 1, dtype, cc=80, sms=sms)
        if kernel != SHORT[dtype]:  # a tiny fp32 layer: the generic kernel is estimated cheaper
            assert kernel == "generic_f32" and dtype == torch.float32 and n * k <= 64 * 128, (n, k, N, M, sms)
            continue
        assert split & (split - 1) == 0 and 1 <= split <= 64
        assert split == 1 or (k // M * N) // split >= 32
        assert split == 1 or -(-n // 128) * split // 2 < 4 * sms
    # 4096 x 4096 2:4 on 132 SMs: 32 column blocks x 32 splits of 64 compressed rows.
    assert plan(1, 4096, 4096, 2, 4, 1, torch.bfloat16, cc=80) == ("decode_splitk_bf16", 32)
    # A tiny layer: no split below 64 compressed rows.
    assert plan(1, 36, 64, 2, 4, 1, torch.bfloat16, cc=80) == ("decode_splitk_bf16", 1)


@pytest.mark.parametrize("dtype", list(SHORT), ids=str)
def test_forced_plan_checks_on_cpu(dtype):
    """spmm_with_plan runs the reference on the CPU after the same plan checks as the CUDA binding."""
    N, M, L = 2, 4, 1
    values, indices = ops.compress(torch.randn(36, 64).to(dtype), ops.prune(torch.randn(36, 64).to(dtype), N, M, L),
                                   N, M, L)
    x = torch.randn(3, 64).to(dtype)
    y = ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, SHORT[dtype], 2)
    assert y.shape == (3, 36) and y.dtype == dtype
    with pytest.raises(RuntimeError, match=f"kernel {SHORT[dtype]} cannot run m=17"):
        ops.spmm_with_plan(torch.randn(17, 64).to(dtype), values, indices, N, M, L, None, None, None, SHORT[dtype], 1)
    with pytest.raises(RuntimeError, match=r"split_k (of kernel \w+ )?must be in \[1, 64\], got 65"):
        ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, SHORT[dtype], 65)
