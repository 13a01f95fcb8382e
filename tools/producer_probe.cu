// Kernel-only A/B of the warp-specialized kernel (id 21) against the tiled 128x128 kernel (id 2)
// and the warp-packed 128x128 kernel (id 18) on the same xT, values and indices (session 28; the
// variants it compared then are in benchmarks/results/h100/experiments/s28_producer_probe_variants.diff).
// A diagnostic for the GPU machine, not part of the extension (no torch):
//   nvcc -std=c++20 -arch=sm_90a -O3 -I csrc -o /tmp/producer_probe tools/producer_probe.cu \
//     csrc/cuda/kernels/spmm_tiled_128x128_k32_fixed.cu csrc/cuda/kernels/spmm_tiled_k64_fixed8.cu \
//     csrc/cuda/kernels/spmm_warp_packed_tm16.cu csrc/cuda/kernels/spmm_producer.cu tools/producer_probe_configs.cu
//   /tmp/producer_probe [m n k ...]      (default: a few Llama / 4096^3 shapes, N = 16, 12, 8, 4 of 32)
// Every variant's output is checked against an fp64 dot product on 4096 sampled entries (the worst
// |y - ref| / sum |x w| is printed; ok below 1e-5) and compared bitwise between two runs.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cuda/kernels/spmm.h"
#include "cuda/kernels/spmm_producer.h"
#include "cuda/kernels/spmm_tiled.h"
#include "cuda/kernels/spmm_warp_packed.h"

using namespace nmspmm::kernels;
#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      printf("CUDA error %s at line %d\n", cudaGetErrorString(e_), __LINE__);         \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

struct Variant {
  std::string name;
  std::function<cudaError_t(const SpmmParams&, cudaStream_t)> launch;
};

template <int WB>
std::vector<Variant> variants_for() {
  std::vector<Variant> v;
  constexpr int KBT = WB == 4 ? 64 : 32;  // kernel 2's k-block (4:32: 64, WB 8)
  constexpr int WBT = WB == 4 ? 8 : WB;
  v.push_back({"tiled128x128(2)", launch_tiled<TiledConfig<128, 128, 16, KBT, false, true, WBT>>});
  if (WB <= 8) v.push_back({"warppacked128(18)", launch_warp_packed<WarpPacked128x128>});
  // Kernel 21 as the extension builds it for the pattern (producer_shape, csrc/dispatch.h).
  if (WB == 16) v.push_back({"producer128x256(21)", launch_producer<ProducerConfig<1, 8, 32, 16, 4>>});
  if (WB == 12) v.push_back({"producer128x256(21)", launch_producer<ProducerConfig<1, 8, 32, 12, 4>>});
  if (WB == 8) v.push_back({"producer128x256(21)", launch_producer<ProducerConfig<1, 8, 64, 16, 3>>});
  if (WB == 4) v.push_back({"producer128x256(21)", launch_producer<ProducerConfig<1, 8, 128, 16, 2>>});
  // Other stage shapes KB x WB x STAGES (tools/producer_probe_configs.cu; session 28's 8:32 and 4:32
  // configs among them).
  if (WB == 16) v.push_back({"k21 kb64 wb32 s3", launch_producer<ProducerConfig<1, 8, 64, 32, 3>>});
  if (WB == 12) v.push_back({"k21 kb64 wb24 s3", launch_producer<ProducerConfig<1, 8, 64, 24, 3>>});
  if (WB == 8) {
    v.push_back({"k21 kb32 wb8 s4 (s28)", launch_producer<ProducerConfig<1, 8, 32, 8, 4>>});
    v.push_back({"k21 kb32 wb8 s5", launch_producer<ProducerConfig<1, 8, 32, 8, 5>>});
    v.push_back({"k21 kb64 wb16 s4", launch_producer<ProducerConfig<1, 8, 64, 16, 4>>});
  }
  if (WB == 4) {
    v.push_back({"k21 kb64 wb8 s3 (s28)", launch_producer<ProducerConfig<1, 8, 64, 8, 3>>});
    v.push_back({"k21 kb64 wb8 s4", launch_producer<ProducerConfig<1, 8, 64, 8, 4>>});
    v.push_back({"k21 kb96 wb12 s3", launch_producer<ProducerConfig<1, 8, 96, 12, 3>>});
  }
  return v;
}

