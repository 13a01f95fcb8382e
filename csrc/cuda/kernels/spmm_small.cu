// SpMM kernels outside the tiled family, and the launcher that dispatches a KernelId:
//  * decode (m <= 16; on sm_90 the heuristic takes the cluster decode kernels of
//    spmm_decode_cluster.cu for m <= 2 and the staged ones of spmm_decode_staged.cu for most of
//    3..16): memory-bound; streams the compressed weight once with
//    16-byte loads (for m in 5..8 a warp's batch of 16 rows all in flight before its math), the
//    k dimension split over blocks (and over the warps of a block), x staged in shared memory;
//  * generic: any pattern (L = 1, 2, ...): one thread per output column and 4 rows;
//  * transpose_x: the k-major copy of x (NM-SpMM's column-major A) that the tiled kernels read;
//  * reduce_splits: the fixed-order split-K reduction (+ bias) that keeps results deterministic.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>

#include "../../dispatch.h"
#include "launch_overlap.cuh"
#include "smem_limit.h"
#include "spmm.h"
#include "spmm_decode.h"
#include "spmm_producer.h"
#include "spmm_tiled.h"
#include "spmm_warp_packed.h"

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
      // weight loads issued before any math (rows past the chunk re-read its last row and count
      // as zero). Measured on H100: 13% faster on geomean than the per-window loop
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
        int s = static_cast<int>(ub - gb * N);
        int cbase = static_cast<int>((gb - gc) * M);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const bool ok = ub + r < u_end;
          const int c = ok ? cbase + idx[r] : 0;
          if (!ok) b[r] = make_float4(0.f, 0.f, 0.f, 0.f);
          if (++s == N) {
            s = 0;
            cbase += M;
          }
#pragma unroll
          for (int i = 0; i < MR; ++i) {
            const float a = xs[i * kDecodeXCols + c];
            acc[i][0] = fmaf(a, b[r].x, acc[i][0]);
            acc[i][1] = fmaf(a, b[r].y, acc[i][1]);
            acc[i][2] = fmaf(a, b[r].z, acc[i][2]);
            acc[i][3] = fmaf(a, b[r].w, acc[i][3]);
          }
        }
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
#pragma unroll
          for (int i = 0; i < MR; ++i) {
            const float a = xs[i * kDecodeXCols + c];
            acc[i][0] = fmaf(a, b.x, acc[i][0]);
            acc[i][1] = fmaf(a, b.y, acc[i][1]);
            acc[i][2] = fmaf(a, b.z, acc[i][2]);
            acc[i][3] = fmaf(a, b.w, acc[i][3]);
          }
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

// NMSPMM_NO_FIXED_WB=1 (read once) runs the runtime-WB kernels where a fixed-WB variant exists:
// an A/B switch for measuring the fixed-WB kernels, not a tuning knob.
bool fixed_wb_enabled() {
  static const bool enabled = [] {
    const char* e = std::getenv("NMSPMM_NO_FIXED_WB");
    return e == nullptr || e[0] != '1';
  }();
  return enabled;
}

// NMSPMM_NO_KB64=1 (read once) runs the k-block-32 WB = 4 variant where the k-block-64 WB = 8 one
// exists: an A/B switch, not a tuning knob.
bool kb64_enabled() {
  static const bool enabled = [] {
    const char* e = std::getenv("NMSPMM_NO_KB64");
    return e == nullptr || e[0] != '1';
  }();
  return enabled;
}

