#pragma once
// Free-support Wasserstein barycenter on the device, uniform path: the device overload of
// <moecomp/ot/free_support_barycenter.hpp>'s free_support_barycenter (k clouds of n points of mass 1/n,
// barycenter of n points), everything on the GPU: per iteration and cloud the cross term X_j B^T by one
// cuBLAS GEMM in T, an auction for the permutation (warm-started from that cloud's prices of the previous
// iteration), then the weighted mean of the aligned clouds by a gather kernel.
//
// The difference from the host: the host solves every assignment exactly; the device auction is
// epsilon-optimal (<moecomp/cuda/ot/auction_assignment.cuh>), so the returned permutations are within a
// proven bound of optimal for the returned barycenter, and the result carries that bound:
//   objective - sum_j w_j W_2^2(barycenter, cloud j) <= gap_bound = sum_j w_j 2 eps_j
// (eps_j: cloud j's final auction epsilon, automatic range_j / (1e6 n) with range_j the spread of its cross
// term, unless the auction parameters say otherwise). The stopping rules, iteration count, displacement and
// objective formula are the host's; the iterates can differ from the host's where the auction picks another
// near-optimal permutation.
//
// Asynchrony: SYNCHRONISES ctx.stream (the auctions and the stopping rules read scalars back); the
// barycenter and permutations (device views) are ready when it returns. Needs a cuBLAS handle in ctx for
// speed (without one a temporary handle is created for the call).
// Workspace: n^2 + 2 n d elements of T plus about (28 k + 60) n bytes (free_support_barycenter_workspace_size).
// Non-finite input coordinates are not checked on the device: they show up as a non-finite cross term, and
// the result's status is then numerical_error (objective NaN).
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/device_buffer.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/ot/free_support_barycenter_types.hpp>
#include <moecomp/ot/linear_assignment_types.hpp>
#include <moecomp/cuda/core/detail/cublas.cuh>
#include <moecomp/cuda/ot/detail/auction_device.cuh>
#include <moecomp/cuda/ot/detail/free_support_barycenter_device.cuh>
#include <moecomp/cuda/ot/detail/ot_device_common.cuh>
#include <moecomp/ot/detail/free_support_checks.hpp>
#include <moecomp/cuda/ot/detail/free_support_barycenter_device.cuh>
#include <moecomp/core/detail/traits.hpp>
#include <moecomp/core/detail/checks.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace ot {

/// Workspace bytes for the device free_support_barycenter of k clouds of n points in d dimensions.
template <class T>
std::size_t free_support_barycenter_workspace_size(const free_support_barycenter_params& params, index_t k, index_t n,
                                                   index_t d) {
  cuda_detail::check_device_element_type<T>();
  (void)params;  // the size depends on the shapes only; params is there for the one signature shape
  moecomp::detail::check_extents("free_support_barycenter_workspace_size", {{"k", k}, {"n", n}, {"d", d}});
  return cuda_detail::make_barycenter_plan<T>("free_support_barycenter", k, n, d).bytes;
}

/// Uniform path on the device. measures: a stack of k clouds of n x d, stacked at its row stride (cloud j
/// is rows [j n, (j + 1) n) of one (k n) x d matrix, as a C-contiguous k x n x d array is); weights: k host
/// doubles (>= 0, summing to 1 within 1e-6); init: n x d (may be the same memory as barycenter);
/// barycenter: n x d; permutations: k x n (row i of cloud j goes to barycenter row permutations(j, i)).
/// params.assignment tunes the auctions (maximize and warm_start are set by the barycenter itself).
/// measures and init: const or mutable device views of T.
template <class T, class UM, class UI,
          std::enable_if_t<moecomp::detail::is_input_of_v<UM, T> && moecomp::detail::is_input_of_v<UI, T>,
                           int> = 0>
free_support_barycenter_device_result free_support_barycenter(
    const cuda_context& ctx, const free_support_barycenter_params& params,
    matrix_stack_view<UM, device_memory> measures, vector_view<const double> weights,
    matrix_view<UI, device_memory> init, matrix_view<T, device_memory> barycenter,
    matrix_view<index_t, device_memory> permutations, vector_view<std::byte, device_memory> workspace) {
  cuda_detail::check_device_element_type<T>();
  constexpr const char* function = "free_support_barycenter";
  const index_t k = measures.count();
  cuda_detail::check_barycenter_arguments(function, params, measures, init, barycenter, permutations, weights.size());
  const std::vector<double> w = cuda_detail::checked_weights(function, weights);
  cuda_detail::check_auction_params(function, params.assignment);
  cuda_detail::check_workspace(function,
                               free_support_barycenter_workspace_size<T>(params, k, init.rows(), init.cols()), workspace);
  const matrix_view<const T, device_memory> stacked = measures.as_const().as_matrix();
  return cuda_detail::run_barycenter<T>(ctx, params, params.assignment, stacked, k, w, init, barycenter, permutations,
                                        workspace.data());
}

/// As above, with the workspace from ctx's allocator.
template <class T, class UM, class UI,
          std::enable_if_t<moecomp::detail::is_input_of_v<UM, T> && moecomp::detail::is_input_of_v<UI, T>,
                           int> = 0>
free_support_barycenter_device_result free_support_barycenter(
    const cuda_context& ctx, const free_support_barycenter_params& params,
    matrix_stack_view<UM, device_memory> measures, vector_view<const double> weights,
    matrix_view<UI, device_memory> init, matrix_view<T, device_memory> barycenter,
    matrix_view<index_t, device_memory> permutations) {
  cuda_detail::check_device_element_type<T>();
  constexpr const char* function = "free_support_barycenter";
  cuda_detail::check_barycenter_arguments(function, params, measures, init, barycenter, permutations, weights.size());
  (void)cuda_detail::checked_weights(function, weights);
  const cuda_detail::scoped_workspace workspace(
      ctx, free_support_barycenter_workspace_size<T>(params, measures.count(), init.rows(), init.cols()));
  return free_support_barycenter(ctx, params, measures, weights, init, barycenter, permutations, workspace.view());
}

/// Uniform weights w_j = 1/k.
template <class T, class UM, class UI,
          std::enable_if_t<moecomp::detail::is_input_of_v<UM, T> && moecomp::detail::is_input_of_v<UI, T>,
                           int> = 0>
free_support_barycenter_device_result free_support_barycenter(
    const cuda_context& ctx, const free_support_barycenter_params& params,
    matrix_stack_view<UM, device_memory> measures, matrix_view<UI, device_memory> init,
    matrix_view<T, device_memory> barycenter, matrix_view<index_t, device_memory> permutations) {
  const index_t k = measures.count();
  MOECOMP_EXPECTS(k >= 1, "free_support_barycenter: measures must hold at least one cloud, got 0");
  const std::vector<double> w(static_cast<std::size_t>(k), 1.0 / static_cast<double>(k));
  return free_support_barycenter(ctx, params, measures, vector_view<const double>(w.data(), k), init, barycenter,
                                 permutations);
}

}  // namespace ot
MOECOMP_NAMESPACE_END
