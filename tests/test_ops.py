"""Every nmspmm op against an independent plain-torch reference (tests/conftest.py), on fresh
random data, on the CPU and (cuda-marked) on the GPU.

Tolerances:
  * prune, compress, decompress, col_info: exact (torch.equal);
  * spmm float32: |y - ref| <= 1e-4 * |ref| + 1e-5 * scale elementwise and ||y - ref|| / ||ref||
    < 1e-5, where ref is float64 dense matmul and scale = max(|x| @ |W|^T) (+ max|bias|);
  * spmm float16 / bfloat16 (inputs already in that dtype, so only the output rounding and the
    fp32 accumulation differ from the fp64 reference): rtol = finfo(dtype).eps (two half-ulps),
    atol = 1e-5 * scale.
"""
import itertools

import pytest
import torch
import torch.nn.functional as F

import nmspmm
from conftest import ref_prune  # noqa: F401  (the mask rule of docs/format.md, plain torch)

ops = torch.ops.nmspmm

# The patterns the project promises, and the vector lengths every op is checked with.
PATTERNS = [(2, 4), (1, 4), (2, 8), (4, 8), (16, 32), (12, 32), (8, 32), (4, 32)]
LS = [1, 16, 32, 64, 128]
# A few more corners of the format: M = 2, M = 64, N = M, L = 2, 4, 8.
EXTRA = [(1, 2, 1), (1, 2, 4), (2, 2, 8), (8, 64, 16), (32, 64, 1), (3, 8, 2), (8, 8, 4)]
CASES = [(N, M, L) for (N, M), L in itertools.product(PATTERNS, LS)] + EXTRA


def case_id(c):
    return f"{c[0]}:{c[1]}-L{c[2]}"


