#pragma once
// The argument checks of k-means, one set for the host (<moecomp/cluster/kmeans.hpp>) and the device
// (<moecomp/cuda/cluster/kmeans.cuh>): parameters and shapes. The checks of values (finite x, weights) are
// the callers', because only the host can read them without a copy.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/cluster/kmeans_types.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/core/detail/checks.hpp>

#include <cmath>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {
namespace detail {

/// The parameters against the shape of x (n x d).
inline void check_kmeans_params(const char* fn, const kmeans_params& params, index_t n, index_t d) {
  const index_t k = params.clusters;
  MOECOMP_EXPECTS(k >= 1, fn, ": params.clusters must be >= 1, got ", k);
  MOECOMP_EXPECTS(params.restarts >= 1, fn, ": params.restarts must be >= 1, got ", params.restarts);
  MOECOMP_EXPECTS(params.init != kmeans_init::given || params.restarts == 1, fn,
                  ": params.restarts must be 1 with init given (one start), got ", params.restarts);
  MOECOMP_EXPECTS(params.max_iterations >= 1, fn, ": params.max_iterations must be >= 1, got ", params.max_iterations);
  MOECOMP_EXPECTS(std::isfinite(params.tolerance) && params.tolerance >= 0, fn,
                  ": params.tolerance must be finite and >= 0, got ", params.tolerance);
  MOECOMP_EXPECTS(params.local_trials >= 0, fn, ": params.local_trials must be >= 0 (0: 2 + floor(ln k)), got ",
                  params.local_trials);
  MOECOMP_EXPECTS(d >= 1, fn, ": x must have at least one column, got ", moecomp::detail::shape_string(n, d));
  MOECOMP_EXPECTS(n >= k, fn, ": x must have at least params.clusters = ", k, " rows, got ", n);
  MOECOMP_EXPECTS(params.size_min >= 0 && params.size_max >= 0, fn,
                  ": params.size_min and params.size_max must be >= 0, got ", params.size_min, " and ", params.size_max);
  MOECOMP_EXPECTS(params.size_max == 0 || params.size_max >= params.size_min, fn,
                  ": params.size_max must be >= params.size_min (", params.size_min, "), got ", params.size_max);
  MOECOMP_EXPECTS(params.size_min <= n / k, fn, ": params.size_min x params.clusters must be <= the rows of x (", n,
                  "), got ", params.size_min, " x ", k);
  MOECOMP_EXPECTS(params.size_max == 0 || params.size_max >= (n + k - 1) / k, fn,
                  ": params.size_max x params.clusters must be >= the rows of x (", n, "), got ", params.size_max, " x ",
                  k);
}

/// The output shapes and the weights' length, for x of n x d.
template <class CentersView, class LabelsView, class SizesView>
void check_kmeans_shapes(const char* fn, const kmeans_params& params, index_t n, index_t d, const CentersView& centers,
                         const LabelsView& labels, const SizesView& sizes, index_t weight_count) {
  const index_t k = params.clusters;
  MOECOMP_EXPECTS(centers.rows() == k && centers.cols() == d, fn, ": centers must be ",
                  moecomp::detail::shape_string(k, d), " (params.clusters x the columns of x), got ",
                  moecomp::detail::shape_string(centers.rows(), centers.cols()));
  MOECOMP_EXPECTS(labels.size() == n, fn, ": labels must have ", n, " entries (the rows of x), got ", labels.size());
  MOECOMP_EXPECTS(sizes.size() == k, fn, ": sizes must have ", k, " entries (params.clusters), got ", sizes.size());
  MOECOMP_EXPECTS(weight_count == 0 || weight_count == n, fn,
                  ": sample_weight must be empty (unit weights) or have ", n, " entries, got ", weight_count);
}

}  // namespace detail
}  // namespace cluster
MOECOMP_NAMESPACE_END
