// Fixed-WB variants of one tiled-kernel configuration (BM=32, BN=128, TM=4, KB=32, L >= 32):
// WB = 4, 8, 12, 16 compressed rows per k-block.
#include "spmm_tiled.cuh"

namespace nmspmm {
namespace kernels {
NMSPMM_INSTANTIATE_FIXED_WB(32, 128, 4)
}  // namespace kernels
}  // namespace nmspmm
