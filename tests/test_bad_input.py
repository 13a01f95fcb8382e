"""One test per bad input: every refusal is a RuntimeError (TypeError for the Python API's
argument types) whose message names the argument and what was expected. A check that is missing
is marked xfail(strict=True) with the reason, so it turns into a failure once fixed (none today)."""
import re

import pytest
import torch

import nmspmm

ops = torch.ops.nmspmm


def _packed(device, N=2, M=4, L=16, out=32, inp=64, dtype=torch.float32):
    w = torch.randn(out, inp, device=device).to(dtype)
    mask = ops.prune(w, N, M, L)
    values, indices = ops.compress(w, mask, N, M, L)
    return w, mask, values, indices


def raises(match):
    return pytest.raises(RuntimeError, match=match)


# ----------------------------------------------------------------------------------------------
# dtypes


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.int64])
def test_x_wrong_dtype(dtype, device):
    _, _, values, indices = _packed(device)
    x = torch.ones(3, 64, device=device, dtype=dtype)
    with raises(r"nmspmm: x must be float32, float16 or bfloat16, got (Double|Int|Long)"):
        ops.spmm(x, values, indices, 2, 4, 16)


def test_x_dtype_differs_from_values(device):
    _, _, values, indices = _packed(device)
    x = torch.randn(3, 64, device=device, dtype=torch.float16)
    with raises(r"x has dtype Half but the packed weight values have dtype Float"):
        ops.spmm(x, values, indices, 2, 4, 16)


def test_values_wrong_dtype(device):
    _, _, values, indices = _packed(device)
    with raises(r"nmspmm: values must be float32, float16 or bfloat16, got Double"):
        ops.spmm(torch.randn(3, 64, device=device).double(), values.double(), indices, 2, 4, 16)
    with raises(r"nmspmm: values must be float32, float16 or bfloat16, got Double"):
        ops.decompress(values.double(), indices, 2, 4, 16)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8])
def test_indices_wrong_dtype(dtype, device):
    _, _, values, indices = _packed(device)
    x = torch.randn(3, 64, device=device)
    with raises(r"nmspmm: indices must be uint8, got (Long|Int|Char)"):
        ops.spmm(x, values, indices.to(dtype), 2, 4, 16)
    with raises(r"nmspmm: indices must be uint8"):
        ops.decompress(values, indices.to(dtype), 2, 4, 16)
    with raises(r"nmspmm.col_info: indices must be a 2-D uint8 tensor"):
        ops.col_info(indices.to(dtype), 2, 4, 16)


@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8, torch.int64])
def test_mask_wrong_dtype(dtype, device):
    w, mask, _, _ = _packed(device)
    with raises(r"nmspmm.compress: mask must be bool, got (Float|Byte|Long)"):
        ops.compress(w, mask.to(dtype), 2, 4, 16)


def test_bias_wrong_dtype(device):
    _, _, values, indices = _packed(device)
    x = torch.randn(3, 64, device=device)
    with raises(r"nmspmm: bias has dtype Double but x has dtype Float"):
        ops.spmm(x, values, indices, 2, 4, 16, torch.randn(32, device=device).double())
    with raises(r"nmspmm: bias has dtype Float but x has dtype Half"):
        ops.spmm(x.half(), values.half(), indices, 2, 4, 16, torch.randn(32, device=device))


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32])
def test_weight_wrong_dtype(dtype, device):
    w, mask, _, _ = _packed(device)
    with raises(r"nmspmm: weight must be float32, float16 or bfloat16, got (Double|Int)"):
        ops.prune(w.to(dtype), 2, 4, 16)
    with raises(r"nmspmm: weight must be float32, float16 or bfloat16, got (Double|Int)"):
        ops.compress(w.to(dtype), mask, 2, 4, 16)


# ----------------------------------------------------------------------------------------------
# shapes and the pattern


def test_in_features_not_divisible_by_M(device):
    w = torch.randn(32, 30, device=device)
    with raises(r"weight in_features \(30\) must be divisible by M=4"):
        ops.prune(w, 2, 4, 16)
    with raises(r"weight in_features \(30\) must be divisible by M=4"):
        ops.compress(w, torch.ones_like(w, dtype=torch.bool), 2, 4, 16)


def test_out_features_not_divisible_by_L(device):
    w = torch.randn(24, 64, device=device)
    with raises(r"weight out_features \(24\) must be divisible by L=16"):
        ops.prune(w, 2, 4, 16)
    values = torch.randn(32, 24, device=device)
    indices = torch.zeros(32, 1, dtype=torch.uint8, device=device)
    with raises(r"values.size\(1\)=24 \(out_features\) must be divisible by L=16"):
        ops.decompress(values, indices, 2, 4, 16)


@pytest.mark.parametrize("N", [5, 64])
def test_N_greater_than_M(N, device):
    w, _, values, indices = _packed(device)
    with raises(rf"N must satisfy 1 <= N <= M, got N={N}, M=4"):
        ops.prune(w, N, 4, 16)
    with raises(rf"N must satisfy 1 <= N <= M, got N={N}, M=4"):
        ops.spmm(torch.randn(3, 64, device=device), values, indices, N, 4, 16)


@pytest.mark.parametrize("N", [0, -1])
def test_N_less_than_one(N, device):
    w, _, values, indices = _packed(device)
    with raises(rf"N must satisfy 1 <= N <= M, got N={N}, M=4"):
        ops.prune(w, N, 4, 16)
    with raises(rf"N must satisfy 1 <= N <= M, got N={N}, M=4"):
        ops.decompress(values, indices, N, 4, 16)


@pytest.mark.parametrize("M", [0, 1, 3, 12, 128])
def test_unsupported_M(M, device):
    w = torch.randn(32, 384, device=device)
    with raises(rf"M must be a power of two in \[2, 64\], got M={M}"):
        ops.prune(w, 1, M, 16)
    with raises(rf"M must be a power of two in \[2, 64\], got M={M}"):
        ops.col_info(torch.zeros(8, 2, dtype=torch.uint8, device=device), 1, M, 16)


@pytest.mark.parametrize("L", [0, 3, 24, 256])
def test_unsupported_L(L, device):
    w = torch.randn(768, 64, device=device)
    with raises(rf"L must be a power of two in \[1, 128\], got L={L}"):
        ops.prune(w, 2, 4, L)
    _, _, values, indices = _packed(device)
    with raises(rf"L must be a power of two in \[1, 128\], got L={L}"):
        ops.spmm(torch.randn(3, 64, device=device), values, indices, 2, 4, L)


def test_weight_not_2d(device):
    with raises(r"weight must be 2-D \[out_features, in_features\], got 1-D"):
        ops.prune(torch.randn(64, device=device), 2, 4, 16)
    with raises(r"weight must be 2-D \[out_features, in_features\], got 3-D"):
        ops.prune(torch.randn(2, 32, 64, device=device), 2, 4, 16)


def test_x_in_features_does_not_match_packed_weight(device):
    _, _, values, indices = _packed(device)
    with raises(r"x.shape\[-1\]=60 does not match the packed weight's in_features=64"):
        ops.spmm(torch.randn(3, 60, device=device), values, indices, 2, 4, 16)
    # The same weight read with a different M: in_features = 32 / 2 * 8 = 128.
    with raises(r"x.shape\[-1\]=64 does not match the packed weight's in_features=128"):
        ops.spmm(torch.randn(3, 64, device=device), values, indices, 2, 8, 16)


def test_x_zero_dim(device):
    _, _, values, indices = _packed(device)
    with raises(r"x must have at least one dimension"):
        ops.spmm(torch.tensor(1.0, device=device), values, indices, 2, 4, 16)


def test_values_rows_not_multiple_of_N(device):
    _, _, values, indices = _packed(device)
    with raises(r"values.size\(0\)=32 is not a multiple of N=3"):
        ops.spmm(torch.randn(3, 64, device=device), values, indices, 3, 4, 16)


