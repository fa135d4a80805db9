#pragma once
// Linear assignment by the auction algorithm on the device: the device overloads of
// <moecomp/ot/auction_assignment.hpp>'s auction_assignment, taking a cuda_context and device views.
//
// Problem and parameters as on the host (<moecomp/ot/linear_assignment_types.hpp>): cost n x m, n <= m,
// minimise (or maximise) sum_i C(i, col(i)); the epsilon schedule and its automatic values are the host's
// (final epsilon 1 / (m + 1) for integer costs: exact; otherwise range / (1e6 m)), and the answer is
// within result.criterion = m * final epsilon of the optimum. Differences from the host solver:
//  * Jacobi (parallel) bidding: every unassigned row bids in every round, one warp per row; conflicts go to
//    the highest bid, then the lowest row. Deterministic, but the bid sequence, and so the assignment among
//    near-optimal ones, can differ from the host's (both are within the bound).
//  * Rectangular problems are padded with m - n dummy rows of benefit 0 (no storage).
//  * Costs must be finite: forbidden pairs (+-inf) need the host solver (invalid_argument here).
//  * max_bids is tested after every batch of rounds (up to 64 rounds), so a run may exceed it by those bids.
//
// Asynchrony: the call SYNCHRONISES ctx.stream (it reads the cost statistics and, every few rounds, the
// number of unassigned rows), and returns the result on the host; row_to_column (and column_price) are
// device memory, ready when the call returns.
//
// Workspace: about 40 m bytes plus 20 KiB (`auction_assignment_workspace_size<T>(params, n, m)`); without a workspace
// argument it comes from ctx's allocator.
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/ot/linear_assignment_types.hpp>
#include <moecomp/core/detail/traits.hpp>
#include <moecomp/cuda/ot/detail/auction_device.cuh>
#include <moecomp/cuda/ot/detail/ot_device_common.cuh>
#include <moecomp/cuda/ot/detail/auction_device.cuh>
#include <moecomp/core/detail/checks.hpp>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace ot {

/// Workspace bytes for auction_assignment on an n x m cost (element type T); the overloads with
/// column_price need the same.
template <class T>
std::size_t auction_assignment_workspace_size(const auction_params& params, index_t n, index_t m) {
  cuda_detail::check_device_element_type<T>();
  (void)params;  // the size depends on the shapes only; params is there for the one signature shape
  moecomp::detail::check_extents("auction_assignment_workspace_size", {{"n", n}, {"m", m}});
  if (n == 0) return 0;
  std::size_t bytes = 0;
  (void)cuda_detail::make_assignment_plan(m, true, bytes);
  return bytes;
}

/// row_to_column[i] = the column of row i (device, n elements); returns the result (on the host).
/// cost: n x m device view of const or mutable T. Synchronises ctx.stream.
template <class U, class T = std::remove_const_t<U>,
          std::enable_if_t<moecomp::detail::is_real_v<T>, int> = 0>
auction_result auction_assignment(const cuda_context& ctx, const auction_params& params,
                                  matrix_view<U, device_memory> cost, vector_view<index_t, device_memory> row_to_column,
                                  vector_view<std::byte, device_memory> workspace) {
  constexpr const char* function = "auction_assignment";
  cuda_detail::check_auction_params(function, params);
  cuda_detail::check_assignment_shapes(function, cost, row_to_column.size(), -1);
  MOECOMP_EXPECTS(!params.warm_start, function,
                  ": params.warm_start needs starting prices: use the overload with column_price");
  if (cost.rows() == 0) return auction_result{};
  cuda_detail::check_workspace(function, auction_assignment_workspace_size<T>(params, cost.rows(), cost.cols()), workspace);
  return cuda_detail::run_assignment<T>(ctx, params, cost, row_to_column, nullptr, workspace.data());
}

/// As above, with the workspace from ctx's allocator.
template <class U, class T = std::remove_const_t<U>,
          std::enable_if_t<moecomp::detail::is_real_v<T>, int> = 0>
auction_result auction_assignment(const cuda_context& ctx, const auction_params& params,
                                  matrix_view<U, device_memory> cost, vector_view<index_t, device_memory> row_to_column) {
  constexpr const char* function = "auction_assignment";
  cuda_detail::check_auction_params(function, params);
  cuda_detail::check_assignment_shapes(function, cost, row_to_column.size(), -1);
  MOECOMP_EXPECTS(!params.warm_start, function,
                  ": params.warm_start needs starting prices: use the overload with column_price");
  const cuda_detail::scoped_workspace workspace(ctx, auction_assignment_workspace_size<T>(params, cost.rows(), cost.cols()));
  return auction_assignment(ctx, params, cost, row_to_column, workspace.view());
}

/// With the column prices (device, m doubles, in benefit units: -cost when minimising): read as the
/// starting prices when params.warm_start (otherwise started from 0), and overwritten with the final prices.
template <class U, class T = std::remove_const_t<U>,
          std::enable_if_t<moecomp::detail::is_real_v<T>, int> = 0>
auction_result auction_assignment(const cuda_context& ctx, const auction_params& params,
                                  matrix_view<U, device_memory> cost, vector_view<index_t, device_memory> row_to_column,
                                  vector_view<double, device_memory> column_price,
                                  vector_view<std::byte, device_memory> workspace) {
  constexpr const char* function = "auction_assignment";
  cuda_detail::check_auction_params(function, params);
  cuda_detail::check_assignment_shapes(function, cost, row_to_column.size(), column_price.size());
  MOECOMP_EXPECTS(column_price.is_contiguous(), function, ": column_price must be contiguous (stride 1), got stride ",
                  column_price.stride());
  if (cost.rows() == 0) return auction_result{};
  cuda_detail::check_workspace(function, auction_assignment_workspace_size<T>(params, cost.rows(), cost.cols()), workspace);
  return cuda_detail::run_assignment<T>(ctx, params, cost, row_to_column, column_price.data(), workspace.data());
}

/// As above, with the workspace from ctx's allocator.
template <class U, class T = std::remove_const_t<U>,
          std::enable_if_t<moecomp::detail::is_real_v<T>, int> = 0>
auction_result auction_assignment(const cuda_context& ctx, const auction_params& params,
                                  matrix_view<U, device_memory> cost, vector_view<index_t, device_memory> row_to_column,
                                  vector_view<double, device_memory> column_price) {
  constexpr const char* function = "auction_assignment";
  cuda_detail::check_auction_params(function, params);
  cuda_detail::check_assignment_shapes(function, cost, row_to_column.size(), column_price.size());
  const cuda_detail::scoped_workspace workspace(ctx, auction_assignment_workspace_size<T>(params, cost.rows(), cost.cols()));
  return auction_assignment(ctx, params, cost, row_to_column, column_price, workspace.view());
}

}  // namespace ot
MOECOMP_NAMESPACE_END
