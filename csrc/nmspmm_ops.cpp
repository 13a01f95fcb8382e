// The nmspmm operator library: every schema lives here, once. Backends register their
// implementations in csrc/cpu/ops_cpu.cpp (CPU reference) and csrc/cuda/*.cpp (CUDA), autograd
// of spmm / spmm_with_plan in csrc/autograd.cpp. Fake (meta) kernels are registered from Python
// in nmspmm/_ops.py.
#include <Python.h>
#include <torch/library.h>

#include "dispatch.h"

extern "C" {
// Loading nmspmm._C from Python runs the static TORCH_LIBRARY initializers below; the module
// itself is empty (no pybind11, so the extension is CPython-ABI agnostic).
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}

namespace nmspmm {

// The plan the runtime heuristic picks for a problem (exposed for benchmarks and tests;
// no tensors involved, so it works on any build).
static std::vector<int64_t> spmm_heuristic(int64_t m, int64_t n, int64_t k, int64_t N, int64_t M,
                                           int64_t L, bool has_col_info, int64_t num_sms,
                                           bool clusters, int64_t max_cluster) {
  TORCH_CHECK(max_cluster >= 1, "nmspmm.spmm_heuristic: max_cluster must be >= 1, got ", max_cluster);
  const Plan p = choose_plan(m, n, k, N, M, L, has_col_info, static_cast<int>(num_sms), clusters,
                             static_cast<int>(std::min<int64_t>(max_cluster, 16)));
  return {static_cast<int64_t>(p.kernel), p.split_k};
}

TORCH_LIBRARY(nmspmm, m) {
  m.set_python_module("nmspmm._ops");
  // Magnitude pruning: bool mask[out, in] keeping, per (window of M inputs, vector of L outputs),
  // the N input positions with the largest L2 norm over the vector; ties keep the lower index.
  m.def("prune(Tensor weight, int N, int M, int L) -> Tensor");
  // Compress a dense weight[out, in] under an N:M mask: (values[in*N/M, out], indices[in*N/M, out/L] uint8).
  m.def("compress(Tensor weight, Tensor mask, int N, int M, int L) -> (Tensor, Tensor)");
  // Scatter the compressed weight back to a dense weight[out, in] (zeros where pruned).
  m.def("decompress(Tensor values, Tensor indices, int N, int M, int L) -> Tensor");
  // High-sparsity packing metadata: (col_info[n_tiles, k_blocks, 64] uint8, packed_indices uint8).
  m.def("col_info(Tensor indices, int N, int M, int L) -> (Tensor, Tensor)");
  // y[..., out] = x[..., in] @ decompress(values, indices)^T (+ bias), fp32 accumulation.
  m.def(
      "spmm(Tensor x, Tensor values, Tensor indices, int N, int M, int L, Tensor? bias=None, "
      "Tensor? col_info=None, Tensor? packed_indices=None) -> Tensor");
  // spmm with an explicit kernel and split-K instead of the heuristic (tests, benchmarks).
  m.def(
      "spmm_with_plan(Tensor x, Tensor values, Tensor indices, int N, int M, int L, Tensor? bias, "
      "Tensor? col_info, Tensor? packed_indices, int kernel, int split_k) -> Tensor");
  m.def(
      "spmm_heuristic(int m, int n, int k, int N, int M, int L, bool has_col_info, int num_sms, "
      "bool clusters=True, int max_cluster=16) -> int[]",
      &spmm_heuristic);
}

}  // namespace nmspmm
