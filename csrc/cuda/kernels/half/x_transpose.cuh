// The k-major copy of the activations that the gathering 16-bit kernels read (tc_prefill,
// gather_wgmma): xT[k][m_pad], an input's tokens contiguous, m rounded up to m_pad (a multiple of
// 8: 16-byte rows) with zeros past m. The kernel allows a dependent launch at its start (a main
// kernel launched during it waits for all of it before reading xT).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/common/launch_overlap.cuh"

namespace nmspmm {
namespace kernels {

// xT[kk][t] = x[t][kk] for t < m, 0 for m <= t < m_pad. 64 x 64 tiles, 256 threads.
template <typename T, bool kVec>
__global__ void __launch_bounds__(256) x_transpose_kernel(const T* __restrict__ x, int64_t ldx, T* __restrict__ xT,
                                                        int64_t m, int64_t k, int64_t m_pad) {
  allow_dependent_launch();  // a main kernel launched during the transpose waits for all of it
  __shared__ uint16_t tile[64][66];
  const int tid = threadIdx.x;
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * 64;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * 64;
  const uint16_t* xs = reinterpret_cast<const uint16_t*>(x);
  if (kVec) {
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const int i = tid + p * 256;
      const int tl = i >> 3, kc = i & 7;
      const int64_t t = t0 + tl, kk = k0 + kc * 8;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (t < m && kk < k) v = __ldg(reinterpret_cast<const uint4*>(xs + t * ldx + kk));
      const uint16_t* e = reinterpret_cast<const uint16_t*>(&v);
#pragma unroll
      for (int j = 0; j < 8; ++j) tile[kc * 8 + j][tl] = e[j];
    }
  } else {
#pragma unroll 4
    for (int p = 0; p < 16; ++p) {
      const int i = tid + p * 256;
      const int tl = i >> 6, kl = i & 63;
      const int64_t t = t0 + tl, kk = k0 + kl;
      tile[kl][tl] = (t < m && kk < k) ? xs[t * ldx + kk] : uint16_t(0);
    }
  }
  __syncthreads();
  uint16_t* xo = reinterpret_cast<uint16_t*>(xT);
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    const int i = tid + p * 256;
    const int kl = i >> 3, c = i & 7;
    const int64_t kk = k0 + kl, t = t0 + c * 8;
    if (kk < k && t < m_pad) {
      const uint32_t* src = reinterpret_cast<const uint32_t*>(&tile[kl][c * 8]);
      uint4 v = make_uint4(src[0], src[1], src[2], src[3]);
      *reinterpret_cast<uint4*>(xo + kk * m_pad + t) = v;
    }
  }
}

// Writes xT (16-byte aligned, k x m_pad elements) on `stream`.
template <typename T>
cudaError_t launch_x_transpose(const void* x, int64_t ldx, T* xT, int64_t m, int64_t k, int64_t m_pad,
                               cudaStream_t stream) {
  dim3 grid(static_cast<unsigned>((k + 63) / 64), static_cast<unsigned>((m_pad + 63) / 64));
  const bool vec = k % 8 == 0 && ldx % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if (vec)
    x_transpose_kernel<T, true><<<grid, 256, 0, stream>>>(static_cast<const T*>(x), ldx, xT, m, k, m_pad);
  else
    x_transpose_kernel<T, false><<<grid, 256, 0, stream>>>(static_cast<const T*>(x), ldx, xT, m, k, m_pad);
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace nmspmm
