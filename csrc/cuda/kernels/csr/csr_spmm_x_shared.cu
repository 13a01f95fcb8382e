// csr_spmm_x_shared: unstructured CSR products of few tokens (m <= 8, decode), x held in shared
// memory. One block per SM stages all of x as xs[k][TT] (an input's TT tokens contiguous, tokens
// m..TT zero), so each nonzero gathers its tokens with one or two vector loads from shared memory
// instead of scattered sectors of L1 / L2.
//
// Balance: the blocks take ranges of rows holding about nnz / grid nonzeros each (a 32-way search
// of crow_indices, run while x is staged); a block walks its rows in tiles of kTileRows, the tile's
// nonzeros (its rows' ranges end to end) cut into one equal part per warp, whatever the rows'
// lengths. A warp's lanes read consecutive entries (coalesced column and value loads, U per lane in
// flight) and keep one partial sum per lane of the warp's current row; where the row changes, a
// butterfly sums the lanes in a fixed order. A warp writes the rows it starts into the tile's output
// and the row it entered midway into its carry slot; after a barrier each output adds its row's
// carries in warp order, so the sums are deterministic.
//
// Any index content stays in bounds and gives the masked product of csr_spmm_warp_row: a row's range
// is clamped to [0, nnz] (an end before its start is an empty row), columns outside [0, k) are
// skipped, and the block ranges partition the rows whatever crow_indices holds (the search's result
// never decreases as its target grows). Columns a row does not keep are never read.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/kernels/common/smem_limit.h"
#include "cuda/kernels/csr/csr_rows.cuh"
#include "cuda/kernels/csr/csr_spmm.h"
#include "cuda/kernels/csr/csr_values.cuh"

