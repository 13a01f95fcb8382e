"""The native fp16 / bf16 decode kernels (csrc/cuda/kernels/half/decode_half.cuh) through
torch.ops.nmspmm.spmm, on a GPU with thread-block clusters (every test is cuda-marked; the
native path needs compute capability 9.0).

Reference: float64 x @ W^T (+ bias) of the decompressed weight (conftest.ref_spmm64, a plain-torch
scatter). Tolerance: the largest error is at most twice that of F.linear in the same dtype on the
same decompressed weight, plus 1e-4 x scale (scale = max(|x| @ |W|^T) + max|bias|, the largest
partial-sum magnitude).
"""
import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.cuda

ops = torch.ops.nmspmm
DEV = "cuda"
DTYPES = [torch.bfloat16, torch.float16]
MAX_M = 64


def _needs_clusters():
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the native decode kernels need thread-block clusters (compute capability 9.0)")


def _check(nm, x, values, indices, N, M, L, bias=None, y=None):
    """Runs spmm (unless y is given) and checks it against the float64 reference."""
    if y is None:
        y = ops.spmm(x, values, indices, N, M, L, bias)
    assert y.dtype == x.dtype and y.shape == (*x.shape[:-1], values.shape[1])
    ref, scale = nm.ref_spmm64(x, values, indices, N, M, L, bias)
    dense = nm.ref_decompress(values, indices, N, M, L)
    lin = F.linear(x, dense, bias)
    err = (y.double() - ref).abs().max().item()
    err_lin = (lin.double() - ref).abs().max().item()
    assert torch.isfinite(y).all()
    assert err <= 2 * err_lin + 1e-4 * scale, f"error {err:.3g} > 2 x F.linear's {err_lin:.3g} + 1e-4 x {scale:.3g}"
    return y