template <int BM, int BN, int TM, int KB, bool PACKED>
cudaError_t launch_tiled_any_l(const SpmmParams& p, cudaStream_t stream) {
  if (p.L >= 32) {
    if constexpr (KB == 32 && !PACKED) {
      // Fixed-WB variants for 4, 8, 12 or 16 compressed rows per k-block.
      if (fixed_wb_enabled()) {
        if constexpr (has_kb64_variant<BM, BN, TM>()) {
          // 4:32 (and 2:16, 1:8) with k-blocks of 64: 8 rows per stage instead of 4.
          if (kb64_enabled() && 64 % p.M == 0 && 64 / p.M * p.N == 8)
            return launch_tiled<TiledConfig<BM, BN, TM, 64, false, true, 8>>(p, stream);
        }
        switch (KB / p.M * p.N) {
          case 4: return launch_tiled<TiledConfig<BM, BN, TM, KB, false, true, 4>>(p, stream);
          case 8: return launch_tiled<TiledConfig<BM, BN, TM, KB, false, true, 8>>(p, stream);
          case 12: return launch_tiled<TiledConfig<BM, BN, TM, KB, false, true, 12>>(p, stream);
          case 16: return launch_tiled<TiledConfig<BM, BN, TM, KB, false, true, 16>>(p, stream);
          default: break;
        }
      }
    }
    return launch_tiled<TiledConfig<BM, BN, TM, KB, PACKED, true>>(p, stream);
  }
  return launch_tiled<TiledConfig<BM, BN, TM, KB, PACKED, false>>(p, stream);
}

// Calls f(ConfigTag<ProducerConfig<...>>{}) with kernel 21's / 22's config for the pattern's k-block
// and compressed rows per k-block (producer_shape); cudaErrorInvalidValue where none is built. (A tag:
// ProducerConfig is only declared here, its definition lives with the kernel.)
template <class C>
struct ConfigTag {
  using type = C;
};
template <class F>
cudaError_t with_producer_config(const SpmmParams& p, F&& f) {
  const ProducerShape s = producer_shape(p.N, p.M);
  if (s.kb == 32 && s.wb == 12) return f(ConfigTag<ProducerConfig<1, 8, 32, 12, 4>>{});
  if (s.kb == 32 && s.wb == 16) return f(ConfigTag<ProducerConfig<1, 8, 32, 16, 4>>{});
  if (s.kb == 64 && s.wb == 16) return f(ConfigTag<ProducerConfig<1, 8, 64, 16, 3>>{});
  if (s.kb == 128 && s.wb == 16) return f(ConfigTag<ProducerConfig<1, 8, 128, 16, 2>>{});
  return cudaErrorInvalidValue;
}

cudaError_t launch_producer_any(const SpmmParams& p, cudaStream_t stream) {
  return with_producer_config(p, [&](auto c) { return launch_producer<typename decltype(c)::type>(p, stream); });
}

