// Native fp16 / bf16 prefill path of nmspmm::spmm on CUDA: the tensor-core kernels of
// csrc/cuda/kernels/half/spmm_tc_prefill.cuh (mma.sync, fp32 accumulation, output and bias in the
// input dtype). spmm_ops.cpp calls spmm_half_prefill() before its float32 upcast; it takes the call
// when the device is sm_80 or newer, the pattern is one the kernels cover (M in {8, 16, 32, 64},
// L in {16, 32, 64, 128}) and m >= 17 (smaller m is decode). Everything runs on the current stream;
// the k-major copy of x and the split-K partials live in one scratch tensor from the caching
// allocator, so the call neither synchronizes nor breaks CUDA-graph capture.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/all.h>

#include <mutex>
#include <optional>

#include "kernels/half/spmm_half.h"

namespace nmspmm {

namespace {

struct HalfDeviceFacts {
  int sms = 132;
  int major = 0;
};

const HalfDeviceFacts& half_device_facts(int device) {
  constexpr int kMaxDevices = 64;
  static HalfDeviceFacts facts[kMaxDevices];
  static std::once_flag queried[kMaxDevices];
  static const HalfDeviceFacts unknown{};
  if (device < 0 || device >= kMaxDevices) return unknown;
  std::call_once(queried[device], [device] {
    HalfDeviceFacts f;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, device));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&f.major, cudaDevAttrComputeCapabilityMajor, device));
    facts[device] = f;
  });
  return facts[device];
}

bool tc_prefill_pattern(int64_t N, int64_t M, int64_t L) {
  return (M == 8 || M == 16 || M == 32 || M == 64) && (L == 16 || L == 32 || L == 64 || L == 128) && N >= 1 &&
         N <= M;
}

}  // namespace

// Tile configuration and split-K of the prefill kernel (spmm_tc_prefill.cuh: config 0 = 256
// outputs x 128 tokens per CTA with warps of 32 x 128). Measured on H100 (docs/kernels.md,
// "Half-precision prefill"): within 1-3% of the best of the measured configurations at m >= 1024
// (128-output tiles, 32 x 64 warps, shorter or deeper pipelines), and with split-K ahead of the
// 128-output tile where the grid does not fill the GPU (m = 256, 512).
struct HalfPrefillPlan {
  int config;
  int split_k;
};

HalfPrefillPlan choose_half_prefill_plan(int64_t m, int64_t n, int64_t k, int sms) {
  const int64_t tiles = (n + 255) / 256 * ((m + 127) / 128);
  if (tiles >= 2 * static_cast<int64_t>(sms)) return {0, 1};
  // Split-K by wave utilization (CTAs / (waves x SMs)), a small charge per extra split for the
  // fp32 partials, and at least 4 pipeline stages (of up to 128 input features) per split.
  const int64_t stages = (k + 127) / 128;
  int best = 1;
  double best_score = -1.0;
  for (int split = 1; split <= 4; ++split) {
    if (split > 1 && stages / split < 4) break;
    const int64_t ctas = tiles * split;
    const int64_t waves = (ctas + sms - 1) / sms;
    const double score = static_cast<double>(ctas) / static_cast<double>(waves * sms) - 0.03 * (split - 1);
    if (score > best_score + 1e-9) {
      best = split;
      best_score = score;
    }
  }
  return {0, best};
}

// Whether a call runs faster as cuBLAS on a transient dense copy of the weight (expanded by
// launch_expand_dense) than in the gathered tensor-core kernel. Cost model fitted to H100 timings
// (docs/kernels.md, "Half-precision prefill"): the gathered kernel reaches about
// 50 + 180 * N/M useful TFLOP/s at m >= 256; the expansion moves n * k * 2 dense bytes at about
// 1 TB/s (measured: 43 us for 4096 x 4096, 110-120 us for 14336 x 4096), and cuBLAS runs the dense
// product at about 650 TFLOP/s.
bool half_prefill_prefers_dense(int64_t m, int64_t n, int64_t k, int64_t N, int64_t M) {
  const double density = static_cast<double>(N) / static_cast<double>(M);
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const double sparse_us = flops * density / ((50.0 + 180.0 * density) * 1e6);
  const double expand_us = 4.0 + static_cast<double>(n) * static_cast<double>(k) * 2.0 / 1.0e6;
  const double dense_us = 5.0 + flops / 650e6;
  return expand_us + dense_us < sparse_us;
}

