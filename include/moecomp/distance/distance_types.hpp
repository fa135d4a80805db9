#pragma once
// Parameters and helpers of the pairwise distances (<moecomp/distance/pairwise_distance.hpp>).
#include <moecomp/core/views.hpp>

#include <cmath>
#include <string>
#include <string_view>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace distance {

/// The metrics, with scipy.spatial.distance's names and definitions.
enum class metric {
  euclidean,    // ||x - y||_2
  sqeuclidean,  // ||x - y||_2^2
  cosine,       // 1 - x.y / (||x|| ||y||); NaN when either row is all zeros (as scipy)
  correlation   // cosine distance of the rows centred on their own means; NaN for a constant row (as scipy)
};

inline const char* to_string(metric m) noexcept {
  switch (m) {
    case metric::euclidean: return "euclidean";
    case metric::sqeuclidean: return "sqeuclidean";
    case metric::cosine: return "cosine";
    case metric::correlation: return "correlation";
  }
  return "unknown";
}

/// The metric's value from the squared Euclidean distance of the preprocessed rows (docs/distance.md,
/// "Algorithm"): its square root, itself, or half of it for cosine and correlation (unit-norm rows).
inline double distance_from_squared(metric m, double squared) noexcept {
  switch (m) {
    case metric::euclidean: return std::sqrt(squared);
    case metric::sqeuclidean: return squared;
    case metric::cosine:
    case metric::correlation: return 0.5 * squared;
  }
  return squared;
}

/// Parses a scipy metric name; throws invalid_argument naming the accepted values otherwise.
inline metric parse_metric(std::string_view name) {
  if (name == "euclidean") return metric::euclidean;
  if (name == "sqeuclidean") return metric::sqeuclidean;
  if (name == "cosine") return metric::cosine;
  if (name == "correlation") return metric::correlation;
  MOECOMP_FAIL(error_kind::invalid_argument, "metric: expected euclidean, sqeuclidean, cosine or correlation, got '",
               std::string(name), "'");
}

struct pairwise_distance_params {
  distance::metric metric = distance::metric::euclidean;
  /// Cancellation guard. The Gram (GEMM) form ||a||^2 + ||b||^2 - 2 a.b loses relative precision when
  /// two rows are close; every pair whose Gram-form squared distance is below
  /// `cancellation_threshold * (||a||^2 + ||b||^2)` is recomputed directly from the input rows, in double.
  /// Negative: the default for the element type (1/16 for float, 1/1024 for double). 0: never recompute
  /// (pure GEMM; negative squared distances are clamped to 0).
  double cancellation_threshold = -1.0;
};

/// The cancellation threshold used when params.cancellation_threshold < 0: 1/16 for float, 1/1024 for
/// double (shared by the host and device implementations).
template <class T>
constexpr double default_cancellation_threshold() noexcept {
  return std::is_same_v<T, float> ? 1.0 / 16 : 1.0 / 1024;
}

/// The threshold a call with `params` uses for element type T.
template <class T>
constexpr double effective_cancellation_threshold(const pairwise_distance_params& params) noexcept {
  return params.cancellation_threshold < 0 ? default_cancellation_threshold<T>() : params.cancellation_threshold;
}

/// Number of entries of the condensed distance vector of n points: n (n - 1) / 2.
constexpr index_t condensed_size(index_t n) noexcept { return n < 2 ? 0 : n * (n - 1) / 2; }

/// n such that the condensed vector of n points has `size` entries (n (n - 1) / 2 == size), or -1 when no n
/// does; size 0 gives n = 1 (scipy's squareform convention for an empty vector).
inline index_t points_of_condensed_size(index_t size) noexcept {
  if (size < 0) return -1;
  auto n = static_cast<index_t>(std::floor((1.0 + std::sqrt(1.0 + 8.0 * static_cast<double>(size))) / 2.0));
  for (index_t candidate = n > 2 ? n - 1 : 1; candidate <= n + 1; ++candidate)
    if (condensed_size(candidate) == size) return candidate;
  return -1;
}

/// Position of pair (i, j), i < j < n, in the condensed vector (scipy pdist order: row by row).
constexpr index_t condensed_index(index_t n, index_t i, index_t j) noexcept {
  return n * i - i * (i + 1) / 2 + (j - i - 1);
}

}  // namespace distance
MOECOMP_NAMESPACE_END