static void run_shape(int64_t m, int64_t n, int64_t k, int N, std::mt19937& rng) {
  const int M = 32, L = 32;
  const int64_t w = k / M * N, q = n / L, ldxt = (m + 3) / 4 * 4;
  std::vector<float> x(m * k), values(w * n), xt(k * ldxt, 0.f);
  std::vector<uint8_t> idx(w * q);
  std::uniform_real_distribution<float> U(-1.f, 1.f);
  for (auto& e : x) e = U(rng);
  for (auto& e : values) e = U(rng);
  std::vector<int> perm(M);
  for (int64_t g = 0; g < k / M; ++g)
    for (int64_t v = 0; v < q; ++v) {
      for (int i = 0; i < M; ++i) perm[i] = i;
      std::shuffle(perm.begin(), perm.end(), rng);
      std::sort(perm.begin(), perm.begin() + N);
      for (int s = 0; s < N; ++s) idx[(g * N + s) * q + v] = static_cast<uint8_t>(perm[s]);
    }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < k; ++c) xt[c * ldxt + i] = x[i * k + c];

  float *d_xt, *d_values, *d_y, *d_y2;
  uint8_t* d_idx;
  CK(cudaMalloc(&d_xt, xt.size() * 4));
  CK(cudaMalloc(&d_values, values.size() * 4));
  CK(cudaMalloc(&d_y, m * n * 4));
  CK(cudaMalloc(&d_y2, m * n * 4));
  CK(cudaMalloc(&d_idx, idx.size()));
  CK(cudaMemcpy(d_xt, xt.data(), xt.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_values, values.data(), values.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_idx, idx.data(), idx.size(), cudaMemcpyHostToDevice));

  SpmmParams p = {};
  p.xt = d_xt; p.ldxt = ldxt; p.values = d_values; p.indices = d_idx; p.y = d_y;
  p.m = m; p.n = n; p.k = k; p.N = N; p.M = M; p.L = L; p.split_k = 1; p.bulk_store = true;

  // 4096 sampled entries of the fp64 reference.
  std::vector<int64_t> si(4096), sj(4096);
  std::vector<double> ref(4096), mag(4096);
  std::uniform_int_distribution<int64_t> Ri(0, m - 1), Rj(0, n - 1);
  for (int t = 0; t < 4096; ++t) {
    si[t] = Ri(rng); sj[t] = Rj(rng);
    double s = 0, a = 0;
    for (int64_t u = 0; u < w; ++u) {
      const int64_t kk = (u / N) * M + idx[u * q + sj[t] / L];
      const double prod = static_cast<double>(x[si[t] * k + kk]) * values[u * n + sj[t]];
      s += prod; a += std::fabs(prod);
    }
    ref[t] = s; mag[t] = a;
  }

  std::vector<Variant> vars;
  if (N == 16) vars = variants_for<16>();
  else if (N == 12) vars = variants_for<12>();
  else if (N == 8) vars = variants_for<8>();
  else vars = variants_for<4>();
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const double flops = 2.0 * m * n * k * N / M;
  std::vector<float> y(m * n), y2(m * n);
  for (auto& v : vars) {
    CK(cudaMemset(d_y, 0xff, m * n * 4));  // NaN: an unwritten entry cannot pass
    p.y = d_y;
    cudaError_t err = v.launch(p, st);
    if (err != cudaSuccess) { printf("%6ld %6ld %6ld %2d:32 %-22s launch error %s\n", (long)m, (long)n, (long)k, N, v.name.c_str(), cudaGetErrorString(err)); cudaGetLastError(); continue; }
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(y.data(), d_y, m * n * 4, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (int t = 0; t < 4096; ++t) {
      const double e = std::fabs(y[si[t] * n + sj[t]] - ref[t]) / (mag[t] + 1e-30);
      worst = std::max(worst, std::isnan(e) ? 1e30 : e);
    }
    bool any_nan = false;
    for (float f : y) if (std::isnan(f)) { any_nan = true; break; }
    // Repeat into a second buffer: bitwise equal?
    p.y = d_y2;
    CK(v.launch(p, st));
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(y2.data(), d_y2, m * n * 4, cudaMemcpyDeviceToHost));
    const bool same = std::equal(y.begin(), y.end(), y2.begin(), [](float a, float b) { return std::memcmp(&a, &b, 4) == 0; });
    // Timing: 3 batches of 20 launches, the fastest batch.
    for (int i = 0; i < 5; ++i) CK(v.launch(p, st));
    float best = 1e30f;
    for (int b = 0; b < 3; ++b) {
      CK(cudaEventRecord(e0, st));
      for (int i = 0; i < 20; ++i) v.launch(p, st);
      CK(cudaEventRecord(e1, st));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      best = std::min(best, ms / 20);
    }
    const bool ok = worst < 1e-5 && !any_nan && same;
    printf("%6ld %6ld %6ld %2d:32 %-22s %9.1f us %6.1f TFLOP/s  err %.1e%s%s %s\n", (long)m, (long)n, (long)k, N,
           v.name.c_str(), best * 1e3, flops / (best * 1e-3) / 1e12, worst, any_nan ? " NaN" : "",
           same ? "" : " NONDETERMINISTIC", ok ? "ok" : "FAIL");
  }
  fflush(stdout);
  cudaFree(d_xt); cudaFree(d_values); cudaFree(d_y); cudaFree(d_y2); cudaFree(d_idx);
  cudaStreamDestroy(st);
}

int main(int argc, char** argv) {
  std::mt19937 rng(1234);
  std::vector<int64_t> s;
  for (int i = 1; i < argc; ++i) s.push_back(std::atoll(argv[i]));
  if (s.empty()) s = {4096, 4096, 4096, 1000, 4096, 4096, 512, 5120, 5120};
  int dev = 0;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  for (int N : {16, 12, 8, 4})
    for (size_t i = 0; i + 2 < s.size(); i += 3) run_shape(s[i], s[i + 1], s[i + 2], N, rng);
  return 0;
}
