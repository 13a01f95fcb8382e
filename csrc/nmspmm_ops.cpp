// The nmspmm operator library: every schema lives here, once. Backends register their
// implementations in csrc/cpu/ops_cpu.cpp (CPU reference) and csrc/cuda/*.cpp (CUDA), autograd
// of spmm / spmm_with_plan in csrc/autograd.cpp. Fake (meta) kernels are registered from Python
// in nmspmm/_ops.py.
#include <Python.h>
#include <torch/library.h>

#include <string>
#include <tuple>
#include <vector>

#include "checks.h"
#include "csr_checks.h"
#include "pattern.h"
#include "policy.h"
#include "registry.h"

extern "C" {
// Loading nmspmm._C from Python runs the static TORCH_LIBRARY initializers below; the module
// itself is empty (no pybind11, so the extension is CPython-ABI agnostic).
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}

namespace nmspmm {

namespace {

DType dtype_of(c10::ScalarType t, const char* op) {
  if (t == c10::ScalarType::Float) return DType::kF32;
  if (t == c10::ScalarType::Half) return DType::kF16;
  if (t == c10::ScalarType::BFloat16) return DType::kBF16;
  TORCH_CHECK(false, op, ": dtype must be float32, float16 or bfloat16, got ", t);
  return DType::kF32;
}

// The registry's kernel names, in registry order.
std::vector<std::string> kernels_op() {
  std::vector<std::string> names;
  for (const KernelInfo& k : kKernelTable) names.emplace_back(k.name);
  return names;
}

using KernelInfoTuple = std::tuple<std::string, std::string, int64_t, int64_t, int64_t, int64_t, int64_t,
                                   int64_t, int64_t, bool, bool, bool, int64_t>;

// What the registry knows of one kernel (the schema below names the fields).
KernelInfoTuple kernel_info_op(c10::string_view name) {
  const Kernel kernel = find_kernel(std::string(name).c_str());
  TORCH_CHECK(kernel != Kernel::kNone, "nmspmm.kernel_info: unknown kernel '", name,
              "' (torch.ops.nmspmm.kernels() lists them)");
  const KernelInfo& k = kernel_info(kernel);
  return {family_name(k.family), dtype_name(k.dtype), k.tile_m, k.tile_n, k.warps, k.min_L, k.max_M,
          k.max_m, k.min_cc, k.needs_sm90a, k.needs_col_info, k.reads_xt, k.max_split_k};
}

// Whether a kernel can run a problem (csrc/registry.h::kernel_supports) on a device of this compute
// capability (x 10; 90: clusters and sm_90a).
bool kernel_supports_op(c10::string_view name, int64_t m, int64_t N, int64_t M, int64_t L, bool has_col_info,
                        int64_t compute_capability) {
  const Kernel kernel = find_kernel(std::string(name).c_str());
  TORCH_CHECK(kernel != Kernel::kNone, "nmspmm.kernel_supports: unknown kernel '", name,
              "' (torch.ops.nmspmm.kernels() lists them)");
  const int cc = static_cast<int>(compute_capability);
  return kernel_supports(kernel, m, N, M, L, has_col_info, kernel_info(kernel).dtype, cc, cc == 90);
}

// The problem of spmm_heuristic and spmm_plan_candidates, its arguments checked (each refusal names
// the argument).
Problem heuristic_problem(const char* op, int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int64_t L,
                          c10::ScalarType dtype, int64_t compute_capability, int64_t num_sms, int64_t max_cluster) {
  TORCH_CHECK(supported_M(M), op, ": M must be a power of two in [2, ", kMaxM, "], got M=", M);
  TORCH_CHECK(N >= 1 && N <= M, op, ": N must satisfy 1 <= N <= M, got N=", N, ", M=", M);
  TORCH_CHECK(supported_L(L), op, ": L must be a power of two in [1, ", kMaxL, "], got L=", L);
  TORCH_CHECK(m >= 0, op, ": m must be >= 0, got m=", m);
  TORCH_CHECK(n >= 0 && n % L == 0, op, ": n must be >= 0 and divisible by L=", L, ", got n=", n);
  TORCH_CHECK(k >= 0 && k % M == 0, op, ": k must be >= 0 and divisible by M=", M, ", got k=", k);
  TORCH_CHECK(compute_capability >= 10 && compute_capability < 1000, op,
              ": compute_capability is major * 10 + minor (e.g. 90), got ", compute_capability);
  TORCH_CHECK(num_sms >= 1 && num_sms <= 100000, op, ": num_sms must be >= 1, got ", num_sms);
  TORCH_CHECK(max_cluster >= 1, op, ": max_cluster must be >= 1, got ", max_cluster);
  Problem pb{m, n, k, N, M, L};
  pb.dtype = dtype_of(dtype, op);
  pb.cc = static_cast<int>(compute_capability);
  pb.num_sms = static_cast<int>(num_sms);
  pb.max_cluster = static_cast<int>(std::min<int64_t>(max_cluster, kMaxDecodeCluster));
  pb.sm90a = pb.cc == 90;
  return pb;
}

// The plan the runtime heuristic picks for a problem on a device: (kernel name, split_k). No
// tensors involved, so it works on any build (tests, benchmarks, tools).
std::tuple<std::string, int64_t> spmm_heuristic(int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int64_t L,
                                                c10::ScalarType dtype, int64_t compute_capability,
                                                int64_t num_sms, int64_t max_cluster) {
  const Problem pb =
      heuristic_problem("nmspmm.spmm_heuristic", m, n, k, N, M, L, dtype, compute_capability, num_sms, max_cluster);
  const Plan p = choose_plan(pb);
  return {kernel_name(p.kernel), p.split_k};
}

// What the search compares for a problem (csrc/policy.h, family_costs): every family's plan (kernel
// names and split_k) with its estimated microseconds, in the policy's tie order; spmm_heuristic
// returns the first of the least. For the measured plan table (benchmarks/plan_table.py) and tests.
std::tuple<std::vector<std::string>, std::vector<int64_t>, std::vector<double>> spmm_plan_candidates(
    int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int64_t L, c10::ScalarType dtype,
    int64_t compute_capability, int64_t num_sms, int64_t max_cluster) {
  const Problem pb = heuristic_problem("nmspmm.spmm_plan_candidates", m, n, k, N, M, L, dtype, compute_capability,
                                       num_sms, max_cluster);
  std::vector<std::string> names;
  std::vector<int64_t> splits;
  std::vector<double> us;
  for (const PlanCost& c : family_costs(pb).cost) {
    if (c.plan.kernel == Kernel::kNone) continue;
    names.emplace_back(kernel_name(c.plan.kernel));
    splits.push_back(c.plan.split_k);
    us.push_back(c.us);
  }
  return {names, splits, us};
}

// The dense weight [out, in] of an unstructured CSR weight, from fixed-size tensor ops (no
// synchronization, traceable under torch.compile): each nonzero p lands at (row, col_indices[p]),
// its row found in crow_indices clamped to [0, nnz] and made non-decreasing; columns outside
// [0, in) and entries outside [crow[0], crow[out]) are dropped; duplicates are summed. For a validated
// weight (nmspmm.CSRWeight) this is exactly the matrix csr_spmm multiplies by.
at::Tensor csr_decompress(const at::Tensor& crow_indices, const at::Tensor& col_indices, const at::Tensor& values,
                          int64_t in_features) {
  const int64_t out = check_csr("nmspmm.csr_decompress", crow_indices, col_indices, values, in_features);
  const int64_t nnz = values.size(0);
  const at::Tensor crow = std::get<0>(crow_indices.to(at::kLong).clamp(0, nnz).cummax(0));
  const at::Tensor pos = at::arange(nnz, crow.options());
  const at::Tensor row = at::searchsorted(crow.slice(0, 1), pos, /*out_int32=*/false, /*right=*/true);
  const at::Tensor col = col_indices.to(at::kLong);
  const at::Tensor keep =
      row.lt(out).logical_and(pos.ge(crow.select(0, 0))).logical_and(col.ge(0)).logical_and(col.lt(in_features));
  const at::Tensor flat = at::where(keep, row * in_features + col, at::zeros_like(col));
  const at::Tensor vals = at::where(keep, values, at::zeros_like(values));
  at::Tensor dense = at::zeros({out * in_features}, values.options());
  dense.index_put_({flat}, vals, /*accumulate=*/true);
  return dense.view({out, in_features});
}

// Tensor ops only (checks.h, indices_from_tc_meta), so one composite serves every device.
at::Tensor sparse_tc_indices(const at::Tensor& tc_meta, int64_t L, int64_t in_features, int64_t out_features) {
  check_sparse_tc_indices_args(tc_meta, L, in_features, out_features);
  return indices_from_tc_meta(tc_meta, in_features, out_features, L);
}

}  // namespace

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
  // 2:4 only: the positions in the sparse tensor cores' form, int32 [ceil(in/32), round_up(out/L, 4)]
  // (docs/format.md, "Sparse tensor-core metadata"); index bytes are read as b & 3.
  m.def("sparse_tc_meta(Tensor indices, int N, int M, int L, int in_features) -> Tensor");
  // Its inverse on the kept positions: the canonical indices [in/2, out/L] uint8 of a 2:4 weight
  // from its tc_meta (padding not read); what a compact 2:4 weight (indices [0, out/L]) expands to.
  m.def("sparse_tc_indices(Tensor tc_meta, int L, int in_features, int out_features) -> Tensor");
  // y[..., out] = x[..., in] @ decompress(values, indices)^T (+ bias), fp32 accumulation; tc_meta
  // (2:4) is the weight's sparse_tc_meta, built for the call where absent.
  m.def(
      "spmm(Tensor x, Tensor values, Tensor indices, int N, int M, int L, Tensor? bias=None, "
      "Tensor? col_info=None, Tensor? packed_indices=None, Tensor? tc_meta=None) -> Tensor");
  // spmm with an explicit plan instead of the heuristic's: a kernel of the registry (kernels()) by
  // name and its split-K (tests, benchmarks).
  m.def(
      "spmm_with_plan(Tensor x, Tensor values, Tensor indices, int N, int M, int L, Tensor? bias, "
      "Tensor? col_info, Tensor? packed_indices, str kernel, int split_k, Tensor? tc_meta=None) -> Tensor");
  // Unstructured sparse weights in CSR (rows = outputs; crow_indices int32 [out + 1], col_indices
  // int32 [nnz], values [nnz]): y[..., out] = x[..., in] @ W^T (+ bias), fp32 accumulation. The
  // index data is validated where a weight enters (nmspmm.CSRWeight); the kernels mask what they
  // read (a row's range clamped to [0, nnz], columns outside [0, in) skipped). max_row_nnz, the
  // longest row's nonzeros where the caller knows it (-1: unknown), only steers the kernel choice.
  m.def("csr_spmm(Tensor x, Tensor crow_indices, Tensor col_indices, Tensor values, int in_features, "
        "Tensor? bias=None, int max_row_nnz=-1) -> Tensor");
  // The dense weight [out, in] of a CSR weight (duplicates summed; masked as csr_spmm masks).
  m.def("csr_decompress(Tensor crow_indices, Tensor col_indices, Tensor values, int in_features) -> Tensor");
  // The kernel registry (csrc/registry.h): every kernel's name, and what one kernel needs and does.
  m.def("kernels() -> str[]", &kernels_op);
  m.def(
      "kernel_info(str name) -> (str family, str dtype, int tile_m, int tile_n, int warps, int min_L, "
      "int max_M, int max_m, int min_compute_capability, bool needs_sm90a, bool needs_col_info, "
      "bool reads_xt, int max_split_k)",
      &kernel_info_op);
  m.def(
      "kernel_supports(str name, int m, int N, int M, int L, bool has_col_info=False, "
      "int compute_capability=90) -> bool",
      &kernel_supports_op);
  // The heuristic's plan (kernel name, split_k) for a problem: dtype of x, compute capability as
  // major * 10 + minor, the device's SM count and largest decode cluster (16 on H100 / H200).
  m.def(
      "spmm_heuristic(int m, int n, int k, int N, int M, int L, ScalarType dtype, int compute_capability, "
      "int num_sms, int max_cluster=16) -> (str, int)",
      &spmm_heuristic);
  // Every family's plan for the problem and its estimated microseconds: (kernels, split_ks, costs).
  m.def(
      "spmm_plan_candidates(int m, int n, int k, int N, int M, int L, ScalarType dtype, int compute_capability, "
      "int num_sms, int max_cluster=16) -> (str[], int[], float[])",
      &spmm_plan_candidates);
}

TORCH_LIBRARY_IMPL(nmspmm, CompositeImplicitAutograd, m) {
  m.impl("csr_decompress", &csr_decompress);
  m.impl("sparse_tc_indices", &sparse_tc_indices);
}

}  // namespace nmspmm
