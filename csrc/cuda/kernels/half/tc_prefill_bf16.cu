// bf16 instantiation of the tensor-core prefill SpMM (spmm_tc_prefill.cuh).
#include "cuda/kernels/half/spmm_tc_prefill_tma.cuh"

namespace nmspmm {
namespace kernels {
namespace tc_prefill {
template cudaError_t run<__nv_bfloat16>(const HalfSpmmParams&, int, cudaStream_t);
}  // namespace tc_prefill
}  // namespace kernels
}  // namespace nmspmm
