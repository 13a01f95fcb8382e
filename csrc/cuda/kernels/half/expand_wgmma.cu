// Entry of the Hopper fused-expansion kernels (expand_wgmma_sm90.cuh): checks what the kernels
// cannot take, then picks the instance of the dtype and token tile (instances in
// expand_wgmma_{bf16,f16}_sm90.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/kernels/common/device_cc.h"
#include "cuda/kernels/half/expand_wgmma_geometry.h"
#include "cuda/kernels/half/spmm_half.h"

namespace nmspmm {
namespace kernels {
namespace expand_wgmma {
template <typename T, int BN>
cudaError_t launch_tile(const HalfSpmmParams& p, cudaStream_t stream);
}  // namespace expand_wgmma

cudaError_t launch_expand_wgmma(const HalfSpmmParams& p, int tile_tokens, cudaStream_t stream) {
  if (current_device_cc() != 90) return cudaErrorInvalidDevice;  // the bodies are built for sm_90a only
  const auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  if (!expand_wgmma::shape_supported(p.n, p.k, p.N, p.M, p.L) || (tile_tokens != 64 && tile_tokens != 128) ||
      !(p.split_k == 1 || p.split_k == 2 || p.split_k == 4 || p.split_k == 8) || p.m < 1 || p.m > 0x7fffffff ||
      (p.m + tile_tokens - 1) / tile_tokens > 65535 || p.ldx % 8 != 0 || (p.m > 1 && p.ldx < p.k))
    return cudaErrorInvalidValue;
  if (!aligned(p.x) || !aligned(p.values) || reinterpret_cast<uintptr_t>(p.indices) % 4 != 0 || !aligned(p.y) ||
      (p.bias != nullptr && !aligned(p.bias)))
    return cudaErrorMisalignedAddress;
  if (p.dtype == HalfType::kBF16)
    return tile_tokens == 64 ? expand_wgmma::launch_tile<__nv_bfloat16, 64>(p, stream)
                             : expand_wgmma::launch_tile<__nv_bfloat16, 128>(p, stream);
  return tile_tokens == 64 ? expand_wgmma::launch_tile<__half, 64>(p, stream)
                           : expand_wgmma::launch_tile<__half, 128>(p, stream);
}

}  // namespace kernels
}  // namespace nmspmm
