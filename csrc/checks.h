// Argument checks shared by the CPU and CUDA implementations of every op. Each failure names
// the argument and says what was expected, so a bad call never turns into a crash or a silent
// wrong answer.
#pragma once
#include <torch/all.h>
#include "dispatch.h"
#include "pattern.h"

namespace nmspmm {

inline void check_pattern(int64_t N, int64_t M, int64_t L) {
  TORCH_CHECK(supported_M(M), "nmspmm: M must be a power of two in [2, ", kMaxM, "], got M=", M);
  TORCH_CHECK(N >= 1 && N <= M, "nmspmm: N must satisfy 1 <= N <= M, got N=", N, ", M=", M);
  TORCH_CHECK(supported_L(L), "nmspmm: L must be a power of two in [1, ", kMaxL, "], got L=", L);
}

inline bool is_float_type(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16;
}

// weight[out, in] in nn.Linear layout.
inline void check_weight(const at::Tensor& weight, int64_t N, int64_t M, int64_t L) {
  check_pattern(N, M, L);
  TORCH_CHECK(weight.dim() == 2, "nmspmm: weight must be 2-D [out_features, in_features], got ",
              weight.dim(), "-D");
  TORCH_CHECK(is_float_type(weight.scalar_type()),
              "nmspmm: weight must be float32, float16 or bfloat16, got ", weight.scalar_type());
  TORCH_CHECK(weight.size(1) % M == 0, "nmspmm: weight in_features (", weight.size(1),
              ") must be divisible by M=", M);
  TORCH_CHECK(weight.size(0) % L == 0, "nmspmm: weight out_features (", weight.size(0),
              ") must be divisible by L=", L);
}

// compress(weight, mask, N, M, L): a bool mask of the weight's shape, on its device.
inline void check_compress_inputs(const at::Tensor& weight, const at::Tensor& mask, int64_t N,
                                  int64_t M, int64_t L) {
  check_weight(weight, N, M, L);
  TORCH_CHECK(mask.scalar_type() == at::kBool, "nmspmm.compress: mask must be bool, got ",
              mask.scalar_type());
  TORCH_CHECK(mask.sizes() == weight.sizes(), "nmspmm.compress: mask shape ", mask.sizes(),
              " must equal weight shape ", weight.sizes());
  TORCH_CHECK(mask.device() == weight.device(), "nmspmm.compress: mask is on ", mask.device(),
              " but weight is on ", weight.device());
}

// Whether indices is the compact form of a 2:4 weight: shape [0, out/L] for values of w > 0 rows,
// the kept positions held by the weight's tc_meta alone (what NMLinear keeps for 2:4 fp16 / bf16;
// docs/format.md). Only spmm and spmm_with_plan accept it (check_compressed's compact_ok).
inline bool indices_compact(const at::Tensor& values, const at::Tensor& indices) {
  return values.dim() == 2 && indices.dim() == 2 && values.size(0) > 0 && indices.size(0) == 0;
}

// values[w, out] and indices[w, out/L] of the compressed format (with compact_ok, also the compact
// 2:4 form [0, out/L], whose tc_meta the caller checks); returns in_features.
inline int64_t check_compressed(const at::Tensor& values, const at::Tensor& indices, int64_t N,
                                int64_t M, int64_t L, bool compact_ok = false) {
  check_pattern(N, M, L);
  TORCH_CHECK(values.dim() == 2, "nmspmm: values must be 2-D [in*N/M, out], got ", values.dim(),
              "-D");
  TORCH_CHECK(is_float_type(values.scalar_type()),
              "nmspmm: values must be float32, float16 or bfloat16, got ", values.scalar_type());
  TORCH_CHECK(indices.dim() == 2, "nmspmm: indices must be 2-D [in*N/M, out/L], got ",
              indices.dim(), "-D");
  TORCH_CHECK(indices.scalar_type() == at::kByte, "nmspmm: indices must be uint8, got ",
              indices.scalar_type());
  TORCH_CHECK(values.device() == indices.device(), "nmspmm: indices is on ", indices.device(),
              " but values is on ", values.device());
  const int64_t w = values.size(0), out = values.size(1);
  TORCH_CHECK(w % N == 0, "nmspmm: values.size(0)=", w, " is not a multiple of N=", N,
              " (expected in_features*N/M rows)");
  TORCH_CHECK(out % L == 0, "nmspmm: values.size(1)=", out, " (out_features) must be divisible by L=",
              L);
  if (compact_ok && indices_compact(values, indices)) {
    TORCH_CHECK(N == 2 && M == 4, "nmspmm: indices of shape [0, out/L] (the compact 2:4 form, positions in tc_meta) "
                "are for N:M = 2:4, got ", N, ":", M);
    TORCH_CHECK(indices.size(1) == out / L, "nmspmm: compact 2:4 indices must have shape [0, ", out / L,
                "] to match values ", values.sizes(), " and L=", L, ", got ", indices.sizes());
    return w / N * M;
  }
  TORCH_CHECK(indices.size(0) == w && indices.size(1) == out / L, "nmspmm: indices must have shape [",
              w, ", ", out / L, "] to match values ", values.sizes(), " and L=", L, ", got ",
              indices.sizes());
  return w / N * M;
}

// col_info[n_tiles, k_blocks, kPackKBlock] (uint8) and packed_indices[w, out/L] (uint8).
inline void check_col_info(const at::Tensor& col_info, const at::Tensor& packed_indices,
                           const at::Tensor& indices, int64_t N, int64_t M, int64_t in_features,
                           int64_t out_features) {
  const int64_t n_tiles = (out_features + kPackTileN - 1) / kPackTileN;
  const int64_t k_blocks = (in_features + kPackKBlock - 1) / kPackKBlock;
  TORCH_CHECK(col_info.scalar_type() == at::kByte && col_info.dim() == 3 &&
                  col_info.size(0) == n_tiles && col_info.size(1) == k_blocks &&
                  col_info.size(2) == kPackKBlock,
              "nmspmm: col_info must be uint8 of shape [", n_tiles, ", ", k_blocks, ", ", kPackKBlock,
              "] (from nmspmm.col_info(indices, N, M, L)), got ", col_info.scalar_type(), " ",
              col_info.sizes());
  TORCH_CHECK(packed_indices.scalar_type() == at::kByte && packed_indices.sizes() == indices.sizes(),
              "nmspmm: packed_indices must be uint8 with the shape of indices ", indices.sizes(),
              ", got ", packed_indices.scalar_type(), " ", packed_indices.sizes());
  TORCH_CHECK(col_info.device() == indices.device() && packed_indices.device() == indices.device(),
              "nmspmm: col_info and packed_indices must be on the device of indices (",
              indices.device(), ")");
  (void)N;
  (void)M;
}

// The 2:4 sparse tensor-core metadata (sparse_tc_meta): int32 [ceil(in / 32), round_up(out / L, 4)],
// contiguous, on the device of indices; only for N:M = 2:4.
inline int64_t tc_meta_rows(int64_t in_features) { return (in_features + 31) / 32; }
inline int64_t tc_meta_ld(int64_t out_features, int64_t L) { return (out_features / L + 3) / 4 * 4; }
inline void check_tc_meta(const at::Tensor& tc_meta, const at::Tensor& indices, int64_t N, int64_t M, int64_t L,
                          int64_t in_features, int64_t out_features) {
  TORCH_CHECK(N == 2 && M == 4, "nmspmm.spmm: tc_meta is the metadata of 2:4 weights (sparse_tc_meta), but the "
              "pattern is ", N, ":", M);
  const int64_t rows = tc_meta_rows(in_features), ld = tc_meta_ld(out_features, L);
  TORCH_CHECK(tc_meta.scalar_type() == at::kInt && tc_meta.dim() == 2 && tc_meta.size(0) == rows &&
                  tc_meta.size(1) == ld,
              "nmspmm.spmm: tc_meta must be int32 of shape [", rows, ", ", ld,
              "] (from torch.ops.nmspmm.sparse_tc_meta(indices, 2, 4, L, in_features)), got ", tc_meta.scalar_type(), " ",
              tc_meta.sizes());
  TORCH_CHECK(tc_meta.device() == indices.device(), "nmspmm.spmm: tc_meta must be on the device of indices (",
              indices.device(), "), got ", tc_meta.device());
  TORCH_CHECK(tc_meta.is_contiguous(), "nmspmm.spmm: tc_meta must be contiguous (rows of ", ld,
              " words, as sparse_tc_meta returns it), got strides ", tc_meta.strides());
}

// spmm's weight metadata beyond values and indices (both devices): col_info with packed_indices,
// tc_meta; a compact 2:4 weight (indices_compact) needs its tc_meta and cannot take col_info.
inline void check_spmm_metadata(const at::Tensor& values, const at::Tensor& indices, int64_t N, int64_t M,
                                int64_t L, int64_t in_features, const std::optional<at::Tensor>& col_info,
                                const std::optional<at::Tensor>& packed_indices,
                                const std::optional<at::Tensor>& tc_meta) {
  TORCH_CHECK(col_info.has_value() == packed_indices.has_value(),
              "nmspmm.spmm: col_info and packed_indices must be given together");
  if (indices_compact(values, indices)) {
    TORCH_CHECK(tc_meta.has_value(), "nmspmm.spmm: indices of shape [0, out/L] (the compact 2:4 form) need the "
                "weight's tc_meta, which holds its positions");
    TORCH_CHECK(!col_info.has_value(), "nmspmm.spmm: col_info needs the canonical indices [in/2, out/L], got the "
                "compact 2:4 form [0, out/L] (torch.ops.nmspmm.sparse_tc_indices rebuilds them)");
  }
  if (col_info.has_value()) check_col_info(*col_info, *packed_indices, indices, N, M, in_features, values.size(1));
  if (tc_meta.has_value()) check_tc_meta(*tc_meta, indices, N, M, L, in_features, values.size(1));
}

// The canonical indices [in/2, out/L] (uint8) of a 2:4 weight from its tc_meta (the inverse of
// sparse_tc_meta on the positions it holds: row 16 b + t of vector v is bits 2t, 2t + 1 of word
// [b, v]; padding words and nibbles are not read). Tensor ops only (any device, the meta device
// included): each int32 word is read as its 4 little-endian bytes, 4 positions each.
inline at::Tensor indices_from_tc_meta(const at::Tensor& tc_meta, int64_t in_features, int64_t out_features,
                                       int64_t L) {
  const int64_t rows = tc_meta.size(0), vectors = out_features / L, w = in_features / 2;
  const at::Tensor bytes = tc_meta.narrow(1, 0, vectors).contiguous().view(at::kByte).view({rows, vectors, 4, 1});
  const at::Tensor shifts = at::arange(0, 8, 2, tc_meta.options().dtype(at::kByte)).view({1, 1, 1, 4});
  const at::Tensor pos = bytes.bitwise_right_shift(shifts).bitwise_and(3);  // [rows, vectors, byte, position]
  return pos.view({rows, vectors, 16}).permute({0, 2, 1}).reshape({rows * 16, vectors}).narrow(0, 0, w).contiguous();
}

// Arguments of sparse_tc_indices (every device).
inline void check_sparse_tc_indices_args(const at::Tensor& tc_meta, int64_t L, int64_t in_features,
                                         int64_t out_features) {
  TORCH_CHECK(L >= 1 && L <= 128 && (L & (L - 1)) == 0,
              "nmspmm.sparse_tc_indices: L must be a power of two in [1, 128], got L=", L);
  TORCH_CHECK(in_features >= 0 && in_features % 4 == 0,
              "nmspmm.sparse_tc_indices: in_features must be a non-negative multiple of 4, got ", in_features);
  TORCH_CHECK(out_features >= 0 && out_features % L == 0,
              "nmspmm.sparse_tc_indices: out_features must be a non-negative multiple of L=", L, ", got ", out_features);
  const int64_t rows = tc_meta_rows(in_features), ld = tc_meta_ld(out_features, L);
  TORCH_CHECK(tc_meta.scalar_type() == at::kInt && tc_meta.dim() == 2 && tc_meta.size(0) == rows &&
                  tc_meta.size(1) == ld,
              "nmspmm.sparse_tc_indices: tc_meta must be int32 of shape [", rows, ", ", ld, "], got ",
              tc_meta.scalar_type(), " ", tc_meta.sizes());
}

// Arguments of sparse_tc_meta (every device); returns out_features.
inline int64_t check_sparse_tc_meta_args(const at::Tensor& indices, int64_t N, int64_t M, int64_t L,
                                         int64_t in_features) {
  TORCH_CHECK(N == 2 && M == 4, "nmspmm.sparse_tc_meta: the sparse tensor-core metadata is for N:M = 2:4, got N=",
              N, ", M=", M);
  TORCH_CHECK(L >= 1 && L <= 128 && (L & (L - 1)) == 0,
              "nmspmm.sparse_tc_meta: L must be a power of two in [1, 128], got L=", L);
  TORCH_CHECK(indices.dim() == 2 && indices.scalar_type() == at::kByte,
              "nmspmm.sparse_tc_meta: indices must be a 2-D uint8 tensor, got ", indices.scalar_type(), " ",
              indices.sizes());
  TORCH_CHECK(in_features >= 0 && in_features % 4 == 0,
              "nmspmm.sparse_tc_meta: in_features must be a non-negative multiple of 4, got ", in_features);
  TORCH_CHECK(indices.size(0) == in_features / 2, "nmspmm.sparse_tc_meta: indices must have in_features / 2 = ",
              in_features / 2, " rows, got ", indices.size(0));
  return indices.size(1) * L;
}

// x[..., in], bias[out]; returns in_features.
inline void check_spmm_inputs(const at::Tensor& x, const at::Tensor& values,
                              const std::optional<at::Tensor>& bias, int64_t in_features) {
  TORCH_CHECK(x.dim() >= 1, "nmspmm: x must have at least one dimension [..., in_features]");
  TORCH_CHECK(is_float_type(x.scalar_type()), "nmspmm: x must be float32, float16 or bfloat16, got ",
              x.scalar_type());
  TORCH_CHECK(x.scalar_type() == values.scalar_type(), "nmspmm: x has dtype ", x.scalar_type(),
              " but the packed weight values have dtype ", values.scalar_type());
  TORCH_CHECK(x.device() == values.device(), "nmspmm: x is on ", x.device(),
              " but the packed weight is on ", values.device());
  TORCH_CHECK(x.size(-1) == in_features, "nmspmm: x.shape[-1]=", x.size(-1),
              " does not match the packed weight's in_features=", in_features);
  if (bias.has_value()) {
    const auto& b = *bias;
    TORCH_CHECK(b.dim() == 1 && b.size(0) == values.size(1), "nmspmm: bias must have shape [",
                values.size(1), "], got ", b.sizes());
    TORCH_CHECK(b.scalar_type() == x.scalar_type(), "nmspmm: bias has dtype ", b.scalar_type(),
                " but x has dtype ", x.scalar_type());
    TORCH_CHECK(b.device() == x.device(), "nmspmm: bias is on ", b.device(), " but x is on ",
                x.device());
  }
}

// Rows of x as a matrix [..., in] -> [m, in] (the product of the leading dims; a reshape to
// {-1, in} is ambiguous when in == 0).
inline int64_t spmm_rows(const at::Tensor& x) {
  int64_t m = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) m *= x.size(d);
  return m;
}

