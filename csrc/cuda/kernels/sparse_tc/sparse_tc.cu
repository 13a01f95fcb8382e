// Entry of the 2:4 sparse tensor-core kernels: checks what the kernels cannot take, then picks the
// instance of the dtype and token tile (instances in sparse_tc_{bf16,f16}_sm90.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/kernels/common/device_cc.h"
#include "cuda/kernels/sparse_tc/sparse_tc.h"

namespace nmspmm {
namespace kernels {
namespace sparse_tc {
template <typename T, int BN, int MINB>
cudaError_t launch_tile(const SparseTcParams& p, cudaStream_t stream);
}  // namespace sparse_tc

bool sparse_tc_tile_supported(int tile_tokens) {
  return tile_tokens == 256 || tile_tokens == 128 || tile_tokens == 64 || tile_tokens == 16;
}

bool sparse_tc_shape_ok(int64_t m, int64_t n, int64_t k, int64_t ldx, int L) {
  constexpr int64_t kMaxCoord = 0x7fffffff;
  const bool pow2_L = L >= 1 && L <= 128 && (L & (L - 1)) == 0;
  return pow2_L && m >= 1 && n >= 8 && k >= 8 && n % 8 == 0 && k % 8 == 0 && ldx % 8 == 0 && ldx >= k &&
         n % L == 0 && m <= kMaxCoord && n <= kMaxCoord && k <= kMaxCoord && (m + 255) / 256 <= 65535;
}

// The instances (token tile, blocks per SM): 256 tokens one block per SM, 128 tokens two, 64 and 16
// one.
template <typename T>
static cudaError_t launch_typed(const SparseTcParams& p, int tile_tokens, cudaStream_t stream) {
  using namespace sparse_tc;
  switch (tile_tokens) {
    case 256: return launch_tile<T, 256, 1>(p, stream);
    case 128: return launch_tile<T, 128, 2>(p, stream);
    case 64: return launch_tile<T, 64, 1>(p, stream);
    default: return launch_tile<T, 16, 1>(p, stream);
  }
}

cudaError_t launch_sparse_tc(const SparseTcParams& p, int tile_tokens, cudaStream_t stream) {
  if (current_device_cc() != 90) return cudaErrorInvalidDevice;  // the bodies are built for sm_90a only
  const auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  if (!sparse_tc_shape_ok(p.m, p.n, p.k, p.ldx, p.L) || !sparse_tc_tile_supported(tile_tokens) ||
      !(p.split_k == 1 || p.split_k == 2 || p.split_k == 4 || p.split_k == 8) || p.meta_ld < p.n / p.L ||
      p.meta_ld % 4 != 0 || !aligned(p.x) || !aligned(p.values) || !aligned(p.meta) || !aligned(p.y) ||
      (p.bias != nullptr && !aligned(p.bias)))
    return cudaErrorInvalidValue;
  return p.dtype == HalfType::kBF16 ? launch_typed<__nv_bfloat16>(p, tile_tokens, stream)
                                    : launch_typed<__half>(p, tile_tokens, stream);
}

}  // namespace kernels
}  // namespace nmspmm
