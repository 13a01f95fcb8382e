// The warp-packed FP32 SpMM kernel (L >= 32): packing per vector, one cp.async pipeline per warp.
//
//   C[m0:m0+BM, n0:n0+BN]: warp j of the block owns columns n0 + 32j .. n0 + 32j + 31, which lie in
//   one vector of L >= 32 outputs, so every compressed row u of the warp reads one row of x:
//       y[i, c] += xT[krow(u), i] * values[u, c],   krow(u) = (u / N) * M + indices[u, vector]
//
// The tiled kernels (spmm_tiled.cuh) stage the whole k-slab of A for the block and gather from
// shared memory through per-(row, vector) offsets (D_s) behind a block barrier per stage. Here each
// warp copies into its own shared memory only the A rows its vector keeps (WB compressed rows per
// stage: A_w [WB][BM] rows of xT by 16-byte cp.async, B_w [WB][32] its columns of `values`), so
//   * the math reads A_w and B_w at compile-time offsets from the stage base (no gather offsets, no
//     address add before a fragment load);
//   * no warp waits for another inside the main loop (cp.async.wait_group + __syncwarp; the block
//     barrier comes only with the epilogue);
//   * the A bytes copied per stage are WB rows per warp whatever the sparsity (the tiled kernels
//     copy the whole slab, M / N times the kept rows per vector).
// A stage's row numbers krow come from the index bytes: lane l of the warp holds the row
// u0 + l of a group of 32 / WB stages (one 1-byte load per lane per 32 compressed rows, fetched one
// group ahead) and the copy of row r of a stage takes it with a shuffle.
// Thread tile TM x 8 (the tiled kernels' lane layout with paired lanes): rows ti + 32f + {0..3},
// columns tj + {0..3} and tj + 16 + {0..3}. Split-K: gridDim.z splits the stages; partial tiles
// reduce in a cluster (split 2, sm_90) or through the workspace (tile_epilogue.cuh), in fixed order.
// Tails: rows past m read the zero pad of xT or are zero-filled; compressed rows past the split's
// end are zero-filled (A and B); columns: n % 32 == 0 (L >= 32), a warp past n skips its main loop.
#pragma once
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "cuda/kernels/common/cp_async.cuh"
#include "fma_order.cuh"
#include "cuda/kernels/common/launch_overlap.cuh"
#include "cuda/kernels/common/smem_limit.h"
#include "spmm.h"
#include "spmm_warp_packed.h"
#include "tile_epilogue.cuh"

