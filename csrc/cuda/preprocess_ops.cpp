// CUDA binding of the preprocessing ops nmspmm::prune, compress, decompress and col_info: checks
// the arguments (csrc/checks.h, same messages as the CPU reference), makes the inputs
// contiguous, allocates the outputs and launches the torch-free kernels
// (csrc/cuda/kernels/preprocess/preprocess.cu) on the current stream of the input's device.
//
// Synchronization: each op reads one small device error word back to the host after its
// kernels (one stream synchronization per call), because the data errors the CPU reference
// reports (NaN/Inf in prune's weight, a mask that is not N:M in compress, indices >= M in
// decompress and col_info, or not strictly ascending) can only be seen on the device. These are one-time preprocessing
// ops, so they are not CUDA-graph capturable; nothing on the SpMM path calls them (except
// decompress in spmm's backward). Empty inputs return without launching or synchronizing.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/all.h>

#include "../checks.h"
#include "cuda/kernels/preprocess/preprocess.h"
#include "kernels/sparse_tc/meta.h"

namespace nmspmm {

namespace {

// `err` is the launcher's cudaGetLastError() after its launches.
void check_launch(cudaError_t err, const char* op, const at::Tensor& input) {
  TORCH_CHECK(err == cudaSuccess, "nmspmm.", op, ": CUDA kernel launch failed for input of shape ",
              input.sizes(), " on ", input.device(), ": ", cudaGetErrorString(err));
}

kernels::WeightType weight_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return kernels::WeightType::kFloat32;
    case at::kHalf: return kernels::WeightType::kFloat16;
    case at::kBFloat16: return kernels::WeightType::kBFloat16;
    default: break;
  }
  TORCH_CHECK(false, "nmspmm: unsupported weight dtype ", t);
  return kernels::WeightType::kFloat32;  // unreachable
}

// A one-element int64 error word on `like`'s device, holding "no error".
at::Tensor error_word(const at::Tensor& like) {
  return at::full({1}, kernels::kNoError, like.options().dtype(at::kLong));
}

// Reports the first bad index from an error word of decompress or col_info: (i << 8) | indices[i].
void check_index_error(int64_t first_bad, const char* op, int64_t vectors, int64_t M) {
  if (first_bad == kernels::kNoError) return;
  const int64_t i = first_bad >> 8, idx = first_bad & 0xFF;
  TORCH_CHECK(idx < M, "nmspmm.", op, ": indices holds ", idx, " >= M=", M, " (row ", i / vectors,
              " column ", i % vectors, ")");
  TORCH_CHECK(false, "nmspmm.", op,
              ": indices must be strictly ascending within each (window, vector): row ", i / vectors,
              " column ", i % vectors, " holds ", idx, " after a larger or equal index");
}

at::Tensor prune_cuda(const at::Tensor& weight, int64_t N, int64_t M, int64_t L) {
  check_weight(weight, N, M, L);
  TORCH_CHECK(weight.is_cuda(), "nmspmm.prune: weight must be a CUDA tensor here");
  const c10::cuda::CUDAGuard guard(weight.device());
  const int64_t out = weight.size(0), in = weight.size(1);
  at::Tensor mask = at::empty({out, in}, weight.options().dtype(at::kBool));
  if (mask.numel() == 0) return mask;
  const at::Tensor w = weight.contiguous();
  at::Tensor nonfinite = at::zeros({1}, weight.options().dtype(at::kInt));
  check_launch(kernels::launch_prune(w.data_ptr(), weight_type(w.scalar_type()),
                                     reinterpret_cast<uint8_t*>(mask.data_ptr<bool>()),
                                     nonfinite.data_ptr<int32_t>(), out, in, static_cast<int>(N),
                                     static_cast<int>(M), static_cast<int>(L),
                                     c10::cuda::getCurrentCUDAStream()),
               "prune", weight);
  // The one synchronization: was any weight element NaN or Inf?
  TORCH_CHECK(nonfinite.item<int32_t>() == 0, "nmspmm.prune: weight contains NaN or Inf");
  return mask;
}

std::tuple<at::Tensor, at::Tensor> compress_cuda(const at::Tensor& weight, const at::Tensor& mask,
                                                 int64_t N, int64_t M, int64_t L) {
  check_compress_inputs(weight, mask, N, M, L);
  TORCH_CHECK(weight.is_cuda(), "nmspmm.compress: weight must be a CUDA tensor here");
  const c10::cuda::CUDAGuard guard(weight.device());
  const int64_t out = weight.size(0), in = weight.size(1);
  const int64_t windows = in / M, vectors = out / L, w_rows = windows * N;
  at::Tensor values = at::empty({w_rows, out}, weight.options());
  at::Tensor indices = at::empty({w_rows, vectors}, weight.options().dtype(at::kByte));
  if (windows == 0 || vectors == 0) return {values, indices};
  const at::Tensor wt = weight.contiguous();
  const at::Tensor mk = mask.contiguous();
  at::Tensor bad = error_word(weight);
  check_launch(kernels::launch_compress(wt.data_ptr(), static_cast<int>(wt.element_size()),
                                        reinterpret_cast<const uint8_t*>(mk.data_ptr<bool>()),
                                        values.data_ptr(), indices.data_ptr<uint8_t>(),
                                        bad.data_ptr<int64_t>(), out, in, static_cast<int>(N),
                                        static_cast<int>(M), static_cast<int>(L),
                                        c10::cuda::getCurrentCUDAStream()),
               "compress", weight);
  // The one synchronization: the first (window, vector) pair, in the CPU's v-major scan
  // order, that does not keep exactly N positions shared by its L rows.
  const int64_t first_bad = bad.item<int64_t>();
  TORCH_CHECK(first_bad == kernels::kNoError, "nmspmm.compress: mask is not vector-wise ", N, ":",
              M, " with L=", L, ": (window ", first_bad % windows, ", vector ",
              first_bad / windows, ") does not keep exactly N positions shared by its L rows");
  return {values, indices};
}

