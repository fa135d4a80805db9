#pragma once
// HSIC and CKA (centered kernel alignment) on the host: one pair, the all-pairs matrix of a stack of
// experts, and the minibatch accumulator of Nguyen et al. (2021). Documentation: docs/similarity.md.
//
//   x (n x dx), y (n x dy): the same n samples (tokens) in two representations, float or double;
//   kernels linear (K = X X^T) or RBF (explicit sigma, or Kornblith's median heuristic);
//   HSIC_0 (biased, Gretton) or HSIC_1 (unbiased, Song et al. 2012; n >= 4); CKA or debiased CKA.
//
// Results agree with Kornblith et al.'s reference formulas (gram_linear, gram_rbf, center_gram, cka,
// feature_space_linear_cka) to rounding: the pair is computed in double whatever T is. Numerically:
// columns are centred in double and each input is scaled by its Frobenius norm before any product (offsets
// of 1e4 or scales of 1e-6 / 1e6 in float32 do not change the answer); a Gram is centred by its row means,
// never by H K H products; Gram inner products are direct double sums. An undefined CKA (a constant input, a
// zero RBF median, a non-positive unbiased self-HSIC) is reported in the result's status with value 0: never
// NaN, never an exception. Debiased CKA can be negative; it is reported as is.
//
// Routes (linear kernel): feature, ||X^T Y||_F^2 from cross-covariance blocks, O(n dx dy); gram, n x n Grams
// and their inner products, O(n^2 (dx + dy)); automatic picks the cheaper (resolved_cka_route). RBF is gram.
//
// The all-pairs matrix of E experts' outputs on one token set (E x n x d) never runs E^2 separate CKAs: each
// input is centred and scaled once, each Gram formed once (upper-triangle 256 x 256 tiles, one GEMM each),
// and all pairwise Frobenius products come from one GEMM per tile over the vectorised Grams, accumulated
// in double (or, on the feature route, one GEMM per pair over the samples). It works in T.
//
// Determinism: bit-identical at any thread count (fixed tiles, single-threaded GEMMs, fixed sum orders).
// Complexity: pair O(n d^2) or O(n^2 d); matrix gram E n^2 d / 2 + E^2 n^2 / 2 flops and E n^2 / 2 elements
// of T of workspace, feature E^2 n d^2 / 2 flops.
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/similarity/cka_types.hpp>
#include <moecomp/similarity/detail/cka_checks.hpp>
#include <moecomp/similarity/detail/cka_host.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/traits.hpp>

#include <algorithm>
#include <cmath>

MOECOMP_NAMESPACE_BEGIN
namespace similarity {

/// CKA, debiased CKA and the three HSICs of x and y (see above). Throws invalid_argument for unequal sample
/// counts, too few samples, bad parameters or non-finite values.
template <class T>
cka_result cka(const host_context& ctx, const cka_params& params,
               moecomp::detail::type_identity_t<matrix_view<const T>> x,
               moecomp::detail::type_identity_t<matrix_view<const T>> y) {
  static_assert(moecomp::detail::is_real_v<T>, "cka: T must be float or double");
  constexpr const char* fn = "cka";
  detail::check_cka_params(fn, params);
  detail::check_cka_pair_shapes(fn, params, x.rows(), x.cols(), y.rows(), y.cols());
  moecomp::detail::check_finite(fn, "x", x, ctx.threads());
  moecomp::detail::check_finite(fn, "y", y, ctx.threads());
  return detail::cka_pair<T>(ctx, params, x, y);
}

/// HSIC(x, y) alone (HSIC_0, or HSIC_1 with params.unbiased), in the features' units.
template <class T>
double hsic(const host_context& ctx, const cka_params& params, moecomp::detail::type_identity_t<matrix_view<const T>> x,
            moecomp::detail::type_identity_t<matrix_view<const T>> y) {
  return cka<T>(ctx, params, x, y).hsic_xy;
}

/// The E x E CKA matrix of a stack of E inputs on the same n samples (features: E x n x d), into out (E x E,
/// double; symmetric, 1 on the diagonal of defined inputs; undefined pairs 0 and counted in the result).
template <class T>
cka_matrix_result cka_matrix(const host_context& ctx, const cka_params& params,
                             moecomp::detail::type_identity_t<matrix_stack_view<const T>> features,
                             matrix_view<double> out) {
  static_assert(moecomp::detail::is_real_v<T>, "cka_matrix: T must be float or double");
  constexpr const char* fn = "cka_matrix";
  detail::check_cka_params(fn, params);
  detail::check_cka_matrix_shapes(fn, params, features.count(), features.rows(), features.cols(), out.rows(),
                                  out.cols());
  for (index_t e = 0; e < features.count(); ++e)
    moecomp::detail::check_finite(fn, "features", features.matrix(e), ctx.threads());
  return detail::cka_all_pairs<T>(ctx, params, features, out);
}

/// Minibatch CKA (Nguyen et al. 2021): tokens arrive in chunks of any size; every complete batch of
/// `batch_size` tokens contributes its HSIC(x, y), HSIC(x, x) and HSIC(y, y) (HSIC_1 with params.unbiased,
/// as Nguyen et al.), and the result is sum HSIC_xy / sqrt(sum HSIC_xx sum HSIC_yy). Batches are cut from
/// the token stream at multiples of batch_size, so the value does not depend on how the stream was chunked.
/// Tokens of an incomplete last batch wait (pending()) and are not counted. The host_context must outlive
/// the accumulator.
template <class T>
class minibatch_cka {
 public:
  minibatch_cka(const host_context& ctx, const cka_params& params, index_t batch_size, index_t x_features,
                index_t y_features)
      : ctx_(&ctx),
        params_(params),
        batch_(batch_size),
        dx_(x_features),
        dy_(y_features),
        x_(ctx, checked_size(params, batch_size, x_features, y_features, x_features)),
        y_(ctx, static_cast<std::size_t>(batch_size * y_features)) {}

