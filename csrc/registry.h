// The kernel registry: every SpMM kernel nmspmm builds, by name, with what it can run. The single
// source of truth for the launcher (csrc/cuda/kernels/f32/spmm_launch.cu), the heuristic
// (csrc/policy.h), the argument checks of spmm_with_plan and, through torch.ops.nmspmm.kernels()
// and kernel_info(), the tests, benchmarks and tools. Torch-free and CUDA-free: compiled into
// every build and unit-tested on the CPU.
//
// Adding a kernel: add an enumerator to Kernel and its row to kKernelTable (same position; the
// static_assert below checks the count), give its family a case in kernel_supports if the family
// is new, and a case in the launcher (or a new launch function the launcher calls). The heuristic
// picks it only once a rule in policy.h or a cost in cost_model.h names it.
#pragma once
#include <cstdint>
#include <cstring>

#include "pattern.h"

namespace nmspmm {

// Element type of x, the weight values, bias and y.
enum class DType : int { kF32 = 0, kF16 = 1, kBF16 = 2 };
inline const char* dtype_name(DType t) {
  return t == DType::kF32 ? "float32" : t == DType::kF16 ? "float16" : "bfloat16";
}

enum class Family : int {
  kGeneric,        // any pattern: one thread per output column and 4 rows
  kDecodeSplitK,   // m <= 16, any L: streams the compressed weight, k split over blocks (workspace)
  kDecodeCluster,  // m <= 2, clusters: k split over the warps of a block and the blocks of a cluster
  kDecodeStaged,   // m <= 16, clusters: 8 warps over 128 x col_warps columns share a staged x
  kTiled,          // L >= 16: the whole k-slab of x for a tile in shared memory
  kPacked,         // L >= 16 + col_info: only the x columns the tile's vectors keep (high sparsity)
  kWarpPacked,     // L >= 32: each warp stages only the x rows its vector keeps
  kProducer,       // sm_90a, L >= 32: a producer warp feeds 8 math warps through tensor copies
  kProducerTail,   // the same with split-K on the grid's last round of tiles only
  kDecodeTc,       // fp16 / bf16, m <= 64, clusters: tensor-core streaming of the weight, k split on chip
  kTcPrefill,      // fp16 / bf16, sm_80+: gathered ldmatrix + mma.sync over a k-major copy of x
  kDenseExpand,    // any dtype: the weight expanded to dense for the call, then cuBLAS
  kSparseTc,       // fp16 / bf16, sm_90a, N:M = 2:4 (any L): wgmma.sp on the sparse tensor cores
  kDecodeSparseTc, // fp16 / bf16, m <= 64, clusters, 2:4 (any L): decode_tc's stream into mma.sp
  kExpandMma,      // fp16 / bf16, sm_80+, L <= 32: the weight expanded per warp in shared memory, mma.sync
  kExpandWgmma,    // fp16 / bf16, sm_90a, M <= 64: expansion warps feed a dense operand to wgmma
  kGatherWgmma,    // fp16 / bf16, sm_90a, L = 64 or 128: kept rows of x gathered into wgmma's operand
};
inline const char* family_name(Family f) {
  switch (f) {
    case Family::kGeneric: return "generic";
    case Family::kDecodeSplitK: return "decode_splitk";
    case Family::kDecodeCluster: return "decode_cluster";
    case Family::kDecodeStaged: return "decode_staged";
    case Family::kTiled: return "tiled";
    case Family::kPacked: return "packed";
    case Family::kWarpPacked: return "warp_packed";
    case Family::kProducer: return "producer";
    case Family::kProducerTail: return "producer_tail";
    case Family::kDecodeTc: return "decode_tc";
    case Family::kTcPrefill: return "tc_prefill";
    case Family::kDenseExpand: return "dense_expand";
    case Family::kSparseTc: return "sparse_tc";
    case Family::kDecodeSparseTc: return "decode_sparse_tc";
    case Family::kExpandMma: return "expand_mma";
    case Family::kExpandWgmma: return "expand_wgmma";
    case Family::kGatherWgmma: return "gather_wgmma";
  }
  return "?";
}

enum class Kernel : int {
  kGenericF32,
  kDecodeF32SplitK,
  kDecodeF32ClusterW4,
  kDecodeF32ClusterW8,
  kDecodeF32ClusterW16,
  kDecodeF32Staged128,
  kDecodeF32Staged256,
  kDecodeF32Staged512,
  kTiledF32_128x128,
  kTiledF32_64x128,
  kTiledF32_32x128,
  kTiledF32_64x64,
  kTiledF32_128x256,
  kTiledF32_256x128,
  kTiledF32_128x128W8,
  kPackedF32_128x128,
  kPackedF32_64x128,
  kPackedF32_32x128,
  kWarpPackedF32_128x128,
  kWarpPackedF32_64x128,
  kWarpPackedF32_32x128,
  kProducerF32_128x256,
  kProducerTailF32_128x256,
  kDecodeTcBF16_64,
  kDecodeTcBF16_256,
  kDecodeTcF16_64,
  kDecodeTcF16_256,
  kDecodeTcBF16Kept64,
  kDecodeTcF16Kept64,
  kTcPrefillBF16_128x256,
  kTcPrefillF16_128x256,
  kDenseExpandBF16,
  kDenseExpandF16,
  kDenseExpandF32,
  kDecodeSplitKBF16,
  kDecodeSplitKF16,
  kSparseTcBF16_256x128,
  kSparseTcBF16_128x128,
  kSparseTcBF16_64x128,
  kSparseTcBF16_16x128,
  kSparseTcF16_256x128,
  kSparseTcF16_128x128,
  kSparseTcF16_64x128,
  kSparseTcF16_16x128,
  kDecodeSparseTcBF16_64,
  kDecodeSparseTcBF16_256,
  kDecodeSparseTcF16_64,
  kDecodeSparseTcF16_256,
  kExpandMmaBF16_16x128,
  kExpandMmaBF16_64x128,
  kExpandMmaBF16_128x128,
  kExpandMmaF16_16x128,
  kExpandMmaF16_64x128,
  kExpandMmaF16_128x128,
  kExpandWgmmaBF16_64x128,
  kExpandWgmmaBF16_128x128,
  kExpandWgmmaF16_64x128,
  kExpandWgmmaF16_128x128,
  kGatherWgmmaBF16_128x128,
  kGatherWgmmaBF16_256x128,
  kGatherWgmmaF16_128x128,
  kGatherWgmmaF16_256x128,
  kCount,
  kNone = -1,
};

// Largest cluster (split_k) of the cluster and staged decode kernels: non-portable above 8 (H100
// and H200 place 16; a device that cannot fails the launch).
constexpr int kMaxDecodeCluster = 16;
// Largest split_k of every other kernel.
constexpr int kMaxSplitK = 64;
// Largest split_k (cluster size) of the sparse tensor-core kernels; they take 1, 2, 4 or 8.
constexpr int kMaxSparseTcSplit = 8;
// Largest split_k of the fused-expansion kernels (k split over the grid, fp32 partials).
constexpr int kMaxExpandMmaSplit = 32;
// Largest split_k (cluster size) of the Hopper fused-expansion kernels; they take 1, 2, 4 or 8.
constexpr int kMaxExpandWgmmaSplit = 8;
// Largest split_k (cluster size) of the Hopper gathered-operand kernels; they take 1, 2, 4 or 8.
constexpr int kMaxGatherWgmmaSplit = 8;
// Largest m of the fp16 / bf16 prefill kernel (its x transpose's grid; larger m takes the dense
// expansion).
constexpr int kTcPrefillMaxM = 65535 * 64;

struct KernelInfo {
  Kernel id;
  const char* name;
  Family family;
  DType dtype;
  int tile_m, tile_n;  // output tile of a block (0: not tiled)
  int warps;           // warps per block
  int variant;         // decode cluster: warps per block; decode staged: 128-column warps;
                       // decode_tc: output columns per block; else 0
  int min_L;           // smallest vector length
  int max_M;           // largest M (0: any)
  int max_m;           // largest m (0: any)
  int min_cc;          // compute capability x 10 it needs (90: thread-block clusters)
  bool needs_sm90a;    // built only for sm_90a (setmaxnreg, tensor copies)
  bool needs_col_info; // reads col_info / packed_indices
  bool reads_xt;       // reads the k-major copy of x written by a transpose before it
  int max_split_k;
};

// The row order is the order of Kernel.
constexpr KernelInfo kKernelTable[] = {
    {Kernel::kGenericF32, "generic_f32", Family::kGeneric, DType::kF32, 0, 0, 4, 0, 1, 0, 0, 0, false, false, false, 1},
    {Kernel::kDecodeF32SplitK, "decode_f32_splitk", Family::kDecodeSplitK, DType::kF32, 0, 128, 4, 0, 1, 0, 16, 0, false, false, false, kMaxSplitK},
    {Kernel::kDecodeF32ClusterW4, "decode_f32_cluster_w4", Family::kDecodeCluster, DType::kF32, 0, 128, 4, 4, 4, 0, 2, 90, false, false, false, kMaxDecodeCluster},
    {Kernel::kDecodeF32ClusterW8, "decode_f32_cluster_w8", Family::kDecodeCluster, DType::kF32, 0, 128, 8, 8, 4, 0, 2, 90, false, false, false, kMaxDecodeCluster},
    {Kernel::kDecodeF32ClusterW16, "decode_f32_cluster_w16", Family::kDecodeCluster, DType::kF32, 0, 128, 16, 16, 4, 0, 2, 90, false, false, false, kMaxDecodeCluster},
    {Kernel::kDecodeF32Staged128, "decode_f32_staged_128", Family::kDecodeStaged, DType::kF32, 0, 128, 8, 1, 4, 512, 16, 90, false, false, false, kMaxDecodeCluster},
    {Kernel::kDecodeF32Staged256, "decode_f32_staged_256", Family::kDecodeStaged, DType::kF32, 0, 256, 8, 2, 4, 512, 16, 90, false, false, false, kMaxDecodeCluster},
    {Kernel::kDecodeF32Staged512, "decode_f32_staged_512", Family::kDecodeStaged, DType::kF32, 0, 512, 8, 4, 4, 512, 16, 90, false, false, false, kMaxDecodeCluster},
    {Kernel::kTiledF32_128x128, "tiled_f32_128x128", Family::kTiled, DType::kF32, 128, 128, 4, 0, 16, 64, 0, 0, false, false, true, kMaxSplitK},
    {Kernel::kTiledF32_64x128, "tiled_f32_64x128", Family::kTiled, DType::kF32, 64, 128, 4, 0, 16, 64, 0, 0, false, false, true, kMaxSplitK},
    {Kernel::kTiledF32_32x128, "tiled_f32_32x128", Family::kTiled, DType::kF32, 32, 128, 4, 0, 16, 64, 0, 0, false, false, true, kMaxSplitK},
    {Kernel::kTiledF32_64x64, "tiled_f32_64x64", Family::kTiled, DType::kF32, 64, 64, 2, 0, 16, 64, 0, 0, false, false, true, kMaxSplitK},
    {Kernel::kTiledF32_128x256, "tiled_f32_128x256", Family::kTiled, DType::kF32, 128, 256, 8, 0, 16, 32, 0, 0, false, false, true, kMaxSplitK},
    {Kernel::kTiledF32_256x128, "tiled_f32_256x128", Family::kTiled, DType::kF32, 256, 128, 8, 0, 16, 32, 0, 0, false, false, true, kMaxSplitK},
    {Kernel::kTiledF32_128x128W8, "tiled_f32_128x128_w8", Family::kTiled, DType::kF32, 128, 128, 8, 0, 16, 64, 0, 0, false, false, true, kMaxSplitK},
    {Kernel::kPackedF32_128x128, "packed_f32_128x128", Family::kPacked, DType::kF32, 128, 128, 4, 0, 16, kPackKBlock, 0, 0, false, true, true, kMaxSplitK},
    {Kernel::kPackedF32_64x128, "packed_f32_64x128", Family::kPacked, DType::kF32, 64, 128, 4, 0, 16, kPackKBlock, 0, 0, false, true, true, kMaxSplitK},
    {Kernel::kPackedF32_32x128, "packed_f32_32x128", Family::kPacked, DType::kF32, 32, 128, 4, 0, 16, kPackKBlock, 0, 0, false, true, true, kMaxSplitK},
    {Kernel::kWarpPackedF32_128x128, "warp_packed_f32_128x128", Family::kWarpPacked, DType::kF32, 128, 128, 4, 0, 32, 0, 0, 0, false, false, true, kMaxSplitK},
    {Kernel::kWarpPackedF32_64x128, "warp_packed_f32_64x128", Family::kWarpPacked, DType::kF32, 64, 128, 4, 0, 32, 0, 0, 0, false, false, true, kMaxSplitK},
    {Kernel::kWarpPackedF32_32x128, "warp_packed_f32_32x128", Family::kWarpPacked, DType::kF32, 32, 128, 4, 0, 32, 0, 0, 0, false, false, true, kMaxSplitK},
    {Kernel::kProducerF32_128x256, "producer_f32_128x256_sm90a", Family::kProducer, DType::kF32, 128, 256, 12, 0, 32, 32, 0, 90, true, false, true, kMaxSplitK},
    {Kernel::kProducerTailF32_128x256, "producer_tail_f32_128x256_sm90a", Family::kProducerTail, DType::kF32, 128, 256, 12, 0, 32, 32, 0, 90, true, false, true, kMaxSplitK},
    // fp16 / bf16. The decode kernels: blocks of 8 warps over 64 or 256 output columns (variant),
    // split_k = cluster size. The prefill kernel makes its own k-major copy of x (not reads_xt); its
    // transpose covers 64 rows of x per block in grid y (at most 65535), hence m <= 4,194,240.
    {Kernel::kDecodeTcBF16_64, "decode_tc_bf16_64", Family::kDecodeTc, DType::kBF16, 0, 64, 8, 64, 4, 64, 64, 90, false, false, false, kMaxDecodeCluster},
    {Kernel::kDecodeTcBF16_256, "decode_tc_bf16_256", Family::kDecodeTc, DType::kBF16, 0, 256, 8, 256, 4, 64, 64, 90, false, false, false, kMaxDecodeCluster},
    {Kernel::kDecodeTcF16_64, "decode_tc_f16_64", Family::kDecodeTc, DType::kF16, 0, 64, 8, 64, 4, 64, 64, 90, false, false, false, kMaxDecodeCluster},
    {Kernel::kDecodeTcF16_256, "decode_tc_f16_256", Family::kDecodeTc, DType::kF16, 0, 256, 8, 256, 4, 64, 64, 90, false, false, false, kMaxDecodeCluster},
    // Blocks of 64 columns that stage x only at the rows their vectors keep (decode_half.cuh).
    {Kernel::kDecodeTcBF16Kept64, "decode_tc_bf16_kept64", Family::kDecodeTc, DType::kBF16, 0, 64, 8, 64, 16, 64, 64, 90, false, false, false, kMaxDecodeCluster},
    {Kernel::kDecodeTcF16Kept64, "decode_tc_f16_kept64", Family::kDecodeTc, DType::kF16, 0, 64, 8, 64, 16, 64, 64, 90, false, false, false, kMaxDecodeCluster},
    {Kernel::kTcPrefillBF16_128x256, "tc_prefill_bf16_128x256", Family::kTcPrefill, DType::kBF16, 128, 256, 8, 0, 16, 64, kTcPrefillMaxM, 80, false, false, false, 4},
    {Kernel::kTcPrefillF16_128x256, "tc_prefill_f16_128x256", Family::kTcPrefill, DType::kF16, 128, 256, 8, 0, 16, 64, kTcPrefillMaxM, 80, false, false, false, 4},
    // The dense expansion + cuBLAS, in every dtype: runs every pattern and every m, so the policy
    // always has it as a candidate (no call is planned slower than the expansion by the cost model).
    // The 16-bit rows need sm_80 (bf16 tensor cores; the native 16-bit kernels' floor).
    {Kernel::kDenseExpandBF16, "dense_expand_bf16", Family::kDenseExpand, DType::kBF16, 0, 0, 8, 0, 1, 64, 0, 80, false, false, false, 1},
    {Kernel::kDenseExpandF16, "dense_expand_f16", Family::kDenseExpand, DType::kF16, 0, 0, 8, 0, 1, 64, 0, 80, false, false, false, 1},
    {Kernel::kDenseExpandF32, "dense_expand_f32", Family::kDenseExpand, DType::kF32, 0, 0, 8, 0, 1, 64, 0, 0, false, false, false, 1},
    // The split-K decode kernel with values in their own 16-bit dtype, any L (spmm_decode_splitk.cuh).
    {Kernel::kDecodeSplitKBF16, "decode_splitk_bf16", Family::kDecodeSplitK, DType::kBF16, 0, 128, 4, 0, 1, 0, 16, 80, false, false, false, kMaxSplitK},
    {Kernel::kDecodeSplitKF16, "decode_splitk_f16", Family::kDecodeSplitK, DType::kF16, 0, 128, 4, 0, 1, 0, 16, 80, false, false, false, kMaxSplitK},
    // 2:4 on the sparse tensor cores (kernels/sparse_tc/): blocks of tile_m tokens x 128 outputs, 8
    // consumer warps + a producer warp, variant = blocks per SM; split_k (1, 2, 4, 8) = cluster size.
    {Kernel::kSparseTcBF16_256x128, "sparse_tc_bf16_256x128_sm90a", Family::kSparseTc, DType::kBF16, 256, 128, 9, 1, 1, 4, 0, 90, true, false, false, kMaxSparseTcSplit},
    {Kernel::kSparseTcBF16_128x128, "sparse_tc_bf16_128x128_sm90a", Family::kSparseTc, DType::kBF16, 128, 128, 9, 2, 1, 4, 0, 90, true, false, false, kMaxSparseTcSplit},
    {Kernel::kSparseTcBF16_64x128, "sparse_tc_bf16_64x128_sm90a", Family::kSparseTc, DType::kBF16, 64, 128, 9, 1, 1, 4, 0, 90, true, false, false, kMaxSparseTcSplit},
    {Kernel::kSparseTcBF16_16x128, "sparse_tc_bf16_16x128_sm90a", Family::kSparseTc, DType::kBF16, 16, 128, 9, 1, 1, 4, 0, 90, true, false, false, kMaxSparseTcSplit},
    {Kernel::kSparseTcF16_256x128, "sparse_tc_f16_256x128_sm90a", Family::kSparseTc, DType::kF16, 256, 128, 9, 1, 1, 4, 0, 90, true, false, false, kMaxSparseTcSplit},
    {Kernel::kSparseTcF16_128x128, "sparse_tc_f16_128x128_sm90a", Family::kSparseTc, DType::kF16, 128, 128, 9, 2, 1, 4, 0, 90, true, false, false, kMaxSparseTcSplit},
    {Kernel::kSparseTcF16_64x128, "sparse_tc_f16_64x128_sm90a", Family::kSparseTc, DType::kF16, 64, 128, 9, 1, 1, 4, 0, 90, true, false, false, kMaxSparseTcSplit},
    {Kernel::kSparseTcF16_16x128, "sparse_tc_f16_16x128_sm90a", Family::kSparseTc, DType::kF16, 16, 128, 9, 1, 1, 4, 0, 90, true, false, false, kMaxSparseTcSplit},
    // 2:4 decode (kernels/half/decode_half.cuh, kHalfDecodeSparse24): the decode_tc blocks of 64 or
    // 256 output columns (variant), the weight's stream fed to mma.sp; split_k = cluster size.
    {Kernel::kDecodeSparseTcBF16_64, "decode_sparse_tc_bf16_64", Family::kDecodeSparseTc, DType::kBF16, 0, 64, 8, 64, 1, 4, 64, 90, false, false, false, kMaxDecodeCluster},
    {Kernel::kDecodeSparseTcBF16_256, "decode_sparse_tc_bf16_256", Family::kDecodeSparseTc, DType::kBF16, 0, 256, 8, 256, 1, 4, 64, 90, false, false, false, kMaxDecodeCluster},
    {Kernel::kDecodeSparseTcF16_64, "decode_sparse_tc_f16_64", Family::kDecodeSparseTc, DType::kF16, 0, 64, 8, 64, 1, 4, 64, 90, false, false, false, kMaxDecodeCluster},
    {Kernel::kDecodeSparseTcF16_256, "decode_sparse_tc_f16_256", Family::kDecodeSparseTc, DType::kF16, 0, 256, 8, 256, 1, 4, 64, 90, false, false, false, kMaxDecodeCluster},
    // The fused expansion (kernels/half/expand_mma.cuh): blocks of tile_m tokens x 128 outputs, 4
    // warps; any N:M with L <= 32 (kernel_supports), k split over the grid (fp32 partials); m up to
    // 65535 token tiles (grid y).
    {Kernel::kExpandMmaBF16_16x128, "expand_mma_bf16_16x128", Family::kExpandMma, DType::kBF16, 16, 128, 4, 0, 1, 64, 65535 * 16, 80, false, false, false, kMaxExpandMmaSplit},
    {Kernel::kExpandMmaBF16_64x128, "expand_mma_bf16_64x128", Family::kExpandMma, DType::kBF16, 64, 128, 4, 0, 1, 64, 65535 * 64, 80, false, false, false, kMaxExpandMmaSplit},
    {Kernel::kExpandMmaBF16_128x128, "expand_mma_bf16_128x128", Family::kExpandMma, DType::kBF16, 128, 128, 4, 0, 1, 64, 65535 * 128, 80, false, false, false, kMaxExpandMmaSplit},
    {Kernel::kExpandMmaF16_16x128, "expand_mma_f16_16x128", Family::kExpandMma, DType::kF16, 16, 128, 4, 0, 1, 64, 65535 * 16, 80, false, false, false, kMaxExpandMmaSplit},
    {Kernel::kExpandMmaF16_64x128, "expand_mma_f16_64x128", Family::kExpandMma, DType::kF16, 64, 128, 4, 0, 1, 64, 65535 * 64, 80, false, false, false, kMaxExpandMmaSplit},
    {Kernel::kExpandMmaF16_128x128, "expand_mma_f16_128x128", Family::kExpandMma, DType::kF16, 128, 128, 4, 0, 1, 64, 65535 * 128, 80, false, false, false, kMaxExpandMmaSplit},
    // The Hopper fused expansion (kernels/half/expand_wgmma_sm90.cuh): blocks of tile_m tokens x 128
    // outputs, two consumer warpgroups + two expansion warpgroups + a copy warp; any N:M with M <= 64
    // and L <= 128 (kernel_supports); split_k (1, 2, 4, 8) = cluster size.
    {Kernel::kExpandWgmmaBF16_64x128, "expand_wgmma_bf16_64x128_sm90a", Family::kExpandWgmma, DType::kBF16, 64, 128, 17, 0, 1, 64, 65535 * 64, 90, true, false, false, kMaxExpandWgmmaSplit},
    {Kernel::kExpandWgmmaBF16_128x128, "expand_wgmma_bf16_128x128_sm90a", Family::kExpandWgmma, DType::kBF16, 128, 128, 17, 0, 1, 64, 65535 * 128, 90, true, false, false, kMaxExpandWgmmaSplit},
    {Kernel::kExpandWgmmaF16_64x128, "expand_wgmma_f16_64x128_sm90a", Family::kExpandWgmma, DType::kF16, 64, 128, 17, 0, 1, 64, 65535 * 64, 90, true, false, false, kMaxExpandWgmmaSplit},
    {Kernel::kExpandWgmmaF16_128x128, "expand_wgmma_f16_128x128_sm90a", Family::kExpandWgmma, DType::kF16, 128, 128, 17, 0, 1, 64, 65535 * 128, 90, true, false, false, kMaxExpandWgmmaSplit},
    // The Hopper gathered operand (kernels/half/gather_wgmma_sm90.cuh): blocks of tile_m tokens x 128
    // outputs, two consumer warpgroups + a producer warpgroup; L = 64 or 128 and M a power of two
    // <= 64 (kernel_supports); it makes its own k-major copy of x (m up to 65535 x 64, the
    // transpose's grid); split_k (1, 2, 4, 8) = cluster size.
    {Kernel::kGatherWgmmaBF16_128x128, "gather_wgmma_bf16_128x128_sm90a", Family::kGatherWgmma, DType::kBF16, 128, 128, 12, 0, 64, 64, kTcPrefillMaxM, 90, true, false, false, kMaxGatherWgmmaSplit},
    {Kernel::kGatherWgmmaBF16_256x128, "gather_wgmma_bf16_256x128_sm90a", Family::kGatherWgmma, DType::kBF16, 256, 128, 12, 0, 64, 64, kTcPrefillMaxM, 90, true, false, false, kMaxGatherWgmmaSplit},
    {Kernel::kGatherWgmmaF16_128x128, "gather_wgmma_f16_128x128_sm90a", Family::kGatherWgmma, DType::kF16, 128, 128, 12, 0, 64, 64, kTcPrefillMaxM, 90, true, false, false, kMaxGatherWgmmaSplit},
    {Kernel::kGatherWgmmaF16_256x128, "gather_wgmma_f16_256x128_sm90a", Family::kGatherWgmma, DType::kF16, 256, 128, 12, 0, 64, 64, kTcPrefillMaxM, 90, true, false, false, kMaxGatherWgmmaSplit},
};
constexpr int kNumKernels = static_cast<int>(Kernel::kCount);
static_assert(sizeof(kKernelTable) / sizeof(kKernelTable[0]) == kNumKernels, "one kKernelTable row per Kernel");

constexpr bool kernel_table_in_order() {
  for (int i = 0; i < kNumKernels; ++i)
    if (static_cast<int>(kKernelTable[i].id) != i) return false;
  return true;
}
static_assert(kernel_table_in_order(), "kKernelTable rows must follow the order of Kernel");

inline bool valid_kernel(Kernel k) { return static_cast<int>(k) >= 0 && static_cast<int>(k) < kNumKernels; }
inline const KernelInfo& kernel_info(Kernel k) { return kKernelTable[static_cast<int>(k)]; }
inline const char* kernel_name(Kernel k) { return valid_kernel(k) ? kernel_info(k).name : "none"; }
inline Family kernel_family(Kernel k) { return kernel_info(k).family; }
// The kernel of a registry name, or Kernel::kNone.
inline Kernel find_kernel(const char* name) {
  for (const KernelInfo& k : kKernelTable)
    if (std::strcmp(k.name, name) == 0) return k.id;
  return Kernel::kNone;
}

inline bool is_cluster_decode_kernel(Kernel k) {
  return kernel_family(k) == Family::kDecodeCluster || kernel_family(k) == Family::kDecodeStaged;
}
inline bool is_staged_decode_kernel(Kernel k) { return kernel_family(k) == Family::kDecodeStaged; }
inline bool is_tiled_kernel(Kernel k) { return kernel_family(k) == Family::kTiled; }
inline bool is_packed_kernel(Kernel k) { return kernel_family(k) == Family::kPacked; }
inline bool is_warp_packed_kernel(Kernel k) { return kernel_family(k) == Family::kWarpPacked; }
inline bool is_producer_kernel(Kernel k) {
  return kernel_family(k) == Family::kProducer || kernel_family(k) == Family::kProducerTail;
}
inline bool kernel_reads_xt(Kernel k) { return kernel_info(k).reads_xt; }

struct TileShape {
  int bm, bn;
};
inline TileShape tile_shape(Kernel k) { return {kernel_info(k).tile_m, kernel_info(k).tile_n}; }

// The warp-specialized kernels' k-block, compressed rows per k-block (0: not built for the
// pattern) and the factor on the cost model's stage time (producer_cost_us), by the pattern's
// compressed rows per 32 inputs (N:32, and every N:M with the same 32 / M * N):
//   16 (16:32, 2:4):  k-blocks of 32, 16 rows, 4 stages;
//   12 (12:32, 3:8):  k-blocks of 32, 12 rows, 4 stages;
//    8 (8:32, 2:8):   k-blocks of 64, 16 rows, 3 stages;
//    4 (4:32, 1:8):   k-blocks of 128, 16 rows, 2 stages.
// Kernel-only on H100 (4096^3, 1024x4096x4096, 256x4096x4096, 512x11008x4096) these long stages run
// 1.6-3.5% faster at 8:32 and 4.9-6.5% at 4:32 than k-blocks of 32 with 8 rows (the stage time
// factors: 0.973, 0.944); at 16:32 and 12:32 k-blocks of 64 (32 / 24 rows, 3 stages) are up to 8%
// slower on some shapes.
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

inline int ceil_div_i(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

// The tail variant's split tiles: a grid of t = ceil(m / 128) x ceil(n / 256) tiles, one block per
// SM, runs floor(t / SMs) whole rounds and a last round of t % SMs tiles (the tail), which it
// splits split_k ways while the whole rounds run over all of k. Tiles are numbered m-tile fastest,
// so the tail is the last n-tiles' columns.
inline int64_t producer_tail_tiles(int64_t m, int64_t n, int num_sms) {
  const int64_t tiles = static_cast<int64_t>(ceil_div_i(m, 128)) * ceil_div_i(n, 256);
  return num_sms > 0 ? tiles % num_sms : tiles;
}
// Floats of the tail variant's workspace [split_k][tail][128][256] (0 without a split or a tail).
inline int64_t producer_tail_workspace_floats(int64_t m, int64_t n, int split, int num_sms) {
  return split > 1 ? producer_tail_tiles(m, n, num_sms) * split * 128 * 256 : 0;
}

// Whether a kernel can run a problem at all: pattern, m, col_info, dtype and device (compute
// capability x 10; sm90a: the build has sm_90a code for this device). The generic kernel runs every
// fp32 problem.
inline bool kernel_supports(Kernel kernel, int64_t m, int64_t N, int64_t M, int64_t L, bool has_col_info,
                            DType dtype = DType::kF32, int cc = 90, bool sm90a = true) {
  if (!valid_kernel(kernel)) return false;
  const KernelInfo& k = kernel_info(kernel);
  if (k.dtype != dtype || cc < k.min_cc || (k.needs_sm90a && !sm90a)) return false;
  if (L < k.min_L || (k.max_M > 0 && M > k.max_M) || (k.max_m > 0 && m > k.max_m)) return false;
  if (k.needs_col_info && !has_col_info) return false;
  if (is_producer_kernel(kernel)) return producer_shape(N, M).wb > 0;
  // The tensor-core kernels: L a power of two in [16, 128] (min_L above); the prefill kernel needs
  // M >= 8 (a 16-slot fragment spans at most two windows of 8).
  if (k.family == Family::kTcPrefill) return M >= 8;
  // The fused expansion: 128 / L index bytes per compressed row of a block, copied 4 at a time.
  if (k.family == Family::kExpandMma) return L <= 32;
  // The Hopper fused expansion: a 16-byte index box covers the block's 128 / L vectors.
  if (k.family == Family::kExpandWgmma) return L <= 128;
  // The gathered operand: a block's 128 outputs hold whole vectors; positions masked with M - 1.
  if (k.family == Family::kGatherWgmma) return L <= 128 && (M & (M - 1)) == 0;
  // The sparse tensor cores select 2 of every 4 inputs.
  if (k.family == Family::kSparseTc || k.family == Family::kDecodeSparseTc) return N == 2 && M == 4;
  return true;
}

// The native fp16 / bf16 kernels (decode_tc, tc_prefill, dense_expand_{bf16,f16},
// decode_splitk_{bf16,f16}); dense_expand_f32 and every fp32 kernel take 16-bit inputs upcast.
inline bool is_half_kernel(Kernel kernel) {
  return valid_kernel(kernel) && kernel_info(kernel).dtype != DType::kF32;
}
inline bool is_sparse_tc_kernel(Kernel kernel) {
  return valid_kernel(kernel) && kernel_info(kernel).family == Family::kSparseTc;
}
// The kernels that read the 2:4 metadata (tc_meta): sparse_tc and decode_sparse_tc.
inline bool reads_tc_meta(Kernel kernel) {
  return valid_kernel(kernel) &&
         (kernel_info(kernel).family == Family::kSparseTc || kernel_info(kernel).family == Family::kDecodeSparseTc);
}
// Whether a sparse_tc kernel takes a split (a power-of-two cluster of at most 8 blocks).
inline bool sparse_tc_split_ok(int split) { return split == 1 || split == 2 || split == 4 || split == 8; }
// The kernels whose split is a cluster of 1, 2, 4 or 8 blocks summed on chip.
inline bool is_cluster_split_kernel(Kernel kernel) {
  return valid_kernel(kernel) &&
         (kernel_info(kernel).family == Family::kSparseTc || kernel_info(kernel).family == Family::kExpandWgmma ||
          kernel_info(kernel).family == Family::kGatherWgmma);
}
inline bool is_dense_expand_kernel(Kernel kernel) {
  return valid_kernel(kernel) && kernel_info(kernel).family == Family::kDenseExpand;
}

// Largest split-K a tiled or packing kernel reduces inside a thread-block cluster. The kernels
// take any cluster of 2..8 blocks, but measured on H100 (m <= 1024, the tiled 128x128, 64x128 and
// 64x64 kernels, same plans both ways) the cluster reduction beats the workspace only at split 2
// (0.94-0.95x the time on geomean); at 4 it is 1.01-1.06x and up to 1.7x slower (clusters of 4
// leave SM slots empty), at 8 0.97-0.99x with outliers both ways.
constexpr int kMaxClusterSplit = 2;

// Whether a plan's split-K reduces on chip. clusters: the device has thread-block clusters
// (compute capability >= 9.0). The cluster decode kernels always do; a tiled or packing kernel
// with 2 <= split_k <= kMaxClusterSplit does on such a device: the split_k blocks of an output
// tile form one cluster and sum their partial tiles through distributed shared memory.
// So does a warp-packed kernel. The warp-specialized kernels reduce split-K through the workspace:
// a cluster reduction there measures slower on H100 (at splits 3..8 a cluster lives in one GPC and
// with one block per SM the H100 keeps 66 clusters of 2 resident but only 39 of 3, 30 of 4, 15 of
// 8: 0.80-0.95x the workspace's speed on geomean; at split 2, as a kernel instance of its own, it
// runs 0.95-1.00x; with the epilogue in the plain kernel's function ptxas reallocates its FFMA
// block and every plan runs 1.5-7% slower).
inline bool plan_reduces_in_cluster(Kernel kernel, int split_k, bool clusters) {
  if (is_cluster_decode_kernel(kernel) || is_cluster_split_kernel(kernel)) return true;
  return clusters && split_k > 1 && split_k <= kMaxClusterSplit &&
         (is_tiled_kernel(kernel) || is_packed_kernel(kernel) || is_warp_packed_kernel(kernel));
}
// Whether a plan writes a split-K workspace [split_k, m, n] that a second launch reduces (the tail
// variant sizes its own, producer_tail_workspace_floats).
inline bool plan_uses_workspace(Kernel kernel, int split_k, bool clusters) {
  return split_k > 1 && kernel != Kernel::kGenericF32 && !is_dense_expand_kernel(kernel) &&
         !plan_reduces_in_cluster(kernel, split_k, clusters);
}

}  // namespace nmspmm
