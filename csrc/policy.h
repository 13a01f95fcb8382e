// The policy of the runtime heuristic: a problem (shape, pattern, dtype, device) -> a plan (a
// registry kernel and its split-K). Decode shapes (m <= 16) follow rules fitted to H100 sweeps;
// prefill shapes take the cheapest candidate under the cost model (cost_model.h). No per-shape
// search happens at call time. Torch-free and CUDA-free: compiled into every build, exposed as
// torch.ops.nmspmm.spmm_heuristic and unit-tested on the CPU (tests/test_heuristic.py).
#pragma once
#include <algorithm>
#include <cstdint>

#include "ab_switches.h"
#include "cost_model.h"
#include "cuda/kernels/half/decode_half_plan.h"
#include "registry.h"

namespace nmspmm {

// The plan key: everything the choice depends on.
struct Problem {
  int64_t m, n, k;
  int64_t N, M, L;
  DType dtype = DType::kF32;
  int cc = 90;               // compute capability x 10 (>= 90: thread-block clusters)
  int num_sms = 132;
  int max_cluster = 16;      // largest decode cluster the device places (16 on H100 / H200, 8 portable)
  bool has_col_info = false; // the packing kernels' metadata is at hand (the heuristic never needs it)
  bool sm90a = true;         // the build holds sm_90a code for the device (the warp-specialized kernels)
};


// Largest m of the cluster decode kernels (beyond it the split-K or staged decode kernels are faster).
constexpr int kClusterDecodeMaxM = 2;

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
  const Kernel kernel = best_cw == 4 ? Kernel::kDecodeF32Staged512 : best_cw == 2 ? Kernel::kDecodeF32Staged256 : Kernel::kDecodeF32Staged128;
  return {kernel, best_split};
}

// A narrow layer's staged decode plan splits k over clusters of 16 blocks where each block still
// walks at least this many compressed rows, 6 per warp (choose_staged_decode).
constexpr int64_t kStagedWideClusterMinRows = 48;

// Decode (3 <= m <= 16) on sm_90: the staged decode kernel, or {Kernel::kNone, 0} where it cannot run (M >
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
  if (m < 3 || m > 16 || M > 512) return {Kernel::kNone, 0};
  const Plan plan = staged_decode_plan(n, k, M, num_sms);
  const int64_t windows = k / M;
  if (max_cluster >= 16 && plan.kernel == Kernel::kDecodeF32Staged128 && ceil_div_i(n, 128) * 16 <= num_sms &&
      windows / 16 * N >= kStagedWideClusterMinRows)
    return {Kernel::kDecodeF32Staged128, 16};
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
  const int warps = kernel_info(plan.kernel).warps;
  const int64_t rows_per_warp = (windows_per_block * N + warps - 1) / warps;
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
  const Plan plan{best_w == 4 ? Kernel::kDecodeF32ClusterW4 : best_w == 8 ? Kernel::kDecodeF32ClusterW8 : Kernel::kDecodeF32ClusterW16, best_s};
  if (!decode_plan_overlaps_launch(plan, k, N, M) && M <= 512) return staged_decode_plan(n, k, M, num_sms);
  return plan;
}
// The plan of a problem. The packing kernels (col_info) are never candidates: the non-packing
// kernels are faster at every point measured on H100 (benchmarks/results/h100/plan_sweep.csv,
// L = 32, sparsity 50% to 96.9%); spmm_with_plan still runs them.
// fp16 / bf16 on a device with native kernels (sm_80+): the tensor-core decode kernels up to
// m = 64 (thread-block clusters, sm_90), then the cheaper of the gathered tensor-core kernel and
// cuBLAS on the expanded weight (half_prefill_prefers_dense). Kernel::kNone: no native plan (the
// caller plans the fp32 fallback).
// Whether the tc_prefill_* plans run in their warp-specialized form (tensor copies, mbarriers,
// setmaxnreg: built for sm_90a only, so compute capability 9.0 exactly) or in their cp.async form.
inline bool half_prefill_warp_specialized(int cc, int64_t L) { return cc == 90 && L >= 32 && ab_switches().tc_tma; }