def test_indices_shape_does_not_match_values(device):
    _, _, values, indices = _packed(device)
    with raises(r"indices must have shape \[32, 2\] to match values \[32, 32\] and L=16, got \[32, 1\]"):
        ops.spmm(torch.randn(3, 64, device=device), values, indices[:, :1], 2, 4, 16)
    with raises(r"indices must have shape \[32, 2\]"):
        ops.decompress(values, indices[:16], 2, 4, 16)


def test_values_or_indices_not_2d(device):
    _, _, values, indices = _packed(device)
    with raises(r"values must be 2-D \[in\*N/M, out\], got 1-D"):
        ops.decompress(values[0], indices, 2, 4, 16)
    with raises(r"indices must be 2-D \[in\*N/M, out/L\], got 3-D"):
        ops.decompress(values, indices[None], 2, 4, 16)


def test_bias_wrong_shape(device):
    _, _, values, indices = _packed(device)
    x = torch.randn(3, 64, device=device)
    with raises(r"bias must have shape \[32\], got \[31\]"):
        ops.spmm(x, values, indices, 2, 4, 16, torch.randn(31, device=device))
    with raises(r"bias must have shape \[32\], got \[1, 32\]"):
        ops.spmm(x, values, indices, 2, 4, 16, torch.randn(1, 32, device=device))


def test_mask_wrong_shape(device):
    w, mask, _, _ = _packed(device)
    with raises(r"mask shape \[32, 32\] must equal weight shape \[32, 64\]"):
        ops.compress(w, mask[:, :32], 2, 4, 16)


# ----------------------------------------------------------------------------------------------
# col_info / packed_indices


def test_col_info_wrong_shape(device):
    _, _, values, indices = _packed(device)
    x = torch.randn(3, 64, device=device)
    cols, packed = ops.col_info(indices, 2, 4, 16)
    msg = r"col_info must be uint8 of shape \[1, 1, 64\] \(from nmspmm.col_info\(indices, N, M, L\)\), got Byte \[1, 1, 32\]"
    with raises(msg):
        ops.spmm(x, values, indices, 2, 4, 16, None, cols[..., :32], packed)
    with raises(r"col_info must be uint8 of shape \[1, 1, 64\].*got Byte \[2, 1, 64\]"):
        ops.spmm(x, values, indices, 2, 4, 16, None, torch.cat([cols, cols]), packed)


def test_col_info_wrong_dtype(device):
    _, _, values, indices = _packed(device)
    cols, packed = ops.col_info(indices, 2, 4, 16)
    with raises(r"col_info must be uint8 of shape \[1, 1, 64\].*got Int \[1, 1, 64\]"):
        ops.spmm(torch.randn(3, 64, device=device), values, indices, 2, 4, 16, None, cols.int(), packed)


def test_packed_indices_wrong_shape_or_dtype(device):
    _, _, values, indices = _packed(device)
    cols, packed = ops.col_info(indices, 2, 4, 16)
    x = torch.randn(3, 64, device=device)
    with raises(r"packed_indices must be uint8 with the shape of indices \[32, 2\], got Byte \[16, 2\]"):
        ops.spmm(x, values, indices, 2, 4, 16, None, cols, packed[:16])
    with raises(r"packed_indices must be uint8 with the shape of indices \[32, 2\], got Long \[32, 2\]"):
        ops.spmm(x, values, indices, 2, 4, 16, None, cols, packed.long())


def test_col_info_without_packed_indices(device):
    _, _, values, indices = _packed(device)
    cols, packed = ops.col_info(indices, 2, 4, 16)
    x = torch.randn(3, 64, device=device)
    with raises(r"col_info and packed_indices must be given together"):
        ops.spmm(x, values, indices, 2, 4, 16, None, cols, None)
    with raises(r"col_info and packed_indices must be given together"):
        ops.spmm(x, values, indices, 2, 4, 16, None, None, packed)


def test_col_info_indices_rows_not_multiple_of_N(device):
    _, _, _, indices = _packed(device)
    with raises(r"nmspmm.col_info: indices.size\(0\)=3 is not a multiple of N=2"):
        ops.col_info(indices[:3], 2, 4, 16)


# ----------------------------------------------------------------------------------------------
# tc_meta (2:4 only) and sparse_tc_meta


def _tc_meta(device, L=16, inp=64, out=32):
    """(x, values, indices, tc_meta) of a 2:4 weight [out, inp]; tc_meta is [ceil(inp/32), round_up(out/L, 4)]."""
    _, _, values, indices = _packed(device, L=L, out=out, inp=inp)
    return torch.randn(3, inp, device=device), values, indices, ops.sparse_tc_meta(indices, 2, 4, L, inp)


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.float32])
def test_tc_meta_wrong_dtype(dtype, device):
    x, values, indices, meta = _tc_meta(device)
    msg = (r"nmspmm.spmm: tc_meta must be int32 of shape \[2, 4\] \(from torch.ops.nmspmm.sparse_tc_meta\("
           r"indices, 2, 4, L, in_features\)\), got (Long|Byte|Float) \[2, 4\]")
    with raises(msg):
        ops.spmm(x, values, indices, 2, 4, 16, None, None, None, meta.to(dtype))
    with raises(msg):
        ops.spmm_with_plan(x, values, indices, 2, 4, 16, None, None, None, "generic_f32", 1, meta.to(dtype))


@pytest.mark.parametrize("shape", [(2, 2), (1, 4), (2, 4, 1), (8,)], ids=str)
def test_tc_meta_wrong_shape(shape, device):
    # out / L = 2 vectors: the rows are padded to 4 words, and in = 64 is 2 rows of 32 inputs.
    x, values, indices, _ = _tc_meta(device)
    with raises(r"nmspmm.spmm: tc_meta must be int32 of shape \[2, 4\].*got Int \[" +
                r", ".join(str(d) for d in shape) + r"\]"):
        ops.spmm(x, values, indices, 2, 4, 16, None, None, None,
                 torch.zeros(shape, dtype=torch.int32, device=device))


def test_tc_meta_not_contiguous(device):
    x, values, indices, meta = _tc_meta(device)
    strided = meta.t().contiguous().t()  # same shape and values, column-major
    assert torch.equal(strided, meta) and not strided.is_contiguous()
    with raises(r"nmspmm.spmm: tc_meta must be contiguous \(rows of 4 words, as sparse_tc_meta returns it\)"):
        ops.spmm(x, values, indices, 2, 4, 16, None, None, None, strided)
    with raises(r"nmspmm.spmm: tc_meta must be contiguous"):
        ops.spmm_with_plan(x, values, indices, 2, 4, 16, None, None, None, "generic_f32", 1, strided)


@pytest.mark.parametrize("N,M", [(1, 4), (4, 8), (2, 8)])
def test_tc_meta_for_another_pattern(N, M, device):
    x, _, _, meta = _tc_meta(device)
    _, _, values, indices = _packed(device, N=N, M=M)
    with raises(rf"nmspmm.spmm: tc_meta is the metadata of 2:4 weights \(sparse_tc_meta\), but the pattern is {N}:{M}"):
        ops.spmm(x, values, indices, N, M, 16, None, None, None, meta)


def test_cpu_spmm_refuses_stale_tc_meta():
    x, values, indices, meta = _tc_meta("cpu")
    for stale in (meta ^ 0x1, torch.full_like(meta, 0x44444444)):
        with raises(r"nmspmm.spmm: tc_meta does not match indices \(rebuild it with "
                    r"torch.ops.nmspmm.sparse_tc_meta\(indices, 2, 4, L, in_features\)\)"):
            ops.spmm(x, values, indices, 2, 4, 16, None, None, None, stale)
    # The padding words are part of the content too.
    padded = meta.clone()
    padded[0, 3] = 0
    with raises(r"nmspmm.spmm: tc_meta does not match indices"):
        ops.spmm(x, values, indices, 2, 4, 16, None, None, None, padded)


