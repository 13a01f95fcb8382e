// The warp-specialized tiled FP32 SpMM kernel (producer_f32_*, producer_tail_f32_*; sm_90): a producer
// warp feeds 8 math warps.
//
//   C[m0:m0+BM, n0:n0+BN] = sum over k-blocks of  A_s (k-slab of xT)  (*)  (B_s, D_s)
//
// The tiled kernels (spmm_tiled.cuh) have every warp issue its share of each stage's copies
// (16-byte cp.async with their address arithmetic), fetch index bytes, turn them into gather
// offsets, and wait at a block barrier per stage. Here one producer warp does all of that:
//   * A_s [KB][BM] (KB rows of xT, the k-major copy of x) and B_s [WB][BN] (WB rows of `values`)
//     each come from one 2-D tensor copy (TMA, cp.async.bulk.tensor) per stage; the launcher
//     encodes the two tensor maps per call (host only, no device work);
//   * D_s [QT][WB]: per (vector, compressed row) the byte offset of its A_s row from the start of
//     shared memory, computed from the index bytes, which the producer fetches a stage ahead;
//   * stage s is published through the mbarrier full[s % STAGES] (the producer's 32 lanes arrive
//     after their D_s stores; lane 0's arrival sets the tensor copies' bytes as the phase's
//     transactions) and released through empty[s % STAGES] (one arrival per math thread).
// The math warps wait on full[], load fragments from shared memory and issue FFMAs: no copy
// instructions, no block barrier in the main loop; a warp runs up to STAGES stages ahead of the
// slowest. The producer warp's warpgroup gives its registers to the math warps (setmaxnreg, sm_90a:
// 40 for the producer, 232 for the math warps; compiled for plain sm_90 every thread keeps the 168
// that 12 warps allow).
// Thread tile 16 x 8 with the tiled kernels' paired-lane layout; a math warp covers 128 rows x 32
// columns (one vector for L >= 32, so its gather offsets are warp-uniform). BM = 128 x WARPS_M,
// BN = 32 x WARPS_N. Fixed WB (compressed rows per k-block), L >= 32 (so n % 32 == 0).
// Tails: the tensor copies zero-fill rows past k (A) and w (B) and columns past ldxt (A) and n (B);
// the last stage of the last split may hold fewer than WB compressed rows (k % KB != 0), which the
// math walks one by one. Split-K: gridDim.z splits the k-blocks; each split writes its partial tile
// to the workspace, reduced in fixed order by reduce_splits (deterministic, no atomics). TAIL (the tail
// variant): a 1-D grid of the tiles (m-tile fastest) whose last `tail` tiles alone are split (csrc/registry.h,
// producer_tail_tiles): blocks [0, tiles - tail) compute whole tiles into y, the rest one split of a
// tail tile each into a compact workspace [split_k][tail][BM][BN], which reduce_tail_tiles_kernel
// sums in fixed order (+ bias). Epilogue:
// the tile is staged row-major in shared memory and written by bulk copies, one per row.
// Measured against the 1-D bulk copy per row (one per xT or values row): that version was copy-bound
// at 19-35 TFLOP/s on H100; with the tensor copies the kernel runs as
// fast as with no copies at all.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>

#include "cuda/kernels/common/bulk_store.cuh"
#include "cuda/kernels/common/launch_overlap.cuh"
#include "cuda/kernels/common/mbarrier.cuh"
#include "cuda/kernels/common/smem_limit.h"
#include "spmm.h"
#include "spmm_producer.h"

