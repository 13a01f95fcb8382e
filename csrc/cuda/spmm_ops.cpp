// CUDA binding of nmspmm::spmm and nmspmm::spmm_with_plan: checks the arguments, turns tensors
// into pointers, asks the heuristic (csrc/policy.h) for a plan and runs it through the torch-free
// launcher (csrc/cuda/kernels/f32/spmm_launch.h) on the current stream. Nothing here synchronizes; the only
// allocations are the output, the k-major copy of x for the tiled kernels, for split-K reduced off
// chip a workspace, and for dense_expand_f32 the transient dense weight, all from PyTorch's caching
// allocator (so the op is CUDA-graph capturable). On sm_90 split-K reduces inside a thread-block cluster and needs no workspace.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/all.h>

#include <cstdlib>
#include <mutex>

#include "../ab_switches.h"
#include "../checks.h"
#include "../policy.h"
#include "../registry.h"
#include "cuda/kernels/f32/expand_dense.h"
#include "cuda/kernels/f32/spmm.h"
#include "cuda/kernels/f32/spmm_launch.h"
#include "spmm_params.h"

namespace nmspmm {

// spmm_half_decode.cpp / spmm_half_prefill.cpp: the native fp16 / bf16 plans (decode_tc_*,
// decode_splitk_*; tc_prefill_* and dense_expand_*), on x reshaped to [m, in] with m >= 1.
at::Tensor spmm_half_decode(const at::Tensor& x2, const at::Tensor& values, const at::Tensor& indices, int64_t N,
                            int64_t M, int64_t L, const std::optional<at::Tensor>& bias, int config, int split_k,
                            const std::optional<at::Tensor>& tc_meta);
at::Tensor spmm_decode_splitk_half(const at::Tensor& x2, const at::Tensor& values, const at::Tensor& indices,
                                   int64_t N, int64_t M, int64_t L, const std::optional<at::Tensor>& bias, int split_k,
                                   bool overlap);
at::Tensor spmm_half_prefill(const at::Tensor& x2, const at::Tensor& values, const at::Tensor& indices, int64_t N,
                             int64_t M, int64_t L, const std::optional<at::Tensor>& bias, bool dense, int split_k,
                             bool warp_specialized);
at::Tensor spmm_half_expand_mma(const at::Tensor& x2, const at::Tensor& values, const at::Tensor& indices, int64_t N,
                                int64_t M, int64_t L, const std::optional<at::Tensor>& bias, int tile_tokens,
                                int split_k, const char* kernel_name);
at::Tensor spmm_half_expand_wgmma(const at::Tensor& x2, const at::Tensor& values, const at::Tensor& indices,
                                  int64_t N, int64_t M, int64_t L, const std::optional<at::Tensor>& bias,
                                  int tile_tokens, int split_k, const char* kernel_name);
at::Tensor spmm_half_gather_wgmma(const at::Tensor& x2, const at::Tensor& values, const at::Tensor& indices,
                                  int64_t N, int64_t M, int64_t L, const std::optional<at::Tensor>& bias,
                                  int tile_tokens, int split_k, const char* kernel_name);
// spmm_sparse_tc.cpp: the 2:4 plans on the sparse tensor cores (sparse_tc_*).
at::Tensor spmm_sparse_tc(const at::Tensor& x2, const at::Tensor& values, const at::Tensor& indices, int64_t L,
                          const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& tc_meta,
                          Kernel kernel, int split_k);

namespace {

// What the dispatch needs to know of a device, queried once per device (on its first call, under
// the call's device guard): the SM count, whether it has thread-block clusters (compute capability
// 9.0: the cluster decode kernels and the cluster split-K reduction), and the largest cluster of the
// m <= 2 decode kernels it places (the heuristic's max_cluster: 16 on H100 / H200, 8 where clusters
// of 16 do not fit).
struct DeviceFacts {
  int sms = 132;
  int cc = 0;  // compute capability x 10
  bool clusters = false;
  int decode_max_cluster = 8;
};

const DeviceFacts& device_facts(int device) {
  constexpr int kMaxDevices = 64;
  static DeviceFacts facts[kMaxDevices];
  static std::once_flag queried[kMaxDevices];
  static const DeviceFacts unknown{};
  if (device < 0 || device >= kMaxDevices) return unknown;
  // A query that throws leaves the flag unset, so the next call asks again.
  std::call_once(queried[device], [device] {
    DeviceFacts f;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, device));
    int major = 0, minor = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    f.cc = major * 10 + minor;
    f.clusters = major >= 9;
    if (f.clusters) C10_CUDA_CHECK(kernels::decode_cluster_max_size(&f.decode_max_cluster));
    facts[device] = f;
  });
  return facts[device];
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// What the last SpMM launch on each stream wrote (y and the split-K workspace), so that a decode
// kernel is launched with programmatic dependent launch only when it is safe. Such a kernel loads
// its first weight rows before it waits for the kernel before it in the stream; nmspmm's SpMM
// kernels let the next kernel start early (griddepcontrol.launch_dependents), so if that kernel
// wrote this call's `values` or `indices` (one SpMM's output used as the next one's weight), the
// early loads could read stale data. A call whose weight overlaps what its stream's last SpMM wrote
// is launched in plain stream order. A kernel from outside nmspmm in between is harmless (it does not
// let us start early, or, if it is a programmatic-launch kernel that does, must not write our weight:
// docs/kernels.md). Per (device, stream); a stream that finds no free slot launches in plain order.
class WeightHazardTable {
 public:
  struct Range {
    uintptr_t lo = 0, hi = 0;  // [lo, hi)
    bool overlaps(const Range& o) const { return lo < o.hi && o.lo < hi; }
  };
  // True if `reads` do not overlap what the last launch on (device, stream) wrote; then records
  // `writes` as this launch's (in every case, so the next launch on the stream checks against it).
  bool check_and_record(int device, cudaStream_t stream, const Range (&reads)[2], const Range (&writes)[2]) {
    const std::lock_guard<std::mutex> lock(mu_);
    Slot* slot = nullptr;
    for (int i = 0; i < used_; ++i)
      if (slots_[i].device == device && slots_[i].stream == stream) slot = &slots_[i];
    if (slot == nullptr && used_ < kSlots) {
      slot = &slots_[used_++];
      slot->device = device;
      slot->stream = stream;
    }
    if (slot == nullptr) return false;
    bool safe = true;
    for (const Range& r : reads)
      for (const Range& w : slot->written) safe = safe && !r.overlaps(w);
    slot->written[0] = writes[0];
    slot->written[1] = writes[1];
    return safe;
  }