@pytest.mark.cuda
def test_device_mismatch_tc_meta():
    x, values, indices, meta = _tc_meta("cuda")
    with raises(r"nmspmm.spmm: tc_meta must be on the device of indices \(cuda:0\), got cpu"):
        ops.spmm(x, values, indices, 2, 4, 16, None, None, None, meta.cpu())


SPARSE_TC_META_REFUSALS = [
    pytest.param(dict(N=4, M=8), r"nmspmm.sparse_tc_meta: the sparse tensor-core metadata is for N:M = 2:4, "
                 r"got N=4, M=8", id="pattern_4_8"),
    pytest.param(dict(N=1, M=4), r"for N:M = 2:4, got N=1, M=4", id="pattern_1_4"),
    pytest.param(dict(N=2, M=8), r"for N:M = 2:4, got N=2, M=8", id="pattern_2_8"),
    pytest.param(dict(L=3), r"nmspmm.sparse_tc_meta: L must be a power of two in \[1, 128\], got L=3", id="L_3"),
    pytest.param(dict(L=0), r"nmspmm.sparse_tc_meta: L must be a power of two in \[1, 128\], got L=0", id="L_0"),
    pytest.param(dict(L=256), r"nmspmm.sparse_tc_meta: L must be a power of two in \[1, 128\], got L=256",
                 id="L_256"),
    pytest.param(dict(indices=lambda i: i.int()), r"nmspmm.sparse_tc_meta: indices must be a 2-D uint8 tensor, "
                 r"got (Int|torch.int32)", id="indices_int32"),
    pytest.param(dict(indices=lambda i: i.to(torch.int8)), r"indices must be a 2-D uint8 tensor, got (Char|torch.int8)",
                 id="indices_int8"),
    pytest.param(dict(indices=lambda i: i[None]), r"indices must be a 2-D uint8 tensor, got (Byte \[1, 32, 2\]|torch.uint8 \(1, 32, 2\))",
                 id="indices_3d"),
    pytest.param(dict(in_features=66), r"nmspmm.sparse_tc_meta: in_features must be a non-negative multiple of 4, "
                 r"got 66", id="in_not_multiple_of_4"),
    pytest.param(dict(in_features=-4), r"in_features must be a non-negative multiple of 4, got -4",
                 id="in_negative"),
    pytest.param(dict(in_features=128), r"nmspmm.sparse_tc_meta: indices must have in_features / 2 = 64 rows, "
                 r"got 32", id="in_does_not_match_indices"),
]


@pytest.mark.parametrize("bad,match", SPARSE_TC_META_REFUSALS)
def test_sparse_tc_meta_refused(bad, match, device):
    _, _, _, indices = _packed(device)
    args = {**dict(N=2, M=4, L=16, in_features=64, indices=lambda i: i), **bad}
    with raises(match):
        ops.sparse_tc_meta(args["indices"](indices), args["N"], args["M"], args["L"], args["in_features"])
    with raises(match):  # the fake kernel refuses the same
        ops.sparse_tc_meta(args["indices"](indices.to("meta")), args["N"], args["M"], args["L"],
                           args["in_features"])


def test_sparse_tc_meta_reads_any_index_bytes(device):
    # Unlike col_info it validates no order or range: every byte is read as b & 3.
    _, _, _, indices = _packed(device)
    bad = indices.clone()
    bad[0, 0], bad[1, 0] = 255, 4  # bytes past M, read as positions 3 and 0 (descending)
    meta = ops.sparse_tc_meta(bad, 2, 4, 16, 64)
    assert int(meta[0, 0].cpu()) & 0xF == 3 | (0 << 2)
    bad[2, 0], bad[3, 0] = 6, 2  # both read as position 2
    assert (int(ops.sparse_tc_meta(bad, 2, 4, 16, 64)[0, 0].cpu()) >> 4) & 0xF == 2 | (2 << 2)


# ----------------------------------------------------------------------------------------------
# content of the mask, the weight and the indices


def test_compress_mask_wrong_count(device):
    w, mask, _, _ = _packed(device)
    bad = mask.clone()
    bad[16:32, 4] = ~bad[16:32, 4]  # window 1 of vector 1 now keeps 1 or 3 positions
    with raises(r"mask is not vector-wise 2:4 with L=16: \(window 1, vector 1\) does not keep "
                r"exactly N positions shared by its L rows"):
        ops.compress(w, bad, 2, 4, 16)


def test_compress_mask_rows_of_a_vector_differ(device):
    w, mask, _, _ = _packed(device)
    bad = mask.clone()
    bad[3, 8:12] = ~mask[3, 8:12]  # still 2 of 4 in row 3, but not the vector's positions
    with raises(r"mask is not vector-wise 2:4 with L=16: \(window 2, vector 0\)"):
        ops.compress(w, bad, 2, 4, 16)


def test_compress_unstructured_mask(device):
    w = torch.randn(32, 64, device=device)
    with raises(r"mask is not vector-wise 2:4 with L=1"):
        ops.compress(w, w.abs() > 0.5, 2, 4, 1)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_prune_non_finite_weight(bad, device):
    w = torch.randn(32, 64, device=device)
    w[7, 13] = bad
    with raises(r"nmspmm.prune: weight contains NaN or Inf"):
        ops.prune(w, 2, 4, 16)
    with raises(r"nmspmm.prune: weight contains NaN or Inf"):
        ops.prune(w.half(), 2, 4, 16)


def test_indices_out_of_range(device):
    # decompress and col_info check the data on every device (on CUDA: one device check, one
    # synchronization); the CPU spmm checks it per call (the CUDA spmm does not: its kernels mask
    # every index into its window, see docs/format.md).
    _, _, values, indices = _packed(device)
    bad = indices.clone()
    bad[5, 1] = 7
    with raises(r"nmspmm.decompress: indices holds 7 >= M=4"):
        ops.decompress(values, bad, 2, 4, 16)
    with raises(r"nmspmm.col_info: indices holds 7 >= M=4"):
        ops.col_info(bad, 2, 4, 16)
    if device.type == "cpu":
        with raises(r"indices holds 7 >= M=4"):
            ops.spmm(torch.randn(3, 64), values, bad, 2, 4, 16)


@pytest.mark.parametrize("kind", ["duplicate", "descending"])
def test_indices_not_ascending(kind, device):
    _, _, values, indices = _packed(device)
    bad = indices.clone()
    if kind == "duplicate":
        bad[1, 0] = bad[0, 0]
    else:
        bad[0, 0], bad[1, 0] = indices[1, 0], indices[0, 0]
    # A repeated position would make decompress keep one value where a gathering kernel adds both.
    with raises(r"nmspmm.decompress: indices must be strictly ascending within each \(window, vector\)"):
        ops.decompress(values, bad, 2, 4, 16)
    with raises(r"nmspmm.col_info: indices must be strictly ascending"):
        ops.col_info(bad, 2, 4, 16)
    if device.type == "cpu":
        with raises(r"indices must be strictly ascending"):
            ops.spmm(torch.randn(3, 64), values, bad, 2, 4, 16)


# ----------------------------------------------------------------------------------------------
# spmm_with_plan


def _run_plan(device, m, kernel, split_k, L=16):
    """spmm_with_plan of a fresh x [m, 64] with a 2:4 weight [32, 64] of vector length L."""
    _, _, values, indices = _packed(device, L=L)
    return ops.spmm_with_plan(torch.randn(m, 64, device=device), values, indices, 2, 4, L, None, None, None,
                              kernel, split_k)


@pytest.mark.parametrize("kernel", ["tiled_f32_1x1", "", "6"])
def test_plan_unknown_kernel(kernel, device):
    with raises(r"nmspmm.spmm_with_plan: unknown kernel '" + kernel + "'"):
        _run_plan(device, 3, kernel, 1)


