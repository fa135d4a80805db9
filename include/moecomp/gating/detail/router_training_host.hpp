#pragma once
// Host implementation of SADMoE's router training: a two-layer MLP trained by minibatch Adam, its GEMMs in
// fixed tiles (each tile one single-threaded gemm_abt call, the tiles spread over threads), so that every
// number is the same at any thread count.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/core/detail/gemm.hpp>
#include <moecomp/core/detail/parallel.hpp>
#include <moecomp/gating/router_training_types.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace gating {
namespace detail {

// Tile sizes of the router's GEMMs: fixed, so that each output entry is the same sum at any thread count.
inline constexpr index_t router_tile_rows = 64;
inline constexpr index_t router_tile_cols = 32;

/// out (r x c, leading dimension ldo) = A (r x k, lda) B^T (c x k, ldb) in tiles of router_tile_rows x
/// router_tile_cols over the threads.
template <class T>
void tiled_abt(const host_context& ctx, const T* a, index_t lda, const T* b, index_t ldb, index_t r, index_t c, index_t k,
               T* out, index_t ldo) {
  const index_t row_tiles = (r + router_tile_rows - 1) / router_tile_rows;
  const index_t col_tiles = (c + router_tile_cols - 1) / router_tile_cols;
  moecomp::detail::parallel_for(row_tiles * col_tiles, ctx.threads(), [&](index_t tile, int) {
    const index_t i0 = (tile / col_tiles) * router_tile_rows, j0 = (tile % col_tiles) * router_tile_cols;
    const index_t rows = std::min(router_tile_rows, r - i0), cols = std::min(router_tile_cols, c - j0);
    moecomp::detail::gemm_abt<T>(T(1), a + i0 * lda, lda, b + j0 * ldb, ldb, rows, cols, k, out + i0 * ldo + j0, ldo);
  });
}

/// out (c x r) = in (r x c)^T.
template <class T>
void transpose(const host_context& ctx, const T* in, index_t r, index_t c, T* out) {
  constexpr index_t block = 64;
  const index_t blocks = (r + block - 1) / block;
  moecomp::detail::parallel_for(blocks, ctx.threads(), [&](index_t b, int) {
    for (index_t i = b * block; i < std::min(r, (b + 1) * block); ++i)
      for (index_t j = 0; j < c; ++j) out[j * r + i] = in[i * c + j];
  });
}

/// The router's forward on `count` rows of z (count x d, contiguous): hidden pre-activations (count x h), the
/// activations relu(pre + b1) and the raw outputs u = act W2^T + b2 (count x n).
template <class T>
void router_forward_rows(const host_context& ctx, const router_weights_view<T>& w, const T* z, index_t count, index_t d,
                         T* pre, T* act, T* u) {
  const index_t h = w.w1.rows(), n = w.w2.rows();
  tiled_abt<T>(ctx, z, d, w.w1.data(), w.w1.row_stride(), count, h, d, pre, h);
  for (index_t t = 0; t < count; ++t)
    for (index_t j = 0; j < h; ++j) {
      const T v = pre[t * h + j] + (w.b1.empty() ? T(0) : w.b1[j]);
      pre[t * h + j] = v;
      act[t * h + j] = v > T(0) ? v : T(0);
    }
  tiled_abt<T>(ctx, act, h, w.w2.data(), w.w2.row_stride(), count, n, h, u, n);
  if (!w.b2.empty())
    for (index_t t = 0; t < count; ++t)
      for (index_t e = 0; e < n; ++e) u[t * n + e] += w.b2[e];
}

/// The score a router's raw output u means: |u| (output_norm) or sigmoid(u) (moefication).
template <class T>
T router_score(router_objective objective, T u) noexcept {
  if (objective == router_objective::output_norm) return std::abs(u);
  return u >= T(0) ? T(1) / (T(1) + std::exp(-u)) : std::exp(u) / (T(1) + std::exp(u));
}

/// The loss of `count` tokens' raw outputs u against targets y (count x n, row stride ldy), as a sum over the
/// entries in double (divide by count n for the mean); with `grad`, the gradient of the mean loss over
/// `mean_over` entries with respect to u. moefication's labels are y over `label_scale` (the minibatch maximum).
template <class T>
double router_loss(router_objective objective, const T* u, const T* y, index_t ldy, index_t count, index_t n,
                   double label_scale, double mean_over, T* grad) {
  double sum = 0;
  for (index_t t = 0; t < count; ++t)
    for (index_t e = 0; e < n; ++e) {
      const T ue = u[t * n + e];
      const T target = y[t * ldy + e];
      if (objective == router_objective::output_norm) {
        const T diff = std::abs(ue) - target;
        sum += static_cast<double>(diff) * static_cast<double>(diff);
        if (grad) {
          const T sign = ue > T(0) ? T(1) : ue < T(0) ? T(-1) : T(0);  // torch's abs backward: sign(0) = 0
          grad[t * n + e] = static_cast<T>(2.0 / mean_over) * diff * sign;
        }
      } else {
        const T label = label_scale > 0 ? static_cast<T>(static_cast<double>(target) / label_scale) : T(0);
        // BCE with logits, the stable form torch uses: max(u, 0) - u l + log(1 + exp(-|u|)).
        const double uu = static_cast<double>(ue), l = static_cast<double>(label);
        sum += std::max(uu, 0.0) - uu * l + std::log1p(std::exp(-std::abs(uu)));
        if (grad) grad[t * n + e] = static_cast<T>((1.0 / mean_over)) * (router_score(objective, ue) - label);
      }
    }
  return sum;
}

/// The learning rate at step s of S (0-based).
inline double scheduled_rate(const router_training_params& p, index_t s, index_t total) {
  const double w = static_cast<double>(p.warmup_steps), step = static_cast<double>(s);
  if (s < p.warmup_steps) return p.learning_rate * step / std::max(1.0, w);
  const double span = std::max(1.0, static_cast<double>(total) - w);
  const double progress = (step - w) / span;
  switch (p.schedule) {
    case lr_schedule::constant: return p.learning_rate;
    case lr_schedule::linear: return p.learning_rate * std::max(0.0, 1.0 - progress);
    case lr_schedule::cosine: return p.learning_rate * 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress));
  }
  return p.learning_rate;
}

