// The runtime heuristic: (m, n, k, N, M, L, SM count) -> kernel and split-K. Torch-free and
// CUDA-free so it is compiled into every build and unit-tested on the CPU. No per-shape search
// happens at call time: a small cost model (fitted to H100 timings, see docs/kernels.md) ranks the
// tiled kernels and split-K factors for the problem.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "pattern.h"

namespace nmspmm {

enum KernelId : int {
  kGeneric = 0,         // any pattern: one thread per output element, per-column gather
  kDecode = 1,          // m <= 16, any GPU: streams the compressed weight, split over k (workspace)
  kTiled128x128 = 2,    // non-packing: the whole A k-slab in shared memory
  kTiled64x128 = 3,
  kTiled32x128 = 4,
  kTiled64x64 = 5,
  kPacked128x128 = 6,   // packing: only the A columns listed in col_info
  kPacked64x128 = 7,
  kPacked32x128 = 8,
  kTiled128x256 = 9,    // non-packing, 256 threads: 128x256 (16x8 thread tile)
  kTiled256x128 = 10,   //                           256x128 (16x8)
  kTiled128x128w8 = 11, //                           128x128 (8x8)
  kDecodeW4 = 12,       // m <= 2, sm_90: k split over the W = 4, 8, 16 warps of a block and
  kDecodeW8 = 13,       // over the split_k (1..16) blocks of a thread-block cluster,
  kDecodeW16 = 14,      // reduced through distributed shared memory (no workspace, one launch)
  kDecodeStaged128 = 15,  // m <= 16, sm_90: 8 warps per block over 128 / 256 / 512 output columns
  kDecodeStaged256 = 16,  // sharing one cp.async-staged copy of x, k split over the block's warps
  kDecodeStaged512 = 17,  // and the split_k (1..16) blocks of a cluster, reduced on chip
  kWarpPacked128x128 = 18,  // L >= 32: each warp stages only the x rows its vector keeps, in its
  kWarpPacked64x128 = 19,   // own cp.async pipeline (no gather offsets, no block barrier per
  kWarpPacked32x128 = 20,   // stage); 16x8 / 8x8 / 4x8 thread tiles
  kProducer128x256 = 21,    // sm_90, L >= 32: a producer warp feeds 8 math warps (16x8 thread tiles)
                            // through tensor copies (TMA) and mbarriers; the tiled kernels' A slab
  kProducerTail128x256 = 22,  // the same with split-K on the last round's tiles only (the rest whole)
  kNumKernels = 23,
};

// The decode kernels launched as thread-block clusters (sm_90): split_k is the cluster size and
// the reduction stays on chip.
inline bool is_cluster_decode_kernel(int kernel) { return kernel >= kDecodeW4 && kernel <= kDecodeStaged512; }
inline bool is_staged_decode_kernel(int kernel) { return kernel >= kDecodeStaged128 && kernel <= kDecodeStaged512; }
// Warps per block of a cluster decode kernel (12-14).
inline int cluster_decode_warps(int kernel) { return 4 << (kernel - kDecodeW4); }
// Column warps per block of a staged decode kernel (15-17): 128 output columns each.
inline int staged_decode_col_warps(int kernel) { return 1 << (kernel - kDecodeStaged128); }
// Largest cluster size (split_k) of a cluster decode kernel: 16 (non-portable above 8; a device
// that cannot place 16 fails the launch).
inline int max_decode_cluster_size(int kernel) { (void)kernel; return 16; }
// Largest m of the cluster decode kernels (beyond it the split-K decode kernel is faster).
constexpr int kClusterDecodeMaxM = 2;

struct TileShape {
  int bm, bn;
};

inline TileShape tile_shape(int kernel) {
  switch (kernel) {
    case kTiled128x128: case kPacked128x128: return {128, 128};
    case kTiled64x128: case kPacked64x128: return {64, 128};
    case kTiled32x128: case kPacked32x128: return {32, 128};
    case kTiled64x64: return {64, 64};
    case kTiled128x256: return {128, 256};
    case kTiled256x128: return {256, 128};
    case kTiled128x128w8: return {128, 128};
    case kWarpPacked128x128: return {128, 128};
    case kWarpPacked64x128: return {64, 128};
    case kWarpPacked32x128: return {32, 128};
    case kProducer128x256: case kProducerTail128x256: return {128, 256};
    default: return {0, 0};
  }
}

inline bool is_packed_kernel(int kernel) {
  return kernel == kPacked128x128 || kernel == kPacked64x128 || kernel == kPacked32x128;
}
inline bool is_tiled_kernel(int kernel) {
  return (kernel >= kTiled128x128 && kernel <= kTiled64x64) ||
         (kernel >= kTiled128x256 && kernel <= kTiled128x128w8);
}
inline bool is_warp_packed_kernel(int kernel) {
  return kernel >= kWarpPacked128x128 && kernel <= kWarpPacked32x128;
}
// The warp-specialized kernel (spmm_producer.cuh): compute capability 9.0 (tensor copies,
// mbarriers), a compressed-row count per k-block it is built for (producer_wb), L >= 32.
// The tail variant applies split-K only to the tiles of the grid's last round (producer_tail_tiles).
inline bool is_producer_kernel(int kernel) { return kernel == kProducer128x256 || kernel == kProducerTail128x256; }
// Its k-block, compressed rows per k-block (0: not built for the pattern) and the factor on the
// cost model's stage time (producer_cost_us) for a pattern, by its compressed rows per 32 inputs
// (N:32, and every N:M with the same 32 / M * N):
//   16 (16:32, 2:4):  k-blocks of 32, 16 rows, 4 stages;
//   12 (12:32, 3:8):  k-blocks of 32, 12 rows, 4 stages;
//    8 (8:32, 2:8):   k-blocks of 64, 16 rows, 3 stages;
//    4 (4:32, 1:8):   k-blocks of 128, 16 rows, 2 stages.
// Kernel-only on H100 (4096^3, 1024x4096x4096, 256x4096x4096, 512x11008x4096) these long stages run
// 1.6-3.5% faster at 8:32 and 4.9-6.5% at 4:32 than k-blocks of 32 with 8 rows (the stage time
// factors below: 0.973, 0.944); at 16:32 and 12:32 k-blocks of 64 (32 / 24 rows, 3 stages) are up
// to 8% slower on some shapes.
struct ProducerShape {
  int kb, wb;
  double stage_factor;
};
inline ProducerShape producer_shape(int64_t N, int64_t M) {
  if (M > 32 || 32 % M != 0) return {32, 0, 1.0};
  const int64_t wb32 = 32 / M * N;
  if (wb32 == 16 || wb32 == 12) return {32, static_cast<int>(wb32), 1.0};
  if (wb32 == 8) return {64, 16, 0.973};
  if (wb32 == 4) return {128, 16, 0.944};
  return {32, 0, 1.0};
}
// The kernels that read x through its k-major copy xT (written by a transpose before them).
inline bool kernel_reads_xt(int kernel) {
  return is_tiled_kernel(kernel) || is_packed_kernel(kernel) || is_warp_packed_kernel(kernel) ||
         is_producer_kernel(kernel);
}

// Largest split-K a tiled kernel reduces inside a thread-block cluster. The kernels take any
// cluster of 2..8 blocks, but measured on H100 (m <= 1024, the tiled 128x128, 64x128 and 64x64
// kernels, same plans both ways) the cluster reduction beats the workspace only at split 2
// (0.94-0.95x the time on geomean); at 4 it is 1.01-1.06x and up to 1.7x slower (clusters of 4
// leave SM slots empty), at 8 0.97-0.99x with outliers both ways.
constexpr int kMaxClusterSplit = 2;
// Whether a plan's split-K reduces on chip. clusters: the device has thread-block clusters
// (compute capability >= 9.0). The cluster decode kernels always do; a tiled or packing kernel
// with 2 <= split_k <= kMaxClusterSplit does on such a device: the split_k blocks of an output
// tile form one cluster and sum their partial tiles through distributed shared memory.
// The warp-specialized kernels reduce split-K through the workspace. A cluster reduction there (the
// split_k blocks of a tile as one cluster, rank-order sums through distributed shared memory)
// measures slower on H100:
//   - splits 3..8: 0.80-0.95x the workspace's speed on geomean per m (down to 0.52x) where the grid's
//     clusters do not all fit at once: a cluster lives in one GPC, and with one block per SM the H100
//     keeps 66 clusters of 2 resident but only 39 of 3, 30 of 4, 22 of 5, 17 of 6, 15 of 7 or 8;
//   - split 2: with the epilogue in the same kernel function ptxas reallocates the FFMA block and
//     every plan runs 1.5-7% slower; as a kernel instance of its own, split 2 runs 0.95-1.00x the
//     workspace's speed.
inline bool plan_reduces_in_cluster(int kernel, int split_k, bool clusters) {
  if (is_cluster_decode_kernel(kernel)) return true;
  return clusters && split_k > 1 && split_k <= kMaxClusterSplit && kernel_reads_xt(kernel) &&
         !is_producer_kernel(kernel);  // warp-specialized: through the workspace
}
// Whether a plan writes a split-K workspace [split_k, m, n] that a second launch reduces.
inline bool plan_uses_workspace(int kernel, int split_k, bool clusters) {
  return split_k > 1 && kernel != kGeneric && !plan_reduces_in_cluster(kernel, split_k, clusters);
}

// Which kernels can run a pattern at all (the generic kernel runs everything).
inline bool kernel_supports(int kernel, int64_t m, int64_t N, int64_t M, int64_t L,
                            bool has_col_info) {
  if (kernel == kGeneric) return true;
  if (kernel == kDecode) return L >= 4 && m <= 16;
  if (is_staged_decode_kernel(kernel)) return L >= 4 && m <= 16 && M <= 512;
  if (is_cluster_decode_kernel(kernel)) return L >= 4 && m <= kClusterDecodeMaxM;
  if (kernel == kTiled128x256 || kernel == kTiled256x128) return L >= 16 && M <= 32;
  if (is_tiled_kernel(kernel)) return L >= 16 && M <= 64;
  if (is_packed_kernel(kernel)) return L >= 16 && M <= kPackKBlock && has_col_info;
  if (is_warp_packed_kernel(kernel)) return L >= 32;
  if (is_producer_kernel(kernel)) return L >= 32 && producer_shape(N, M).wb > 0;
  return false;
}

struct Plan {
  int kernel;
  int split_k;
};

// Whether the heuristic considers the packing kernels (with col_info). Measured on H100
// (benchmarks/results/h100/plan_sweep.csv): the non-packing kernels are faster at every measured
// point, L = 32 and sparsity 50% to 96.9% (1:32), so it does not; spmm_with_plan still runs them.
constexpr bool kHeuristicUsesPacking = false;

inline int ceil_div_i(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

// Cost model of the prefill kernels (tiled and warp-packed). A grid of
// `ctas` blocks puts B = ceil(ctas / SMs) blocks on its busiest SM, which runs them in
// R = ceil(B / blocks_per_sm) rounds, all but the last with blocks_per_sm blocks sharing the SM
// (grid_rounds). One k-stage of a tiled kernel costs
//   alpha + beta * wb + r * (gamma + delta * wb)   microseconds
// while r blocks share the SM (wb compressed rows per stage; alpha and gamma per k-block of 32,
// doubled for 64), so summed over the rounds a plan costs
//   stages * (R * (alpha + beta * wb) + B * (gamma + delta * wb)) + reduction.
// Charging rounds rather than full waves lets a last round with fewer blocks per SM run its stages
// faster, which is what a finer grid gains on multi-wave shapes (512x5120x13824 8:32: the 64x128
// warp-packed kernel with split 2, 640 blocks, 5 per SM in 2 rounds, measures 1.19x faster than
// split 1, 320 blocks, 3 per SM in one round). Both families are fitted together (least squares
// on relative error, then a coordinate search on pick quality, below at kWarpPackedCosts).
struct TiledCost {
  int kernel;
  int blocks_per_sm;
  double alpha, beta, gamma, delta;
  int max_M;  // largest M the kernel takes (k-block 32 only: 32)
};
constexpr TiledCost kTiledCosts[] = {
    {kTiled128x256, 1, 0.4257, 0.1552, 0.0, 0.0, 32},
    {kTiled256x128, 1, 0.3458, 0.1699, 0.0, 0.0, 32},
    {kTiled128x128w8, 2, 0.1817, 0.0446, 0.1817, 0.0446, 64},
    {kTiled128x128, 2, -0.2049, 0.1091, 0.1602, 0.0299, 64},
    {kTiled64x128, 2, 0.4085, 0.0193, -0.0674, 0.0324, 64},
    {kTiled32x128, 4, 0.1554, 0.0244, 0.0148, 0.0174, 64},
    {kTiled64x64, 4, 0.7159, 0.0016, -0.0838, 0.0186, 64},
    // Packing kernels: a fit at 4096^3 (used only if kHeuristicUsesPacking).
    {kPacked128x128, 2, 1.591, 0.307, 0.0, 0.0, 64},
    {kPacked64x128, 4, 1.218, 0.283, 0.0, 0.0, 64},
    {kPacked32x128, 4, 0.621, 0.158, 0.0, 0.0, 64},
};

// Split-K candidates of the prefill plans (every family), each split keeping >= 4 k-blocks (stages).
// With splits of 16 the best plan at m = 32 / 64 is 5.5 / 1.7% faster on geomean than with at most 8
// (up to 1.46x). The non-powers of two let a grid of few tiles fill its last wave (256x6656x17920
// 16:32: 52 tiles of 128x256 x 5 splits = 260 blocks, 2 rounds on 132 SMs, measures 1.24x faster
// than the best power-of-two plan).
constexpr int kSplitCandidates[] = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16};

// Fixed cost of a split-K reduction in microseconds: through the workspace (a second launch), and
// inside a cluster (split 2); tuned with the kernels' constants above (they stand for what a split
// costs beyond the stages, not for a measured reduction time alone).
constexpr double kWorkspaceReduceUs = 3.719;
constexpr double kClusterReduceUs = 1.083;

// The busiest SM's rounds of a grid of ctas blocks (see the cost model above).
struct GridRounds {
  double rounds;  // R = ceil(B / blocks_per_sm)
  double blocks;  // B = ceil(ctas / num_sms)
};
inline GridRounds grid_rounds(int64_t ctas, int num_sms, int blocks_per_sm) {
  const int64_t per_sm = (ctas + num_sms - 1) / num_sms;
  return {static_cast<double>((per_sm + blocks_per_sm - 1) / blocks_per_sm), static_cast<double>(per_sm)};
}

// The split-K reduction of a plan (both families): a fixed cost in a cluster or through the
// workspace, plus 0.9 us per MB of partial tiles written and read.
inline double split_reduction_us(int kernel, int split, int64_t m, int64_t n, bool clusters) {
  if (split <= 1) return 0.0;
  const double fixed = plan_reduces_in_cluster(kernel, split, clusters) ? kClusterReduceUs : kWorkspaceReduceUs;
  return fixed + 0.900 * static_cast<double>(split + 1) * m * n * 4 / 1.0e6;
}

// Estimated microseconds of a tiled kernel with `split` k-splits (plus the split-K reduction,
// in a cluster when `clusters`, else through the workspace and a second launch).
inline double tiled_cost_us(const TiledCost& c, int64_t m, int64_t n, int64_t k, int64_t N,
                            int64_t M, int split, int num_sms, bool clusters = false) {
  const bool packed = is_packed_kernel(c.kernel);
  const int64_t kblock = (packed || M > 32) ? 64 : 32;
  const double scale = (!packed && kblock == 64) ? 2.0 : 1.0;
  const double wb = static_cast<double>(kblock / M * N);
  const TileShape t = tile_shape(c.kernel);
  const int64_t ctas = static_cast<int64_t>(ceil_div_i(m, t.bm)) * ceil_div_i(n, t.bn) * split;
  const GridRounds g = grid_rounds(ctas, num_sms, c.blocks_per_sm);
  const int64_t stages = (ceil_div_i(k, kblock) + split - 1) / split;
  const double us = static_cast<double>(stages) *
              (g.rounds * (scale * c.alpha + c.beta * wb) + g.blocks * (scale * c.gamma + c.delta * wb));
  return us + split_reduction_us(c.kernel, split, m, n, clusters);
}

// The warp-packed kernels (L >= 32). A tiled kernel copies the whole k-slab of x for the 4 vectors
// of its 128-column tile; a warp-packed warp copies only the rows its vector keeps, 4 N / M of that,
// and skips the tiled kernels' gather offsets and block barrier per stage. On H100 at 8:32 / 4:32
// the best warp-packed plan is 1.04-1.22x / 1.10-1.26x faster than the tiled pick on geomean per m.
// At 12:32 and 16:32 the two families are about even on geomean but not per shape (512x5632x2048
// 12:32: 64x128 warp-packed 127 us against the tiled pick's 155 us), so choose_plan prices both
// families at every pattern with L >= 32 and takes the cheaper plan.
// Cost of one plan: stages * (R * a + B * g) + R * b + the tiled kernels' split-K reduction, with
// stages of wb compressed rows and R, B the grid's rounds as in tiled_cost_us. Both families'
// constants and the reductions are fitted together (least squares on relative error, then a
// coordinate search on the picks' mean log time over the best plan's) to flushed sweeps of every
// plan of both families (the 100 NM-SpMM points and the llama suite's 21 (n, k) at m = 32..512,
// 4 sparsities, 820 cells), with a two-fold check. b < 0 is a per-round intercept of the fit, not a
// measured time; every split keeps >= 4 stages, which keeps the sum positive.
struct WarpPackedCost {
  int kernel;
  int blocks_per_sm;  // by registers and shared memory (spmm_warp_packed.cuh)
  int wb;             // compressed rows per stage
  double a, g, b;
};
constexpr WarpPackedCost kWarpPackedCosts[] = {
    {kWarpPacked128x128, 2, 12, 0.8659, 0.6675, -2.0652},
    {kWarpPacked64x128, 3, 16, 0.7155, 0.4969, -1.5717},
    {kWarpPacked32x128, 4, 16, 0.6216, 0.2785, -1.7242},
};
// A grid of at least this many waves of 128x128 tiles (2 per SM) without a split takes the 128x128
// kernel: the smaller tiles read the weight once per 64 or 32 rows of x, which the per-stage model
// does not see (in the A/B they lost up to 1.3x there; with the rule the picks at m = 4096 are 0.6%
// above the best warp-packed plan, without it 6%).
constexpr int kWarpPackedFullWaves = 4;

// Above this m * n * k, at 4 N > M (a warp-packed block copies 4 N / M times the x rows of a tiled
// block), only the tiled kernels are candidates. Without this bound the joint model's warp-packed
// picks at 12:32 / 16:32 run 1.05x faster on geomean over the 176 shapes below 4.5e10 where they
// differ (0.95-1.27x), but slower on 18 of the 28 above it (0.84-1.12x; mostly the 64x128 kernel in
// place of the tiled 128x128 one: 256x24576x8192 16:32 1158 -> 1372 us); the per-stage model does
// not see what the larger problems lose. Chosen in-sample, like kWarpPackedFullWaves.
constexpr double kWarpPackedModerateMaxMnk = 4.5e10;

// Whether the warp-packed kernels are candidates: a warp's 32 columns must lie in one vector, and
// at 4 N > M the problem must be under kWarpPackedModerateMaxMnk.
inline bool warp_packed_candidates(int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int64_t L) {
  if (L < 32) return false;
  return 4 * N <= M || static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) < kWarpPackedModerateMaxMnk;
}

