// The 2:4 metadata builder (meta.h).
#include "cuda/kernels/sparse_tc/meta.h"

namespace nmspmm {
namespace kernels {

namespace {
__global__ void sparse_tc_meta_kernel(const uint8_t* __restrict__ indices, int64_t windows, int64_t vectors,
                                      uint32_t* __restrict__ meta, int64_t rows, int64_t ld) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * ld) return;
  const int64_t b = i / ld, v = i - b * ld;
  uint32_t word = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int64_t g = 8 * b + j;
    uint32_t nib = 0x4;  // windows and vectors past the last: positions {0, 1}, zero values
    if (g < windows && v < vectors)
      nib = (indices[(2 * g) * vectors + v] & 3u) | ((indices[(2 * g + 1) * vectors + v] & 3u) << 2);
    word |= nib << (4 * j);
  }
  meta[i] = word;
}
}  // namespace

cudaError_t launch_sparse_tc_meta(const uint8_t* indices, int64_t in_features, int64_t out_features, int L,
                                  uint32_t* meta, int64_t ld, cudaStream_t stream) {
  const int64_t rows = (in_features + 31) / 32, words = rows * ld;
  if (words == 0) return cudaSuccess;
  const int64_t blocks = (words + 255) / 256;
  if (blocks > 0x7fffffff || L < 1) return cudaErrorInvalidValue;
  sparse_tc_meta_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(indices, in_features / 4,
                                                                          out_features / L, meta, rows, ld);
  return cudaGetLastError();
}

}  // namespace kernels
}  // namespace nmspmm
