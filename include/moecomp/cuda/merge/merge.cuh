#pragma once
// Expert merging on the device. Documentation: docs/merge.md, "Device".
//   merge_weighted  the weighted sum of a group's experts (each optionally put in a reference's neuron order by a
//                   permutation), the device building block of <moecomp/merge/merge.hpp>'s average, frequency,
//                   uniform, dominant and aligned methods (the coefficients and permutations those compute on
//                   the host: report.coefficients, align_stack);
//   merge_fix_dom   HC-SMoE's fix-dom merge of one group (merge_method::fix_dom), below;
//   merge_learned   the fourth paper's learned merge of one group (merge_method::learned), below;
//   merge_experts   the whole layer (the host's merge_experts on device views: every method, the router rules, the
//                   map, the merge errors), at the end of this file.
// Tests: tests/cuda/test_merge_cuda.cu. Which of these have run on a GPU: docs/cuda.md, "Status on hardware".
//
// ---- merge_weighted
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
// Tests: tests/cuda/test_merge_cuda.cu's merge_weighted cases; the per-element sum
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
#include <moecomp/cuda/core/detail/workspace.cuh>
#include <moecomp/merge/merge_types.hpp>
#include <moecomp/cuda/merge/detail/merge_device_checks.cuh>
#include <moecomp/cuda/merge/detail/fix_dom_device.cuh>
#include <moecomp/cuda/merge/detail/learned_device.cuh>
#include <moecomp/cuda/merge/detail/merge_layer_device.cuh>
#include <moecomp/cuda/merge/merge_types.cuh>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
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
  cuda_detail::check_merge_output<W>(fn, experts, out);
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

// ---- merge_fix_dom: HC-SMoE's fix-dom merge of one group (the host's merge_experts with merge_method::fix_dom,
// docs/merge.md "fix_dom"), on device experts.
//
//   params:   forward (the activation of the hidden activations), token_cap, seed, correlation_epsilon, as on
//             the host; the method, router and learned fields are not read;
//   experts:  the stack (moe::ffn_expert_stack_device_view<W>, float, double, bfloat16 or half storage);
//   members:  the group's expert ids (host memory, 1..64, distinct); dominant: one of them (the reference);
//             the others are taken in ascending id order, as the host does;
//   group:    the group's id: the stream of the token cap's draw (the host's g);
//   x:        calibration tokens, T x d in A = accumulator_t<W>, device memory;
//   tokens:   host memory, the group's calibration tokens as rows of x, as HC-SMoE builds them (each member's
//             routed tokens concatenated in ascending member order, a token routed to two members twice; every
//             token once without a router; the host's merge::detail::concatenated_tokens). At most
//             params.token_cap of them are kept by the host's seeded draw (cap_tokens with seed, stream group):
//             the draw runs on the host, the kept rows are gathered on the device;
//   out:      one expert of the stack's shape (device), not overlapping the stack;
//   matches:  optional, members x d_ff (device): row i = member i's matching (row 0, the dominant, the identity;
//             then the others in ascending id order): its neuron b went to dominant neuron matches(i, b).
//   Returns the host's merge_report for this one group: method fix_dom, router resolve_router_rule(params,
//   false) (no router rows are merged on the device), coefficients (E entries: 1/|G| for the members, 0 for the
//   other experts), groups (one entry: dominant, tokens = the correlation tokens after the cap, error and
//   objectives NaN (the merge error is not computed on the device), iterations 0), status ok.
//
// Method (cuda/merge/detail/fix_dom_device.cuh): the kept rows gathered; the hidden activations
// act(x W1^T + b1) * (x W3^T + b3) by the device expert forward (cuBLAS GEMMs); the columns' centred norms in
// double by cub::DeviceSegmentedReduce; per non-dominant member the correlations of its neurons with the
// dominant's by align::pearson_correlation (one cuBLAS GEMM), scored by the host's rule (fix_dom_score: r s /
// (s + eps)), and the argmax over the dominant's neurons by cub::DeviceSegmentedReduce::ArgMax (ties to the
// lowest index, like the host); then the sources of each dominant neuron stably sorted by target
// (cub::DeviceRadixSort) and ranged (cub::DeviceHistogram + DeviceScan), and one kernel per piece summing each
// merged element's sources in the host's order in double, scaled as the host does and rounded once; b2 the
// members' mean. With fewer than 2 kept tokens (or one member) the matching is the identity (a plain mean).
// Precision and agreement: the activations and correlations in A by cuBLAS, so they agree with the host's to
// rounding; the matching equals the host's unless two dominant neurons' scores for a member neuron are within
// that rounding of each other; given the same matching the merged weights are the host's bit for bit.
// Asynchrony: asynchronous on ctx.stream, except the copy of the kept token ids from pageable host memory,
// which returns once they are staged (CUDA's rule for pageable host-to-device copies). Without a cuBLAS handle
// in ctx, the temporary handles' destruction synchronises the device.
// Workspace (merge_fix_dom_workspace_size): the members x d_ff matching, 4 (members - 1) d_ff sort entries, 2
// (d_ff + 1) ints; with correlation tokens t: t ids, t x d gathered tokens, 2 t x d_ff activations, the d_ff x
// d_ff correlations, 3 d_ff doubles, d_ff argmax pairs, the forward's and pearson_correlation's workspaces, and
// CUB's temporary storage. From ctx's allocator without a workspace argument.
// Determinism: no atomics; CUB's segmented reductions and sort have a fixed order, cuBLAS GEMMs are
// run-to-run deterministic on one GPU with one stream: bit-identical from run to run.
// Checks (invalid_argument, on the host before any CUDA call): the stack's and out's shapes, members (1..64,
// distinct ids in range), the dominant a member, x's columns, the token ids in [0, T), matches' shape,
// params.forward, token_cap >= 0, correlation_epsilon >= 0, cuBLAS's int limits.
//
// Tests: tests/cuda/test_merge_cuda.cu's fix-dom cases.