@pytest.mark.parametrize("split_k", [0, -2])
def test_plan_bad_split_k(split_k, device):
    with raises(r"nmspmm.spmm_with_plan: split_k must be (>= 1|in \[1, 64\]), got " + str(split_k)):
        _run_plan(device, 3, "decode_f32_splitk", split_k)


# Plans a problem rules out: (m, kernel, split_k, L, the refusal). The CPU op refuses the same plans as the
# CUDA binding (checks.h check_plan).
PLAN_DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
PLAN_REFUSALS = [
    # No rows to compute is no reason to accept a plan that could not run.
    pytest.param(0, "packed_f32_128x128", 1, 16,
                 r"kernel packed_f32_128x128 cannot run m=0 with pattern 2:4 L=16 without col_info", id="empty_input"),
    pytest.param(3, "decode_f32_splitk", 65, 16, r"split_k must be in \[1, 64\], got 65", id="split_k_too_large"),
    pytest.param(3, "packed_f32_128x128", 1, 16,
                 r"kernel packed_f32_128x128 cannot run m=3 with pattern 2:4 L=16 without col_info",
                 id="packed_kernel_without_col_info"),
    pytest.param(32, "decode_f32_splitk", 1, 16, r"kernel decode_f32_splitk cannot run m=32 with pattern 2:4 L=16",
                 id="decode_kernel_for_large_m"),
    pytest.param(2, "decode_f32_cluster_w4", 17, 16,
                 r"split_k of kernel decode_f32_cluster_w4 must be in \[1, 16\], got 17", id="cluster_split_k"),
    pytest.param(2, "decode_f32_staged_128", 17, 16,
                 r"split_k of kernel decode_f32_staged_128 must be in \[1, 16\], got 17", id="staged_split_k"),
    pytest.param(5, "decode_f32_cluster_w16", 1, 16,
                 r"kernel decode_f32_cluster_w16 cannot run m=5 with pattern 2:4 L=16", id="cluster_decode_above_its_m"),
    pytest.param(32, "tiled_f32_128x128", 1, 4, r"kernel tiled_f32_128x128 cannot run m=32 with pattern 2:4 L=4",
                 id="tiled_kernel_for_small_L"),
]


@pytest.mark.parametrize("device", PLAN_DEVICES)
@pytest.mark.parametrize("m,kernel,split_k,L,match", PLAN_REFUSALS)
def test_plan_refused(m, kernel, split_k, L, match, device):
    with raises(match):
        _run_plan(device, m, kernel, split_k, L)


# ----------------------------------------------------------------------------------------------
# the Python API


@pytest.mark.parametrize("bad", [2.0, True, "2", None])
def test_python_api_pattern_must_be_int(bad):
    w = torch.randn(32, 64)
    with pytest.raises(TypeError, match=r"nmspmm: N must be an int, got " + re.escape(type(bad).__name__)):
        nmspmm.prune(w, bad, 4, 16)
    with pytest.raises(TypeError, match=r"nmspmm: M must be an int"):
        nmspmm.compress(w, 2, bad, 16)
    with pytest.raises(TypeError, match=r"nmspmm: L must be an int"):
        nmspmm.compress(w, 2, 4, bad)


def test_python_api_cuda_tensor_without_cuda_kernels(monkeypatch):
    # The Python API refuses a CUDA tensor on a CPU-only build before reaching the dispatcher.
    # A stand-in object is enough to reach the check on a machine without CUDA.
    import nmspmm.format as fmt

    class FakeCudaTensor:
        is_cuda = True

    monkeypatch.setattr(fmt, "cuda_kernels_built", lambda: False)
    msg = r"nmspmm: x is a CUDA tensor but this nmspmm build has no CUDA kernels"
    _, _, values, indices = _packed("cpu")
    packed = nmspmm.NMWeight(values, indices, 2, 4, 16, (32, 64))
    with raises(msg):
        nmspmm.spmm(FakeCudaTensor(), packed)
    with raises(r"nmspmm: weight is a CUDA tensor but this nmspmm build has no CUDA kernels"):
        nmspmm.prune(FakeCudaTensor(), 2, 4, 16)
    with raises(r"nmspmm: weight is a CUDA tensor"):
        nmspmm.compress(FakeCudaTensor(), 2, 4, 16)


@pytest.mark.skipif(not torch.cuda.is_available() or nmspmm.cuda_kernels_built(),
                    reason="needs a CUDA GPU with a CPU-only nmspmm build")
def test_cuda_tensor_on_cpu_only_build():
    _, _, values, indices = _packed("cpu")
    x = torch.randn(3, 64, device="cuda")
    with raises(r"nmspmm: x is a CUDA tensor but this nmspmm build has no CUDA kernels"):
        nmspmm.spmm(x, nmspmm.NMWeight(values, indices, 2, 4, 16, (32, 64)))
    with raises(r"Could not run 'nmspmm::spmm' with arguments from the 'CUDA' backend"):
        ops.spmm(x, values.cuda(), indices.cuda(), 2, 4, 16)


# ----------------------------------------------------------------------------------------------
# device mismatch (needs a GPU)


@pytest.mark.cuda
def test_device_mismatch_x_and_values():
    _, _, values, indices = _packed("cuda")
    with raises(r"nmspmm: x is on cpu but the packed weight is on cuda:0"):
        ops.spmm(torch.randn(3, 64), values, indices, 2, 4, 16)


@pytest.mark.cuda
def test_device_mismatch_values_and_indices():
    _, _, values, indices = _packed("cuda")
    x = torch.randn(3, 64, device="cuda")
    with raises(r"nmspmm: indices is on cpu but values is on cuda:0"):
        ops.spmm(x, values, indices.cpu(), 2, 4, 16)
    with raises(r"nmspmm: indices is on cpu but values is on cuda:0"):
        ops.decompress(values, indices.cpu(), 2, 4, 16)


@pytest.mark.cuda
def test_device_mismatch_bias():
    _, _, values, indices = _packed("cuda")
    x = torch.randn(3, 64, device="cuda")
    with raises(r"nmspmm: bias is on cpu but x is on cuda:0"):
        ops.spmm(x, values, indices, 2, 4, 16, torch.randn(32))


@pytest.mark.cuda
def test_device_mismatch_col_info():
    _, _, values, indices = _packed("cuda")
    cols, packed = ops.col_info(indices.cpu(), 2, 4, 16)
    x = torch.randn(3, 64, device="cuda")
    with raises(r"col_info and packed_indices must be on the device of indices \(cuda:0\)"):
        ops.spmm(x, values, indices, 2, 4, 16, None, cols, packed)


@pytest.mark.cuda
def test_device_mismatch_mask():
    w, mask, _, _ = _packed("cuda")
    with raises(r"nmspmm.compress: mask is on cpu but weight is on cuda:0"):
        ops.compress(w, mask.cpu(), 2, 4, 16)


# ----------------------------------------------------------------------------------------------
# where weights enter: NMWeight from user tensors, spmm's packing metadata


def test_plan_refused_for_m_does_not_blame_col_info():
    _, _, values, indices = _packed("cpu")
    with raises(r"cannot run m=17 with pattern 2:4 L=16") as e:
        ops.spmm_with_plan(torch.randn(17, 64), values, indices, 2, 4, 16, None, None, None,
                           "decode_f32_splitk", 1)
    assert "col_info" not in str(e.value)


def _corrupt(indices, kind):
    bad = indices.clone()
    if kind == "out_of_range":
        bad[3, 1] = 200
    elif kind == "duplicate":
        bad[1, 0] = bad[0, 0]
    else:  # descending
        bad[0, 0], bad[1, 0] = indices[1, 0], indices[0, 0]
    return bad


