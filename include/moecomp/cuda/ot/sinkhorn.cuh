#pragma once
// Entropic optimal transport on the device: the device overloads of <moecomp/ot/sinkhorn.hpp>'s
// sinkhorn_batched and sinkhorn, taking a cuda_context and device views.
//
// Method: the log-domain iteration of POT's sinkhorn_log for params.method == log, and also for plain
// (the same iterates in exact arithmetic, without plain's overflow; see docs/cuda.md). stabilized and
// epsilon_scaling are host-only: invalid_argument. One thread block solves one problem, so the batched call
// fills the GPU with many small problems; a single large problem runs on one SM (the device path is meant
// for batches).
//
// Asynchrony: with device `results` the call validates shapes and parameters on the host, enqueues a
// transpose and one solver kernel on ctx.stream and returns. With host `results` (and the single-problem
// sinkhorn, which returns its result) it then copies the results back and SYNCHRONISES ctx.stream.
// The values of a and b are not checked on the device (negative or unequal masses are the caller's
// responsibility; the host version checks them).
//
// Workspace: a transposed copy of the costs (batch n m elements of T), the potentials and a saved copy
// (2 batch (n + m) elements of T), and batch results. Without a workspace argument it comes from ctx's
// allocator for the call.
//
// Determinism: no atomics, fixed reduction orders: bit-identical from run to run on the same GPU and CUDA
// version. The device and host results agree within rounding.
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/device_buffer.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/ot/sinkhorn_types.hpp>
#include <moecomp/cuda/ot/detail/ot_device_common.cuh>
#include <moecomp/cuda/ot/detail/sinkhorn_device.cuh>
#include <moecomp/ot/detail/sinkhorn_checks.hpp>
#include <moecomp/cuda/ot/detail/sinkhorn_device.cuh>
#include <moecomp/core/detail/traits.hpp>
#include <moecomp/core/detail/checks.hpp>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace ot {

/// Workspace bytes for sinkhorn_batched on `batch` problems of n x m, element type T (0 when there is
/// nothing to compute).
template <class T>
std::size_t sinkhorn_batched_workspace_size(const sinkhorn_params& params, index_t batch, index_t n, index_t m) {
  cuda_detail::check_device_element_type<T>();
  (void)params;
  moecomp::detail::check_extents("sinkhorn_batched_workspace_size", {{"batch", batch}, {"n", n}, {"m", m}});
  return cuda_detail::make_sinkhorn_plan<T>("sinkhorn_batched", batch, n, m).bytes;
}

/// A batch of independent problems on the device (the batch rule, docs/index.md): problem p has weights
/// a(p, :) (n) and b(p, :) (m) and cost costs[p] (n x m), and gets its plan in plans[p] and its result in
/// results[p]; the batch size is a.rows(). On the device each stack must be stacked at its row stride
/// (matrix_stride = n * row_stride, as a C-contiguous batch x n x m array is). With `results` in device memory the call is asynchronous (see above); with `results` in host
/// memory it copies them back and SYNCHRONISES ctx.stream. a, b, costs: const or mutable views of T.
template <class T, class UA, class UB, class UC, class ResultSpace,
          std::enable_if_t<moecomp::detail::is_input_of_v<UA, T> && moecomp::detail::is_input_of_v<UB, T> &&
                               moecomp::detail::is_input_of_v<UC, T>,
                           int> = 0>
void sinkhorn_batched(const cuda_context& ctx, const sinkhorn_params& params, matrix_view<UA, device_memory> a,
                      matrix_view<UB, device_memory> b, matrix_stack_view<UC, device_memory> costs,
                      matrix_stack_view<T, device_memory> plans, vector_view<sinkhorn_result, ResultSpace> results,
                      vector_view<std::byte, device_memory> workspace) {
  constexpr bool results_on_host = std::is_same_v<ResultSpace, host_memory>;
  cuda_detail::check_device_element_type<T>();
  constexpr const char* function = "sinkhorn_batched";
  cuda_detail::check_sinkhorn_params(function, params);
  cuda_detail::check_batched_shapes(function, a, b, costs, plans, results.size());
  const auto plan = cuda_detail::make_sinkhorn_plan<T>(function, a.rows(), a.cols(), b.cols());
  if (plan.bytes == 0) return;
  cuda_detail::check_workspace(function, plan.bytes, workspace);
  const auto problem = cuda_detail::batched_problem<T>(a, b, costs, plans);
  const sinkhorn_result* device_results = cuda_detail::run_sinkhorn<T>(ctx, params, problem, plan, workspace.data());
  moecomp::detail::copy_rows_async<sinkhorn_result>(ctx, results.data(), results.stride(), device_results, 1, 1,
                                                    results.size(),
                                                    results_on_host ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice);
  if (results_on_host) MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
}