inline double warp_packed_cost_us(const WarpPackedCost& c, int64_t m, int64_t n, int64_t k, int64_t N,
                                  int64_t M, int split, int num_sms, bool clusters) {
  const TileShape t = tile_shape(c.kernel);
  const int64_t chunks = (k / M * N + c.wb - 1) / c.wb;
  const int64_t ctas = static_cast<int64_t>(ceil_div_i(m, t.bm)) * ceil_div_i(n, t.bn) * split;
  const GridRounds gr = grid_rounds(ctas, num_sms, c.blocks_per_sm);
  const double stages = static_cast<double>((chunks + split - 1) / split);
  const double us = stages * (gr.rounds * c.a + gr.blocks * c.g) + gr.rounds * c.b;
  return us + split_reduction_us(c.kernel, split, m, n, clusters);
}

// Prefill at L >= 32: the cheapest warp-packed plan (kSplitCandidates, each split keeping
// >= 4 stages) and its cost in *cost_us; only the 128x128 kernel on grids of kWarpPackedFullWaves
// waves or more.
inline Plan choose_warp_packed(int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int num_sms,
                               bool clusters, double* cost_us = nullptr) {
  const bool full = static_cast<int64_t>(ceil_div_i(m, 128)) * ceil_div_i(n, 128) >=
                    static_cast<int64_t>(kWarpPackedFullWaves) * 2 * num_sms;
  Plan best{kWarpPacked128x128, 1};
  double best_us = -1.0;
  for (const WarpPackedCost& c : kWarpPackedCosts) {
    if (full && c.kernel != kWarpPacked128x128) continue;
    const int64_t chunks = (k / M * N + c.wb - 1) / c.wb;
    for (const int split : kSplitCandidates) {
      if (split > 1 && chunks / split < 4) break;
      const double us = warp_packed_cost_us(c, m, n, k, N, M, split, num_sms, clusters);
      if (best_us < 0 || us < best_us) {
        best_us = us;
        best = {c.kernel, split};
      }
    }
  }
  if (cost_us != nullptr) *cost_us = best_us;
  return best;
}

