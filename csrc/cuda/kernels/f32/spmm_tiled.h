// Declarations of the tiled-kernel launchers; each is explicitly instantiated in its own
// spmm_tiled_*.cu (parallel, incremental builds).
#pragma once
#include "spmm.h"

namespace nmspmm {
namespace kernels {

// WB: compressed rows per k-block fixed at compile time (0: from the pattern at run time).
template <int BM, int BN, int TM, int KB, bool PACKED, bool UNIFORM, int WB = 0>
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

// Fixed-WB variants (k-block 32, L >= 32) for the fast patterns: WB = 4, 8, 12, 16 compressed
// rows per k-block (M = 32 with N = 4, 8, 12, 16, and every N:M with the same 32 / M * N).
#define NMSPMM_FIXED_WB_CONFIGS(X)                                                \
  X(128, 128, 16) X(64, 128, 8) X(32, 128, 4) X(64, 64, 8) X(128, 256, 16) X(256, 128, 16) \
  X(128, 128, 8)

#define NMSPMM_DECLARE_FIXED(BM, BN, TM)                                                      \
  extern template cudaError_t launch_tiled<TiledConfig<BM, BN, TM, 32, false, true, 4>>(      \
      const SpmmParams&, cudaStream_t);                                                       \
  extern template cudaError_t launch_tiled<TiledConfig<BM, BN, TM, 32, false, true, 8>>(      \
      const SpmmParams&, cudaStream_t);                                                       \
  extern template cudaError_t launch_tiled<TiledConfig<BM, BN, TM, 32, false, true, 12>>(     \
      const SpmmParams&, cudaStream_t);                                                       \
  extern template cudaError_t launch_tiled<TiledConfig<BM, BN, TM, 32, false, true, 16>>(     \
      const SpmmParams&, cudaStream_t);
NMSPMM_FIXED_WB_CONFIGS(NMSPMM_DECLARE_FIXED)
#undef NMSPMM_DECLARE_FIXED

// Fixed-WB variants with a k-block of 64 and WB = 8 (4:32, 2:16, 1:8; spmm_tiled_k64_fixed8.cu),
// used in place of the k-block-32 WB = 4 variant of the same tile.
#define NMSPMM_KB64_CONFIGS(X) X(128, 128, 16) X(64, 128, 8) X(32, 128, 4)
#define NMSPMM_DECLARE_KB64(BM, BN, TM)                                                       \
  extern template cudaError_t launch_tiled<TiledConfig<BM, BN, TM, 64, false, true, 8>>(      \
      const SpmmParams&, cudaStream_t);
NMSPMM_KB64_CONFIGS(NMSPMM_DECLARE_KB64)
#undef NMSPMM_DECLARE_KB64
template <int BM, int BN, int TM>
constexpr bool has_kb64_variant() {
  return (BM == 128 && BN == 128 && TM == 16) || (BM == 64 && BN == 128 && TM == 8) ||
         (BM == 32 && BN == 128 && TM == 4);
}

}  // namespace kernels
}  // namespace nmspmm
