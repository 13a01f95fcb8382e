// The policy of the runtime heuristic: a problem (shape, pattern, dtype, device) -> a plan (a
// registry kernel and its split-K), as a search. The registry (registry.h) yields the kernels that
// can run the call, natively in its dtype or, for a 16-bit call, as fp32 kernels on upcast inputs;
// each family with a candidate kernel proposes its plan (its plan generator: the fitted decode
// rules below, or the cost model's search over its kernels and splits) with an estimated time
// (cost_model.h); the least estimated time wins. The dense expansion runs every pattern in every
// dtype, so it is always a candidate: no call is planned slower than expanding the weight and
// running cuBLAS, by the cost model. No per-shape search happens at call time. Torch-free and
// CUDA-free: compiled into every build, exposed as torch.ops.nmspmm.spmm_heuristic and tested on the
// CPU (tests/test_heuristic.py, tests/test_half_plans.py, tests/test_policy_table.py).
//
// Adding a family: its registry row (registry.h), a cost function (cost_model.h) and a planner in
// kFamilyPlanners below.
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
  bool positions_in_tc_meta = false;  // a compact 2:4 weight: a plan that reads indices rebuilds them first
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
  const int sp24 = kernel_family(k) == Family::kDecodeSparseTc ? kernels::kHalfDecodeSparse24 : 0;
  return sp24 | (kernel_info(k).variant == 64 ? kernels::kHalfDecodeNarrow : 0);
}

// ---- The search ----

// The kernels of the registry that can run a problem: its own dtype's, and for a 16-bit problem the
// fp32 kernels on upcast inputs (the documented fallback). The packing kernels are left out: they
// need col_info and measure slower than the non-packing kernels at every point measured on H100
// (benchmarks/results/h100/plan_sweep.csv, L = 32, sparsity 50% to 96.9%); spmm_with_plan runs them.
struct Candidates {
  bool runs[kNumKernels] = {};
  bool has(Kernel k) const { return valid_kernel(k) && runs[static_cast<int>(k)]; }
};
inline Candidates registry_candidates(const Problem& pb) {
  Candidates c;
  for (const KernelInfo& k : kKernelTable) {
    if (k.dtype != pb.dtype && k.dtype != DType::kF32) continue;  // a native kernel of another dtype
    if (k.needs_col_info) continue;
    c.runs[static_cast<int>(k.id)] = kernel_supports(k.id, pb.m, pb.N, pb.M, pb.L, false, k.dtype, pb.cc, pb.sm90a);
  }
  return c;
}

// A plan's cost for the problem: the kernel's own cost, plus the conversions of the fp32 fallback
// where the kernel's dtype is not the problem's.
inline PlanCost plan_cost(const Problem& pb, Plan plan, double kernel_us) {
  const bool upcast = kernel_info(plan.kernel).dtype != pb.dtype;
  return {plan, kernel_us + (upcast ? upcast_cost_us(pb.m, pb.n, pb.k, pb.N, pb.M) : 0.0)};
}
// The cheaper of two plans; the first on a tie.
inline PlanCost cheaper(const PlanCost& a, const PlanCost& b) {
  if (a.plan.kernel == Kernel::kNone) return b;
  if (b.plan.kernel == Kernel::kNone) return a;
  return b.us < a.us ? b : a;
}

// Smallest m of the fp32 prefill families (tiled, warp-packed, warp-specialized) and of the
// tensor-core prefill kernel: their costs are fitted from m = 32 (fp32) and m = 256 (16-bit), and
// up to m = 16 the decode kernels measured faster on every swept shape; below it the prefill
// families are not candidates.
constexpr int64_t kPrefillMinM = 17;

