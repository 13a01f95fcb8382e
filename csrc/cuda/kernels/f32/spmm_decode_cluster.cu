// Decode SpMM for m <= 2 with split-K inside a thread-block cluster (sm_90).
//
// Memory-bound: the compressed weight is read once, so the kernel is built to keep many 16-byte
// weight loads in flight and to have nothing else on the critical path:
//  * a warp owns 128 output columns (4 per lane, one float4 of `values` per compressed row) and
//    walks its share of the block's compressed rows in batches of 16; a batch issues its 16 index
//    loads and 16 weight loads before anything waits, then gathers x straight from global memory
//    by plain loads (x is one or two rows that stay in L1/L2: no staging, no barrier in the main
//    loop);
//  * the block's W warps split the block's k-range, and the cluster's CS blocks (gridDim.y == CS,
//    one cluster per 128-column tile) split k, so a layer with few columns still fills the GPU;
//  * the partial sums are reduced in a fixed order, first over the warps through shared memory,
//    then over the cluster's blocks through distributed shared memory; each block writes a slice
//    of the tile (+ bias). One launch, no workspace, no atomics: bitwise deterministic and
//    CUDA-graph capturable;
//  * launched with programmatic dependent launch where the binding allows it, the first batch of
//    weight loads overlaps the end of the kernel before it in the stream (see the binding).
// For m >= 3 the x gather becomes the bottleneck (measured: slower than the split-K decode kernel
// of spmm_small.cu, with or without staging x in shared memory), so these kernels stop at m = 2.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/kernels/common/cluster_reduce.cuh"
#include "fma_order.cuh"
#include "cuda/kernels/common/launch_overlap.cuh"
#include "cuda/kernels/common/smem_limit.h"
#include "spmm_decode.h"

namespace nmspmm {
namespace kernels {

namespace {

constexpr int kClusterCols = 128;  // output columns per warp and per block (32 lanes x 4)
constexpr int kBatchRows = 16;     // compressed rows per warp batch

// MR: rows of x (1 or 2); W: warps per block.
template <int MR, int W>
__global__ void __launch_bounds__(W * 32, 16 / W) spmm_decode_cluster_kernel(const SpmmParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // launch_decode_cluster refuses devices without clusters; never reached
#else
  constexpr int R = kBatchRows;
  __shared__ float4 red[W * MR * 32];  // per-warp partial sums [W][MR][32 lanes] (a lane's 4 columns)

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t n = p.n, m = p.m, ldx = p.ldx;
  const int N = p.N, M = p.M;
  const int64_t q = n / p.L;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kClusterCols + lane * 4;
  const bool col_ok = col < n;

  // This block's compressed rows: whole windows [g0, g1) of the k-split blockIdx.y.
  const int64_t windows = p.k / M;
  const int64_t g0 = windows * blockIdx.y / gridDim.y;
  const int64_t g1 = windows * (blockIdx.y + 1) / gridDim.y;
  const int64_t u_end = g1 * N;

  float acc[MR][4];
#pragma unroll
  for (int i = 0; i < MR; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;

  // Programmatic dependent launch (p.dependent_launch): the first batch's index and weight loads
  // are issued before grid_dependency_wait(), while the kernel before this one in the stream may
  // still run (the binding launches so only when that kernel cannot have written the weight);
  // x is read and y written after it.
  bool waited = false;
  if (col_ok) {
    const float* const vcol = p.values + col;
    const uint8_t* const icol = p.indices + col / p.L;
    for (int64_t ub = g0 * N + static_cast<int64_t>(warp) * R; ub < u_end; ub += static_cast<int64_t>(W) * R) {
      int idx[R];
      float4 b[R];
      // All index and weight loads of the batch first (rows past u_end re-read row u_end - 1,
      // always in bounds, and are skipped below).
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int64_t u = ub + r < u_end ? ub + r : u_end - 1;
        idx[r] = __ldg(icol + u * q) & (M - 1);
        b[r] = __ldcs(reinterpret_cast<const float4*>(vcol + u * n));
      }
      // Keep them ahead of the math: the compiler would otherwise sink each load to its use and
      // leave one or two in flight.
      asm volatile("" ::: "memory");
      if (!waited) {
        grid_dependency_wait();
        allow_dependent_launch();
        waited = true;
      }
      // x column of each row, relative to the batch's first window gb (row ub is position s of gb).
      const int64_t gb = ub / N;
      const float* const xb = p.x + gb * M;
      // A whole batch runs without per-row bounds; the warp's last, partial batch skips its rows
      // past the end rather than multiplying them by zero: the x they would read may be a pruned
      // position's NaN or Inf (docs/format.md). Both forms are compiled; the choice is warp-uniform.
      auto batch_math = [&](auto whole) {
        int s = static_cast<int>(ub - gb * N), wo = 0;
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const bool ok = decltype(whole)::value || ub + r < u_end;
          const int c = wo * M + idx[r];
          if (++s == N) {
            s = 0;
            ++wo;
          }
          // A plain load, not __ldg: x is the previous kernel's output, and an invariant load may
          // be hoisted above grid_dependency_wait() (a variant of this loop compiles so and fails
          // the chained-calls test; tools/check_pdl_loads.py checks the SASS).
          if (ok) fma_row4(acc, b[r], [&](int i) { return i < m ? xb[c + i * ldx] : 0.f; });
        }
      };
      if (ub + R <= u_end)
        batch_math(std::true_type{});
      else
        batch_math(std::false_type{});
    }
  }

