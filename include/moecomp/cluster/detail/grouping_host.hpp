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
