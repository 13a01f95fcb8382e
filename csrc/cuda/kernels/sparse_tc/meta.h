// Torch-free C entry of the 2:4 metadata builder: indices [in / 2, out / L] (uint8, canonical
// format) -> meta [ceil(in / 32), ld] (uint32, the sparse tensor cores' nibble form,
// docs/format.md "Sparse tensor-core metadata"). One thread per word, on `stream`; index bytes
// are read as b & 3.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace nmspmm {
namespace kernels {

cudaError_t launch_sparse_tc_meta(const uint8_t* indices, int64_t in_features, int64_t out_features, int L,
                                  uint32_t* meta, int64_t ld, cudaStream_t stream);

}  // namespace kernels
}  // namespace nmspmm
