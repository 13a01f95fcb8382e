// Fused-expansion SpMM on Hopper (sm_90a): the compressed weight streams in by tensor copies,
// expansion warps write it as a dense 128-byte-swizzled operand in shared memory, and warpgroup
// MMAs (wgmma, dense tensor cores) consume it. Any N:M (M <= 64) with any L <= 128; no dense copy
// of the weight touches HBM and x is read in place.
//
//   y^T = W x^T: the expanded weight is wgmma's operand A (rows = outputs, M-major), x operand B
//   (rows = tokens, K-major, as it lies in memory). A block computes 128 outputs x BN tokens and
//   walks k in stages of 64 inputs (64 / M whole windows), a k range of them per block of a split.
// * Copy warp (the last): per stage, into a ring slot, tensor copies of x [BN tokens x 64 inputs]
//   (128-byte swizzle), of the values [64 / M * N compressed rows x 128 outputs] and, where the
//   rows allow (L <= 8, 16-byte aligned), of the index bytes [rows x 128 / L]; otherwise cp.async
//   copies of 4 bytes (for L >= 64 the copy starts at the aligned vector before the block's, `skew`
//   adds the offset back) that arrive on the slot's barrier as they complete. Out-of-bounds
//   elements are zero-filled.
// * Expansion warpgroups (warps 8 ..): kExpandGroups of them, taking stages in turn (the
//   expansion of one stage is latency-bound: several in flight raise its rate). Warp e of a
//   warpgroup owns outputs 32e .. 32e + 31 of its stage, i.e. four 16-byte chunks of each 128-byte
//   input row of the dense tile; it zeroes them, scatters the stage's values
//   at the rows their index bytes name (expand_stage, shared with expand_mma: masked positions,
//   the ordered fast path and the serial path that adds a repeated position), makes its stores
//   visible to the tensor cores' proxy and arrives on the slot's `ready` barrier.
// * Consumer warpgroups (warps 0-7): 64 outputs each, four wgmma m64nBNk16 per stage, fp32
//   accumulators in registers; they release a slot (empty barrier, one arrival per warp) once their
//   wgmma on it has completed, which also frees its dense tile for the expansion of a later stage.
// * Epilogue and split-K: sparse_tc's (fp32 staging tile; the blocks of a cluster sum their
//   tiles through distributed shared memory in rank order, deterministic).
// A NaN or Inf of x meets the zeros of pruned positions in the dense products (0 * Inf), as in the
// dense expansion + cuBLAS: the caller runs the same non-finite row check after it.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/kernels/common/cp_async.cuh"
#include "cuda/kernels/common/mbarrier.cuh"
#include "cuda/kernels/common/wgmma_dense.h"
#include "cuda/kernels/half/expand_mma.cuh"
#include "cuda/kernels/half/expand_wgmma_geometry.h"
#include "cuda/kernels/sparse_tc/sparse_tc_sm90.cuh"

