// 2:4 SpMM on Hopper's sparse tensor cores: a warp-specialized wgmma.mma_async.sp kernel.
//
// Roles. y^T = W x^T: the weight is the sparse operand A (rows = outputs), x the dense operand B
// (its rows are tokens, k contiguous: the K-major form, so x is read in place). A block computes
// 128 outputs x BN tokens:
//   * one producer thread (warp 8) brings each k-block of 64 inputs with tensor copies (TMA): the values
//     tile as two boxes of [32 compressed rows x 64 outputs] (the canonical [k/2, n] layout is the
//     M-major form of A), x as one box of [BN tokens x 64 inputs], both with the 128-byte swizzle,
//     and the tile's metadata words as one box [2 x words]; out-of-bounds elements are zero-filled;
//   * two consumer warpgroups (warps 0-7), 64 outputs each, issue two wgmma.sp m64nBNk32 per k-block (dense
//     k 32 = 16 kept values per row), fp32 accumulators in registers;
//   * stages are handed over by mbarriers (full: the copy engine's bytes; empty: one arrival per
//     consumer warp once its wgmma on the stage has completed), never a block barrier.
// Metadata: a 32-bit word per (vector, 32 inputs) holds the 8 windows' 2-bit position pairs; a
// thread's operand for rows r and r + 8 of its warp is the halves of those rows' vectors' words
// that cover its 16 inputs, so vectors of any L share one word per window group (L = 1: 2 bits
// per kept value).
// Split-K: split_k blocks of a cluster take consecutive k ranges; each stages its fp32 tile in its
// own shared memory and block r sums rows [r * 128 / split, ...) over the cluster in rank order
// (deterministic) through distributed shared memory.
// Blocks per SM (MINB): 1 for the 256-token tile (128 fp32 accumulators per thread), 2 for the
// 128-token tile, so that one block's prologue and epilogue overlap the other's main loop.
// Epilogue: accumulators go to shared memory as fp32 [token][output] (padded rows), then every
// consumer thread writes 8 outputs of one token as one 16-byte store (bias added in fp32).
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/kernels/common/mbarrier.cuh"
#include "cuda/kernels/sparse_tc/sparse_tc.h"
#include "cuda/kernels/sparse_tc/wgmma_sp.h"

namespace nmspmm {
namespace kernels {
namespace sparse_tc {

constexpr int kBM = kSparseTcTileOut;  // outputs per block: two consumer warpgroups of 64
constexpr int kBK = 64;                // inputs per stage (32 compressed rows)
constexpr int kThreads = 288;          // two consumer warpgroups + one producer warp
constexpr int kSmemLimit = 227 * 1024;
constexpr int kMaxStages = 8;
constexpr int kMetaWordsMax = 128;     // metadata words per k32 row of a stage (L = 1)
constexpr int kEpiPitch = kBM + 4;     // fp32 staging row pitch: conflict-free fragment stores

template <int BN, int MINB>
struct Geometry {
  static constexpr int kLimit = MINB == 1 ? kSmemLimit : 113 * 1024;  // per block, MINB blocks per SM
  static constexpr int kA = 2 * 32 * 128;         // two [32 x 64] value boxes
  static constexpr int kB = BN * 128;             // [BN x 64] x box
  static constexpr int kMeta = 2 * kMetaWordsMax * 4;
  static constexpr int kStage = (kA + kB + kMeta + 1023) / 1024 * 1024;
  static constexpr int kEpi = BN * kEpiPitch * 4;
  static constexpr int kStagesFit = (kLimit - 1024 - 2 * kMaxStages * 8) / kStage;
  static constexpr int kStages = kStagesFit > kMaxStages ? kMaxStages : kStagesFit;
  static constexpr int kPipe = kStages * kStage;
  static constexpr int kRegion = kPipe > kEpi ? kPipe : kEpi;
  static constexpr int kSmem = 1024 + kRegion + 2 * kStages * 8;
  static_assert(kStages >= 2, "at least two pipeline stages");
  static_assert(kSmem <= kLimit, "shared memory");
};

struct Args {
  const uint16_t* bias;
  uint16_t* y;
  int64_t m, n, k;
  int L;
  int meta_words;  // metadata words per k32 row of a stage box: max(4, 128 / L)
  int split;
};

// Shared-memory matrix descriptor (wgmma): 128-byte swizzle, strides in bytes.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr >> 4) & 0x3FFF) | (static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int PENDING>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
}
template <int N>
__device__ __forceinline__ void fence_accumulators(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;\n" ::: "memory");
}
__device__ __forceinline__ float4 ld_dsmem_f4(uint32_t local_addr, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local_addr), "r"(rank));
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(remote)
               : "memory");
  return v;
}

