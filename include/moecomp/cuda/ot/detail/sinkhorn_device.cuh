#pragma once
// Device implementation of log-domain Sinkhorn (<moecomp/cuda/ot/sinkhorn.cuh>), batched: one thread block
// per problem runs the whole iteration, so a call is one transpose kernel plus one solver kernel and never
// waits for the host.
//
// With scaled potentials u = f / reg, v = g / reg and Mr = -C / reg, one iteration is POT's sinkhorn_log:
//   v_j = log b_j - logsumexp_i (u_i + Mr_ij)        (a column reduction)
//   u_i = log a_i - logsumexp_j (v_j + Mr_ij)        (a row reduction)
// and at iterations 0, check_every, 2 check_every, ... the error ||P^T 1 - b||_2 of the plan
// P_ij = exp(u_i + v_j + Mr_ij) is evaluated; the iteration stops when it is below the tolerance.
//
// Reductions: one warp per row (and per column, through a transposed copy of the costs in the workspace so
// that both reductions read memory contiguously). Each lane runs an online logsumexp over the entries
// lane, lane + 32, ... in order, then the 32 partial results are combined by a fixed shuffle tree. Sums over
// a problem (the error, the cost) go through block_sum. Nothing uses atomics and every order is fixed, so the
// results are bit-identical from run to run. Potentials and logsumexps are in double whatever T (as the
// host's); the costs are read in T and the plan is written in T.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/cuda/core/detail/block_reduce.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/cuda/core/kernel.cuh>
#include <moecomp/cuda/ot/detail/ot_device_common.cuh>
#include <moecomp/ot/sinkhorn_types.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <moecomp/core/error.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/device_buffer.cuh>
#include <moecomp/ot/detail/sinkhorn_checks.hpp>
#include <cmath>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace cuda_detail {

inline constexpr int sinkhorn_block = 256;
inline constexpr int sinkhorn_warps = sinkhorn_block / 32;

__device__ __forceinline__ double device_exp(double x) { return exp(x); }
__device__ __forceinline__ double device_log(double x) { return log(x); }
template <class T>
__device__ __forceinline__ T minus_infinity() {
  return -static_cast<T>(INFINITY);
}

/// Running logsumexp: the maximum so far and the sum of exp(x - max). A NaN input makes the sum NaN.
template <class T>
struct lse_state {
  T max;
  T sum;
};

template <class T>
__device__ __forceinline__ void lse_add(lse_state<T>& s, T x) {
  if (x > s.max) {
    s.sum = s.sum * device_exp(s.max - x) + T(1);  // exp(-inf) = 0 for the first finite entry
    s.max = x;
  } else if (x != minus_infinity<T>()) {
    s.sum += device_exp(x - s.max);
  }
}

template <class T>
__device__ __forceinline__ lse_state<T> lse_merge(lse_state<T> a, lse_state<T> b) {
  const T m = a.max > b.max ? a.max : b.max;
  if (m == minus_infinity<T>()) return {m, a.sum + b.sum};  // both empty (sums 0, or NaN kept)
  return {m, a.sum * device_exp(a.max - m) + b.sum * device_exp(b.max - m)};
}

/// logsumexp over the warp's lanes by a fixed tree, returned to every lane.
template <class T>
__device__ __forceinline__ T warp_lse(lse_state<T> s) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    lse_state<T> other;
    other.max = __shfl_down_sync(0xffffffffu, s.max, offset);
    other.sum = __shfl_down_sync(0xffffffffu, s.sum, offset);
    s = lse_merge(s, other);
  }
  const T m = __shfl_sync(0xffffffffu, s.max, 0);
  const T sum = __shfl_sync(0xffffffffu, s.sum, 0);
  return m == minus_infinity<T>() && sum == T(0) ? m : m + device_log(sum);
}

/// logsumexp_k (w_k - row_k * inv_reg) over a contiguous row of `count` entries, by one warp, in double.
template <class T>
__device__ __forceinline__ double warp_row_lse(const T* row, const double* w, index_t count, double inv_reg) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  lse_state<double> s{minus_infinity<double>(), 0.0};
  for (index_t k = lane; k < count; k += 32) lse_add(s, w[k] - static_cast<double>(row[k]) * inv_reg);
  return warp_lse(s);
}

