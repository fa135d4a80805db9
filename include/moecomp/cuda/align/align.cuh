#pragma once
// Neuron alignment on the device: the device overloads of <moecomp/align/align.hpp>'s align_rows,
// align_activations, pearson_correlation, align_experts, align_stack and permute_neurons, with the same names,
// argument order, objectives, result types and checks, taking a cuda_context and device views. Documentation:
// docs/align.md, "Device".
//
//   align_rows(ctx, params, a, b, p[, workspace])   a: n x f, b: m x f design rows (n <= m), T float or double;
//                                     p (n, device): p[i] = the row of b matched to row i of a, minimising
//                                     sum ||a_i - b_p(i)||^2 (objective weights) or maximising sum <a_i, b_p(i)>
//                                     (inner);
//   align_activations(ctx, a, b, p[, workspace])    a: tokens x n, b: tokens x m activations (n <= m,
//                                     tokens >= 2); p (n, device): the neuron of b matched to neuron i of a,
//                                     maximising the sum of Pearson correlations;
//   pearson_correlation(ctx, a, b, out[, workspace])  out (n x m, device, any row stride) = the correlations of
//                                     a's columns with b's (the cost matrix of align_activations; merging's
//                                     fix-dom ranks by them);
//   align_experts(ctx, params, reference, expert, x, p[, workspace])  two device experts of one shape (W float,
//                                     double, bfloat16 or half); p (d_ff, device): the expert's neuron matched to
//                                     the reference's neuron i, by design rows (weights, inner; x unused) or by
//                                     the hidden activations on the device tokens x (correlation);
//   align_stack(ctx, params, stack, reference, x, permutations[, workspace])  permutations (E x d_ff, device,
//                                     any row stride): row e = align_experts(stack[reference], stack[e]), the
//                                     reference's row the identity (the host's targets: one expert of the stack,
//                                     by index, such as a cluster's dominant one);
//   permute_neurons(ctx, expert, p, out)            out's neuron i = the expert's neuron p[i] (a gather).
//
// Method: the host's cost matrices by cuBLAS (<moecomp/cuda/align/detail/align_device.cuh>): squared distances
// as ||a_i||^2 + ||b_j||^2 - 2 a_i . b_j clamped at 0 (the norms in double by cub::DeviceSegmentedReduce, the
// cross term by one GEMM in T), inner products by the GEMM, correlations from the columns centred and scaled
// to unit norm (mean and centred sum of squares in double by cub::DeviceSegmentedReduce, the standardised
// values in T) and one GEMM; then the device auction assignment (<moecomp/cuda/ot/auction_assignment.cuh>,
// automatic epsilon); the reported cost recomputed from the rows (or standardised columns) in double at p.
// The per-element rules are the host's (align/detail/align_rules.hpp, core/detail/correlation_rules.hpp).
// align_experts / align_stack: each expert's design rows [W1 | b1 | W3 | b3 | W2^T] built on the device in
// accumulator_t<W> (float for float, bfloat16 and half; double for double) with the host's column layout and
// conversions (align::detail::make_design_layout / design_source, convert_to: the same values as the host's
// design_matrix), by an element-wise kernel for the row pieces and a tiled transpose for W2^T; or, for
// correlation, each expert's hidden activations on x by the device expert forward (<moecomp/cuda/moe/expert.cuh>,
// params.forward); then align_rows / align_activations above. align_stack builds the reference's rows once.
// permute_neurons: the weighted-gather kernels of merging (<moecomp/cuda/core/detail/expert_gather.cuh>) with one
// member and coefficient 1: each value goes through double and back, which is exact.
//
// Differences from the host: the assignment is the auction's, within its proven bound of the optimum of the
// cost matrix in T (m * final epsilon = 1e-6 x the range of the costs for non-integer costs, docs/
// linear_assignment.md), not the host's exact Jonker-Volgenant answer: where several assignments are within
// that bound of the optimum, p may differ from the host's (an optimum ahead of every other assignment by more
// than the bound, a planted permutation say, is found exactly). align_result has the host's fields: cost (the
// objective at the returned p, in double, summed in row order) and status (ok, or the auction's status when it
// stops early, not_converged if its bidding stalls; then cost is 0 and unassigned entries of p are -1). Input
// values are not checked (device memory): a NaN or infinity, or a cost that overflows T, makes the cost matrix
// non-finite, which the auction refuses (invalid_argument naming auction_assignment); pearson_correlation
// passes NaN through. The correlation objective's activations come from cuBLAS GEMMs, so they (and the costs)
// agree with the host's to rounding.
// Asynchrony: align_rows, align_activations, align_experts and align_stack SYNCHRONISE ctx.stream (the auction
// reads back its progress; the cost is read back; align_stack once per aligned expert); p / permutations are
// ready when they return. pearson_correlation and permute_neurons are asynchronous on ctx.stream. Without a
// cuBLAS handle in ctx, the temporary handle's destruction synchronises the device.
// Workspace: align_rows: the n x m cost in T, n + m doubles (weights only: the squared norms) and n more (the
// pairs' terms), the auction's (about 40 m bytes) and CUB's temporary storage (align_rows_workspace_size);
// align_activations: (n + m) x tokens values of T (the standardised columns), 2 (n + m) + n doubles, the n x m
// cost and the auction's (align_activations_workspace_size); pearson_correlation the same without the cost, the
// n terms and the auction (pearson_correlation_workspace_size); align_experts and align_stack (the same size,
// align_experts_workspace_size / align_stack_workspace_size from the views' shapes and the token count): two
// d_ff x width design matrices and align_rows' workspace (weights, inner), or two tokens x d_ff activation
// matrices and the larger of align_activations' workspace and the device forward's (16-bit weights converted
// to float, the up-projection chunk). Without a workspace argument it comes from ctx's allocator;
// permute_neurons needs none.
// Determinism: no atomics in these kernels; the segmented reductions have a fixed order per segment, cuBLAS
// GEMMs are run-to-run deterministic on one GPU with one stream, and the auction is deterministic: p and cost
// are bit-identical from run to run. The correlations and costs agree with the host's to rounding, not bit for
// bit (other GEMM kernels and summation orders); the design rows are the host's values exactly.
// Checks (invalid_argument, "function: argument must be X, got Y"): the host's shape checks (align/detail/
// align_checks.hpp; for experts and stacks the host's messages), the correlation objective given to align_rows,
// tokens missing for the correlation objective, cuBLAS's int limits on shapes and row strides, out overlapping
// a or b: all on the host before any CUDA call. Then a caller's workspace too small (its size comes from CUB's
// size queries, which read the device's properties). The values of p given to permute_neurons are not checked:
// it must be a permutation of 0..d_ff-1. The weights are not checked for finiteness (device memory).
//
// Tests: tests/cuda/test_align_cuda.cu; permute_neurons: tests/cuda/test_merge_cuda.cu. Whether they have run
// on a GPU: docs/cuda.md, "Status on hardware".
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/align/align_types.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/moe/ffn_types.hpp>
#include <moecomp/cuda/moe/expert_types.cuh>
#include <moecomp/align/detail/align_checks.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/ffn_checks.hpp>
#include <moecomp/core/detail/traits.hpp>
#include <moecomp/cuda/align/detail/align_device.cuh>
#include <moecomp/cuda/align/detail/align_device_checks.cuh>
#include <moecomp/cuda/core/detail/expert_gather.cuh>
#include <moecomp/cuda/core/detail/workspace.cuh>
#include <moecomp/cuda/moe/expert.cuh>

