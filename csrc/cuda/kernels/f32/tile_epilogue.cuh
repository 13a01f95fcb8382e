// Epilogue of a block's BM x BN output tile held as TM x 8 accumulators per thread: thread rows
// ti + 32 * (i / 4) + i % 4 (i < TM), columns tj + {0..3} and tj + 16 + {0..3}. Three ways out:
//   cluster_reduce (sm_90, split-K 2..8 inside a thread-block cluster, rank = blockIdx.z): every
//     block parks its partial tile in its own shared memory; block r sums the slots j with
//     j % split_k == r over the ranks 0, 1, ..., split_k - 1 in that order (+ bias) through
//     distributed shared memory: the order of reduce_splits, so bitwise the workspace result;
//   bulk_store (sm_90): the tile (or split-K partial tile) staged row-major in shared memory and
//     each row written by one bulk asynchronous copy (bulk_store.cuh);
//   otherwise 2 x TM 16-byte stores per thread, into y or the split's workspace slice.
// The caller's shared memory must hold max(BM x BN, BM x (BN + 4)) floats, and every warp must be
// done with its main loop's shared memory (this function starts with a block barrier).
#pragma once
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/common/bulk_store.cuh"
#include "cuda/kernels/common/cluster_barrier.cuh"
#include "cuda/kernels/common/launch_overlap.cuh"
#include "spmm.h"

namespace nmspmm {
namespace kernels {

template <int TM, int BM, int BN, int THREADS>
__device__ __forceinline__ void store_output_tile(const float (&acc)[TM][8], const SpmmParams& p,
                                                  float4* smem_f4, int tid, int ti, int tj, int64_t m0,
                                                  int64_t n0) {
  const int64_t M_ = p.m, N_ = p.n;
  if (p.cluster_reduce) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    __trap();  // the launchers refuse cluster_reduce on devices without clusters; never reached
#else
    namespace cg = cooperative_groups;
    const cg::cluster_group cluster = cg::this_cluster();
    const int splits = p.split_k;
    const int rank = static_cast<int>(blockIdx.z);
    float4* const part = smem_f4;
    __syncthreads();  // every warp is done reading its last stage
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int g = 0; g < 2; ++g)
        part[(2 * i + g) * THREADS + tid] =
            make_float4(acc[i][4 * g], acc[i][4 * g + 1], acc[i][4 * g + 2], acc[i][4 * g + 3]);
    cluster.sync();
#pragma unroll 1
    for (int j = rank; j < 2 * TM; j += splits) {
      const int i = j / 2, g = j % 2;
      const int64_t row = m0 + ti + 32 * (i / 4) + (i % 4);
      const int64_t col = n0 + tj + 16 * g;
      if (row >= M_ || col >= N_) continue;
      float4* const slot = part + j * THREADS + tid;
      float4 v = *cluster.map_shared_rank(slot, 0);
#pragma unroll 1
      for (int r = 1; r < splits; ++r) {
        const float4 o = *cluster.map_shared_rank(slot, r);
        v.x += o.x; v.y += o.y; v.z += o.z; v.w += o.w;
      }
      if (p.bias != nullptr) {
        const float4 bb = *reinterpret_cast<const float4*>(p.bias + col);
        v.x += bb.x; v.y += bb.y; v.z += bb.z; v.w += bb.w;
      }
      *reinterpret_cast<float4*>(p.y + row * N_ + col) = v;
    }
    cluster_sync_before_exit();  // no block leaves while another still reads its shared memory
#endif
    return;
  }
  const bool split = p.split_k > 1;
  float* const out = split ? p.workspace + static_cast<int64_t>(blockIdx.z) * M_ * N_ : p.y;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (p.bulk_store) {
    // Rows of BN + 4 floats: 16-byte aligned, and the STS.128 of a warp's 8 rows x 4 column groups
    // spread over all 32 banks. Rows past m are not written; columns past n are not copied.
    constexpr int CS = BN + 4;
    float* const Cs = reinterpret_cast<float*>(smem_f4);
    __syncthreads();  // every warp is done reading its last stage
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int r = ti + 32 * (i / 4) + (i % 4);
#pragma unroll
      for (int g = 0; g < 2; ++g) {
        const int c = tj + 16 * g;
        float4 v = make_float4(acc[i][4 * g], acc[i][4 * g + 1], acc[i][4 * g + 2], acc[i][4 * g + 3]);
        if (!split && p.bias != nullptr && n0 + c < N_) {
          const float4 bb = *reinterpret_cast<const float4*>(p.bias + n0 + c);
          v.x += bb.x; v.y += bb.y; v.z += bb.z; v.w += bb.w;
        }
        *reinterpret_cast<float4*>(Cs + r * CS + c) = v;
      }
    }
    bulk_store_fence();
    __syncthreads();
    const int64_t cols = N_ - n0 < BN ? N_ - n0 : BN;
    for (int r = tid; r < BM; r += THREADS) {
      if (m0 + r < M_) bulk_store_row(out + (m0 + r) * N_ + n0, Cs + r * CS, static_cast<uint32_t>(cols * 4));
    }
    bulk_store_commit_and_wait_read();
    return;
  }
#endif
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int64_t row = m0 + ti + 32 * (i / 4) + (i % 4);
    if (row >= M_) continue;
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      const int64_t col = n0 + tj + 16 * g;
      if (col >= N_) continue;
      float4 v = make_float4(acc[i][4 * g], acc[i][4 * g + 1], acc[i][4 * g + 2], acc[i][4 * g + 3]);
      if (!split && p.bias != nullptr) {
        const float4 bb = *reinterpret_cast<const float4*>(p.bias + col);
        v.x += bb.x; v.y += bb.y; v.z += bb.z; v.w += bb.w;
      }
      *reinterpret_cast<float4*>(out + row * N_ + col) = v;
    }
  }
}

// Launch attributes of the kernels that end in store_output_tile, pointed to by cfg: with
// p.cluster_reduce the split_k blocks of a tile (along z) form one thread-block cluster (a split
// the epilogue cannot reduce is refused: 2..8 ranks, at most 2 x TM slots per thread); with
// p.dependent_launch the kernel may start while the one before it in the stream runs.
inline cudaError_t set_tile_launch_attributes(const SpmmParams& p, int tm, cudaLaunchAttribute (&attr)[2],
                                              cudaLaunchConfig_t& cfg) {
  cfg.numAttrs = 0;
  if (p.cluster_reduce) {
    if (p.split_k < 2 || p.split_k > 8 || 2 * tm < p.split_k) return cudaErrorInvalidValue;
    attr[cfg.numAttrs++] = cluster_attribute(dim3(1, 1, static_cast<unsigned>(p.split_k)));
  }
  if (p.dependent_launch) attr[cfg.numAttrs++] = dependent_launch_attribute();
  cfg.attrs = attr;
  return cudaSuccess;
}

}  // namespace kernels
}  // namespace nmspmm
