"""The CUDA kernels, on a GPU (every test is cuda-marked and skipped without one).

Each supported (registry kernel, split-K) is forced with torch.ops.nmspmm.spmm_with_plan and compared
with float64 dense matmul of the decompressed weight; the heuristic path (spmm) likewise.

Tolerances (float32): ||y - ref|| / ||ref|| < 1e-5, and elementwise
|y - ref| <= 1e-4 * |ref| + 1e-4 * scale with scale = max(|x| @ |W|^T) (+ max|bias|), the size of
the largest partial sum. float16 / bfloat16: rtol = finfo.eps, atol = 1e-4 * scale.

Before each call the caching allocator is poisoned with NaN blocks of exactly the sizes the op
allocates (output, split-K workspace), which it hands straight back to the op: an output element
the kernels forget to write stays NaN and fails the comparison.
"""
import functools
import itertools
import math
import os
import subprocess
import sys
import zlib

import pytest
import torch
import torch.nn as nn

import nmspmm

pytestmark = pytest.mark.cuda

ops = torch.ops.nmspmm
DEV = "cuda"

# The fp32 kernels (16-bit inputs reach them upcast); the native fp16 / bf16 kernels have their own
# tests (test_half_kernels.py, test_half_decode.py).
INFO = {name: nmspmm.kernel_info(name) for name in nmspmm.kernels()}
KERNELS = [k for k in INFO if INFO[k].dtype == "float32"]
INFO = {k: INFO[k] for k in KERNELS}


def family(*names):
    return tuple(k for k in KERNELS if INFO[k].family in names)


GENERIC, DECODE = "generic_f32", "decode_f32_splitk"
TILED = family("tiled")
PACKED = family("packed")
# The decode kernels launched as thread-block clusters (sm_90; split_k = cluster size) -> largest m.
CLUSTER = {k: INFO[k].max_m for k in family("decode_cluster", "decode_staged")}
STAGED = family("decode_staged")  # of which the staged decode kernels (x staged in shared memory)
WARP_PACKED = family("warp_packed")  # L >= 32, any M
PRODUCER = family("producer", "producer_tail")  # sm_90a, L >= 32, 4 / 8 / 12 / 16 compressed rows per 32 inputs
# Kernels named by the tests below (all from the registry).
T128, T64, T32, T64X64 = "tiled_f32_128x128", "tiled_f32_64x128", "tiled_f32_32x128", "tiled_f32_64x64"
P128, P64, P32 = "packed_f32_128x128", "packed_f32_64x128", "packed_f32_32x128"
CL_W4, CL_W8, CL_W16 = "decode_f32_cluster_w4", "decode_f32_cluster_w8", "decode_f32_cluster_w16"
ST_128, ST_256, ST_512 = "decode_f32_staged_128", "decode_f32_staged_256", "decode_f32_staged_512"
WP128, WP64, WP32 = "warp_packed_f32_128x128", "warp_packed_f32_64x128", "warp_packed_f32_32x128"
PROD, TAIL = "producer_f32_128x256_sm90a", "producer_tail_f32_128x256_sm90a"
DENSE = "dense_expand_f32"  # the weight expanded to dense fp32 for the call, then cuBLAS (every pattern)
assert all(k in INFO for k in (T128, T64, T32, T64X64, P128, P64, P32, CL_W4, CL_W8, CL_W16, ST_128, ST_256, ST_512,
                                 WP128, WP64, WP32, PROD, TAIL, DENSE))


def decode_m(kernel, m, other):
    """m for a test of `kernel`: `m` for the decode kernels (capped at a cluster kernel's largest
    m), `other` for the rest."""
    if kernel == DECODE:
        return m
    if kernel in CLUSTER:
        return min(m, CLUSTER[kernel])
    return other


def supports(kernel, m, N, M, L, has_col_info=True):
    """The registry's kernel_supports on an sm_90 device (the kernels the tests force)."""
    return nmspmm.kernel_supports(kernel, m, N, M, L, has_col_info, 90)


def num_sms():
    return torch.cuda.get_device_properties(0).multi_processor_count


def compute_capability():
    major, minor = torch.cuda.get_device_capability()
    return major * 10 + minor


def heuristic(m, w, dtype=torch.float32):
    """The heuristic's plan (kernel name, split_k) on this device (max_cluster 16: H100 / H200)."""
    return ops.spmm_heuristic(m, w.n, w.k, w.N, w.M, w.L, dtype, compute_capability(), num_sms(), 16)


def cluster_split():
    """Whether the tiled kernels' split-K of 2 reduces inside a thread-block cluster here
    (csrc/registry.h::plan_reduces_in_cluster; NMSPMM_NO_CLUSTER_SPLIT=1 turns it off)."""
    return torch.cuda.get_device_capability()[0] >= 9 and os.environ.get("NMSPMM_NO_CLUSTER_SPLIT") != "1"


# ----------------------------------------------------------------------------------------------
# data


def small_shape(M, L):
    """(n, k) with a partial 128-column tile (L <= 64) and a partial k-block of 32 / 64 where the
    pattern allows one."""
    n = 320 if L <= 64 else 384
    k = 7 * 32 + M if M < 32 else (7 * 32 if M == 32 else 5 * 64)
    return n, k


def _random_weight(n, k, N, M, L, seed):
    """values [k*N/M, n] fp32 and uint8 indices [k*N/M, n/L] with a random N:M pattern, on the GPU."""
    g = torch.Generator(device=DEV).manual_seed(seed)
    G, V = k // M, n // L
    pos = torch.rand(G, V, M, device=DEV, generator=g).argsort(dim=-1)[..., :N].sort(dim=-1).values
    indices = pos.permute(0, 2, 1).reshape(G * N, V).to(torch.uint8).contiguous()
    values = torch.randn(G * N, n, device=DEV, generator=g)
    return values, indices


