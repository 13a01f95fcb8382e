// Like cluster_occupancy_probe.cu, for the decode kernels' shape: 256-thread blocks, two resident per SM
// (the staged decode kernels: 128 registers, launch bounds (256, 2)). Prints, for cluster sizes 1..16,
// how many clusters the device keeps resident at once (cudaOccupancyMaxActiveClusters, no launch) and
// how many block slots (2 per SM) that leaves empty. Input for a residency-aware decode plan rule.
//
//   nvcc -std=c++17 -arch=sm_90a -o /tmp/cluster_probe2 tools/cluster_occupancy_probe2.cu && /tmp/cluster_probe2
#include <cstdio>

#include <cuda_runtime.h>

__global__ void __launch_bounds__(256, 2) two_blocks_per_sm(float* out) {
  extern __shared__ float smem[];
  smem[threadIdx.x] = threadIdx.x;
  __syncthreads();
  if (out != nullptr) out[blockIdx.x] = smem[threadIdx.x ^ 1];
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int smem = 100 * 1024;  // two blocks per SM by shared memory, as the decode kernels by registers
  cudaFuncSetAttribute(two_blocks_per_sm, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(two_blocks_per_sm, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  std::printf("SMs %d, 256-thread blocks with %d KB of shared memory, two per SM\n", sms, smem / 1024);
  for (int s = 1; s <= 16; ++s) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1, s, 64);
    cfg.blockDim = dim3(256, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = s;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, two_blocks_per_sm, &cfg);
    std::printf("cluster size %2d: %3d clusters resident (%3d blocks, %3d of %d slots empty)%s%s\n", s, clusters,
                clusters * s, 2 * sms - clusters * s, 2 * sms, e == cudaSuccess ? "" : " error: ",
                e == cudaSuccess ? "" : cudaGetErrorString(e));
  }
  return 0;
}
