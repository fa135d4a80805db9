#pragma once
// Neuron alignment on the device: the device overloads of <moecomp/align/align.hpp>'s align_rows,
// align_activations, pearson_correlation and permute_neurons, with the same names, argument order, objectives
// and checks, taking a cuda_context and device views. Documentation: docs/align.md, "Device".
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
//   permute_neurons(ctx, expert, p, out)            out's neuron i = the expert's neuron p[i] (a gather).
//
// Method: the host's cost matrices by cuBLAS (<moecomp/cuda/align/detail/align_device.cuh>): squared distances
// as ||a_i||^2 + ||b_j||^2 - 2 a_i . b_j clamped at 0 (the norms in double by cub::DeviceSegmentedReduce, the
// cross term by one GEMM in T), inner products by the GEMM, correlations from the columns centred and scaled
// to unit norm (mean and centred sum of squares in double by cub::DeviceSegmentedReduce, the standardised
// values in T) and one GEMM; then the device auction assignment (<moecomp/cuda/ot/auction_assignment.cuh>,
// automatic epsilon); the reported cost recomputed from the rows (or standardised columns) in double at p.
// The per-element rules are the host's (align/detail/align_rules.hpp, core/detail/correlation_rules.hpp).
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
// passes NaN through.
// Asynchrony: align_rows and align_activations SYNCHRONISE ctx.stream (the auction reads back its progress;
// the cost is read back); p is ready when they return. pearson_correlation and permute_neurons are
// asynchronous on ctx.stream. Without a cuBLAS handle in ctx, the temporary handle's destruction synchronises
// the device.
// Workspace: align_rows: the n x m cost in T, n + m doubles (weights only: the squared norms) and n more (the
// pairs' terms), the auction's (about 40 m bytes) and CUB's temporary storage (align_rows_workspace_size);
// align_activations: (n + m) x tokens values of T (the standardised columns), 2 (n + m) + n doubles, the n x m
// cost and the auction's (align_activations_workspace_size); pearson_correlation the same without the cost, the
// n terms and the auction (pearson_correlation_workspace_size). Without a workspace argument it comes from
// ctx's allocator; permute_neurons needs none.
// Determinism: no atomics in these kernels; the segmented reductions have a fixed order per segment, cuBLAS
// GEMMs are run-to-run deterministic on one GPU with one stream, and the auction is deterministic: p and cost
// are bit-identical from run to run. The correlations and costs agree with the host's to rounding, not bit for
// bit (other GEMM kernels and summation orders).
// Checks (invalid_argument, "function: argument must be X, got Y"): the host's shape checks (align/detail/
// align_checks.hpp), the correlation objective given to align_rows, cuBLAS's int limits on shapes and row
// strides, out overlapping a or b: all on the host before any CUDA call. Then a caller's workspace too small
// (its size comes from CUB's size queries, which read the device's properties). The values of p given to
// permute_neurons are not checked: it must be a permutation of 0..d_ff-1.
//
// Hardware: align_rows, align_activations and pearson_correlation are compiled for sm_80 and sm_90 and have
// not run on a GPU (tests/cuda/test_align_cuda.cu is written, not run). permute_neurons:
// tests/cuda/test_merge_cuda.cu passes on an H100 (2026-11-26); see docs/cuda.md.
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/align/align_types.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/moe/expert_types.cuh>
#include <moecomp/align/detail/align_checks.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/ffn_checks.hpp>
#include <moecomp/core/detail/traits.hpp>
#include <moecomp/cuda/align/detail/align_device.cuh>
#include <moecomp/cuda/core/detail/expert_gather.cuh>
#include <moecomp/cuda/core/detail/workspace.cuh>

#include <cstddef>
#include <vector>

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

}  // namespace cuda_detail

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

namespace cuda_detail {
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
}  // namespace cuda_detail

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
