// bfloat16 instantiations of the split-K decode kernels (spmm_decode_splitk.cuh).
#include "spmm_decode_splitk.cuh"

namespace nmspmm {
namespace kernels {

cudaError_t launch_decode_splitk_bf16(const DecodeSplitKArgs& a, cudaStream_t stream) {
  return decode_splitk::launch<decode_splitk::BF16>(a, stream);
}

cudaError_t launch_reduce_splits_bf16(const DecodeSplitKArgs& a, cudaStream_t stream) {
  return decode_splitk::launch_reduce<decode_splitk::BF16>(a, stream);
}

}  // namespace kernels
}  // namespace nmspmm
