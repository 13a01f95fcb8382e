// The 2:4 plans on the sparse tensor cores (sparse_tc_*, csrc/cuda/kernels/sparse_tc/): x, values,
// bias and y as the kernels read them (rows 16-byte aligned, unit column stride), the metadata
// (tc_meta) as given by the weight or, for a raw call without it, built for the call from indices
// into a tensor of the caching allocator. Everything runs on the current stream; nothing
// synchronizes.
#include <c10/cuda/CUDAStream.h>
#include <torch/all.h>

#include <optional>

#include "../registry.h"
#include "kernels/sparse_tc/meta.h"
#include "kernels/sparse_tc/sparse_tc.h"

namespace nmspmm {

namespace {
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
}  // namespace

// The 2:4 metadata a kernel reads: the weight's tc_meta (checked by the caller against the
// pattern's shape), 16-byte aligned, or, for a raw call without it, built for the call.
at::Tensor sparse_tc_meta_for_call(const at::Tensor& indices, int64_t in, int64_t out, int64_t L,
                                   const std::optional<at::Tensor>& tc_meta, cudaStream_t stream) {
  if (tc_meta.has_value()) {
    at::Tensor meta = tc_meta->contiguous();
    return aligned16(meta.data_ptr()) ? meta : meta.clone();
  }
  const int64_t meta_rows = (in + 31) / 32, meta_ld = (out / L + 3) / 4 * 4;
  at::Tensor meta = at::empty({meta_rows, meta_ld}, indices.options().dtype(at::kInt));
  const at::Tensor idx = indices.contiguous();
  const cudaError_t err = kernels::launch_sparse_tc_meta(idx.data_ptr<uint8_t>(), in, out, static_cast<int>(L),
                                                         reinterpret_cast<uint32_t*>(meta.data_ptr<int32_t>()),
                                                         meta_ld, stream);
  TORCH_CHECK(err == cudaSuccess, "nmspmm.spmm: building the sparse tensor-core metadata failed: ",
              cudaGetErrorString(err));
  return meta;
}

// x2 is x reshaped to [m, in], m >= 1; the caller has checked every argument, the plan and the
// device. tc_meta, if given, has been checked against the pattern's shape (checks.h).
at::Tensor spmm_sparse_tc(const at::Tensor& x2, const at::Tensor& values, const at::Tensor& indices, int64_t L,
                          const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& tc_meta,
                          Kernel kernel, int split_k) {
  const int64_t m = x2.size(0), in = x2.size(1), out = values.size(1);
  const KernelInfo& info = kernel_info(kernel);
  // Only a forced plan reaches here with such a shape (the heuristic plans another family).
  TORCH_CHECK(in % 8 == 0 && out % 8 == 0, "nmspmm.spmm_with_plan: kernel ", info.name,
              " needs in_features and out_features divisible by 8 (its tensor copies), got in_features=", in,
              " out_features=", out);
  TORCH_CHECK(sparse_tc_split_ok(split_k), "nmspmm.spmm_with_plan: split_k of kernel ", info.name,
              " must be 1, 2, 4 or 8, got ", split_k);
  at::Tensor x = x2;
  if (x.stride(1) != 1 || (m > 1 && (x.stride(0) < in || x.stride(0) % 8 != 0)) || !aligned16(x.data_ptr()))
    x = x.contiguous();
  if (!aligned16(x.data_ptr())) x = x.clone();
  at::Tensor vals = values.contiguous();
  if (!aligned16(vals.data_ptr())) vals = vals.clone();
  at::Tensor b;
  if (bias.has_value()) {
    b = bias->contiguous();
    if (!aligned16(b.data_ptr())) b = b.clone();
  }
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const at::Tensor meta = sparse_tc_meta_for_call(indices, in, out, L, tc_meta, stream);
  at::Tensor y = at::empty({m, out}, x.options());
  kernels::SparseTcParams p{};
  p.x = x.data_ptr();
  p.ldx = m > 1 ? x.stride(0) : in;
  p.values = vals.data_ptr();
  p.meta = reinterpret_cast<const uint32_t*>(meta.data_ptr<int32_t>());
  p.meta_ld = meta.size(1);
  p.bias = b.defined() ? b.data_ptr() : nullptr;
  p.y = y.data_ptr();
  p.m = m;
  p.n = out;
  p.k = in;
  p.L = static_cast<int>(L);
  p.split_k = split_k;
  p.dtype = x.scalar_type() == at::kBFloat16 ? kernels::HalfType::kBF16 : kernels::HalfType::kF16;
  const cudaError_t err = kernels::launch_sparse_tc(p, info.tile_m, stream);
  TORCH_CHECK(err == cudaSuccess, "nmspmm.spmm: kernel ", info.name, " (split_k=", split_k, ") failed for m=", m,
              " n=", out, " k=", in, ": ", cudaGetErrorString(err));
  return y;
}

}  // namespace nmspmm
