// Native fp16 / bf16 decode SpMM (small m, 1..64) on tensor cores, with split-K inside a
// thread-block cluster (sm_90). Included by decode_half_bf16.cu and decode_half_f16.cu.
//
// The step is bound by the compressed weight's bytes, so the kernel streams them with nothing else
// on the critical path:
//  * Each warp owns 64 output columns and walks compressed rows in steps of 16: a step is 16 rows
//    x 64 columns of `values` (2 KiB), copied by 16-byte cp.async (L2 only) into a per-warp ring
//    of kStages = 4 slots. The warp keeps 3 steps in flight and synchronizes with nothing but
//    itself in the main loop.
//  * The step is one m16n8k16 tensor-core product per 16 output columns and 8 tokens: the weight
//    is the A operand (16 output columns x 16 compressed rows), read from the ring by
//    ldmatrix.trans (the ring is XOR-swizzled: conflict-free); x is the B operand (16 gathered
//    k-rows x 8 tokens), read by ldmatrix.trans with one row address per lane from a k-major copy
//    of x in shared memory, xT[k][8 NT] (16-bit, tokens m..8 NT - 1 zero). A vector of L >= 16
//    outputs shares its gathered rows, so every 16-column tile of the A operand needs one gather.
//    Accumulation is fp32.
//  * The block (W = 8 warps: CW column warps x KW = W / CW k-warps) stages xT for its k-range once,
//    after issuing its first weight copies (so the x copy overlaps them); a k-range larger than
//    the buffer runs in passes (each pass drains the ring).
//  * Kept (64-column blocks only): instead of every x row of its windows, the block stages one slab
//    per vector of L columns holding, for each compressed row, the x row that vector keeps there
//    (gathered through the index bytes, which are read into shared memory before the dependency
//    wait). At N / M = 1/8 that is a quarter of the rows, and the main loop reads the B operand
//    from consecutive slab rows with no index arithmetic.
//  * k is split over the block's KW warps (interleaved steps) and over the cluster's blocks
//    (gridDim.y == cluster size, contiguous window ranges); the partial tiles are added in fixed
//    order through shared memory, then through distributed shared memory, each block writing a
//    slice of the output tile (+ bias) in the input dtype. One launch, no workspace, no atomics:
//    bitwise deterministic and CUDA-graph capturable.
//  * Index bytes are masked with M - 1 (no byte value reads outside its window's staged rows);
//    rows past the block's range and columns past n are zero-filled by the copies and gather a
//    zero row of xT (Kept: zero slab rows).
//  * Short vectors (L = 4, 8; SV = 16 / L vectors per 16-column tile): each vector of a tile has its
//    own gather and product, into a zeroed fragment of which only the vector's own rows are added
//    to the accumulators (the other rows met x rows they do not keep: an Inf there must not reach
//    them, as 0 x Inf would through a product with their weights zeroed). A tile costs SV gathers
//    and SV products; the tensor cores have room for them, the bytes streamed are the same. Each
//    lane loads the SV index bytes of its k-row per tile.
//  * Sparse24 (N:M = 2:4, any L): the step's 16 compressed rows are the kept half of 32 consecutive
//    inputs, so x needs no gather: the B operand is 32 consecutive xT rows and the product is one
//    mma.sp m16n8k32 on the sparse tensor cores, whose 2-bit selectors come from the weight's
//    tc_meta words (docs/format.md), copied into the ring with the step's values. A block's k-range
//    is whole 32-input metadata rows; inputs past k are zero rows of xT.
//  * With programmatic dependent launch (config bit kHalfDecodeDependentLaunch) only `values`,
//    `indices` and `tc_meta` are read before griddepcontrol.wait; x, bias and y after it.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/common/cluster_reduce.cuh"
#include "cuda/kernels/common/cp_async.cuh"
#include "cuda/kernels/common/launch_overlap.cuh"
#include "cuda/kernels/common/smem_limit.h"
#include "decode_half_plan.h"
#include "spmm_half.h"