// fp32 decode on devices with clusters (cluster and staged families; m <= 16, L >= 4): the fitted
// rules choose the family and its cluster or split, as measured on H100 sweeps: the cluster kernels
// at m <= 2, the staged ones at 3..16.
inline Plan cluster_decode_f32_plan(const Problem& pb) {
  const int num_sms = pb.num_sms > 0 ? pb.num_sms : 132;
  if (pb.cc < 90 || pb.m > 16) return {Kernel::kNone, 1};
  if (pb.m <= kClusterDecodeMaxM) return choose_cluster_decode(pb.m, pb.n, pb.k, pb.N, pb.M, num_sms, pb.max_cluster);
  return choose_staged_decode(pb.m, pb.n, pb.k, pb.N, pb.M, num_sms, pb.max_cluster);
}
inline PlanCost plan_decode_f32(const Problem& pb, const Candidates& c) {
  const Plan plan = cluster_decode_f32_plan(pb);
  if (plan.kernel == Kernel::kNone || !c.has(plan.kernel)) return kNoPlan;
  return plan_cost(pb, plan, decode_cost_us(plan.kernel, pb.n, pb.k, pb.N, pb.M, pb.L));
}

// The split-K decode family (m <= 16, any L): the kernel of the problem's dtype (values read in
// their own dtype), else decode_f32_splitk on upcast inputs; k split in powers of two up to about 4
// blocks per SM, each split keeping at least 32 compressed rows. For fp32 at L >= 4 it stays the
// fitted rules' fallback (taken only where no cluster or staged plan runs).
inline PlanCost plan_decode_splitk(const Problem& pb, const Candidates& c) {
  if (pb.m > 16) return kNoPlan;
  const Kernel native = pb.dtype == DType::kBF16  ? Kernel::kDecodeSplitKBF16
                        : pb.dtype == DType::kF16 ? Kernel::kDecodeSplitKF16
                                                  : Kernel::kDecodeF32SplitK;
  const Kernel kernel = c.has(native) ? native : Kernel::kDecodeF32SplitK;
  if (!c.has(kernel)) return kNoPlan;
  if (kernel == Kernel::kDecodeF32SplitK && pb.L >= 4) {
    const Plan fitted = cluster_decode_f32_plan(pb);
    if (fitted.kernel != Kernel::kNone && c.has(fitted.kernel)) return kNoPlan;
  }
  const int num_sms = pb.num_sms > 0 ? pb.num_sms : 132;
  const int col_blocks = ceil_div_i(pb.n, 128);
  const int64_t w = pb.M > 0 ? pb.k / pb.M * pb.N : 0;
  int split = 1;
  while (col_blocks * split < 4 * num_sms && split < kMaxSplitK && w / (split * 2) >= 32) split *= 2;
  const double us = decode_cost_us(kernel, pb.n, pb.k, pb.N, pb.M, pb.L) +
                    decode_rows_us(kernel, pb.m, pb.n, pb.k, pb.N, pb.M, pb.L, split);
  return plan_cost(pb, {kernel, split}, us);
}

// fp32 tiled kernels (m > 16, L >= 16): the cheapest (kernel, split) under the tiled cost model.
inline PlanCost plan_tiled(const Problem& pb, const Candidates& c) {
  const int64_t m = pb.m, n = pb.n, k = pb.k, N = pb.N, M = pb.M;
  const int num_sms = pb.num_sms > 0 ? pb.num_sms : 132;
  if (m < kPrefillMinM) return kNoPlan;
  Plan best{Kernel::kNone, 1};
  double best_us = -1.0;
  for (const TiledCost& tc : kTiledCosts) {
    if (M > tc.max_M || !c.has(tc.kernel)) continue;
    const int64_t kblocks = ceil_div_i(k, M > 32 ? 64 : 32);
    const TileShape t = tile_shape(tc.kernel);
    for (const int split : kSplitCandidates) {
      // Each split keeps a useful k-extent (at least 4 k-blocks).
      if (split > 1 && kblocks / split < 4) break;
      // The 8-warp 128x128 kernel (8x8 thread tile) only pays while its grid is under one block
      // per SM (8 warps hide latency that 4 cannot); with more blocks the 16x8-thread-tile kernel
      // is faster, which the cost model alone misranks (on an H100 plan sweep, with the rule at two
      // blocks per SM the picks are 4.2% above the best plan, at one block 3.4%; 12:32 6.8% -> 4.7%).
      const int64_t ctas = static_cast<int64_t>(ceil_div_i(m, t.bm)) * ceil_div_i(n, t.bn) * split;
      if (tc.kernel == Kernel::kTiledF32_128x128W8 && ctas >= static_cast<int64_t>(num_sms)) continue;
      const double us = tiled_cost_us(tc, m, n, k, N, M, split, num_sms, pb.cc >= 90);
      if (best_us < 0 || us < best_us) {
        best_us = us;
        best = {tc.kernel, split};
      }
    }
  }
  if (best.kernel == Kernel::kNone) return kNoPlan;
  // At L = 16 a warp's outputs span two vectors (two gathers): the tiles run kTiledL16Factor
  // slower than their model (fitted at L >= 32) says; the ranking among tiles stays.
  if (pb.L < 32) best_us *= kTiledL16Factor;
  return plan_cost(pb, best, best_us + prefill_f32_fixed_us(m, k));
}

