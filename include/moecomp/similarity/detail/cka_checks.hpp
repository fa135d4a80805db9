#pragma once
// The argument checks of HSIC and CKA, for the host (<moecomp/similarity/cka.hpp>) and the device
// (<moecomp/cuda/similarity/cka.cuh>): parameters and shapes. Finiteness is checked by the callers that can
// read the values.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/similarity/cka_types.hpp>

#include <cmath>

MOECOMP_NAMESPACE_BEGIN
namespace similarity {
namespace detail {

inline void check_cka_params(const char* fn, const cka_params& params) {
  MOECOMP_EXPECTS(std::isfinite(params.sigma) && params.sigma >= 0, fn,
                  ": params.sigma must be finite and >= 0 (0: the median heuristic), got ", params.sigma);
  MOECOMP_EXPECTS(std::isfinite(params.threshold) && params.threshold > 0, fn,
                  ": params.threshold must be finite and > 0, got ", params.threshold);
  MOECOMP_EXPECTS(params.kernel == cka_kernel::linear || params.route != cka_route::feature, fn,
                  ": params.route must be automatic or gram with the rbf kernel (the feature route is linear only), "
                  "got feature");
}

/// n samples: at least 2 (biased), at least 4 (unbiased).
inline void check_cka_samples(const char* fn, const cka_params& params, index_t n) {
  if (params.unbiased)
    MOECOMP_EXPECTS(n >= 4, fn, ": the inputs must have at least 4 samples (rows) for the unbiased HSIC, got ", n);
  else
    MOECOMP_EXPECTS(n >= 2, fn, ": the inputs must have at least 2 samples (rows), got ", n);
}

inline void check_cka_pair_shapes(const char* fn, const cka_params& params, index_t x_rows, index_t x_cols,
                                  index_t y_rows, index_t y_cols) {
  MOECOMP_EXPECTS(x_rows == y_rows, fn, ": x and y must have the same number of samples (rows), got ", x_rows,
                  " and ", y_rows);
  MOECOMP_EXPECTS(x_cols >= 1 && y_cols >= 1, fn, ": x and y must have at least one feature (column), got ",
                  x_cols, " and ", y_cols);
  check_cka_samples(fn, params, x_rows);
}

inline void check_cka_matrix_shapes(const char* fn, const cka_params& params, index_t experts, index_t n, index_t d,
                                    index_t out_rows, index_t out_cols) {
  MOECOMP_EXPECTS(experts >= 1, fn, ": features must hold at least one expert, got 0");
  MOECOMP_EXPECTS(d >= 1, fn, ": features must have at least one feature (column), got ", d);
  check_cka_samples(fn, params, n);
  MOECOMP_EXPECTS(out_rows == experts && out_cols == experts, fn, ": out must be ",
                  moecomp::detail::shape_string(experts, experts), " (experts x experts), got ",
                  moecomp::detail::shape_string(out_rows, out_cols));
}

}  // namespace detail
}  // namespace similarity
MOECOMP_NAMESPACE_END
