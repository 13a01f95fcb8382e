// How many thread-block clusters of s blocks the device keeps resident at once for a kernel that runs
// one block per SM (384 threads and ~140 KB of shared memory, like kernel 21), s = 1..8 and 16:
// cudaOccupancyMaxActiveClusters, no launch. A cluster must fit inside one GPC, so a grid of
// clusters can leave SMs idle where the GPCs' SM counts are not multiples of s.
//
//   nvcc -std=c++17 -arch=sm_90a -o /tmp/cluster_probe tools/cluster_occupancy_probe.cu && /tmp/cluster_probe
#include <cstdio>

#include <cuda_runtime.h>

__global__ void __launch_bounds__(384, 1) one_block_per_sm(float* out) {
  extern __shared__ float smem[];
  smem[threadIdx.x] = threadIdx.x;
  __syncthreads();
  if (out != nullptr) out[blockIdx.x] = smem[threadIdx.x ^ 1];
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int smem = 140 * 1024;
  cudaFuncSetAttribute(one_block_per_sm, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(one_block_per_sm, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  std::printf("SMs %d, one 384-thread block with %d KB of shared memory per SM\n", sms, smem / 1024);
  for (int s : {1, 2, 3, 4, 5, 6, 7, 8, 16}) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1, 1, s * 64);
    cfg.blockDim = dim3(384, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = s;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, one_block_per_sm, &cfg);
    std::printf("cluster size %2d: %3d clusters resident (%3d blocks, %3d SMs idle)%s%s\n", s, clusters,
                clusters * s, sms - clusters * s, e == cudaSuccess ? "" : " error: ",
                e == cudaSuccess ? "" : cudaGetErrorString(e));
  }
  return 0;
}