#include <cstddef>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace align {


/// Workspace bytes of the device align_rows on a: n x f and b: m x f, element type T, under params.objective.
template <class T>
std::size_t align_rows_workspace_size(const align_params& params, index_t n, index_t m, index_t f) {
  moecomp::detail::check_device_element_type<T>();
  constexpr const char* fn = "align_rows_workspace_size";
  moecomp::detail::check_extents(fn, {{"n", n}, {"m", m}, {"f", f}});
  return cuda_detail::make_rows_plan<T>(fn, params.objective, n, m, f).bytes;
}

/// p[i] = the row of b matched to row i of a under params.objective (weights or inner), all device memory, with a
/// caller's workspace (see above). Synchronises; returns the objective at p and the status.
template <class T>
align_result align_rows(const cuda_context& ctx, const align_params& params,
                        moecomp::detail::type_identity_t<matrix_view<const T, device_memory>> a,
                        moecomp::detail::type_identity_t<matrix_view<const T, device_memory>> b,
                        vector_view<index_t, device_memory> p, vector_view<std::byte, device_memory> workspace) {
  moecomp::detail::check_device_element_type<T>();
  constexpr const char* fn = "align_rows";
  cuda_detail::check_align_rows_arguments<T>(fn, params, a, b, p);
  const auto plan = cuda_detail::make_rows_plan<T>(fn, params.objective, a.rows(), b.rows(), a.cols());
  moecomp::detail::check_workspace(fn, plan.bytes, workspace);
  return cuda_detail::run_align_rows<T>(ctx, plan, a, b, p, workspace.data());
}

