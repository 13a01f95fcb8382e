// The kernel parameter fields that the CUDA SpMM bindings (spmm_ops.cpp, spmm_half_prefill.cpp,
// spmm_half_decode.cpp) fill alike. Host-only.
#pragma once
#include <torch/all.h>

#include <cstdint>

#include "kernels/half/spmm_half.h"

namespace nmspmm {

// The problem of kernels::SpmmParams and kernels::HalfSpmmParams: y[m, n] = x[m, k] W^T, W in the
// N:M pattern with vector length L, k split split_k ways.
template <class Params>
inline void set_problem(Params& p, int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int64_t L, int split_k) {
  p.m = m;
  p.n = n;
  p.k = k;
  p.N = static_cast<int>(N);
  p.M = static_cast<int>(M);
  p.L = static_cast<int>(L);
  p.split_k = split_k;
}

// The native fp16 / bf16 kernels' parameters for y = x W^T (+ bias): x [m, k] with row stride ldx,
// the compressed values [w, n] and indices, bias (undefined: none) and y [m, n] (undefined: set
// later), all in x's dtype. No scratch.
inline kernels::HalfSpmmParams half_params(const at::Tensor& x, int64_t ldx, const at::Tensor& values,
                                           const at::Tensor& indices, const at::Tensor& bias, const at::Tensor& y,
                                           int64_t N, int64_t M, int64_t L, int split_k) {
  kernels::HalfSpmmParams p{};
  p.x = x.data_ptr();
  p.ldx = ldx;
  p.values = values.data_ptr();
  p.indices = indices.data_ptr<uint8_t>();
  p.bias = bias.defined() ? bias.data_ptr() : nullptr;
  p.y = y.defined() ? y.data_ptr() : nullptr;
  set_problem(p, x.size(0), values.size(1), x.size(1), N, M, L, split_k);
  p.dtype = x.scalar_type() == at::kBFloat16 ? kernels::HalfType::kBF16 : kernels::HalfType::kF16;
  return p;
}

}  // namespace nmspmm