@pytest.mark.parametrize("kind", ["out_of_range", "duplicate", "descending"])
def test_nmweight_validates_index_data(kind, device):
    _, _, values, indices = _packed(device)
    msg = r">= M=4" if kind == "out_of_range" else r"strictly ascending"
    with raises(msg):
        nmspmm.NMWeight(values, _corrupt(indices, kind), 2, 4, 16, (32, 64))
    nmspmm.NMWeight(values, indices, 2, 4, 16, (32, 64))  # the clean one is accepted


def test_nmweight_refuses_stale_packing_metadata(device):
    _, _, values, indices = _packed(device)
    cols, packed = ops.col_info(indices, 2, 4, 16)
    other = ops.col_info(_packed(device)[3], 2, 4, 16)
    # A fresh random weight has another used-column list somewhere (64 inputs, 2 of 4 kept).
    if not torch.equal(other[0], cols):
        with pytest.raises(ValueError, match=r"NMWeight: col_info does not match indices"):
            nmspmm.NMWeight(values, indices, 2, 4, 16, (32, 64), other[0], packed)
    stale = packed.clone()
    stale[0, 0] ^= 1
    with pytest.raises(ValueError, match=r"NMWeight: packed_indices does not match indices"):
        nmspmm.NMWeight(values, indices, 2, 4, 16, (32, 64), cols, stale)
    with pytest.raises(ValueError, match=r"col_info and packed_indices must be given together"):
        nmspmm.NMWeight(values, indices, 2, 4, 16, (32, 64), cols, None)
    w = nmspmm.NMWeight(values, indices, 2, 4, 16, (32, 64), cols, packed)
    assert w.col_info is cols


def test_nmweight_refuses_bad_tc_meta(device):
    _, _, values, indices = _packed(device)
    meta = ops.sparse_tc_meta(indices, 2, 4, 16, 64)
    with pytest.raises(ValueError, match=r"NMWeight: tc_meta does not match indices \(rebuild it with "
                       r"torch.ops.nmspmm.sparse_tc_meta\)"):
        nmspmm.NMWeight(values, indices, 2, 4, 16, (32, 64), tc_meta=meta ^ 0x4)
    with pytest.raises(TypeError, match=r"NMWeight: tc_meta must be an int32 tensor, got torch.int64"):
        nmspmm.NMWeight(values, indices, 2, 4, 16, (32, 64), tc_meta=meta.long())
    with pytest.raises(TypeError, match=r"NMWeight: tc_meta must be an int32 tensor, got list"):
        nmspmm.NMWeight(values, indices, 2, 4, 16, (32, 64), tc_meta=meta.tolist())
    with pytest.raises(ValueError, match=r"NMWeight: tc_meta must be a contiguous \[2, 4\] tensor for shape "
                       r"\(32, 64\) and L=16, got \[2, 2\]"):
        nmspmm.NMWeight(values, indices, 2, 4, 16, (32, 64), tc_meta=meta[:, :2])
    with pytest.raises(ValueError, match=r"NMWeight: tc_meta must be a contiguous \[2, 4\] tensor.*"
                       r"got \[2, 4\] with strides \(1, 2\)"):
        nmspmm.NMWeight(values, indices, 2, 4, 16, (32, 64), tc_meta=meta.t().contiguous().t())
    with pytest.raises(ValueError, match=r"NMWeight: tc_meta is on meta but values is on"):
        nmspmm.NMWeight(values, indices, 2, 4, 16, (32, 64), tc_meta=meta.to("meta"))
    _, _, v8, i8 = _packed(device, N=4, M=8)
    with pytest.raises(ValueError, match=r"NMWeight: tc_meta is the metadata of 2:4 weights, but the pattern is 4:8"):
        nmspmm.NMWeight(v8, i8, 4, 8, 16, (32, 64), tc_meta=meta)
    assert nmspmm.NMWeight(values, indices, 2, 4, 16, (32, 64), tc_meta=meta).tc_meta is meta


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32, torch.bool])
def test_nmweight_indices_wrong_dtype_not_cast(dtype):
    _, _, values, indices = _packed("cpu")
    with pytest.raises(TypeError, match=r"NMWeight: indices must be uint8, got torch\.(int64|int32|float32|bool)"):
        nmspmm.NMWeight(values, indices.to(dtype), 2, 4, 16, (32, 64))


def test_nmweight_refuses_bad_fields():
    _, _, values, indices = _packed("cpu")
    with pytest.raises(TypeError, match=r"NMWeight: values must be float32, float16 or bfloat16, got torch.int32"):
        nmspmm.NMWeight(values.int(), indices, 2, 4, 16, (32, 64))
    with pytest.raises(ValueError, match=r"NMWeight: values must have shape \[32, 32\]"):
        nmspmm.NMWeight(values[:, :16], indices, 2, 4, 16, (32, 64))
    with pytest.raises(ValueError, match=r"NMWeight: indices must have shape \[32, 2\]"):
        nmspmm.NMWeight(values, indices[:, :1], 2, 4, 16, (32, 64))
    with pytest.raises(ValueError, match=r"NMWeight: shape must be \(out_features, in_features\)"):
        nmspmm.NMWeight(values, indices, 2, 4, 16, (32, -64))
    with pytest.raises(ValueError, match=r"NMWeight: M must be a power of two"):
        nmspmm.NMWeight(values, indices, 2, 3, 16, (32, 64))
    with pytest.raises(TypeError, match=r"NMWeight: values must be a torch.Tensor"):
        nmspmm.NMWeight([1.0], indices, 2, 4, 16, (32, 64))
    with pytest.raises(ValueError, match=r"NMWeight: indices is on meta but values is on cpu"):
        nmspmm.NMWeight(values, indices.to("meta"), 2, 4, 16, (32, 64))


def test_cpu_spmm_refuses_stale_packing_metadata():
    _, _, values, indices = _packed("cpu")
    cols, packed = ops.col_info(indices, 2, 4, 16)
    stale = packed.clone()
    stale[0, 0] ^= 1
    x = torch.randn(3, 64)
    with raises(r"nmspmm.spmm: packed_indices does not match indices"):
        ops.spmm(x, values, indices, 2, 4, 16, None, cols, stale)
    with raises(r"nmspmm.spmm: packed_indices does not match indices"):
        ops.spmm_with_plan(x, values, indices, 2, 4, 16, None, cols, stale, "generic_f32", 1)
    bad_cols = cols.clone()
    bad_cols[0, 0, 0] = 250
    with raises(r"nmspmm.spmm: col_info does not match indices"):
        ops.spmm(x, values, indices, 2, 4, 16, None, bad_cols, packed)


# ----------------------------------------------------------------------------------------------
# fake (meta) kernels: the checks of the real ones, before any kernel


def test_fake_kernels_refuse_mixed_devices():
    w, mask, values, indices = _packed("cpu")
    x = torch.randn(2, 64)
    meta = torch.device("meta")
    with raises(r"nmspmm.spmm: indices is on meta but values is on cpu"):
        ops.spmm(x, values, indices.to(meta), 2, 4, 16)
    with raises(r"nmspmm.spmm: values is on meta but x is on cpu|x is on cpu but the packed weight is on meta"):
        ops.spmm(x, values.to(meta), indices.to(meta), 2, 4, 16)
    with raises(r"nmspmm.spmm: (x is on meta but|values is on cpu but x is on meta|indices is on cpu)"):
        ops.spmm(x.to(meta), values, indices, 2, 4, 16)
    with raises(r"nmspmm.spmm: bias is on meta but x is on cpu"):
        ops.spmm(x, values, indices, 2, 4, 16, torch.zeros(32, device=meta))
    cols, packed = ops.col_info(indices, 2, 4, 16)
    with raises(r"nmspmm.spmm: col_info is on meta but indices is on cpu"):
        ops.spmm(x, values, indices, 2, 4, 16, None, cols.to(meta), packed)
    with raises(r"nmspmm.spmm_with_plan: indices is on meta but values is on cpu"):
        ops.spmm_with_plan(x, values, indices.to(meta), 2, 4, 16, None, None, None, "generic_f32", 1)
    with raises(r"nmspmm.compress: mask is on meta but weight is on cpu"):
        ops.compress(w, mask.to(meta), 2, 4, 16)
    with raises(r"nmspmm.decompress: indices is on meta but values is on cpu"):
        ops.decompress(values, indices.to(meta), 2, 4, 16)


