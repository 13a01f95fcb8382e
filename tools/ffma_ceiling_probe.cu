// How fast can a CUDA C FFMA loop with kernel 21's thread tile issue on this GPU, with nothing else
// in the way? (session 36). Issue #3's 4096^3 targets ask 80% of the FP32 peak on the whole op at
// 16:32 and 12:32, the x transpose and the tile rounds included; this probe measures the ceiling
// of the loop alone as ptxas compiles it.
//
// One block of 8 warps (256 threads, launch bounds 1 block per SM: 2 warps per scheduler, as kernel
// 21's math warps) per SM; every thread holds a 16 (m) x 8 (n) accumulator tile (the *8x8 variants:
// 16 warps with 8 x 8 tiles, 4 warps per scheduler, as the warp-packed kernels) and runs
// `iters` passes over KR = 16 k-rows held in shared memory, fully unrolled per pass. Variants:
//   regs    the FFMAs alone: the fragments stay in registers (no loads in the loop);
//   lds     per k-row, the A fragment as 4 LDS.128 and the B fragment as 2 LDS.128 (conflict-free,
//           1 wavefront each: fewer than kernel 21's 2);
//   gather  as lds, but the A row's byte offset is first read from a per-warp table in shared memory
//           (kernel 21's D_s), so each A load waits on an LDS + add, as in kernel 21;
//   k21map  as gather, with kernel 21's warp tile (128 m x 32 n) and lane map.
// Prints per variant: time, FFMA lanes per SM per cycle, % of FP32 peak at the clock measured inside
// the kernel (clock64 over globaltimer, block 0), and a checksum (the same data gives the same sum
// as long as the loop does its FMAs; lds and gather visit the same rows in another order).
// Self-contained on purpose (the kernels' FMA orders are in csrc/cuda/kernels/fma_order.cuh; this
// file keeps the copies it was measured with, benchmarks/results/h100/experiments/s36/):
//   nvcc -std=c++17 -O3 -arch=sm_90a -o /tmp/ffma_ceiling tools/ffma_ceiling_probe.cu
// (-DFFMA_ORDER_SERPENTINE=1: the FMAs of a fragment in 2x2 blocks, serpentine)
//   /tmp/ffma_ceiling [iters]
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                   \
  do {                                                                          \
    cudaError_t e_ = (x);                                                       \
    if (e_ != cudaSuccess) {                                                    \
      printf("CUDA error %s at line %d\n", cudaGetErrorString(e_), __LINE__);  \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)

constexpr int KR = 16;       // k-rows per pass (kernel 21's 16-row stage)
constexpr int BM = 128;      // block tile m
constexpr int BN = 256;      // block tile n
constexpr int kMaxThreads = 512;

enum Variant { kRegs = 0, kLds = 1, kGather = 2, kK21 = 3 };

// TM: rows of the thread tile (16: kernel 21's 16 x 8, 256 threads = 2 warps per scheduler; 8: 8 x 8,
// 512 threads = 4 warps per scheduler). The block tile is 128 x 256 either way.
template <int V, int TM>
__global__ void __launch_bounds__(256 * 16 / TM, 1)
    ffma_ceiling_kernel(const float* __restrict__ a_in, const float* __restrict__ b_in, int iters,
                        float* __restrict__ out, long long* __restrict__ clocks) {
  __shared__ __align__(16) float a_s[KR * BM];
  __shared__ __align__(16) float b_s[KR * BN];
  constexpr int kThreads = 256 * 16 / TM;
  static_assert(V != kK21 || TM == 16, "kernel 21's lane map is for its 16 x 8 tile");
  __shared__ __align__(16) int d_s[kThreads / 32 * KR];  // per warp: byte offset of each k-row's A row in a_s
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int i = tid; i < KR * BM; i += kThreads) a_s[i] = a_in[i];
  for (int i = tid; i < KR * BN; i += kThreads) b_s[i] = b_in[i];
  // Warp w reads its rows in a permuted order (a gather, as kernel 21's D_s makes it).
  if (tid < kThreads / 32 * KR) d_s[tid] = ((tid % KR) * 5 + tid / KR) % KR * BM * 4;
  __syncthreads();

  const int wm = warp / 4, wn = warp % 4, lm = lane / 8, ln = lane % 8;
  // kK21: kernel 21's warp tile (128 m x 32 n: one L = 32 vector per warp) and lane map (paired
  // lanes: lanes 2i and 2i + 1 share their A address, lanes i and i ^ 2 their B address).
  const int a_col = V == kK21 ? ((lane >> 1) & 7) * 4 : wm * 4 * TM + lm * 4;  // + a_step * {0, .., TM / 4 - 1}
  const int a_step = V == kK21 ? 32 : 16;
  const int b_col = V == kK21 ? warp * 32 + ((lane & 1) | ((lane >> 4) << 1)) * 4 : wn * 64 + ln * 4;  // + {0, b_step}
  const int b_step = V == kK21 ? 16 : 32;
  const char* a_base = reinterpret_cast<const char*>(a_s) + a_col * 4;
  const int* d_w = d_s + warp * KR;

  float acc[TM][8];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

  float ra[TM], rb[8];  // kRegs: fragments loaded once
#pragma unroll
  for (int i = 0; i < TM / 4; ++i) {
    const float4 v = *reinterpret_cast<const float4*>(a_s + a_col + a_step * i);
    ra[4 * i] = v.x, ra[4 * i + 1] = v.y, ra[4 * i + 2] = v.z, ra[4 * i + 3] = v.w;
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float4 v = *reinterpret_cast<const float4*>(b_s + b_col + b_step * i);
    rb[4 * i] = v.x, rb[4 * i + 1] = v.y, rb[4 * i + 2] = v.z, rb[4 * i + 3] = v.w;
  }

  long long c0 = 0, t0 = 0;
  if (blockIdx.x == 0 && tid == 0) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    c0 = clock64();
  }
  // Fragments double-buffered as kernel 21 does (load row r + 1, then the FMAs of row r); the gather
  // offsets of a 4-row group read one group ahead as an int4.
  struct Frag {
    float a[TM], b[8];
  };
  auto load_frag = [&](Frag& f, int a_off, int k) {
    if (V == kRegs) {
#pragma unroll
      for (int i = 0; i < TM; ++i) f.a[i] = ra[i];
#pragma unroll
      for (int j = 0; j < 8; ++j) f.b[j] = rb[j];
      return;
    }
    const char* arow = a_base + a_off;
#pragma unroll
    for (int i = 0; i < TM / 4; ++i) {
      const float4 v = *reinterpret_cast<const float4*>(arow + 4 * a_step * i);
      f.a[4 * i] = v.x, f.a[4 * i + 1] = v.y, f.a[4 * i + 2] = v.z, f.a[4 * i + 3] = v.w;
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float4 v = *reinterpret_cast<const float4*>(b_s + k * BN + b_col + b_step * i);
      f.b[4 * i] = v.x, f.b[4 * i + 1] = v.y, f.b[4 * i + 2] = v.z, f.b[4 * i + 3] = v.w;
    }
  };
  auto fma_frag = [&](const Frag& f) {
#if FFMA_ORDER_SERPENTINE
    // 2x2 blocks walked in a serpentine, each FMA sharing one operand with the one before (cuBLAS's
    // order, whose SASS reuses both operands).
#pragma unroll
    for (int i = 0; i < TM; i += 2)
#pragma unroll
      for (int jj = 0; jj < 8; jj += 2) {
        const int j = (i / 2) % 2 ? 6 - jj : jj;
        acc[i][j] = fmaf(f.a[i], f.b[j], acc[i][j]);
        acc[i][j + 1] = fmaf(f.a[i], f.b[j + 1], acc[i][j + 1]);
        acc[i + 1][j + 1] = fmaf(f.a[i + 1], f.b[j + 1], acc[i + 1][j + 1]);
        acc[i + 1][j] = fmaf(f.a[i + 1], f.b[j], acc[i + 1][j]);
      }
#else
    // Kernel 21's order: TM A values outer, 8 B values inner.
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(f.a[i], f.b[j], acc[i][j]);
#endif
  };
  auto offsets = [&](int g) {
    if (V == kGather || V == kK21) return *reinterpret_cast<const int4*>(d_w + 4 * g);
    return make_int4((4 * g) * BM * 4, (4 * g + 1) * BM * 4, (4 * g + 2) * BM * 4, (4 * g + 3) * BM * 4);
  };