// fp32 warp-packed kernels (m > 16, L >= 32): priced by the model fitted jointly with the tiled one.
inline PlanCost plan_warp_packed(const Problem& pb, const Candidates& c) {
  const int64_t m = pb.m, n = pb.n, k = pb.k, N = pb.N, M = pb.M;
  if (m < kPrefillMinM || !warp_packed_candidates(m, n, k, N, M, pb.L)) return kNoPlan;
  for (const WarpPackedCost& wc : kWarpPackedCosts)
    if (!c.has(wc.kernel)) return kNoPlan;
  double us = -1.0;
  const Plan plan = choose_warp_packed(m, n, k, N, M, pb.num_sms > 0 ? pb.num_sms : 132, pb.cc >= 90, &us);
  return plan_cost(pb, plan, us + prefill_f32_fixed_us(m, k));
}

// The warp-specialized fp32 kernel (sm_90a, m > 16, L >= 32, 4 / 8 / 12 / 16 rows per 32 inputs).
inline PlanCost plan_producer(const Problem& pb, const Candidates& c) {
  const int64_t m = pb.m, n = pb.n, k = pb.k, N = pb.N, M = pb.M;
  const int num_sms = pb.num_sms > 0 ? pb.num_sms : 132;
  if (m < kPrefillMinM || !c.has(Kernel::kProducerF32_128x256)) return kNoPlan;
  const int64_t kblocks = ceil_div_i(k, producer_shape(N, M).kb);
  Plan best{Kernel::kProducerF32_128x256, 1};
  double best_us = -1.0;
  for (const int split : kSplitCandidates) {
    if (split > 1 && kblocks / split < 4) break;
    const double us = producer_cost_us(m, n, k, N, M, split, num_sms);
    if (best_us < 0 || us < best_us) {
      best_us = us;
      best = {Kernel::kProducerF32_128x256, split};
    }
  }
  return plan_cost(pb, best, best_us + prefill_f32_fixed_us(m, k));
}

// Its tail variant, where the grid has more than one round of 128x256 tiles and a partial last one.
inline PlanCost plan_producer_tail(const Problem& pb, const Candidates& c) {
  const int64_t m = pb.m, n = pb.n, k = pb.k, N = pb.N, M = pb.M;
  const int num_sms = pb.num_sms > 0 ? pb.num_sms : 132;
  if (m < kPrefillMinM || !c.has(Kernel::kProducerTailF32_128x256)) return kNoPlan;
  const int64_t tiles = static_cast<int64_t>(ceil_div_i(m, 128)) * ceil_div_i(n, 256);
  if (tiles <= num_sms || producer_tail_tiles(m, n, num_sms) == 0) return kNoPlan;
  const int64_t kblocks = ceil_div_i(k, producer_shape(N, M).kb);
  Plan best{Kernel::kNone, 1};
  double best_us = -1.0;
  for (const int split : kSplitCandidates) {
    if (split == 1) continue;
    if (kblocks / split < 4) break;
    const double us = producer_tail_cost_us(m, n, k, N, M, split, num_sms);
    if (best_us < 0 || us < best_us) {
      best_us = us;
      best = {Kernel::kProducerTailF32_128x256, split};
    }
  }
  if (best.kernel == Kernel::kNone) return kNoPlan;
  return plan_cost(pb, best, best_us + prefill_f32_fixed_us(m, k));
}

