// Torch-free description of the vector-wise N:M pattern shared by the op binding, the CPU
// reference and the CUDA kernels. See docs/format.md.
#pragma once
#include <cstdint>

namespace nmspmm {

// Public format limits. M and L are powers of two so that windows and vectors tile the
// kernels' k-blocks (64 dense columns) and column groups (4 columns) exactly.
constexpr int64_t kMaxM = 64;
constexpr int64_t kMaxL = 128;

// The packing (high-sparsity) metadata is built for one column-tile width and one k-block
// depth; both are properties of the packing kernels, not of the public format.
constexpr int64_t kPackTileN = 128;
constexpr int64_t kPackKBlock = 64;
constexpr uint8_t kUnusedCol = 0xFF;  // col_info padding

inline bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }
inline bool supported_M(int64_t M) { return M >= 2 && M <= kMaxM && is_pow2(M); }
inline bool supported_L(int64_t L) { return L >= 1 && L <= kMaxL && is_pow2(L); }

}  // namespace nmspmm