  if (!waited) {  // a warp with no rows (or columns) still waits before the block writes y
    grid_dependency_wait();
    allow_dependent_launch();
  }

  // Fixed-order reduction over the block's warps, then over the cluster's blocks, each block
  // finishing a slice of the tile (+ bias).
#pragma unroll
  for (int i = 0; i < MR; ++i)
    red[(warp * MR + i) * 32 + lane] = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
  reduce_over_block_and_cluster<W>(red, MR * 32, tid, W * 32, [&](int e, float4 sum) {
    store_output4(p, e / 32, static_cast<int64_t>(blockIdx.x) * kClusterCols + (e % 32) * 4, sum);
  });
#endif
}

// Clusters of more than 8 blocks are non-portable: allowed once per kernel and device.
template <int MR, int W>
cudaError_t allow_large_clusters() {
  static bool configured[kMaxDevices] = {};
  return allow_large_clusters_once(configured, spmm_decode_cluster_kernel<MR, W>);
}

template <int MR, int W>
cudaError_t launch_one(const SpmmParams& p, cudaStream_t stream) {
  if (p.split_k > 8) {
    const cudaError_t err = allow_large_clusters<MR, W>();
    if (err != cudaSuccess) return err;
  }
  return launch_split_k_clusters(spmm_decode_cluster_kernel<MR, W>, p, (p.n + kClusterCols - 1) / kClusterCols,
                                 W * 32, 0, stream);
}

template <int MR>
cudaError_t launch_warps(const SpmmParams& p, int warps, cudaStream_t stream) {
  switch (warps) {
    case 4: return launch_one<MR, 4>(p, stream);
    case 8: return launch_one<MR, 8>(p, stream);
    case 16: return launch_one<MR, 16>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t decode_cluster_max_size(int* size) {
  *size = 8;
  cudaError_t err = allow_large_clusters<1, 4>();
  if (err != cudaSuccess) return err;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(1, kMaxDecodeClusterSize, 1);
  cfg.blockDim = dim3(4 * 32, 1, 1);
  cudaLaunchAttribute attr[1] = {cluster_attribute(dim3(1, kMaxDecodeClusterSize, 1))};
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  err = cudaOccupancyMaxActiveClusters(&clusters, spmm_decode_cluster_kernel<1, 4>, &cfg);
  if (err != cudaSuccess) return err;
  if (clusters < 1) return cudaSuccess;
  bool staged_ok = false;
  err = decode_staged_places_cluster(kMaxDecodeClusterSize, &staged_ok);
  if (err != cudaSuccess) return err;
  if (staged_ok) *size = kMaxDecodeClusterSize;
  return cudaSuccess;
}

cudaError_t launch_decode_cluster(const SpmmParams& p, int warps, cudaStream_t stream) {
  if (p.m < 1 || p.m > 2 || p.L < 4 || p.n % 4 != 0) return cudaErrorInvalidValue;
  if (p.split_k < 1 || p.split_k > kMaxDecodeClusterSize) return cudaErrorInvalidValue;  // the cluster size
  if (reinterpret_cast<uintptr_t>(p.values) % 16 != 0 || reinterpret_cast<uintptr_t>(p.y) % 16 != 0 ||
      (p.bias != nullptr && reinterpret_cast<uintptr_t>(p.bias) % 16 != 0))
    return cudaErrorMisalignedAddress;
  return p.m == 1 ? launch_warps<1>(p, warps, stream) : launch_warps<2>(p, warps, stream);
}

}  // namespace kernels
}  // namespace nmspmm
