#pragma once
// Magnitude pruning with torch's semantics on the host (ResMoE prunes each expert's residual design matrix
// with torch.nn.utils.prune.l1_unstructured(amount=0.75)). Documentation: docs/sparse.md.
//
//   w (rows x cols, float, double, bfloat16 or half), out (same shape; may be w itself: in place);
//   params.scope: the whole matrix, each row, each block of columns, or N:M (2:4);
//   params.sparsity (torch's amount: round(amount x size) pruned, Python's rounding, half to even) or
//   params.keep (size - round((1 - keep) x size) kept).
//
// out keeps the kept entries and holds 0 elsewhere. Kept: the largest |w|; ties at the threshold go to the
// lowest flat index (row-major within the group). torch breaks such ties by its topk order, which is not
// specified: on data without ties at the threshold the masks are equal (tested against torch).
// Method: an exact O(size) selection by radix select on the magnitudes' bits (16-bit digits, per-thread
// histograms), never a sort; N:M sorts each run of m. Bit-identical at any thread count. Non-finite values
// are refused (their order is not a magnitude order).
#include <moecomp/core/context.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/sparse/prune_types.hpp>
#include <moecomp/sparse/detail/prune_checks.hpp>
#include <moecomp/sparse/detail/prune_host.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/traits.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace sparse {

/// Prunes w into out (see above); returns the counts and the threshold. Throws invalid_argument for bad
/// parameters, shapes, partial overlap of out and w, or non-finite values.
template <class T>
prune_result prune_magnitude(const host_context& ctx, const prune_params& params,
                             moecomp::detail::type_identity_t<matrix_view<const T>> w, matrix_view<T> out) {
  constexpr const char* fn = "prune_magnitude";
  detail::check_prune_params(fn, params, w.rows(), w.cols());
  detail::check_prune_output(fn, w, out);
  moecomp::detail::check_finite(fn, "w", w, ctx.threads());
  return detail::prune_host<T>(ctx, params, w, out);
}

/// In place.
template <class T>
prune_result prune_magnitude(const host_context& ctx, const prune_params& params, matrix_view<T> w) {
  return prune_magnitude<T>(ctx, params, matrix_view<const T>(w), w);
}

}  // namespace sparse
MOECOMP_NAMESPACE_END
