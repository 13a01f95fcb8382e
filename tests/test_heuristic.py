"""The runtime heuristic (csrc/dispatch.h, exposed as torch.ops.nmspmm.spmm_heuristic) returns a
kernel that can run the problem, on any build (no tensors involved).

Kernel ids (csrc/dispatch.h): 0 generic, 1 decode (any GPU), 2-5 and 9-11 tiled (non-packing),
6-8 packed, 12-14 cluster decode (sm_90, m <= 2; 4, 8, 16 warps per block, split_k = cluster
size), 15-17 staged decode (sm_90, m <= 16; 128, 256, 512 columns per block, split_k = cluster
size; for m <= 2 where the cluster decode kernels would walk long k-ranges)."""
import itertools

import pytest
import torch

ops = torch.ops.nmspmm

GENERIC, DECODE = 0, 1
TILED = {2, 3, 4, 5, 9, 10, 11}
TILED_M32 = {9, 10}  # k-block 32 only
PACKED = {6, 7, 8}
CLUSTER_DECODE = {12: 2, 13: 2, 14: 2}  # kernel -> largest m
STAGED_DECODE = {15, 16, 17}  # m <= 16, M <= 512
PREFILL_SPLITS = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16}  # split-K candidates of the prefill plans
WARP_PACKED = {18, 19, 20}  # L >= 32
PRODUCER = {21, 22}  # sm_90 (clusters), L >= 32, 8 / 12 / 16 compressed rows per 32 inputs (or 4:32)
NUM_KERNELS = 23


def producer_wb(N, M):
    """csrc/dispatch.h::producer_shape: compressed rows per stage of kernel 21 (0: not built for it)."""
    if M > 32 or 32 % M:
        return 0
    wb = 32 // M * N
    return wb if wb in (8, 12, 16) else 8 if wb == 4 else 0


def supports(kernel, m, N, M, L, has_col_info):
    """What each kernel can run (the documented contract of csrc/dispatch.h::kernel_supports)."""
    if kernel == GENERIC:
        return True
    if kernel == DECODE:
        return L >= 4 and m <= 16
    if kernel in CLUSTER_DECODE:
        return L >= 4 and m <= CLUSTER_DECODE[kernel]
    if kernel in STAGED_DECODE:
        return L >= 4 and m <= 16 and M <= 512
    if kernel in TILED_M32:
        return L >= 16 and M <= 32
    if kernel in TILED:
        return L >= 16 and M <= 64
    if kernel in PACKED:
        return L >= 16 and M <= 64 and has_col_info
    if kernel in WARP_PACKED:
        return L >= 32
    if kernel in PRODUCER:
        return L >= 32 and producer_wb(N, M) > 0
    return False


MS = [1, 2, 3, 8, 15, 16, 17, 31, 32, 63, 64, 100, 127, 128, 255, 256, 512, 1000, 1023, 1024,
      2048, 4096, 8192, 65536]
SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (4096, 14336), (1024, 4096),
          (128256, 4096), (128, 128), (64, 64), (4, 64), (128, 8192), (32000, 8192)]
PATTERNS = [(2, 4), (1, 4), (2, 8), (4, 8), (16, 32), (12, 32), (8, 32), (4, 32), (1, 2), (8, 64),
            (32, 64), (4, 4)]
LS = [1, 2, 4, 8, 16, 32, 64, 128]
SMS = [132, 108, 78, 1, 0]


def plan(m, n, k, N, M, L, has_col_info, sms=132, clusters=True, max_cluster=16):
    p = ops.spmm_heuristic(m, n, k, N, M, L, has_col_info, sms, clusters, max_cluster)
    assert isinstance(p, list) and len(p) == 2
    return p[0], p[1]