// The warp-specialized kernel (sm_90; spmm_producer.cuh): 128x256 tiles, one block per SM,
// a k-stage costs f * (a * kb / 32 + b * wb) microseconds, whatever the grid (one block per SM runs
// alone), so a plan costs stages * R * f * (a * kb / 32 + b * wb) + its workspace reduction (R: the
// grid's rounds; f: producer_shape's stage factor). The constants are those of the tiled 128x128
// kernel's model scaled by what it measures kernel-only on the same data (0.93-0.95x the tiled
// 128x128 kernel's time at 16:32 / 12:32 / 8:32, 0.88-0.92x at 4:32 with k-blocks of 64,
// m = 512-4096), then checked against the op in an A/B (NMSPMM_NO_PRODUCER=1 against the default);
// f carries the longer stages at 8:32 and 4:32.
constexpr double kProducerStageUs = 0.110;
constexpr double kProducerRowUs = 0.158;
inline double producer_cost_us(int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int split, int num_sms) {
  const ProducerShape s = producer_shape(N, M);
  const int64_t ctas = static_cast<int64_t>(ceil_div_i(m, 128)) * ceil_div_i(n, 256) * split;
  const GridRounds g = grid_rounds(ctas, num_sms, 1);
  const int64_t stages = (ceil_div_i(k, s.kb) + split - 1) / split;
  const double per_stage = s.stage_factor * (kProducerStageUs * (s.kb / 32) + kProducerRowUs * s.wb);
  return static_cast<double>(stages) * g.rounds * per_stage + split_reduction_us(kProducer128x256, split, m, n, true);
}

