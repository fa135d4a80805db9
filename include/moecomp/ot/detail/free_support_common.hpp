#pragma once
// Pieces shared by the two free-support barycenter paths: the GEMM that builds the cross term of the
// squared Euclidean cost, argument checks, and deterministic reductions.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>

#include <moecomp/core/detail/checks.hpp>
#include <moecomp/ot/detail/free_support_checks.hpp>
#include <moecomp/core/detail/gemm.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace detail {

using moecomp::detail::concat;
using moecomp::detail::host_workspace;
using moecomp::detail::shape_string;

/// Rows of the cost built by one GEMM call. The row tiling is fixed (it does not depend on the thread
/// count), so every cost entry is computed the same way whichever thread computes it.
inline constexpr index_t free_support_cost_rows = 256;

}  // namespace detail
}  // namespace ot
MOECOMP_NAMESPACE_END
