// Autograd of nmspmm::spmm, nmspmm::spmm_with_plan and nmspmm::csr_spmm, registered in C++ for every
// backend.
//
// The weight is frozen (values and indices are buffers): dL/dx = dL/dy @ W and dL/dbias = the sum
// of dL/dy over the leading dims, both through registered ops (decompress, matmul), so the
// backward also runs under torch.compile's fake tensors. A call that needs no gradient (grad mode
// off, or no input requires grad) goes straight to the backend kernel: no autograd node and no
// Python on the way (a Python registration costs ~17 us of host time per call on the CPU
// build).
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>

#include "checks.h"

namespace nmspmm {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using OptTensor = std::optional<at::Tensor>;

const auto& spmm_op() {
  static const auto op = c10::Dispatcher::singleton()
                              .findSchemaOrThrow("nmspmm::spmm", "")
                              .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                                                int64_t, int64_t, const OptTensor&, const OptTensor&,
                                                const OptTensor&, const OptTensor&)>();
  return op;
}

const auto& spmm_with_plan_op() {
  static const auto op = c10::Dispatcher::singleton()
                              .findSchemaOrThrow("nmspmm::spmm_with_plan", "")
                              .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                                                int64_t, int64_t, const OptTensor&, const OptTensor&,
                                                const OptTensor&, c10::string_view, int64_t, const OptTensor&)>();
  return op;
}

const auto& decompress_op() {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("nmspmm::decompress", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, int64_t, int64_t)>();
  return op;
}

// The backend kernel of spmm, or of spmm_with_plan when with_plan, called below autograd.
at::Tensor call_below_autograd(bool with_plan, const at::Tensor& x, const at::Tensor& values,
                               const at::Tensor& indices, int64_t N, int64_t M, int64_t L, const OptTensor& bias,
                               const OptTensor& col_info, const OptTensor& packed_indices, c10::string_view kernel,
                               int64_t split_k, const OptTensor& tc_meta) {
  at::AutoDispatchBelowADInplaceOrView guard;
  if (with_plan)
    return spmm_with_plan_op().call(x, values, indices, N, M, L, bias, col_info, packed_indices, kernel, split_k,
                                    tc_meta);
  return spmm_op().call(x, values, indices, N, M, L, bias, col_info, packed_indices, tc_meta);
}

struct SpmmFunction : public torch::autograd::Function<SpmmFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& values,
                            const at::Tensor& indices, int64_t N, int64_t M, int64_t L, const OptTensor& bias,
                            const OptTensor& col_info, const OptTensor& packed_indices, const std::string& kernel,
                            int64_t split_k, bool with_plan, const OptTensor& tc_meta) {
    TORCH_CHECK(!values.requires_grad(),
                "nmspmm.spmm: gradients for the compressed weight values are not supported; the sparse "
                "weight is frozen (values.requires_grad must be False)");
    // A compact 2:4 weight (indices [0, out/L]) holds its positions in tc_meta.
    const bool compact = indices_compact(values, indices) && tc_meta.has_value();
    ctx->save_for_backward({values, compact ? *tc_meta : indices});
    ctx->saved_data["compact"] = compact;
    ctx->saved_data["N"] = N;
    ctx->saved_data["M"] = M;
    ctx->saved_data["L"] = L;
    ctx->saved_data["has_bias"] = bias.has_value();
    return call_below_autograd(with_plan, x, values, indices, N, M, L, bias, col_info, packed_indices, kernel,
                               split_k, tc_meta);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // One slot per forward argument: x, values, indices, N, M, L, bias, col_info, packed_indices,
    // kernel, split_k, with_plan, tc_meta. Only x and bias get gradients.
    variable_list out(13);
    const at::Tensor& grad_y = grads[0];
    if (!grad_y.defined()) return out;
    const auto saved = ctx->get_saved_variables();
    if (ctx->needs_input_grad(0)) {
      const int64_t L = ctx->saved_data["L"].toInt();
      const at::Tensor indices = ctx->saved_data["compact"].toBool()
                                     ? indices_from_tc_meta(saved[1], 2 * saved[0].size(0), saved[0].size(1), L)
                                     : saved[1];
      const at::Tensor dense = decompress_op().call(saved[0], indices, ctx->saved_data["N"].toInt(),
                                                    ctx->saved_data["M"].toInt(), L);
      out[0] = at::matmul(grad_y, dense);  // [..., out] @ [out, in] -> [..., in], the shape of x
    }
    // needs_input_grad counts tensor inputs only: x, values, indices, then bias (when given).
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(3)) {
      const std::vector<c10::SymInt> rows = {c10::SymInt(-1), grad_y.sym_size(-1)};
      out[6] = grad_y.reshape_symint(rows).sum(0);
    }
    return out;
  }
};

bool needs_grad(const at::Tensor& x, const at::Tensor& values, const OptTensor& bias) {
  return at::GradMode::is_enabled() &&
         (x.requires_grad() || values.requires_grad() || (bias.has_value() && bias->requires_grad()));
}