// The tail variant: the warp-specialized kernel with split-K on the tail only. A grid of t = ceil(m / 128) x ceil(n / 256)
// tiles, one block per SM, runs floor(t / SMs) whole rounds and a last round of t % SMs tiles, which
// leaves SMs idle for a whole tile's time (2048x11008x4096: 688 tiles, 5 rounds of 132 and one of
// 28). The tail variant computes the first t - t % SMs tiles over all of k (as with split 1) and
// splits k of the last t % SMs tiles (the tail) split_k ways: the tail's blocks start as the whole
// rounds' blocks finish and each runs 1 / split_k of the k-range. Their partial tiles go to a compact
// workspace [split_k][tail][128][256], summed in fixed order (+ bias) by a second launch. Tiles are
// numbered m-tile fastest (the order of the plain kernel's grid), so the tail is the last n-tiles' columns.
inline int64_t producer_tail_tiles(int64_t m, int64_t n, int num_sms) {
  const int64_t tiles = static_cast<int64_t>(ceil_div_i(m, 128)) * ceil_div_i(n, 256);
  return num_sms > 0 ? tiles % num_sms : tiles;
}
// Floats of the tail variant's workspace (0 without a split or without a tail).
inline int64_t producer_tail_workspace_floats(int64_t m, int64_t n, int split, int num_sms) {
  return split > 1 ? producer_tail_tiles(m, n, num_sms) * split * 128 * 256 : 0;
}
// Its cost under the warp-specialized kernel's model: the whole rounds at full k, the tail's round(s) at 1 / split of
// it, and the workspace reduction of the tail's partial tiles.
inline double producer_tail_cost_us(int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int split,
                                    int num_sms) {
  const ProducerShape s = producer_shape(N, M);
  const int64_t tiles = static_cast<int64_t>(ceil_div_i(m, 128)) * ceil_div_i(n, 256);
  const int64_t tail = producer_tail_tiles(m, n, num_sms);
  const double whole_rounds = static_cast<double>((tiles - tail) / (num_sms > 0 ? num_sms : 1));
  const int64_t kblocks = ceil_div_i(k, s.kb);
  const double per_stage = s.stage_factor * (kProducerStageUs * (s.kb / 32) + kProducerRowUs * s.wb);
  double us = whole_rounds * static_cast<double>(kblocks) * per_stage;
  if (tail > 0) {
    const int sp = split > 1 ? split : 1;
    const GridRounds g = grid_rounds(tail * sp, num_sms, 1);
    us += g.rounds * static_cast<double>((kblocks + sp - 1) / sp) * per_stage;
    if (sp > 1) us += kWorkspaceReduceUs + 0.900 * static_cast<double>(sp + 1) * tail * 128 * 256 * 4 / 1.0e6;
  }
  return us;
}

