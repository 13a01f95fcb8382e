// Launch functions of the kernels in spmm_small.cu; the launcher (spmm_launch.cu) is their caller.
#pragma once
#include "spmm.h"

namespace nmspmm {
namespace kernels {

// generic_f32: any N:M:L pattern.
cudaError_t launch_generic(const SpmmParams& p, cudaStream_t stream);
// decode_f32_splitk: m <= 16, any L (L < 4 runs spmm_decode_splitk.cuh's kernel); p.split_k blocks
// along k, partial sums to p.workspace when p.split_k > 1 (reduced by launch_reduce_splits).
cudaError_t launch_decode_splitk(const SpmmParams& p, cudaStream_t stream);
// p.xt[c][i] = p.x[i][c] (zero rows up to p.ldxt): the k-major copy the tiled kernels read.
cudaError_t launch_transpose_x(const SpmmParams& p, cudaStream_t stream);
// p.y = sum of the p.split_k partial outputs in p.workspace (+ bias), in fixed order, any n; with
// programmatic dependent launch when p.overlap_launches.
cudaError_t launch_reduce_splits(const SpmmParams& p, cudaStream_t stream);

}  // namespace kernels
}  // namespace nmspmm