 private:
  static constexpr int kSlots = 256;
  struct Slot {
    int device = -1;
    cudaStream_t stream = nullptr;
    Range written[2];
  };
  std::mutex mu_;
  Slot slots_[kSlots];
  int used_ = 0;
};

WeightHazardTable& weight_hazards() {
  static WeightHazardTable table;
  return table;
}

WeightHazardTable::Range range_of(const at::Tensor& t) {
  if (!t.defined() || t.numel() == 0) return {};
  const auto lo = reinterpret_cast<uintptr_t>(t.data_ptr());
  return {lo, lo + static_cast<uintptr_t>(t.numel()) * t.element_size()};
}

}  // namespace

// For the fp16 / bf16 decode kernels (spmm_half_decode.cpp), which load weight rows before they
// wait for the kernel before them: whether this launch may start early on the current stream
// (dependent launches on, and its weight does not overlap what the stream's last SpMM wrote); records
// y as the launch's output either way.
bool decode_launch_may_overlap(const at::Tensor& values, const at::Tensor& indices, const at::Tensor& y) {
  const WeightHazardTable::Range reads[2] = {range_of(values), range_of(indices)};
  const WeightHazardTable::Range writes[2] = {range_of(y), {}};
  const bool safe =
      weight_hazards().check_and_record(y.get_device(), c10::cuda::getCurrentCUDAStream(), reads, writes);
  return safe && ab_switches().overlap;
}

