#pragma once
// The layer-level bookkeeping of merge_experts, shared by the host (merge/detail/merge_host.hpp) and the device
// (cuda/merge/detail/merge_layer_device.cuh): host code on both paths, over the routes each path computes (the
// device copies its top-k ids and probabilities back). Each group's members, its dominant, its merge order, its
// token sets (HC-SMoE's concatenation for fix-dom, each token once for the others), the coefficients of the
// fixed-coefficient methods and the router rows are decided here, once, so the two paths cannot drift apart.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/merge/merge_types.hpp>
#include <moecomp/merge/detail/fix_dom_rules.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace merge {
namespace detail {

/// Each token's top-k experts (ids, T x k) and their softmax probabilities over all E logits (not renormalised).
template <class A>
struct token_routes {
  index_t tokens = 0, k = 0;
  std::vector<std::int64_t> ids;
  std::vector<A> weights;
  /// Expert e's probability for token t, 0 when e is not among t's top-k.
  A weight(index_t t, index_t e) const noexcept {
    for (index_t q = 0; q < k; ++q)
      if (ids[static_cast<std::size_t>(t * k + q)] == e) return weights[static_cast<std::size_t>(t * k + q)];
    return A(0);
  }
};

/// f_e = (times e is among a token's top-k) / (tokens x k): HC-SMoE's usage frequencies, summing to 1.
template <class A>
void count_frequencies(const token_routes<A>& r, index_t experts, vector_view<double> f) {
  std::vector<std::int64_t> count(static_cast<std::size_t>(experts), 0);
  for (std::int64_t id : r.ids)
    if (id >= 0 && id < experts) ++count[static_cast<std::size_t>(id)];
  const double total = static_cast<double>(r.tokens * r.k);
  for (index_t e = 0; e < experts; ++e) f[e] = total > 0 ? static_cast<double>(count[static_cast<std::size_t>(e)]) / total : 0.0;
}

/// Each group's members in ascending expert order.
template <class I>
std::vector<std::vector<index_t>> group_members(vector_view<const I> groups, index_t count) {
  std::vector<std::vector<index_t>> members(static_cast<std::size_t>(count));
  for (index_t e = 0; e < groups.size(); ++e) members[static_cast<std::size_t>(groups[e])].push_back(e);
  return members;
}

/// The member with the largest frequency (ties: the lowest index); the lowest index without frequencies.
inline index_t most_frequent(const std::vector<index_t>& members, const std::vector<double>& f) {
  index_t best = members.front();
  if (f.empty()) return best;
  for (index_t e : members)
    if (f[static_cast<std::size_t>(e)] > f[static_cast<std::size_t>(best)]) best = e;
  return best;
}

/// Tokens routed to at least one member (each once, ascending); every token without routes.
template <class A>
std::vector<index_t> group_tokens(index_t tokens, const token_routes<A>* routes, const std::vector<index_t>& members) {
  std::vector<index_t> out;
  for (index_t t = 0; t < tokens; ++t) {
    bool in = routes == nullptr;
    for (index_t q = 0; !in && q < routes->k; ++q)
      in = std::binary_search(members.begin(), members.end(), static_cast<index_t>(routes->ids[static_cast<std::size_t>(t * routes->k + q)]));
    if (in) out.push_back(t);
  }
  return out;
}

/// HC-SMoE's fix-dom token set: each member's routed tokens, concatenated in member order (a token routed to
/// two members appears twice); every token once without routes.
template <class A>
std::vector<index_t> concatenated_tokens(index_t tokens, const token_routes<A>* routes,
                                         const std::vector<index_t>& members) {
  if (routes == nullptr) return group_tokens<A>(tokens, nullptr, members);
  std::vector<index_t> out;
  for (index_t e : members)
    for (index_t t = 0; t < tokens; ++t)
      for (index_t q = 0; q < routes->k; ++q)
        if (routes->ids[static_cast<std::size_t>(t * routes->k + q)] == e) {
          out.push_back(t);
          break;
        }
  return out;
}

/// Each listed token's router probability of each member: rows x members.size(), columns in `members`' order
/// (the weights of a group's target output: the device's merge_learned and merge errors take them as data).
template <class A>
std::vector<double> member_weights(const token_routes<A>& routes, const std::vector<index_t>& tokens,
                                   const std::vector<index_t>& members) {
  std::vector<double> w;
  w.reserve(tokens.size() * members.size());
  for (index_t t : tokens)
    for (index_t e : members) w.push_back(static_cast<double>(routes.weight(t, e)));
  return w;
}

/// One group's plan, the same on both paths.
struct group_plan {
  index_t dominant = 0;
  std::vector<index_t> members;       // ascending
  std::vector<index_t> ordered;       // the merge order: the dominant first, then the others ascending
  std::vector<index_t> tokens;        // the group's tokens (each once), capped; empty without x
  std::vector<double> coefficients;   // in `ordered`'s order: 1/n, frequency's or dominant's; learned's start
};

/// Group g's plan: its dominant (dominants[g] when given, else the most frequent member), its merge order, its
/// capped tokens (x_rows tokens routed by `routes`, or all of them without routes; none when x_rows is 0) and
/// the coefficients the method fixes before any data is read (frequency: f_e / (sum f + epsilon); dominant:
/// 1 for the dominant; the others 1/n, learned's starting point).
template <class A>
group_plan plan_group(const merge_params& params, const std::vector<index_t>& members, index_t g,
                      const std::vector<double>& freq, vector_view<const std::int64_t> dominants, index_t x_rows,
                      const token_routes<A>* routes) {
  group_plan p;
  p.members = members;
  p.dominant = dominants.empty() ? most_frequent(members, freq) : static_cast<index_t>(dominants[g]);
  p.ordered.push_back(p.dominant);
  for (index_t e : members)
    if (e != p.dominant) p.ordered.push_back(e);
  if (x_rows > 0)
    p.tokens = cap_tokens(group_tokens<A>(x_rows, routes, members), params.token_cap, params.seed,
                          static_cast<std::uint64_t>(g));
  const std::size_t n = p.ordered.size();
  p.coefficients.assign(n, 1.0 / static_cast<double>(n));
  if (params.method == merge_method::frequency) {
    double total = 0;
    for (index_t e : members) total += freq[static_cast<std::size_t>(e)];
    const double denominator = total + params.frequency_epsilon;  // 0 only with epsilon 0: the zero expert
    for (std::size_t i = 0; i < n; ++i)
      p.coefficients[i] = denominator > 0 ? freq[static_cast<std::size_t>(p.ordered[i])] / denominator : 0.0;
  } else if (params.method == merge_method::dominant) {
    std::fill(p.coefficients.begin(), p.coefficients.end(), 0.0);
    p.coefficients[0] = 1.0;
  }
  return p;
}

/// The report before any group is merged: method, the router rule as applied, zero coefficients, g groups with
/// NaN errors and objectives.
inline merge_report start_report(const merge_params& params, bool has_router, index_t experts, index_t groups) {
  merge_report report;
  report.method = params.method;
  report.router = resolve_router_rule(params, has_router);
  report.coefficients.assign(static_cast<std::size_t>(experts), 0.0);
  report.groups.resize(static_cast<std::size_t>(groups));
  report.criterion = 0;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (merge_group_report& g : report.groups) g.error = g.objective_initial = g.objective_final = nan;
  return report;
}

/// Group g's router row under `rule` (merged_rows: sum_i c_i router[ordered[i]]; dominant_row: the dominant's
/// row) from the host router (E x d), summed in double in merge order and rounded once.
template <class A>
void router_row(router_rule rule, const group_plan& p, const std::vector<double>& c, matrix_view<const A> router, A* row) {
  for (index_t k = 0; k < router.cols(); ++k) {
    double v = 0;
    if (rule == router_rule::dominant_row) {
      v = static_cast<double>(router(p.dominant, k));
    } else {
      for (std::size_t i = 0; i < p.ordered.size(); ++i) v += c[i] * static_cast<double>(router(p.ordered[i], k));
    }
    row[k] = static_cast<A>(v);
  }
}

}  // namespace detail
}  // namespace merge
MOECOMP_NAMESPACE_END
