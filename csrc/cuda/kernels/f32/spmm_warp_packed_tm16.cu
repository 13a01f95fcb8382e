// The warp-packed kernel with a 16-row thread tile (128x128 tiles; spmm_warp_packed.h).
#include "spmm_warp_packed.cuh"

namespace nmspmm {
namespace kernels {
template cudaError_t launch_warp_packed<WarpPacked128x128>(const SpmmParams&, cudaStream_t);
}  // namespace kernels
}  // namespace nmspmm
