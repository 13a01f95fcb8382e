// The launch geometry of the fused-expansion kernel (expand_mma.cuh): host-only and CUDA-free, so
// that the launcher, the binding (scratch size) and the policy (shape support) agree.
#pragma once
#include <cstddef>
#include <cstdint>

namespace nmspmm {
namespace kernels {
namespace expand_mma {

constexpr int kBM = 128;                      // outputs per CTA
constexpr int kBK = 64;                       // dense inputs per stage
constexpr int kThreads = 128;                 // 4 warps of 32 outputs
constexpr int kStripRowBytes = 32 * 2 + 16;   // one input of a warp's dense strip (padded)
constexpr int kStripBytes = kBK * kStripRowBytes;
constexpr int kSmemBudget = 113 * 1024;       // two CTAs per SM on sm_90 (227 KiB)
constexpr int kMaxL = 32;                     // index bytes per compressed row of a CTA: 128 / L >= 4

struct Geometry {
  int slots;        // compressed rows per stage: 64 / M * N
  int idx_row;      // index bytes per compressed row of a CTA: 128 / L
  int ich;          // bytes per index copy (16, else 4)
  int x_off, val_off, idx_off, stage_bytes;
  int strips_off;   // the four warps' strips, after the ring
  int stages, nst, split, smem_bytes;
};

// Shapes the kernel takes: M a power of two in [2, 64], 1 <= N <= M, L a power of two <= 32;
// k a multiple of M and of 8 (16-byte copies of x), n a multiple of 8 (16-byte rows of values
// and y) and of 4 L (4-byte copies of the index rows).
inline bool shape_supported(int64_t n, int64_t k, int64_t N, int64_t M, int64_t L) {
  const bool pow2_M = M >= 2 && M <= 64 && (M & (M - 1)) == 0;
  const bool pow2_L = L >= 1 && L <= kMaxL && (L & (L - 1)) == 0;
  return pow2_M && pow2_L && N >= 1 && N <= M && n >= 1 && k >= 1 && k % M == 0 && k % 8 == 0 && n % 8 == 0 &&
         n % (4 * L) == 0;
}

inline int round_up_i(int v, int a) { return (v + a - 1) / a * a; }

// bt: tokens per CTA (16, 64, 128); split_k: the plan's split (clamped to the stages);
// idx_aligned16: the index pointer is 16-byte aligned.
inline Geometry make_geometry(int64_t n, int64_t k, int64_t N, int64_t M, int64_t L, int bt, int split_k,
                              bool idx_aligned16) {
  Geometry g{};
  g.slots = static_cast<int>(kBK / M * N);
  g.idx_row = static_cast<int>(kBM / L);
  const int64_t q = n / L;
  g.ich = (g.idx_row % 16 == 0 && q % 16 == 0 && idx_aligned16) ? 16 : 4;
  g.x_off = 0;
  g.val_off = bt * kBK * 2;
  g.idx_off = g.val_off + g.slots * kBM * 2;
  g.stage_bytes = round_up_i(g.idx_off + round_up_i(g.slots * g.idx_row, 16), 128);
  int stages = (kSmemBudget - 4 * kStripBytes) / g.stage_bytes;
  g.stages = stages < 2 ? 2 : stages > 4 ? 4 : stages;
  g.strips_off = g.stages * g.stage_bytes;
  g.nst = static_cast<int>((k + kBK - 1) / kBK);
  g.split = split_k < 1 ? 1 : split_k;
  if (g.split > g.nst) g.split = g.nst;
  const int epi = g.split == 1 ? bt * (kBM + 8) * 2 : bt * (kBM + 4) * 4;
  g.smem_bytes = g.strips_off + 4 * kStripBytes;
  if (epi > g.smem_bytes) g.smem_bytes = epi;
  return g;
}

// Scratch of a split plan: the fp32 partials [split, m, n].
inline size_t scratch_bytes(int64_t m, int64_t n, int split) {
  return split > 1 ? static_cast<size_t>(split) * static_cast<size_t>(m) * static_cast<size_t>(n) * 4 : 0;
}

}  // namespace expand_mma
}  // namespace kernels
}  // namespace nmspmm
