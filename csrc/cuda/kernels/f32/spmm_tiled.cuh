// The tiled FP32 SpMM kernel (NM-SpMM's design on CUDA cores), one template for the
// non-packing (moderate sparsity) and packing (high sparsity) paths.
//
//   C[m0:m0+BM, n0:n0+BN] = sum over k-blocks of  A_s (gathered k-slab of x)  (*)  (B_s, D_s)
//
// A comes from xT [k][ldxt], the k-major copy of x that the launcher writes first
// (transpose_x_kernel; ldxt = m rounded up to 4, the pad zeroed): NM-SpMM's column-major A, so
// every A_s row is a contiguous run of BM floats in global memory.
// Per k-block of KB dense inputs (KB/M windows, wb = KB*N/M compressed rows):
//   A_s [KB][BM]    rows of xT by 16-byte cp.async. Non-packing loads rows k0..k0+KB; packing
//                   loads only the rows col_info lists for this column tile (row r of A_s =
//                   r-th listed column), the list fetched into registers one stage ahead.
//   B_s [wb][BN]    compressed values, 16-byte cp.async.
//   D_s [QT][wbp]   per (vector, compressed row) the A_s row offset, prefetched into registers a
//                   stage ahead and stored after the current stage's math.
// The math of a stage walks the compressed rows in groups of four: one 16-byte load gives a
// group's gather offsets (the next group's is loaded one group ahead), and the A/B fragments
// of row r+1 are loaded into a second register set while row r's FMAs issue, so no FMA waits
// on a shared-memory load chain (offset -> fragment).
// A STAGES-deep cp.async pipeline overlaps loads with the FMAs. Warps cover 32 output columns,
// so for L >= 32 a warp's gather index is uniform (UNIFORM) and the A_s read is a broadcast;
// for L = 16 each thread's two 4-column groups use their own index.
// Thread tile TM x 8: rows {ti + 32f .. ti + 32f + 3} for f < TM/4, columns {tj..tj+3} and
// {tj+16..tj+19}; LDS.128 fragments that are free of bank conflicts.
// Split-K: gridDim.z splits the k-blocks. On sm_90 (p.cluster_reduce) the splits of a tile form
// one thread-block cluster and sum their partial tiles through distributed shared memory in fixed
// order; elsewhere each split writes its partial tile to the workspace (no atomics), reduced in
// the same fixed order by reduce_splits. Deterministic either way.
// Epilogue (tile_epilogue.cuh, shared with the warp-packed kernels) on sm_90 (p.bulk_store, not
// with the cluster reduction): the tile (or split-K partial tile) is staged row-major in shared
// memory and each row written by one bulk asynchronous copy (bulk_store.cuh); the 2 x TM dependent
// 16-byte global stores per thread it replaces took 5-14% of the warp samples in an ncu
// source-level profile on H100. In the smaller tiles it can move the main loop's register
// allocation (64x128 WB 8 at 2 blocks per SM); with the 64x128 WB >= 8 variants held at 3 blocks
// per SM (MIN_BLOCKS) every tile takes it.
//
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "pattern.h"
#include "cuda/kernels/common/cp_async.cuh"
#include "fma_order.cuh"
#include "cuda/kernels/common/launch_overlap.cuh"
#include "cuda/kernels/common/smem_limit.h"
#include "spmm.h"
#include "spmm_tiled.h"
#include "tile_epilogue.cuh"

