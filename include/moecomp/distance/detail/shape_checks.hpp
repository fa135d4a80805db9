#pragma once
// The argument checks of the pairwise distances, shared by the host (<moecomp/distance/pairwise_distance.hpp>)
// and device (<moecomp/cuda/distance/pairwise_distance.cuh>) functions, so both report the same messages.
// Plain C++17, no Eigen.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/distance/distance_types.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace distance {
namespace detail {

/// x (n x d) against y (m x d) into out (n x m).
template <class X, class Y, class O>
void check_cross_shapes(const X& x, const Y& y, const O& out) {
  MOECOMP_EXPECTS(y.cols() == x.cols(), "pairwise_distances: y must have as many columns as x (", x.cols(),
                  "), got y of shape ", moecomp::detail::shape_string(y.rows(), y.cols()));
  MOECOMP_EXPECTS(out.rows() == x.rows() && out.cols() == y.rows(), "pairwise_distances: out must be ",
                  moecomp::detail::shape_string(x.rows(), y.rows()), " (rows of x by rows of y), got ",
                  moecomp::detail::shape_string(out.rows(), out.cols()));
}

/// x (n x d) against itself into out (n x n).
template <class X, class O>
void check_square_shape(const X& x, const O& out) {
  MOECOMP_EXPECTS(out.rows() == x.rows() && out.cols() == x.rows(), "pairwise_distances: out must be ",
                  moecomp::detail::shape_string(x.rows(), x.rows()), " for x of shape ",
                  moecomp::detail::shape_string(x.rows(), x.cols()), ", got ",
                  moecomp::detail::shape_string(out.rows(), out.cols()));
}

/// x (n x d) into the condensed vector out (n (n - 1) / 2).
template <class X, class O>
void check_condensed_size(const X& x, const O& out) {
  const index_t n = x.rows();
  MOECOMP_EXPECTS(out.size() == condensed_size(n), "pairwise_distances_condensed: out must have n (n - 1) / 2 = ",
                  condensed_size(n), " elements for x of shape ", moecomp::detail::shape_string(n, x.cols()),
                  ", got ", out.size());
}

}  // namespace detail
}  // namespace distance
MOECOMP_NAMESPACE_END
