#pragma once
// Argument checks of the free-support barycenter, shared by the host and the device overloads (one message
// text for both). Plain host C++: device views are checked by shape and address only.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/ot/free_support_barycenter_types.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace detail {

inline void check_free_support_params(const char* function, const free_support_barycenter_params& params) {
  MOECOMP_EXPECTS(params.max_iterations >= 1, function, ": params.max_iterations must be >= 1, got ",
                  params.max_iterations);
  MOECOMP_EXPECTS(params.tolerance >= 0.0, function, ": params.tolerance must be >= 0, got ", params.tolerance);
}

/// A probability vector: finite, >= 0 (or > 0 when `positive`), summing to 1 within 1e-6.
template <class W>
void free_support_check_probabilities(const char* function, const char* name, vector_view<W> w, bool positive) {
  moecomp::detail::check_sums_to_one(function, name, moecomp::detail::check_masses(function, name, w, positive));
}

/// The uniform path's shapes: measures a stack of k >= 1 clouds of init's shape n x d (n >= 1), barycenter
/// n x d, permutations k x n, weights k, and the barycenter apart from the measures.
template <class M, class I, class B, class P>
void check_uniform_barycenter_shapes(const char* function, const M& measures, const I& init, const B& barycenter,
                                     const P& permutations, index_t weights) {
  using moecomp::detail::shape_string;
  const index_t k = measures.count();
  MOECOMP_EXPECTS(k >= 1, function, ": measures must hold at least one cloud, got 0");
  const index_t n = init.rows(), d = init.cols();
  MOECOMP_EXPECTS(n >= 1, function, ": init must have at least one row, got ", shape_string(n, d));
  MOECOMP_EXPECTS(measures.rows() == n && measures.cols() == d, function, ": measures must be clouds of init's shape ",
                  shape_string(n, d), ", got ", k, " of ", shape_string(measures.rows(), measures.cols()));
  MOECOMP_EXPECTS(barycenter.rows() == n && barycenter.cols() == d, function, ": barycenter must be ",
                  shape_string(n, d), " like init, got ", shape_string(barycenter.rows(), barycenter.cols()));
  MOECOMP_EXPECTS(permutations.rows() == k && permutations.cols() == n, function, ": permutations must be k x n = ",
                  shape_string(k, n), ", got ", shape_string(permutations.rows(), permutations.cols()));
  MOECOMP_EXPECTS(weights == k, function, ": weights must have k = ", k, " entries, got ", weights);
  moecomp::detail::check_no_overlap(function, "barycenter", barycenter, "measures", measures);
}

}  // namespace detail
}  // namespace ot
MOECOMP_NAMESPACE_END
