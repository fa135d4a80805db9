#pragma once
// Parameters and results of HSIC and CKA (<moecomp/similarity/cka.hpp>). Documentation: docs/similarity.md.
//
// For n samples with features X (n x dx) and Y (n x dy), kernels K (of X) and L (of Y), H = I - 11^T/n:
//   biased HSIC (Gretton)    HSIC_0 = <H K H, H L H>_F / (n - 1)^2
//   unbiased HSIC (Song)     HSIC_1 = <K~, L~>_F / (n (n - 3)), K~ the U-centred Gram (Kornblith's
//                            center_gram(unbiased=True)), n >= 4
//   CKA = HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)), with HSIC_0 (cka) or HSIC_1 (debiased CKA).
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>

#include <string>
#include <string_view>

MOECOMP_NAMESPACE_BEGIN
namespace similarity {

/// linear: K = X X^T. rbf: K_ij = exp(-||x_i - x_j||^2 / (2 sigma^2)).
enum class cka_kernel { linear, rbf };

inline const char* to_string(cka_kernel k) noexcept {
  switch (k) {
    case cka_kernel::linear: return "linear";
    case cka_kernel::rbf: return "rbf";
  }
  return "unknown";
}

/// Parses "linear" or "rbf"; throws invalid_argument naming the accepted values otherwise.
inline cka_kernel parse_cka_kernel(std::string_view name) {
  for (cka_kernel k : {cka_kernel::linear, cka_kernel::rbf})
    if (name == to_string(k)) return k;
  MOECOMP_FAIL(error_kind::invalid_argument, "kernel: expected linear or rbf, got '", std::string(name), "'");
}

/// How the products are formed. feature: ||X^T Y||_F^2 from cross-covariances (linear kernel only; cheap
/// when features are fewer than samples). gram: n x n Grams and their Frobenius inner products. automatic:
/// the cheaper by flop count (resolved_cka_route). Both give the same answer to rounding.
enum class cka_route { automatic, feature, gram };

inline const char* to_string(cka_route r) noexcept {
  switch (r) {
    case cka_route::automatic: return "automatic";
    case cka_route::feature: return "feature";
    case cka_route::gram: return "gram";
  }
  return "unknown";
}

/// Parses "automatic", "feature" or "gram"; throws invalid_argument otherwise.
inline cka_route parse_cka_route(std::string_view name) {
  for (cka_route r : {cka_route::automatic, cka_route::feature, cka_route::gram})
    if (name == to_string(r)) return r;
  MOECOMP_FAIL(error_kind::invalid_argument, "route: expected automatic, feature or gram, got '", std::string(name),
               "'");
}

struct cka_params {
  cka_kernel kernel = cka_kernel::linear;
  /// RBF bandwidth in the features' units; 0: Kornblith's median heuristic, sigma^2 = threshold^2 x the
  /// median of the n^2 squared distances (the zero diagonal included), for each input separately.
  double sigma = 0;
  /// The median heuristic's threshold (Kornblith's gram_rbf threshold), > 0.
  double threshold = 1.0;
  /// HSIC_1 (Song et al. 2012) and debiased CKA instead of HSIC_0; needs n >= 4.
  bool unbiased = false;
  cka_route route = cka_route::automatic;
};

/// Why a CKA value is or is not defined. Never NaN, never an exception: an undefined CKA is reported as 0
/// with one of the reasons below.
///  * ok: defined (debiased CKA may still be negative: that is an estimate, reported as is);
///  * constant_input: an input's centred features are all zero (its Gram is zero);
///  * zero_median: the RBF median heuristic gave sigma = 0 (more than half the pairs coincide);
///  * non_positive_self_hsic: an input's HSIC with itself is <= 0 (the unbiased estimate can be).
enum class cka_status { ok, constant_input, zero_median, non_positive_self_hsic };

inline const char* to_string(cka_status s) noexcept {
  switch (s) {
    case cka_status::ok: return "ok";
    case cka_status::constant_input: return "constant_input";
    case cka_status::zero_median: return "zero_median";
    case cka_status::non_positive_self_hsic: return "non_positive_self_hsic";
  }
  return "unknown";
}

struct cka_result {
  /// CKA (or debiased CKA with params.unbiased); 0 when status is not ok.
  double cka = 0;
  /// HSIC_0 or HSIC_1 in the features' own units (see the formulas above).
  double hsic_xy = 0, hsic_xx = 0, hsic_yy = 0;
  cka_status status = cka_status::ok;
  /// The route used (never automatic).
  cka_route route = cka_route::gram;
  /// RBF: the bandwidths used for X and Y, in their units (0 for the linear kernel).
  double sigma_x = 0, sigma_y = 0;
  bool ok() const noexcept { return status == cka_status::ok; }
};

/// The all-pairs matrix's report.
struct cka_matrix_result {
  cka_route route = cka_route::gram;
  /// Pairs (a, b), a <= b, whose CKA is undefined (set to 0 in the matrix); status of the first of them.
  index_t undefined_pairs = 0;
  cka_status first_undefined = cka_status::ok;
  bool ok() const noexcept { return undefined_pairs == 0; }
};

/// The route params ask for on n samples of a dx- and a dy-dimensional input: RBF always gram; linear
/// automatic compares the flops of the feature route, n (dx dy + dx^2 + dy^2), with the gram route's,
/// n^2 (dx + dy) / 2 + 3 n^2 (upper-triangle Grams and their products), and takes the cheaper (feature on a
/// tie).
inline cka_route resolved_cka_route(const cka_params& params, index_t n, index_t dx, index_t dy) noexcept {
  if (params.kernel == cka_kernel::rbf) return cka_route::gram;
  if (params.route != cka_route::automatic) return params.route;
  const double nn = static_cast<double>(n), x = static_cast<double>(dx), y = static_cast<double>(dy);
  const double feature = nn * (x * y + x * x + y * y);
  const double gram = nn * nn * (x + y) / 2 + 3 * nn * nn;
  return feature <= gram ? cka_route::feature : cka_route::gram;
}

/// The route of the all-pairs matrix of E inputs of n x d: feature n d^2 E (E + 1) / 2 flops against gram
/// E n^2 d / 2 + E^2 n^2 / 2.
inline cka_route resolved_cka_matrix_route(const cka_params& params, index_t experts, index_t n, index_t d) noexcept {
  if (params.kernel == cka_kernel::rbf) return cka_route::gram;
  if (params.route != cka_route::automatic) return params.route;
  const double e = static_cast<double>(experts), nn = static_cast<double>(n), dd = static_cast<double>(d);
  const double feature = nn * dd * dd * e * (e + 1) / 2;
  const double gram = e * nn * nn * dd / 2 + e * e * nn * nn / 2;
  return feature <= gram ? cka_route::feature : cka_route::gram;
}

}  // namespace similarity
MOECOMP_NAMESPACE_END