namespace nmspmm {
namespace kernels {
namespace half_decode {

constexpr int kWarps = 8;    // warps per block
constexpr int kStages = 4;   // ring slots per warp (kStages - 1 steps in flight)
constexpr int CT = 4;        // 16-column tiles per warp (64 output columns)
constexpr int kStep = 16;    // compressed rows per step (the k of one m16n8k16 product)
constexpr int kMaxSmem = 227 * 1024;
constexpr int kMetaSlotBytes = 256;  // Sparse24: a step's metadata words (64 columns at L = 1)

struct Bf16 {
  __device__ __forceinline__ static uint16_t from_float(float f) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
  }
  __device__ __forceinline__ static float to_float(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }
  __device__ __forceinline__ static void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  // Sparse: A holds the kept half of 16 rows x 32 inputs, e this thread's 2-bit selectors
  // (sparsity selector 0), b the 32 x 8 dense operand.
  __device__ __forceinline__ static void mma_sp(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[4],
                                                uint32_t e) {
    asm("mma.sp.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e));
  }
};

struct F16 {
  __device__ __forceinline__ static uint16_t from_float(float f) { return __half_as_ushort(__float2half_rn(f)); }
  __device__ __forceinline__ static float to_float(uint16_t h) { return __half2float(__ushort_as_half(h)); }
  __device__ __forceinline__ static void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  // Sparse: A holds the kept half of 16 rows x 32 inputs, e this thread's 2-bit selectors
  // (sparsity selector 0), b the 32 x 8 dense operand.
  __device__ __forceinline__ static void mma_sp(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[4],
                                                uint32_t e) {
    asm("mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e));
  }
};

__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void ldsm_x2_trans(uint32_t& r0, uint32_t& r1, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r0), "=r"(r1)
               : "r"(addr)
               : "memory");
}

struct Args {
  const uint16_t* x;
  int64_t ldx;
  const uint16_t* values;
  const uint8_t* indices;
  const uint16_t* bias;
  uint16_t* y;
  int64_t n, q;       // q = n / L index columns
  int64_t windows;    // k / M
  uint64_t magic;     // ceil(2^32 / N): u / N == (u * magic) >> 32 for every row u < 2^26
  int m, N, M, L;
  int x_rows;         // rows of the xT buffer (a multiple of M), plus one zero row after them
  int x_pairs;        // x is read in 4-byte pairs (x 4-byte aligned, ldx even)
  // Sparse24: the metadata words [ceil(k / 32), meta_ld] and the input count.
  const uint32_t* meta;
  int64_t meta_ld;
  int64_t k;
};

// Byte offset of 16-byte chunk c of row r of a ring slot (C chunks per row): XOR-swizzled so that
// the 8 rows of an ldmatrix phase, and the 32 chunks of a cp.async instruction, hit distinct banks.
template <int C>
__device__ __forceinline__ int slot_offset(int r, int c) {
  constexpr int rows_per_line = 8 / C;  // rows per 128 bytes
  return r * C * 16 + ((c ^ ((r / rows_per_line) & (C - 1))) << 4);
}

// Shared memory of one launch: the weight rings and the xT buffer (x_rows + 1 rows), or the
// partial tiles of the epilogue (aliasing them), whichever is larger.
template <int NT, int W, int CW, bool Sp24 = false>
__host__ __device__ constexpr int ring_bytes() {
  return W * kStages * (kStep * CT * 16 * 2 + (Sp24 ? kMetaSlotBytes : 0));
}
template <int NT, int W, int CW>
__host__ __device__ constexpr int red_bytes() {
  return W / CW * NT * 8 * (16 * CT * CW + 4) * 4;
}
// Kept (narrow blocks only): x_rows is the rows of one vector's slab of kept x rows (a multiple of
// 16), V = kept_slabs(L) slabs, plus one index byte per slab row.
__host__ __device__ constexpr int kept_slabs(int L) { return L >= 64 ? 1 : 64 / L; }
template <int NT, int W, int CW, bool Kept, bool Sp24>
inline size_t smem_bytes(int x_rows, int L) {
  const size_t xb = Kept ? static_cast<size_t>(kept_slabs(L)) * x_rows * (NT * 16 + 1)
                         : static_cast<size_t>(x_rows + 1) * NT * 16;
  const size_t main = ring_bytes<NT, W, CW, Sp24>() + xb;
  const size_t red = red_bytes<NT, W, CW>();
  return main > red ? main : red;
}

// T: Bf16 or F16. NT: 8-token tiles (m <= 8 NT). W: warps per block, CW of them along the output
// columns (4: 256 columns, or 1: 64), W / CW along k. Kept / Sp24: the x staging and product above.
// SV: vectors per 16-column tile (1 at L >= 16, 16 / L for the short vectors).
template <class T, int NT, int W, int CW, bool Kept, bool Sp24, int SV = 1>
__global__ void __launch_bounds__(W * 32, NT <= 2 ? 16 / W : 1) decode_half_kernel(const Args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // the launcher refuses devices without clusters; never reached
#else
  constexpr int KW = W / CW;
  constexpr int C = 2 * CT;                      // 16-byte chunks per ring row
  constexpr int kValBytes = kStep * C * 16;      // one step of one warp: values
  constexpr int kSlotBytes = kValBytes + (Sp24 ? kMetaSlotBytes : 0);  // (Sp24: then its metadata words)
  constexpr int BN = 16 * CT * CW;               // output columns per block
  constexpr int BNp = BN + 4;                    // partial-tile row (floats), padded
  constexpr int kRowBytes = NT * 16;             // one xT row
  constexpr int kThreads = W * 32;
  extern __shared__ __align__(16) unsigned char smem[];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int cw = warp % CW, kw = warp / CW;
  const int64_t n = a.n, q = a.q;
  const int N = a.N, M = a.M, L = a.L, m = a.m;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * BN + cw * 16 * CT;  // this warp's first column

  unsigned char* const ring = smem + warp * kStages * kSlotBytes;
  const unsigned ring_s = static_cast<unsigned>(__cvta_generic_to_shared(ring));
  unsigned char* const xbuf = smem + ring_bytes<NT, W, CW, Sp24>();
  const unsigned xbuf_s = static_cast<unsigned>(__cvta_generic_to_shared(xbuf));
  const int x_rows = a.x_rows;

  static_assert(!Kept || CW == 1, "kept-row staging is for blocks of 64 columns");
  static_assert(!(Kept && Sp24), "2:4 reads x unstaged by index");
  static_assert(SV == 1 || (!Kept && !Sp24), "short vectors gather from the full xT");
  constexpr int LV = 16 / SV;  // short vectors: their length
  // Kept: V slabs of x_rows rows, slab v holding, for compressed row u0 + r of the pass, the x row
  // that vector v of the block keeps there (zero past the range), then the slabs' index bytes.
  const int V = kept_slabs(L);
  unsigned char* const kidx = xbuf + static_cast<size_t>(V) * x_rows * kRowBytes;

  // The zero row after the buffer (gathered by rows past the range).
  if (!Kept)
    for (int i = tid; i < kRowBytes / 16; i += kThreads)
      reinterpret_cast<uint4*>(xbuf + static_cast<size_t>(x_rows) * kRowBytes)[i] = make_uint4(0, 0, 0, 0);

  // This block's compressed rows: whole windows [g0, g1) of the k-split blockIdx.y (Sp24: whole
  // metadata rows of 8 windows, so that step s is metadata row g0 / 8 + s).
  int64_t g0, g1;
  if (Sp24) {
    const int64_t rows8 = (a.windows + 7) / 8;
    g0 = 8 * (rows8 * blockIdx.y / gridDim.y);
    g1 = 8 * (rows8 * (blockIdx.y + 1) / gridDim.y);
    if (g1 > a.windows) g1 = a.windows;
  } else {
    g0 = a.windows * blockIdx.y / gridDim.y;
    g1 = a.windows * (blockIdx.y + 1) / gridDim.y;
  }
  const int64_t u0 = g0 * N, u_end = g1 * N;
  const int64_t steps = (u_end - u0 + kStep - 1) / kStep;
  // Steps per pass: a pass of s steps touches at most (16 s - 1) / N + 2 windows (Kept: 16 s rows
  // per slab; Sp24: 32 s xT rows).
  const int64_t xw = x_rows / M;
  const int64_t fit = Sp24 ? x_rows / 32 : Kept ? x_rows / kStep : g1 - g0 <= xw ? steps : (xw - 1) * N / kStep;
  const int64_t per_pass = fit < 1 ? 1 : fit;
  // Sp24: the first metadata word of the warp's columns (a 16-byte chunk holds words wb .. wb + 3),
  // the 16-byte chunks a step copies, and the vector shift (L is a power of two).
  const int l_shift = 31 - __clz(L);
  const int64_t meta_w0 = (col0 >> l_shift) & ~int64_t{3};
  const int meta_chunks = L >= 16 ? 1 : 16 / L;

  // Index columns of the warp's tiles (clamped: a tile past n loads in-bounds bytes, never used).
  int64_t vcol[CT];
#pragma unroll
  for (int ct = 0; ct < CT; ++ct) {
    const int64_t v = (col0 + 16 * ct) / L;
    vcol[ct] = v < q ? v : q - 1;
  }

  float acc[CT][NT][4];
#pragma unroll
  for (int ct = 0; ct < CT; ++ct)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[ct][nt][j] = 0.f;

  int idx[kStages][CT];
  const int my_slot = lane & 15;  // the k-row this lane gathers for the B operand

  // Issues step `s` of the block (rows u0 + 16 s ..) into ring slot `slot`, and this lane's index
  // bytes for it. Always commits a group (empty past the end) so the wait counts stay fixed.
  auto issue = [&](int64_t s, int64_t s_end, int slot, int (&islot)[CT]) {
    if (s < s_end) {
      const int64_t us = u0 + s * kStep;
#pragma unroll
      for (int j = 0; j < CT; ++j) {
        const int id = lane + 32 * j;
        const int r = id / C, c = id % C;
        const int64_t u = us + r;
        const int64_t col = col0 + c * 8;
        const bool ok = u < u_end && col < n;
        const uint16_t* src = ok ? a.values + u * n + col : a.values;
        cp_async_16(ring + slot * kSlotBytes + slot_offset<C>(r, c), src, ok);
      }
      if (Sp24) {
        // The step's metadata words: row (u0 + 16 s) / 16 of tc_meta (u0 is a multiple of 16).
        if (lane < meta_chunks) {
          const int64_t w = meta_w0 + 4 * lane;
          const bool ok = w < a.meta_ld;
          const uint32_t* src = ok ? a.meta + (us / kStep) * a.meta_ld + w : a.meta;
          cp_async_16(ring + slot * kSlotBytes + kValBytes + 16 * lane, src, ok);
        }
      }
      const int64_t u = us + my_slot;
      if (!Kept && !Sp24 && u < u_end) {
        const uint8_t* ip = a.indices + u * q;
#pragma unroll
        for (int ct = 0; ct < CT; ++ct) {
          if constexpr (SV > 1) {
            // The tile's SV index bytes, byte v in bits 8 v (a vector past n reads vector q - 1).
            uint32_t w = 0;
#pragma unroll
            for (int v = 0; v < SV; ++v)
              w |= static_cast<uint32_t>(__ldg(ip + (vcol[ct] + v < q ? vcol[ct] + v : q - 1))) << (8 * v);
            islot[ct] = static_cast<int>(w);
          } else if (ct == 0 || (16 * ct) % L == 0) {
            islot[ct] = __ldg(ip + vcol[ct]);
          }
        }
      }
    }
    cp_async_commit();
  };

  bool waited = false;
  for (int64_t sa = 0; sa < steps || !waited; sa += per_pass) {
    const int64_t sb = sa + per_pass < steps ? sa + per_pass : steps;
    // This warp's steps of the pass: sa + kw, sa + kw + KW, ...
    const int64_t cnt = sb - sa > kw ? (sb - sa - kw + KW - 1) / KW : 0;
    auto step_of = [&](int64_t i) { return sa + kw + i * KW; };
    const int64_t s_end = sb;
#pragma unroll
    for (int j = 0; j < kStages - 1; ++j) issue(j < cnt ? step_of(j) : s_end, s_end, j, idx[j]);

    // Kept: the pass's index bytes (weight data: read before the wait), masked into the window;
    // 0xff marks rows past the range.
    const int pass_rows = static_cast<int>(sb > sa ? (sb - sa) * kStep : 0);
    if (Kept) {
      const int64_t ub = u0 + sa * kStep;
      for (int e = tid; e < V * pass_rows; e += kThreads) {
        const int r = e / V, v = e % V;
        const int64_t u = ub + r;
        const int64_t vc = col0 / L + v;
        uint8_t b = 0xff;
        if (u < u_end && vc < q) b = static_cast<uint8_t>(__ldg(a.indices + u * q + vc) & (M - 1));
        kidx[v * x_rows + r] = b;
      }
    }

    if (!waited) {
      grid_dependency_wait();
      allow_dependent_launch();
      waited = true;
    }
    if (sa >= steps) break;

    int64_t pw0 = 0;  // full xT: the pass's first window
    if (Kept) {
      __syncthreads();  // the pass's index bytes are in place
      // Slab rows: row r of slab v is x[:, window(u0 + 16 sa + r) * M + index byte], gathered per
      // token (8 tokens per item), every load of a batch issued before its stores.
      const int64_t ub = u0 + sa * kStep;
      const int items = V * pass_rows * NT;
      constexpr int kXBatch = NT == 1 ? 4 : 2;
      for (int base = tid; base < items; base += kXBatch * kThreads) {
        uint16_t v[kXBatch][8];
#pragma unroll
        for (int bt = 0; bt < kXBatch; ++bt) {
          const int it = base + bt * kThreads;
          const int c = it % NT, e = it / NT;
          const int r = e / V, sv = e % V;
          const int ib = it < items ? kidx[sv * x_rows + r] : 0xff;
          const int64_t col = ib == 0xff ? 0 : static_cast<int64_t>((static_cast<uint64_t>(ub + r) * a.magic) >> 32) * M + ib;
#pragma unroll
          for (int t = 0; t < 8; ++t) {
            const int tok = 8 * c + t;
            v[bt][t] = ib != 0xff && tok < m ? a.x[tok * a.ldx + col] : uint16_t{0};
          }
        }
#pragma unroll
        for (int bt = 0; bt < kXBatch; ++bt) {
          const int it = base + bt * kThreads;
          if (it < items) {
            const int c = it % NT, e = it / NT;
            const int r = e / V, sv = e % V;
            uint4 o;
            o.x = v[bt][0] | (static_cast<uint32_t>(v[bt][1]) << 16);
            o.y = v[bt][2] | (static_cast<uint32_t>(v[bt][3]) << 16);
            o.z = v[bt][4] | (static_cast<uint32_t>(v[bt][5]) << 16);
            o.w = v[bt][6] | (static_cast<uint32_t>(v[bt][7]) << 16);
            *reinterpret_cast<uint4*>(xbuf + static_cast<size_t>(sv * x_rows + r) * kRowBytes + c * 16) = o;
          }
        }
      }
    } else {
      // Stage xT for the windows [pw0, pw1) this pass touches (Sp24: 32 rows per step, zero past k).
      pw0 = (u0 + sa * kStep) / N;
      const int64_t ulast = u0 + sb * kStep - 1 < u_end - 1 ? u0 + sb * kStep - 1 : u_end - 1;
      const int64_t pw1 = ulast / N + 1;
      {
        const int rows = Sp24 ? static_cast<int>(sb - sa) * 32 : static_cast<int>((pw1 - pw0) * M);  // even
        const int64_t kb = pw0 * M;                           // first x column
        constexpr int CX = NT;                                // 16-byte chunks (8 tokens) per xT row
        const int items = rows / 2 * CX;
        // kXBatch items per thread at a time, every load issued before any store (one L2 round trip
        // per batch, not per item).
        constexpr int kXBatch = NT <= 2 ? 4 : 2;
        for (int base = tid; base < items; base += kXBatch * kThreads) {
          uint32_t v[kXBatch][8];
#pragma unroll
          for (int b = 0; b < kXBatch; ++b) {
            const int it = base + b * kThreads;
            const int c = it % CX, j = it / CX;
#pragma unroll
            for (int e = 0; e < 8; ++e) {
              const int tok = 8 * c + e;
              v[b][e] = 0;
              if (it < items && tok < m && (!Sp24 || kb + 2 * j < a.k)) {
                const uint16_t* src = a.x + tok * a.ldx + kb + 2 * j;
                if (a.x_pairs) {
                  v[b][e] = *reinterpret_cast<const uint32_t*>(src);
                } else {
                  v[b][e] = static_cast<uint32_t>(src[0]) | (static_cast<uint32_t>(src[1]) << 16);
                }
              }
            }
          }
#pragma unroll
          for (int b = 0; b < kXBatch; ++b) {
            const int it = base + b * kThreads;
            if (it < items) {
              const int c = it % CX, j = it / CX;
              uint4 lo, hi;  // rows 2j and 2j + 1, tokens 8c .. 8c + 7
              lo.x = __byte_perm(v[b][0], v[b][1], 0x5410);
              lo.y = __byte_perm(v[b][2], v[b][3], 0x5410);
              lo.z = __byte_perm(v[b][4], v[b][5], 0x5410);
              lo.w = __byte_perm(v[b][6], v[b][7], 0x5410);
              hi.x = __byte_perm(v[b][0], v[b][1], 0x7632);
              hi.y = __byte_perm(v[b][2], v[b][3], 0x7632);
              hi.z = __byte_perm(v[b][4], v[b][5], 0x7632);
              hi.w = __byte_perm(v[b][6], v[b][7], 0x7632);
              *reinterpret_cast<uint4*>(xbuf + static_cast<size_t>(2 * j) * kRowBytes + c * 16) = lo;
              *reinterpret_cast<uint4*>(xbuf + static_cast<size_t>(2 * j + 1) * kRowBytes + c * 16) = hi;
            }
          }
        }
      }
    }
    __syncthreads();  // xT of the pass is in place for every warp

    // Lane addresses inside a ring slot for the A operand (ldmatrix.x4.trans): lane l gives row
    // (l & 7) + 8 (l >> 4) of chunk 2 ct + ((l >> 3) & 1).
    const int a_row = (lane & 7) + 8 * (lane >> 4);
    const int a_chunk = (lane >> 3) & 1;

    for (int64_t i0 = 0; i0 < cnt; i0 += kStages) {
#pragma unroll
      for (int j = 0; j < kStages; ++j) {
        const int64_t i = i0 + j;
        if (i < cnt) {
          cp_async_wait<kStages - 2>();
          __syncwarp();
          if (Sp24) {
            // B: the step's 32 xT rows (lane l addresses row l: matrix r = rows 8r .. 8r + 7), one
            // fragment per 8 tokens, shared by every column tile; A and the selectors per tile.
            const unsigned xaddr = xbuf_s + static_cast<unsigned>(static_cast<int>(step_of(i) - sa) * 32 + lane) * kRowBytes;
            uint32_t bs[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) ldsm_x4_trans(bs[nt], xaddr + nt * 16);
            const uint32_t* mw = reinterpret_cast<const uint32_t*>(ring + j * kSlotBytes + kValBytes);
            const int half_shift = 16 * (lane & 1);  // inputs 16 (lane & 1) .. + 15 of the step
#pragma unroll
            for (int ct = 0; ct < CT; ++ct) {
              uint32_t af[4];
              ldsm_x4_trans(af, ring_s + j * kSlotBytes + slot_offset<C>(a_row, 2 * ct + a_chunk));
              const int64_t o = col0 + 16 * ct + (lane >> 2);  // rows o and o + 8 of the tile
              const uint32_t w0 = mw[(o >> l_shift) - meta_w0], w1 = mw[((o + 8) >> l_shift) - meta_w0];
              const uint32_t e = ((w0 >> half_shift) & 0xFFFFu) | (((w1 >> half_shift) & 0xFFFFu) << 16);
#pragma unroll
              for (int nt = 0; nt < NT; ++nt) T::mma_sp(acc[ct][nt], af, bs[nt], e);
            }
          } else {
            // Gathered xT row of this lane's k-row of the step (Kept: its row of each slab).
            const int64_t u = u0 + step_of(i) * kStep + my_slot;
            const bool ok = u < u_end;
            const int wrow = Kept ? static_cast<int>(step_of(i) - sa) * kStep + my_slot
                             : ok ? static_cast<int>((static_cast<uint64_t>(u) * a.magic >> 32) - pw0) * M : 0;
            uint32_t b[NT][2];
            // The B operand of xT row xr (lane l < 16 gives k-row l's address).
            auto gather = [&](int xr) {
              const unsigned baddr = xbuf_s + static_cast<unsigned>(xr) * kRowBytes + (lane >> 4) * 16;
              if (NT == 1) {
                ldsm_x2_trans(b[0][0], b[0][1], baddr);
              } else {
#pragma unroll
                for (int h = 0; h < NT / 2; ++h) {
                  uint32_t r[4];
                  ldsm_x4_trans(r, baddr + h * 32);
                  b[2 * h][0] = r[0];
                  b[2 * h][1] = r[1];
                  b[2 * h + 1][0] = r[2];
                  b[2 * h + 1][1] = r[3];
                }
              }
            };
#pragma unroll
            for (int ct = 0; ct < CT; ++ct) {
              uint32_t af[4];
              ldsm_x4_trans(af, ring_s + j * kSlotBytes + slot_offset<C>(a_row, 2 * ct + a_chunk));
              if constexpr (SV > 1) {
                // Vector v of the tile is rows LV v .. LV v + LV - 1 of the product; this lane holds
                // rows g (accumulators 0, 1) and g + 8 (accumulators 2, 3).
                const int g = lane >> 2;
                // Not unrolled: the gathers of all SV vectors in flight at once spill at 128 registers.
#pragma unroll 1
                for (int v = 0; v < SV; ++v) {
                  gather(ok ? wrow + ((idx[j][ct] >> (8 * v)) & (M - 1)) : x_rows);
                  const bool lo = g / LV == v, hi = (g + 8) / LV == v;
#pragma unroll
                  for (int nt = 0; nt < NT; ++nt) {
                    float d[4] = {0.f, 0.f, 0.f, 0.f};
                    T::mma(d, af, b[nt][0], b[nt][1]);
                    if (lo) {
                      acc[ct][nt][0] += d[0];
                      acc[ct][nt][1] += d[1];
                    }
                    if (hi) {
                      acc[ct][nt][2] += d[2];
                      acc[ct][nt][3] += d[3];
                    }
                  }
                }
              } else {
                if (ct == 0 || (16 * ct) % L == 0)
                  gather(Kept ? (L >= 64 ? 0 : 16 * ct / L) * x_rows + wrow : ok ? wrow + (idx[j][ct] & (M - 1)) : x_rows);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) T::mma(acc[ct][nt], af, b[nt][0], b[nt][1]);
              }
            }
          }
          __syncwarp();  // every lane is done with slot j - 1 before it is refilled
          const int64_t inext = i + kStages - 1;
          issue(inext < cnt ? step_of(inext) : s_end, s_end, (j + kStages - 1) % kStages,
                idx[(j + kStages - 1) % kStages]);
        }
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with xT before the next pass (or the epilogue) reuses it
  }

  // Partial tiles [KW][8 NT tokens][BNp] (fp32), then the fixed-order block and cluster sums. The
  // tiles alias the rings and xT (and the zero row): every thread is past them first.
  __syncthreads();
  float* const red = reinterpret_cast<float*>(smem);
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int ct = 0; ct < CT; ++ct)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      float* const base = red + (kw * NT * 8 + nt * 8 + 2 * t) * BNp + cw * 16 * CT + 16 * ct + g;
      base[0] = acc[ct][nt][0];
      base[BNp] = acc[ct][nt][1];
      base[8] = acc[ct][nt][2];
      base[BNp + 8] = acc[ct][nt][3];
    }
  constexpr int kTile4 = NT * 8 * BNp / 4;  // float4 elements of one partial tile
  auto store = [&](int e, float4 s) {
    const int tok = (4 * e) / BNp, c = (4 * e) % BNp;
    const int64_t col = static_cast<int64_t>(blockIdx.x) * BN + c;
    if (c < BN && tok < m && col < n) {
      float v[4] = {s.x, s.y, s.z, s.w};
      if (a.bias != nullptr) {
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] += T::to_float(a.bias[col + j]);
      }
      uint2 o;
      o.x = static_cast<uint32_t>(T::from_float(v[0])) | (static_cast<uint32_t>(T::from_float(v[1])) << 16);
      o.y = static_cast<uint32_t>(T::from_float(v[2])) | (static_cast<uint32_t>(T::from_float(v[3])) << 16);
      *reinterpret_cast<uint2*>(a.y + static_cast<int64_t>(tok) * n + col) = o;
    }
  };
  reduce_over_block_and_cluster<KW, 4>(reinterpret_cast<float4*>(smem), kTile4, tid, kThreads, store);
#endif
}