namespace nmspmm {
namespace kernels {

template <int BM_, int BN_, int TM_, int KB_, bool PACKED_, bool UNIFORM_, int WB_>
struct TiledConfig {
  static constexpr int BM = BM_, BN = BN_, TM = TM_, KB = KB_;
  static constexpr bool PACKED = PACKED_, UNIFORM = UNIFORM_;
  // Compressed rows per k-block when fixed at compile time (0: taken from the pattern at run
  // time). A fixed WB gives exact copy counts and the interleaved stage loop (see FIXED below).
  static constexpr int WB = WB_;
  static constexpr bool FIXED = WB_ > 0;
  static constexpr int TN = 8;
  static constexpr int WARPS_M = BM / (8 * TM);
  static constexpr int WARPS_N = BN / 32;
  static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
  // Pipeline depth (4 stages measured the same as 3 on H100 at 4096^3 and cost shared memory;
  // 4 stages for the 64x128 and smaller tiles measured 1-9% slower at m = 256, 512).
  static constexpr int STAGES = 3;
  // How many iterations ahead of its store a stage's index bytes are fetched: 1 (at the start of
  // the iteration that stores them, after its math) or 2 (one iteration earlier). 2 only for the
  // k-block-64 WB = 8 kernels (4:32) of the 128x128 (16x8 thread tile) and 32x128 tiles.
  // 128x128: +8-10% on its plans in two H100 A/Bs (100-point shapes at m = 256, 512; 4096^3
  // 0.544 -> 0.504 ms). 32x128 (two interleaved repetitions of flushed CUDA-graph timings):
  // its 6 plans
  // 1.09x on geomean (256x2048x2048 29.5 -> 23.4 us, 256x4096x4096 1.16x, 1.01-1.07x on the
  // others), while every other config's plans lost 1-6% with 2 (or 3) stages ahead.
  static constexpr int INDEX_AHEAD =
      BN_ == 128 && WB_ == 8 && KB_ == 64 && ((BM_ == 128 && TM_ == 16) || BM_ == 32) ? 2 : 1;
  // The 128x128 tiles (16x8 and 8x8 thread tiles) pair their lanes for shared-memory loads and
  // keep gather offsets in D_s as byte offsets from the start of shared memory (stage included),
  // so a row's A fragment address is one add: +6% (16:32) and +3% (12:32) on their plans, +/-1%
  // at 8:32 and 4:32, in an H100 A/B. Not for the
  // smaller tiles: 64x128 at 8:32 measured 2% slower, 64x64 the same.
  static constexpr bool PAIRED_LANES = BM_ == 128 && BN_ == 128;
  static constexpr bool BYTE_OFFSETS = BM_ == 128 && BN_ == 128;
  // LANE_OFFSETS: D_s keeps each gather offset 8 times, once per lane row group ml with the lane's
  // byte offset ml * 16 added, so an A fragment load takes its address straight from D_s (no add
  // between the offset load and the fragment LDS). Only for the 128x128 WB = 12 kernel (12:32): in
  // an H100 A/B over the 128x128 16x8-thread-tile k-block-32 kernels its plans gained 1.1-1.6% at
  // m = 256, 1024, 4096 while those of WB = 8 lost 1.0% and WB = 16 0.6%
  // on H100. Not at k-block 64 either way: the 4:32 kernel's 3
  // stages would no longer fit twice per SM.
  static constexpr bool LANE_OFFSETS = BM_ == 128 && BN_ == 128 && TM_ == 16 && KB_ == 32 && WB_ == 12;
  // SERPENTINE_FMA: a fragment's FMAs in 2x2 blocks walked in a serpentine, so each FMA shares an
  // operand with the one before and ptxas marks both operands for reuse more often. Only the 64-row
  // (8x8 thread tile) fixed-WB warp-uniform tiles: in an H100 A/B of one build (flushed, the
  // 100-point (n, k) at m = 256 and 512) their plans run 1.017-1.040x
  // (64x128) and 1.019-1.049x (64x64) per pattern, while the 32x128 tile lost at 12:32 (0.98x) and the
  // 128x128 8x8 tile at 8:32 and 4:32 (0.97x, 0.99x), so those keep the rows-major order.
  static constexpr bool SERPENTINE_FMA = TM_ == 8 && BM_ == 64 && !PACKED_ && UNIFORM_ && WB_ > 0;
  static constexpr int D_COPIES = LANE_OFFSETS ? 8 : 1;
  static constexpr int D_GROUP = 4 * D_COPIES;  // ints of D_s per group of 4 compressed rows
  static constexpr int AS = BM;                  // A_s row stride (floats)
  // Vectors per column tile: L >= 16 in general, L >= 32 for the warp-uniform kernels.
  static constexpr int QT_MAX = UNIFORM ? BN / 32 : BN / 16;
  // A loader: a thread copies 16-byte chunk (tid % A_CPR) of A_ROWS consecutive A_s rows.
  static constexpr int A_CPR = BM / 4;           // 16-byte chunks per A_s row
  static constexpr int A_GROUPS = THREADS / A_CPR;
  static constexpr int A_ROWS = KB / A_GROUPS;
  static constexpr int D_PER_THREAD = ((FIXED ? WB : KB) * QT_MAX + THREADS - 1) / THREADS;
  // Blocks per SM the register allocation must allow (TM = 16 needs ~220-240 registers; a
  // tighter bound spills). With the bound at 2, ptxas gives the fixed-WB stages of the smaller
  // tiles 150-200 registers, which leaves SMs with fewer warps than shared memory allows; where an
  // H100 A/B of the register bound measures faster, those
  // variants ask for more blocks: 64x128 3 (168 registers, WB = 16 and the k-block-64 WB = 8),
  // 32x128 4 (128 registers, k-block 32, WB >= 8), 64x64 (2 warps) 6 (168 registers, WB <= 12).
  // 64x128 with WB = 8 and 12 is held at 3 too since the bulk-store epilogue (without the bound,
  // ptxas gives WB = 8 174 registers: 2 blocks per SM; with it 156, no spills).
  static constexpr int MIN_BLOCKS =
      THREADS >= 256 && TM == 16 ? 1
      : !FIXED                   ? 2
      : BM == 64 && BN == 128    ? ((KB == 32 && WB >= 8) || KB == 64 ? 3 : 2)
      : BM == 32 && BN == 128    ? (KB == 32 && WB >= 8 ? 4 : 2)
      : BM == 64 && BN == 64     ? (WB <= 12 ? 6 : 2)
                                 : 2;
  static_assert(WARPS_M >= 1 && WARPS_N >= 1, "tile too small for the warp layout");
  static_assert(TM == 4 || TM == 8 || TM == 16, "TM must be 4, 8 or 16");
  static_assert(THREADS % A_CPR == 0 && KB % A_GROUPS == 0 && A_ROWS >= 1, "bad A load mapping");
  static_assert(!PACKED || (KB == kPackKBlock && BN == kPackTileN), "packing metadata shape");
  static_assert(!PACKED || (A_ROWS == 4 || A_ROWS == 8 || A_ROWS == 16), "col_info load width");
  static_assert(!FIXED || (!PACKED && UNIFORM && WB % 4 == 0 && WB <= KB), "fixed-WB configs");
  static_assert(!LANE_OFFSETS || (BYTE_OFFSETS && PAIRED_LANES && UNIFORM && WARPS_M == 1), "lane offsets");