namespace nmspmm {
namespace kernels {

template <int WARPS_M_, int WARPS_N_, int KB_, int WB_, int STAGES_>
struct ProducerConfig {
  static constexpr int WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, KB = KB_, WB = WB_, STAGES = STAGES_;
  static constexpr int TM = 16;
  static constexpr int BM = 128 * WARPS_M, BN = 32 * WARPS_N;
  static constexpr int MATH_WARPS = WARPS_M * WARPS_N;
  static constexpr int MATH_THREADS = 32 * MATH_WARPS;
  // The producer is a whole warpgroup (setmaxnreg works per warpgroup); one of its warps works.
  static constexpr int THREADS = MATH_THREADS + 128;
  static constexpr int QT = WARPS_N;                 // vector slots per tile (L = 32: one per warp column)
  static constexpr int D_PER_LANE = (QT * WB + 31) / 32;
  // Shared memory: STAGES x (A_s, B_s, D_s), then 2 x STAGES mbarriers (8 bytes each).
  static constexpr int A_FLOATS = KB * BM;
  static constexpr int B_FLOATS = WB * BN;
  static constexpr int D_FLOATS = (QT * WB + 31) / 32 * 32;  // keeps every stage 128-byte aligned
  static constexpr int STAGE_FLOATS = A_FLOATS + B_FLOATS + D_FLOATS;
  static constexpr size_t PIPE_BYTES = static_cast<size_t>(STAGES) * STAGE_FLOATS * sizeof(float);
  static constexpr size_t TILE_BYTES = static_cast<size_t>(BM) * (BN + 4) * sizeof(float);
  static constexpr size_t BAR_OFFSET = ((PIPE_BYTES > TILE_BYTES ? PIPE_BYTES : TILE_BYTES) + 15) / 16 * 16;
  static constexpr size_t SMEM_BYTES = BAR_OFFSET + 2 * STAGES * sizeof(uint64_t) + 128;  // + alignment
  static_assert(WB % 4 == 0 && WB >= 4 && WB <= 32 && WB <= KB, "WB must be a multiple of 4 in [4, min(32, KB)]");
  static_assert(KB % 32 == 0 && KB <= 256, "KB must be a multiple of 32 in [32, 256] (a tensor-copy box has at most 256 rows)");
  static_assert(MATH_WARPS % 4 == 0, "the producer warpgroup must be warpgroup-aligned");
  static_assert(BM <= 256 && BN <= 256, "tensor-copy boxes are at most 256 elements wide");
  static_assert(STAGE_FLOATS % 4 == 0, "stages must stay 16-byte aligned");
  static_assert(STAGES >= 2, "at least double buffering");
};

template <class C, bool TAIL>
__global__ void __launch_bounds__(C::THREADS, 1)
    spmm_producer_kernel(const SpmmParams p, const __grid_constant__ CUtensorMap tm_a,
                         const __grid_constant__ CUtensorMap tm_b) {
  constexpr int KB = C::KB, WB = C::WB, BM = C::BM, BN = C::BN, STAGES = C::STAGES, QT = C::QT;
  extern __shared__ float4 smem_f4[];
  // Tensor copies need 128-byte aligned destinations.
  const uint32_t raw_base = smem_addr(smem_f4);
  float* const smem = reinterpret_cast<float*>(smem_f4) + (((128 - (raw_base & 127)) & 127) / 4);
  const uint32_t smem_base = smem_addr(smem);
  const uint32_t full_bar = smem_base + static_cast<uint32_t>(C::BAR_OFFSET);
  const uint32_t empty_bar = full_bar + 8 * STAGES;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t M_ = p.m, N_ = p.n, K_ = p.k;
  // This block's tile, split and split count; tail_slot >= 0: a split of the tail's tile tail_slot.
  int64_t tile_m, tile_n, z, tail = 0, tail_slot = -1;
  int splits;
  if constexpr (TAIL) {
    const int64_t mt = (M_ + BM - 1) / BM;
    const int64_t tiles = mt * ((N_ + BN - 1) / BN);
    // The launcher sizes the grid tiles + tail x (split_k - 1).
    tail = p.split_k > 1 ? (static_cast<int64_t>(gridDim.x) - tiles) / (p.split_k - 1) : 0;
    int64_t t = blockIdx.x;
    z = 0;
    splits = 1;
    if (t >= tiles - tail) {
      const int64_t j = t - (tiles - tail);
      tail_slot = j % tail;
      z = j / tail;
      splits = p.split_k;
      t = tiles - tail + tail_slot;
    }
    tile_m = t % mt;
    tile_n = t / mt;
  } else {
    tile_m = blockIdx.x;
    tile_n = blockIdx.y;
    z = blockIdx.z;
    splits = p.split_k;
  }
  const int64_t m0 = tile_m * BM;
  const int64_t n0 = tile_n * BN;
  const int64_t kblocks = (K_ + KB - 1) / KB;
  const int64_t kb_begin = kblocks * z / splits;
  const int64_t kb_end = kblocks * (z + 1) / splits;
  const int nk = static_cast<int>(kb_end - kb_begin);
  const int64_t w = K_ / p.M * p.N;  // compressed rows

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full_bar + 8 * s, 32);
      mbar_init(empty_bar + 8 * s, C::MATH_THREADS);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (warp >= C::MATH_WARPS) {
    // ---------------- producer warpgroup (its first warp works) ----------------
    setmaxnreg_dec<40>();
    if (warp != C::MATH_WARPS) return;
    const int64_t q = N_ / p.L;
    const int64_t vec0 = n0 / p.L;
    const int tile_off = static_cast<int>(n0 % p.L);
    // This lane's D_s entries: e = lane + 32 d -> (row e / QT, vector slot e % QT).
    int d_row[C::D_PER_LANE], d_win[C::D_PER_LANE];
    bool d_ok[C::D_PER_LANE];
    const uint8_t* d_src[C::D_PER_LANE];
#pragma unroll
    for (int d = 0; d < C::D_PER_LANE; ++d) {
      const int e = lane + 32 * d;
      const int row = e / QT, slot = e % QT;
      // Slot t holds the vector of the warp column t (columns 32t..32t+31 of the tile).
      const int64_t vec = vec0 + (tile_off + 32 * slot) / p.L;
      d_ok[d] = e < QT * WB && vec < q;
      d_row[d] = row;
      d_win[d] = (row / p.N) * p.M;
      d_src[d] = p.indices + (d_ok[d] ? static_cast<int64_t>(row) * q + vec : 0);
    }
    int raw[C::D_PER_LANE];
    const int idx_mask = p.M - 1;  // an index byte stays inside its window of the stage's A_s
    const int64_t u_begin = kb_begin * WB;
    auto fetch = [&](int s) {
      const int64_t u0 = u_begin + static_cast<int64_t>(s) * WB;
#pragma unroll
      for (int d = 0; d < C::D_PER_LANE; ++d)
        raw[d] = (s < nk && d_ok[d] && u0 + d_row[d] < w) ? __ldg(d_src[d] + u0 * q) & idx_mask : 0;
    };
    fetch(0);
    grid_dependency_wait();  // xT is written by the transpose launched just before
#pragma unroll 1
    for (int s = 0; s < nk; ++s) {
      const int slot = s % STAGES;
      if (s >= STAGES) mbar_wait(empty_bar + 8 * slot, ((s / STAGES) - 1) & 1);
      const uint32_t stage = smem_base + static_cast<uint32_t>(slot * C::STAGE_FLOATS * 4);
      int* const Ds = reinterpret_cast<int*>(smem + slot * C::STAGE_FLOATS + C::A_FLOATS + C::B_FLOATS);
#pragma unroll
      for (int d = 0; d < C::D_PER_LANE; ++d) {
        const int e = lane + 32 * d;
        // Slot-major: Ds[slot * WB + row] = byte offset of the A_s row from the start of shared memory.
        if (e < QT * WB)
          Ds[(e % QT) * WB + d_row[d]] = static_cast<int>(slot * C::STAGE_FLOATS + (d_win[d] + raw[d]) * BM) * 4;
      }
      fetch(s + 1);  // the next stage's index bytes land while this one computes
      const int64_t k0 = (kb_begin + s) * KB;
      const int64_t u0 = u_begin + static_cast<int64_t>(s) * WB;
      // Lane 0: both boxes (rows past k / w and columns past ldxt / n are zero-filled, counted in
      // the transaction bytes); every lane's arrival releases its D_s stores.
      const uint32_t bar = full_bar + 8 * slot;
      if (lane == 0) {
        mbar_arrive_expect_tx(bar, (C::A_FLOATS + C::B_FLOATS) * 4);
        tensor_load_2d(stage, &tm_a, static_cast<int>(m0), static_cast<int>(k0), bar);
        tensor_load_2d(stage + C::A_FLOATS * 4, &tm_b, static_cast<int>(n0), static_cast<int>(u0), bar);
      } else {
        mbar_arrive(bar);
      }
    }
    return;
  }

