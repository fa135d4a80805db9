#pragma once
// Pairwise distances between the rows of device matrices: the device overloads of
// <moecomp/distance/pairwise_distance.hpp>, with the same names, argument order, metrics (scipy's
// euclidean, sqeuclidean, cosine, correlation), conventions (NaN for a zero row under cosine and a
// constant row under correlation; an exact zero diagonal and exact symmetry for x against itself; scipy's
// condensed order) and cancellation guard, taking a cuda_context and device views.
//
// Asynchrony: each function validates its arguments on the host, enqueues its work on ctx.stream and
// returns; the result is ready once that stream has reached this point (synchronise it, or order later
// work after it). Inputs must stay unchanged and alive until then. The one exception is a context
// without a cuBLAS handle: the temporary handle's destruction synchronises the device before returning.
//
// Workspace: preprocessed copies of the rows, their norms, and for the condensed form a Gram panel of
// at most 2^25 elements. The overloads without a workspace argument take it from ctx's allocator for the
// call; the overloads with one use the caller's (`*_workspace_size` says how many bytes, any alignment),
// so with a cuBLAS handle in the context the call allocates nothing.
//
// Determinism: no atomics; the reductions have a fixed order and the GEMM shapes depend only on the
// input shapes, so the results are bit-identical from run to run on the same GPU model with the same CUDA
// and cuBLAS versions and handle settings (cuBLAS guarantees this for its GEMMs). They agree with the
// host results within rounding, not bit for bit.
//
// Documentation: docs/cuda.md and docs/distance.md.
#include <moecomp/core/views.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/distance/distance_types.hpp>
#include <moecomp/cuda/distance/detail/pairwise_distance_device.cuh>
#include <moecomp/distance/detail/shape_checks.hpp>
#include <moecomp/core/detail/traits.hpp>
#include <moecomp/core/detail/checks.hpp>

#include <cstddef>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace distance {

/// Workspace bytes for pairwise_distances with x of x_rows x cols and y of y_rows x cols, element type T:
/// the cross form pairwise_distances(ctx, params, x, y, out[, workspace]), and, when x_rows == y_rows, also
/// the square form pairwise_distances(ctx, params, x, out[, workspace]) of x against itself (pass
/// y_rows = x_rows; the size covers both forms).
template <class T>
std::size_t pairwise_distances_workspace_size(const pairwise_distance_params& params, index_t x_rows, index_t y_rows,
                                              index_t cols) {
  cuda_detail::check_device_element_type<T>();
  moecomp::detail::check_extents("pairwise_distances_workspace_size", {{"x_rows", x_rows}, {"y_rows", y_rows}, {"cols", cols}});
  const std::size_t cross =
      cuda_detail::make_plan<T>(cuda_detail::output_form::cross, params.metric, x_rows, y_rows, cols).bytes;
  if (x_rows != y_rows) return cross;
  const std::size_t square =
      cuda_detail::make_plan<T>(cuda_detail::output_form::square, params.metric, x_rows, x_rows, cols).bytes;
  return cross > square ? cross : square;
}

/// Workspace bytes for pairwise_distances_condensed(ctx, params, x, out[, workspace]) with x of
/// rows x cols, element type T.
template <class T>
std::size_t pairwise_distances_condensed_workspace_size(const pairwise_distance_params& params, index_t rows,
                                                        index_t cols) {
  cuda_detail::check_device_element_type<T>();
  moecomp::detail::check_extents("pairwise_distances_condensed_workspace_size", {{"rows", rows}, {"cols", cols}});
  return cuda_detail::make_plan<T>(cuda_detail::output_form::condensed, params.metric, rows, rows, cols).bytes;
}

/// out(i, j) = dist(x_i, y_j). x: n x d, y: m x d, out: n x m, all device memory; `x` and `y` may be const
/// or mutable views of T (float or double); out must not overlap them or the workspace.
template <class T, class U, class V,
          std::enable_if_t<moecomp::detail::is_input_of_v<U, T> && moecomp::detail::is_input_of_v<V, T>,
                           int> = 0>
void pairwise_distances(const cuda_context& ctx, const pairwise_distance_params& params,
                        matrix_view<U, device_memory> x, matrix_view<V, device_memory> y,
                        matrix_view<T, device_memory> out, vector_view<std::byte, device_memory> workspace) {
  cuda_detail::check_device_element_type<T>();
  distance::detail::check_cross_shapes(x, y, out);
  const auto plan =
      cuda_detail::make_plan<T>(cuda_detail::output_form::cross, params.metric, x.rows(), y.rows(), x.cols());
  if (plan.empty) return;
  cuda_detail::check_blas_limits("pairwise_distances", x.rows(), y.rows(), x.cols(), plan.prepared_ld,
                                 out.row_stride());
  moecomp::detail::check_workspace("pairwise_distances", plan.bytes, workspace);
  cuda_detail::run<T>(ctx, params, plan, x, y, out.data(), out.row_stride(), workspace.data());
}

/// As above, with the workspace from ctx's allocator.
template <class T, class U, class V,
          std::enable_if_t<moecomp::detail::is_input_of_v<U, T> && moecomp::detail::is_input_of_v<V, T>,
                           int> = 0>