// spmm with in_features == 0: every output is the bias (or zero), as in nn.Linear.
inline at::Tensor spmm_no_inputs(const at::Tensor& x, int64_t out_features,
                                 const std::optional<at::Tensor>& bias) {
  auto y = at::zeros({spmm_rows(x), out_features}, x.options());
  if (bias.has_value()) y.add_(*bias);
  return y;
}

inline std::vector<int64_t> spmm_out_shape(const at::Tensor& x, int64_t out_features) {
  auto s = x.sizes().vec();
  s.back() = out_features;
  return s;
}

// A forced plan of spmm_with_plan (a registry kernel name, split_k): the same rules on every
// device, so a plan a CPU test accepts is one the CUDA binding runs. (The CUDA binding also checks
// what the kernel needs of the device: compute capability, sm_90a code.) Returns the kernel.
inline Kernel check_plan(c10::string_view name, int64_t split_k, int64_t m, int64_t N, int64_t M, int64_t L,
                         bool has_col_info) {
  const Kernel kernel = find_kernel(std::string(name).c_str());
  TORCH_CHECK(kernel != Kernel::kNone, "nmspmm.spmm_with_plan: unknown kernel '", name,
              "' (torch.ops.nmspmm.kernels() lists them)");
  const KernelInfo& info = kernel_info(kernel);
  // Blame col_info only where it is what is missing (a packing kernel that would run with it).
  const bool needs_col_info =
      !has_col_info && kernel_supports(kernel, m, N, M, L, true, info.dtype, info.min_cc, info.needs_sm90a);
  TORCH_CHECK(kernel_supports(kernel, m, N, M, L, has_col_info, info.dtype, info.min_cc, info.needs_sm90a),
              "nmspmm.spmm_with_plan: kernel ", info.name, " cannot run m=", m, " with pattern ", N, ":", M,
              " L=", L, needs_col_info ? " without col_info" : "");
  if (is_cluster_decode_kernel(kernel) || is_half_kernel(kernel) || is_dense_expand_kernel(kernel))
    TORCH_CHECK(split_k >= 1 && split_k <= info.max_split_k, "nmspmm.spmm_with_plan: split_k of kernel ",
                info.name, " must be in [1, ", info.max_split_k, "], got ", split_k);
  TORCH_CHECK(split_k >= 1 && split_k <= kMaxSplitK, "nmspmm.spmm_with_plan: split_k must be in [1, ",
              kMaxSplitK, "], got ", split_k);
  TORCH_CHECK(!is_cluster_split_kernel(kernel) || sparse_tc_split_ok(static_cast<int>(split_k)),
              "nmspmm.spmm_with_plan: split_k of kernel ", info.name, " must be 1, 2, 4 or 8, got ", split_k);
  return kernel;
}

}  // namespace nmspmm