namespace nmspmm {
namespace kernels {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kTileRows = 256;  // rows per tile (<= kThreads: one row per thread for the scan)

using csr::from_f32;
using csr::to_f32;

// One input's TT tokens in shared memory, loaded as one or more vectors.
template <typename T, int TT>
struct alignas(TT * sizeof(T) >= 16 ? 16 : TT * sizeof(T)) XRow {
  T v[TT];
};

// Entries per lane in flight: more where a lane's tokens take few registers.
template <int TT>
inline constexpr int kInFlight = TT <= 4 ? 16 : 12;

template <typename T, int TT>
__device__ __forceinline__ void fma_row(float (&acc)[TT], const XRow<T, TT>& xr, float w) {
#pragma unroll
  for (int t = 0; t < TT; ++t) acc[t] = fmaf(w, to_f32(xr.v[t]), acc[t]);
}

template <typename T, int TT>
__global__ void __launch_bounds__(kThreads, 1) csr_spmm_x_shared(const CsrSpmmParams p) {
  constexpr int U = kInFlight<TT>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  XRow<T, TT>* xs = reinterpret_cast<XRow<T, TT>*>(smem_raw);
  __shared__ int64_t pre[kTileRows + 1];  // pre[r]: the tile's nonzeros before row r (rows end to end)
  __shared__ int32_t rbegin[kTileRows];   // row r's first entry in col_indices / values (clamped)
  __shared__ int32_t rend[kTileRows];     // and its end
  __shared__ float out[kTileRows][TT];    // the rows' sums, written by the warp that starts them
  __shared__ float carry[kWarps][TT];     // each warp's partial sum of the row it entered midway
  __shared__ int64_t warp_total[kWarps];
  __shared__ int64_t bounds[2];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t k = p.k;

  // The block's rows [bounds[0], bounds[1]) by two searches, while the other warps stage x.
  if (warp < 2) {
    const int64_t s = csr::balanced_row_start(p.crow_indices, p.n, p.nnz, static_cast<int64_t>(blockIdx.x) + warp,
                                              gridDim.x, lane);
    if (lane == 0) bounds[warp] = s;
  } else {
    // Four inputs per thread and round, all their loads issued before the stores.
    const T* __restrict__ x = static_cast<const T*>(p.x);
    constexpr int kStride = kThreads - 64;
    for (int64_t c0 = tid - 64; c0 < k; c0 += 4 * kStride) {
      XRow<T, TT> xr[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t c = c0 + i * kStride;
#pragma unroll
        for (int t = 0; t < TT; ++t) {
          xr[i].v[t] = from_f32<T>(0.f);
          if (t < p.m && c < k) xr[i].v[t] = x[t * p.ldx + c];  // nothing waits on the load before the stores
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (c0 + i * kStride < k) xs[c0 + i * kStride] = xr[i];
    }
  }
  __syncthreads();

  const int32_t* __restrict__ cols = p.col_indices;
  const T* __restrict__ vals = static_cast<const T*>(p.values);
  const T* __restrict__ bias = static_cast<const T*>(p.bias);
  T* __restrict__ y = static_cast<T*>(p.y);
  const int64_t row_end = bounds[1];
  for (int64_t row0 = bounds[0]; row0 < row_end; row0 += kTileRows) {
    const int R = row_end - row0 < kTileRows ? static_cast<int>(row_end - row0) : kTileRows;
    // The tile's clamped row ranges and their prefix sum; whether they lie end to end in memory
    // (always for a valid CSR), so entry v of the tile is col_indices[rbegin[0] + v].
    int64_t len = 0;
    if (tid < R) {
      int64_t b = p.crow_indices[row0 + tid], e = p.crow_indices[row0 + tid + 1];
      b = b < 0 ? 0 : b > p.nnz ? p.nnz : b;
      e = e < b ? b : e > p.nnz ? p.nnz : e;
      len = e - b;
      rbegin[tid] = static_cast<int32_t>(b);
      rend[tid] = static_cast<int32_t>(e);
    }
    int64_t incl = len;
#pragma unroll
    for (int s = 1; s < 32; s <<= 1) {
      const int64_t o = __shfl_up_sync(0xffffffffu, incl, s);
      if (lane >= s) incl += o;
    }
    if (lane == 31) warp_total[warp] = incl;
    __syncthreads();
    int64_t before = 0;
    for (int w = 0; w < warp; ++w) before += warp_total[w];
    if (tid < R) pre[tid + 1] = before + incl;
    if (tid == 0) pre[0] = 0;
    const bool contiguous = __syncthreads_and(tid == 0 || tid >= R || rbegin[tid] == rend[tid - 1]) != 0;

    const int64_t total = pre[R];
    const int64_t part = (total + kWarps - 1) / kWarps;  // nonzeros per warp (0 for an empty tile)
    const int64_t v0 = static_cast<int64_t>(warp) * part < total ? static_cast<int64_t>(warp) * part : total;
    const int64_t v1 = v0 + part < total ? v0 + part : total;
    if (v0 < v1) {
      int r0 = 0, hi = R - 1;  // the warp's first row: the last r with pre[r] <= v0
      while (r0 < hi) {
        const int mid = (r0 + hi + 1) / 2;
        if (pre[mid] <= v0) r0 = mid;
        else hi = mid - 1;
      }
      const bool entered_midway = v0 > pre[r0];
      float acc[TT];
#pragma unroll
      for (int t = 0; t < TT; ++t) acc[t] = 0.f;
      // Sums the lanes' partials of row r (fixed butterfly order) and stores them; zeroes acc.
      const auto flush = [&](int r) {
#pragma unroll
        for (int t = 0; t < TT; ++t)
#pragma unroll
          for (int s = 16; s > 0; s >>= 1) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], s);
        if (lane == 0) {
          float* dst = (r == r0 && entered_midway) ? carry[warp] : out[r];
#pragma unroll
          for (int t = 0; t < TT; ++t) dst[t] = acc[t];
        }
#pragma unroll
        for (int t = 0; t < TT; ++t) acc[t] = 0.f;
      };
      // Loads the U entries vb + 32 u + lane of the part (column ~0 past its end), values as raw
      // bits: no instruction uses a loaded register before all U loads are issued. Contiguous tiles
      // address them from rbegin[0]; otherwise each lane follows its entries' rows (lrow).
      int lrow = r0;
      const int64_t base = rbegin[0];
      const auto load = [&](int64_t vb, uint32_t (&c)[U], uint32_t (&w)[U]) {
        uint32_t q[U];  // entry offsets, < nnz < 2^31
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t v = vb + u * 32 + lane;
          q[u] = static_cast<uint32_t>(base + v);
          if (!contiguous && v < v1) {
            while (v >= pre[lrow + 1]) ++lrow;  // ends before row R - 1 as v < pre[R]
            q[u] = static_cast<uint32_t>(rbegin[lrow] + (v - pre[lrow]));
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          c[u] = 0xffffffffu, w[u] = 0u;
          if (vb + u * 32 + lane < v1) {  // predicated loads, nothing waits on them here
            c[u] = static_cast<uint32_t>(__ldg(cols + q[u]));
            w[u] = csr::raw_bits<T>(vals[q[u]]);
          }
        }
      };
      int cur = r0;                // the row every lane's acc belongs to
      int64_t next = pre[r0 + 1];  // where the row after it starts
      // Sums the batch of U x 32 entries from vb: where all lie in row cur (one test per batch), U
      // independent gathers and products; otherwise entry group by group, flushing each row it ends.
      const auto sum_batch = [&](int64_t vb, const uint32_t(&c)[U], const uint32_t(&w)[U]) {
        const int64_t vend = vb + 32 * U < v1 ? vb + 32 * U : v1;
        if (vend <= next) {
#pragma unroll
          for (int u = 0; u < U; ++u)
            if (c[u] < static_cast<uint64_t>(k)) fma_row<T, TT>(acc, xs[c[u]], csr::bits_f32<T>(w[u]));  // ~0: past the part
          return;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t vf = vb + u * 32;
          if (vf >= v1) break;
          const int valid = v1 - vf < 32 ? static_cast<int>(v1 - vf) : 32;  // lanes < valid hold an entry
          const bool has = c[u] < static_cast<uint64_t>(k);
          XRow<T, TT> xr;
          if (has) xr = xs[c[u]];
          if (vf + valid <= next) {  // every entry of the group in row cur
            if (has) fma_row<T, TT>(acc, xr, csr::bits_f32<T>(w[u]));
            continue;
          }
          // The entries span rows cur..last: add and flush each row present, in order.
          int mine = cur;
          if (lane < valid)
            while (vf + lane >= pre[mine + 1]) ++mine;
          const int last = __shfl_sync(0xffffffffu, mine, valid - 1);  // rows ascend with the lane
          int r = cur;
          while (true) {
            if (has && mine == r) fma_row<T, TT>(acc, xr, csr::bits_f32<T>(w[u]));
            if (r == last) break;
            flush(r);
            r = static_cast<int>(__reduce_min_sync(0xffffffffu, lane < valid && mine > r ? static_cast<unsigned>(mine)
                                                                                        : 0xffffffffu));
          }
          cur = last;
          next = pre[cur + 1];
        }
      };
      // Two register sets in turn: the next batch's loads are in flight while one is summed.
      uint32_t ca[U], cb[U], wa[U], wb[U];
      load(v0, ca, wa);
      for (int64_t vb = v0;;) {
        if (vb + 32 * U < v1) load(vb + 32 * U, cb, wb);
        sum_batch(vb, ca, wa);
        if ((vb += 32 * U) >= v1) break;
        if (vb + 32 * U < v1) load(vb + 32 * U, ca, wa);
        sum_batch(vb, cb, wb);
        if ((vb += 32 * U) >= v1) break;
      }
      flush(cur);
    }
    __syncthreads();
    // y[t][row0 + rr]: the row's own sum (0 for an empty row), then the carries of the warps that
    // started inside it (those whose first nonzero g * part lies in (pre[rr], pre[rr + 1])).
    for (int s = tid; s < p.m * R; s += kThreads) {
      const int t = s / R, rr = s % R;
      const int64_t lo = pre[rr], hi = pre[rr + 1], row = row0 + rr;
      float a = 0.f;
      if (hi > lo) {
        a = out[rr][t];
        for (int64_t g = lo / part + 1; g <= (hi - 1) / part; ++g) a += carry[g][t];
      }
      if (bias != nullptr) a += to_f32(bias[row]);
      y[t * p.n + row] = from_f32<T>(a);
    }
    __syncthreads();  // pre, out and carry are read before the next tile writes them
  }
}

int token_slots(int64_t m) { return m <= 1 ? 1 : m <= 2 ? 2 : m <= 4 ? 4 : 8; }

// Dynamic shared memory a block may take for xs: the SM's, less the block's reserve and its static
// arrays (counted with 1 KB to spare for the compiler's alignment).
int64_t xs_limit_bytes(const SmFacts& f, int tt) {
  const int64_t static_bytes = static_cast<int64_t>(sizeof(int64_t)) * (kTileRows + 1 + kWarps + 2) +
                               static_cast<int64_t>(sizeof(int32_t)) * 2 * kTileRows +
                               static_cast<int64_t>(sizeof(float)) * (kTileRows + kWarps) * tt;
  return static_cast<int64_t>(f.smem_per_sm) - f.smem_reserved - static_bytes - 1024;
}

template <typename T, int TT>
cudaError_t launch_tokens(const CsrSpmmParams& p, cudaStream_t stream) {
  static bool configured[kMaxDevices] = {};
  const SmFacts f = current_sm_facts();
  const size_t dyn = static_cast<size_t>(p.k) * sizeof(XRow<T, TT>);
  if (f.sms <= 0) return cudaErrorInvalidDevice;
  if (cudaError_t e = set_smem_limit_once(configured, csr_spmm_x_shared<T, TT>, static_cast<int>(xs_limit_bytes(f, TT)));
      e != cudaSuccess)
    return e;
  csr_spmm_x_shared<T, TT><<<f.sms, kThreads, dyn, stream>>>(p);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_typed(const CsrSpmmParams& p, cudaStream_t stream) {
  if (p.m <= 1) return launch_tokens<T, 1>(p, stream);
  if (p.m <= 2) return launch_tokens<T, 2>(p, stream);
  if (p.m <= 4) return launch_tokens<T, 4>(p, stream);
  return launch_tokens<T, 8>(p, stream);
}

}  // namespace

bool csr_x_shared_fits(int64_t m, int64_t k, size_t elem_bytes) {
  if (m < 1 || m > kCsrXSharedMaxM || k < 0) return false;
  const SmFacts f = current_sm_facts();
  const int tt = token_slots(m);
  return f.sms > 0 && k * tt * static_cast<int64_t>(elem_bytes) <= xs_limit_bytes(f, tt);
}

cudaError_t launch_csr_spmm_x_shared(const CsrSpmmParams& p, cudaStream_t stream) {
  if (p.m < 0 || p.m > kCsrXSharedMaxM || p.n < 0 || p.k < 0 || p.nnz < 0 || p.n > 0x7fffffffLL ||
      p.k > 0x7fffffffLL || p.nnz > 0x7fffffffLL || (p.m > 1 && p.ldx < p.k))
    return cudaErrorInvalidValue;
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  const size_t elem = p.dtype == CsrType::kF32 ? 4 : 2;
  if (!csr_x_shared_fits(p.m, p.k, elem)) return cudaErrorInvalidValue;
  switch (p.dtype) {
    case CsrType::kF32: return launch_typed<float>(p, stream);
    case CsrType::kF16: return launch_typed<__half>(p, stream);
    default: return launch_typed<__nv_bfloat16>(p, stream);
  }
}

}  // namespace kernels
}  // namespace nmspmm
