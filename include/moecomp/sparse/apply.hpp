#pragma once
// ResMoE's inference saving, on the host: experts that share one base B, each stored as its sparse residual
// R_e (<moecomp/sparse/residual.hpp>), applied to the tokens routed to them without materialising any B + R_e.
// Documentation: docs/sparse.md, "Shared-base apply".
//
//   y(t, :) = x(t, :) (B + R_e)^T   for the rows t = expert_offsets[e] .. expert_offsets[e + 1] - 1 of expert e
//
//   x: n x in (the routed rows, grouped by expert: the dispatch plan's order), float (double for double B);
//   base: out x in in nn.Linear layout, float, double, bfloat16 or half; residuals: E views, each out x in in
//   the base's row order (encode_residual's); expert_offsets: E + 1 entries from 0 to n, non-decreasing;
//   y: n x out.
//
// Method: y = x B^T over all n rows at once, B read once in panels converted to the accumulator type (one
// pass over B whatever the number of experts), then each expert's residual rows multiplied with that expert's
// rows only (each stored entry read once per call). So an MoE layer at decode batch sizes moves the base once
// plus the residuals of the experts in use: with bf16 bases and 25%-dense fp16 bitmap residuals, 2 + 0.625 E'
// bytes per weight position for E' experts in use, against 2 E' for dense bf16 experts. The sparse pass costs
// about 2 x (stored entries) x (rows of the expert) flops at scalar speed, so for experts with many rows (long
// prefill batches) restore_dense followed by a dense GEMM is faster. The same at any thread count.
#include <moecomp/core/context.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/sparse/residual_types.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/traits.hpp>
#include <moecomp/sparse/detail/apply_host.hpp>

#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace sparse {

namespace detail {

/// The shared argument checks of the shared-base apply (and the FFN forward built on it).
template <class W, class A>
void check_shared_base_apply(const char* fn, matrix_view<const A> x, matrix_view<const W> base,
                             const std::vector<sparse_matrix_view>& residuals,
                             vector_view<const index_t> expert_offsets, matrix_view<A> y) {
  using moecomp::detail::shape_string;
  MOECOMP_EXPECTS(x.cols() == base.cols(), fn, ": x must have ", base.cols(), " columns (the base's inputs), got ",
                  x.cols());
  MOECOMP_EXPECTS(y.rows() == x.rows() && y.cols() == base.rows(), fn, ": y must be ",
                  shape_string(x.rows(), base.rows()), ", got ", shape_string(y.rows(), y.cols()));
  const auto experts = static_cast<index_t>(residuals.size());
  MOECOMP_EXPECTS(expert_offsets.size() == experts + 1, fn, ": expert_offsets must have ", experts + 1,
                  " entries (one more than the residuals), got ", expert_offsets.size());
  for (index_t e = 0; e < experts; ++e) {
    const sparse_matrix_view& r = residuals[static_cast<std::size_t>(e)];
    MOECOMP_EXPECTS(r.rows() == base.rows() && r.cols() == base.cols(), fn, ": residuals[", e, "] must be ",
                    shape_string(base.rows(), base.cols()), " like the base, got ", shape_string(r.rows(), r.cols()));
  }
  MOECOMP_EXPECTS(expert_offsets[0] == 0, fn, ": expert_offsets[0] must be 0, got ", expert_offsets[0]);
  for (index_t e = 0; e < experts; ++e)
    MOECOMP_EXPECTS(expert_offsets[e + 1] >= expert_offsets[e], fn, ": expert_offsets must be non-decreasing, got ",
                    expert_offsets[e + 1], " after ", expert_offsets[e], " at ", e + 1);
  MOECOMP_EXPECTS(expert_offsets[experts] == x.rows(), fn, ": expert_offsets must end at the ", x.rows(),
                  " rows of x, got ", expert_offsets[experts]);
  moecomp::detail::check_no_overlap(fn, "y", y, "x", x);
}

}  // namespace detail

/// y = x (B + R_e)^T per expert's rows (see above). Throws invalid_argument for mismatched shapes, offsets that
/// are not E + 1 non-decreasing values from 0 to n, or y overlapping x.
template <class W>
void shared_base_apply(const host_context& ctx, matrix_view<const accumulator_t<W>> x,
                       moecomp::detail::type_identity_t<matrix_view<const W>> base,
                       const std::vector<sparse_matrix_view>& residuals, vector_view<const index_t> expert_offsets,
                       matrix_view<accumulator_t<W>> y) {
  using A = accumulator_t<W>;
  static_assert(moecomp::detail::is_weight_type_v<W>, "shared_base_apply: W must be float, double, bfloat16 or half");
  detail::check_shared_base_apply<W, A>("shared_base_apply", x, base, residuals, expert_offsets, y);
  std::vector<index_t> offsets(static_cast<std::size_t>(expert_offsets.size()));
  for (index_t e = 0; e < expert_offsets.size(); ++e) offsets[static_cast<std::size_t>(e)] = expert_offsets[e];
  detail::shared_base_apply_host<W, A>(ctx, x, base, residuals, offsets.data(), y);
}

}  // namespace sparse
MOECOMP_NAMESPACE_END