namespace nmspmm {
namespace kernels {
namespace expand_wgmma {

static_assert(kBM == sparse_tc::kBM && kEpiPitch == sparse_tc::kEpiPitch, "sparse_tc's epilogue");

struct Args {
  const uint16_t* bias;
  uint16_t* y;
  int64_t m, n, k;
  int N, M, L;
  int split;
  int ich;      // bytes per index copy (cp.async): 16 (L <= 8, 16-byte aligned rows) or 4
  int idx_tma;  // index rows by tensor copy (L <= 8, 16-byte aligned rows): tm_i
  const uint8_t* indices;  // [w, q], q = n / L
  int64_t w, q;
  Geometry g;
};

// An expansion warp's 32 outputs of a stage's dense tile: chunks chunk0 .. chunk0 + 3 of each
// 128-byte input row of one [64 inputs x 64 outputs] box, 16-byte chunk c of row r stored at
// c ^ (r & 7) (the 128-byte swizzle of the wgmma operand; the box is 1024-byte aligned).
struct SwizzledStrip {
  // One store instruction of the lanes' j-th vectors would reach only 8 of the 32 banks (the chunk
  // is the only thing that differs): the expansion rotates each lane's vectors.
  static constexpr bool kRotate = true;
  unsigned char* base;
  int chunk0;
  __device__ __forceinline__ unsigned char* chunk(int r, int c) const {
    return base + r * 128 + (((chunk0 + c) ^ (r & 7)) << 4);
  }
  __device__ __forceinline__ void zero(int lane) const {
#pragma unroll
    for (int i = 0; i < kBK / 8; ++i)
      *reinterpret_cast<uint4*>(chunk(i * 8 + (lane >> 2), lane & 3)) = make_uint4(0, 0, 0, 0);
  }
};

// Arrives on `bar` once every cp.async this thread has issued so far has completed (the arrival
// is counted in the barrier's expected count: noinc).
__device__ __forceinline__ void cp_async_arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Makes this thread's generic-proxy stores to shared memory visible to the async proxy (wgmma).
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

template <typename T, int BN, int LG>
__global__ void __launch_bounds__(kThreads, 1)
    expand_wgmma_kernel(const Args a, const __grid_constant__ CUtensorMap tm_x, const __grid_constant__ CUtensorMap tm_v,
                        const __grid_constant__ CUtensorMap tm_i) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sparse_tc;
  const Geometry& g = a.g;
  const int S = g.stages;
  constexpr int kAcc = BN / 2;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw_base = smem_addr(smem_raw);
  unsigned char* const smem = smem_raw + ((1024 - (raw_base & 1023)) & 1023);
  const uint32_t sbase = smem_addr(smem);
  const uint32_t bar_full = sbase + g.region, bar_ready = bar_full + 8 * S, bar_empty = bar_ready + 8 * S;

