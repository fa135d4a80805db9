#pragma once
// Parameters and helpers of hierarchical clustering (<moecomp/cluster/linkage.hpp>, fcluster.hpp).
//
// The linkage matrix Z is scipy's: (n - 1) x 4 doubles; row i merges clusters Z(i, 0) < Z(i, 1) into the
// new cluster n + i at height Z(i, 2); Z(i, 3) is the new cluster's size. Original points are 0 .. n-1.
#include <moecomp/core/views.hpp>
#include <moecomp/distance/distance_types.hpp>

#include <string>
#include <string_view>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {

/// The seven linkages of scipy.cluster.hierarchy.linkage.
enum class linkage_method { single, complete, average, weighted, ward, centroid, median };

inline const char* to_string(linkage_method m) noexcept {
  switch (m) {
    case linkage_method::single: return "single";
    case linkage_method::complete: return "complete";
    case linkage_method::average: return "average";
    case linkage_method::weighted: return "weighted";
    case linkage_method::ward: return "ward";
    case linkage_method::centroid: return "centroid";
    case linkage_method::median: return "median";
  }
  return "unknown";
}

/// Parses a scipy method name; throws invalid_argument naming the accepted values otherwise.
inline linkage_method parse_linkage_method(std::string_view name) {
  const linkage_method all[] = {linkage_method::single,   linkage_method::complete, linkage_method::average,
                                linkage_method::weighted, linkage_method::ward,     linkage_method::centroid,
                                linkage_method::median};
  for (linkage_method m : all)
    if (name == to_string(m)) return m;
  MOECOMP_FAIL(error_kind::invalid_argument,
               "method: expected single, complete, average, weighted, ward, centroid or median, got '",
               std::string(name), "'");
}

/// Reducible linkages (single, complete, average, weighted, ward) have monotone merge heights; centroid
/// and median do not.
constexpr bool is_monotone(linkage_method m) noexcept {
  return m != linkage_method::centroid && m != linkage_method::median;
}

/// Ward, centroid and median are defined for Euclidean distances only (as in scipy).
constexpr bool requires_euclidean(linkage_method m) noexcept {
  return m == linkage_method::ward || m == linkage_method::centroid || m == linkage_method::median;
}

struct linkage_params {
  linkage_method method = linkage_method::single;
  /// Metric for point input (ignored for distance input). Ward, centroid and median need euclidean.
  distance::metric metric = distance::metric::euclidean;
};

/// How fcluster cuts the tree: scipy's fcluster criteria 'maxclust' and 'distance'.
enum class fcluster_criterion { maxclust, distance };

inline const char* to_string(fcluster_criterion c) noexcept {
  switch (c) {
    case fcluster_criterion::maxclust: return "maxclust";
    case fcluster_criterion::distance: return "distance";
  }
  return "unknown";
}

/// Parses a scipy criterion name; throws invalid_argument naming the accepted values otherwise.
inline fcluster_criterion parse_fcluster_criterion(std::string_view name) {
  for (fcluster_criterion c : {fcluster_criterion::maxclust, fcluster_criterion::distance})
    if (name == to_string(c)) return c;
  MOECOMP_FAIL(error_kind::invalid_argument, "criterion: expected maxclust or distance, got '", std::string(name),
               "'");
}

struct fcluster_params {
  fcluster_criterion criterion = fcluster_criterion::maxclust;
  /// maxclust: cut into exactly min(max_clusters, n) clusters; >= 1.
  index_t max_clusters = 1;
  /// distance: perform every merge whose monotone height is <= height; not NaN (+-inf allowed).
  double height = 0.0;
};

}  // namespace cluster
MOECOMP_NAMESPACE_END
