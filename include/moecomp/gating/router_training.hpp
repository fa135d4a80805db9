#pragma once
// SADMoE's router (its Sec. 3.3, Eq. 3): a two-layer network R(z) = |W2 relu(W1 z + b1) + b2| trained per layer to
// predict the l2 norm of every expert's output, so that dynamic-k (R(z)_i >= tau max R(z), gating::route with
// routing_rule::threshold) can execute only the experts that matter for each token. And MoEfication's router
// objective, the baseline the paper compares against, behind the same call. Host only. Documentation:
// docs/gating.md ("Router training").
//
//   init_router_weights(params, d, n, seed, weights)    torch.nn.Linear's default initialisation (uniform in
//                                                       +-1/sqrt(fan_in)) from moecomp's generator
//   train_router(ctx, params, z, y, weights)             minibatch Adam from the given weights (trained in place)
//   router_scores(ctx, params, weights, z, scores)       R(z) for each token (output_norm), sigmoid(u)
//                                                       (moefication)
//
// Shapes: z T x d (tokens), y T x n (targets: moe::expert_output_norms of the split experts for output_norm,
// each expert's hidden-activation sum for moefication), weights w1 d_h x d, b1 d_h, w2 n x d_h, b2 n (b1 and b2
// empty without params.bias). T = float or double. Cost per step O(B d_h (d + n)) in GEMMs.
//
// Determinism: bit-identical weights and losses at any thread count (the GEMMs run in fixed tiles of one
// single-threaded call each; the shuffling is moecomp's generator from params.seed, stream = the epoch).
//
// Example: a router for 32 experts of a layer, trained on its calibration tokens x (T x d):
//
//   moecomp::host_matrix<float> y(T, 32);
//   moe::expert_output_norms<float>(ctx, ffn, experts, x.const_view(), y.view());
//   gating::router_training_params p;                  // d_h 128, Adam lr 1e-3, batch 64, 1 epoch
//   moecomp::host_matrix<float> w1(p.hidden, d), w2(32, p.hidden);
//   gating::router_weights_view<float> w{w1.view(), {}, w2.view(), {}};
//   gating::init_router_weights(p, /*seed=*/0, w);
//   const gating::router_training_result r = gating::train_router<float>(ctx, p, x.const_view(), y.const_view(), w);
#include <moecomp/core/context.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/core/detail/traits.hpp>
#include <moecomp/gating/router_training_types.hpp>
#include <moecomp/gating/detail/router_training_host.hpp>

#include <cmath>

