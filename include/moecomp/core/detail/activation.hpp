#pragma once
// The activations' formulas and derivatives, shared by the host and the device (MOECOMP_HOST_DEVICE): the expert
// forward (moe), the shared-base apply, and learned merging's gradients (merge).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>
#include <moecomp/moe/ffn_types.hpp>

#include <cmath>

MOECOMP_NAMESPACE_BEGIN
namespace detail {

/// act(v) in A (float or double): silu v / (1 + e^-v); gelu 0.5 v (1 + erf(v / sqrt 2)); gelu_tanh
/// 0.5 v (1 + tanh(sqrt(2 / pi) (v + 0.044715 v^3))); relu max(v, 0).
template <class A>
MOECOMP_HOST_DEVICE inline A activate(moe::activation act, A v) noexcept {
#if !defined(__CUDA_ARCH__)
  using std::erf;  // the float overloads on the host (CUDA's device math provides them on the device)
  using std::exp;
  using std::tanh;
#endif
  switch (act) {
    case moe::activation::silu: return v / (A(1) + exp(-v));
    case moe::activation::gelu: return A(0.5) * v * (A(1) + erf(v * A(0.70710678118654752440)));
    case moe::activation::gelu_tanh:
      return A(0.5) * v * (A(1) + tanh(A(0.79788456080286535588) * (v + A(0.044715) * v * v * v)));
    case moe::activation::relu: return v > A(0) ? v : A(0);
  }
  return v;
}

/// d act / dv in A, for the gradients of learned merging coefficients: silu sigma(v) (1 + v (1 - sigma(v)));
/// gelu Phi(v) + v phi(v); gelu_tanh the derivative of the tanh form; relu 1 for v > 0, else 0.
template <class A>
MOECOMP_HOST_DEVICE inline A activate_derivative(moe::activation act, A v) noexcept {
#if !defined(__CUDA_ARCH__)
  using std::erf;
  using std::exp;
  using std::tanh;
#endif
  switch (act) {
    case moe::activation::silu: {
      const A s = A(1) / (A(1) + exp(-v));
      return s * (A(1) + v * (A(1) - s));
    }
    case moe::activation::gelu:
      return A(0.5) * (A(1) + erf(v * A(0.70710678118654752440))) + v * A(0.39894228040143267794) * exp(A(-0.5) * v * v);
    case moe::activation::gelu_tanh: {
      const A c = A(0.79788456080286535588), u = c * (v + A(0.044715) * v * v * v);
      const A t = tanh(u);
      return A(0.5) * (A(1) + t) + A(0.5) * v * (A(1) - t * t) * c * (A(1) + A(3) * A(0.044715) * v * v);
    }
    case moe::activation::relu: return v > A(0) ? A(1) : A(0);
  }
  return A(1);
}

}  // namespace detail
MOECOMP_NAMESPACE_END