/// As above, with the workspace from ctx's allocator.
template <class T>
align_result align_rows(const cuda_context& ctx, const align_params& params,
                        moecomp::detail::type_identity_t<matrix_view<const T, device_memory>> a,
                        moecomp::detail::type_identity_t<matrix_view<const T, device_memory>> b,
                        vector_view<index_t, device_memory> p) {
  moecomp::detail::check_device_element_type<T>();
  cuda_detail::check_align_rows_arguments<T>("align_rows", params, a, b, p);
  const moecomp::detail::scoped_workspace workspace(
      ctx, align_rows_workspace_size<T>(params, a.rows(), b.rows(), a.cols()));
  return align_rows<T>(ctx, params, a, b, p, workspace.view());
}


/// Workspace bytes of the device pearson_correlation of a: tokens x n with b: tokens x m, element type T.
template <class T>
std::size_t pearson_correlation_workspace_size(index_t tokens, index_t n, index_t m) {
  moecomp::detail::check_device_element_type<T>();
  constexpr const char* fn = "pearson_correlation_workspace_size";
  moecomp::detail::check_extents(fn, {{"tokens", tokens}, {"n", n}, {"m", m}});
  return cuda_detail::make_correlation_plan<T>(fn, tokens, n, m, false).bytes;
}

/// out (n x m) = the Pearson correlations of a's columns (tokens x n) with b's (tokens x m) over the tokens, all
/// device memory, with a caller's workspace (see above). Asynchronous.
template <class T>
void pearson_correlation(const cuda_context& ctx, moecomp::detail::type_identity_t<matrix_view<const T, device_memory>> a,
                         moecomp::detail::type_identity_t<matrix_view<const T, device_memory>> b,
                         moecomp::detail::type_identity_t<matrix_view<T, device_memory>> out,
                         vector_view<std::byte, device_memory> workspace) {
  moecomp::detail::check_device_element_type<T>();
  constexpr const char* fn = "pearson_correlation";
  cuda_detail::check_correlation_arguments<T>(fn, a, b, out);
  const auto plan = cuda_detail::make_correlation_plan<T>(fn, a.rows(), a.cols(), b.cols(), false);
  moecomp::detail::check_workspace(fn, plan.bytes, workspace);
  const moecomp::detail::cublas_session blas(ctx);
  cuda_detail::correlation_into<T>(ctx, blas, plan, moecomp::detail::aligned_base(workspace.data()), a, b, out.data(),
                                   out.row_stride());
}

/// As above, with the workspace from ctx's allocator.
template <class T>
void pearson_correlation(const cuda_context& ctx, moecomp::detail::type_identity_t<matrix_view<const T, device_memory>> a,
                         moecomp::detail::type_identity_t<matrix_view<const T, device_memory>> b,
                         moecomp::detail::type_identity_t<matrix_view<T, device_memory>> out) {
  moecomp::detail::check_device_element_type<T>();
  constexpr const char* fn = "pearson_correlation";
  cuda_detail::check_correlation_arguments<T>(fn, a, b, out);
  const moecomp::detail::scoped_workspace workspace(ctx, pearson_correlation_workspace_size<T>(a.rows(), a.cols(), b.cols()));
  pearson_correlation<T>(ctx, a, b, out, workspace.view());
}

/// Workspace bytes of the device align_activations on a: tokens x n and b: tokens x m, element type T.
template <class T>
std::size_t align_activations_workspace_size(index_t tokens, index_t n, index_t m) {
  moecomp::detail::check_device_element_type<T>();
  constexpr const char* fn = "align_activations_workspace_size";
  moecomp::detail::check_extents(fn, {{"tokens", tokens}, {"n", n}, {"m", m}});
  return cuda_detail::make_correlation_plan<T>(fn, tokens, n, m, true).bytes;
}

/// p[i] = the neuron (column) of b matched to neuron i of a, maximising the sum of Pearson correlations over the
/// tokens (rows), all device memory, with a caller's workspace (see above). Synchronises.
template <class T>
align_result align_activations(const cuda_context& ctx,
                               moecomp::detail::type_identity_t<matrix_view<const T, device_memory>> a,
                               moecomp::detail::type_identity_t<matrix_view<const T, device_memory>> b,
                               vector_view<index_t, device_memory> p, vector_view<std::byte, device_memory> workspace) {
  moecomp::detail::check_device_element_type<T>();
  constexpr const char* fn = "align_activations";
  detail::check_activation_alignment(fn, a.rows(), a.cols(), b.rows(), b.cols(), p.size());
  cuda_detail::check_activation_strides<T>(fn, a, b);
  const auto plan = cuda_detail::make_correlation_plan<T>(fn, a.rows(), a.cols(), b.cols(), true);
  moecomp::detail::check_workspace(fn, plan.bytes, workspace);
  return cuda_detail::run_align_activations<T>(ctx, plan, a, b, p, workspace.data());
}

