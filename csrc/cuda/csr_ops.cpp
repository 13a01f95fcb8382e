// CUDA binding of nmspmm::csr_spmm (unstructured CSR weights): checks the arguments
// (csrc/csr_checks.h, the CPU reference's messages), views x as [m, in] with unit column stride,
// allocates y (and, for csr_spmm_xt_gather, its workspace: the transposed x it reads) and launches on the current
// stream, for m <= 8, csr_spmm_warp_row (one warp per row and chunk of up to 8 tokens, gathering x
// from global memory) or, where the rows are uneven, csr_spmm_x_shared (x staged per SM, nonzeros
// balanced over blocks and warps) if x fits in shared memory; otherwise csr_spmm_xt_gather (nonzeros
// balanced over blocks and groups; kernels/csr/). Nothing is synchronized, so the call is CUDA-graph
// capturable.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/all.h>

#include <atomic>

#include "../ab_switches.h"
#include "../csr_checks.h"
#include "kernels/csr/csr_spmm.h"

namespace nmspmm {
namespace {

// Whether `device` is sm_90 or newer (programmatic dependent launch), asked once per device.
bool launches_overlap(int device) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> major[kMaxDevices] = {};  // 0: not asked yet
  if (device < 0 || device >= kMaxDevices) return false;
  int v = major[device].load(std::memory_order_relaxed);
  if (v == 0) {
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, device));
    major[device].store(v, std::memory_order_relaxed);
  }
  return v >= 9;
}

kernels::CsrType csr_type(at::ScalarType t) {
  return t == at::kFloat ? kernels::CsrType::kF32 : t == at::kHalf ? kernels::CsrType::kF16 : kernels::CsrType::kBF16;
}

at::Tensor csr_spmm_cuda(const at::Tensor& x, const at::Tensor& crow_indices, const at::Tensor& col_indices,
                         const at::Tensor& values, int64_t in_features, const std::optional<at::Tensor>& bias,
                         int64_t max_row_nnz) {
  const int64_t out = check_csr_spmm(x, crow_indices, col_indices, values, in_features, bias);
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t m = spmm_rows(x), k = in_features;
  if (k == 0) return spmm_no_inputs(x, out, bias).reshape(spmm_out_shape(x, out));
  at::Tensor x2 = x.reshape({m, k});
  if (x2.stride(1) != 1 || (m > 1 && x2.stride(0) < k)) x2 = x2.contiguous();
  const at::Tensor crow = crow_indices.contiguous(), col = col_indices.contiguous(), vals = values.contiguous();
  at::Tensor b;
  if (bias.has_value()) b = bias->contiguous();
  at::Tensor y = at::empty({m, out}, x.options());
  if (m == 0) return y.reshape(spmm_out_shape(x, out));  // no tokens: nothing to launch
  kernels::CsrSpmmParams p{};
  p.x = x2.data_ptr();
  p.ldx = m > 1 ? x2.stride(0) : k;
  p.crow_indices = crow.data_ptr<int32_t>();
  p.col_indices = col.data_ptr<int32_t>();
  p.values = vals.data_ptr();
  p.bias = b.defined() ? b.data_ptr() : nullptr;
  p.y = y.data_ptr();
  p.m = m;
  p.n = out;
  p.k = k;
  p.nnz = vals.size(0);
  p.dtype = csr_type(x.scalar_type());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  // Uneven rows (the longest at least 4x the mean, by the caller's max_row_nnz) take a kernel that
  // balances nonzeros over blocks: one warp per row leaves them to the longest row. At m <= 8 the
  // x_shared kernel (on an H200, 1.1-6.2x faster than warp_row on heavy-tailed rows at m = 1 and 8;
  // on rows of even length warp_row is 1.0-2.1x faster), and xt_gather where x does not fit.
  const bool uneven = max_row_nnz >= 0 && p.nnz > 0 && max_row_nnz * out >= 4 * p.nnz;
  const bool fits = kernels::csr_x_shared_fits(m, k, x.element_size());
  const bool x_shared = uneven && m <= ab_switches().csr_x_shared_max_m && fits;
  const bool gather_uneven = uneven && !fits && m >= 1 && m <= kernels::kCsrXSharedMaxM;  // x too large to stage
  const bool warp_row = !x_shared && !gather_uneven && m <= ab_switches().csr_warp_row_max_m;
  const char* kernel = x_shared ? "csr_spmm_x_shared" : warp_row ? "csr_spmm_warp_row" : "csr_spmm_xt_gather";
  cudaError_t err;
  if (x_shared) {
    err = kernels::launch_csr_spmm_x_shared(p, stream);
  } else if (warp_row) {
    err = kernels::launch_csr_spmm_warp_row(p, stream);
  } else {
    const at::Tensor ws =
        at::empty({kernels::csr_xt_gather_workspace_bytes(m, out, k, p.dtype, uneven)}, x.options().dtype(at::kByte));
    // The kernels after the transpose of x start while it runs (sm_90): they read the weight's
    // row pointers, which no kernel of this call writes, before they wait for it.
    const bool overlap = launches_overlap(x.get_device()) && ab_switches().xt_overlap;
    err = kernels::launch_csr_spmm_xt_gather(p, ws.data_ptr(), uneven, overlap, stream);
  }
  TORCH_CHECK(err == cudaSuccess, "nmspmm.csr_spmm: kernel ", kernel, " failed for m=", m, " n=", out,
              " k=", k, " nnz=", p.nnz, ": ", cudaGetErrorString(err));
  return y.reshape(spmm_out_shape(x, out));
}

}  // namespace

TORCH_LIBRARY_IMPL(nmspmm, CUDA, m) { m.impl("csr_spmm", &csr_spmm_cuda); }

}  // namespace nmspmm
