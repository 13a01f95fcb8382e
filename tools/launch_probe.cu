// Per-launch cost of back-to-back kernels in one CUDA graph: plain vs cluster launch, with and
// without cluster.sync, with and without one DRAM batch per warp (like the m = 1 decode kernel).
// A diagnostic for the GPU machine, not part of the extension:
//   nvcc -arch=sm_90 -O3 -std=c++17 -o /tmp/launch_probe tools/launch_probe.cu && /tmp/launch_probe
// Session-11 output: benchmarks/results/h100/experiments/s11_launch_probe.txt.
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <vector>
#include <algorithm>
namespace cg = cooperative_groups;
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("ERR %s line %d\n", cudaGetErrorString(e), __LINE__); exit(1);} } while (0)
// mode bits: 1 = load one batch of 16 float4 per lane (rotating buffer), 2 = two cluster.sync, 4 = smem reduce + __syncthreads
template <int MODE>
__global__ void k(const float4* __restrict__ w, int64_t rows_per_block, int64_t n4, float* out) {
  __shared__ float4 red[4 * 32];
  float4 acc = make_float4(0, 0, 0, 0);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (MODE & 1) {
    const int64_t col = (int64_t)blockIdx.x * 32 + lane;
    const int64_t r0 = (int64_t)blockIdx.y * rows_per_block + warp * 16;
    float4 b[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) b[r] = __ldcs(w + (r0 + r) * n4 + col);
#pragma unroll
    for (int r = 0; r < 16; ++r) { acc.x += b[r].x; acc.y += b[r].y; acc.z += b[r].z; acc.w += b[r].w; }
  }
  if (MODE & 4) {
    red[warp * 32 + lane] = acc;
    __syncthreads();
    if (warp == 0) for (int i = 1; i < 4; ++i) { float4 o = red[i * 32 + lane]; acc.x += o.x; acc.y += o.y; acc.z += o.z; acc.w += o.w; }
  }
  if (MODE & 2) {
    cg::cluster_group c = cg::this_cluster();
    c.sync();
    if (warp == 0) { float4 o = *c.map_shared_rank(red + lane, 0); acc.x += o.x; }
    c.sync();
  }
  if (acc.x == 12345.f) out[0] = acc.y;  // keep the loads
}
template <int MODE>
float time_graph(int cluster, dim3 grid, const float4* w, int64_t rows_per_block, int64_t n4, int64_t copies, int64_t copy_elems, float* out) {
  cudaStream_t s; CK(cudaStreamCreate(&s));
  cudaGraph_t g; cudaGraphExec_t ge;
  const int calls = 40;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < calls; ++i) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid; cfg.blockDim = dim3(128); cfg.stream = s;
    cudaLaunchAttribute a[1]; a[0].id = cudaLaunchAttributeClusterDimension;
    a[0].val.clusterDim.x = 1; a[0].val.clusterDim.y = cluster; a[0].val.clusterDim.z = 1;
    cfg.attrs = a; cfg.numAttrs = cluster > 0 ? 1 : 0;
    CK(cudaLaunchKernelEx(&cfg, k<MODE>, w + (i % copies) * copy_elems, rows_per_block, n4, out));
  }
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphLaunch(ge, s)); CK(cudaStreamSynchronize(s));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  std::vector<float> t;
  for (int r = 0; r < 7; ++r) {
    cudaEventRecord(e0, s); CK(cudaGraphLaunch(ge, s)); cudaEventRecord(e1, s); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1); t.push_back(ms * 1000 / calls);
  }
  std::sort(t.begin(), t.end());
  cudaGraphExecDestroy(ge); cudaGraphDestroy(g); cudaStreamDestroy(s);
  return t[3];
}
int main() {
  // weight: blocks.x tiles of 32 float4 columns (128 floats), blocks.y splits of 64 rows (4 warps x 16).
  const int64_t tiles = 8, splits = 8, rows = splits * 64, n4 = tiles * 32;
  const int64_t elems = rows * n4;  // float4s per copy (2 MB at 8x8 -> rows*n4*16 B)
  const int64_t copies = 64;        // >= 4x L2 in all
  float4* w; float* out;
  CK(cudaMalloc(&w, copies * elems * 16)); CK(cudaMemset(w, 0, copies * elems * 16)); CK(cudaMalloc(&out, 16));
  printf("weight per call %.2f MB, %lld blocks of 128 threads\n", elems * 16 / 1e6, (long long)(tiles * splits));
  dim3 grid(tiles, splits);
  printf("empty, plain launch            %.2f us\n", time_graph<0>(0, grid, w, 64, n4, copies, elems, out));
  printf("empty, cluster 8               %.2f us\n", time_graph<0>(8, grid, w, 64, n4, copies, elems, out));
  printf("empty, cluster 8 + 2 syncs     %.2f us\n", time_graph<6>(8, grid, w, 64, n4, copies, elems, out));
  printf("load, plain launch             %.2f us\n", time_graph<1>(0, grid, w, 64, n4, copies, elems, out));
  printf("load + block reduce, plain     %.2f us\n", time_graph<5>(0, grid, w, 64, n4, copies, elems, out));
  printf("load, cluster 8                %.2f us\n", time_graph<1>(8, grid, w, 64, n4, copies, elems, out));
  printf("load + reduce + 2 syncs, cl 8  %.2f us\n", time_graph<7>(8, grid, w, 64, n4, copies, elems, out));
  printf("load + reduce + 2 syncs, cl 4  %.2f us\n", time_graph<7>(4, grid, w, 64, n4, copies, elems, out));
  dim3 grid1(tiles, 1);
  printf("empty, 8 blocks plain          %.2f us\n", time_graph<0>(0, grid1, w, 64, n4, copies, elems, out));
  return 0;
}
