#pragma once
// The FFN expert forward on the device: the device overloads of <moecomp/moe/ffn.hpp>'s ffn_forward,
// ffn_hidden and ffn_stack_forward, taking a cuda_context and device views (<moecomp/cuda/moe/expert_types.cuh>).
// The same layout, activations (the host's MOECOMP_HOST_DEVICE formulas, core/detail/activation.hpp), gating and
// biases as the host (docs/moe.md, "Device").
//
//   x: n x d tokens in A = accumulator_t<W> (float; double for double storage), device memory;
//   y = W2 (act(W1 x + b1) * (W3 x + b3)) + b2 (gated) or W2 act(W1 x + b1) + b2, n x d in A;
//   hidden: the n x d_ff activations fed to W2.
//
// Method: chunks of ffn_device_chunk_tokens tokens: x W1^T (and x W3^T) by one cuBLAS GEMM each in A, one
// element-wise kernel for the activation, biases and gate, h W2^T by one GEMM and a kernel for b2. 16-bit
// weights are converted to float into the workspace once per call (3 d d_ff floats at most); float / double
// weights are used in place (any row stride).
// Precision: float accumulation for float, bfloat16 and half storage, double for double, in cuBLAS's GEMMs under
// the handle's math mode (a caller's handle set to TF32 makes the float GEMMs TF32). The results agree with the
// host's to rounding, not bit for bit (other GEMM kernels).
// Asynchrony: asynchronous on ctx.stream (nothing is read back). Workspace: ffn_forward_workspace_size bytes,
// or from ctx's allocator. Determinism: no atomics; cuBLAS GEMMs are run-to-run deterministic on one GPU with
// one stream.
// Checks: shapes as on the host (plus cuBLAS's int limits on d, d_ff and row strides); values are not checked.
//
// Tests: tests/cuda/test_moe_expert_cuda.cu. Whether it has run on a GPU: docs/cuda.md, "Status on hardware".
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/moe/ffn_types.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/cuda/moe/expert_types.cuh>
#include <moecomp/core/detail/ffn_checks.hpp>
#include <moecomp/cuda/moe/detail/expert_device.cuh>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/traits.hpp>

#include <cstddef>

MOECOMP_NAMESPACE_BEGIN
namespace moe {

/// Workspace bytes of the device ffn_forward of n tokens through an expert of d, d_ff (gated or not), storage W.
template <class W>
std::size_t ffn_forward_workspace_size(const ffn_params& params, index_t n, index_t d, index_t d_ff, bool gated) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  constexpr const char* fn = "ffn_forward_workspace_size";
  moecomp::detail::check_ffn_params(fn, params);
  moecomp::detail::check_extents(fn, {{"n", n}, {"d", d}, {"d_ff", d_ff}});
  return cuda_detail::make_ffn_plan<W>(fn, n, d, d_ff, gated, true).bytes;
}

/// y = the expert's output on tokens x, all device memory, with a caller's workspace (see above).
template <class W>
void ffn_forward(const cuda_context& ctx, const ffn_params& params, const ffn_expert_device_view<W>& expert,
                 moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>, device_memory>> x,
                 moecomp::detail::type_identity_t<matrix_view<accumulator_t<W>, device_memory>> y,
                 vector_view<std::byte, device_memory> workspace) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  constexpr const char* fn = "ffn_forward";
  cuda_detail::check_ffn_forward_arguments<W>(fn, params, expert, x, y);
  const auto plan = cuda_detail::make_ffn_plan<W>(fn, x.rows(), expert.d_model(), expert.d_ff(), expert.gated(), true);
  moecomp::detail::check_workspace(fn, plan.bytes, workspace);
  cuda_detail::ffn_forward_device<W>(ctx, params, expert, x, y, {}, plan, workspace.data());
}

/// As above, with the workspace from ctx's allocator.
template <class W>
void ffn_forward(const cuda_context& ctx, const ffn_params& params, const ffn_expert_device_view<W>& expert,
                 moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>, device_memory>> x,
                 moecomp::detail::type_identity_t<matrix_view<accumulator_t<W>, device_memory>> y) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  cuda_detail::check_ffn_forward_arguments<W>("ffn_forward", params, expert, x, y);  // before the allocation
  const moecomp::detail::scoped_workspace workspace(
      ctx, ffn_forward_workspace_size<W>(params, x.rows(), expert.d_model(), expert.d_ff(), expert.gated()));
  ffn_forward<W>(ctx, params, expert, x, y, workspace.view());
}

