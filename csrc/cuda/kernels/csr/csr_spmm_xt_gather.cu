// csr_spmm_xt_gather: x is transposed into a workspace xt[k][ldt] (csr_xt.cuh), then a block of 256
// threads computes a range of output rows x TT tokens, in tiles of up to 32 rows. Its threads form
// NG = 256 / G groups of G lanes; a group's lanes hold TT = G * 8 tokens (fp32: G * 4), and for each
// nonzero every lane reads its 16 bytes of xt[col] from global memory (L2), 4 nonzeros in flight. No
// shared-memory staging of x, so a nonzero costs its bytes of xt and nothing per slab or per row.
//
// Load balance (TCA-SpMM's nonzero split): across blocks, block b takes the rows whose first entry
// lies in its share [e0, e1) of the nonzeros (csr_rows.cuh: a monotone search of crow_indices), so
// blocks of short rows take many; within a block, each tile's nonzeros, its rows' ranges laid end to
// end, are cut into NG equal parts, one per group, whatever the rows' lengths. A group writes each
// row it starts into the tile's output and keeps the partial sum of a row it entered midway as its
// carry; after a barrier, each output adds the carries of its row in group order, so the sums are
// deterministic. A long row spreads over the block's groups; short rows share a group.
//
// Rows split across blocks (split mode, m up to kSplitMaxTokens): a row that runs past its block's
// share is cut there. Its owner (the block its first entry falls in) takes the entries up to e1 as
// its tail; each following block whose share the row reaches takes its part as its head (the row
// before its first own row); both partial sums go to a workspace, and xt_gather_split_rows adds
// them in block order, then whatever of the row lies past the last such block (nothing for a valid
// crow_indices), so every row's sum is exact and deterministic whatever crow_indices holds. A dense
// row then costs each block its share, not a whole block's time.
//
// Any index content stays in bounds and gives the masked product: the block ranges partition the
// rows whatever crow_indices holds, a row's range is clamped to [0, nnz] (an end before its start
// is an empty row), columns outside [0, k) are skipped. Rows may be unsorted or repeat columns
// (each entry is added). Columns a row does not keep are never read, so a NaN there does not reach y.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/kernels/common/launch_overlap.cuh"
#include "cuda/kernels/csr/csr_rows.cuh"
#include "cuda/kernels/csr/csr_spmm.h"
#include "cuda/kernels/csr/csr_values.cuh"
#include "cuda/kernels/csr/csr_xt.cuh"

