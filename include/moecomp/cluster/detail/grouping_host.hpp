#pragma once
// Helpers of the grouping functions behind <moecomp/cluster/grouping.hpp>.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/cluster/detail/fcluster_host.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {
namespace detail {

/// Checks that labels form a grouping and returns k; counts[g] gets the size of group g when given (the
/// caller allocates n entries, enough for any valid k).
inline index_t check_grouping(const host_context& ctx, vector_view<const std::int64_t> labels, const char* function,
                              index_t* counts = nullptr) {
  const index_t n = labels.size();
  std::int64_t max_label = -1;
  for (index_t p = 0; p < n; ++p) {
    const std::int64_t g = labels[p];
    // A label >= n cannot be valid: n items cannot fill more than n groups.
    MOECOMP_EXPECTS(g >= 0 && g < n, function, ": labels[", p, "] = ", g, " is outside [0, n) = [0, ", n,
                    "); labels must number the groups 0 .. k-1");
    max_label = std::max(max_label, g);
  }
  const index_t k = max_label + 1;
  host_workspace<index_t> local(ctx, counts ? 0 : static_cast<std::size_t>(k));
  index_t* size = counts ? counts : local.data();
  for (index_t g = 0; g < k; ++g) size[g] = 0;
  for (index_t p = 0; p < n; ++p) ++size[labels[p]];
  for (index_t g = 0; g < k; ++g)
    MOECOMP_EXPECTS(size[g] > 0, function, ": group ", g, " has no member, but labels use groups up to ", k - 1,
                    "; every group 0 .. k-1 must be used (relabel_by_first_appearance renumbers any labels)");
  return k;
}

/// group_representatives_from_distances after its checks: for each item the sum of squared distances to its
/// group's members (in item order), the least per group kept, ties to the lower index.
inline void representatives_from_condensed(const host_context& ctx, vector_view<const double> condensed,
                                           vector_view<const std::int64_t> labels, vector_view<index_t> representatives) {
  const index_t n = labels.size(), k = representatives.size();
  auto distance = [&](index_t a, index_t b) {
    if (a == b) return 0.0;
    const index_t i = a < b ? a : b, j = a < b ? b : a;
    return condensed[n * i - i * (i + 1) / 2 + (j - i - 1)];  // scipy's condensed index of (i, j), i < j
  };
  host_workspace<double> best(ctx, static_cast<std::size_t>(k));
  for (index_t g = 0; g < k; ++g) representatives[g] = -1;
  for (index_t i = 0; i < n; ++i) {
    const std::int64_t g = labels[i];
    double sum = 0;
    for (index_t j = 0; j < n; ++j)
      if (labels[j] == g) sum += distance(i, j) * distance(i, j);
    if (representatives[g] < 0 || sum < best[static_cast<std::size_t>(g)]) {
      representatives[g] = i;
      best[static_cast<std::size_t>(g)] = sum;
    }
  }
}

template <class T>
double feature_as_double(T value) noexcept {
  if constexpr (std::is_arithmetic_v<T>)
    return static_cast<double>(value);
  else
    return static_cast<double>(static_cast<float>(value));  // bfloat16, half
}

}  // namespace detail
}  // namespace cluster
MOECOMP_NAMESPACE_END
