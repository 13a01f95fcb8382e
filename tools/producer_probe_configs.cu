// Configurations of the warp-specialized kernel that only tools/producer_probe.cu times (longer
// stages: more k per stage), compiled into the probe, not into the extension.
#include "cuda/kernels/spmm_producer.cuh"

namespace nmspmm {
namespace kernels {
template cudaError_t launch_producer<ProducerConfig<1, 8, 64, 8, 4>>(const SpmmParams&, cudaStream_t);
template cudaError_t launch_producer<ProducerConfig<1, 8, 96, 12, 3>>(const SpmmParams&, cudaStream_t);
template cudaError_t launch_producer<ProducerConfig<1, 8, 128, 16, 2>>(const SpmmParams&, cudaStream_t);
template cudaError_t launch_producer<ProducerConfig<1, 8, 64, 16, 3>>(const SpmmParams&, cudaStream_t);
template cudaError_t launch_producer<ProducerConfig<1, 8, 64, 16, 4>>(const SpmmParams&, cudaStream_t);
template cudaError_t launch_producer<ProducerConfig<1, 8, 32, 8, 5>>(const SpmmParams&, cudaStream_t);
template cudaError_t launch_producer<ProducerConfig<1, 8, 128, 32, 2>>(const SpmmParams&, cudaStream_t);
template cudaError_t launch_producer<ProducerConfig<1, 8, 64, 32, 3>>(const SpmmParams&, cudaStream_t);
template cudaError_t launch_producer<ProducerConfig<1, 8, 64, 24, 3>>(const SpmmParams&, cudaStream_t);
}  // namespace kernels
}  // namespace nmspmm
