// Launcher of the cluster decode kernel (spmm_decode_cluster.cu); launch_spmm is its only caller.
#pragma once
#include "spmm.h"

namespace nmspmm {
namespace kernels {

// m <= 2, L >= 4: `warps` warps per block (4, 8 or 16) and p.split_k blocks per cluster (1, 2, 4
// or 8) splitting k. Needs compute capability 9.0 (thread-block clusters).
cudaError_t launch_decode_cluster(const SpmmParams& p, int warps, cudaStream_t stream);

}  // namespace kernels
}  // namespace nmspmm