  // ---------------- math warps ----------------
  setmaxnreg_inc<232>();
  const int wm = warp / C::WARPS_N, wn = warp % C::WARPS_N;
  // Paired lanes: lanes 2i and 2i+1 share their A address and lanes i and i^2 their B address.
  const int ml = (lane >> 1) & 7;
  const int nl = (lane & 1) | ((lane >> 4) << 1);
  const int ti = wm * 128 + ml * 4;
  const int tj = wn * 32 + nl * 4;
  const char* const a_lane = reinterpret_cast<const char*>(smem + ti);

  float acc[16][8];
#pragma unroll
  for (int i = 0; i < 16; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

  struct Frag {
    float a[16];
    float b[8];
  };
  auto load_frag = [&](Frag& f, const float* Bs, int o, int r) {
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      const float4 v = *reinterpret_cast<const float4*>(a_lane + o + 128 * g);
      f.a[4 * g] = v.x; f.a[4 * g + 1] = v.y; f.a[4 * g + 2] = v.z; f.a[4 * g + 3] = v.w;
    }
    const float4 b0 = *reinterpret_cast<const float4*>(Bs + r * BN + tj);
    const float4 b1 = *reinterpret_cast<const float4*>(Bs + r * BN + tj + 16);
    f.b[0] = b0.x; f.b[1] = b0.y; f.b[2] = b0.z; f.b[3] = b0.w;
    f.b[4] = b1.x; f.b[5] = b1.y; f.b[6] = b1.z; f.b[7] = b1.w;
  };
  auto fma_frag = [&](const Frag& f) {
#pragma unroll
    for (int i = 0; i < 16; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(f.a[i], f.b[j], acc[i][j]);
  };

  const int64_t u_begin = kb_begin * WB;
#pragma unroll 1
  for (int s = 0; s < nk; ++s) {
    const int slot = s % STAGES;
    mbar_wait(full_bar + 8 * slot, (s / STAGES) & 1);
    const float* const Bs = smem + slot * C::STAGE_FLOATS + C::A_FLOATS;
    const int* const d = reinterpret_cast<const int*>(Bs + C::B_FLOATS) + wn * WB;
    const int64_t left = w - (u_begin + static_cast<int64_t>(s) * WB);
    if (left >= WB) {
      Frag fa, fb;
      int4 c = *reinterpret_cast<const int4*>(d);
      load_frag(fa, Bs, c.x, 0);
#pragma unroll
      for (int g = 0; g < WB / 4; ++g) {
        const int4 nx = g + 1 < WB / 4 ? *reinterpret_cast<const int4*>(d + 4 * (g + 1)) : c;
        const int r = 4 * g;
        load_frag(fb, Bs, c.y, r + 1);
        fma_frag(fa);
        load_frag(fa, Bs, c.z, r + 2);
        fma_frag(fb);
        load_frag(fb, Bs, c.w, r + 3);
        fma_frag(fa);
        if (g + 1 < WB / 4) load_frag(fa, Bs, nx.x, r + 4);
        fma_frag(fb);
        c = nx;
      }
    } else {
      // The split's last stage is partial (fewer compressed rows than WB: k % KB != 0).
#pragma unroll 1
      for (int r = 0; r < left; ++r) {
        Frag f;
        load_frag(f, Bs, d[r], r);
        fma_frag(f);
      }
    }
    // Every math thread releases the stage after its own last read of it (one arrival per warp
    // after __syncwarp relied on the warp barrier's ordering, which racecheck reported as a hazard
    // between these reads and the producer's next D_s stores).
    mbar_arrive(empty_bar + 8 * slot);
  }
  allow_dependent_launch();  // the split-K reduction, if any, may start launching

  // Epilogue: every math warp is done with the pipeline (and every copy has landed: each stage's
  // full barrier was waited on), so the tile is staged over it: rows of BN + 4 floats.
  named_barrier_sync(1, C::MATH_THREADS);
  const bool split = splits > 1;
  constexpr int CS = BN + 4;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int r = ti + 32 * (i / 4) + (i % 4);
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      const int c = tj + 16 * g;
      float4 v = make_float4(acc[i][4 * g], acc[i][4 * g + 1], acc[i][4 * g + 2], acc[i][4 * g + 3]);
      if (!split && p.bias != nullptr && n0 + c < N_) {
        const float4 bb = *reinterpret_cast<const float4*>(p.bias + n0 + c);
        v.x += bb.x; v.y += bb.y; v.z += bb.z; v.w += bb.w;
      }
      *reinterpret_cast<float4*>(smem + r * CS + c) = v;
    }
  }
  bulk_store_fence();
  named_barrier_sync(1, C::MATH_THREADS);
  // Row r of the tile goes to out + r * ld: y or the [split_k, m, n] workspace, or (a tail split)
  // the compact workspace's whole BN-wide tile row.
  float* out;
  int64_t ld, cols;
  if (TAIL && split) {
    out = p.workspace + (z * tail + tail_slot) * BM * BN;
    ld = BN;
    cols = BN;
  } else {
    out = (split ? p.workspace + z * M_ * N_ : p.y) + m0 * N_ + n0;
    ld = N_;
    cols = N_ - n0 < BN ? N_ - n0 : BN;
  }
  for (int r = tid; r < BM; r += C::MATH_THREADS) {
    if (m0 + r < M_) bulk_store_row(out + r * ld, smem + r * CS, static_cast<uint32_t>(cols * 4));
  }
  bulk_store_commit_and_wait_read();
}

