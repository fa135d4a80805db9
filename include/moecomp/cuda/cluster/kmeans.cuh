#pragma once
// k-means on the device: the device overloads of <moecomp/cluster/kmeans.hpp>'s kmeans, taking a
// cuda_context and device views. The same parameters, result and stopping rules as the host (Lloyd with
// scikit-learn's conventions; documentation: docs/kmeans.md, "Device").
//
// Method: per iteration and row tile one cuBLAS GEMM X C^T in T, then a warp per row takes the argmin of
// ||c_j||^2 - 2 x_i . c_j (cub::WarpReduce, ties to the lowest j: the shared rule of
// cluster/detail/kmeans_rules.hpp). The centre update lists each cluster's rows with cub::DeviceHistogram,
// cub::DeviceScan and a stable cub::DeviceRadixSort, and sums them in increasing row order in double, as
// the host does. With size bounds (balanced k-means) the costs are formed on the device and, by default
// (params.balanced_solver = network_simplex), the exact transportation problem is solved ON THE HOST by the
// network simplex: the n x k costs (doubles) cross to the host and the labels back, every iteration. With
// params.balanced_solver = device_auction and EQUAL sizes (size_min == size_max == n / k, the MoEfication
// split) the step stays on the device: the n x n cost of each centre's column replicated c = n / k times
// is gathered and solved by the device auction (<moecomp/cuda/ot/auction_assignment.cuh>, automatic
// epsilon schedule, cold start), column q maps to centre q / c, and the result reports the duality gap of
// the transportation dual built from the auction's prices (v_j = minus the mean price of centre j's
// copies, u_i = min_j (cost_ij - v_j)) in assignment_gap and the auction's proven bound n x (final
// epsilon), relative to max(1, cost), in assignment_bound: the step is within that bound of the optimum,
// not exact, so labels can differ from the host's where assignments are that close. Unequal bounds, and
// equal ones whose replicated cost would exceed 2 GiB of doubles (n > 16384), run the host network simplex
// instead (assignment_bound then 0). The device auction step's speed is unmeasured (docs/kmeans.md,
// "Device").
//
// Agreement with the host: the same draws (random rows: identical starts; k-means++: the potentials and
// running sums come from CUB reductions and scans, whose rounding differs from the host's sequential sums,
// so a draw that falls within rounding of a boundary can pick another row); the same arithmetic in the
// centre update; the GEMM (cuBLAS against OpenBLAS/Eigen) rounds differently, so labels can differ where
// two centres are within rounding of a tie. Re-seeded clusters are summed afresh rather than by moving one
// row's contribution (rounding-level differences, only when a cluster empties).
//
// Asynchrony: SYNCHRONISES ctx.stream, several times per iteration (the changed-label count, the cluster
// sizes and the shift are read back to apply the stopping rules on the host). Everything is on the device
// except the size-bounded transportation problem (unless solved by the device auction) and the k-means++
// choice among candidates.
// Workspace: about n (3 sizeof(T) + 40) + 3 k d sizeof(T) + min(n, 2^24 / k) k sizeof(T) bytes, plus 2 trials n
// doubles for k-means++, n k doubles with size bounds, and with the device auction step n^2 + 2 n doubles
// plus the auction's workspace (about 40 n bytes) (kmeans_workspace_size). Without a workspace
// argument it comes from ctx's allocator for the call. Needs a cuBLAS handle in ctx for speed (without one
// a temporary handle is created for the call).
// Checks: the parameters and shapes as on the host; the values of x and of the weights are NOT checked on
// the device (a NaN in x shows as a non-finite inertia and status numerical_error).
// Determinism: no floating-point atomics; CUB's reductions and scans, cuBLAS and the device auction (exact
// conflict resolution) are run-to-run deterministic on the same GPU and CUDA version, so the result is
// bit-identical from run to run there.
// Limits: n and d at most 2^31 - 1.
//
// Tests: tests/cuda/test_kmeans_cuda.cu. Which of its cases have run on a GPU: docs/cuda.md, "Status on hardware".
#include <moecomp/cluster/kmeans_types.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/device_buffer.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/cluster/detail/kmeans_checks.hpp>
#include <moecomp/cuda/cluster/detail/kmeans_device.cuh>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/traits.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {

/// Workspace bytes for the device kmeans on x of n x d, element type T.
template <class T>
std::size_t kmeans_workspace_size(const kmeans_params& params, index_t n, index_t d) {
  moecomp::detail::check_device_element_type<T>();
  moecomp::detail::check_extents("kmeans_workspace_size", {{"n", n}, {"d", d}});
  detail::check_kmeans_params("kmeans_workspace_size", params, n, d);
  return cuda_detail::make_kmeans_plan<T>("kmeans_workspace_size", params, n, d).bytes;
}

/// Lloyd's k-means with sample weights on the device (see above). x: n x d (const or mutable view of T,
/// any row stride); sample_weight: n entries or empty (unit weights); centers (k x d): the initial centres
/// on entry with params.init == given, the final centres on exit; labels (n) and sizes (k) as on the host.
/// Returns the result (so it synchronises). Throws invalid_argument for bad shapes or parameters.
template <class T, class UX, class UW,
          std::enable_if_t<moecomp::detail::is_input_of_v<UX, T> && moecomp::detail::is_input_of_v<UW, T>, int> = 0>
kmeans_result kmeans(const cuda_context& ctx, const kmeans_params& params, matrix_view<UX, device_memory> x,
                     vector_view<UW, device_memory> sample_weight, matrix_view<T, device_memory> centers,
                     vector_view<std::int64_t, device_memory> labels, vector_view<index_t, device_memory> sizes,
                     vector_view<std::byte, device_memory> workspace) {
  moecomp::detail::check_device_element_type<T>();
  constexpr const char* fn = "kmeans";
  const index_t n = x.rows(), d = x.cols();
  detail::check_kmeans_params(fn, params, n, d);
  detail::check_kmeans_shapes(fn, params, n, d, centers, labels, sizes, sample_weight.size());
  moecomp::detail::check_no_overlap(fn, "centers", centers, "x", x);
  const auto plan = cuda_detail::make_kmeans_plan<T>(fn, params, n, d);
  moecomp::detail::check_workspace(fn, plan.bytes, workspace);
  const cuda_detail::device_data<T> data{x.data(), x.row_stride(), sample_weight.empty() ? nullptr : sample_weight.data(),
                                         sample_weight.empty() ? 0 : sample_weight.stride(), n, d, params.clusters};
  cuda_detail::device_kmeans<T> fit(ctx, params, data, plan, workspace.data());
  return fit.fit(centers, labels, sizes);
}

/// As above, with the workspace from ctx's allocator.
template <class T, class UX, class UW,
          std::enable_if_t<moecomp::detail::is_input_of_v<UX, T> && moecomp::detail::is_input_of_v<UW, T>, int> = 0>
kmeans_result kmeans(const cuda_context& ctx, const kmeans_params& params, matrix_view<UX, device_memory> x,
                     vector_view<UW, device_memory> sample_weight, matrix_view<T, device_memory> centers,
                     vector_view<std::int64_t, device_memory> labels, vector_view<index_t, device_memory> sizes) {
  moecomp::detail::check_device_element_type<T>();
  detail::check_kmeans_params("kmeans", params, x.rows(), x.cols());
  detail::check_kmeans_shapes("kmeans", params, x.rows(), x.cols(), centers, labels, sizes, sample_weight.size());
  const moecomp::detail::scoped_workspace workspace(ctx, kmeans_workspace_size<T>(params, x.rows(), x.cols()));
  return kmeans(ctx, params, x, sample_weight, centers, labels, sizes, workspace.view());
}

/// Unit sample weights, the workspace from ctx's allocator.
template <class T, class UX, std::enable_if_t<moecomp::detail::is_input_of_v<UX, T>, int> = 0>
kmeans_result kmeans(const cuda_context& ctx, const kmeans_params& params, matrix_view<UX, device_memory> x,
                     matrix_view<T, device_memory> centers, vector_view<std::int64_t, device_memory> labels,
                     vector_view<index_t, device_memory> sizes) {
  return kmeans(ctx, params, x, vector_view<const T, device_memory>(), centers, labels, sizes);
}

}  // namespace cluster
MOECOMP_NAMESPACE_END
