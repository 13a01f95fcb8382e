// The launcher of every fp32 SpMM kernel: maps a registry kernel (csrc/registry.h) to its launch
// function and configuration (tile, k-block, compressed rows per k-block), with the x transpose
// before and the split-K reduction after it. Host code only; the kernels live in their own files.
#include <cuda_runtime.h>

#include <cstdint>

#include "registry.h"
#include "cuda/kernels/common/smem_limit.h"
#include "spmm.h"
#include "spmm_decode.h"
#include "spmm_launch.h"
#include "spmm_producer.h"
#include "spmm_small.h"
#include "spmm_tiled.h"
#include "spmm_warp_packed.h"

namespace nmspmm {
namespace kernels {

namespace {

// The tiled and packing kernels for a pattern: at L >= 32 the warp-uniform variants, with a fixed
// count of compressed rows per k-block (WB = 4, 8, 12, 16) where one is built, k-blocks of 64 for
// WB = 8 at 4:32 where that variant exists; else the runtime-WB kernel.
template <int BM, int BN, int TM, int KB, bool PACKED>
cudaError_t launch_tiled_any_l(const SpmmParams& p, cudaStream_t stream) {
  if (p.L >= 32) {
    if constexpr (KB == 32 && !PACKED) {
      if constexpr (has_kb64_variant<BM, BN, TM>()) {
        // 4:32 (and 2:16, 1:8) with k-blocks of 64: 8 rows per stage instead of 4.
        if (64 % p.M == 0 && 64 / p.M * p.N == 8)
          return launch_tiled<TiledConfig<BM, BN, TM, 64, false, true, 8>>(p, stream);
      }
      switch (KB / p.M * p.N) {
        case 4: return launch_tiled<TiledConfig<BM, BN, TM, KB, false, true, 4>>(p, stream);
        case 8: return launch_tiled<TiledConfig<BM, BN, TM, KB, false, true, 8>>(p, stream);
        case 12: return launch_tiled<TiledConfig<BM, BN, TM, KB, false, true, 12>>(p, stream);
        case 16: return launch_tiled<TiledConfig<BM, BN, TM, KB, false, true, 16>>(p, stream);
        default: break;
      }
    }
    return launch_tiled<TiledConfig<BM, BN, TM, KB, PACKED, true>>(p, stream);
  }
  return launch_tiled<TiledConfig<BM, BN, TM, KB, PACKED, false>>(p, stream);
}

// k-blocks of 32 up to M = 32, of 64 above.
template <int BM, int BN, int TM>
cudaError_t launch_nonpacked(const SpmmParams& p, cudaStream_t stream) {
  if (p.M <= 32) return launch_tiled_any_l<BM, BN, TM, 32, false>(p, stream);
  return launch_tiled_any_l<BM, BN, TM, 64, false>(p, stream);
}

// Calls f(ConfigTag<ProducerConfig<...>>{}) with the warp-specialized kernels' config for the
// pattern's k-block and compressed rows per k-block (producer_shape); cudaErrorInvalidValue where
// none is built. (A tag: ProducerConfig is only declared here, its definition lives with the kernel.)
template <class C>
struct ConfigTag {
  using type = C;
};
template <class F>
cudaError_t with_producer_config(const SpmmParams& p, F&& f) {
  const ProducerShape s = producer_shape(p.N, p.M);
  if (s.kb == 32 && s.wb == 12) return f(ConfigTag<ProducerConfig<1, 8, 32, 12, 4>>{});
  if (s.kb == 32 && s.wb == 16) return f(ConfigTag<ProducerConfig<1, 8, 32, 16, 4>>{});
  if (s.kb == 64 && s.wb == 16) return f(ConfigTag<ProducerConfig<1, 8, 64, 16, 3>>{});
  if (s.kb == 128 && s.wb == 16) return f(ConfigTag<ProducerConfig<1, 8, 128, 16, 2>>{});
  return cudaErrorInvalidValue;
}

cudaError_t launch_producer_any(const SpmmParams& p, cudaStream_t stream) {
  return with_producer_config(p, [&](auto c) { return launch_producer<typename decltype(c)::type>(p, stream); });
}

// The tail variant: the tail is producer_tail_tiles on this device's SM count (queried once per
// device), as the binding sized the workspace.
cudaError_t launch_producer_tail_any(const SpmmParams& p, cudaStream_t stream) {
  static int sms[kMaxDevices] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return cudaErrorInvalidDevice;
  if (sms[dev] == 0 && cudaDeviceGetAttribute(&sms[dev], cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return cudaErrorInvalidDevice;
  const int64_t tail = producer_tail_tiles(p.m, p.n, sms[dev]);
  return with_producer_config(p, [&](auto c) { return launch_producer_tail<typename decltype(c)::type>(p, stream, tail); });
}

cudaError_t launch_kernel(const SpmmParams& p, Kernel kernel, cudaStream_t stream) {
  switch (kernel) {
    case Kernel::kGenericF32: return launch_generic(p, stream);
    case Kernel::kDecodeF32SplitK: return launch_decode_splitk(p, stream);
    case Kernel::kDecodeF32ClusterW4:
    case Kernel::kDecodeF32ClusterW8:
    case Kernel::kDecodeF32ClusterW16: return launch_decode_cluster(p, kernel_info(kernel).warps, stream);
    case Kernel::kDecodeF32Staged128:
    case Kernel::kDecodeF32Staged256:
    case Kernel::kDecodeF32Staged512: return launch_decode_staged(p, kernel_info(kernel).variant, stream);
    case Kernel::kTiledF32_128x128: return launch_nonpacked<128, 128, 16>(p, stream);
    case Kernel::kTiledF32_64x128: return launch_nonpacked<64, 128, 8>(p, stream);
    case Kernel::kTiledF32_32x128: return launch_nonpacked<32, 128, 4>(p, stream);
    case Kernel::kTiledF32_64x64: return launch_nonpacked<64, 64, 8>(p, stream);
    case Kernel::kTiledF32_128x256: return launch_tiled_any_l<128, 256, 16, 32, false>(p, stream);
    case Kernel::kTiledF32_256x128: return launch_tiled_any_l<256, 128, 16, 32, false>(p, stream);
    case Kernel::kTiledF32_128x128W8: return launch_nonpacked<128, 128, 8>(p, stream);
    case Kernel::kPackedF32_128x128: return launch_tiled_any_l<128, 128, 16, 64, true>(p, stream);
    case Kernel::kPackedF32_64x128: return launch_tiled_any_l<64, 128, 8, 64, true>(p, stream);
    case Kernel::kPackedF32_32x128: return launch_tiled_any_l<32, 128, 4, 64, true>(p, stream);
    case Kernel::kWarpPackedF32_128x128: return launch_warp_packed<WarpPacked128x128>(p, stream);
    case Kernel::kWarpPackedF32_64x128: return launch_warp_packed<WarpPacked64x128>(p, stream);
    case Kernel::kWarpPackedF32_32x128: return launch_warp_packed<WarpPacked32x128>(p, stream);
    case Kernel::kProducerF32_128x256: return launch_producer_any(p, stream);
    case Kernel::kProducerTailF32_128x256: return launch_producer_tail_any(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_spmm(const SpmmParams& p, Kernel kernel, cudaStream_t stream) {
  if (!kernel_supports(kernel, p.m, p.N, p.M, p.L, p.col_info != nullptr)) return cudaErrorInvalidValue;
  if (p.split_k < 1 || p.split_k > kernel_info(kernel).max_split_k) return cudaErrorInvalidValue;
  // cluster_reduce only where the plan can reduce in a cluster; otherwise split-K needs the workspace.
  if (p.cluster_reduce && !plan_reduces_in_cluster(kernel, p.split_k, true)) return cudaErrorInvalidValue;
  if (p.cluster_reduce && is_cluster_decode_kernel(kernel)) return cudaErrorInvalidValue;
  // The tail variant launches its own reduction and checks its (tail-sized, possibly empty) workspace.
  const bool uses_split = kernel != Kernel::kProducerTailF32_128x256 &&
                          plan_uses_workspace(kernel, p.split_k, p.cluster_reduce);
  if (uses_split && p.workspace == nullptr) return cudaErrorInvalidValue;
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  if (kernel_reads_xt(kernel)) {
    const cudaError_t err = launch_transpose_x(p, stream);
    if (err != cudaSuccess) return err;
  }
  const cudaError_t err = launch_kernel(p, kernel, stream);
  if (err != cudaSuccess || !uses_split) return err;
  return launch_reduce_splits(p, stream);
}

}  // namespace kernels
}  // namespace nmspmm
