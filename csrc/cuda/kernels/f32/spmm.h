// The parameters of the fp32 SpMM kernels: raw pointers, sizes and launch options, shared by every
// fp32 kernel file and the launcher (spmm_launch.h). Torch-free. The 16-bit kernels take their own
// dtype-tagged parameters (half/spmm_half.h); this struct stays float-typed because its layout is
// part of the decode kernels' code (see below).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace nmspmm {
namespace kernels {

struct SpmmParams {
  const float* x;            // [m, k], row stride ldx, unit column stride
  int64_t ldx;
  float* xt;                 // tiled and packed kernels: [k, ldxt] scratch for the k-major copy
  int64_t ldxt;              // of x, ldxt = round_up(m, 4) (tiled_xt_ld); else unused
  const float* values;       // [w, n], w = k*N/M, 16-byte aligned
  const uint8_t* indices;    // [w, n/L]: in-window positions (or packed slots, packed kernels)
  const uint8_t* col_info;   // [ceil(n/128), ceil(k/64), 64] (packed kernels only)
  const float* bias;         // [n] or nullptr
  float* y;                  // [m, n]
  float* workspace;          // [split_k, m, n] when split_k > 1 and not cluster_reduce
  int64_t m, n, k;
  int N, M, L;
  int split_k;
  // Tiled and packing kernels, 2 <= split_k <= 8, sm_90: the split_k blocks of an output tile run
  // as one thread-block cluster and reduce their partial tiles through distributed shared memory
  // (no workspace, no second launch). The binding sets it where plan_reduces_in_cluster holds.
  bool cluster_reduce;
  // sm_90: the split-K reduction through the workspace is launched with programmatic dependent
  // launch, so its launch overlaps the tail of the kernel whose partial sums it adds (it waits for
  // that grid before reading them). The binding sets it on compute capability 9.0+.
  bool overlap_launches;
  // sm_90 decode kernels launched as clusters (spmm_decode_cluster.cu, spmm_decode_staged.cu):
  // launched with programmatic dependent launch, so the kernel may start while the kernel before
  // it in the stream still runs; it reads only `values` and `indices` before grid_dependency_wait()
  // and x, bias and y after it. The binding sets it only when the kernel before it cannot have
  // written `values` or `indices` (spmm_ops.cpp, WeightHazardTable).
  // sm_90 warp-packed, tiled and packing kernels: launched with
  // programmatic dependent launch during the x transpose before them, which lets them start at once
  // (transpose_x_kernel); they fetch what the transpose does not write (index bytes, values,
  // col_info), then wait for the transpose before copying from xT. The launch pads shared memory so
  // that no SM takes more than ceil(blocks / SMs) blocks (launch_warp_packed, launch_tiled).
  // The binding sets it on compute capability 9.0+ (NMSPMM_XT_OVERLAP=0 turns it off, A/B only).
  // (Adding fields to this struct changes the decode kernels' code and costs them up to 40% at
  // some m = 1 plans on H100; keep its layout.)
  bool dependent_launch;
  // sm_90 tiled and packing kernels without cluster_reduce: the output tile (or split-K partial
  // tile) is staged in shared memory and written with bulk asynchronous copies, one per tile row
  // (bulk_store.cuh), instead of 2 x TM dependent 16-byte stores per thread. Needs n % 4 == 0 and
  // 16-byte aligned y / workspace; the binding sets it on compute capability 9.0+.
  bool bulk_store;
};

static_assert(sizeof(SpmmParams) == 128, "SpmmParams changed size: check the decode kernels' SASS (tools/sass_diff.py)");

// Row length of the k-major copy of x that the tiled and packed kernels read.
inline int64_t tiled_xt_ld(int64_t m) { return (m + 3) / 4 * 4; }

// The largest cluster (split_k) the decode kernels can be launched with on the current device: 16
// where it places one of the m = 1 cluster decode kernel with 4 warps per block and one of the
// largest staged decode block (H100, H200), else 8 (portable). A host-side occupancy query, no
// launch; the binding caches it per device.
cudaError_t decode_cluster_max_size(int* size);

}  // namespace kernels
}  // namespace nmspmm
