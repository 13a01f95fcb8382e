// Launchers of the cluster decode kernels (spmm_decode_cluster.cu, spmm_decode_staged.cu);
// launch_spmm is their only caller.
#pragma once
#include "spmm.h"

namespace nmspmm {
namespace kernels {

// Largest cluster of the decode kernels: above 8 blocks a cluster size is non-portable (H100 and
// H200 take 16). Matches kMaxDecodeCluster in csrc/registry.h.
constexpr int kMaxDecodeClusterSize = 16;

// m <= 2, L >= 4: `warps` warps per block (4, 8 or 16) and p.split_k blocks per cluster
// (1..kMaxDecodeClusterSize) splitting k. Needs compute capability 9.0 (thread-block clusters).
cudaError_t launch_decode_cluster(const SpmmParams& p, int warps, cudaStream_t stream);

// m <= 16, L >= 4, M <= 512 (spmm_decode_staged.cu): 8 warps per block over 128 x `col_warps`
// (1, 2 or 4) output columns, p.split_k blocks per cluster (1..kMaxDecodeClusterSize) splitting k. Needs
// compute capability 9.0.
cudaError_t launch_decode_staged(const SpmmParams& p, int col_warps, cudaStream_t stream);

// Whether the current device places a cluster of `size` blocks of the largest staged decode block
// (8 warps, 64 KiB of shared memory): a host-side occupancy query, no launch.
cudaError_t decode_staged_places_cluster(int size, bool* ok);

}  // namespace kernels
}  // namespace nmspmm
