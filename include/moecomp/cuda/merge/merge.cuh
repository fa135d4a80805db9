#pragma once
// Expert merging on the device: merge_weighted, the weighted sum of a group's experts (each optionally put in a
// reference's neuron order by a permutation), the device building block of <moecomp/merge/merge.hpp>'s
// average, frequency, uniform, dominant and aligned methods (the coefficients and permutations those compute
// on the host: report.coefficients, align_stack). Documentation: docs/merge.md, "Device".
//
//   experts: a stack of E experts in device memory (moe::ffn_expert_stack_device_view<W>, float, double,
//            bfloat16 or half storage);
//   members: n expert ids (host memory, 1 <= n <= 64); coefficients: n values (host);
//   permutations: n x d_ff neuron ids in device memory (row i: member i's neuron p[r] becomes neuron r, the host
//            permute_neurons' convention), or empty for none;
//   out: one expert of the stack's shape (moe::ffn_expert_device_mutable_view<W>), not overlapping the stack.
//   out = sum_i coefficients[i] theta_{members[i]}, every weight and bias, neurons gathered.
//
// Method: one element-wise kernel per piece (W1, W3, W2, b1, b3, b2): each thread reads the n members' elements
// and sums them in double, in member order, then rounds once to W, exactly as the host's merge does, so the
// result is bit-identical to the host's for the same coefficients and permutations. Memory-bound: n + 1 reads
// and writes of 2 (or 3) d d_ff elements.
// Asynchrony: asynchronous on ctx.stream. Workspace: none (the member tables travel as kernel arguments, which
// is why n is at most 64). Determinism: no atomics; bit-identical run to run.
// Checks: shapes, ids, finite coefficients and n on the host; the permutations' values are not checked (they
// are in device memory): entries outside [0, d_ff) read out of bounds.
//
// Hardware: tests/cuda/test_merge_cuda.cu passes on an H100 (2026-11-26; docs/cuda.md); the per-element sum
// (core/detail/expert_gather.hpp) is exercised on the host by tests/test_merge.cpp.
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/moe/expert_types.cuh>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/expert_gather.hpp>
#include <moecomp/core/detail/ffn_checks.hpp>
#include <moecomp/cuda/core/detail/expert_gather.cuh>

#include <cmath>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace merge {

/// out = the weighted sum of the members (see above).
template <class W>
void merge_weighted(const cuda_context& ctx, const moe::ffn_expert_stack_device_view<W>& experts,
                    vector_view<const index_t> members, vector_view<const double> coefficients,
                    matrix_view<const index_t, device_memory> permutations,
                    const moe::ffn_expert_device_mutable_view<W>& out) {
  constexpr const char* fn = "merge_weighted";
  const index_t n = members.size(), e_count = experts.experts(), d_ff = experts.d_ff(), d = experts.d_model();
  moecomp::detail::check_ffn_shapes(fn, d_ff, d, experts.w3.rows(), experts.w3.cols(), experts.w2.rows(),
                                    experts.w2.cols(), experts.b1.cols(), experts.b3.cols(), experts.b2.cols(),
                                    experts.gated());
  MOECOMP_EXPECTS(n >= 1 && n <= moecomp::detail::max_gather_members, fn, ": members must hold 1 to ",
                  moecomp::detail::max_gather_members, " experts on the device, got ", n);
  MOECOMP_EXPECTS(coefficients.size() == n, fn, ": coefficients must have ", n, " entries (one per member), got ",
                  coefficients.size());
  for (index_t i = 0; i < n; ++i) {
    MOECOMP_EXPECTS(members[i] >= 0 && members[i] < e_count, fn, ": members must be expert ids in [0, ", e_count,
                    "), got ", members[i], " at ", i);
    MOECOMP_EXPECTS(std::isfinite(coefficients[i]), fn, ": coefficients must be finite, got ", coefficients[i], " at ", i);
  }
  MOECOMP_EXPECTS(permutations.empty() || (permutations.rows() == n && permutations.cols() == d_ff), fn,
                  ": permutations must be empty or ", moecomp::detail::shape_string(n, d_ff), " (members x d_ff), got ",
                  moecomp::detail::shape_string(permutations.rows(), permutations.cols()));
  MOECOMP_EXPECTS(out.d_ff() == d_ff && out.d_model() == d && out.gated() == experts.gated() && out.w2.rows() == d &&
                      out.w2.cols() == d_ff && out.b1.size() == experts.b1.cols() && out.b3.size() == experts.b3.cols() &&
                      out.b2.size() == experts.b2.cols(),
                  fn, ": out must have the experts' shape (d_ff ", d_ff, ", d ", d, experts.gated() ? ", gated" : "",
                  ", the same biases), got d_ff ", out.d_ff(), ", d ", out.d_model());
  MOECOMP_EXPECTS((out.b1.empty() || out.b1.stride() == 1) && (out.b3.empty() || out.b3.stride() == 1) &&
                      (out.b2.empty() || out.b2.stride() == 1),
                  fn, ": out's biases must be contiguous (stride 1) on the device");
  moecomp::detail::check_no_overlap(fn, "out.w1", out.w1, "experts.w1", experts.w1);
  moecomp::detail::check_no_overlap(fn, "out.w2", out.w2, "experts.w2", experts.w2);
  std::vector<moe::ffn_expert_device_view<W>> views;
  std::vector<double> c;
  for (index_t i = 0; i < n; ++i) {
    views.push_back(experts.expert(members[i]));
    c.push_back(coefficients[i]);
  }
  moecomp::detail::gather_experts<W>(ctx, views, c, permutations.empty() ? nullptr : permutations.data(),
                                     permutations.row_stride(), out);
}

}  // namespace merge
MOECOMP_NAMESPACE_END
