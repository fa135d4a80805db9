#pragma once
// Host implementation of the split FFN's forward with a trained router (moe::dynamic_k_forward).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/gating/router_training.hpp>
#include <moecomp/gating/routing.hpp>
#include <moecomp/gating/sadmoe.hpp>
#include <moecomp/moe/ffn.hpp>
#include <moecomp/moe/ffn_types.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace moe {
namespace detail {

/// The tokens each expert runs on, in token order, from the fixed-K ids (the sentinel E marks unused slots).
inline std::vector<std::vector<index_t>> tokens_of_experts(matrix_view<const std::int64_t> ids, index_t experts) {
  std::vector<std::vector<index_t>> tokens(static_cast<std::size_t>(experts));
  for (index_t t = 0; t < ids.rows(); ++t)
    for (index_t q = 0; q < ids.cols(); ++q)
      if (ids(t, q) < experts) tokens[static_cast<std::size_t>(ids(t, q))].push_back(t);
  return tokens;
}

/// y = sum over each token's selected experts of the expert's output (weight 1), the experts in index order.
template <class W, class A>
void run_selected_experts(const host_context& ctx, const ffn_params& ffn, const ffn_expert_stack_view<W>& experts,
                          const std::vector<std::vector<index_t>>& tokens, matrix_view<const A> x, matrix_view<A> y) {
  const index_t H = x.cols();
  for (index_t t = 0; t < y.rows(); ++t)
    for (index_t k = 0; k < H; ++k) y(t, k) = A(0);
  for (index_t e = 0; e < experts.experts(); ++e) {
    const auto& mine = tokens[static_cast<std::size_t>(e)];
    if (mine.empty()) continue;
    const auto n = static_cast<index_t>(mine.size());
    std::vector<A> xe(static_cast<std::size_t>(n * H)), ye(xe.size());
    for (index_t i = 0; i < n; ++i)
      for (index_t k = 0; k < H; ++k) xe[static_cast<std::size_t>(i * H + k)] = x(mine[static_cast<std::size_t>(i)], k);
    ffn_forward<W>(ctx, ffn, experts.expert(e), matrix_view<const A>(xe.data(), n, H, H), matrix_view<A>(ye.data(), n, H, H));
    for (index_t i = 0; i < n; ++i)
      for (index_t k = 0; k < H; ++k) y(mine[static_cast<std::size_t>(i)], k) += ye[static_cast<std::size_t>(i * H + k)];
  }
}

}  // namespace detail
}  // namespace moe
MOECOMP_NAMESPACE_END
