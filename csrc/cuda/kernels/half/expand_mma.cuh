// Fused-expansion SpMM for fp16 / bf16 (mma.sync m16n8k16, fp32 accumulation, sm_80+): the
// compressed weight streams from HBM, each warp expands its 32 outputs of a 64-input stage into a
// dense tile in shared memory, and dense tensor-core products follow. No dense copy of the weight
// touches HBM, so a memory-bound call reads only the compressed bytes, and any N:M with L <= 32
// runs (element-wise L = 1 included), with no gather of x.
//
//   y[m, n] = x[m, k] . W^T (+ bias),  W in the documented format: values [w, n] (compressed rows,
//   output columns contiguous), indices [w, n / L] uint8, w = k * N / M.
//
// * A CTA (4 warps) owns 128 outputs x BT tokens (BT = 16, 64 or 128) and walks k in stages of 64
//   inputs (64 / M whole windows), a k-range of them per split. Per stage, cp.async brings into a
//   multi-stage ring: x [BT tokens][64 inputs] (16-byte chunks XOR-swizzled by token & 7), the
//   values [s][128 outputs] (s = 64 / M * N compressed rows) and the index bytes [s][128 / L].
// * Expansion: a warp owns outputs 32w..32w+31 of the tile and their dense strip [64 inputs][32
//   outputs] (80-byte rows), private to the warp, so it zeroes, fills and reads it between
//   __syncwarp()s only. Lanes take compressed rows in parallel, 8 outputs each (one 16-byte load
//   of values), and store min(L, 8) values per vector at the window row its index byte names.
//   Index bytes are masked with M - 1, so no byte value addresses outside its window. Positions
//   that do not ascend within a window (possible only in unchecked index data) send the warp's
//   stage to a serial path in which a repeated position adds its values, as in every other plan
//   (docs/format.md).
// * Products: per 16 inputs, A (16 outputs x 16 inputs) by ldmatrix.x4.trans from the strip, B
//   (16 inputs x 8 tokens) by ldmatrix.x4 from the x stage; a warp computes 32 outputs x BT tokens.
// * Epilogue: accumulators (+ bias) staged through shared memory, coalesced 16-byte stores of y;
//   with split-K, fp32 partials to scratch and the tensor-core prefill's reduce kernel.
// A NaN or Inf of x meets the zeros of pruned positions in the dense products (0 * Inf), as in the
// dense expansion + cuBLAS: the caller runs the same non-finite row check after it.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/common/cp_async.cuh"
#include "cuda/kernels/half/expand_mma_geometry.h"
#include "cuda/kernels/half/spmm_half.h"
#include "cuda/kernels/half/spmm_tc_prefill.cuh"