/// Workspace bytes of the device merge_fix_dom of a group of `members` experts of d x d_ff (gated or not),
/// storage W, whose token list holds `tokens` entries before the cap.
template <class W>
std::size_t merge_fix_dom_workspace_size(const merge_params& params, index_t tokens, index_t members, index_t d,
                                         index_t d_ff, bool gated) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  constexpr const char* fn = "merge_fix_dom_workspace_size";
  moecomp::detail::check_extents(fn, {{"tokens", tokens}, {"members", members}, {"d", d}, {"d_ff", d_ff}});
  MOECOMP_EXPECTS(members >= 1, fn, ": members must be >= 1, got ", members);
  MOECOMP_EXPECTS(params.token_cap >= 0, fn, ": params.token_cap must be >= 0, got ", params.token_cap);
  return cuda_detail::make_fix_dom_plan<W>(fn, detail::capped_count(tokens, params.token_cap), members, d, d_ff, gated)
      .bytes;
}

/// The group's fix-dom merge into out (see above), with a caller's workspace.
template <class W>
merge_report merge_fix_dom(const cuda_context& ctx, const merge_params& params,
                                 const moe::ffn_expert_stack_device_view<W>& experts, vector_view<const index_t> members,
                                 index_t dominant, index_t group,
                                 moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>, device_memory>> x,
                                 vector_view<const index_t> tokens, const moe::ffn_expert_device_mutable_view<W>& out,
                                 matrix_view<index_t, device_memory> matches,
                                 vector_view<std::byte, device_memory> workspace) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  constexpr const char* fn = "merge_fix_dom";
  cuda_detail::check_fix_dom_arguments<W>(fn, params, experts, members, dominant, group, x, tokens, out, matches);
  return cuda_detail::fix_dom_group<W>(fn, ctx, params, experts, members, dominant, group, x, tokens, out, matches,
                                      workspace);
}

/// As above, with the workspace from ctx's allocator.
template <class W>
merge_report merge_fix_dom(const cuda_context& ctx, const merge_params& params,
                                 const moe::ffn_expert_stack_device_view<W>& experts, vector_view<const index_t> members,
                                 index_t dominant, index_t group,
                                 moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>, device_memory>> x,
                                 vector_view<const index_t> tokens, const moe::ffn_expert_device_mutable_view<W>& out,
                                 matrix_view<index_t, device_memory> matches = {}) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  cuda_detail::check_fix_dom_arguments<W>("merge_fix_dom", params, experts, members, dominant, group, x, tokens, out,
                                          matches);  // before the allocation
  const moecomp::detail::scoped_workspace workspace(
      ctx, merge_fix_dom_workspace_size<W>(params, tokens.size(), members.size(), experts.d_model(), experts.d_ff(),
                                           experts.gated()));
  return merge_fix_dom<W>(ctx, params, experts, members, dominant, group, x, tokens, out, matches, workspace.view());
}

