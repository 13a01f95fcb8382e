// Entry of the Hopper gathered-operand kernels (gather_wgmma_sm90.cuh): checks what the kernels
// cannot take, writes the k-major copy of x into the scratch, then picks the instance of the dtype
// and token tile (instances in gather_wgmma_{bf16,f16}_sm90.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/kernels/common/device_cc.h"
#include "cuda/kernels/half/gather_wgmma_geometry.h"
#include "cuda/kernels/half/spmm_half.h"
#include "cuda/kernels/half/x_transpose.cuh"

namespace nmspmm {
namespace kernels {
namespace gather_wgmma {
template <typename T, int BN>
cudaError_t launch_tile(const HalfSpmmParams& p, const void* xT, int64_t m_pad, cudaStream_t stream);
}  // namespace gather_wgmma

size_t gather_wgmma_scratch_bytes(const HalfSpmmParams& p) {
  return static_cast<size_t>(gather_wgmma::scratch_bytes(p.m, p.k));
}

cudaError_t launch_gather_wgmma(const HalfSpmmParams& p, int tile_tokens, cudaStream_t stream) {
  if (current_device_cc() != 90) return cudaErrorInvalidDevice;  // the bodies are built for sm_90a only
  const auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  const int64_t m_pad = (p.m + 7) / 8 * 8;
  if (!gather_wgmma::shape_supported(p.n, p.k, p.N, p.M, p.L) || (tile_tokens != 128 && tile_tokens != 256) ||
      !(p.split_k == 1 || p.split_k == 2 || p.split_k == 4 || p.split_k == 8) || p.m < 1 ||
      (p.m + tile_tokens - 1) / tile_tokens > 65535 || (m_pad + 63) / 64 > 65535 || (p.m > 1 && p.ldx < p.k))
    return cudaErrorInvalidValue;
  if (!aligned(p.values) || !aligned(p.y) || (p.bias != nullptr && !aligned(p.bias)) || !aligned(p.scratch))
    return cudaErrorMisalignedAddress;
  if (p.scratch == nullptr || p.scratch_bytes < gather_wgmma_scratch_bytes(p)) return cudaErrorInvalidValue;
  cudaError_t e;
  if (p.dtype == HalfType::kBF16) {
    auto* xT = static_cast<__nv_bfloat16*>(p.scratch);
    e = launch_x_transpose<__nv_bfloat16>(p.x, p.ldx, xT, p.m, p.k, m_pad, stream);
    if (e != cudaSuccess) return e;
    return tile_tokens == 128 ? gather_wgmma::launch_tile<__nv_bfloat16, 128>(p, xT, m_pad, stream)
                              : gather_wgmma::launch_tile<__nv_bfloat16, 256>(p, xT, m_pad, stream);
  }
  auto* xT = static_cast<__half*>(p.scratch);
  e = launch_x_transpose<__half>(p.x, p.ldx, xT, p.m, p.k, m_pad, stream);
  if (e != cudaSuccess) return e;
  return tile_tokens == 128 ? gather_wgmma::launch_tile<__half, 128>(p, xT, m_pad, stream)
                            : gather_wgmma::launch_tile<__half, 256>(p, xT, m_pad, stream);
}

}  // namespace kernels
}  // namespace nmspmm