namespace nmspmm {
namespace kernels {
namespace expand_mma {

using tc_prefill::from_f32;
using tc_prefill::ldsm_x4_trans;
using tc_prefill::mma16816;
using tc_prefill::smem_u32;
using tc_prefill::to_f32;
using tc_prefill::wait_pending;

struct Args {
  const void* x;  // [m, k], row stride ldx
  int64_t ldx;
  const void* values;      // [w, n]
  const uint8_t* indices;  // [w, q]
  const void* bias;        // [n] or nullptr
  void* y;                 // [m, n]
  float* part;             // [split, m, n] fp32 partials (split > 1)
  int64_t m, n, k, w, q;
  int N, M, L;
  Geometry g;
};

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// G consecutive 16-bit values (G = 1, 2, 4, 8) as one register group.
template <int G>
struct Pack;
template <>
struct Pack<1> {
  uint16_t v;
};
template <>
struct Pack<2> {
  uint32_t v;
};
template <>
struct Pack<4> {
  uint2 v;
};
template <>
struct Pack<8> {
  uint4 v;
};

// Index bytes a lane reads per compressed row for its 8 outputs: one per vector (8 / LG of them).
template <int LG>
struct IdxBytes;
template <>
struct IdxBytes<1> {
  using type = uint2;
};
template <>
struct IdxBytes<2> {
  using type = uint32_t;
};
template <>
struct IdxBytes<4> {
  using type = uint16_t;
};
template <>
struct IdxBytes<8> {
  using type = uint8_t;
};

// Whether every masked byte of b exceeds the one of a (bytes < 128): (b | 0x80) - a - 1 keeps bit 7
// of each byte exactly where b > a, with no borrow between bytes.
__device__ __forceinline__ bool bytes_ascend(uint32_t a, uint32_t b, uint32_t mask4, uint32_t live) {
  const uint32_t d = ((b & mask4) | 0x80808080u) - (a & mask4) - 0x01010101u;
  return (d & live) == live;
}
template <int LG>
__device__ __forceinline__ bool index_bytes_ascend(typename IdxBytes<LG>::type a, typename IdxBytes<LG>::type b,
                                                   uint32_t mask4) {
  if constexpr (LG == 1) {
    return bytes_ascend(a.x, b.x, mask4, 0x80808080u) && bytes_ascend(a.y, b.y, mask4, 0x80808080u);
  } else if constexpr (LG == 2) {
    return bytes_ascend(a, b, mask4, 0x80808080u);
  } else if constexpr (LG == 4) {
    return bytes_ascend(a, b, mask4, 0x00008080u);
  } else {
    return bytes_ascend(a, b, mask4, 0x00000080u);
  }
}

// Byte j of the index group, as a word.
template <int LG>
__device__ __forceinline__ uint32_t index_byte(typename IdxBytes<LG>::type v, int j) {
  if constexpr (LG == 1) {
    return ((j < 4 ? v.x : v.y) >> (8 * (j & 3))) & 0xFFu;
  } else {
    return (static_cast<uint32_t>(v) >> (8 * j)) & 0xFFu;
  }
}

// The lane's 8 values rotated down by rot vectors of LG values (value j of the result is value
// j + rot LG of v, cyclically), and its index bytes (one per vector) by rot bytes.
__device__ __forceinline__ uint4 rotate_words(uint4 v, int words) {  // by 0..3 words
  if (words & 2) v = make_uint4(v.z, v.w, v.x, v.y);
  if (words & 1) v = make_uint4(v.y, v.z, v.w, v.x);
  return v;
}
template <int LG>
__device__ __forceinline__ uint4 rotate_vectors(uint4 v, int rot) {
  const int halves = rot * LG;  // 16-bit values, 0..7
  v = rotate_words(v, halves >> 1);
  if (halves & 1)
    v = make_uint4(__funnelshift_r(v.x, v.y, 16), __funnelshift_r(v.y, v.z, 16), __funnelshift_r(v.z, v.w, 16),
                   __funnelshift_r(v.w, v.x, 16));
  return v;
}
template <int LG>
__device__ __forceinline__ typename IdxBytes<LG>::type rotate_index_bytes(typename IdxBytes<LG>::type v, int rot) {
  if constexpr (LG == 1) {
    if (rot & 4) v = make_uint2(v.y, v.x);
    const int b = 8 * (rot & 3);
    return make_uint2(__funnelshift_r(v.x, v.y, b), __funnelshift_r(v.y, v.x, b));
  } else if constexpr (LG == 2) {
    return __funnelshift_r(v, v, 8 * rot);
  } else if constexpr (LG == 4) {
    const uint32_t u = static_cast<uint32_t>(v) * 0x10001u;  // the two bytes twice
    return static_cast<uint16_t>(u >> (8 * rot));
  } else {
    return v;
  }
}

// Adds G values to those stored at a (a position repeated in unchecked index data). Out of line,
// with the values in registers: the common path keeps no stack traffic.
template <typename T, int G>
__device__ __noinline__ void add_to(unsigned char* a, Pack<G> v) {
  T* d = reinterpret_cast<T*>(a);
  const uint16_t* e = reinterpret_cast<const uint16_t*>(&v.v);
#pragma unroll
  for (int i = 0; i < G; ++i) {
    uint16_t bits = e[i];
    T s;
    memcpy(&s, &bits, 2);
    d[i] = from_f32<T>(to_f32<T>(d[i]) + to_f32<T>(s));
  }
}

// Expansion of one stage's compressed rows for a warp's 32 outputs into its zeroed strip.
// Fast path: lane (sg = lane / 4, og = lane % 4) takes the rows r = sg, sg + 8, ... and outputs
// 8 og .. 8 og + 7: one 16-byte load of values per row, one store of LG = min(L, 8) values per
// vector (8 / LG of them). It also checks that each vector's positions ascend within every window
// (what compress produces and validation requires); where any lane finds otherwise, the warp
// re-zeroes its strip and takes the serial path, which adds the values of a repeated position.
// The lane's loop-invariant part of the expansion: the warp's first output within the block
// (wbase), the byte offset of the lane's first value within the warp's (vcol), that output's
// vector relative to the warp's first (icol), and 1 / N.
struct ExpandLane {
  int wbase, vcol, icol;
  float inv_n;
};

// The pattern as the expansion sees a stage, and the pitches of the staged compressed rows: bytes
// per row of values (val_row) and of index bytes (idx_row).
struct ExpandShape {
  int N, M, L, val_row, idx_row;
};

// A warp's dense strip of 64 inputs x 32 outputs in expand_mma's layout: rows of 80 bytes (32
// outputs and 16 bytes of padding), so the eight 16-byte rows an ldmatrix reads fall in eight bank
// groups. chunk(r, c): outputs 8c .. 8c + 7 of input r.
struct PaddedStrip {
  static constexpr bool kRotate = false;  // rows of 80 bytes already spread a store's lanes
  unsigned char* base;
  __device__ __forceinline__ unsigned char* chunk(int r, int c) const { return base + r * kStripRowBytes + c * 16; }
  __device__ __forceinline__ void zero(int lane) const {
#pragma unroll
    for (int i = 0; i < kStripBytes / (16 * 32); ++i)
      *reinterpret_cast<uint4*>(base + (i * 32 + lane) * 16) = make_uint4(0, 0, 0, 0);
  }
};

template <typename T, int LG, typename Strip>
__device__ __forceinline__ void expand_stage(const ExpandShape& sh, const Strip& strip, const unsigned char* vals,
                                             const uint8_t* idx, int windows, int lane, const ExpandLane& el) {
  using Idx = typename IdxBytes<LG>::type;
  constexpr int NV = 8 / LG;  // vectors (positions) per lane-row
  const int N = sh.N, M = sh.M, L = sh.L;
  const int idx_row = sh.idx_row;
  const int rows = windows * N;
  const uint32_t mask = static_cast<uint32_t>(M - 1), mask4 = mask * 0x01010101u;
  const float inv_n = el.inv_n;
  const int og = lane & 3, sg = lane >> 2;
  const unsigned char* vbase = vals + el.vcol;
  const uint8_t* ibase = idx + el.icol;
  bool ordered = true;
#pragma unroll 2
  for (int r = sg; r < rows; r += 8) {
    const int g = static_cast<int>((static_cast<float>(r) + 0.5f) * inv_n);  // r / N, exact for r < 2^16
    const Pack<8> v{*reinterpret_cast<const uint4*>(vbase + r * sh.val_row)};
    const Idx iv = *reinterpret_cast<const Idx*>(ibase + r * idx_row);
    if (r + 1 < (g + 1) * N)
      ordered = ordered && index_bytes_ascend<LG>(iv, *reinterpret_cast<const Idx*>(ibase + (r + 1) * idx_row), mask4);
    const int row0 = g * M;
    // Strips whose stores of one j would share a few banks across the warp's lanes (Strip::kRotate)
    // take the lane's vectors rotated by sg, so that one store instruction spreads over all banks.
    const int rot = Strip::kRotate ? sg % NV : 0;
    const Pack<8> vr{Strip::kRotate ? rotate_vectors<LG>(v.v, rot) : v.v};
    const Idx ir = Strip::kRotate ? rotate_index_bytes<LG>(iv, rot) : iv;
    const uint32_t* w = reinterpret_cast<const uint32_t*>(&vr.v);
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const int e = Strip::kRotate ? (j + rot) & (NV - 1) : j;  // the vector stored at step j
      unsigned char* dst = strip.chunk(row0 + static_cast<int>(index_byte<LG>(ir, j) & mask), og) + e * LG * 2;
      if constexpr (LG == 1) {
        *reinterpret_cast<uint16_t*>(dst) = static_cast<uint16_t>(w[j >> 1] >> (16 * (j & 1)));
      } else if constexpr (LG == 2) {
        *reinterpret_cast<uint32_t*>(dst) = w[j];
      } else if constexpr (LG == 4) {
        *reinterpret_cast<uint2*>(dst) = make_uint2(w[2 * j], w[2 * j + 1]);
      } else {
        *reinterpret_cast<uint4*>(dst) = vr.v;
      }
    }
  }
  if (__all_sync(0xFFFFFFFFu, ordered)) return;

