#pragma once
// The per-element rules of k-means, shared by the host and the device code (MOECOMP_HOST_DEVICE, so the
// host tests exercise what the device kernels run): the assignment score from the GEMM form, the squared
// distance from the GEMM form, the tie rule of the argmin, and the centre from its weighted sum.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>
#include <moecomp/core/views.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {
namespace detail {

/// What the assignment compares for row i and centre j: ||c_j||^2 - 2 x_i . c_j, the squared distance less
/// the row's constant ||x_i||^2 (scikit-learn compares the same). minus_two_dot is the GEMM's -2 x_i . c_j.
template <class T>
MOECOMP_HOST_DEVICE inline T assignment_score(T minus_two_dot, T center_norm) noexcept {
  return minus_two_dot + center_norm;
}

/// ||x_i - p||^2 from the GEMM form, ||x_i||^2 + ||p||^2 - 2 x_i . p, clamped at 0 (cancellation can make it
/// slightly negative), in double.
template <class T>
MOECOMP_HOST_DEVICE inline double gemm_form_distance(T minus_two_dot, T row_norm, T point_norm) noexcept {
  const T v = minus_two_dot + row_norm + point_norm;
  return v > T(0) ? static_cast<double>(v) : 0.0;
}

/// The argmin's rule: candidate (score, index) beats the best so far when its score is lower, or equal with
/// a lower index (ties to the lowest centre). Written for any order of comparison, so a tree reduction gives
/// the same winner as a loop over j in increasing order.
template <class T>
MOECOMP_HOST_DEVICE inline bool beats(T score, index_t index, T best_score, index_t best_index) noexcept {
  return score < best_score || (score == best_score && index < best_index);
}

/// A (score, index) pair and the reduction operator of the argmin under `beats`.
template <class T>
struct scored_index {
  T score;
  index_t index;
};
struct lowest_score_then_index {
  template <class T>
  MOECOMP_HOST_DEVICE scored_index<T> operator()(const scored_index<T>& a, const scored_index<T>& b) const noexcept {
    return beats(b.score, b.index, a.score, a.index) ? b : a;
  }
};

/// The new centre coordinate from the cluster's weighted sum and weight; a cluster of zero weight keeps its
/// sum (0), as scikit-learn does.
template <class T>
MOECOMP_HOST_DEVICE inline T centre_coordinate(double weighted_sum, double cluster_weight) noexcept {
  return static_cast<T>(weighted_sum * (cluster_weight > 0 ? 1.0 / cluster_weight : 0.0));
}

}  // namespace detail
}  // namespace cluster
MOECOMP_NAMESPACE_END
