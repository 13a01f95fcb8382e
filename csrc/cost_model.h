// The cost model: estimated microseconds of a (kernel, split-K) plan on a problem, one scale for
// every family, so that the policy (policy.h) can compare the candidates the registry (registry.h)
// yields for a call and take the least. The prefill families' costs are fitted to flushed H100
// timings (docs/kernels.md); the cross-family terms at the end (dense expansion, generic, decode
// streams, upcasts, fixed launch costs) are coarse H100-class constants, refit from the measured
// plan table (benchmarks/plan_table.py, tests/test_policy_table.py). Torch-free and CUDA-free.
#pragma once
#include <cmath>
#include <cstdint>

#include "cuda/kernels/half/expand_mma_geometry.h"
#include "cuda/kernels/half/expand_wgmma_geometry.h"
#include "cuda/kernels/half/gather_wgmma_geometry.h"
#include "cuda/kernels/half/tc_prefill_stage.h"
#include "registry.h"

namespace nmspmm {

struct Plan {
  Kernel kernel;
  int split_k;
};

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
  Kernel kernel;
  int blocks_per_sm;
  double alpha, beta, gamma, delta;
  int max_M;  // largest M the kernel takes (k-block 32 only: 32)
};
constexpr TiledCost kTiledCosts[] = {
    {Kernel::kTiledF32_128x256, 1, 0.4257, 0.1552, 0.0, 0.0, 32},
    {Kernel::kTiledF32_256x128, 1, 0.3458, 0.1699, 0.0, 0.0, 32},
    {Kernel::kTiledF32_128x128W8, 2, 0.1817, 0.0446, 0.1817, 0.0446, 64},
    {Kernel::kTiledF32_128x128, 2, -0.2049, 0.1091, 0.1602, 0.0299, 64},
    {Kernel::kTiledF32_64x128, 2, 0.4085, 0.0193, -0.0674, 0.0324, 64},
    {Kernel::kTiledF32_32x128, 4, 0.1554, 0.0244, 0.0148, 0.0174, 64},
    {Kernel::kTiledF32_64x64, 4, 0.7159, 0.0016, -0.0838, 0.0186, 64},
};

// The tiled kernels at L = 16 measure 1.15-1.34x their model's estimate on geomean per tile (H200
// plan table, fp32 and bf16 upcast cells), against 0.88-1.04x at L = 32 and 64.
constexpr double kTiledL16Factor = 1.25;

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
inline double split_reduction_us(Kernel kernel, int split, int64_t m, int64_t n, bool clusters) {
  if (split <= 1) return 0.0;
  const double fixed = plan_reduces_in_cluster(kernel, split, clusters) ? kClusterReduceUs : kWorkspaceReduceUs;
  return fixed + 0.900 * static_cast<double>(split + 1) * m * n * 4 / 1.0e6;
}

