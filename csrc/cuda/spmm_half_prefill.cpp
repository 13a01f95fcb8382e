// Native fp16 / bf16 prefill paths of nmspmm::spmm on CUDA (sm_80+), run for the registry's plans:
//  * tc_prefill_*: the gathered tensor-core kernel of csrc/cuda/kernels/half/spmm_tc_prefill.cuh
//    (mma.sync, fp32 accumulation, output and bias in the input dtype; M in {8, 16, 32, 64},
//    L in {16, 32, 64, 128});
//  * expand_mma_*: the fused expansion (kernels/half/expand_mma.cuh): the weight expanded per warp in
//    shared memory and multiplied on the dense tensor cores (any N:M with L <= 32);
//  * gather_wgmma_*: each vector's kept rows of a k-major copy of x gathered into a compact operand
//    and multiplied by the compressed values on the dense tensor cores (kernels/half/
//    gather_wgmma_sm90.cuh; wgmma, sm_90a, L = 64 or 128);
//  * dense_expand_*: the weight expanded to dense for the call (kernels/half/expand_dense.cu), then
//    cuBLAS, which the heuristic picks where its cost model says it is faster (large m). Everything runs on the current stream;
// the k-major copy of x and the split-K partials live in one scratch tensor from the caching
// allocator, so the call neither synchronizes nor breaks CUDA-graph capture.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/all.h>

#include <mutex>
#include <optional>

#include "../ab_switches.h"
#include "kernels/half/expand_mma_geometry.h"
#include "kernels/half/expand_wgmma_geometry.h"
#include "kernels/half/gather_wgmma_geometry.h"
#include "kernels/half/spmm_half.h"
#include "spmm_params.h"

