// The warp-packed kernel's instantiations with a 16-row thread tile (128x128 tiles): (WB, STAGES) = 8,5 12,3 16,2.
#include "spmm_warp_packed.cuh"

namespace nmspmm {
namespace kernels {
template cudaError_t launch_warp_packed<WarpPackedConfig<16, 8, 5>>(const SpmmParams&, cudaStream_t);
template cudaError_t launch_warp_packed<WarpPackedConfig<16, 12, 3>>(const SpmmParams&, cudaStream_t);
template cudaError_t launch_warp_packed<WarpPackedConfig<16, 16, 2>>(const SpmmParams&, cudaStream_t);
}  // namespace kernels
}  // namespace nmspmm
