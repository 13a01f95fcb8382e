// Entry points of the tensor-core prefill SpMM (spmm_half.h): dtype dispatch to the fp16 / bf16
// instantiations in tc_prefill_f16.cu and tc_prefill_bf16.cu.
#include "cuda/kernels/half/spmm_tc_prefill.cuh"

namespace nmspmm {
namespace kernels {
namespace tc_prefill {
extern template cudaError_t run<__nv_bfloat16>(const HalfSpmmParams&, int, cudaStream_t);
extern template cudaError_t run<__half>(const HalfSpmmParams&, int, cudaStream_t);
}  // namespace tc_prefill

size_t tc_prefill_scratch_bytes(const HalfSpmmParams& p, int config) {
  if (!tc_prefill::pattern_supported(p.N, p.M, p.L) || p.m < 1 || p.k < 1) return 0;
  return tc_prefill::scratch_bytes(p, config);
}

cudaError_t launch_tc_prefill(const HalfSpmmParams& p, int config, cudaStream_t stream) {
  return p.dtype == HalfType::kBF16 ? tc_prefill::run<__nv_bfloat16>(p, config, stream)
                                    : tc_prefill::run<__half>(p, config, stream);
}

}  // namespace kernels
}  // namespace nmspmm
