// Declarations of the warp-packed kernel's launchers (spmm_warp_packed.cuh); each thread-tile height
// TM is explicitly instantiated in its own spmm_warp_packed_tm*.cu.
#pragma once
#include "spmm.h"

namespace nmspmm {
namespace kernels {

// TM: thread-tile rows (tile BM = 8 * TM rows x 128 columns, 4 warps); WB: compressed rows per
// stage; STAGES: cp.async pipeline depth of every warp.
template <int TM, int WB, int STAGES>
struct WarpPackedConfig;

template <class C>
cudaError_t launch_warp_packed(const SpmmParams& p, cudaStream_t stream);

// (TM, WB, STAGES) of every instantiation; X(TM, WB, STAGES).
#define NMSPMM_WARP_PACKED_CONFIGS(X) \
  X(16, 8, 5) X(16, 12, 3) X(16, 16, 2) X(8, 16, 3) X(8, 12, 4) X(4, 8, 4) X(4, 16, 3)

#define NMSPMM_DECLARE_WARP_PACKED(TM, WB, STAGES)                                       \
  extern template cudaError_t launch_warp_packed<WarpPackedConfig<TM, WB, STAGES>>(      \
      const SpmmParams&, cudaStream_t);
NMSPMM_WARP_PACKED_CONFIGS(NMSPMM_DECLARE_WARP_PACKED)
#undef NMSPMM_DECLARE_WARP_PACKED

}  // namespace kernels
}  // namespace nmspmm
