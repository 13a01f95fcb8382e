// Staged decode SpMM for m <= 16 (the heuristic takes it for 3..16) with split-K inside a
// thread-block cluster (sm_90).
//
// At m = 8..16 and high sparsity the split-K decode kernel of spmm_small.cu stages as many bytes
// of x per block (m rows of its k-range, for 128 output columns) as it streams of the weight, waits
// for them before any weight load is issued, keeps 4 weight rows in flight per warp and reduces
// its splits through a workspace and a second launch. This kernel changes the four:
//  * a block of 8 warps covers BN = 128 x CW output columns (CW = 1, 2, 4 column warps, KW = 8 / CW
//    warps along k), so one staged copy of x serves BN columns;
//  * x is staged with cp.async in chunks of 512 columns, double-buffered, and each warp issues the
//    index and weight loads of its first batch before it waits for the chunk;
//  * a warp walks its rows in batches of 8 (MR <= 8), all 8 index and weight loads in flight before
//    any math (as in the cluster decode kernels of spmm_decode_cluster.cu; a whole batch, every row
//    inside the chunk, runs without per-row bounds and loads through pointers carried across
//    batches: 25% fewer instructions per batch, 1.01-1.04x at m = 8), or (MR = 16, whose 64
//    accumulators leave room for 4-row batches at 128 registers) with rolling prefetch: row r of
//    the next batch is issued as soon as row r of this one is in registers;
//  * the block's KW partial sums are added in fixed order through shared memory, then the
//    cluster's blocks (gridDim.y == cluster size, 1..16, splitting k) add theirs through distributed
//    shared memory, each block writing a slice of the tile (+ bias). One launch, no workspace, no
//    atomics: bitwise deterministic and CUDA-graph capturable.
// Shared memory is 4 KiB x MR either way: two x buffers [2][MR][512] in the main loop, the partial
// sums [KW][MR][CW x 32] (float4) after it.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/kernels/common/cp_async.cuh"
#include "cuda/kernels/common/cluster_reduce.cuh"
#include "fma_order.cuh"
#include "cuda/kernels/common/launch_overlap.cuh"
#include "cuda/kernels/common/smem_limit.h"
#include "spmm_decode.h"

