// CPU reference implementations of every nmspmm op. They are written for clarity: the CUDA
// kernels are tested against them (prune, compress, col_info bit for bit) and against fp64
// dense matmul of the decompressed weight.
#include <torch/all.h>

#include <algorithm>
#include <vector>

#include "../checks.h"
#include "../dispatch.h"

namespace nmspmm {

// Squared L2 norm of each in-window position p of window g over the L output rows of vector v,
// accumulated in fp64 in row order (the CUDA kernel uses the same order, so results are equal).
static void window_norms(const float* w, int64_t in, int64_t g, int64_t v, int64_t M, int64_t L,
                         double* norms) {
  for (int64_t p = 0; p < M; ++p) {
    double s = 0.0;
    for (int64_t r = 0; r < L; ++r) {
      const double x = w[(v * L + r) * in + g * M + p];
      s += x * x;
    }
    norms[p] = s;
  }
}

// Position p is kept iff fewer than N positions beat it (larger norm, or equal norm and lower index).
static inline bool keeps(const double* norms, int64_t M, int64_t N, int64_t p) {
  int64_t better = 0;
  for (int64_t q = 0; q < M; ++q)
    better += (norms[q] > norms[p]) || (norms[q] == norms[p] && q < p);
  return better < N;
}

at::Tensor prune_cpu(const at::Tensor& weight, int64_t N, int64_t M, int64_t L) {
  check_weight(weight, N, M, L);
  TORCH_CHECK(weight.device().is_cpu(), "nmspmm.prune: weight must be a CPU tensor here");
  const auto w = weight.to(at::kFloat).contiguous();
  TORCH_CHECK(at::isfinite(w).all().item<bool>(), "nmspmm.prune: weight contains NaN or Inf");
  const int64_t out = w.size(0), in = w.size(1);
  auto mask = at::zeros({out, in}, weight.options().dtype(at::kBool));
  const float* wp = w.data_ptr<float>();
  bool* mp = mask.data_ptr<bool>();
  const int64_t windows = in / M, vectors = out / L;
  at::parallel_for(0, windows * vectors, 1, [&](int64_t begin, int64_t end) {
    std::vector<double> norms(M);
    for (int64_t t = begin; t < end; ++t) {
      const int64_t v = t / windows, g = t % windows;
      window_norms(wp, in, g, v, M, L, norms.data());
      for (int64_t p = 0; p < M; ++p) {
        if (!keeps(norms.data(), M, N, p)) continue;
        for (int64_t r = 0; r < L; ++r) mp[(v * L + r) * in + g * M + p] = true;
      }
    }
  });
  return mask;
}

std::tuple<at::Tensor, at::Tensor> compress_cpu(const at::Tensor& weight, const at::Tensor& mask,
                                                int64_t N, int64_t M, int64_t L) {
  check_compress_inputs(weight, mask, N, M, L);
  const int64_t out = weight.size(0), in = weight.size(1);
  const int64_t windows = in / M, vectors = out / L, w_rows = windows * N;
  const auto wt = weight.contiguous();
  const auto mk = mask.contiguous();
  auto values = at::empty({w_rows, out}, weight.options());
  auto indices = at::empty({w_rows, vectors}, weight.options().dtype(at::kByte));
  const bool* mp = mk.data_ptr<bool>();
  uint8_t* ip = indices.data_ptr<uint8_t>();
  // Validate the mask and derive the indices: each (window, vector) keeps exactly N positions,
  // the same for all L rows of the vector.
  int64_t bad = -1;
  for (int64_t v = 0; v < vectors && bad < 0; ++v) {
    for (int64_t g = 0; g < windows && bad < 0; ++g) {
      int64_t s = 0;
      for (int64_t p = 0; p < M; ++p) {
        const bool keep = mp[(v * L) * in + g * M + p];
        for (int64_t r = 1; r < L; ++r)
          if (mp[(v * L + r) * in + g * M + p] != keep) bad = v * windows + g;
        if (keep) {
          if (s < N) ip[(g * N + s) * vectors + v] = static_cast<uint8_t>(p);
          ++s;
        }
      }
      if (s != N) bad = v * windows + g;
    }
  }
  TORCH_CHECK(bad < 0, "nmspmm.compress: mask is not vector-wise ", N, ":", M, " with L=", L,
              ": (window ", bad % windows, ", vector ", bad / windows,
              ") does not keep exactly N positions shared by its L rows");
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, weight.scalar_type(), "compress_cpu", [&] {
    const scalar_t* wp = wt.data_ptr<scalar_t>();
    scalar_t* vp = values.data_ptr<scalar_t>();
    for (int64_t u = 0; u < w_rows; ++u) {
      const int64_t g = u / N;
      for (int64_t j = 0; j < out; ++j) vp[u * out + j] = wp[j * in + g * M + ip[u * vectors + j / L]];
    }
  });
  return {values, indices};
}

