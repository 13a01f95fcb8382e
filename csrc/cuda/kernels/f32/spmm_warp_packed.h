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

// The three configurations (one per spmm_warp_packed_tm*.cu), chosen in an H100 A/B of
// (WB, STAGES) variants: 128x128 with 12 rows x 3 stages
// (8 x 4, 8 x 5 and 16 x 2 measured 1-3% slower at m >= 1024; 16 x 3 does not fit 2 blocks per SM),
// 64x128 and 32x128 with 16 x 3 (8 x 4, and 12 x 4 for 64x128, slower on most shapes).
using WarpPacked128x128 = WarpPackedConfig<16, 12, 3>;
using WarpPacked64x128 = WarpPackedConfig<8, 16, 3>;
using WarpPacked32x128 = WarpPackedConfig<4, 16, 3>;
extern template cudaError_t launch_warp_packed<WarpPacked128x128>(const SpmmParams&, cudaStream_t);
extern template cudaError_t launch_warp_packed<WarpPacked64x128>(const SpmmParams&, cudaStream_t);
extern template cudaError_t launch_warp_packed<WarpPacked32x128>(const SpmmParams&, cudaStream_t);

}  // namespace kernels
}  // namespace nmspmm