  // Serial path: a lane owns (window, group of G outputs), G = max(LG, 2) (2 at L = 1, each output
  // its own positions), and walks its N slots; a position seen before adds its values.
  constexpr int G = LG < 2 ? 2 : LG;
  constexpr int P = G / LG;
  constexpr int UC = 32 / G;
  __syncwarp();
  strip.zero(lane);
  __syncwarp();
  for (int u = lane; u < windows * UC; u += 32) {
    const int g = u / UC, uc = u - g * UC;
    const int o = uc * G;
    uint64_t seen[P];
#pragma unroll
    for (int p = 0; p < P; ++p) seen[p] = 0;
    for (int s = 0; s < N; ++s) {
      const int r = g * N + s;
      Pack<G> v;
      v.v = *reinterpret_cast<const decltype(v.v)*>(vals + o * 2 + r * sh.val_row);
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const int pos = idx[r * idx_row + (el.wbase + o + p) / L - el.wbase / L] & (M - 1);
        const uint64_t bit = uint64_t{1} << pos;
        unsigned char* dst = strip.chunk(g * M + pos, (o + p) >> 3) + ((o + p) & 7) * 2;
        if (P == 1) {
          if (seen[p] & bit)
            add_to<T, G>(dst, v);
          else
            *reinterpret_cast<decltype(v.v)*>(dst) = v.v;
        } else {
          const uint16_t e = reinterpret_cast<const uint16_t*>(&v.v)[p];
          if (seen[p] & bit)
            add_to<T, 1>(dst, Pack<1>{e});
          else
            *reinterpret_cast<uint16_t*>(dst) = e;
        }
        seen[p] |= bit;
      }
    }
  }
}

template <typename T, int BT, int LG>
__global__ void __launch_bounds__(kThreads) expand_mma_kernel(const Args a) {
  constexpr int NJ = BT / 8;  // n8 token tiles per warp
  extern __shared__ __align__(1024) unsigned char smem[];
  const Geometry& g = a.g;
  const int tid = threadIdx.x, lane = tid & 31, wm = tid >> 5;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBM;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * BT;
  const int z = blockIdx.z;
  const int st_begin = static_cast<int>(static_cast<int64_t>(z) * g.nst / g.split);
  const int st_end = static_cast<int>(static_cast<int64_t>(z + 1) * g.nst / g.split);
  const int nloc = st_end - st_begin;
  const int64_t G_total = a.k / a.M;  // windows
  const int wps = kBK / a.M;          // windows per stage
  const T* x = static_cast<const T*>(a.x);
  const T* values = static_cast<const T*>(a.values);
  const PaddedStrip strip{smem + g.strips_off + wm * kStripBytes};
  const uint32_t strip_s = smem_u32(strip.base);
  const ExpandShape sh{a.N, a.M, a.L, kBM * 2, g.idx_row};

  // Copy assignments, fixed per thread; the sources advance by one stage per call (stages are
  // issued in order), so a call is pointer increments and predicates only.
  //   x [BT][64]: tokens xt0 + 16 j, 16-byte chunk xc (swizzled by token & 7, the same for every j);
  //   values [s][128]: rows vr0 + 8 j, chunk vc; index bytes [s][128 / L]: rows ir0 + istep j,
  //   chunk ic of ich bytes (q is a multiple of ich).
  constexpr int XJ = BT / 16;
  const int xc = tid & 7, xt0 = tid >> 3;
  const int vc = tid & 15, vr0 = tid >> 4;
  const int cpr = g.idx_row / g.ich, ic = tid % cpr, ir0 = tid / cpr, istep = kThreads / cpr;
  const int64_t v0 = n0 / a.L;
  const int64_t first_row = static_cast<int64_t>(st_begin) * g.slots;  // compressed row of the split's first stage
  const bool v_col_ok = n0 + vc * 8 < a.n;
  const bool i_col_ok = v0 + ic * g.ich < a.q;
  const int64_t x_step16 = 16 * a.ldx;
  const T* x_cur = x + (t0 + xt0) * a.ldx + static_cast<int64_t>(st_begin) * kBK + xc * 8;
  const T* v_cur = values + (first_row + vr0) * a.n + n0 + vc * 8;
  const uint8_t* i_cur = a.indices + (first_row + ir0) * a.q + v0 + ic * g.ich;
  const uint32_t x_dst = static_cast<uint32_t>(g.x_off + xt0 * 128 + ((xc ^ (xt0 & 7)) << 4));
  const uint32_t v_dst = static_cast<uint32_t>(g.val_off + vr0 * (kBM * 2) + vc * 16);
  const uint32_t i_dst = static_cast<uint32_t>(g.idx_off + ir0 * g.idx_row + ic * g.ich);
  const int64_t v_stage = static_cast<int64_t>(g.slots) * a.n, i_stage = static_cast<int64_t>(g.slots) * a.q;
  int64_t k_left = a.k - static_cast<int64_t>(st_begin) * kBK;  // inputs from the next stage on
  int64_t w_left = a.w - first_row;                              // compressed rows from it on

  auto issue_stage = [&](int buf) {
    unsigned char* sb = smem + buf * g.stage_bytes;
    const bool x_k_ok = xc * 8 < k_left;
    const int rows_ok = w_left < g.slots ? static_cast<int>(w_left) : g.slots;
#pragma unroll
    for (int j = 0; j < XJ; ++j) {
      const bool ok = x_k_ok && t0 + xt0 + 16 * j < a.m;
      cp_async_16(sb + x_dst + j * 16 * 128, ok ? x_cur + j * x_step16 : x, ok);
    }
    for (int r = vr0, j = 0; r < g.slots; r += 8, ++j) {
      const bool ok = v_col_ok && r < rows_ok;
      cp_async_16(sb + v_dst + j * 8 * (kBM * 2), ok ? v_cur + static_cast<int64_t>(j) * 8 * a.n : values, ok);
    }
    for (int r = ir0, j = 0; r < g.slots; r += istep, ++j) {
      const bool ok = i_col_ok && r < rows_ok;
      const uint8_t* src = ok ? i_cur + static_cast<int64_t>(j) * istep * a.q : a.indices;
      unsigned char* dst = sb + i_dst + j * istep * g.idx_row;
      if (g.ich == 16)
        cp_async_16(dst, src, ok);
      else
        cp_async_4(dst, src, ok);
    }
    x_cur += kBK;
    v_cur += v_stage;
    i_cur += i_stage;
    k_left -= kBK;
    w_left -= g.slots;
  };

  float acc[2][NJ][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;

  for (int p = 0; p < g.stages - 1; ++p) {
    if (p < nloc) issue_stage(p);
    cp_async_commit();
  }
  const ExpandLane el{wm * 32, (lane & 3) * 16, (wm * 32 + (lane & 3) * 8) / a.L - wm * 32 / a.L,
                      1.0f / static_cast<float>(a.N)};
  int buf = 0, buf_next = g.stages - 1;  // the ring slots of stage it and of stage it + stages - 1

  // Per-lane parts of the fragment addresses (see the header comment).
  const int mi = lane >> 3, rr = lane & 7;
  const int a_row = (mi >> 1) * 8 + rr;  // + 16 * ks
  const int a_chunk = mi & 1;            // + 2 * i
  const int b_tok = (mi >> 1) * 8 + rr;  // + 16 * jj
  const int b_chunk = mi & 1;            // + 2 * ks

  for (int it = 0; it < nloc; ++it) {
    wait_pending(g.stages - 2);
    __syncthreads();
    if (it + g.stages - 1 < nloc) issue_stage(buf_next);
    cp_async_commit();
    buf_next = buf_next + 1 == g.stages ? 0 : buf_next + 1;

    const unsigned char* sb = smem + buf * g.stage_bytes;
    buf = buf + 1 == g.stages ? 0 : buf + 1;
    const int64_t gw0 = static_cast<int64_t>(st_begin + it) * wps;
    const int windows = G_total - gw0 < wps ? static_cast<int>(G_total - gw0) : wps;

    // Zero the strip, then fill it.
    __syncwarp();
    strip.zero(lane);
    __syncwarp();
    expand_stage<T, LG>(sh, strip, sb + g.val_off + wm * 64,
                        reinterpret_cast<const uint8_t*>(sb + g.idx_off) + wm * 32 / a.L, windows, lane, el);
    __syncwarp();

    const uint32_t xs = smem_u32(sb + g.x_off);
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      uint32_t af[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = ks * 16 + a_row, c = 2 * i + a_chunk;
        ldsm_x4_trans(af[i], strip_s + static_cast<uint32_t>(r * kStripRowBytes + c * 16));
      }
#pragma unroll
      for (int jj = 0; jj < NJ / 2; ++jj) {
        const int t = jj * 16 + b_tok, c = 2 * ks + b_chunk;
        uint32_t bf[4];
        ldsm_x4(bf, xs + static_cast<uint32_t>(t * 128 + ((c ^ (t & 7)) << 4)));
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          mma16816<T>(acc[i][2 * jj], af[i], bf[0], bf[1]);
          mma16816<T>(acc[i][2 * jj + 1], af[i], bf[2], bf[3]);
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();

  // Epilogue: [BT tokens][128 outputs] through shared memory, then coalesced 16-byte rows.
  const int orow = lane >> 2, tcol = (lane & 3) * 2;
  if (g.split == 1) {
    constexpr int STR = kBM + 8;
    T* st = reinterpret_cast<T*>(smem);
    const T* bias = static_cast<const T*>(a.bias);
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int o = wm * 32 + i * 16 + orow + h * 8;
        const float bv = (bias != nullptr && n0 + o < a.n) ? to_f32<T>(bias[n0 + o]) : 0.f;
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
          const int t = j * 8 + tcol;
          st[t * STR + o] = from_f32<T>(acc[i][j][2 * h] + bv);
          st[(t + 1) * STR + o] = from_f32<T>(acc[i][j][2 * h + 1] + bv);
        }
      }
    __syncthreads();
    T* y = static_cast<T*>(a.y);
    for (int i = tid; i < BT * (kBM / 8); i += kThreads) {
      const int t = i / (kBM / 8), c = i % (kBM / 8);
      const int64_t tt = t0 + t, col = n0 + c * 8;
      if (tt < a.m && col < a.n)
        *reinterpret_cast<uint4*>(y + tt * a.n + col) = *reinterpret_cast<const uint4*>(st + t * STR + c * 8);
    }
  } else {
    constexpr int STR = kBM + 4;
    float* st = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int o = wm * 32 + i * 16 + orow + h * 8;
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
          const int t = j * 8 + tcol;
          st[t * STR + o] = acc[i][j][2 * h];
          st[(t + 1) * STR + o] = acc[i][j][2 * h + 1];
        }
      }
    __syncthreads();
    float* part = a.part + static_cast<int64_t>(z) * a.m * a.n;
    for (int i = tid; i < BT * (kBM / 4); i += kThreads) {
      const int t = i / (kBM / 4), c = i % (kBM / 4);
      const int64_t tt = t0 + t, col = n0 + c * 4;
      if (tt < a.m && col < a.n)
        *reinterpret_cast<float4*>(part + tt * a.n + col) = *reinterpret_cast<const float4*>(st + t * STR + c * 4);
    }
  }
}

