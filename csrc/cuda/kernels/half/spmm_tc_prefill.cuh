// Tensor-core prefill SpMM for vector-wise N:M weights in fp16 / bf16 (mma.sync m16n8k16, fp32
// accumulation, sm_80+ instructions only).
//
//   y[m, n] = x[m, k] . W^T (+ bias),  W given by the documented compressed format:
//   values [w, n] (compressed k-slot rows, output columns contiguous), indices [w, n / L] uint8.
//
// Per vector (L outputs) the kept input positions are shared, so after compaction each vector is a
// dense GEMM over its w = k * N / M slots. Tensor-core roles: A = W (16 outputs x 16 slots),
// B = gathered activations (16 slots x 8 tokens).
//
// * The activations are first copied k-major, xT[k][m_pad] (m_pad = m rounded up to 8), by a small
//   transpose kernel that is part of the op.
// * A CTA owns BM outputs (BM / L vectors, BM = 128 or 256) x 128 tokens and walks the k windows in
//   stages of `ws` windows. Each stage brings into shared memory, with 16-byte cp.async and a
//   multi-stage pipeline:
//     - the dense xT slab [ws * M rows x 128 tokens] (one 256-byte row per input feature, 16-byte
//       chunks XOR-swizzled by row & 7) plus one zero row,
//     - the values tile [s_pad slots x BM outputs] in the documented layout (s_pad = ws * N rounded
//       up to 16; missing slots are zero-filled), XOR-swizzled by slot & 7,
//     - a table of slab row numbers per (vector, slot), built from the index bytes (masked with
//       M - 1, so no byte value can address outside its window); padded slots point at the zero row.
// * A warp owns 32 outputs x 128 tokens (128 fp32 accumulators per thread; config bit 6: 32 x 64
//   with twice the warps). Per 16 slots it loads
//   its two A fragments with ldmatrix.x4.trans straight from the values tile, and its B fragments
//   with ldmatrix.x4.trans whose per-lane row addresses come from the table (the gather costs no
//   extra instruction), then issues 32 mma.sync.
// * Epilogue: accumulators (+ bias) are staged through shared memory and written with coalesced
//   16-byte stores in the input dtype; with split-K, CTAs write fp32 partials to scratch and a
//   reduce kernel sums them, adds the bias and converts.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/common/cp_async.cuh"
#include "cuda/kernels/half/spmm_half.h"
#include "cuda/kernels/half/tc_prefill_stage.h"
#include "cuda/kernels/half/x_transpose.cuh"
#include "cuda/kernels/common/launch_overlap.cuh"