namespace nmspmm {
namespace kernels {

template <int TM_, int WB_, int STAGES_>
struct WarpPackedConfig {
  static constexpr int TM = TM_, WB = WB_, STAGES = STAGES_;
  static constexpr int WARPS = 4;
  static constexpr int THREADS = 32 * WARPS;
  static constexpr int BM = 8 * TM;            // tile rows (every warp covers all of them)
  static constexpr int BN = 32 * WARPS;        // tile columns, 32 per warp
  static constexpr int A_CPR = BM / 4;         // 16-byte chunks per A_w row
  static constexpr int A_RPI = 32 / A_CPR;     // A_w rows per warp-wide copy
  static constexpr int A_ITERS = WB / A_RPI;   // copies per lane and stage
  static constexpr int B_ITERS = WB / 4;       // B_w rows are 8 chunks: 4 rows per warp-wide copy
  static constexpr int SPG = 32 / WB;          // stages per index group (a lane per row)
  static constexpr int GROUP = SPG * WB;       // compressed rows per index group (<= 32)
  static constexpr int STAGE_FLOATS = WB * (BM + 32);
  static constexpr int WARP_FLOATS = STAGES * STAGE_FLOATS;
  static constexpr int MIN_BLOCKS = TM == 16 ? 2 : TM == 8 ? 3 : 4;
  static_assert(TM == 4 || TM == 8 || TM == 16, "TM must be 4, 8 or 16");
  static_assert(WB % 4 == 0 && WB >= 4 && WB <= 32, "WB must be a multiple of 4 in [4, 32]");
  static_assert(WB % A_RPI == 0, "A copy mapping");
  static_assert(STAGES >= 2, "at least double buffering");
  // Shared memory of a launch: the warps' pipelines, or the epilogue's staged tile if larger.
  static constexpr size_t smem_bytes() {
    const size_t pipe = static_cast<size_t>(WARPS) * WARP_FLOATS * sizeof(float);
    const size_t tile = static_cast<size_t>(BM) * (BN + 4) * sizeof(float);
    return pipe > tile ? pipe : tile;
  }
};

template <class C>
__global__ void __launch_bounds__(C::THREADS, C::MIN_BLOCKS) spmm_warp_packed_kernel(const SpmmParams p) {
  constexpr int TM = C::TM, WB = C::WB, BM = C::BM, STAGES = C::STAGES;
  constexpr unsigned kAll = 0xffffffffu;
  extern __shared__ float4 smem_f4[];
  float* const smem = reinterpret_cast<float*>(smem_f4);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Paired lanes: lanes 2i and 2i + 1 share their A address, lanes i and i ^ 2 their B address.
  const int ml = (lane >> 1) & 7, nl = (lane & 1) | ((lane >> 4) << 1);
  const int ti = ml * 4;                 // tile row of the thread's first fragment row
  const int tj = warp * 32 + nl * 4;     // tile column of its first fragment column

  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * BM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * C::BN;
  const int64_t n = p.n;
  const int64_t col0 = n0 + warp * 32;   // this warp's first column
  const int N = p.N, M = p.M;

  // This split's stages of WB compressed rows: [c_begin, c_end) of ceil(w / WB).
  const int64_t w = p.k / M * N;
  const int64_t chunks = (w + WB - 1) / WB;
  const int64_t c_begin = chunks * blockIdx.z / p.split_k;
  const int64_t c_end = chunks * (blockIdx.z + 1) / p.split_k;
  const int nst = static_cast<int>(c_end - c_begin);
  const int64_t u_begin = c_begin * WB;
  const int64_t u_end = c_end * WB < w ? c_end * WB : w;

  float acc[TM][8];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

  if (col0 < n) {  // warp-uniform: n % 32 == 0, so a warp's columns are all in or all out
    float* const wsm = smem + warp * C::WARP_FLOATS;
    const int64_t q = n / p.L;
    // Rows of this split, counted from u_begin (32-bit: w < k <= INT_MAX, checked at launch).
    const int rows = static_cast<int>(u_end - u_begin);

    // Index groups of GROUP rows (SPG stages): lane l < GROUP follows compressed row u_begin +
    // rel_l, rel_l = GROUP * group + l, as window g_l and position s_l (g_l * M + index = its row of
    // xT). One division here, none in the loop.
    int rel_l = lane;
    int g_l = static_cast<int>((u_begin + lane) / N), s_l = static_cast<int>((u_begin + lane) % N);
    const int step_g = C::GROUP / N, step_s = C::GROUP % N;
    const uint8_t* idx_ptr = p.indices + (u_begin + lane) * q + col0 / p.L;
    const int64_t idx_step = C::GROUP * q;
    int pend_raw = -1, pend_base = 0;  // the fetched (not yet used) group: index byte, g_l * M
    auto fetch_group = [&]() {
      pend_base = g_l * M;
      pend_raw = lane < C::GROUP && rel_l < rows ? static_cast<int>(__ldg(idx_ptr)) & (M - 1) : -1;
      rel_l += C::GROUP;
      idx_ptr += idx_step;
      g_l += step_g;
      s_l += step_s;
      if (s_l >= N) {
        s_l -= N;
        ++g_l;
      }
    };
    int krow = -1;  // row of xT of this lane's row of the current group, -1: past the split's end

    // A copy: 16-byte chunk a_c of rows a_r, a_r + A_RPI, ... of A_w, from byte a_src + krow * ldxt
    // * 4 (one 32 x 32 -> 64-bit multiply-add; a row past the end reads row 0 with size 0). B copy:
    // chunk b_c of rows b_r, b_r + 4, ... of B_w.
    const int a_c = lane % C::A_CPR, a_r = lane / C::A_CPR;
    const bool a_ok = m0 + 4 * a_c < p.ldxt;
    const char* const a_src = reinterpret_cast<const char*>(p.xt + (a_ok ? m0 + 4 * a_c : 0));
    const uint32_t row_bytes = static_cast<uint32_t>(p.ldxt) * 4u;
    const int b_c = lane & 7, b_r = lane >> 3;
    const float* b_src = p.values + (u_begin + b_r) * n + col0 + 4 * b_c;
    int b_rel = b_r;  // row (from u_begin) of the lane's first B copy of the next stage

    // The copies of stage st into its buffer: A (rows of xT) and B (values), each called in stage
    // order st = 0, 1, 2, ... (issue_stage: both).
    auto issue_a = [&](int st) {
      const int slot = st % C::SPG;
      if (slot == 0) {
        krow = pend_raw < 0 ? -1 : pend_base + pend_raw;
        fetch_group();
      }
      float* const As = wsm + (st % STAGES) * C::STAGE_FLOATS;
#pragma unroll
      for (int i = 0; i < C::A_ITERS; ++i) {
        const int r = a_r + i * C::A_RPI;
        const int kr = __shfl_sync(kAll, krow, slot * WB + r);
        const uint32_t row = kr < 0 ? 0u : static_cast<uint32_t>(kr);
        cp_async_16(As + r * BM + 4 * a_c, a_src + static_cast<uint64_t>(row) * row_bytes, a_ok && kr >= 0);
      }
    };
    auto issue_b = [&](int st) {
      float* const Bs = wsm + (st % STAGES) * C::STAGE_FLOATS + WB * BM;
#pragma unroll
      for (int i = 0; i < C::B_ITERS; ++i) {
        const bool ok = b_rel + 4 * i < rows;
        cp_async_16(Bs + (b_r + 4 * i) * 32 + 4 * b_c, ok ? b_src + 4 * i * n : p.values, ok);
      }
      b_src += WB * n;
      b_rel += WB;
    };
    auto issue_stage = [&](int st) {
      issue_a(st);
      issue_b(st);
    };

    struct Frag {
      float a[TM];
      float b[8];
    };
    auto load_frag = [&](Frag& f, const float* As, const float* Bs, int r) {
#pragma unroll
      for (int g = 0; g < TM / 4; ++g) {
        const float4 v = *reinterpret_cast<const float4*>(As + r * BM + ti + 32 * g);
        f.a[4 * g] = v.x; f.a[4 * g + 1] = v.y; f.a[4 * g + 2] = v.z; f.a[4 * g + 3] = v.w;
      }
      const float4 b0 = *reinterpret_cast<const float4*>(Bs + r * 32 + nl * 4);
      const float4 b1 = *reinterpret_cast<const float4*>(Bs + r * 32 + nl * 4 + 16);
      f.b[0] = b0.x; f.b[1] = b0.y; f.b[2] = b0.z; f.b[3] = b0.w;
      f.b[4] = b1.x; f.b[5] = b1.y; f.b[6] = b1.z; f.b[7] = b1.w;
    };
    // The 8- and 4-row thread tiles take their FMAs in a serpentine (fma_order.cuh): 1.021x
    // (warp_packed_f32_64x128) and 1.015-1.017x (warp_packed_f32_32x128) in an H100 A/B of the same
    // build, where the 16-row tile (warp_packed_f32_128x128) runs 0.98x and keeps the rows-major
    // order.
    auto fma_frag = [&](const Frag& f) {
      if constexpr (TM <= 8)
        fma_serpentine<TM>(acc, f.a, f.b);
      else
        fma_rows<TM>(acc, f.a, f.b);
    };

    // Prologue: the first STAGES - 1 stages in flight. What the x transpose does not write comes
    // first (the first index group, the first stages' values), then the wait for it (a no-op unless
    // launched with p.dependent_launch during the transpose), then the copies from xT; stage 0's commit
    // group holds the B copies of every prologue stage.
    fetch_group();
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s)
      if (s < nst) issue_b(s);
    grid_dependency_wait();
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < nst) issue_a(s);
      cp_async_commit();
    }
    // Iteration it computes stage it and, after its first row, issues stage it + STAGES - 1 into
    // the buffer that iteration it - 1 read (every lane is past it: __syncwarp).
#pragma unroll 1
    for (int it = 0; it < nst; ++it) {
      cp_async_wait<STAGES - 2>();
      __syncwarp();
      const float* const As = wsm + (it % STAGES) * C::STAGE_FLOATS;
      const float* const Bs = As + WB * BM;
      const int nxt = it + STAGES - 1;
      Frag fa, fb;
      load_frag(fa, As, Bs, 0);
#pragma unroll
      for (int r = 0; r < WB; r += 2) {
        load_frag(fb, As, Bs, r + 1);
        fma_frag(fa);
        if (r == 0) {
          if (nxt < nst) issue_stage(nxt);
          cp_async_commit();
        }
        if (r + 2 < WB) load_frag(fa, As, Bs, r + 2);
        fma_frag(fb);
      }
    }
    cp_async_wait<0>();
  }
  allow_dependent_launch();  // the split-K reduction, if any, may start launching
  store_output_tile<TM, BM, C::BN, C::THREADS>(acc, p, smem_f4, tid, ti, tj, m0, n0);
}


