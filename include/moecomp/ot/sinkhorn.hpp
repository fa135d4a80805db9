#pragma once
// Entropic optimal transport (Sinkhorn) on the host: POT 0.8.2's ot.sinkhorn with the methods
// sinkhorn_knopp (plain), sinkhorn_log (log), sinkhorn_stabilized and sinkhorn_epsilon_scaling.
// The batched log-domain method on CUDA is in <moecomp/cuda/ot/sinkhorn.cuh>. Documentation: docs/sinkhorn.md.
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/ot/sinkhorn_types.hpp>
#include <moecomp/ot/detail/sinkhorn_checks.hpp>
#include <moecomp/ot/detail/sinkhorn_host.hpp>
#include <moecomp/ot/detail/sinkhorn_host.hpp>

#include <memory>
#include <type_traits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace ot {

/// Entropic OT plan between histograms a (n) and b (m) for cost (n x m): plan (n x m) = diag(u) K diag(v)
/// with K = exp(-cost / reg), fitted by params.method. a, b, cost may be const or mutable views of T
/// (float or double); plan must not overlap cost. A cost entry of +inf forbids its pair (plan entry 0, as in
/// POT). Throws invalid_argument on misuse (shapes, negative or non-finite masses, unequal total masses, NaN
/// or -inf costs, a row or column forbidden everywhere, bad params); numerical outcomes are in the result's
/// status.
template <class T, class A, class B, class C,
          std::enable_if_t<detail::is_input_of_v<A, T> && detail::is_input_of_v<B, T> && detail::is_input_of_v<C, T>,
                           int> = 0>
sinkhorn_result sinkhorn(const host_context& ctx, const sinkhorn_params& params, vector_view<A> a, vector_view<B> b,
                         matrix_view<C> cost, matrix_view<T> plan) {
  return detail::sinkhorn_host<T>(ctx, params, a, b, cost, plan, nullptr, nullptr);
}

/// As above, and the log-domain potentials f (n), g (m): plan_ij = exp((f_i + g_j - cost_ij) / reg)
/// (-inf where a mass is zero). For epsilon_scaling the identity holds with the last outer step's
/// regularisation, which differs from reg by (epsilon_start - reg) exp(-epsilon_decay k).
template <class T, class A, class B, class C,
          std::enable_if_t<detail::is_input_of_v<A, T> && detail::is_input_of_v<B, T> && detail::is_input_of_v<C, T>,
                           int> = 0>
sinkhorn_result sinkhorn(const host_context& ctx, const sinkhorn_params& params, vector_view<A> a, vector_view<B> b,
                         matrix_view<C> cost, matrix_view<T> plan, vector_view<T> f, vector_view<T> g) {
  return detail::sinkhorn_host<T>(ctx, params, a, b, cost, plan, &f, &g);
}

/// A batch of independent problems of one shape (the batch rule, docs/index.md): a (batch x n) and b
/// (batch x m) hold one problem per row, costs and plans are stacks of batch n x m matrices, results has
/// batch entries; the batch size is a.rows() and every other argument must agree. Problems run in
/// parallel, each on one thread, so every result is bit-identical to sinkhorn() on that problem alone, for
/// any thread count.
template <class T, class A, class B, class C,
          std::enable_if_t<detail::is_input_of_v<A, T> && detail::is_input_of_v<B, T> && detail::is_input_of_v<C, T>,
                           int> = 0>
void sinkhorn_batched(const host_context& ctx, const sinkhorn_params& params, matrix_view<A> a, matrix_view<B> b,
                      matrix_stack_view<C> costs, matrix_stack_view<T> plans,
                      vector_view<sinkhorn_result, host_memory> results) {
  detail::check_sinkhorn_element_type<T>();
  detail::check_sinkhorn_params("sinkhorn_batched", params);
  const index_t batch = a.rows(), n = a.cols(), m = b.cols();
  MOECOMP_EXPECTS(b.rows() == batch, "sinkhorn_batched: b must have ", batch, " rows (one per problem, like a), got ",
                  b.rows());
  MOECOMP_EXPECTS(costs.count() == batch && costs.rows() == n && costs.cols() == m,
                  "sinkhorn_batched: costs must be a stack of ", batch, " matrices of ",
                  moecomp::detail::shape_string(n, m), " (batch x n x m), got ", costs.count(), " of ",
                  moecomp::detail::shape_string(costs.rows(), costs.cols()));
  MOECOMP_EXPECTS(plans.count() == batch && plans.rows() == n && plans.cols() == m,
                  "sinkhorn_batched: plans must be a stack of ", batch, " matrices of ",
                  moecomp::detail::shape_string(n, m), " like costs, got ", plans.count(), " of ",
                  moecomp::detail::shape_string(plans.rows(), plans.cols()));
  MOECOMP_EXPECTS(results.size() == batch, "sinkhorn_batched: results must have size ", batch, " (one per problem), got ",
                  results.size());
  if (batch == 0) return;
  const matrix_view<const T> ac = a, bc = b;
  const matrix_stack_view<const T> cc = costs;
  moecomp::detail::host_workspace<char> forbidden_pairs(ctx, static_cast<std::size_t>(batch));
  for (index_t k = 0; k < batch; ++k)
    forbidden_pairs[static_cast<std::size_t>(k)] = detail::check_sinkhorn_problem<T>(
        "sinkhorn_batched", ac.row(k), bc.row(k), cc[k], plans[k]);
  const int threads = static_cast<int>(std::min<index_t>(ctx.threads(), batch));
  std::vector<std::unique_ptr<detail::sinkhorn_workspace>> workspaces;
  for (int t = 0; t < threads; ++t) workspaces.push_back(std::make_unique<detail::sinkhorn_workspace>(ctx, n, m, 1));
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(dynamic, 1)
#endif
  for (index_t k = 0; k < batch; ++k) {
    int t = 0;
#if defined(_OPENMP)
    t = omp_get_thread_num();
#endif
    detail::sinkhorn_workspace& ws = *workspaces[static_cast<std::size_t>(t)];
    detail::load_histograms(ac.row(k), bc.row(k), ws);
    results(k) = detail::solve_one(ctx, 1, params, cc[k], plans[k], ws, false);
    if (forbidden_pairs[static_cast<std::size_t>(k)])
      results(k).cost = detail::cost_over_allowed_pairs(matrix_view<const T>(plans[k]), cc[k]);
  }
}

}  // namespace ot
MOECOMP_NAMESPACE_END
