// The split-K decode kernels for any vector length (L >= 1) and dtype (spmm_decode_splitk.h), and
// their split-K reduction. Included by the per-dtype files spmm_decode_splitk_{f32,f16,bf16}.cu.
//
// Layout of the work, as decode_f32_splitk (spmm_small.cu): a block of 4 warps owns 128 output
// columns, each lane 4 consecutive ones; k is split over the grid's y blocks (split_k) and, within a
// block, over its warps in batches of R compressed rows. Per row a lane loads its 4 values with one
// vector load (16 bytes fp32, 8 bytes fp16 / bf16; scalar loads where n % 4 != 0 or unaligned) and
// the index bytes of its columns: one byte shared by the 4 columns at L >= 4, 2 bytes at L = 2, 4
// bytes at L = 1 (one 16- / 32-bit load where aligned, else byte loads). All R rows' loads are in
// flight before the math. Bytes read per column and compressed row: sizeof(T) + 1 / L.
//
// x is staged in shared memory in chunks of 512 inputs, rows of x >= m as zero; every index byte is
// masked with M - 1 (M a power of two, format.md), so a corrupted index never reads outside its
// window.
//  - shared-memory lookup (fp32; fp16 / bf16 at MR <= 4, and MR = 8 at L >= 4): as fp32,
//    column-major ([inputs][MR]): one input's MR rows are contiguous, so a column's lookup reads 4
//    rows per 16-byte shared load.
//  - shuffle lookup (fp16 / bf16 at MR = 16, and MR = 8 at L < 4): as pairs of rows in 32-bit
//    words, row-pair-major ([MR / 2][inputs]). A warp holds a group of 32 inputs (64 at M = 64) in
//    registers, lane j input j, read without bank conflicts, and a column's lookup is one shuffle
//    from the lane of its input per pair of rows. Random 16-byte shared loads conflict (several
//    wavefronts per quarter warp where 1 is the least); a shuffle never does and moves 2 rows of 16
//    bits, but costs an unpack per pair: it pays where a lookup reads many rows (shuffle_lookup).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/kernels/common/launch_overlap.cuh"
#include "spmm_decode_splitk.h"