template <typename T, int BT, int LG>
cudaError_t launch_kernel(const Args& a, cudaStream_t stream) {
  auto kern = expand_mma_kernel<T, BT, LG>;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, a.g.smem_bytes);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((a.n + kBM - 1) / kBM), static_cast<unsigned>((a.m + BT - 1) / BT),
                  static_cast<unsigned>(a.g.split));
  kern<<<grid, kThreads, a.g.smem_bytes, stream>>>(a);
  return cudaGetLastError();
}

template <typename T, int BT>
cudaError_t launch_tile(const Args& a, cudaStream_t stream) {
  switch (a.L) {
    case 1: return launch_kernel<T, BT, 1>(a, stream);
    case 2: return launch_kernel<T, BT, 2>(a, stream);
    case 4: return launch_kernel<T, BT, 4>(a, stream);
    default: return launch_kernel<T, BT, 8>(a, stream);  // L = 8, 16, 32
  }
}

// The plan's launch: the main kernel, then (split > 1) the reduction of the partials.
template <typename T>
cudaError_t run(const HalfSpmmParams& p, int bt, cudaStream_t stream) {
  if (!shape_supported(p.n, p.k, p.N, p.M, p.L) || p.m < 1) return cudaErrorInvalidValue;
  if (bt != 16 && bt != 64 && bt != 128) return cudaErrorInvalidValue;
  if (p.ldx % 8 != 0 || reinterpret_cast<uintptr_t>(p.x) % 16 != 0 || reinterpret_cast<uintptr_t>(p.values) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.y) % 16 != 0 || reinterpret_cast<uintptr_t>(p.indices) % 4 != 0 ||
      reinterpret_cast<uintptr_t>(p.scratch) % 16 != 0)
    return cudaErrorMisalignedAddress;
  Args a{};
  a.g = make_geometry(p.n, p.k, p.N, p.M, p.L, bt, p.split_k, reinterpret_cast<uintptr_t>(p.indices) % 16 == 0);
  if (a.g.split > 1 && (p.scratch == nullptr || p.scratch_bytes < scratch_bytes(p.m, p.n, a.g.split)))
    return cudaErrorInvalidValue;
  a.x = p.x;
  a.ldx = p.ldx;
  a.values = p.values;
  a.indices = p.indices;
  a.bias = p.bias;
  a.y = p.y;
  a.part = a.g.split > 1 ? static_cast<float*>(p.scratch) : nullptr;
  a.m = p.m;
  a.n = p.n;
  a.k = p.k;
  a.w = p.k / p.M * p.N;
  a.q = p.n / p.L;
  a.N = p.N;
  a.M = p.M;
  a.L = p.L;
  cudaError_t e = bt == 16 ? launch_tile<T, 16>(a, stream)
                  : bt == 64 ? launch_tile<T, 64>(a, stream)
                             : launch_tile<T, 128>(a, stream);
  if (e != cudaSuccess || a.g.split == 1) return e;
  const int64_t chunks = p.m * (p.n / 8);
  int64_t blocks = (chunks + 255) / 256;
  if (blocks > 4096) blocks = 4096;
  tc_prefill::reduce_kernel<T><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      a.part, static_cast<const T*>(p.bias), static_cast<T*>(p.y), p.m, p.n, a.g.split);
  return cudaGetLastError();
}

}  // namespace expand_mma
}  // namespace kernels
}  // namespace nmspmm