namespace nmspmm {
namespace kernels {
namespace {

constexpr int kThreads = 256;
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

// Rows per tile: a fixed block's 8 or 16 rows fit one tile of 32 (one warp sums their lengths); a
// balanced block's tiles take 512 / G rows, whose sums fill rows x (TT + 1) floats, about 16 KB (256
// rows at m <= 16, 32 at TT = 128 tokens), so a range of short rows costs few tiles.
template <int G, bool BAL>
inline constexpr int kTileRows = BAL ? 512 / G : 32;

// The partial sums of rows split across blocks (split mode): per block, its head and tail rows' sums
// [blocks][ldt] and the rows (-1 for none).
struct SplitRows {
  float* head;
  float* tail;
  int32_t* head_row;
  int32_t* tail_row;
};

// Row r's entry range clamped to [0, nnz] (an end before its start is an empty row).
__device__ __forceinline__ void clamped_range(const CsrSpmmParams& p, int64_t r, int64_t& rb, int64_t& e) {
  rb = p.crow_indices[r];
  e = p.crow_indices[r + 1];
  rb = rb < 0 ? 0 : rb > p.nnz ? p.nnz : rb;
  e = e < rb ? rb : e > p.nnz ? p.nnz : e;
}

// BAL: the block's rows are its share of the nonzeros (csr::balanced_row_start) instead of
// rows_per_block consecutive rows; with split.head, rows are also cut at the shares' ends.
template <typename T, int G, bool BAL>
__global__ void __launch_bounds__(kThreads, 4) csr_spmm_xt_gather(const CsrSpmmParams p, const T* __restrict__ xt,
                                                                   int64_t ldt, int rows_per_block,
                                                                   const SplitRows split) {
  constexpr int TPL = csr::kTokensPerLane<T>, TT = G * TPL, NG = kThreads / G, TR = kTileRows<G, BAL>;
  static_assert(TR <= kThreads, "one row per thread for the tile's prefix sum");
  __shared__ int64_t pre[TR + 1];  // pre[r]: the tile's nonzeros before row r (rows end to end)
  __shared__ int64_t rbegin[TR];   // row r's first entry in col_indices / values
  __shared__ float out[TR][TT + 1];  // the rows' sums, written by the group that starts them
  __shared__ float carry[NG][TT];    // each group's partial sum of the row it entered midway
  __shared__ int64_t warp_total[TR > 32 ? kThreads / 32 : 1];
  __shared__ int64_t bounds[2];
  // Split mode: the block's share of the entries [e0, e1), and its rows cut at e0 (the head, owned
  // by an earlier block) and at e1 (the tail, owned), -1 for none. In shared memory: read only per
  // tile, outside the walk, where registers are short.
  __shared__ int64_t cut[4];  // e0, e1, head row, tail row
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, grp = tid / G, gl = tid % G;
  int64_t row_begin, row_end;  // the block's rows
  if constexpr (BAL) {  // two warps searching in parallel
    if (tid < 64) {
      const int64_t s = csr::balanced_row_start(p.crow_indices, p.n, p.nnz, static_cast<int64_t>(blockIdx.x) + warp,
                                                gridDim.x, lane);
      if (lane == 0) bounds[warp] = s;
    }
    __syncthreads();
    if (tid == 0) {
      cut[0] = 0, cut[1] = p.nnz, cut[2] = -1, cut[3] = -1;
      if (split.head != nullptr) {
        const int64_t per = (p.nnz + gridDim.x - 1) / gridDim.x, b = blockIdx.x;
        const int64_t e0 = b * per < p.nnz ? b * per : p.nnz, e1 = e0 + per < p.nnz ? e0 + per : p.nnz;
        // The row before the first own row (the head, if it reaches into the share) and the last
        // own row (the tail, if it runs past it): both ranges loaded at once (n >= 1).
        const int64_t r0 = bounds[0], r1 = bounds[1];
        int64_t hb, he, tb, te, head_row = -1, tail_row = -1;
        clamped_range(p, r0 > 0 ? r0 - 1 : 0, hb, he);
        clamped_range(p, r1 > r0 ? r1 - 1 : 0, tb, te);
        if (r0 > 0 && he > e0) head_row = r0 - 1;
        if (r1 > r0 && te > e1) tail_row = r1 - 1;
        if (head_row >= 0) bounds[0] = head_row;
        cut[0] = e0, cut[1] = e1, cut[2] = head_row, cut[3] = tail_row;
        if (blockIdx.y == 0)
          split.head_row[b] = static_cast<int32_t>(head_row), split.tail_row[b] = static_cast<int32_t>(tail_row);
      }
    }
    __syncthreads();
    row_begin = bounds[0], row_end = bounds[1];
  } else {
    if (tid == 0) cut[0] = 0, cut[1] = p.nnz, cut[2] = -1, cut[3] = -1;
    __syncthreads();
    row_begin = static_cast<int64_t>(blockIdx.x) * rows_per_block;
    row_end = row_begin + rows_per_block < p.n ? row_begin + rows_per_block : p.n;
  }
  // Split mode: xt_gather_split_rows may launch now (it waits for this grid before it reads).
  if (split.head != nullptr) allow_dependent_launch();
  for (int64_t row0 = row_begin; row0 < row_end; row0 += TR) {
    const int R = row_end - row0 < TR ? static_cast<int>(row_end - row0) : TR;
    // The tile's clamped row ranges and their prefix sum, one row per thread (TR <= 32: one warp).
    if (TR > 32 || tid < 32) {
      int64_t rb = 0, len = 0;
      if (tid < R) {
        int64_t e;
        clamped_range(p, row0 + tid, rb, e);
        if (row0 + tid == cut[2]) rb = rb > cut[0] ? rb : cut[0];  // the head's part in [e0, e1)
        if (row0 + tid == cut[2] || row0 + tid == cut[3]) e = e < cut[1] ? e : cut[1];
        len = e > rb ? e - rb : 0;
      }
      int64_t incl = len;
#pragma unroll
      for (int s = 1; s < 32; s <<= 1) {
        const int64_t o = __shfl_up_sync(0xffffffffu, incl, s);
        if (lane >= s) incl += o;
      }
      int64_t before = 0;
      if constexpr (TR > 32) {
        if (lane == 31) warp_total[warp] = incl;
        __syncthreads();
        for (int w = 0; w < warp; ++w) before += warp_total[w];
      }
      if (tid < R) rbegin[tid] = rb, pre[tid + 1] = before + incl;
      if (tid == 0) pre[0] = 0;
    }
    __syncthreads();
    // Launched during the transpose of x (programmatic dependent launch): the row search and the
    // tile's set-up above read only the weight; xt is complete once this returns.
    grid_dependency_wait();
    const int64_t total = pre[R];
    const int64_t part = (total + NG - 1) / NG;  // nonzeros per group (0 for an empty tile)
    const int64_t v0 = static_cast<int64_t>(grp) * part < total ? static_cast<int64_t>(grp) * part : total;
    const int64_t v1 = v0 + part < total ? v0 + part : total;
    int r0 = 0, hi = R - 1;  // the group's first row: the last r with pre[r] <= v0
    while (r0 < hi) {
      const int mid = (r0 + hi + 1) / 2;
      if (pre[mid] <= v0) r0 = mid;
      else hi = mid - 1;
    }

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
      // A head or tail row's partial sum goes to the workspace instead.
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
        if (row == cut[2] || row == cut[3]) {
          (row == cut[2] ? split.head : split.tail)[static_cast<int64_t>(blockIdx.x) * ldt + t] = acc;
          continue;
        }
        if (bias != nullptr) acc += bits_f32<T>(raw_bits(bias[row]));
        y[t * p.n + row] = from_f32<T>(acc);
      }
      __syncthreads();  // pre, out and carry are read before the next tile writes them
    }
  }
}

// y[t][r] for each row r cut at the end of its owner's share: the owner's tail, the heads of the
// following blocks that hold r, in block order, then the entries of r past the last of them (none
// where crow_indices is non-decreasing), plus the bias. One block per owner, threads over tokens.
template <typename T>
__global__ void __launch_bounds__(128) xt_gather_split_rows(const CsrSpmmParams p, const T* __restrict__ xt,
                                                            int64_t ldt, const SplitRows split) {
  grid_dependency_wait();  // launched during csr_spmm_xt_gather (programmatic dependent launch)
  constexpr int kThreadsFix = 128;
  const int64_t b = blockIdx.x, blocks = gridDim.x;
  const int64_t r = split.tail_row[b];
  if (r < 0) return;
  int64_t rb, e;
  clamped_range(p, r, rb, e);
  // One past the last block holding part of r. Those blocks are a run b + 1, b + 2, ... (their first
  // own rows never decrease, nor do their shares), so one count per 128 blocks finds its end.
  int64_t last = b + 1;
  for (;;) {
    const int64_t j = last + threadIdx.x;
    const int held = __syncthreads_count(j < blocks && split.head_row[j] == r);
    last += held;
    if (held < kThreadsFix) break;
  }
  const int64_t per = (p.nnz + blocks - 1) / blocks;
  const int64_t covered = last * per < p.nnz ? last * per : p.nnz;  // the end of the last block's share
  const T* __restrict__ vals = static_cast<const T*>(p.values);
  const T* __restrict__ bias = static_cast<const T*>(p.bias);
  for (int64_t t = threadIdx.x; t < p.m; t += kThreadsFix) {
    float acc = split.tail[b * ldt + t];
    int64_t j = b + 1;
    for (; j + 4 <= last; j += 4) {  // four loads in flight, added in block order
      const float h0 = split.head[j * ldt + t], h1 = split.head[(j + 1) * ldt + t];
      const float h2 = split.head[(j + 2) * ldt + t], h3 = split.head[(j + 3) * ldt + t];
      acc = acc + h0 + h1 + h2 + h3;
    }
    for (; j < last; ++j) acc += split.head[j * ldt + t];
    for (int64_t q = rb > covered ? rb : covered; q < e; ++q) {
      const uint32_t c = static_cast<uint32_t>(p.col_indices[q]);
      if (c < static_cast<uint32_t>(p.k)) acc += bits_f32<T>(raw_bits(vals[q])) * bits_f32<T>(raw_bits(xt[c * ldt + t]));
    }
    if (bias != nullptr) acc += bits_f32<T>(raw_bits(bias[r]));
    static_cast<T*>(p.y)[t * p.n + r] = from_f32<T>(acc);
  }
}

// Rows per block: tiles of 16; of 8 where that leaves fewer than 1024 blocks (small m, few rows).
int64_t block_rows(int64_t n, int64_t tiles) { return (n + 15) / 16 * tiles >= 1024 ? 16 : 8; }
int64_t grid_blocks(int64_t n, int64_t tiles) { return (n + block_rows(n, tiles) - 1) / block_rows(n, tiles); }

template <int G, typename T>
int64_t token_tiles(int64_t ldt) { return ldt / (G * csr::kTokensPerLane<T>); }

template <typename T>
int64_t token_tiles_of(int64_t m, int64_t ldt) {
  switch (group_lanes<T>(m)) {
    case 2: return token_tiles<2, T>(ldt);
    case 4: return token_tiles<4, T>(ldt);
    case 8: return token_tiles<8, T>(ldt);
    default: return token_tiles<16, T>(ldt);
  }
}

template <typename T, int G>
cudaError_t launch_groups(const CsrSpmmParams& p, const T* xt, int64_t ldt, bool balanced, const SplitRows& split,
                          bool overlap, cudaStream_t stream) {
  const int64_t tiles = token_tiles<G, T>(ldt);
  const int rows = static_cast<int>(block_rows(p.n, tiles));
  // Balanced: each block takes an equal share of the nonzeros instead of its 8 or 16 rows.
  const dim3 grid(static_cast<unsigned>(grid_blocks(p.n, tiles)),
                  static_cast<unsigned>(tiles < kMaxGridY ? tiles : kMaxGridY));
  const dim3 block(kThreads);
  const cudaError_t e = balanced ? launch_after(csr_spmm_xt_gather<T, G, true>, grid, block, overlap, stream, p, xt,
                                                ldt, rows, split)
                                 : launch_after(csr_spmm_xt_gather<T, G, false>, grid, block, overlap, stream, p, xt,
                                                ldt, rows, split);
  if (e != cudaSuccess || split.head == nullptr) return e;
  return launch_after(xt_gather_split_rows<T>, dim3(grid.x), dim3(128), overlap, stream, p, xt, ldt, split);
}

constexpr int64_t align16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

// Split mode where the partial sums stay small: rows are cut across blocks up to this many tokens.
constexpr int64_t kSplitMaxTokens = 512;

template <typename T>
cudaError_t launch_typed(const CsrSpmmParams& p, void* workspace, bool balanced, bool overlap, cudaStream_t stream) {
  const int64_t ldt = csr_xt_gather_tokens(p.m, sizeof(T));
  if (cudaError_t e = csr::launch_transpose_x<T>(p.x, p.ldx, p.m, p.k, workspace, ldt, stream); e != cudaSuccess)
    return e;
  const T* xt = static_cast<const T*>(workspace);
  SplitRows split{};
  if (balanced && ldt <= kSplitMaxTokens) {  // after xt: head [B][ldt], tail [B][ldt], head_row [B], tail_row [B]
    const int64_t blocks = grid_blocks(p.n, token_tiles_of<T>(p.m, ldt));
    char* w = static_cast<char*>(workspace) + align16(p.k * ldt * static_cast<int64_t>(sizeof(T)));
    split.head = reinterpret_cast<float*>(w);
    split.tail = split.head + blocks * ldt;
    split.head_row = reinterpret_cast<int32_t*>(split.tail + blocks * ldt);
    split.tail_row = split.head_row + blocks;
  }
  switch (group_lanes<T>(p.m)) {
    case 2: return launch_groups<T, 2>(p, xt, ldt, balanced, split, overlap, stream);
    case 4: return launch_groups<T, 4>(p, xt, ldt, balanced, split, overlap, stream);
    case 8: return launch_groups<T, 8>(p, xt, ldt, balanced, split, overlap, stream);
    default: return launch_groups<T, 16>(p, xt, ldt, balanced, split, overlap, stream);
  }
}

template <typename T>
int64_t workspace_bytes(int64_t m, int64_t n, int64_t k, bool balanced) {
  const int64_t ldt = csr_xt_gather_tokens(m, sizeof(T));
  int64_t bytes = align16(k * ldt * static_cast<int64_t>(sizeof(T)));
  if (balanced && ldt <= kSplitMaxTokens && m > 0 && n > 0)
    bytes += grid_blocks(n, token_tiles_of<T>(m, ldt)) * (2 * ldt * 4 + 2 * 4);
  return bytes > 0 ? bytes : 16;
}

}  // namespace

