// Support matrix and launch plan of the fp16 / bf16 decode kernels (decode_half.cuh): torch-free,
// host-only arithmetic shared by the launcher, the op binding and the tests.
#pragma once
#include <cstdint>
#include <initializer_list>

namespace nmspmm {
namespace kernels {

// Bits of launch_half_decode's `config`.
constexpr int kHalfDecodeNarrow = 1;           // blocks of 64 output columns (else 256)
constexpr int kHalfDecodeDependentLaunch = 2;  // programmatic dependent launch (sm_90)
constexpr int kHalfDecodeKept = 4;             // with kHalfDecodeNarrow: x staged for the kept rows only
constexpr int kHalfDecodeSparse24 = 8;         // N:M = 2:4 on the sparse tensor cores (mma.sp), any L
// Largest cluster (k split) of the decode kernels; above 8 a cluster size is non-portable.
constexpr int kHalfDecodeMaxSplit = 16;
// Largest m of the decode kernels.
constexpr int64_t kHalfDecodeMaxM = 64;

inline bool half_decode_is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// m <= 64, L a power of two in [4, 128] (L < 16: n a multiple of 8, the 16-byte chunks of the
// weight's rows), M a power of two in [2, 64], 1 <= N <= M, n % L == 0, k % M == 0 and fewer than
// 2^26 compressed rows (the kernels divide row numbers by N with a 32-bit reciprocal).
inline bool half_decode_supports(int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int64_t L) {
  if (m < 1 || m > kHalfDecodeMaxM || n < 1 || k < 0) return false;
  if (!half_decode_is_pow2(L) || L < 4 || L > 128 || n % L != 0 || (L < 16 && n % 8 != 0)) return false;
  if (!half_decode_is_pow2(M) || M < 2 || M > 64 || N < 1 || N > M || k % M != 0) return false;
  return k / M * N < (int64_t{1} << 26);
}

// The 2:4 form (kHalfDecodeSparse24): m <= 64, L a power of two in [1, 128], n a multiple of 8 (16-byte
// rows of values) and of L, k a multiple of 4.
inline bool sparse24_decode_supports(int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int64_t L) {
  if (m < 1 || m > kHalfDecodeMaxM || n < 1 || k < 0 || N != 2 || M != 4) return false;
  if (!half_decode_is_pow2(L) || L > 128 || n % L != 0 || n % 8 != 0 || k % 4 != 0) return false;
  return k / 2 < (int64_t{1} << 26);
}

// Whether the heuristic plans the decode kernels for an m they support. The m-sweep of
// benchmarks/bench_decode_half.py (H100, bf16, 12:32 to 4:32) measures them about as fast as the
// prefill plans or faster up to m = 32 on the six Llama layers, and up to m = 64 on weights of fewer
// than 2^25 elements (4096 x 4096, 1024 x 4096); on the larger ones the prefill plans win at m = 48
// and 64 by 1.1-1.8x.
inline bool half_decode_preferred(int64_t m, int64_t n, int64_t k) { return m <= 32 || n * k < (int64_t{1} << 25); }

struct HalfDecodePlan {
  int config;   // 0, kHalfDecodeNarrow or kHalfDecodeNarrow | kHalfDecodeKept (the binding adds
                // kHalfDecodeDependentLaunch)
  int split_k;  // cluster size: blocks splitting k
};

// Output columns per block of a configuration.
inline int64_t half_decode_block_cols(int config) { return (config & kHalfDecodeNarrow) ? 64 : 256; }

// Blocks of 8 warps of a launch that one SM holds: by registers (m <= 16: 128 per thread, two
// blocks; else one) and by shared memory (4-slot rings of 2 KiB per warp, the xT copy of the
// block's k-range, or the epilogue's partial tiles; 228 KiB per SM, 1 KiB reserved per block).
inline int64_t half_decode_blocks_per_sm(int64_t m, int64_t windows, int64_t split, int64_t M, int config) {
  const int64_t warps = 8;
  const int64_t cw = (config & kHalfDecodeNarrow) ? 1 : 4;
  const int64_t nt = m <= 8 ? 1 : m <= 16 ? 2 : m <= 32 ? 4 : 8;
  const int64_t by_regs = nt <= 2 ? 16 / warps : 8 / warps;
  const int64_t ring = warps * 4 * 2048;
  const int64_t x = ((windows + split - 1) / split * M + 1) * nt * 16;
  const int64_t red = warps / cw * nt * 8 * (64 * cw + 4) * 4;
  const int64_t smem = (ring + x > red ? ring + x : red) + 1024;
  const int64_t by_smem = 228 * 1024 / smem;
  const int64_t b = by_regs < by_smem ? by_regs : by_smem;
  return b < 1 ? 1 : b;
}

// The plan, fitted to sweeps on H100 (six Llama layer shapes x N = 4, 8, 12, 16 of 32 x m = 1, 8,
// 16, 32, CUDA graphs, weights cycled past L2; docs/kernels.md), in the order the rules are tried:
//  * 9 <= m <= 64 and L >= 16 on layers of at most num_sms / 2 narrow tiles (n <= 4224 on H100) at N / M <= 1/8,
//    or of at most num_sms / 8 (n <= 1024) at N / M <= 1/4: narrow blocks that stage x only at
//    their kept rows (kHalfDecodeKept), S = clamp(num_sms / tiles, 2, 6). At 4:32 they stage a
//    quarter of the x rows of a narrow block; measured 1.01-1.43x over the other plans on
//    1024 x 4096, 4096 x 4096 and 4096 x 11008 at m = 16-64 (4:32; 8:32 on 1024 x 4096 only:
//    1.06-1.24x), 0.97-1.03x on 4096 x 14336;
//  * m <= 8 on layers of at most num_sms / 8 wide tiles (n <= 4224 on H100) whose narrow blocks
//    keep at most 64 windows each (k <= 4096 at M = 32 with S = 2), and m <= 16 on layers of at most
//    num_sms / 4 narrow tiles (n <= 2112): narrow blocks (64 columns, the k-range of a block split
//    over its 8 warps) with S = num_sms / tiles clusters, clamped to 2..6. A narrow block stages x
//    for its whole k-range: at 4096 x 11008 and 4096 x 14336 the wide blocks with S = 10 measure
//    1.06-1.19x faster at m = 1 and 8;
//  * otherwise wide blocks (256 columns) with the largest S in {1, 2, 3, 4, 6, 8, 10, 12, 16}
//    whose grid stays within 0.85 of the blocks the SMs hold at once (half_decode_blocks_per_sm: one
//    wave, with room for the next call's blocks under programmatic dependent launch), with at
//    least two steps of 16 compressed rows per warp, and S > 8 only where each block keeps at least
//    96 rows; at m <= 8 at most S = 10 (clusters of 12 measure 1.1-1.2x slower there).
inline HalfDecodePlan half_decode_plan(int64_t m, int64_t n, int64_t k, int64_t N, int64_t M, int64_t L, int num_sms) {
  if (num_sms <= 0) num_sms = 132;
  const int64_t windows = M > 0 ? k / M : 0;
  const int64_t wide_tiles = (n + 255) / 256, narrow_tiles = (n + 63) / 64;
  int64_t s = num_sms / narrow_tiles;
  s = s < 2 ? 2 : s > 6 ? 6 : s;
  if (m > 8 && L >= 16 && ((N * 8 <= M && narrow_tiles * 2 <= num_sms) || (N * 4 <= M && narrow_tiles * 8 <= num_sms))) {
    if (s > windows) s = windows < 1 ? 1 : windows;
    return {kHalfDecodeNarrow | kHalfDecodeKept, static_cast<int>(s)};
  }
  if ((m <= 8 && wide_tiles * 8 <= num_sms && windows <= 64 * s) || (m <= 16 && narrow_tiles * 4 <= num_sms)) {
    if (s > windows) s = windows < 1 ? 1 : windows;
    return {kHalfDecodeNarrow, static_cast<int>(s)};
  }
  int64_t split = 1;
  for (const int64_t c : {2, 3, 4, 6, 8, 10, 12, 16}) {
    if (c > windows || (m <= 8 && c > 10)) break;
    const int64_t rows = (windows + c - 1) / c * N;
    if (rows < 64 || (c > 8 && rows < 96)) continue;
    const int64_t cap = half_decode_blocks_per_sm(m, windows, c, M, 0) * num_sms * 85 / 100;
    if (wide_tiles * c <= cap) split = c;
  }
  return {0, static_cast<int>(split)};
}

}  // namespace kernels
}  // namespace nmspmm
