#pragma once
// The argument checks of magnitude pruning, shared by the host (sparse/prune.hpp) and the device
// (cuda/sparse/prune.cuh).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/sparse/prune_types.hpp>
#include <moecomp/core/detail/checks.hpp>


MOECOMP_NAMESPACE_BEGIN
namespace sparse {
namespace detail {

inline void check_prune_params(const char* fn, const prune_params& params, index_t rows, index_t cols) {
  if (params.scope == prune_scope::n_of_m) {
    MOECOMP_EXPECTS(params.m >= 1 && params.n >= 1 && params.n <= params.m, fn,
                    ": params.n and params.m must satisfy 1 <= n <= m, got ", params.n, " and ", params.m);
    MOECOMP_EXPECTS(cols % params.m == 0, fn, ": w's columns must be a multiple of params.m = ", params.m,
                    " for N:M pruning, got ", cols);
    return;
  }
  const bool sparsity = params.sparsity != -1, keep = params.keep != -1;
  MOECOMP_EXPECTS(sparsity != keep, fn, ": exactly one of params.sparsity and params.keep must be given, got ",
                  sparsity ? "both" : "neither");
  const double f = sparsity ? params.sparsity : params.keep;
  MOECOMP_EXPECTS(f >= 0 && f <= 1, fn, sparsity ? ": params.sparsity" : ": params.keep", " must be in [0, 1], got ", f);
  if (params.scope == prune_scope::column_block)
    MOECOMP_EXPECTS(params.column_block >= 1, fn, ": params.column_block must be >= 1 with the column_block scope, got ",
                    params.column_block);
  (void)rows;
}

/// out has w's shape and is w itself (in place) or does not overlap it; host or device views alike.
template <class WView, class OutView>
void check_prune_output(const char* fn, const WView& w, const OutView& out) {
  MOECOMP_EXPECTS(out.rows() == w.rows() && out.cols() == w.cols(), fn, ": out must be ",
                  moecomp::detail::shape_string(w.rows(), w.cols()), " like w, got ",
                  moecomp::detail::shape_string(out.rows(), out.cols()));
  MOECOMP_EXPECTS(!moecomp::detail::views_overlap(out, w) ||
                      (static_cast<const void*>(out.data()) == static_cast<const void*>(w.data()) &&
                       out.row_stride() == w.row_stride()),
                  fn, ": out must be w itself (in place) or not overlap it");
}

}  // namespace detail
}  // namespace sparse
MOECOMP_NAMESPACE_END
