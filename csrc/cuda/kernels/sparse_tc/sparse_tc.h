// Torch-free C entry of the 2:4 kernels on the sparse tensor cores (sm_90a, wgmma.mma_async.sp):
// y[m, n] = x[m, k] * W^T (+ bias) for a weight W[n, k] under N:M = 2:4 with any vector length L,
// fp16 / bf16 in and out, fp32 accumulation. The weight is read as two tensors:
//   values [k / 2, n]: the canonical compressed values (docs/format.md), read as the sparse operand
//                     in its M-major form (no copy);
//   meta   [ceil(k / 32), meta_ld] uint32: the positions in the hardware's nibble form
//                     (docs/format.md, "Sparse tensor-core metadata"; built by launch_sparse_tc_meta).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/half/spmm_half.h"

namespace nmspmm {
namespace kernels {

struct SparseTcParams {
  const void* x;         // [m, k], row stride ldx elements (ldx % 8 == 0), 16-byte aligned
  int64_t ldx;
  const void* values;    // [k / 2, n], contiguous, 16-byte aligned
  const uint32_t* meta;  // [ceil(k / 32), meta_ld], contiguous, 16-byte aligned
  int64_t meta_ld;       // >= n / L, a multiple of 4
  const void* bias;      // [n] or nullptr
  void* y;               // [m, n], contiguous, 16-byte aligned
  int64_t m, n, k;
  int L;                 // vector length: a power of two in [1, 128]
  int split_k;           // 1, 2, 4 or 8: k split over the blocks of a cluster, summed on chip
  HalfType dtype;
};

// Tokens per block (the wgmma's n): 256, 128 (two blocks per SM) and 64 for prefill, 16 for decode.
constexpr int kSparseTcTileOut = 128;
bool sparse_tc_tile_supported(int tile_tokens);

// Whether the kernels can run the problem's shapes (the tensor copies' alignment: k % 8 == 0,
// n % 8 == 0, ldx % 8 == 0; coordinates within 31 bits), independent of the data.
bool sparse_tc_shape_ok(int64_t m, int64_t n, int64_t k, int64_t ldx, int L);

// Runs the kernel with blocks of 128 outputs x tile_tokens tokens. cudaErrorInvalidDevice on a
// device other than compute capability 9.0 (the body is built for sm_90a only),
// cudaErrorInvalidValue for shapes, alignments or a split it does not take.
cudaError_t launch_sparse_tc(const SparseTcParams& p, int tile_tokens, cudaStream_t stream);

}  // namespace kernels
}  // namespace nmspmm