namespace {

// dense_expand_f32: cuBLAS on the weight expanded to dense fp32 for the call. The product is
// at::linear, so torch's TF32 setting applies exactly as to F.linear on a dense fp32 weight. The
// dense copy [n, k] comes from the caching allocator here in the binding, as the 16-bit expansion's
// does (spmm_half_prefill.cpp): on the current stream, no synchronization, graph-capturable, and the
// resident weight stays compressed; the kernels allocate nothing. A last kernel recomputes the rows
// of x holding a NaN or Inf from their kept inputs (docs/format.md, "NaN and Inf in x").
at::Tensor spmm_dense_f32(const at::Tensor& x2, const at::Tensor& vals, const at::Tensor& idx, int64_t N, int64_t M,
                          int64_t L, const at::Tensor& b) {
  const int64_t m = x2.size(0), in = x2.size(1), out = vals.size(1);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  at::Tensor dense = at::empty({out, in}, vals.options());
  kernels::SpmmParams p{};
  p.x = x2.data_ptr<float>();
  p.ldx = m > 1 ? x2.stride(0) : in;
  p.values = vals.data_ptr<float>();
  p.indices = idx.data_ptr<uint8_t>();
  p.bias = b.defined() ? b.data_ptr<float>() : nullptr;
  set_problem(p, m, out, in, N, M, L, 1);
  cudaError_t err = kernels::launch_expand_dense_f32(p, dense.data_ptr<float>(), stream);
  TORCH_CHECK(err == cudaSuccess, "nmspmm.spmm: expanding the fp32 weight failed for n=", out, " k=", in, ": ",
              cudaGetErrorString(err));
  at::Tensor y = b.defined() ? at::linear(x2, dense, b) : at::linear(x2, dense);
  TORCH_CHECK(y.dim() == 2 && y.stride(1) == 1, "nmspmm.spmm: unexpected layout of the dense product");
  p.y = y.data_ptr<float>();
  err = kernels::launch_regather_non_finite_rows_f32(p, y.stride(0), stream);
  TORCH_CHECK(err == cudaSuccess, "nmspmm.spmm: the non-finite row check failed for m=", m, " n=", out, ": ",
              cudaGetErrorString(err));
  return y;
}

DType dtype_of(at::ScalarType t) {
  return t == at::kHalf ? DType::kF16 : t == at::kBFloat16 ? DType::kBF16 : DType::kF32;
}

// forced: the plan (kernel name, split_k) of spmm_with_plan; else the heuristic picks it.
at::Tensor spmm_cuda_impl(const at::Tensor& x, const at::Tensor& values, const at::Tensor& indices,
                          int64_t N, int64_t M, int64_t L, const std::optional<at::Tensor>& bias,
                          const std::optional<at::Tensor>& col_info,
                          const std::optional<at::Tensor>& packed_indices, c10::string_view forced_kernel,
                          int64_t split_k, bool forced, const std::optional<at::Tensor>& tc_meta) {
  const int64_t in = check_compressed(values, indices, N, M, L, /*compact_ok=*/true);
  check_spmm_inputs(x, values, bias, in);
  TORCH_CHECK(values.is_cuda(), "nmspmm.spmm: values must be a CUDA tensor here");
  check_spmm_metadata(values, indices, N, M, L, in, col_info, packed_indices, tc_meta);
  const bool has_col_info = col_info.has_value();
  const bool compact = indices_compact(values, indices);
  const c10::cuda::CUDAGuard guard(x.device());

  const int64_t out = values.size(1);
  const auto out_shape = spmm_out_shape(x, out);
  const at::ScalarType dtype = x.scalar_type();
  at::Tensor x2 = x.reshape({spmm_rows(x), in});
  if (in == 0 && !forced) return spmm_no_inputs(x, out, bias).reshape(out_shape);
  const int64_t m = x2.size(0);
  const DeviceFacts& device = device_facts(x.get_device());
  const bool clusters = device.clusters;
  Plan plan{Kernel::kNone, 1};
  if (forced) {  // spmm_with_plan: the plan is checked even for an empty input, as on the CPU
    plan = {check_plan(forced_kernel, split_k, m, N, M, L, has_col_info), static_cast<int>(split_k)};
    const KernelInfo& info = kernel_info(plan.kernel);
    TORCH_CHECK(device.cc >= info.min_cc, "nmspmm.spmm_with_plan: kernel ", info.name,
                " needs compute capability ", info.min_cc / 10, ".", info.min_cc % 10,
                " or newer, this device has ", device.cc / 10, ".", device.cc % 10);
    TORCH_CHECK(!info.needs_sm90a || device.cc == 90, "nmspmm.spmm_with_plan: kernel ", info.name,
                " is built for sm_90a only (tensor copies, mbarriers, setmaxnreg), this device has compute "
                "capability ", device.cc / 10, ".", device.cc % 10);
    // The fp32 kernels take any dtype (16-bit inputs are upcast); a native kernel only its own.
    TORCH_CHECK(info.dtype == DType::kF32 || info.dtype == dtype_of(dtype), "nmspmm.spmm_with_plan: kernel ",
                info.name, " runs ", dtype_name(info.dtype), " inputs, x has dtype ", dtype);
  } else if (m > 0 && out > 0 && in > 0) {
    Problem pb{m, out, in, N, M, L};
    pb.dtype = dtype_of(dtype);
    pb.cc = device.cc;
    pb.num_sms = device.sms;
    pb.max_cluster = device.decode_max_cluster;
    pb.has_col_info = has_col_info;
    pb.sm90a = device.cc == 90;
    pb.positions_in_tc_meta = compact;
    plan = choose_plan(pb);
  }
  // A compact 2:4 weight (positions in tc_meta only) runs a plan that reads indices on the
  // canonical indices rebuilt for the call (tensor ops on the current stream; the policy counts them).
  const at::Tensor full_indices =
      compact && plan.kernel != Kernel::kNone && !reads_tc_meta(plan.kernel) ? indices_from_tc_meta(*tc_meta, in, out, L)
                                                                              : indices;
  if (is_half_kernel(plan.kernel)) {  // native fp16 / bf16 kernels
    if (in == 0) return spmm_no_inputs(x, out, bias).reshape(out_shape);
    if (m == 0 || out == 0) return at::empty({m, out}, x.options()).reshape(out_shape);
    const KernelInfo& info = kernel_info(plan.kernel);
    at::Tensor y;
    if (info.family == Family::kSparseTc)
      y = spmm_sparse_tc(x2, values, full_indices, L, bias, tc_meta, plan.kernel, plan.split_k);
    else if (info.family == Family::kDecodeTc || info.family == Family::kDecodeSparseTc)
      y = spmm_half_decode(x2, values, full_indices, N, M, L, bias, half_decode_config(plan.kernel), plan.split_k, tc_meta);
    else if (info.family == Family::kExpandMma)
      y = spmm_half_expand_mma(x2, values, full_indices, N, M, L, bias, info.tile_m, plan.split_k, info.name);
    else if (info.family == Family::kExpandWgmma)
      y = spmm_half_expand_wgmma(x2, values, full_indices, N, M, L, bias, info.tile_m, plan.split_k, info.name);
    else if (info.family == Family::kGatherWgmma)
      y = spmm_half_gather_wgmma(x2, values, full_indices, N, M, L, bias, info.tile_m, plan.split_k, info.name);
    else if (info.family == Family::kDecodeSplitK)  // the reduction overlaps its kernel's tail where fp32's does
      y = spmm_decode_splitk_half(x2, values, full_indices, N, M, L, bias, plan.split_k, clusters && ab_switches().overlap);
    else
      y = spmm_half_prefill(x2, values, full_indices, N, M, L, bias, info.family == Family::kDenseExpand, plan.split_k,
                            half_prefill_warp_specialized(device.cc, L));
    return y.reshape(out_shape);
  }
  // The registry's fp32 kernels: a dtype without a native plan for the call is upcast and the
  // result cast back (the documented fallback, docs/kernels.md).
  if (dtype != at::kFloat) x2 = x2.to(at::kFloat);
  if (x2.stride(1) != 1 || (x2.size(0) > 1 && x2.stride(0) < in)) x2 = x2.contiguous();
  at::Tensor vals = values.to(at::kFloat).contiguous();
  if (!aligned16(vals.data_ptr())) vals = vals.clone();
  at::Tensor b;
  if (bias.has_value()) {
    b = bias->to(at::kFloat).contiguous();
    if (!aligned16(b.data_ptr())) b = b.clone();
  }
  if (in == 0) return spmm_no_inputs(x, out, bias).reshape(out_shape);
  if (is_dense_expand_kernel(plan.kernel)) {  // dense_expand_f32 (16-bit inputs upcast above)
    if (m == 0 || out == 0) return at::empty({m, out}, x.options()).reshape(out_shape);
    at::Tensor y = spmm_dense_f32(x2, vals, full_indices.contiguous(), N, M, L, b);
    if (dtype != at::kFloat) y = y.to(dtype);
    return y.reshape(out_shape);
  }
  at::Tensor y = at::empty({m, out}, x.options().dtype(at::kFloat));
  if (m == 0 || out == 0) return y.to(dtype).reshape(out_shape);

  if (plan.kernel == Kernel::kGenericF32) plan.split_k = 1;

  const at::Tensor idx = (is_packed_kernel(plan.kernel) ? *packed_indices : full_indices).contiguous();
  at::Tensor cols = has_col_info ? col_info->contiguous() : at::Tensor();
  if (cols.defined() && !aligned16(cols.data_ptr())) cols = cols.clone();  // read 16 bytes at a time
  at::Tensor workspace, xt;
  // Cluster decode kernels always reduce on chip; the tiled kernels' split-K does where the
  // device has clusters (unless switched off for A/B timing).
  const AbSwitches& ab = ab_switches();
  const bool cluster_split = clusters && ab.cluster_split;
  const bool cluster_reduce = plan_reduces_in_cluster(plan.kernel, plan.split_k, cluster_split);
  if (plan.kernel == Kernel::kProducerTailF32_128x256)  // split partial tiles of the tail only (may be none)
    workspace = at::empty({producer_tail_workspace_floats(m, out, plan.split_k, device.sms)}, y.options());
  else if (plan_uses_workspace(plan.kernel, plan.split_k, cluster_split))
    workspace = at::empty({plan.split_k, m, out}, y.options());
  if (kernel_reads_xt(plan.kernel))
    xt = at::empty({in, kernels::tiled_xt_ld(m)}, y.options());

  kernels::SpmmParams p{};
  p.x = x2.data_ptr<float>();
  p.ldx = x2.size(0) > 1 ? x2.stride(0) : in;
  p.xt = xt.defined() ? xt.data_ptr<float>() : nullptr;
  p.ldxt = xt.defined() ? xt.size(1) : 0;
  p.values = vals.data_ptr<float>();
  p.indices = idx.data_ptr<uint8_t>();
  p.col_info = has_col_info ? cols.data_ptr<uint8_t>() : nullptr;
  p.bias = b.defined() ? b.data_ptr<float>() : nullptr;
  p.y = y.data_ptr<float>();
  p.workspace = workspace.defined() && workspace.numel() > 0 ? workspace.data_ptr<float>() : nullptr;
  set_problem(p, m, out, in, N, M, L, plan.split_k);
  p.cluster_reduce = cluster_reduce && !is_cluster_decode_kernel(plan.kernel);
  p.overlap_launches = clusters && ab.overlap;
  // y and the workspace come from the caching allocator (aligned); rows need n % 4 == 0.
  p.bulk_store = clusters && ab.bulk_store && out % 4 == 0 && aligned16(p.y) &&
                 (p.workspace == nullptr || aligned16(p.workspace));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  // Without dependent launches (no clusters, or switched off) nothing starts early: no table.
  p.dependent_launch = false;
  if (p.overlap_launches) {
    const WeightHazardTable::Range reads[2] = {range_of(vals), range_of(idx)};
    const WeightHazardTable::Range writes[2] = {range_of(y), range_of(workspace)};
    const bool weight_safe = weight_hazards().check_and_record(x.get_device(), stream, reads, writes);
    p.dependent_launch = weight_safe && decode_plan_overlaps_launch(plan, in, N, M);
  }
  // The tiled, packing and warp-packed kernels start during the x transpose launched just before
  // them in plain stream order (so after everything before the call): no weight hazard.
  if (kernel_reads_xt(plan.kernel))
    p.dependent_launch = p.overlap_launches && ab.xt_overlap;
  const cudaError_t err = kernels::launch_spmm(p, plan.kernel, stream);
  TORCH_CHECK(err == cudaSuccess, "nmspmm.spmm: kernel ", kernel_name(plan.kernel), " (split_k=", plan.split_k,
              ") failed for m=", m, " n=", out, " k=", in, ": ", cudaGetErrorString(err));
  if (dtype != at::kFloat) y = y.to(dtype);
  return y.reshape(out_shape);
}

at::Tensor spmm_cuda(const at::Tensor& x, const at::Tensor& values, const at::Tensor& indices, int64_t N,
                     int64_t M, int64_t L, const std::optional<at::Tensor>& bias,
                     const std::optional<at::Tensor>& col_info,
                     const std::optional<at::Tensor>& packed_indices, const std::optional<at::Tensor>& tc_meta) {
  return spmm_cuda_impl(x, values, indices, N, M, L, bias, col_info, packed_indices, "", 1,
                        /*forced=*/false, tc_meta);
}

at::Tensor spmm_with_plan_cuda(const at::Tensor& x, const at::Tensor& values, const at::Tensor& indices,
                               int64_t N, int64_t M, int64_t L, const std::optional<at::Tensor>& bias,
                               const std::optional<at::Tensor>& col_info,
                               const std::optional<at::Tensor>& packed_indices, c10::string_view kernel,
                               int64_t split_k, const std::optional<at::Tensor>& tc_meta) {
  return spmm_cuda_impl(x, values, indices, N, M, L, bias, col_info, packed_indices, kernel, split_k,
                        /*forced=*/true, tc_meta);
}

}  // namespace

TORCH_LIBRARY_IMPL(nmspmm, CUDA, m) {
  m.impl("spmm", &spmm_cuda);
  m.impl("spmm_with_plan", &spmm_with_plan_cuda);
}

}  // namespace nmspmm