// Host check of index data (CPU tensors only: the CUDA ops never read indices on the host, which
// would synchronize): every index is < M, and the N positions of each (window, vector) are
// strictly ascending, the order compress writes. A repeated position would make decompress keep
// one of two values where a gathering kernel adds both: a silent mismatch, so it is refused.
static void check_index_data(const uint8_t* ip, int64_t w_rows, int64_t vectors, int64_t N, int64_t M,
                             const char* op) {
  for (int64_t i = 0; i < w_rows * vectors; ++i)
    TORCH_CHECK(ip[i] < M, "nmspmm.", op, ": indices holds ", int(ip[i]), " >= M=", M);
  for (int64_t u = 0; u < w_rows; ++u) {
    if (u % N == 0) continue;
    for (int64_t v = 0; v < vectors; ++v)
      TORCH_CHECK(ip[u * vectors + v] > ip[(u - 1) * vectors + v], "nmspmm.", op,
                  ": indices must be strictly ascending within each (window, vector): row ", u,
                  " column ", v, " holds ", int(ip[u * vectors + v]), " after ",
                  int(ip[(u - 1) * vectors + v]));
  }
}

at::Tensor decompress_cpu(const at::Tensor& values, const at::Tensor& indices, int64_t N, int64_t M,
                          int64_t L) {
  const int64_t in = check_compressed(values, indices, N, M, L);
  const int64_t w_rows = values.size(0), out = values.size(1), vectors = out / L;
  auto dense = at::zeros({out, in}, values.options());
  const auto vc = values.contiguous();
  const auto ic = indices.contiguous();
  const uint8_t* ip = ic.data_ptr<uint8_t>();
  check_index_data(ip, w_rows, vectors, N, M, "decompress");
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, values.scalar_type(), "decompress_cpu", [&] {
    const scalar_t* vp = vc.data_ptr<scalar_t>();
    scalar_t* dp = dense.data_ptr<scalar_t>();
    for (int64_t u = 0; u < w_rows; ++u) {
      const int64_t base = u / N * M;
      for (int64_t j = 0; j < out; ++j) dp[j * in + base + ip[u * vectors + j / L]] = vp[u * out + j];
    }
  });
  return dense;
}