// Blocks of 8 warps per SM (x 10) that a decode grid stays within: 2 fit by registers, but a
// cluster must fit inside one GPC, and on H100 (132 SMs) 224 blocks of 8 warps (32 clusters of 7)
// run in one wave where 32 clusters of 8 run two (ncu).
constexpr int64_t kDecodeBlocksPerSm10 = 17;

// The staged decode kernel's tile and cluster size: among the three tiles (512, 256, 128 columns:
// 4, 2, 1 column warps of the 8) and the cluster sizes S in 1..8 (k split over S blocks, at most
// one per window), the plan with the most blocks within 1.7 per SM, the widest tile on a tie. On
// an H100 sweep (6 Llama shapes x 4 sparsities x m = 4, 8, 16, cluster sizes 1..8) the pick is
// 0.4 / 0.1 / 0.0% above the best plan on geomean at m = 4 / 8 / 16 (worst point 1.03x); a fixed
// S = 8 with about one block per SM is 4.0 / 11.0 / 13.2% above.
inline Plan staged_decode_plan(int64_t n, int64_t k, int64_t M, int num_sms) {
  const int64_t windows = k / M;
  const int64_t max_split = windows < 1 ? 1 : windows < 8 ? windows : 8;
  const int64_t cap = static_cast<int64_t>(num_sms) * kDecodeBlocksPerSm10 / 10;  // blocks
  int best_cw = 4, best_split = 1;
  int64_t best_blocks = 0;
  for (int cw = 4; cw >= 1; cw /= 2) {
    const int64_t tiles = ceil_div_i(n, 128 * cw);
    int64_t split = max_split;
    while (split > 1 && tiles * split > cap) --split;
    if (tiles * split <= cap && tiles * split > best_blocks) {
      best_blocks = tiles * split;
      best_cw = cw;
      best_split = static_cast<int>(split);
    }
  }
  const int kernel = best_cw == 4 ? kDecodeStaged512 : best_cw == 2 ? kDecodeStaged256 : kDecodeStaged128;
  return {kernel, best_split};
}

