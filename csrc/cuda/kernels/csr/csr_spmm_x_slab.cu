// csr_spmm_x_slab (m > 128 by default): x is first transposed into a workspace xt[k][m_pad] (one
// input's tokens contiguous, tokens past m zero), then a block of 8 warps computes R = 16 * RPH
// output rows x TT tokens (TT = 128 for fp16 / bf16, 64 for fp32). The block streams xt in slabs of
// kChunk inputs x TT tokens through a cp.async ring in shared memory; each half-warp owns RPH rows
// and, slab by slab, walks each row's nonzeros that fall in the slab: one shuffle hands every lane
// the column and value, and each lane multiplies its 8 (fp32: 4) tokens of that slab row, read with
// one conflict-free 16-byte shared load. So every nonzero costs one 16-byte shared load per 8 tokens
// instead of 8 gathers from global memory, and the slab is read once per R rows. Each row's next 16
// entries are loaded one slab ahead, so the walk does not wait on global memory.
//
// Rows are walked with a cursor that stops at the first column past the slab, so sorted rows (every
// CSRWeight) read each nonzero once in all. Any index content stays in bounds and gives the masked
// product: a row's range is clamped to [0, nnz], columns outside [0, k) are skipped, and a column
// behind the slab (an unsorted row) is read from xt in global memory instead. The order of the sums
// is fixed (deterministic). Columns a row does not keep are never read, so a NaN there does not
// reach y.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/kernels/common/cp_async.cuh"
#include "cuda/kernels/common/smem_limit.h"
#include "cuda/kernels/csr/csr_spmm.h"
#include "cuda/kernels/csr/csr_values.cuh"
#include "cuda/kernels/csr/csr_xt.cuh"

