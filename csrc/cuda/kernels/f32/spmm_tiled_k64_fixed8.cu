// Fixed-WB variants with a k-block of 64 and 8 compressed rows per k-block (N:M with 64 / M * N = 8:
// 4:32, 2:16, 1:8), for the 128x128, 64x128 and 32x128 tiles (declared by NMSPMM_KB64_CONFIGS in
// spmm_tiled.h). Twice the rows of math per stage of the k-block-32 variant (WB = 4), so the
// per-stage cost (barrier, index fetch, copy issue) is spread over twice the FMAs.
#include "spmm_tiled.cuh"

namespace nmspmm {
namespace kernels {
#define NMSPMM_INSTANTIATE_KB64(BM, BN, TM) \
  template cudaError_t launch_tiled<TiledConfig<BM, BN, TM, 64, false, true, 8>>(const SpmmParams&, cudaStream_t);
NMSPMM_KB64_CONFIGS(NMSPMM_INSTANTIATE_KB64)
#undef NMSPMM_INSTANTIATE_KB64
}  // namespace kernels
}  // namespace nmspmm