def _dense64(values, indices, N, M, L):
    """Plain-torch scatter of the format (independent of the nmspmm ops), in float64."""
    w, n = values.shape
    cols = (torch.arange(w, device=values.device) // N * M)[:, None] + \
        indices.long().repeat_interleave(L, dim=1)
    dense_t = torch.zeros(w // N * M, n, dtype=torch.float64, device=values.device)
    dense_t.scatter_(0, cols, values.double())
    return dense_t.t().contiguous()


class Weight:
    def __init__(self, n, k, N, M, L):
        self.n, self.k, self.N, self.M, self.L = n, k, N, M, L
        seed = zlib.crc32(repr((n, k, N, M, L)).encode())
        self.values, self.indices = _random_weight(n, k, N, M, L, seed)
        # Packing metadata from the CPU reference (the CUDA col_info op is tested separately).
        cols, packed = ops.col_info(self.indices.cpu(), N, M, L)
        self.col_info, self.packed_indices = cols.to(DEV), packed.to(DEV)
        self.dense64 = _dense64(self.values, self.indices, N, M, L)
        self.bias = torch.randn(n, device=DEV, generator=torch.Generator(device=DEV).manual_seed(seed + 1))

    def args(self, with_col_info=True):
        meta = (self.col_info, self.packed_indices) if with_col_info else (None, None)
        return self.values, self.indices, self.N, self.M, self.L, meta

    def reference(self, x, bias=None):
        x2 = x.double().reshape(-1, self.k)
        y = x2 @ self.dense64.t()
        scale = (x2.abs() @ self.dense64.abs().t()).max().item() if y.numel() else 0.0
        if bias is not None:
            y = y + bias.double()
            scale += bias.double().abs().max().item()
        return y.reshape(*x.shape[:-1], self.n), max(scale, 1e-30)


@functools.lru_cache(maxsize=96)
def small_weight(N, M, L):
    return Weight(*small_shape(M, L), N, M, L)


def run_plan(w, x, kernel, split_k, bias=None, with_col_info=True):
    values, indices, N, M, L, (cols, packed) = w.args(with_col_info)
    if kernel is None:
        return ops.spmm(x, values, indices, N, M, L, bias, cols, packed)
    return ops.spmm_with_plan(x, values, indices, N, M, L, bias, cols, packed, kernel, split_k)


def effective_split(w, m, kernel, split_k, with_col_info=True):
    if kernel is None:
        kernel, split_k = heuristic(m, w)
    if kernel == GENERIC or kernel in CLUSTER:
        return 1
    if split_k == 2 and cluster_split() and kernel in TILED + PACKED + WARP_PACKED:
        return 1  # reduced in a cluster, no workspace
    return split_k  # workspace blocks


def poison(*numels):
    """Fill blocks of these float32 sizes with NaN and free them: the caching allocator hands the
    same blocks to the next allocations of the same sizes (in the same order)."""
    bufs = [torch.full((n,), float("nan"), device=DEV) for n in numels if n > 0]
    del bufs


def check(y, ref, scale, dtype=torch.float32):
    assert y.shape == ref.shape and y.device.type == "cuda"
    yd = y.double()
    nan = torch.isnan(yd)
    assert not nan.any(), f"{int(nan.sum())} of {nan.numel()} output elements not written (NaN)"
    if dtype == torch.float32:
        rtol, atol = 1e-4, 1e-4 * scale
        if ref.numel() and ref.norm() > 0:
            rel = ((yd - ref).norm() / ref.norm()).item()
            assert rel < 1e-5, f"relative error {rel:.3g} >= 1e-5"
    else:
        rtol, atol = torch.finfo(dtype).eps, 1e-4 * scale
    torch.testing.assert_close(yd, ref, rtol=rtol, atol=atol)


def producer_tail_tiles(m, n):
    """csrc/registry.h::producer_tail_tiles: the tail variant's split tiles (the grid's last round)."""
    return math.ceil(m / 128) * math.ceil(n / 256) % num_sms()


def workspace_numel(w, m, kernel, split_k, with_col_info=True):
    if kernel == TAIL:
        return producer_tail_tiles(m, w.n) * split_k * 128 * 256 if split_k > 1 else 0
    return effective_split(w, m, kernel, split_k, with_col_info) * m * w.n


def run_checked(w, x, kernel, split_k, bias=None, with_col_info=True):
    m = x.numel() // w.k
    poison(m * w.n, workspace_numel(w, m, kernel, split_k, with_col_info))
    y = run_plan(w, x, kernel, split_k, bias, with_col_info)
    ref, scale = w.reference(x, bias)
    check(y, ref, scale, x.dtype)
    return y


def test_poison_reaches_the_next_allocation():
    # The premise of the "every element written" checks.
    for numels in [(1000,), (7 * 320, 4 * 7 * 320), (4096 * 384,)]:
        poison(*numels)
        got = [torch.empty(n, device=DEV) for n in numels]
        assert all(torch.isnan(t).all() for t in got)


# ----------------------------------------------------------------------------------------------
# every kernel against the fp64 reference

PATTERNS = [(2, 4), (1, 4), (2, 8), (4, 8), (16, 32), (12, 32), (8, 32), (4, 32)]
PATTERNS_ALL = PATTERNS + [(1, 2), (8, 64), (32, 64)]
MS = [1, 2, 3, 8, 16, 17, 64, 255, 256]
MS_OTHER_L = [1, 3, 16, 17, 64, 255]


def _plan_cases():
    cases = []

    def add(kernel, N, M, L, m, splits):
        if supports(kernel, m, N, M, L):
            for s in (splits if kernel not in (GENERIC, DENSE) else (1,)):  # no split-K
                cases.append(pytest.param(kernel, N, M, L, m, s, id=f"k{kernel}-{N}:{M}-L{L}-m{m}-s{s}"))

    for kernel, (N, M), m in itertools.product(KERNELS, PATTERNS_ALL, MS):
        add(kernel, N, M, 32, m, (1, 2, 8) if kernel in CLUSTER else (1, 2, 4))
    # Cluster sizes that are not powers of two: the last rank reduces a shorter slice of the tile.
    for kernel, (N, M), m in itertools.product(CLUSTER, PATTERNS, MS):
        add(kernel, N, M, 32, m, (3, 5, 6, 7, 16))
    # Split-K counts that are not powers of two (the heuristic's candidates 3, 5, 6, 7, 10, 12), and
    # more splits than k-blocks (8, 16: empty splits), with 17 and 255 rows.
    for kernel, (N, M), m in itertools.product(TILED + PACKED + WARP_PACKED + PRODUCER, PATTERNS, (17, 255)):
        add(kernel, N, M, 32, m, (3, 5, 6, 7, 8, 10, 12, 16))
    for L, kernel, (N, M), m in itertools.product((4, 16, 64, 128), KERNELS, PATTERNS_ALL, MS_OTHER_L):
        add(kernel, N, M, L, m, (1, 4))
    for L, (N, M), m in itertools.product((1, 2, 8), PATTERNS_ALL, MS_OTHER_L):
        add(GENERIC, N, M, L, m, (1,))
        add(DENSE, N, M, L, m, (1,))
        add(DECODE, N, M, L, m, (1, 2))
        for kernel in CLUSTER:
            add(kernel, N, M, L, m, (1, 8))
    return cases


@pytest.mark.parametrize("kernel,N,M,L,m,split_k", _plan_cases())
def test_kernel_matches_fp64(kernel, N, M, L, m, split_k):
    w = small_weight(N, M, L)
    x = torch.randn(m, w.k, device=DEV)
    bias = w.bias if m % 2 else None  # odd m with bias, even m without
    run_checked(w, x, kernel, split_k, bias)


@pytest.mark.parametrize("with_col_info", [False, True], ids=["plain", "col_info"])
@pytest.mark.parametrize("L", [1, 2, 4, 16, 32, 64, 128])
@pytest.mark.parametrize("pattern", PATTERNS_ALL, ids=lambda p: f"{p[0]}:{p[1]}")
def test_auto_path_matches_fp64(pattern, L, with_col_info):
    N, M = pattern
    w = small_weight(N, M, L)
    for m in MS + [1000]:
        x = torch.randn(m, w.k, device=DEV)
        run_checked(w, x, None, 1, w.bias if m % 2 else None, with_col_info)


@pytest.mark.parametrize("kernel,split_k", [(None, 1)] + [(k, s) for k in TILED + PACKED + WARP_PACKED + PRODUCER for s in (1, 2)] +
                         [(PROD, 5), (WP128, 3), (WP64, 7), (T128, 6)])
@pytest.mark.parametrize("m", [1000, 4096])
@pytest.mark.parametrize("pattern", [(2, 4), (8, 32)], ids=lambda p: f"{p[0]}:{p[1]}")
def test_large_m(pattern, m, kernel, split_k):
    w = small_weight(*pattern, 32)
    run_checked(w, torch.randn(m, w.k, device=DEV), kernel, split_k, w.bias)


@pytest.mark.parametrize("split_k", [2, 3, 5, 16])
@pytest.mark.parametrize("pattern", [(16, 32), (12, 32), (8, 32), (4, 32), (2, 4)], ids=lambda p: f"{p[0]}:{p[1]}")
def test_tail_split_on_a_multi_round_grid(pattern, split_k):
    """The tail variant on grids of more than one round with a partial last one (m and n tails too):
    the whole tiles equal the plain warp-specialized kernel with split 1 bit for bit (same k order), the tail's split tiles match
    fp64, and repeated calls give the same bits."""
    N, M = pattern
    n, k = 4640, 2048  # 19 column tiles, the last 32 columns wide
    m = next((m for m in range(1000, 16 * 1024, 128) if math.ceil(m / 128) * 19 > num_sms()
              and producer_tail_tiles(m, n) > 0), None)
    if m is None:
        pytest.skip("no multi-round grid with a tail on this device")
    w = large_weight(n, k, N, M)
    x = torch.randn(m, k, device=DEV)
    y = run_checked(w, x, TAIL, split_k, w.bias)
    assert torch.equal(y, run_plan(w, x, TAIL, split_k, w.bias))
    whole = run_plan(w, x, PROD, 1, w.bias)
    mt = math.ceil(m / 128)
    tiles, tail = mt * 19, producer_tail_tiles(m, n)
    same = torch.zeros_like(y, dtype=torch.bool)
    for t in range(tiles - tail):
        same[(t % mt) * 128:(t % mt + 1) * 128, (t // mt) * 256:(t // mt + 1) * 256] = True
    assert torch.equal(y[same], whole[same])
    assert not same.all() and same.any()


LLAMA = [(4096, 4096), (11008, 4096), (4096, 11008)]


@functools.lru_cache(maxsize=2)
def large_weight(n, k, N, M, L=32):
    return Weight(n, k, N, M, L)


@pytest.mark.parametrize("pattern", [(2, 4), (8, 32)], ids=lambda p: f"{p[0]}:{p[1]}")
@pytest.mark.parametrize("shape", LLAMA, ids=lambda s: f"n{s[0]}-k{s[1]}")
def test_llama_shapes(shape, pattern):
    w = large_weight(*shape, *pattern)
    for m in (1, 16, 32, 64, 256):  # heuristic plans (m = 32, 64: tiled split-K up to 16)
        for with_col_info in (False, True):
            run_checked(w, torch.randn(m, w.k, device=DEV), None, 1, w.bias, with_col_info)
    # Forced plans: decode with and without split-K, every tiled and packed kernel.
    # The staged decode kernels at these k run several double-buffered x chunks per block.
    # Cluster decode kernels also with non-portable clusters of 11 to 16 blocks.
    for kernel, split_k, m in [(DECODE, 1, 16), (DECODE, 8, 3), (CL_W4, 8, 1), (CL_W4, 2, 2), (CL_W8, 1, 1),
                               (CL_W4, 16, 1), (CL_W4, 11, 2), (CL_W8, 16, 2), (CL_W16, 16, 1), (CL_W16, 4, 2), (ST_128, 1, 16),
                               (ST_128, 8, 5), (ST_128, 16, 8), (ST_128, 13, 16), (ST_256, 2, 9), (ST_256, 4, 1), (ST_256, 14, 16), (ST_512, 1, 3), (ST_512, 8, 16),
                               (ST_512, 16, 4)] + [(k, s, 256) for k in TILED + PACKED + WARP_PACKED + PRODUCER for s in (1, 4)]:
        run_checked(w, torch.randn(m, w.k, device=DEV), kernel, split_k, w.bias)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("kernel,split_k", [(None, 1), (GENERIC, 1), (DECODE, 2), (CL_W4, 2), (T64, 2), (P64, 1), (DENSE, 1)])
def test_half_precision(kernel, split_k, dtype):
    N, M, L = 4, 32, 32
    w = small_weight(N, M, L)
    m = decode_m(kernel, 8, 40)
    x = torch.randn(m, w.k, device=DEV).to(dtype)
    vals, idx, _, _, _, (cols, packed) = w.args()
    bias = w.bias.to(dtype)
    vals_h = vals.to(dtype)
    if kernel is None:
        y = ops.spmm(x, vals_h, idx, N, M, L, bias, cols, packed)
    else:
        y = ops.spmm_with_plan(x, vals_h, idx, N, M, L, bias, cols, packed, kernel, split_k)
    assert y.dtype == dtype
    dense = _dense64(vals_h, idx, N, M, L)
    ref = x.double() @ dense.t() + bias.double()
    scale = (x.double().abs() @ dense.abs().t()).max().item() + bias.double().abs().max().item()
    check(y, ref, scale, dtype)


# ----------------------------------------------------------------------------------------------
# layouts, shapes, repetition, determinism

FAMILIES = [(GENERIC, 1), (DECODE, 1), (DECODE, 4), (CL_W4, 1), (CL_W16, 8), (ST_128, 2), (ST_512, 1), (T128, 1), (T32, 2), (T64X64, 1), (P128, 1), (P32, 2),
            (WP128, 1), (PROD, 1), (PROD, 3), (DENSE, 1), (None, 1)]


def fam_id(p):
    return "auto" if p[0] is None else f"{p[0]}-s{p[1]}"


@pytest.mark.parametrize("plan", FAMILIES, ids=fam_id)
@pytest.mark.parametrize("layout", ["transposed", "strided_cols", "row_slice", "offset_cols", "expanded",
                                    "3d", "3d_strided"])
def test_non_contiguous_and_3d_x(layout, plan):
    kernel, split_k = plan
    w = small_weight(8, 32, 32)
    k = w.k
    m = min(CLUSTER.get(kernel, 6), 6)
    h = m // 2
    if layout == "transposed":
        x = torch.randn(k, m, device=DEV).t()
    elif layout == "strided_cols":
        x = torch.randn(m, 2 * k, device=DEV)[:, ::2]
    elif layout == "row_slice":       # row stride k + 8
        x = torch.randn(m, k + 8, device=DEV)[:, :k]
    elif layout == "offset_cols":     # storage offset 1 and row stride k + 1: not 16-byte aligned
        x = torch.randn(m, k + 1, device=DEV)[:, 1:]
    elif layout == "expanded":        # row stride 0
        x = torch.randn(1, k, device=DEV).expand(m, k)
    elif layout == "3d":
        x = torch.randn(2, h, k, device=DEV)
    else:
        x = torch.randn(h, 2 * k, 2, device=DEV)[:, ::2, 1].unsqueeze(0).expand(2, h, k)
    y = run_plan(w, x, kernel, split_k, w.bias)
    assert y.shape == (*x.shape[:-1], w.n)
    ref, scale = w.reference(x, w.bias)
    check(y, ref, scale)


@pytest.mark.parametrize("plan", FAMILIES, ids=fam_id)
def test_empty_batch(plan):
    kernel, split_k = plan
    w = small_weight(2, 4, 32)
    for shape in [(0, w.k), (2, 0, w.k)]:
        y = run_plan(w, torch.randn(*shape, device=DEV), kernel, split_k, w.bias)
        assert y.shape == (*shape[:-1], w.n)


def test_repeated_calls_and_interleaved_shapes():
    w1, w2 = small_weight(2, 4, 32), small_weight(8, 32, 16)
    xs1 = [torch.randn(m, w1.k, device=DEV) for m in (1, 17, 256)]
    xs2 = [torch.randn(m, w2.k, device=DEV) for m in (3, 64)]
    first = [run_plan(w1, x, None, 1, w1.bias) for x in xs1]
    for _ in range(5):
        for x in xs2:
            run_checked(w2, x, None, 1)
        for x, y0 in zip(xs1, first):
            assert torch.equal(run_plan(w1, x, None, 1, w1.bias), y0)
    for x, y0 in zip(xs1, first):
        ref, scale = w1.reference(x, w1.bias)
        check(y0, ref, scale)


DET_PLANS = [(GENERIC, 1), (DECODE, 1), (DECODE, 2), (DECODE, 8), (DECODE, 32), (CL_W4, 1), (CL_W4, 8), (CL_W8, 4),
             (CL_W16, 2), (ST_128, 1), (ST_256, 8), (ST_512, 4), (DENSE, 1), (None, 1)] + \
    [(k, s) for k in TILED + PACKED + WARP_PACKED + PRODUCER for s in (1, 2, 3, 4, 16)]


@pytest.mark.parametrize("plan", DET_PLANS, ids=fam_id)
def test_bitwise_deterministic(plan):
    kernel, split_k = plan
    w = large_weight(512, 2048, 2, 8)
    for m in ((1, 2) if CLUSTER.get(kernel) == 2 else (8, 16) if kernel == DECODE or kernel in STAGED else (8, 200)):
        x = torch.randn(m, w.k, device=DEV)
        ys = [run_plan(w, x, kernel, split_k, w.bias) for _ in range(3)]
        assert torch.equal(ys[0], ys[1]) and torch.equal(ys[0], ys[2])
        ref, scale = w.reference(x, w.bias)
        check(ys[0], ref, scale)


# Run in a child process with NMSPMM_NO_CLUSTER_SPLIT=1 (read once per process): the same plans
# with split-K through the workspace and reduce_splits.
_WORKSPACE_CHILD = r"""
import sys
import torch
import nmspmm
d = torch.load(sys.argv[1])
ops = torch.ops.nmspmm
outs = [ops.spmm_with_plan(d["x"], d["values"], d["indices"], *d["pattern"], d["bias"], d["cols"],
                           d["packed"], k, s) for k, s in d["plans"]]
torch.save(outs, sys.argv[2])
"""


def plans_in_child(tmp_path, tag, w, x, plans, **env):
    """The outputs of `plans` on (w, x), computed by a fresh process with `env` added to its
    environment (the A/B switches are read once per process)."""
    values, indices, N, M, L, (cols, packed) = w.args()
    src, dst = tmp_path / f"in_{tag}.pt", tmp_path / f"out_{tag}.pt"
    torch.save(dict(x=x, values=values, indices=indices, pattern=(N, M, L), bias=w.bias, cols=cols,
                    packed=packed, plans=plans), src)
    subprocess.run([sys.executable, "-c", _WORKSPACE_CHILD, str(src), str(dst)],
                   env=dict(os.environ, **env), check=True, timeout=300)
    return torch.load(dst)


def assert_switch_keeps_bits(tmp_path, tag, w, x, plans, what, **env):
    """Runs `plans` on (w, x) here, checks each against the fp64 reference, and asserts that a fresh
    process with the A/B switch `env` set gives the same bits (`what` names the two paths)."""
    values, indices, N, M, L, (cols, packed) = w.args()
    here = [ops.spmm_with_plan(x, values, indices, N, M, L, w.bias, cols, packed, k, s) for k, s in plans]
    ref, scale = w.reference(x, w.bias)
    for a in here:
        check(a, ref, scale)
    there = plans_in_child(tmp_path, tag, w, x, plans, **env)
    for (k, s), a, b in zip(plans, here, there):
        assert torch.equal(a, b.to(a.device)), f"{N}:{M} m {x.shape[0]} kernel {k} split_k {s}: {what} differ"


def test_cluster_split_bitwise_equals_workspace_split(tmp_path):
    # The cluster reduction sums the partial tiles in the order reduce_splits does (rank 0, 1, ...,
    # then bias), so both reductions give the same bits.
    if not cluster_split():
        pytest.skip("split-K reduces through the workspace on this device")
    w = large_weight(512, 2048, 2, 8)
    x = torch.randn(200, w.k, device=DEV)
    assert_switch_keeps_bits(tmp_path, "ws", w, x, [(k, 2) for k in TILED + PACKED + WARP_PACKED + PRODUCER],
                             "cluster and workspace reductions", NMSPMM_NO_CLUSTER_SPLIT="1")


def test_workspace_split_repeated_and_graphed():
    # Split-K through the workspace (split 4: not a cluster) of a tiled and a warp-packed kernel:
    # repeated calls, calls of another shape and split in between (the allocator reuses the
    # workspace) and CUDA-graph replays keep the bits.
    w = large_weight(1024, 2048, 8, 32)
    values, indices, N, M, L, (cols, packed) = w.args()
    x = torch.randn(200, w.k, device=DEV)
    small = torch.randn(40, w.k, device=DEV)
    # A tiled, a warp-packed and the warp-specialized kernels (the tail variant: every tile of this grid is a tail
    # tile, through its own workspace).
    for k in (T64X64, WP64, PROD, TAIL):
        first = ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, k, 4)
        ref, scale = w.reference(x, None)
        check(first, ref, scale)
        for _ in range(3):
            ops.spmm_with_plan(small, values, indices, N, M, L, None, None, None, k, 8)
            assert torch.equal(ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, k, 4), first)
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, k, 4)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            out = ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, k, 4)
        for _ in range(3):
            out.zero_()
            g.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, first)


