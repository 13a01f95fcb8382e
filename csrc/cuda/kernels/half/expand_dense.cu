// The dense-expansion plans (dense_expand_{bf16,f16,f32}; docs/kernels.md, "Dense expansion"):
// the compressed weight is expanded into a transient dense W[n, k] of the call's dtype, cuBLAS
// multiplies it, and a check afterwards restores the gathering kernels' semantics for rows of x
// that hold a NaN or Inf (docs/format.md, "NaN and Inf in x"). One template serves the 16-bit
// types (uint16_t bits, fp16 or bf16 by a flag) and fp32.
//
// Expansion: a block owns 32 outputs x 256 inputs. It first brings the compressed slab those
// cover (values [rows][32], index bytes [rows][<= 32]) into shared memory with the widest loads the
// addresses allow, all issued before any is used, so each SM keeps tens of KiB in flight; zeroes a
// shared tile; scatters the kept values into it (threads of a warp take consecutive outputs; one
// thread walks all N slots of a window, so a repeated position, possible only in data that skipped
// validation, adds its values as the gathering kernels do); then writes each output's row segment
// (512 bytes in 16 bits, 1 KiB in fp32) with 16-byte stores, or element by element where k or the
// buffer does not allow them. Index bytes are masked with M - 1 (M is a power of two), so no byte
// value writes outside its window; windows past k and outputs past n are neither read nor written,
// and every offset is 64-bit.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/common/smem_limit.h"
#include "cuda/kernels/f32/expand_dense.h"
#include "spmm_half.h"

