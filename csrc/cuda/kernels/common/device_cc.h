// The compute capability (major * 10 + minor) of the current device, queried once per device; 0
// where the query fails. The launchers of the kernels built for one architecture (sm_90a) check it.
#pragma once
#include <cuda_runtime.h>

#include <atomic>

namespace nmspmm {
namespace kernels {

inline int current_device_cc() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cc[kMaxDevices];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return 0;
  int v = cc[dev].load(std::memory_order_relaxed);
  if (v == 0) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
      return 0;
    v = major * 10 + minor;
    cc[dev].store(v, std::memory_order_relaxed);
  }
  return v;
}

}  // namespace kernels
}  // namespace nmspmm