def test_overlapped_launches_bitwise_equal_plain_stream_order(tmp_path):
    # On sm_90 the split-K reduction through the workspace launches while its kernel still runs
    # (programmatic dependent launch) and waits for that grid before it reads the partial sums,
    # and the cluster decode kernels start while the call before them still runs (their first
    # weight loads before the wait), so the bits are those of plain stream order (NMSPMM_NO_OVERLAP=1).
    if not cluster_split():
        pytest.skip("no programmatic dependent launch on this device")
    w = large_weight(512, 2048, 4, 32)
    cases = [(300, [(k, s) for k in TILED for s in (1, 2, 4)] + [(k, 2) for k in PACKED]),
             (16, [(DECODE, 8), (T128, 4), (ST_128, 7), (ST_512, 4), (ST_256, 2)]),
             (1, [(CL_W4, 8), (CL_W16, 4), (CL_W8, 2), (CL_W4, 8)])]
    for i, (m, plans) in enumerate(cases):
        x = torch.randn(m, w.k, device=DEV)
        x.mul_(2.0)  # x comes from a kernel launched just before the op
        assert_switch_keeps_bits(tmp_path, i, w, x, plans, "overlapped and plain launches", NMSPMM_NO_OVERLAP="1")


def test_launch_during_transpose_bitwise_equals_plain_stream_order(tmp_path):
    # On sm_90 the tiled, packing and warp-packed kernels launch while the x transpose before them
    # runs (programmatic dependent launch), fetch their index bytes, values and col_info, and wait for
    # the transpose before they copy from xT; grids that leave room on their SMs get padded shared
    # memory. The bits must be those of plain stream order (NMSPMM_NO_XT_OVERLAP=1): sub-wave grids of
    # every tile (m = 40), several blocks per SM (300) and several rounds (1000), splits through the
    # cluster and the workspace; 16:32 (run-time stage shape) and 4:32 (the fixed-WB kernels).
    if not cluster_split():
        pytest.skip("no programmatic dependent launch on this device")
    for N in (4, 16):
        w = large_weight(2048, 1024, N, 32)
        plans = [(k, s) for k in WARP_PACKED + TILED + PRODUCER for s in (1, 2, 4)] + [(k, s) for k in PACKED for s in (1, 2)]
        for m in (40, 300, 1000):
            x = torch.randn(m, w.k, device=DEV)
            x.mul_(2.0)  # x comes from a kernel launched just before the op
            assert_switch_keeps_bits(tmp_path, f"{N}_{m}", w, x, plans, "overlapped and plain launches",
                                     NMSPMM_NO_XT_OVERLAP="1")


