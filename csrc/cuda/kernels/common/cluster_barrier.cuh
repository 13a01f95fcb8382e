// The last cluster barrier of a kernel that reads other blocks' shared memory through distributed
// shared memory (sm_90): no block of the cluster may exit while another still reads its shared
// memory.
//
// cooperative_groups' cluster.sync() arrives with release semantics, which on sm_90 compiles to
// MEMBAR.ALL.GPU: every thread first waits until its earlier global stores (here: y) have reached
// L2. Keeping a block resident needs no memory ordering: each thread arrives after the stores that
// consume the values it read from the other blocks, so those reads have returned, and the kernel
// that reads y next sees it once this grid has completed (stream order, or griddepcontrol.wait).
// So the arrive is relaxed. Measured on H100: the
// decode kernels 1.03-1.05x faster on geomean at m = 1, 8, 16. Barriers that hand data over
// between blocks (partial tiles written before, read by the other blocks after) keep
// cluster.sync().
#pragma once

namespace nmspmm {
namespace kernels {

__device__ __forceinline__ void cluster_sync_before_exit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed;\n\tbarrier.cluster.wait;\n" ::: "memory");
#endif
}

}  // namespace kernels
}  // namespace nmspmm