// The tail kernel's reduction: y[tile] = sum_{z < splits} ws[z][slot] (+ bias) for the tail's tiles, in
// fixed z order; slot s is the tile first_tile + s (m-tile fastest over mt m-tiles). n % 4 == 0.
template <int BM, int BN>
__global__ void reduce_tail_tiles_kernel(const float* __restrict__ ws, int splits, int64_t tail, int64_t first_tile,
                                         int64_t mt, int64_t m, int64_t n, const float* __restrict__ bias,
                                         float* __restrict__ y) {
  grid_dependency_wait();  // launched while the tail's blocks may still run
  constexpr int64_t TILE_F4 = BM * BN / 4;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // float4 of the tail
  if (e >= tail * TILE_F4) return;
  const int64_t slot = e / TILE_F4;
  const int r = static_cast<int>(e % TILE_F4) / (BN / 4);
  const int c = static_cast<int>(e % (BN / 4)) * 4;
  const int64_t t = first_tile + slot;
  const int64_t row = (t % mt) * BM + r, col = (t / mt) * BN + c;
  if (row >= m || col >= n) return;
  const float* src = ws + slot * (BM * BN) + r * BN + c;
  float4 s = *reinterpret_cast<const float4*>(src);
  for (int z = 1; z < splits; ++z) {
    const float4 v = *reinterpret_cast<const float4*>(src + z * tail * (BM * BN));
    s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
  }
  if (bias != nullptr) {
    const float4 b = *reinterpret_cast<const float4*>(bias + col);
    s.x += b.x; s.y += b.y; s.z += b.z; s.w += b.w;
  }
  *reinterpret_cast<float4*>(y + row * n + col) = s;
}