// Kernel 22: kernel 21 with split-K on the tail only; the tail is producer_tail_tiles on this device's
// SM count (queried once per device), as the binding sized the workspace.
cudaError_t launch_producer_tail_any(const SpmmParams& p, cudaStream_t stream) {
  static int sms[kMaxDevices] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (sms[dev] == 0 && cudaDeviceGetAttribute(&sms[dev], cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return cudaErrorInvalidDevice;
  const int64_t tail = producer_tail_tiles(p.m, p.n, sms[dev]);
  return with_producer_config(p, [&](auto c) { return launch_producer_tail<typename decltype(c)::type>(p, stream, tail); });
}

template <int BM, int BN, int TM>
cudaError_t launch_nonpacked(const SpmmParams& p, cudaStream_t stream) {
  if (p.M <= 32) return launch_tiled_any_l<BM, BN, TM, 32, false>(p, stream);
  return launch_tiled_any_l<BM, BN, TM, 64, false>(p, stream);
}

}  // namespace

cudaError_t launch_spmm(const SpmmParams& p, int kernel, cudaStream_t stream) {
  if (!kernel_supports(kernel, p.m, p.N, p.M, p.L, p.col_info != nullptr)) return cudaErrorInvalidValue;
  if (p.split_k < 1) return cudaErrorInvalidValue;
  // cluster_reduce only where the plan can reduce in a cluster; otherwise split-K needs the workspace.
  if (p.cluster_reduce && !plan_reduces_in_cluster(kernel, p.split_k, true)) return cudaErrorInvalidValue;
  if (p.cluster_reduce && is_cluster_decode_kernel(kernel)) return cudaErrorInvalidValue;
  // Kernel 22 launches its own reduction and checks its (tail-sized, possibly empty) workspace.
  const bool uses_split = kernel != kProducerTail128x256 && plan_uses_workspace(kernel, p.split_k, p.cluster_reduce);
  if (uses_split && p.workspace == nullptr) return cudaErrorInvalidValue;
  if ((is_tiled_kernel(kernel) || is_packed_kernel(kernel)) && p.L < 16) return cudaErrorInvalidValue;
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  cudaError_t err = cudaSuccess;
  if (kernel_reads_xt(kernel)) {
    err = launch_transpose_x(p, stream);
    if (err != cudaSuccess) return err;
  }
  switch (kernel) {
    case kGeneric: {
      const int64_t bx = (p.n + kGenericCols - 1) / kGenericCols;
      const int64_t row_blocks = (p.m + kGenericRows - 1) / kGenericRows;
      const int64_t by = row_blocks < 65535 ? row_blocks : 65535;  // the kernel loops over the rest
      if (bx > 0x7fffffff) return cudaErrorInvalidConfiguration;
      spmm_generic_kernel<<<dim3(static_cast<unsigned>(bx), static_cast<unsigned>(by)), kGenericCols, 0,
                            stream>>>(p);
      err = cudaGetLastError();
      break;
    }
    case kDecode:
      if (p.m <= 1) err = launch_decode<1>(p, stream);
      else if (p.m <= 2) err = launch_decode<2>(p, stream);
      else if (p.m <= 4) err = launch_decode<4>(p, stream);
      else if (p.m <= 8) err = launch_decode<8>(p, stream);
      else err = launch_decode<16>(p, stream);
      break;
    case kDecodeW4: case kDecodeW8: case kDecodeW16:
      err = launch_decode_cluster(p, cluster_decode_warps(kernel), stream);
      break;
    case kDecodeStaged128: case kDecodeStaged256: case kDecodeStaged512:
      err = launch_decode_staged(p, staged_decode_col_warps(kernel), stream);
      break;
    case kTiled128x128: err = launch_nonpacked<128, 128, 16>(p, stream); break;
    case kTiled64x128: err = launch_nonpacked<64, 128, 8>(p, stream); break;
    case kTiled32x128: err = launch_nonpacked<32, 128, 4>(p, stream); break;
    case kTiled64x64: err = launch_nonpacked<64, 64, 8>(p, stream); break;
    case kTiled128x256: err = launch_tiled_any_l<128, 256, 16, 32, false>(p, stream); break;
    case kTiled256x128: err = launch_tiled_any_l<256, 128, 16, 32, false>(p, stream); break;
    case kTiled128x128w8: err = launch_nonpacked<128, 128, 8>(p, stream); break;
    case kPacked128x128: err = launch_tiled_any_l<128, 128, 16, 64, true>(p, stream); break;
    case kPacked64x128: err = launch_tiled_any_l<64, 128, 8, 64, true>(p, stream); break;
    case kPacked32x128: err = launch_tiled_any_l<32, 128, 4, 64, true>(p, stream); break;
    case kWarpPacked128x128: err = launch_warp_packed<WarpPacked128x128>(p, stream); break;
    case kWarpPacked64x128: err = launch_warp_packed<WarpPacked64x128>(p, stream); break;
    case kWarpPacked32x128: err = launch_warp_packed<WarpPacked32x128>(p, stream); break;
    case kProducer128x256: err = launch_producer_any(p, stream); break;
    case kProducerTail128x256: err = launch_producer_tail_any(p, stream); break;
    default: return cudaErrorInvalidValue;
  }
  if (err != cudaSuccess || !uses_split) return err;
  const int64_t mn = p.m * p.n;
  return launch_items_after(reduce_splits_kernel, mn / 4, p.overlap_launches, stream,
                            static_cast<const float*>(p.workspace), p.split_k, mn, p.n, p.bias, p.y);
}

}  // namespace kernels
}  // namespace nmspmm