def shape_for(M, L):
    """(out, in) small enough for the CPU but with a partial 128-column tile and a partial
    64-input k-block whenever the pattern allows it."""
    out = L * max(2, 160 // L)       # L<=32: 160 = 128 + 32; L=64: 192; L=128: 256
    inp = max(3 * M, 96)             # M<=32: 96 = 64 + 32; M=64: 192
    return out, inp


# ----------------------------------------------------------------------------------------------
# Plain-torch references for prune / compress / col_info (decompress and spmm: conftest).


def ref_norms(weight, M, L):
    """fp64 squared L2 norm of each (vector, window, position): [out/L, in/M, M]."""
    out, inp = weight.shape
    w = weight.double().reshape(out // L, L, inp // M, M)
    return (w * w).sum(dim=1)


def ref_compress(weight, mask, N, M, L):
    out, inp = weight.shape
    G, V = inp // M, out // L
    m = mask[::L].reshape(V, G, M)
    pos = torch.arange(M, device=mask.device).expand(V, G, M)
    # Kept positions first, in ascending order: key = p for kept, M + p for dropped.
    key = torch.where(m, pos, pos + M)
    kept = key.sort(dim=-1).values[..., :N]                      # [V, G, N]
    indices = kept.permute(1, 2, 0).reshape(G * N, V).to(torch.uint8)
    cols = (torch.arange(G * N, device=mask.device) // N * M)[:, None] + \
        indices.long().repeat_interleave(L, dim=1)               # [w, out]
    values = weight.t().gather(0, cols)
    return values, indices


def mask_from_indices(nm, indices, N, M, L, out, inp):
    mask_t = torch.zeros(inp, out, dtype=torch.bool, device=indices.device)
    mask_t.scatter_(0, nm.ref_columns(indices, N, M, L), True)
    return mask_t.t().contiguous()


# ----------------------------------------------------------------------------------------------
# prune


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_prune_matches_reference_and_properties(case, device):
    N, M, L = case
    out, inp = shape_for(M, L)
    weight = torch.randn(out, inp, device=device)
    mask = ops.prune(weight, N, M, L)
    assert mask.dtype == torch.bool and mask.shape == weight.shape and mask.device == weight.device
    assert torch.equal(mask.cpu(), ref_prune(weight.cpu(), N, M, L))

    V, G = out // L, inp // M
    m4 = mask.cpu().reshape(V, L, G, M)
    # The same positions for all L rows of a vector, exactly N per (window, vector).
    assert torch.equal(m4, m4[:, :1].expand_as(m4))
    assert (m4[:, 0].sum(-1) == N).all()
    # Kept positions have maximal norm: every kept norm >= every dropped norm of the window,
    # and an equal dropped norm only at a higher position.
    norms = ref_norms(weight.cpu(), M, L)
    keep = m4[:, 0]
    inf = torch.tensor(float("inf"), dtype=torch.float64)
    min_kept = torch.where(keep, norms, inf).amin(-1)
    max_dropped = torch.where(keep, -inf, norms).amax(-1)
    assert (min_kept >= max_dropped).all()


def test_prune_ties_keep_lower_index(device):
    N, M, L = 2, 8, 4
    out, inp = 8, 32
    base = torch.randn(out, inp, device=device)
    # Every window: positions 1, 3, 5, 6 share one magnitude (signs differ), larger than the rest.
    w = base.clone() * 0.1
    big = torch.randn(out, inp // M, device=device).abs() + 5.0
    for p, sign in ((1, 1.0), (3, -1.0), (5, 1.0), (6, -1.0)):
        w[:, p::M] = sign * big
    mask = ops.prune(w, N, M, L).cpu()
    expect = torch.zeros(M, dtype=torch.bool)
    expect[[1, 3]] = True
    assert torch.equal(mask.reshape(out, inp // M, M), expect.expand(out, inp // M, M))
    # All-equal windows keep positions 0..N-1; all zeros too.
    for w in (torch.ones(out, inp, device=device), torch.zeros(out, inp, device=device)):
        mask = ops.prune(w, 3, M, L).cpu().reshape(out, inp // M, M)
        assert mask[..., :3].all() and not mask[..., 3:].any()


def test_prune_is_deterministic(device):
    w = torch.randn(256, 128, device=device)
    masks = [ops.prune(w, 8, 32, 16) for _ in range(3)]
    assert all(torch.equal(masks[0], m) for m in masks[1:])
    # A permuted copy of the vector rows gives the same mask (the norm is over the whole vector).
    perm = torch.cat([torch.randperm(16) + 16 * v for v in range(256 // 16)]).to(device)
    assert torch.equal(ops.prune(w[perm], 8, 32, 16), masks[0][perm])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_prune_half_precision(dtype, device):
    w = torch.randn(64, 64, device=device).to(dtype)
    assert torch.equal(ops.prune(w, 2, 8, 16).cpu(), ref_prune(w.cpu(), 2, 8, 16))


def test_prune_non_contiguous_weight(device):
    big = torch.randn(64, 128, device=device)
    w = big[:, ::2]
    assert not w.is_contiguous()
    assert torch.equal(ops.prune(w, 2, 4, 16).cpu(), ref_prune(w.cpu(), 2, 4, 16))


# ----------------------------------------------------------------------------------------------
# compress / decompress


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_compress_decompress_round_trip(case, device, nm):
    N, M, L = case
    out, inp = shape_for(M, L)
    weight = torch.randn(out, inp, device=device)
    # A random valid mask (not the pruned one), so compress is tested on any N:M pattern.
    mask = mask_from_indices(nm, nm.random_indices(inp, out, N, M, L, device), N, M, L, out, inp)
    values, indices = ops.compress(weight, mask, N, M, L)
    assert values.shape == (inp // M * N, out) and values.dtype == weight.dtype
    assert indices.shape == (inp // M * N, out // L) and indices.dtype == torch.uint8
    assert values.device == weight.device and indices.device == weight.device
    rv, ri = ref_compress(weight.cpu(), mask.cpu(), N, M, L)
    assert torch.equal(indices.cpu(), ri)
    assert torch.equal(values.cpu(), rv)
    # Indices strictly ascending within each (window, vector).
    idx = indices.cpu().long().reshape(inp // M, N, out // L)
    assert (idx.diff(dim=1) > 0).all() and idx.max() < M
    dense = ops.decompress(values, indices, N, M, L)
    assert dense.shape == weight.shape and dense.dtype == weight.dtype
    assert torch.equal(dense, weight * mask)
    assert torch.equal(dense.cpu(), nm.ref_decompress(values.cpu(), indices.cpu(), N, M, L))


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_decompress_matches_reference(case, device, nm):
    N, M, L = case
    out, inp = shape_for(M, L)
    values, indices = nm.random_packed(out, inp, N, M, L, device=device)
    dense = ops.decompress(values, indices, N, M, L)
    assert torch.equal(dense, nm.ref_decompress(values, indices, N, M, L))
    # Exactly N non-zeros per (row, window) (values are random normals: no exact zeros).
    assert (dense.cpu().reshape(out, inp // M, M) != 0).sum(-1).eq(N).all()
    # Compressing the dense weight under its own mask gives back the same format.
    v2, i2 = ops.compress(dense, dense != 0, N, M, L)
    assert torch.equal(v2, values) and torch.equal(i2, indices)


def test_reference_decompress_cross_check(nm):
    # The scatter reference against plain loops, so the reference itself is trustworthy.
    for N, M, L in [(2, 4, 1), (1, 4, 2), (3, 8, 4), (4, 32, 16)]:
        out, inp = 2 * L * 2, 2 * M
        values, indices = nm.random_packed(out, inp, N, M, L)
        assert torch.equal(nm.ref_decompress(values, indices, N, M, L),
                           nm.ref_decompress_loops(values, indices, N, M, L))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_compress_decompress_half_precision(dtype, device):
    N, M, L = 2, 4, 16
    w = torch.randn(64, 128, device=device).to(dtype)
    mask = ops.prune(w, N, M, L)
    values, indices = ops.compress(w, mask, N, M, L)
    assert values.dtype == dtype
    assert torch.equal(ops.decompress(values, indices, N, M, L), w * mask)


def test_compress_non_contiguous_inputs(device):
    N, M, L = 2, 8, 4
    big = torch.randn(32, 128, device=device)
    w = big[:, ::2]
    mask = ops.prune(w.contiguous(), N, M, L)
    mask_nc = torch.cat([mask, mask], 1)[:, :64]
    values, indices = ops.compress(w, mask_nc, N, M, L)
    rv, ri = ref_compress(w.cpu(), mask.cpu(), N, M, L)
    assert torch.equal(values.cpu(), rv) and torch.equal(indices.cpu(), ri)
    # decompress of non-contiguous values / indices views.
    v_nc = torch.cat([values, values], 1)[:, : values.shape[1]]
    i_nc = torch.cat([indices, indices], 1)[:, : indices.shape[1]]
    assert torch.equal(ops.decompress(v_nc, i_nc, N, M, L), w * mask)


def test_empty_weight(device):
    w = torch.randn(0, 64, device=device)
    mask = ops.prune(w, 2, 4, 16)
    values, indices = ops.compress(w, mask, 2, 4, 16)
    assert values.shape == (32, 0) and indices.shape == (32, 0)
    assert ops.decompress(values, indices, 2, 4, 16).shape == (0, 64)


# ----------------------------------------------------------------------------------------------
# col_info


def check_col_info(nm, cols, packed, indices, N, M, L):
    w, V = indices.shape
    out, inp = V * L, w // N * M
    n_tiles, k_blocks = -(-out // 128), -(-inp // 64)
    assert cols.dtype == torch.uint8 and cols.shape == (n_tiles, k_blocks, 64)
    assert packed.dtype == torch.uint8 and packed.shape == indices.shape
    cols, packed = cols.cpu().long(), packed.cpu().long()
    colmap = nm.ref_columns(indices.cpu(), N, M, L)          # [w, out] dense input column
    for t in range(n_tiles):
        sub = colmap[:, t * 128:(t + 1) * 128]
        for b in range(k_blocks):
            used = torch.unique(sub[(sub // 64) == b] % 64)   # sorted, distinct
            row = cols[t, b]
            # Ascending in-block offsets used by some kept weight of the tile (exactly the union),
            # then 255 padding.
            assert torch.equal(row[: used.numel()], used), (t, b)
            assert (row[used.numel():] == 255).all(), (t, b)
    # packed_indices map back to the original columns: col_info[tile, block, slot] = offset.
    v = torch.arange(V).expand(w, V)
    c = colmap[:, ::L]                                    # [w, V] column of each (row, vector)
    t = (v * L) // 128
    assert torch.equal(cols[t, c // 64, packed], c % 64)
    assert (packed < 64).all()


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_col_info_properties(case, device, nm):
    N, M, L = case
    out, inp = shape_for(M, L)
    _, indices = nm.random_packed(out, inp, N, M, L, device=device)
    cols, packed = ops.col_info(indices, N, M, L)
    assert cols.device == indices.device and packed.device == indices.device
    check_col_info(nm, cols, packed, indices, N, M, L)


@pytest.mark.parametrize("layout", ["transposed", "strided"])
def test_col_info_non_contiguous_indices(layout, device, nm):
    N, M, L = 4, 32, 16
    _, indices = nm.random_packed(256, 128, N, M, L, device=device)
    if layout == "transposed":  # dense, strides (1, rows)
        view = indices.t().contiguous().t()
    else:
        view = torch.cat([indices, indices], 1)[:, : indices.shape[1]]
    assert not view.is_contiguous()
    cols, packed = ops.col_info(view, N, M, L)
    ref_cols, ref_packed = ops.col_info(indices, N, M, L)
    assert torch.equal(cols, ref_cols) and torch.equal(packed, ref_packed)
    check_col_info(nm, cols, packed, indices, N, M, L)


def test_format_ops_transposed_layout_inputs(device, nm):
    # Dense inputs whose memory is in transposed order (e.g. a weight stored as W.T.contiguous().T).
    N, M, L = 2, 8, 16
    w = torch.randn(128, 64, device=device).t()  # [64, 128]
    assert not w.is_contiguous()
    mask = ops.prune(w, N, M, L)
    assert torch.equal(mask.cpu(), ref_prune(w.cpu(), N, M, L))
    values, indices = ops.compress(w, mask.t().contiguous().t(), N, M, L)
    rv, ri = ref_compress(w.cpu(), mask.cpu(), N, M, L)
    assert torch.equal(values.cpu(), rv) and torch.equal(indices.cpu(), ri)
    dense = ops.decompress(values.t().contiguous().t(), indices.t().contiguous().t(), N, M, L)
    assert torch.equal(dense, w * mask)


def test_col_info_dense_and_sparse_extremes(device, nm):
    # N = M: every offset is used, packed == in-block offset.
    idx = torch.arange(8, dtype=torch.uint8, device=device).repeat(128 // 8)[:, None]
    idx = idx.expand(-1, 4).contiguous()  # [128, 4], L = 32 -> out = 128, in = 128
    cols, packed = ops.col_info(idx, 8, 8, 32)
    assert torch.equal(cols.cpu(), torch.arange(64, dtype=torch.uint8).expand(1, 2, 64))
    check_col_info(nm, cols, packed, idx, 8, 8, 32)
    # 1:32 with every vector on position 5: one column per window.
    idx = torch.full((4, 8), 5, dtype=torch.uint8, device=device)  # in = 128, out = 256 (L=32)
    cols, packed = ops.col_info(idx, 1, 32, 32)
    assert torch.equal(cols[0, 0, :3].cpu(), torch.tensor([5, 37, 255], dtype=torch.uint8))
    assert torch.equal(packed.cpu(), torch.tensor([0, 1, 0, 1], dtype=torch.uint8)[:, None].expand(4, 8))


def test_nmweight_api(device):
    N, M, L = 2, 8, 16
    w = torch.randn(96, 64, device=device)
    packed = nmspmm.compress(w, N, M, L)
    assert isinstance(packed, nmspmm.NMWeight)
    assert packed.shape == (96, 64) and packed.out_features == 96 and packed.in_features == 64
    assert packed.sparsity == 0.75 and packed.dtype == torch.float32 and packed.device == w.device
    # compress builds no packing metadata (the heuristic never uses it); with_col_info() adds it.
    assert packed.col_info is None and packed.packed_indices is None
    packed = packed.with_col_info()
    assert packed.col_info is not None and packed.packed_indices is not None
    mask = nmspmm.prune(w, N, M, L)
    assert torch.equal(nmspmm.decompress(packed), w * mask)
    cols, pk = nmspmm.col_info(packed)
    assert torch.equal(cols, packed.col_info) and torch.equal(pk, packed.packed_indices)
    assert packed.nbytes() == 16 * 96 * 4 + 16 * 6
    assert packed.nbytes(with_metadata=True) == packed.nbytes() + cols.numel() + pk.numel()
    # An explicit mask is honoured.
    values, indices = ops.compress(w, mask, N, M, L)
    p2 = nmspmm.compress(w, N, M, L, mask=mask)
    assert torch.equal(p2.values, values) and torch.equal(p2.indices, indices)
    h = packed.to(dtype=torch.float16)
    assert h.values.dtype == torch.float16 and h.indices.dtype == torch.uint8
    assert h.col_info.dtype == torch.uint8
    x = torch.randn(3, 64, device=device)
    torch.testing.assert_close(nmspmm.spmm(x, packed), x @ (w * mask).t(), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------------------
# spmm

F32_TOL = dict(rtol=1e-4, atol_rel=1e-5, rel_norm=1e-5)


def half_tol(dtype):
    return dict(rtol=torch.finfo(dtype).eps, atol_rel=1e-5)


@pytest.mark.parametrize("with_col_info", [False, True], ids=["plain", "col_info"])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_spmm_matches_fp64_dense(case, with_col_info, device, nm):
    N, M, L = case
    out, inp = shape_for(M, L)
    values, indices = nm.random_packed(out, inp, N, M, L, device=device)
    x = torch.randn(5, inp, device=device)
    extra = ops.col_info(indices, N, M, L) if with_col_info else (None, None)
    y = ops.spmm(x, values, indices, N, M, L, None, *extra)
    assert y.shape == (5, out) and y.dtype == torch.float32 and y.device == x.device
    ref, scale = nm.ref_spmm64(x, values, indices, N, M, L)
    nm.assert_close_to_ref(y, ref, scale, **F32_TOL)


@pytest.mark.parametrize("m", [1, 2, 3, 16, 17, 64])
def test_spmm_batch_sizes(m, device, nm):
    N, M, L = 4, 32, 32
    values, indices = nm.random_packed(128, 256, N, M, L, device=device)
    x = torch.randn(m, 256, device=device)
    ref, scale = nm.ref_spmm64(x, values, indices, N, M, L)
    nm.assert_close_to_ref(ops.spmm(x, values, indices, N, M, L), ref, scale, **F32_TOL)


def test_spmm_bias(device, nm):
    N, M, L = 2, 8, 32
    values, indices = nm.random_packed(160, 96, N, M, L, device=device)
    x, bias = torch.randn(7, 96, device=device), torch.randn(160, device=device)
    ref, scale = nm.ref_spmm64(x, values, indices, N, M, L, bias)
    nm.assert_close_to_ref(ops.spmm(x, values, indices, N, M, L, bias), ref, scale, **F32_TOL)
    cols, packed = ops.col_info(indices, N, M, L)
    y = ops.spmm(x, values, indices, N, M, L, bias=bias, col_info=cols, packed_indices=packed)
    nm.assert_close_to_ref(y, ref, scale, **F32_TOL)


@pytest.mark.parametrize("shape", [(2, 3), (2, 1, 4), (1,), ()], ids=str)
def test_spmm_leading_dims(shape, device, nm):
    N, M, L = 2, 4, 16
    values, indices = nm.random_packed(64, 32, N, M, L, device=device)
    x = torch.randn(*shape, 32, device=device)
    y = ops.spmm(x, values, indices, N, M, L)
    assert y.shape == (*shape, 64)
    ref, scale = nm.ref_spmm64(x, values, indices, N, M, L)
    nm.assert_close_to_ref(y, ref, scale, **F32_TOL)


@pytest.mark.parametrize("layout", ["transposed", "strided_cols", "row_slice", "offset_cols", "expanded"])
def test_spmm_non_contiguous_x(layout, device, nm):
    N, M, L = 8, 32, 16
    k = 64
    values, indices = nm.random_packed(48, k, N, M, L, device=device)
    if layout == "transposed":
        x = torch.randn(k, 6, device=device).t()
    elif layout == "strided_cols":
        x = torch.randn(6, 2 * k, device=device)[:, ::2]
    elif layout == "row_slice":        # row stride > k
        x = torch.randn(6, k + 8, device=device)[:, :k]
    elif layout == "offset_cols":      # storage offset 1, row stride k + 1 (not 16-byte aligned)
        x = torch.randn(6, k + 1, device=device)[:, 1:]
    else:                              # stride 0 rows
        x = torch.randn(1, k, device=device).expand(6, k)
    assert not x.is_contiguous()
    ref, scale = nm.ref_spmm64(x, values, indices, N, M, L)
    nm.assert_close_to_ref(ops.spmm(x, values, indices, N, M, L), ref, scale, **F32_TOL)
    # A non-contiguous 3-D view too.
    x3 = torch.randn(3, 2 * k, 2, device=device)[:, ::2, 0].unsqueeze(0).expand(2, 3, k)
    ref, scale = nm.ref_spmm64(x3, values, indices, N, M, L)
    nm.assert_close_to_ref(ops.spmm(x3, values, indices, N, M, L), ref, scale, **F32_TOL)


def test_spmm_non_contiguous_weight(device, nm):
    N, M, L = 2, 8, 16
    values, indices = nm.random_packed(64, 64, N, M, L, device=device)
    v_nc = torch.cat([values, values], 1)[:, :64]
    i_nc = torch.cat([indices, indices], 1)[:, :4]
    x, bias = torch.randn(5, 64, device=device), torch.randn(128, device=device)[::2]
    ref, scale = nm.ref_spmm64(x, values, indices, N, M, L, bias)
    nm.assert_close_to_ref(ops.spmm(x, v_nc, i_nc, N, M, L, bias), ref, scale, **F32_TOL)


@pytest.mark.parametrize("shape", [(0,), (0, 3), (2, 0)], ids=str)
def test_spmm_empty_batch(shape, device, nm):
    N, M, L = 2, 4, 16
    values, indices = nm.random_packed(32, 64, N, M, L, device=device)
    x = torch.randn(*shape, 64, device=device)
    bias = torch.randn(32, device=device)
    for b in (None, bias):
        y = ops.spmm(x, values, indices, N, M, L, b)
        assert y.shape == (*shape, 32) and y.dtype == x.dtype and y.device == x.device


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", [(2, 4, 16), (4, 32, 32), (1, 4, 1)], ids=case_id)
def test_spmm_half_precision(case, dtype, device, nm):
    N, M, L = case
    out, inp = shape_for(M, L)
    values, indices = nm.random_packed(out, inp, N, M, L, dtype=dtype, device=device)
    x = torch.randn(9, inp, device=device).to(dtype)
    bias = torch.randn(out, device=device).to(dtype)
    y = ops.spmm(x, values, indices, N, M, L, bias)
    assert y.dtype == dtype
    ref, scale = nm.ref_spmm64(x, values, indices, N, M, L, bias)
    nm.assert_close_to_ref(y, ref, scale, **half_tol(dtype))


@pytest.mark.parametrize("kernel,split_k", [(k, s) for k in nmspmm.kernels() for s in (1, 2)
                                            if nmspmm.kernel_supports(k, 8, 2, 8, 32, True)
                                            and s <= nmspmm.kernel_info(k).max_split_k])
def test_spmm_with_plan_cpu_matches_fp64(kernel, split_k, nm):
    # On the CPU every plan the CUDA binding accepts is accepted and computes the reference product;
    # the CUDA plans are tested in test_cuda_kernels.py.
    N, M, L = 2, 8, 32
    values, indices = nm.random_packed(128, 128, N, M, L)
    cols, packed = ops.col_info(indices, N, M, L)
    x, bias = torch.randn(8, 128), torch.randn(128)
    y = ops.spmm_with_plan(x, values, indices, N, M, L, bias, cols, packed, kernel, split_k)
    ref, scale = nm.ref_spmm64(x, values, indices, N, M, L, bias)
    nm.assert_close_to_ref(y, ref, scale, **F32_TOL)


def test_spmm_functional_api(device, nm):
    N, M, L = 4, 8, 16
    w = torch.randn(48, 64, device=device)
    packed = nmspmm.compress(w, N, M, L)
    x, bias = torch.randn(2, 5, 64, device=device), torch.randn(48, device=device)
    ref, scale = nm.ref_spmm64(x, packed.values, packed.indices, N, M, L, bias)
    nm.assert_close_to_ref(nmspmm.spmm(x, packed, bias), ref, scale, **F32_TOL)
    # Without the packing metadata too.
    bare = nmspmm.NMWeight(packed.values, packed.indices, N, M, L, packed.shape)
    nm.assert_close_to_ref(nmspmm.spmm(x, bare, bias), ref, scale, **F32_TOL)


# ----------------------------------------------------------------------------------------------
# autograd (dL/dx and dL/dbias; the weight is frozen)


@pytest.mark.parametrize("x_shape", [(6,), (4, 6), (2, 3, 6)], ids=str)
@pytest.mark.parametrize("with_bias", [False, True], ids=["nobias", "bias"])
def test_spmm_backward_matches_dense(x_shape, with_bias, device, nm):
    N, M, L = 2, 4, 16
    k = 64
    values, indices = nm.random_packed(32, k, N, M, L, device=device)
    dense = nm.ref_decompress(values, indices, N, M, L)
    x = torch.randn(*x_shape[:-1], k, device=device, requires_grad=True)
    bias = torch.randn(32, device=device, requires_grad=True) if with_bias else None
    grad_y = torch.randn(*x_shape[:-1], 32, device=device)

    y = ops.spmm(x, values, indices, N, M, L, bias)
    y.backward(grad_y)
    # Dense autograd in float64 as the reference.
    x64 = x.detach().double().requires_grad_()
    b64 = bias.detach().double().requires_grad_() if with_bias else None
    F.linear(x64, dense.double(), b64).backward(grad_y.double())
    scale = (grad_y.double().abs().reshape(-1, 32) @ dense.double().abs()).max().item() + 1e-30
    assert x.grad.shape == x.shape and x.grad.dtype == x.dtype
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-5, atol=1e-6 * scale)
    if with_bias:
        torch.testing.assert_close(bias.grad.double(), b64.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_spmm_backward_half_precision(dtype, device, nm):
    N, M, L = 4, 8, 32
    values, indices = nm.random_packed(64, 64, N, M, L, dtype=dtype, device=device)
    dense = nm.ref_decompress(values, indices, N, M, L)
    x = torch.randn(5, 64, device=device).to(dtype).requires_grad_()
    grad_y = torch.randn(5, 64, device=device).to(dtype)
    ops.spmm(x, values, indices, N, M, L).backward(grad_y)
    x_ref = x.detach().clone().requires_grad_()
    F.linear(x_ref, dense).backward(grad_y)
    assert x.grad.dtype == dtype
    # Both are the same dtype's matmul of the same operands: within two of its roundings.
    eps = torch.finfo(dtype).eps
    scale = (grad_y.float().abs() @ dense.float().abs()).max().item()
    torch.testing.assert_close(x.grad.float(), x_ref.grad.float(), rtol=2 * eps, atol=2 * eps * scale)


def test_spmm_values_requires_grad_raises(device, nm):
    values, indices = nm.random_packed(32, 32, 2, 4, 16, device=device)
    values.requires_grad_()
    x = torch.randn(3, 32, device=device)
    with pytest.raises(RuntimeError, match="values.requires_grad must be False"):
        ops.spmm(x, values, indices, 2, 4, 16)
    with pytest.raises(RuntimeError, match="gradients for the compressed weight values"):
        ops.spmm(x.requires_grad_(), values, indices, 2, 4, 16)
    # Under no_grad there is no graph, so nothing to refuse.
    with torch.no_grad():
        assert ops.spmm(x, values, indices, 2, 4, 16).shape == (3, 32)


def test_spmm_no_grad_output_when_inputs_frozen(device, nm):
    values, indices = nm.random_packed(32, 32, 2, 4, 16, device=device)
    y = ops.spmm(torch.randn(3, 32, device=device), values, indices, 2, 4, 16)
    assert not y.requires_grad


def test_spmm_bias_grad_only(device, nm):
    # x frozen, bias trainable: the bias gets dL/dbias and x gets nothing (the autograd node's
    # gradient slots count tensor inputs only, so the bias slot must be found by position).
    N, M, L = 2, 4, 16
    values, indices = nm.random_packed(32, 64, N, M, L, device=device)
    x = torch.randn(2, 3, 64, device=device)
    bias = torch.randn(32, device=device, requires_grad=True)
    grad_y = torch.randn(2, 3, 32, device=device)
    y = ops.spmm(x, values, indices, N, M, L, bias)
    assert y.requires_grad and y.grad_fn is not None
    y.backward(grad_y)
    torch.testing.assert_close(bias.grad.double(), grad_y.double().sum((0, 1)), rtol=1e-5, atol=1e-5)
    assert x.grad is None


@pytest.mark.parametrize("with_bias", [False, True], ids=["nobias", "bias"])
def test_spmm_with_plan_backward_matches_dense(with_bias, device, nm):
    # The generic kernel on every device; on CUDA also a tiled plan (tiled_f32_32x128, split 2).
    N, M, L = 4, 32, 32
    values, indices = nm.random_packed(64, 128, N, M, L, device=device)
    dense = nm.ref_decompress(values, indices, N, M, L).double()
    plans = [("generic_f32", 1)] + ([("tiled_f32_32x128", 2)] if values.is_cuda else [])
    for kernel, split_k in plans:
        x = torch.randn(20, 128, device=device, requires_grad=True)
        bias = torch.randn(64, device=device, requires_grad=True) if with_bias else None
        grad_y = torch.randn(20, 64, device=device)
        y = ops.spmm_with_plan(x, values, indices, N, M, L, bias, None, None, kernel, split_k)
        y.backward(grad_y)
        scale = (grad_y.double().abs() @ dense.abs()).max().item()
        torch.testing.assert_close(x.grad.double(), grad_y.double() @ dense, rtol=1e-5, atol=1e-6 * scale)
        if with_bias:
            torch.testing.assert_close(bias.grad.double(), grad_y.double().sum(0), rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        y = ops.spmm_with_plan(x, values, indices, N, M, L, bias, None, None, "generic_f32", 1)
    assert not y.requires_grad and y.grad_fn is None


def test_spmm_compiles_with_autograd(device, nm):
    # torch.compile (aot_eager: no C++ compiler needed) traces the op, its fake kernel and the
    # registered backward without graph breaks, with dynamic batch sizes.
    N, M, L = 2, 8, 16
    values, indices = nm.random_packed(32, 64, N, M, L, device=device)
    bias = torch.randn(32, device=device)
    dense = nm.ref_decompress(values, indices, N, M, L)

    def f(x):
        return torch.relu(ops.spmm(x, values, indices, N, M, L, bias)).sum()

    cf = torch.compile(f, backend="aot_eager", fullgraph=True, dynamic=True)
    for m in (3, 5, 9):
        x = torch.randn(m, 64, device=device, requires_grad=True)
        cf(x).backward()
        x_ref = x.detach().clone().requires_grad_()
        torch.relu(F.linear(x_ref, dense, bias)).sum().backward()
        torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-5, atol=1e-5)