template <class C>
cudaError_t launch_warp_packed(const SpmmParams& p, cudaStream_t stream) {
  static bool configured[kMaxDevices] = {};
  constexpr size_t smem_need = C::smem_bytes();
  // The limit (set once per device) allows the padding to one block per SM (dependent launch below).
  const SmFacts sm = current_sm_facts();
  const size_t one_per_sm = sm.smem_per_sm > 0 ? smem_for_blocks_per_sm(sm, 1) : 0;
  const size_t smem_max = smem_need > one_per_sm ? smem_need : one_per_sm;
  const cudaError_t err = set_smem_limit_once(configured, spmm_warp_packed_kernel<C>, static_cast<int>(smem_max));
  if (err != cudaSuccess) return err;
  // A warp's columns must share one vector (L >= 32, n % 32 == 0); row numbers of xT fit an int.
  // Byte offsets of xT rows are 32-bit multiplies: ldxt * 4 < 2^32.
  if (p.L < 32 || p.n % 32 != 0 || p.k > INT_MAX || p.N < 1 || p.M < p.N || p.ldxt * 4 > UINT32_MAX)
    return cudaErrorInvalidValue;
  if (p.bulk_store && reinterpret_cast<uintptr_t>(p.split_k > 1 && !p.cluster_reduce ? p.workspace : p.y) % 16 != 0)
    return cudaErrorInvalidValue;
  const int64_t mt = (p.m + C::BM - 1) / C::BM, ntl = (p.n + C::BN - 1) / C::BN;
  if (mt > 0x7fffffff || ntl > 65535 || p.split_k > 65535) return cudaErrorInvalidConfiguration;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(mt), static_cast<unsigned>(ntl), static_cast<unsigned>(p.split_k));
  cfg.blockDim = dim3(C::THREADS, 1, 1);
  // Launched during the transpose (p.dependent_launch), a grid that would leave room on its SMs is held to
  // B = ceil(blocks / SMs) blocks per SM (the busiest SM's share of an even spread): padded shared
  // memory lets no SM take B + 1. Without it, blocks stacked on the SMs that had room first (an H100
  // A/B: sub-wave grids run up to 2x slower).
  size_t smem = smem_need;
  if (p.dependent_launch && sm.sms > 0 && sm.smem_per_sm > 0) {
    const int64_t per_sm = (mt * ntl * p.split_k + sm.sms - 1) / sm.sms;
    if (per_sm < C::MIN_BLOCKS) {
      const size_t pad = smem_for_blocks_per_sm(sm, per_sm);
      if (pad > smem) smem = pad;
    }
  }
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  const cudaError_t attr_err = set_tile_launch_attributes(p, C::TM, attr, cfg);
  if (attr_err != cudaSuccess) return attr_err;
  return cudaLaunchKernelEx(&cfg, spmm_warp_packed_kernel<C>, p);
}

}  // namespace kernels
}  // namespace nmspmm