#pragma unroll 1
  for (int it = 0; it < iters; ++it) {
    // Shared memory is invariant here: without this the compiler hoists every pass's loads out of
    // the loop (384 registers, spills). Kernel 21's stages are separated by barriers the same way.
    asm volatile("" ::: "memory");
    Frag fa, fb;
    int4 c = offsets(0);
    load_frag(fa, c.x, 0);
#pragma unroll
    for (int g = 0; g < KR / 4; ++g) {
      const int4 nx = g + 1 < KR / 4 ? offsets(g + 1) : c;
      const int r = 4 * g;
      load_frag(fb, c.y, r + 1);
      fma_frag(fa);
      load_frag(fa, c.z, r + 2);
      fma_frag(fb);
      load_frag(fb, c.w, r + 3);
      fma_frag(fa);
      if (g + 1 < KR / 4) load_frag(fa, nx.x, r + 4);
      fma_frag(fb);
      c = nx;
    }
  }
  if (blockIdx.x == 0 && tid == 0) {
    long long t1;
    const long long c1 = clock64();
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    clocks[0] = c1 - c0;
    clocks[1] = t1 - t0;
  }
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) s += acc[i][j];
  out[static_cast<int64_t>(blockIdx.x) * kThreads + tid] = s;
}

template <int V, int TM = 16>
void run(const char* name, int sms, int iters, const float* a, const float* b, float* out, long long* clk) {
  auto kernel = ffma_ceiling_kernel<V, TM>;
  constexpr int kThreads = 256 * 16 / TM;
  cudaFuncAttributes attr;
  CK(cudaFuncGetAttributes(&attr, kernel));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  kernel<<<sms, kThreads>>>(a, b, 2, out, clk);  // warm-up
  CK(cudaDeviceSynchronize());
  float best = 1e30f;
  long long hc[2] = {0, 0};
  for (int rep = 0; rep < 5; ++rep) {
    CK(cudaEventRecord(e0));
    kernel<<<sms, kThreads>>>(a, b, iters, out, clk);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (ms < best) {
      best = ms;
      CK(cudaMemcpy(hc, clk, sizeof(hc), cudaMemcpyDeviceToHost));
    }
  }
  std::vector<float> h(static_cast<size_t>(sms) * kThreads);
  CK(cudaMemcpy(h.data(), out, h.size() * sizeof(float), cudaMemcpyDeviceToHost));
  double sum = 0;
  for (float v : h) sum += v;
  const double mhz = static_cast<double>(hc[0]) / static_cast<double>(hc[1]) * 1e3;
  const double ffma_lanes = static_cast<double>(sms) * kThreads * iters * KR * TM * 8.0;
  const double lanes_per_sm_cycle = ffma_lanes / sms / (best * 1e-3 * mhz * 1e6);
  printf("%-9s regs %3d  %8.3f ms  clock %6.0f MHz  %6.1f FFMA lanes/SM/cycle  %5.1f%% of peak  sum %.6e\n", name,
         attr.numRegs, best, mhz, lanes_per_sm_cycle, 100.0 * lanes_per_sm_cycle / 128.0, sum);
}