/// As above, with the workspace from ctx's allocator.
template <class T, class UA, class UB, class UC, class ResultSpace,
          std::enable_if_t<moecomp::detail::is_input_of_v<UA, T> && moecomp::detail::is_input_of_v<UB, T> &&
                               moecomp::detail::is_input_of_v<UC, T>,
                           int> = 0>
void sinkhorn_batched(const cuda_context& ctx, const sinkhorn_params& params, matrix_view<UA, device_memory> a,
                      matrix_view<UB, device_memory> b, matrix_stack_view<UC, device_memory> costs,
                      matrix_stack_view<T, device_memory> plans, vector_view<sinkhorn_result, ResultSpace> results) {
  cuda_detail::check_device_element_type<T>();
  cuda_detail::check_sinkhorn_params("sinkhorn_batched", params);
  cuda_detail::check_batched_shapes("sinkhorn_batched", a, b, costs, plans, results.size());
  const cuda_detail::scoped_workspace workspace(ctx,
                                                sinkhorn_batched_workspace_size<T>(params, a.rows(), a.cols(), b.cols()));
  sinkhorn_batched(ctx, params, a, b, costs, plans, results, workspace.view());
}

/// One problem: a (n), b (m), cost and plan (n x m), all device memory; returns the result, so it
/// SYNCHRONISES ctx.stream. It runs on one thread block: for one large problem prefer the host version or
/// batch several problems.
template <class T, class UA, class UB, class UC,
          std::enable_if_t<moecomp::detail::is_input_of_v<UA, T> && moecomp::detail::is_input_of_v<UB, T> &&
                               moecomp::detail::is_input_of_v<UC, T>,
                           int> = 0>
sinkhorn_result sinkhorn(const cuda_context& ctx, const sinkhorn_params& params, vector_view<UA, device_memory> a,
                         vector_view<UB, device_memory> b, matrix_view<UC, device_memory> cost,
                         matrix_view<T, device_memory> plan) {
  cuda_detail::check_device_element_type<T>();
  constexpr const char* function = "sinkhorn";
  cuda_detail::check_sinkhorn_params(function, params);
  const index_t n = a.size(), m = b.size();
  MOECOMP_EXPECTS(n > 0 && m > 0, function, ": a and b must be non-empty, got ", n, " and ", m, " elements");
  MOECOMP_EXPECTS(cost.rows() == n && cost.cols() == m, function, ": cost must be ", moecomp::detail::shape_string(n, m),
                  " (size of a x size of b), got ", moecomp::detail::shape_string(cost.rows(), cost.cols()));
  MOECOMP_EXPECTS(plan.rows() == n && plan.cols() == m, function, ": plan must be ", moecomp::detail::shape_string(n, m),
                  " like cost, got ", moecomp::detail::shape_string(plan.rows(), plan.cols()));
  const auto layout = cuda_detail::make_sinkhorn_plan<T>(function, 1, n, m);
  const cuda_detail::scoped_workspace workspace(ctx, layout.bytes);
  const cuda_detail::sinkhorn_problem<T> problem{a.data(),    0,   a.stride(), b.data(), 0, b.stride(), cost.data(),
                                                 cost.row_stride(), plan.data(), plan.row_stride(), 1, n, m};
  const sinkhorn_result* device_result =
      cuda_detail::run_sinkhorn<T>(ctx, params, problem, layout, workspace.view().data());
  sinkhorn_result result;
  MOECOMP_CUDA_TRY(
      cudaMemcpyAsync(&result, device_result, sizeof(sinkhorn_result), cudaMemcpyDeviceToHost, ctx.stream));
  MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
  return result;
}

}  // namespace ot
MOECOMP_NAMESPACE_END