template <typename T>
__device__ __forceinline__ uint32_t pack2(float a, float b);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float a, float b) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float a, float b) {
  __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <typename T>
__device__ __forceinline__ float to_f32(uint16_t bits);
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}
template <>
__device__ __forceinline__ float to_f32<__half>(uint16_t bits) {
  return __half2float(__ushort_as_half(bits));
}

// Epilogue, first step (a consumer thread whose wgmma have completed, once every consumer's wgmma
// has read its last stage): its accumulators, rows r0 and r0 + 8 of the tile, into the fp32 staging
// tile [token][output] (row pitch kEpiPitch) at the start of shared memory.
template <int BN>
__device__ __forceinline__ void stage_accumulators(float* stage_f, const float* acc, int r0, int lane) {
  const int c0 = 2 * (lane & 3);
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int c = 8 * j + c0;
    stage_f[c * kEpiPitch + r0] = acc[4 * j + 0];
    stage_f[(c + 1) * kEpiPitch + r0] = acc[4 * j + 1];
    stage_f[c * kEpiPitch + r0 + 8] = acc[4 * j + 2];
    stage_f[(c + 1) * kEpiPitch + r0 + 8] = acc[4 * j + 3];
  }
}

// Epilogue, second step (consumer threads ct = 0..255, once the staged tiles of every block of the
// cluster are visible): 8 outputs of one token summed over the split's tiles in rank order
// (deterministic; block r takes rows [r * 128 / split, ...)), bias added in fp32, one 16-byte store.
template <typename T, int BN>
__device__ __forceinline__ void store_tile(const unsigned char* smem, uint32_t sbase, int ct, int split, int64_t t0,
                                           int64_t n0, int64_t m, int64_t n, const uint16_t* bias, uint16_t* y) {
  const int rows = kBM / split, chunks = rows / 8;
  const int row_base = (split > 1 ? static_cast<int>(cluster_rank()) : 0) * rows;
  for (int idx = ct; idx < chunks * BN; idx += 256) {
    const int col = idx / chunks, row = row_base + 8 * (idx - col * chunks);
    const int64_t token = t0 + col, out = n0 + row;
    if (token >= m || out >= n) continue;
    const uint32_t off = sbase + static_cast<uint32_t>((col * kEpiPitch + row) * 4);
    float4 lo = make_float4(0.f, 0.f, 0.f, 0.f), hi = lo;
    for (int q = 0; q < split; ++q) {
      float4 u, v;
      if (split > 1) {
        u = ld_dsmem_f4(off, q);
        v = ld_dsmem_f4(off + 16, q);
      } else {
        const float* p = reinterpret_cast<const float*>(smem) + col * kEpiPitch + row;
        u = *reinterpret_cast<const float4*>(p);
        v = *reinterpret_cast<const float4*>(p + 4);
      }
      lo.x += u.x; lo.y += u.y; lo.z += u.z; lo.w += u.w;
      hi.x += v.x; hi.y += v.y; hi.z += v.z; hi.w += v.w;
    }
    if (bias != nullptr) {
      const uint4 b = *reinterpret_cast<const uint4*>(bias + out);
      lo.x += to_f32<T>(b.x & 0xFFFF); lo.y += to_f32<T>(b.x >> 16);
      lo.z += to_f32<T>(b.y & 0xFFFF); lo.w += to_f32<T>(b.y >> 16);
      hi.x += to_f32<T>(b.z & 0xFFFF); hi.y += to_f32<T>(b.z >> 16);
      hi.z += to_f32<T>(b.w & 0xFFFF); hi.w += to_f32<T>(b.w >> 16);
    }
    uint4 o;
    o.x = pack2<T>(lo.x, lo.y);
    o.y = pack2<T>(lo.z, lo.w);
    o.z = pack2<T>(hi.x, hi.y);
    o.w = pack2<T>(hi.z, hi.w);
    *reinterpret_cast<uint4*>(y + token * n + out) = o;
  }
}

