"""Property-based tests (hypothesis) of the CPU ops over random patterns, shapes, dtypes, strides
and bias: every example is checked against an independent fp64 reference built in plain torch
(tests/conftest.py), or against an invariant of the format (docs/format.md).

Sized for CI on two cores: each property runs a bounded number of small examples (the whole file
takes well under two minutes); NMSPMM_HYPOTHESIS_EXAMPLES=<n> raises the count for a longer run.
"""
import math
import os

import pytest
import torch

import nmspmm
from nmspmm.nn import NMLinear

import hypothesis  # noqa: E402,F401  (a test dependency: its absence is an error, not a skip)
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from conftest import random_packed, ref_columns, ref_decompress  # noqa: E402

ops = torch.ops.nmspmm

EXAMPLES = int(os.environ.get("NMSPMM_HYPOTHESIS_EXAMPLES", "80"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Tolerances relative to the largest partial sum |x| @ |W|.T: the inputs are rounded to the dtype
# first (the reference uses the same rounded inputs), so only the accumulation and the output
# rounding differ.
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@st.composite
def patterns(draw, max_windows=4, max_vectors=4):
    """(N, M, L, in_features, out_features): any supported pattern, a few windows and vectors."""
    M = 2 ** draw(st.integers(1, 6))
    N = draw(st.integers(1, M))
    L = 2 ** draw(st.integers(0, 7))
    windows = draw(st.integers(0, max_windows))
    vectors = draw(st.integers(0, max_vectors if L <= 32 else 2))
    return N, M, L, windows * M, vectors * L


@st.composite
def strided_x(draw, rows_shape, in_features, dtype):
    """x[*rows_shape, in] with a random layout: contiguous, transposed leading dims, a column
    slice of a wider tensor, or an expanded (stride 0) row."""
    layout = draw(st.sampled_from(["contiguous", "transposed", "sliced", "expanded"]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    if layout == "transposed" and len(rows_shape) == 2:
        base = torch.randn(rows_shape[1], rows_shape[0], in_features, generator=gen).to(dtype)
        return base.transpose(0, 1)
    if layout == "sliced":
        base = torch.randn(*rows_shape, in_features + 3, generator=gen).to(dtype)
        return base[..., 1:in_features + 1]
    if layout == "expanded" and rows_shape:
        row = torch.randn(in_features, generator=gen).to(dtype)
        return row.expand(*rows_shape, in_features)
    return torch.randn(*rows_shape, in_features, generator=gen).to(dtype)


def _ref(x, values, indices, N, M, L, bias):
    """fp64 product from the kept positions only, and the scale of its partial sums."""
    cols = ref_columns(indices, N, M, L)  # [w, out]
    x2 = x.double().reshape(math.prod(x.shape[:-1]), x.shape[-1])
    v = values.double()
    if cols.numel():
        y = (x2[:, cols] * v).sum(1)
        scale = (x2[:, cols].abs() * v.abs()).sum(1)
    else:
        y = torch.zeros(x2.shape[0], values.shape[1], dtype=torch.float64)
        scale = torch.zeros_like(y)
    if bias is not None:
        y = y + bias.double()
        scale = scale + bias.double().abs()
    return y.reshape(*x.shape[:-1], values.shape[1]), scale.reshape(*x.shape[:-1], values.shape[1])


@SETTINGS
@given(pat=patterns(), dtype=st.sampled_from(DTYPES), use_bias=st.booleans(),
       rows=st.lists(st.integers(0, 5), min_size=0, max_size=2), data=st.data())
def test_spmm_matches_fp64_reference(pat, dtype, use_bias, rows, data):
    N, M, L, inp, out = pat
    torch.manual_seed(data.draw(st.integers(0, 2**31 - 1)))
    values, indices = random_packed(out, inp, N, M, L, dtype=dtype)
    bias = torch.randn(out).to(dtype) if use_bias else None
    x = data.draw(strided_x(tuple(rows), inp, dtype))
    with_meta = data.draw(st.booleans())
    meta = ops.col_info(indices, N, M, L) if with_meta else (None, None)
    y = ops.spmm(x, values, indices, N, M, L, bias, *meta)
    ref, scale = _ref(x, values, indices, N, M, L, bias)
    assert y.shape == ref.shape and y.dtype == dtype
    err = (y.double() - ref).abs()
    assert bool((err <= TOL[dtype] * (scale + 1e-6) + 1e-6).all()), float(err.max())
    # The fake kernel agrees on the output's shape and dtype.
    fake = ops.spmm(x.to("meta"), values.to("meta"), indices.to("meta"), N, M, L,
                    None if bias is None else bias.to("meta"))
    assert fake.shape == y.shape and fake.dtype == y.dtype


@SETTINGS
@given(pat=patterns(), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**31 - 1))
def test_prune_compress_decompress(pat, dtype, seed):
    N, M, L, inp, out = pat
    torch.manual_seed(seed)
    w = torch.randn(out, inp).to(dtype)
    mask = ops.prune(w, N, M, L)
    # The mask is vector-wise N:M: per (vector, window), N positions shared by the L rows.
    if w.numel():
        per = mask.view(out // L, L, inp // M, M)
        assert bool((per == per[:, :1]).all())
        assert bool((per[:, 0].sum(-1) == N).all())
    values, indices = ops.compress(w, mask, N, M, L)
    assert values.shape == (inp // M * N, out) and indices.shape == (inp // M * N, out // L)
    dense = ops.decompress(values, indices, N, M, L)
    assert torch.equal(dense, torch.where(mask, w, torch.zeros_like(w)))
    assert torch.equal(dense, ref_decompress(values, indices, N, M, L))
    # indices: < M and strictly ascending within each (window, vector).
    if indices.numel():
        idx = indices.long().view(inp // M, N, out // L)
        assert bool((idx < M).all()) and bool((idx[:, 1:] > idx[:, :-1]).all())


@SETTINGS
@given(pat=patterns(max_windows=6, max_vectors=6), seed=st.integers(0, 2**31 - 1))
def test_col_info_invariants(pat, seed):
    N, M, L, inp, out = pat
    torch.manual_seed(seed)
    _, indices = random_packed(out, inp, N, M, L)
    cols, packed = ops.col_info(indices, N, M, L)
    assert cols.shape == (-(-out // 128), -(-inp // 64), 64) and packed.shape == indices.shape
    # Each list is ascending, then padded with 255.
    for lst in cols.view(-1, 64):
        used = lst[lst != 255].long()
        assert bool((used[1:] > used[:-1]).all()) and bool((lst[len(used):] == 255).all())
    # Each entry points at its own column in its tile's list.
    w, V = indices.shape
    for u in range(w):
        for v in range(V):
            c = u // N * M + int(indices[u, v])
            t, b = v * L // 128, c // 64
            assert int(cols[t, b, int(packed[u, v])]) == c % 64


@SETTINGS
@given(pat=patterns(), bad=st.sampled_from([float("nan"), float("inf"), float("-inf")]),
       seed=st.integers(0, 2**31 - 1), data=st.data())
def test_non_finite_x_at_pruned_positions_is_not_read(pat, bad, seed, data):
    N, M, L, inp, out = pat
    if inp == 0 or out == 0:
        return
    torch.manual_seed(seed)
    values, indices = random_packed(out, inp, N, M, L)
    x = torch.randn(3, inp)
    for _ in range(data.draw(st.integers(1, 4))):
        x[data.draw(st.integers(0, 2)), data.draw(st.integers(0, inp - 1))] = bad
    y = ops.spmm(x, values, indices, N, M, L)
    ref, scale = _ref(x, values, indices, N, M, L, None)
    assert torch.equal(torch.isnan(y), torch.isnan(ref))
    assert torch.equal(torch.isinf(y), torch.isinf(ref))
    fin = torch.isfinite(ref)
    assert bool(((y.double() - ref).abs()[fin] <= 1e-5 * (scale[fin] + 1e-6) + 1e-6).all())


@SETTINGS
@given(pat=patterns(max_windows=3, max_vectors=3), dtype=st.sampled_from(DTYPES),
       use_bias=st.booleans(), seed=st.integers(0, 2**31 - 1), data=st.data())
def test_nmlinear_state_dict_roundtrip_and_refusal(pat, dtype, use_bias, seed, data):
    N, M, L, inp, out = pat
    torch.manual_seed(seed)
    linear = torch.nn.Linear(inp, out, bias=use_bias).to(dtype)
    # With the packing metadata kept (enable_col_info), so the load must rebuild it too.
    src = NMLinear.from_dense(linear, N, M, L).enable_col_info()
    dst = NMLinear(inp, out, N, M, L, bias=use_bias, dtype=dtype).enable_col_info()
    dst.load_state_dict(src.state_dict())
    x = torch.randn(2, inp).to(dtype)
    assert torch.equal(dst(x), src(x))
    assert torch.equal(dst.col_info, src.col_info) and torch.equal(dst.packed_indices, src.packed_indices)
    if src.indices.numel() == 0:
        return
    # A corrupted checkpoint is refused and leaves the layer as it was.
    sd = dict(src.state_dict())
    bad = sd["indices"].clone().view(-1)
    pos = data.draw(st.integers(0, bad.numel() - 1))
    bad[pos] = data.draw(st.integers(M, 255))
    sd["indices"] = bad.view(src.indices.shape)
    fresh = NMLinear(inp, out, N, M, L, bias=use_bias, dtype=dtype).enable_col_info()
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    before_meta = (fresh.col_info.clone(), fresh.packed_indices.clone())
    with pytest.raises(RuntimeError, match=r"indices holds \d+ >= M="):
        fresh.load_state_dict(sd)
    after = fresh.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert torch.equal(fresh.col_info, before_meta[0]) and torch.equal(fresh.packed_indices, before_meta[1])


@SETTINGS
@given(pat=patterns(), seed=st.integers(0, 2**31 - 1), data=st.data())
def test_nmweight_accepts_valid_refuses_corrupt(pat, seed, data):
    N, M, L, inp, out = pat
    torch.manual_seed(seed)
    values, indices = random_packed(out, inp, N, M, L)
    w = nmspmm.NMWeight(values, indices, N, M, L, (out, inp)).with_col_info()
    nmspmm.NMWeight(values, indices, N, M, L, (out, inp), w.col_info, w.packed_indices)
    if indices.numel() == 0 or N < 2:
        return
    # Swap two positions of one (window, vector): still in range, no longer ascending.
    u = data.draw(st.integers(0, inp // M - 1)) * N
    v = data.draw(st.integers(0, out // L - 1))
    bad = indices.clone()
    bad[u, v], bad[u + 1, v] = indices[u + 1, v], indices[u, v]
    with pytest.raises(RuntimeError, match="strictly ascending"):
        nmspmm.NMWeight(values, bad, N, M, L, (out, inp))