void pairwise_distances(const cuda_context& ctx, const pairwise_distance_params& params,
                        matrix_view<U, device_memory> x, matrix_view<V, device_memory> y,
                        matrix_view<T, device_memory> out) {
  cuda_detail::check_device_element_type<T>();
  // Validate before allocating: the same checks and messages as the workspace overload.
  distance::detail::check_cross_shapes(x, y, out);
  const std::size_t bytes = pairwise_distances_workspace_size<T>(params, x.rows(), y.rows(), x.cols());
  const cuda_detail::scoped_workspace workspace(ctx, bytes);
  pairwise_distances(ctx, params, x, y, out,
                     bytes == 0 ? vector_view<std::byte, device_memory>()
                                : vector_view<std::byte, device_memory>(workspace.data(), static_cast<index_t>(bytes)));
}

/// out(i, j) = dist(x_i, x_j): the n x n square form, exactly symmetric with an exact zero diagonal.
template <class T, class U, std::enable_if_t<moecomp::detail::is_input_of_v<U, T>, int> = 0>
void pairwise_distances(const cuda_context& ctx, const pairwise_distance_params& params,
                        matrix_view<U, device_memory> x, matrix_view<T, device_memory> out,
                        vector_view<std::byte, device_memory> workspace) {
  cuda_detail::check_device_element_type<T>();
  distance::detail::check_square_shape(x, out);
  const auto plan =
      cuda_detail::make_plan<T>(cuda_detail::output_form::square, params.metric, x.rows(), x.rows(), x.cols());
  if (plan.empty) return;
  cuda_detail::check_blas_limits("pairwise_distances", x.rows(), x.rows(), x.cols(), plan.prepared_ld,
                                 out.row_stride());
  moecomp::detail::check_workspace("pairwise_distances", plan.bytes, workspace);
  const matrix_view<const T, device_memory> xc = x;
  cuda_detail::run<T>(ctx, params, plan, xc, xc, out.data(), out.row_stride(), workspace.data());
}

/// As above, with the workspace from ctx's allocator.
template <class T, class U, std::enable_if_t<moecomp::detail::is_input_of_v<U, T>, int> = 0>
void pairwise_distances(const cuda_context& ctx, const pairwise_distance_params& params,
                        matrix_view<U, device_memory> x, matrix_view<T, device_memory> out) {
  cuda_detail::check_device_element_type<T>();
  distance::detail::check_square_shape(x, out);
  const std::size_t bytes = pairwise_distances_workspace_size<T>(params, x.rows(), x.rows(), x.cols());
  const cuda_detail::scoped_workspace workspace(ctx, bytes);
  pairwise_distances(ctx, params, x, out,
                     bytes == 0 ? vector_view<std::byte, device_memory>()
                                : vector_view<std::byte, device_memory>(workspace.data(), static_cast<index_t>(bytes)));
}

/// The condensed form (scipy pdist): out[condensed_index(n, i, j)] = dist(x_i, x_j) for i < j, length
/// n (n - 1) / 2; `out` may be strided.
template <class T, class U, std::enable_if_t<moecomp::detail::is_input_of_v<U, T>, int> = 0>
void pairwise_distances_condensed(const cuda_context& ctx, const pairwise_distance_params& params,
                                  matrix_view<U, device_memory> x, vector_view<T, device_memory> out,
                                  vector_view<std::byte, device_memory> workspace) {
  cuda_detail::check_device_element_type<T>();
  const index_t n = x.rows();
  distance::detail::check_condensed_size(x, out);
  const auto plan = cuda_detail::make_plan<T>(cuda_detail::output_form::condensed, params.metric, n, n, x.cols());
  if (plan.empty) return;
  cuda_detail::check_blas_limits("pairwise_distances_condensed", n, n, x.cols(), plan.prepared_ld, plan.gram_ld);
  moecomp::detail::check_workspace("pairwise_distances_condensed", plan.bytes, workspace);
  const matrix_view<const T, device_memory> xc = x;
  cuda_detail::run<T>(ctx, params, plan, xc, xc, out.data(), out.stride(), workspace.data());
}

/// As above, with the workspace from ctx's allocator.
template <class T, class U, std::enable_if_t<moecomp::detail::is_input_of_v<U, T>, int> = 0>
void pairwise_distances_condensed(const cuda_context& ctx, const pairwise_distance_params& params,
                                  matrix_view<U, device_memory> x, vector_view<T, device_memory> out) {
  cuda_detail::check_device_element_type<T>();
  const index_t n = x.rows();
  distance::detail::check_condensed_size(x, out);
  const std::size_t bytes = pairwise_distances_condensed_workspace_size<T>(params, n, x.cols());
  const cuda_detail::scoped_workspace workspace(ctx, bytes);
  pairwise_distances_condensed(
      ctx, params, x, out,
      bytes == 0 ? vector_view<std::byte, device_memory>()
                 : vector_view<std::byte, device_memory>(workspace.data(), static_cast<index_t>(bytes)));
}

}  // namespace distance
MOECOMP_NAMESPACE_END
