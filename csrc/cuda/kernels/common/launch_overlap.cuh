// Programmatic dependent launch (sm_90): a kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start while the kernel before it in the
// stream is still running. It must call grid_dependency_wait() before it reads anything that
// kernel writes (and before it writes anything that kernel reads); the kernel before it calls
// allow_dependent_launch() once its blocks no longer need the SM slots to themselves. Both are
// no-ops on older GPUs and for kernels launched without the attribute.
//
// Also the launch attributes (cudaLaunchKernelEx) the launchers combine: that one, and a
// thread-block cluster (sm_90).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace nmspmm {
namespace kernels {

__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" :::);
#endif
}

inline cudaLaunchAttribute dependent_launch_attribute() {
  cudaLaunchAttribute a = {};
  a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = 1;
  return a;
}

// Blocks of a grid grouped into clusters of dims.x x dims.y x dims.z.
inline cudaLaunchAttribute cluster_attribute(dim3 dims) {
  cudaLaunchAttribute a = {};
  a.id = cudaLaunchAttributeClusterDimension;
  a.val.clusterDim.x = dims.x;
  a.val.clusterDim.y = dims.y;
  a.val.clusterDim.z = dims.z;
  return a;
}

// Launches kernel(args...) on grid x block, with programmatic dependent launch when `overlap` (the
// kernel then calls grid_dependency_wait() before reading what the kernel before it writes).
template <class Kernel, class... Args>
inline cudaError_t launch_after(Kernel kernel, dim3 grid, dim3 block, bool overlap, cudaStream_t stream,
                                Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1] = {dependent_launch_attribute()};
  cfg.attrs = attr;
  cfg.numAttrs = overlap ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

// launch_after on ceil(items / 256) blocks of 256 threads (one item per thread): the split-K
// reductions after their split kernels.
template <class Kernel, class... Args>
inline cudaError_t launch_items_after(Kernel kernel, int64_t items, bool overlap, cudaStream_t stream, Args... args) {
  constexpr int kThreads = 256;
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  return launch_after(kernel, dim3(static_cast<unsigned>(blocks), 1, 1), dim3(kThreads, 1, 1), overlap, stream,
                      args...);
}

}  // namespace kernels
}  // namespace nmspmm
