// Expands a compressed 16-bit weight (values [w, n], indices [w, n / L]) into the dense W[n, k] of
// the same dtype, for the dense tensor-core path of large-m fp16 / bf16 calls: there cuBLAS on the
// expanded weight beats the gathered sparse kernels (docs/kernels.md, "Half-precision prefill").
// A block owns 32 outputs x 256 inputs: it zeroes a shared tile, scatters the kept values into it
// (threads of a warp take consecutive outputs, so the reads of values are coalesced), then writes
// each output's 512-byte row segment with 16-byte stores. Index bytes are masked with M - 1 (M is
// a power of two), so no byte value writes outside its window. Values move as raw 16-bit patterns.
#include <cuda_runtime.h>

#include <cstdint>

#include "spmm_half.h"

namespace nmspmm {
namespace kernels {

namespace {

constexpr int kRows = 32;    // outputs per block
constexpr int kCols = 256;   // dense inputs per block (a multiple of every M)
constexpr int kPad = 8;      // 16 bytes of padding per tile row

__global__ void __launch_bounds__(256) expand_dense_kernel(const uint16_t* __restrict__ values,
                                                           const uint8_t* __restrict__ indices,
                                                           uint16_t* __restrict__ dense, int64_t n, int64_t k,
                                                           int N, int M, int L, bool vector_store) {
  __shared__ __align__(16) uint16_t tile[kRows][kCols + kPad];
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kCols;
  uint4* tile4 = reinterpret_cast<uint4*>(&tile[0][0]);
  for (int i = threadIdx.x; i < kRows * (kCols + kPad) / 8; i += blockDim.x) tile4[i] = make_uint4(0, 0, 0, 0);
  __syncthreads();

  const int64_t cols = k - c0 < kCols ? k - c0 : kCols;
  const int rows = static_cast<int>(cols / M) * N;  // compressed rows of this block's windows
  const int jl = threadIdx.x % kRows;
  const int64_t j = j0 + jl;
  if (j < n) {
    const int64_t idx_ld = n / L;
    const int64_t v = j / L;
    const int64_t row0 = c0 / M * N;
    for (int r = threadIdx.x / kRows; r < rows; r += blockDim.x / kRows) {
      const int64_t row = row0 + r;
      const int pos = indices[row * idx_ld + v] & (M - 1);
      tile[jl][(r / N) * M + pos] = values[row * n + j];
    }
  }
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warps = blockDim.x / 32;
  for (int r = warp; r < kRows && j0 + r < n; r += warps) {
    uint16_t* dst = dense + (j0 + r) * k + c0;
    if (vector_store) {  // k % 8 == 0 and a 16-byte aligned base: every row segment is aligned
      for (int c = lane * 8; c < cols; c += 32 * 8)
        *reinterpret_cast<uint4*>(dst + c) = *reinterpret_cast<const uint4*>(&tile[r][c]);
    } else {
      for (int c = lane; c < cols; c += 32) dst[c] = tile[r][c];
    }
  }
}

}  // namespace

cudaError_t launch_expand_dense(const HalfSpmmParams& p, void* dense, cudaStream_t stream) {
  if (p.values == nullptr || p.indices == nullptr || dense == nullptr || p.M < 1 || (p.M & (p.M - 1)) != 0 ||
      p.L < 1 || p.N < 1 || p.N > p.M || p.k % p.M != 0 || p.n % p.L != 0)
    return cudaErrorInvalidValue;
  if (p.n == 0 || p.k == 0) return cudaSuccess;
  const int64_t col_blocks = (p.k + kCols - 1) / kCols;
  if (col_blocks > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((p.n + kRows - 1) / kRows), static_cast<unsigned>(col_blocks));
  const bool vector_store = p.k % 8 == 0 && reinterpret_cast<uintptr_t>(dense) % 16 == 0;
  expand_dense_kernel<<<grid, 256, 0, stream>>>(static_cast<const uint16_t*>(p.values), p.indices,
                                                static_cast<uint16_t*>(dense), p.n, p.k, p.N, p.M, p.L,
                                                vector_store);
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace nmspmm
