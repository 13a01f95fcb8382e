// Torch-free C++ entry points of the preprocessing kernels: prune, compress, decompress and
// col_info (csrc/cuda/kernels/preprocess/preprocess.cu). Raw pointers to contiguous row-major buffers,
// int64 sizes, a CUDA stream; each launcher returns the launch status (cudaGetLastError after
// the launch) or cudaErrorInvalidValue for arguments outside the format. The op binding
// (csrc/cuda/preprocess_ops.cu) is the only caller.
//
// Data errors (NaN/Inf weights, a mask that is not N:M, indices >= M) cannot be seen on the
// host without reading the data, so the kernels report them through a small device "error
// word" that the caller initializes, and reads back once after the launch (one synchronization
// per op; these are one-time preprocessing ops, not the SpMM hot path).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace nmspmm {
namespace kernels {

// Storage type of a weight (all are widened exactly to float32, as at::Tensor::to(kFloat)).
enum class WeightType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// Initial value of the int64 error words of compress, decompress and col_info: "no error".
// The kernels lower it with an atomic min, so after the launch it holds the first error in the
// CPU reference's scan order.
constexpr int64_t kNoError = INT64_MAX;

// prune: weight[out, in] (type), mask[out, in] (bool storage, 0/1, every byte written).
// *nonfinite (int32, caller zeroes it) becomes nonzero if the weight holds a NaN or Inf; the mask
// is then meaningless.
cudaError_t launch_prune(const void* weight, WeightType type, uint8_t* mask, int32_t* nonfinite,
                         int64_t out, int64_t in, int N, int M, int L, cudaStream_t stream);

// compress: weight[out, in] (elements of elem_size bytes: 4 or 2, copied bit for bit),
// mask[out, in] (bool storage) -> values[in/M*N, out], indices[in/M*N, out/L] (uint8).
// *bad_window (caller sets kNoError) becomes the smallest v*(in/M)+g over the (window g,
// vector v) pairs that do not keep exactly N positions shared by their L rows; values and
// indices are then meaningless (but every access stays in bounds).
cudaError_t launch_compress(const void* weight, int elem_size, const uint8_t* mask, void* values,
                            uint8_t* indices, int64_t* bad_window, int64_t out, int64_t in, int N,
                            int M, int L, cudaStream_t stream);

// decompress: values[in/M*N, out] (elem_size 4 or 2), indices[in/M*N, out/L] -> dense[out, in]
// (every element written; pruned positions hold +0). *bad_index (caller sets kNoError) becomes
// (i << 8) | indices[i] for the smallest linear position i whose index is >= M (out of range) or,
// when the low byte is < M, not above the index before it in its (window, vector) (not strictly
// ascending).
cudaError_t launch_decompress(const void* values, int elem_size, const uint8_t* indices,
                              void* dense, int64_t* bad_index, int64_t out, int64_t in, int N,
                              int M, int L, cudaStream_t stream);

// col_info: indices[w_rows, vectors] -> cols[ceil(vectors*L/128), ceil(w_rows/N*M/64), 64]
// (every byte written, unused slots 0xFF) and packed[w_rows, vectors]. *bad_index as for
// decompress.
cudaError_t launch_col_info(const uint8_t* indices, uint8_t* cols, uint8_t* packed,
                            int64_t* bad_index, int64_t w_rows, int64_t vectors, int N, int M,
                            int L, cudaStream_t stream);

}  // namespace kernels
}  // namespace nmspmm