template <class T, int NT, int W, int CW, bool Kept, bool Sp24, int SV = 1>
cudaError_t launch_one(const Args& a, int split_k, bool dependent, cudaStream_t stream) {
  auto kernel = decode_half_kernel<T, NT, W, CW, Kept, Sp24, SV>;
  static bool smem_set[kMaxDevices] = {};
  cudaError_t err = set_smem_limit_once(smem_set, kernel, kMaxSmem);
  if (err != cudaSuccess) return err;
  if (split_k > 8) {
    static bool large[kMaxDevices] = {};
    err = allow_large_clusters_once(large, kernel);
    if (err != cudaSuccess) return err;
  }
  const size_t smem = smem_bytes<NT, W, CW, Kept, Sp24>(a.x_rows, a.L);
  if (smem > static_cast<size_t>(kMaxSmem)) return cudaErrorInvalidConfiguration;
  constexpr int BN = 16 * CT * CW;
  const int64_t tiles = (a.n + BN - 1) / BN;
  if (tiles > 0x7fffffff) return cudaErrorInvalidConfiguration;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(split_k), 1);
  cfg.blockDim = dim3(W * 32, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2] = {cluster_attribute(dim3(1, static_cast<unsigned>(split_k), 1)),
                                 dependent_launch_attribute()};
  cfg.attrs = attr;
  cfg.numAttrs = dependent ? 2 : 1;
  return cudaLaunchKernelEx(&cfg, kernel, a);
}

