// csr_spmm_warp_row: one warp per output row and chunk of TM tokens (TM = 1, 2, 4 or 8 by m). The
// lanes stride over the row's nonzeros, 4 per lane in flight, each multiplying its value by the
// gathered x[t, col] of every token of the chunk in fp32; a butterfly sums the lanes in a fixed
// order (deterministic), and the output is written in the dtype of x. x columns that the row does
// not keep are never read, so a NaN there does not reach y (as in the N:M kernels).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/kernels/csr/csr_spmm.h"
#include "cuda/kernels/csr/csr_values.cuh"

namespace nmspmm {
namespace kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kUnroll = 4;
constexpr int64_t kMaxGridY = 65535;

using csr::from_f32;
using csr::to_f32;

template <typename T, int TM>
__global__ void __launch_bounds__(kWarps * 32) csr_spmm_warp_row(const CsrSpmmParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= p.n) return;
  // The row's range, masked: [0, nnz], an end before its start is an empty row.
  int64_t begin = p.crow_indices[row], end = p.crow_indices[row + 1];
  begin = begin < 0 ? 0 : begin > p.nnz ? p.nnz : begin;
  end = end < begin ? begin : end > p.nnz ? p.nnz : end;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  const T* __restrict__ vals = static_cast<const T*>(p.values);
  const int32_t* __restrict__ cols = p.col_indices;
  const float b = p.bias != nullptr ? to_f32(static_cast<const T*>(p.bias)[row]) : 0.f;
  T* __restrict__ y = static_cast<T*>(p.y);
  for (int64_t t0 = static_cast<int64_t>(blockIdx.y) * TM; t0 < p.m; t0 += static_cast<int64_t>(gridDim.y) * TM) {
    const int tm = p.m - t0 < TM ? static_cast<int>(p.m - t0) : TM;
    float acc[TM];
#pragma unroll
    for (int t = 0; t < TM; ++t) acc[t] = 0.f;
    for (int64_t q0 = begin + lane; q0 < end; q0 += 32 * kUnroll) {
      int32_t c[kUnroll];
      float w[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t q = q0 + 32 * u;
        const bool in = q < end;
        c[u] = in ? __ldg(cols + q) : -1;
        w[u] = in ? to_f32(vals[q]) : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (static_cast<uint32_t>(c[u]) >= static_cast<uint64_t>(p.k)) continue;  // masked column
#pragma unroll
        for (int t = 0; t < TM; ++t)
          if (t < tm) acc[t] += w[u] * to_f32(x[(t0 + t) * p.ldx + c[u]]);
      }
    }
#pragma unroll
    for (int t = 0; t < TM; ++t)
#pragma unroll
      for (int s = 16; s > 0; s >>= 1) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], s);
#pragma unroll
    for (int t = 0; t < TM; ++t)
      if (lane == t && t < tm) y[(t0 + t) * p.n + row] = from_f32<T>(acc[t] + b);
  }
}

template <typename T>
cudaError_t launch_typed(const CsrSpmmParams& p, cudaStream_t stream) {
  const dim3 block(kWarps * 32);
  const int64_t rows = (p.n + kWarps - 1) / kWarps;
  const auto grid = [&](int tm) {
    const int64_t chunks = (p.m + tm - 1) / tm;
    return dim3(static_cast<unsigned>(rows), static_cast<unsigned>(chunks < kMaxGridY ? chunks : kMaxGridY));
  };
  if (p.m <= 1) csr_spmm_warp_row<T, 1><<<grid(1), block, 0, stream>>>(p);
  else if (p.m <= 2) csr_spmm_warp_row<T, 2><<<grid(2), block, 0, stream>>>(p);
  else if (p.m <= 4) csr_spmm_warp_row<T, 4><<<grid(4), block, 0, stream>>>(p);
  else csr_spmm_warp_row<T, 8><<<grid(8), block, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_csr_spmm_warp_row(const CsrSpmmParams& p, cudaStream_t stream) {
  if (p.m < 0 || p.n < 0 || p.k < 0 || p.nnz < 0 || p.n > 0x7fffffffLL || p.k > 0x7fffffffLL ||
      (p.m > 1 && p.ldx < p.k))
    return cudaErrorInvalidValue;
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  switch (p.dtype) {
    case CsrType::kF32: return launch_typed<float>(p, stream);
    case CsrType::kF16: return launch_typed<__half>(p, stream);
    default: return launch_typed<__nv_bfloat16>(p, stream);
  }
}

}  // namespace kernels
}  // namespace nmspmm
