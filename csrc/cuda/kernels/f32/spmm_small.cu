// The SpMM kernels outside the tiled families and their launch functions (spmm_small.h):
//  * decode_f32_splitk (m <= 16; on sm_90 the heuristic takes the cluster decode kernels of
//    spmm_decode_cluster.cu for m <= 2 and the staged ones of spmm_decode_staged.cu for most of
//    3..16): memory-bound; streams the compressed weight once with
//    16-byte loads (for m in 5..8 a warp's batch of 16 rows all in flight before its math), the
//    k dimension split over blocks (and over the warps of a block), x staged in shared memory;
//  * generic_f32: any pattern (L = 1, 2, ...): one thread per output column and 4 rows;
//  * transpose_x: the k-major copy of x (NM-SpMM's column-major A) that the tiled kernels read;
//  * reduce_splits: the fixed-order split-K reduction (+ bias) that keeps results deterministic.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "fma_order.cuh"
#include "cuda/kernels/common/launch_overlap.cuh"
#include "spmm.h"
#include "cuda/kernels/decode_splitk/spmm_decode_splitk.h"
#include "spmm_small.h"

namespace nmspmm {
namespace kernels {

namespace {

constexpr int kDecodeWarps = 4;
constexpr int kDecodeCols = 128;      // output columns per block (32 lanes x 4)
constexpr int kDecodeXCols = 512;     // dense inputs of x staged per chunk

template <int MR>
__global__ void __launch_bounds__(kDecodeWarps * 32)
    spmm_decode_kernel(const SpmmParams p) {
  // x chunk [MR][kDecodeXCols]; reused for the cross-warp reduction [warps][MR][128].
  static_assert(kDecodeWarps * kDecodeCols <= kDecodeXCols, "reduction buffer must fit");
  __shared__ float4 smem_f4[MR * kDecodeXCols / 4];
  float* const xs = reinterpret_cast<float*>(smem_f4);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t n = p.n, k = p.k, m = p.m;
  const int N = p.N, M = p.M, L = p.L;
  const int64_t q = n / L;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kDecodeCols + lane * 4;
  const bool col_ok = col < n;
  const int64_t v = col_ok ? col / L : 0;

  const int64_t windows = k / M;
  const int64_t g_begin = windows * blockIdx.y / gridDim.y;
  const int64_t g_end = windows * (blockIdx.y + 1) / gridDim.y;
  const int64_t chunk_windows = kDecodeXCols / M;

  float acc[MR][4];
#pragma unroll
  for (int i = 0; i < MR; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;

  // x rows can be staged with 16-byte loads when every chunk start is 16-byte aligned.
  const bool x_vec = reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && p.ldx % 4 == 0 && M % 4 == 0;

  for (int64_t gc = g_begin; gc < g_end; gc += chunk_windows) {
    const int64_t ge = gc + chunk_windows < g_end ? gc + chunk_windows : g_end;
    const int ncols = static_cast<int>((ge - gc) * M);
    __syncthreads();
    // Stage x[0:MR, gc*M : ge*M] (rows >= m are zero), row by row: no index division.
#pragma unroll
    for (int i = 0; i < MR; ++i) {
      float* const dst = xs + i * kDecodeXCols;
      if (i >= m) {
        for (int c = tid; c < ncols; c += blockDim.x) dst[c] = 0.f;
      } else if (x_vec) {
        const float4* const src = reinterpret_cast<const float4*>(p.x + i * p.ldx + gc * M);
        for (int c = tid; c < ncols / 4; c += blockDim.x) reinterpret_cast<float4*>(dst)[c] = __ldg(src + c);
      } else {
        const float* const src = p.x + i * p.ldx + gc * M;
        for (int c = tid; c < ncols; c += blockDim.x) dst[c] = __ldg(src + c);
      }
    }
    __syncthreads();
    if (!col_ok) continue;
    if constexpr (MR == 8) {
      // m in 5..8: the chunk's compressed rows in batches of 16 per warp, with all 16 index and
      // weight loads issued before any math (rows past the chunk re-read its last row and are
      // skipped). Measured on H100: 13% faster on geomean than the per-window loop
      // below at m = 8, but 6-7% slower at m = 4 and m = 16, which keep that loop.
      constexpr int R = 16;
      const int64_t u_end = ge * N;
      for (int64_t ub = gc * N + static_cast<int64_t>(warp) * R; ub < u_end; ub += kDecodeWarps * R) {
        int idx[R];
        float4 b[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int64_t u = ub + r < u_end ? ub + r : u_end - 1;
          idx[r] = __ldg(p.indices + u * q + v) & (M - 1);  // masked: never outside the window
          b[r] = __ldcs(reinterpret_cast<const float4*>(p.values + u * n + col));
        }
        asm volatile("" ::: "memory");  // keep the loads ahead of the math (see spmm_decode_cluster.cu)
        const int64_t gb = ub / N;
        // A whole batch runs without per-row bounds; the warp's last, partial batch skips its
        // rows past the chunk (see spmm_decode_cluster.cu). The choice is warp-uniform.
        auto batch_math = [&](auto whole) {
          int s = static_cast<int>(ub - gb * N);
          int cbase = static_cast<int>((gb - gc) * M);
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const bool ok = decltype(whole)::value || ub + r < u_end;
            const int c = cbase + idx[r];
            if (++s == N) {
              s = 0;
              cbase += M;
            }
            if (ok) fma_row4(acc, b[r], [&](int i) { return xs[i * kDecodeXCols + c]; });
          }
        };
        if (ub + R <= u_end)
          batch_math(std::true_type{});
        else
          batch_math(std::false_type{});
      }
    } else {
      // A warp takes whole windows, N rows each.
      for (int64_t g = gc + warp; g < ge; g += kDecodeWarps) {
        const int cbase = static_cast<int>((g - gc) * M);
        const int64_t u0 = g * N;
#pragma unroll 8
        for (int s = 0; s < N; ++s) {
          const int64_t u = u0 + s;
          const float4 b = __ldcs(reinterpret_cast<const float4*>(p.values + u * n + col));
          const int c = cbase | (__ldg(p.indices + u * q + v) & (M - 1));  // masked: never outside the window
          fma_row4(acc, b, [&](int i) { return xs[i * kDecodeXCols + c]; });
        }
      }
    }
  }

  allow_dependent_launch();  // the split-K reduction, if any, may start launching
  // Reduce the warps' partial sums in fixed order.
  __syncthreads();
  float* red = xs;
#pragma unroll
  for (int i = 0; i < MR; ++i)
    *reinterpret_cast<float4*>(red + (warp * MR + i) * kDecodeCols + lane * 4) =
        make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
  __syncthreads();
  const bool split = gridDim.y > 1;
  float* out = split ? p.workspace + static_cast<int64_t>(blockIdx.y) * m * n : p.y;
  for (int e = tid; e < MR * kDecodeCols; e += blockDim.x) {
    const int i = e / kDecodeCols, cl = e % kDecodeCols;
    const int64_t c = static_cast<int64_t>(blockIdx.x) * kDecodeCols + cl;
    if (i >= m || c >= n) continue;
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) s += red[(w * MR + i) * kDecodeCols + cl];
    if (!split && p.bias != nullptr) s += p.bias[c];
    out[i * n + c] = s;
  }
}

constexpr int kGenericCols = 128;
constexpr int kGenericRows = 4;

// Any N:M:L. Thread = one output column x kGenericRows rows; reads values coalesced along n and
// gathers x through the read-only cache.
__global__ void __launch_bounds__(kGenericCols) spmm_generic_kernel(const SpmmParams p) {
  const int64_t n = p.n, k = p.k, m = p.m;
  const int N = p.N, M = p.M, L = p.L;
  const int64_t q = n / L;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kGenericCols + threadIdx.x;
  if (j >= n) return;
  const int64_t v = j / L;
  const float bias = p.bias != nullptr ? p.bias[j] : 0.f;
  const int64_t windows = k / M;
  // Row blocks blockIdx.y, + gridDim.y, ...: the grid's y extent is capped at 65535 (launch_spmm),
  // so any m runs.
  for (int64_t i0 = static_cast<int64_t>(blockIdx.y) * kGenericRows; i0 < m;
       i0 += static_cast<int64_t>(gridDim.y) * kGenericRows) {
    const float* xr[kGenericRows];
#pragma unroll
    for (int r = 0; r < kGenericRows; ++r) xr[r] = p.x + (i0 + r < m ? i0 + r : i0) * p.ldx;
    float acc[kGenericRows] = {};
    for (int64_t g = 0; g < windows; ++g) {
      for (int s = 0; s < N; ++s) {
        const int64_t u = g * N + s;
        const float b = __ldg(p.values + u * n + j);
        const int64_t c = g * M + (__ldg(p.indices + u * q + v) & (M - 1));  // masked: inside the window
#pragma unroll
        for (int r = 0; r < kGenericRows; ++r) acc[r] = fmaf(__ldg(xr[r] + c), b, acc[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < kGenericRows; ++r)
      if (i0 + r < m) p.y[(i0 + r) * n + j] = acc[r] + bias;
  }
}

constexpr int kTransposeTile = 32;
constexpr int kTransposeRows = 8;

// xt[c][i] = x[i][c] for i < m, 0 for m <= i < ldt; 32x32 tiles through shared memory so both the
// read (along k) and the write (along m) are coalesced.
__global__ void __launch_bounds__(kTransposeTile* kTransposeRows)
    transpose_x_kernel(const float* __restrict__ x, int64_t ldx, int64_t m, int64_t k,
                       float* __restrict__ xt, int64_t ldt) {
  // A warp-packed kernel launched after this one with programmatic dependent launch may start now:
  // it reads nothing this kernel writes before its griddepcontrol.wait.
  allow_dependent_launch();
  __shared__ float tile[kTransposeTile][kTransposeTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kTransposeTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kTransposeTile;
#pragma unroll
  for (int r = ty; r < kTransposeTile; r += kTransposeRows) {
    const int64_t i = i0 + r, c = c0 + tx;
    tile[r][tx] = (i < m && c < k) ? __ldg(x + i * ldx + c) : 0.f;
  }
  __syncthreads();
#pragma unroll
  for (int r = ty; r < kTransposeTile; r += kTransposeRows) {
    const int64_t c = c0 + r, i = i0 + tx;
    if (c < k && i < ldt) xt[c * ldt + i] = tile[tx][r];
  }
}


// y = sum_{z < splits} workspace[z] (+ bias), in fixed z order. n % 4 == 0.
__global__ void reduce_splits_kernel(const float* __restrict__ ws, int splits, int64_t mn, int64_t n,
                                     const float* __restrict__ bias, float* __restrict__ y) {
  grid_dependency_wait();  // launched while the split kernel may still run
  const int64_t e = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (e >= mn) return;
  float4 s = *reinterpret_cast<const float4*>(ws + e);
  for (int z = 1; z < splits; ++z) {
    const float4 t = *reinterpret_cast<const float4*>(ws + z * mn + e);
    s.x += t.x; s.y += t.y; s.z += t.z; s.w += t.w;
  }
  if (bias != nullptr) {
    const float4 b = *reinterpret_cast<const float4*>(bias + e % n);
    s.x += b.x; s.y += b.y; s.z += b.z; s.w += b.w;
  }
  *reinterpret_cast<float4*>(y + e) = s;
}

template <int MR>
cudaError_t launch_decode(const SpmmParams& p, cudaStream_t stream) {
  const int64_t blocks_n = (p.n + kDecodeCols - 1) / kDecodeCols;
  if (blocks_n > 0x7fffffff || p.split_k > 65535) return cudaErrorInvalidConfiguration;
  dim3 grid(static_cast<unsigned>(blocks_n), static_cast<unsigned>(p.split_k));
  spmm_decode_kernel<MR><<<grid, kDecodeWarps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_transpose_x(const SpmmParams& p, cudaStream_t stream) {
  if (p.xt == nullptr || p.ldxt < p.m || p.ldxt % 4 != 0) return cudaErrorInvalidValue;
  const int64_t bx = (p.ldxt + kTransposeTile - 1) / kTransposeTile;
  const int64_t by = (p.k + kTransposeTile - 1) / kTransposeTile;
  if (bx > 0x7fffffff || by > 65535) return cudaErrorInvalidConfiguration;
  transpose_x_kernel<<<dim3(static_cast<unsigned>(bx), static_cast<unsigned>(by)),
                       dim3(kTransposeTile, kTransposeRows), 0, stream>>>(p.x, p.ldx, p.m, p.k, p.xt,
                                                                            p.ldxt);
  return cudaGetLastError();
}

cudaError_t launch_generic(const SpmmParams& p, cudaStream_t stream) {
  const int64_t bx = (p.n + kGenericCols - 1) / kGenericCols;
  const int64_t row_blocks = (p.m + kGenericRows - 1) / kGenericRows;
  const int64_t by = row_blocks < 65535 ? row_blocks : 65535;  // the kernel loops over the rest
  if (bx > 0x7fffffff) return cudaErrorInvalidConfiguration;
  spmm_generic_kernel<<<dim3(static_cast<unsigned>(bx), static_cast<unsigned>(by)), kGenericCols, 0,
                        stream>>>(p);
  return cudaGetLastError();
}

namespace {
// The split-K decode problem of p for the kernels of spmm_decode_splitk.cuh.
DecodeSplitKArgs decode_splitk_args(const SpmmParams& p) {
  return {p.x, p.ldx, p.values, p.indices, p.bias, p.y, p.workspace, p.m, p.n, p.k, p.N, p.M, p.L, p.split_k,
          p.overlap_launches};
}
}  // namespace

cudaError_t launch_decode_splitk(const SpmmParams& p, cudaStream_t stream) {
  // L < 4: a lane's 4 columns have up to 4 indices (spmm_decode_splitk.cuh); this kernel keeps L >= 4.
  if (p.L < 4) return launch_decode_splitk_f32(decode_splitk_args(p), stream);
  if (p.m <= 1) return launch_decode<1>(p, stream);
  if (p.m <= 2) return launch_decode<2>(p, stream);
  if (p.m <= 4) return launch_decode<4>(p, stream);
  if (p.m <= 8) return launch_decode<8>(p, stream);
  return launch_decode<16>(p, stream);
}

cudaError_t launch_reduce_splits(const SpmmParams& p, cudaStream_t stream) {
  // Rows of n % 4 != 0 (L < 4) break this kernel's 4-element vectors: the scalar-capable reduction.
  if (p.n % 4 != 0) return launch_reduce_splits_f32(decode_splitk_args(p), stream);
  const int64_t mn = p.m * p.n;
  return launch_items_after(reduce_splits_kernel, mn / 4, p.overlap_launches, stream,
                            static_cast<const float*>(p.workspace), p.split_k, mn, p.n, p.bias, p.y);
}

}  // namespace kernels
}  // namespace nmspmm