std::tuple<at::Tensor, at::Tensor> col_info_cpu(const at::Tensor& indices, int64_t N, int64_t M,
                                                int64_t L) {
  check_pattern(N, M, L);
  TORCH_CHECK(indices.dim() == 2 && indices.scalar_type() == at::kByte,
              "nmspmm.col_info: indices must be a 2-D uint8 tensor, got ", indices.scalar_type(), " ",
              indices.sizes());
  TORCH_CHECK(indices.size(0) % N == 0, "nmspmm.col_info: indices.size(0)=", indices.size(0),
              " is not a multiple of N=", N);
  const int64_t w_rows = indices.size(0), vectors = indices.size(1);
  const int64_t out = vectors * L, in = w_rows / N * M;
  const int64_t n_tiles = (out + kPackTileN - 1) / kPackTileN;
  const int64_t k_blocks = (in + kPackKBlock - 1) / kPackKBlock;
  const int64_t rows_per_block = kPackKBlock / M * N;  // compressed rows in one k-block
  const int64_t vec_per_tile = std::max<int64_t>(1, kPackTileN / L);
  auto cols = at::full({n_tiles, k_blocks, kPackKBlock}, kUnusedCol, indices.options());
  auto packed = at::empty(indices.sizes(), indices.options());
  const auto ic = indices.contiguous();
  const uint8_t* ip = ic.data_ptr<uint8_t>();
  uint8_t* cp = cols.data_ptr<uint8_t>();
  uint8_t* pp = packed.data_ptr<uint8_t>();
  check_index_data(ip, w_rows, vectors, N, M, "col_info");
  for (int64_t t = 0; t < n_tiles; ++t) {
    // Vectors whose columns fall in column tile t (a vector wider than the tile belongs to each
    // tile it covers).
    const int64_t v0 = t * kPackTileN / L;
    const int64_t v1 = std::min<int64_t>(vectors, v0 + vec_per_tile);
    for (int64_t b = 0; b < k_blocks; ++b) {
      const int64_t u0 = b * rows_per_block, u1 = std::min(w_rows, u0 + rows_per_block);
      bool used[kPackKBlock] = {};
      for (int64_t u = u0; u < u1; ++u)
        for (int64_t v = v0; v < v1; ++v) used[(u - u0) / N * M + ip[u * vectors + v]] = true;
      uint8_t slot[kPackKBlock];
      int64_t count = 0;
      for (int64_t c = 0; c < kPackKBlock; ++c) {
        if (!used[c]) continue;
        cp[(t * k_blocks + b) * kPackKBlock + count] = static_cast<uint8_t>(c);
        slot[c] = static_cast<uint8_t>(count++);
      }
      for (int64_t u = u0; u < u1; ++u)
        for (int64_t v = v0; v < v1; ++v)
          pp[u * vectors + v] = slot[(u - u0) / N * M + ip[u * vectors + v]];
    }
  }
  return {cols, packed};
}

// The packing metadata must be what col_info computes from these indices: the packing kernels
// trust it (they clamp every entry to its k-block, so a stale one cannot read outside their
// arrays, but it would compute a wrong result).
static void check_col_info_data(const at::Tensor& col_info, const at::Tensor& packed_indices,
                                const at::Tensor& indices, int64_t N, int64_t M, int64_t L,
                                const char* op) {
  const auto expected = col_info_cpu(indices, N, M, L);
  TORCH_CHECK(at::equal(col_info, std::get<0>(expected)), "nmspmm.", op,
              ": col_info does not match indices (rebuild it with nmspmm.col_info(indices, N, M, L))");
  TORCH_CHECK(at::equal(packed_indices, std::get<1>(expected)), "nmspmm.", op,
              ": packed_indices does not match indices (rebuild it with nmspmm.col_info(indices, N, M, L))");
}

// The sparse tensor cores' metadata of a 2:4 weight (docs/format.md): word [b, v] holds, in nibble
// j, the two positions of window 8 b + j of vector v, (i0 & 3) | (i1 & 3) << 2; windows past the
// last and vectors past the last (row padding to 16 bytes) hold 0x4, the pattern {0, 1}.
at::Tensor sparse_tc_meta_cpu(const at::Tensor& indices, int64_t N, int64_t M, int64_t L, int64_t in_features) {
  const int64_t out = check_sparse_tc_meta_args(indices, N, M, L, in_features);
  const int64_t rows = tc_meta_rows(in_features), ld = tc_meta_ld(out, L), windows = in_features / 4;
  const int64_t vectors = indices.size(1);
  auto meta = at::empty({rows, ld}, indices.options().dtype(at::kInt));
  const auto ic = indices.contiguous();
  const uint8_t* ip = ic.data_ptr<uint8_t>();
  auto* mp = reinterpret_cast<uint32_t*>(meta.data_ptr<int32_t>());
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t v = 0; v < ld; ++v) {
      uint32_t word = 0;
      for (int64_t j = 0; j < 8; ++j) {
        const int64_t g = 8 * b + j;
        uint32_t nib = 0x4;
        if (g < windows && v < vectors)
          nib = (ip[(2 * g) * vectors + v] & 3u) | ((ip[(2 * g + 1) * vectors + v] & 3u) << 2);
        word |= nib << (4 * j);
      }
      mp[b * ld + v] = word;
    }
  return meta;
}