// ---- merge_learned: the fourth paper's learned merge of one group (the host's merge_experts with
// merge_method::learned, docs/merge.md "learned"), on device experts.
//
//   params:   forward, token_cap, seed, max_iterations, learned_tolerance as on the host; the method and
//             router are not read;
//   experts, members, dominant, group, x: as merge_fix_dom (the dominant only fixes the coefficients' order,
//             which the host's sums follow: the dominant first, then the others ascending);
//   tokens:   host memory, the group's calibration tokens as rows of x, each once (the host's
//             merge::detail::group_tokens: the tokens routed to at least one member, ascending; every token
//             without a router); at most params.token_cap kept by the host's seeded draw (stream group);
//   weights:  host memory, tokens.size() x members.size() (columns in `members`' order), each token's router
//             probability of each member (0 where the token did not select it): the target y_t = the members'
//             outputs weighted by them, renormalised over the token's row (the host's group_target); empty: the
//             plain mean of the members' outputs (the host without a router);
//   out:      one expert of the stack's shape: sum_i a_i theta_i with the learned a (merge_weighted's kernels,
//             bit-identical to the host's weighted merge for the same a).
//   Returns the host's merge_report for this one group: method learned, router resolve_router_rule(params,
//   false) (no router rows merged here: report.coefficients give them), coefficients (E entries: the learned
//   a for the members, 0 elsewhere), groups (one entry: dominant, tokens kept, objective_initial,
//   objective_final, iterations; error NaN), status (iteration_limit when the loop stopped at
//   max_iterations), iterations, criterion (the last coefficient step). Without tokens: a uniform, objectives
//   NaN, as on the host.
//
// Method (cuda/merge/detail/learned_device.cuh): the host's projected gradient (the same code,
// merge/detail/learned_solver.hpp: backtracking step from 1 / ||grad||, the sort-based projection onto the
// simplex, at most max_iterations steps, stop when no coefficient moves by more than learned_tolerance) runs on
// the host; each evaluation of the objective runs on the device: the members' pre-activations once (2 cuBLAS
// GEMMs per member), then per evaluation the mixed hidden activations (one kernel, double sums rounded to A),
// the output GEMM, the residual, the loss by cub::DeviceSegmentedReduce, and with the gradient two more GEMMs
// (R^T h, R W2_a), one element-wise kernel and the per-member dot products by cub::DeviceSegmentedReduce in
// double. The n coefficients travel to the kernels by value.
// Synchronisation: each evaluation SYNCHRONISES ctx.stream once, to copy back the loss (and the 3 n dot products
// and the d column sums of R with the gradient) into pinned memory; the setup synchronises once (the members'
// b2 in double, for the gradient's b2 term summed on the host); the token ids and weights are copied from
// pageable host memory. Expect one to about three evaluations per iteration.
// Precision and agreement: the GEMMs in A by cuBLAS, the sums in double in other orders than the host's: the
// objective and gradient agree with the host's to rounding, hence the coefficients to about 1e-6 (the same
// step decisions); exactly equal coefficients would give the same merged weights bit for bit.
// Workspace (merge_learned_workspace_size): with t kept tokens, n members: (2 n + 5) t d_ff + (2 n + 4) d d_ff
// + 4 t d values of A, t d + t + n d + d doubles (the target's accumulator, b2), t ids and t n weights, the
// expert forward's, 3 n + 1 + d read-back doubles and CUB's temporary storage; plus 3 n + 1 + d doubles of
// pinned host memory per call.
// Determinism: no atomics; fixed reduction orders: bit-identical from run to run on one GPU with one stream.
// Checks: as merge_fix_dom, plus weights' shape and values (finite, >= 0), max_iterations >= 1 and
// learned_tolerance >= 0.
//
// Tests: tests/cuda/test_merge_cuda.cu's learned case.