/// As above, with the workspace from ctx's allocator.
template <class T>
align_result align_activations(const cuda_context& ctx,
                               moecomp::detail::type_identity_t<matrix_view<const T, device_memory>> a,
                               moecomp::detail::type_identity_t<matrix_view<const T, device_memory>> b,
                               vector_view<index_t, device_memory> p) {
  moecomp::detail::check_device_element_type<T>();
  constexpr const char* fn = "align_activations";
  detail::check_activation_alignment(fn, a.rows(), a.cols(), b.rows(), b.cols(), p.size());
  cuda_detail::check_activation_strides<T>(fn, a, b);
  const moecomp::detail::scoped_workspace workspace(ctx, align_activations_workspace_size<T>(a.rows(), a.cols(), b.cols()));
  return align_activations<T>(ctx, a, b, p, workspace.view());
}


/// Workspace bytes of the device align_experts of two experts shaped like `reference` (only its shapes are read,
/// never its device memory; CUB's size queries read the device's properties), with `tokens` calibration tokens
/// for the correlation objective (ignored for weights and inner).
template <class W>
std::size_t align_experts_workspace_size(const align_params& params, const moe::ffn_expert_device_view<W>& reference,
                                         index_t tokens) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  constexpr const char* fn = "align_experts_workspace_size";
  moe::cuda_detail::check_device_expert(fn, reference);
  moecomp::detail::check_extents(fn, {{"tokens", tokens}});
  return cuda_detail::plan_for<W>(fn, params, reference.d_model(), reference.d_ff(), reference.gated(),
                                  !reference.b1.empty(), !reference.b3.empty(), tokens)
      .bytes;
}

/// p[i] = the expert's neuron matched to the reference's neuron i (p: d_ff entries, device), all device memory,
/// with a caller's workspace (see above): weights / inner on the design rows built on the device (x unused, may
/// be empty), correlation on both experts' hidden activations on the tokens x (n x d in accumulator_t<W>,
/// n >= 2; params.forward runs them). Synchronises; returns the objective at p and the status.
template <class W>
align_result align_experts(const cuda_context& ctx, const align_params& params,
                           const moe::ffn_expert_device_view<W>& reference, const moe::ffn_expert_device_view<W>& expert,
                           moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>, device_memory>> x,
                           vector_view<index_t, device_memory> p, vector_view<std::byte, device_memory> workspace) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  constexpr const char* fn = "align_experts";
  cuda_detail::check_align_experts_arguments<W>(fn, params, reference, expert, x, p);
  const auto plan = cuda_detail::plan_for<W>(fn, params, reference.d_model(), reference.d_ff(), reference.gated(),
                                             !reference.b1.empty(), !reference.b3.empty(), x.rows());
  moecomp::detail::check_workspace(fn, plan.bytes, workspace);
  return cuda_detail::run_align_experts<W>(ctx, params, plan, reference, expert, x, p, workspace.data());
}

/// As above, with the workspace from ctx's allocator.
template <class W>
align_result align_experts(const cuda_context& ctx, const align_params& params,
                           const moe::ffn_expert_device_view<W>& reference, const moe::ffn_expert_device_view<W>& expert,
                           moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>, device_memory>> x,
                           vector_view<index_t, device_memory> p) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  cuda_detail::check_align_experts_arguments<W>("align_experts", params, reference, expert, x, p);
  const moecomp::detail::scoped_workspace workspace(ctx, align_experts_workspace_size<W>(params, reference, x.rows()));
  return align_experts<W>(ctx, params, reference, expert, x, p, workspace.view());
}

/// Workspace bytes of the device align_stack on a stack shaped like `stack` (only its shapes are read), with
/// `tokens` calibration tokens for the correlation objective (ignored for weights and inner). The same as
/// align_experts' for one of its experts: the reference's rows are kept while each other expert's are built.
template <class W>
std::size_t align_stack_workspace_size(const align_params& params, const moe::ffn_expert_stack_device_view<W>& stack,
                                       index_t tokens) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  constexpr const char* fn = "align_stack_workspace_size";
  cuda_detail::check_device_stack<W>(fn, stack);
  moecomp::detail::check_extents(fn, {{"tokens", tokens}});
  return cuda_detail::plan_for<W>(fn, params, stack.d_model(), stack.d_ff(), stack.gated(), !stack.b1.empty(),
                                  !stack.b3.empty(), tokens)
      .bytes;
}