  // Floats of shared memory per stage for wb compressed rows per k-block.
  // D_s holds QT_MAX vector slots of wbp = round_up(wb, 4) offsets each (slot-major, so a
  // warp reads four rows' offsets with one 16-byte load).
  static constexpr __host__ __device__ int d_row_pitch(int wb) { return (wb + 3) / 4 * 4; }
  static constexpr __host__ __device__ int stage_floats(int wb) {
    return KB * AS + wb * BN + QT_MAX * d_row_pitch(wb) * D_COPIES;
  }
};

template <class C>
__global__ void __launch_bounds__(C::THREADS, C::MIN_BLOCKS)
    spmm_tiled_kernel(const SpmmParams p, const int wb_arg, const int qt, const int stage_floats_arg) {
  // With a fixed WB the stage shape is a compile-time constant (the launcher checks it matches).
  const int wb = C::FIXED ? C::WB : wb_arg;
  const int stage_floats = C::FIXED ? C::stage_floats(C::WB) : stage_floats_arg;
  extern __shared__ float4 smem_f4[];
  float* const smem = reinterpret_cast<float*>(smem_f4);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / C::WARPS_N, wn = warp % C::WARPS_N;
  // Lane -> (row group ml, column group nl). PAIRED_LANES: lanes 2i and 2i+1 share their A address
  // and lanes i and i^2 their B address (2 shared-memory wavefronts per LDS.128 instead of 4 / 2).
  const int ml = C::PAIRED_LANES ? (lane >> 1) & 7 : lane & 7;
  const int nl = C::PAIRED_LANES ? (lane & 1) | ((lane >> 4) << 1) : lane >> 3;
  const int ti = wm * (8 * C::TM) + ml * 4;
  const int tj = wn * 32 + nl * 4;

  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * C::BM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * C::BN;
  const int64_t N_ = p.n, K_ = p.k;
  const int L = p.L;
  const int64_t q = N_ / L;
  const int64_t w = K_ / p.M * p.N;
  const int64_t vec0 = n0 / L;              // global vector of tile slot 0
  const int tile_off = static_cast<int>(n0 % L);
  const int t0 = (tile_off + tj) / L;
  const int t1 = (tile_off + tj + 16) / L;

  // This split's k-blocks.
  const int64_t kblocks = (K_ + C::KB - 1) / C::KB;
  const int64_t kb_begin = kblocks * blockIdx.z / p.split_k;
  const int64_t kb_end = kblocks * (blockIdx.z + 1) / p.split_k;
  const int nk = static_cast<int>(kb_end - kb_begin);

  // Only when KB does not divide k is the last k-block partial; loads check rows against k
  // there and nowhere else.
  const bool has_k_tail = K_ % C::KB != 0;
  auto is_tail = [&](int s) { return has_k_tail && kb_begin + s == kblocks - 1; };

  // A loader: 16-byte chunk a_m of A_s rows a_r0 .. a_r0 + A_ROWS - 1 (rows of xT).
  const int a_m = (tid % C::A_CPR) * 4, a_r0 = (tid / C::A_CPR) * C::A_ROWS;
  const bool a_m_ok = m0 + a_m < p.ldxt;
  const int64_t ldxt = p.ldxt;
  const float* const a_src = p.xt + (a_m_ok ? m0 + a_m : 0);

  // Packing: this thread's A_ROWS col_info entries (bytes a_r0.. of the k-block's 64-byte list),
  // fetched one stage ahead with one 4/8/16-byte load.
  constexpr int kColWords = C::PACKED ? C::A_ROWS / 4 : 1;
  uint32_t cols[kColWords];
  const uint8_t* col_base = nullptr;
  if constexpr (C::PACKED) {
    col_base = p.col_info + static_cast<int64_t>(blockIdx.y) * kblocks * C::KB + a_r0;
  }
  auto fetch_cols = [&](int s) {
    if constexpr (C::PACKED) {
      if (s < nk) {
        const uint8_t* c = col_base + (kb_begin + s) * C::KB;
        if constexpr (kColWords == 4) {
          const uint4 v = __ldg(reinterpret_cast<const uint4*>(c));
          cols[0] = v.x; cols[1] = v.y; cols[2] = v.z; cols[3] = v.w;
        } else if constexpr (kColWords == 2) {
          const uint2 v = __ldg(reinterpret_cast<const uint2*>(c));
          cols[0] = v.x; cols[1] = v.y;
        } else {
          cols[0] = __ldg(reinterpret_cast<const uint32_t*>(c));
        }
      }
    }
  };

  // B loader: 16-byte chunk b_c of B_s rows b_r0, b_r0 + B_RSTEP, ... (< wb).
  constexpr int B_CPR = C::BN / 4;
  constexpr int B_RSTEP = C::THREADS / B_CPR;
  constexpr int B_ITERS = (C::KB + B_RSTEP - 1) / B_RSTEP;  // wb <= KB rows
  static_assert(C::THREADS % B_CPR == 0, "bad B load mapping");
  const int b_c = (tid % B_CPR) * 4, b_r0 = tid / B_CPR;
  const bool b_n_ok = n0 + b_c < N_;
  const float* const b_src = p.values + (b_n_ok ? n0 + b_c : 0);

  auto stage_ptr = [&](int s) { return smem + (s % C::STAGES) * stage_floats; };
  // Compressed rows of stage s that exist (fewer than wb only in a last, partial k-block).
  auto stage_rows = [&](int s) {
    const int64_t left = w - (kb_begin + s) * wb;
    return left < wb ? static_cast<int>(left) : wb;
  };

  auto load_a = [&](int s) {
    float* const As = stage_ptr(s);
    const bool tail = is_tail(s);
    const int64_t k0 = (kb_begin + s) * C::KB;
    float* const a_dst = As + a_r0 * C::AS + a_m;
    if constexpr (C::PACKED) {
#pragma unroll
      for (int j = 0; j < C::A_ROWS; ++j) {
        const int col = static_cast<int>((cols[j / 4] >> (8 * (j % 4))) & 0xFFu);
        if (col == kUnusedCol) continue;
        const int64_t gk = k0 + (col & (C::KB - 1));  // masked: inside the k-block
        const bool ok = a_m_ok && (!tail || gk < K_);
        cp_async_16(a_dst + j * C::AS, ok ? a_src + gk * ldxt : p.xt, ok);
      }
    } else {
      // Rows past k exist only in a partial last k-block; elsewhere the only predicate is
      // the thread's m range, fixed for the whole kernel.
      const float* src = a_src + (k0 + a_r0) * ldxt;
      if (!tail) {
#pragma unroll
        for (int j = 0; j < C::A_ROWS; ++j) {
          cp_async_16(a_dst + j * C::AS, src, a_m_ok);
          src += ldxt;
        }
      } else {
#pragma unroll
        for (int j = 0; j < C::A_ROWS; ++j) {
          const bool ok = a_m_ok && k0 + a_r0 + j < K_;
          cp_async_16(a_dst + j * C::AS, ok ? src : p.xt, ok);
          src += ldxt;
        }
      }
    }
  };
  auto load_b = [&](int s) {
    float* const Bs = stage_ptr(s) + C::KB * C::AS;
    // B rows past the stage's last compressed row are neither loaded nor read.
    const int64_t u0 = (kb_begin + s) * wb;
    const int rows = stage_rows(s);
    const float* src = b_src + (u0 + b_r0) * N_;
    float* const dst = Bs + b_r0 * C::BN + b_c;
#pragma unroll
    for (int i = 0; i < B_ITERS; ++i) {
      if (b_r0 + i * B_RSTEP < rows) cp_async_16(dst + i * B_RSTEP * C::BN, src, b_n_ok);
      src += B_RSTEP * N_;
    }
  };

  // Gather offsets: this thread's D entries e = tid + d*THREADS map to the same (row, vector)
  // slot in every stage, so the divisions and checks happen once here, not per stage.
  int dreg[C::D_PER_THREAD];
#pragma unroll
  for (int d = 0; d < C::D_PER_THREAD; ++d) dreg[d] = -1;
  const int wbp = C::d_row_pitch(wb);
  int d_row[C::D_PER_THREAD], d_base[C::D_PER_THREAD], d_dst[C::D_PER_THREAD];
  bool d_ok[C::D_PER_THREAD];
  const uint8_t* d_src[C::D_PER_THREAD];
#pragma unroll
  for (int d = 0; d < C::D_PER_THREAD; ++d) {
    const int e = tid + d * C::THREADS;
    const int row = e / qt, vec = e % qt;
    d_ok[d] = e < wb * qt && vec0 + vec < q;
    d_row[d] = row;
    d_dst[d] = C::LANE_OFFSETS ? vec * wbp * C::D_COPIES + (row / 4) * C::D_GROUP + row % 4 : vec * wbp + row;
    d_base[d] = C::PACKED ? 0 : (row / p.N) * p.M;
    d_src[d] = p.indices + (d_ok[d] ? row * q + vec0 + vec : 0);
  }
  // fetch_d keeps the raw index bytes (-1: no entry) so that nothing waits on the global load
  // until store_d; store_d turns them into A_s offsets.
  auto fetch_d = [&](int s) {
    const int64_t u0 = (kb_begin + s) * wb;
    const int64_t stage_off = u0 * q;
    const bool tail = is_tail(s);
#pragma unroll
    for (int d = 0; d < C::D_PER_THREAD; ++d) {
      int raw = -1;
      if (d_ok[d] && (!tail || u0 + d_row[d] < w)) raw = __ldg(d_src[d] + stage_off);
      dreg[d] = raw;
    }
  };
  // An index byte addresses a row of the stage's A_s: masked to its window (a packed index to
  // the k-block), so no byte value reads outside it.
  const int idx_mask = C::PACKED ? C::KB - 1 : p.M - 1;
  auto store_d = [&](int s, const int* raw) {
    int* Ds = reinterpret_cast<int*>(stage_ptr(s) + C::KB * C::AS + wb * C::BN);
#pragma unroll
    for (int d = 0; d < C::D_PER_THREAD; ++d) {
      const int e = tid + d * C::THREADS;
      if (e < wb * qt) {
        const int row_off = raw[d] < 0 ? 0 : (d_base[d] + (raw[d] & idx_mask)) * C::AS;
        const int v = C::BYTE_OFFSETS ? ((s % C::STAGES) * stage_floats + row_off) * 4 : row_off;
#pragma unroll
        for (int c = 0; c < C::D_COPIES; ++c) Ds[d_dst[d] + 4 * c] = v + 16 * c;
      }
    }
  };

  float acc[C::TM][8];
#pragma unroll
  for (int i = 0; i < C::TM; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

  // One stage's math. d0/d1: this thread's offset lists (vector slots t0, t1; the same list
  // when UNIFORM).
  struct Frag {
    float a0[C::TM];
    float a1[C::UNIFORM ? 1 : C::TM];
    float b[8];
  };
  // BYTE_OFFSETS: this lane's A fragment base; a gather offset then costs one add per row.
  const char* const a_lane = reinterpret_cast<const char*>(smem + ti);
  // LANE_OFFSETS: where this lane's copy of each offset sits in a D_s group (lane row group ml).
  const int d_lane = C::LANE_OFFSETS ? 4 * ml : 0;
  auto a_frag_ptr = [&](const float* As, int o, int g) {
    if constexpr (C::LANE_OFFSETS) return reinterpret_cast<const float4*>(reinterpret_cast<const char*>(smem) + o + 128 * g);
    return reinterpret_cast<const float4*>(C::BYTE_OFFSETS ? a_lane + o + 128 * g
                                                           : reinterpret_cast<const char*>(As + o + ti + 32 * g));
  };
  auto load_frag = [&](Frag& f, const float* As, const float* Bs, int o0, int o1, int r) {
#pragma unroll
    for (int g = 0; g < C::TM / 4; ++g) {
      const float4 v = *a_frag_ptr(As, o0, g);
      f.a0[4 * g] = v.x; f.a0[4 * g + 1] = v.y; f.a0[4 * g + 2] = v.z; f.a0[4 * g + 3] = v.w;
      if constexpr (!C::UNIFORM) {
        const float4 v1 = *a_frag_ptr(As, o1, g);
        f.a1[4 * g] = v1.x; f.a1[4 * g + 1] = v1.y; f.a1[4 * g + 2] = v1.z; f.a1[4 * g + 3] = v1.w;
      }
    }
    const float4 b0 = *reinterpret_cast<const float4*>(Bs + r * C::BN + tj);
    const float4 b1 = *reinterpret_cast<const float4*>(Bs + r * C::BN + tj + 16);
    f.b[0] = b0.x; f.b[1] = b0.y; f.b[2] = b0.z; f.b[3] = b0.w;
    f.b[4] = b1.x; f.b[5] = b1.y; f.b[6] = b1.z; f.b[7] = b1.w;
  };
  auto fma_frag = [&](const Frag& f) {
    if constexpr (C::SERPENTINE_FMA) {
      static_assert(C::UNIFORM, "one A value per row");
      fma_serpentine<C::TM>(acc, f.a0, f.b);
    } else {
#pragma unroll
      for (int i = 0; i < C::TM; ++i) {
        const float x1 = C::UNIFORM ? f.a0[i] : f.a1[C::UNIFORM ? 0 : i];
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(f.a0[i], f.b[j], acc[i][j]);
#pragma unroll
        for (int j = 4; j < 8; ++j) acc[i][j] = fmaf(x1, f.b[j], acc[i][j]);
      }
    }
  };
  auto compute_stage = [&](const float* As, const float* Bs, const int* d0, const int* d1,
                           int rows) {
    const int groups = rows / 4;
    if (groups > 0) {
      Frag fa, fb;
      int4 c0 = *reinterpret_cast<const int4*>(d0);
      int4 c1 = C::UNIFORM ? c0 : *reinterpret_cast<const int4*>(d1);
      load_frag(fa, As, Bs, c0.x, c1.x, 0);
#pragma unroll 1
      for (int g = 0; g < groups; ++g) {
        // The next group's offsets (this group's again after the last: a harmless reload).
        const int gn = g + 1 < groups ? g + 1 : g;
        const int4 n0 = *reinterpret_cast<const int4*>(d0 + C::D_GROUP * gn);
        const int4 n1 = C::UNIFORM ? n0 : *reinterpret_cast<const int4*>(d1 + C::D_GROUP * gn);
        const int r = 4 * g;
        load_frag(fb, As, Bs, c0.y, c1.y, r + 1);
        fma_frag(fa);
        load_frag(fa, As, Bs, c0.z, c1.z, r + 2);
        fma_frag(fb);
        load_frag(fb, As, Bs, c0.w, c1.w, r + 3);
        fma_frag(fa);
        load_frag(fa, As, Bs, n0.x, n1.x, 4 * gn);
        fma_frag(fb);
        c0 = n0;
        c1 = n1;
      }
    }
    // Rows past the last full group (wb % 4 != 0: patterns such as 5:32).
    for (int r = groups * 4; r < rows; ++r) {
      Frag f;
      const int di = C::LANE_OFFSETS ? (r / 4) * C::D_GROUP + r % 4 : r;
      load_frag(f, As, Bs, d0[di], C::UNIFORM ? 0 : d1[di], r);
      fma_frag(f);
    }
  };

  auto compute = [&](int s) {
    const float* As = stage_ptr(s);
    const float* Bs = As + C::KB * C::AS;
    const int* Ds = reinterpret_cast<const int*>(Bs + wb * C::BN);
    compute_stage(As, Bs, Ds + t0 * wbp * C::D_COPIES + d_lane, Ds + t1 * wbp * C::D_COPIES + d_lane,
                  stage_rows(s));
  };

  // Fixed WB, full stage nxt: this stage's math with the copies of stage nxt issued after its
  // first compressed row. All of it is one straight-line block (rows unrolled, copy counts exact,
  // no row checks), so the scheduler hides the address arithmetic and issue of the copies behind
  // the FMAs of the same warp instead of running them as a separate phase after the barrier.
  // (Spreading the copies over all rows measured slower: the last ones land too late for the
  // short stages of the 8x8-thread-tile kernels.)
  auto compute_and_load = [&](int s, int nxt) {
    if constexpr (C::FIXED) {
      constexpr int WB = C::WB, G = WB / 4;
      constexpr int B_ITERS_F = (WB + B_RSTEP - 1) / B_RSTEP;
      const float* As = stage_ptr(s);
      const float* Bs = As + C::KB * C::AS;
      const int* d0 = reinterpret_cast<const int*>(Bs + WB * C::BN) + t0 * WB * C::D_COPIES + d_lane;
      float* const nA = stage_ptr(nxt);
      float* const a_dst = nA + a_r0 * C::AS + a_m;
      float* const b_dst = nA + C::KB * C::AS + b_r0 * C::BN + b_c;
      const float* const a_s = a_src + ((kb_begin + nxt) * C::KB + a_r0) * ldxt;
      const float* const b_s = b_src + ((kb_begin + nxt) * WB + b_r0) * N_;
      // Every copy of stage nxt: A_s rows, then B_s rows (exact count, no row checks).
      auto load_next = [&]() {
#pragma unroll
        for (int j = 0; j < C::A_ROWS; ++j) cp_async_16(a_dst + j * C::AS, a_s + j * ldxt, a_m_ok);
#pragma unroll
        for (int i = 0; i < B_ITERS_F; ++i) {
          if (WB % B_RSTEP == 0 || b_r0 + i * B_RSTEP < WB)
            cp_async_16(b_dst + i * B_RSTEP * C::BN, b_s + static_cast<int64_t>(i) * B_RSTEP * N_, b_n_ok);
        }
      };
      Frag fa, fb;
      int4 c = *reinterpret_cast<const int4*>(d0);
      load_frag(fa, As, Bs, c.x, c.x, 0);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const int4 n = g + 1 < G ? *reinterpret_cast<const int4*>(d0 + C::D_GROUP * (g + 1)) : c;
        const int r = 4 * g;
        load_frag(fb, As, Bs, c.y, c.y, r + 1);
        fma_frag(fa);
        if (g == 0) load_next();
        load_frag(fa, As, Bs, c.z, c.z, r + 2);
        fma_frag(fb);
        load_frag(fb, As, Bs, c.w, c.w, r + 3);
        fma_frag(fa);
        if (g + 1 < G) load_frag(fa, As, Bs, n.x, n.x, r + 4);
        fma_frag(fb);
        c = n;
      }
    }
  };

  // Prologue: the first STAGES-1 stages (and, INDEX_AHEAD 2, the index bytes of stage STAGES-1).
  // What the x transpose does not write comes first (values, index bytes and gather offsets,
  // col_info), then the wait for it (a no-op unless launched with p.dependent_launch during the
  // transpose), then the copies from xT; stage 0's commit group holds every prologue stage's B.
  fetch_cols(0);
  uint32_t prologue_cols[C::STAGES - 1][kColWords];
#pragma unroll
  for (int s = 0; s < C::STAGES - 1; ++s) {
    if (s < nk) {
#pragma unroll
      for (int c = 0; c < kColWords; ++c) prologue_cols[s][c] = cols[c];
      load_b(s);
      fetch_d(s);
      store_d(s, dreg);
      fetch_cols(s + 1);
    }
  }
  grid_dependency_wait();
#pragma unroll
  for (int s = 0; s < C::STAGES - 1; ++s) {
    if (s < nk) {
      uint32_t keep[kColWords];
#pragma unroll
      for (int c = 0; c < kColWords; ++c) {
        keep[c] = cols[c];
        cols[c] = prologue_cols[s][c];
      }
      load_a(s);
#pragma unroll
      for (int c = 0; c < kColWords; ++c) cols[c] = keep[c];
    }
    cp_async_commit();
  }
  if (C::INDEX_AHEAD == 2 && C::STAGES - 1 < nk) fetch_d(C::STAGES - 1);

  // Iteration it computes stage it, issues the copies of stage nxt = it + STAGES - 1 and stores
  // the gather offsets of stage nxt after its math. INDEX_AHEAD 1: their index bytes are fetched
  // at the start of this iteration; 2: one iteration earlier (this iteration fetches those of
  // nxt + 1), so each index load has two stages of math to land.
  for (int it = 0; it < nk; ++it) {
    cp_async_wait<C::STAGES - 2>();
    __syncthreads();
    const int nxt = it + C::STAGES - 1;
    int dcur[C::D_PER_THREAD];  // INDEX_AHEAD 2: the index bytes of stage nxt
    if constexpr (C::INDEX_AHEAD == 2) {
#pragma unroll
      for (int d = 0; d < C::D_PER_THREAD; ++d) dcur[d] = dreg[d];
      if (nxt + 1 < nk) fetch_d(nxt + 1);
    }
    if (C::FIXED && nxt < nk && !is_tail(nxt)) {
      if constexpr (C::INDEX_AHEAD == 1) fetch_d(nxt);
      compute_and_load(it, nxt);
      cp_async_commit();
    } else {
      if (nxt < nk) {
        load_a(nxt);
        load_b(nxt);
        if constexpr (C::INDEX_AHEAD == 1) fetch_d(nxt);
        fetch_cols(nxt + 1);
      }
      cp_async_commit();
      compute(it);
    }
    if (nxt < nk) store_d(nxt, C::INDEX_AHEAD == 2 ? dcur : dreg);
  }
  cp_async_wait<0>();
  allow_dependent_launch();  // the split-K reduction, if any, may start launching

  // Epilogue: rows ti+{0..3} (+32), columns tj+{0..3} and tj+16+{0..3} (tile_epilogue.cuh).
  store_output_tile<C::TM, C::BM, C::BN, C::THREADS>(acc, p, smem_f4, tid, ti, tj, m0, n0);
}

// Shared memory of a launch (wb compressed rows per stage); with the cluster reduction at least
// the BM x BN partial tile, with the bulk store at least the BM x (BN + 4) staged tile.
template <class C>
inline size_t tiled_smem_bytes(int wb, bool cluster_reduce, bool bulk_store) {
  size_t bytes = static_cast<size_t>(C::STAGES) * C::stage_floats(wb) * sizeof(float);
  const size_t partial = static_cast<size_t>(C::BM) * C::BN * sizeof(float);
  const size_t staged = static_cast<size_t>(C::BM) * (C::BN + 4) * sizeof(float);
  if (cluster_reduce && partial > bytes) bytes = partial;
  if (bulk_store && staged > bytes) bytes = staged;
  return bytes;
}

template <class C>
cudaError_t launch_tiled(const SpmmParams& p, cudaStream_t stream) {
  static bool configured[kMaxDevices] = {};
  // The limit also allows the padding to one block per SM (dependent launch, below).
  const SmFacts sm = current_sm_facts();
  const size_t need_max = tiled_smem_bytes<C>(C::KB, true, true);
  const size_t one_per_sm = sm.smem_per_sm > 0 ? smem_for_blocks_per_sm(sm, 1) : 0;
  const cudaError_t err = set_smem_limit_once(configured, spmm_tiled_kernel<C>,
                                              static_cast<int>(need_max > one_per_sm ? need_max : one_per_sm));
  if (err != cudaSuccess) return err;
  const int wb = C::KB / p.M * p.N;
  if (C::FIXED && (wb != C::WB || p.L < 32)) return cudaErrorInvalidValue;
  const int qt = p.L >= C::BN ? 1 : C::BN / p.L;
  const int stage = C::stage_floats(wb);
  const size_t smem = tiled_smem_bytes<C>(wb, p.cluster_reduce, p.bulk_store && !p.cluster_reduce);
  const int64_t mt = (p.m + C::BM - 1) / C::BM, ntl = (p.n + C::BN - 1) / C::BN;
  if (mt > 0x7fffffff || ntl > 65535 || p.split_k > 65535) return cudaErrorInvalidConfiguration;
  dim3 grid(static_cast<unsigned>(mt), static_cast<unsigned>(ntl), static_cast<unsigned>(p.split_k));
  // With cluster_reduce the split_k blocks of a tile (along z) form one cluster.
  if (p.bulk_store && (p.n % 4 != 0 || reinterpret_cast<uintptr_t>(p.split_k > 1 ? p.workspace : p.y) % 16 != 0))
    return cudaErrorInvalidValue;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(C::THREADS, 1, 1);
  // Launched during the x transpose (p.dependent_launch), as the warp-packed kernels: the block's
  // shared memory is padded so that no SM takes more than ceil(blocks / SMs) blocks (a dependent
  // launch without it runs up to 25% slower on sub-wave grids: blocks pile onto the SMs the
  // transpose frees first). Padding to that many blocks never
  // holds an SM below min(that, what registers and the unpadded size allow).
  size_t launch_smem = smem;
  if (p.dependent_launch && sm.sms > 0 && sm.smem_per_sm > 0) {
    const int64_t per_sm = (mt * ntl * p.split_k + sm.sms - 1) / sm.sms;
    const size_t pad = smem_for_blocks_per_sm(sm, per_sm);
    if (pad > launch_smem) launch_smem = pad;
  }
  cfg.dynamicSmemBytes = launch_smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  const cudaError_t attr_err = set_tile_launch_attributes(p, C::TM, attr, cfg);
  if (attr_err != cudaSuccess) return attr_err;
  return cudaLaunchKernelEx(&cfg, spmm_tiled_kernel<C>, p, wb, qt, stage);
}

// Explicit instantiations of the four fixed-WB variants of one configuration (one per
// spmm_tiled_*_k32_fixed.cu; declared by NMSPMM_FIXED_WB_CONFIGS in spmm_tiled.h).
#define NMSPMM_INSTANTIATE_FIXED_WB(BM, BN, TM)                                                   \
  template cudaError_t launch_tiled<TiledConfig<BM, BN, TM, 32, false, true, 4>>(const SpmmParams&,  \
                                                                               cudaStream_t);      \
  template cudaError_t launch_tiled<TiledConfig<BM, BN, TM, 32, false, true, 8>>(const SpmmParams&,  \
                                                                               cudaStream_t);      \
  template cudaError_t launch_tiled<TiledConfig<BM, BN, TM, 32, false, true, 12>>(const SpmmParams&, \
                                                                                cudaStream_t);     \
  template cudaError_t launch_tiled<TiledConfig<BM, BN, TM, 32, false, true, 16>>(const SpmmParams&, \
                                                                                cudaStream_t);

}  // namespace kernels
}  // namespace nmspmm
