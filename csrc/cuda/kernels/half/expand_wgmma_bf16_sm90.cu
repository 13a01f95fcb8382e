// The Hopper fused-expansion kernels for bf16 (expand_wgmma_sm90.cuh), one instance per token tile.
#include "cuda/kernels/half/expand_wgmma_sm90.cuh"

namespace nmspmm {
namespace kernels {
namespace expand_wgmma {

template cudaError_t launch_tile<__nv_bfloat16, 64>(const HalfSpmmParams&, cudaStream_t);
template cudaError_t launch_tile<__nv_bfloat16, 128>(const HalfSpmmParams&, cudaStream_t);

}  // namespace expand_wgmma
}  // namespace kernels
}  // namespace nmspmm
