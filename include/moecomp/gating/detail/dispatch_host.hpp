#pragma once
// The dispatch plan on the host, behind <moecomp/gating/dispatch.hpp>: a stable counting sort of the
// (token, slot) pairs by expert (O(T K + E)), the padding, the capacity, the gather and the combine.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/gating/dispatch_types.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/parallel.hpp>

#include <cstdint>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace gating {
namespace detail {

/// Builds the plan of a T x K id layout with E experts. Throws invalid_argument for ids outside [0, E] or bad
/// parameters.
inline dispatch_plan make_dispatch_plan_host(const dispatch_params& params, index_t experts,
                                        matrix_view<const std::int64_t> ids) {
  constexpr const char* fn = "make_dispatch_plan";
  MOECOMP_EXPECTS(experts >= 1, fn, ": experts must be >= 1, got ", experts);
  MOECOMP_EXPECTS(params.block_size >= 1, fn, ": params.block_size must be >= 1, got ", params.block_size);
  MOECOMP_EXPECTS(params.capacity >= 0, fn, ": params.capacity must be >= 0 (0: no limit), got ", params.capacity);
  const index_t t_count = ids.rows(), k = ids.cols(), pairs = t_count * k;
  for (index_t t = 0; t < t_count; ++t)
    for (index_t q = 0; q < k; ++q)
      MOECOMP_EXPECTS(ids(t, q) >= 0 && ids(t, q) <= experts, fn, ": ids must be expert ids in [0, ", experts,
                      "] (", experts, ": an unused slot), got ", ids(t, q), " at (", t, ", ", q, ")");
  dispatch_plan plan;
  const auto e_count = static_cast<std::size_t>(experts);
  plan.counts.assign(e_count, 0);
  plan.position.assign(static_cast<std::size_t>(pairs), -1);
  // Keep: each expert's first `capacity` pairs in flat order.
  std::vector<char> kept(static_cast<std::size_t>(pairs), 0);
  for (index_t p = 0; p < pairs; ++p) {
    const std::int64_t e = ids(p / k, p % k);
    if (e == experts) continue;
    if (params.capacity > 0 && plan.counts[static_cast<std::size_t>(e)] >= params.capacity) {
      ++plan.dropped;
      continue;
    }
    ++plan.counts[static_cast<std::size_t>(e)];
    kept[static_cast<std::size_t>(p)] = 1;
  }
  plan.offsets.assign(e_count + 1, 0);
  for (std::size_t e = 0; e < e_count; ++e) {
    const std::int64_t padded = (plan.counts[e] + params.block_size - 1) / params.block_size * params.block_size;
    plan.offsets[e + 1] = plan.offsets[e] + padded;
  }
  plan.num_tokens_post_pad = plan.offsets[e_count];
  plan.sorted_token_ids.assign(static_cast<std::size_t>(plan.num_tokens_post_pad), pairs);
  std::vector<std::int64_t> next(plan.offsets.begin(), plan.offsets.end() - 1);
  for (index_t p = 0; p < pairs; ++p) {
    if (!kept[static_cast<std::size_t>(p)]) continue;
    const auto e = static_cast<std::size_t>(ids(p / k, p % k));
    plan.position[static_cast<std::size_t>(p)] = next[e];
    plan.sorted_token_ids[static_cast<std::size_t>(next[e]++)] = p;
  }
  plan.expert_ids.reserve(static_cast<std::size_t>(plan.num_tokens_post_pad / params.block_size));
  for (std::size_t e = 0; e < e_count; ++e)
    for (std::int64_t b = plan.offsets[e]; b < plan.offsets[e + 1]; b += params.block_size)
      plan.expert_ids.push_back(static_cast<std::int64_t>(e));
  return plan;
}

/// permuted (num_tokens_post_pad x d): row i = hidden row of the token of sorted pair i, 0 for padding.
template <class T>
void dispatch_gather_host(const host_context& ctx, const dispatch_plan& plan, index_t k, matrix_view<const T> hidden,
                     matrix_view<T> permuted) {
  constexpr const char* fn = "dispatch_gather";
  MOECOMP_EXPECTS(permuted.rows() == plan.num_tokens_post_pad && permuted.cols() == hidden.cols(), fn,
                  ": permuted must be ", moecomp::detail::shape_string(plan.num_tokens_post_pad, hidden.cols()),
                  ", got ", moecomp::detail::shape_string(permuted.rows(), permuted.cols()));
  MOECOMP_EXPECTS(hidden.rows() * k == static_cast<index_t>(plan.position.size()), fn, ": hidden must have ",
                  static_cast<index_t>(plan.position.size()) / (k > 0 ? k : 1), " rows (the tokens), got ", hidden.rows());
  const std::int64_t sentinel = static_cast<std::int64_t>(plan.position.size());
  moecomp::detail::parallel_for(permuted.rows(), ctx.threads(), [&](index_t i, int) {
    const std::int64_t p = plan.sorted_token_ids[static_cast<std::size_t>(i)];
    T* out = permuted.row_ptr(i);
    if (p == sentinel) {
      for (index_t c = 0; c < hidden.cols(); ++c) out[c] = T(0);
      return;
    }
    const T* in = hidden.row_ptr(p / k);
    for (index_t c = 0; c < hidden.cols(); ++c) out[c] = in[c];
  });
}

/// out (T x d): row t = sum over t's kept slots k, in slot order, of weights(t, k) x expert_out row of (t, k).
template <class T>
void dispatch_combine_host(const host_context& ctx, const dispatch_plan& plan, matrix_view<const T> expert_out,
                      matrix_view<const T> weights, matrix_view<T> out) {
  constexpr const char* fn = "dispatch_combine";
  const index_t t_count = weights.rows(), k = weights.cols();
  MOECOMP_EXPECTS(t_count * k == static_cast<index_t>(plan.position.size()), fn, ": weights must be T x K with T K = ",
                  static_cast<index_t>(plan.position.size()), " (the plan's pairs), got ",
                  moecomp::detail::shape_string(t_count, k));
  MOECOMP_EXPECTS(expert_out.rows() == plan.num_tokens_post_pad, fn, ": expert_out must have ", plan.num_tokens_post_pad,
                  " rows (num_tokens_post_pad), got ", expert_out.rows());
  MOECOMP_EXPECTS(out.rows() == t_count && out.cols() == expert_out.cols(), fn, ": out must be ",
                  moecomp::detail::shape_string(t_count, expert_out.cols()), ", got ",
                  moecomp::detail::shape_string(out.rows(), out.cols()));
  moecomp::detail::parallel_for(t_count, ctx.threads(), [&](index_t t, int) {
    T* o = out.row_ptr(t);
    for (index_t c = 0; c < out.cols(); ++c) o[c] = T(0);
    for (index_t q = 0; q < k; ++q) {
      const std::int64_t pos = plan.position[static_cast<std::size_t>(t * k + q)];
      if (pos < 0) continue;
      const T w = weights(t, q);
      const T* row = expert_out.row_ptr(pos);
      for (index_t c = 0; c < out.cols(); ++c) o[c] += w * row[c];
    }
  });
}

}  // namespace detail
}  // namespace gating
MOECOMP_NAMESPACE_END
