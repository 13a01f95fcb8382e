// One tiled-kernel configuration (BM=64, BN=64, TM=8, KB=64, packing=false), both index modes.
#include "spmm_tiled.cuh"

namespace nmspmm {
namespace kernels {
template cudaError_t launch_tiled<TiledConfig<64, 64, 8, 64, false, true>>(const SpmmParams&, cudaStream_t);
template cudaError_t launch_tiled<TiledConfig<64, 64, 8, 64, false, false>>(const SpmmParams&, cudaStream_t);
}  // namespace kernels
}  // namespace nmspmm