// xT rows a launch stages: the largest block's k-range, capped so that the launch fits
// kMaxSmem (then a block runs in passes), and at least what one pass of one step needs.
template <int NT, int W, int CW>
inline int plan_x_rows(int64_t windows, int split_k, int N, int M) {
  const int64_t per_block = (windows + split_k - 1) / split_k * M;
  const int64_t cap = (kMaxSmem - ring_bytes<NT, W, CW>()) / (NT * 16) - 1;
  const int64_t min_rows = ((kStep + N - 1) / N + 1) * static_cast<int64_t>(M);
  int64_t rows = per_block < cap / M * M ? per_block : cap / M * M;
  if (rows < min_rows) rows = min_rows;
  return static_cast<int>(rows);
}

// Sp24: xT rows of the largest block's k-range in whole 32-input steps, capped to fit.
template <int NT, int W, int CW>
inline int plan_sp24_rows(int64_t windows, int split_k) {
  const int64_t per_block = ((windows + 7) / 8 + split_k - 1) / split_k * 32;
  const int64_t cap = ((kMaxSmem - ring_bytes<NT, W, CW, true>()) / (NT * 16) - 1) / 32 * 32;
  const int64_t rows = per_block < cap ? per_block : cap;
  return static_cast<int>(rows < 32 ? 32 : rows);
}