template <class T>
struct sinkhorn_args {
  const T* a;  // problem p, entry i at a[p * a_ld + i * a_stride]
  index_t a_ld, a_stride;
  const T* b;
  index_t b_ld, b_stride;
  const T* cost;  // problem p, entry (i, j) at cost[(p * n + i) * cost_ld + j]
  index_t cost_ld;
  const T* cost_t;  // workspace: problem p, entry (j, i) at cost_t[(p * m + j) * n + i]
  T* plan;          // like cost, with plan_ld
  index_t plan_ld;
  double* u;  // workspace: batch * n, then batch * m for v, and the saved copies
  double* v;
  double* u_saved;
  double* v_saved;
  index_t batch, n, m;
  double inv_reg;
  index_t max_iterations, check_every;
  double tolerance;
  sinkhorn_result* results;  // device, batch entries
};

/// cost_t[(p m + j) n + i] = cost[(p n + i) cost_ld + j]: 32 x 32 tiles of the stacked (batch n) x m matrix.
template <class T>
MOECOMP_KERNEL void __launch_bounds__(256)
    transpose_costs_kernel(const T* cost, index_t cost_ld, index_t rows, index_t n, index_t m, T* cost_t) {
  __shared__ T tile[32][33];
  const index_t j0 = static_cast<index_t>(blockIdx.x) * 32;
  for (index_t r0 = static_cast<index_t>(blockIdx.y) * 32; r0 < rows; r0 += static_cast<index_t>(gridDim.y) * 32) {
    for (int k = static_cast<int>(threadIdx.y); k < 32; k += 8) {
      const index_t r = r0 + k, j = j0 + threadIdx.x;
      if (r < rows && j < m) tile[k][threadIdx.x] = cost[r * cost_ld + j];
    }
    __syncthreads();
    for (int k = static_cast<int>(threadIdx.y); k < 32; k += 8) {
      const index_t j = j0 + k, r = r0 + threadIdx.x;
      if (r < rows && j < m) {
        const index_t p = r / n, i = r - p * n;
        cost_t[(p * m + j) * n + i] = tile[threadIdx.x][k];
      }
    }
    __syncthreads();
  }
}

/// One block per problem (grid-stride over problems): the whole log-domain iteration, then the plan.
template <class T>
MOECOMP_KERNEL void __launch_bounds__(sinkhorn_block) sinkhorn_log_kernel(const sinkhorn_args<T> args) {
  __shared__ double scratch[moecomp::detail::block_sum_scratch<sinkhorn_block>];
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const index_t n = args.n, m = args.m;
  for (index_t p = blockIdx.x; p < args.batch; p += gridDim.x) {
    const T* a = args.a + p * args.a_ld;
    const T* b = args.b + p * args.b_ld;
    const T* cost = args.cost + p * n * args.cost_ld;
    const T* cost_t = args.cost_t + p * m * n;
    double* u = args.u + p * n;
    double* v = args.v + p * m;
    double* u_saved = args.u_saved + p * n;
    double* v_saved = args.v_saved + p * m;
    for (index_t i = threadIdx.x; i < n; i += sinkhorn_block) u[i] = 0.0;
    for (index_t j = threadIdx.x; j < m; j += sinkhorn_block) v[j] = 0.0;
    __syncthreads();

    sinkhorn_result result;
    result.status = moecomp::status::iteration_limit;
    double error = 0.0;
    bool have_error = false;
    index_t it = 0;
    for (; it < args.max_iterations; ++it) {
      for (index_t j = warp; j < m; j += sinkhorn_warps) {
        const double lse = warp_row_lse(cost_t + j * n, u, n, args.inv_reg);
        if (lane == 0) v[j] = log(static_cast<double>(b[j * args.b_stride])) - lse;
      }
      __syncthreads();
      for (index_t i = warp; i < n; i += sinkhorn_warps) {
        const double lse = warp_row_lse(cost + i * args.cost_ld, v, m, args.inv_reg);
        if (lane == 0) u[i] = log(static_cast<double>(a[i * args.a_stride])) - lse;
      }
      __syncthreads();
      if (it % args.check_every != 0) continue;
      // ||P^T 1 - b||_2: column j's mass is exp(v_j + logsumexp_i (u_i + Mr_ij))
      double partial = 0.0;
      for (index_t j = warp; j < m; j += sinkhorn_warps) {
        const double lse = warp_row_lse(cost_t + j * n, u, n, args.inv_reg);
        if (lane == 0) {
          const double diff = exp(v[j] + lse) - static_cast<double>(b[j * args.b_stride]);
          partial += diff * diff;
        }
      }
      const double squared = moecomp::detail::block_sum<sinkhorn_block>(partial, scratch);
      const double current = sqrt(squared);
      if (!isfinite(current)) {
        // overflow or NaN: go back to the last iterate whose error was finite (none: keep this one, flagged)
        result.status = moecomp::status::numerical_error;
        if (have_error) {
          for (index_t i = threadIdx.x; i < n; i += sinkhorn_block) u[i] = u_saved[i];
          for (index_t j = threadIdx.x; j < m; j += sinkhorn_block) v[j] = v_saved[j];
        } else {
          error = current;
        }
        __syncthreads();
        ++it;
        break;
      }
      error = current;
      have_error = true;
      if (current < args.tolerance) {
        result.status = moecomp::status::ok;
        ++it;
        break;
      }
      for (index_t i = threadIdx.x; i < n; i += sinkhorn_block) u_saved[i] = u[i];
      for (index_t j = threadIdx.x; j < m; j += sinkhorn_block) v_saved[j] = v[j];
      __syncthreads();  // the copies are read before the next v update writes v
    }

    // The plan and its cost, in a fixed per-thread order.
    double cost_sum = 0.0;
    T* plan = args.plan + p * n * args.plan_ld;
    for (index_t i = warp; i < n; i += sinkhorn_warps) {
      const double ui = u[i];
      const T* cost_row = cost + i * args.cost_ld;
      T* plan_row = plan + i * args.plan_ld;
      for (index_t j = lane; j < m; j += 32) {
        const double c = static_cast<double>(cost_row[j]);
        const T value = static_cast<T>(exp(ui + v[j] - c * args.inv_reg));
        plan_row[j] = value;
        cost_sum += static_cast<double>(value) * c;
      }
    }
    const double total_cost = moecomp::detail::block_sum<sinkhorn_block>(cost_sum, scratch);
    if (threadIdx.x == 0) {
      result.cost = total_cost;
      result.criterion = error;
      result.iterations = it;
      args.results[p] = result;
    }
    __syncthreads();  // u and v of this block are rewritten by its next problem
  }
}

