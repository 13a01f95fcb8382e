// Entry points of the fp16 / bf16 decode kernels (spmm_half.h): the dtype switch. The kernels live
// in decode_half.cuh, instantiated per dtype in decode_half_bf16.cu and decode_half_f16.cu.
#include <cuda_runtime.h>

#include "spmm_half.h"

namespace nmspmm {
namespace kernels {

cudaError_t launch_half_decode_bf16(const HalfSpmmParams& p, int config, cudaStream_t stream);
cudaError_t launch_half_decode_f16(const HalfSpmmParams& p, int config, cudaStream_t stream);

// The decode kernels reduce their k split on chip (thread-block clusters): no scratch.
size_t half_decode_scratch_bytes(const HalfSpmmParams& p, int config) {
  (void)p;
  (void)config;
  return 0;
}

cudaError_t launch_half_decode(const HalfSpmmParams& p, int config, cudaStream_t stream) {
  switch (p.dtype) {
    case HalfType::kBF16: return launch_half_decode_bf16(p, config, stream);
    case HalfType::kF16: return launch_half_decode_f16(p, config, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace kernels
}  // namespace nmspmm
