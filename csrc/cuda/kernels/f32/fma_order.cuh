// The order of a thread's FMAs for one compressed row. Torch-free.
//
// Tiled and warp-packed kernels: acc[i][j] += a[i] * b[j] over a TM x 8 tile.
// fma_rows: A value i outer, the 8 B values inner (each FMA reuses the A operand of the one before).
// fma_serpentine: 2x2 blocks (rows i, i + 1 x columns j, j + 1) walked in a serpentine, so each FMA
// shares an operand with the one before and ptxas can keep both FFMA operands in the reuse cache.
// Measured per kernel, since ptxas reorders either (docs/kernels.md): the serpentine
// pays for the 8x8 / 4x8 warp-packed tiles and the 64-row tiled kernels, not for the 16x8 tiles.
// Decode kernels (fma_row4): 4 output columns of each of MR rows of x.
#pragma once
#include <cuda_runtime.h>

namespace nmspmm {
namespace kernels {

template <int TM>
__device__ __forceinline__ void fma_rows(float (&acc)[TM][8], const float (&a)[TM], const float (&b)[8]) {
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
}

template <int TM>
__device__ __forceinline__ void fma_serpentine(float (&acc)[TM][8], const float (&a)[TM], const float (&b)[8]) {
  static_assert(TM % 2 == 0, "rows in pairs");
#pragma unroll
  for (int i = 0; i < TM; i += 2)
#pragma unroll
    for (int jj = 0; jj < 8; jj += 2) {
      const int j = (i / 2) % 2 ? 6 - jj : jj;
      acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
      acc[i][j + 1] = fmaf(a[i], b[j + 1], acc[i][j + 1]);
      acc[i + 1][j + 1] = fmaf(a[i + 1], b[j + 1], acc[i + 1][j + 1]);
      acc[i + 1][j] = fmaf(a[i + 1], b[j], acc[i + 1][j]);
    }
}

// Decode kernels (4 output columns per thread): acc[i][0..3] += x(i) * w.{x, y, z, w} for the MR rows
// of x, where x(i) reads row i's input for the compressed row whose weights are w.
template <int MR, class X>
__device__ __forceinline__ void fma_row4(float (&acc)[MR][4], const float4& w, X&& x) {
#pragma unroll
  for (int i = 0; i < MR; ++i) {
    const float a = x(i);
    acc[i][0] = fmaf(a, w.x, acc[i][0]);
    acc[i][1] = fmaf(a, w.y, acc[i][1]);
    acc[i][2] = fmaf(a, w.z, acc[i][2]);
    acc[i][3] = fmaf(a, w.w, acc[i][3]);
  }
}

}  // namespace kernels
}  // namespace nmspmm