// Kept: rows of one slab, the largest block's compressed rows in whole steps, capped to fit.
template <int NT, int W, int CW>
inline int plan_kept_rows(int64_t windows, int split_k, int N, int L) {
  const int64_t steps = ((windows + split_k - 1) / split_k * N + kStep - 1) / kStep;
  const int64_t cap = (kMaxSmem - ring_bytes<NT, W, CW>()) / (kept_slabs(L) * (NT * 16 + 1)) / kStep;
  return static_cast<int>((steps < cap ? steps : cap) * kStep);
}

template <class T, int NT, int W>
cudaError_t launch_cols(const Args& a0, int split_k, int config, cudaStream_t stream) {
  Args a = a0;
  const bool dependent = (config & kHalfDecodeDependentLaunch) != 0;
  if (config & kHalfDecodeSparse24) {
    if (config & kHalfDecodeNarrow) {
      a.x_rows = plan_sp24_rows<NT, W, 1>(a.windows, split_k);
      return launch_one<T, NT, W, 1, false, true>(a, split_k, dependent, stream);
    }
    a.x_rows = plan_sp24_rows<NT, W, 4>(a.windows, split_k);
    return launch_one<T, NT, W, 4, false, true>(a, split_k, dependent, stream);
  }
  if (config & kHalfDecodeKept) {
    a.x_rows = plan_kept_rows<NT, W, 1>(a.windows, split_k, a.N, a.L);
    return launch_one<T, NT, W, 1, true, false>(a, split_k, dependent, stream);
  }
  if (config & kHalfDecodeNarrow) {
    a.x_rows = plan_x_rows<NT, W, 1>(a.windows, split_k, a.N, a.M);
    if (a.L == 8) return launch_one<T, NT, W, 1, false, false, 2>(a, split_k, dependent, stream);
    if (a.L == 4) return launch_one<T, NT, W, 1, false, false, 4>(a, split_k, dependent, stream);
    return launch_one<T, NT, W, 1, false, false>(a, split_k, dependent, stream);
  }
  a.x_rows = plan_x_rows<NT, W, 4>(a.windows, split_k, a.N, a.M);
  if (a.L == 8) return launch_one<T, NT, W, 4, false, false, 2>(a, split_k, dependent, stream);
  if (a.L == 4) return launch_one<T, NT, W, 4, false, false, 4>(a, split_k, dependent, stream);
  return launch_one<T, NT, W, 4, false, false>(a, split_k, dependent, stream);
}


