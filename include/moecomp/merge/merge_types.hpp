#pragma once
// Parameters, data and report of expert merging (<moecomp/merge/merge.hpp>). Documentation: docs/merge.md.
//
// Merging replaces each group of experts of an MoE layer by one expert. The methods come from HC-SMoE
// (average, frequency, fix-dom), the fourth paper (uniform, dominant, learned, with the router rows merged by
// the same coefficients) and weight-matching work (aligned: align the neurons, then average).
#include <moecomp/align/align_types.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/status.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/moe/ffn_types.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace merge {

/// How one group becomes one expert (theta: every weight and bias of an expert; G: the group's members).
///   average    theta = mean over G (MC-SMoE's torch.mean);
///   frequency  theta = sum f_e theta_e / (sum f_e + frequency_epsilon), f the routing frequencies (HC-SMoE's
///              `freq`: the epsilon added once to the denominator; a group of unused experts becomes zero);
///   uniform    theta = sum theta_e / |G| (the fourth paper's uniform souping; router rows merged the same way);
///   dominant   theta = the dominant expert's (the fourth paper's "keep the most frequent"; M-SMoE);
///   aligned    each member's neurons aligned to the dominant's by an exact assignment (params.align), then
///              the mean;
///   fix_dom    HC-SMoE's fixed-dominant merge (its `fix-dom-same`): each neuron of a non-dominant member goes
///              to its most correlated dominant neuron (many-to-one), each dominant neuron's W1 / W3 rows and
///              W2 column become the mean of itself and the neurons sent to it;
///   learned    theta = sum a_e theta_e with a on the simplex minimising the group's output error on the
///              calibration tokens (the fourth paper's Eq. 7), by projected gradient.
enum class merge_method { average, frequency, uniform, dominant, aligned, fix_dom, learned };

inline const char* to_string(merge_method m) noexcept {
  switch (m) {
    case merge_method::average: return "average";
    case merge_method::frequency: return "frequency";
    case merge_method::uniform: return "uniform";
    case merge_method::dominant: return "dominant";
    case merge_method::aligned: return "aligned";
    case merge_method::fix_dom: return "fix-dom";
    case merge_method::learned: return "learned";
  }
  return "unknown";
}

/// Parses average, frequency, uniform, dominant, aligned, fix-dom or learned; throws invalid_argument otherwise.
inline merge_method parse_merge_method(std::string_view name) {
  for (merge_method m : {merge_method::average, merge_method::frequency, merge_method::uniform, merge_method::dominant,
                         merge_method::aligned, merge_method::fix_dom, merge_method::learned})
    if (name == to_string(m)) return m;
  MOECOMP_FAIL(error_kind::invalid_argument,
               "method: expected average, frequency, uniform, dominant, aligned, fix-dom or learned, got '",
               std::string(name), "'");
}

/// What becomes of the router.
///   id_map        HC-SMoE: the router is unchanged and map[e] = the group of expert e; the layer forward
///                 (moe_layer_forward with expert_map) runs softmax and top-k over the E original logits;
///   merged_rows   the fourth paper: group g's router row = sum over its members of the merge's coefficient
///                 times the member's row, giving g rows;
///   dominant_row  M-SMoE: group g's router row = its dominant expert's row;
///   automatic     with a router: merged_rows for uniform and learned, dominant_row for dominant, id_map
///                 otherwise; without a router: id_map (resolve_router_rule).
enum class router_rule { automatic, id_map, merged_rows, dominant_row };

inline const char* to_string(router_rule r) noexcept {
  switch (r) {
    case router_rule::automatic: return "auto";
    case router_rule::id_map: return "map";
    case router_rule::merged_rows: return "merged";
    case router_rule::dominant_row: return "dominant";
  }
  return "unknown";
}

/// Parses auto, map, merged or dominant; throws invalid_argument otherwise.
inline router_rule parse_router_rule(std::string_view name) {
  for (router_rule r : {router_rule::automatic, router_rule::id_map, router_rule::merged_rows, router_rule::dominant_row})
    if (name == to_string(r)) return r;
  MOECOMP_FAIL(error_kind::invalid_argument, "router rule: expected auto, map, merged or dominant, got '",
               std::string(name), "'");
}

