// The warp-packed kernel with a 4-row thread tile (32x128 tiles; spmm_warp_packed.h).
#include "spmm_warp_packed.cuh"

namespace nmspmm {
namespace kernels {
template cudaError_t launch_warp_packed<WarpPacked32x128>(const SpmmParams&, cudaStream_t);
}  // namespace kernels
}  // namespace nmspmm
