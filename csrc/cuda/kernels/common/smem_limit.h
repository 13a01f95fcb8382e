// Kernel attributes set once per kernel and device (cudaFuncSetAttribute), never on the hot path:
// the dynamic shared-memory limit, and non-portable cluster sizes. Each kernel instantiation keeps
// its own flags per attribute:
//
//   static bool configured[kMaxDevices] = {};
//   if (cudaError_t e = set_smem_limit_once(configured, my_kernel<...>, bytes); e != cudaSuccess) return e;
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace nmspmm {
namespace kernels {

constexpr int kMaxDevices = 64;

template <class Kernel>
inline cudaError_t set_attribute_once(bool (&configured)[kMaxDevices], Kernel kernel, cudaFuncAttribute attr,
                                      int value) {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev < 0 || dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (!configured[dev]) {
    err = cudaFuncSetAttribute(kernel, attr, value);
    if (err != cudaSuccess) return err;
    configured[dev] = true;
  }
  return cudaSuccess;
}

template <class Kernel>
inline cudaError_t set_smem_limit_once(bool (&configured)[kMaxDevices], Kernel kernel, int bytes) {
  return set_attribute_once(configured, kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

// The current device's SM count, shared memory per SM and shared memory reserved per block, queried
// once per device (all 0 where a query failed).
struct SmFacts {
  int sms, smem_per_sm, smem_reserved;
};
inline SmFacts current_sm_facts() {
  static SmFacts facts[kMaxDevices] = {};
  static bool queried[kMaxDevices] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return {0, 0, 0};
  if (!queried[dev]) {
    SmFacts f{0, 0, 0};
    if (cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&f.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&f.smem_reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev) != cudaSuccess)
      f = {0, 0, 0};
    facts[dev] = f;
    queried[dev] = true;
  }
  return facts[dev];
}

// Dynamic shared memory that holds an SM to `blocks` blocks: just over what blocks + 1 would fit in
// (the launch-during-transpose padding of the tiled and warp-packed launchers).
inline size_t smem_for_blocks_per_sm(const SmFacts& f, int64_t blocks) {
  return static_cast<size_t>(f.smem_per_sm / (blocks + 1) - f.smem_reserved + 16);
}

// Allow clusters of more than 8 blocks (non-portable; up to 16 on H100 / H200).
template <class Kernel>
inline cudaError_t allow_large_clusters_once(bool (&configured)[kMaxDevices], Kernel kernel) {
  return set_attribute_once(configured, kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
}

}  // namespace kernels
}  // namespace nmspmm
