// The 2:4 sparse tensor-core kernels for bf16 (sparse_tc_sm90.cuh), one instance per variant:
// <token tile, blocks per SM>.
#include "cuda/kernels/sparse_tc/sparse_tc_sm90.cuh"

namespace nmspmm {
namespace kernels {
namespace sparse_tc {

template cudaError_t launch_tile<__nv_bfloat16, 256, 1>(const SparseTcParams&, cudaStream_t);
template cudaError_t launch_tile<__nv_bfloat16, 128, 2>(const SparseTcParams&, cudaStream_t);
template cudaError_t launch_tile<__nv_bfloat16, 64, 1>(const SparseTcParams&, cudaStream_t);
template cudaError_t launch_tile<__nv_bfloat16, 16, 1>(const SparseTcParams&, cudaStream_t);

}  // namespace sparse_tc
}  // namespace kernels
}  // namespace nmspmm
