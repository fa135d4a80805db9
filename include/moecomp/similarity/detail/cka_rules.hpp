#pragma once
// The per-element rules of HSIC and CKA, shared by the host and the device (MOECOMP_HOST_DEVICE, so the host
// tests exercise what the device kernels run): the squared distance from a Gram, the RBF kernel value, the
// centring of one Gram entry (biased and unbiased), and the centring's mean correction.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>
#include <moecomp/core/views.hpp>

#include <cmath>

MOECOMP_NAMESPACE_BEGIN
namespace similarity {
namespace detail {

/// ||x_i - x_j||^2 = ||x_i||^2 + ||x_j||^2 - 2 x_i . x_j from the Gram entry, clamped at 0; exactly 0 on the
/// diagonal.
MOECOMP_HOST_DEVICE inline double squared_distance_from_gram(double norm_i, double norm_j, double gram_ij,
                                                             bool diagonal) noexcept {
  if (diagonal) return 0.0;
  const double v = norm_i + norm_j - 2.0 * gram_ij;
  return v > 0 ? v : 0.0;
}

/// The RBF kernel exp(-d2 / (2 sigma^2)) given factor = -1 / (2 sigma^2).
MOECOMP_HOST_DEVICE inline double rbf_value(double squared_distance, double factor) noexcept {
  return exp(factor * squared_distance);
}

/// Row means of the Gram before the correction: row sum over n (biased) or over n - 2 without the
/// diagonal (unbiased, Kornblith's center_gram).
MOECOMP_HOST_DEVICE inline double gram_row_mean(double row_sum, index_t n, bool unbiased) noexcept {
  return row_sum / static_cast<double>(unbiased ? n - 2 : n);
}

/// What every row mean loses: their total over 2n (biased: mean(m) / 2) or over 2 (n - 1) (unbiased).
MOECOMP_HOST_DEVICE inline double gram_mean_shift(double sum_of_means, index_t n, bool unbiased) noexcept {
  return sum_of_means / (2.0 * static_cast<double>(unbiased ? n - 1 : n));
}

/// One centred entry: K_ij - m_i - m_j with the corrected means; 0 on the diagonal when unbiased.
MOECOMP_HOST_DEVICE inline double centred_gram_entry(double value, double mean_i, double mean_j, bool diagonal,
                                                     bool unbiased) noexcept {
  return unbiased && diagonal ? 0.0 : value - mean_i - mean_j;
}

}  // namespace detail
}  // namespace similarity
MOECOMP_NAMESPACE_END
