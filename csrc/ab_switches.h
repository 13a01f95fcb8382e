// The A/B switches: environment variables, each read once per process, that turn one launch
// feature off so a test or an A/B timing can compare it against the plain path. Not tuning knobs:
// every default is the measured-faster choice, and the tests check that each switch keeps the
// results bit for bit (tests/test_cuda_kernels.py).
//   NMSPMM_NO_CLUSTER_SPLIT=1  split-K of the tiled kernels through the workspace even where
//                              thread-block clusters could reduce it on chip;
//   NMSPMM_NO_OVERLAP=1        no programmatic dependent launch for the split-K reduction and the
//                              sm_90 decode kernels (plain stream order);
//   NMSPMM_NO_XT_OVERLAP=1     the tiled, packing, warp-packed and warp-specialized kernels (fp32, and
//                              the fp16 / bf16 tensor-core prefill in its warp-specialized form) and
//                              csr_spmm_xt_gather in plain stream order after the x transpose;
//   NMSPMM_NO_BULK_STORE=1     the tiled kernels' output tiles by per-thread stores instead of bulk
//                              copies from shared memory;
//   NMSPMM_NO_TC_TMA=1         the fp16 / bf16 tensor-core prefill plans in their cp.async form (every
//                              warp copies, one block barrier per stage) instead of the
//                              warp-specialized tensor-copy form on sm_90;
//   NMSPMM_HALF_DECODE_MAX_M=v the heuristic plans the fp16 / bf16 decode kernels for m <= v (0..64;
//                              default 64, their whole range), the rest the prefill plans: moves
//                              the crossover for benchmarks/bench_decode_half.py (a path switch, so
//                              results change within their tolerances, not bit for bit).
//   NMSPMM_CSR_WARP_ROW_MAX_M=v unstructured CSR products with m <= v run csr_spmm_warp_row, the
//                              rest csr_spmm_xt_gather (default 8; a path switch like the one above;
//                              uneven rows whose x does not fit in shared memory run xt_gather).
//   NMSPMM_CSR_X_SHARED_MAX_M=v unstructured CSR products with m <= v (0..8) and uneven rows run
//                              csr_spmm_x_shared where x fits in shared memory (default 8; 0 leaves
//                              them to the two kernels above; a path switch).
// Torch-free and CUDA-free.
#pragma once
#include <cstdlib>

namespace nmspmm {

struct AbSwitches {
  bool cluster_split = true;
  bool overlap = true;
  bool xt_overlap = true;
  bool bulk_store = true;
  bool tc_tma = true;
  int half_decode_max_m = 64;
  long csr_warp_row_max_m = 8;
  long csr_x_shared_max_m = 8;
};

inline const AbSwitches& ab_switches() {
  static const AbSwitches s = [] {
    auto off = [](const char* name) {
      const char* e = std::getenv(name);
      return e != nullptr && e[0] == '1';
    };
    AbSwitches a;
    a.cluster_split = !off("NMSPMM_NO_CLUSTER_SPLIT");
    a.overlap = !off("NMSPMM_NO_OVERLAP");
    a.xt_overlap = !off("NMSPMM_NO_XT_OVERLAP");
    a.bulk_store = !off("NMSPMM_NO_BULK_STORE");
    a.tc_tma = !off("NMSPMM_NO_TC_TMA");
    if (const char* e = std::getenv("NMSPMM_HALF_DECODE_MAX_M"); e != nullptr && e[0] != '\0') {
      const long v = std::strtol(e, nullptr, 10);
      a.half_decode_max_m = v < 0 ? 0 : v > 64 ? 64 : static_cast<int>(v);
    }
    if (const char* e = std::getenv("NMSPMM_CSR_WARP_ROW_MAX_M"); e != nullptr && e[0] != '\0') {
      const long v = std::strtol(e, nullptr, 10);
      a.csr_warp_row_max_m = v < 0 ? 0 : v;
    }
    if (const char* e = std::getenv("NMSPMM_CSR_X_SHARED_MAX_M"); e != nullptr && e[0] != '\0') {
      const long v = std::strtol(e, nullptr, 10);
      a.csr_x_shared_max_m = v < 0 ? 0 : v > 8 ? 8 : v;
    }
    return a;
  }();
  return s;
}

}  // namespace nmspmm
