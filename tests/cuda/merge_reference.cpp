#include "merge_reference.hpp"

#include <moecomp/merge/merge.hpp>
#include <moecomp/moe/ffn.hpp>

#include <algorithm>
#include <numeric>

namespace moecomp_test {

template <class W>
moecomp::merge::merge_report host_merge_experts(const moecomp::merge::merge_params& params,
                                                const moecomp::moe::ffn_expert_stack_view<W>& experts,
                                                moecomp::vector_view<const std::int64_t> groups,
                                                const moecomp::merge::merge_data<moecomp::accumulator_t<W>>& data,
                                                const moecomp::merge::merge_outputs<W>& out) {
  return moecomp::merge::merge_experts<W>(moecomp::host_context(1), params, experts, groups, data, out);
}

template <class W>
std::vector<moecomp::index_t> host_fix_dom_matches(const moecomp::merge::merge_params& params,
                                                   const moecomp::moe::ffn_expert_stack_view<W>& experts,
                                                   const std::vector<moecomp::index_t>& ordered, moecomp::index_t group,
                                                   moecomp::matrix_view<const moecomp::accumulator_t<W>> x) {
  using A = moecomp::accumulator_t<W>;
  using moecomp::index_t;
  namespace md = moecomp::merge::detail;
  const moecomp::host_context ctx(1);
  const index_t d_ff = experts.d_ff();
  const std::size_t n = ordered.size();
  std::vector<std::vector<index_t>> matches(n, std::vector<index_t>(static_cast<std::size_t>(d_ff)));
  for (auto& m : matches) std::iota(m.begin(), m.end(), index_t(0));
  // The steps of merge_experts_host's fix_dom case, without routes.
  const std::vector<index_t> tokens = md::cap_tokens(md::concatenated_tokens<A>(x.rows(), nullptr, ordered),
                                                     params.token_cap, params.seed, static_cast<std::uint64_t>(group));
  const auto tf = static_cast<index_t>(tokens.size());
  if (tf >= 2 && n > 1) {
    const md::gathered_rows<A> rows(ctx, x, tokens);
    std::vector<A> hidden(static_cast<std::size_t>(tf * d_ff)), zd(hidden.size()), zj(hidden.size());
    const moecomp::matrix_view<A> hv(hidden.data(), tf, d_ff, d_ff);
    std::vector<double> norm_d, norm_j;
    moecomp::moe::ffn_hidden<W>(ctx, params.forward, experts.expert(ordered[0]), rows.view(), hv);
    moecomp::detail::standardized_columns<A>(ctx, hv, moecomp::matrix_view<A>(zd.data(), d_ff, tf, tf), &norm_d);
    for (std::size_t i = 1; i < n; ++i) {
      moecomp::moe::ffn_hidden<W>(ctx, params.forward, experts.expert(ordered[i]), rows.view(), hv);
      moecomp::detail::standardized_columns<A>(ctx, hv, moecomp::matrix_view<A>(zj.data(), d_ff, tf, tf), &norm_j);
      md::fix_dom_match<A>(ctx, moecomp::matrix_view<const A>(zd.data(), d_ff, tf, tf), norm_d,
                           moecomp::matrix_view<const A>(zj.data(), d_ff, tf, tf), norm_j, tf,
                           params.correlation_epsilon, matches[i]);
    }
  }
  std::vector<index_t> flat;
  for (const auto& m : matches) flat.insert(flat.end(), m.begin(), m.end());
  return flat;
}

void host_group_routes(const moecomp::merge::merge_params& params, moecomp::matrix_view<const float> x,
                       moecomp::matrix_view<const float> router, const std::vector<moecomp::index_t>& members,
                       std::vector<moecomp::index_t>& tokens, std::vector<double>& weights) {
  namespace md = moecomp::merge::detail;
  const auto routes = md::route_tokens<float>(moecomp::host_context(1), x, router, params.routing_top_k);
  std::vector<moecomp::index_t> sorted(members);
  std::sort(sorted.begin(), sorted.end());
  tokens = md::group_tokens<float>(x.rows(), &routes, sorted);
  weights.clear();
  for (moecomp::index_t t : tokens)
    for (moecomp::index_t e : members) weights.push_back(static_cast<double>(routes.weight(t, e)));
}

#define MOECOMP_TEST_INSTANTIATE_MERGE(W)                                                                          \
  template moecomp::merge::merge_report host_merge_experts<W>(                                                     \
      const moecomp::merge::merge_params&, const moecomp::moe::ffn_expert_stack_view<W>&,                          \
      moecomp::vector_view<const std::int64_t>, const moecomp::merge::merge_data<moecomp::accumulator_t<W>>&,      \
      const moecomp::merge::merge_outputs<W>&);                                                                    \
  template std::vector<moecomp::index_t> host_fix_dom_matches<W>(                                                  \
      const moecomp::merge::merge_params&, const moecomp::moe::ffn_expert_stack_view<W>&,                          \
      const std::vector<moecomp::index_t>&, moecomp::index_t, moecomp::matrix_view<const moecomp::accumulator_t<W>>);
MOECOMP_TEST_INSTANTIATE_MERGE(float)
MOECOMP_TEST_INSTANTIATE_MERGE(moecomp::bfloat16)
#undef MOECOMP_TEST_INSTANTIATE_MERGE

}  // namespace moecomp_test
