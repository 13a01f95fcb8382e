// The dense-expansion path of large-m fp16 / bf16 calls (docs/kernels.md, "Half-precision
// prefill"): the compressed weight is expanded into a transient dense W[n, k] of the same dtype,
// cuBLAS multiplies it, and a check afterwards restores the gathering kernels' semantics for rows
// of x that hold a NaN or Inf (docs/format.md, "NaN and Inf in x").
//
// Expansion: a block owns 32 outputs x 256 inputs. It zeroes a shared tile, scatters the kept
// values into it (threads of a warp take consecutive outputs, so the reads of values are
// coalesced; one thread walks all N slots of a window, so a repeated position, possible only in
// data that skipped validation, adds its values as the gathering kernels do), then writes each
// output's 512-byte row segment with 16-byte stores. Index bytes are masked with M - 1 (M is a
// power of two), so no byte value writes outside its window.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "spmm_half.h"

namespace nmspmm {
namespace kernels {

namespace {

constexpr int kRows = 32;    // outputs per block
constexpr int kCols = 256;   // dense inputs per block (a multiple of every M)
constexpr int kPad = 8;      // 16 bytes of padding per tile row
constexpr int kCheckRows = 256;  // rows of y probed per block of the non-finite check

__device__ __forceinline__ float to_float(uint16_t u, bool bf16) {
  return bf16 ? __uint_as_float(static_cast<uint32_t>(u) << 16) : __half2float(__ushort_as_half(u));
}

__device__ __forceinline__ uint16_t from_float(float f, bool bf16) {
  return bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(f)) : __half_as_ushort(__float2half_rn(f));
}

__device__ __forceinline__ bool non_finite(uint16_t u, bool bf16) {
  const uint16_t exp = bf16 ? 0x7F80 : 0x7C00;  // all-ones exponent: Inf or NaN
  return (u & exp) == exp;
}

__global__ void __launch_bounds__(256) expand_dense_kernel(const uint16_t* __restrict__ values,
                                                           const uint8_t* __restrict__ indices,
                                                           uint16_t* __restrict__ dense, int64_t n, int64_t k,
                                                           int N, int M, int L, bool bf16, bool vector_store) {
  __shared__ __align__(16) uint16_t tile[kRows][kCols + kPad];
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kCols;
  uint4* tile4 = reinterpret_cast<uint4*>(&tile[0][0]);
  for (int i = threadIdx.x; i < kRows * (kCols + kPad) / 8; i += blockDim.x) tile4[i] = make_uint4(0, 0, 0, 0);
  __syncthreads();

  const int64_t cols = k - c0 < kCols ? k - c0 : kCols;
  const int windows = static_cast<int>(cols / M);
  const int jl = threadIdx.x % kRows;
  const int64_t j = j0 + jl;
  if (j < n) {
    const int64_t idx_ld = n / L;
    const int64_t v = j / L;
    const int64_t row0 = c0 / M * N;
    for (int g = threadIdx.x / kRows; g < windows; g += blockDim.x / kRows) {
      uint64_t used = 0;  // positions of this window already written (M <= 64)
      for (int s = 0; s < N; ++s) {
        const int64_t row = row0 + static_cast<int64_t>(g) * N + s;
        const int pos = indices[row * idx_ld + v] & (M - 1);
        uint16_t& cell = tile[jl][g * M + pos];
        const uint16_t val = values[row * n + j];
        const uint64_t bit = uint64_t{1} << pos;
        cell = (used & bit) ? from_float(to_float(cell, bf16) + to_float(val, bf16), bf16) : val;
        used |= bit;
      }
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

// After cuBLAS: a NaN or Inf anywhere in row i of x reaches every output of the dense product
// (0 * NaN), so y[i, 0] is non-finite exactly for those rows (or where the kept terms themselves
// overflow). Such rows are recomputed from the kept inputs only, in fp32, as the gathering kernels
// compute them. One probe per row; a block whose rows are all finite exits after it.
__global__ void __launch_bounds__(256) regather_non_finite_rows_kernel(HalfSpmmParams p, int64_t ldy) {
  const bool bf16 = p.dtype == HalfType::kBF16;
  const uint16_t* x = static_cast<const uint16_t*>(p.x);
  const uint16_t* values = static_cast<const uint16_t*>(p.values);
  const uint16_t* bias = static_cast<const uint16_t*>(p.bias);
  uint16_t* y = static_cast<uint16_t*>(p.y);
  __shared__ bool flagged[kCheckRows];
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kCheckRows;
  const bool mine = i0 + threadIdx.x < p.m && non_finite(y[(i0 + threadIdx.x) * ldy], bf16);
  flagged[threadIdx.x] = mine;
  if (!__syncthreads_or(mine)) return;

  const int64_t w = p.k / p.M * p.N, idx_ld = p.n / p.L;
  for (int r = 0; r < kCheckRows; ++r) {
    if (!flagged[r]) continue;
    const int64_t i = i0 + r;
    const uint16_t* xi = x + i * p.ldx;
    for (int64_t j = threadIdx.x; j < p.n; j += blockDim.x) {
      const int64_t v = j / p.L;
      float acc = 0.f;
      for (int64_t u = 0; u < w; ++u) {
        const int64_t c = u / p.N * p.M + (p.indices[u * idx_ld + v] & (p.M - 1));
        acc = fmaf(to_float(values[u * p.n + j], bf16), to_float(xi[c], bf16), acc);
      }
      if (bias != nullptr) acc += to_float(bias[j], bf16);
      y[i * ldy + j] = from_float(acc, bf16);
    }
  }
}

}  // namespace

cudaError_t launch_expand_dense(const HalfSpmmParams& p, void* dense, cudaStream_t stream) {
  if (p.values == nullptr || p.indices == nullptr || dense == nullptr || p.M < 1 || p.M > 64 ||
      (p.M & (p.M - 1)) != 0 || p.L < 1 || p.N < 1 || p.N > p.M || p.k % p.M != 0 || p.n % p.L != 0)
    return cudaErrorInvalidValue;
  if (p.n == 0 || p.k == 0) return cudaSuccess;
  const int64_t col_blocks = (p.k + kCols - 1) / kCols;
  if (col_blocks > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((p.n + kRows - 1) / kRows), static_cast<unsigned>(col_blocks));
  const bool vector_store = p.k % 8 == 0 && reinterpret_cast<uintptr_t>(dense) % 16 == 0;
  expand_dense_kernel<<<grid, 256, 0, stream>>>(static_cast<const uint16_t*>(p.values), p.indices,
                                                static_cast<uint16_t*>(dense), p.n, p.k, p.N, p.M, p.L,
                                                p.dtype == HalfType::kBF16, vector_store);
  return cudaGetLastError();
}

cudaError_t launch_regather_non_finite_rows(const HalfSpmmParams& p, int64_t ldy, cudaStream_t stream) {
  if (p.x == nullptr || p.values == nullptr || p.indices == nullptr || p.y == nullptr || p.M < 1 || p.M > 64 ||
      (p.M & (p.M - 1)) != 0 || p.L < 1 || p.N < 1 || p.N > p.M || p.k % p.M != 0 || p.n % p.L != 0 || ldy < p.n)
    return cudaErrorInvalidValue;
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  const int64_t blocks = (p.m + kCheckRows - 1) / kCheckRows;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  regather_non_finite_rows_kernel<<<static_cast<unsigned>(blocks), kCheckRows, 0, stream>>>(p, ldy);
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace nmspmm