namespace nmspmm {
namespace kernels {

namespace {

constexpr int kRows = 32;        // outputs per block
constexpr int kCols = 256;       // dense inputs per block (a multiple of every M)
constexpr int kCheckRows = 256;  // rows of y probed per block of the non-finite check

// The element types: uint16_t holds fp16 or bf16 bits (the flag bf16 says which), float is fp32.
__device__ __forceinline__ float to_float(uint16_t u, bool bf16) {
  return bf16 ? __uint_as_float(static_cast<uint32_t>(u) << 16) : __half2float(__ushort_as_half(u));
}
__device__ __forceinline__ float to_float(float f, bool) { return f; }

template <class T>
__device__ __forceinline__ T from_float(float f, bool bf16);
template <>
__device__ __forceinline__ uint16_t from_float<uint16_t>(float f, bool bf16) {
  return bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(f)) : __half_as_ushort(__float2half_rn(f));
}
template <>
__device__ __forceinline__ float from_float<float>(float f, bool) {
  return f;
}

__device__ __forceinline__ bool non_finite(uint16_t u, bool bf16) {
  const uint16_t exp = bf16 ? 0x7F80 : 0x7C00;  // all-ones exponent: Inf or NaN
  return (u & exp) == exp;
}
__device__ __forceinline__ bool non_finite(float f, bool) { return !isfinite(f); }

// Elements per 16-byte store, and the tile row padding (16 bytes, which keeps rows 16-byte aligned).
template <class T>
constexpr int kVec = 16 / static_cast<int>(sizeof(T));

// Copies `rows` rows of `row_bytes` bytes (global row stride `ld` bytes) into shared memory (row
// stride `dst_ld` bytes) in units of V, four loads per thread in flight before their stores.
template <class V>
__device__ __forceinline__ void stage_rows(uint8_t* dst, int dst_ld, const uint8_t* src, int64_t ld, int rows,
                                           int row_bytes) {
  constexpr int kW = static_cast<int>(sizeof(V));
  constexpr int kBatch = 4;
  const int per_row = row_bytes / kW;
  const int total = rows * per_row;
  for (int base = threadIdx.x; base < total; base += kBatch * blockDim.x) {
    V buf[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int c = base + i * blockDim.x;
      if (c < total) {
        const int r = c / per_row, e = c - r * per_row;
        buf[i] = __ldg(reinterpret_cast<const V*>(src + r * ld) + e);
      }
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int c = base + i * blockDim.x;
      if (c < total) {
        const int r = c / per_row, e = c - r * per_row;
        reinterpret_cast<V*>(dst + r * dst_ld)[e] = buf[i];
      }
    }
  }
}

// stage_rows with the widest unit that divides the source address, its row stride and the row length.
__device__ __forceinline__ void stage_rows_widest(uint8_t* dst, int dst_ld, const uint8_t* src, int64_t ld,
                                                  int rows, int row_bytes) {
  const uint64_t a = reinterpret_cast<uintptr_t>(src) | static_cast<uint64_t>(ld) | static_cast<uint64_t>(row_bytes);
  if (a % 16 == 0) stage_rows<uint4>(dst, dst_ld, src, ld, rows, row_bytes);
  else if (a % 8 == 0) stage_rows<uint2>(dst, dst_ld, src, ld, rows, row_bytes);
  else if (a % 4 == 0) stage_rows<unsigned int>(dst, dst_ld, src, ld, rows, row_bytes);
  else if (a % 2 == 0) stage_rows<unsigned short>(dst, dst_ld, src, ld, rows, row_bytes);
  else stage_rows<unsigned char>(dst, dst_ld, src, ld, rows, row_bytes);
}

// Shared memory of one block: the tile, then the staged values [rows][kRows] and index bytes
// [rows][kRows] (a block's 32 outputs touch at most 32 vectors), rows = the compressed rows of
// kCols inputs.
template <class T>
constexpr int kTileBytes = kRows * (kCols + kVec<T>) * static_cast<int>(sizeof(T));
template <class T>
inline int expand_dense_smem_bytes(int N, int M) {
  const int rows = kCols / M * N;
  return kTileBytes<T> + rows * kRows * (static_cast<int>(sizeof(T)) + 1);
}

template <class T>
__global__ void __launch_bounds__(256, 6) expand_dense_kernel(const T* __restrict__ values,
                                                           const uint8_t* __restrict__ indices,
                                                           T* __restrict__ dense, int64_t n, int64_t k, int N,
                                                           int M, int L, bool bf16, bool vector_store) {
  constexpr int kPad = kVec<T>;
  extern __shared__ __align__(16) uint8_t smem[];
  T(*tile)[kCols + kPad] = reinterpret_cast<T(*)[kCols + kPad]>(smem);
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kCols;
  const int64_t cols = k - c0 < kCols ? k - c0 : kCols;
  const int windows = static_cast<int>(cols / M);
  const int rows = windows * N;
  const int outs = static_cast<int>(n - j0 < kRows ? n - j0 : kRows);
  const int64_t idx_ld = n / L;
  const int64_t v0 = j0 / L;
  const int vecs = static_cast<int>((j0 + outs - 1) / L - v0 + 1);
  const int64_t row0 = c0 / M * N;
  T* svals = reinterpret_cast<T*>(smem + kTileBytes<T>);
  uint8_t* sidx = smem + kTileBytes<T> + (kCols / M * N) * kRows * static_cast<int>(sizeof(T));

  constexpr int kValLd = kRows * static_cast<int>(sizeof(T));
  stage_rows_widest(reinterpret_cast<uint8_t*>(svals), kValLd,
                    reinterpret_cast<const uint8_t*>(values + row0 * n + j0), n * static_cast<int64_t>(sizeof(T)),
                    rows, outs * static_cast<int>(sizeof(T)));
  stage_rows_widest(sidx, kRows, indices + row0 * idx_ld + v0, idx_ld, rows, vecs);
  uint4* tile4 = reinterpret_cast<uint4*>(smem);
  for (int i = threadIdx.x; i < kTileBytes<T> / 16; i += blockDim.x) tile4[i] = make_uint4(0, 0, 0, 0);
  __syncthreads();

  const int jl = threadIdx.x % kRows;
  if (jl < outs) {
    const int vl = static_cast<int>((j0 + jl) / L - v0);
    for (int g = threadIdx.x / kRows; g < windows; g += blockDim.x / kRows) {
      uint64_t used = 0;  // positions of this window already written (M <= 64)
      for (int s = 0; s < N; ++s) {
        const int u = g * N + s;
        const int pos = sidx[u * kRows + vl] & (M - 1);
        T& cell = tile[jl][g * M + pos];
        const T val = svals[u * kRows + jl];
        const uint64_t bit = uint64_t{1} << pos;
        cell = (used & bit) ? from_float<T>(to_float(cell, bf16) + to_float(val, bf16), bf16) : val;
        used |= bit;
      }
    }
  }
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warps = blockDim.x / 32;
  for (int r = warp; r < outs; r += warps) {
    T* dst = dense + (j0 + r) * k + c0;
    if (vector_store) {  // k % kVec == 0 and a 16-byte aligned base: every row segment is aligned
      for (int c = lane * kVec<T>; c < cols; c += 32 * kVec<T>)
        *reinterpret_cast<uint4*>(dst + c) = *reinterpret_cast<const uint4*>(&tile[r][c]);
    } else {
      for (int c = lane; c < cols; c += 32) dst[c] = tile[r][c];
    }
  }
}

// What the non-finite check reads and writes (either dtype family).
struct RegatherArgs {
  const void* x;  // [m, k], row stride ldx
  int64_t ldx;
  const void* values;
  const uint8_t* indices;
  const void* bias;  // or nullptr
  void* y;           // [m, n], row stride ldy
  int64_t ldy, m, n, k;
  int N, M, L;
};

// After cuBLAS: a NaN or Inf anywhere in row i of x reaches every output of the dense product
// (0 * NaN), so y[i, 0] is non-finite exactly for those rows (or where the kept terms themselves
// overflow). Such rows are recomputed from the kept inputs only, in fp32, as the gathering kernels
// compute them. One probe per row; a block whose rows are all finite exits after it.
template <class T>
__global__ void __launch_bounds__(kCheckRows) regather_non_finite_rows_kernel(RegatherArgs a, bool bf16) {
  const T* x = static_cast<const T*>(a.x);
  const T* values = static_cast<const T*>(a.values);
  const T* bias = static_cast<const T*>(a.bias);
  T* y = static_cast<T*>(a.y);
  __shared__ bool flagged[kCheckRows];
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kCheckRows;
  const bool mine = i0 + threadIdx.x < a.m && non_finite(y[(i0 + threadIdx.x) * a.ldy], bf16);
  flagged[threadIdx.x] = mine;
  if (!__syncthreads_or(mine)) return;

  const int64_t w = a.k / a.M * a.N, idx_ld = a.n / a.L;
  for (int r = 0; r < kCheckRows; ++r) {
    if (!flagged[r]) continue;
    const int64_t i = i0 + r;
    const T* xi = x + i * a.ldx;
    for (int64_t j = threadIdx.x; j < a.n; j += blockDim.x) {
      const int64_t v = j / a.L;
      float acc = 0.f;
      for (int64_t u = 0; u < w; ++u) {
        const int64_t c = u / a.N * a.M + (a.indices[u * idx_ld + v] & (a.M - 1));
        acc = fmaf(to_float(values[u * a.n + j], bf16), to_float(xi[c], bf16), acc);
      }
      if (bias != nullptr) acc += to_float(bias[j], bf16);
      y[i * a.ldy + j] = from_float<T>(acc, bf16);
    }
  }
}

// The pattern checks both launchers share: M a power of two in [2, 64] (the masks M - 1 and the
// 64-bit position set), 1 <= N <= M, k % M == 0, n % L == 0.
bool bad_pattern(int64_t n, int64_t k, int N, int M, int L) {
  return M < 2 || M > 64 || (M & (M - 1)) != 0 || L < 1 || N < 1 || N > M || k % M != 0 || n % L != 0;
}

template <class T>
cudaError_t expand_dense(const T* values, const uint8_t* indices, T* dense, int64_t n, int64_t k, int N, int M,
                         int L, bool bf16, cudaStream_t stream) {
  if (values == nullptr || indices == nullptr || dense == nullptr || bad_pattern(n, k, N, M, L))
    return cudaErrorInvalidValue;
  if (n == 0 || k == 0) return cudaSuccess;
  const int64_t col_blocks = (k + kCols - 1) / kCols;
  const int64_t row_blocks = (n + kRows - 1) / kRows;
  if (col_blocks > 65535 || row_blocks > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(col_blocks));
  const bool vector_store = k % kVec<T> == 0 && reinterpret_cast<uintptr_t>(dense) % 16 == 0;
  // The limit is set once, for the largest pattern (N = M); a call requests only its own bytes.
  static bool configured[kMaxDevices] = {};
  if (cudaError_t e = set_smem_limit_once(configured, expand_dense_kernel<T>, expand_dense_smem_bytes<T>(1, 1));
      e != cudaSuccess)
    return e;
  const int smem = expand_dense_smem_bytes<T>(N, M);
  expand_dense_kernel<T><<<grid, 256, smem, stream>>>(values, indices, dense, n, k, N, M, L, bf16, vector_store);
  return cudaGetLastError();
}

template <class T>
cudaError_t regather_non_finite_rows(const RegatherArgs& a, bool bf16, cudaStream_t stream) {
  if (a.x == nullptr || a.values == nullptr || a.indices == nullptr || a.y == nullptr ||
      bad_pattern(a.n, a.k, a.N, a.M, a.L) || a.ldy < a.n || a.ldx < 0)
    return cudaErrorInvalidValue;
  if (a.m == 0 || a.n == 0) return cudaSuccess;
  const int64_t blocks = (a.m + kCheckRows - 1) / kCheckRows;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  regather_non_finite_rows_kernel<T><<<static_cast<unsigned>(blocks), kCheckRows, 0, stream>>>(a, bf16);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_expand_dense(const HalfSpmmParams& p, void* dense, cudaStream_t stream) {
  return expand_dense(static_cast<const uint16_t*>(p.values), p.indices, static_cast<uint16_t*>(dense), p.n, p.k,
                      p.N, p.M, p.L, p.dtype == HalfType::kBF16, stream);
}

cudaError_t launch_regather_non_finite_rows(const HalfSpmmParams& p, int64_t ldy, cudaStream_t stream) {
  const RegatherArgs a{p.x, p.ldx, p.values, p.indices, p.bias, p.y, ldy, p.m, p.n, p.k, p.N, p.M, p.L};
  return regather_non_finite_rows<uint16_t>(a, p.dtype == HalfType::kBF16, stream);
}

cudaError_t launch_expand_dense_f32(const SpmmParams& p, float* dense, cudaStream_t stream) {
  return expand_dense(p.values, p.indices, dense, p.n, p.k, p.N, p.M, p.L, false, stream);
}

cudaError_t launch_regather_non_finite_rows_f32(const SpmmParams& p, int64_t ldy, cudaStream_t stream) {
  const RegatherArgs a{p.x, p.ldx, p.values, p.indices, p.bias, p.y, ldy, p.m, p.n, p.k, p.N, p.M, p.L};
  return regather_non_finite_rows<float>(a, false, stream);
}

}  // namespace kernels
}  // namespace nmspmm
