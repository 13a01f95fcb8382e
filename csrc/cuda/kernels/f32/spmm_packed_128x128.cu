// One tiled-kernel configuration (BM=128, BN=128, TM=16, KB=64, packing=true), both index modes.
#include "spmm_tiled.cuh"

namespace nmspmm {
namespace kernels {
template cudaError_t launch_tiled<TiledConfig<128, 128, 16, 64, true, true>>(const SpmmParams&, cudaStream_t);
template cudaError_t launch_tiled<TiledConfig<128, 128, 16, 64, true, false>>(const SpmmParams&, cudaStream_t);
}  // namespace kernels
}  // namespace nmspmm