def test_fake_kernels_check_shapes_and_patterns():
    with torch.device("meta"):
        x = torch.empty(2, 64)
        values = torch.empty(32, 32)
        indices = torch.empty(32, 2, dtype=torch.uint8)
        w = torch.empty(32, 64)
        mask = torch.empty(32, 64, dtype=torch.bool)
        with raises(r"x.shape\[-1\]=63 does not match the packed weight's in_features=64"):
            ops.spmm(torch.empty(2, 63), values, indices, 2, 4, 16)
        with raises(r"M must be a power of two in \[2, 64\], got M=3"):
            ops.spmm(x, values, indices, 2, 3, 16)
        with raises(r"bias must have shape \[32\], got \(99,\)"):
            ops.spmm(x, values, indices, 2, 4, 16, torch.empty(99))
        with raises(r"bias has dtype torch.float16 but x has dtype torch.float32"):
            ops.spmm(x, values, indices, 2, 4, 16, torch.empty(32, dtype=torch.float16))
        with raises(r"indices must have shape \[32, 2\]"):
            ops.spmm(x, values, torch.empty(32, 4, dtype=torch.uint8), 2, 4, 16)
        with raises(r"indices must be uint8, got torch.int64"):
            ops.spmm(x, values, indices.long(), 2, 4, 16)
        with raises(r"x must be float32, float16 or bfloat16, got torch.int64"):
            ops.spmm(x.long(), values, indices, 2, 4, 16)
        with raises(r"N must satisfy 1 <= N <= M, got N=5, M=4"):
            ops.decompress(values, indices, 5, 4, 16)
        with raises(r"col_info must be uint8 of shape \[1, 1, 64\]"):
            ops.spmm(x, values, indices, 2, 4, 16, None, torch.empty(1, 2, 64, dtype=torch.uint8),
                     torch.empty(32, 2, dtype=torch.uint8))
        with raises(r"weight in_features \(63\) must be divisible by M=4"):
            ops.prune(torch.empty(32, 63), 2, 4, 16)
        with raises(r"mask shape \(32, 60\) must equal weight shape \(32, 64\)"):
            ops.compress(w, torch.empty(32, 60, dtype=torch.bool), 2, 4, 16)
        with raises(r"nmspmm.col_info: indices.size\(0\)=33 is not a multiple of N=2"):
            ops.col_info(torch.empty(33, 2, dtype=torch.uint8), 2, 4, 16)
        assert ops.spmm(x, values, indices, 2, 4, 16).shape == (2, 32)
        assert ops.compress(w, mask, 2, 4, 16)[1].shape == (32, 2)


def test_fake_kernels_check_tc_meta():
    meta_dev = torch.device("meta")
    with meta_dev:
        x = torch.empty(2, 64)
        values = torch.empty(32, 32)
        indices = torch.empty(32, 2, dtype=torch.uint8)
        tc_meta = torch.empty(2, 4, dtype=torch.int32)
        assert ops.sparse_tc_meta(indices, 2, 4, 16, 64).shape == (2, 4)
        assert ops.sparse_tc_meta(torch.empty(50, 3, dtype=torch.uint8), 2, 4, 1, 100).shape == (4, 4)
        assert ops.spmm(x, values, indices, 2, 4, 16, None, None, None, tc_meta).shape == (2, 32)
        with raises(r"nmspmm.spmm: tc_meta must be int32 of shape \[2, 4\].*got torch.int64 \(2, 4\)"):
            ops.spmm(x, values, indices, 2, 4, 16, None, None, None, tc_meta.long())
        with raises(r"nmspmm.spmm: tc_meta must be int32 of shape \[2, 4\].*got torch.int32 \(2, 8\)"):
            ops.spmm(x, values, indices, 2, 4, 16, None, None, None, torch.empty(2, 8, dtype=torch.int32))
        with raises(r"nmspmm.spmm: tc_meta must be contiguous"):
            ops.spmm(x, values, indices, 2, 4, 16, None, None, None, torch.empty(4, 2, dtype=torch.int32).t())
        with raises(r"tc_meta is the metadata of 2:4 weights \(sparse_tc_meta\), but the pattern is 4:8"):
            ops.spmm(x, values, indices, 4, 8, 16, None, None, None, tc_meta)
    cpu = _tc_meta("cpu")
    with raises(r"nmspmm.spmm: tc_meta is on meta but indices is on cpu"):
        ops.spmm(*cpu[:3], 2, 4, 16, None, None, None, cpu[3].to(meta_dev))
    with raises(r"nmspmm.spmm_with_plan: tc_meta is on meta but indices is on cpu"):
        ops.spmm_with_plan(*cpu[:3], 2, 4, 16, None, None, None, "generic_f32", 1, cpu[3].to(meta_dev))


def test_meta_layer_refuses_cpu_input():
    layer = nmspmm.NMLinear(64, 32, 2, 4, 16, device="meta")
    with raises(r"is on (cpu|meta) but"):
        layer(torch.randn(2, 64))


# ----------------------------------------------------------------------------------------------
# NMLinear: inputs, construction, atomic self-describing loads


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.complex64])
def test_nmlinear_refuses_non_float_input(dtype):
    layer = nmspmm.NMLinear(64, 32, 2, 4, 16)
    x = torch.ones(2, 64, dtype=dtype)
    with pytest.raises(RuntimeError):  # what nn.Linear does with the same input
        torch.nn.Linear(64, 32)(x)
    with pytest.raises(TypeError, match=r"NMLinear: x must be a floating tensor .* got torch\.(int64|int32|bool|complex64)"):
        layer(x)


@pytest.mark.parametrize("bad,match", [(-32, r"in_features must be >= 0, got -32"),
                                       (32.0, r"in_features must be an int, got float")])
