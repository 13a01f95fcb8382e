// Raising a kernel's dynamic shared-memory limit (cudaFuncSetAttribute) once per kernel and device,
// never on the hot path. Each kernel instantiation keeps its own flags:
//
//   static bool configured[kMaxDevices] = {};
//   if (cudaError_t e = set_smem_limit_once(configured, my_kernel<...>, bytes); e != cudaSuccess) return e;
#pragma once
#include <cuda_runtime.h>

namespace nmspmm {
namespace kernels {

constexpr int kMaxDevices = 64;

template <class Kernel>
inline cudaError_t set_smem_limit_once(bool (&configured)[kMaxDevices], Kernel kernel, int bytes) {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev < 0 || dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (!configured[dev]) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (err != cudaSuccess) return err;
    configured[dev] = true;
  }
  return cudaSuccess;
}

// Once per kernel and device: allow clusters of more than 8 blocks (non-portable; up to 16 on
// H100 / H200).
template <class Kernel>
inline cudaError_t allow_large_clusters_once(bool (&configured)[kMaxDevices], Kernel kernel) {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev < 0 || dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (!configured[dev]) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (err != cudaSuccess) return err;
    configured[dev] = true;
  }
  return cudaSuccess;
}

}  // namespace kernels
}  // namespace nmspmm