  /// Appends tokens: x (m x dx) and y (m x dy), the same m >= 0 rows.
  void add(moecomp::detail::type_identity_t<matrix_view<const T>> x,
           moecomp::detail::type_identity_t<matrix_view<const T>> y) {
    constexpr const char* fn = "minibatch_cka::add";
    MOECOMP_EXPECTS(x.rows() == y.rows(), fn, ": x and y must have the same number of tokens (rows), got ", x.rows(),
                    " and ", y.rows());
    MOECOMP_EXPECTS(x.cols() == dx_ && y.cols() == dy_, fn, ": x and y must have ", dx_, " and ", dy_,
                    " features (columns), got ", x.cols(), " and ", y.cols());
    moecomp::detail::check_finite(fn, "x", x);
    moecomp::detail::check_finite(fn, "y", y);
    for (index_t i = 0; i < x.rows(); ++i) {
      std::copy(x.row_ptr(i), x.row_ptr(i) + dx_, x_.data() + pending_ * dx_);
      std::copy(y.row_ptr(i), y.row_ptr(i) + dy_, y_.data() + pending_ * dy_);
      if (++pending_ == batch_) flush_batch();
    }
  }

  /// The CKA over the complete batches so far; status non_positive_self_hsic while no batch is complete
  /// (the sums are 0).
  cka_result result() const {
    cka_result r = sums_;
    r.route = resolved_cka_route(params_, batch_, dx_, dy_);
    r.status = status_;
    if (r.status == cka_status::ok && !(r.hsic_xx > 0 && r.hsic_yy > 0)) r.status = cka_status::non_positive_self_hsic;
    r.cka = r.status == cka_status::ok ? r.hsic_xy / std::sqrt(r.hsic_xx * r.hsic_yy) : 0.0;
    return r;
  }
  index_t batches() const noexcept { return batches_; }
  index_t pending() const noexcept { return pending_; }

 private:
  static std::size_t checked_size(const cka_params& params, index_t batch_size, index_t dx, index_t dy, index_t d) {
    constexpr const char* fn = "minibatch_cka";
    detail::check_cka_params(fn, params);
    MOECOMP_EXPECTS(batch_size >= (params.unbiased ? 4 : 2), fn, ": batch_size must be >= ", params.unbiased ? 4 : 2,
                    params.unbiased ? " (the unbiased HSIC needs 4 samples)" : "", ", got ", batch_size);
    MOECOMP_EXPECTS(dx >= 1 && dy >= 1, fn, ": x_features and y_features must be >= 1, got ", dx, " and ", dy);
    return static_cast<std::size_t>(batch_size * d);
  }

  void flush_batch() {
    const cka_result b = detail::cka_pair<T>(*ctx_, params_, matrix_view<const T>(x_.data(), batch_, dx_),
                                             matrix_view<const T>(y_.data(), batch_, dy_));
    sums_.hsic_xy += b.hsic_xy;
    sums_.hsic_xx += b.hsic_xx;
    sums_.hsic_yy += b.hsic_yy;
    // A zero RBF median leaves that batch's kernel undefined, and so the whole estimate (a constant batch
    // under the linear kernel contributes its HSICs, 0, as the formula says).
    if (status_ == cka_status::ok && b.status == cka_status::zero_median)
      status_ = b.status;
    pending_ = 0;
    ++batches_;
  }

  const host_context* ctx_;
  cka_params params_;
  index_t batch_, dx_, dy_;
  moecomp::detail::host_workspace<T> x_, y_;
  index_t pending_ = 0, batches_ = 0;
  cka_result sums_{};
  cka_status status_ = cka_status::ok;
};

}  // namespace similarity
MOECOMP_NAMESPACE_END
