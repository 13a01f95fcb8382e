// The launch geometry of the Hopper gathered-operand kernel (gather_wgmma_sm90.cuh): host-only and
// CUDA-free, so that the launcher, the binding and the policy (shape support, cost) agree.
#pragma once
#include <cstdint>

namespace nmspmm {
namespace kernels {
namespace gather_wgmma {

constexpr int kBM = 128;      // outputs per block: two consumer warpgroups of 64
constexpr int kRows = 32;     // compressed rows (kept slots) per stage: two k16 steps
constexpr int kThreads = 384;  // two consumer warpgroups and a producer warpgroup
constexpr int kLookahead = 4;  // stages between a producer thread's index load and its use
constexpr int kSmemLimit = 227 * 1024;
constexpr int kMaxStages = 8;
constexpr int kEpiPitch = kBM + 4;  // fp32 staging row pitch (sparse_tc's epilogue)
constexpr int kValueBoxBytes = kRows * 128;  // one warpgroup's [32 slots x 64 outputs] values

struct Geometry {
  int vectors;      // vectors per block: 128 / L
  int a_off, b_off, b_bytes, stage_bytes;  // per stage: values boxes, then one gathered x tile per vector
  int stages, region, smem_bytes;
};

// Shapes the kernel takes: L in {64, 128} (a vector spans whole 64-output warpgroups), M a power of
// two in [2, 64], 1 <= N <= M; k a multiple of M; n a multiple of L (16-byte value and output
// rows); coordinates of the tensor copies within int32.
inline bool shape_supported(int64_t n, int64_t k, int64_t N, int64_t M, int64_t L) {
  constexpr int64_t kMaxCoord = 0x7fffffff;
  const bool pow2_M = M >= 2 && M <= 64 && (M & (M - 1)) == 0;
  return (L == 64 || L == 128) && pow2_M && N >= 1 && N <= M && k >= M && k % M == 0 && n >= L && n % L == 0 &&
         n <= kMaxCoord && k / M * N <= kMaxCoord;
}

inline int round_up_i(int v, int a) { return (v + a - 1) / a * a; }

// bt: tokens per block (128 or 256).
inline Geometry make_geometry(int64_t L, int bt) {
  Geometry g{};
  g.vectors = static_cast<int>(kBM / L);
  g.a_off = 0;                      // two 128-byte-swizzled boxes, 1024-byte aligned
  g.b_off = 2 * kValueBoxBytes;
  g.b_bytes = kRows * bt * 2;       // [32 slots x bt tokens], MN-major, 128-byte swizzle
  g.stage_bytes = g.b_off + g.vectors * g.b_bytes;
  int stages = (kSmemLimit - 1024 - 2 * 8 * kMaxStages) / g.stage_bytes;
  g.stages = stages > kMaxStages ? kMaxStages : stages;
  const int epi = bt * kEpiPitch * 4;
  g.region = g.stages * g.stage_bytes > epi ? g.stages * g.stage_bytes : epi;
  g.smem_bytes = 1024 + g.region + 2 * 8 * g.stages;
  return g;
}

// Scratch bytes of a call: the k-major copy of x (m rounded up to 8 tokens).
inline int64_t scratch_bytes(int64_t m, int64_t k) { return ((m + 7) / 8 * 8) * k * 2; }

}  // namespace gather_wgmma
}  // namespace kernels
}  // namespace nmspmm
