// Torch-free C entry points of the native 16-bit (fp16 / bf16) SpMM kernels: raw pointers, sizes,
// a CUDA stream and an error code. Activations, values, bias and output share one 16-bit type;
// every kernel accumulates in fp32. Values and indices are read in the documented compressed
// format (docs/format.md): values [w, n], indices [w, n / L], w = k * N / M.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace nmspmm {
namespace kernels {

enum class HalfType : int { kF16 = 0, kBF16 = 1 };

struct HalfSpmmParams {
  const void* x;            // [m, k] row stride ldx, unit column stride
  int64_t ldx;
  const void* values;       // [w, n], 16-byte aligned rows when n % 8 == 0
  const uint8_t* indices;   // [w, n / L]
  const void* bias;         // [n] or nullptr
  void* y;                  // [m, n], contiguous
  void* scratch;            // kernel-specific scratch (k-major copy of x, split-K partials), or nullptr
  size_t scratch_bytes;     // its size; a kernel checks it against what it needs
  int64_t m, n, k;
  int N, M, L;
  int split_k;
  HalfType dtype;
  const uint32_t* meta;     // 2:4 decode (kHalfDecodeSparse24): tc_meta [ceil(k / 32), meta_ld] words
  int64_t meta_ld;
};

// Tensor-core prefill kernels (mma.sync, sm_80+). `config` selects a tile configuration; the bit
// kTcPrefillWarpSpecialized selects the warp-specialized form (tensor copies and mbarriers, sm_90,
// L >= 32); with it, kTcPrefillDuringTranspose launches the main kernel with programmatic dependent
// launch during the x transpose before it (its producer waits for the transpose before its first
// copy of x; everything before the transpose has completed, since the transpose is launched in
// plain stream order).
constexpr int kTcPrefillWarpSpecialized = 128;
constexpr int kTcPrefillDuringTranspose = 256;
size_t tc_prefill_scratch_bytes(const HalfSpmmParams& p, int config);
cudaError_t launch_tc_prefill(const HalfSpmmParams& p, int config, cudaStream_t stream);

// Expands the compressed weight into the dense W[n, k] (same dtype) at `dense` (16-byte aligned,
// n * k elements) for the dense tensor-core path of large-m calls; reads values, indices, n, k,
// N, M, L, dtype. A position repeated within a (window, vector) adds its values.
cudaError_t launch_expand_dense(const HalfSpmmParams& p, void* dense, cudaStream_t stream);
// After the dense product y = x W^T (+ bias) at p.y (row stride ldy): recomputes from the kept
// inputs only the rows whose y[i, 0] is NaN or Inf, i.e. the rows of x holding a non-finite value,
// so that a non-finite x at a pruned position is not read, as on every other path.
cudaError_t launch_regather_non_finite_rows(const HalfSpmmParams& p, int64_t ldy, cudaStream_t stream);

// Fused-expansion kernel (expand_mma.cuh; mma.sync, sm_80+, L <= 32): the compressed weight
// expanded per warp in shared memory and multiplied on the dense tensor cores, blocks of 128
// outputs x tile_tokens (16, 64 or 128) tokens, k split p.split_k ways (fp32 partials in p.scratch,
// expand_mma::scratch_bytes). Shapes: expand_mma::shape_supported (expand_mma_geometry.h).
cudaError_t launch_expand_mma(const HalfSpmmParams& p, int tile_tokens, cudaStream_t stream);

// Hopper fused-expansion kernel (expand_wgmma_sm90.cuh; wgmma, sm_90a, any N:M with M <= 64 and
// L <= 128): the compressed weight arrives by tensor copies, expansion warps write it as a dense
// swizzled operand in shared memory, warpgroup MMAs consume it; blocks of 128 outputs x
// tile_tokens (64 or 128) tokens, k split p.split_k ways (1, 2, 4, 8: a cluster, summed on chip).
// Shapes: expand_wgmma::shape_supported (expand_wgmma_geometry.h); x, values, y and bias 16-byte
// aligned, indices 4-byte aligned. cudaErrorInvalidDevice on a device other than compute capability 9.0.
cudaError_t launch_expand_wgmma(const HalfSpmmParams& p, int tile_tokens, cudaStream_t stream);

// Hopper gathered-operand kernel (gather_wgmma_sm90.cuh; wgmma, sm_90a, L = 64 or 128, M a power
// of two <= 64): x is copied k-major into p.scratch (gather_wgmma_scratch_bytes), each vector's kept
// rows of it are gathered into a compact operand in shared memory and multiplied by the compressed
// values on the dense tensor cores; blocks of 128 outputs x tile_tokens (128 or 256) tokens, the
// compressed rows split p.split_k ways (1, 2, 4, 8: a cluster, summed on chip). Shapes:
// gather_wgmma::shape_supported (gather_wgmma_geometry.h); values, y, bias and scratch 16-byte
// aligned. cudaErrorInvalidDevice on a device other than compute capability 9.0.
size_t gather_wgmma_scratch_bytes(const HalfSpmmParams& p);
cudaError_t launch_gather_wgmma(const HalfSpmmParams& p, int tile_tokens, cudaStream_t stream);

// Decode kernels (small m): stream the compressed weight. `config` selects a variant.
size_t half_decode_scratch_bytes(const HalfSpmmParams& p, int config);
cudaError_t launch_half_decode(const HalfSpmmParams& p, int config, cudaStream_t stream);

}  // namespace kernels
}  // namespace nmspmm