// A row-major fp32 matrix [rows, cols] (row stride ld floats) as a tensor map of box_rows x box_cols
// boxes, out-of-bounds elements zero-filled.
inline bool encode_matrix(CUtensorMap* map, const float* base, int64_t rows, int64_t cols, int64_t ld,
                          int box_rows, int box_cols) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dim[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t stride[1] = {static_cast<cuuint64_t>(ld) * sizeof(float)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t unit[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float*>(base), dim, stride, box, unit,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Launches the warp-specialized kernel (TAIL: split-K on the last `tail` tiles, and their reduction).
// Refuses (cudaErrorInvalidValue) what it was not built for: compute capability < 9.0,
// KB / M * N != WB, L < 32, cluster_reduce, unaligned values / xT / output, sizes past the tensor
// copies' 32-bit coordinates, a tail larger than the grid.
template <class C, bool TAIL>
cudaError_t launch_producer_impl(const SpmmParams& p, cudaStream_t stream, int64_t tail) {
  static bool configured[kMaxDevices] = {};
  static int major[kMaxDevices] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (major[dev] == 0 && cudaDeviceGetAttribute(&major[dev], cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
    return cudaErrorInvalidDevice;
  const int64_t w = p.k / p.M * p.N;
  constexpr int64_t kMaxCoord = 0x7fffffff;
  if (major[dev] < 9 || p.M > C::KB || C::KB % p.M != 0 || C::KB / p.M * p.N != C::WB || p.L < 32 ||
      p.n % 32 != 0 || p.cluster_reduce || p.xt == nullptr || p.ldxt % 4 != 0 || p.ldxt > kMaxCoord ||
      p.n > kMaxCoord || p.k > kMaxCoord || w > kMaxCoord)
    return cudaErrorInvalidValue;
  const int64_t mt = (p.m + C::BM - 1) / C::BM, ntl = (p.n + C::BN - 1) / C::BN;
  // TAIL without a split or without a tail is the plain kernel with split 1.
  const bool tail_split = TAIL && p.split_k > 1 && tail > 0;
  if (TAIL && (tail < 0 || tail > mt * ntl)) return cudaErrorInvalidValue;
  const bool to_workspace = TAIL ? tail_split : p.split_k > 1;
  if (to_workspace && p.workspace == nullptr) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(p.values) % 16 != 0 || reinterpret_cast<uintptr_t>(p.xt) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.y) % 16 != 0 || reinterpret_cast<uintptr_t>(p.workspace) % 16 != 0)
    return cudaErrorInvalidValue;
  const cudaError_t err =
      set_smem_limit_once(configured, spmm_producer_kernel<C, TAIL>, static_cast<int>(C::SMEM_BYTES));
  if (err != cudaSuccess) return err;
  if (mt > 0x7fffffff || ntl > 65535 || p.split_k > 65535) return cudaErrorInvalidConfiguration;
  const int64_t grid_1d = mt * ntl + (tail_split ? tail * (p.split_k - 1) : 0);
  if (TAIL && grid_1d > 0x7fffffff) return cudaErrorInvalidConfiguration;
  CUtensorMap tm_a, tm_b;  // xT [k, ldxt] in KB x BM boxes, values [w, n] in WB x BN boxes
  if (!encode_matrix(&tm_a, p.xt, p.k, p.ldxt, p.ldxt, C::KB, C::BM) ||
      !encode_matrix(&tm_b, p.values, w, p.n, p.n, C::WB, C::BN))
    return cudaErrorInvalidValue;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = TAIL ? dim3(static_cast<unsigned>(grid_1d), 1, 1)
                     : dim3(static_cast<unsigned>(mt), static_cast<unsigned>(ntl), static_cast<unsigned>(p.split_k));
  cfg.blockDim = dim3(C::THREADS, 1, 1);
  cfg.dynamicSmemBytes = C::SMEM_BYTES;  // one block per SM: no padding needed under dependent launch
  cfg.stream = stream;
  // Launched during the x transpose (p.dependent_launch): the producer waits for it before its first
  // tensor copy; the math warps read only shared memory and write y.
  cudaLaunchAttribute attr[1] = {dependent_launch_attribute()};
  cfg.attrs = attr;
  cfg.numAttrs = p.dependent_launch ? 1 : 0;
  if constexpr (!TAIL) {
    return cudaLaunchKernelEx(&cfg, spmm_producer_kernel<C, false>, p, tm_a, tm_b);
  } else {
    SpmmParams q = p;
    if (!tail_split) q.split_k = 1;  // the kernel then computes every tile whole
    cudaError_t e = cudaLaunchKernelEx(&cfg, spmm_producer_kernel<C, true>, q, tm_a, tm_b);
    if (e != cudaSuccess || !tail_split) return e;
    // The tail's reduction, launched (sm_90, overlap_launches) while the kernel's last blocks run.
    return launch_items_after(reduce_tail_tiles_kernel<C::BM, C::BN>, tail * (C::BM * C::BN / 4), p.overlap_launches,
                              stream, static_cast<const float*>(p.workspace), p.split_k, tail, mt * ntl - tail, mt,
                              p.m, p.n, p.bias, p.y);
  }
}

template <class C>
cudaError_t launch_producer(const SpmmParams& p, cudaStream_t stream) {
  return launch_producer_impl<C, false>(p, stream, 0);
}
template <class C>
cudaError_t launch_producer_tail(const SpmmParams& p, cudaStream_t stream, int64_t tail_tiles) {
  return launch_producer_impl<C, true>(p, stream, tail_tiles);
}

}  // namespace kernels
}  // namespace nmspmm