int64_t csr_xt_gather_tokens(int64_t m, size_t elem_bytes) {
  const int64_t tpl = 16 / static_cast<int64_t>(elem_bytes);
  const int64_t tt = tpl * (m <= 2 * tpl ? 2 : m <= 4 * tpl ? 4 : m <= 8 * tpl ? 8 : 16);
  return (m + tt - 1) / tt * tt;
}

int64_t csr_xt_gather_workspace_bytes(int64_t m, int64_t n, int64_t k, CsrType dtype, bool balanced) {
  switch (dtype) {
    case CsrType::kF32: return workspace_bytes<float>(m, n, k, balanced);
    case CsrType::kF16: return workspace_bytes<__half>(m, n, k, balanced);
    default: return workspace_bytes<__nv_bfloat16>(m, n, k, balanced);
  }
}

cudaError_t launch_csr_spmm_xt_gather(const CsrSpmmParams& p, void* workspace, bool balanced, bool overlap,
                                      cudaStream_t stream) {
  if (p.m < 0 || p.n < 0 || p.k < 0 || p.nnz < 0 || p.n > 0x7fffffffLL || p.k > 0x7fffffffLL ||
      p.nnz > 0x7fffffffLL || (p.m > 1 && p.ldx < p.k) || workspace == nullptr)
    return cudaErrorInvalidValue;
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  switch (p.dtype) {
    case CsrType::kF32: return launch_typed<float>(p, workspace, balanced, overlap, stream);
    case CsrType::kF16: return launch_typed<__half>(p, workspace, balanced, overlap, stream);
    default: return launch_typed<__nv_bfloat16>(p, workspace, balanced, overlap, stream);
  }
}

}  // namespace kernels
}  // namespace nmspmm
