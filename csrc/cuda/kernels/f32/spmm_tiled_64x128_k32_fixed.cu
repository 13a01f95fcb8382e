// Fixed-WB variants of one tiled-kernel configuration (BM=64, BN=128, TM=8, KB=32, L >= 32):
// WB = 4, 8, 12, 16 compressed rows per k-block.
#include "spmm_tiled.cuh"

namespace nmspmm {
namespace kernels {
NMSPMM_INSTANTIATE_FIXED_WB(64, 128, 8)
}  // namespace kernels
}  // namespace nmspmm