# Every pattern family of the support matrix: M in {2, 4, 8, 16, 32, 64} (below 8 the staging of x
# reads it element by element), L in {16, 32, 64, 128}.
PATTERNS = [(N, M, L) for M in (2, 4, 8, 16, 32, 64) for L in (16, 32, 64, 128) for N in sorted({1, M // 4 + 1, M})]
MS = [1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 48, 63, 64]


def _case(nm, i, m, N, M, L, dtype, min_vectors):
    """Case i of a pattern sweep: a random weight of n = L x (min_vectors + 0..4) outputs and
    k = M x (6..28) inputs, and m x (k + 9) inputs to take x from (contiguous, strided or offset)."""
    n = L * (min_vectors + (i + N) % 5)
    k = M * (6 + (7 * i + L) % 23)
    values, indices = nm.random_packed(n, k, N, M, L, dtype=dtype, device=DEV)
    big = torch.randn(m, k + 9, device=DEV).to(dtype)
    return n, k, values, indices, big


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("N,M,L", PATTERNS, ids=[f"{n}:{m}:L{l}" for n, m, l in PATTERNS])
def test_decode_matches_fp64(nm, dtype, N, M, L):
    """All m = 1..64 classes (odd m, every 8-token tile count), output tails (n not a multiple of
    the 64 / 256-column blocks), bias, strided and 2-byte-aligned inputs."""
    _needs_clusters()
    for i, m in enumerate(MS):
        n, k, values, indices, big = _case(nm, i, m, N, M, L, dtype, 3)
        variant = i % 4
        x = big[:, :k].contiguous() if variant == 0 else big[:, :k] if variant == 1 else big[:, 1:k + 1]
        bias = torch.randn(n, device=DEV).to(dtype) if variant != 0 else None
        _check(nm, x, values, indices, N, M, L, bias)


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("m,n,k,N,M,L", [
    (1, 4096, 4096, 16, 32, 32),    # narrow blocks, clusters of 2
    (8, 1024, 4096, 4, 32, 32),     # narrow layer, clusters of 6
    (16, 11008, 4096, 8, 32, 32),   # wide blocks, clusters of 4
    (12, 4096, 14336, 12, 32, 32),  # wide blocks, clusters of 12
    (40, 256, 4096, 1, 32, 16),     # m > 32: a block's k-range larger than its xT buffer (passes)
    (64, 8192, 2048, 2, 64, 128),
])
def test_decode_layer_shapes(nm, dtype, m, n, k, N, M, L):
    _needs_clusters()
    values, indices = nm.random_packed(n, k, N, M, L, dtype=dtype, device=DEV)
    x = torch.randn(m, k, device=DEV).to(dtype)
    bias = torch.randn(n, device=DEV).to(dtype)
    _check(nm, x, values, indices, N, M, L, bias)


def _check_masked(x, values, indices, N, M, L, y):
    """Checks y against float64 x @ W^T where each index byte selects row (byte & (M - 1)) of its
    window and repeated positions add, as the kernels do."""
    dtype = x.dtype
    w, out = values.shape
    k = x.shape[-1]
    cols = (torch.arange(w, device=DEV) // N * M)[:, None] + (indices.long() & (M - 1)).repeat_interleave(L, dim=1)
    dense_t = torch.zeros(k, out, dtype=torch.float64, device=DEV)
    dense_t.scatter_add_(0, cols, values.double())
    ref = x.double() @ dense_t
    lin = F.linear(x, dense_t.t().to(dtype))
    err, err_lin = (y.double() - ref).abs().max().item(), (lin.double() - ref).abs().max().item()
    scale = (x.double().abs() @ dense_t.abs()).max().item()
    assert err <= 2 * err_lin + 1e-4 * scale


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
def test_decode_masks_index_bytes(nm, dtype):
    """Index bytes are masked with M - 1: any byte value stays inside its window (the reference
    adds repeated positions, as the kernels do)."""
    _needs_clusters()
    N, M, L, n, k, m = 8, 16, 32, 320, 1024, 5
    values, _ = nm.random_packed(n, k, N, M, L, dtype=dtype, device=DEV)
    indices = torch.randint(0, 256, (k // M * N, n // L), device=DEV, dtype=torch.uint8)
    x = torch.randn(m, k, device=DEV).to(dtype)
    _check_masked(x, values, indices, N, M, L, ops.spmm(x, values, indices, N, M, L))


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
def test_decode_deterministic_3d_input(nm, dtype):
    """Bitwise repeatable (fixed-order on-chip split-K sums); batched [b, t, k] inputs."""
    _needs_clusters()
    N, M, L, n, k = 16, 32, 32, 4096, 4096
    values, indices = nm.random_packed(n, k, N, M, L, dtype=dtype, device=DEV)
    x = torch.randn(2, 3, k, device=DEV).to(dtype)
    y1 = ops.spmm(x, values, indices, N, M, L)
    y2 = ops.spmm(x, values, indices, N, M, L)
    assert torch.equal(y1, y2)
    _check(nm, x, values, indices, N, M, L, y=y1)


def test_decode_runs_native_kernel(nm):
    """bf16 decode takes the native kernel, not the float32 path."""
    _needs_clusters()
    N, M, L, n, k = 8, 32, 32, 1024, 2048
    values, indices = nm.random_packed(n, k, N, M, L, dtype=torch.bfloat16, device=DEV)
    x = torch.randn(4, k, device=DEV).to(torch.bfloat16)
    ops.spmm(x, values, indices, N, M, L)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        ops.spmm(x, values, indices, N, M, L)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events()]
    assert any("decode_half_kernel" in s for s in names), names


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
def test_decode_cuda_graph_and_chained_weights(nm, dtype):
    """Captured in a CUDA graph it replays the eager result; a call whose weight is the previous
    call's output (launched without early start) sees that output complete."""
    _needs_clusters()
    N, M, L, n, k, m = 16, 32, 32, 2048, 4096, 8
    values, indices = nm.random_packed(n, k, N, M, L, dtype=dtype, device=DEV)
    x = torch.randn(m, k, device=DEV).to(dtype)
    eager = ops.spmm(x, values, indices, N, M, L)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        ops.spmm(x, values, indices, N, M, L)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = ops.spmm(x, values, indices, N, M, L)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)

    # y1 [16, 2048] is the values of a 1:32 layer with k = 512 inputs (w = 16 rows).
    x1 = torch.randn(16, k, device=DEV).to(dtype)
    idx2 = nm.random_indices(512, n, 1, 32, L, device=DEV)
    x2 = torch.randn(3, 512, device=DEV).to(dtype)
    for _ in range(3):
        y1 = ops.spmm(x1, values, indices, N, M, L)
        y2 = ops.spmm(x2, y1, idx2, 1, 32, L)
        _check(nm, x2, y1.clone(), idx2, 1, 32, L, y=y2)


def _kept(dtype):
    return "decode_tc_bf16_kept64" if dtype == torch.bfloat16 else "decode_tc_f16_kept64"


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("N,M,L", PATTERNS, ids=[f"{n}:{m}:L{l}" for n, m, l in PATTERNS])
def test_kept_rows_kernel_matches_fp64(nm, dtype, N, M, L):
    """The 64-column blocks that stage x only at their vectors' kept rows, forced through
    spmm_with_plan: every m class, clusters of 1 to 5, output tails, bias, strided input."""
    _needs_clusters()
    for i, m in enumerate(MS):
        n, k, values, indices, big = _case(nm, i, m, N, M, L, dtype, 1)
        x = big[:, :k] if i % 2 else big[:, 1:k + 1]
        bias = torch.randn(n, device=DEV).to(dtype) if i % 3 else None
        y = ops.spmm_with_plan(x, values, indices, N, M, L, bias, None, None, _kept(dtype), 1 + i % 5)
        _check(nm, x, values, indices, N, M, L, bias, y=y)


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("m,n,k,N,M,L,split", [
    (64, 128, 4096, 16, 32, 16, 1),   # 2048 rows per block, slabs of 320: seven passes
    (1, 64, 12288, 32, 32, 32, 1),    # 12288 rows, slabs of 4896: three passes
    (33, 192, 8192, 12, 32, 64, 2),   # 1536 rows per block, slabs of 1280: two passes
])
def test_kept_rows_kernel_passes(nm, dtype, m, n, k, N, M, L, split):
    """Blocks whose compressed rows exceed the kept-row slabs run in passes."""
    _needs_clusters()
    values, indices = nm.random_packed(n, k, N, M, L, dtype=dtype, device=DEV)
    x = torch.randn(m, k, device=DEV).to(dtype)
    bias = torch.randn(n, device=DEV).to(dtype)
    y = ops.spmm_with_plan(x, values, indices, N, M, L, bias, None, None, _kept(dtype), split)
    _check(nm, x, values, indices, N, M, L, bias, y=y)


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
def test_kept_rows_kernel_masks_index_bytes(nm, dtype):
    """Any index byte value selects a row inside its window (masked with M - 1)."""
    _needs_clusters()
    N, M, L, n, k, m = 8, 16, 32, 320, 1024, 5
    values, _ = nm.random_packed(n, k, N, M, L, dtype=dtype, device=DEV)
    indices = torch.randint(0, 256, (k // M * N, n // L), device=DEV, dtype=torch.uint8)
    x = torch.randn(m, k, device=DEV).to(dtype)
    y = ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, _kept(dtype), 3)
    _check_masked(x, values, indices, N, M, L, y)


# Short vectors (L = 4, 8): every vector of a 16-column tile has its own gather and product. Forced
# through spmm_with_plan on both blocks (the heuristic plans them once the plan table holds them).
SHORT = [(N, M, L) for M in (2, 4, 8, 16, 32, 64) for L in (4, 8) for N in sorted({1, M // 4 + 1, M})]


def _block(dtype, cols):
    return f"decode_tc_{'bf16' if dtype == torch.bfloat16 else 'f16'}_{cols}"


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("N,M,L", SHORT, ids=[f"{n}:{m}:L{l}" for n, m, l in SHORT])
def test_short_vectors_match_fp64(nm, dtype, N, M, L):
    """Every m class, both blocks, clusters of 1 to 16, output tails (n a multiple of 8, mostly not
    of 64), bias, strided and offset x."""
    _needs_clusters()
    for i, m in enumerate(MS):
        n = 8 * (3 + (5 * i + N) % 37)
        k = M * (6 + (7 * i + L) % 23)
        values, indices = nm.random_packed(n, k, N, M, L, dtype=dtype, device=DEV)
        big = torch.randn(m, k + 9, device=DEV).to(dtype)
        x = big[:, :k].contiguous() if i % 3 == 0 else big[:, :k] if i % 3 == 1 else big[:, 1:k + 1]
        bias = torch.randn(n, device=DEV).to(dtype) if i % 2 else None
        y = ops.spmm_with_plan(x, values, indices, N, M, L, bias, None, None, _block(dtype, 64 if i % 2 else 256),
                               1 + (3 * i) % 16)
        _check(nm, x, values, indices, N, M, L, bias, y=y)


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("m,n,k,N,M,L,cols,split", [
    (1, 4096, 4096, 16, 32, 8, 256, 8),
    (16, 11008, 4096, 8, 32, 4, 256, 4),
    (8, 4096, 11008, 4, 32, 8, 64, 2),
    (33, 1024, 4096, 16, 32, 4, 64, 6),
    (64, 256, 4096, 8, 32, 8, 256, 1),  # a block's k-range larger than its xT buffer (passes)
])
def test_short_vectors_layer_shapes(nm, dtype, m, n, k, N, M, L, cols, split):
    _needs_clusters()
    values, indices = nm.random_packed(n, k, N, M, L, dtype=dtype, device=DEV)
    x = torch.randn(m, k, device=DEV).to(dtype)
    bias = torch.randn(n, device=DEV).to(dtype)
    y = ops.spmm_with_plan(x, values, indices, N, M, L, bias, None, None, _block(dtype, cols), split)
    _check(nm, x, values, indices, N, M, L, bias, y=y)


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("L", [4, 8])
def test_short_vectors_mask_index_bytes_and_repeat(nm, dtype, L):
    """Any index byte value selects a row inside its window; bitwise repeatable."""
    _needs_clusters()
    N, M, n, k, m = 8, 16, 328, 1024, 5
    values, _ = nm.random_packed(n, k, N, M, L, dtype=dtype, device=DEV)
    indices = torch.randint(0, 256, (k // M * N, n // L), device=DEV, dtype=torch.uint8)
    x = torch.randn(m, k, device=DEV).to(dtype)
    for cols in (64, 256):
        y = ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, _block(dtype, cols), 3)
        _check_masked(x, values, indices, N, M, L, y)
        assert torch.equal(y, ops.spmm_with_plan(x, values, indices, N, M, L, None, None, None, _block(dtype, cols), 3))


def test_short_vectors_refusals(nm):
    """L = 2 is not a decode_tc shape; L = 4 and 8 need out_features a multiple of 8; the kept-row
    block needs L >= 16."""
    x = torch.randn(3, 64, device="cuda" if torch.cuda.is_available() else "cpu").to(torch.bfloat16)
    for L, n, kernel in [(2, 64, "decode_tc_bf16_64"), (4, 68, "decode_tc_bf16_64"), (8, 64, "decode_tc_bf16_kept64")]:
        values, indices = nm.random_packed(n, 64, 2, 8, L, dtype=torch.bfloat16, device=x.device)
        with pytest.raises(RuntimeError, match="cannot run"):
            ops.spmm_with_plan(x, values, indices, 2, 8, L, None, None, None, kernel, 1)