def test_chain_reads_previous_output():
    # One call's output is the next call's x: the next call's transpose (plain stream order) waits
    # for the previous SpMM, and its kernel (launched during that transpose) for it.
    if not cluster_split():
        pytest.skip("no programmatic dependent launch on this device")
    w = large_weight(1024, 1024, 8, 32)
    values, indices, N, M, L, (cols, packed) = w.args()
    for k in WARP_PACKED + TILED + PACKED + PRODUCER:
        x = torch.randn(256, 1024, device=DEV)
        ys = [x]
        for _ in range(4):
            ys.append(ops.spmm_with_plan(ys[-1], values, indices, N, M, L, None, cols, packed, k, 1))
        for a, b in zip(ys[:-1], ys[1:]):
            ref, scale = w.reference(a, None)
            check(b, ref, scale)


def test_bulk_store_bitwise_equals_thread_stores(tmp_path):
    # On sm_90 the tiled kernels stage their output (or split-K partial) tile in shared memory and
    # write it with bulk copies, one per tile row; the bits must be those of the per-thread stores
    # (NMSPMM_NO_BULK_STORE=1), with partial tiles in m and n, bias, and the workspace split-K.
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("no bulk stores on this device")
    # 8:32 runs the k-block-32 fixed-WB kernels, 4:32 the k-block-64 ones; every tile size.
    plans = [(k, s) for k in TILED + WARP_PACKED for s in (1, 4)] + [(k, 1) for k in PACKED]
    for i, (N, m) in enumerate(((8, 77), (8, 300), (4, 300))):
        w = large_weight(1056, 1024, N, 32)  # 1056 columns: a partial 128- and 256-column tile
        x = torch.randn(m, w.k, device=DEV)
        assert_switch_keeps_bits(tmp_path, i, w, x, plans, "bulk and per-thread stores", NMSPMM_NO_BULK_STORE="1")