struct merge_params {
  merge_method method = merge_method::average;
  router_rule router = router_rule::automatic;
  /// The expert forward (activation, token tile) of fix_dom's activations, learned's objective and the
  /// reported merge errors.
  moe::ffn_params forward;
  /// Experts per token when a router routes the calibration tokens (the model's num_experts_per_tok): the
  /// tokens of a group (fix_dom, learned, the merge errors). 1 <= routing_top_k <= E.
  index_t routing_top_k = 2;
  /// Experts per token counted by routing_frequencies when the frequencies are computed from the router
  /// (HC-SMoE counts the top 2 whatever the model's k). 1 <= frequency_top_k <= E.
  index_t frequency_top_k = 2;
  /// frequency: added once to each group's frequency total (HC-SMoE's FP32_EPS). >= 0.
  double frequency_epsilon = 1e-7;
  /// fix_dom: added to the product of the two standard deviations in each correlation (HC-SMoE's). >= 0.
  double correlation_epsilon = 1e-7;
  /// fix_dom, learned: at most this many of a group's tokens, drawn without replacement by moecomp's generator
  /// from `seed` (stream: the group id) when there are more (HC-SMoE's data_limit). 0: all tokens.
  index_t token_cap = 50000;
  std::uint64_t seed = 0;
  /// aligned, and every method when align_members: the alignment objective (weights, inner, or correlation on
  /// the group's tokens).
  align::align_params align;
  /// Align each member's neurons to its group's dominant (params.align, one exact assignment per member) before
  /// the coefficient merge: average, frequency, uniform and learned then combine neuron i of the dominant with
  /// the neuron of each member matched to it (HC-SMoE and the fourth paper merge unaligned; MC-SMoE aligns).
  /// dominant keeps one expert and is unchanged; aligned aligns already; fix_dom matches neurons itself, so
  /// align_members with either is misuse. The correlation objective needs the calibration tokens; a group with
  /// fewer than two of them keeps its members unaligned.
  bool align_members = false;
  /// learned: at most this many projected-gradient iterations per group; stop when no coefficient moves by
  /// more than learned_tolerance. max_iterations >= 1, learned_tolerance >= 0.
  int max_iterations = 100;
  double learned_tolerance = 1e-6;
  /// Report each group's merge error when x is given. It runs every member and the merged expert on the group's
  /// tokens: as much work as fix_dom's activations again, so a caller that does not need it turns it off.
  bool report_errors = true;
};

/// The router rule a call with these params applies (never automatic); has_router: whether the call's data
/// holds a router (automatic keeps the id map without one).
inline router_rule resolve_router_rule(const merge_params& params, bool has_router) noexcept {
  if (params.router != router_rule::automatic) return params.router;
  if (!has_router) return router_rule::id_map;
  switch (params.method) {
    case merge_method::uniform:
    case merge_method::learned: return router_rule::merged_rows;
    case merge_method::dominant: return router_rule::dominant_row;
    default: return router_rule::id_map;
  }
}

/// The optional data of a merge, in A = accumulator_t<W> (float, or double for double storage). Empty views
/// where absent. Space: where x and the router live (device_memory for the device merge_experts of
/// <moecomp/cuda/merge/merge.cuh>); the frequencies and dominants are host data on both.
template <class A, class Space = host_memory>
struct merge_data {
  /// Calibration tokens, T x d: needed by fix_dom and learned (and by aligned with the correlation
  /// objective); the merge errors are reported when given.
  matrix_view<const A, Space> x;
  /// The router, E x d: routes the calibration tokens (each group's tokens are those routed to its members),
  /// gives the frequencies when they are not given, and is merged by router rules merged_rows and
  /// dominant_row. Without it every token belongs to every group.
  matrix_view<const A, Space> router;
  /// Routing frequencies, E entries >= 0 (HC-SMoE normalises them per layer to sum 1): frequency's weights and
  /// the choice of dominants. When absent they come from the router and x (routing_frequencies), if given.
  vector_view<const double> frequencies;
  /// Each group's dominant expert, g entries (a member of that group). When absent: dominant_experts.
  vector_view<const std::int64_t> dominants;
};

/// Where a merge writes: the g merged experts (the input's pieces, g deep), the merged router (g x d, for
/// router rules merged_rows and dominant_row; empty for id_map) and the map (E entries: old id -> group).
template <class W>
struct merge_outputs {
  moe::ffn_expert_stack_mutable_view<W> experts;
  matrix_view<accumulator_t<W>> router;
  vector_view<std::int64_t> map;
};

/// One group's outcome.
struct merge_group_report {
  /// The dominant expert (the reference of aligned and fix_dom).
  index_t dominant = 0;
  /// The calibration tokens the group's merge and error used (after the token cap), 0 without x.
  index_t tokens = 0;
  /// Relative merge error on those tokens, sum_t ||y_t - f_merged(x_t)||^2 / sum_t ||y_t||^2, where y_t is the
  /// group's original output: the members' outputs weighted by their router probabilities renormalised over
  /// the group (the plain mean without a router). NaN without x, with no token, or with params.report_errors off.
  double error = 0;
  /// learned: the objective mean_t ||y_t - f_a(x_t)||^2 at the uniform start and at the end, and the
  /// iterations; NaN and 0 for the other methods.
  double objective_initial = 0, objective_final = 0;
  std::int64_t iterations = 0;
};

/// The outcome of merge_experts. As convergence_info: ok unless a learned group stopped at max_iterations
/// (iteration_limit; its coefficients are still the best found and on the simplex) or an alignment failed;
/// iterations: the total over the groups; criterion: the largest final coefficient step of a learned group.
struct merge_report : convergence_info {
  merge_method method = merge_method::average;
  router_rule router = router_rule::id_map;  // as applied
  /// Each expert's coefficient in its group's merge (the router rows' too): 1/|G| for average, uniform,
  /// aligned and fix_dom (whose neurons are averaged with equal weights), f_e / (sum f + epsilon) for frequency,
  /// 1 or 0 for dominant, the learned a_e for learned. E entries.
  std::vector<double> coefficients;
  std::vector<merge_group_report> groups;
};

}  // namespace merge
MOECOMP_NAMESPACE_END
