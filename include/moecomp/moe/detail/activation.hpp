#pragma once
// The activations' formulas, shared by the host and the device (MOECOMP_HOST_DEVICE).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>
#include <moecomp/moe/ffn_types.hpp>

#include <cmath>

MOECOMP_NAMESPACE_BEGIN
namespace moe {
namespace detail {

/// act(v) in A (float or double): silu v / (1 + e^-v); gelu 0.5 v (1 + erf(v / sqrt 2)); gelu_tanh
/// 0.5 v (1 + tanh(sqrt(2 / pi) (v + 0.044715 v^3))); relu max(v, 0).
template <class A>
MOECOMP_HOST_DEVICE inline A activate(activation act, A v) noexcept {
#if !defined(__CUDA_ARCH__)
  using std::erf;  // the float overloads on the host (CUDA's device math provides them on the device)
  using std::exp;
  using std::tanh;
#endif
  switch (act) {
    case activation::silu: return v / (A(1) + exp(-v));
    case activation::gelu: return A(0.5) * v * (A(1) + erf(v * A(0.70710678118654752440)));
    case activation::gelu_tanh:
      return A(0.5) * v * (A(1) + tanh(A(0.79788456080286535588) * (v + A(0.044715) * v * v * v)));
    case activation::relu: return v > A(0) ? v : A(0);
  }
  return v;
}

}  // namespace detail
}  // namespace moe
MOECOMP_NAMESPACE_END