/// Row e of permutations (E x d_ff, device) = align_experts(stack.expert(reference), stack.expert(e)); the
/// reference's own row is the identity. All device memory, with a caller's workspace (see above). The reference's
/// design rows or activations are built once. Synchronises (once per aligned expert); returns the summed cost
/// and the first status that is not ok (ok otherwise).
template <class W>
align_result align_stack(const cuda_context& ctx, const align_params& params,
                         const moe::ffn_expert_stack_device_view<W>& stack, index_t reference,
                         moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>, device_memory>> x,
                         matrix_view<index_t, device_memory> permutations,
                         vector_view<std::byte, device_memory> workspace) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  constexpr const char* fn = "align_stack";
  cuda_detail::check_align_stack_arguments<W>(fn, params, stack, reference, x, permutations);
  const auto plan = cuda_detail::plan_for<W>(fn, params, stack.d_model(), stack.d_ff(), stack.gated(),
                                             !stack.b1.empty(), !stack.b3.empty(), x.rows());
  moecomp::detail::check_workspace(fn, plan.bytes, workspace);
  return cuda_detail::run_align_stack<W>(ctx, params, plan, stack, reference, x, permutations, workspace.data());
}

/// As above, with the workspace from ctx's allocator.
template <class W>
align_result align_stack(const cuda_context& ctx, const align_params& params,
                         const moe::ffn_expert_stack_device_view<W>& stack, index_t reference,
                         moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>, device_memory>> x,
                         matrix_view<index_t, device_memory> permutations) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  cuda_detail::check_align_stack_arguments<W>("align_stack", params, stack, reference, x, permutations);
  const moecomp::detail::scoped_workspace workspace(ctx, align_stack_workspace_size<W>(params, stack, x.rows()));
  return align_stack<W>(ctx, params, stack, reference, x, permutations, workspace.view());
}

/// out's neuron i = the expert's neuron p[i], all device memory (see above).
template <class W>
void permute_neurons(const cuda_context& ctx, const moe::ffn_expert_device_view<W>& expert,
                     vector_view<const index_t, device_memory> p, const moe::ffn_expert_device_mutable_view<W>& out) {
  constexpr const char* fn = "permute_neurons";
  const index_t d_ff = expert.d_ff(), d = expert.d_model();
  moecomp::detail::check_ffn_shapes(fn, d_ff, d, expert.w3.rows(), expert.w3.cols(), expert.w2.rows(),
                                    expert.w2.cols(), expert.b1.size(), expert.b3.size(), expert.b2.size(),
                                    expert.gated());
  MOECOMP_EXPECTS(p.size() == d_ff && (p.empty() || p.stride() == 1), fn, ": permutation must have ", d_ff,
                  " contiguous entries (one per neuron), got ", p.size());
  MOECOMP_EXPECTS(out.d_ff() == d_ff && out.d_model() == d && out.gated() == expert.gated() && out.w2.rows() == d &&
                      out.w2.cols() == d_ff && out.b1.size() == expert.b1.size() && out.b3.size() == expert.b3.size() &&
                      out.b2.size() == expert.b2.size(),
                  fn, ": out must have the expert's shape (d_ff ", d_ff, ", d ", d, "), got d_ff ", out.d_ff(), ", d ",
                  out.d_model());
  for (const auto* b : {&expert.b1, &expert.b3, &expert.b2})
    MOECOMP_EXPECTS(b->empty() || b->stride() == 1, fn, ": biases must be contiguous (stride 1) on the device");
  MOECOMP_EXPECTS((out.b1.empty() || out.b1.stride() == 1) && (out.b3.empty() || out.b3.stride() == 1) &&
                      (out.b2.empty() || out.b2.stride() == 1),
                  fn, ": out's biases must be contiguous (stride 1) on the device");
  moecomp::detail::check_no_overlap(fn, "out.w1", out.w1, "the expert's w1", expert.w1);
  moecomp::detail::check_no_overlap(fn, "out.w2", out.w2, "the expert's w2", expert.w2);
  moecomp::detail::gather_experts<W>(ctx, {expert}, {1.0}, p.data(), 0, out);
}

}  // namespace align
MOECOMP_NAMESPACE_END