// cuBLAS (at::linear) on the expanded weight; the dense copy comes from the caching allocator and
// lives for the call only, so the resident weight stays compressed.
at::Tensor spmm_half_dense(const at::Tensor& x, const at::Tensor& vals, const at::Tensor& idx, int64_t N, int64_t M,
                           int64_t L, const at::Tensor& b) {
  const int64_t in = x.size(1), out = vals.size(1);
  at::Tensor dense = at::empty({out, in}, x.options());
  kernels::HalfSpmmParams p{};
  p.values = vals.data_ptr();
  p.indices = idx.data_ptr<uint8_t>();
  p.n = out;
  p.k = in;
  p.N = static_cast<int>(N);
  p.M = static_cast<int>(M);
  p.L = static_cast<int>(L);
  const cudaError_t err = kernels::launch_expand_dense(p, dense.data_ptr(), c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "nmspmm.spmm: expanding the fp16/bf16 weight failed for n=", out, " k=", in, ": ",
              cudaGetErrorString(err));
  return b.defined() ? at::linear(x, dense, b) : at::linear(x, dense);
}

// Returns the output if the native kernel takes the call; std::nullopt sends it to the float32 path.
// x2 is x reshaped to [m, in]; the caller has checked every argument.
std::optional<at::Tensor> spmm_half_prefill(const at::Tensor& x2, const at::Tensor& values, const at::Tensor& indices,
                                            int64_t N, int64_t M, int64_t L, const std::optional<at::Tensor>& bias) {
  const at::ScalarType dtype = x2.scalar_type();
  if (dtype != at::kHalf && dtype != at::kBFloat16) return std::nullopt;
  if (!tc_prefill_pattern(N, M, L)) return std::nullopt;
  const int64_t m = x2.size(0), in = x2.size(1), out = values.size(1);
  if (m < 17 || in == 0 || out == 0) return std::nullopt;
  const HalfDeviceFacts& dev = half_device_facts(x2.get_device());
  if (dev.major < 8) return std::nullopt;

  at::Tensor x = x2;
  if (x.stride(1) != 1 || x.stride(0) < in) x = x.contiguous();
  at::Tensor vals = values.contiguous();
  if (reinterpret_cast<uintptr_t>(vals.data_ptr()) % 16 != 0) vals = vals.clone();
  const at::Tensor idx = indices.contiguous();
  at::Tensor b;
  if (bias.has_value()) b = bias->contiguous();
  if (half_prefill_prefers_dense(m, out, in, N, M)) return spmm_half_dense(x, vals, idx, N, M, L, b);
  at::Tensor y = at::empty({m, out}, x.options());

  const HalfPrefillPlan plan = choose_half_prefill_plan(m, out, in, dev.sms);
  kernels::HalfSpmmParams p{};
  p.x = x.data_ptr();
  p.ldx = x.stride(0);
  p.values = vals.data_ptr();
  p.indices = idx.data_ptr<uint8_t>();
  p.bias = b.defined() ? b.data_ptr() : nullptr;
  p.y = y.data_ptr();
  p.m = m;
  p.n = out;
  p.k = in;
  p.N = static_cast<int>(N);
  p.M = static_cast<int>(M);
  p.L = static_cast<int>(L);
  p.split_k = plan.split_k;
  p.dtype = dtype == at::kBFloat16 ? kernels::HalfType::kBF16 : kernels::HalfType::kF16;
  const size_t scratch_bytes = kernels::tc_prefill_scratch_bytes(p, plan.config);
  TORCH_CHECK(scratch_bytes > 0, "nmspmm.spmm: the fp16/bf16 prefill kernel refused N=", N, " M=", M, " L=", L);
  at::Tensor scratch = at::empty({static_cast<int64_t>(scratch_bytes)}, x.options().dtype(at::kByte));
  p.scratch = scratch.data_ptr();
  p.scratch_bytes = scratch_bytes;
  const cudaError_t err = kernels::launch_tc_prefill(p, plan.config, c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "nmspmm.spmm: fp16/bf16 prefill kernel (config ", plan.config, ", split_k=",
              plan.split_k, ") failed for m=", m, " n=", out, " k=", in, ": ", cudaGetErrorString(err));
  return y;
}

}  // namespace nmspmm