MOECOMP_NAMESPACE_BEGIN
namespace gating {

namespace detail {

template <class T>
void check_router_weights(const char* fn, const router_training_params& p, const router_weights_view<T>& w, index_t d,
                          index_t n) {
  MOECOMP_EXPECTS(p.hidden >= 1, fn, ": params.hidden (d_h) must be >= 1, got ", p.hidden);
  MOECOMP_EXPECTS(w.w1.rows() == p.hidden && w.w1.cols() == d, fn, ": weights.w1 must be ",
                  moecomp::detail::shape_string(p.hidden, d), " (d_h x d), got ",
                  moecomp::detail::shape_string(w.w1.rows(), w.w1.cols()));
  MOECOMP_EXPECTS(w.w2.rows() == n && w.w2.cols() == p.hidden, fn, ": weights.w2 must be ",
                  moecomp::detail::shape_string(n, p.hidden), " (experts x d_h), got ",
                  moecomp::detail::shape_string(w.w2.rows(), w.w2.cols()));
  if (p.bias) {
    MOECOMP_EXPECTS(w.b1.size() == p.hidden && w.b2.size() == n, fn, ": weights.b1 and weights.b2 must have ", p.hidden,
                    " and ", n, " entries with params.bias, got ", w.b1.size(), " and ", w.b2.size());
  } else {
    MOECOMP_EXPECTS(w.b1.empty() && w.b2.empty(), fn,
                    ": weights.b1 and weights.b2 must be empty without params.bias, got ", w.b1.size(), " and ",
                    w.b2.size(), " entries");
  }
}

}  // namespace detail

/// Fills `weights` as torch.nn.Linear initialises its weight and bias: each entry uniform in
/// [-1/sqrt(fan_in), 1/sqrt(fan_in)] (fan_in d for W1 and b1, d_h for W2 and b2), drawn from moecomp's generator
/// (seed, stream 0 .. 3 for W1, b1, W2, b2) in row-major order. The same seed gives the same weights everywhere.
template <class T>
void init_router_weights(const router_training_params& params, std::uint64_t seed, const router_weights_view<T>& weights) {
  static_assert(moecomp::detail::is_real_v<T>, "init_router_weights: T must be float or double");
  const index_t d = weights.w1.cols(), n = weights.w2.rows();
  detail::check_router_weights("init_router_weights", params, weights, d, n);
  auto fill_matrix = [&](matrix_view<T> m, index_t fan_in, std::uint64_t stream) {
    random_generator rng(seed, stream);
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    for (index_t i = 0; i < m.rows(); ++i)
      for (index_t j = 0; j < m.cols(); ++j) m(i, j) = static_cast<T>(rng.uniform<double>(-bound, bound));
  };
  auto fill_vector = [&](vector_view<T> v, index_t fan_in, std::uint64_t stream) {
    random_generator rng(seed, stream);
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    for (index_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(rng.uniform<double>(-bound, bound));
  };
  fill_matrix(weights.w1, d, 0);
  fill_matrix(weights.w2, params.hidden, 2);
  if (params.bias) {
    fill_vector(weights.b1, d, 1);
    fill_vector(weights.b2, params.hidden, 3);
  }
}

/// Trains the router `weights` (in place, from their current values) on tokens z (T x d) and targets y (T x n)
/// by minibatch Adam with params (see router_training_types.hpp). The last floor(validation_fraction T) tokens
/// are held out. invalid_argument for shapes that disagree, bad params, fewer training tokens than one batch,
/// non-finite z or y, or negative y with the moefication objective.
template <class T>
router_training_result train_router(const host_context& ctx, const router_training_params& params,
                                    moecomp::detail::type_identity_t<matrix_view<const T>> z,
                                    moecomp::detail::type_identity_t<matrix_view<const T>> y,
                                    const router_weights_view<T>& weights) {
  constexpr const char* fn = "train_router";
  static_assert(moecomp::detail::is_real_v<T>, "train_router: T must be float or double");
  const index_t tokens = z.rows(), d = z.cols(), n = y.cols();
  MOECOMP_EXPECTS(d >= 1 && n >= 1, fn, ": z and y must have at least one column, got ", d, " and ", n);
  MOECOMP_EXPECTS(y.rows() == tokens, fn, ": y must have one row per token of z (", tokens, "), got ", y.rows());
  detail::check_router_weights(fn, params, weights, d, n);
  MOECOMP_EXPECTS(std::isfinite(params.learning_rate) && params.learning_rate > 0, fn,
                  ": params.learning_rate must be > 0, got ", params.learning_rate);
  MOECOMP_EXPECTS(params.beta1 >= 0 && params.beta1 < 1 && params.beta2 >= 0 && params.beta2 < 1, fn,
                  ": params.beta1 and params.beta2 must be in [0, 1), got ", params.beta1, " and ", params.beta2);
  MOECOMP_EXPECTS(params.epsilon > 0 && std::isfinite(params.epsilon), fn, ": params.epsilon must be > 0, got ",
                  params.epsilon);
  MOECOMP_EXPECTS(params.weight_decay >= 0 && std::isfinite(params.weight_decay), fn,
                  ": params.weight_decay must be >= 0, got ", params.weight_decay);
  MOECOMP_EXPECTS(params.max_grad_norm >= 0 && std::isfinite(params.max_grad_norm), fn,
                  ": params.max_grad_norm must be >= 0 (0: no clipping), got ", params.max_grad_norm);
  MOECOMP_EXPECTS(params.warmup_steps >= 0, fn, ": params.warmup_steps must be >= 0, got ", params.warmup_steps);
  MOECOMP_EXPECTS(params.batch_size >= 1, fn, ": params.batch_size must be >= 1, got ", params.batch_size);
  MOECOMP_EXPECTS(params.epochs >= 1 || params.steps >= 1, fn,
                  ": params.epochs or params.steps must be >= 1, got ", params.epochs, " and ", params.steps);
  MOECOMP_EXPECTS(params.steps >= 0 && params.log_every >= 0, fn,
                  ": params.steps and params.log_every must be >= 0, got ", params.steps, " and ", params.log_every);
  MOECOMP_EXPECTS(params.validation_fraction >= 0 && params.validation_fraction < 1, fn,
                  ": params.validation_fraction must be in [0, 1), got ", params.validation_fraction);
  const auto validation = static_cast<index_t>(std::floor(params.validation_fraction * static_cast<double>(tokens)));
  MOECOMP_EXPECTS(tokens - validation >= params.batch_size, fn, ": the ", tokens - validation,
                  " training tokens (of ", tokens, ", less the validation share) must fill at least one batch of ",
                  "params.batch_size = ", params.batch_size);
  for (index_t t = 0; t < tokens; ++t) {
    for (index_t j = 0; j < d; ++j)
      MOECOMP_EXPECTS(std::isfinite(static_cast<double>(z(t, j))), fn, ": z(", t, ", ", j, ") is ", z(t, j),
                      "; finite values are required");
    for (index_t e = 0; e < n; ++e)
      MOECOMP_EXPECTS(std::isfinite(static_cast<double>(y(t, e))) &&
                          (params.objective != router_objective::moefication || y(t, e) >= T(0)),
                      fn, ": y(", t, ", ", e, ") is ", y(t, e), "; finite values are required",
                      params.objective == router_objective::moefication ? ", >= 0 for the moefication objective" : "");
  }
  return detail::train_router_host<T>(ctx, params, z, y, weights);
}

/// scores (T x n) = the router's score of each expert for each token: |W2 relu(W1 z + b1) + b2| (output_norm)
/// or sigmoid of it without the |.| (moefication). Deterministic at any thread count.
template <class T>
void router_scores(const host_context& ctx, const router_training_params& params,
                   const router_weights_view<const T>& weights, moecomp::detail::type_identity_t<matrix_view<const T>> z,
                   moecomp::detail::type_identity_t<matrix_view<T>> scores) {
  constexpr const char* fn = "router_scores";
  const index_t tokens = z.rows(), d = z.cols(), n = weights.w2.rows(), h = weights.w1.rows();
  MOECOMP_EXPECTS(weights.w1.cols() == d && weights.w2.cols() == h, fn, ": weights.w1 must have d = ", d,
                  " columns and weights.w2 d_h = ", h, ", got ", weights.w1.cols(), " and ", weights.w2.cols());
  MOECOMP_EXPECTS(scores.rows() == tokens && scores.cols() == n, fn, ": scores must be ",
                  moecomp::detail::shape_string(tokens, n), ", got ", moecomp::detail::shape_string(scores.rows(), scores.cols()));
  MOECOMP_EXPECTS((weights.b1.empty() || weights.b1.size() == h) && (weights.b2.empty() || weights.b2.size() == n), fn,
                  ": weights.b1 and weights.b2 must be empty or have ", h, " and ", n, " entries");
  // Contiguous copies of the weights as the training kernels read them (strided views allowed here).
  std::vector<T> w1(static_cast<std::size_t>(h * d)), w2(static_cast<std::size_t>(n * h)),
      b1(weights.b1.data(), weights.b1.data() + weights.b1.size()), b2(weights.b2.data(), weights.b2.data() + weights.b2.size());
  for (index_t i = 0; i < h; ++i)
    for (index_t j = 0; j < d; ++j) w1[static_cast<std::size_t>(i * d + j)] = weights.w1(i, j);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < h; ++j) w2[static_cast<std::size_t>(i * h + j)] = weights.w2(i, j);
  router_weights_view<T> w;
  w.w1 = matrix_view<T>(w1.data(), h, d, d);
  w.w2 = matrix_view<T>(w2.data(), n, h, h);
  if (!b1.empty()) w.b1 = vector_view<T>(b1.data(), h);
  if (!b2.empty()) w.b2 = vector_view<T>(b2.data(), n);
  constexpr index_t chunk = 256;
  std::vector<T> zc(static_cast<std::size_t>(chunk * d)), pre(static_cast<std::size_t>(chunk * h)), act(pre.size()),
      u(static_cast<std::size_t>(chunk * n));
  for (index_t t0 = 0; t0 < tokens; t0 += chunk) {
    const index_t count = std::min(chunk, tokens - t0);
    for (index_t t = 0; t < count; ++t)
      for (index_t j = 0; j < d; ++j) zc[static_cast<std::size_t>(t * d + j)] = z(t0 + t, j);
    detail::router_forward_rows<T>(ctx, w, zc.data(), count, d, pre.data(), act.data(), u.data());
    for (index_t t = 0; t < count; ++t)
      for (index_t e = 0; e < n; ++e) scores(t0 + t, e) = detail::router_score(params.objective, u[static_cast<std::size_t>(t * n + e)]);
  }
}

}  // namespace gating
MOECOMP_NAMESPACE_END
