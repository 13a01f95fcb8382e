// The fp32 entry points of the dense-expansion plan (dense_expand_f32; kernels in
// half/expand_dense.cu, which holds the 16-bit ones too, declared in half/spmm_half.h). Torch-free.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "spmm.h"

namespace nmspmm {
namespace kernels {

// Expands the compressed fp32 weight (p.values, p.indices, p.n, p.k, p.N, p.M, p.L) into the dense
// W[n, k] at `dense` (n * k floats). A position repeated within a (window, vector) adds its values.
cudaError_t launch_expand_dense_f32(const SpmmParams& p, float* dense, cudaStream_t stream);
// After the dense product y = x W^T (+ bias) at p.y (row stride ldy; x, bias, values, indices from
// p): recomputes from the kept inputs only the rows whose y[i, 0] is NaN or Inf, i.e. the rows of x
// holding a non-finite value, so that a non-finite x at a pruned position is not read.
cudaError_t launch_regather_non_finite_rows_f32(const SpmmParams& p, int64_t ldy, cudaStream_t stream);

}  // namespace kernels
}  // namespace nmspmm
