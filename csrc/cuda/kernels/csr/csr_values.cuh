// Value conversions of the CSR kernels: a stored value (fp32, fp16 or bf16) to fp32 and back, and
// through its raw bits (what a shuffle carries).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace nmspmm {
namespace kernels {
namespace csr {

template <typename T>
__device__ __forceinline__ float to_f32(T v);
template <>
__device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T>
__device__ __forceinline__ uint32_t raw_bits(T v);
template <>
__device__ __forceinline__ uint32_t raw_bits<float>(float v) { return __float_as_uint(v); }
template <>
__device__ __forceinline__ uint32_t raw_bits<__half>(__half v) { return __half_as_ushort(v); }
template <>
__device__ __forceinline__ uint32_t raw_bits<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }

template <typename T>
__device__ __forceinline__ float bits_f32(uint32_t b);
template <>
__device__ __forceinline__ float bits_f32<float>(uint32_t b) { return __uint_as_float(b); }
template <>
__device__ __forceinline__ float bits_f32<__half>(uint32_t b) { return __half2float(__ushort_as_half(b & 0xffffu)); }
template <>
__device__ __forceinline__ float bits_f32<__nv_bfloat16>(uint32_t b) { return __uint_as_float(b << 16); }

}  // namespace csr
}  // namespace kernels
}  // namespace nmspmm