  const int tid = threadIdx.x;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBM;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * BN;
  const int split = a.split;
  const int z = blockIdx.z;  // k range of this block; equals its rank in the cluster
  const int64_t nst = (a.k + kBK - 1) / kBK;
  const int64_t st_begin = nst * z / split, st_end = nst * (z + 1) / split;
  const int nloc = static_cast<int>(st_end - st_begin);

  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(bar_full + 8 * s, a.idx_tma ? 1 : 1 + 32);  // expected bytes (+ each copy lane's index copies)
      mbar_init(bar_ready + 8 * s, 4);  // one arrival per warp of the stage's expansion warpgroup
      mbar_init(bar_empty + 8 * s, 8);  // one arrival per consumer warp
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (tid >= 256 + 128 * kExpandGroups) {
    // The copy warp runs ahead of the stages it feeds by up to the ring's depth: its loop is kept
    // short (ring counters, addresses advanced by increments), since the stages wait on it.
    const int lane = tid & 31;
    const uint32_t v0 = static_cast<uint32_t>(n0 / a.L) & ~3u;  // aligned first index column (skew below)
    // cp.async index copies (a.idx_tma == 0): chunk c = lane + 32 j of a stage's slots x cpr.
    const int cpr = g.idx_row / a.ich, cpr_shift = 31 - __clz(cpr), chunks = a.idx_tma ? 0 : g.slots * cpr;
    const uint8_t* idx_src = a.indices + st_begin * g.slots * a.q + v0;
    const int64_t idx_stage = static_cast<int64_t>(g.slots) * a.q;
    int64_t rows_left = a.w - st_begin * g.slots;  // compressed rows from the current stage on
    int s = 0, use = 0;
    for (int i = 0; i < nloc; ++i) {
      if (i >= S) mbar_wait(bar_empty + 8 * s, (use - 1) & 1);
      const uint32_t st = sbase + s * g.stage_bytes, full = bar_full + 8 * s;
      const int stage = static_cast<int>(st_begin) + i;
      if (lane == 0) {
        mbar_arrive_expect_tx(full, g.stage_tx);
        tensor_load_2d(st + g.x_off, &tm_x, stage * kBK, static_cast<int>(t0), full);
        tensor_load_2d(st + g.val_off, &tm_v, static_cast<int>(n0), stage * g.slots, full);
        if (a.idx_tma) tensor_load_2d(st + g.idx_off, &tm_i, static_cast<int>(v0), stage * g.slots, full);
      }
      if (!a.idx_tma) {
        unsigned char* dst = smem + s * g.stage_bytes + g.idx_off;
        for (int c = lane; c < chunks; c += 32) {
          const int row = c >> cpr_shift, part = c & (cpr - 1);
          const bool ok = row < rows_left && v0 + part * a.ich < a.q;
          const uint8_t* src = ok ? idx_src + static_cast<int64_t>(row) * a.q + part * a.ich : a.indices;
          unsigned char* d = dst + row * g.idx_row + part * a.ich;
          if (a.ich == 16)
            cp_async_16(d, src, ok);
          else
            cp_async_4(d, src, ok);
        }
        cp_async_arrive_noinc(full);
      }
      idx_src += idx_stage;
      rows_left -= g.slots;
      if (++s == S) {
        s = 0;
        ++use;
      }
    }
  } else if (tid >= 256) {
    const int ewg = (tid - 256) >> 7, wm = ((tid - 256) >> 5) & 3, lane = tid & 31;
    const int skew = static_cast<int>(n0 / a.L) & 3;  // nonzero only for L >= 64
    const expand_mma::ExpandShape sh{a.N, a.M, a.L, kBM * 2, g.idx_row};
    const int idx_warp = skew + wm * 32 / a.L;  // the warp's first vector in the staged index rows
    const expand_mma::ExpandLane el{wm * 32, (lane & 3) * 16, (wm * 32 + (lane & 3) * 8) / a.L - wm * 32 / a.L,
                                    1.0f / static_cast<float>(a.N)};
    const int64_t windows_total = a.k / a.M;
    const int wps = kBK / a.M;  // windows per stage
    int s = ewg % S, phase = 0;  // the ring slot of stage i and its use's parity
    for (int i = ewg; i < nloc; i += kExpandGroups) {
      mbar_wait(bar_full + 8 * s, phase);
      unsigned char* st = smem + s * g.stage_bytes;
      const SwizzledStrip strip{st + g.a_off + (wm >> 1) * (kDenseTileBytes / 2), (wm & 1) * 4};
      const int64_t gw0 = (st_begin + i) * wps;
      const int windows = windows_total - gw0 < wps ? static_cast<int>(windows_total - gw0) : wps;
      strip.zero(lane);
      __syncwarp();
      expand_mma::expand_stage<T, LG>(sh, strip, st + g.val_off + wm * 64,
                                      reinterpret_cast<const uint8_t*>(st + g.idx_off + idx_warp), windows, lane, el);
      fence_proxy_async_smem();
      __syncwarp();
      if (lane == 0) mbar_arrive(bar_ready + 8 * s);
      s += kExpandGroups;
      if (s >= S) {
        s -= S;
        phase ^= 1;
      }
    }
  } else {
    const int wg = tid >> 7;  // consumer warpgroup: outputs 64 wg .. 64 wg + 63
    const int warp = (tid & 127) >> 5, lane = tid & 31;
    const int r0 = 64 * wg + 16 * warp + (lane >> 2);  // this thread's rows r0 and r0 + 8 of the tile
    float acc[kAcc];
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
    int s = 0, phase = 0, prev = S - 1;  // ring slots of stages i and i - 1
    for (int i = 0; i < nloc; ++i) {
      mbar_wait(bar_full + 8 * s, phase);
      mbar_wait(bar_ready + 8 * s, phase);
      const uint32_t st = sbase + s * g.stage_bytes;
      fence_accumulators(acc);
      wgmma_fence();
#pragma unroll
      for (int step = 0; step < kBK / 16; ++step) {
        // A: inputs 16 step .. of this warpgroup's [64 x 64] box (8-input groups 1024 B apart);
        // B: inputs 16 step .. of the [BN x 64] x box (8-token groups 1024 B apart).
        const uint64_t da = smem_desc(st + g.a_off + wg * (kDenseTileBytes / 2) + step * 2048, 1024, 1024);
        const uint64_t db = smem_desc(st + g.x_off + step * 32, 16, 1024);
        WgmmaDense<T, BN>::mma(da, db, acc);
      }
      wgmma_commit();
      wgmma_wait<1>();
      fence_accumulators(acc);
      // The wgmma of the previous stage has completed: release its slot.
      if (i > 0) {
        __syncwarp();
        if (lane == 0) mbar_arrive(bar_empty + 8 * prev);
      }
      prev = s;
      if (++s == S) {
        s = 0;
        phase ^= 1;
      }
    }
    wgmma_wait<0>();
    fence_accumulators(acc);
    // Every consumer's wgmma has read its last stage before the staging overwrites the ring.
    named_barrier_sync(1, 256);
    stage_accumulators<BN>(reinterpret_cast<float*>(smem), acc, r0, lane);
  }
  // The partial tiles are staged (split > 1: in every block of the cluster).
  if (split > 1) {
    cluster_sync_all();
  } else {
    __syncthreads();
  }
  if (tid < 256) store_tile<T, BN>(smem, sbase, tid, split, t0, n0, a.m, a.n, a.bias, a.y);
  // No block may exit while another block of its cluster still reads its staged tile.
  if (split > 1) cluster_sync_all();
#endif
}

template <typename T, int BN, int LG>
cudaError_t launch_kernel(const Args& a, const CUtensorMap& tm_x, const CUtensorMap& tm_v, const CUtensorMap& tm_i,
                          cudaStream_t stream) {
  auto kern = expand_wgmma_kernel<T, BN, LG>;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, a.g.smem_bytes);
  if (e != cudaSuccess) return e;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>((a.n + kBM - 1) / kBM), static_cast<unsigned>((a.m + BN - 1) / BN),
                     static_cast<unsigned>(a.split));
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = static_cast<size_t>(a.g.smem_bytes);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = static_cast<unsigned>(a.split);
  cfg.attrs = attr;
  cfg.numAttrs = a.split > 1 ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kern, a, tm_x, tm_v, tm_i);
}