int main(int argc, char** argv) {
  const int iters = argc > 1 ? atoi(argv[1]) : 20000;
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  printf("%s, %d SMs, %d iters x %d k-rows per thread\n", prop.name, sms, iters, KR);
  std::vector<float> ha(KR * BM), hb(KR * BN);
  // Small values so 20000 x 16 FMAs stay finite and the sums comparable.
  for (size_t i = 0; i < ha.size(); ++i) ha[i] = 1e-4f * static_cast<float>((i * 37) % 101) / 101.f;
  for (size_t i = 0; i < hb.size(); ++i) hb[i] = 1e-4f * static_cast<float>((i * 53) % 103) / 103.f;
  float *a, *b, *out;
  long long* clk;
  CK(cudaMalloc(&a, ha.size() * 4));
  CK(cudaMalloc(&b, hb.size() * 4));
  CK(cudaMalloc(&out, static_cast<size_t>(sms) * kMaxThreads * 4));
  CK(cudaMalloc(&clk, 2 * sizeof(long long)));
  CK(cudaMemcpy(a, ha.data(), ha.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b, hb.data(), hb.size() * 4, cudaMemcpyHostToDevice));
  for (int r = 0; r < 2; ++r) {
    run<kRegs>("regs", sms, iters, a, b, out, clk);
    run<kLds>("lds", sms, iters, a, b, out, clk);
    run<kGather>("gather", sms, iters, a, b, out, clk);
    run<kK21>("k21map", sms, iters, a, b, out, clk);
    run<kRegs, 8>("regs8x8", sms, iters, a, b, out, clk);
    run<kGather, 8>("gather8x8", sms, iters, a, b, out, clk);
  }
  return 0;
}