/// Workspace plan: the transposed costs, the potentials and their saved copies, the device results.
struct sinkhorn_plan {
  std::size_t cost_t = 0, u = 0, v = 0, u_saved = 0, v_saved = 0, results = 0;
  std::size_t bytes = 0;
};

template <class T>
sinkhorn_plan make_sinkhorn_plan(const char* function, index_t batch, index_t n, index_t m) {
  sinkhorn_plan plan;
  if (batch == 0 || n == 0 || m == 0) return plan;
  MOECOMP_EXPECTS(n <= std::numeric_limits<index_t>::max() / m / batch, function, ": ", batch, " problems of ", n,
                  " x ", m, " overflow the index type");
  workspace_layout layout(function);
  plan.cost_t = layout.take(batch * n * m, sizeof(T));
  plan.u = layout.take(batch * n, sizeof(double));
  plan.v = layout.take(batch * m, sizeof(double));
  plan.u_saved = layout.take(batch * n, sizeof(double));
  plan.v_saved = layout.take(batch * m, sizeof(double));
  plan.results = layout.take(batch, sizeof(sinkhorn_result));
  plan.bytes = layout.total();
  return plan;
}

/// The inputs of one batched call, as raw pointers and strides (see sinkhorn_args).
template <class T>
struct sinkhorn_problem {
  const T* a;
  index_t a_ld, a_stride;
  const T* b;
  index_t b_ld, b_stride;
  const T* cost;
  index_t cost_ld;
  T* plan;
  index_t plan_ld;
  index_t batch, n, m;
};

