// Declarations of the tiled-kernel launchers; each is explicitly instantiated in its own
// spmm_tiled_*.cu (parallel, incremental builds).
#pragma once
#include "spmm.h"

namespace nmspmm {
namespace kernels {

template <int BM, int BN, int TM, int KB, bool PACKED, bool UNIFORM>
struct TiledConfig;

template <class C>
cudaError_t launch_tiled(const SpmmParams& p, cudaStream_t stream);

#define NMSPMM_TILED_CONFIGS(X)                                               \
  X(128, 128, 16, 32, false) X(128, 128, 16, 64, false)                         \
  X(64, 128, 8, 32, false) X(64, 128, 8, 64, false)                           \
  X(32, 128, 4, 32, false) X(32, 128, 4, 64, false)                           \
  X(64, 64, 8, 32, false) X(64, 64, 8, 64, false)                             \
  X(128, 256, 16, 32, false) X(256, 128, 16, 32, false)                       \
  X(128, 128, 8, 32, false) X(128, 128, 8, 64, false)                         \
  X(128, 128, 16, 64, true) X(64, 128, 8, 64, true) X(32, 128, 4, 64, true)

#define NMSPMM_DECLARE_TILED(BM, BN, TM, KB, PACKED)                                        \
  extern template cudaError_t launch_tiled<TiledConfig<BM, BN, TM, KB, PACKED, true>>(      \
      const SpmmParams&, cudaStream_t);                                                     \
  extern template cudaError_t launch_tiled<TiledConfig<BM, BN, TM, KB, PACKED, false>>(     \
      const SpmmParams&, cudaStream_t);
NMSPMM_TILED_CONFIGS(NMSPMM_DECLARE_TILED)
#undef NMSPMM_DECLARE_TILED

}  // namespace kernels
}  // namespace nmspmm