// The decode_tc kernel of a decode plan's config (kernels::kHalfDecodeNarrow, kHalfDecodeKept) in
// a dtype, and the config of a decode_tc kernel.
inline Kernel half_decode_kernel(int config, bool bf16) {
  if (config & kernels::kHalfDecodeKept) return bf16 ? Kernel::kDecodeTcBF16Kept64 : Kernel::kDecodeTcF16Kept64;
  if (config & kernels::kHalfDecodeNarrow) return bf16 ? Kernel::kDecodeTcBF16_64 : Kernel::kDecodeTcF16_64;
  return bf16 ? Kernel::kDecodeTcBF16_256 : Kernel::kDecodeTcF16_256;
}
inline int half_decode_config(Kernel k) {
  if (k == Kernel::kDecodeTcBF16Kept64 || k == Kernel::kDecodeTcF16Kept64)
    return kernels::kHalfDecodeNarrow | kernels::kHalfDecodeKept;
  return kernel_info(k).variant == 64 ? kernels::kHalfDecodeNarrow : 0;
}

inline Plan choose_half_plan(const Problem& pb) {
  const bool bf16 = pb.dtype == DType::kBF16;
  const int sms = pb.num_sms > 0 ? pb.num_sms : 132;
  if (pb.cc < 80) return {Kernel::kNone, 1};
  if (pb.cc >= 90 && pb.m <= ab_switches().half_decode_max_m && kernels::half_decode_preferred(pb.m, pb.n, pb.k) &&
      kernels::half_decode_supports(pb.m, pb.n, pb.k, pb.N, pb.M, pb.L)) {
    const kernels::HalfDecodePlan d = kernels::half_decode_plan(pb.m, pb.n, pb.k, pb.N, pb.M, sms);
    return {half_decode_kernel(d.config, bf16), d.split_k};
  }
  if (pb.m <= 16) return {Kernel::kNone, 1};  // sm_80 decode or a pattern the decode kernels lack
  const Kernel tc = bf16 ? Kernel::kTcPrefillBF16_128x256 : Kernel::kTcPrefillF16_128x256;
  const Kernel dense = bf16 ? Kernel::kDenseExpandBF16 : Kernel::kDenseExpandF16;
  const bool tc_ok = kernel_supports(tc, pb.m, pb.N, pb.M, pb.L, false, pb.dtype, pb.cc, pb.sm90a);
  const bool warp_specialized = half_prefill_warp_specialized(pb.cc, pb.L);
  if (!tc_ok || half_prefill_prefers_dense(pb.m, pb.n, pb.k, pb.N, pb.M, warp_specialized)) return {dense, 1};
  return {tc, half_prefill_split(pb.m, pb.n, pb.k, pb.N, pb.M, pb.L, sms)};
}

// Decode (m <= 16) of the problems without another native decode plan: fp32 at L < 4, fp16 / bf16
// without a decode_tc plan (L < 16, or no thread-block clusters). The split-K decode kernel of the
// dtype, reading the weight in its own dtype; k split in powers of two up to about 4 blocks per SM,
// each split keeping at least 32 compressed rows (as the fp32 L >= 4 rule in choose_plan).
// {Kernel::kNone, 1} elsewhere (m above the registry's max_m included).
inline Plan choose_short_decode(const Problem& pb) {
  const Kernel kernel = pb.dtype == DType::kF32    ? (pb.L < 4 ? Kernel::kDecodeF32SplitK : Kernel::kNone)
                        : pb.dtype == DType::kBF16 ? Kernel::kDecodeSplitKBF16
                                                   : Kernel::kDecodeSplitKF16;
  if (!kernel_supports(kernel, pb.m, pb.N, pb.M, pb.L, false, pb.dtype, pb.cc, pb.sm90a)) return {Kernel::kNone, 1};
  const int64_t sms = pb.num_sms > 0 ? pb.num_sms : 132;
  const int64_t col_blocks = ceil_div_i(pb.n, 128);
  const int64_t rows = pb.M > 0 ? pb.k / pb.M * pb.N : 0;
  int split = 1;
  while (col_blocks * split < 4 * sms && split < kMaxSplitK && rows / (split * 2) >= 32) split *= 2;
  return {kernel, split};
}

