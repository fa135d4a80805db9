#pragma once
// The host-side checks and bookkeeping of <moecomp/cuda/merge/merge.cuh>'s device merges (merge_weighted,
// merge_fix_dom, merge_learned, merge_experts): every argument is checked here, before any CUDA call, with the
// messages of the host's merge where the two share an argument (the layer's checks are the host's own,
// merge/detail/merge_checks.hpp, plus the device's limits).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/merge/merge_types.hpp>
#include <moecomp/cuda/moe/expert_types.cuh>
#include <moecomp/cuda/merge/merge_types.cuh>
#include <moecomp/merge/detail/merge_checks.hpp>
#include <moecomp/merge/detail/merge_layer_rules.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/expert_gather.hpp>
#include <moecomp/core/detail/ffn_checks.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace merge {
namespace cuda_detail {

/// The merged expert `out` of every device merge: the stack's shape, contiguous biases (the kernels' layout).
template <class W>
void check_merge_output(const char* fn, const moe::ffn_expert_stack_device_view<W>& experts,
                        const moe::ffn_expert_device_mutable_view<W>& out) {
  const index_t d_ff = experts.d_ff(), d = experts.d_model();
  MOECOMP_EXPECTS(out.d_ff() == d_ff && out.d_model() == d && out.gated() == experts.gated() && out.w2.rows() == d &&
                      out.w2.cols() == d_ff && out.b1.size() == experts.b1.cols() && out.b3.size() == experts.b3.cols() &&
                      out.b2.size() == experts.b2.cols(),
                  fn, ": out must have the experts' shape (d_ff ", d_ff, ", d ", d, experts.gated() ? ", gated" : "",
                  ", the same biases), got d_ff ", out.d_ff(), ", d ", out.d_model());
  MOECOMP_EXPECTS((out.b1.empty() || out.b1.stride() == 1) && (out.b3.empty() || out.b3.stride() == 1) &&
                      (out.b2.empty() || out.b2.stride() == 1),
                  fn, ": out's biases must be contiguous (stride 1) on the device");
}

/// The group's members, the dominant first, then the others in ascending id order.
inline std::vector<index_t> dominant_first(vector_view<const index_t> members, index_t dominant) {
  std::vector<index_t> rest;
  for (index_t i = 0; i < members.size(); ++i)
    if (members[i] != dominant) rest.push_back(members[i]);
  std::sort(rest.begin(), rest.end());
  std::vector<index_t> ordered{dominant};
  ordered.insert(ordered.end(), rest.begin(), rest.end());
  return ordered;
}

/// The report of one group merged on the device: coefficients c in `ordered`'s order, `tokens` kept tokens.
inline merge_report one_group_report(merge_method method, const merge_params& params, index_t experts, const std::vector<index_t>& ordered,
                                     const std::vector<double>& c, index_t tokens) {
  merge_report report;
  report.method = method;
  report.router = resolve_router_rule(params, false);
  report.criterion = 0;
  report.coefficients.assign(static_cast<std::size_t>(experts), 0.0);
  for (std::size_t i = 0; i < ordered.size(); ++i) report.coefficients[static_cast<std::size_t>(ordered[i])] = c[i];
  merge_group_report g;
  g.dominant = ordered.front();
  g.tokens = tokens;
  g.error = g.objective_initial = g.objective_final = std::numeric_limits<double>::quiet_NaN();
  g.iterations = 0;
  report.groups.push_back(g);
  return report;
}

/// Every check of merge_fix_dom and merge_learned, on the host before any CUDA call.
template <class W, class A = accumulator_t<W>>
void check_fix_dom_arguments(const char* fn, const merge_params& params, const moe::ffn_expert_stack_device_view<W>& experts,
                             vector_view<const index_t> members, index_t dominant, index_t group,
                             matrix_view<const A, device_memory> x, vector_view<const index_t> tokens,
                             const moe::ffn_expert_device_mutable_view<W>& out,
                             matrix_view<index_t, device_memory> matches) {
  const index_t n = members.size(), e_count = experts.experts(), d_ff = experts.d_ff(), d = experts.d_model();
  moecomp::detail::check_ffn_params(fn, params.forward);
  moecomp::detail::check_ffn_shapes(fn, d_ff, d, experts.w3.rows(), experts.w3.cols(), experts.w2.rows(),
                                    experts.w2.cols(), experts.b1.cols(), experts.b3.cols(), experts.b2.cols(),
                                    experts.gated());
  MOECOMP_EXPECTS(params.token_cap >= 0, fn, ": params.token_cap must be >= 0, got ", params.token_cap);
  MOECOMP_EXPECTS(params.correlation_epsilon >= 0 && std::isfinite(params.correlation_epsilon), fn,
                  ": params.correlation_epsilon must be finite and >= 0, got ", params.correlation_epsilon);
  MOECOMP_EXPECTS(group >= 0, fn, ": group must be >= 0, got ", group);
  MOECOMP_EXPECTS(n >= 1 && n <= moecomp::detail::max_gather_members, fn, ": members must hold 1 to ",
                  moecomp::detail::max_gather_members, " experts on the device, got ", n);
  bool has_dominant = false;
  for (index_t i = 0; i < n; ++i) {
    MOECOMP_EXPECTS(members[i] >= 0 && members[i] < e_count, fn, ": members must be expert ids in [0, ", e_count,
                    "), got ", members[i], " at ", i);
    for (index_t k = 0; k < i; ++k)
      MOECOMP_EXPECTS(members[k] != members[i], fn, ": members must be distinct, got ", members[i], " at ", k, " and ", i);
    has_dominant = has_dominant || members[i] == dominant;
  }
  MOECOMP_EXPECTS(has_dominant, fn, ": dominant must be one of the members, got ", dominant);
  MOECOMP_EXPECTS(x.cols() == d, fn, ": x must have d = ", d, " columns, got ", x.cols());
  for (index_t i = 0; i < tokens.size(); ++i)
    MOECOMP_EXPECTS(tokens[i] >= 0 && tokens[i] < x.rows(), fn, ": tokens must be rows of x in [0, ", x.rows(),
                    "), got ", tokens[i], " at ", i);
  check_merge_output<W>(fn, experts, out);
  MOECOMP_EXPECTS(matches.empty() || (matches.rows() == n && matches.cols() == d_ff), fn, ": matches must be empty or ",
                  moecomp::detail::shape_string(n, d_ff), " (members x d_ff), got ",
                  moecomp::detail::shape_string(matches.rows(), matches.cols()));
  moecomp::detail::check_no_overlap(fn, "out.w1", out.w1, "experts.w1", experts.w1);
  moecomp::detail::check_no_overlap(fn, "out.w2", out.w2, "experts.w2", experts.w2);
  moecomp::detail::check_int_extents(fn, {{"d", d}, {"d_ff", d_ff}, {"x's row stride", x.row_stride()},
                                          {"the stack's row strides", std::max({experts.w1.row_stride(),
                                                                                experts.w3.row_stride(),
                                                                                experts.w2.row_stride()})}});
}


/// merge_learned's checks beyond merge_fix_dom's, on the host.
inline void check_learned_arguments(const char* fn, const merge_params& params, index_t tokens, index_t members,
                                    matrix_view<const double> weights) {
  MOECOMP_EXPECTS(params.max_iterations >= 1, fn, ": params.max_iterations must be >= 1, got ", params.max_iterations);
  MOECOMP_EXPECTS(params.learned_tolerance >= 0, fn, ": params.learned_tolerance must be >= 0, got ",
                  params.learned_tolerance);
  MOECOMP_EXPECTS(weights.empty() || (weights.rows() == tokens && weights.cols() == members), fn,
                  ": weights must be empty or ", moecomp::detail::shape_string(tokens, members),
                  " (tokens x members), got ", moecomp::detail::shape_string(weights.rows(), weights.cols()));
  for (index_t r = 0; r < weights.rows(); ++r)
    for (index_t c = 0; c < weights.cols(); ++c)
      MOECOMP_EXPECTS(std::isfinite(weights(r, c)) && weights(r, c) >= 0, fn,
                      ": weights must be finite and >= 0, got ", weights(r, c), " at (", r, ", ", c, ")");
}

/// The most experts the device routing ranks (gating's routing_max_experts; repeated here so that the checks need
/// no kernel header; a static_assert in merge_layer_device.cuh keeps the two equal).
inline constexpr index_t merge_max_routed_experts = 512;

/// Every check of the device merge_experts and its size query (out null), on the host before any CUDA call:
/// the host's checks on shapes (x and the router are not read: their finiteness is not checked), then the
/// device's limits. Returns the number of groups.
template <class W, class A = accumulator_t<W>>
index_t check_merge_layer_arguments(const char* fn, const merge_params& params,
                                    const moe::ffn_expert_stack_device_view<W>& experts,
                                    vector_view<const std::int64_t> groups, const merge_data<A, device_memory>& data,
                                    const merge_device_outputs<W>* out) {
  moecomp::detail::check_ffn_stack(fn, experts);
  const index_t e_count = experts.experts(), g = merge::detail::checked_group_count(fn, groups, e_count);
  merge::detail::check_merge_params(fn, params, e_count);
  // align_members (the host's aligned copies before a coefficient merge) has no device path yet: refused, not ignored.
  MOECOMP_EXPECTS(!params.align_members, fn, ": params.align_members is host-only (the device merge has no aligned "
                  "copies yet; merge_method aligned aligns on the device), got true");
  merge::detail::check_merge_data(fn, params, data, e_count, g, experts.d_model(), groups);
  const auto members = merge::detail::group_members(groups, g);
  for (index_t k = 0; k < g; ++k)
    MOECOMP_EXPECTS(static_cast<index_t>(members[static_cast<std::size_t>(k)].size()) <=
                        moecomp::detail::max_gather_members,
                    fn, ": groups must have at most ", moecomp::detail::max_gather_members,
                    " members each on the device, got ", members[static_cast<std::size_t>(k)].size(), " in group ", k);
  const bool routed = !data.x.empty() && !data.router.empty();
  MOECOMP_EXPECTS(!routed || e_count <= merge_max_routed_experts, fn, ": experts must be at most ",
                  merge_max_routed_experts, " to route the tokens on the device, got ", e_count);
  moecomp::detail::check_int_extents(
      fn, {{"the number of tokens", data.x.rows()},
           {"tokens x experts", data.x.rows() * e_count},
           {"d", experts.d_model()},
           {"d_ff", experts.d_ff()},
           {"x's row stride", data.x.row_stride()},
           {"the router's row stride", data.router.row_stride()},
           {"the stack's row strides",
            std::max({experts.w1.row_stride(), experts.w3.row_stride(), experts.w2.row_stride()})}});
  if (out != nullptr) {
    const router_rule rule = resolve_router_rule(params, !data.router.empty());
    merge::detail::check_merge_outputs(fn, experts, *out, g, rule);
    moecomp::detail::check_no_overlap(fn, "out.experts.w1", out->experts.w1, "experts.w1", experts.w1);
    moecomp::detail::check_no_overlap(fn, "out.experts.w2", out->experts.w2, "experts.w2", experts.w2);
    moecomp::detail::check_no_overlap(fn, "out.experts.w3", out->experts.w3, "experts.w3", experts.w3);
    moecomp::detail::check_no_overlap(fn, "out.router", out->router, "router", data.router);
  }
  return g;
}

}  // namespace cuda_detail
}  // namespace merge
MOECOMP_NAMESPACE_END
