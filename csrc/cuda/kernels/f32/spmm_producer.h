// Declarations of the warp-specialized kernel's launchers (spmm_producer.cuh), explicitly
// instantiated in spmm_producer.cu.
#pragma once
#include "spmm.h"

namespace nmspmm {
namespace kernels {

// WARPS_M x WARPS_N math warps of 128 x 32 outputs (16x8 thread tiles), KB inputs and WB compressed
// rows per stage, STAGES-deep ring of shared-memory stages.
template <int WARPS_M, int WARPS_N, int KB, int WB, int STAGES>
struct ProducerConfig;

template <class C>
cudaError_t launch_producer(const SpmmParams& p, cudaStream_t stream);
// producer_tail_f32_128x256_sm90a: the same kernel with split-K only for the last `tail_tiles` tiles
// (producer_tail_tiles, csrc/registry.h), plus their reduction; p.workspace holds
// split_k x tail_tiles x BM x BN floats.
template <class C>
cudaError_t launch_producer_tail(const SpmmParams& p, cudaStream_t stream, int64_t tail_tiles);

// producer_f32_128x256_sm90a: 128x256 tiles (8 math warps); on H100 256x128 measures the same and
// 128x128 with 2 blocks per SM at 168 registers 8-10% slower. Per pattern (producer_shape,
// csrc/registry.h): k-blocks of 32 with 12 / 16 compressed rows and 4 stages (12:32, 16:32), k-blocks
// of 64 with 16 rows and 3 stages (8:32) and of 128 with 16 rows and 2 stages (4:32).
//
#define NMSPMM_PRODUCER_CONFIGS(X) X(1, 8, 32, 12, 4) X(1, 8, 32, 16, 4) X(1, 8, 64, 16, 3) X(1, 8, 128, 16, 2)
#define NMSPMM_DECLARE_PRODUCER(WM, WN, KB, WB, S) \
  extern template cudaError_t launch_producer<ProducerConfig<WM, WN, KB, WB, S>>(const SpmmParams&, cudaStream_t);
NMSPMM_PRODUCER_CONFIGS(NMSPMM_DECLARE_PRODUCER)
#undef NMSPMM_DECLARE_PRODUCER
#define NMSPMM_DECLARE_PRODUCER_TAIL(WM, WN, KB, WB, S)                                                      \
  extern template cudaError_t launch_producer_tail<ProducerConfig<WM, WN, KB, WB, S>>(const SpmmParams&, \
                                                                                      cudaStream_t, int64_t);
NMSPMM_PRODUCER_CONFIGS(NMSPMM_DECLARE_PRODUCER_TAIL)
#undef NMSPMM_DECLARE_PRODUCER_TAIL

}  // namespace kernels
}  // namespace nmspmm
