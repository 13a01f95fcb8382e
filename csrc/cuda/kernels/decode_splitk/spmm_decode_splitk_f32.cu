// float32 (L < 4: L >= 4 runs spmm_small.cu's kernel) instantiations of the split-K decode kernels (spmm_decode_splitk.cuh).
#include "spmm_decode_splitk.cuh"

namespace nmspmm {
namespace kernels {

cudaError_t launch_decode_splitk_f32(const DecodeSplitKArgs& a, cudaStream_t stream) {
  return decode_splitk::launch<decode_splitk::F32>(a, stream);
}

cudaError_t launch_reduce_splits_f32(const DecodeSplitKArgs& a, cudaStream_t stream) {
  return decode_splitk::launch_reduce<decode_splitk::F32>(a, stream);
}

}  // namespace kernels
}  // namespace nmspmm
