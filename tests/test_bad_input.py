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


def test_indices_out_of_range_cpu():
    # Checked on the CPU (the CUDA ops do not read indices on the host: no sync in the op).
    _, _, values, indices = _packed("cpu")
    bad = indices.clone()
    bad[5, 1] = 7
    with raises(r"nmspmm.decompress: indices holds 7 >= M=4"):
        ops.decompress(values, bad, 2, 4, 16)
    with raises(r"nmspmm.col_info: indices holds 7 >= M=4"):
        ops.col_info(bad, 2, 4, 16)
    with raises(r"indices holds 7 >= M=4"):
        ops.spmm(torch.randn(3, 64), values, bad, 2, 4, 16)


@pytest.mark.parametrize("kind", ["duplicate", "descending"])
def test_indices_not_ascending_cpu(kind):
    _, _, values, indices = _packed("cpu")
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
    with raises(r"indices must be strictly ascending"):
        ops.spmm(torch.randn(3, 64), values, bad, 2, 4, 16)


# ----------------------------------------------------------------------------------------------
# spmm_with_plan


@pytest.mark.parametrize("kernel", [23, 100, -1])
def test_plan_unknown_kernel(kernel, device):
    _, _, values, indices = _packed(device)
    with raises(r"nmspmm.spmm_with_plan: (unknown kernel|kernel must be >= 0)"):
        ops.spmm_with_plan(torch.randn(3, 64, device=device), values, indices, 2, 4, 16, None, None,
                           None, kernel, 1)


@pytest.mark.parametrize("split_k", [0, -2])
def test_plan_bad_split_k(split_k, device):
    _, _, values, indices = _packed(device)
    with raises(r"nmspmm.spmm_with_plan: split_k must be (>= 1|in \[1, 64\]), got " + str(split_k)):
        ops.spmm_with_plan(torch.randn(3, 64, device=device), values, indices, 2, 4, 16, None, None,
                           None, 1, split_k)


# The CPU op refuses the same plans as the CUDA binding (checks.h check_plan).
PLAN_DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


@pytest.mark.parametrize("device", PLAN_DEVICES)
def test_plan_checked_for_empty_input(device):
    # No rows to compute is no reason to accept a plan that could not run.
    _, _, values, indices = _packed(device)
    with raises(r"kernel 6 cannot run m=0 with pattern 2:4 L=16 without col_info"):
        ops.spmm_with_plan(torch.randn(0, 64, device=device), values, indices, 2, 4, 16, None, None,
                           None, 6, 1)


@pytest.mark.parametrize("device", PLAN_DEVICES)
def test_plan_split_k_too_large(device):
    _, _, values, indices = _packed(device)
    with raises(r"split_k must be in \[1, 64\], got 65"):
        ops.spmm_with_plan(torch.randn(3, 64, device=device), values, indices, 2, 4, 16, None, None,
                           None, 1, 65)


@pytest.mark.parametrize("device", PLAN_DEVICES)
def test_plan_packed_kernel_without_col_info(device):
    _, _, values, indices = _packed(device)
    with raises(r"kernel 6 cannot run m=3 with pattern 2:4 L=16 without col_info"):
        ops.spmm_with_plan(torch.randn(3, 64, device=device), values, indices, 2, 4, 16, None, None,
                           None, 6, 1)


@pytest.mark.parametrize("device", PLAN_DEVICES)
def test_plan_decode_kernel_for_large_m(device):
    _, _, values, indices = _packed(device)
    with raises(r"kernel 1 cannot run m=32 with pattern 2:4 L=16"):
        ops.spmm_with_plan(torch.randn(32, 64, device=device), values, indices, 2, 4, 16, None, None,
                           None, 1, 1)


@pytest.mark.parametrize("device", PLAN_DEVICES)
def test_plan_cluster_decode_split_k_is_a_cluster_size(device):
    _, _, values, indices = _packed(device)
    with raises(r"split_k of kernel 12 is its cluster size and must be in \[1, 16\], got 17"):
        ops.spmm_with_plan(torch.randn(2, 64, device=device), values, indices, 2, 4, 16, None, None,
                           None, 12, 17)
    with raises(r"split_k of kernel 15 is its cluster size and must be in \[1, 16\], got 17"):
        ops.spmm_with_plan(torch.randn(2, 64, device=device), values, indices, 2, 4, 16, None, None,
                           None, 15, 17)


@pytest.mark.parametrize("device", PLAN_DEVICES)
def test_plan_cluster_decode_kernel_above_its_m(device):
    _, _, values, indices = _packed(device)
    with raises(r"kernel 14 cannot run m=5 with pattern 2:4 L=16"):
        ops.spmm_with_plan(torch.randn(5, 64, device=device), values, indices, 2, 4, 16, None, None,
                           None, 14, 1)


@pytest.mark.parametrize("device", PLAN_DEVICES)
def test_plan_tiled_kernel_for_small_L(device):
    _, _, values, indices = _packed(device, L=4)
    with raises(r"kernel 2 cannot run m=32 with pattern 2:4 L=4"):
        ops.spmm_with_plan(torch.randn(32, 64, device=device), values, indices, 2, 4, 4, None, None,
                           None, 2, 1)


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
