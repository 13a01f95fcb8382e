// Gathered-operand SpMM on Hopper (sm_90a) for vectors of 64 or 128 outputs: each vector's kept
// rows of the k-major copy of x are copied into a compact operand in shared memory, and warpgroup
// MMAs (wgmma, dense tensor cores) multiply it by the compressed values, which arrive as they lie
// in memory. Only the kept MACs run; no dense copy of the weight exists anywhere.
//
//   y^T = W_c xg^T per vector: the compressed values are wgmma's operand A (rows = outputs,
//   M-major, the documented layout [slots][outputs]), the gathered activations operand B
//   (xg[slot][token] = xT[position of the slot][token], MN-major: rows of tokens). A block computes
//   128 outputs (two consumer warpgroups of 64) x BN tokens and walks the compressed rows in stages
//   of 32 (two k16 steps), a range of stages per block of a split.
// * Producer warpgroup (warps 8-11): per stage, into a ring slot, two tensor copies of the values
//   [32 rows x 64 outputs] (128-byte swizzle, out-of-bounds rows zero-filled) and, for each of
//   the block's 128 / L vectors, 32 rows of BN tokens of xT with 16-byte cp.async: one warp
//   instruction copies one row (BN = 256) or two (BN = 128), 16-byte chunk c of slot row r stored
//   at atom (r / 8, c / 8), row r % 8, chunk (c % 8) ^ (r % 8) (the 128-byte-swizzled MN-major
//   layout). A row's position is (row / N) * M + (index byte & (M - 1)): no index content reads
//   outside its window; rows past w and tokens past m_pad are zero-filled. Each thread's index
//   bytes are loaded four stages ahead; its copies arrive on the slot's barrier as they complete
//   (cp.async.mbarrier.arrive.noinc), and the consumers fence the async proxy after the wait.
// * Consumer warpgroups (warps 0-7): 64 outputs each, two wgmma m64nBNk16 per stage, fp32
//   accumulators in registers; for L = 64 each warpgroup reads its own vector's gathered tile, for
//   L = 128 both read the same one. A slot is released (one arrival per warp) once the wgmma that
//   read it has completed.
// * Epilogue and split-K: sparse_tc's (fp32 staging tile; the blocks of a cluster sum their tiles
//   through distributed shared memory in rank order, deterministic).
// Every product is of a kept position, so a NaN or Inf of x at a pruned position never reaches y.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/kernels/common/cp_async.cuh"
#include "cuda/kernels/common/mbarrier.cuh"
#include "cuda/kernels/common/wgmma_dense.h"
#include "cuda/kernels/half/gather_wgmma_geometry.h"
#include "cuda/kernels/half/spmm_half.h"
#include "cuda/kernels/sparse_tc/sparse_tc_sm90.cuh"

namespace nmspmm {
namespace kernels {
namespace gather_wgmma {

static_assert(kBM == sparse_tc::kBM && kEpiPitch == sparse_tc::kEpiPitch, "sparse_tc's epilogue");

struct Args {
  const uint16_t* xT;  // [k][m_pad]
  const uint8_t* indices;  // [w, q], q = n / L
  const uint16_t* bias;
  uint16_t* y;
  int64_t m, n, k, m_pad, w, q;
  int N, M, L;
  int split;
  Geometry g;
};

// Arrives on `bar` once every cp.async this thread has issued so far has completed (the arrival
// is counted in the barrier's expected count: noinc).
__device__ __forceinline__ void cp_async_arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Orders the shared-memory writes this thread has observed (the copies a barrier phase covers)
// before its later async-proxy reads (wgmma).
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

template <typename T, int BN, int V>
__global__ void __launch_bounds__(kThreads, 1)
    gather_wgmma_kernel(const Args a, const __grid_constant__ CUtensorMap tm_v) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sparse_tc;
  const Geometry& g = a.g;
  const int S = g.stages;
  constexpr int kAcc = BN / 2;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw_base = smem_addr(smem_raw);
  unsigned char* const smem = smem_raw + ((1024 - (raw_base & 1023)) & 1023);
  const uint32_t sbase = smem_addr(smem);
  const uint32_t bar_full = sbase + g.region, bar_empty = bar_full + 8 * S;