/// Workspace bytes of the device merge_learned of a group of `members` experts of d x d_ff (gated or not),
/// storage W, whose token list holds `tokens` entries before the cap, with or without target weights.
template <class W>
std::size_t merge_learned_workspace_size(const merge_params& params, index_t tokens, index_t members, index_t d,
                                         index_t d_ff, bool gated, bool weighted) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  constexpr const char* fn = "merge_learned_workspace_size";
  moecomp::detail::check_extents(fn, {{"tokens", tokens}, {"members", members}, {"d", d}, {"d_ff", d_ff}});
  MOECOMP_EXPECTS(members >= 1, fn, ": members must be >= 1, got ", members);
  MOECOMP_EXPECTS(params.token_cap >= 0, fn, ": params.token_cap must be >= 0, got ", params.token_cap);
  const index_t kept = detail::capped_count(tokens, params.token_cap);
  if (kept == 0) return 0;
  return cuda_detail::make_learned_plan<W>(fn, kept, members, d, d_ff, gated, weighted).bytes;
}

/// The group's learned merge into out (see above), with a caller's workspace.
template <class W>
merge_report merge_learned(const cuda_context& ctx, const merge_params& params,
                           const moe::ffn_expert_stack_device_view<W>& experts, vector_view<const index_t> members,
                           index_t dominant, index_t group,
                           moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>, device_memory>> x,
                           vector_view<const index_t> tokens, matrix_view<const double> weights,
                           const moe::ffn_expert_device_mutable_view<W>& out,
                           vector_view<std::byte, device_memory> workspace) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  constexpr const char* fn = "merge_learned";
  cuda_detail::check_fix_dom_arguments<W>(fn, params, experts, members, dominant, group, x, tokens, out, {});
  cuda_detail::check_learned_arguments(fn, params, tokens.size(), members.size(), weights);
  return cuda_detail::learned_group<W>(fn, ctx, params, experts, members, dominant, group, x, tokens, weights, out,
                                      workspace);
}

/// As above, with the workspace from ctx's allocator.
template <class W>
merge_report merge_learned(const cuda_context& ctx, const merge_params& params,
                           const moe::ffn_expert_stack_device_view<W>& experts, vector_view<const index_t> members,
                           index_t dominant, index_t group,
                           moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>, device_memory>> x,
                           vector_view<const index_t> tokens, matrix_view<const double> weights,
                           const moe::ffn_expert_device_mutable_view<W>& out) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  constexpr const char* fn = "merge_learned";
  cuda_detail::check_fix_dom_arguments<W>(fn, params, experts, members, dominant, group, x, tokens, out, {});
  cuda_detail::check_learned_arguments(fn, params, tokens.size(), members.size(), weights);  // before the allocation
  const moecomp::detail::scoped_workspace workspace(
      ctx, merge_learned_workspace_size<W>(params, tokens.size(), members.size(), experts.d_model(), experts.d_ff(),
                                           experts.gated(), !weights.empty()));
  return merge_learned<W>(ctx, params, experts, members, dominant, group, x, tokens, weights, out, workspace.view());
}

