// The launch and the epilogue shared by the decode kernels that split k over the warps of a block and over the
// blocks of a thread-block cluster (sm_90; spmm_decode_cluster.cu, spmm_decode_staged.cu).
//
// Each of the block's KW k-warps has written its partial tile (E float4) to red[w * E, (w + 1) * E)
// of shared memory. reduce_over_block_and_cluster adds them in warp order into red[0, E), then
// rank r of the cluster (cs blocks) adds slice r of every block's red[0, E) in rank order through
// distributed shared memory and hands each sum to store(e, sum), e = the element of the tile. The
// order of every addition is fixed: bitwise deterministic, no atomics, no workspace. Batch > 1
// keeps that many remote reads of a sum in flight (the fp16 / bf16 decode kernels use 4: 1.00-1.07x
// at clusters of 2-6 on H100).
//
// Two cluster barriers: before the reads of the other blocks' shared memory, and before exit (no
// block may leave while another still reads its shared memory). Replacing them with a push of the
// slices into the owners' shared memory and an mbarrier per owner measures no faster on
// H100. The first is a full cluster.sync() (its release / acquire
// makes every block's partial tile visible to the others); the second only keeps the blocks
// resident and arrives relaxed (cluster_barrier.cuh).
#pragma once
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cluster_barrier.cuh"
#include "launch_overlap.cuh"
#include "cuda/kernels/f32/spmm.h"

namespace nmspmm {
namespace kernels {

template <int KW, int Batch = 1, class Store>
__device__ __forceinline__ void reduce_over_block_and_cluster(float4* red, int elems, int tid, int nthreads,
                                                              Store&& store) {
  namespace cg = cooperative_groups;
  __syncthreads();
  for (int e = tid; e < elems; e += nthreads) {
    float4 t = red[e];
#pragma unroll
    for (int w = 1; w < KW; ++w) {
      const float4 o = red[w * elems + e];
      t.x += o.x; t.y += o.y; t.z += o.z; t.w += o.w;
    }
    red[e] = t;
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int cs = static_cast<int>(cluster.num_blocks());
  const int slice = (elems + cs - 1) / cs;  // the last rank's slice may be short
  const int rank = static_cast<int>(cluster.block_rank());
  for (int t = tid; t < slice && rank * slice + t < elems; t += nthreads) {
    const int e = rank * slice + t;
    float4 sum = *cluster.map_shared_rank(red + e, 0);
    if (Batch > 1 && cs <= 6) {
      // Batch remote reads in flight (clusters of up to 6 blocks; at 12 they measure 0.90-0.96x);
      // the same order of additions as the loop below.
      for (int j0 = 1; j0 < cs; j0 += Batch) {
        float4 o[Batch];
#pragma unroll
        for (int b = 0; b < Batch; ++b)
          if (j0 + b < cs) o[b] = *cluster.map_shared_rank(red + e, j0 + b);
#pragma unroll
        for (int b = 0; b < Batch; ++b)
          if (j0 + b < cs) { sum.x += o[b].x; sum.y += o[b].y; sum.z += o[b].z; sum.w += o[b].w; }
      }
    } else {
      for (int j = 1; j < cs; ++j) {
        const float4 o = *cluster.map_shared_rank(red + e, j);
        sum.x += o.x; sum.y += o.y; sum.z += o.z; sum.w += o.w;
      }
    }
    store(e, sum);
  }
  cluster_sync_before_exit();  // no block leaves while another still reads its shared memory
}

// Launches kernel(p) on a grid of (tiles, split_k) blocks in which the split_k blocks of a column
// tile form one thread-block cluster, with programmatic
// dependent launch where p.dependent_launch is set. (split_k: 1..16, the launchers check.)
template <class Kernel>
inline cudaError_t launch_split_k_clusters(Kernel kernel, const SpmmParams& p, int64_t tiles, int threads,
                                           size_t smem_bytes, cudaStream_t stream) {
  if (tiles > 0x7fffffff) return cudaErrorInvalidConfiguration;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(p.split_k), 1);
  cfg.blockDim = dim3(static_cast<unsigned>(threads), 1, 1);
  cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2] = {cluster_attribute(dim3(1, static_cast<unsigned>(p.split_k), 1)),
                                 dependent_launch_attribute()};
  cfg.attrs = attr;
  cfg.numAttrs = p.dependent_launch ? 2 : 1;
  return cudaLaunchKernelEx(&cfg, kernel, p);
}

// y[i, c .. c + 3] = v (+ bias[c .. c + 3]) where i < m and c < n (n % 4 == 0, y and bias 16-byte
// aligned: the launchers check).
__device__ __forceinline__ void store_output4(const SpmmParams& p, int64_t i, int64_t c, float4 v) {
  if (i < p.m && c < p.n) {
    if (p.bias != nullptr) {
      const float4 bb = *reinterpret_cast<const float4*>(p.bias + c);
      v.x += bb.x; v.y += bb.y; v.z += bb.z; v.w += bb.w;
    }
    *reinterpret_cast<float4*>(p.y + i * p.n + c) = v;
  }
}

}  // namespace kernels
}  // namespace nmspmm
