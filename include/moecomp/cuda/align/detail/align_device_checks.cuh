#pragma once
// The host-side checks of <moecomp/cuda/align/align.cuh>'s device alignment (align_rows, pearson_correlation,
// align_activations, align_experts, align_stack): every argument is checked here, before any CUDA call, with
// align/detail/align_checks.hpp's messages where host and device share an argument.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/align/align_types.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/align/detail/align_checks.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/ffn_checks.hpp>
#include <moecomp/cuda/align/detail/align_device.cuh>
#include <moecomp/cuda/moe/expert.cuh>

MOECOMP_NAMESPACE_BEGIN
namespace align {
namespace cuda_detail {

/// align_rows' checks, all on the host and before any device work.
template <class T>
void check_align_rows_arguments(const char* fn, const align_params& params, matrix_view<const T, device_memory> a,
                                matrix_view<const T, device_memory> b, vector_view<index_t, device_memory> p) {
  detail::check_row_objective(fn, params.objective);
  detail::check_row_alignment(fn, a.rows(), a.cols(), b.rows(), b.cols(), p.size());
  check_int_extents(fn, {{"a's row stride", a.row_stride()}, {"b's row stride", b.row_stride()}});
}

/// pearson_correlation's and align_activations' shape checks, on the host.
template <class T>
void check_activation_strides(const char* fn, matrix_view<const T, device_memory> a,
                              matrix_view<const T, device_memory> b) {
  check_int_extents(fn, {{"the number of tokens", a.rows()}, {"a's neurons", a.cols()}, {"b's neurons", b.cols()},
                         {"a's row stride", a.row_stride()}, {"b's row stride", b.row_stride()}});
}

/// The checks of both pearson_correlation overloads, all on the host before any CUDA call.
template <class T>
void check_correlation_arguments(const char* fn, matrix_view<const T, device_memory> a,
                                 matrix_view<const T, device_memory> b, matrix_view<T, device_memory> out) {
  detail::check_correlation_shapes(fn, a.rows(), a.cols(), b.rows(), b.cols(), out.rows(), out.cols());
  check_activation_strides<T>(fn, a, b);
  check_int_extents(fn, {{"out's row stride", out.row_stride()}});
  moecomp::detail::check_no_overlap(fn, "out", out, "a", a);
  moecomp::detail::check_no_overlap(fn, "out", out, "b", b);
}

/// The two experts of align_experts: the host's shape checks (one shape, the same biases) on device views.
template <class W>
void check_expert_pair(const char* fn, const moe::ffn_expert_device_view<W>& reference,
                       const moe::ffn_expert_device_view<W>& expert) {
  moe::cuda_detail::check_device_expert(fn, reference);
  moe::cuda_detail::check_device_expert(fn, expert);
  detail::check_expert_pair_shape(fn, reference, expert);
}

/// The tokens of the correlation objective (the host's check) and cuBLAS's int limits on the forward's shapes
/// and strides; nothing for weights and inner (x unused).
template <class W>
void check_alignment_tokens(const char* fn, const align_params& params, const moe::ffn_expert_device_view<W>& e,
                            matrix_view<const accumulator_t<W>, device_memory> x) {
  if (params.objective != align_objective::correlation) return;
  moecomp::detail::check_ffn_params(fn, params.forward);
  MOECOMP_EXPECTS(x.rows() >= 2 && x.cols() == e.d_model(), fn,
                  ": x must be tokens x d with at least 2 tokens and d = ", e.d_model(),
                  " for the correlation objective, got ", moecomp::detail::shape_string(x.rows(), x.cols()));
  moe::cuda_detail::check_cublas_extents(fn, e.d_model(), e.d_ff(),
                                         {x.row_stride(), e.w1.row_stride(), e.w3.row_stride()});
}

/// Every check of align_experts, on the host before any CUDA call.
template <class W>
void check_align_experts_arguments(const char* fn, const align_params& params,
                                   const moe::ffn_expert_device_view<W>& reference,
                                   const moe::ffn_expert_device_view<W>& expert,
                                   matrix_view<const accumulator_t<W>, device_memory> x,
                                   vector_view<index_t, device_memory> p) {
  check_expert_pair<W>(fn, reference, expert);
  MOECOMP_EXPECTS(p.size() == reference.d_ff(), fn, ": permutation must have ", reference.d_ff(),
                  " entries (one per neuron), got ", p.size());
  check_alignment_tokens<W>(fn, params, reference, x);
  if (params.objective == align_objective::correlation)
    check_int_extents(fn, {{"the expert's w1 row stride", expert.w1.row_stride()},
                           {"the expert's w3 row stride", expert.w3.row_stride()}});
}

/// A device stack: the host's check_ffn_stack on device views.
template <class W>
void check_device_stack(const char* fn, const moe::ffn_expert_stack_device_view<W>& s) {
  moecomp::detail::check_ffn_stack(fn, s);
}

/// Every check of align_stack, on the host before any CUDA call.
template <class W>
void check_align_stack_arguments(const char* fn, const align_params& params,
                                 const moe::ffn_expert_stack_device_view<W>& stack, index_t reference,
                                 matrix_view<const accumulator_t<W>, device_memory> x,
                                 matrix_view<index_t, device_memory> permutations) {
  check_device_stack<W>(fn, stack);
  MOECOMP_EXPECTS(reference >= 0 && reference < stack.experts(), fn, ": reference must be an expert index in [0, ",
                  stack.experts(), "), got ", reference);
  MOECOMP_EXPECTS(permutations.rows() == stack.experts() && permutations.cols() == stack.d_ff(), fn,
                  ": permutations must be ", moecomp::detail::shape_string(stack.experts(), stack.d_ff()),
                  " (experts x d_ff), got ", moecomp::detail::shape_string(permutations.rows(), permutations.cols()));
  check_alignment_tokens<W>(fn, params, stack.expert(0), x);
}

template <class W>
experts_plan plan_for(const char* fn, const align_params& params, index_t d, index_t d_ff, bool gated, bool has_b1,
                      bool has_b3, index_t tokens) {
  return make_experts_plan<W>(fn, params.objective, d, d_ff, gated, has_b1, has_b3, tokens);
}


}  // namespace cuda_detail
}  // namespace align
MOECOMP_NAMESPACE_END