namespace nmspmm {
namespace kernels {

namespace {

constexpr int kStagedWarps = 8;    // warps per block
constexpr int kStagedXCols = 512;  // x columns per staged chunk
constexpr int kStagedBatch = 8;    // compressed rows per warp batch (MR <= 8; MR = 16: 4)

template <int MR>
constexpr int staged_smem_bytes() {
  static_assert(2 * MR * kStagedXCols * 4 == kStagedWarps * MR * 32 * 16, "buffers share the space");
  return 2 * MR * kStagedXCols * 4;
}

// The batch's index and weight loads, all issued before anything waits on them. Rows past u_end
// re-read row u_end - 1 (always in bounds); the math skips them.
template <int D>
__device__ __forceinline__ void load_batch(int (&idx)[D], float4 (&b)[D], const uint8_t* icol, int64_t q,
                                           const float* vcol, int64_t n, int64_t ub, int64_t u_end) {
#pragma unroll
  for (int r = 0; r < D; ++r) {
    const int64_t u = ub + r < u_end ? ub + r : u_end - 1;
    idx[r] = __ldg(icol + u * q);
    b[r] = __ldcs(reinterpret_cast<const float4*>(vcol + u * n));
  }
  // Keep the loads ahead of the math: the compiler would otherwise sink each to its use.
  asm volatile("" ::: "memory");
}

// MR: rows of x the kernel is built for (m <= MR; rows m..MR-1 of the x buffers stay zero).
// CW: column warps per block (BN = 128 x CW output columns).
template <int MR, int CW>
__global__ void __launch_bounds__(kStagedWarps * 32, 2) spmm_decode_staged_kernel(const SpmmParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // launch_decode_staged refuses devices without clusters; never reached
#else
  constexpr int KW = kStagedWarps / CW;
  constexpr int BN = 128 * CW;
  constexpr int D = MR >= 16 ? kStagedBatch / 2 : kStagedBatch;
  // MR = 16 (4-row batches, 128 registers) issues each row of the next batch as soon as the
  // same row of this one is in registers; MR <= 8 issues whole batches (measured faster there).
  constexpr bool kRolling = MR >= 16;
  constexpr int XC = kStagedXCols;
  constexpr int kThreads = kStagedWarps * 32;
  extern __shared__ float4 smem[];
  float* const xs = reinterpret_cast<float*>(smem);  // main loop: x chunks [2][MR][XC]
  float4* const red = smem;                          // epilogue: partial sums [KW][MR][CW * 32]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int cw = warp % CW, kw = warp / CW;
  const int64_t n = p.n, m = p.m, ldx = p.ldx;
  const int N = p.N, M = p.M;
  const int64_t q = n / p.L;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * BN + cw * 128 + lane * 4;
  // Lanes past n read the last 4 columns (in bounds) and write nothing.
  const int64_t colc = col < n ? col : n - 4;
  const float* const vcol = p.values + colc;
  const uint8_t* const icol = p.indices + colc / p.L;

  // This block's k-split: whole windows [g0, g1), staged in chunks of chunk_w windows.
  const int64_t windows = p.k / M;
  const int64_t g0 = windows * blockIdx.y / gridDim.y;
  const int64_t g1 = windows * (blockIdx.y + 1) / gridDim.y;
  const int chunk_w = XC / M;
  const int64_t nchunks = (g1 - g0 + chunk_w - 1) / chunk_w;
  // 16-byte copies of x when every chunk start is 16-byte aligned, else 4-byte ones.
  const bool x_vec = reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && ldx % 4 == 0 && M % 4 == 0;

  // Rows m..MR-1 of both buffers are zero for the whole main loop (never copied into). Thread t
  // owns float4 column t % (XC / 4) of every other row: no division by a runtime value.
  constexpr int kXC4 = XC / 4;  // float4 columns per buffer row
  static_assert(kThreads % kXC4 == 0, "every float4 column of x has its threads");
  constexpr int kRowStep = kThreads / kXC4;
  const int c4 = tid % kXC4, r0 = tid / kXC4;
  for (int buf = 0; buf < 2; ++buf)
    for (int i = static_cast<int>(m) + r0; i < MR; i += kRowStep)
      reinterpret_cast<float4*>(xs + (buf * MR + i) * XC)[c4] = make_float4(0.f, 0.f, 0.f, 0.f);

  // Copies the x columns of chunk ci into buffer ci & 1: 16-byte copies (thread t: float4 column
  // t % (XC / 4) of rows t / (XC / 4), + kRowStep, ...) or 4-byte ones (columns t, t + kThreads of
  // every row). Pointer steps instead of divisions and 64-bit multiplies.
  auto stage = [&](int64_t ci) {
    const int64_t ga = g0 + ci * chunk_w;
    const int64_t ge = ga + chunk_w < g1 ? ga + chunk_w : g1;
    const int ncols = static_cast<int>((ge - ga) * M);
    float* const dst = xs + (ci & 1) * MR * XC;
    const float* const src = p.x + ga * M;
    if (x_vec) {
      const int c = c4 * 4;
      if (c < ncols) {
        const float* sp = src + r0 * ldx + c;
        float* dp = dst + r0 * XC + c;
        for (int i = r0; i < static_cast<int>(m); i += kRowStep, sp += kRowStep * ldx, dp += kRowStep * XC)
          cp_async_16(dp, sp, true);
      }
    } else {
      for (int c = tid; c < ncols; c += kThreads) {
        const float* sp = src + c;
        float* dp = dst + c;
        for (int i = 0; i < static_cast<int>(m); ++i, sp += ldx, dp += XC) cp_async_4(dp, sp, true);
      }
    }
  };

  float acc[MR][4];
#pragma unroll
  for (int i = 0; i < MR; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;

  // A warp's first batch of a chunk starts kw * D compressed rows into it, and each batch starts
  // KW * D rows after the one before: as (window, position) pairs, computed once.
  const int first_w = kw * D / N, first_s = kw * D - first_w * N;
  const int step_w = KW * D / N, step_s = KW * D - step_w * N;

  // One compressed row's FMAs: acc[i][:] += x[i][c] * the row's 4 weights, for the MR rows of x in
  // the chunk buffer xc.
  auto fma_row = [&](const float* xc, int c, const float4& w) {
    fma_row4(acc, w, [&](int i) { return xc[i * XC + c]; });
  };

  int idx[D];
  float4 b[D];
  // The first batch of chunk 0 reads only the weight: with programmatic dependent launch
  // (p.dependent_launch) it is issued before grid_dependency_wait(), while the kernel before this
  // one in the stream may still run (the binding launches so only when that kernel cannot have
  // written the weight); x is staged and y written after the wait.
  {
    const int64_t u_end0 = (g0 + chunk_w < g1 ? g0 + chunk_w : g1) * N;
    const int64_t ub0 = g0 * N + static_cast<int64_t>(kw) * D;
    if (nchunks > 0 && ub0 < u_end0) load_batch<D>(idx, b, icol, q, vcol, n, ub0, u_end0);
  }
  grid_dependency_wait();
  allow_dependent_launch();
  if (nchunks > 0) stage(0);
  cp_async_commit();
  for (int64_t ci = 0; ci < nchunks; ++ci) {
    if (ci + 1 < nchunks) stage(ci + 1);  // into the buffer the previous chunk used
    cp_async_commit();
    const int64_t ga = g0 + ci * chunk_w;
    const int64_t u0 = ga * N;
    const int64_t u_end = (ga + chunk_w < g1 ? ga + chunk_w : g1) * N;
    int64_t ub = u0 + static_cast<int64_t>(kw) * D;
    if (ci > 0 && ub < u_end) load_batch<D>(idx, b, icol, q, vcol, n, ub, u_end);  // overlaps the x wait
    cp_async_wait<1>();
    __syncthreads();  // chunk ci is in its buffer for every warp
    const float* const xc = xs + (ci & 1) * MR * XC;
    int bw = first_w, bs = first_s;  // row ub is position bs of window bw of the chunk
    // This warp's next batch, as pointers carried across batches (not re-derived per row).
    const int64_t batch_stride = static_cast<int64_t>(KW) * D;
    const float* vnext = vcol + (ub + batch_stride) * n;
    const uint8_t* inext = icol + (ub + batch_stride) * q;
    while (ub < u_end) {
      int s = bs, cbase = bw * M;  // x column of a row: cbase + its index
      const int64_t un = ub + static_cast<int64_t>(KW) * D;  // this warp's next batch
      // A whole batch runs without per-row bounds; the warp's last, partial batch of the chunk
      // skips its rows past u_end rather than multiplying them by zero: the x they would read may
      // be a pruned position's NaN or Inf (docs/format.md). Both forms are compiled; the choice
      // is warp-uniform.
      auto batch_math = [&](auto whole) {
#pragma unroll
        for (int r = 0; r < D; ++r) {
          const bool ok = decltype(whole)::value || ub + r < u_end;
          const int c = cbase + (idx[r] & (M - 1));  // masked: never outside the window
          const float4 br = b[r];
          if (++s == N) {
            s = 0;
            cbase += M;
          }
          // Row r of the next batch (after row r's registers are read); a row past u_end keeps
          // its old registers, which that batch skips. A partial batch is the warp's last.
          if (kRolling && decltype(whole)::value && un + r < u_end) {
            idx[r] = __ldg(inext + r * q);
            b[r] = __ldcs(reinterpret_cast<const float4*>(vnext + r * n));
            asm volatile("" ::: "memory");
          }
          if (ok) fma_row(xc, c, br);
        }
      };
      if (ub + D <= u_end)
        batch_math(std::true_type{});
      else
        batch_math(std::false_type{});
      // The whole-batch kernels load the next batch here: a whole one through the carried
      // pointers, row by row (no bounds, no 64-bit multiplies), a partial one clamped.
      if (!kRolling && un < u_end) {
        if (un + D <= u_end) {
          const uint8_t* ip = inext;
          const float* vp = vnext;
#pragma unroll
          for (int r = 0; r < D; ++r, ip += q, vp += n) {
            idx[r] = __ldg(ip);
            b[r] = __ldcs(reinterpret_cast<const float4*>(vp));
          }
          asm volatile("" ::: "memory");
        } else {
          load_batch<D>(idx, b, icol, q, vcol, n, un, u_end);
        }
      }
      ub = un;
      vnext += batch_stride * n;
      inext += batch_stride * q;
      bs += step_s;
      bw += step_w;
      if (bs >= N) {
        bs -= N;
        ++bw;
      }
    }
    __syncthreads();  // every warp is done with buffer ci & 1 before chunk ci + 2 is copied into it
  }
  cp_async_wait<0>();  // (the last group is empty) nothing is in flight into the buffers

  // Fixed-order reduction over the block's KW warps along k, then over the cluster's blocks, each
  // block finishing a slice of the tile (+ bias).
  constexpr int kTile = MR * CW * 32;  // float4 elements of the block's tile: [MR][CW * 32]
#pragma unroll
  for (int i = 0; i < MR; ++i)
    red[kw * kTile + i * CW * 32 + cw * 32 + lane] = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
  reduce_over_block_and_cluster<KW>(red, kTile, tid, kThreads, [&](int e, float4 sum) {
    store_output4(p, e / (CW * 32), static_cast<int64_t>(blockIdx.x) * BN + (e % (CW * 32)) * 4, sum);
  });
#endif
}

template <int MR, int CW>
cudaError_t launch_one(const SpmmParams& p, cudaStream_t stream) {
  static bool configured[kMaxDevices] = {};
  cudaError_t err = set_smem_limit_once(configured, spmm_decode_staged_kernel<MR, CW>, staged_smem_bytes<MR>());
  if (err != cudaSuccess) return err;
  if (p.split_k > 8) {  // clusters of more than 8 blocks are non-portable: allowed once per kernel and device
    static bool large[kMaxDevices] = {};
    err = allow_large_clusters_once(large, spmm_decode_staged_kernel<MR, CW>);
    if (err != cudaSuccess) return err;
  }
  return launch_split_k_clusters(spmm_decode_staged_kernel<MR, CW>, p, (p.n + 128 * CW - 1) / (128 * CW),
                                 kStagedWarps * 32, staged_smem_bytes<MR>(), stream);
}

template <int CW>
cudaError_t launch_rows(const SpmmParams& p, cudaStream_t stream) {
  if (p.m <= 4) return launch_one<4, CW>(p, stream);
  if (p.m <= 8) return launch_one<8, CW>(p, stream);
  return launch_one<16, CW>(p, stream);
}

}  // namespace

cudaError_t decode_staged_places_cluster(int size, bool* ok) {
  *ok = false;
  // The largest block of the staged kernels (m = 9..16: 64 KiB of shared memory).
  static bool smem_set[kMaxDevices] = {}, large[kMaxDevices] = {};
  cudaError_t err = set_smem_limit_once(smem_set, spmm_decode_staged_kernel<16, 1>, staged_smem_bytes<16>());
  if (err == cudaSuccess && size > 8) err = allow_large_clusters_once(large, spmm_decode_staged_kernel<16, 1>);
  if (err != cudaSuccess) return err;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(1, static_cast<unsigned>(size), 1);
  cfg.blockDim = dim3(kStagedWarps * 32, 1, 1);
  cfg.dynamicSmemBytes = staged_smem_bytes<16>();
  cudaLaunchAttribute attr[1] = {cluster_attribute(dim3(1, static_cast<unsigned>(size), 1))};
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  err = cudaOccupancyMaxActiveClusters(&clusters, spmm_decode_staged_kernel<16, 1>, &cfg);
  if (err != cudaSuccess) return err;
  *ok = clusters >= 1;
  return cudaSuccess;
}

cudaError_t launch_decode_staged(const SpmmParams& p, int col_warps, cudaStream_t stream) {
  if (p.m < 1 || p.m > 16 || p.L < 4 || p.n % 4 != 0 || p.M > kStagedXCols) return cudaErrorInvalidValue;
  if (p.split_k < 1 || p.split_k > kMaxDecodeClusterSize) return cudaErrorInvalidValue;  // the cluster size
  if (reinterpret_cast<uintptr_t>(p.values) % 16 != 0 || reinterpret_cast<uintptr_t>(p.y) % 16 != 0 ||
      (p.bias != nullptr && reinterpret_cast<uintptr_t>(p.bias) % 16 != 0))
    return cudaErrorMisalignedAddress;
  switch (col_warps) {
    case 1: return launch_rows<1>(p, stream);
    case 2: return launch_rows<2>(p, stream);
    case 4: return launch_rows<4>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace kernels
}  // namespace nmspmm