at::Tensor spmm_cpu(const at::Tensor& x, const at::Tensor& values, const at::Tensor& indices,
                    int64_t N, int64_t M, int64_t L, const std::optional<at::Tensor>& bias,
                    const std::optional<at::Tensor>& col_info,
                    const std::optional<at::Tensor>& packed_indices,
                    const std::optional<at::Tensor>& tc_meta) {
  const int64_t in = check_compressed(values, indices, N, M, L, /*compact_ok=*/true);
  check_spmm_inputs(x, values, bias, in);
  check_spmm_metadata(values, indices, N, M, L, in, col_info, packed_indices, tc_meta);
  // A compact 2:4 weight's positions are its tc_meta's; the check below then covers the padding.
  const at::Tensor idx =
      indices_compact(values, indices) ? indices_from_tc_meta(*tc_meta, in, values.size(1), L) : indices;
  if (col_info.has_value()) check_col_info_data(*col_info, *packed_indices, idx, N, M, L, "spmm");
  if (tc_meta.has_value())
    TORCH_CHECK(at::equal(*tc_meta, sparse_tc_meta_cpu(idx, N, M, L, in)),
                "nmspmm.spmm: tc_meta does not match indices (rebuild it with torch.ops.nmspmm.sparse_tc_meta(indices, 2, 4, L, "
                "in_features))");
  const int64_t out = values.size(1), m = spmm_rows(x);
  if (in == 0) return spmm_no_inputs(x, out, bias).reshape(spmm_out_shape(x, out));
  // Reference: dense fp32 matmul with the decompressed weight (decompress checks the indices).
  const auto dense = decompress_cpu(values.to(at::kFloat), idx, N, M, L);
  const auto x2 = x.reshape({m, in}).to(at::kFloat);
  auto y = at::matmul(x2, dense.t());
  // Pruned positions of x are never read (the CUDA kernels gather the kept inputs only), so a NaN
  // or Inf there must not reach y; the dense product above multiplies it by a zero. Rows of x with
  // a non-finite value are recomputed from their kept inputs only.
  const auto bad_rows = at::isfinite(x2).all(1).logical_not().nonzero().flatten();
  if (bad_rows.numel() > 0) {
    const int64_t w_rows = values.size(0);
    // cols[u, j] = window(u) * M + indices[u, j / L]: the x column that weight (u, j) multiplies.
    const auto window_base = at::arange(w_rows, x2.options().dtype(at::kLong)).div(N, "floor").mul(M);
    const auto cols = idx.to(at::kLong).repeat_interleave(L, 1).add(window_base.unsqueeze(1));
    const auto vals = values.to(at::kFloat);
    const auto* rp = bad_rows.data_ptr<int64_t>();
    for (int64_t e = 0; e < bad_rows.numel(); ++e)
      y.select(0, rp[e]).copy_(at::take(x2.select(0, rp[e]), cols).mul(vals).sum(0));
  }
  if (bias.has_value()) y.add_(bias->to(at::kFloat));
  return y.to(x.scalar_type()).reshape(spmm_out_shape(x, out));
}

at::Tensor spmm_with_plan_cpu(const at::Tensor& x, const at::Tensor& values,
                              const at::Tensor& indices, int64_t N, int64_t M, int64_t L,
                              const std::optional<at::Tensor>& bias,
                              const std::optional<at::Tensor>& col_info,
                              const std::optional<at::Tensor>& packed_indices, c10::string_view kernel,
                              int64_t split_k, const std::optional<at::Tensor>& tc_meta) {
  // The CPU computes the reference whatever the plan, but refuses the plans the CUDA binding
  // refuses (same rules, checks.h), so a test that passes here runs there.
  const int64_t in = check_compressed(values, indices, N, M, L, /*compact_ok=*/true);
  check_spmm_inputs(x, values, bias, in);
  check_plan(kernel, split_k, spmm_rows(x), N, M, L, col_info.has_value());
  return spmm_cpu(x, values, indices, N, M, L, bias, col_info, packed_indices, tc_meta);
}

TORCH_LIBRARY_IMPL(nmspmm, CPU, m) {
  m.impl("prune", &prune_cpu);
  m.impl("compress", &compress_cpu);
  m.impl("decompress", &decompress_cpu);
  m.impl("col_info", &col_info_cpu);
  m.impl("sparse_tc_meta", &sparse_tc_meta_cpu);
  m.impl("spmm", &spmm_cpu);
  m.impl("spmm_with_plan", &spmm_with_plan_cpu);
}

}  // namespace nmspmm
