"""The runtime heuristic (csrc/policy.h, exposed as torch.ops.nmspmm.spmm_heuristic) returns a
registry kernel (csrc/registry.h, torch.ops.nmspmm.kernels()) that can run the problem, on any build
(no tensors involved). Kernels are named and described by the registry; nothing here numbers them."""
import itertools

import pytest
import torch

import nmspmm

ops = torch.ops.nmspmm

KERNELS = nmspmm.kernels()
INFO = {name: nmspmm.kernel_info(name) for name in KERNELS}


DTYPE_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}


def family(*names):
    return {k for k in KERNELS if INFO[k].family in names}


GENERIC, DECODE = "generic_f32", "decode_f32_splitk"
DENSE_F32 = "dense_expand_f32"  # the weight expanded to dense fp32 for the call, then cuBLAS
TILED = family("tiled")
PACKED = family("packed")
CLUSTER_DECODE = family("decode_cluster")  # m <= 2, split_k = cluster size
STAGED_DECODE = family("decode_staged")  # m <= 16, split_k = cluster size
WARP_PACKED = family("warp_packed")  # L >= 32
PRODUCER = family("producer", "producer_tail")  # sm_90a, L >= 32
TAIL = "producer_tail_f32_128x256_sm90a"
PREFILL_SPLITS = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16}  # split-K candidates of the prefill plans


def supports(kernel, m, N, M, L, cc=90):
    return nmspmm.kernel_supports(kernel, m, N, M, L, False, cc)


MS = [1, 2, 3, 8, 15, 16, 17, 31, 32, 63, 64, 100, 127, 128, 255, 256, 512, 1000, 1023, 1024,
      2048, 4096, 8192, 65536]
SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (4096, 14336), (1024, 4096),
          (128256, 4096), (128, 128), (64, 64), (4, 64), (128, 8192), (32000, 8192)]
PATTERNS = [(2, 4), (1, 4), (2, 8), (4, 8), (16, 32), (12, 32), (8, 32), (4, 32), (1, 2), (8, 64),
            (32, 64), (4, 4)]
LS = [1, 2, 4, 8, 16, 32, 64, 128]
SMS = [132, 108, 78, 16, 1]


def plan(m, n, k, N, M, L, sms=132, cc=90, max_cluster=16, dtype=torch.float32):
    p = ops.spmm_heuristic(m, n, k, N, M, L, dtype, cc, sms, max_cluster)
    assert isinstance(p, tuple) and len(p) == 2
    return p[0], p[1]