template <typename T, int BN, int MINB>
__global__ void __launch_bounds__(kThreads, MINB)
    sparse_tc_kernel(const Args a, const __grid_constant__ CUtensorMap tm_x, const __grid_constant__ CUtensorMap tm_v,
                     const __grid_constant__ CUtensorMap tm_meta) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using G = Geometry<BN, MINB>;
  constexpr int kStages = G::kStages;
  constexpr int kAcc = BN / 2;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw_base = smem_addr(smem_raw);
  unsigned char* const smem = smem_raw + ((1024 - (raw_base & 1023)) & 1023);
  const uint32_t sbase = smem_addr(smem);
  const uint32_t bar_full = sbase + G::kRegion, bar_empty = bar_full + kStages * 8;

  const int tid = threadIdx.x;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBM;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * BN;
  const int split = a.split;
  const int z = blockIdx.z;  // k range of this block; equals its rank in the cluster
  const int64_t kblocks = (a.k + kBK - 1) / kBK;
  const int64_t kb_begin = kblocks * z / split, kb_end = kblocks * (z + 1) / split;
  const int nkb = static_cast<int>(kb_end - kb_begin);

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(bar_full + 8 * s, 1);
      mbar_init(bar_empty + 8 * s, 8);  // one arrival per consumer warp
    }
    mbar_init_fence();
  }
  __syncthreads();

  const uint32_t stage_tx = G::kA + G::kB + 2u * a.meta_words * 4u;
  if (tid >= 256) {
    if (tid == 256) {
      // Box origin on a 16-byte boundary (a copy starting mid-line faults); the consumers add
      // the offset back (meta_skew).
      const int v0 = static_cast<int>(n0 / a.L) & ~3;
      for (int i = 0; i < nkb; ++i) {
        const int s = i % kStages;
        if (i >= kStages) mbar_wait(bar_empty + 8 * s, ((i / kStages) - 1) & 1);
        const uint32_t st = sbase + s * G::kStage;
        const int kb = static_cast<int>(kb_begin + i);
        mbar_arrive_expect_tx(bar_full + 8 * s, stage_tx);
        tensor_load_2d(st, &tm_v, static_cast<int>(n0), kb * 32, bar_full + 8 * s);
        tensor_load_2d(st + 4096, &tm_v, static_cast<int>(n0) + 64, kb * 32, bar_full + 8 * s);
        tensor_load_2d(st + G::kA, &tm_x, kb * kBK, static_cast<int>(t0), bar_full + 8 * s);
        tensor_load_2d(st + G::kA + G::kB, &tm_meta, v0, kb * 2, bar_full + 8 * s);
      }
    }
  } else {
    const int wg = tid >> 7;  // consumer warpgroup: outputs 64 wg .. 64 wg + 63
    const int ct = tid & 127, warp = ct >> 5, lane = tid & 31;
    const int r0 = 64 * wg + 16 * warp + (lane >> 2);  // this thread's rows r0 and r0 + 8 of the tile
    const int meta_skew = static_cast<int>(n0 / a.L) & 3;  // nonzero only for L >= 64
    const int v_r0 = meta_skew + r0 / a.L, v_r1 = meta_skew + (r0 + 8) / a.L;
    const int half_shift = 16 * (lane & 1);  // inputs 16 (lane & 1) .. + 15 of each k32 step
    float acc[kAcc];
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
    for (int i = 0; i < nkb; ++i) {
      const int s = i % kStages;
      mbar_wait(bar_full + 8 * s, (i / kStages) & 1);
      const uint32_t st = sbase + s * G::kStage;
      const uint32_t* meta = reinterpret_cast<const uint32_t*>(smem + s * G::kStage + G::kA + G::kB);
      // Selectors and descriptors of both k32 steps before the fence: a register an issued wgmma
      // reads must be written before the warpgroup's fence, else ptxas serializes the wgmma.
      uint32_t e[2];
      uint64_t da[2], db[2];
#pragma unroll
      for (int step = 0; step < 2; ++step) {
        const uint32_t w0 = meta[step * a.meta_words + v_r0], w1 = meta[step * a.meta_words + v_r1];
        e[step] = ((w0 >> half_shift) & 0xFFFFu) | (((w1 >> half_shift) & 0xFFFFu) << 16);
        // A: rows 16 step .. 16 step + 15 of this warpgroup's [32 x 64] box (8-row groups 1024 B
        // apart); B: inputs 32 step .. of the [BN x 64] box (token 8-row groups 1024 B apart).
        da[step] = smem_desc(st + wg * 4096 + step * 2048, 1024, 1024);
        db[step] = smem_desc(st + G::kA + step * 64, 16, 1024);
      }
      fence_accumulators(acc);
      wgmma_fence();
      WgmmaSp<T, BN>::mma(da[0], db[0], acc, e[0]);
      WgmmaSp<T, BN>::mma(da[1], db[1], acc, e[1]);
      wgmma_commit();
      wgmma_wait<1>();
      fence_accumulators(acc);
      // The wgmma of the previous stage has completed: release its buffers.
      if (i > 0) {
        __syncwarp();
        if (lane == 0) mbar_arrive(bar_empty + 8 * ((i - 1) % kStages));
      }
    }
    wgmma_wait<0>();
    fence_accumulators(acc);
    // Every consumer's wgmma has read its last stage before the staging overwrites the pipeline.
    named_barrier_sync(1, 256);
    stage_accumulators<BN>(reinterpret_cast<float*>(smem), acc, r0, lane);
  }
  // The partial tiles are staged (split > 1: in every block of the cluster).
  if (split > 1) {
    cluster_sync_all();
  } else {
    __syncthreads();
  }
  if (tid < 256) store_tile<T, BN>(smem, sbase, tid, split, t0, n0, a.m, a.n, a.bias, a.y);
  // No block may exit while another block of its cluster still reads its staged tile.
  if (split > 1) cluster_sync_all();