// The plan's launch for a problem the entry has checked: tensor maps, then the instance of L.
template <typename T, int BN>
cudaError_t launch_tile(const HalfSpmmParams& p, cudaStream_t stream) {
  Args a{};
  a.g = make_geometry(p.N, p.M, p.L, BN);
  a.bias = static_cast<const uint16_t*>(p.bias);
  a.y = static_cast<uint16_t*>(p.y);
  a.m = p.m;
  a.n = p.n;
  a.k = p.k;
  a.N = p.N;
  a.M = p.M;
  a.L = p.L;
  a.split = p.split_k;
  a.indices = p.indices;
  a.w = p.k / p.M * p.N;
  a.q = p.n / p.L;
  a.ich = a.g.idx_row % 16 == 0 && a.q % 16 == 0 && reinterpret_cast<uintptr_t>(p.indices) % 16 == 0 ? 16 : 4;
  a.idx_tma = a.ich == 16;
  CUtensorMap tm_x, tm_v, tm_i{};
  if (a.idx_tma) {
    a.g.stage_tx += static_cast<uint32_t>(a.g.slots * a.g.idx_row);
    if (!sparse_tc::encode_map(&tm_i, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, p.indices, a.w, a.q, a.q, a.g.slots,
                               a.g.idx_row, CU_TENSOR_MAP_SWIZZLE_NONE))
      return cudaErrorInvalidValue;
  }
  if (!sparse_tc::encode_map(&tm_x, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, p.x, p.m, p.k, p.ldx * 2, BN, kBK,
                             CU_TENSOR_MAP_SWIZZLE_128B) ||
      !sparse_tc::encode_map(&tm_v, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, p.values, a.w, p.n, p.n * 2, a.g.slots, kBM,
                             CU_TENSOR_MAP_SWIZZLE_NONE))
    return cudaErrorInvalidValue;
  switch (p.L) {
    case 1: return launch_kernel<T, BN, 1>(a, tm_x, tm_v, tm_i, stream);
    case 2: return launch_kernel<T, BN, 2>(a, tm_x, tm_v, tm_i, stream);
    case 4: return launch_kernel<T, BN, 4>(a, tm_x, tm_v, tm_i, stream);
    default: return launch_kernel<T, BN, 8>(a, tm_x, tm_v, tm_i, stream);  // L = 8 .. 128
  }
}

}  // namespace expand_wgmma
}  // namespace kernels
}  // namespace nmspmm
