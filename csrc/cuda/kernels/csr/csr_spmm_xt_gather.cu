// csr_spmm_xt_gather: x is transposed into a workspace xt[k][ldt] (csr_xt.cuh), then a block of 256
// threads computes R consecutive output rows x TT tokens. Its threads form NG = 256 / G groups of G
// lanes; a group's lanes hold TT = G * 8 tokens (fp32: G * 4), and for each nonzero every lane reads
// its 16 bytes of xt[col] from global memory (L2), 4 nonzeros in flight. No shared-memory staging of
// x, so a nonzero costs its bytes of xt and nothing per slab or per row.
//
// Load balance (TCA-SpMM's row split, within the block): the block's nonzeros, its rows' ranges
// laid end to end, are cut into NG equal parts, one per group, whatever the rows' lengths. A group
// writes each row it starts into the block's output tile and keeps the partial sum of a row it
// entered midway as its carry; after a barrier, each output adds the carries of its row in group
// order, so the sums are deterministic. A long row spreads over the block's groups; short rows share
// a group.
//
// Any index content stays in bounds and gives the masked product: a row's range is clamped to
// [0, nnz] (an end before its start is an empty row), columns outside [0, k) are skipped. Rows may
// be unsorted or repeat columns (each entry is added). Columns a row does not keep are never read,
// so a NaN there does not reach y.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/kernels/csr/csr_spmm.h"
#include "cuda/kernels/csr/csr_values.cuh"
#include "cuda/kernels/csr/csr_xt.cuh"

