// The launch geometry of the Hopper fused-expansion kernel (expand_wgmma_sm90.cuh): host-only and
// CUDA-free, so that the launcher, the binding and the policy (shape support, cost) agree.
#pragma once
#include <cstdint>

namespace nmspmm {
namespace kernels {
namespace expand_wgmma {

constexpr int kBM = 128;          // outputs per block: two consumer warpgroups of 64
constexpr int kBK = 64;           // dense inputs per stage
constexpr int kExpandGroups = 2;  // expansion warpgroups, taking stages in turn
constexpr int kThreads = 256 + 128 * kExpandGroups + 32;  // + two consumer warpgroups and a copy warp
constexpr int kSmemLimit = 227 * 1024;
constexpr int kMaxStages = 8;
constexpr int kDenseTileBytes = kBM * kBK * 2;  // the expanded A of a stage: two [64 inputs x 64 outputs] boxes
constexpr int kEpiPitch = kBM + 4;              // fp32 staging row pitch (sparse_tc's epilogue)

struct Geometry {
  int slots;        // compressed rows per stage: 64 / M * N
  int idx_row;      // index bytes per staged compressed row of the block: 128 / L, at least 4
  int x_off, a_off, val_off, idx_off, stage_bytes;
  int stages, region, smem_bytes;
  uint32_t stage_tx;  // bytes the tensor copies of a stage deliver (x and values; the launch adds
                      // the index rows where they come by tensor copy)
};

// Shapes the kernel takes: M a power of two in [2, 64], 1 <= N <= M, L a power of two <= 128;
// k a multiple of M and of 8 (x rows 16-byte aligned for the tensor copy), n a multiple of 8
// (16-byte rows of values and y) and of 4 L (4-byte copies of the index rows).
inline bool shape_supported(int64_t n, int64_t k, int64_t N, int64_t M, int64_t L) {
  constexpr int64_t kMaxCoord = 0x7fffffff;
  const bool pow2_M = M >= 2 && M <= 64 && (M & (M - 1)) == 0;
  const bool pow2_L = L >= 1 && L <= 128 && (L & (L - 1)) == 0;
  return pow2_M && pow2_L && N >= 1 && N <= M && n >= 8 && k >= 8 && k % M == 0 && k % 8 == 0 && n % 8 == 0 &&
         n % (4 * L) == 0 && n <= kMaxCoord && k <= kMaxCoord;
}

inline int round_up_i(int v, int a) { return (v + a - 1) / a * a; }

// bt: tokens per block (64 or 128).
inline Geometry make_geometry(int64_t N, int64_t M, int64_t L, int bt) {
  Geometry g{};
  g.slots = static_cast<int>(kBK / M * N);
  g.idx_row = L >= 32 ? 4 : static_cast<int>(kBM / L);
  g.x_off = 0;
  g.a_off = bt * kBK * 2;  // 1024-byte aligned: both are 128-byte-swizzled wgmma operands
  g.val_off = g.a_off + kDenseTileBytes;
  g.idx_off = g.val_off + round_up_i(g.slots * kBM * 2, 128);
  g.stage_bytes = round_up_i(g.idx_off + g.slots * g.idx_row, 1024);
  int stages = (kSmemLimit - 1024 - 3 * 8 * kMaxStages) / g.stage_bytes;
  g.stages = stages > kMaxStages ? kMaxStages : stages;
  const int epi = bt * kEpiPitch * 4;
  g.region = g.stages * g.stage_bytes > epi ? g.stages * g.stage_bytes : epi;
  g.smem_bytes = 1024 + g.region + 3 * 8 * g.stages;
  g.stage_tx = static_cast<uint32_t>(bt * kBK * 2 + g.slots * kBM * 2);
  return g;
}

}  // namespace expand_wgmma
}  // namespace kernels
}  // namespace nmspmm