  const int tid = threadIdx.x;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBM;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * BN;
  const int split = a.split;
  const int z = blockIdx.z;  // stage range of this block; equals its rank in the cluster
  const int64_t nst = (a.w + kRows - 1) / kRows;
  const int64_t st_begin = nst * z / split, st_end = nst * (z + 1) / split;
  const int nloc = static_cast<int>(st_end - st_begin);

  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(bar_full + 8 * s, 1 + 128);  // the values' expected bytes + each producer thread
      mbar_init(bar_empty + 8 * s, 8);       // one arrival per consumer warp
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (tid >= 256) {
    setmaxnreg_dec<40>();
    constexpr int kPairs = V * kRows;        // (vector, slot row) pairs of a stage
    constexpr int kPairsPerWarp = kPairs / 4;
    constexpr int kChunks = BN / 8;          // 16-byte chunks of a row
    constexpr int kRowsPerInstr = 32 / kChunks;
    constexpr int kInstr = kPairsPerWarp / kRowsPerInstr;
    const int pt = tid - 256, pw = pt >> 5, lane = tid & 31;
    const int64_t v0 = n0 / a.L;
    // A warp's pairs are rows row_w .. row_w + kPairsPerWarp - 1 (row_w a multiple of 8) of one
    // vector, vec_w. Lane l < kPairsPerWarp holds the index of row row_w + l; a copy instruction j
    // reads row row_w + j * kRowsPerInstr + sub, chunk `chunk`.
    const int vec_w = pw * kPairsPerWarp / kRows, row_w = pw * kPairsPerWarp % kRows;
    const int my_row = row_w + (lane < kPairsPerWarp ? lane : 0);
    const bool vec_ok = v0 + vec_w < a.q && lane < kPairsPerWarp;
    const int chunk = lane % kChunks, sub = lane / kChunks;
    const int64_t tok = t0 + 8 * chunk;
    const bool tok_ok = tok < a.m_pad;
    const uint16_t* const xt_tok = a.xT + (tok_ok ? tok : 0);
    const uint32_t m_pad32 = static_cast<uint32_t>(a.m_pad);
    const uint32_t mask = static_cast<uint32_t>(a.M - 1);
    const uint8_t* const idx_col = a.indices + v0 + vec_w;
    // The index byte of this lane's row in stage st, 256 where the row is past w, the stage past
    // the block's range or the vector past n. Loaded kLookahead stages before its use, in its own
    // register: the loop below is unrolled by kLookahead so that no stage waits on its index load.
    auto index_byte = [&](int64_t st) -> uint32_t {
      const int64_t gr = st * kRows + my_row;
      return vec_ok && st < st_end && gr < a.w ? static_cast<uint32_t>(__ldg(idx_col + gr * a.q)) : 256u;
    };
    int s = 0, use = 0;
    auto stage = [&](int i, uint32_t& qb) {
      const int64_t gst = st_begin + i;
      const int64_t gr = gst * kRows + my_row;
      const int cur = qb < 256u ? static_cast<int>((gr / a.N) * a.M + (qb & mask)) : -1;  // position in k
      qb = index_byte(gst + kLookahead);
      if (i >= S) mbar_wait(bar_empty + 8 * s, (use - 1) & 1);
      const uint32_t st = sbase + s * g.stage_bytes, full = bar_full + 8 * s;
      if (pt == 0) {
        const int row0 = static_cast<int>(gst * kRows);
        mbar_arrive_expect_tx(full, 2 * kValueBoxBytes);
        tensor_load_2d(st + g.a_off, &tm_v, static_cast<int>(n0), row0, full);
        tensor_load_2d(st + g.a_off + kValueBoxBytes, &tm_v, static_cast<int>(n0) + 64, row0, full);
      }
      // The lane's destination base (opaque per stage, so that the compile-time offsets of the
      // instructions below are added here rather than held in the producer's 40 registers).
      int ch = chunk;
      asm volatile("" : "+r"(ch));
      unsigned char* const tile = smem + s * g.stage_bytes + g.b_off + vec_w * g.b_bytes +
                                  ((row_w >> 3) * (BN / 64) << 10) + ((ch >> 3) << 10);
#pragma unroll
      for (int j = 0; j < kInstr; ++j) {
        const int r = j * kRowsPerInstr + sub;  // row within the warp's rows
        const int pos = __shfl_sync(0xffffffffu, cur, r);
        const bool ok = pos >= 0 && tok_ok;
        const int dst = ((r >> 3) * (BN / 64) << 10) + ((r & 7) << 7) + (((ch & 7) ^ (r & 7)) << 4);
        // 32 x 32 -> 64-bit row offset (pos < 2^31, m_pad < 2^32); a refused row reads nothing.
        const uint64_t off = static_cast<uint64_t>(static_cast<uint32_t>(max(pos, 0))) * m_pad32;
        cp_async_16(tile + dst, xt_tok + off, ok);
      }
      // The slot's barrier counts this thread's arrival once these copies have landed.
      cp_async_arrive_noinc(full);
      if (++s == S) {
        s = 0;
        ++use;
      }
    };
    static_assert(kLookahead == 4, "the queue below holds four stages");
    uint32_t q0 = index_byte(st_begin), q1 = index_byte(st_begin + 1), q2 = index_byte(st_begin + 2),
             q3 = index_byte(st_begin + 3);
    for (int i = 0; i < nloc; i += 4) {
      stage(i, q0);
      if (i + 1 < nloc) stage(i + 1, q1);
      if (i + 2 < nloc) stage(i + 2, q2);
      if (i + 3 < nloc) stage(i + 3, q3);
    }
  } else {
    setmaxnreg_inc<232>();
    const int wg = tid >> 7;  // consumer warpgroup: outputs 64 wg .. 64 wg + 63
    const int warp = (tid & 127) >> 5, lane = tid & 31;
    const int r0 = 64 * wg + 16 * warp + (lane >> 2);  // this thread's rows r0 and r0 + 8 of the tile
    const int tile = V == 2 ? wg : 0;                   // the vector whose gathered rows it reads
    float acc[kAcc];
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
    int s = 0, phase = 0, prev = S - 1;  // ring slots of stages i and i - 1
    for (int i = 0; i < nloc; ++i) {
      mbar_wait(bar_full + 8 * s, phase);
      fence_proxy_async_smem();  // the gathered rows were written by cp.async (generic proxy)
      const uint32_t st = sbase + s * g.stage_bytes;
      fence_accumulators(acc);
      wgmma_fence();
#pragma unroll
      for (int step = 0; step < kRows / 16; ++step) {
        // A: slots 16 step .. of this warpgroup's values box (8-slot groups 1024 B apart);
        // B: slots 16 step .. of the gathered tile (token atoms 1024 B apart, 8-slot groups BN * 16 B).
        const uint64_t da = smem_desc(st + g.a_off + wg * kValueBoxBytes + step * 2048, 1024, 1024);
        const uint64_t db = smem_desc(st + g.b_off + tile * g.b_bytes + step * 2 * (BN / 64) * 1024, 1024,
                                      (BN / 64) * 1024);
        WgmmaDenseMnB<T, BN>::mma(da, db, acc);
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

template <typename T, int BN, int V>
cudaError_t launch_kernel(const Args& a, const CUtensorMap& tm_v, cudaStream_t stream) {
  auto kern = gather_wgmma_kernel<T, BN, V>;
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
  return cudaLaunchKernelEx(&cfg, kern, a, tm_v);
}

// The main kernel for a problem the entry has checked, after the transpose into xT.
template <typename T, int BN>
cudaError_t launch_tile(const HalfSpmmParams& p, const void* xT, int64_t m_pad, cudaStream_t stream) {
  Args a{};
  a.g = make_geometry(p.L, BN);
  a.xT = static_cast<const uint16_t*>(xT);
  a.indices = p.indices;
  a.bias = static_cast<const uint16_t*>(p.bias);
  a.y = static_cast<uint16_t*>(p.y);
  a.m = p.m;
  a.n = p.n;
  a.k = p.k;
  a.m_pad = m_pad;
  a.w = p.k / p.M * p.N;
  a.q = p.n / p.L;
  a.N = p.N;
  a.M = p.M;
  a.L = p.L;
  a.split = p.split_k;
  CUtensorMap tm_v;
  if (!sparse_tc::encode_map(&tm_v, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, p.values, a.w, p.n, p.n * 2, kRows, 64,
                             CU_TENSOR_MAP_SWIZZLE_128B))
    return cudaErrorInvalidValue;
  return a.g.vectors == 2 ? launch_kernel<T, BN, 2>(a, tm_v, stream) : launch_kernel<T, BN, 1>(a, tm_v, stream);
}

}  // namespace gather_wgmma
}  // namespace kernels
}  // namespace nmspmm