namespace nmspmm {
namespace kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxRows = 32;  // rows per block (R), at most
constexpr int kInFlight = 4;  // nonzeros per group in flight

using csr::bits_f32;
using csr::fma_tokens;
using csr::from_f32;
using csr::kMaxGridY;
using csr::raw_bits;

// Lanes per group by m: the fewest whose tokens cover m, at most 16 (128 tokens; fp32: 64).
template <typename T>
int group_lanes(int64_t m) {
  constexpr int tpl = csr::kTokensPerLane<T>;
  return m <= 2 * tpl ? 2 : m <= 4 * tpl ? 4 : m <= 8 * tpl ? 8 : 16;
}

template <typename T, int G>
__global__ void __launch_bounds__(kThreads, 4) csr_spmm_xt_gather(const CsrSpmmParams p, const T* __restrict__ xt,
                                                                   int64_t ldt, int rows_per_block) {
  constexpr int TPL = csr::kTokensPerLane<T>, TT = G * TPL, NG = kThreads / G;
  __shared__ int64_t pre[kMaxRows + 1];  // pre[r]: the block's nonzeros before row r (rows end to end)
  __shared__ int64_t rbegin[kMaxRows];   // row r's first entry in col_indices / values
  __shared__ float out[kMaxRows][TT + 1];  // the rows' sums, written by the group that starts them
  __shared__ float carry[NG][TT];          // each group's partial sum of the row it entered midway
  const int tid = threadIdx.x, grp = tid / G, gl = tid % G;
  const int R = rows_per_block;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * R;

  if (tid < 32) {  // the rows' clamped ranges and their prefix sum (R <= 32: one warp)
    int64_t b = 0, len = 0;
    const int64_t r = row0 + tid;
    if (tid < R && r < p.n) {
      int64_t e = p.crow_indices[r + 1];
      b = p.crow_indices[r];
      b = b < 0 ? 0 : b > p.nnz ? p.nnz : b;
      e = e < b ? b : e > p.nnz ? p.nnz : e;
      len = e - b;
    }
    int64_t incl = len;
#pragma unroll
    for (int s = 1; s < 32; s <<= 1) {
      const int64_t o = __shfl_up_sync(0xffffffffu, incl, s);
      if (tid >= s) incl += o;
    }
    if (tid < R) rbegin[tid] = b, pre[tid + 1] = incl;
    if (tid == 0) pre[0] = 0;
  }
  __syncthreads();
  const int64_t total = pre[R];
  const int64_t part = (total + NG - 1) / NG;  // nonzeros per group (0 for an empty block)
  const int64_t v0 = static_cast<int64_t>(grp) * part < total ? static_cast<int64_t>(grp) * part : total;
  const int64_t v1 = v0 + part < total ? v0 + part : total;
  int r0 = 0;  // the group's first row: pre[r0] <= v0 < pre[r0 + 1]
  while (r0 < R - 1 && pre[r0 + 1] <= v0) ++r0;

  const int32_t* __restrict__ cols = p.col_indices;
  const T* __restrict__ vals = static_cast<const T*>(p.values);
  const T* __restrict__ bias = static_cast<const T*>(p.bias);
  T* __restrict__ y = static_cast<T*>(p.y);
  const uint32_t k = static_cast<uint32_t>(p.k);
  const int64_t tiles = ldt / TT;
  for (int64_t tile = blockIdx.y; tile < tiles; tile += gridDim.y) {
    const int64_t t0 = tile * TT;
    const T* xs = xt + t0 + gl * TPL;
    // One walk over the group's nonzeros, kInFlight per step whatever the row boundaries, so the
    // groups of a warp run the same number of steps (segment-by-segment loops diverge: measured
    // 1.4x slower on rows of uneven length). A step inside the current row takes the short path;
    // a step that crosses a row end maps each entry to its row and flushes the sum where it changes.
    float acc[TPL];
#pragma unroll
    for (int t = 0; t < TPL; ++t) acc[t] = 0.f;
    const auto flush = [&](int row) {
      float* dst = (row == r0 && v0 > pre[r0]) ? &carry[grp][gl * TPL] : &out[row][gl * TPL];
#pragma unroll
      for (int t = 0; t < TPL; ++t) dst[t] = acc[t], acc[t] = 0.f;
    };
    int r = r0, cur = r0;
    int64_t rend = pre[r0 + 1], base = rbegin[r0] - pre[r0];  // row r: entry = base + v for v < rend
    for (int64_t v = v0; v < v1; v += kInFlight) {
      uint32_t c[kInFlight];
      float w[kInFlight];
      uint4 xv[kInFlight];
      if (v + kInFlight <= rend && v + kInFlight <= v1) {  // every entry in row r (== cur)
        const uint32_t q = static_cast<uint32_t>(base + v);  // in [0, nnz - kInFlight], nnz < 2^31
#pragma unroll
        for (int z = 0; z < kInFlight; ++z)
          c[z] = static_cast<uint32_t>(__ldg(cols + q + z)), w[z] = bits_f32<T>(raw_bits(vals[q + z]));
#pragma unroll
        for (int z = 0; z < kInFlight; ++z)
          if (c[z] < k) xv[z] = __ldg(reinterpret_cast<const uint4*>(xs + static_cast<int64_t>(c[z]) * ldt));
#pragma unroll
        for (int z = 0; z < kInFlight; ++z)
          if (c[z] < k) fma_tokens<T>(acc, xv[z], w[z]);
      } else {
        int rz[kInFlight];
#pragma unroll
        for (int z = 0; z < kInFlight; ++z) {
          c[z] = 0xffffffffu, w[z] = 0.f;
          if (v + z < v1) {
            while (v + z >= rend) ++r, base = rbegin[r] - rend, rend = pre[r + 1];  // pre[r] is the old rend
            const uint32_t q = static_cast<uint32_t>(base + v + z);  // in [0, nnz)
            c[z] = static_cast<uint32_t>(__ldg(cols + q)), w[z] = bits_f32<T>(raw_bits(vals[q]));
          }
          rz[z] = r;
        }
#pragma unroll
        for (int z = 0; z < kInFlight; ++z)
          if (c[z] < k) xv[z] = __ldg(reinterpret_cast<const uint4*>(xs + static_cast<int64_t>(c[z]) * ldt));
#pragma unroll
        for (int z = 0; z < kInFlight; ++z) {
          if (rz[z] != cur) flush(cur), cur = rz[z];
          if (c[z] < k) fma_tokens<T>(acc, xv[z], w[z]);
        }
      }
    }
    if (v0 < v1) flush(cur);
    __syncthreads();
    // y[t][row0 + rr] for the tile: the row's own sum (0 for an empty row), then the carries of the
    // groups that started inside it (those whose first nonzero g * part lies in (pre[rr], pre[rr + 1])).
    for (int s = tid; s < TT * R; s += kThreads) {
      const int tl = s / R, rr = s % R;
      const int64_t t = t0 + tl, row = row0 + rr;
      if (t >= p.m || row >= p.n) continue;
      const int64_t lo = pre[rr], hi = pre[rr + 1];
      float acc = 0.f;
      if (hi > lo) {
        acc = out[rr][tl];
        for (int64_t g = lo / part + 1; g <= (hi - 1) / part; ++g) acc += carry[g][tl];
      }
      if (bias != nullptr) acc += bits_f32<T>(raw_bits(bias[row]));
      y[t * p.n + row] = from_f32<T>(acc);
    }
    __syncthreads();  // out and carry are read before the next tile writes them
  }
}

template <typename T, int G>
cudaError_t launch_groups(const CsrSpmmParams& p, const T* xt, int64_t ldt, cudaStream_t stream) {
  const int64_t tiles = ldt / (G * csr::kTokensPerLane<T>);
  // 16 rows per block; 8 where that leaves fewer than 1024 blocks (small m, few rows).
  const int rows = (p.n + 15) / 16 * tiles >= 1024 ? 16 : 8;
  const dim3 grid(static_cast<unsigned>((p.n + rows - 1) / rows),
                  static_cast<unsigned>(tiles < kMaxGridY ? tiles : kMaxGridY));
  csr_spmm_xt_gather<T, G><<<grid, kThreads, 0, stream>>>(p, xt, ldt, rows);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_typed(const CsrSpmmParams& p, void* workspace, cudaStream_t stream) {
  const int64_t ldt = csr_xt_gather_tokens(p.m, sizeof(T));
  if (cudaError_t e = csr::launch_transpose_x<T>(p.x, p.ldx, p.m, p.k, workspace, ldt, stream); e != cudaSuccess)
    return e;
  const T* xt = static_cast<const T*>(workspace);
  switch (group_lanes<T>(p.m)) {
    case 2: return launch_groups<T, 2>(p, xt, ldt, stream);
    case 4: return launch_groups<T, 4>(p, xt, ldt, stream);
    case 8: return launch_groups<T, 8>(p, xt, ldt, stream);
    default: return launch_groups<T, 16>(p, xt, ldt, stream);
  }
}

}  // namespace

int64_t csr_xt_gather_tokens(int64_t m, size_t elem_bytes) {
  const int64_t tpl = 16 / static_cast<int64_t>(elem_bytes);
  const int64_t tt = tpl * (m <= 2 * tpl ? 2 : m <= 4 * tpl ? 4 : m <= 8 * tpl ? 8 : 16);
  return (m + tt - 1) / tt * tt;
}

cudaError_t launch_csr_spmm_xt_gather(const CsrSpmmParams& p, void* workspace, cudaStream_t stream) {
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
