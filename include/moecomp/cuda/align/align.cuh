#pragma once
// Neuron alignment on the device: permute_neurons, the device overload of <moecomp/align/align.hpp>'s, a
// gather. Documentation: docs/align.md, "Device".
//
//   expert: one expert in device memory (moe::ffn_expert_device_view<W>); p: d_ff neuron ids in device memory;
//   out: the expert's shape (moe::ffn_expert_device_mutable_view<W>), not overlapping it;
//   out's neuron i = the expert's neuron p[i]: rows of W1, W3, b1, b3 and columns of W2 gathered, b2 copied.
//
// Method: the weighted-gather kernels of merging (<moecomp/cuda/core/detail/expert_gather.cuh>) with one member
// and coefficient 1: each value goes through double and back, which is exact, so out holds the expert's values
// bit for bit. Asynchrony: asynchronous on ctx.stream. Workspace: none. Determinism: bit-identical.
// Checks: shapes on the host; p's values are not checked (device memory): it must be a permutation of 0..d_ff-1
// (check it on the host first with align::permute_neurons' rules when it comes from outside).
//
// Hardware: tests/cuda/test_merge_cuda.cu passes on an H100 (2026-11-26); see docs/cuda.md.
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/moe/expert_types.cuh>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/ffn_checks.hpp>
#include <moecomp/cuda/core/detail/expert_gather.cuh>

#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace align {

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