// fp16 / bf16 decode (sm_90, thread-block clusters): up to m = 32, and m = 64 on weights below 2^25
// elements (half_decode_preferred, from the m-sweep: beyond it the prefill plans measured 1.1-1.8x
// faster, which the streaming cost does not see); the short vectors (L = 4, 8) up to m = 16 (at
// m = 64 they measured 0.3-0.6x the other plans: SV gathers and products per tile and 8-token
// tile). The fitted plan (half_decode_plan) picks the block and the cluster.
inline PlanCost plan_decode_tc(const Problem& pb, const Candidates& c) {
  if (pb.dtype == DType::kF32 || pb.cc < 90 || (pb.L < 16 && pb.m > 16) || pb.m > ab_switches().half_decode_max_m ||
      !kernels::half_decode_preferred(pb.m, pb.n, pb.k) ||
      !kernels::half_decode_supports(pb.m, pb.n, pb.k, pb.N, pb.M, pb.L))
    return kNoPlan;
  const kernels::HalfDecodePlan d = kernels::half_decode_plan(pb.m, pb.n, pb.k, pb.N, pb.M, pb.L, pb.num_sms > 0 ? pb.num_sms : 132);
  const Plan plan{half_decode_kernel(d.config, pb.dtype == DType::kBF16), d.split_k};
  if (!c.has(plan.kernel)) return kNoPlan;
  // Beyond m = 32 (the m-sweep's decode range on every layer) a block that stages the whole x
  // slab, not the kept rows only, spends more on x than the streaming cost sees (H200 plan table,
  // 2:4 at m = 64 on 4096 x 4096 and 1024 x 4096: 2.5-4.5x the m = 1 time).
  const bool kept = plan.kernel == Kernel::kDecodeTcBF16Kept64 || plan.kernel == Kernel::kDecodeTcF16Kept64;
  const double rows = pb.m > 32 && !kept ? static_cast<double>(pb.m) / 16.0 : 1.0;
  const double gather = kept && pb.m > 16 ? decode_tc_kept_gather_us(pb.m, pb.n, pb.k, pb.N, pb.M, pb.L) : 0.0;
  const double stream = decode_cost_us(plan.kernel, pb.n, pb.k, pb.N, pb.M, pb.L) - kDecodeTcRate.fixed_us;
  return plan_cost(pb, plan, rows * (kDecodeTcRate.fixed_us + decode_tc_short_factor(pb.L, pb.m) * stream) + gather +
                                 decode_rows_us(plan.kernel, pb.m, pb.n, pb.k, pb.N, pb.M, pb.L, plan.split_k));
}

// 2:4 decode on the sparse tensor cores (fp16 / bf16, sm_90, any L), up to m = 16 (above it the
// sparse_tc tiles reuse each weight byte over more tokens): the block and cluster of decode_tc's
// fitted plan for 16:32, which has the same compressed rows and x rows per input as 2:4 (the plan's
// window counts are those of its M = 32 fit); costed by its streaming rate, flat up to m = 8 (one
// 8-token tile).
inline PlanCost plan_decode_sparse_tc(const Problem& pb, const Candidates& c) {
  if (pb.dtype == DType::kF32 || pb.cc < 90 || pb.m > 16 ||
      !kernels::sparse24_decode_supports(pb.m, pb.n, pb.k, pb.N, pb.M, pb.L))
    return kNoPlan;
  const kernels::HalfDecodePlan d = kernels::half_decode_plan(pb.m, pb.n, pb.k, 16, 32, 16, pb.num_sms > 0 ? pb.num_sms : 132);
  const bool bf16 = pb.dtype == DType::kBF16, narrow = (d.config & kernels::kHalfDecodeNarrow) != 0;
  const Plan plan{bf16 ? (narrow ? Kernel::kDecodeSparseTcBF16_64 : Kernel::kDecodeSparseTcBF16_256)
                       : (narrow ? Kernel::kDecodeSparseTcF16_64 : Kernel::kDecodeSparseTcF16_256),
                  d.split_k};
  if (!c.has(plan.kernel)) return kNoPlan;
  const double stream = decode_cost_us(plan.kernel, pb.n, pb.k, pb.N, pb.M, pb.L) - kDecodeSparseTcRate.fixed_us;
  return plan_cost(pb, plan, kDecodeSparseTcRate.fixed_us + (pb.m > 8 ? kDecodeSparseTcTwoTiles : 1.0) * stream);
}

