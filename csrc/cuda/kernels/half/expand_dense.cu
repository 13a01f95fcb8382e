// Expands a compressed 16-bit weight (values [w, n], indices [w, n / L]) into the dense W[n, k] of
// the same dtype, for the dense tensor-core path of large-m fp16 / bf16 calls: there cuBLAS on the
// expanded weight beats the gathered sparse kernels (docs/kernels.md, "Half-precision prefill").
// One thread per (output j, window g): it zeroes its M dense elements and scatters the N kept
// ones. Threads of a warp take consecutive outputs, so the reads of values are coalesced; each
// thread's dense chunk is contiguous. Index bytes are masked with M - 1 (M is a power of two), so
// no byte value writes outside the thread's own window. Values move as raw 16-bit patterns.
#include <cuda_runtime.h>

#include <cstdint>

#include "spmm_half.h"

namespace nmspmm {
namespace kernels {

namespace {

__global__ void __launch_bounds__(256) expand_dense_kernel(const uint16_t* __restrict__ values,
                                                           const uint8_t* __restrict__ indices,
                                                           uint16_t* __restrict__ dense, int64_t n, int64_t k,
                                                           int N, int M, int L, bool vector_zero) {
  const int64_t windows = k / M;
  const int64_t total = n * windows;
  const int64_t idx_ld = n / L;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += stride) {
    const int64_t j = t % n;
    const int64_t g = t / n;
    uint16_t* chunk = dense + j * k + g * M;
    if (vector_zero) {  // 16-byte aligned chunk of M >= 8 elements
      for (int c = 0; c < M; c += 8) *reinterpret_cast<uint4*>(chunk + c) = make_uint4(0, 0, 0, 0);
    } else {
      for (int c = 0; c < M; ++c) chunk[c] = 0;
    }
    const int64_t row0 = g * N;
    const int64_t v = j / L;
    for (int s = 0; s < N; ++s) {
      const int pos = indices[(row0 + s) * idx_ld + v] & (M - 1);
      chunk[pos] = values[(row0 + s) * n + j];  // after this thread's own zero stores (program order)
    }
  }
}

}  // namespace

cudaError_t launch_expand_dense(const HalfSpmmParams& p, void* dense, int sms, cudaStream_t stream) {
  if (p.values == nullptr || p.indices == nullptr || dense == nullptr || p.M < 1 || (p.M & (p.M - 1)) != 0 ||
      p.L < 1 || p.N < 1 || p.N > p.M || p.k % p.M != 0 || p.n % p.L != 0)
    return cudaErrorInvalidValue;
  const int64_t total = p.n * (p.k / p.M);
  if (total == 0) return cudaSuccess;
  const bool vector_zero = p.M >= 8 && p.k % 8 == 0 && reinterpret_cast<uintptr_t>(dense) % 16 == 0;
  const int64_t blocks_needed = (total + 255) / 256;
  const int64_t cap = static_cast<int64_t>(sms > 0 ? sms : 132) * 8;
  const int blocks = static_cast<int>(blocks_needed < cap ? blocks_needed : cap);
  expand_dense_kernel<<<blocks, 256, 0, stream>>>(static_cast<const uint16_t*>(p.values), p.indices,
                                                  static_cast<uint16_t*>(dense), p.n, p.k, p.N, p.M, p.L,
                                                  vector_zero);
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace nmspmm
