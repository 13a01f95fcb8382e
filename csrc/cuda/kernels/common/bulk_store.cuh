// sm_90 bulk asynchronous shared->global copies (the TMA unit, no tensor map): a block stages a
// tile in shared memory and a few threads hand whole contiguous rows of it to the copy engine,
// instead of every thread issuing one dependent 16-byte store per fragment row.
//
//   every writing thread: shared-memory stores, then bulk_store_fence();  __syncthreads();
//   issuing threads:      bulk_store_row(...) per row, then bulk_store_commit_and_wait_read();
//
// The wait only covers the reads of shared memory (the block may then exit or reuse it); the
// global writes complete with the grid, before any later kernel in the stream (or a dependent
// kernel past griddepcontrol.wait) reads them. Compute capability >= 9.0 only (no-ops below; the
// binding sets SpmmParams::bulk_store only there).
#pragma once
#include <cstdint>

namespace nmspmm {
namespace kernels {

// Makes this thread's generic-proxy shared-memory writes visible to the async proxy (the copy
// engine); a barrier after it makes every thread's writes visible to the issuing threads.
__device__ __forceinline__ void bulk_store_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from shared to global memory.
__device__ __forceinline__ void bulk_store_row(float* gmem, const float* smem, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const uint64_t g = static_cast<uint64_t>(__cvta_generic_to_global(gmem));
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(g), "r"(s), "r"(bytes)
               : "memory");
#endif
}

// Commits this thread's bulk copies and waits until they have read their shared-memory source.
__device__ __forceinline__ void bulk_store_commit_and_wait_read() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
#endif
}

}  // namespace kernels
}  // namespace nmspmm