def test_nmlinear_bad_features(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        nmspmm.NMLinear(bad, 64, 2, 4, 1)
    with pytest.raises((ValueError, TypeError), match=match.replace("in_features", "out_features")):
        nmspmm.NMLinear(64, bad, 2, 4, 1)


def test_nmlinear_zero_in_features_and_zero_rows(device):
    # nn.Linear semantics: in = 0 gives the bias; m = 0 gives an empty output.
    layer = nmspmm.NMLinear(0, 32, 2, 4, 16, device=device)
    with torch.no_grad():
        layer.bias.copy_(torch.randn(32))
    y = layer(torch.randn(3, 5, 0, device=device))
    assert y.shape == (3, 5, 32)
    assert torch.equal(y, layer.bias.detach().expand(3, 5, 32))
    layer = nmspmm.NMLinear(64, 32, 2, 4, 16, device=device)
    assert layer(torch.randn(0, 64, device=device)).shape == (0, 32)
    assert layer(torch.randn(2, 0, 64, device=device)).shape == (2, 0, 32)


def _snapshot(layer):
    return {k: (t, None if t is None else t.clone()) for k, t in
            [("values", layer.values), ("indices", layer.indices), ("bias", layer.bias),
             ("col_info", layer.col_info), ("packed_indices", layer.packed_indices),
             ("tc_meta", layer.tc_meta)]}


def _assert_unchanged(layer, snap):
    now = {"values": layer.values, "indices": layer.indices, "bias": layer.bias,
           "col_info": layer.col_info, "packed_indices": layer.packed_indices, "tc_meta": layer.tc_meta}
    for k, (obj, copy) in snap.items():
        assert now[k] is obj, f"{k} was replaced"
        assert (copy is None) or torch.equal(now[k], copy), f"{k} was modified"


def _bad_state_dicts():
    """(name, function(sd) -> corrupted sd, message) of checkpoints NMLinear(64, 32, 2, 4, 1) refuses."""
    def edit(**kw):
        def f(sd):
            sd = dict(sd)
            for k, v in kw.items():
                if v is None:
                    del sd[k]
                else:
                    sd[k] = v(sd[k]) if callable(v) else v
            return sd
        return f

    def ascending(t):
        t = t.clone()
        t[1, 0] = t[0, 0]
        return t

    def extra(*vals):
        return torch.tensor(vals, dtype=torch.int64)
    return [
        ("indices_out_of_range", edit(indices=lambda t: torch.full_like(t, 200)), r"indices holds 200 >= M=4"),
        ("indices_duplicate", edit(indices=ascending), r"strictly ascending"),
        ("indices_int64", edit(indices=lambda t: t.long()), r"indices must be uint8, got torch.int64"),
        ("indices_float", edit(indices=lambda t: t.float()), r"indices must be uint8, got torch.float32"),
        ("values_int", edit(values=lambda t: t.int()), r"values must be a floating tensor, got torch.int32"),
        ("bias_shape", edit(bias=lambda t: t[:16]), r"bias must have shape \[32\]"),
        ("values_shape", edit(values=lambda t: t[:16]), r"values must have shape \[32, 32\]"),
        ("pattern", edit(_extra_state=extra(1, 4, 8, 1, 64, 32)), r"_extra_state: the checkpoint has N=4 but this layer has N=2"),
        ("L", edit(_extra_state=extra(1, 2, 4, 2, 64, 32)), r"the checkpoint has L=2 but this layer has L=1"),
        ("features", edit(_extra_state=extra(1, 2, 4, 1, 64, 64)), r"the checkpoint has out_features=64"),
        ("version", edit(_extra_state=extra(2, 2, 4, 1, 64, 32)), r"_extra_state: format_version 2 is not supported"),
        ("extra_dtype", edit(_extra_state=lambda t: t.float()), r"_extra_state must be an int64 tensor"),
        ("extra_length", edit(_extra_state=extra(1, 2, 4)), r"_extra_state must be an int64 tensor"),
        ("missing_indices", edit(indices=None), r"Missing key\(s\) in state_dict: 'indices'"),
        ("missing_extra_state", edit(_extra_state=None), r"Missing key\(s\) in state_dict: '_extra_state'"),
    ]


@pytest.mark.parametrize("name,corrupt,match", _bad_state_dicts(), ids=[c[0] for c in _bad_state_dicts()])
def test_refused_load_leaves_layer_unchanged(name, corrupt, match, device):
    src = nmspmm.NMLinear.from_dense(torch.nn.Linear(64, 32), 2, 4, 1)
    sd = corrupt(src.state_dict())
    dst = nmspmm.NMLinear.from_dense(torch.nn.Linear(64, 32).to(device), 2, 4, 1).enable_col_info()
    snap = _snapshot(dst)
    with raises(match):
        dst.load_state_dict(sd)
    _assert_unchanged(dst, snap)


def test_load_same_shapes_other_pattern_refused():
    # 4:8 and 2:4 (L = 1) have the same buffer shapes: only the recorded pattern tells them apart.
    src = nmspmm.NMLinear.from_dense(torch.nn.Linear(64, 32), 4, 8, 1)
    dst = nmspmm.NMLinear(64, 32, 2, 4, 1)
    assert all(src.state_dict()[k].shape == dst.state_dict()[k].shape for k in ("values", "indices"))
    snap = _snapshot(dst)
    with raises(r"_extra_state: the checkpoint has N=4 but this layer has N=2"):
        dst.load_state_dict(dict(src.state_dict()))  # dict(): no torch.save metadata
    _assert_unchanged(dst, snap)


def test_load_assign_refuses_mixed_devices():
    src = nmspmm.NMLinear.from_dense(torch.nn.Linear(64, 32), 2, 4, 1)
    dst = nmspmm.NMLinear(64, 32, 2, 4, 1, device="meta")
    snap_ids = (dst.values, dst.indices, dst.bias)
    partial = {"values": src.values, "_extra_state": src.get_extra_state()}
    with raises(r"the load would leave values, indices and bias on different devices"):
        dst.load_state_dict(partial, strict=False, assign=True)
    assert (dst.values, dst.indices, dst.bias) == snap_ids
    dst.load_state_dict(src.state_dict(), assign=True)  # the whole checkpoint is fine
    x = torch.randn(2, 64)
    assert torch.equal(dst(x), src(x))


# ----------------------------------------------------------------------------------------------
# one semantics on every device: a NaN or Inf at a pruned position of x is not read


def _runnable_plans(m, N, M, L, dtype, split_k=1):
    """The registry kernels that spmm_with_plan runs for this call on this GPU (no col_info): the
    registry says the kernel supports it here (kernel_supports with the device's compute capability),
    the kernel takes x's dtype (the fp32 kernels take any, a native 16-bit kernel only its own) and
    split_k is within its limit. Every one of them must run: none is allowed to refuse."""
    major, minor = torch.cuda.get_device_capability()
    name = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}[dtype]
    plans = []
    for kernel in ops.kernels():
        info = nmspmm.kernel_info(kernel)
        if (info.dtype in ("float32", name) and split_k <= info.max_split_k
                and nmspmm.kernel_supports(kernel, m, N, M, L, False, major * 10 + minor)):
            plans.append(kernel)
    # The generic kernel runs every pattern at split 1; at fp32 nothing else is required of the list.
    assert split_k > 1 or "generic_f32" in plans, plans
    return plans