// ---- merge_experts: the whole layer on device views (the host's merge_experts, docs/merge.md "Device layer").
//
//   params:   the host's merge_params, every field read as on the host;
//   experts:  the stack (moe::ffn_expert_stack_device_view<W>, float, double, bfloat16 or half storage);
//   groups:   host memory, E int64 group ids covering 0..g-1, at most 64 members per group;
//   data:     merge_data<A, device_memory>: x (T x d) and the router (E x d, E <= 512 to route) in device memory,
//             frequencies and dominants in host memory; the same rules as the host (which methods need what);
//   out:      merge_device_outputs<W>: the g merged experts and the router rows (device), the map (host).
//   Returns the host's merge_report: method, router rule, coefficients, per group the dominant, the tokens, the
//   merge error (when x is given and params.report_errors) and learned's objectives, the status.
//
// Method (cuda/merge/detail/merge_layer_device.cuh): the host's steps, its bookkeeping by the same host code
// (merge/detail/merge_layer_rules.hpp: dominants, merge order, token sets and caps, fixed coefficients, router
// rows). The tokens are routed on the device (the logits by cuBLAS, gating::route_fixed) and the top-k ids and
// probabilities copied back; each group then runs merge_weighted's kernels (average, uniform, frequency, dominant),
// align::align_experts and the same kernels with the permutations (aligned), merge_fix_dom's or merge_learned's
// steps (fix_dom, learned); the merge error runs the members and the merged expert forward on the device and sums
// the squares by cub::DeviceSegmentedReduce in double.
// Agreement with the host: the same bookkeeping on the same routes gives the same groups, tokens and caps. The
// routes are computed from cuBLAS logits and the device softmax, which agree with the host's to rounding: a token
// whose k-th and (k+1)-th logits are within that rounding may be routed differently. Given the same routes, the
// fixed-coefficient methods' weights are the host's bit for bit, aligned's too when the alignments agree, fix_dom's
// and learned's as merge_fix_dom's and merge_learned's (above); the errors and objectives agree to rounding.
// Synchronisation: SYNCHRONISES ctx.stream: after the routing (to copy the routes back), to copy the router back
// (router rules merged_rows and dominant_row), in every alignment and learned evaluation, and once per group for
// the merge error. The last group's kernels and the router rows' copy may still run when it returns.
// Workspace (merge_experts_workspace_size): the logits (T x E) and routes (T x max(routing_top_k,
// frequency_top_k) ids and probabilities) when routed, then one region reused by every group, sized for the
// largest group with its token counts bounded above (T for a group's tokens, T min(routing_top_k, n) for fix-dom's
// concatenated list, both capped): the gathered tokens, then the method's workspace (align_experts',
// merge_fix_dom's, merge_learned's) or the error's (the router weights, the target and its double accumulator,
// one forward's output and workspace), whichever is larger. From ctx's allocator without a workspace argument.
// Determinism: as the per-group functions: bit-identical from run to run on one GPU with one stream.
// Checks (invalid_argument, on the host before any CUDA call): the host's messages for the stack, the groups,
// params, the data's shapes and the outputs' shapes; x's and the router's values are not checked (device memory);
// at most 64 members per group; E <= 512 when the tokens are routed; cuBLAS's int limits; outputs not
// overlapping the inputs.
//
// Tests: tests/cuda/test_merge_cuda.cu's merge_experts cases (the argument-check case needs no GPU).

/// Workspace bytes of the device merge_experts on these shapes: only the shapes of experts and data (x's rows,
/// whether a router is given) and the host labels are read.
template <class W>
std::size_t merge_experts_workspace_size(const merge_params& params, const moe::ffn_expert_stack_device_view<W>& experts,
                                         vector_view<const std::int64_t> groups,
                                         const merge_data<accumulator_t<W>, device_memory>& data) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  constexpr const char* fn = "merge_experts_workspace_size";
  const index_t g = cuda_detail::check_merge_layer_arguments<W>(fn, params, experts, groups, data, nullptr);
  return cuda_detail::make_layer_plan<W>(fn, params, experts, detail::group_members(groups, g),
                                         data.x.empty() ? 0 : data.x.rows(), !data.x.empty() && !data.router.empty())
      .bytes;
}

/// Merges each group of the device stack (see above), with a caller's workspace.
template <class W>
merge_report merge_experts(const cuda_context& ctx, const merge_params& params,
                           const moe::ffn_expert_stack_device_view<W>& experts, vector_view<const std::int64_t> groups,
                           const merge_data<accumulator_t<W>, device_memory>& data, const merge_device_outputs<W>& out,
                           vector_view<std::byte, device_memory> workspace) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  constexpr const char* fn = "merge_experts";
  const index_t g = cuda_detail::check_merge_layer_arguments<W>(fn, params, experts, groups, data, &out);
  const auto plan = cuda_detail::make_layer_plan<W>(fn, params, experts, detail::group_members(groups, g),
                                                    data.x.empty() ? 0 : data.x.rows(),
                                                    !data.x.empty() && !data.router.empty());
  moecomp::detail::check_workspace(fn, plan.bytes, workspace);
  return cuda_detail::run_merge_layer<W>(fn, ctx, params, plan, experts, groups, g, data, out, workspace.data());
}

/// As above, with the workspace from ctx's allocator.
template <class W>
merge_report merge_experts(const cuda_context& ctx, const merge_params& params,
                           const moe::ffn_expert_stack_device_view<W>& experts, vector_view<const std::int64_t> groups,
                           const merge_data<accumulator_t<W>, device_memory>& data, const merge_device_outputs<W>& out) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  cuda_detail::check_merge_layer_arguments<W>("merge_experts", params, experts, groups, data, &out);  // before the allocation
  const moecomp::detail::scoped_workspace workspace(ctx, merge_experts_workspace_size<W>(params, experts, groups, data));
  return merge_experts<W>(ctx, params, experts, groups, data, out, workspace.view());
}

}  // namespace merge
MOECOMP_NAMESPACE_END