at::Tensor decompress_cuda(const at::Tensor& values, const at::Tensor& indices, int64_t N,
                           int64_t M, int64_t L) {
  const int64_t in = check_compressed(values, indices, N, M, L);
  TORCH_CHECK(values.is_cuda(), "nmspmm.decompress: values must be a CUDA tensor here");
  const c10::cuda::CUDAGuard guard(values.device());
  const int64_t out = values.size(1);
  // Every element is written by the kernel (pruned positions with +0).
  at::Tensor dense = at::empty({out, in}, values.options());
  if (dense.numel() == 0) return dense;  // then indices is empty too
  const at::Tensor vc = values.contiguous();
  const at::Tensor ic = indices.contiguous();
  at::Tensor bad = error_word(values);
  check_launch(kernels::launch_decompress(vc.data_ptr(), static_cast<int>(vc.element_size()),
                                          ic.data_ptr<uint8_t>(), dense.data_ptr(),
                                          bad.data_ptr<int64_t>(), out, in, static_cast<int>(N),
                                          static_cast<int>(M), static_cast<int>(L),
                                          c10::cuda::getCurrentCUDAStream()),
               "decompress", values);
  // The one synchronization: the first index out of range or out of order, if any.
  check_index_error(bad.item<int64_t>(), "decompress", indices.size(1), M);
  return dense;
}

std::tuple<at::Tensor, at::Tensor> col_info_cuda(const at::Tensor& indices, int64_t N, int64_t M,
                                                 int64_t L) {
  check_pattern(N, M, L);
  TORCH_CHECK(indices.dim() == 2 && indices.scalar_type() == at::kByte,
              "nmspmm.col_info: indices must be a 2-D uint8 tensor, got ", indices.scalar_type(),
              " ", indices.sizes());
  TORCH_CHECK(indices.size(0) % N == 0, "nmspmm.col_info: indices.size(0)=", indices.size(0),
              " is not a multiple of N=", N);
  TORCH_CHECK(indices.is_cuda(), "nmspmm.col_info: indices must be a CUDA tensor here");
  const c10::cuda::CUDAGuard guard(indices.device());
  const int64_t w_rows = indices.size(0), vectors = indices.size(1);
  const int64_t out = vectors * L, in = w_rows / N * M;
  const int64_t n_tiles = (out + kPackTileN - 1) / kPackTileN;
  const int64_t k_blocks = (in + kPackKBlock - 1) / kPackKBlock;
  // Every byte of both outputs is written by the kernel (unused cols slots with 0xFF).
  at::Tensor cols = at::empty({n_tiles, k_blocks, kPackKBlock}, indices.options());
  at::Tensor packed = at::empty({w_rows, vectors}, indices.options());
  if (indices.numel() == 0) return {cols, packed};  // then cols is empty too
  const at::Tensor ic = indices.contiguous();
  at::Tensor bad = error_word(indices);
  check_launch(kernels::launch_col_info(ic.data_ptr<uint8_t>(), cols.data_ptr<uint8_t>(),
                                        packed.data_ptr<uint8_t>(), bad.data_ptr<int64_t>(),
                                        w_rows, vectors, static_cast<int>(N), static_cast<int>(M),
                                        static_cast<int>(L), c10::cuda::getCurrentCUDAStream()),
               "col_info", indices);
  // The one synchronization: the first index out of range or out of order, if any.
  check_index_error(bad.item<int64_t>(), "col_info", vectors, M);
  return {cols, packed};
}

at::Tensor sparse_tc_meta_cuda(const at::Tensor& indices, int64_t N, int64_t M, int64_t L, int64_t in_features) {
  const int64_t out = check_sparse_tc_meta_args(indices, N, M, L, in_features);
  TORCH_CHECK(indices.is_cuda(), "nmspmm.sparse_tc_meta: indices must be a CUDA tensor here");
  const c10::cuda::CUDAGuard guard(indices.device());
  at::Tensor meta = at::empty({tc_meta_rows(in_features), tc_meta_ld(out, L)}, indices.options().dtype(at::kInt));
  const at::Tensor ic = indices.contiguous();
  const cudaError_t err = kernels::launch_sparse_tc_meta(ic.data_ptr<uint8_t>(), in_features, out, static_cast<int>(L),
                                                         reinterpret_cast<uint32_t*>(meta.data_ptr<int32_t>()),
                                                         meta.size(1), c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "nmspmm.sparse_tc_meta: kernel failed: ", cudaGetErrorString(err));
  return meta;
}

}  // namespace

TORCH_LIBRARY_IMPL(nmspmm, CUDA, m) {
  m.impl("prune", &prune_cuda);
  m.impl("compress", &compress_cuda);
  m.impl("decompress", &decompress_cuda);
  m.impl("col_info", &col_info_cuda);
  m.impl("sparse_tc_meta", &sparse_tc_meta_cuda);
}

}  // namespace nmspmm
