// Warp-specialized sm_90 form of the tensor-core prefill SpMM (spmm_tc_prefill.cuh): the same
// tiles and fragments (256 outputs x 128 tokens per CTA, warps of 32 outputs x 128 tokens,
// mma.sync m16n8k16 with fp32 accumulation, the gather folded into ldmatrix row addresses), fed
// by a producer warpgroup instead of by the math warps themselves.
//
// In the cp.async form every thread issues its share of each stage's 16-byte copies, fetches index
// bytes, writes the gather table and waits at a block barrier: about 130 instructions per stage
// beside 72 per 32 mma, and a barrier that stalls all warps each stage (ncu on H100: tensor pipe
// 27% busy). Here:
//   * one producer thread brings each stage with tensor copies (TMA, 128-byte swizzle): the xT
//     slab as two boxes of [bkd rows x 64 tokens], the values tile as four boxes of
//     [s slots x 64 outputs]; out-of-bounds rows and columns are zero-filled by the copy engine;
//   * the producer warpgroup's 128 threads write the stage's gather table (slab row per vector and
//     slot, index bytes masked with M - 1; padded slots point at a zero row) one stage ahead;
//   * stage s is published through the mbarrier full[s % stages] and released through
//     empty[s % stages] (one arrival per math thread): no block barrier in the main loop;
//   * the math warps run a loop compiled for the stage's 16-slot steps (KSTEPS = s_pad / 16).
// Registers: setmaxnreg gives the producer warpgroup 40 and the 8 math warps 232 (384 threads x 168
// at launch: the math warps take exactly what the producer frees, or setmaxnreg.inc would wait).
// Shared memory per stage (every part 1024-byte aligned, as the 128-byte swizzle needs):
//   slab half h (tokens 64h..64h+63): (bkd + 1) rows of 128 bytes, row bkd zero;
//   values quarter q (outputs 64q..64q+63): s_pad rows of 128 bytes, rows s..s_pad-1 zero;
//   table: uint16 [vectors][s_pad].
// Element (row r, 16-byte chunk c) of a swizzled part lies at r * 128 + ((c ^ (r & 7)) << 4).
#pragma once
#include "cuda/kernels/half/spmm_tc_prefill.cuh"
#include "cuda/kernels/common/device_cc.h"
#include "cuda/kernels/common/mbarrier.cuh"