// The gathered tensor-core prefill kernel (fp16 / bf16, sm_80+, m > 16): its split by
// half_prefill_split, its cost by tc_prefill_cost_us.
inline PlanCost plan_tc_prefill(const Problem& pb, const Candidates& c) {
  if (pb.dtype == DType::kF32 || pb.m < kPrefillMinM) return kNoPlan;
  const Kernel kernel = pb.dtype == DType::kBF16 ? Kernel::kTcPrefillBF16_128x256 : Kernel::kTcPrefillF16_128x256;
  if (!c.has(kernel)) return kNoPlan;
  const int sms = pb.num_sms > 0 ? pb.num_sms : 132;
  const int split = half_prefill_split(pb.m, pb.n, pb.k, pb.N, pb.M, pb.L, sms);
  const double us = tc_prefill_cost_us(pb.m, pb.n, pb.k, pb.N, pb.M, pb.L, split, sms,
                                       half_prefill_warp_specialized(pb.cc, pb.L));
  return plan_cost(pb, {kernel, split}, us);
}

// The dense expansion + cuBLAS, in the problem's dtype (or fp32 on upcast inputs where no native
// row runs): every pattern, every m.
inline PlanCost plan_dense_expand(const Problem& pb, const Candidates& c) {
  PlanCost best = kNoPlan;
  for (const Kernel kernel : {Kernel::kDenseExpandBF16, Kernel::kDenseExpandF16, Kernel::kDenseExpandF32}) {
    if (!c.has(kernel)) continue;
    const double us = dense_expand_cost_us(pb.m, pb.n, pb.k, pb.N, pb.M, pb.L, dtype_bytes(kernel_info(kernel).dtype));
    best = cheaper(best, plan_cost(pb, {kernel, 1}, us));
  }
  return best;
}

// The generic fp32 kernel: every pattern (the only fp32 kernel below L = 4 besides the expansion).
inline PlanCost plan_generic(const Problem& pb, const Candidates& c) {
  if (!c.has(Kernel::kGenericF32)) return kNoPlan;
  return plan_cost(pb, {Kernel::kGenericF32, 1}, generic_cost_us(pb.m, pb.n, pb.k, pb.N, pb.M, pb.num_sms));
}

// The sparse tensor-core kernels (2:4, fp16 / bf16, sm_90a): the cheapest (token tile, split) under
// sparse_tc_cost_us among the tile of the call's m range (16 tokens up to m = 16, 64 up to 64, the
// 128- and 256-token tiles above: a narrower tile re-streams the weight per token tile, a wider one
// idles on the padding) and splits 1-8 (clusters of 4 and 8 priced by their own factor: they pay
// where a layer has few blocks, 1.2-1.5x on the 1024 x 4096 layer at m = 64-256); in and out
// divisible by 8 (the tensor copies).
inline PlanCost plan_sparse_tc(const Problem& pb, const Candidates& c) {
  if (pb.N != 2 || pb.M != 4 || pb.n % 8 != 0 || pb.k % 8 != 0) return kNoPlan;
  PlanCost best = kNoPlan;
  for (const KernelInfo& k : kKernelTable) {
    if (k.family != Family::kSparseTc || k.dtype != pb.dtype || !c.has(k.id)) continue;
    const bool in_range = k.tile_m == 16 ? pb.m <= 16 : k.tile_m == 64 ? pb.m > 16 && pb.m <= 64 : pb.m > 64;
    if (!in_range) continue;
    for (int split = 1; split <= kMaxSparseTcSplit; split *= 2) {
      if (split > 1 && (pb.k + 63) / 64 < 4 * split) break;  // each block keeps at least 4 k-blocks
      best = cheaper(best, plan_cost(pb, {k.id, split}, sparse_tc_cost_us(k.tile_m, pb.m, pb.n, pb.k, split, pb.num_sms)));
    }
  }
  return best;
}

