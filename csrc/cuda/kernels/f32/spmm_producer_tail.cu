// Explicit instantiations of the warp-specialized kernel with split-K on the last round's tiles only
// (spmm_producer.cuh, TAIL): producer_tail_f32_128x256_sm90a.
#include "spmm_producer.cuh"
#include "spmm_producer.h"

namespace nmspmm {
namespace kernels {

#define NMSPMM_INSTANTIATE_PRODUCER_TAIL(WM, WN, KB, WB, S)                                      \
  template cudaError_t launch_producer_tail<ProducerConfig<WM, WN, KB, WB, S>>(const SpmmParams&, \
                                                                              cudaStream_t, int64_t);
NMSPMM_PRODUCER_CONFIGS(NMSPMM_INSTANTIATE_PRODUCER_TAIL)
#undef NMSPMM_INSTANTIATE_PRODUCER_TAIL

}  // namespace kernels
}  // namespace nmspmm
