// Argument checks of the unstructured CSR ops (csr_spmm, csr_decompress), shared by the CPU and
// CUDA implementations. They check what does not need the data (types, ranks, sizes, devices); the
// index data is checked where a weight enters (nmspmm.CSRWeight) and the kernels mask what they
// read (docs/format.md, "Unstructured CSR weights").
#pragma once
#include <torch/all.h>

#include <limits>

#include "checks.h"

namespace nmspmm {

// crow_indices int32 [out + 1], col_indices int32 [nnz], values [nnz] (float32 / float16 /
// bfloat16), one device; returns out_features.
inline int64_t check_csr(const char* op, const at::Tensor& crow_indices, const at::Tensor& col_indices,
                         const at::Tensor& values, int64_t in_features) {
  TORCH_CHECK(crow_indices.dim() == 1 && crow_indices.size(0) >= 1 && crow_indices.scalar_type() == at::kInt,
              op, ": crow_indices must be a 1-D int32 tensor of out_features + 1 entries, got ",
              crow_indices.scalar_type(), " ", crow_indices.sizes());
  TORCH_CHECK(col_indices.dim() == 1 && col_indices.scalar_type() == at::kInt, op,
              ": col_indices must be a 1-D int32 tensor [nnz], got ", col_indices.scalar_type(), " ",
              col_indices.sizes());
  TORCH_CHECK(values.dim() == 1 && is_float_type(values.scalar_type()), op,
              ": values must be a 1-D float32, float16 or bfloat16 tensor [nnz], got ", values.scalar_type(), " ",
              values.sizes());
  TORCH_CHECK(values.size(0) == col_indices.size(0), op, ": values has ", values.size(0),
              " entries but col_indices has ", col_indices.size(0));
  TORCH_CHECK(crow_indices.device() == values.device() && col_indices.device() == values.device(), op,
              ": crow_indices (", crow_indices.device(), "), col_indices (", col_indices.device(),
              ") and values (", values.device(), ") must be on one device");
  TORCH_CHECK(values.size(0) <= std::numeric_limits<int32_t>::max(), op,
              ": at most 2^31 - 1 nonzeros (int32 indices), got ", values.size(0));
  TORCH_CHECK(in_features >= 0 && in_features <= std::numeric_limits<int32_t>::max(), op,
              ": in_features must be in [0, 2^31 - 1], got ", in_features);
  return crow_indices.size(0) - 1;
}

// x [..., in_features] and bias [out_features] against the weight's values; returns out_features.
inline int64_t check_csr_spmm(const at::Tensor& x, const at::Tensor& crow_indices, const at::Tensor& col_indices,
                              const at::Tensor& values, int64_t in_features, const std::optional<at::Tensor>& bias) {
  const int64_t out = check_csr("nmspmm.csr_spmm", crow_indices, col_indices, values, in_features);
  TORCH_CHECK(x.dim() >= 1, "nmspmm.csr_spmm: x must have at least one dimension [..., in_features]");
  TORCH_CHECK(x.scalar_type() == values.scalar_type(), "nmspmm.csr_spmm: x has dtype ", x.scalar_type(),
              " but the weight values have dtype ", values.scalar_type());
  TORCH_CHECK(x.device() == values.device(), "nmspmm.csr_spmm: x is on ", x.device(), " but the weight is on ",
              values.device());
  TORCH_CHECK(x.size(-1) == in_features, "nmspmm.csr_spmm: x.shape[-1]=", x.size(-1),
              " does not match the weight's in_features=", in_features);
  if (bias.has_value()) {
    const at::Tensor& b = *bias;
    TORCH_CHECK(b.dim() == 1 && b.size(0) == out, "nmspmm.csr_spmm: bias must have shape [", out, "], got ",
                b.sizes());
    TORCH_CHECK(b.scalar_type() == x.scalar_type(), "nmspmm.csr_spmm: bias has dtype ", b.scalar_type(),
                " but x has dtype ", x.scalar_type());
    TORCH_CHECK(b.device() == x.device(), "nmspmm.csr_spmm: bias is on ", b.device(), " but x is on ", x.device());
  }
  return out;
}

}  // namespace nmspmm
