// Configurations of the warp-specialized kernel that only tools/producer_probe.cu times (other
// stage shapes than the extension's, session 28's 8:32 and 4:32 configs among them), compiled into
// the probe, not into the extension.
#include "cuda/kernels/spmm_producer.cuh"

namespace nmspmm {
namespace kernels {
#define NMSPMM_PROBE_PRODUCER(KB, WB, S) \
  template cudaError_t launch_producer<ProducerConfig<1, 8, KB, WB, S>>(const SpmmParams&, cudaStream_t);
NMSPMM_PROBE_PRODUCER(32, 8, 4)
NMSPMM_PROBE_PRODUCER(32, 8, 5)
NMSPMM_PROBE_PRODUCER(64, 8, 3)
NMSPMM_PROBE_PRODUCER(64, 8, 4)
NMSPMM_PROBE_PRODUCER(96, 12, 3)
NMSPMM_PROBE_PRODUCER(64, 16, 4)
NMSPMM_PROBE_PRODUCER(64, 24, 3)
NMSPMM_PROBE_PRODUCER(64, 32, 3)
#undef NMSPMM_PROBE_PRODUCER
}  // namespace kernels
}  // namespace nmspmm
