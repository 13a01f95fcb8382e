// Fixed-WB variants of one tiled-kernel configuration (BM=64, BN=128, TM=8, KB=32, L >= 32):
// WB = 4, 8, 12, 16 compressed rows per k-block.
#include "spmm_tiled.cuh"

namespace nmspmm {
namespace kernels {
template cudaError_t launch_tiled<TiledConfig<64, 128, 8, 32, false, true, 4>>(const SpmmParams&, cudaStream_t);
template cudaError_t launch_tiled<TiledConfig<64, 128, 8, 32, false, true, 8>>(const SpmmParams&, cudaStream_t);
template cudaError_t launch_tiled<TiledConfig<64, 128, 8, 32, false, true, 12>>(const SpmmParams&, cudaStream_t);
template cudaError_t launch_tiled<TiledConfig<64, 128, 8, 32, false, true, 16>>(const SpmmParams&, cudaStream_t);
}  // namespace kernels
}  // namespace nmspmm
