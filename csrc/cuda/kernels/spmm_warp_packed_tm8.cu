// The warp-packed kernel's instantiations with a 8-row thread tile (64x128 tiles): (WB, STAGES) = 16,3 12,4.
#include "spmm_warp_packed.cuh"

namespace nmspmm {
namespace kernels {
template cudaError_t launch_warp_packed<WarpPackedConfig<8, 16, 3>>(const SpmmParams&, cudaStream_t);
template cudaError_t launch_warp_packed<WarpPackedConfig<8, 12, 4>>(const SpmmParams&, cudaStream_t);
}  // namespace kernels
}  // namespace nmspmm
