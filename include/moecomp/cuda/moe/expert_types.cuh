#pragma once
// Device FFN experts (<moecomp/cuda/moe/expert.cuh>): the device twins of <moecomp/moe/ffn_types.hpp>'s views,
// the same layout (nn.Linear: W1, W3 d_ff x d, W2 d x d_ff, biases b1, b3 d_ff and b2 d) and storage types
// (float, double, bfloat16, half) over device memory. The activation and ffn_params are the host's.
// Documentation: docs/moe.md, "Device".
//
// This header needs no CUDA header: the views are plain host types over device addresses.
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/moe/ffn_types.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace moe {

/// One expert in device memory: the device twin of ffn_expert_view (w3, b1, b3, b2 may be empty).
template <class W>
struct ffn_expert_device_view {
  matrix_view<const W, device_memory> w1;  // d_ff x d
  matrix_view<const W, device_memory> w3;  // d_ff x d, or empty
  matrix_view<const W, device_memory> w2;  // d x d_ff
  vector_view<const W, device_memory> b1, b3, b2;
  index_t d_model() const noexcept { return w1.cols(); }
  index_t d_ff() const noexcept { return w1.rows(); }
  bool gated() const noexcept { return !w3.empty(); }
};

/// One expert's writable device storage (merging's and permute_neurons' output): the device twin of
/// ffn_expert_mutable_view.
template <class W>
struct ffn_expert_device_mutable_view {
  matrix_view<W, device_memory> w1, w3, w2;
  vector_view<W, device_memory> b1, b3, b2;
  index_t d_model() const noexcept { return w1.cols(); }
  index_t d_ff() const noexcept { return w1.rows(); }
  bool gated() const noexcept { return !w3.empty(); }
  ffn_expert_device_view<W> as_const() const noexcept { return {w1, w3, w2, b1, b3, b2}; }
};

/// E experts in device memory: the device twin of ffn_expert_stack_view.
template <class W>
struct ffn_expert_stack_device_view {
  matrix_stack_view<const W, device_memory> w1, w3, w2;
  matrix_view<const W, device_memory> b1, b3, b2;
  index_t experts() const noexcept { return w1.count(); }
  index_t d_model() const noexcept { return w1.cols(); }
  index_t d_ff() const noexcept { return w1.rows(); }
  bool gated() const noexcept { return !w3.empty(); }
  ffn_expert_device_view<W> expert(index_t e) const {
    ffn_expert_device_view<W> v{w1.matrix(e), w3.empty() ? matrix_view<const W, device_memory>() : w3.matrix(e),
                                w2.matrix(e), {}, {}, {}};
    if (!b1.empty()) v.b1 = vector_view<const W, device_memory>(b1.row_ptr(e), b1.cols());
    if (!b3.empty()) v.b3 = vector_view<const W, device_memory>(b3.row_ptr(e), b3.cols());
    if (!b2.empty()) v.b2 = vector_view<const W, device_memory>(b2.row_ptr(e), b2.cols());
    return v;
  }
};

/// E experts' writable device storage (the device merge_experts' output): the device twin of
/// ffn_expert_stack_mutable_view.
template <class W>
struct ffn_expert_stack_device_mutable_view {
  matrix_stack_view<W, device_memory> w1, w3, w2;
  matrix_view<W, device_memory> b1, b3, b2;
  index_t experts() const noexcept { return w1.count(); }
  index_t d_model() const noexcept { return w1.cols(); }
  index_t d_ff() const noexcept { return w1.rows(); }
  bool gated() const noexcept { return !w3.empty(); }
  ffn_expert_device_mutable_view<W> expert(index_t e) const {
    ffn_expert_device_mutable_view<W> v{w1.matrix(e), w3.empty() ? matrix_view<W, device_memory>() : w3.matrix(e),
                                        w2.matrix(e), {}, {}, {}};
    if (!b1.empty()) v.b1 = vector_view<W, device_memory>(b1.row_ptr(e), b1.cols());
    if (!b3.empty()) v.b3 = vector_view<W, device_memory>(b3.row_ptr(e), b3.cols());
    if (!b2.empty()) v.b2 = vector_view<W, device_memory>(b2.row_ptr(e), b2.cols());
    return v;
  }
  ffn_expert_stack_device_view<W> as_const() const noexcept { return {w1, w3, w2, b1, b3, b2}; }
};

/// Tokens per chunk of the device forward: bounds its workspace to chunk x d_ff (x 2 gated) elements.
inline constexpr index_t ffn_device_chunk_tokens = 8192;

}  // namespace moe
MOECOMP_NAMESPACE_END