def _gather_ref64(x, values, indices, N, M, L):
    """fp64 reference that reads only the kept positions (no 0 * NaN)."""
    w, out = values.shape
    cols = (torch.arange(w) // N * M)[:, None] + indices.cpu().long().repeat_interleave(L, dim=1)
    x2 = x.cpu().double().reshape(-1, x.shape[-1])
    return (x2[:, cols] * values.cpu().double()).sum(1)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_at_pruned_position_is_not_read(bad, device):
    N, M, L = 2, 8, 16
    w = torch.randn(64, 128)
    values, indices = ops.compress(w, ops.prune(w, N, M, L), N, M, L)
    dense = ops.decompress(values, indices, N, M, L)
    x = torch.randn(5, 128)
    # Column 3 pruned for vector 0 and kept for another one, if any: poison it in rows 1 and 3.
    x[1, 3] = bad
    x[3, 3] = bad
    x[3, 100] = bad
    ref = _gather_ref64(x, values, indices, N, M, L)
    y = ops.spmm(x.to(device), values.to(device), indices.to(device), N, M, L).cpu()
    assert torch.equal(torch.isnan(y), torch.isnan(ref)) and torch.equal(torch.isinf(y), torch.isinf(ref))
    fin = torch.isfinite(ref)
    torch.testing.assert_close(y.double()[fin], ref[fin], rtol=1e-5, atol=1e-4)
    # Outputs whose weight prunes column 3 are finite in row 1.
    pruned = dense[:, 3] == 0
    assert torch.isfinite(y[1, pruned]).all() and pruned.any()


# ----------------------------------------------------------------------------------------------
# GPU limits and masking (needs a GPU)


@pytest.mark.cuda
def test_generic_kernel_any_m():
    # The generic kernel's grid covers 4 rows per block in y (at most 65535): m >= 262,141 loops.
    m, N, M, L = 262_144 + 7, 2, 4, 1
    w = torch.randn(16, 64)
    values, indices = ops.compress(w, ops.prune(w, N, M, L), N, M, L)
    x = torch.randn(m, 64)
    dense = ops.decompress(values, indices, N, M, L)
    ref = x.double() @ dense.double().t()
    y = ops.spmm_with_plan(x.cuda(), values.cuda(), indices.cuda(), N, M, L, None, None, None,
                           "generic_f32", 1)
    torch.testing.assert_close(y.cpu().double(), ref, rtol=1e-4, atol=1e-4)
    y = ops.spmm(x.cuda(), values.cuda(), indices.cuda(), N, M, L)  # the heuristic's plan
    torch.testing.assert_close(y.cpu().double(), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m", [1, 3, 16, 64, 300])
def test_corrupted_index_is_masked_into_its_window(m, dtype):
    # Unchecked data reaches the kernels only through the raw op: every kernel reads index byte b
    # as b & (M - 1), inside its window (docs/format.md). fp64 reference of that reading.
    N, M, L = 8, 32, 32
    w = torch.randn(256, 512)
    values, indices = ops.compress(w, ops.prune(w, N, M, L), N, M, L)
    values = values.to(dtype)
    # Bytes >= M whose low bits are the original position: read as b & (M - 1), they give the clean
    # product on every path; arbitrary bytes (below) give the product with each position b & (M - 1),
    # a repeated one adding its values.
    bad = indices.clone()
    sel = bad[::7, ::3]
    bad[::7, ::3] = sel + (255 - sel) // M * M
    assert bool((bad[::7, ::3] >= M).all()) and torch.equal(bad & (M - 1), indices)
    x = torch.randn(m, 512).to(dtype)
    ref = _gather_ref64(x, values, indices, N, M, L)
    tol = dict(rtol=1e-4, atol=1e-3) if dtype == torch.float32 else dict(rtol=2e-2, atol=1e-1)
    xc, vc, bc = x.cuda(), values.cuda(), bad.cuda()
    y = ops.spmm(xc, vc, bc, N, M, L)  # the heuristic's plan (native half kernels for half x)
    torch.cuda.synchronize()
    torch.testing.assert_close(y.cpu().double(), ref, **tol, msg="heuristic")
    for kernel in _runnable_plans(m, N, M, L, dtype):
        y = ops.spmm_with_plan(xc, vc, bc, N, M, L, None, None, None, kernel, 1)
        torch.cuda.synchronize()
        torch.testing.assert_close(y.cpu().double(), ref, **tol, msg=f"kernel {kernel}")
    arbitrary = torch.randint(0, 256, indices.shape, dtype=torch.uint8)
    y = ops.spmm(xc, vc, arbitrary.cuda(), N, M, L)
    torch.cuda.synchronize()  # no fault (an out-of-bounds access would surface here)
    ref = _gather_ref64(x, values, arbitrary & (M - 1), N, M, L)
    torch.testing.assert_close(y.cpu().double(), ref, **tol, msg="heuristic, arbitrary bytes")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m", [1, 5, 300])
def test_every_plan_has_one_semantics(m, dtype):
    # On every plan (gathering kernels and the fp16/bf16 dense expansion alike): a NaN or Inf of x at
    # a pruned position is not read, and a position repeated in unchecked index data adds its values.
    N, M, L = 8, 32, 32
    w = torch.randn(256, 512)
    values, indices = ops.compress(w, ops.prune(w, N, M, L), N, M, L)
    values = values.to(dtype)
    repeated = indices.clone()
    repeated[1, 3] = repeated[0, 3]  # window 0, vector 3: slot 1 reads slot 0's position
    dense = ops.decompress(values.float(), indices, N, M, L)
    pruned_v0 = (dense[:L, :M] == 0).all(0).nonzero().flatten()  # pruned for vector 0 only...
    kept_other = (dense[L:, :M] != 0).any(0)
    col = int(pruned_v0[kept_other[pruned_v0]][0])  # ...and kept by another vector
    x = torch.randn(m, 512).to(dtype)
    x[0, col] = float("nan")
    if m > 1:
        x[-1, col] = float("inf")
    if m > 2:
        x[m // 2, 100] = float("nan")  # wherever it is kept, it propagates
    tol = dict(rtol=1e-4, atol=1e-3) if dtype == torch.float32 else dict(rtol=2e-2, atol=1e-1)
    families = set()
    for idx in (indices, repeated):
        ref = _gather_ref64(x, values, idx, N, M, L)
        assert torch.isfinite(ref[0, :L]).all() and not torch.isfinite(ref[0]).all()
        xc, vc, ic = x.cuda(), values.cuda(), idx.cuda()
        for kernel in _runnable_plans(m, N, M, L, dtype):
            y = ops.spmm_with_plan(xc, vc, ic, N, M, L, None, None, None, kernel, 1).cpu().double()
            msg = f"kernel {kernel}, {'repeated' if idx is repeated else 'clean'} indices"
            assert torch.equal(torch.isnan(y), torch.isnan(ref)), msg
            assert torch.equal(torch.isinf(y), torch.isinf(ref)), msg
            fin = torch.isfinite(ref)
            torch.testing.assert_close(y[fin], ref[fin], **tol, msg=msg)
            families.add(nmspmm.kernel_info(kernel).family)
    assert families and (dtype == torch.float32 or {"dense_expand", "tc_prefill"} <= families), families


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m", [1, 2, 5, 8, 13, 16])
def test_partial_batches_do_not_read_pruned_positions(m, dtype):
    # The decode kernels take compressed rows in fixed-size batches; with an odd number of windows
    # the last batch of a warp is partial. x holds NaN at every position that no output keeps (the
    # first of each window among them), so any row read past the end, or any pruned position read,
    # turns y into NaN. The reference is finite everywhere.
    N, M, L = 8, 32, 32
    k = 37 * M
    w = torch.randn(256, k)
    w[:, ::M] = 0  # the first position of every window is pruned for every output
    values, indices = ops.compress(w, ops.prune(w, N, M, L), N, M, L)
    values = values.to(dtype)
    dense = ops.decompress(values.float(), indices, N, M, L)
    x = torch.randn(m, k).to(dtype)
    x[:, (dense == 0).all(0)] = float("nan")
    ref = _gather_ref64(x, values, indices, N, M, L)
    assert torch.isfinite(ref).all() and torch.isnan(x[:, ::M]).all()
    tol = dict(rtol=1e-4, atol=1e-3) if dtype == torch.float32 else dict(rtol=2e-2, atol=1e-1)
    xc, vc, ic = x.cuda(), values.cuda(), indices.cuda()
    torch.testing.assert_close(ops.spmm(xc, vc, ic, N, M, L).cpu().double(), ref, **tol, msg="heuristic")
    decode = set()
    for split_k in (1, 3):
        for kernel in _runnable_plans(m, N, M, L, dtype, split_k):
            y = ops.spmm_with_plan(xc, vc, ic, N, M, L, None, None, None, kernel, split_k)
            torch.testing.assert_close(y.cpu().double(), ref, **tol, msg=f"kernel {kernel} split_k={split_k}")
            if nmspmm.kernel_info(kernel).family.startswith("decode"):
                decode.add(kernel)
    assert decode, "no decode kernel ran"  # the kernels this test is about (m <= 16)


@pytest.mark.cuda
def test_misaligned_col_info_view():
    # The packing kernels read col_info 16 bytes at a time: a view at an odd offset is copied, not
    # read misaligned.
    N, M, L = 4, 32, 32
    w = torch.randn(256, 512)
    values, indices = ops.compress(w, ops.prune(w, N, M, L), N, M, L)
    cols, packed = ops.col_info(indices, N, M, L)
    buf = torch.empty(cols.numel() + 1, dtype=torch.uint8)
    view = buf[1:].view(cols.shape)
    view.copy_(cols)
    x = torch.randn(300, 512)
    ref = x.double() @ ops.decompress(values, indices, N, M, L).double().t()
    kernel = "packed_f32_128x128"
    bufc = buf.cuda()
    y = ops.spmm_with_plan(x.cuda(), values.cuda(), indices.cuda(), N, M, L, None, bufc[1:].view(cols.shape),
                           packed.cuda(), kernel, 1)
    torch.cuda.synchronize()
    torch.testing.assert_close(y.cpu().double(), ref, rtol=1e-4, atol=1e-3)