// A narrow layer's staged decode plan splits k over clusters of 16 blocks where each block still
// walks at least this many compressed rows, 6 per warp (choose_staged_decode).
constexpr int64_t kStagedWideClusterMinRows = 48;

// Decode (3 <= m <= 16) on sm_90: the staged decode kernel, or {-1, 0} where it cannot run (M >
// 512). See staged_decode_plan. A narrow layer, whose 128-column tiles x 16 fill at most one block
// per SM (up to 1024 columns on H100), instead splits k over clusters of 16 blocks (non-portable;
// where max_cluster allows it) if each block keeps at least kStagedWideClusterMinRows compressed
// rows. H100 sweeps (cluster sizes 1..16, CUDA graphs): on 5 narrow layers (256..1024 columns) x 4
// sparsities x m = 3, 4, 8, 16 the pick is 2.6% above the best plan on geomean (worst 1.24x),
// clusters of at most 8 21% (worst 1.52x); Llama-3-8B k/v (1024x4096) at m = 8 / 16 runs 1.15 /
// 1.14x faster at 16:32 (9.06 -> 7.89 us at m = 8). With fewer rows per block (1024x4096 4:32:
// 32) clusters of 16 measured slower (4.71 against 4.07 us at m = 8). On the 4096-column and
// wider Llama layers clusters above 8 ran slower than the plan above (up to 1.5x: they do not fit
// the GPCs in one wave), and the rule leaves those plans unchanged.
inline Plan choose_staged_decode(int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int num_sms,
                                 int max_cluster = 16) {
  if (m < 3 || m > 16 || M > 512) return {-1, 0};
  const Plan plan = staged_decode_plan(n, k, M, num_sms);
  const int64_t windows = k / M;
  if (max_cluster >= 16 && plan.kernel == kDecodeStaged128 && ceil_div_i(n, 128) * 16 <= num_sms &&
      windows / 16 * N >= kStagedWideClusterMinRows)
    return {kDecodeStaged128, 16};
  return plan;
}

