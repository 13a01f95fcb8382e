// The transposed activation of the CSR prefill kernels: x[m, k] is copied into a workspace
// xt[k][ldt] (one input's tokens contiguous, tokens m..ldt zero), so a nonzero (row, col) reads
// the tokens it multiplies as one contiguous run xt[col][...], 16 bytes per lane.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/kernels/common/launch_overlap.cuh"

namespace nmspmm {
namespace kernels {
namespace csr {

constexpr int64_t kMaxGridY = 65535;

// Tokens per lane: one 16-byte load of xt (8 for fp16 / bf16, 4 for fp32).
template <typename T>
inline constexpr int kTokensPerLane = 16 / static_cast<int>(sizeof(T));

// acc[t] += v * x[t] for the lane's tokens, x the 16 bytes xv of xt (shared or global memory).
template <typename T>
__device__ __forceinline__ void fma_tokens(float (&acc)[kTokensPerLane<T>], const uint4 xv, float v) {
  const uint32_t w[4] = {xv.x, xv.y, xv.z, xv.w};
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[i] = fmaf(v, __uint_as_float(w[i]), acc[i]);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      acc[2 * i] = fmaf(v, __uint_as_float(w[i] << 16), acc[2 * i]);
      acc[2 * i + 1] = fmaf(v, __uint_as_float(w[i] & 0xffff0000u), acc[2 * i + 1]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      acc[2 * i] = fmaf(v, f.x, acc[2 * i]);
      acc[2 * i + 1] = fmaf(v, f.y, acc[2 * i + 1]);
    }
  }
}

// xt[c][t] = x[t][c] for t < m, 0 for m <= t < ldt. 32 x 32 tiles through shared memory; U is the
// storage type (the bits of the dtype).
// The kernel after it (csr_spmm_xt_gather, launched with programmatic dependent launch where the
// binding asks for it) may start at once: it waits for this grid before it reads xt.
template <typename U>
__global__ void __launch_bounds__(256) transpose_x(const U* __restrict__ x, int64_t ldx, int64_t m, int64_t k,
                                                   U* __restrict__ xt, int64_t ldt) {
  allow_dependent_launch();
  __shared__ U tile[32][33];
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * 32;
  for (int64_t t0 = static_cast<int64_t>(blockIdx.y) * 32; t0 < ldt; t0 += static_cast<int64_t>(gridDim.y) * 32) {
    for (int i = threadIdx.y; i < 32; i += 8) {
      const int64_t t = t0 + i, c = c0 + threadIdx.x;
      tile[i][threadIdx.x] = (t < m && c < k) ? x[t * ldx + c] : U(0);
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8) {
      const int64_t c = c0 + i, t = t0 + threadIdx.x;
      if (c < k && t < ldt) xt[c * ldt + t] = tile[threadIdx.x][i];
    }
    __syncthreads();
  }
}

// Launches transpose_x for a T-typed x on the stream.
template <typename T>
cudaError_t launch_transpose_x(const void* x, int64_t ldx, int64_t m, int64_t k, void* xt, int64_t ldt,
                               cudaStream_t stream) {
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>;
  const int64_t tiles = (ldt + 31) / 32;
  const dim3 grid(static_cast<unsigned>((k + 31) / 32), static_cast<unsigned>(tiles < kMaxGridY ? tiles : kMaxGridY));
  transpose_x<U><<<grid, dim3(32, 8), 0, stream>>>(static_cast<const U*>(x), ldx, m, k, static_cast<U*>(xt), ldt);
  return cudaGetLastError();
}

}  // namespace csr
}  // namespace kernels
}  // namespace nmspmm