// The fused expansion (fp16 / bf16, sm_80+, L <= 32, expand_mma::shape_supported): the cheapest
// (token tile, split) under expand_mma_cost_us, each split keeping at least 4 stages of 64 inputs.
// Splits up to 16 (the kernels take 32): on the H200 probe, the fit misjudges split 32 more often
// than it gains (cheapest estimate 3.2% above the best measured plan on geomean with 16, 4.0% with 32).
constexpr int kExpandMmaPlannedSplit = 16;
inline PlanCost plan_expand_mma(const Problem& pb, const Candidates& c) {
  if (pb.dtype == DType::kF32 || !kernels::expand_mma::shape_supported(pb.n, pb.k, pb.N, pb.M, pb.L)) return kNoPlan;
  PlanCost best = kNoPlan;
  const int64_t stages = (pb.k + 63) / 64;
  for (const KernelInfo& k : kKernelTable) {
    if (k.family != Family::kExpandMma || k.dtype != pb.dtype || !c.has(k.id)) continue;
    for (int split = 1; split <= kExpandMmaPlannedSplit; split *= 2) {
      if (split > 1 && stages < 4 * split) break;
      best = cheaper(best, plan_cost(pb, {k.id, split},
                                     expand_mma_cost_us(k.tile_m, pb.m, pb.n, pb.k, pb.N, pb.M, pb.L, split, pb.num_sms)));
    }
  }
  return best;
}

// The Hopper fused expansion (fp16 / bf16, sm_90a, M <= 64, expand_wgmma::shape_supported): the
// cheapest (token tile, cluster split of 1, 2, 4, 8) under expand_wgmma_cost_us, each split keeping
// at least 4 stages of 64 inputs; the 128-token tile only for m > 64, where its cost was fitted (at
// smaller m it stages a mostly empty x box and the 64-token tile covers the call). Not for 2:4,
// which the sparse tensor cores take on every shape this family takes (H200 plan table: where its
// estimate won a 2:4 cell, it ran 0.92-0.95x the sparse tensor-core plan's speed).
inline PlanCost plan_expand_wgmma(const Problem& pb, const Candidates& c) {
  if (pb.dtype == DType::kF32 || (pb.N == 2 && pb.M == 4) ||
      !kernels::expand_wgmma::shape_supported(pb.n, pb.k, pb.N, pb.M, pb.L))
    return kNoPlan;
  PlanCost best = kNoPlan;
  const int64_t stages = (pb.k + 63) / 64;
  for (const KernelInfo& k : kKernelTable) {
    if (k.family != Family::kExpandWgmma || k.dtype != pb.dtype || !c.has(k.id) || (k.tile_m > 64 && pb.m <= 64))
      continue;
    for (int split = 1; split <= kMaxExpandWgmmaSplit; split *= 2) {
      if (split > 1 && stages < 4 * split) break;
      best = cheaper(best, plan_cost(pb, {k.id, split},
                                     expand_wgmma_cost_us(k.tile_m, pb.m, pb.n, pb.k, pb.N, pb.M, pb.L, split, pb.num_sms)));
    }
  }
  return best;
}

// The Hopper gathered operand (fp16 / bf16, sm_90a, gather_wgmma::shape_supported), at L = 128 and
// m > 64: the cheapest (token tile, cluster split of 1, 2, 4, 8) under gather_wgmma_cost_us, each
// split keeping at least 4 stages. L = 64 runs it through spmm_with_plan only until the plan table
// (tests/test_policy_table.py) holds its times.
inline PlanCost plan_gather_wgmma(const Problem& pb, const Candidates& c) {
  if (pb.dtype == DType::kF32 || pb.L != 128 || pb.m <= 64 ||
      !kernels::gather_wgmma::shape_supported(pb.n, pb.k, pb.N, pb.M, pb.L))
    return kNoPlan;
  PlanCost best = kNoPlan;
  const int64_t stages = (pb.k / pb.M * pb.N + kernels::gather_wgmma::kRows - 1) / kernels::gather_wgmma::kRows;
  for (const KernelInfo& k : kKernelTable) {
    if (k.family != Family::kGatherWgmma || k.dtype != pb.dtype || !c.has(k.id)) continue;
    for (int split = 1; split <= kMaxGatherWgmmaSplit; split *= 2) {
      if (split > 1 && stages < 4 * split) break;
      best = cheaper(best, plan_cost(pb, {k.id, split},
                                     gather_wgmma_cost_us(k.tile_m, pb.m, pb.n, pb.k, pb.N, pb.M, pb.L, split, pb.num_sms)));
    }
  }
  return best;
}