namespace nmspmm {
namespace kernels {
namespace tc_prefill {

constexpr int kTmaMathWarps = 8;
constexpr int kTmaThreads = kTmaMathWarps * 32 + 128;
constexpr int kTmaSmemLimit = 227 * 1024;
constexpr int kTmaMaxStages = 8;

inline int tma_stage_layout(int L, int ws, int N, int M, int* slab_half, int* val_off, int* tab_off) {
  const int bkd = ws * M, s_pad = (ws * N + 15) / 16 * 16;
  *slab_half = static_cast<int>(round_up((bkd + 1) * 128, 1024));
  *val_off = 2 * *slab_half;
  *tab_off = *val_off + 4 * s_pad * 128;
  return static_cast<int>(round_up(*tab_off + s_pad * (256 / L) * 2, 1024));
}

inline Geometry make_tma_geometry(const HalfSpmmParams& p, int split_k) {
  Geometry g{};
  g.bm = 256;
  const int64_t G = p.k / p.M;
  g.ws = choose_ws(256, p.N, p.M, p.L, G, kMaxSlotsPerStage);
  g.bkd = g.ws * p.M;
  g.s = g.ws * p.N;
  g.s_pad = (g.s + 15) / 16 * 16;
  g.nst = static_cast<int>((G + g.ws - 1) / g.ws);
  g.split = split_k < 1 ? 1 : split_k;
  if (g.split > g.nst) g.split = g.nst < 1 ? 1 : g.nst;
  g.vpc = 256 / p.L;
  g.m_pad = round_up(p.m, 8);
  g.slab_off = 0;
  g.stage_bytes = tma_stage_layout(p.L, g.ws, p.N, p.M, &g.slab_half, &g.val_off, &g.tab_off);
  const int epi = g.split == 1 ? kBN * (256 + 8) * 2 : kBN * (256 + 4) * 4;
  int stages = (kTmaSmemLimit - 1024 - 2 * kTmaMaxStages * 8) / g.stage_bytes;
  if (stages > kTmaMaxStages) stages = kTmaMaxStages;
  g.stages = stages;
  const int pipe = stages * g.stage_bytes;
  g.bar_off = pipe > epi ? pipe : epi;
  g.smem_bytes = 1024 + g.bar_off + 2 * stages * 8;
  return g;
}

template <typename T, int KSTEPS>
__global__ void __launch_bounds__(kTmaThreads, 1)
    tc_prefill_tma_kernel(const KernelArgs a, const __grid_constant__ CUtensorMap tm_x,
                          const __grid_constant__ CUtensorMap tm_v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int NJ = kBN / 8;  // n8 tiles per warp
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw_base = smem_u32(smem_raw);
  unsigned char* const smem = smem_raw + ((1024 - (raw_base & 1023)) & 1023);
  const uint32_t sbase = smem_u32(smem);

  const Geometry& g = a.g;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * 256;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kBN;
  const int z = blockIdx.z;
  const int st_begin = static_cast<int>(static_cast<int64_t>(z) * g.nst / g.split);
  const int st_end = static_cast<int>(static_cast<int64_t>(z + 1) * g.nst / g.split);
  const int nloc = st_end - st_begin;
  const int stages = g.stages;
  const uint32_t full_bar = sbase + static_cast<uint32_t>(g.bar_off);
  const uint32_t empty_bar = full_bar + 8 * stages;

  // Rows no copy writes: the slab's zero row (both halves) and the values rows past s.
  for (int b = 0; b < stages; ++b) {
    unsigned char* const sb = smem + b * g.stage_bytes;
    if (tid < 16)
      *reinterpret_cast<uint4*>(sb + (tid >> 3) * g.slab_half + g.bkd * 128 + (tid & 7) * 16) = make_uint4(0, 0, 0, 0);
    const int pad = (g.s_pad - g.s) * 8;  // 16-byte chunks per quarter
    for (int i = tid; i < 4 * pad; i += kTmaThreads)
      *reinterpret_cast<uint4*>(sb + g.val_off + (i / pad) * g.s_pad * 128 + g.s * 128 + (i % pad) * 16) =
          make_uint4(0, 0, 0, 0);
  }
  if (tid == 0) {
    for (int b = 0; b < stages; ++b) {
      mbar_init(full_bar + 8 * b, 128);
      mbar_init(empty_bar + 8 * b, kTmaMathWarps * 32);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (warp >= kTmaMathWarps) {
    // ---------------- producer warpgroup ----------------
    setmaxnreg_dec<40>();
    const int ptid = tid - kTmaMathWarps * 32;
    const int N = a.N, M = a.M;
    const int64_t q = a.n / a.L, v0 = n0 / a.L;
    const int tab_entries = g.s_pad * g.vpc;
    // Table entries e = ptid + 128 j (j < 4): (vector vl = e / s_pad, slot r = e % s_pad).
    int tab_off[kTabPerThread];  // r * q + vl: index-byte offset from the stage's first row; -1: none
    int tab_pos[kTabPerThread];  // (r / N) * M | r << 16
#pragma unroll
    for (int j = 0; j < kTabPerThread; ++j) {
      const int e = ptid + j * 128;
      const int vl = e / g.s_pad, r = e % g.s_pad;
      const bool ok = e < tab_entries && r < g.s && v0 + vl < q;
      tab_off[j] = ok ? static_cast<int>(r * q + v0 + vl) : -1;
      tab_pos[j] = ((r / N) * M) | (r << 16);
    }
    uint32_t tab_raw[kTabPerThread];
    auto fetch = [&](int st) {
      const int64_t u0 = static_cast<int64_t>(st) * g.ws * N;
      const uint8_t* const base = a.indices + u0 * q;
#pragma unroll
      for (int j = 0; j < kTabPerThread; ++j) {
        uint32_t val = static_cast<uint32_t>(g.bkd);  // padded slot: the zero row
        if (tab_off[j] >= 0 && u0 + (tab_pos[j] >> 16) < a.w)
          val = static_cast<uint32_t>(tab_pos[j] & 0xFFFF) + (__ldg(base + tab_off[j]) & static_cast<uint32_t>(M - 1));
        tab_raw[j] = val;
      }
    };
    const uint32_t tx_bytes = static_cast<uint32_t>(2 * 128 * g.bkd + 4 * 128 * g.s);
    if (nloc > 0) fetch(st_begin);
    grid_dependency_wait();  // xT: launched during the transpose (kTcPrefillDuringTranspose)
    int slot = 0;
    uint32_t phase = 0;
#pragma unroll 1
    for (int it = 0; it < nloc; ++it) {
      if (it >= stages) mbar_wait(empty_bar + 8 * slot, phase ^ 1);
      unsigned char* const sb = smem + slot * g.stage_bytes;
      uint16_t* const tab = reinterpret_cast<uint16_t*>(sb + g.tab_off);
#pragma unroll
      for (int j = 0; j < kTabPerThread; ++j) {
        const int e = ptid + j * 128;
        if (e < tab_entries) tab[e] = static_cast<uint16_t>(tab_raw[j]);
      }
      if (it + 1 < nloc) fetch(st_begin + it + 1);  // lands while this stage computes
      const uint32_t bar = full_bar + 8 * slot;
      if (ptid == 0) {
        const int st = st_begin + it;
        const int k0 = static_cast<int>(static_cast<int64_t>(st) * g.bkd);
        const int u0 = static_cast<int>(static_cast<int64_t>(st) * g.s);
        const uint32_t stage = sbase + static_cast<uint32_t>(slot * g.stage_bytes);
        mbar_arrive_expect_tx(bar, tx_bytes);
#pragma unroll
        for (int h = 0; h < 2; ++h)
          tensor_load_2d(stage + h * g.slab_half, &tm_x, static_cast<int>(t0) + 64 * h, k0, bar);
#pragma unroll
        for (int qd = 0; qd < 4; ++qd)
          tensor_load_2d(stage + g.val_off + qd * g.s_pad * 128, &tm_v, static_cast<int>(n0) + 64 * qd, u0, bar);
      } else {
        mbar_arrive(bar);
      }
      if (++slot == stages) {
        slot = 0;
        phase ^= 1;
      }
    }
    return;
  }

  // ---------------- math warps ----------------
  setmaxnreg_inc<232>();
  const int wm = warp;  // outputs wm * 32 .. + 31, all 128 tokens
  float acc[2][NJ][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;

  // Per-lane parts of the fragment addresses (see the layout above).
  const int a_k = ((lane >> 4) << 3) + (lane & 7);  // slot within k16 (A)
  const uint32_t a_lane = static_cast<uint32_t>((wm >> 1) * g.s_pad * 128 + a_k * 128) +
                          (static_cast<uint32_t>(((wm & 1) * 4 + ((lane >> 3) & 1)) ^ (lane & 7)) << 4);
  const int b_slot = (((lane >> 3) & 1) << 3) + (lane & 7);  // slot within k16 (B)
  const uint32_t b_hi = static_cast<uint32_t>(lane >> 4);    // second n8 tile of the pair
  const int tb = ((wm * 32) / a.L) * g.s_pad + b_slot;       // this lane's table entry at step 0
  const uint32_t half_bytes = static_cast<uint32_t>(g.slab_half);

  int slot = 0;
  uint32_t phase = 0;
#pragma unroll 1
  for (int it = 0; it < nloc; ++it) {
    mbar_wait(full_bar + 8 * slot, phase);
    const uint32_t slab = sbase + static_cast<uint32_t>(slot * g.stage_bytes);
    const uint32_t vals = slab + static_cast<uint32_t>(g.val_off) + a_lane;
    const uint16_t* const tab = reinterpret_cast<const uint16_t*>(smem + slot * g.stage_bytes + g.tab_off) + tb;
    uint32_t row[KSTEPS];
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) row[kk] = tab[kk * 16];
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
      uint32_t af[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) ldsm_x4_trans(af[i], (vals + kk * 16 * 128) ^ static_cast<uint32_t>(i << 5));
      const uint32_t boff = slab + row[kk] * 128 + ((b_hi ^ (row[kk] & 7)) << 4);
      uint32_t bf[NJ / 2][4];
#pragma unroll
      for (int jj = 0; jj < NJ / 2; ++jj)
        ldsm_x4_trans(bf[jj], ((boff + (jj >> 2) * half_bytes) ^ static_cast<uint32_t>((jj & 3) << 5)));
#pragma unroll
      for (int jj = 0; jj < NJ / 2; ++jj) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          mma16816<T>(acc[i][2 * jj], af[i], bf[jj][0], bf[jj][1]);
          mma16816<T>(acc[i][2 * jj + 1], af[i], bf[jj][2], bf[jj][3]);
        }
      }
    }
    mbar_arrive(empty_bar + 8 * slot);
    if (++slot == stages) {
      slot = 0;
      phase ^= 1;
    }
  }
  // Every stage is consumed (so no copy is in flight): the pipeline's space holds the output tile.
  named_barrier_sync(1, kTmaMathWarps * 32);
  store_tile<T, 256, 128, kTmaMathWarps * 32, 1>(a, smem, acc, wm, 0, tid, lane, n0, t0, z);
#endif
}

template <typename T, int KSTEPS>
cudaError_t launch_tma_kernel(const KernelArgs& ka, const CUtensorMap& tm_x, const CUtensorMap& tm_v,
                              bool during_transpose, cudaStream_t stream) {
  auto kern = tc_prefill_tma_kernel<T, KSTEPS>;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, ka.g.smem_bytes);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((ka.n + 255) / 256), static_cast<unsigned>((ka.m + kBN - 1) / kBN),
                  static_cast<unsigned>(ka.g.split));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(kTmaThreads, 1, 1);
  cfg.dynamicSmemBytes = static_cast<size_t>(ka.g.smem_bytes);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1] = {dependent_launch_attribute()};
  cfg.attrs = attr;
  cfg.numAttrs = during_transpose ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kern, ka, tm_x, tm_v);
}