// The Autograd kernel of both ops: straight to the backend when nothing needs a gradient.
at::Tensor spmm_autograd_impl(bool with_plan, const at::Tensor& x, const at::Tensor& values,
                              const at::Tensor& indices, int64_t N, int64_t M, int64_t L, const OptTensor& bias,
                              const OptTensor& col_info, const OptTensor& packed_indices, c10::string_view kernel,
                              int64_t split_k, const OptTensor& tc_meta) {
  if (!needs_grad(x, values, bias))
    return call_below_autograd(with_plan, x, values, indices, N, M, L, bias, col_info, packed_indices, kernel,
                               split_k, tc_meta);
  return SpmmFunction::apply(x, values, indices, N, M, L, bias, col_info, packed_indices, std::string(kernel),
                             split_k, with_plan, tc_meta);
}

at::Tensor spmm_autograd(const at::Tensor& x, const at::Tensor& values, const at::Tensor& indices, int64_t N,
                         int64_t M, int64_t L, const OptTensor& bias, const OptTensor& col_info,
                         const OptTensor& packed_indices, const OptTensor& tc_meta) {
  return spmm_autograd_impl(false, x, values, indices, N, M, L, bias, col_info, packed_indices, "", 1, tc_meta);
}

at::Tensor spmm_with_plan_autograd(const at::Tensor& x, const at::Tensor& values, const at::Tensor& indices,
                                   int64_t N, int64_t M, int64_t L, const OptTensor& bias,
                                   const OptTensor& col_info, const OptTensor& packed_indices,
                                   c10::string_view kernel, int64_t split_k, const OptTensor& tc_meta) {
  return spmm_autograd_impl(true, x, values, indices, N, M, L, bias, col_info, packed_indices, kernel, split_k,
                            tc_meta);
}

const auto& csr_spmm_op() {
  static const auto op = c10::Dispatcher::singleton()
                              .findSchemaOrThrow("nmspmm::csr_spmm", "")
                              .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                const at::Tensor&, int64_t, const OptTensor&, int64_t)>();
  return op;
}

const auto& csr_decompress_op() {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("nmspmm::csr_decompress", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t)>();
  return op;
}

at::Tensor csr_call_below_autograd(const at::Tensor& x, const at::Tensor& crow, const at::Tensor& col,
                                   const at::Tensor& values, int64_t in_features, const OptTensor& bias,
                                   int64_t max_row_nnz) {
  at::AutoDispatchBelowADInplaceOrView guard;
  return csr_spmm_op().call(x, crow, col, values, in_features, bias, max_row_nnz);
}

// csr_spmm with a frozen CSR weight: dL/dx = dL/dy @ W (W from csr_decompress), dL/dbias the sum
// of dL/dy over the leading dims.
struct CsrSpmmFunction : public torch::autograd::Function<CsrSpmmFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& crow, const at::Tensor& col,
                            const at::Tensor& values, int64_t in_features, const OptTensor& bias,
                            int64_t max_row_nnz) {
    TORCH_CHECK(!values.requires_grad(),
                "nmspmm.csr_spmm: gradients for the sparse weight values are not supported; the sparse weight is "
                "frozen (values.requires_grad must be False)");
    ctx->save_for_backward({crow, col, values});
    ctx->saved_data["in_features"] = in_features;
    ctx->saved_data["has_bias"] = bias.has_value();
    return csr_call_below_autograd(x, crow, col, values, in_features, bias, max_row_nnz);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // One slot per forward argument: x, crow, col, values, in_features, bias, max_row_nnz.
    variable_list out(7);
    const at::Tensor& grad_y = grads[0];
    if (!grad_y.defined()) return out;
    const auto saved = ctx->get_saved_variables();
    if (ctx->needs_input_grad(0)) {
      const at::Tensor dense =
          csr_decompress_op().call(saved[0], saved[1], saved[2], ctx->saved_data["in_features"].toInt());
      out[0] = at::matmul(grad_y, dense);
    }
    // needs_input_grad counts tensor inputs only: x, crow, col, values, then bias (when given).
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(4)) {
      const std::vector<c10::SymInt> rows = {c10::SymInt(-1), grad_y.sym_size(-1)};
      out[5] = grad_y.reshape_symint(rows).sum(0);
    }
    return out;
  }
};

at::Tensor csr_spmm_autograd(const at::Tensor& x, const at::Tensor& crow, const at::Tensor& col,
                             const at::Tensor& values, int64_t in_features, const OptTensor& bias,
                             int64_t max_row_nnz) {
  if (!needs_grad(x, values, bias))
    return csr_call_below_autograd(x, crow, col, values, in_features, bias, max_row_nnz);
  return CsrSpmmFunction::apply(x, crow, col, values, in_features, bias, max_row_nnz);
}

}  // namespace

TORCH_LIBRARY_IMPL(nmspmm, Autograd, m) {
  m.impl("spmm", &spmm_autograd);
  m.impl("spmm_with_plan", &spmm_with_plan_autograd);
  m.impl("csr_spmm", &csr_spmm_autograd);
}

}  // namespace nmspmm
