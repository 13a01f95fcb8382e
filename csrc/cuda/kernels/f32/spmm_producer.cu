// Explicit instantiations of the warp-specialized kernel (spmm_producer.cuh): producer_f32_128x256_sm90a.
#include "spmm_producer.cuh"
#include "spmm_producer.h"

namespace nmspmm {
namespace kernels {

#define NMSPMM_INSTANTIATE_PRODUCER(WM, WN, KB, WB, S) \
  template cudaError_t launch_producer<ProducerConfig<WM, WN, KB, WB, S>>(const SpmmParams&, cudaStream_t);
NMSPMM_PRODUCER_CONFIGS(NMSPMM_INSTANTIATE_PRODUCER)
#undef NMSPMM_INSTANTIATE_PRODUCER

}  // namespace kernels
}  // namespace nmspmm
