// Unstructured sparse weights in CSR (rows = outputs): y[m, n] = x[m, k] W^T (+ bias), fp32
// accumulation. Torch-free: pointers, sizes and a stream in, a CUDA error code out.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace nmspmm {
namespace kernels {

enum class CsrType { kF32, kF16, kBF16 };

struct CsrSpmmParams {
  const void* x;                 // [m, k], row stride ldx elements, unit column stride
  int64_t ldx;
  const int32_t* crow_indices;   // [n + 1]
  const int32_t* col_indices;    // [nnz]
  const void* values;            // [nnz], the dtype of x
  const void* bias;              // [n] or nullptr
  void* y;                       // [m, n], contiguous
  int64_t m, n, k, nnz;
  CsrType dtype;
};

// One warp per output row and chunk of up to 8 tokens; every index is masked where it is read (a
// row's range clamped to [0, nnz], columns outside [0, k) skipped), so no content of the index
// arrays makes the kernel read outside its inputs. cudaErrorInvalidValue for sizes it does not
// take (n or k beyond 2^31 - 1).
cudaError_t launch_csr_spmm_warp_row(const CsrSpmmParams& p, cudaStream_t stream);

// x transposed into `workspace` (csr_xt_gather_workspace_bytes), then groups of lanes read each
// nonzero's tokens of it from global memory, the nonzeros of each block's rows split evenly over its
// groups (long rows spread, short rows share). A block takes 8 or 16 rows, or with `balanced` (for
// rows of uneven length) an equal share of the nonzeros, rows cut at the shares' ends up to 512
// tokens (their partial sums in the workspace, added by a second kernel in block order). The same
// masking as csr_spmm_warp_row; cudaErrorInvalidValue also for nnz >= 2^31 or a null workspace.
// `overlap` (sm_90): the kernels after the transpose start while the one before them runs
// (programmatic dependent launch), reading the weight's row pointers meanwhile; nothing after the
// call starts early.
cudaError_t launch_csr_spmm_xt_gather(const CsrSpmmParams& p, void* workspace, bool balanced, bool overlap,
                                      cudaStream_t stream);
// Tokens of the transposed x, m rounded up to the group's token count (16 to 128; fp32 8 to 64).
int64_t csr_xt_gather_tokens(int64_t m, size_t elem_bytes);
// Bytes of launch_csr_spmm_xt_gather's workspace: the transposed x, and with `balanced` the partial
// sums of the rows cut across blocks.
int64_t csr_xt_gather_workspace_bytes(int64_t m, int64_t n, int64_t k, CsrType dtype, bool balanced);

// For m <= kCsrXSharedMaxM where all of x fits in one block's shared memory (csr_x_shared_fits):
// one block per SM stages x as [k][m rounded up to 1, 2, 4 or 8], takes a range of rows of about
// nnz / SMs nonzeros, and cuts each tile of its rows' nonzeros into one equal part per warp, so
// rows of any lengths share the SMs evenly. The same masking as csr_spmm_warp_row;
// cudaErrorInvalidValue also for nnz >= 2^31 or a call that does not fit.
constexpr int64_t kCsrXSharedMaxM = 8;
bool csr_x_shared_fits(int64_t m, int64_t k, size_t elem_bytes);
cudaError_t launch_csr_spmm_x_shared(const CsrSpmmParams& p, cudaStream_t stream);

}  // namespace kernels
}  // namespace nmspmm
