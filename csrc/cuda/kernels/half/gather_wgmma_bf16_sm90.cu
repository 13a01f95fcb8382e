// bf16 instances of the Hopper gathered-operand kernel (gather_wgmma_sm90.cuh).
#include "cuda/kernels/half/gather_wgmma_sm90.cuh"

namespace nmspmm {
namespace kernels {
namespace gather_wgmma {
template cudaError_t launch_tile<__nv_bfloat16, 128>(const HalfSpmmParams&, const void*, int64_t, cudaStream_t);
template cudaError_t launch_tile<__nv_bfloat16, 256>(const HalfSpmmParams&, const void*, int64_t, cudaStream_t);
}  // namespace gather_wgmma
}  // namespace kernels
}  // namespace nmspmm
