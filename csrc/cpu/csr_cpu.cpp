// CPU reference of nmspmm::csr_spmm: y[t, j] = sum over row j's nonzeros p of values[p] *
// x[t, col_indices[p]] (+ bias[j]), in fp32, with the masking of the CUDA kernel (a row's range
// clamped to [0, nnz], columns outside [0, in) skipped), so both agree on any index content. x
// columns that a row does not keep are never read.
#include <torch/all.h>

#include <vector>

#include "../csr_checks.h"

namespace nmspmm {
namespace {

at::Tensor csr_spmm_cpu(const at::Tensor& x, const at::Tensor& crow_indices, const at::Tensor& col_indices,
                        const at::Tensor& values, int64_t in_features, const std::optional<at::Tensor>& bias,
                        int64_t /*max_row_nnz: a kernel-choice hint of the CUDA implementation*/) {
  const int64_t out = check_csr_spmm(x, crow_indices, col_indices, values, in_features, bias);
  const int64_t m = spmm_rows(x), k = in_features, nnz = values.size(0);
  const at::Tensor xf = x.reshape({m, k}).to(at::kFloat).contiguous();
  const at::Tensor vf = values.to(at::kFloat).contiguous();
  const at::Tensor crow = crow_indices.contiguous(), col = col_indices.contiguous();
  at::Tensor y = at::zeros({m, out}, xf.options());
  const float* xp = xf.data_ptr<float>();
  const float* vp = vf.data_ptr<float>();
  const int32_t* rp = crow.data_ptr<int32_t>();
  const int32_t* cp = col.data_ptr<int32_t>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, out, 16, [&](int64_t first, int64_t last) {
    for (int64_t j = first; j < last; ++j) {
      int64_t begin = rp[j], end = rp[j + 1];
      begin = begin < 0 ? 0 : begin > nnz ? nnz : begin;
      end = end < begin ? begin : end > nnz ? nnz : end;
      for (int64_t t = 0; t < m; ++t) {
        float acc = 0.f;
        for (int64_t q = begin; q < end; ++q) {
          const int64_t c = cp[q];
          if (c >= 0 && c < k) acc += vp[q] * xp[t * k + c];
        }
        yp[t * out + j] = acc;
      }
    }
  });
  if (bias.has_value()) y.add_(bias->to(at::kFloat));
  return y.to(x.scalar_type()).reshape(spmm_out_shape(x, out));
}

}  // namespace

TORCH_LIBRARY_IMPL(nmspmm, CPU, m) { m.impl("csr_spmm", &csr_spmm_cpu); }

}  // namespace nmspmm