namespace nmspmm {
namespace kernels {
namespace decode_splitk {

constexpr int kWarps = 4;
constexpr int kCols = 128;   // output columns per block: 32 lanes x 4
constexpr int kXCols = 512;  // inputs of x staged per chunk

// Element types: storage S, the 4-column vector V4, conversions to and from fp32, and the rows per
// batch kRows (128 bytes of values per lane in flight; half of it at MR >= 8).
struct F32 {
  using S = float;
  using V4 = float4;
  static constexpr int kRows = 8;
  static constexpr bool kShortOnly = true;  // L >= 4 runs spmm_small.cu's decode_f32_splitk kernel
  __device__ __forceinline__ static float to_float(S v) { return v; }
  __device__ __forceinline__ static S from_float(float f) { return f; }
  __device__ __forceinline__ static void unpack(const V4& v, float (&w)[4]) {
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
  }
  __device__ __forceinline__ static V4 pack(const S (&s)[4]) { return make_float4(s[0], s[1], s[2], s[3]); }
};

// 16-bit storage as raw bits; column j of a V4 is bits 16 (j % 2) of word j / 2 (little endian).
template <class Derived>
struct Bits16 {
  using S = uint16_t;
  using V4 = uint2;
  static constexpr int kRows = 16;
  static constexpr bool kShortOnly = false;
  __device__ __forceinline__ static void unpack(const V4& v, float (&w)[4]) {
    w[0] = Derived::to_float(static_cast<S>(v.x & 0xffffu));
    w[1] = Derived::to_float(static_cast<S>(v.x >> 16));
    w[2] = Derived::to_float(static_cast<S>(v.y & 0xffffu));
    w[3] = Derived::to_float(static_cast<S>(v.y >> 16));
  }
  __device__ __forceinline__ static V4 pack(const S (&s)[4]) {
    return make_uint2(s[0] | (static_cast<uint32_t>(s[1]) << 16), s[2] | (static_cast<uint32_t>(s[3]) << 16));
  }
};
// unpack_pair: the two values of a word of x pairs (row 2p in the low half, row 2p + 1 in the high).
struct F16 : Bits16<F16> {
  __device__ __forceinline__ static float to_float(S h) { return __half2float(__ushort_as_half(h)); }
  __device__ __forceinline__ static S from_float(float f) { return __half_as_ushort(__float2half_rn(f)); }
  __device__ __forceinline__ static void unpack_pair(uint32_t v, float& lo, float& hi) {
    lo = __half2float(__ushort_as_half(static_cast<unsigned short>(v & 0xffffu)));
    hi = __half2float(__ushort_as_half(static_cast<unsigned short>(v >> 16)));
  }
};
struct BF16 : Bits16<BF16> {
  __device__ __forceinline__ static float to_float(S h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }
  __device__ __forceinline__ static S from_float(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
  __device__ __forceinline__ static void unpack_pair(uint32_t v, float& lo, float& hi) {
    lo = __uint_as_float(v << 16);
    hi = __uint_as_float(v & 0xffff0000u);
  }
};

// The 4 values of a lane's columns col..col+3 in compressed row p (p points at column col): one
// streaming vector load when vec, else scalar loads with the columns >= n read as zero.
template <class T>
__device__ __forceinline__ typename T::V4 load_values(const typename T::S* p, bool vec, int64_t col, int64_t n) {
  using S = typename T::S;
  if (vec) return __ldcs(reinterpret_cast<const typename T::V4*>(p));
  S s[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) s[j] = col + j < n ? __ldcs(p + j) : S(0);
  return T::pack(s);
}

// The index bytes of a lane's columns in one compressed row, byte t for columns t*VL..t*VL+VL-1
// (p points at the first one): VL = 4 one byte (read by the L / 4 lanes of a vector: cached), VL
// = 2 two and VL = 1 four bytes (each read once: streaming), in one load when vec. Bytes of
// columns >= n read as zero.
template <int VL>
__device__ __forceinline__ uint32_t load_index(const uint8_t* p, bool vec, int64_t col, int64_t n) {
  if constexpr (VL == 4) {
    return __ldg(p);
  } else if constexpr (VL == 2) {
    if (vec) return __ldcs(reinterpret_cast<const unsigned short*>(p));
    return static_cast<uint32_t>(__ldcs(p)) | (col + 2 < n ? static_cast<uint32_t>(__ldcs(p + 1)) << 8 : 0u);
  } else {
    if (vec) return __ldcs(reinterpret_cast<const unsigned int*>(p));
    uint32_t v = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (col + j < n) v |= static_cast<uint32_t>(__ldcs(p + j)) << (8 * j);
    return v;
  }
}

// The MR staged rows of x at input c (xc = xs + c * MR): 16-byte shared loads of 4 rows.
template <int MR>
__device__ __forceinline__ void load_x(const float* xc, float (&xv)[MR]) {
  if constexpr (MR == 1) {
    xv[0] = xc[0];
  } else if constexpr (MR == 2) {
    const float2 t = *reinterpret_cast<const float2*>(xc);
    xv[0] = t.x;
    xv[1] = t.y;
  } else {
#pragma unroll
    for (int i = 0; i < MR; i += 4) {
      const float4 t = *reinterpret_cast<const float4*>(xc + i);
      xv[i] = t.x;
      xv[i + 1] = t.y;
      xv[i + 2] = t.z;
      xv[i + 3] = t.w;
    }
  }
}

// acc[i][j] += x[i][cbase + index of column j] * w[j] for one compressed row: 4 / VL distinct
// inputs (the index bytes of idx, each masked to the window), VL columns each.
template <int MR, int VL>
__device__ __forceinline__ void row_fma(float (&acc)[MR][4], const float (&w)[4], uint32_t idx, int cbase, int mask,
                                        const float* xs) {
#pragma unroll
  for (int t = 0; t < 4 / VL; ++t) {
    float xv[MR];
    load_x<MR>(xs + (cbase + static_cast<int>((idx >> (8 * t)) & mask)) * MR, xv);
#pragma unroll
    for (int i = 0; i < MR; ++i)
#pragma unroll
      for (int jj = 0; jj < VL; ++jj) acc[i][t * VL + jj] = fmaf(xv[i], w[t * VL + jj], acc[i][t * VL + jj]);
  }
}

// Stages x[0:MR, c0 : c0 + ncols] into xs[c][MR] as fp32 (rows >= m zero): a thread per input,
// 4 rows per 16-byte shared store; the global reads run along k, coalesced.
template <class T, int MR>
__device__ __forceinline__ void stage_x(float* xs, const typename T::S* x, int64_t ldx, int64_t m, int64_t c0,
                                        int ncols, int tid) {
  constexpr int G = MR < 4 ? MR : 4;
  for (int c = tid; c < ncols; c += kWarps * 32) {
    const typename T::S* const src = x + c0 + c;
#pragma unroll
    for (int i0 = 0; i0 < MR; i0 += G) {
      float v[4];
#pragma unroll
      for (int r = 0; r < G; ++r) v[r] = i0 + r < m ? T::to_float(__ldg(src + (i0 + r) * ldx)) : 0.f;
      float* const dst = xs + c * MR + i0;
      if constexpr (G == 1) {
        dst[0] = v[0];
      } else if constexpr (G == 2) {
        *reinterpret_cast<float2*>(dst) = make_float2(v[0], v[1]);
      } else {
        *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
      }
    }
  }
}

// The 16-bit path's x: pairs of rows per 32-bit word, P words per input.
template <int MR>
constexpr int kPairs = (MR + 1) / 2;

// Stages x[0:MR, c0 : c0 + ncols] into xs[p * kXCols + c] as pairs of rows (row 2p low, 2p + 1
// high; rows >= m zero): a thread per input, coalesced global reads along k, conflict-free stores.
template <class T, int MR>
__device__ __forceinline__ void stage_x_pairs(uint32_t* xs, const typename T::S* x, int64_t ldx, int64_t m,
                                              int64_t c0, int ncols, int tid) {
  for (int c = tid; c < ncols; c += kWarps * 32) {
    const typename T::S* const src = x + c0 + c;
#pragma unroll
    for (int p = 0; p < kPairs<MR>; ++p) {
      const uint32_t lo = 2 * p < m ? __ldg(src + (2 * p) * ldx) : 0u;
      const uint32_t hi = 2 * p + 1 < MR && 2 * p + 1 < m ? __ldg(src + (2 * p + 1) * ldx) : 0u;
      xs[p * kXCols + c] = lo | (hi << 16);
    }
  }
}

// row_fma for the shuffle path: xr[s][p] holds the warp's group of inputs (lane j: input s * 32 + j;
// SETS = 2 at M = 64), ib the in-group position of the row's window. Every lane of the warp calls it.
template <class T, int MR, int VL, int SETS>
__device__ __forceinline__ void row_fma_shfl(float (&acc)[MR][4], const float (&w)[4], uint32_t idx, int ib, int mask,
                                             const uint32_t (&xr)[SETS][kPairs<MR>]) {
#pragma unroll
  for (int t = 0; t < 4 / VL; ++t) {
    const int pos = ib + static_cast<int>((idx >> (8 * t)) & mask);
#pragma unroll
    for (int p = 0; p < kPairs<MR>; ++p) {
      uint32_t v = __shfl_sync(0xffffffffu, xr[0][p], pos & 31);
      if constexpr (SETS == 2) {
        const uint32_t v1 = __shfl_sync(0xffffffffu, xr[1][p], pos & 31);
        v = pos >= 32 ? v1 : v;
      }
      float lo, hi;
      T::unpack_pair(v, lo, hi);
#pragma unroll
      for (int jj = 0; jj < VL; ++jj) {
        acc[2 * p][t * VL + jj] = fmaf(lo, w[t * VL + jj], acc[2 * p][t * VL + jj]);
        if constexpr (MR > 1) acc[2 * p + 1][t * VL + jj] = fmaf(hi, w[t * VL + jj], acc[2 * p + 1][t * VL + jj]);
      }
    }
  }
}

// VL: output columns per index byte within a lane's 4 columns (min(L, 4)). kShfl: the shuffle
// lookup (16-bit only), SETS register sets of 32 inputs (2 at M = 64); else the shared-memory one.
template <class T, int MR, int VL, bool kShfl, int SETS>
__global__ void __launch_bounds__(kWarps * 32, kShfl && SETS == 1 && MR >= 8 ? 4 : 1) decode_splitk_kernel(const DecodeSplitKArgs a) {
  using S = typename T::S;
  static_assert(!kShfl || !std::is_same<T, F32>::value, "the shuffle lookup is for 16-bit x");
  // Rows per batch: half as many at MR >= 8, whose 32-64 accumulators leave fewer registers, a
  // quarter on the shuffle path at MR = 16 (four blocks of 128 registers a thread per SM).
  constexpr int R = kShfl && MR >= 16 ? T::kRows / 4 : MR >= 8 ? T::kRows / 2 : T::kRows;
  // The x chunk ([kXCols][MR] fp32, or [kPairs][kXCols] words); reused for the warps' partial sums
  // [kWarps][MR][kCols].
  static_assert(kWarps * kCols <= kXCols, "the partial sums fit the x buffer");
  __shared__ float4 smem_f4[MR * kXCols / 4];
  float* const xs = reinterpret_cast<float*>(smem_f4);
  uint32_t* const xs_pairs = reinterpret_cast<uint32_t*>(smem_f4);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t n = a.n, k = a.k, m = a.m;
  const int N = a.N, M = a.M;
  const int64_t q = n / a.L;  // index columns
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kCols + lane * 4;
  const bool col_ok = col < n;
  // The index column of the lane's first output column (col is a multiple of 4).
  const int64_t icol = VL == 4 ? col / a.L : col / VL;
  const S* const values = static_cast<const S*>(a.values);
  const S* const x = static_cast<const S*>(a.x);
  // Vector loads only where every row start is aligned (n % 4 == 0) and the base is aligned.
  const bool v_vec = n % 4 == 0 && reinterpret_cast<uintptr_t>(values) % sizeof(typename T::V4) == 0;
  const bool i_vec = VL == 4 || (n % 4 == 0 && reinterpret_cast<uintptr_t>(a.indices) % (4 / VL) == 0);

  const int64_t windows = k / M;
  const int64_t g_begin = windows * blockIdx.y / gridDim.y;
  const int64_t g_end = windows * (blockIdx.y + 1) / gridDim.y;
  const int64_t chunk_windows = kXCols / M;

  float acc[MR][4];
#pragma unroll
  for (int i = 0; i < MR; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;

  // The shuffle path's group of inputs in registers: G = 32 * SETS inputs starting at chunk input
  // xg * G; xg = -1: none loaded.
  constexpr int G = 32 * SETS;
  uint32_t xr[SETS][kPairs<MR>];
  int xg = -1;

  for (int64_t gc = g_begin; gc < g_end; gc += chunk_windows) {
    const int64_t ge = gc + chunk_windows < g_end ? gc + chunk_windows : g_end;
    __syncthreads();  // the previous chunk's math is done with xs
    if constexpr (kShfl)
      stage_x_pairs<T, MR>(xs_pairs, x, a.ldx, m, gc * M, static_cast<int>((ge - gc) * M), tid);
    else
      stage_x<T, MR>(xs, x, a.ldx, m, gc * M, static_cast<int>((ge - gc) * M), tid);
    __syncthreads();
    xg = -1;
    // The shuffles need every lane of a warp: lanes past n load nothing and add zeros.
    if (!kShfl && !col_ok) continue;
    const int64_t u_begin = gc * N, u_end = ge * N;
    for (int64_t ub = u_begin + static_cast<int64_t>(warp) * R; ub < u_end; ub += kWarps * R) {
      // The batch's loads, all issued before its math; rows past the chunk re-read its last row.
      typename T::V4 b[R];
      uint32_t idx[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int64_t u = ub + r < u_end ? ub + r : u_end - 1;
        if (kShfl && !col_ok) {
          b[r] = typename T::V4{};
          idx[r] = 0;
          continue;
        }
        b[r] = load_values<T>(values + u * n + col, v_vec, col, n);
        idx[r] = load_index<VL>(a.indices + u * q + icol, i_vec, col, n);
      }
      asm volatile("" ::: "memory");  // keep the loads ahead of the math (see spmm_decode_cluster.cu)
      // Row ub is slot s of window gl of the chunk (chunk-relative: fits 32 bits).
      const int rel = static_cast<int>(ub - u_begin);
      const int gl = rel / N;
      // A whole batch runs without per-row bounds; the warp's last, partial one skips its rows
      // past the chunk. The choice is warp-uniform.
      auto batch_math = [&](auto whole) {
        int s = rel - gl * N;
        int cbase = gl * M;
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float w[4];
          T::unpack(b[r], w);
          if (decltype(whole)::value || ub + r < u_end) {
            if constexpr (kShfl) {
              const int g = cbase / G;  // warp-uniform
              if (g != xg) {
                xg = g;
#pragma unroll
                for (int st = 0; st < SETS; ++st)
#pragma unroll
                  for (int p = 0; p < kPairs<MR>; ++p) xr[st][p] = xs_pairs[p * kXCols + g * G + st * 32 + lane];
              }
              row_fma_shfl<T, MR, VL, SETS>(acc, w, idx[r], cbase - g * G, M - 1, xr);
            } else {
              row_fma<MR, VL>(acc, w, idx[r], cbase, M - 1, xs);
            }
          }
          if (++s == N) {
            s = 0;
            cbase += M;
          }
        }
      };
      if (ub + R <= u_end)
        batch_math(std::true_type{});
      else
        batch_math(std::false_type{});
    }
  }

  allow_dependent_launch();  // the split-K reduction, if any, may start launching
  // The warps' partial sums, reduced in fixed warp order.
  __syncthreads();
  float* const red = xs;
#pragma unroll
  for (int i = 0; i < MR; ++i)
    *reinterpret_cast<float4*>(red + (warp * MR + i) * kCols + lane * 4) =
        make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
  __syncthreads();
  const bool split = gridDim.y > 1;
  const S* const bias = static_cast<const S*>(a.bias);
  S* const y = static_cast<S*>(a.y);
  for (int e = tid; e < MR * kCols; e += kWarps * 32) {
    const int i = e / kCols, cl = e % kCols;
    const int64_t c = static_cast<int64_t>(blockIdx.x) * kCols + cl;
    if (i >= m || c >= n) continue;
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += red[(w * MR + i) * kCols + cl];
    if (split) {
      a.workspace[(static_cast<int64_t>(blockIdx.y) * m + i) * n + c] = s;
    } else {
      if (bias != nullptr) s += T::to_float(bias[c]);
      y[i * n + c] = T::from_float(s);
    }
  }
}

// y = sum_{z < splits} ws[z] (+ bias) in fixed z order, in y's dtype; 4 consecutive elements of
// the flat [m, n] output per thread, vector loads and stores when vec (n % 4 == 0 and every
// pointer aligned), else scalar ones.
template <class T>
__global__ void reduce_splits_kernel(const float* __restrict__ ws, int splits, int64_t mn, int64_t n,
                                     const typename T::S* __restrict__ bias, typename T::S* __restrict__ y, bool vec) {
  using S = typename T::S;
  grid_dependency_wait();  // launched while the split kernel may still run
  const int64_t e = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (e >= mn) return;
  if (vec) {
    float4 s = *reinterpret_cast<const float4*>(ws + e);
    for (int z = 1; z < splits; ++z) {
      const float4 t = *reinterpret_cast<const float4*>(ws + z * mn + e);
      s.x += t.x;
      s.y += t.y;
      s.z += t.z;
      s.w += t.w;
    }
    float v[4] = {s.x, s.y, s.z, s.w};
    if (bias != nullptr) {
      float b[4];
      T::unpack(*reinterpret_cast<const typename T::V4*>(bias + e % n), b);
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] += b[j];
    }
    S o[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) o[j] = T::from_float(v[j]);
    *reinterpret_cast<typename T::V4*>(y + e) = T::pack(o);
    return;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if (e + j >= mn) break;
    float s = ws[e + j];
    for (int z = 1; z < splits; ++z) s += ws[z * mn + e + j];
    if (bias != nullptr) s += T::to_float(bias[(e + j) % n]);
    y[e + j] = T::from_float(s);
  }
}

inline bool pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// Where the shuffle lookup pays (16-bit x): 16 rows of x, or 8 at L < 4 (an A/B on H200 decode
// cells: docs/kernels.md, "Short vectors").
template <class T, int MR, int VL>
constexpr bool shuffle_lookup() {
  return !std::is_same<T, F32>::value && (MR >= 16 || (MR == 8 && VL < 4));
}

template <class T, int MR, int VL>
cudaError_t launch_mr(const DecodeSplitKArgs& a, cudaStream_t stream) {
  const int64_t blocks_n = (a.n + kCols - 1) / kCols;
  if (blocks_n > 0x7fffffff || a.split_k > 65535) return cudaErrorInvalidConfiguration;
  const dim3 grid(static_cast<unsigned>(blocks_n), static_cast<unsigned>(a.split_k));
  if constexpr (shuffle_lookup<T, MR, VL>()) {
    if (a.M > 32)
      decode_splitk_kernel<T, MR, VL, true, 2><<<grid, kWarps * 32, 0, stream>>>(a);
    else
      decode_splitk_kernel<T, MR, VL, true, 1><<<grid, kWarps * 32, 0, stream>>>(a);
  } else {
    decode_splitk_kernel<T, MR, VL, false, 1><<<grid, kWarps * 32, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

template <class T, int VL>
cudaError_t launch_vl(const DecodeSplitKArgs& a, cudaStream_t stream) {
  if (a.m <= 1) return launch_mr<T, 1, VL>(a, stream);
  if (a.m <= 2) return launch_mr<T, 2, VL>(a, stream);
  if (a.m <= 4) return launch_mr<T, 4, VL>(a, stream);
  if (a.m <= 8) return launch_mr<T, 8, VL>(a, stream);
  return launch_mr<T, 16, VL>(a, stream);
}

// Checks the problem (the binding has checked the tensors; these keep a bad call from faulting)
// and runs the kernel with the vector-length variant of a.L.
template <class T>
cudaError_t launch(const DecodeSplitKArgs& a, cudaStream_t stream) {
  if (a.m < 0 || a.m > kDecodeSplitKMaxM || a.n < 0 || a.k < 0 || a.split_k < 1) return cudaErrorInvalidValue;
  if (!pow2(a.M) || a.M > 64 || a.N < 1 || a.N > a.M || !pow2(a.L) || a.n % a.L != 0 || a.k % a.M != 0)
    return cudaErrorInvalidValue;
  if (T::kShortOnly && a.L >= 4) return cudaErrorInvalidValue;
  if (a.x == nullptr || a.values == nullptr || a.indices == nullptr || a.y == nullptr) return cudaErrorInvalidValue;
  if (a.split_k > 1 && a.workspace == nullptr) return cudaErrorInvalidValue;
  if (a.m == 0 || a.n == 0) return cudaSuccess;
  if (a.L == 1) return launch_vl<T, 1>(a, stream);
  if (a.L == 2) return launch_vl<T, 2>(a, stream);
  if constexpr (T::kShortOnly) {
    return cudaErrorInvalidValue;
  } else {
    return launch_vl<T, 4>(a, stream);
  }
}

template <class T>
cudaError_t launch_reduce(const DecodeSplitKArgs& a, cudaStream_t stream) {
  using S = typename T::S;
  if (a.workspace == nullptr || a.y == nullptr || a.split_k < 1 || a.m < 0 || a.n < 0) return cudaErrorInvalidValue;
  const int64_t mn = a.m * a.n;
  if (mn == 0) return cudaSuccess;
  const auto aligned = [](const void* p, size_t b) { return reinterpret_cast<uintptr_t>(p) % b == 0; };
  const bool vec = a.n % 4 == 0 && aligned(a.workspace, 16) && aligned(a.y, sizeof(typename T::V4)) &&
                   (a.bias == nullptr || aligned(a.bias, sizeof(typename T::V4)));
  return launch_items_after(reduce_splits_kernel<T>, (mn + 3) / 4, a.overlap, stream,
                            static_cast<const float*>(a.workspace), a.split_k, mn, a.n,
                            static_cast<const S*>(a.bias), static_cast<S*>(a.y), vec);
}

}  // namespace decode_splitk
}  // namespace kernels
}  // namespace nmspmm
