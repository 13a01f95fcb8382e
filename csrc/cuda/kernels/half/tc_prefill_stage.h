// The stage geometry of the tensor-core prefill kernel (spmm_tc_prefill.cuh): host-only and
// CUDA-free, so that the launcher and the cost model's split-K (cost_model.h) use the same stages.
#pragma once
#include <cstdint>

namespace nmspmm {
namespace kernels {
namespace tc_prefill {

constexpr int kBN = 128;                 // tokens per CTA
constexpr int kSlabRowBytes = kBN * 2;   // one input feature of the slab
constexpr int kMaxSlotsPerStage = 64;    // s_pad bound (table entries per thread stay <= 4)

inline int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

inline int smem_budget(int bm) { return bm == 256 ? 220 * 1024 : 110 * 1024; }

inline int stage_layout(int bm, int L, int ws, int N, int M, int* slab_off, int* val_off, int* tab_off) {
  const int bkd = ws * M, s_pad = (ws * N + 15) / 16 * 16;
  *slab_off = 0;
  *val_off = static_cast<int>(round_up((bkd + 1) * kSlabRowBytes, 256));
  *tab_off = *val_off + s_pad * bm * 2;
  return static_cast<int>(round_up(*tab_off + s_pad * (bm / L) * 2, 256));
}

// Windows per stage: maximize the share of real slots in the 16-slot mma steps, then the slots
// per stage (fewer barriers), with at most 128 dense rows (256 if padding is otherwise unavoidable),
// s_pad <= 64 and at least 3 pipeline stages in the shared-memory budget.
inline int choose_ws(int bm, int N, int M, int L, int64_t G, int slot_cap) {
  int best = 1, best_s = 0;
  double best_eff = -1.0;
  for (int pass = 0; pass < 2 && best_eff < 1.0; ++pass) {
    const int max_rows = pass == 0 ? 128 : 256;
    for (int ws = 1; ws * M <= max_rows; ++ws) {
      const int s = ws * N;
      const int s_pad = (s + 15) / 16 * 16;
      if (s_pad > kMaxSlotsPerStage || (ws > 1 && s_pad > slot_cap)) break;
      int so, vo, to;
      if (ws > 1 && smem_budget(bm) / stage_layout(bm, L, ws, N, M, &so, &vo, &to) < 3) break;
      const double eff = static_cast<double>(s) / s_pad;
      if (eff > best_eff + 1e-9 || (eff > best_eff - 1e-9 && s > best_s)) {
        best = ws;
        best_eff = eff;
        best_s = s;
      }
    }
  }
  if (G > 0 && best > G) best = static_cast<int>(G);
  return best;
}

}  // namespace tc_prefill
}  // namespace kernels
}  // namespace nmspmm
