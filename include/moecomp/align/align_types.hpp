#pragma once
// Parameters and result of neuron alignment (<moecomp/align/align.hpp>). Documentation: docs/align.md.
//
// Alignment matches the n neurons of one expert (or the n rows of a matrix a) to distinct neurons of another
// (rows of b) by an exact linear assignment, so that the second can be permuted into the first's order
// before the two are averaged or subtracted.
#include <moecomp/core/error.hpp>
#include <moecomp/core/status.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/moe/ffn_types.hpp>

#include <string>
#include <string_view>

MOECOMP_NAMESPACE_BEGIN
namespace align {

/// weights: minimise sum_i ||a_i - b_p(i)||^2 over the design rows (ResMoE, Git Re-Basin's weight matching);
/// inner: maximise sum_i <a_i, b_p(i)> over the design rows (MC-SMoE's weight matching);
/// correlation: maximise sum_i corr(h_a[:, i], h_b[:, p(i)]), the Pearson correlation of hidden activations
/// over calibration tokens (ZipIt, HC-SMoE's neuron features, solved exactly instead of greedily).
enum class align_objective { weights, inner, correlation };

inline const char* to_string(align_objective o) noexcept {
  switch (o) {
    case align_objective::weights: return "weights";
    case align_objective::inner: return "inner";
    case align_objective::correlation: return "correlation";
  }
  return "unknown";
}

/// Parses "weights", "inner" or "correlation"; throws invalid_argument naming them otherwise.
inline align_objective parse_align_objective(std::string_view name) {
  for (align_objective o : {align_objective::weights, align_objective::inner, align_objective::correlation})
    if (name == to_string(o)) return o;
  MOECOMP_FAIL(error_kind::invalid_argument, "objective: expected weights, inner or correlation, got '",
               std::string(name), "'");
}

struct align_params {
  align_objective objective = align_objective::weights;
  /// The expert forward used for the hidden activations of the correlation objective (align_experts).
  moe::ffn_params forward;
};

/// The assignment is exact (one Jonker-Volgenant solve, no iterations), so there is no convergence_info.
struct align_result {
  /// The objective at the returned permutation, accumulated in double in row order: sum of squared distances
  /// (weights), of inner products (inner) or of correlations (correlation).
  double cost = 0;
  /// ok, or infeasible when the cost matrix had no finite complete assignment (cannot happen for finite input).
  moecomp::status status = moecomp::status::ok;
  bool ok() const noexcept { return status == moecomp::status::ok; }
};

}  // namespace align
MOECOMP_NAMESPACE_END
