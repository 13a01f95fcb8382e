// Programmatic dependent launch (sm_90): a kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start while the kernel before it in the
// stream is still running. It must call grid_dependency_wait() before it reads anything that
// kernel writes (and before it writes anything that kernel reads); the kernel before it calls
// allow_dependent_launch() once its blocks no longer need the SM slots to themselves. Both are
// no-ops on older GPUs and for kernels launched without the attribute.
#pragma once

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

}  // namespace kernels
}  // namespace nmspmm