namespace nmspmm {
namespace kernels {
namespace {

constexpr int kThreads = 256;  // 8 warps, 16 half-warps
constexpr int kChunk = 128;    // inputs per slab
// 32-row blocks, a ring of two slabs and four nonzeros in flight per half-warp: 80 registers and
// 64 KB, three blocks per SM. Measured on an H200 (bf16, m = 256 and 4096, 90 / 98%): 1.2-1.3x
// the 128-row, three-slab, two-in-flight form, whose 2 blocks per SM left the issue slots half idle
// (ncu: 2.0 instructions per cycle, 7.6 cycles between a warp's instructions).
constexpr int kRowsPerHalfWarp = 2;
constexpr int kStages = 2;
constexpr int kIlp = 4;

template <typename T>
struct SlabShape {
  static constexpr int kTpl = csr::kTokensPerLane<T>;
  static constexpr int kTokens = 16 * kTpl;  // tokens per block (a half-warp's)
};

using csr::bits_f32;
using csr::fma_tokens;
using csr::kMaxGridY;
using csr::from_f32;
using csr::raw_bits;

// The lane's entry q of a row ending at e: its column and value bits, (-1, 0) past the end.
template <typename T>
__device__ __forceinline__ void load_entry(const int32_t* __restrict__ cols, const T* __restrict__ vals, uint32_t q,
                                           uint32_t e, int32_t& c, uint32_t& vb) {
  c = -1, vb = 0;
  if (q < e) c = __ldg(cols + q), vb = raw_bits(vals[q]);
}

template <typename T, int RPH, int NS, int ILP>
__global__ void __launch_bounds__(kThreads, 3) csr_spmm_x_slab(const CsrSpmmParams p, const T* __restrict__ xt,
                                                                int64_t ldt) {
  constexpr int TPL = SlabShape<T>::kTpl, TT = SlabShape<T>::kTokens, R = 16 * RPH;
  constexpr int kOutStride = R + 2;  // the output tile's row stride (elements), padded
  extern __shared__ __align__(16) unsigned char smem[];
  T* slab = reinterpret_cast<T*>(smem);  // [NS][kChunk][TT]
  const int tid = threadIdx.x, lane = tid & 31, hl = lane & 15, hw = tid >> 4;
  const int hshift = lane & 16;
  const unsigned hmask = 0xffffu << hshift;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * R;
  const int32_t* __restrict__ cols = p.col_indices;
  const T* __restrict__ vals = static_cast<const T*>(p.values);
  const int32_t k = static_cast<int32_t>(p.k);
  const int nchunks = static_cast<int>((p.k + kChunk - 1) / kChunk);
  const int64_t tiles = ldt / TT;

  for (int64_t tile = blockIdx.y; tile < tiles; tile += gridDim.y) {
    const int64_t t0 = tile * TT;
    // Each half-warp's rows: row0 + 16 i + hw, ranges clamped to [0, nnz] (an end before its start is
    // an empty row). nnz < 2^31, so the cursors fit 32 bits and cursor + 15 does not wrap.
    uint32_t q[RPH], e[RPH];
    int32_t bc[RPH];   // the lane's entry of each row's batch (the 16 entries from the cursor on)
    uint32_t bv[RPH];
#pragma unroll
    for (int i = 0; i < RPH; ++i) {
      const int64_t r = row0 + 16 * i + hw;
      int64_t b = 0, en = 0;
      if (r < p.n) {
        b = p.crow_indices[r], en = p.crow_indices[r + 1];
        b = b < 0 ? 0 : b > p.nnz ? p.nnz : b;
        en = en < b ? b : en > p.nnz ? p.nnz : en;
      }
      q[i] = static_cast<uint32_t>(b), e[i] = static_cast<uint32_t>(en);
    }
#pragma unroll
    for (int i = 0; i < RPH; ++i) load_entry(cols, vals, q[i] + hl, e[i], bc[i], bv[i]);
    float acc[RPH][TPL];
#pragma unroll
    for (int i = 0; i < RPH; ++i)
#pragma unroll
      for (int t = 0; t < TPL; ++t) acc[i][t] = 0.f;

    // Slab j -> stage j % NS: kChunk rows of TT tokens, 16 copies of 16 bytes per row. Rows past
    // k are not copied (no nonzero reads them). Every call commits a group, empty or not, so the
    // wait below counts stages.
    const auto load = [&](int j) {
      if (j < nchunks) {
        T* dst = slab + static_cast<size_t>(j % NS) * kChunk * TT;
        const int64_t k0 = static_cast<int64_t>(j) * kChunk;
        for (int s = tid; s < kChunk * 16; s += kThreads) {
          const int rr = s >> 4, seg = s & 15;
          const int64_t c = k0 + rr;
          if (c < p.k) cp_async_16(dst + rr * TT + seg * TPL, xt + c * ldt + t0 + seg * TPL, true);
        }
      }
      cp_async_commit();
    };
#pragma unroll
    for (int s = 0; s < NS - 1; ++s) load(s);

    for (int j = 0; j < nchunks; ++j) {
      cp_async_wait<NS - 2>();
      __syncthreads();  // slab j landed for every thread; stage (j - 1) % NS is free
      load(j + NS - 1);
      const T* st = slab + static_cast<size_t>(j % NS) * kChunk * TT + hl * TPL;
      const int32_t k0 = j * kChunk;
      const int32_t k1 = k - k0 < kChunk ? k : k0 + kChunk;
#pragma unroll
      for (int i = 0; i < RPH; ++i) {
        uint32_t qi = q[i];
        const uint32_t ei = e[i];
        int32_t c = bc[i];
        uint32_t vb = bv[i];
        while (qi < ei) {  // uniform over the half-warp; (c, vb) is the lane's entry qi + hl
          const uint32_t my = qi + hl;
          const bool live = my < ei && static_cast<uint32_t>(c) < static_cast<uint32_t>(k);
          const bool stop = my >= ei || (live && c >= k1);  // past the row, or past this slab
          const bool in_slab = live && c >= k0 && c < k1;
          const bool behind = live && c < k0;
          const unsigned stops = (__ballot_sync(hmask, stop) >> hshift) & 0xffffu;
          const unsigned take = stops ? (1u << (__ffs(stops) - 1)) - 1u : 0xffffu;
          unsigned pbits = (__ballot_sync(hmask, in_slab) >> hshift) & take;
          unsigned fbits = (__ballot_sync(hmask, behind) >> hshift) & take;
          const uint32_t off = in_slab ? static_cast<uint32_t>(c - k0) * TT : 0u;
          // ILP nonzeros per step, their shared loads issued before their FMAs.
          while (pbits) {
            int u[ILP];
            bool has[ILP];
#pragma unroll
            for (int z = 0; z < ILP; ++z) {
              has[z] = pbits != 0;
              u[z] = has[z] ? __ffs(pbits) - 1 : u[0];
              pbits &= pbits - 1;
            }
            float v[ILP];
            uint4 xv[ILP];
#pragma unroll
            for (int z = 0; z < ILP; ++z) {
              uint32_t o;
              if constexpr (sizeof(T) == 2) {
                const uint32_t w = __shfl_sync(hmask, (off << 16) | vb, u[z], 16);  // off < kChunk * TT = 2^14
                o = w >> 16, v[z] = bits_f32<T>(w);
              } else {
                o = __shfl_sync(hmask, off, u[z], 16), v[z] = bits_f32<T>(__shfl_sync(hmask, vb, u[z], 16));
              }
              xv[z] = *reinterpret_cast<const uint4*>(st + o);
            }
#pragma unroll
            for (int z = 0; z < ILP; ++z)
              if (z == 0 || has[z]) fma_tokens<T>(acc[i], xv[z], v[z]);
          }
          while (fbits) {  // unsorted rows only: the column is behind this slab, read it from xt
            const int u = __ffs(fbits) - 1;
            fbits &= fbits - 1;
            const int32_t cu = __shfl_sync(hmask, c, u, 16);
            const float vu = bits_f32<T>(__shfl_sync(hmask, vb, u, 16));
            const uint4 xv = *reinterpret_cast<const uint4*>(xt + static_cast<int64_t>(cu) * ldt + t0 + hl * TPL);
            fma_tokens<T>(acc[i], xv, vu);
          }
          if (stops) {
            qi += __ffs(stops) - 1;
            break;
          }
          qi += 16;  // the whole batch was taken: the next 16 entries, loaded here
          load_entry(cols, vals, qi + hl, ei, c, vb);
        }
        q[i] = qi;
        // The batch at the new cursor, for the next slab: its load runs under the rows after this one.
        load_entry(cols, vals, qi + hl, ei, bc[i], bv[i]);
      }
    }

    // Output tile [TT][R] in shared memory (the slab ring is free), then coalesced rows of y.
    cp_async_wait<0>();
    __syncthreads();
    T* out = reinterpret_cast<T*>(smem);
    const T* __restrict__ bias = static_cast<const T*>(p.bias);
#pragma unroll
    for (int i = 0; i < RPH; ++i) {
      const int64_t r = row0 + 16 * i + hw;
      const float b = (bias != nullptr && r < p.n) ? bits_f32<T>(raw_bits(bias[r])) : 0.f;
#pragma unroll
      for (int t = 0; t < TPL; ++t) out[(hl * TPL + t) * kOutStride + 16 * i + hw] = from_f32<T>(acc[i][t] + b);
    }
    __syncthreads();
    T* __restrict__ y = static_cast<T*>(p.y);
    for (int s = tid; s < TT * R; s += kThreads) {
      const int tl = s / R, rr = s % R;
      const int64_t t = t0 + tl, r = row0 + rr;
      if (t < p.m && r < p.n) y[t * p.n + r] = out[tl * kOutStride + rr];
    }
    __syncthreads();  // the tile is read before the next token tile's slabs land
  }
}

template <typename T, int RPH, int NS>
size_t slab_smem_bytes() {
  constexpr int TT = SlabShape<T>::kTokens, R = 16 * RPH;
  const size_t ring = static_cast<size_t>(NS) * kChunk * TT * sizeof(T);
  const size_t out = static_cast<size_t>(TT) * (R + 2) * sizeof(T);
  return ring > out ? ring : out;
}

template <typename T, int RPH, int NS, int ILP>
cudaError_t launch_slab(const CsrSpmmParams& p, const T* xt, int64_t ldt, cudaStream_t stream) {
  static bool configured[kMaxDevices] = {};
  const size_t smem = slab_smem_bytes<T, RPH, NS>();
  if (cudaError_t e = set_smem_limit_once(configured, csr_spmm_x_slab<T, RPH, NS, ILP>, static_cast<int>(smem));
      e != cudaSuccess)
    return e;
  const int64_t tiles = ldt / SlabShape<T>::kTokens;
  const dim3 grid(static_cast<unsigned>((p.n + 16 * RPH - 1) / (16 * RPH)),
                  static_cast<unsigned>(tiles < kMaxGridY ? tiles : kMaxGridY));
  csr_spmm_x_slab<T, RPH, NS, ILP><<<grid, kThreads, smem, stream>>>(p, xt, ldt);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_typed(const CsrSpmmParams& p, void* workspace, cudaStream_t stream) {
  const int64_t ldt = csr_x_slab_tokens(p.m, sizeof(T));
  if (cudaError_t e = csr::launch_transpose_x<T>(p.x, p.ldx, p.m, p.k, workspace, ldt, stream); e != cudaSuccess)
    return e;
  return launch_slab<T, kRowsPerHalfWarp, kStages, kIlp>(p, static_cast<const T*>(workspace), ldt, stream);
}

}  // namespace

int64_t csr_x_slab_tokens(int64_t m, size_t elem_bytes) {
  const int64_t tt = 16 * (16 / static_cast<int64_t>(elem_bytes));
  return (m + tt - 1) / tt * tt;
}

cudaError_t launch_csr_spmm_x_slab(const CsrSpmmParams& p, void* workspace, cudaStream_t stream) {
  if (p.m < 0 || p.n < 0 || p.k < 0 || p.nnz < 0 || p.n > 0x7fffffffLL || p.k > 0x7fffffffLL ||
      p.nnz > 0x7fffffffLL || (p.m > 1 && p.ldx < p.k) || workspace == nullptr)
    return cudaErrorInvalidValue;
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  switch (p.dtype) {
    case CsrType::kF32: return launch_typed<float>(p, workspace, stream);
    case CsrType::kF16: return launch_typed<__half>(p, workspace, stream);
    default: return launch_typed<__nv_bfloat16>(p, workspace, stream);
  }
}

}  // namespace kernels
}  // namespace nmspmm