CHAIN_PLANS = [(CL_W4, 8), (CL_W8, 4), (CL_W16, 2), (ST_128, 7), (ST_256, 8), (ST_512, 4), (DECODE, 4), (None, 1)]


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("plan", CHAIN_PLANS, ids=fam_id)
def test_back_to_back_decode_calls(plan, graph):
    # On sm_90 the decode kernels start while the call before them still runs (programmatic
    # dependent launch) and load their first weight rows before they wait for it; x, here the
    # previous call's output as in a model, is read after the wait. A chain of calls, each on the
    # output of the one before, eager and replayed from a CUDA graph, checked against fp64 at every
    # step (the reference takes the step's actual input).
    kernel, split_k = plan
    w = large_weight(2048, 2048, 4, 32)
    m = decode_m(kernel, 16, 16)
    steps = 6

    def chain(x):
        outs = []
        for _ in range(steps):
            x = run_plan(w, x, kernel, split_k, w.bias)
            outs.append(x)
        return outs

    x0 = torch.randn(m, w.k, device=DEV)
    if graph:
        chain(x0)  # warm-up outside the capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            outs = chain(x0)
        x0.copy_(torch.randn(m, w.k, device=DEV))
        g.replay()
    else:
        outs = chain(x0)
    torch.cuda.synchronize()
    for inp, y in zip([x0] + outs[:-1], outs):
        ref, scale = w.reference(inp, w.bias)
        check(y, ref, scale)


