// One tiled-kernel configuration (BM=128, BN=256, TM=16, KB=32, packing=false), both index modes.
#include "spmm_tiled.cuh"

namespace nmspmm {
namespace kernels {
template cudaError_t launch_tiled<TiledConfig<128, 256, 16, 32, false, true>>(const SpmmParams&, cudaStream_t);
template cudaError_t launch_tiled<TiledConfig<128, 256, 16, 32, false, false>>(const SpmmParams&, cudaStream_t);
}  // namespace kernels
}  // namespace nmspmm