// A row-major 16-bit matrix [rows, cols] (row stride ld elements) as a tensor map of
// box_rows x 64 boxes with the 128-byte swizzle, out-of-bounds elements zero-filled.
inline bool encode_b16_swizzled(CUtensorMap* map, const void* base, int64_t rows, int64_t cols, int64_t ld,
                                int box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dim[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t stride[1] = {static_cast<cuuint64_t>(ld) * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t unit[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, const_cast<void*>(base), dim, stride, box, unit,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The main kernel of the warp-specialized form (after the transpose into ka.xT). Refuses a device
// other than compute capability 9.0 (cudaErrorInvalidDevice) and (cudaErrorInvalidValue) what it is
// not built for: L < 32, more than 64 slots per stage, fewer
// than 2 pipeline stages, sizes past the tensor copies' 32-bit coordinates.
template <typename T>
cudaError_t launch_tma(const KernelArgs& ka, bool during_transpose, cudaStream_t stream) {
  const Geometry& g = ka.g;
  // Built for sm_90a only: on any other device the kernel body is empty.
  if (current_device_cc() != 90) return cudaErrorInvalidDevice;
  constexpr int64_t kMaxCoord = 0x7fffffff;
  if (ka.L < 32 || g.s_pad > 64 || g.s_pad < 16 || g.stages < 2 || g.bkd > 256 || g.s > 256 ||
      ka.k > kMaxCoord || ka.m_pad > kMaxCoord || ka.n > kMaxCoord || ka.w > kMaxCoord)
    return cudaErrorInvalidValue;
  CUtensorMap tm_x, tm_v;  // xT [k, m_pad] in bkd x 64 boxes, values [w, n] in s x 64 boxes
  if (!encode_b16_swizzled(&tm_x, ka.xT, ka.k, ka.m_pad, ka.m_pad, g.bkd) ||
      !encode_b16_swizzled(&tm_v, ka.values, ka.w, ka.n, ka.n, g.s))
    return cudaErrorInvalidValue;
  switch (g.s_pad / 16) {
    case 1: return launch_tma_kernel<T, 1>(ka, tm_x, tm_v, during_transpose, stream);
    case 2: return launch_tma_kernel<T, 2>(ka, tm_x, tm_v, during_transpose, stream);
    case 3: return launch_tma_kernel<T, 3>(ka, tm_x, tm_v, during_transpose, stream);
    default: return launch_tma_kernel<T, 4>(ka, tm_x, tm_v, during_transpose, stream);
  }
}

}  // namespace tc_prefill
}  // namespace kernels
}  // namespace nmspmm
