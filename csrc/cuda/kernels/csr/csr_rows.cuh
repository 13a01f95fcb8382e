// Row ranges of the CSR kernels balanced by nonzeros: block b of B takes the rows whose first
// entry lies in [b P, (b + 1) P), P = ceil(nnz / B), found by a monotone search of crow_indices, so
// the blocks share the nonzeros evenly whatever the rows' lengths, and the ranges partition the rows
// whatever crow_indices holds.
#pragma once
#include <cstdint>

namespace nmspmm {
namespace kernels {
namespace csr {

// The first r in [0, n] with crow[r] >= target (n where none), by one warp: each round probes 32
// evenly spaced points of the interval and keeps the part before the first that passes. The first
// passing probe can only move right as the target grows, so the result never decreases with the
// target, whatever crow holds.
__device__ inline int64_t warp_lower_bound(const int32_t* __restrict__ crow, int64_t n, int64_t target, int lane) {
  int64_t lo = 0, hi = n;  // the answer lies in [lo, hi]; hi passes (n by convention)
  while (lo < hi) {
    const int64_t len = hi - lo;
    if (len <= 32) {
      const bool pass = lane >= len || static_cast<int64_t>(crow[lo + lane]) >= target;
      const unsigned ballot = __ballot_sync(0xffffffffu, pass);
      return ballot == 0 ? hi : lo + (__ffs(ballot) - 1);
    }
    const int64_t step = (len + 31) / 32;
    const int64_t probe = lo + (lane + 1) * step - 1;
    const bool pass = probe >= hi || static_cast<int64_t>(crow[probe]) >= target;
    const unsigned ballot = __ballot_sync(0xffffffffu, pass);
    if (ballot == 0) {
      lo = lo + 32 * step;  // past the last probe (< hi)
    } else {
      const int j = __ffs(ballot) - 1;
      const int64_t pj = lo + (j + 1) * step - 1;
      hi = pj < hi ? pj : hi;
      lo = lo + j * step;
    }
  }
  return lo;
}

// Block b's first row of B blocks over n rows and nnz entries (b = B gives n): called by a whole
// warp, the result in every lane. Block 0 starts at row 0 and the last ends at n, so empty rows at
// either end are covered.
__device__ inline int64_t balanced_row_start(const int32_t* __restrict__ crow, int64_t n, int64_t nnz, int64_t b,
                                             int64_t B, int lane) {
  if (b <= 0) return 0;
  if (b >= B) return n;
  const int64_t per = (nnz + B - 1) / B;
  return warp_lower_bound(crow, n, b * per, lane);
}

}  // namespace csr
}  // namespace kernels
}  // namespace nmspmm