// A warp of a cluster decode kernel that walks more compressed rows than this goes without
// programmatic dependent launch (decode_plan_overlaps_launch, below).
constexpr int64_t kOverlapMaxRowsPerWarp = 64;

// Whether a decode plan on sm_90 is launched with programmatic dependent launch (the kernel starts
// while the kernel before it in the stream runs and issues its first weight loads before it waits
// for it; spmm_decode_cluster.cu / spmm_decode_staged.cu). What that overlaps is the call's fixed
// cost (launch, first loads, the tail of the kernel before), so it pays where the weight stream is
// short. Measured on H100 (6 Llama shapes x 4 sparsities, CUDA graphs
// of back-to-back calls): the staged kernels 1.00-1.42x faster at m = 8, 16 (every point within
// noise or better); the m <= 2 cluster kernels 1.0-1.74x where each warp walks at most 64
// compressed rows (4 batches), but 0.86-0.97x on long k-ranges with clusters of 8 (4096x14336 16:32:
// 44.8 -> 52.5 us), so those go in plain stream order.
inline bool decode_plan_overlaps_launch(const Plan& plan, int64_t k, int64_t N, int64_t M) {
  if (is_staged_decode_kernel(plan.kernel)) return true;
  if (!is_cluster_decode_kernel(plan.kernel) || plan.split_k < 1) return false;
  const int64_t windows_per_block = (k / M + plan.split_k - 1) / plan.split_k;
  const int64_t rows_per_warp = (windows_per_block * N + cluster_decode_warps(plan.kernel) - 1) /
                                cluster_decode_warps(plan.kernel);
  return rows_per_warp <= kOverlapMaxRowsPerWarp;
}

// Decode (m <= 2) on sm_90. Each 128-column tile gets P = W x S warps along k (W warps per block,
// clusters of S blocks). Candidates: narrow blocks, W = 4 at m = 1 (S up to 16 on layers of at most
// 16 tiles, 12 up to 32 tiles, else 8, and at most max_cluster: 16 where the device places clusters
// of 16) and W = 8 at m = 2 (S up to 8), and 16-warp blocks (S up to 8), each within
//   - a grid of 1.7 blocks of 8 warps per SM (as the staged kernel),
//   - for 16-warp blocks (one per SM), 0.75 blocks per SM: a grid of 16 tiles x clusters of 7 or 8
//     ran 1.4-1.7x slower than clusters of 6 (the clusters do not fit the GPCs in one wave),
//   - a useful run of rows per warp: >= 14 (W = 4) / 12 (W = 8, 16).
// The pick has the most warps per tile, a 16-warp plan counting 0.7 of its warps (it is taken only
// with > 1.43x the warps of the best narrow plan); narrow on a tie. Where its warps would walk more
// than kOverlapMaxRowsPerWarp rows (no dependent launch, decode_plan_overlaps_launch) the staged
// kernel's plan is taken instead. Fitted to an H100 sweep (m = 1, 2; 13 Llama shapes x 4
// sparsities, every cluster plan with S = 1..16 and every staged plan, CUDA graphs of back-to-back
// calls): the pick is 1.4 / 4.1% above the best plan on geomean at m = 1 / 2 (worst point 1.13 /
// 1.16x); an independent re-run gives the same within 0.1%.
constexpr int kClusterDecodeW16Weight10 = 7;
inline Plan choose_cluster_decode(int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int num_sms,
                                  int max_cluster = 16) {
  const int64_t tiles = ceil_div_i(n, 128);
  const int64_t rows = k / M * N;
  const int64_t max_warps = static_cast<int64_t>(num_sms) * kDecodeBlocksPerSm10 / 10 * 8;
  const int64_t max_w16_blocks = static_cast<int64_t>(num_sms) * 3 / 4;
  const int narrow = m <= 1 ? 4 : 8;
  const int narrow_max_s = m <= 1 ? std::clamp(max_cluster, 1, tiles <= 16 ? 16 : tiles <= 32 ? 12 : 8) : 8;
  int best_w = narrow, best_s = 1;
  int64_t best_score = 0;
  for (const int w : {narrow, 16}) {
    const int64_t min_rows = w == 4 ? 14 : 12;
    const int max_s = w == 16 ? 8 : narrow_max_s;
    for (int s = 1; s <= max_s; ++s) {
      const int64_t p = static_cast<int64_t>(w) * s;
      if (tiles * p > max_warps || (w == 16 && tiles * s > max_w16_blocks) || rows < p * min_rows) continue;
      const int64_t score = p * (w == 16 ? kClusterDecodeW16Weight10 : 10);
      if (score > best_score) {
        best_w = w;
        best_s = s;
        best_score = score;
      }
    }
  }
  const Plan plan{best_w == 4 ? kDecodeW4 : best_w == 8 ? kDecodeW8 : kDecodeW16, best_s};
  if (!decode_plan_overlaps_launch(plan, k, N, M) && M <= 512) return staged_decode_plan(n, k, M, num_sms);
  return plan;
}