/// Enqueues the transpose and the solver; the results land in the workspace (returned pointer).
template <class T>
sinkhorn_result* run_sinkhorn(const cuda_context& ctx, const sinkhorn_params& params, const sinkhorn_problem<T>& problem,
                              const sinkhorn_plan& plan, std::byte* workspace) {
  std::byte* base = aligned_base(workspace);
  sinkhorn_args<T> args{};
  args.a = problem.a;
  args.a_ld = problem.a_ld;
  args.a_stride = problem.a_stride;
  args.b = problem.b;
  args.b_ld = problem.b_ld;
  args.b_stride = problem.b_stride;
  args.cost = problem.cost;
  args.cost_ld = problem.cost_ld;
  args.plan = problem.plan;
  args.plan_ld = problem.plan_ld;
  args.batch = problem.batch;
  args.n = problem.n;
  args.m = problem.m;
  T* cost_t = at<T>(base, plan.cost_t);
  args.cost_t = cost_t;
  args.u = at<double>(base, plan.u);
  args.v = at<double>(base, plan.v);
  args.u_saved = at<double>(base, plan.u_saved);
  args.v_saved = at<double>(base, plan.v_saved);
  args.inv_reg = 1.0 / params.reg;
  args.max_iterations = params.max_iterations;
  args.check_every = resolved_check_every(params);  // 0 means POT's period: 10 for the log method
  args.tolerance = params.tolerance;
  args.results = at<sinkhorn_result>(base, plan.results);

  const index_t rows = problem.batch * problem.n;
  const dim3 grid(static_cast<unsigned>(ceil_div(problem.m, 32)),
                  static_cast<unsigned>(min_index(ceil_div(rows, 32), moecomp::detail::max_grid_y)));
  transpose_costs_kernel<T><<<grid, dim3(32, 8), 0, ctx.stream>>>(problem.cost, problem.cost_ld, rows, problem.n,
                                                                   problem.m, cost_t);
  MOECOMP_CUDA_CHECK_LAUNCH();
  const auto blocks = static_cast<unsigned>(min_index(problem.batch, moecomp::detail::max_grid_x));
  sinkhorn_log_kernel<T><<<blocks, sinkhorn_block, 0, ctx.stream>>>(args);
  MOECOMP_CUDA_CHECK_LAUNCH();
  return args.results;
}


/// The host's parameter checks (same messages), plus the methods the device runs.
inline void check_sinkhorn_params(const char* function, const sinkhorn_params& params) {
  MOECOMP_EXPECTS(params.method == sinkhorn_method::log || params.method == sinkhorn_method::plain, function,
                  ": params.method must be log or plain on the device (both run the log-domain iteration), got ",
                  to_string(params.method));
  ot::detail::check_sinkhorn_params(function, params);
}

/// The stacks must be one (batch n) x m matrix each (matrix_stride = n * row_stride): the device kernels
/// address problem p at rows [p n, (p + 1) n) of that matrix.
template <class S>
void check_stacked_rows(const char* function, const char* name, const S& stack) {
  MOECOMP_EXPECTS(stack.count() <= 1 || stack.matrix_stride() == stack.rows() * stack.row_stride(), function, ": ",
                  name, " must be stacked at its row stride on the device (matrix_stride = rows * row_stride = ",
                  stack.rows() * stack.row_stride(), "), got matrix_stride ", stack.matrix_stride());
}

template <class A, class B, class C, class P>
void check_batched_shapes(const char* function, const A& a, const B& b, const C& costs, const P& plans,
                          index_t results) {
  const index_t batch = a.rows(), n = a.cols(), m = b.cols();
  MOECOMP_EXPECTS(b.rows() == batch, function, ": b must have ", batch, " rows like a (one per problem), got ",
                  moecomp::detail::shape_string(b.rows(), b.cols()));
  MOECOMP_EXPECTS(costs.count() == batch && costs.rows() == n && costs.cols() == m, function,
                  ": costs must be a stack of ", batch, " matrices of ", moecomp::detail::shape_string(n, m),
                  " (batch x n x m), got ", costs.count(), " of ", moecomp::detail::shape_string(costs.rows(), costs.cols()));
  MOECOMP_EXPECTS(plans.count() == batch && plans.rows() == n && plans.cols() == m, function,
                  ": plans must be a stack of ", batch, " matrices of ", moecomp::detail::shape_string(n, m),
                  " like costs, got ", plans.count(), " of ", moecomp::detail::shape_string(plans.rows(), plans.cols()));
  MOECOMP_EXPECTS(results == batch, function, ": results must have ", batch, " elements (one per problem), got ",
                  results);
  MOECOMP_EXPECTS(batch == 0 || (n > 0 && m > 0), function, ": each problem needs n >= 1 and m >= 1, got a ",
                  moecomp::detail::shape_string(a.rows(), a.cols()), " and b ", moecomp::detail::shape_string(b.rows(), b.cols()));
  check_stacked_rows(function, "costs", costs);
  check_stacked_rows(function, "plans", plans);
}

template <class T>
sinkhorn_problem<T> batched_problem(matrix_view<const T, device_memory> a, matrix_view<const T, device_memory> b,
                                    matrix_stack_view<const T, device_memory> costs,
                                    matrix_stack_view<T, device_memory> plans) {
  return {a.data(),    a.row_stride(),     1, b.data(), b.row_stride(), 1, costs.data(), costs.row_stride(),
          plans.data(), plans.row_stride(), a.rows(), a.cols(),       b.cols()};
}

}  // namespace cuda_detail
}  // namespace ot
MOECOMP_NAMESPACE_END