namespace nmspmm {

namespace {

// cuBLAS (at::linear) on the expanded weight; the dense copy comes from the caching allocator and
// lives for the call only, so the resident weight stays compressed. A last kernel recomputes the
// rows of x that hold a NaN or Inf from their kept inputs (docs/format.md, "NaN and Inf in x").
at::Tensor spmm_half_dense(const at::Tensor& x, const at::Tensor& vals, const at::Tensor& idx, int64_t N, int64_t M,
                           int64_t L, const at::Tensor& b) {
  const int64_t m = x.size(0), in = x.size(1), out = vals.size(1);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  at::Tensor dense = at::empty({out, in}, x.options());
  kernels::HalfSpmmParams p = half_params(x, x.stride(0), vals, idx, b, at::Tensor(), N, M, L, 1);
  cudaError_t err = kernels::launch_expand_dense(p, dense.data_ptr(), stream);
  TORCH_CHECK(err == cudaSuccess, "nmspmm.spmm: expanding the fp16/bf16 weight failed for n=", out, " k=", in, ": ",
              cudaGetErrorString(err));
  at::Tensor y = b.defined() ? at::linear(x, dense, b) : at::linear(x, dense);
  TORCH_CHECK(y.dim() == 2 && y.stride(1) == 1, "nmspmm.spmm: unexpected layout of the dense product");
  p.y = y.data_ptr();
  err = kernels::launch_regather_non_finite_rows(p, y.stride(0), stream);
  TORCH_CHECK(err == cudaSuccess, "nmspmm.spmm: the non-finite row check failed for m=", m, " n=", out, ": ",
              cudaGetErrorString(err));
  return y;
}

}  // namespace

// Runs a tc_prefill_* plan (dense = false, split-K split_k, in the warp-specialized form if
// warp_specialized) or a dense_expand_* plan (dense = true). x2 is x reshaped to [m, in] with
// m >= 1; the caller has checked every argument and the plan (registry and compute capability).
at::Tensor spmm_half_prefill(const at::Tensor& x2, const at::Tensor& values, const at::Tensor& indices, int64_t N,
                             int64_t M, int64_t L, const std::optional<at::Tensor>& bias, bool dense, int split_k,
                             bool warp_specialized) {
  const int64_t m = x2.size(0), in = x2.size(1), out = values.size(1);
  at::Tensor x = x2;
  if (x.stride(1) != 1 || x.stride(0) < in) x = x.contiguous();
  at::Tensor vals = values.contiguous();
  if (reinterpret_cast<uintptr_t>(vals.data_ptr()) % 16 != 0) vals = vals.clone();
  const at::Tensor idx = indices.contiguous();
  at::Tensor b;
  if (bias.has_value()) b = bias->contiguous();
  if (dense) return spmm_half_dense(x, vals, idx, N, M, L, b);
  at::Tensor y = at::empty({m, out}, x.options());

  // 128 tokens x 256 outputs per block, warps of 128 tokens x 32 outputs; in the warp-specialized
  // form where the caller says so (policy.h, half_prefill_warp_specialized).
  // The warp-specialized form starts during the x transpose (NMSPMM_NO_XT_OVERLAP=1: after it).
  int config = 0;
  if (warp_specialized) {
    config = kernels::kTcPrefillWarpSpecialized;
    if (ab_switches().xt_overlap) config |= kernels::kTcPrefillDuringTranspose;
  }
  kernels::HalfSpmmParams p = half_params(x, x.stride(0), vals, idx, b, y, N, M, L, split_k);
  const size_t scratch_bytes = kernels::tc_prefill_scratch_bytes(p, config);
  TORCH_CHECK(scratch_bytes > 0, "nmspmm.spmm: the fp16/bf16 prefill kernel refused N=", N, " M=", M, " L=", L);
  at::Tensor scratch = at::empty({static_cast<int64_t>(scratch_bytes)}, x.options().dtype(at::kByte));
  p.scratch = scratch.data_ptr();
  p.scratch_bytes = scratch_bytes;
  const cudaError_t err = kernels::launch_tc_prefill(p, config, c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "nmspmm.spmm: fp16/bf16 prefill kernel (config ", config, ", split_k=",
              split_k, ") failed for m=", m, " n=", out, " k=", in, ": ", cudaGetErrorString(err));
  return y;
}

// Runs an expand_mma_* plan (blocks of tile_tokens tokens, split-K split_k). Its dense products
// meet a NaN or Inf of x at pruned positions (0 * Inf), so the non-finite row check of the dense
// expansion follows it (docs/format.md, "NaN and Inf in x").
at::Tensor spmm_half_expand_mma(const at::Tensor& x2, const at::Tensor& values, const at::Tensor& indices, int64_t N,
                                int64_t M, int64_t L, const std::optional<at::Tensor>& bias, int tile_tokens,
                                int split_k, const char* kernel_name) {
  const int64_t m = x2.size(0), in = x2.size(1), out = values.size(1);
  TORCH_CHECK(kernels::expand_mma::shape_supported(out, in, N, M, L), "nmspmm.spmm_with_plan: kernel ", kernel_name,
              " needs L <= 32, in_features a multiple of 8 and out_features a multiple of 8 and of 4 * L; got ", N,
              ":", M, " L=", L, " in_features=", in, " out_features=", out);
  at::Tensor x = x2;
  if (x.stride(1) != 1 || (m > 1 && (x.stride(0) < in || x.stride(0) % 8 != 0)) ||
      reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 != 0)
    x = x.contiguous();
  at::Tensor vals = values.contiguous();
  if (reinterpret_cast<uintptr_t>(vals.data_ptr()) % 16 != 0) vals = vals.clone();
  at::Tensor idx = indices.contiguous();
  if (reinterpret_cast<uintptr_t>(idx.data_ptr()) % 4 != 0) idx = idx.clone();
  at::Tensor b;
  if (bias.has_value()) b = bias->contiguous();
  at::Tensor y = at::empty({m, out}, x.options());
  const int64_t ldx = m > 1 ? x.stride(0) : in;
  kernels::HalfSpmmParams p = half_params(x, ldx, vals, idx, b, y, N, M, L, split_k);
  const kernels::expand_mma::Geometry g = kernels::expand_mma::make_geometry(
      out, in, N, M, L, tile_tokens, split_k, reinterpret_cast<uintptr_t>(idx.data_ptr()) % 16 == 0);
  at::Tensor scratch;
  if (g.split > 1) {
    scratch = at::empty({static_cast<int64_t>(kernels::expand_mma::scratch_bytes(m, out, g.split))},
                        x.options().dtype(at::kByte));
    p.scratch = scratch.data_ptr();
    p.scratch_bytes = static_cast<size_t>(scratch.numel());
  }
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  cudaError_t err = kernels::launch_expand_mma(p, tile_tokens, stream);
  TORCH_CHECK(err == cudaSuccess, "nmspmm.spmm: kernel ", kernel_name, " (split_k=", split_k, ") failed for m=", m,
              " n=", out, " k=", in, ": ", cudaGetErrorString(err));
  err = kernels::launch_regather_non_finite_rows(p, out, stream);
  TORCH_CHECK(err == cudaSuccess, "nmspmm.spmm: the non-finite row check failed for m=", m, " n=", out, ": ",
              cudaGetErrorString(err));
  return y;
}

// Runs an expand_wgmma_* plan (sm_90a; blocks of tile_tokens tokens, split_k blocks of a cluster
// over k). As for expand_mma, the non-finite row check follows it.
at::Tensor spmm_half_expand_wgmma(const at::Tensor& x2, const at::Tensor& values, const at::Tensor& indices,
                                  int64_t N, int64_t M, int64_t L, const std::optional<at::Tensor>& bias,
                                  int tile_tokens, int split_k, const char* kernel_name) {
  const int64_t m = x2.size(0), in = x2.size(1), out = values.size(1);
  TORCH_CHECK(kernels::expand_wgmma::shape_supported(out, in, N, M, L), "nmspmm.spmm_with_plan: kernel ",
              kernel_name, " needs M <= 64, L <= 128, in_features a multiple of 8 and out_features a multiple of 8 and ",
              "of 4 * L; got ", N, ":", M, " L=", L, " in_features=", in,
              " out_features=", out);
  TORCH_CHECK(split_k == 1 || split_k == 2 || split_k == 4 || split_k == 8, "nmspmm.spmm_with_plan: split_k of kernel ",
              kernel_name, " must be 1, 2, 4 or 8, got ", split_k);
  const auto aligned16 = [](const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; };
  at::Tensor x = x2;
  if (x.stride(1) != 1 || (m > 1 && (x.stride(0) < in || x.stride(0) % 8 != 0)) || !aligned16(x)) x = x.contiguous();
  if (!aligned16(x)) x = x.clone();
  at::Tensor vals = values.contiguous();
  if (!aligned16(vals)) vals = vals.clone();
  at::Tensor idx = indices.contiguous();
  if (!aligned16(idx)) idx = idx.clone();
  at::Tensor b;
  if (bias.has_value()) {
    b = bias->contiguous();
    if (!aligned16(b)) b = b.clone();
  }
  at::Tensor y = at::empty({m, out}, x.options());
  const int64_t ldx = m > 1 ? x.stride(0) : in;
  kernels::HalfSpmmParams p = half_params(x, ldx, vals, idx, b, y, N, M, L, split_k);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  cudaError_t err = kernels::launch_expand_wgmma(p, tile_tokens, stream);
  TORCH_CHECK(err == cudaSuccess, "nmspmm.spmm: kernel ", kernel_name, " (split_k=", split_k, ") failed for m=", m,
              " n=", out, " k=", in, ": ", cudaGetErrorString(err));
  err = kernels::launch_regather_non_finite_rows(p, out, stream);
  TORCH_CHECK(err == cudaSuccess, "nmspmm.spmm: the non-finite row check failed for m=", m, " n=", out, ": ",
              cudaGetErrorString(err));
  return y;
}

// Runs a gather_wgmma_* plan (sm_90a; blocks of tile_tokens tokens x 128 outputs, split_k blocks of a
// cluster over the compressed rows). Only kept positions are multiplied, so no non-finite row check
// is needed; the k-major copy of x lives in a scratch tensor from the caching allocator.
at::Tensor spmm_half_gather_wgmma(const at::Tensor& x2, const at::Tensor& values, const at::Tensor& indices,
                                  int64_t N, int64_t M, int64_t L, const std::optional<at::Tensor>& bias,
                                  int tile_tokens, int split_k, const char* kernel_name) {
  const int64_t m = x2.size(0), in = x2.size(1), out = values.size(1);
  TORCH_CHECK(kernels::gather_wgmma::shape_supported(out, in, N, M, L), "nmspmm.spmm_with_plan: kernel ",
              kernel_name, " needs L = 64 or 128, M a power of two <= 64 and out_features a multiple of L; got ", N,
              ":", M, " L=", L, " in_features=", in, " out_features=", out);
  TORCH_CHECK(split_k == 1 || split_k == 2 || split_k == 4 || split_k == 8, "nmspmm.spmm_with_plan: split_k of kernel ",
              kernel_name, " must be 1, 2, 4 or 8, got ", split_k);
  const auto aligned16 = [](const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; };
  at::Tensor x = x2;
  if (x.stride(1) != 1 || (m > 1 && x.stride(0) < in)) x = x.contiguous();
  at::Tensor vals = values.contiguous();
  if (!aligned16(vals)) vals = vals.clone();
  const at::Tensor idx = indices.contiguous();
  at::Tensor b;
  if (bias.has_value()) {
    b = bias->contiguous();
    if (!aligned16(b)) b = b.clone();
  }
  at::Tensor y = at::empty({m, out}, x.options());
  const int64_t ldx = m > 1 ? x.stride(0) : in;
  kernels::HalfSpmmParams p = half_params(x, ldx, vals, idx, b, y, N, M, L, split_k);
  const size_t scratch_bytes = kernels::gather_wgmma_scratch_bytes(p);
  at::Tensor scratch = at::empty({static_cast<int64_t>(scratch_bytes)}, x.options().dtype(at::kByte));
  p.scratch = scratch.data_ptr();
  p.scratch_bytes = scratch_bytes;
  const cudaError_t err = kernels::launch_gather_wgmma(p, tile_tokens, c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "nmspmm.spmm: kernel ", kernel_name, " (split_k=", split_k, ") failed for m=", m,
              " n=", out, " k=", in, ": ", cudaGetErrorString(err));
  return y;
}

}  // namespace nmspmm