#endif
}


// A 2-D tensor map of a row-major matrix [rows, cols] (row stride `ld_bytes`) in boxes of
// box_rows x box_cols elements, out-of-bounds elements zero-filled.
inline bool encode_map(CUtensorMap* map, CUtensorMapDataType type, int elem_bytes, const void* base, int64_t rows,
                       int64_t cols, int64_t ld_bytes, int box_rows, int box_cols, CUtensorMapSwizzle swizzle) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  (void)elem_bytes;
  const cuuint64_t dim[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t stride[1] = {static_cast<cuuint64_t>(ld_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t unit[2] = {1, 1};
  return encode(map, type, 2, const_cast<void*>(base), dim, stride, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Launches sparse_tc_kernel<T, BN> for a problem launch_sparse_tc has checked.
template <typename T, int BN, int MINB>
cudaError_t launch_tile(const SparseTcParams& p, cudaStream_t stream) {
  using G = Geometry<BN, MINB>;
  // Metadata words per k32 row of a box: the tile's 128 / L vectors, at least 16 bytes and, for
  // L >= 64, the 16-byte line that holds the tile's vectors.
  const int meta_words = p.L >= 32 ? 4 : kMetaWordsMax / p.L;
  CUtensorMap tm_x, tm_v, tm_meta;
  if (!encode_map(&tm_x, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, p.x, p.m, p.k, p.ldx * 2, BN, 64,
                  CU_TENSOR_MAP_SWIZZLE_128B) ||
      !encode_map(&tm_v, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, p.values, p.k / 2, p.n, p.n * 2, 32, 64,
                  CU_TENSOR_MAP_SWIZZLE_128B) ||
      !encode_map(&tm_meta, CU_TENSOR_MAP_DATA_TYPE_UINT32, 4, p.meta, (p.k + 31) / 32, p.meta_ld, p.meta_ld * 4, 2,
                  meta_words, CU_TENSOR_MAP_SWIZZLE_NONE))
    return cudaErrorInvalidValue;
  Args a;
  a.bias = static_cast<const uint16_t*>(p.bias);
  a.y = static_cast<uint16_t*>(p.y);
  a.m = p.m;
  a.n = p.n;
  a.k = p.k;
  a.L = p.L;
  a.meta_words = meta_words;
  a.split = p.split_k;
  auto kern = sparse_tc_kernel<T, BN, MINB>;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, G::kSmem);
  if (e != cudaSuccess) return e;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>((p.n + kBM - 1) / kBM), static_cast<unsigned>((p.m + BN - 1) / BN),
                     static_cast<unsigned>(p.split_k));
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = static_cast<size_t>(G::kSmem);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = static_cast<unsigned>(p.split_k);
  cfg.attrs = attr;
  cfg.numAttrs = p.split_k > 1 ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kern, a, tm_x, tm_v, tm_meta);
}

}  // namespace sparse_tc
}  // namespace kernels
}  // namespace nmspmm