/// One Adam step on `count` parameters (torch.optim.Adam's single-tensor update, weight decay coupled).
template <class T>
void adam_update(const host_context& ctx, const router_training_params& p, double rate, std::int64_t step, T* param,
                 T* grad, T* m, T* v, index_t count) {
  const double bc1 = 1.0 - std::pow(p.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(p.beta2, static_cast<double>(step));
  const T step_size = static_cast<T>(rate / bc1), bc2_sqrt = static_cast<T>(std::sqrt(bc2));
  const T b1 = static_cast<T>(p.beta1), b2 = static_cast<T>(p.beta2), eps = static_cast<T>(p.epsilon);
  const T wd = static_cast<T>(p.weight_decay);
  constexpr index_t chunk = 4096;
  moecomp::detail::parallel_for((count + chunk - 1) / chunk, ctx.threads(), [&](index_t c, int) {
    for (index_t i = c * chunk; i < std::min(count, (c + 1) * chunk); ++i) {
      T g = grad[i];
      if (wd != T(0)) g = g + wd * param[i];
      m[i] = m[i] * b1 + (T(1) - b1) * g;
      v[i] = v[i] * b2 + (T(1) - b2) * g * g;
      const T denom = std::sqrt(v[i]) / bc2_sqrt + eps;
      param[i] = param[i] - step_size * (m[i] / denom);
    }
  });
}

/// A router parameter tensor's storage for training: the caller's view copied contiguous, with its gradient
/// and Adam's moments.
template <class T>
struct trained_tensor {
  std::vector<T> value, grad, m, v;
  explicit trained_tensor(index_t count) : value(count), grad(count), m(count, T(0)), v(count, T(0)) {}
};

template <class T>
router_training_result train_router_host(const host_context& ctx, const router_training_params& p,
                                         matrix_view<const T> z, matrix_view<const T> y, const router_weights_view<T>& w) {
  const index_t total_tokens = z.rows(), d = z.cols(), n = y.cols(), h = p.hidden;
  const auto validation = static_cast<index_t>(std::floor(p.validation_fraction * static_cast<double>(total_tokens)));
  const index_t train = total_tokens - validation;
  router_training_result result;
  result.training_tokens = train;
  result.validation_tokens = validation;
  const index_t batches_per_epoch = (train + p.batch_size - 1) / p.batch_size;
  const index_t total_steps = p.steps > 0 ? p.steps : p.epochs * batches_per_epoch;

  // Contiguous working copies of the weights (the views may be strided), trained, then copied back.
  trained_tensor<T> w1(h * d), w2(n * h), b1(p.bias ? h : 0), b2(p.bias ? n : 0);
  for (index_t i = 0; i < h; ++i)
    for (index_t j = 0; j < d; ++j) w1.value[static_cast<std::size_t>(i * d + j)] = w.w1(i, j);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < h; ++j) w2.value[static_cast<std::size_t>(i * h + j)] = w.w2(i, j);
  for (index_t i = 0; p.bias && i < h; ++i) b1.value[static_cast<std::size_t>(i)] = w.b1[i];
  for (index_t i = 0; p.bias && i < n; ++i) b2.value[static_cast<std::size_t>(i)] = w.b2[i];
  auto working = [&]() {
    router_weights_view<T> v;
    v.w1 = matrix_view<T>(w1.value.data(), h, d, d);
    v.w2 = matrix_view<T>(w2.value.data(), n, h, h);
    if (p.bias) {
      v.b1 = vector_view<T>(b1.value.data(), h);
      v.b2 = vector_view<T>(b2.value.data(), n);
    }
    return v;
  };
  const router_weights_view<T> current = working();

  const index_t B = p.batch_size;
  std::vector<T> zb(static_cast<std::size_t>(B * d)), zbt(zb.size()), yb(static_cast<std::size_t>(B * n));
  std::vector<T> pre(static_cast<std::size_t>(B * h)), act(pre.size()), actt(pre.size()), da(pre.size()), dht(pre.size());
  std::vector<T> u(static_cast<std::size_t>(B * n)), g(u.size()), gt(u.size()), w2t(static_cast<std::size_t>(h * n));

  auto validation_loss = [&]() {
    if (validation == 0) return std::numeric_limits<double>::quiet_NaN();
    double sum = 0, scale = 0;  // moefication: labels over the validation set's maximum
    for (index_t t = train; t < total_tokens && p.objective == router_objective::moefication; ++t)
      for (index_t e = 0; e < n; ++e) scale = std::max(scale, static_cast<double>(y(t, e)));
    constexpr index_t chunk = 256;
    std::vector<T> vpre(static_cast<std::size_t>(chunk * h)), vact(vpre.size()), vu(static_cast<std::size_t>(chunk * n));
    std::vector<T> vz(static_cast<std::size_t>(chunk * d));
    for (index_t t0 = train; t0 < total_tokens; t0 += chunk) {
      const index_t count = std::min(chunk, total_tokens - t0);
      for (index_t t = 0; t < count; ++t)
        for (index_t j = 0; j < d; ++j) vz[static_cast<std::size_t>(t * d + j)] = z(t0 + t, j);
      router_forward_rows<T>(ctx, current, vz.data(), count, d, vpre.data(), vact.data(), vu.data());
      sum += router_loss<T>(p.objective, vu.data(), y.row_ptr(t0), y.row_stride(), count, n, scale, 1.0, nullptr);
    }
    return sum / (static_cast<double>(validation) * static_cast<double>(n));
  };

  std::vector<index_t> order(static_cast<std::size_t>(train));
  double logged_loss = 0, logged_entries = 0;
  std::int64_t step = 0;
  for (index_t epoch = 0; step < total_steps; ++epoch) {
    std::iota(order.begin(), order.end(), index_t{0});
    if (p.shuffle) {  // Fisher-Yates from moecomp's generator, one stream per epoch
      random_generator rng(p.seed, static_cast<std::uint64_t>(epoch));
      for (index_t i = train - 1; i > 0; --i)
        std::swap(order[static_cast<std::size_t>(i)],
                  order[static_cast<std::size_t>(rng.uniform_index(static_cast<std::uint64_t>(i) + 1))]);
    }
    for (index_t first = 0; first < train && step < total_steps; first += B) {
      const index_t count = std::min(B, train - first);
      for (index_t t = 0; t < count; ++t) {
        const index_t row = order[static_cast<std::size_t>(first + t)];
        for (index_t j = 0; j < d; ++j) zb[static_cast<std::size_t>(t * d + j)] = z(row, j);
        for (index_t e = 0; e < n; ++e) yb[static_cast<std::size_t>(t * n + e)] = y(row, e);
      }
      router_forward_rows<T>(ctx, current, zb.data(), count, d, pre.data(), act.data(), u.data());
      double scale = 0;
      if (p.objective == router_objective::moefication)
        for (index_t k = 0; k < count * n; ++k) scale = std::max(scale, static_cast<double>(yb[static_cast<std::size_t>(k)]));
      const double mean_over = static_cast<double>(count) * static_cast<double>(n);
      const double loss = router_loss<T>(p.objective, u.data(), yb.data(), n, count, n, scale, mean_over, g.data());
      if (!std::isfinite(loss)) {
        result.status = moecomp::status::numerical_error;
        break;
      }
      logged_loss += loss;
      logged_entries += mean_over;
      // Backward: dW2 = G^T act, db2 = column sums of G, dA = G W2, dH = dA relu'(pre), dW1 = dH^T z, db1.
      transpose<T>(ctx, g.data(), count, n, gt.data());
      transpose<T>(ctx, act.data(), count, h, actt.data());
      tiled_abt<T>(ctx, gt.data(), count, actt.data(), count, n, h, count, w2.grad.data(), h);
      transpose<T>(ctx, w2.value.data(), n, h, w2t.data());
      tiled_abt<T>(ctx, g.data(), n, w2t.data(), n, count, h, n, da.data(), h);
      for (index_t k = 0; k < count * h; ++k)
        if (!(pre[static_cast<std::size_t>(k)] > T(0))) da[static_cast<std::size_t>(k)] = T(0);
      transpose<T>(ctx, da.data(), count, h, dht.data());
      transpose<T>(ctx, zb.data(), count, d, zbt.data());
      tiled_abt<T>(ctx, dht.data(), count, zbt.data(), count, h, d, count, w1.grad.data(), d);
      if (p.bias) {
        for (index_t e = 0; e < n; ++e) {
          T sum = T(0);
          for (index_t t = 0; t < count; ++t) sum += g[static_cast<std::size_t>(t * n + e)];
          b2.grad[static_cast<std::size_t>(e)] = sum;
        }
        for (index_t j = 0; j < h; ++j) {
          T sum = T(0);
          for (index_t t = 0; t < count; ++t) sum += da[static_cast<std::size_t>(t * h + j)];
          b1.grad[static_cast<std::size_t>(j)] = sum;
        }
      }
      if (p.max_grad_norm > 0) {  // torch.nn.utils.clip_grad_norm_: one global norm over every gradient
        double squares = 0;
        for (const auto* t : {&w1, &b1, &w2, &b2})
          for (T x : t->grad) squares += static_cast<double>(x) * static_cast<double>(x);
        const double norm = std::sqrt(squares), coefficient = p.max_grad_norm / (norm + 1e-6);
        if (coefficient < 1.0)
          for (auto* t : {&w1, &b1, &w2, &b2})
            for (T& x : t->grad) x *= static_cast<T>(coefficient);
      }
      ++step;
      const double rate = scheduled_rate(p, step - 1, total_steps);
      for (auto* t : {&w1, &b1, &w2, &b2})
        adam_update<T>(ctx, p, rate, step, t->value.data(), t->grad.data(), t->m.data(), t->v.data(),
                       static_cast<index_t>(t->value.size()));
      const bool epoch_end = first + B >= train;
      if ((p.log_every > 0 && step % p.log_every == 0) || (p.log_every == 0 && epoch_end) || step == total_steps) {
        if (result.logged_steps.empty() || result.logged_steps.back() != step) {
          result.logged_steps.push_back(step);
          result.train_loss.push_back(logged_loss / logged_entries);
          result.validation_loss.push_back(validation_loss());
          logged_loss = logged_entries = 0;
        }
      }
    }
    if (result.status != moecomp::status::ok) break;
  }
  result.iterations = step;

  // The trained weights back into the caller's views (the last finite ones on a numerical error: a step that
  // produced a non-finite loss was not taken).
  for (index_t i = 0; i < h; ++i)
    for (index_t j = 0; j < d; ++j) w.w1(i, j) = w1.value[static_cast<std::size_t>(i * d + j)];
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < h; ++j) w.w2(i, j) = w2.value[static_cast<std::size_t>(i * h + j)];
  for (index_t i = 0; p.bias && i < h; ++i) w.b1[i] = b1.value[static_cast<std::size_t>(i)];
  for (index_t i = 0; p.bias && i < n; ++i) w.b2[i] = b2.value[static_cast<std::size_t>(i)];

  // The validation outcome: the loss, and how often the top-scored expert is the top target.
  if (validation > 0 && result.status == moecomp::status::ok) {
    result.validation_mse = validation_loss();
    std::vector<T> vpre(static_cast<std::size_t>(h)), vact(vpre.size()), vu(static_cast<std::size_t>(n)),
        vz(static_cast<std::size_t>(d));
    index_t agree = 0;
    const host_context serial(1);
    for (index_t t = train; t < total_tokens; ++t) {
      for (index_t j = 0; j < d; ++j) vz[static_cast<std::size_t>(j)] = z(t, j);
      router_forward_rows<T>(serial, current, vz.data(), 1, d, vpre.data(), vact.data(), vu.data());
      index_t best_score = 0, best_target = 0;
      for (index_t e = 1; e < n; ++e) {
        if (router_score(p.objective, vu[static_cast<std::size_t>(e)]) >
            router_score(p.objective, vu[static_cast<std::size_t>(best_score)]))
          best_score = e;
        if (y(t, e) > y(t, best_target)) best_target = e;
      }
      agree += best_score == best_target;
    }
    result.top1_agreement = static_cast<double>(agree) / static_cast<double>(validation);
  }
  result.criterion = result.validation_loss.empty() ? std::numeric_limits<double>::quiet_NaN()
                     : validation > 0               ? result.validation_loss.back()
                                                    : result.train_loss.back();
  for (const auto* t : {&w1, &b1, &w2, &b2})
    for (T x : t->value)
      if (!std::isfinite(static_cast<double>(x))) result.status = moecomp::status::numerical_error;
  return result;
}

}  // namespace detail
}  // namespace gating
MOECOMP_NAMESPACE_END
