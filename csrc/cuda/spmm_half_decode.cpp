// Native fp16 / bf16 decode path of nmspmm::spmm on CUDA: the tensor-core decode kernels of
// csrc/cuda/kernels/half/decode_half.cuh (weights streamed in their own dtype, fp32 accumulation,
// output and bias in the input dtype, k split over a thread-block cluster and reduced on chip).
// spmm_ops.cpp calls spmm_half_decode() for the registry's decode_tc_* plans (the heuristic picks
// them for m <= 64 on devices with thread-block clusters, compute capability 9.0+, and the patterns
// they cover: L in {16, 32, 64, 128}, M a power of two in [2, 64]). Everything runs on
// the current stream; the kernels need no scratch, allocate nothing and do not synchronize, so the
// call is CUDA-graph capturable.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/all.h>

#include <mutex>
#include <optional>

#include "kernels/half/decode_half_plan.h"
#include "kernels/half/spmm_half.h"
#include "cuda/kernels/decode_splitk/spmm_decode_splitk.h"
#include "spmm_params.h"

namespace nmspmm {

// spmm_ops.cpp: whether this launch may start before the kernel before it in the stream (its
// weight does not overlap what the stream's last SpMM wrote); records the launch's output.
bool decode_launch_may_overlap(const at::Tensor& values, const at::Tensor& indices, const at::Tensor& y);
// spmm_sparse_tc.cpp: the weight's 2:4 metadata, or built for the call.
at::Tensor sparse_tc_meta_for_call(const at::Tensor& indices, int64_t in, int64_t out, int64_t L,
                                   const std::optional<at::Tensor>& tc_meta, cudaStream_t stream);

// Runs a decode_tc_* or decode_sparse_tc_* plan: config (kernels::kHalfDecodeNarrow, kHalfDecodeKept,
// kHalfDecodeSparse24) picks blocks of 64 or 256 output columns, the x staging and the product;
// k split over a cluster of split_k blocks. x2 is x reshaped to [m, in] with m >= 1; the caller
// has checked every argument (tc_meta against the pattern's shape) and the plan (registry and
// compute capability).
at::Tensor spmm_half_decode(const at::Tensor& x2, const at::Tensor& values, const at::Tensor& indices, int64_t N,
                            int64_t M, int64_t L, const std::optional<at::Tensor>& bias, int config, int split_k,
                            const std::optional<at::Tensor>& tc_meta) {
  const int64_t m = x2.size(0), in = x2.size(1), out = values.size(1);
  const bool sp24 = (config & kernels::kHalfDecodeSparse24) != 0;
  if (sp24) {  // only a forced plan reaches here with such a shape (the heuristic plans another family)
    TORCH_CHECK(kernels::sparse24_decode_supports(m, out, in, N, M, L), "nmspmm.spmm_with_plan: the 2:4 decode kernels ",
                "run m <= ", kernels::kHalfDecodeMaxM, " and out_features divisible by 8 (16-byte rows of values), got m=",
                m, " out_features=", out);
  } else {
    // Only a forced plan reaches here with such a shape (the heuristic checks half_decode_supports).
    TORCH_CHECK(kernels::half_decode_supports(m, out, in, N, M, L), "nmspmm.spmm_with_plan: the fp16/bf16 decode kernels ",
                "cannot run m=", m, " n=", out, " k=", in, " with pattern ", N, ":", M, " L=", L,
                L < 16 ? " (L < 16 needs out_features a multiple of 8)" : "");
  }
  TORCH_CHECK(split_k >= 1 && split_k <= kernels::kHalfDecodeMaxSplit, "nmspmm.spmm: split_k of the decode_tc kernels is ",
              "their cluster size and must be in [1, ", kernels::kHalfDecodeMaxSplit, "], got ", split_k);
  at::Tensor x = x2;
  if (x.stride(1) != 1 || (m > 1 && x.stride(0) < in)) x = x.contiguous();
  at::Tensor vals = values.contiguous();
  if (reinterpret_cast<uintptr_t>(vals.data_ptr()) % 16 != 0) vals = vals.clone();
  const at::Tensor idx = indices.contiguous();
  at::Tensor b;
  if (bias.has_value()) b = bias->contiguous();
  at::Tensor y = at::empty({m, out}, x.options());

  kernels::HalfSpmmParams p = half_params(x, m > 1 ? x.stride(0) : in, vals, idx, b, y, N, M, L, split_k);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  at::Tensor meta;
  if (sp24) {
    meta = sparse_tc_meta_for_call(idx, in, out, L, tc_meta, stream);
    p.meta = reinterpret_cast<const uint32_t*>(meta.data_ptr<int32_t>());
    p.meta_ld = meta.size(1);
  }
  // Read before the dependency wait: values and indices, or (2:4) values and the metadata. A raw
  // call's metadata is written by the launch just before, so that kernel does not start early.
  if (decode_launch_may_overlap(vals, sp24 ? meta : idx, y) && (!sp24 || tc_meta.has_value()))
    config |= kernels::kHalfDecodeDependentLaunch;
  // The kernels reduce on chip and need no scratch; the interface allows it.
  const size_t scratch_bytes = kernels::half_decode_scratch_bytes(p, config);
  at::Tensor scratch;
  if (scratch_bytes > 0) {
    scratch = at::empty({static_cast<int64_t>(scratch_bytes)}, x.options().dtype(at::kByte));
    p.scratch = scratch.data_ptr();
    p.scratch_bytes = scratch_bytes;
  }
  const cudaError_t err = kernels::launch_half_decode(p, config, stream);
  TORCH_CHECK(err == cudaSuccess, "nmspmm.spmm: fp16/bf16 decode kernel (config ", config, ", split_k=", split_k,
              ") failed for m=", m, " n=", out, " k=", in, ": ", cudaGetErrorString(err));
  return y;
}

// Runs a decode_splitk_{bf16,f16} plan (spmm_decode_splitk.cuh: any L, m <= 16, values in their
// own dtype): k split over split_k blocks whose fp32 partials go to a workspace [split_k, m, out]
// from the caching allocator (as decode_f32_splitk's in spmm_ops.cpp), summed in fixed order by a
// second kernel, launched with programmatic dependent launch when `overlap`. Unaligned values,
// indices, bias or odd n take the kernels' scalar loads (no copy). x2 is x reshaped to [m, in].
at::Tensor spmm_decode_splitk_half(const at::Tensor& x2, const at::Tensor& values, const at::Tensor& indices,
                                   int64_t N, int64_t M, int64_t L, const std::optional<at::Tensor>& bias, int split_k,
                                   bool overlap) {
  const int64_t m = x2.size(0), in = x2.size(1), out = values.size(1);
  TORCH_CHECK(m >= 1 && m <= kernels::kDecodeSplitKMaxM, "nmspmm.spmm: the decode_splitk kernels run 1 <= m <= ",
              kernels::kDecodeSplitKMaxM, ", got m=", m);
  TORCH_CHECK(split_k >= 1 && split_k <= 65535, "nmspmm.spmm: split_k of the decode_splitk kernels must be >= 1, got ",
              split_k);
  at::Tensor x = x2;
  if (x.stride(1) != 1 || (m > 1 && x.stride(0) < in)) x = x.contiguous();
  const at::Tensor vals = values.contiguous();
  const at::Tensor idx = indices.contiguous();
  at::Tensor b;
  if (bias.has_value()) b = bias->contiguous();
  at::Tensor y = at::empty({m, out}, x.options());
  kernels::HalfSpmmParams p = half_params(x, m > 1 ? x.stride(0) : in, vals, idx, b, y, N, M, L, split_k);
  at::Tensor workspace;
  if (split_k > 1) {
    workspace = at::empty({split_k, m, out}, x.options().dtype(at::kFloat));
    p.scratch = workspace.data_ptr();
    p.scratch_bytes = kernels::half_decode_splitk_workspace_bytes(p);
  }
  // Records y as this launch's output on the stream, so that a later decode kernel that starts
  // early never reads it as its weight before it is written (the kernel itself starts in order).
  (void)decode_launch_may_overlap(vals, idx, y);
  const cudaError_t err = kernels::launch_half_decode_splitk(p, overlap, c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "nmspmm.spmm: decode_splitk kernel (split_k=", split_k, ") failed for m=", m,
              " n=", out, " k=", in, " with pattern ", N, ":", M, " L=", L, ": ", cudaGetErrorString(err));
  return y;
}

}  // namespace nmspmm
