#pragma once
// The argument checks of expert merging, one header for the host and the device entry points: the
// parameters, the group labels, the optional data and the outputs' shapes.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/ffn_checks.hpp>
#include <moecomp/merge/merge_types.hpp>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace merge {
namespace detail {

using moecomp::detail::shape_string;

inline void check_merge_params(const char* fn, const merge_params& p, index_t experts) {
  moecomp::detail::check_ffn_params(fn, p.forward);
  MOECOMP_EXPECTS(p.routing_top_k >= 1 && p.routing_top_k <= experts, fn, ": params.routing_top_k must be in [1, ",
                  experts, "] (the experts), got ", p.routing_top_k);
  MOECOMP_EXPECTS(p.frequency_top_k >= 1 && p.frequency_top_k <= experts, fn,
                  ": params.frequency_top_k must be in [1, ", experts, "] (the experts), got ", p.frequency_top_k);
  MOECOMP_EXPECTS(std::isfinite(p.frequency_epsilon) && p.frequency_epsilon >= 0, fn,
                  ": params.frequency_epsilon must be finite and >= 0, got ", p.frequency_epsilon);
  MOECOMP_EXPECTS(std::isfinite(p.correlation_epsilon) && p.correlation_epsilon >= 0, fn,
                  ": params.correlation_epsilon must be finite and >= 0, got ", p.correlation_epsilon);
  MOECOMP_EXPECTS(p.token_cap >= 0, fn, ": params.token_cap must be >= 0 (0: all tokens), got ", p.token_cap);
  MOECOMP_EXPECTS(p.max_iterations >= 1, fn, ": params.max_iterations must be >= 1, got ", p.max_iterations);
  MOECOMP_EXPECTS(std::isfinite(p.learned_tolerance) && p.learned_tolerance >= 0, fn,
                  ": params.learned_tolerance must be finite and >= 0, got ", p.learned_tolerance);
  if (p.method == merge_method::aligned || p.align_members) moecomp::detail::check_ffn_params(fn, p.align.forward);
  MOECOMP_EXPECTS(!p.align_members || (p.method != merge_method::aligned && p.method != merge_method::fix_dom &&
                                       p.method != merge_method::dominant),
                  fn, ": params.align_members must be false with method ", to_string(p.method),
                  p.method == merge_method::dominant ? " (it keeps one expert: nothing to align)"
                                                      : " (it matches the neurons itself)",
                  ", got true");
}

/// The number of groups g = 1 + the largest label; every label in [0, g) must have a member. Throws otherwise.
template <class I>
index_t checked_group_count(const char* fn, vector_view<const I> groups, index_t experts) {
  MOECOMP_EXPECTS(groups.size() == experts, fn, ": groups must have ", experts, " entries (one per expert), got ",
                  groups.size());
  MOECOMP_EXPECTS(experts >= 1, fn, ": experts must hold at least 1 expert, got 0");
  std::int64_t largest = -1;
  for (index_t e = 0; e < experts; ++e) {
    MOECOMP_EXPECTS(groups[e] >= 0 && groups[e] < static_cast<std::int64_t>(experts), fn,
                    ": groups entries must be group ids in [0, ", experts, "), got ", static_cast<std::int64_t>(groups[e]),
                    " at expert ", e);
    largest = std::max<std::int64_t>(largest, static_cast<std::int64_t>(groups[e]));
  }
  std::vector<char> used(static_cast<std::size_t>(largest + 1), 0);
  for (index_t e = 0; e < experts; ++e) used[static_cast<std::size_t>(groups[e])] = 1;
  for (std::int64_t g = 0; g <= largest; ++g)
    MOECOMP_EXPECTS(used[static_cast<std::size_t>(g)], fn, ": groups must cover every id in 0..", largest,
                    " (g = ", largest + 1, " groups), got no expert in group ", g);
  return static_cast<index_t>(largest + 1);
}

inline void check_frequencies(const char* fn, vector_view<const double> f, index_t experts) {
  MOECOMP_EXPECTS(f.size() == experts, fn, ": frequencies must have ", experts, " entries (one per expert), got ",
                  f.size());
  for (index_t e = 0; e < experts; ++e)
    MOECOMP_EXPECTS(std::isfinite(f[e]) && f[e] >= 0, fn, ": frequencies must be finite and >= 0, got ", f[e],
                    " at expert ", e);
}

/// The data's shapes and values (x and the router checked for finiteness in host memory only: device memory is
/// not read by the checks).
template <class A, class Space>
void check_merge_data(const char* fn, const merge_params& params, const merge_data<A, Space>& data, index_t experts,
                      index_t groups, index_t d, vector_view<const std::int64_t> labels) {
  constexpr bool on_host = std::is_same_v<Space, host_memory>;
  if (!data.x.empty()) {
    MOECOMP_EXPECTS(data.x.cols() == d, fn, ": x must be tokens x ", d, " (d of the experts), got ",
                    shape_string(data.x.rows(), data.x.cols()));
    if constexpr (on_host) moecomp::detail::check_finite(fn, "x", data.x);
  }
  if (!data.router.empty()) {
    MOECOMP_EXPECTS(data.router.rows() == experts && data.router.cols() == d, fn, ": router must be ",
                    shape_string(experts, d), " (experts x d), got ", shape_string(data.router.rows(), data.router.cols()));
    if constexpr (on_host) moecomp::detail::check_finite(fn, "router", data.router);
  }
  if (!data.frequencies.empty()) check_frequencies(fn, data.frequencies, experts);
  if (!data.dominants.empty()) {
    MOECOMP_EXPECTS(data.dominants.size() == groups, fn, ": dominants must have ", groups,
                    " entries (one per group), got ", data.dominants.size());
    for (index_t g = 0; g < groups; ++g) {
      const std::int64_t e = data.dominants[g];
      MOECOMP_EXPECTS(e >= 0 && e < static_cast<std::int64_t>(experts) && labels[static_cast<index_t>(e)] == g, fn,
                      ": dominants entry ", g, " must be a member of group ", g, ", got expert ", e);
    }
  }
  const merge_method m = params.method;
  const bool correlation = params.align.objective == align::align_objective::correlation;
  const bool aligns = m == merge_method::aligned || params.align_members;
  const bool needs_x = m == merge_method::fix_dom || m == merge_method::learned || (aligns && correlation);
  MOECOMP_EXPECTS(!needs_x || !data.x.empty(), fn, ": method ", to_string(m),
                  aligns && correlation ? " aligned with the correlation objective" : "",
                  " needs calibration tokens x, got none");
  const bool needs_f = m == merge_method::frequency || m == merge_method::dominant;
  const bool has_f = !data.frequencies.empty() || (!data.router.empty() && !data.x.empty());
  MOECOMP_EXPECTS(!needs_f || has_f || (m == merge_method::dominant && !data.dominants.empty()), fn, ": method ",
                  to_string(m), " needs frequencies (or a router and x to count them), got none");
  const router_rule rule = resolve_router_rule(params, !data.router.empty());
  MOECOMP_EXPECTS(rule == router_rule::id_map || !data.router.empty(), fn, ": router rule ", to_string(rule),
                  " needs the router, got none");
}

/// The outputs' shapes: Stack is the input stack's view and Outputs merge_outputs<W> (host) or
/// merge_device_outputs<W> (device); the checks read shapes only.
template <class Stack, class Outputs>
void check_merge_outputs(const char* fn, const Stack& in, const Outputs& out, index_t groups, router_rule rule) {
  const auto& x = out.experts;
  const index_t d = in.d_model(), d_ff = in.d_ff();
  const auto same = [&](const char* name, index_t count, index_t rows, index_t cols, index_t want_rows,
                        index_t want_cols, bool present) {
    if (!present) {
      MOECOMP_EXPECTS(count * rows * cols == 0, fn, ": out.experts.", name,
                      " must be empty (the input has none), got ", count, " x ", shape_string(rows, cols));
      return;
    }
    MOECOMP_EXPECTS(count == groups && rows == want_rows && cols == want_cols, fn, ": out.experts.", name, " must be ",
                    groups, " x ", shape_string(want_rows, want_cols), " (groups x the input's shape), got ", count,
                    " x ", shape_string(rows, cols));
  };
  same("w1", x.w1.count(), x.w1.rows(), x.w1.cols(), d_ff, d, true);
  same("w3", x.w3.count(), x.w3.rows(), x.w3.cols(), d_ff, d, in.gated());
  same("w2", x.w2.count(), x.w2.rows(), x.w2.cols(), d, d_ff, true);
  same("b1", x.b1.rows(), 1, x.b1.cols(), 1, d_ff, !in.b1.empty());
  same("b3", x.b3.rows(), 1, x.b3.cols(), 1, d_ff, !in.b3.empty());
  same("b2", x.b2.rows(), 1, x.b2.cols(), 1, d, !in.b2.empty());
  MOECOMP_EXPECTS(out.map.size() == in.experts(), fn, ": out.map must have ", in.experts(),
                  " entries (one per expert), got ", out.map.size());
  if (rule == router_rule::id_map) {
    MOECOMP_EXPECTS(out.router.empty(), fn, ": out.router must be empty for router rule map (the router is kept), got ",
                    shape_string(out.router.rows(), out.router.cols()));
  } else {
    MOECOMP_EXPECTS(out.router.rows() == groups && out.router.cols() == d, fn, ": out.router must be ",
                    shape_string(groups, d), " (groups x d) for router rule ", to_string(rule), ", got ",
                    shape_string(out.router.rows(), out.router.cols()));
  }
}

}  // namespace detail
}  // namespace merge
MOECOMP_NAMESPACE_END
