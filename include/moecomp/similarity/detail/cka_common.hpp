#pragma once
// What the host and the device CKA share after the products are formed (no Eigen, no CUDA): the HSIC
// normaliser and units, and the CKA with its undefined cases.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/similarity/cka_types.hpp>

#include <cmath>
#include <limits>

MOECOMP_NAMESPACE_BEGIN
namespace similarity {
namespace detail {

/// Self-products at or below this count as <= 0: the scaled inputs have Frobenius norm 1, so a biased
/// self-product is at least 1 / min(n, d), and what rounding leaves of a zero is a few eps(W).
template <class W>
constexpr double self_product_floor() noexcept {
  return 64.0 * static_cast<double>(std::numeric_limits<W>::epsilon());
}

/// HSIC normaliser: (n - 1)^2 (biased) or n (n - 3) (unbiased).
inline double hsic_denominator(const cka_params& params, index_t n) noexcept {
  const double m = static_cast<double>(n);
  return params.unbiased ? m * (m - 3) : (m - 1) * (m - 1);
}

/// HSIC of two inputs in their own units from the product of their scaled forms (scales: the Frobenius norms
/// of the centred features; the RBF kernel does not scale).
inline double hsic_in_units(const cka_params& params, index_t n, double product, double scale_a, double scale_b) {
  const double units = params.kernel == cka_kernel::linear ? scale_a * scale_a * scale_b * scale_b : 1.0;
  return product * units / hsic_denominator(params, n);
}

/// CKA from the products, or the reason it is undefined (value 0); W is the work type of the products.
template <class W>
double cka_from_products(double pab, double paa, double pbb, cka_status status_a, cka_status status_b,
                         cka_status& status) {
  status = status_a != cka_status::ok ? status_a : status_b;
  if (status == cka_status::ok && !(paa > self_product_floor<W>() && pbb > self_product_floor<W>()))
    status = cka_status::non_positive_self_hsic;
  if (status != cka_status::ok) return 0.0;
  return pab / std::sqrt(paa * pbb);
}

}  // namespace detail
}  // namespace similarity
MOECOMP_NAMESPACE_END