// Estimated microseconds of a tiled kernel with `split` k-splits (plus the split-K reduction,
// in a cluster when `clusters`, else through the workspace and a second launch).
inline double tiled_cost_us(const TiledCost& c, int64_t m, int64_t n, int64_t k, int64_t N,
                            int64_t M, int split, int num_sms, bool clusters = false) {
  const int64_t kblock = M > 32 ? 64 : 32;
  const double scale = kblock == 64 ? 2.0 : 1.0;
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
  Kernel kernel;
  int blocks_per_sm;  // by registers and shared memory (spmm_warp_packed.cuh)
  int wb;             // compressed rows per stage
  double a, g, b;
};
constexpr WarpPackedCost kWarpPackedCosts[] = {
    {Kernel::kWarpPackedF32_128x128, 2, 12, 0.8659, 0.6675, -2.0652},
    {Kernel::kWarpPackedF32_64x128, 3, 16, 0.7155, 0.4969, -1.5717},
    {Kernel::kWarpPackedF32_32x128, 4, 16, 0.6216, 0.2785, -1.7242},
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
  Plan best{Kernel::kWarpPackedF32_128x128, 1};
  double best_us = -1.0;
  for (const WarpPackedCost& c : kWarpPackedCosts) {
    if (full && c.kernel != Kernel::kWarpPackedF32_128x128) continue;
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
  return static_cast<double>(stages) * g.rounds * per_stage + split_reduction_us(Kernel::kProducerF32_128x256, split, m, n, true);
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

// ---- fp16 / bf16 prefill (docs/kernels.md, "Half-precision prefill"; fitted to H100 timings) ----

// Time of the tensor-core prefill kernel (128 tokens x 256 outputs per block) with `split` k-splits,
// by its grid: waves x (stages x (0.435 + 0.31 x 16-slot steps per stage) + 1.65) us (the kernel's
// own stages, tc_prefill_stage.h), and for split > 1 the fp32 partials' write and read (0.69 us per
// MB) plus 1.6 us. Fitted on H100 (bf16, warp-specialized form, every split of the 216 cells of the
// 100 points under two waves: median error 3.7%).
inline double half_prefill_wave_us(int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int64_t L, int num_sms,
                                   int split) {
  const int64_t sms = num_sms > 0 ? num_sms : 132;
  const int64_t tiles = (n + 255) / 256 * ((m + 127) / 128);
  const int64_t G = M > 0 ? k / M : 0;
  const int64_t ws = kernels::tc_prefill::choose_ws(256, static_cast<int>(N), static_cast<int>(M), static_cast<int>(L), G,
                                                   kernels::tc_prefill::kMaxSlotsPerStage);
  const int64_t ksteps = (ws * N + 15) / 16;
  const int64_t stages = ws > 0 ? (G + ws - 1) / ws : 0;
  const double stage_us = 0.435 + 0.31 * static_cast<double>(ksteps);
  const int64_t waves = (tiles * split + sms - 1) / sms;
  double us = static_cast<double>(waves) * (static_cast<double>((stages + split - 1) / split) * stage_us + 1.65);
  if (split > 1) us += 1.6 + 0.69 * static_cast<double>(split) * static_cast<double>(m) * static_cast<double>(n) * 4.0 / 1.0e6;
  return us;
}

// Split-K of the tensor-core prefill kernel: none once the grid covers two waves; else the split
// (at most 4, each with >= 4 stages) of least half_prefill_wave_us. Its picks are 1.9% above the
// best split on geomean, where the wave-utilization rule it replaces was 12% above (2.5x at
// 1024 x 5632 x 2048: three splits of fp32 partials cost more than the idle SMs).
inline int half_prefill_split(int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int64_t L, int num_sms) {
  const int64_t sms = num_sms > 0 ? num_sms : 132;
  const int64_t tiles = (n + 255) / 256 * ((m + 127) / 128);
  if (tiles >= 2 * sms) return 1;
  const int64_t G = M > 0 ? k / M : 0;
  const int64_t ws = kernels::tc_prefill::choose_ws(256, static_cast<int>(N), static_cast<int>(M), static_cast<int>(L), G,
                                                   kernels::tc_prefill::kMaxSlotsPerStage);
  const int64_t stages = (G + ws - 1) / ws;
  int best = 1;
  double best_us = 0.0;
  for (int split = 1; split <= 4; ++split) {
    if (split > 1 && stages / split < 4) break;
    const double us = half_prefill_wave_us(m, n, k, N, M, L, num_sms, split);
    if (split == 1 || us < best_us) {
      best = split;
      best_us = us;
    }
  }
  return best;
}

// ---- Costs on one scale for the comparison between families (microseconds, H100-class) ----

// A plan and its estimated time; plan.kernel == Kernel::kNone: the family has no plan for the call.
struct PlanCost {
  Plan plan;
  double us;
};
constexpr PlanCost kNoPlan{{Kernel::kNone, 1}, 0.0};

inline int64_t dtype_bytes(DType t) { return t == DType::kF32 ? 4 : 2; }

// Device rates. HBM: what a plain stream of reads and writes reaches (H100 SXM: 3.35 TB/s peak).
// cuBLAS: bf16 / fp16 at the rate fitted with the gathered kernel's model (855 TFLOP/s, 100 points,
// m >= 256); fp32 with TF32 off at 50 TFLOP/s (4096^3: 50.5, README). With TF32 on (F.linear's
// setting, which dense_expand_f32 follows) cuBLAS runs faster than this estimate, so the fp32
// expansion is then under-used, never over-used.
constexpr double kHbmBytesPerUs = 3.0e6;
constexpr double kDenseHalfFlopsPerUs = 855e6;
constexpr double kDenseF32FlopsPerUs = 50e6;
// One more kernel launch in a stream of back-to-back calls.
constexpr double kLaunchUs = 2.5;

// Bytes of the compressed weight in a dtype of `elem` bytes: values [w, n] and uint8 indices
// [w, n / L], w = k N / M.
inline double compressed_bytes(int64_t n, int64_t k, int64_t N, int64_t M, int64_t L, int64_t elem) {
  const double w = M > 0 ? static_cast<double>(k / M * N) : 0.0;
  return w * static_cast<double>(n) * static_cast<double>(elem) + w * static_cast<double>(L > 0 ? n / L : 0);
}

// The 2:4 metadata words (tc_meta, docs/format.md): ceil(k / 32) rows of round_up(n / L, 4) words.
inline double sparse_tc_meta_bytes(int64_t n, int64_t k, int64_t L) {
  return 4.0 * static_cast<double>((k + 31) / 32) * static_cast<double>(L > 0 ? (n / L + 3) / 4 * 4 : 0);
}

// The canonical indices of a compact 2:4 weight rebuilt for a plan that reads them
// (indices_from_tc_meta, checks.h: an arange and three elementwise passes, shift, mask, transpose):
// 5 us + 6 bytes per index at 1.25 TB/s, within 10% of CUDA-graph times on an H200 (6.5-148 us,
// 0.26-29 MB of indices, the Llama layers at L = 1 and 32).
constexpr double kIndicesRebuildFixedUs = 5.0;
constexpr double kIndicesRebuildBytesPerUs = 1.25e6;
inline double indices_rebuild_us(int64_t n, int64_t k, int64_t L) {
  const double bytes = 6.0 * static_cast<double>(k / 2) * static_cast<double>(L > 0 ? n / L : 0);
  return kIndicesRebuildFixedUs + bytes / kIndicesRebuildBytesPerUs;
}

// The fp32 fallback of a 16-bit call: values and x converted to fp32 (2 bytes read, 4 written per
// element) and y converted back, three elementwise launches at HBM rate.
inline double upcast_cost_us(int64_t m, int64_t n, int64_t k, int64_t N, int64_t M) {
  const double w = M > 0 ? static_cast<double>(k / M * N) : 0.0;
  const double elems = w * static_cast<double>(n) + static_cast<double>(m) * static_cast<double>(k) +
                       static_cast<double>(m) * static_cast<double>(n);
  return 3 * kLaunchUs + elems * 6.0 / kHbmBytesPerUs;
}

// cuBLAS on a dense weight [n, k] (elem bytes per element): the larger of its math at the dtype's
// rate and its bytes (weight, x, y) at HBM rate.
inline double dense_gemm_us(int64_t m, int64_t n, int64_t k, int64_t elem) {
  const double mm = static_cast<double>(m), nn = static_cast<double>(n), kk = static_cast<double>(k);
  const double flops = 2.0 * mm * nn * kk;
  const double rate = elem == 4 ? kDenseF32FlopsPerUs : kDenseHalfFlopsPerUs;
  const double bytes = (nn * kk + mm * kk + mm * nn) * static_cast<double>(elem);
  return flops / rate > bytes / kHbmBytesPerUs ? flops / rate : bytes / kHbmBytesPerUs;
}

// cuBLAS in 16 bits as the plan table measures it (a CUDA graph of calls): 4 us + the larger of its
// math at 800 TFLOP/s and its bytes (weight, x, y) at 4.0 TB/s. On the H200 table's cuBLAS times
// (bf16 and fp16, 1,728 cells): estimate / measured median 1.03, 10-90%: 0.90-1.13.
constexpr double kCublasHalfFixedUs = 4.0;
constexpr double kCublasHalfFlopsPerUs = 800e6;
constexpr double kCublasHalfBytesPerUs = 4.0e6;
inline double cublas_half_us(int64_t m, int64_t n, int64_t k) {
  const double mm = static_cast<double>(m), nn = static_cast<double>(n), kk = static_cast<double>(k);
  const double math = 2.0 * mm * nn * kk / kCublasHalfFlopsPerUs;
  const double bytes = 2.0 * (nn * kk + mm * kk + mm * nn) / kCublasHalfBytesPerUs;
  return kCublasHalfFixedUs + (math > bytes ? math : bytes);
}

// dense_expand_*: the expansion reads the compressed weight and writes the dense one at an
// effective 2.4 TB/s, then cuBLAS, and the launches (expansion, GEMM, the non-finite row check):
// fp32 kDenseExpandFixedUs + dense_gemm_us, 16 bits kDenseExpandHalfFixedUs + cublas_half_us.
// Fitted on an H200 (bf16 and fp32; 16:32, 8:32, 4:32, 2:4 x L = 1, 8 x the six Llama layers x
// m = 64, 256, 1024): estimate / measured median 1.03 (bf16) and 1.01 (fp32).
constexpr double kExpandBytesPerUs = 2.4e6;
constexpr double kDenseExpandFixedUs = 7.5;
constexpr double kDenseExpandHalfFixedUs = 6.0;
inline double dense_expand_cost_us(int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int64_t L, int64_t elem) {
  const double dense = static_cast<double>(n) * static_cast<double>(k) * static_cast<double>(elem);
  const double expand = (compressed_bytes(n, k, N, M, L, elem) + dense) / kExpandBytesPerUs;
  if (elem == 2) return kDenseExpandHalfFixedUs + expand + cublas_half_us(m, n, k);
  return kDenseExpandFixedUs + expand + dense_gemm_us(m, n, k, elem);
}

// tc_prefill_*: the larger of two fitted estimates, plus the x transpose's launch.
//  * Math: the warp-specialized form (sm_90, L >= 32) fitted as flops * (d + 0.2) / 387 TFLOP/s
//    (d = N / M; 100 points at 16 / 12 / 8 / 4 of 32, H100 bf16, 6.5% median error, the fit the
//    choice against the expansion was made with: its picks lose 1.5-2.2% to the best path on
//    geomean at m >= 1024); the cp.async form at a useful 50 + 180 d TFLOP/s.
//  * Grid: half_prefill_wave_us at the plan's split (small m, where a grid of under two waves of
//    128-token tiles costs what a full tile does whatever m); the cp.async form runs its stages
//    kTcPrefillCpAsyncFactor times slower (1.8-2.1x at m >= 2048, docs/kernels.md).
// At L = 16 (cp.async form; a warp's 32 outputs span two vectors and two gathers) the kernel runs
// kTcPrefillL16Factor slower than the L = 32 model says: H200, 4096^2 8:32 L = 16, m = 1024
// measured 0.40x cuBLAS where the model predicted 0.58x.
constexpr double kTcPrefillFixedUs = 2.0;
constexpr double kTcPrefillCpAsyncFactor = 1.9;
constexpr double kTcPrefillL16Factor = 1.45;
inline double tc_prefill_cost_us(int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int64_t L, int split,
                                 int num_sms, bool warp_specialized) {
  const double d = static_cast<double>(N) / static_cast<double>(M);
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const double wave = half_prefill_wave_us(m, n, k, N, M, L, num_sms, split);
  double us;
  if (warp_specialized) {
    const double math = flops * (d + 0.2) / 387e6;
    us = math > wave ? math : wave;
  } else {
    const double math = flops * d / ((50.0 + 180.0 * d) * 1e6);
    const double grid = wave * kTcPrefillCpAsyncFactor;
    us = math > grid ? math : grid;
    if (L < 32) us *= kTcPrefillL16Factor;
  }
  return kTcPrefillFixedUs + us;
}

// Decode (the weight streamed once, m <= 16 fp32 / <= 64 fp16 and bf16), at m = 1: a fixed cost
// (launch, first loads, the split-K sum) and the compressed bytes at the rate the kernel reaches.
// fp32 cluster / staged / L >= 4 split-K kernels: H100, 1.4-1.8 TB/s at 16:32 (the split-K kernel
// 1.10-1.36x slower than the staged ones); within the decode families the fitted plan rules choose
// (policy.h), these costs only set them against the other families. decode_tc and the split-K
// kernel of spmm_decode_splitk.cuh (16-bit, or fp32 at L < 4): least squares on the H200 plan table
// (benchmarks/results/h200/plan_table.csv, m = 1; median error 10% / 3% fp32 / 8% 16-bit); decode_tc's
// m-range is the measured half_decode_preferred rule, its time taken as m = 1's within it.
constexpr double kDecodeFixedUs = 4.0;
constexpr double kDecodeF32BytesPerUs = 1.8e6;
constexpr double kDecodeF32SplitKFactor = 1.2;
struct DecodeRate {
  double fixed_us, bytes_per_us;
};
constexpr DecodeRate kDecodeTcRate{3.37, 2.88e6};
// decode_tc's short vectors (L = 8, 4: 2 or 4 gathers and products per 16-column tile): the streaming
// part of the time, relative to L >= 16's, at m <= 8 (one 8-token tile) and m = 9..16 (two). Fitted
// to the picks of the H200 plan table's 240 short-vector cells (bf16, L = 4, 8 x m = 1..16 x four
// patterns x six Llama layers): geomean pick / best measured plan 1.008, 9 cells above 1.1x
// (tests/test_policy_table.py).
inline double decode_tc_short_factor(int64_t L, int64_t m) {
  if (L >= 16) return 1.0;
  return L >= 8 ? (m > 8 ? 1.85 * 1.05 : 1.85) : (m > 8 ? 2.9 * 1.6 : 2.9);
}
// 2:4 decode on the sparse tensor cores (values and tc_meta words): least squares on the H200 plan
// table's 2:4 cells (bf16 and fp16, every L, the six Llama layers at their plans): m = 1..8 (one
// 8-token tile) fixed 2.6 us + bytes at 3.6 TB/s (0.82-1.5x, median 1.0); m = 9..16 (two tiles) the
// bytes' time 1.3x (0.3-4 us more, from 1024 x 4096 to 14336 x 4096).
constexpr DecodeRate kDecodeSparseTcRate{2.6, 3.6e6};
constexpr double kDecodeSparseTcTwoTiles = 1.3;
// decode_tc's kept-rows block beyond m = 16 (m up to 64 on weights below 2^25 elements): every
// vector gathers the kept rows of x for each token, which the streaming rate does not see. Least
// squares on the H200 plan table's m = 64 cells of that block (11; within 10% of the time): 3.36 us
// plus 1.66 us per million (token, vector, kept input) triples.
inline double decode_tc_kept_gather_us(int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int64_t L) {
  const double triples = static_cast<double>(m) * static_cast<double>(n / L) * static_cast<double>(k / M * N);
  return 3.36 + 1.66 * triples * 1e-6;
}
constexpr DecodeRate kDecodeSplitKF32Rate{6.49, 3.85e6};
constexpr DecodeRate kDecodeSplitKHalfRate{6.76, 3.18e6};
inline double decode_cost_us(Kernel kernel, int64_t n, int64_t k, int64_t N, int64_t M, int64_t L) {
  const KernelInfo& info = kernel_info(kernel);
  const double bytes = compressed_bytes(n, k, N, M, L, dtype_bytes(info.dtype));
  if (info.family == Family::kDecodeSplitK && info.dtype != DType::kF32)
    return kDecodeSplitKHalfRate.fixed_us + bytes / kDecodeSplitKHalfRate.bytes_per_us;
  if (info.family == Family::kDecodeSplitK && L < 4)
    return kDecodeSplitKF32Rate.fixed_us + bytes / kDecodeSplitKF32Rate.bytes_per_us;
  if (info.family == Family::kDecodeTc) return kDecodeTcRate.fixed_us + bytes / kDecodeTcRate.bytes_per_us;
  if (info.family == Family::kDecodeSparseTc)  // values and the 2:4 metadata words (at m = 1)
    return kDecodeSparseTcRate.fixed_us + (bytes - compressed_bytes(n, k, N, M, L, 0) + sparse_tc_meta_bytes(n, k, L)) /
                                              kDecodeSparseTcRate.bytes_per_us;
  const double factor = info.family == Family::kDecodeSplitK ? kDecodeF32SplitKFactor : 1.0;
  return kDecodeFixedUs + factor * bytes / kDecodeF32BytesPerUs;
}

// What m rows of x add to a decode call beyond m = 1: c_wn x (w n) + c_kn x (k n) + c_sn x (split n),
// in us per million: w n the compressed row-columns (a shared-memory read of x each, per index at
// L < 4), k n the staging of x by every column block, split n the split-K partial sums written and
// reduced. Coefficients at m = 2, 4, 8, 16 (linear in m between, 0 at m = 1, held above 16),
// least squares on the H200 plan table per kernel and vector-length class (median error 2-12 us of
// the added time at m = 16; the fit is of that table's six Llama layers). The 16-bit kernels' m = 8
// (L < 4) and m = 16 points are those of their shuffle lookup (spmm_decode_splitk.cuh; median error
// 2-4% of the time).
struct DecodeRowsFit {
  double wn[5], kn[5], sn[5];
  int64_t m[5] = {2, 4, 8, 16, 64};
};
constexpr DecodeRowsFit kSplitKF32L1{{-0.029, -0.192, 0.298, 2.960, 2.960}, {0.014, 0.102, 0.342, 1.015, 1.015},
                                     {8.12, 17.25, 25.19, 42.74, 42.74}};
constexpr DecodeRowsFit kSplitKF32L2{{-0.106, -0.087, 0.091, 1.137, 1.137}, {0.019, 0.038, 0.152, 0.568, 0.568},
                                     {10.40, 14.09, 19.57, 51.32, 51.32}};
constexpr DecodeRowsFit kSplitKHalfL1{{-0.006, 0.145, 0.827, 1.820, 1.820}, {0.006, 0.091, 0.028, 0.098, 0.098},
                                      {7.60, 23.18, 21.44, 29.78, 29.78}};
constexpr DecodeRowsFit kSplitKHalfL2{{0.024, 0.053, 0.694, 1.439, 1.439}, {-0.006, 0.042, 0.025, 0.095, 0.095},
                                      {7.24, 5.95, 18.72, 26.82, 26.82}};
constexpr DecodeRowsFit kSplitKHalfL4{{0.043, 0.245, 0.386, 1.191, 1.191}, {0.004, -0.001, 0.089, 0.091, 0.091},
                                      {2.67, 22.28, 0.82, 30.00, 30.00}};
inline double decode_rows_us(Kernel kernel, int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int64_t L,
                             int split) {
  const KernelInfo& info = kernel_info(kernel);
  const DecodeRowsFit* fit = nullptr;
  if (info.family == Family::kDecodeSplitK && info.dtype != DType::kF32)
    fit = L < 2 ? &kSplitKHalfL1 : L < 4 ? &kSplitKHalfL2 : &kSplitKHalfL4;
  else if (info.family == Family::kDecodeSplitK && L < 4)
    fit = L < 2 ? &kSplitKF32L1 : &kSplitKF32L2;
  if (fit == nullptr || m <= 1) return 0.0;
  const double wn = (M > 0 ? static_cast<double>(k / M * N) : 0.0) * static_cast<double>(n) * 1e-6;
  const double kn = static_cast<double>(k) * static_cast<double>(n) * 1e-6;
  const double sn = static_cast<double>(split) * static_cast<double>(n) * 1e-6;
  double prev_m = 1.0, prev[3] = {0.0, 0.0, 0.0};
  for (int i = 0; i < 5; ++i) {
    const double mi = static_cast<double>(fit->m[i]);
    if (static_cast<double>(m) <= mi || i == 4) {
      const double t = (static_cast<double>(m) - prev_m) / (mi - prev_m);
      const double us = (prev[0] + t * (fit->wn[i] - prev[0])) * wn + (prev[1] + t * (fit->kn[i] - prev[1])) * kn +
                        (prev[2] + t * (fit->sn[i] - prev[2])) * sn;
      return us > 0.0 ? us : 0.0;
    }
    prev_m = mi;
    prev[0] = fit->wn[i];
    prev[1] = fit->kn[i];
    prev[2] = fit->sn[i];
  }
  return 0.0;
}

// generic_f32: one thread per output column and 4 rows of x (blocks of 128 threads, at most 16 per
// SM), each walking all w = k N / M compressed rows. With few warps per SM a row costs a chain of
// dependent loads (index byte, then x): about 0.37 us per row per wave of blocks (H200, 4096^2 2:4
// L = 1, m = 1: 0.012x cuBLAS bf16); with many, the loads' throughput: 0.565 ns per thread-row per SM
// (m = 4096 fp32: 0.074x cuBLAS fp32); its launch and first loads as the decode kernels'.
constexpr double kGenericRowLatencyUs = 0.37;
constexpr double kGenericThreadRowUs = 0.565e-3;
inline double generic_cost_us(int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int num_sms) {
  const int64_t sms = num_sms > 0 ? num_sms : 132;
  const double w = M > 0 ? static_cast<double>(k / M * N) : 0.0;
  const int64_t blocks = (n + 127) / 128 * ((m + 3) / 4);
  const int64_t per_sm = (blocks + sms - 1) / sms;
  const double latency = static_cast<double>((per_sm + 15) / 16) * w * kGenericRowLatencyUs;
  const double throughput = static_cast<double>(per_sm) * 128.0 * w * kGenericThreadRowUs;
  return kDecodeFixedUs + (latency > throughput ? latency : throughput);
}

// The fp32 prefill families (tiled, warp-packed, warp-specialized): what their fitted costs leave
// out and the other families pay too, the x transpose (x read, xT written) and its launch.
inline double prefill_f32_fixed_us(int64_t m, int64_t k) {
  return kLaunchUs + 8.0 * static_cast<double>(m) * static_cast<double>(k) / kHbmBytesPerUs;
}

// The sparse tensor-core kernels (2:4, kernels/sparse_tc/): a grid of ceil(n / 128) x ceil(m / tile)
// x split blocks, `per_sm` of them resident per SM, runs ceil(blocks / (SMs x per_sm)) rounds of
// fixed_us + (k-blocks of 64 inputs per block) x kblock_us; the weight, metadata and x streamed at
// the HBM rate scaled by the share of about 100 blocks that stream at once bound it from below.
// Fitted on an H200 (bf16, 2:4 L = 1 and 32, the six Llama layers, m = 16..4096, every tile and
// split 1-8, the tiles in their m range; estimate / measured median 0.99 / 1.01 for the 256- / 128-
// token tiles, 10-90% 0.89-1.14).
// Clusters of 4 and 8 place fewer blocks at a time (124 and 120 of 132 SMs, as for expand_wgmma)
// and still run slower than those rounds: their grid time is scaled by cluster4 / cluster8 (the
// measured median over the estimate on the same fit).
struct SparseTcCost {
  int tile, per_sm;
  double fixed_us, kblock_us;
  double cluster4, cluster8;
};
constexpr SparseTcCost kSparseTcCosts[] = {{256, 1, 5.7, 0.435, 1.25, 1.6},
                                           {128, 2, 2.8, 0.575, 1.3, 1.9},
                                           {64, 1, 1.2, 0.27, 1.0, 1.0},
                                           {16, 1, 1.5, 0.05, 1.0, 1.0}};
constexpr double kSparseTcClusterUs = 0.6;  // per block of a split cluster: the on-chip sum
constexpr double kSparseTcAloneFactor = 0.6;
// The estimate above is the measured time (median 1.00 on the H200 plan table's 2:4 cells); the
// families it is set against there measure above theirs (decode_tc 1.08-1.19x, dense_expand 1.16x
// median), so it enters the comparison scaled by this factor.
constexpr double kSparseTcCompareFactor = 0.93;
inline double sparse_tc_cost_us(int tile, int64_t m, int64_t n, int64_t k, int split, int num_sms) {
  const SparseTcCost* c = &kSparseTcCosts[0];
  for (const SparseTcCost& e : kSparseTcCosts)
    if (e.tile == tile) c = &e;
  const int64_t sms = num_sms > 0 ? num_sms : 132;
  const int64_t blocks = static_cast<int64_t>((n + 127) / 128) * ((m + tile - 1) / tile) * split;
  // (The 16-token tile's constants, fitted on decode calls, already hold its clusters' cost.)
  const double fill = tile == 16 ? 1.0 : split >= 8 ? 120.0 / 132 : split >= 4 ? 124.0 / 132 : 1.0;
  const int64_t resident = static_cast<int64_t>(std::floor(static_cast<double>(sms * c->per_sm) * fill));
  const int64_t rounds = (blocks + resident - 1) / resident;
  const int64_t kblocks = ((k + 63) / 64 + split - 1) / split;
  // A two-per-SM tile alone on its SM (a grid of at most one block per SM) runs its stages faster.
  const double kblock_us = c->per_sm > 1 && blocks <= sms ? kSparseTcAloneFactor * c->kblock_us : c->kblock_us;
  const double cluster = split >= 8 ? c->cluster8 : split >= 4 ? c->cluster4 : 1.0;
  const double grid = cluster * static_cast<double>(rounds) *
                      (c->fixed_us + static_cast<double>(kblocks) * kblock_us + (split > 1 ? kSparseTcClusterUs * split : 0.0));
  const double bytes = 1.125 * static_cast<double>(n) * static_cast<double>(k) +
                       2.0 * static_cast<double>(m) * static_cast<double>(k + n);
  const double streaming = blocks < 100 ? static_cast<double>(blocks) / 100.0 : 1.0;
  const double memory = bytes / (kHbmBytesPerUs * streaming);
  return kSparseTcCompareFactor * (kLaunchUs + (grid > memory ? grid : memory));
}

// expand_mma_*: a block's stages run one after another, each costing a fixed part (copies,
// barriers, the strip's zeroing and the products' latency), the expansion of its compressed rows
// (a part per row and a part per store: a lane stores 8 / min(L, 8) vectors of a row) and the
// products of its token tile; co-resident blocks overlap partly (c blocks per SM run c^0.54 times
// one block's time, for c up to what registers and shared memory hold). Then two launches (kernel
// and non-finite row check), the split's reduction, and the compressed bytes at HBM rate as a floor.
// Fitted on an H200 (bf16; 16:32, 8:32, 4:32 x L = 1, 4, 16 x the six Llama layers x m = 1 to 4096,
// every token tile and split): estimate / measured median 1.02 (10-90%: 0.87-1.12); the cheapest
// estimated plan with a split of at most 16 is 3% above the best measured one on geomean.
struct ExpandMmaCost {
  double fixed_us;       // launches
  double stage_us;       // per stage
  double row_us;         // per compressed row of a stage
  double store_us;       // per compressed row and store of a lane's 8 outputs (8 / min(L, 8) of them)
  double tile64_us, tile128_us;  // the products of a 64- / 128-token tile, per stage (16: none)
  double overlap_exp;    // c co-resident blocks per SM run c^(1 - overlap_exp) one block's time
  double reduce_bytes_per_us;
};
constexpr ExpandMmaCost kExpandMmaCost{2 * kLaunchUs, 0.62, 0.0143, 0.0032, 0.225, 0.547, 0.463, 4.37e6};
// Registers per thread of the three token tiles (ptxas, sm_90a): blocks per SM by registers.
inline int expand_mma_blocks_by_registers(int tile) {
  const int regs = tile <= 16 ? 96 : tile <= 64 ? 168 : 242;
  return 65536 / (kernels::expand_mma::kThreads * regs);
}
inline double expand_mma_cost_us(int tile, int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int64_t L,
                                 int split, int num_sms) {
  const ExpandMmaCost& c = kExpandMmaCost;
  const double sms = num_sms > 0 ? num_sms : 132;
  const kernels::expand_mma::Geometry g = kernels::expand_mma::make_geometry(n, k, N, M, L, tile, split, true);
  const double blocks = static_cast<double>((n + 127) / 128) * static_cast<double>((m + tile - 1) / tile) * g.split;
  const double stages = static_cast<double>((g.nst + g.split - 1) / g.split);
  const double stores = 8.0 / static_cast<double>(L < 8 ? L : 8);
  const double stage = c.stage_us + g.slots * (c.row_us + stores * c.store_us) +
                       (tile >= 128 ? c.tile128_us : tile >= 64 ? c.tile64_us : 0.0);
  int per_sm = 228 * 1024 / (g.smem_bytes + 1024);
  if (per_sm > expand_mma_blocks_by_registers(tile)) per_sm = expand_mma_blocks_by_registers(tile);
  if (per_sm < 1) per_sm = 1;
  const double load = blocks / sms;  // blocks per SM
  const double factor = load <= 1.0 ? 1.0 : load / std::pow(load < per_sm ? load : per_sm, c.overlap_exp);
  const double grid = stages * stage * factor;
  const double bytes = compressed_bytes(n, k, N, M, L, 2) + 2.0 * static_cast<double>(m) * static_cast<double>(k + n);
  const double memory = bytes / kHbmBytesPerUs;
  const double reduce = g.split > 1 ? kLaunchUs + 8.0 * g.split * static_cast<double>(m) * static_cast<double>(n) /
                                                    c.reduce_bytes_per_us
                                    : 0.0;
  return c.fixed_us + (grid > memory ? grid : memory) + reduce;
}

// Rounds of a one-block-per-SM grid of ceil(n / 128) x ceil(m / tile) x split blocks, a split being
// a cluster: clusters of 4 and 8 place fewer blocks at a time (fill4, fill8 of the SMs).
inline double cluster_grid_rounds(int tile, int64_t m, int64_t n, int split, int num_sms, double fill4, double fill8) {
  const double sms = num_sms > 0 ? num_sms : 132;
  const double resident = split <= 2 ? sms : split == 4 ? sms * fill4 : sms * fill8;
  const double blocks = static_cast<double>((n + 127) / 128) * static_cast<double>((m + tile - 1) / tile) * split;
  return std::ceil(blocks / std::floor(resident));
}

// expand_wgmma_* (sm_90a): one block per SM (cluster splits of 4 and 8 place 124 and 120 blocks
// at a time on 132 SMs); a round of blocks costs a fixed part, a part for the tokens of its tile
// (x's copies and the epilogue) and its stages, each costing the larger of the expansion (a fixed
// part, a part per compressed row and per store of a lane's 8 outputs, as in expand_mma, shared by
// two expansion warpgroups) and the products of its token tile. Fitted on an H200 (bf16; every
// token tile and split on 16:32, 8:32, 4:32, 2:4 x L = 1, 2, 4, 8, 16, 64 x the six Llama layers x
// m = 64, 256, and the plan table's timed plans of the family, m = 1..4096; 3,064 times): estimate /
// measured median 1.00 (10-90%: 0.92-1.08; per m, medians 0.98-1.04).
struct ExpandWgmmaCost {
  double fixed_us;      // per call
  double round_us;      // per round of blocks (prologue, pipeline fill, epilogue)
  double round_tokens_us;  // per round, times the fraction of the token tile that m fills
  double stage_us;      // per stage: the expansion's fixed part
  double row_us;        // per compressed row of a stage
  double store_us;      // per compressed row and store of a lane's 8 outputs (8 / min(L, 8) of them)
  double tile64_us, tile128_us;  // the products of a 64- / 128-token tile, per stage
  double cluster4_fill, cluster8_fill;  // blocks resident at a time with cluster splits, per SM
};
constexpr ExpandWgmmaCost kExpandWgmmaCost{1.23, 4.43, 3.04, 0.409, 0.0073, 0.0013, 0.29, 0.585, 124.0 / 132, 120.0 / 132};
inline double expand_wgmma_cost_us(int tile, int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int64_t L,
                                   int split, int num_sms) {
  const ExpandWgmmaCost& c = kExpandWgmmaCost;
  const double rounds = cluster_grid_rounds(tile, m, n, split, num_sms, c.cluster4_fill, c.cluster8_fill);
  const int64_t nst = (k + 63) / 64;
  const double stages = static_cast<double>((nst + split - 1) / split);
  const double slots = static_cast<double>(64 / M * N);
  const double stores = 8.0 / static_cast<double>(L < 8 ? L : 8);
  const double expand = c.stage_us + slots * (c.row_us + stores * c.store_us);
  const double products = tile >= 128 ? c.tile128_us : c.tile64_us;
  const double filled = static_cast<double>(m < tile ? m : tile) / tile;
  const double grid = rounds * (c.round_us + filled * c.round_tokens_us + stages * (expand > products ? expand : products));
  const double bytes = compressed_bytes(n, k, N, M, L, 2) + 2.0 * static_cast<double>(m) * static_cast<double>(k + n);
  const double memory = bytes / kHbmBytesPerUs;
  return c.fixed_us + (grid > memory ? grid : memory);
}

// gather_wgmma_* (sm_90a): the x transpose (its bytes read and written) and two launches, then
// rounds of one block per SM (cluster splits of 4 and 8 place 124 and 120 at a time); a block pays
// a fixed part (pipeline fill, epilogue) and its stages of 32 compressed rows, each bound by the
// producer's gathered copies (a 256-token stage at L = 64 holds two vectors' rows), a 128-token
// stage 0.7 of a 256-token one; a cluster split adds its launch and on-chip sum. Fitted on an H200
// (bf16, L = 128: the 100 NM-SpMM points x 16, 12, 8, 4:32 and 30 probe cells, the best tile and
// split of each, 363 times: estimate / measured median 1.00, 10-90% 0.95-1.03, worst 0.84 and
// 1.41); L = 64 scales the stage by its probe (0.89 against 0.69 us; split 8 extrapolated).
struct GatherWgmmaCost {
  double fixed_us;
  double transpose_bytes_per_us;
  double block_us;                 // per round of blocks
  double stage64_us, stage128_us;  // per 256-token stage at L = 64 / 128
  double tile128_factor;           // a 128-token stage, relative
  double split2_us, split4_us, split8_us;
  double cluster4_fill, cluster8_fill;
};
constexpr GatherWgmmaCost kGatherWgmmaCost{5.94, 3.82e6, 6.76, 0.927, 0.716, 0.70, 1.22, 5.82, 8.0,
                                           124.0 / 132, 120.0 / 132};
inline double gather_wgmma_cost_us(int tile, int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int64_t L,
                                   int split, int num_sms) {
  const GatherWgmmaCost& c = kGatherWgmmaCost;
  const double rounds = cluster_grid_rounds(tile, m, n, split, num_sms, c.cluster4_fill, c.cluster8_fill);
  const int64_t nst = (k / M * N + kernels::gather_wgmma::kRows - 1) / kernels::gather_wgmma::kRows;
  const double stages = static_cast<double>((nst + split - 1) / split);
  const double stage = (L >= 128 ? c.stage128_us : c.stage64_us) * (tile >= 256 ? 1.0 : c.tile128_factor);
  const double m_pad = static_cast<double>((m + 7) / 8 * 8);
  const double transpose = 4.0 * m_pad * static_cast<double>(k) / c.transpose_bytes_per_us;
  const double split_us = split == 2 ? c.split2_us : split == 4 ? c.split4_us : split == 8 ? c.split8_us : 0.0;
  return c.fixed_us + transpose + rounds * (c.block_us + stages * stage) + split_us;
}

}  // namespace nmspmm
