// bf16 instantiation of the fused-expansion SpMM (expand_mma.cuh).
#include "cuda/kernels/half/expand_mma.cuh"

namespace nmspmm {
namespace kernels {
namespace expand_mma {
template cudaError_t run<__nv_bfloat16>(const HalfSpmmParams&, int, cudaStream_t);
}  // namespace expand_mma
}  // namespace kernels
}  // namespace nmspmm