// Never planned (col_info, see registry_candidates).
inline PlanCost plan_none(const Problem&, const Candidates&) { return kNoPlan; }

// Every family's planner, in the order that breaks ties (the first of equal costs wins: the fp32
// prefill families in the order their joint model was fitted, the gathered tensor-core kernel
// before the expansion as in the fit that set them against each other).
using FamilyPlanner = PlanCost (*)(const Problem&, const Candidates&);
struct FamilyPlan {
  Family family;
  FamilyPlanner planner;
};
constexpr FamilyPlan kFamilyPlanners[] = {
    {Family::kSparseTc, &plan_sparse_tc},
    {Family::kDecodeSparseTc, &plan_decode_sparse_tc},
    {Family::kDecodeTc, &plan_decode_tc},
    {Family::kDecodeCluster, &plan_decode_f32},  // the two cluster decode families share the fitted rules
    {Family::kDecodeStaged, &plan_decode_f32},
    {Family::kDecodeSplitK, &plan_decode_splitk},
    {Family::kTiled, &plan_tiled},
    {Family::kWarpPacked, &plan_warp_packed},
    {Family::kProducer, &plan_producer},
    {Family::kProducerTail, &plan_producer_tail},
    {Family::kTcPrefill, &plan_tc_prefill},
    {Family::kGatherWgmma, &plan_gather_wgmma},
    {Family::kExpandWgmma, &plan_expand_wgmma},
    {Family::kExpandMma, &plan_expand_mma},
    {Family::kDenseExpand, &plan_dense_expand},
    {Family::kGeneric, &plan_generic},
    {Family::kPacked, &plan_none},
};
constexpr int kNumFamilyPlanners = sizeof(kFamilyPlanners) / sizeof(kFamilyPlanners[0]);

// Every family of the registry has exactly one planner.
constexpr bool every_family_planned() {
  for (const KernelInfo& k : kKernelTable) {
    int found = 0;
    for (const FamilyPlan& f : kFamilyPlanners) found += f.family == k.family;
    if (found != 1) return false;
  }
  return true;
}
static_assert(every_family_planned(), "every kernel family needs one entry in kFamilyPlanners");

// Every family's plan for a problem (kNoPlan where the family has no candidate kernel or no plan),
// in kFamilyPlanners order; a planner shared by several families is asked once.
struct FamilyCosts {
  PlanCost cost[kNumFamilyPlanners];
};
inline FamilyCosts family_costs(const Problem& pb) {
  const Candidates c = registry_candidates(pb);
  bool family_has[kNumFamilyPlanners] = {};
  for (const KernelInfo& k : kKernelTable)
    if (c.has(k.id))
      for (int i = 0; i < kNumFamilyPlanners; ++i) family_has[i] = family_has[i] || kFamilyPlanners[i].family == k.family;
  FamilyCosts out;
  for (int i = 0; i < kNumFamilyPlanners; ++i) {
    out.cost[i] = kNoPlan;
    bool asked = false;
    for (int j = 0; j < i; ++j) asked = asked || (family_has[j] && kFamilyPlanners[j].planner == kFamilyPlanners[i].planner);
    if (family_has[i] && !asked) out.cost[i] = kFamilyPlanners[i].planner(pb, c);
    if (pb.positions_in_tc_meta && out.cost[i].plan.kernel != Kernel::kNone && !reads_tc_meta(out.cost[i].plan.kernel))
      out.cost[i].us += indices_rebuild_us(pb.n, pb.k, pb.L);
  }
  return out;
}

// The plan of a problem: the least estimated time over every family's plan.
inline Plan choose_plan(const Problem& pb) {
  const FamilyCosts fc = family_costs(pb);
  PlanCost best = kNoPlan;
  for (const PlanCost& c : fc.cost) best = cheaper(best, c);
  if (best.plan.kernel == Kernel::kNone) return {Kernel::kGenericF32, 1};  // an empty problem no cost covers
  return best.plan;
}

}  // namespace nmspmm
