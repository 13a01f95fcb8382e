// bf16 instantiations of the decode kernels (decode_half.cuh).
#include "decode_half.cuh"

namespace nmspmm {
namespace kernels {

cudaError_t launch_half_decode_bf16(const HalfSpmmParams& p, int config, cudaStream_t stream) {
  return half_decode::launch<half_decode::Bf16>(p, config, stream);
}

}  // namespace kernels
}  // namespace nmspmm
