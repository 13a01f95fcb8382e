// The split-K decode kernels for any vector length and dtype (spmm_decode_splitk.cuh): m <= 16,
// L >= 1, values read in their own dtype (float32, float16, bfloat16), x staged as fp32 in shared
// memory, fp32 accumulation, output and bias in the call's dtype. Registry names: decode_f32_splitk
// at L < 4 (L >= 4 keeps its own kernel in spmm_small.cu), decode_splitk_f16, decode_splitk_bf16.
// Torch-free host interface.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/half/spmm_half.h"
#include "cuda/kernels/f32/spmm.h"

namespace nmspmm {
namespace kernels {

// Element type of x, values, bias and y.
enum class DecodeElem : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

// One problem: y[m, n] = x[m, k] W^T (+ bias), W in the N:M:L format (docs/format.md).
struct DecodeSplitKArgs {
  const void* x;           // [m, k], row stride ldx elements, unit column stride
  int64_t ldx;
  const void* values;      // [w, n]; 4-column vector loads where aligned, else scalar loads
  const uint8_t* indices;  // [w, n / L]
  const void* bias;        // [n] or nullptr
  void* y;                 // [m, n], contiguous
  float* workspace;        // [split_k, m, n] fp32 partials when split_k > 1, else unused
  int64_t m, n, k;
  int N, M, L;
  int split_k;
  bool overlap;            // the split-K reduction starts under programmatic dependent launch (sm_90)
};

// Largest m of the family.
constexpr int64_t kDecodeSplitKMaxM = 16;

// Per-dtype instantiations (spmm_decode_splitk_{f32,f16,bf16}.cu): the decode kernel alone
// (split_k blocks along k, partial sums to a.workspace when split_k > 1; the f32 one runs L < 4
// only), and a.y = the sum of the split_k partials of a.workspace (+ bias) in fixed split order,
// for any n. cudaErrorInvalidValue for a problem they cannot run.
cudaError_t launch_decode_splitk_f32(const DecodeSplitKArgs& a, cudaStream_t stream);
cudaError_t launch_decode_splitk_f16(const DecodeSplitKArgs& a, cudaStream_t stream);
cudaError_t launch_decode_splitk_bf16(const DecodeSplitKArgs& a, cudaStream_t stream);
cudaError_t launch_reduce_splits_f32(const DecodeSplitKArgs& a, cudaStream_t stream);
cudaError_t launch_reduce_splits_f16(const DecodeSplitKArgs& a, cudaStream_t stream);
cudaError_t launch_reduce_splits_bf16(const DecodeSplitKArgs& a, cudaStream_t stream);

inline cudaError_t launch_decode_splitk_kernel(const DecodeSplitKArgs& a, DecodeElem t, cudaStream_t stream) {
  return t == DecodeElem::kF32   ? launch_decode_splitk_f32(a, stream)
         : t == DecodeElem::kF16 ? launch_decode_splitk_f16(a, stream)
                                 : launch_decode_splitk_bf16(a, stream);
}
inline cudaError_t launch_decode_splitk_reduce(const DecodeSplitKArgs& a, DecodeElem t, cudaStream_t stream) {
  return t == DecodeElem::kF32   ? launch_reduce_splits_f32(a, stream)
         : t == DecodeElem::kF16 ? launch_reduce_splits_f16(a, stream)
                                 : launch_reduce_splits_bf16(a, stream);
}

// Bytes of fp32 workspace a 16-bit plan needs ([split_k, m, n]; none without a split).
inline size_t half_decode_splitk_workspace_bytes(const HalfSpmmParams& p) {
  return p.split_k > 1 ? static_cast<size_t>(p.split_k) * static_cast<size_t>(p.m) * static_cast<size_t>(p.n) * 4 : 0;
}
// decode_splitk_f16 / decode_splitk_bf16: the kernel, then the reduction where split_k > 1; the
// workspace is p.scratch (at least half_decode_splitk_workspace_bytes). overlap: the reduction
// under programmatic dependent launch.
inline cudaError_t launch_half_decode_splitk(const HalfSpmmParams& p, bool overlap, cudaStream_t stream) {
  if (p.split_k > 1 && (p.scratch == nullptr || p.scratch_bytes < half_decode_splitk_workspace_bytes(p)))
    return cudaErrorInvalidValue;
  const DecodeSplitKArgs a{p.x,   p.ldx, p.values, p.indices, p.bias, p.y, static_cast<float*>(p.scratch),
                           p.m,   p.n,   p.k,      p.N,       p.M,    p.L, p.split_k,
                           overlap};
  const DecodeElem t = p.dtype == HalfType::kBF16 ? DecodeElem::kBF16 : DecodeElem::kF16;
  const cudaError_t err = launch_decode_splitk_kernel(a, t, stream);
  if (err != cudaSuccess || p.split_k <= 1 || p.m == 0 || p.n == 0) return err;
  return launch_decode_splitk_reduce(a, t, stream);
}

}  // namespace kernels
}  // namespace nmspmm