def _check(m, n, k, N, M, L, has_col_info, sms, clusters=True):
    kernel, split_k = plan(m, n, k, N, M, L, has_col_info, sms, clusters)
    where = (f"m={m} n={n} k={k} {N}:{M} L={L} col_info={has_col_info} sms={sms} clusters={clusters} "
             f"-> ({kernel}, {split_k})")
    assert 0 <= kernel < NUM_KERNELS, where
    assert supports(kernel, m, N, M, L, has_col_info), where
    assert isinstance(split_k, int) and 1 <= split_k <= 64, where
    if kernel in CLUSTER_DECODE:
        pass  # any cluster size 1..16 / 1..8 (below)
    elif kernel == DECODE:
        assert split_k & (split_k - 1) == 0, where  # powers of two
    elif kernel not in STAGED_DECODE:
        assert split_k in PREFILL_SPLITS, where  # kSplitCandidates in csrc/dispatch.h
    else:
        # The staged grid stays within 1.7 blocks per SM (clusters that fit one wave), unless even
        # the widest tile without a k-split exceeds it.
        blocks = -(-n // (128 << (kernel - 15))) * split_k
        eff_sms = sms if sms > 0 else 132  # the heuristic's default
        assert blocks <= max(eff_sms * 17 // 10, -(-n // 512)), where
    if kernel == GENERIC:
        assert split_k == 1, where
    if split_k > 1:
        # Every split keeps at least one k-block of 64 inputs (or one row of the compressed weight).
        assert split_k <= max(1, k // 64, k // M * N), where
    if L < 4:
        assert kernel == GENERIC, where
    if m <= 2 and L >= 4:
        assert kernel in (set(CLUSTER_DECODE) | STAGED_DECODE if clusters else {DECODE}), where
        if kernel in CLUSTER_DECODE and sms > 0:
            # Within 1.7 blocks of 8 warps per SM, and 16-warp blocks within 0.75 per SM.
            warps = -(-n // 128) * split_k * (4 << (kernel - 12))
            assert split_k == 1 or warps <= sms * 17 // 10 * 8, where
            assert kernel != 14 or split_k == 1 or -(-n // 128) * split_k <= sms * 3 // 4, where
    elif m <= 16 and L >= 4:
        assert kernel in ({DECODE} | STAGED_DECODE if clusters else {DECODE}), where
    if kernel in CLUSTER_DECODE or kernel in STAGED_DECODE:
        # The cluster size: up to 16 (non-portable) only for 4-warp blocks at m = 1, on layers of at
        # most 16 column tiles (12 up to 32 tiles), and for the 128-column staged kernel at m >= 3
        # on layers whose tiles x 16 fit one block per SM.
        limit = 16 if n <= 2048 else 12 if n <= 4096 else 8
        if kernel == 12 and m == 1:
            assert 1 <= split_k <= limit, where
        elif kernel == 15 and m >= 3 and split_k > 8:
            assert split_k == 16 and -(-n // 128) * 16 <= (sms if sms > 0 else 132), where
        else:
            assert 1 <= split_k <= 8, where
    if kernel in PACKED:
        assert has_col_info, where
    if kernel in PRODUCER:
        assert clusters, where  # tensor copies and mbarriers: compute capability 9.0
    return kernel, split_k


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: f"{p[0]}:{p[1]}")
@pytest.mark.parametrize("L", LS)
def test_heuristic_returns_supported_kernels(pattern, L):
    N, M = pattern
    for (n, k), m, has_col_info in itertools.product(SHAPES, MS, (False, True)):
        if k % M or n % L:
            continue
        _check(m, n, k, N, M, L, has_col_info, 132)
        if m <= 16:
            _check(m, n, k, N, M, L, has_col_info, 132, clusters=False)


@pytest.mark.parametrize("sms", SMS)
def test_heuristic_any_sm_count(sms):
    for (n, k), m, (N, M), L in itertools.product(SHAPES[:4], MS[::3], PATTERNS[:8], (1, 4, 16, 32, 128)):
        for has_col_info in (False, True):
            _check(m, n, k, N, M, L, has_col_info, sms)


def test_heuristic_nonpositive_sm_count_means_default():
    for args in [(1, 4096, 4096, 2, 4, 32, False), (256, 11008, 4096, 8, 32, 32, True),
                 (4096, 4096, 11008, 2, 8, 64, True)]:
        assert plan(*args, 0) == plan(*args, 132) == plan(*args, -5)


def test_heuristic_decode_for_small_m():
    for m, L in itertools.product(range(1, 17), (4, 8, 16, 32, 64, 128)):
        expect = set(CLUSTER_DECODE) | STAGED_DECODE if m <= 2 else {DECODE} | STAGED_DECODE
        assert plan(m, 4096, 4096, 2, 4, L, False)[0] in expect
        assert plan(m, 4096, 4096, 4, 32, L, True)[0] in expect
        # Without thread-block clusters (compute capability < 9.0): the split-K decode kernel.
        assert plan(m, 4096, 4096, 2, 4, L, False, clusters=False)[0] == DECODE
        assert plan(m, 4096, 4096, 4, 32, L, True, clusters=False)[0] == DECODE


# (m, n, k, N) -> (kernel, cluster size) measured best or within 2% of it on H100 in two runs
# (m = 1, 2, every cluster plan with cluster sizes 1..16 and every staged plan).
SMALL_M_PICKS = {(1, 512, 2048, 12): (12, 13), (1, 1024, 4096, 8): (12, 16), (1, 2048, 2048, 16): (12, 16),
                 (1, 3072, 3072, 8): (12, 12), (1, 4096, 4096, 4): (12, 9), (1, 4096, 4096, 16): (12, 12),
                 (1, 4096, 11008, 8): (12, 12), (1, 4096, 14336, 4): (12, 12), (1, 1024, 4096, 16): (14, 8),
                 (1, 2048, 8192, 16): (14, 6), (1, 512, 2048, 4): (12, 4), (1, 8192, 2048, 12): (12, 7),
                 (1, 14336, 4096, 16): (17, 8), (2, 4096, 14336, 12): (15, 7), (2, 4096, 11008, 16): (15, 7),
                 (2, 4096, 4096, 16): (13, 7), (2, 14336, 4096, 12): (17, 8)}


@pytest.mark.parametrize("point", list(SMALL_M_PICKS), ids=str)
def test_heuristic_small_m_decode_plan(point):
    m, n, k, N = point
    assert plan(m, n, k, N, 32, 32, False) == SMALL_M_PICKS[point]


def test_heuristic_small_m_portable_cluster_sizes():
    # A device that does not place clusters of 16 (max_cluster 8): every m <= 2 plan stays within 8.
    for (n, k), N, m in itertools.product(SHAPES[:6] + [(512, 2048), (2048, 2048)], (4, 8, 12, 16), (1, 2)):
        kernel, split_k = plan(m, n, k, N, 32, 32, False, max_cluster=8)
        assert 1 <= split_k <= 8, (m, n, k, N, kernel, split_k)
    with pytest.raises(RuntimeError, match="max_cluster must be >= 1"):
        ops.spmm_heuristic(1, 4096, 4096, 4, 32, 32, False, 132, True, 0)


def test_heuristic_staged_portable_cluster_sizes():
    # max_cluster 8: the staged plans of narrow layers stay within 8 too.
    for (n, k), N, m in itertools.product([(1024, 4096), (512, 2048), (1024, 14336)], (4, 8, 12, 16), (3, 8, 16)):
        kernel, split_k = plan(m, n, k, N, 32, 32, False, max_cluster=8)
        assert kernel in STAGED_DECODE and 1 <= split_k <= 8, (m, n, k, N, kernel, split_k)


def test_heuristic_small_m_without_staged_tile_keeps_cluster_kernel():
    # M > 512: the staged kernel cannot run, so long k-ranges stay on a cluster decode kernel.
    for m in (1, 2):
        kernel, split_k = plan(m, 4096, 65536, 512, 1024, 32, False)
        assert kernel in CLUSTER_DECODE and 1 <= split_k <= (16 if m == 1 else 8)


# (m, n, k, N) -> plan, measured best or within 2% of it on H100 (cluster sizes 1..8): the staged
# decode kernel with the tile and cluster size that give the most blocks within 1.7 per SM; narrow
# layers (128-column tiles x 16 within one block per SM, >= 48 compressed rows per block) with
# clusters of 16 (cluster sizes 1..16). 1024x4096 4:32 (32 rows per block) keeps clusters of 8: 16
# measures 1.17x slower at m = 8.
STAGED_PICKS = {(8, 4096, 4096, 4): (15, 7), (16, 4096, 4096, 8): (15, 7), (4, 1024, 4096, 16): (15, 16),
                (16, 14336, 4096, 8): (17, 8), (8, 11008, 4096, 12): (16, 5), (16, 4096, 11008, 4): (15, 7),
                (8, 4096, 14336, 16): (15, 7), (4, 4096, 11008, 8): (15, 7), (8, 1024, 4096, 16): (15, 16),
                (16, 1024, 4096, 8): (15, 16), (3, 1024, 14336, 8): (15, 16), (8, 256, 4096, 12): (15, 16),
                (8, 1024, 4096, 4): (15, 8)}


@pytest.mark.parametrize("point", list(STAGED_PICKS), ids=str)
def test_heuristic_staged_decode_plan(point):
    m, n, k, N = point
    assert plan(m, n, k, N, 32, 32, False) == STAGED_PICKS[point]
    # Without clusters: always the split-K decode kernel.
    assert plan(m, n, k, N, 32, 32, False, clusters=False)[0] == DECODE


def test_heuristic_generic_for_short_vectors():
    for m, L in itertools.product((1, 16, 17, 4096), (1, 2)):
        assert plan(m, 4096, 4096, 2, 4, L, True) == (GENERIC, 1)


def test_heuristic_packed_only_with_col_info():
    # The packing kernels need col_info; measured slower than non-packing on H100 at every
    # point of benchmarks/results/h100/plan_sweep.csv, the heuristic does not pick them at all.
    for m, (N, M), L in itertools.product(MS, PATTERNS, (16, 32, 64, 128)):
        for has_col_info in (False, True):
            assert plan(m, 4096, 4096, N, M, L, has_col_info)[0] not in PACKED


def test_heuristic_tiled_for_prefill_with_short_vectors():
    # L = 16: a warp's 32 columns span two vectors, so only the tiled kernels run prefill.
    for m, (N, M) in itertools.product((17, 64, 256, 1000, 4096), ((2, 4), (16, 32), (4, 32), (1, 4))):
        assert plan(m, 4096, 4096, N, M, 16, False)[0] in TILED, (m, N, M)


def test_heuristic_prefill_families_at_long_vectors():
    # L >= 32: the tiled and warp-packed plans are priced by one cost model and the cheaper is taken.
    # At 75% sparsity and more the warp-packed kernels win every swept shape by a margin (H100 A/B and
    # flushed sweeps), and the model takes them; the warp-specialized kernels compete too, on devices
    # with clusters.
    for m in (17, 64, 256, 1000, 4096):
        for (N, M), L in itertools.product(((8, 32), (4, 32), (2, 8), (1, 4), (8, 64)), (32, 64, 128)):
            assert plan(m, 4096, 4096, N, M, L, False)[0] in WARP_PACKED | PRODUCER, (m, N, M, L)
            assert plan(m, 4096, 4096, N, M, L, False, clusters=False)[0] in WARP_PACKED, (m, N, M, L)
        for (N, M), L in itertools.product(((16, 32), (12, 32), (2, 4)), (32, 128)):
            assert plan(m, 4096, 4096, N, M, L, False)[0] in TILED | WARP_PACKED | PRODUCER, (m, N, M, L)


# (m, n, k, N) at L = 32 where one family's best plan beats the other's by more than 10% in two
# flushed H100 sweeps at 62.5% / 50% sparsity.
FAMILY_PICKS = {(256, 17920, 6656, 12): WARP_PACKED, (32, 512, 2048, 16): WARP_PACKED}


@pytest.mark.parametrize("point", list(FAMILY_PICKS), ids=str)
def test_heuristic_family_where_measured_apart(point):
    m, n, k, N = point
    # (or the warp-specialized kernels, which compete with both)
    assert plan(m, n, k, N, 32, 32, False)[0] in FAMILY_PICKS[point] | PRODUCER
    assert plan(m, n, k, N, 32, 32, False, clusters=False)[0] in FAMILY_PICKS[point]


def test_heuristic_warp_packed_full_grid_takes_128x128():
    # Four or more waves of 128x128 tiles (2 per SM) without a split: the 128x128 kernel, split 1.
    assert plan(4096, 4096, 4096, 4, 32, 32, False, clusters=False) == (18, 1)
    assert plan(4096, 24576, 8192, 8, 32, 32, False, clusters=False) == (18, 1)
    # With clusters (sm_90) the warp-specialized kernel takes 8:32 and 4:32 on full grids, without a
    # split (kernel-only: 0.97x the 128x128 warp-packed kernel's time at 4096^3 8:32; k-blocks of 128
    # at 4:32: 0.93x). 4096x24576x8192: 3072 tiles of 128x256, 23 rounds of 132 and a last one of 36,
    # which the tail variant splits; 4096^3: 512 tiles, a last round of 116 that no split fits in one
    # round.
    assert plan(4096, 24576, 8192, 8, 32, 32, False)[0] in PRODUCER
    assert plan(4096, 4096, 4096, 4, 32, 32, False) == (21, 1)
    # Small m: a smaller tile or a split fills the GPU.
    kernel, split = plan(64, 4096, 4096, 4, 32, 32, False)
    assert kernel in (19, 20) or split > 1


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
        kernel, split = _check(m, n, k, N, M, 32, False, sms)
        t = tiles_128x256(m, n)
        if kernel == 22:
            assert t > sms and t % sms > 0 and split > 1, (sms, m, n, k, N, split)
    # 2048x11008x4096 on 132 SMs: 688 tiles, 5 rounds and a last one of 28 tiles.
    assert plan(2048, 11008, 4096, 16, 32, 32, False)[0] == 22


def test_heuristic_is_deterministic():
    for args in itertools.product((1, 64, 4096), ((4096, 4096), (11008, 4096)), PATTERNS[:4], (1, 32)):
        m, (n, k), (N, M), L = args
        assert plan(m, n, k, N, M, L, True) == plan(m, n, k, N, M, L, True)


def test_heuristic_tiny_problems():
    # k = M (a single window) and n = L (a single vector): still a valid plan, no empty splits.
    for (N, M), L, m in itertools.product(PATTERNS, (1, 4, 16, 128), (1, 16, 17, 1024)):
        _check(m, L, M, N, M, L, True, 132)