// NMSPMM_NO_PRODUCER=1 (read once) keeps the warp-specialized kernels out of choose_plan's
// candidates, in the binding and in spmm_heuristic alike: an A/B switch, not a tuning knob
// (spmm_with_plan still runs the kernel).
inline bool producer_plans_enabled() {
  static const bool enabled = [] {
    const char* e = std::getenv("NMSPMM_NO_PRODUCER");
    return e == nullptr || e[0] != '1';
  }();
  return enabled;
}

// clusters: the device has thread-block clusters (compute capability >= 9.0; also what the
// warp-specialized kernel needs). max_cluster: the largest cluster of the decode kernels the device
// places (16 on H100 / H200; 8 is always portable).
inline Plan choose_plan(int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int64_t L,
                        bool has_col_info, int num_sms, bool clusters = true, int max_cluster = 16) {
  if (num_sms <= 0) num_sms = 132;
  if (L < 4 || (L < 16 && m > 16)) return {kGeneric, 1};
  if (m <= kClusterDecodeMaxM && clusters) return choose_cluster_decode(m, n, k, N, M, num_sms, max_cluster);
  if (m <= 16) {
    if (clusters) {
      const Plan staged = choose_staged_decode(m, n, k, N, M, num_sms, max_cluster);
      if (staged.kernel >= 0) return staged;
    }
    // Decode: enough blocks to keep every SM streaming the weight.
    const int col_blocks = ceil_div_i(n, 128);
    const int64_t w = k / M * N;
    int split = 1;
    while (col_blocks * split < 4 * num_sms && split < 64 && w / (split * 2) >= 32) split *= 2;
    return {kDecode, split};
  }
  const double sparsity = 1.0 - static_cast<double>(N) / static_cast<double>(M);
  const bool packing = kHeuristicUsesPacking && has_col_info && sparsity >= 0.80;
  Plan best{kTiled64x128, 1};
  double best_us = -1.0;
  for (const TiledCost& c : kTiledCosts) {
    if (is_packed_kernel(c.kernel) && !packing) continue;
    if (M > c.max_M || !kernel_supports(c.kernel, m, N, M, L, has_col_info)) continue;
    const int64_t kblocks = ceil_div_i(k, (is_packed_kernel(c.kernel) || M > 32) ? 64 : 32);
    const TileShape t = tile_shape(c.kernel);
    for (const int split : kSplitCandidates) {
      // Each split keeps a useful k-extent (at least 4 k-blocks).
      if (split > 1 && kblocks / split < 4) break;
      // The 8-warp 128x128 kernel (8x8 thread tile) only pays while its grid is under one block
      // per SM (8 warps hide latency that 4 cannot); with more blocks the 16x8-thread-tile kernel
      // is faster, which the cost model alone misranks (on an H100 plan sweep, with the rule at two
      // blocks per SM the picks are 4.2% above the best plan, at one block 3.4%; 12:32 6.8% -> 4.7%).
      const int64_t ctas = static_cast<int64_t>(ceil_div_i(m, t.bm)) * ceil_div_i(n, t.bn) * split;
      if (c.kernel == kTiled128x128w8 && ctas >= static_cast<int64_t>(num_sms)) continue;
      const double us = tiled_cost_us(c, m, n, k, N, M, split, num_sms, clusters);
      if (best_us < 0 || us < best_us) {
        best_us = us;
        best = {c.kernel, split};
      }
    }
  }
  if (warp_packed_candidates(m, n, k, N, M, L)) {  // both families priced by one model; the tiled plan on a tie
    double wp_us = -1.0;
    const Plan wp = choose_warp_packed(m, n, k, N, M, num_sms, clusters, &wp_us);
    if (best_us < 0 || wp_us < best_us) {
      best = wp;
      best_us = wp_us;
    }
  }
  if (clusters && producer_plans_enabled() && kernel_supports(kProducer128x256, m, N, M, L, has_col_info)) {
    const int64_t kblocks = ceil_div_i(k, producer_shape(N, M).kb);
    for (const int split : kSplitCandidates) {
      if (split > 1 && kblocks / split < 4) break;
      const double us = producer_cost_us(m, n, k, N, M, split, num_sms);
      if (best_us < 0 || us < best_us) {
        best_us = us;
        best = {kProducer128x256, split};
      }
    }
    // The tail variant where the grid has more than one round and a partial last one.
    const int64_t tiles = static_cast<int64_t>(ceil_div_i(m, 128)) * ceil_div_i(n, 256);
    if (tiles > num_sms && producer_tail_tiles(m, n, num_sms) > 0) {
      for (const int split : kSplitCandidates) {
        if (split == 1) continue;
        if (kblocks / split < 4) break;
        const double us = producer_tail_cost_us(m, n, k, N, M, split, num_sms);
        if (us < best_us) {
          best_us = us;
          best = {kProducerTail128x256, split};
        }
      }
    }
  }
  return best;
}

}  // namespace nmspmm
