// Torch-free check of csr_spmm_xt_gather, made to run under compute-sanitizer: random CSR weights with
// empty, dense, unsorted and repeated-column rows, some with corrupted (or random) row pointers and columns,
// fp32 / bf16, m = 1..300, against a CPU fp64 product under the op's masking rules (a row's range
// clamped to [0, nnz], columns outside [0, k) skipped). Exit status: the number of failed cases.
//   nvcc -std=c++20 -O3 -arch=sm_90a -I csrc -o /tmp/csr_kernel_check tools/csr_kernel_check.cu \
//        csrc/cuda/kernels/csr/csr_spmm_xt_gather.cu
//   compute-sanitizer --tool memcheck /tmp/csr_kernel_check   (and --tool racecheck)
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <random>
#include <cuda_bf16.h>
#include <cstring>
#include <string>
#include "cuda/kernels/csr/csr_spmm.h"
using namespace nmspmm::kernels;

static float bf16_round(float f) { uint32_t u; memcpy(&u, &f, 4); u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u; float r; memcpy(&r, &u, 4); return r; }

template <typename T>
int run(int m, int n, int k, int corrupt, unsigned seed, bool balanced) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> U(-1, 1);
  std::vector<int32_t> crow(n + 1), col;
  std::vector<float> val;
  for (int r = 0; r < n; ++r) {
    crow[r] = col.size();
    int len = (r % 5 == 0) ? 0 : (r % 7 == 0 ? k : g() % (k / 4 + 1));
    for (int j = 0; j < k && (int)col.size() - crow[r] < len; ++j) if ((int)(g() % k) < len) { col.push_back(j); val.push_back(U(g)); }
    if (r % 3 == 1 && (int)col.size() - crow[r] >= 2) std::swap(col[crow[r]], col.back());  // unsorted
    if (r % 4 == 2 && (int)col.size() - crow[r] >= 2) col.back() = col[crow[r]];              // repeat
  }
  crow[n] = col.size();
  int64_t nnz = col.size();
  if (corrupt) { for (int i = 0; i < nnz; i += 11) col[i] = (int32_t)g(); crow[n / 2] = -50; crow[n / 3] = nnz + 99; }
  if (corrupt == 2) for (auto& c : crow) c = (int32_t)(g() % (nnz + 100)) - 50;  // row pointers in any order
  std::vector<float> x((size_t)m * k);
  for (auto& v : x) v = U(g);
  if (sizeof(T) == 2) { for (auto& v : x) v = bf16_round(v); for (auto& v : val) v = bf16_round(v); }
  // reference (masked)
  std::vector<double> ref((size_t)m * n, 0.0);
  for (int r = 0; r < n; ++r) {
    int64_t b = crow[r], e = crow[r + 1];
    b = b < 0 ? 0 : b > nnz ? nnz : b; e = e < b ? b : e > nnz ? nnz : e;
    for (int64_t p = b; p < e; ++p) if (col[p] >= 0 && col[p] < k) for (int t = 0; t < m; ++t) ref[(size_t)t * n + r] += (double)val[p] * x[(size_t)t * k + col[p]];
  }
  auto conv = [](const std::vector<float>& v) { std::vector<T> o(v.size()); for (size_t i = 0; i < v.size(); ++i) o[i] = T(v[i]); return o; };
  std::vector<T> xh = conv(x), vh = conv(val);
  T *dx, *dv, *dy, *dw; int32_t *dcrow, *dcol;
  const CsrType type = sizeof(T) == 4 ? CsrType::kF32 : CsrType::kBF16;
  cudaMalloc(&dx, xh.size() * sizeof(T)); cudaMalloc(&dv, std::max<size_t>(1, vh.size()) * sizeof(T));
  cudaMalloc(&dy, (size_t)m * n * sizeof(T)); cudaMalloc(&dw, csr_xt_gather_workspace_bytes(m, n, k, type, balanced));
  cudaMalloc(&dcrow, crow.size() * 4); cudaMalloc(&dcol, std::max<size_t>(1, col.size()) * 4);
  cudaMemcpy(dx, xh.data(), xh.size() * sizeof(T), cudaMemcpyHostToDevice);
  cudaMemcpy(dv, vh.data(), vh.size() * sizeof(T), cudaMemcpyHostToDevice);
  cudaMemcpy(dcrow, crow.data(), crow.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dcol, col.data(), col.size() * 4, cudaMemcpyHostToDevice);
  CsrSpmmParams p{};
  p.x = dx; p.ldx = k; p.crow_indices = dcrow; p.col_indices = dcol; p.values = dv; p.bias = nullptr; p.y = dy;
  p.m = m; p.n = n; p.k = k; p.nnz = nnz; p.dtype = type;
  cudaError_t e = launch_csr_spmm_xt_gather(p, dw, balanced, /*overlap=*/true, 0);
  cudaError_t e2 = cudaDeviceSynchronize();
  std::vector<T> yh((size_t)m * n);
  cudaMemcpy(yh.data(), dy, yh.size() * sizeof(T), cudaMemcpyDeviceToHost);
  double num = 0, den = 0;
  for (size_t i = 0; i < yh.size(); ++i) { double d = (double)(float)yh[i] - ref[i]; num += d * d; den += ref[i] * ref[i]; }
  double rel = std::sqrt(num / (den > 0 ? den : 1));
  double tol = sizeof(T) == 4 ? 1e-5 : 1e-2;
  printf("%s m=%d n=%d k=%d nnz=%lld corrupt=%d balanced=%d: launch %s sync %s rel err %.2e %s\n",
         sizeof(T) == 4 ? "fp32" : "bf16", m, n, k, (long long)nnz, corrupt, balanced, cudaGetErrorString(e), cudaGetErrorString(e2), rel, rel <= tol ? "ok" : "FAIL");
  cudaFree(dx); cudaFree(dv); cudaFree(dy); cudaFree(dw); cudaFree(dcrow); cudaFree(dcol);
  return rel <= tol && e == cudaSuccess && e2 == cudaSuccess ? 0 : 1;
}

int main() {
  int bad = 0;
  for (bool bal : {false, true}) {  // blocks of fixed rows, and blocks balanced by nonzeros
    bad += run<float>(300, 70, 700, false, 1, bal);
    bad += run<__nv_bfloat16>(300, 70, 700, false, 2, bal);
    bad += run<__nv_bfloat16>(129, 33, 129, false, 3, bal);
    bad += run<float>(150, 40, 300, true, 4, bal);
    bad += run<__nv_bfloat16>(150, 40, 300, true, 5, bal);
    bad += run<__nv_bfloat16>(16, 700, 129, false, 6, bal);  // several 256-row tiles per block
    bad += run<__nv_bfloat16>(16, 700, 129, true, 7, bal);
    bad += run<__nv_bfloat16>(40, 2000, 4096, 0, 8, bal);  // dense rows cut across blocks' shares
    bad += run<float>(12, 3000, 64, 2, 9, bal);            // random row pointers
    bad += run<__nv_bfloat16>(300, 900, 129, 2, 10, bal);
    for (int m : {1, 3, 16, 17, 40, 64, 65, 200}) {
      bad += run<__nv_bfloat16>(m, 77, 257, false, 10 + m, bal);
      bad += run<float>(m, 77, 257, m % 2 == 1, 20 + m, bal);
      bad += run<__nv_bfloat16>(m, 45, 129, true, 30 + m, bal);
    }
  }
  printf("failures: %d\n", bad);
  return bad;
}