namespace nmspmm {
namespace kernels {
namespace tc_prefill {

constexpr int kTabPerThread = 4;

// Geometry of one launch, computed on the host.
struct Geometry {
  int bm;           // outputs per CTA (128 or 256)
  int ws;           // windows per stage
  int bkd;          // dense rows per stage = ws * M
  int s;            // real slots per stage = ws * N
  int s_pad;        // s rounded up to 16
  int nst;          // stages over the whole k = ceil(G / ws)
  int stages;       // pipeline depth
  int split;        // split-K factor
  int vpc;          // vectors per CTA = bm / L
  int slab_off, val_off, tab_off, stage_bytes, smem_bytes;
  int slab_half;    // warp-specialized form: bytes of one slab half
  int bar_off;      // warp-specialized form: offset of the mbarriers
  int64_t m_pad;
};

struct KernelArgs {
  const void* xT;           // [k][m_pad]
  const void* values;       // [w][n]
  const uint8_t* indices;   // [w][n / L]
  const void* bias;         // [n] or nullptr
  void* y;                  // [m][n]
  float* part;              // [split][m][n] fp32 partials (split > 1)
  int64_t m, n, k, w, m_pad;
  int N, M, L;
  Geometry g;
};

// ------------------------------------------------------------------------------------------------
// Device helpers

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma16816<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <typename T>
__device__ __forceinline__ float to_f32(T v);
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <>
__device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

__device__ __forceinline__ void wait_pending(int n) {
  // cp.async.wait_group takes an immediate; the pipeline depth is a launch parameter (2..6).
  switch (n) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    case 3: cp_async_wait<3>(); break;
    default: cp_async_wait<4>(); break;
  }
}

// ------------------------------------------------------------------------------------------------
// Split-K reduction: y[t][o] = sum_z part[z][t][o] + bias[o], 8 outputs per thread.
template <typename T>
__global__ void __launch_bounds__(256) reduce_kernel(const float* __restrict__ part, const T* __restrict__ bias,
                                                     T* __restrict__ y, int64_t m, int64_t n, int split) {
  const int64_t chunks = m * (n / 8);
  const int64_t plane = m * n;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t off = c * 8;
    float acc[8];
    const float4* p0 = reinterpret_cast<const float4*>(part + off);
    float4 a = p0[0], b = p0[1];
    acc[0] = a.x; acc[1] = a.y; acc[2] = a.z; acc[3] = a.w;
    acc[4] = b.x; acc[5] = b.y; acc[6] = b.z; acc[7] = b.w;
    for (int z = 1; z < split; ++z) {
      const float4* pz = reinterpret_cast<const float4*>(part + z * plane + off);
      a = pz[0];
      b = pz[1];
      acc[0] += a.x; acc[1] += a.y; acc[2] += a.z; acc[3] += a.w;
      acc[4] += b.x; acc[5] += b.y; acc[6] += b.z; acc[7] += b.w;
    }
    const int64_t o = off % n;
    alignas(16) T out[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = from_f32<T>(acc[j] + (bias ? to_f32<T>(bias[o + j]) : 0.f));
    *reinterpret_cast<uint4*>(y + off) = *reinterpret_cast<const uint4*>(out);
  }
}

// Epilogue: the block's accumulators (+ bias) staged through shared memory, then coalesced 16-byte
// stores in the input dtype; with split-K, fp32 partials to the scratch. NT threads (the math
// warps) take part; the caller has made the shared memory free.
template <typename T, int BM, int WN, int NT, int BAR>
__device__ __forceinline__ void store_tile(const KernelArgs& a, unsigned char* smem, const float (&acc)[2][WN / 8][4],
                                           int wm, int wn, int tid, int lane, int64_t n0, int64_t t0, int z) {
  constexpr int NJ = WN / 8;
  constexpr int VCH = BM / 8;  // 16-byte chunks per output row of the tile
  const Geometry& g = a.g;
  auto sync_math = [] { asm volatile("bar.sync %0, %1;\n" ::"n"(BAR), "n"(NT) : "memory"); };
  const int orow = lane >> 2, tcol = (lane & 3) * 2;
  if (g.split == 1) {
    constexpr int STR = BM + 8;  // elements per token row
    T* st = reinterpret_cast<T*>(smem);
    const T* bias = static_cast<const T*>(a.bias);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int o = wm * 32 + i * 16 + orow + h * 8;
        const float bv = (bias && n0 + o < a.n) ? to_f32<T>(bias[n0 + o]) : 0.f;
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
          const int t = wn * WN + j * 8 + tcol;
          st[t * STR + o] = from_f32<T>(acc[i][j][2 * h] + bv);
          st[(t + 1) * STR + o] = from_f32<T>(acc[i][j][2 * h + 1] + bv);
        }
      }
    }
    sync_math();
    T* y = static_cast<T*>(a.y);
    for (int i = tid; i < kBN * VCH; i += NT) {
      const int t = i / VCH, c = i % VCH;
      const int64_t tt = t0 + t, col = n0 + c * 8;
      if (tt < a.m && col < a.n)
        *reinterpret_cast<uint4*>(y + tt * a.n + col) = *reinterpret_cast<const uint4*>(st + t * STR + c * 8);
    }
  } else {
    constexpr int STR = BM + 4;  // floats per token row
    float* st = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int o = wm * 32 + i * 16 + orow + h * 8;
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
          const int t = wn * WN + j * 8 + tcol;
          st[t * STR + o] = acc[i][j][2 * h];
          st[(t + 1) * STR + o] = acc[i][j][2 * h + 1];
        }
      }
    }
    sync_math();
    float* part = a.part + static_cast<int64_t>(z) * a.m * a.n;
    for (int i = tid; i < kBN * (BM / 4); i += NT) {
      const int t = i / (BM / 4), c = i % (BM / 4);
      const int64_t tt = t0 + t, col = n0 + c * 4;
      if (tt < a.m && col < a.n)
        *reinterpret_cast<float4*>(part + tt * a.n + col) = *reinterpret_cast<const float4*>(st + t * STR + c * 4);
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Main kernel. BM outputs x 128 tokens per CTA; warps of 32 outputs x WN tokens (WN = 128 or 64),
// (BM / 32) x (128 / WN) of them. VG = m16 vector groups per warp: 2 when L = 16 (each m16 tile
// is its own vector), else 1.
template <typename T, int BM, int VG, int WN>
__global__ void __launch_bounds__(BM * (kBN / WN), 1) tc_prefill_kernel(const KernelArgs a) {
  constexpr int NWM = BM / 32;           // warps along the outputs
  constexpr int NT = BM * (kBN / WN);    // threads
  constexpr int NJ = WN / 8;             // n8 tiles per warp
  constexpr int ROWB = BM * 2;   // bytes of one values-tile row
  constexpr int VCH = BM / 8;    // 16-byte chunks per values row
  extern __shared__ __align__(1024) unsigned char smem[];

  const Geometry& g = a.g;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp % NWM, wn = warp / NWM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * BM;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kBN;
  const int z = blockIdx.z;
  const int st_begin = static_cast<int>(static_cast<int64_t>(z) * g.nst / g.split);
  const int st_end = static_cast<int>(static_cast<int64_t>(z + 1) * g.nst / g.split);
  const int nloc = st_end - st_begin;
  const int N = a.N, M = a.M, L = a.L;
  const int64_t q = a.n / L;
  const int64_t v0 = n0 / L;
  const int tab_entries = g.s_pad * g.vpc;

  const T* values = static_cast<const T*>(a.values);
  const T* xT = static_cast<const T*>(a.xT);
  const uint32_t sbase = smem_u32(smem);

  // Zero row of every stage's slab (never overwritten by the copies).
  for (int b = 0; b < g.stages; ++b) {
    if (tid < kSlabRowBytes / 16) {
      *reinterpret_cast<uint4*>(smem + b * g.stage_bytes + g.slab_off + g.bkd * kSlabRowBytes + tid * 16) =
          make_uint4(0, 0, 0, 0);
    }
  }

  // Copy assignments (fixed per thread; rows step by a multiple of 8, so the swizzle term is fixed).
  // Slab: chunk sc = tid & 15 of rows tid / 16 + j * (NT / 16).
  constexpr int SLAB_STEP = NT / 16;
  const int sc = tid & 15, sr0 = tid >> 4;
  const bool slab_tok_ok = t0 + sc * 8 < a.m_pad;
  const uint32_t slab_dst0 = static_cast<uint32_t>(g.slab_off + sr0 * kSlabRowBytes + ((sc ^ (sr0 & 7)) << 4));
  const T* slab_src0 = xT + static_cast<int64_t>(sr0) * a.m_pad + t0 + sc * 8;
  // Values: chunk vc = tid % VCH of rows tid / VCH + j * (NT / VCH).
  constexpr int VAL_STEP = NT / VCH;
  static_assert(SLAB_STEP % 8 == 0 && VAL_STEP % 8 == 0, "copy row steps must keep row & 7 fixed");
  const int vc = tid % VCH, vr0 = tid / VCH;
  const bool val_col_ok = n0 + vc * 8 < a.n;
  const uint32_t val_dst0 = static_cast<uint32_t>(g.val_off + vr0 * ROWB + ((vc ^ (vr0 & 7)) << 4));
  const T* val_src0 = values + static_cast<int64_t>(vr0) * a.n + n0 + vc * 8;

  auto issue_stage = [&](int st, int buf) {
    const int64_t gw0 = static_cast<int64_t>(st) * g.ws;  // first window of the stage
    const int64_t u0 = gw0 * N;                           // first compressed row
    unsigned char* sb = smem + buf * g.stage_bytes;
    // values tile [s_pad][BM]; slots past the stage's real ones or past w are zero-filled
    {
      const int64_t left = a.w - u0;
      const int s_ok = left < g.s ? static_cast<int>(left) : g.s;
      const T* src = val_src0 + u0 * a.n;
      uint32_t dst = val_dst0;
      for (int r = vr0; r < g.s_pad; r += VAL_STEP) {
        const bool ok = val_col_ok && r < s_ok;
        cp_async_16(sb + dst, ok ? src : values, ok);
        src += VAL_STEP * a.n;
        dst += VAL_STEP * ROWB;
      }
    }
    // xT slab [bkd][128 tokens]; rows at or beyond k are never referenced by the table
    {
      const int64_t left = a.k - gw0 * M;
      const int rows = left < g.bkd ? static_cast<int>(left) : g.bkd;
      const T* src = slab_src0 + gw0 * M * a.m_pad;
      uint32_t dst = slab_dst0;
      for (int r = sr0; r < rows; r += SLAB_STEP) {
        cp_async_16(sb + dst, slab_tok_ok ? src : xT, slab_tok_ok);
        src += SLAB_STEP * a.m_pad;
        dst += SLAB_STEP * kSlabRowBytes;
      }
    }
  };

  // Index table: entry e = vl * s_pad + r holds the slab row of slot r for local vector vl.
  // Per thread entries e = tid + j * NT (j < 4); their (vl, r) are fixed across stages.
  int tab_off[kTabPerThread];    // r * q + vl (index-byte offset from the stage's first row), -1: none
  int tab_pos[kTabPerThread];    // (r / N) * M | r << 16
#pragma unroll
  for (int j = 0; j < kTabPerThread; ++j) {
    const int e = tid + j * NT;
    const int vl = e / g.s_pad, r = e % g.s_pad;
    const bool ok = e < tab_entries && r < g.s && v0 + vl < q;
    tab_off[j] = ok ? static_cast<int>(r * q + v0 + vl) : -1;
    tab_pos[j] = ((r / N) * M) | (r << 16);
  }
  uint32_t tab_raw[kTabPerThread];
  auto load_tab = [&](int st) {
    const int64_t u0 = static_cast<int64_t>(st) * g.ws * N;
    const uint8_t* base = a.indices + u0 * q;
#pragma unroll
    for (int j = 0; j < kTabPerThread; ++j) {
      uint32_t val = static_cast<uint32_t>(g.bkd);  // padded slot: the zero row
      if (tab_off[j] >= 0 && u0 + (tab_pos[j] >> 16) < a.w) {
        const uint32_t byte = __ldg(base + tab_off[j]);
        val = static_cast<uint32_t>(tab_pos[j] & 0xFFFF) + (byte & static_cast<uint32_t>(M - 1));
      }
      tab_raw[j] = val;
    }
  };
  auto store_tab = [&](int buf) {
    uint16_t* tab = reinterpret_cast<uint16_t*>(smem + buf * g.stage_bytes + g.tab_off);
#pragma unroll
    for (int j = 0; j < kTabPerThread; ++j) {
      const int e = tid + j * NT;
      if (e < tab_entries) tab[e] = static_cast<uint16_t>(tab_raw[j]);
    }
  };

  float acc[2][NJ][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;

  // Prologue.
  for (int p = 0; p < g.stages - 1; ++p) {
    if (p < nloc) {
      issue_stage(st_begin + p, p);
      load_tab(st_begin + p);
      store_tab(p);
    }
    cp_async_commit();
  }
  if (g.stages - 1 < nloc) load_tab(st_begin + g.stages - 1);

  // Per-lane constant parts of the fragment addresses.
  const int a_k = ((lane >> 4) << 3) + (lane & 7);                  // slot within k16 (A)
  const uint32_t a_lane = static_cast<uint32_t>(a_k * ROWB) +
                          (static_cast<uint32_t>((wm * 4 + ((lane >> 3) & 1)) ^ (lane & 7)) << 4);
  const int b_slot = (((lane >> 3) & 1) << 3) + (lane & 7);         // slot within k16 (B)
  const int b_hi = lane >> 4;                                       // second n8 chunk of the pair
  const uint32_t b_chunk0 = static_cast<uint32_t>(wn * (WN / 8));   // warp's first 16-byte chunk (multiple of 8)

  for (int it = 0; it < nloc; ++it) {
    wait_pending(g.stages - 2);
    __syncthreads();
    const int nx = it + g.stages - 1;
    if (nx < nloc) {
      const int buf = nx % g.stages;
      issue_stage(st_begin + nx, buf);
      store_tab(buf);
      if (nx + 1 < nloc) load_tab(st_begin + nx + 1);
    }
    cp_async_commit();

    const int buf = it % g.stages;
    const uint32_t slab = sbase + buf * g.stage_bytes + g.slab_off;
    const uint32_t vals = sbase + buf * g.stage_bytes + g.val_off;
    const uint16_t* tab = reinterpret_cast<const uint16_t*>(smem + buf * g.stage_bytes + g.tab_off);
    const int ksteps = g.s_pad >> 4;
    // Fragments of step kk + 1 (table rows, A) are fetched while step kk runs.
    int tb[VG];
    uint32_t row_n[VG];
    uint32_t af_n[2][4];
#pragma unroll
    for (int vg = 0; vg < VG; ++vg) {
      tb[vg] = ((wm * 32 + vg * 16) / L) * g.s_pad + b_slot;
      row_n[vg] = tab[tb[vg]];
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) ldsm_x4_trans(af_n[i], vals + (a_lane ^ static_cast<uint32_t>(i << 5)));
    for (int kk = 0; kk < ksteps; ++kk) {
      uint32_t af[2][4], row[VG];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int r = 0; r < 4; ++r) af[i][r] = af_n[i][r];
#pragma unroll
      for (int vg = 0; vg < VG; ++vg) row[vg] = row_n[vg];
      if (kk + 1 < ksteps) {
#pragma unroll
        for (int vg = 0; vg < VG; ++vg) row_n[vg] = tab[tb[vg] + (kk + 1) * 16];
#pragma unroll
        for (int i = 0; i < 2; ++i)
          ldsm_x4_trans(af_n[i], vals + ((a_lane + static_cast<uint32_t>((kk + 1) * 16 * ROWB)) ^
                                         static_cast<uint32_t>(i << 5)));
      }
#pragma unroll
      for (int vg = 0; vg < VG; ++vg) {
        const uint32_t boff =
            row[vg] * kSlabRowBytes + ((b_chunk0 + static_cast<uint32_t>(b_hi ^ (row[vg] & 7))) << 4);
#pragma unroll
        for (int jj = 0; jj < NJ / 2; ++jj) {
          uint32_t bf[4];
          ldsm_x4_trans(bf, slab + (boff ^ static_cast<uint32_t>(jj << 5)));
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            if (VG == 2 && i != vg) continue;
            mma16816<T>(acc[i][2 * jj], af[i], bf[0], bf[1]);
            mma16816<T>(acc[i][2 * jj + 1], af[i], bf[2], bf[3]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();

  store_tile<T, BM, WN, NT, 0>(a, smem, acc, wm, wn, tid, lane, n0, t0, z);
}

// ------------------------------------------------------------------------------------------------
// Host side

// config bits: bit 0: BM = 128 (else 256); bits 1-2: slots-per-stage cap 64 / 32 / 16;
// bits 3-5: pipeline-depth cap (0: 4); bit 6: warps of 32 x 64 (else 32 x 128; twice the warps);
// bit 7: the warp-specialized form (kConfigTma).
inline int config_bm(int config) { return (config & 1) ? 128 : 256; }
inline bool config_wn64(int config) { return (config & 64) != 0; }
inline int config_slot_cap(int config) { return 64 >> ((config >> 1) & 3); }
inline int config_stage_cap(int config) {
  const int c = (config >> 3) & 7;
  return c == 0 ? 4 : (c < 2 ? 2 : (c > 6 ? 6 : c));
}

inline Geometry make_geometry(const HalfSpmmParams& p, int config) {
  Geometry g{};
  g.bm = config_bm(config);
  const int64_t G = p.k / p.M;
  g.ws = choose_ws(g.bm, p.N, p.M, p.L, G, config_slot_cap(config));
  g.bkd = g.ws * p.M;
  g.s = g.ws * p.N;
  g.s_pad = (g.s + 15) / 16 * 16;
  g.nst = static_cast<int>((G + g.ws - 1) / g.ws);
  g.split = p.split_k < 1 ? 1 : p.split_k;
  if (g.split > g.nst) g.split = g.nst < 1 ? 1 : g.nst;
  g.vpc = g.bm / p.L;
  g.m_pad = round_up(p.m, 8);
  g.stage_bytes = stage_layout(g.bm, p.L, g.ws, p.N, p.M, &g.slab_off, &g.val_off, &g.tab_off);
  int stages = smem_budget(g.bm) / g.stage_bytes;
  if (stages > config_stage_cap(config)) stages = config_stage_cap(config);
  if (stages < 2) stages = 2;
  g.stages = stages;
  const int epi = g.split == 1 ? kBN * (g.bm + 8) * 2 : kBN * (g.bm + 4) * 4;
  g.smem_bytes = g.stages * g.stage_bytes;
  if (epi > g.smem_bytes) g.smem_bytes = epi;
  return g;
}

inline size_t scratch_bytes(const HalfSpmmParams& p, int config) {
  const Geometry g = make_geometry(p, config);
  size_t b = static_cast<size_t>(round_up(p.k * g.m_pad * 2, 256));
  if (g.split > 1) b += static_cast<size_t>(g.split) * p.m * p.n * 4;
  return b;
}

inline bool pattern_supported(int N, int M, int L) {
  return (M == 8 || M == 16 || M == 32 || M == 64) && (L == 16 || L == 32 || L == 64 || L == 128) && N >= 1 &&
         N <= M;
}

template <typename T, int BM, int VG, int WN>
cudaError_t launch_main(const KernelArgs& ka, cudaStream_t stream) {
  auto kern = tc_prefill_kernel<T, BM, VG, WN>;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, ka.g.smem_bytes);
  if (e != cudaSuccess) return e;
  dim3 grid(static_cast<unsigned>((ka.n + BM - 1) / BM), static_cast<unsigned>((ka.m + kBN - 1) / kBN),
            static_cast<unsigned>(ka.g.split));
  kern<<<grid, BM * (kBN / WN), ka.g.smem_bytes, stream>>>(ka);
  return cudaGetLastError();
}

// config bit 7: the warp-specialized form (spmm_tc_prefill_tma.cuh; sm_90, L >= 32), defined in that
// header, which the per-dtype instantiation files include.
constexpr int kConfigTma = kTcPrefillWarpSpecialized;
inline Geometry make_tma_geometry(const HalfSpmmParams& p, int split_k);
template <typename T>
cudaError_t launch_tma(const KernelArgs& ka, bool during_transpose, cudaStream_t stream);

template <typename T>
cudaError_t run(const HalfSpmmParams& p, int config, cudaStream_t stream) {
  if (!pattern_supported(p.N, p.M, p.L)) return cudaErrorInvalidValue;
  if (p.m < 1 || p.n < 1 || p.k < 1 || p.n % p.L != 0 || p.k % p.M != 0) return cudaErrorInvalidValue;
  if (config < 0 || config > 511) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(p.values) % 16 != 0 || reinterpret_cast<uintptr_t>(p.y) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.scratch) % 16 != 0)
    return cudaErrorMisalignedAddress;
  const Geometry g = make_geometry(p, config);
  if (g.s_pad * g.vpc > kTabPerThread * g.bm) return cudaErrorInvalidValue;
  if (p.scratch == nullptr || p.scratch_bytes < scratch_bytes(p, config)) return cudaErrorInvalidValue;

  T* xT = static_cast<T*>(p.scratch);
  const int64_t xT_bytes = round_up(p.k * g.m_pad * 2, 256);
  // Transpose x into the k-major copy.
  {
    cudaError_t e = launch_x_transpose<T>(p.x, p.ldx, xT, p.m, p.k, g.m_pad, stream);
    if (e != cudaSuccess) return e;
  }
  KernelArgs ka{};
  ka.xT = xT;
  ka.values = p.values;
  ka.indices = p.indices;
  ka.bias = p.bias;
  ka.y = p.y;
  ka.part = g.split > 1 ? reinterpret_cast<float*>(static_cast<unsigned char*>(p.scratch) + xT_bytes) : nullptr;
  ka.m = p.m;
  ka.n = p.n;
  ka.k = p.k;
  ka.w = p.k / p.M * p.N;
  ka.m_pad = g.m_pad;
  ka.N = p.N;
  ka.M = p.M;
  ka.L = p.L;
  ka.g = g;
  cudaError_t e;
  const bool l16 = p.L == 16, wn64 = config_wn64(config);
  if (config & kConfigTma) {
    ka.g = make_tma_geometry(p, g.split);
    if (ka.g.split != g.split) return cudaErrorInvalidValue;  // the scratch holds g.split partials
    e = launch_tma<T>(ka, (config & kTcPrefillDuringTranspose) != 0, stream);
  } else if (g.bm == 256) {
    if (wn64)
      e = l16 ? launch_main<T, 256, 2, 64>(ka, stream) : launch_main<T, 256, 1, 64>(ka, stream);
    else
      e = l16 ? launch_main<T, 256, 2, 128>(ka, stream) : launch_main<T, 256, 1, 128>(ka, stream);
  } else {
    if (wn64)
      e = l16 ? launch_main<T, 128, 2, 64>(ka, stream) : launch_main<T, 128, 1, 64>(ka, stream);
    else
      e = l16 ? launch_main<T, 128, 2, 128>(ka, stream) : launch_main<T, 128, 1, 128>(ka, stream);
  }
  if (e != cudaSuccess) return e;
  if (g.split > 1) {
    const int64_t chunks = p.m * (p.n / 8);
    int64_t blocks = (chunks + 255) / 256;
    if (blocks > 4096) blocks = 4096;
    reduce_kernel<T><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(ka.part, static_cast<const T*>(p.bias),
                                                                        static_cast<T*>(p.y), p.m, p.n, g.split);
    e = cudaGetLastError();
  }
  return e;
}

}  // namespace tc_prefill
}  // namespace kernels
}  // namespace nmspmm