@pytest.mark.parametrize("plan", [(CL_W4, 8), (CL_W16, 4), (ST_128, 8), (ST_512, 2), (None, 1)], ids=fam_id)
def test_weight_written_by_the_previous_call(plan):
    # One call's output used at once as the next call's `values`. The decode kernels may load weight
    # rows before they wait for the kernel before them, so the binding must launch this call in
    # plain stream order: its weight is still being written. The first call's output block is
    # poisoned with NaN first, so a load that runs ahead of the writes shows up as NaN. The first
    # call is long and narrow (4 blocks, each streaming all of k) so that the second one would find
    # the GPU free and start at once. (Measured on H100 with the binding's check switched off: this
    # test fails.)
    kernel, split_k = plan
    wa = large_weight(2048, 8192, 16, 32)  # [16, 2048] output = 256 x 128 floats
    N, M, L, kb = 4, 32, 32, 2048
    rows, nb = kb * N // M, 16 * 2048 // (kb * N // M)
    m = decode_m(kernel, 16, 16)
    for trial in range(3):
        xa = torch.randn(16, wa.k, device=DEV)
        xb = torch.randn(m, kb, device=DEV)
        gen = torch.Generator(device=DEV).manual_seed(100 + trial)
        pos = torch.rand(kb // M, nb // L, M, device=DEV, generator=gen).argsort(-1)[..., :N].sort(-1).values
        idx_b = pos.permute(0, 2, 1).reshape(rows, nb // L).to(torch.uint8).contiguous()
        poison(16 * 2048)
        ya = run_plan(wa, xa, ST_512, 1)  # no kernel may run between the two calls
        vb = ya.view(rows, nb)
        if kernel is None:
            yb = ops.spmm(xb, vb, idx_b, N, M, L)
        else:
            yb = ops.spmm_with_plan(xb, vb, idx_b, N, M, L, None, None, None, kernel, split_k)
        torch.cuda.synchronize()
        ref_a, scale_a = wa.reference(xa)
        check(ya, ref_a, scale_a)
        dense_b = _dense64(ya.view(rows, nb), idx_b, N, M, L)
        ref_b = xb.double() @ dense_b.t()
        check(yb, ref_b, max((xb.double().abs() @ dense_b.abs().t()).max().item(), 1e-30))


@pytest.mark.parametrize("m", [1, 2])
@pytest.mark.parametrize("shape", [(4096, 4096), (1024, 4096), (2048, 2048), (512, 2048)], ids=str)
def test_binding_runs_the_heuristic_plan(shape, m):
    # The binding asks the heuristic with the device's largest cluster (an occupancy query, 16 on
    # H100 / H200), so on such a device ops.spmm runs spmm_heuristic's plan: bitwise the same output
    # (another cluster size sums in another order, which changes low bits).
    if torch.cuda.get_device_capability() != (9, 0) or num_sms() != 132:
        pytest.skip("the heuristic's default max_cluster (16) is the H100 / H200 value")
    n, k = shape
    for N in (4, 16):
        w = large_weight(n, k, N, 32)
        vals, idx = w.args()[:2]
        x = torch.randn(m, k, device=DEV)
        kernel, split_k = heuristic(m, w)
        y = ops.spmm(x, vals, idx, N, 32, 32)
        y_plan = ops.spmm_with_plan(x, vals, idx, N, 32, 32, None, None, None, kernel, split_k)
        assert torch.equal(y, y_plan), (shape, m, N, kernel, split_k)


@pytest.mark.parametrize("kernel,split_k", [(DECODE, 16), (DECODE, 64), (CL_W4, 8), (CL_W4, 16), (CL_W16, 8), (ST_128, 8),
                                            (ST_512, 8)])
def test_more_splits_than_windows(kernel, split_k):
    # Decode with more k-splits than windows: the empty splits contribute zeros.
    w = small_weight(2, 32, 32)  # k = 224: 7 windows
    for m in (1, 5, 16):
        if supports(kernel, m, 2, 32, 32):
            run_checked(w, torch.randn(m, w.k, device=DEV), kernel, split_k, w.bias)


# ----------------------------------------------------------------------------------------------
# streams, CUDA graphs, torch.compile


@pytest.mark.parametrize("plan", FAMILIES, ids=fam_id)
def test_side_stream(plan):
    # The op must launch on the current stream. The side stream is first kept busy producing x;
    # a kernel launched on another stream would read x before it is ready.
    kernel, split_k = plan
    w = small_weight(4, 32, 32)
    m = decode_m(kernel, 8, 48)
    a = torch.randn(2048, 2048, device=DEV) / 45.0
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        t = a
        for _ in range(30):
            t = torch.tanh(t @ a)
        x = t[:m, : w.k] * 10.0
        y = run_plan(w, x, kernel, split_k, w.bias)
        y_sum = y.sum()  # consumed on the side stream too
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    ref, scale = w.reference(x, w.bias)
    check(y, ref, scale)
    torch.testing.assert_close(y_sum.double(), ref.sum(), rtol=1e-4, atol=1e-3 * scale)


@pytest.mark.parametrize("with_col_info", [False, True], ids=["plain", "col_info"])
@pytest.mark.parametrize("m", [1, 8, 16, 64, 256])
def test_cuda_graph_capture_and_replay(m, with_col_info):
    w = large_weight(512, 2048, 2, 8)  # k large enough for the heuristic to split k
    static_x = torch.randn(m, w.k, device=DEV)

    def op(x):
        return run_plan(w, x, None, 1, w.bias, with_col_info)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            op(static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_y = op(static_x)
    for _ in range(3):
        new_x = torch.randn(m, w.k, device=DEV)
        static_x.copy_(new_x)
        g.replay()
        eager = op(new_x)
        torch.cuda.synchronize()
        assert torch.equal(static_y, eager)
        ref, scale = w.reference(new_x, w.bias)
        check(static_y, ref, scale)


@pytest.mark.parametrize("plan", [(DECODE, 8), (CL_W4, 8), (CL_W16, 4), (ST_256, 4), (T64, 4), (T128, 2), (T64, 16), (P64, 2), (GENERIC, 1)],
                         ids=fam_id)
def test_cuda_graph_forced_split_k(plan):
    kernel, split_k = plan
    w = large_weight(256, 1024, 2, 4)
    m = decode_m(kernel, 4, 96)
    static_x = torch.randn(m, w.k, device=DEV)
    run_plan(w, static_x, kernel, split_k, w.bias)  # warm-up outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_y = run_plan(w, static_x, kernel, split_k, w.bias)
    for _ in range(2):
        new_x = torch.randn(m, w.k, device=DEV)
        static_x.copy_(new_x)
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_y, run_plan(w, new_x, kernel, split_k, w.bias))
        ref, scale = w.reference(new_x, w.bias)
        check(static_y, ref, scale)


class LinearThenSpmm(nn.Module):
    """nn.Linear followed by the sparse op: the shape of pytorch#157363's regression test."""

    def __init__(self, w):
        super().__init__()
        self.lin = nn.Linear(w.k, w.k)
        self.register_buffer("values", w.values)
        self.register_buffer("indices", w.indices)
        self.register_buffer("cols", w.col_info)
        self.register_buffer("packed", w.packed_indices)
        self.register_buffer("bias", w.bias)
        self.pattern = (w.N, w.M, w.L)

    def forward(self, x):
        h = self.lin(x)
        return ops.spmm(h, self.values, self.indices, *self.pattern, self.bias, self.cols, self.packed)


@pytest.mark.parametrize("m", [1, 256])
def test_torch_compile_reduce_overhead(m):
    torch._dynamo.reset()
    w = large_weight(512, 2048, 2, 8)  # decode and tiled plans with split-K (a workspace)
    mod = LinearThenSpmm(w).to(DEV).eval()
    compiled = torch.compile(mod, fullgraph=True, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(m, w.k, device=DEV)
            y = compiled(x).clone()
            h = mod.lin(x)
            ref, scale = w.reference(h, w.bias)
            torch.cuda.synchronize()
            assert not torch.isnan(y).any()
            # The compiled nn.Linear may round differently from eager; allow for its error too.
            torch.testing.assert_close(y.double(), ref, rtol=1e-4, atol=1e-4 * scale)
            torch.testing.assert_close(y, mod(x), rtol=1e-4, atol=1e-4 * scale)
    torch._dynamo.reset()


# ----------------------------------------------------------------------------------------------
# prune / compress / decompress / col_info on the GPU: bit-identical to the CPU

FORMAT_CASES = [(N, M, L) for (N, M), L in itertools.product(PATTERNS, (1, 16, 32, 64, 128))] + \
    [(1, 2, 4), (8, 64, 16), (32, 64, 1), (3, 8, 2), (8, 8, 32)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", FORMAT_CASES, ids=lambda c: f"{c[0]}:{c[1]}-L{c[2]}")
def test_format_ops_match_cpu_bitwise(case, dtype):
    N, M, L = case
    n = L * max(2, 384 // L)
    k = max(3 * M, 160) // M * M
    w_cpu = torch.randn(n, k).to(dtype)
    w_gpu = w_cpu.to(DEV)
    mask_cpu, mask_gpu = ops.prune(w_cpu, N, M, L), ops.prune(w_gpu, N, M, L)
    assert mask_gpu.is_cuda and torch.equal(mask_gpu.cpu(), mask_cpu)
    v_cpu, i_cpu = ops.compress(w_cpu, mask_cpu, N, M, L)
    v_gpu, i_gpu = ops.compress(w_gpu, mask_gpu, N, M, L)
    assert v_gpu.is_cuda and i_gpu.is_cuda
    assert torch.equal(v_gpu.cpu(), v_cpu) and torch.equal(i_gpu.cpu(), i_cpu)
    d_gpu = ops.decompress(v_gpu, i_gpu, N, M, L)
    assert d_gpu.is_cuda and torch.equal(d_gpu.cpu(), ops.decompress(v_cpu, i_cpu, N, M, L))
    c_cpu, p_cpu = ops.col_info(i_cpu, N, M, L)
    c_gpu, p_gpu = ops.col_info(i_gpu, N, M, L)
    assert c_gpu.is_cuda and p_gpu.is_cuda
    assert torch.equal(c_gpu.cpu(), c_cpu) and torch.equal(p_gpu.cpu(), p_cpu)


def test_prune_ties_match_cpu():
    # Exact ties (equal magnitudes, all-equal and all-zero windows) are broken the same way.
    base = torch.randn(64, 128)
    tied = base.clone()
    tied[:, 1::8] = tied[:, 3::8].neg()
    for w in (tied, torch.ones(64, 128), torch.zeros(64, 128), base.round()):
        for N, M, L in [(2, 8, 16), (1, 4, 1), (3, 8, 64)]:
            assert torch.equal(ops.prune(w.to(DEV), N, M, L).cpu(), ops.prune(w, N, M, L))


def test_format_ops_llama_shape_match_cpu():
    w = torch.randn(4096, 4096)
    for N, M, L in [(2, 4, 32), (8, 32, 64)]:
        mask = ops.prune(w, N, M, L)
        assert torch.equal(ops.prune(w.to(DEV), N, M, L).cpu(), mask)
        v, i = ops.compress(w, mask, N, M, L)
        c, p = ops.col_info(i, N, M, L)
        c2, p2 = ops.col_info(i.to(DEV), N, M, L)
        assert torch.equal(c2.cpu(), c) and torch.equal(p2.cpu(), p)