def _check(m, n, k, N, M, L, sms, cc=90):
    kernel, split_k = plan(m, n, k, N, M, L, sms, cc)
    clusters = cc >= 90
    where = f"m={m} n={n} k={k} {N}:{M} L={L} sms={sms} cc={cc} -> ({kernel}, {split_k})"
    assert kernel in INFO, where
    assert supports(kernel, m, N, M, L, cc), where
    assert split_k <= INFO[kernel].max_split_k, where
    assert isinstance(split_k, int) and 1 <= split_k <= 64, where
    if kernel in CLUSTER_DECODE:
        pass  # any cluster size 1..16 / 1..8 (below)
    elif kernel == DECODE:
        assert split_k & (split_k - 1) == 0, where  # powers of two
    elif kernel not in STAGED_DECODE:
        assert split_k in PREFILL_SPLITS, where  # kSplitCandidates in csrc/cost_model.h
    else:
        # The staged grid stays within 1.7 blocks per SM (clusters that fit one wave), unless even
        # the widest tile without a k-split exceeds it.
        blocks = -(-n // INFO[kernel].tile_n) * split_k
        assert blocks <= max(sms * 17 // 10, -(-n // 512)), where
    if kernel == GENERIC:
        assert split_k == 1, where
    if split_k > 1:
        # Every split keeps at least one k-block of 64 inputs (or one row of the compressed weight).
        assert split_k <= max(1, k // 64, k // M * N), where
    if L < 4:  # no gathering fp32 kernel but these three: the least estimated time wins
        assert kernel in ((DECODE, DENSE_F32, GENERIC) if m <= 16 else (GENERIC, DENSE_F32)), where
    if m <= 2 and L >= 4:
        assert kernel in (CLUSTER_DECODE | STAGED_DECODE if clusters else {DECODE}), where
        if kernel in CLUSTER_DECODE and sms > 0:
            # Within 1.7 blocks of 8 warps per SM, and 16-warp blocks within 0.75 per SM.
            warps = -(-n // 128) * split_k * INFO[kernel].warps
            assert split_k == 1 or warps <= sms * 17 // 10 * 8, where
            assert INFO[kernel].warps != 16 or split_k == 1 or -(-n // 128) * split_k <= sms * 3 // 4, where
    elif m <= 16 and L >= 4:
        assert kernel in ({DECODE} | STAGED_DECODE if clusters else {DECODE}), where
    if kernel in CLUSTER_DECODE or kernel in STAGED_DECODE:
        # The cluster size: up to 16 (non-portable) only for 4-warp blocks at m = 1, on layers of at
        # most 16 column tiles (12 up to 32 tiles), and for the 128-column staged kernel at m >= 3
        # on layers whose tiles x 16 fit one block per SM.
        limit = 16 if n <= 2048 else 12 if n <= 4096 else 8
        if kernel == "decode_f32_cluster_w4" and m == 1:
            assert 1 <= split_k <= limit, where
        elif kernel == "decode_f32_staged_128" and m >= 3 and split_k > 8:
            assert split_k == 16 and -(-n // 128) * 16 <= (sms if sms > 0 else 132), where
        else:
            assert 1 <= split_k <= 8, where
    assert kernel not in PACKED, where  # the heuristic never picks the packing kernels
    if kernel in PRODUCER:
        assert cc == 90 and 32 % M == 0 and 32 // M * N in (4, 8, 12, 16), where
    return kernel, split_k


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: f"{p[0]}:{p[1]}")
@pytest.mark.parametrize("L", LS)
def test_heuristic_returns_supported_kernels(pattern, L):
    N, M = pattern
    for (n, k), m in itertools.product(SHAPES, MS):
        if k % M or n % L:
            continue
        _check(m, n, k, N, M, L, 132)
        if m <= 16:
            _check(m, n, k, N, M, L, 132, cc=80)


@pytest.mark.parametrize("sms", SMS)
def test_heuristic_any_sm_count(sms):
    for (n, k), m, (N, M), L in itertools.product(SHAPES[:4], MS[::3], PATTERNS[:8], (1, 4, 16, 32, 128)):
        _check(m, n, k, N, M, L, sms)


@pytest.mark.parametrize("bad, message", [
    (dict(M=0), "M must be a power of two"), (dict(M=3), "M must be a power of two"),
    (dict(M=128), "M must be a power of two"), (dict(N=0), "N must satisfy 1 <= N <= M"),
    (dict(N=33), "N must satisfy 1 <= N <= M"), (dict(L=3), "L must be a power of two"),
    (dict(L=0), "L must be a power of two"), (dict(m=-1), "m must be >= 0"),
    (dict(n=-128), "n must be >= 0"), (dict(n=100), "divisible by L"), (dict(k=-32), "k must be >= 0"),
    (dict(k=100), "divisible by M"), (dict(cc=0), "compute_capability"), (dict(sms=0), "num_sms must be >= 1"),
    (dict(sms=-5), "num_sms must be >= 1"), (dict(max_cluster=0), "max_cluster must be >= 1"),
    (dict(dtype=torch.int32), "dtype must be float32, float16 or bfloat16"),
])
def test_heuristic_refuses_bad_arguments(bad, message):
    a = dict(m=64, n=4096, k=4096, N=4, M=32, L=32, dtype=torch.float32, cc=90, sms=132, max_cluster=16)
    a.update(bad)
    with pytest.raises(RuntimeError, match=message):
        ops.spmm_heuristic(a["m"], a["n"], a["k"], a["N"], a["M"], a["L"], a["dtype"], a["cc"], a["sms"],
                           a["max_cluster"])


def test_heuristic_empty_problems():
    for m, n, k in [(0, 4096, 4096), (64, 0, 4096), (64, 4096, 0), (1, 0, 0)]:
        kernel, split_k = plan(m, n, k, 4, 32, 32)
        assert kernel in INFO and 1 <= split_k <= INFO[kernel].max_split_k


def test_heuristic_half_precision_plans_the_fp32_fallback():
    # Below sm_80 no native 16-bit kernel runs (the support matrix's last row): a float16 / bfloat16
    # problem runs the fp32 kernels on upcast inputs.
    for m, (N, M), L in itertools.product((1, 8, 16, 64, 1024), ((16, 32), (4, 32), (2, 4)), (1, 4, 32)):
        for dtype in (torch.float16, torch.bfloat16):
            kernel, _ = plan(m, 4096, 4096, N, M, L, cc=75, dtype=dtype)
            assert INFO[kernel].dtype == "float32", (m, N, M, L, dtype, kernel)


def test_heuristic_half_precision_decode_short_vectors_is_native():
    # From sm_80, the decode range (m <= 16) with L < 16 reads the weight in its own dtype (the
    # split-K decode kernel or the expansion): an upcast copy of the weight per call costs more.
    for m, (N, M), L, cc in itertools.product((1, 2, 8, 16), ((16, 32), (4, 32), (2, 4)), (1, 2, 4, 8), (80, 90)):
        for dtype in (torch.float16, torch.bfloat16):
            kernel, _ = plan(m, 4096, 4096, N, M, L, cc=cc, dtype=dtype)
            assert INFO[kernel].dtype == DTYPE_NAMES[dtype], (m, N, M, L, cc, dtype, kernel)


def test_heuristic_compute_capability():
    # Thread-block clusters (cc >= 9.0) enable the cluster and staged decode kernels; the
    # warp-specialized kernels are built for sm_90a only, so a 10.0 device never gets them.
    assert plan(1, 4096, 4096, 4, 32, 32, cc=80)[0] == DECODE
    assert plan(1, 4096, 4096, 4, 32, 32, cc=100)[0] in CLUSTER_DECODE | STAGED_DECODE
    for m in (256, 4096):
        assert plan(m, 4096, 4096, 4, 32, 32, cc=100)[0] not in PRODUCER


def test_registry_names_and_properties():
    assert len(KERNELS) == len(set(KERNELS)) and GENERIC in KERNELS and DECODE in KERNELS
    for name, i in INFO.items():
        # <family>_<dtype>_<tile / variant>[_<arch>]; the decode families put the dtype after "decode".
        assert name.startswith(i.family.split("_")[0] + "_"), name
        assert set(i.family.split("_")) <= set(name.split("_")), name
        assert {"float32": "_f32", "float16": "_f16", "bfloat16": "_bf16"}[i.dtype] in name, name
        if i.tile_m:
            assert f"{i.tile_m}x{i.tile_n}" in name, name
        assert i.needs_sm90a == name.endswith("_sm90a"), name
        assert i.max_split_k >= 1 and i.min_L >= 1 and i.warps >= 1, name
    with pytest.raises(RuntimeError, match="unknown kernel 'tiled_f32_1x1'"):
        nmspmm.kernel_info("tiled_f32_1x1")


def test_heuristic_decode_for_small_m():
    for m, L in itertools.product(range(1, 17), (4, 8, 16, 32, 64, 128)):
        expect = CLUSTER_DECODE | STAGED_DECODE if m <= 2 else {DECODE} | STAGED_DECODE
        assert plan(m, 4096, 4096, 2, 4, L)[0] in expect
        assert plan(m, 4096, 4096, 4, 32, L)[0] in expect
        # Without thread-block clusters (compute capability < 9.0): the split-K decode kernel.
        assert plan(m, 4096, 4096, 2, 4, L, cc=80)[0] == DECODE
        assert plan(m, 4096, 4096, 4, 32, L, cc=80)[0] == DECODE


# (m, n, k, N) -> (kernel, cluster size) measured best or within 2% of it on H100 in two runs
# (m = 1, 2, every cluster plan with cluster sizes 1..16 and every staged plan).
SMALL_M_PICKS = {(1, 512, 2048, 12): ("decode_f32_cluster_w4", 13), (1, 1024, 4096, 8): ("decode_f32_cluster_w4", 16), (1, 2048, 2048, 16): ("decode_f32_cluster_w4", 16),
                 (1, 3072, 3072, 8): ("decode_f32_cluster_w4", 12), (1, 4096, 4096, 4): ("decode_f32_cluster_w4", 9), (1, 4096, 4096, 16): ("decode_f32_cluster_w4", 12),
                 (1, 4096, 11008, 8): ("decode_f32_cluster_w4", 12), (1, 4096, 14336, 4): ("decode_f32_cluster_w4", 12), (1, 1024, 4096, 16): ("decode_f32_cluster_w16", 8),
                 (1, 2048, 8192, 16): ("decode_f32_cluster_w16", 6), (1, 512, 2048, 4): ("decode_f32_cluster_w4", 4), (1, 8192, 2048, 12): ("decode_f32_cluster_w4", 7),
                 (1, 14336, 4096, 16): ("decode_f32_staged_512", 8), (2, 4096, 14336, 12): ("decode_f32_staged_128", 7), (2, 4096, 11008, 16): ("decode_f32_staged_128", 7),
                 (2, 4096, 4096, 16): ("decode_f32_cluster_w8", 7), (2, 14336, 4096, 12): ("decode_f32_staged_512", 8)}


@pytest.mark.parametrize("point", list(SMALL_M_PICKS), ids=str)
def test_heuristic_small_m_decode_plan(point):
    m, n, k, N = point
    assert plan(m, n, k, N, 32, 32) == SMALL_M_PICKS[point]


def test_heuristic_small_m_portable_cluster_sizes():
    # A device that does not place clusters of 16 (max_cluster 8): every m <= 2 plan stays within 8.
    for (n, k), N, m in itertools.product(SHAPES[:6] + [(512, 2048), (2048, 2048)], (4, 8, 12, 16), (1, 2)):
        kernel, split_k = plan(m, n, k, N, 32, 32, max_cluster=8)
        assert 1 <= split_k <= 8, (m, n, k, N, kernel, split_k)
    with pytest.raises(RuntimeError, match="max_cluster must be >= 1"):
        ops.spmm_heuristic(1, 4096, 4096, 4, 32, 32, torch.float32, 90, 132, 0)


def test_heuristic_staged_portable_cluster_sizes():
    # max_cluster 8: the staged plans of narrow layers stay within 8 too.
    for (n, k), N, m in itertools.product([(1024, 4096), (512, 2048), (1024, 14336)], (4, 8, 12, 16), (3, 8, 16)):
        kernel, split_k = plan(m, n, k, N, 32, 32, max_cluster=8)
        assert kernel in STAGED_DECODE and 1 <= split_k <= 8, (m, n, k, N, kernel, split_k)


# (m, n, k, N) -> plan, measured best or within 2% of it on H100 (cluster sizes 1..8): the staged
# decode kernel with the tile and cluster size that give the most blocks within 1.7 per SM; narrow
# layers (128-column tiles x 16 within one block per SM, >= 48 compressed rows per block) with
# clusters of 16 (cluster sizes 1..16). 1024x4096 4:32 (32 rows per block) keeps clusters of 8: 16
# measures 1.17x slower at m = 8.
STAGED_PICKS = {(8, 4096, 4096, 4): ("decode_f32_staged_128", 7), (16, 4096, 4096, 8): ("decode_f32_staged_128", 7), (4, 1024, 4096, 16): ("decode_f32_staged_128", 16),
                (16, 14336, 4096, 8): ("decode_f32_staged_512", 8), (8, 11008, 4096, 12): ("decode_f32_staged_256", 5), (16, 4096, 11008, 4): ("decode_f32_staged_128", 7),
                (8, 4096, 14336, 16): ("decode_f32_staged_128", 7), (4, 4096, 11008, 8): ("decode_f32_staged_128", 7), (8, 1024, 4096, 16): ("decode_f32_staged_128", 16),
                (16, 1024, 4096, 8): ("decode_f32_staged_128", 16), (3, 1024, 14336, 8): ("decode_f32_staged_128", 16), (8, 256, 4096, 12): ("decode_f32_staged_128", 16),
                (8, 1024, 4096, 4): ("decode_f32_staged_128", 8)}


@pytest.mark.parametrize("point", list(STAGED_PICKS), ids=str)
def test_heuristic_staged_decode_plan(point):
    m, n, k, N = point
    assert plan(m, n, k, N, 32, 32) == STAGED_PICKS[point]
    # Without clusters: always the split-K decode kernel.
    assert plan(m, n, k, N, 32, 32, cc=80)[0] == DECODE


def test_heuristic_short_vectors():
    # L = 1, 2 in fp32 past the decode range: only the generic kernel gathers them, and it walks
    # every compressed row per thread (H200, 4096^2 2:4 L = 1: 0.067x cuBLAS fp32 at m = 1024), so
    # the expansion + cuBLAS is cheaper (the policy's search; docs/kernels.md).
    for m, L in itertools.product((17, 4096), (1, 2)):
        assert plan(m, 4096, 4096, 2, 4, L) == (DENSE_F32, 1)
    # L = 4..8 past the decode kernels' m (m > 16): the expansion, not the generic kernel (0.069x).
    for m, L in itertools.product((17, 1024), (4, 8)):
        assert plan(m, 4096, 4096, 2, 4, L) == (DENSE_F32, 1)
    # Decode: the split-K kernel, until its per-row cost passes the expansion's (H200: 2:4 L = 1
    # fp32 at m = 16 measured 52 us, cuBLAS 51 us; test_decode_short_plans.py).
    for m, L in itertools.product((1, 4), (1, 2)):
        assert plan(m, 4096, 4096, 2, 4, L)[0] == DECODE
    assert plan(16, 4096, 4096, 2, 4, 1)[0] in (DECODE, DENSE_F32)


def test_heuristic_never_picks_packing_kernels():
    # The packing kernels need col_info, which compress and NMLinear do not build, and no committed
    # measurement times them, so the heuristic does not pick them.
    for m, (N, M), L in itertools.product(MS, PATTERNS, (16, 32, 64, 128)):
        assert plan(m, 4096, 4096, N, M, L)[0] not in PACKED


def test_heuristic_tiled_for_prefill_with_short_vectors():
    # L = 16: a warp's 32 columns span two vectors, so only the tiled kernels run prefill.
    for m, (N, M) in itertools.product((17, 64, 256, 1000, 4096), ((2, 4), (16, 32), (4, 32), (1, 4))):
        assert plan(m, 4096, 4096, N, M, 16)[0] in TILED, (m, N, M)


def test_heuristic_prefill_families_at_long_vectors():
    # L >= 32: the tiled and warp-packed plans are priced by one cost model and the cheaper is taken.
    # At 75% sparsity and more the warp-packed kernels win every swept shape by a margin (H100 A/B and
    # flushed sweeps), and the model takes them; the warp-specialized kernels compete too, on devices
    # with clusters.
    for m in (17, 64, 256, 1000, 4096):
        for (N, M), L in itertools.product(((8, 32), (4, 32), (2, 8), (1, 4), (8, 64)), (32, 64, 128)):
            assert plan(m, 4096, 4096, N, M, L)[0] in WARP_PACKED | PRODUCER, (m, N, M, L)
            assert plan(m, 4096, 4096, N, M, L, cc=80)[0] in WARP_PACKED, (m, N, M, L)
        for (N, M), L in itertools.product(((16, 32), (12, 32), (2, 4)), (32, 128)):
            assert plan(m, 4096, 4096, N, M, L)[0] in TILED | WARP_PACKED | PRODUCER, (m, N, M, L)


# (m, n, k, N) at L = 32 where one family's best plan beats the other's by more than 10% in two
# flushed H100 sweeps at 62.5% / 50% sparsity.
FAMILY_PICKS = {(256, 17920, 6656, 12): WARP_PACKED, (32, 512, 2048, 16): WARP_PACKED}


@pytest.mark.parametrize("point", list(FAMILY_PICKS), ids=str)
def test_heuristic_family_where_measured_apart(point):
    m, n, k, N = point
    # (or the warp-specialized kernels, which compete with both)
    assert plan(m, n, k, N, 32, 32)[0] in FAMILY_PICKS[point] | PRODUCER
    assert plan(m, n, k, N, 32, 32, cc=80)[0] in FAMILY_PICKS[point]


def test_heuristic_warp_packed_full_grid_takes_128x128():
    # Four or more waves of 128x128 tiles (2 per SM) without a split: the 128x128 kernel, split 1.
    assert plan(4096, 4096, 4096, 4, 32, 32, cc=80) == ("warp_packed_f32_128x128", 1)
    assert plan(4096, 24576, 8192, 8, 32, 32, cc=80) == ("warp_packed_f32_128x128", 1)
    # With clusters (sm_90) the warp-specialized kernel takes 8:32 and 4:32 on full grids, without a
    # split (kernel-only: 0.97x the 128x128 warp-packed kernel's time at 4096^3 8:32; k-blocks of 128
    # at 4:32: 0.93x). 4096x24576x8192: 3072 tiles of 128x256, 23 rounds of 132 and a last one of 36,
    # which the tail variant splits; 4096^3: 512 tiles, a last round of 116 that no split fits in one
    # round.
    assert plan(4096, 24576, 8192, 8, 32, 32)[0] in PRODUCER
    assert plan(4096, 4096, 4096, 4, 32, 32) == ("producer_f32_128x256_sm90a", 1)
    # Small m: a smaller tile or a split fills the GPU.
    kernel, split = plan(64, 4096, 4096, 4, 32, 32)
    assert INFO[kernel].tile_m < 128 or split > 1, (kernel, split)


def tiles_128x256(m, n):
    return -(-m // 128) * -(-n // 256)


def test_heuristic_tail_split_only_on_multi_round_grids_with_a_partial_last_round():
    # The tail variant (split-K on the last round's tiles) is a candidate only where the grid
    # of 128x256 tiles has more than one round (one block per SM) and a partial last one.
    for sms, (m, n, k), (N, M) in itertools.product((132, 108, 78), ((4096, 4096, 4096), (2048, 11008, 4096),
                                                                       (1024, 5632, 2048), (512, 4096, 11008),
                                                                       (1536, 2816, 4096), (3072, 2816, 4096),
                                                                       (256, 24576, 8192)),
                                                    ((16, 32), (12, 32), (8, 32), (4, 32))):
        kernel, split = _check(m, n, k, N, M, 32, sms)
        t = tiles_128x256(m, n)
        if kernel == TAIL:
            assert t > sms and t % sms > 0 and split > 1, (sms, m, n, k, N, split)
    # 2048x11008x4096 on 132 SMs: 688 tiles, 5 rounds and a last one of 28 tiles.
    assert plan(2048, 11008, 4096, 16, 32, 32)[0] == TAIL


def test_heuristic_tiny_problems():
    # k = M (a single window) and n = L (a single vector): still a valid plan, no empty splits.
    for (N, M), L, m in itertools.product(PATTERNS, (1, 4, 16, 128), (1, 16, 17, 1024)):
        _check(m, L, M, N, M, L, 132)