/// The hidden activations h (n x d_ff) the expert feeds to W2, workspace from ctx's allocator.
template <class W>
void ffn_hidden(const cuda_context& ctx, const ffn_params& params, const ffn_expert_device_view<W>& expert,
                moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>, device_memory>> x,
                moecomp::detail::type_identity_t<matrix_view<accumulator_t<W>, device_memory>> hidden) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  constexpr const char* fn = "ffn_hidden";
  moecomp::detail::check_ffn_params(fn, params);
  cuda_detail::check_device_expert(fn, expert);
  moecomp::detail::check_tokens(fn, expert.d_model(), x.rows(), x.cols(), "hidden", hidden.rows(), hidden.cols(),
                       expert.d_ff());
  moecomp::detail::check_no_overlap(fn, "hidden", hidden, "x", x);
  cuda_detail::check_cublas_extents(fn, expert.d_model(), expert.d_ff(),
                                    {x.row_stride(), hidden.row_stride(), expert.w1.row_stride(),
                                     expert.w3.row_stride()});
  const auto plan = cuda_detail::make_ffn_plan<W>(fn, x.rows(), expert.d_model(), expert.d_ff(), expert.gated(), false);
  const moecomp::detail::scoped_workspace workspace(ctx, plan.bytes);
  cuda_detail::ffn_forward_device<W>(ctx, params, expert, x, {}, hidden, plan, workspace.data());
}

/// Every expert of a device stack on the same tokens: y[e] = expert e's output (y: E x n x d), one workspace
/// from ctx's allocator for all experts.
template <class W>
void ffn_stack_forward(const cuda_context& ctx, const ffn_params& params, const ffn_expert_stack_device_view<W>& stack,
                       moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>, device_memory>> x,
                       moecomp::detail::type_identity_t<matrix_stack_view<accumulator_t<W>, device_memory>> y) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  constexpr const char* fn = "ffn_stack_forward";
  moecomp::detail::check_ffn_params(fn, params);
  const index_t e = stack.experts(), d = stack.d_model(), d_ff = stack.d_ff();
  MOECOMP_EXPECTS(e >= 1, fn, ": the stack must hold at least one expert, got 0");
  if (stack.gated()) MOECOMP_EXPECTS(stack.w3.count() == e, fn, ": w3 must hold ", e, " experts like w1, got ", stack.w3.count());
  MOECOMP_EXPECTS(stack.w2.count() == e, fn, ": w2 must hold ", e, " experts like w1, got ", stack.w2.count());
  MOECOMP_EXPECTS(stack.b1.empty() || stack.b1.rows() == e, fn, ": b1 must have one row per expert (", e, "), got ",
                  stack.b1.rows());
  MOECOMP_EXPECTS(stack.b3.empty() || stack.b3.rows() == e, fn, ": b3 must have one row per expert (", e, "), got ",
                  stack.b3.rows());
  MOECOMP_EXPECTS(stack.b2.empty() || stack.b2.rows() == e, fn, ": b2 must have one row per expert (", e, "), got ",
                  stack.b2.rows());
  cuda_detail::check_device_expert(fn, stack.expert(0));
  MOECOMP_EXPECTS(y.count() == e, fn, ": y must hold ", e, " outputs (one per expert), got ", y.count());
  moecomp::detail::check_tokens(fn, d, x.rows(), x.cols(), "each output", y.rows(), y.cols(), d);
  moecomp::detail::check_no_overlap(fn, "y", y, "x", x);
  cuda_detail::check_cublas_extents(fn, d, d_ff,
                                    {x.row_stride(), y.row_stride(), stack.w1.row_stride(), stack.w3.row_stride(),
                                     stack.w2.row_stride()});
  const auto plan = cuda_detail::make_ffn_plan<W>(fn, x.rows(), d, d_ff, stack.gated(), true);
  const moecomp::detail::scoped_workspace workspace(ctx, plan.bytes);
  for (index_t a = 0; a < e; ++a)
    cuda_detail::ffn_forward_device<W>(ctx, params, stack.expert(a), x, y.matrix(a), {}, plan, workspace.data());
}

}  // namespace moe
MOECOMP_NAMESPACE_END
