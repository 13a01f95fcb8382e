// Entry point of the fused-expansion SpMM (spmm_half.h): dtype dispatch to the fp16 / bf16
// instantiations in expand_mma_f16.cu and expand_mma_bf16.cu.
#include "cuda/kernels/half/expand_mma.cuh"

namespace nmspmm {
namespace kernels {
namespace expand_mma {
extern template cudaError_t run<__nv_bfloat16>(const HalfSpmmParams&, int, cudaStream_t);
extern template cudaError_t run<__half>(const HalfSpmmParams&, int, cudaStream_t);
}  // namespace expand_mma

cudaError_t launch_expand_mma(const HalfSpmmParams& p, int tile_tokens, cudaStream_t stream) {
  return p.dtype == HalfType::kBF16 ? expand_mma::run<__nv_bfloat16>(p, tile_tokens, stream)
                                    : expand_mma::run<__half>(p, tile_tokens, stream);
}

}  // namespace kernels
}  // namespace nmspmm