inline Plan choose_plan(const Problem& pb) {
  const int64_t m = pb.m, n = pb.n, k = pb.k, N = pb.N, M = pb.M, L = pb.L;
  const int num_sms = pb.num_sms > 0 ? pb.num_sms : 132;
  const int max_cluster = pb.max_cluster;
  const bool clusters = pb.cc >= 90;
  if (pb.dtype != DType::kF32) {
    const Plan half = choose_half_plan(pb);
    if (half.kernel != Kernel::kNone) return half;
  }
  const Plan short_decode = choose_short_decode(pb);
  if (short_decode.kernel != Kernel::kNone) return short_decode;
  const DType dtype = DType::kF32;  // a 16-bit problem without a native plan: the fp32 fallback
  auto supports = [&](Kernel kern) { return kernel_supports(kern, m, N, M, L, false, dtype, pb.cc, pb.sm90a); };
  if (L < 4 || (L < 16 && m > 16)) return {Kernel::kGenericF32, 1};
  if (m <= kClusterDecodeMaxM && clusters) return choose_cluster_decode(m, n, k, N, M, num_sms, max_cluster);
  if (m <= 16) {
    if (clusters) {
      const Plan staged = choose_staged_decode(m, n, k, N, M, num_sms, max_cluster);
      if (staged.kernel != Kernel::kNone) return staged;
    }
    // Decode: enough blocks to keep every SM streaming the weight.
    const int col_blocks = ceil_div_i(n, 128);
    const int64_t w = k / M * N;
    int split = 1;
    while (col_blocks * split < 4 * num_sms && split < 64 && w / (split * 2) >= 32) split *= 2;
    return {Kernel::kDecodeF32SplitK, split};
  }
  Plan best{Kernel::kTiledF32_64x128, 1};
  double best_us = -1.0;
  for (const TiledCost& c : kTiledCosts) {
    if (M > c.max_M || !supports(c.kernel)) continue;
    const int64_t kblocks = ceil_div_i(k, M > 32 ? 64 : 32);
    const TileShape t = tile_shape(c.kernel);
    for (const int split : kSplitCandidates) {
      // Each split keeps a useful k-extent (at least 4 k-blocks).
      if (split > 1 && kblocks / split < 4) break;
      // The 8-warp 128x128 kernel (8x8 thread tile) only pays while its grid is under one block
      // per SM (8 warps hide latency that 4 cannot); with more blocks the 16x8-thread-tile kernel
      // is faster, which the cost model alone misranks (on an H100 plan sweep, with the rule at two
      // blocks per SM the picks are 4.2% above the best plan, at one block 3.4%; 12:32 6.8% -> 4.7%).
      const int64_t ctas = static_cast<int64_t>(ceil_div_i(m, t.bm)) * ceil_div_i(n, t.bn) * split;
      if (c.kernel == Kernel::kTiledF32_128x128W8 && ctas >= static_cast<int64_t>(num_sms)) continue;
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
  if (supports(Kernel::kProducerF32_128x256)) {
    const int64_t kblocks = ceil_div_i(k, producer_shape(N, M).kb);
    for (const int split : kSplitCandidates) {
      if (split > 1 && kblocks / split < 4) break;
      const double us = producer_cost_us(m, n, k, N, M, split, num_sms);
      if (best_us < 0 || us < best_us) {
        best_us = us;
        best = {Kernel::kProducerF32_128x256, split};
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
          best = {Kernel::kProducerTailF32_128x256, split};
        }
      }
    }
  }
  return best;
}

}  // namespace nmspmm