// Checks the problem and launches the kernel for its m.
template <class T>
cudaError_t launch(const HalfSpmmParams& p, int config, cudaStream_t stream) {
  const bool sp24 = (config & kHalfDecodeSparse24) != 0;
  if (sp24 ? !sparse24_decode_supports(p.m, p.n, p.k, p.N, p.M, p.L) : !half_decode_supports(p.m, p.n, p.k, p.N, p.M, p.L))
    return cudaErrorInvalidValue;
  if ((config & kHalfDecodeKept) && (sp24 || !(config & kHalfDecodeNarrow) || p.L < 16)) return cudaErrorInvalidValue;
  // Sp24: the metadata rows [ceil(k / 32)] of meta_ld words (a multiple of 4, at least out / L).
  if (sp24 && (p.meta == nullptr || reinterpret_cast<uintptr_t>(p.meta) % 16 != 0 || p.meta_ld % 4 != 0 ||
               p.meta_ld < p.n / p.L))
    return cudaErrorInvalidValue;
  if (p.split_k < 1 || p.split_k > kHalfDecodeMaxSplit) return cudaErrorInvalidValue;
  // Sp24 reads the positions from meta alone (a compact 2:4 weight has no indices).
  if (p.x == nullptr || p.values == nullptr || (!sp24 && p.indices == nullptr) || p.y == nullptr)
    return cudaErrorInvalidValue;
  if (p.ldx < p.k) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(p.values) % 16 != 0 || reinterpret_cast<uintptr_t>(p.y) % 8 != 0 ||
      reinterpret_cast<uintptr_t>(p.x) % 2 != 0 || (p.bias != nullptr && reinterpret_cast<uintptr_t>(p.bias) % 2 != 0))
    return cudaErrorMisalignedAddress;
  Args a;
  a.x = static_cast<const uint16_t*>(p.x);
  a.ldx = p.ldx;
  a.values = static_cast<const uint16_t*>(p.values);
  a.indices = p.indices;
  a.bias = static_cast<const uint16_t*>(p.bias);
  a.y = static_cast<uint16_t*>(p.y);
  a.n = p.n;
  a.q = p.n / p.L;
  a.windows = p.k / p.M;
  a.magic = ((uint64_t{1} << 32) + static_cast<uint64_t>(p.N) - 1) / static_cast<uint64_t>(p.N);
  a.m = static_cast<int>(p.m);
  a.N = p.N;
  a.M = p.M;
  a.L = p.L;
  a.x_rows = 0;
  a.x_pairs = reinterpret_cast<uintptr_t>(p.x) % 4 == 0 && p.ldx % 2 == 0;
  a.meta = p.meta;
  a.meta_ld = p.meta_ld;
  a.k = p.k;
  const int split = static_cast<int>(p.split_k < a.windows ? p.split_k : (a.windows > 0 ? a.windows : 1));
  if (p.m <= 8) return launch_cols<T, 1, kWarps>(a, split, config, stream);
  if (p.m <= 16) return launch_cols<T, 2, kWarps>(a, split, config, stream);
  if (p.m <= 32) return launch_cols<T, 4, kWarps>(a, split, config, stream);
  return launch_cols<T, 8, kWarps>(a, split, config, stream);
}

}  // namespace half_decode
}  // namespace kernels
}  // namespace nmspmm
