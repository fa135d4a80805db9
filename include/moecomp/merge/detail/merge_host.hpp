#pragma once
// Host implementation of expert merging, behind <moecomp/merge/merge.hpp>: the routing of the calibration tokens,
// each group's token sets, the coefficient merges (double accumulation), HC-SMoE's fixed-dominant neuron
// matching, the projected-gradient learned coefficients, the router rows and the merge errors.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/align/align.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/core/detail/correlation.hpp>
#include <moecomp/core/detail/gram_tiles.hpp>
#include <moecomp/core/detail/parallel.hpp>
#include <moecomp/gating/routing.hpp>
#include <moecomp/merge/merge_types.hpp>
#include <moecomp/merge/detail/fix_dom_rules.hpp>
#include <moecomp/merge/detail/merge_layer_rules.hpp>
#include <moecomp/merge/detail/learned_solver.hpp>
#include <moecomp/moe/features.hpp>
#include <moecomp/moe/ffn.hpp>
#include <moecomp/core/detail/activation.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace merge {
namespace detail {

using moecomp::detail::host_workspace;
using moecomp::detail::parallel_for;

template <class A>
token_routes<A> route_tokens(const host_context& ctx, matrix_view<const A> x, matrix_view<const A> router, index_t k) {
  token_routes<A> r;
  r.tokens = x.rows();
  r.k = k;
  const index_t e = router.rows();
  std::vector<A> logits(static_cast<std::size_t>(x.rows() * e));
  moe::router_logits<A>(ctx, x, router, {}, matrix_view<A>(logits.data(), x.rows(), e));
  gating::routing_params p;
  p.rule = gating::routing_rule::top_k;
  p.scores = gating::score_function::softmax;
  p.top_k = k;
  p.renormalize = false;
  r.ids.resize(static_cast<std::size_t>(x.rows() * k));
  r.weights.resize(r.ids.size());
  gating::route_fixed<A>(ctx, p, matrix_view<const A>(logits.data(), x.rows(), e), {},
                         matrix_view<std::int64_t>(r.ids.data(), x.rows(), k), matrix_view<A>(r.weights.data(), x.rows(), k));
  return r;
}

template <class A>
void routing_frequencies_host(const host_context& ctx, index_t k, matrix_view<const A> x, matrix_view<const A> router,
                              vector_view<double> f) {
  count_frequencies(route_tokens<A>(ctx, x, router, k), router.rows(), f);
}

/// The rows of x listed in `rows`: a view of x itself when they are all of its rows in order (no copy), else a
/// gathered copy.
template <class A>
class gathered_rows {
 public:
  gathered_rows(const host_context& ctx, matrix_view<const A> x, const std::vector<index_t>& rows)
      : all_(is_all(x, rows)), copy_(ctx, all_ ? 0 : rows.size() * static_cast<std::size_t>(x.cols())) {
    const auto n = static_cast<index_t>(rows.size());
    if (all_) {
      view_ = x;
      return;
    }
    parallel_for(n, ctx.threads(), [&](index_t i, int) {
      const A* src = x.row_ptr(rows[static_cast<std::size_t>(i)]);
      std::copy(src, src + x.cols(), copy_.data() + i * x.cols());
    });
    view_ = matrix_view<const A>(copy_.data(), n, x.cols(), x.cols());
  }
  matrix_view<const A> view() const noexcept { return view_; }

 private:
  static bool is_all(matrix_view<const A> x, const std::vector<index_t>& rows) {
    if (static_cast<index_t>(rows.size()) != x.rows()) return false;
    for (std::size_t i = 0; i < rows.size(); ++i)
      if (rows[i] != static_cast<index_t>(i)) return false;
    return true;
  }
  bool all_;
  host_workspace<A> copy_;
  matrix_view<const A> view_;
};

/// out = sum_i c_i (member i's neurons gathered by perms[i], or in place when perms is empty), every weight and
/// bias accumulated in double in member order, then rounded once to W.
template <class W>
void weighted_merge(const host_context& ctx, const moe::ffn_expert_stack_view<W>& experts,
                    const std::vector<index_t>& members, const std::vector<double>& c,
                    const std::vector<std::vector<index_t>>& perms, const moe::ffn_expert_mutable_view<W>& out) {
  const index_t d = experts.d_model(), d_ff = experts.d_ff();
  const auto n = members.size();
  const auto source = [&](std::size_t i, index_t neuron) {
    return perms.empty() ? neuron : perms[i][static_cast<std::size_t>(neuron)];
  };
  // Rows of W1 / W3 and the biases b1 / b3: neuron by neuron.
  parallel_for(d_ff, ctx.threads(), [&](index_t r, int) {
    std::vector<double> acc1(static_cast<std::size_t>(d), 0.0), acc3(experts.gated() ? static_cast<std::size_t>(d) : 0, 0.0);
    double s1 = 0, s3 = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const moe::ffn_expert_view<W> e = experts.expert(members[i]);
      const index_t s = source(i, r);
      const W* w1 = e.w1.row_ptr(s);
      for (index_t k = 0; k < d; ++k) acc1[static_cast<std::size_t>(k)] += c[i] * moecomp::convert_to<double>(w1[k]);
      if (e.gated()) {
        const W* w3 = e.w3.row_ptr(s);
        for (index_t k = 0; k < d; ++k) acc3[static_cast<std::size_t>(k)] += c[i] * moecomp::convert_to<double>(w3[k]);
      }
      if (!e.b1.empty()) s1 += c[i] * moecomp::convert_to<double>(e.b1[s]);
      if (!e.b3.empty()) s3 += c[i] * moecomp::convert_to<double>(e.b3[s]);
    }
    for (index_t k = 0; k < d; ++k) out.w1(r, k) = convert_to<W>(acc1[static_cast<std::size_t>(k)]);
    if (out.gated())
      for (index_t k = 0; k < d; ++k) out.w3(r, k) = convert_to<W>(acc3[static_cast<std::size_t>(k)]);
    if (!out.b1.empty()) out.b1[r] = convert_to<W>(s1);
    if (!out.b3.empty()) out.b3[r] = convert_to<W>(s3);
  });
  // Rows of W2 (each a gather of columns) and b2.
  parallel_for(d, ctx.threads(), [&](index_t j, int) {
    std::vector<double> acc(static_cast<std::size_t>(d_ff), 0.0);
    double s2 = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const moe::ffn_expert_view<W> e = experts.expert(members[i]);
      const W* w2 = e.w2.row_ptr(j);
      if (perms.empty()) {
        for (index_t k = 0; k < d_ff; ++k) acc[static_cast<std::size_t>(k)] += c[i] * moecomp::convert_to<double>(w2[k]);
      } else {
        const std::vector<index_t>& p = perms[i];
        for (index_t k = 0; k < d_ff; ++k)
          acc[static_cast<std::size_t>(k)] += c[i] * moecomp::convert_to<double>(w2[p[static_cast<std::size_t>(k)]]);
      }
      if (!e.b2.empty()) s2 += c[i] * moecomp::convert_to<double>(e.b2[j]);
    }
    W* row = out.w2.row_ptr(j);
    for (index_t k = 0; k < d_ff; ++k) row[k] = convert_to<W>(acc[static_cast<std::size_t>(k)]);
    if (!out.b2.empty()) out.b2[j] = convert_to<W>(s2);
  });
}

/// HC-SMoE fix-dom-same's matching of one member against the dominant: match[b] = argmax over the dominant's
/// neurons a of cov(h_D[:, a], h_j[:, b]) / (sd_a sd_b + eps) (unbiased covariance and deviations; ties: the
/// lowest a). zd / zj: the standardised activations (neurons x tokens) and their centred norms.
template <class A>
void fix_dom_match(const host_context& ctx, matrix_view<const A> zd, const std::vector<double>& norm_d,
                   matrix_view<const A> zj, const std::vector<double>& norm_j, index_t tokens, double eps,
                   std::vector<index_t>& match) {
  const index_t d_ff = zd.rows();
  host_workspace<A> corr(ctx, static_cast<std::size_t>(d_ff * d_ff));
  const matrix_view<A> c(corr.data(), d_ff, d_ff, d_ff);  // rows: dominant neurons a; columns: member neurons b
  moecomp::detail::gram_product<A>(ctx, zd, zj, c);
  // C[a, b] = r_ab s_ab / (s_ab + eps), s_ab = sd_a sd_b = |c_a| |c_b| / (tokens - 1), r the Pearson correlation.
  const double scale = 1.0 / static_cast<double>(tokens - 1);
  match.assign(static_cast<std::size_t>(d_ff), 0);
  // Column strips over the threads; within a strip the dominant's neurons in ascending order (ties to the lowest).
  constexpr index_t strip = 256;
  const index_t strips = (d_ff + strip - 1) / strip;
  parallel_for(strips, ctx.threads(), [&](index_t s, int) {
    const index_t b0 = s * strip, b1 = std::min(b0 + strip, d_ff);
    std::vector<double> best(static_cast<std::size_t>(b1 - b0), -std::numeric_limits<double>::infinity());
    for (index_t a = 0; a < d_ff; ++a) {
      const A* row = c.row_ptr(a);
      const double na = norm_d[static_cast<std::size_t>(a)];
      for (index_t b = b0; b < b1; ++b) {
        const double v = fix_dom_score(static_cast<double>(row[b]), na, norm_j[static_cast<std::size_t>(b)], scale, eps);
        if (v > best[static_cast<std::size_t>(b - b0)]) {
          best[static_cast<std::size_t>(b - b0)] = v;
          match[static_cast<std::size_t>(b)] = a;
        }
      }
    }
  });
}

/// fix-dom-same's merge: merged neuron a (row a of W1, W3, b1, b3, column a of W2) = the mean of the dominant's
/// neuron a and every member neuron b with match_j[b] = a; b2 = the members' mean. members[0] is the dominant.
template <class W>
void fix_dom_combine(const host_context& ctx, const moe::ffn_expert_stack_view<W>& experts,
                     const std::vector<index_t>& members, const std::vector<std::vector<index_t>>& matches,
                     const moe::ffn_expert_mutable_view<W>& out) {
  const index_t d = experts.d_model(), d_ff = experts.d_ff();
  // sources[a] = the (member position, neuron) pairs averaged into merged neuron a, the dominant's first.
  std::vector<std::vector<std::pair<std::size_t, index_t>>> sources(static_cast<std::size_t>(d_ff));
  for (index_t a = 0; a < d_ff; ++a) sources[static_cast<std::size_t>(a)].push_back({0, a});
  for (std::size_t j = 1; j < members.size(); ++j)
    for (index_t b = 0; b < d_ff; ++b) sources[static_cast<std::size_t>(matches[j][static_cast<std::size_t>(b)])].push_back({j, b});
  parallel_for(d_ff, ctx.threads(), [&](index_t a, int) {
    const auto& src = sources[static_cast<std::size_t>(a)];
    const double inv = 1.0 / static_cast<double>(src.size());
    std::vector<double> acc1(static_cast<std::size_t>(d), 0.0), acc3(experts.gated() ? static_cast<std::size_t>(d) : 0, 0.0);
    double s1 = 0, s3 = 0;
    for (const auto& [j, b] : src) {
      const moe::ffn_expert_view<W> e = experts.expert(members[j]);
      for (index_t k = 0; k < d; ++k) acc1[static_cast<std::size_t>(k)] += moecomp::convert_to<double>(e.w1(b, k));
      if (e.gated())
        for (index_t k = 0; k < d; ++k) acc3[static_cast<std::size_t>(k)] += moecomp::convert_to<double>(e.w3(b, k));
      if (!e.b1.empty()) s1 += moecomp::convert_to<double>(e.b1[b]);
      if (!e.b3.empty()) s3 += moecomp::convert_to<double>(e.b3[b]);
    }
    for (index_t k = 0; k < d; ++k) out.w1(a, k) = convert_to<W>(acc1[static_cast<std::size_t>(k)] * inv);
    if (out.gated())
      for (index_t k = 0; k < d; ++k) out.w3(a, k) = convert_to<W>(acc3[static_cast<std::size_t>(k)] * inv);
    if (!out.b1.empty()) out.b1[a] = convert_to<W>(s1 * inv);
    if (!out.b3.empty()) out.b3[a] = convert_to<W>(s3 * inv);
  });
  parallel_for(d, ctx.threads(), [&](index_t r, int) {
    std::vector<double> acc(static_cast<std::size_t>(d_ff), 0.0);
    double s2 = 0;
    for (std::size_t j = 0; j < members.size(); ++j) {
      const moe::ffn_expert_view<W> e = experts.expert(members[j]);
      const W* w2 = e.w2.row_ptr(r);
      for (index_t b = 0; b < d_ff; ++b) {
        const index_t a = j == 0 ? b : matches[j][static_cast<std::size_t>(b)];
        acc[static_cast<std::size_t>(a)] += moecomp::convert_to<double>(w2[b]);
      }
      if (!e.b2.empty()) s2 += moecomp::convert_to<double>(e.b2[r]);
    }
    W* row = out.w2.row_ptr(r);
    for (index_t a = 0; a < d_ff; ++a)
      row[a] = convert_to<W>(acc[static_cast<std::size_t>(a)] / static_cast<double>(sources[static_cast<std::size_t>(a)].size()));
    if (!out.b2.empty()) out.b2[r] = convert_to<W>(s2 / static_cast<double>(members.size()));
  });
}


/// y (tokens x d) = the group's original output on tokens xg: the members' outputs weighted by their router
/// probabilities renormalised over the group's selected members (the plain mean without routes).
template <class W, class A = accumulator_t<W>>
host_workspace<A> group_target(const host_context& ctx, const moe::ffn_params& forward,
                               const moe::ffn_expert_stack_view<W>& experts, const std::vector<index_t>& members,
                               matrix_view<const A> xg, const std::vector<index_t>& token_ids,
                               const token_routes<A>* routes) {
  const index_t n = xg.rows(), d = experts.d_model();
  host_workspace<A> y(ctx, static_cast<std::size_t>(n * d)), f(ctx, static_cast<std::size_t>(n * d));
  std::vector<double> acc(static_cast<std::size_t>(n * d), 0.0), total(static_cast<std::size_t>(n), 0.0);
  for (index_t e : members) {
    moe::ffn_forward<W>(ctx, forward, experts.expert(e), xg, matrix_view<A>(f.data(), n, d, d));
    parallel_for(n, ctx.threads(), [&](index_t t, int) {
      const double w = routes ? static_cast<double>(routes->weight(token_ids[static_cast<std::size_t>(t)], e)) : 1.0;
      if (w == 0) return;
      total[static_cast<std::size_t>(t)] += w;
      const A* fr = f.data() + t * d;
      double* ar = acc.data() + t * d;
      for (index_t c = 0; c < d; ++c) ar[c] += w * static_cast<double>(fr[c]);
    });
  }
  parallel_for(n, ctx.threads(), [&](index_t t, int) {
    const double inv = total[static_cast<std::size_t>(t)] > 0 ? 1.0 / total[static_cast<std::size_t>(t)] : 0.0;
    for (index_t c = 0; c < d; ++c) y.data()[t * d + c] = static_cast<A>(acc[static_cast<std::size_t>(t * d + c)] * inv);
  });
  return y;
}

/// sum over rows of the squared differences (or squares, when b is null), in double, in row order.
template <class A>
double squared_error(const host_context& ctx, const A* a, const A* b, index_t rows, index_t cols) {
  std::vector<double> per_row(static_cast<std::size_t>(rows));
  parallel_for(rows, ctx.threads(), [&](index_t t, int) {
    double s = 0;
    for (index_t c = 0; c < cols; ++c) {
      const double v = static_cast<double>(a[t * cols + c]) - (b ? static_cast<double>(b[t * cols + c]) : 0.0);
      s += v * v;
    }
    per_row[static_cast<std::size_t>(t)] = s;
  });
  double s = 0;
  for (double v : per_row) s += v;
  return s;
}

/// <a, b> over n elements in double, from fixed blocks summed in order (the same at any thread count).
template <class A>
double block_dot(const host_context& ctx, const A* a, const A* b, std::size_t n) {
  constexpr std::size_t block = 1 << 14;
  const std::size_t blocks = (n + block - 1) / block;
  std::vector<double> part(blocks, 0.0);
  parallel_for(static_cast<index_t>(blocks), ctx.threads(), [&](index_t k, int) {
    const std::size_t i0 = static_cast<std::size_t>(k) * block, i1 = std::min(n, i0 + block);
    double s = 0;
    for (std::size_t i = i0; i < i1; ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
    part[static_cast<std::size_t>(k)] = s;
  });
  double s = 0;
  for (double v : part) s += v;
  return s;
}

/// The fourth paper's learned coefficients for one group: minimise L(a) = mean_t ||y_t - f_a(x_t)||^2 over the
/// simplex, f_a the expert with every weight and bias sum_i a_i theta_i, by projected gradient descent with a
/// backtracking (sufficient-decrease) step, from the uniform a. The gradient is analytic: with
/// pre_i = x W1_i^T + b1_i, up_i = x W3_i^T + b3_i, a = sum a_i pre_i, u = sum a_i up_i, h = act(a) * u,
/// R = h W2_a^T + b2_a - y and G = R W2_a:
///   dL/da_i = (2/T) [ <R^T h, W2_i> + <sum_t R_t, b2_i> + <G * act'(a) * u, pre_i> + <G * act(a), up_i> ].
template <class W, class A = accumulator_t<W>>
class learned_problem {
 public:
  learned_problem(const host_context& ctx, const moe::ffn_params& forward, const moe::ffn_expert_stack_view<W>& experts,
                  const std::vector<index_t>& members, matrix_view<const A> xg, const A* y)
      : ctx_(ctx), act_(forward.act), gated_(experts.gated()), n_(members.size()), t_(xg.rows()),
        d_(experts.d_model()), f_(experts.d_ff()), y_(y),
        pre1_(ctx, n_ * tf()), pre3_(ctx, gated_ ? n_ * tf() : 0), w2_(ctx, n_ * df()), w2t_(ctx, n_ * df()),
        b2_(n_ * static_cast<std::size_t>(d_), 0.0), a_(ctx, tf()), u_(ctx, gated_ ? tf() : 0), h_(ctx, tf()),
        out_(ctx, td()), r_(ctx, td()), rt_(ctx, td()), ht_(ctx, tf()), g_(ctx, tf()), m_(ctx, df()), w2a_(ctx, df()),
        w2ta_(ctx, df()) {
    // The products below have many rows on both sides: the Gram tiles (256 x 256 blocks, each operand packed
    // once per tile) run them at GEMM speed, where linear_abt's weight panels would repack x for every panel.
    host_workspace<A> converted(ctx, std::is_same_v<W, A> ? 0 : df());
    const auto as_a = [&](matrix_view<const W> w) {
      if constexpr (std::is_same_v<W, A>) {
        return w;
      } else {
        for (index_t r = 0; r < w.rows(); ++r)
          for (index_t c = 0; c < w.cols(); ++c) converted.data()[r * w.cols() + c] = convert_to<A>(w(r, c));
        return matrix_view<const A>(converted.data(), w.rows(), w.cols(), w.cols());
      }
    };
    // With bfloat16 weights under matmul_precision::bf16 the tokens are rounded to bfloat16 once and multiplied
    // with W1 and W3 as stored (the expert forward's contract): no weight is widened.
    bool narrow_products = false;
    (void)narrow_products;  // read only for bfloat16 weights
    host_workspace<bfloat16> narrow(ctx, 0);
    if constexpr (std::is_same_v<W, bfloat16>) {
      narrow_products = ctx.matmul == matmul_precision::bf16;
      if (narrow_products) {
        narrow = host_workspace<bfloat16>(ctx, td());
        for (index_t r = 0; r < t_; ++r)
          for (index_t c = 0; c < d_; ++c) narrow.data()[r * d_ + c] = bfloat16(static_cast<float>(xg(r, c)));
      }
    }
    const auto pre_activation = [&](matrix_view<const W> w, A* out) {
      const matrix_view<A> product(out, t_, f_, f_);
      if constexpr (std::is_same_v<W, bfloat16>) {
        if (narrow_products) {
          moecomp::detail::gram_product<bfloat16>(ctx, matrix_view<const bfloat16>(narrow.data(), t_, d_, d_), w, product);
          return;
        }
      }
      moecomp::detail::gram_product<A>(ctx, xg, as_a(w), product);
    };
    for (std::size_t i = 0; i < n_; ++i) {
      const moe::ffn_expert_view<W> e = experts.expert(members[i]);
      pre_activation(e.w1, pre1_.data() + i * tf());
      if (gated_) pre_activation(e.w3, pre3_.data() + i * tf());
      add_bias(pre1_.data() + i * tf(), e.b1);
      if (gated_) add_bias(pre3_.data() + i * tf(), e.b3);
      A* w2 = w2_.data() + i * df();
      A* w2t = w2t_.data() + i * df();
      for (index_t r = 0; r < d_; ++r)
        for (index_t c = 0; c < f_; ++c) {
          const A v = convert_to<A>(e.w2(r, c));
          w2[r * f_ + c] = v;
          w2t[c * d_ + r] = v;
        }
      for (index_t c = 0; c < d_; ++c)
        b2_[i * static_cast<std::size_t>(d_) + static_cast<std::size_t>(c)] = e.b2.empty() ? 0.0 : convert_to<double>(e.b2[c]);
    }
  }

  /// L(alpha); the gradient into grad when it is not null.
  double evaluate(const std::vector<double>& alpha, std::vector<double>* grad) {
    // The line search's accepted trial is evaluated again with the gradient: its forward (a, u, h, R) is kept.
    if (!(forward_current_ && alpha == forward_alpha_)) forward(alpha);
    const double loss = forward_loss_;
    if (grad == nullptr) return loss;
    forward_current_ = false;  // h_ is reused below
    return gradient(alpha, grad, loss);
  }

 private:
  /// a, u, h, the output and R = output - y at alpha, and the loss.
  void forward(const std::vector<double>& alpha) {
    const index_t t = t_, d = d_, f = f_;
    parallel_for(t, ctx_.threads(), [&](index_t row, int) {
      A* ar = a_.data() + row * f;
      A* ur = gated_ ? u_.data() + row * f : nullptr;
      A* hr = h_.data() + row * f;
      for (index_t c = 0; c < f; ++c) {
        double av = 0, uv = 0;
        for (std::size_t i = 0; i < n_; ++i) {
          av += alpha[i] * static_cast<double>(pre1_.data()[i * tf() + static_cast<std::size_t>(row * f + c)]);
          if (gated_) uv += alpha[i] * static_cast<double>(pre3_.data()[i * tf() + static_cast<std::size_t>(row * f + c)]);
        }
        ar[c] = static_cast<A>(av);
        const A act = moecomp::detail::activate<A>(act_, ar[c]);
        if (gated_) ur[c] = static_cast<A>(uv);
        hr[c] = gated_ ? act * ur[c] : act;
      }
    });
    mix(alpha, w2_.data(), w2a_.data(), df());
    std::vector<double> b2a(static_cast<std::size_t>(d), 0.0);
    for (std::size_t i = 0; i < n_; ++i)
      for (index_t c = 0; c < d; ++c) b2a[static_cast<std::size_t>(c)] += alpha[i] * b2_[i * static_cast<std::size_t>(d) + static_cast<std::size_t>(c)];
    moecomp::detail::gram_product<A>(ctx_, matrix_view<const A>(h_.data(), t, f, f), matrix_view<const A>(w2a_.data(), d, f, f),
                                     matrix_view<A>(out_.data(), t, d, d));
    parallel_for(t, ctx_.threads(), [&](index_t row, int) {
      for (index_t c = 0; c < d; ++c) {
        const std::size_t k = static_cast<std::size_t>(row * d + c);
        r_.data()[k] = static_cast<A>(static_cast<double>(out_.data()[k]) + b2a[static_cast<std::size_t>(c)] - static_cast<double>(y_[k]));
      }
    });
    forward_loss_ = squared_error<A>(ctx_, r_.data(), nullptr, t, d) / static_cast<double>(t);
    forward_alpha_ = alpha;
    forward_current_ = true;
  }

  /// The gradient at alpha from the forward's state (h_ is overwritten); returns the loss.
  double gradient(const std::vector<double>& alpha, std::vector<double>* grad, double loss) {
    const index_t t = t_, d = d_, f = f_;
    // M = R^T h (d x f) from the transposes, one GEMM over the tokens.
    transpose(r_.data(), t, d, rt_.data());
    transpose(h_.data(), t, f, ht_.data());
    moecomp::detail::gram_product<A>(ctx_, matrix_view<const A>(rt_.data(), d, t, t), matrix_view<const A>(ht_.data(), f, t, t),
                                     matrix_view<A>(m_.data(), d, f, f));
    // G = R W2_a (t x f), then G * act'(a) * u (into g_) and G * act(a) (into h_, no longer needed).
    mix(alpha, w2t_.data(), w2ta_.data(), df());
    moecomp::detail::gram_product<A>(ctx_, matrix_view<const A>(r_.data(), t, d, d), matrix_view<const A>(w2ta_.data(), f, d, d),
                                     matrix_view<A>(g_.data(), t, f, f));
    parallel_for(t, ctx_.threads(), [&](index_t row, int) {
      for (index_t c = 0; c < f; ++c) {
        const std::size_t k = static_cast<std::size_t>(row * f + c);
        const A gv = g_.data()[k], av = a_.data()[k];
        const A uv = gated_ ? u_.data()[k] : A(1);
        g_.data()[k] = gv * moecomp::detail::activate_derivative<A>(act_, av) * uv;
        h_.data()[k] = gv * moecomp::detail::activate<A>(act_, av);
      }
    });
    std::vector<double> rsum(static_cast<std::size_t>(d), 0.0);
    for (index_t row = 0; row < t; ++row)
      for (index_t c = 0; c < d; ++c) rsum[static_cast<std::size_t>(c)] += static_cast<double>(r_.data()[row * d + c]);
    grad->assign(n_, 0.0);
    const double scale = 2.0 / static_cast<double>(t);
    for (std::size_t i = 0; i < n_; ++i) {
      double s = block_dot<A>(ctx_, m_.data(), w2_.data() + i * df(), df());
      for (index_t c = 0; c < d; ++c) s += rsum[static_cast<std::size_t>(c)] * b2_[i * static_cast<std::size_t>(d) + static_cast<std::size_t>(c)];
      s += block_dot<A>(ctx_, g_.data(), pre1_.data() + i * tf(), tf());
      if (gated_) s += block_dot<A>(ctx_, h_.data(), pre3_.data() + i * tf(), tf());
      (*grad)[i] = scale * s;
    }
    return loss;
  }

  std::size_t tf() const noexcept { return static_cast<std::size_t>(t_) * static_cast<std::size_t>(f_); }
  std::size_t td() const noexcept { return static_cast<std::size_t>(t_) * static_cast<std::size_t>(d_); }
  std::size_t df() const noexcept { return static_cast<std::size_t>(d_) * static_cast<std::size_t>(f_); }
  void add_bias(A* m, vector_view<const W> b) {
    if (b.empty()) return;
    for (index_t row = 0; row < t_; ++row)
      for (index_t c = 0; c < f_; ++c) m[row * f_ + c] += convert_to<A>(b[c]);
  }
  void mix(const std::vector<double>& alpha, const A* stacked, A* out, std::size_t size) {
    const index_t rows = static_cast<index_t>((size + 4095) / 4096);
    parallel_for(rows, ctx_.threads(), [&](index_t k, int) {
      const std::size_t i0 = static_cast<std::size_t>(k) * 4096, i1 = std::min(size, i0 + 4096);
      for (std::size_t j = i0; j < i1; ++j) {
        double v = 0;
        for (std::size_t i = 0; i < n_; ++i) v += alpha[i] * static_cast<double>(stacked[i * size + j]);
        out[j] = static_cast<A>(v);
      }
    });
  }
  void transpose(const A* in, index_t rows, index_t cols, A* out) {
    constexpr index_t block = 64;
    const index_t rb = (rows + block - 1) / block, cb = (cols + block - 1) / block;
    parallel_for(rb * cb, ctx_.threads(), [&](index_t k, int) {
      const index_t r0 = (k / cb) * block, c0 = (k % cb) * block;
      for (index_t c = c0; c < std::min(c0 + block, cols); ++c)
        for (index_t r = r0; r < std::min(r0 + block, rows); ++r) out[c * rows + r] = in[r * cols + c];
    });
  }

  const host_context& ctx_;
  moe::activation act_;
  bool gated_;
  std::size_t n_;
  index_t t_, d_, f_;
  const A* y_;
  host_workspace<A> pre1_, pre3_, w2_, w2t_;
  std::vector<double> b2_;
  host_workspace<A> a_, u_, h_, out_, r_, rt_, ht_, g_, m_, w2a_, w2ta_;
  std::vector<double> forward_alpha_;
  double forward_loss_ = 0;
  bool forward_current_ = false;
};

/// A group's members, in the merge order (the dominant first), copied with each member's neurons permuted into
/// its dominant's order (align_members): row i of W1 / W3, entry i of b1 / b3 and column i of W2 of copy j are
/// neuron p_j(i) of member j. The correlation objective on fewer than two tokens keeps the identity.
template <class W>
class aligned_group {
 public:
  template <class A>
  aligned_group(const host_context& ctx, const merge_params& params, const moe::ffn_expert_stack_view<W>& experts,
                const std::vector<index_t>& ordered, matrix_view<const A> xg)
      : n_(static_cast<index_t>(ordered.size())), d_(experts.d_model()), f_(experts.d_ff()), gated_(experts.gated()),
        w1_(static_cast<std::size_t>(n_ * f_ * d_)), w3_(gated_ ? w1_.size() : 0), w2_(w1_.size()),
        b1_(experts.b1.empty() ? 0 : static_cast<std::size_t>(n_ * f_)), b3_(experts.b3.empty() ? 0 : static_cast<std::size_t>(n_ * f_)),
        b2_(experts.b2.empty() ? 0 : static_cast<std::size_t>(n_ * d_)) {
    const moe::ffn_expert_view<W> dominant = experts.expert(ordered[0]);
    const bool can_align = params.align.objective != align::align_objective::correlation || xg.rows() >= 2;
    std::vector<index_t> p(static_cast<std::size_t>(f_));
    for (index_t j = 0; j < n_; ++j) {
      const moe::ffn_expert_view<W> e = experts.expert(ordered[static_cast<std::size_t>(j)]);
      std::iota(p.begin(), p.end(), index_t(0));
      if (j > 0 && can_align) {
        const align::align_result r = align::align_experts<W>(ctx, params.align, dominant, e, xg, vector_view<index_t>(p.data(), f_));
        if (!r.ok()) status = r.status;
      }
      for (index_t i = 0; i < f_; ++i) {
        const index_t s = p[static_cast<std::size_t>(i)];
        std::copy_n(e.w1.row_ptr(s), d_, w1_.data() + (j * f_ + i) * d_);
        if (gated_) std::copy_n(e.w3.row_ptr(s), d_, w3_.data() + (j * f_ + i) * d_);
        if (!b1_.empty()) b1_[static_cast<std::size_t>(j * f_ + i)] = e.b1[s];
        if (!b3_.empty()) b3_[static_cast<std::size_t>(j * f_ + i)] = e.b3[s];
        for (index_t r = 0; r < d_; ++r) w2_[static_cast<std::size_t>((j * d_ + r) * f_ + i)] = e.w2(r, s);
      }
      if (!b2_.empty()) std::copy_n(e.b2.data(), d_, b2_.data() + j * d_);
    }
  }
  moe::ffn_expert_stack_view<W> stack() const {
    moe::ffn_expert_stack_view<W> v;
    v.w1 = matrix_stack_view<const W>(w1_.data(), n_, f_, d_);
    if (gated_) v.w3 = matrix_stack_view<const W>(w3_.data(), n_, f_, d_);
    v.w2 = matrix_stack_view<const W>(w2_.data(), n_, d_, f_);
    if (!b1_.empty()) v.b1 = matrix_view<const W>(b1_.data(), n_, f_, f_);
    if (!b3_.empty()) v.b3 = matrix_view<const W>(b3_.data(), n_, f_, f_);
    if (!b2_.empty()) v.b2 = matrix_view<const W>(b2_.data(), n_, d_, d_);
    return v;
  }
  moecomp::status status = moecomp::status::ok;

 private:
  index_t n_, d_, f_;
  bool gated_;
  std::vector<W> w1_, w3_, w2_, b1_, b3_, b2_;
};

template <class W, class A = accumulator_t<W>>
learned_outcome learn_coefficients(const host_context& ctx, const merge_params& params,
                                   const moe::ffn_expert_stack_view<W>& experts, const std::vector<index_t>& members,
                                   matrix_view<const A> xg, const A* y) {
  learned_problem<W, A> problem(ctx, params.forward, experts, members, xg, y);
  return projected_gradient(problem, members.size(), params);
}

/// The whole layer: each group merged by params.method into out.experts, the router rows, the map, the report.
template <class W, class A = accumulator_t<W>>
merge_report merge_experts_host(const host_context& ctx, const merge_params& params,
                                const moe::ffn_expert_stack_view<W>& experts, vector_view<const std::int64_t> labels,
                                index_t group_count, const merge_data<A>& data, const merge_outputs<W>& out) {
  const index_t e_count = experts.experts(), d = experts.d_model(), d_ff = experts.d_ff();
  const std::vector<std::vector<index_t>> members = group_members(labels, group_count);
  merge_report report = start_report(params, !data.router.empty(), e_count, group_count);
  const bool have_x = !data.x.empty();
  token_routes<A> routes;
  const bool routed = have_x && !data.router.empty();
  if (routed) routes = route_tokens<A>(ctx, data.x, data.router, params.routing_top_k);
  std::vector<double> freq;
  if (!data.frequencies.empty()) {
    freq.assign(data.frequencies.data(), data.frequencies.data() + e_count);
  } else if (routed) {
    freq.resize(static_cast<std::size_t>(e_count));
    const vector_view<double> f(freq.data(), e_count);
    if (params.frequency_top_k == params.routing_top_k) {
      count_frequencies(routes, e_count, f);  // the tokens are routed already
    } else {
      routing_frequencies_host<A>(ctx, params.frequency_top_k, data.x, data.router, f);
    }
  }
  for (index_t g = 0; g < group_count; ++g) {
    const group_plan plan = plan_group<A>(params, members[static_cast<std::size_t>(g)], g, freq, data.dominants,
                                          have_x ? data.x.rows() : 0, routed ? &routes : nullptr);
    const std::vector<index_t>& ordered = plan.ordered;
    const index_t dom = plan.dominant;
    merge_group_report& gr = report.groups[static_cast<std::size_t>(g)];
    gr.dominant = dom;
    const std::size_t n = ordered.size();
    const moe::ffn_expert_mutable_view<W> target = out.experts.expert(g);
    // The group's tokens (each once, capped) for learned, the correlation alignment and the error.
    const auto t_count = static_cast<index_t>(plan.tokens.size());
    const gathered_rows<A> xg_rows(ctx, have_x ? data.x : matrix_view<const A>(), plan.tokens);
    const matrix_view<const A> xg = xg_rows.view();
    gr.tokens = t_count;
    std::vector<double> c = plan.coefficients;  // in `ordered`'s order
    host_workspace<A> y(ctx, 0);
    const bool need_target =
        have_x && t_count > 0 && (params.report_errors || params.method == merge_method::learned);
    if (need_target)
      y = group_target<W, A>(ctx, params.forward, experts, plan.members, xg, plan.tokens, routed ? &routes : nullptr);
    // learned: the coefficients fitted on `stack`'s members `order`, recorded in the group's and layer's report.
    const auto learn = [&](const moe::ffn_expert_stack_view<W>& stack, const std::vector<index_t>& order) {
      const learned_outcome lo = learn_coefficients<W, A>(ctx, params, stack, order, xg, y.data());
      c = lo.alpha;
      gr.objective_initial = lo.initial;
      gr.objective_final = lo.final;
      gr.iterations = lo.iterations;
      report.iterations += lo.iterations;
      report.criterion = std::max(report.criterion, lo.last_step);
      if (!lo.converged && report.ok()) report.status = moecomp::status::iteration_limit;
    };
    if (params.align_members) {  // merge the members as aligned copies, the dominant first (see merge_params)
      const aligned_group<W> aligned(ctx, params, experts, ordered, xg);
      if (report.ok() && aligned.status != moecomp::status::ok) report.status = aligned.status;
      std::vector<index_t> local(n);
      std::iota(local.begin(), local.end(), index_t(0));
      if (params.method == merge_method::learned && need_target) learn(aligned.stack(), local);
      weighted_merge<W>(ctx, aligned.stack(), local, c, {}, target);
    } else switch (params.method) {
      case merge_method::average:
      case merge_method::uniform:
      case merge_method::frequency: weighted_merge<W>(ctx, experts, ordered, c, {}, target); break;
      case merge_method::dominant: weighted_merge<W>(ctx, experts, {dom}, {1.0}, {}, target); break;
      case merge_method::aligned: {
        std::vector<std::vector<index_t>> perms(n, std::vector<index_t>(static_cast<std::size_t>(d_ff)));
        std::iota(perms[0].begin(), perms[0].end(), index_t(0));
        // The correlation objective needs two tokens; a group with fewer keeps the identity (a plain mean).
        const bool can_align = params.align.objective != align::align_objective::correlation || t_count >= 2;
        for (std::size_t i = 1; i < n; ++i) {
          if (!can_align) {
            std::iota(perms[i].begin(), perms[i].end(), index_t(0));
            continue;
          }
          const align::align_result r =
              align::align_experts<W>(ctx, params.align, experts.expert(dom), experts.expert(ordered[i]), xg,
                                      vector_view<index_t>(perms[i].data(), d_ff));
          if (report.ok() && !r.ok()) report.status = r.status;
        }
        weighted_merge<W>(ctx, experts, ordered, c, perms, target);
        break;
      }
      case merge_method::fix_dom: {
        std::vector<std::vector<index_t>> matches(n);
        const std::vector<index_t> fd_tokens =
            cap_tokens(concatenated_tokens<A>(data.x.rows(), routed ? &routes : nullptr, plan.members),
                       params.token_cap, params.seed, static_cast<std::uint64_t>(g));
        const auto tf = static_cast<index_t>(fd_tokens.size());
        if (tf < 2 || n == 1) {  // no correlation to rank by: the identity matching (a plain mean)
          for (std::size_t i = 1; i < n; ++i) {
            matches[i].resize(static_cast<std::size_t>(d_ff));
            std::iota(matches[i].begin(), matches[i].end(), index_t(0));
          }
        } else {
          const gathered_rows<A> xf_rows(ctx, data.x, fd_tokens);
          const matrix_view<const A> xf = xf_rows.view();
          host_workspace<A> hidden(ctx, static_cast<std::size_t>(tf * d_ff));
          host_workspace<A> zd(ctx, static_cast<std::size_t>(tf * d_ff)), zj(ctx, static_cast<std::size_t>(tf * d_ff));
          const matrix_view<A> hv(hidden.data(), tf, d_ff, d_ff);
          std::vector<double> norm_d, norm_j;
          moe::ffn_hidden<W>(ctx, params.forward, experts.expert(dom), xf, hv);
          moecomp::detail::standardized_columns<A>(ctx, hv, matrix_view<A>(zd.data(), d_ff, tf, tf), &norm_d);
          for (std::size_t i = 1; i < n; ++i) {
            moe::ffn_hidden<W>(ctx, params.forward, experts.expert(ordered[i]), xf, hv);
            moecomp::detail::standardized_columns<A>(ctx, hv, matrix_view<A>(zj.data(), d_ff, tf, tf), &norm_j);
            fix_dom_match<A>(ctx, matrix_view<const A>(zd.data(), d_ff, tf, tf), norm_d,
                             matrix_view<const A>(zj.data(), d_ff, tf, tf), norm_j, tf, params.correlation_epsilon,
                             matches[i]);
          }
        }
        fix_dom_combine<W>(ctx, experts, ordered, matches, target);
        break;
      }
      case merge_method::learned: {
        if (need_target) learn(experts, ordered);
        weighted_merge<W>(ctx, experts, ordered, c, {}, target);
        break;
      }
    }
    for (std::size_t i = 0; i < n; ++i) report.coefficients[static_cast<std::size_t>(ordered[i])] = c[i];
    if (report.router == router_rule::merged_rows || report.router == router_rule::dominant_row)
      router_row<A>(report.router, plan, c, data.router, out.router.row_ptr(g));
    // The merge error on the group's tokens.
    if (need_target && params.report_errors) {
      host_workspace<A> ym(ctx, static_cast<std::size_t>(t_count * d));
      moe::ffn_forward<W>(ctx, params.forward, target.as_const(), xg, matrix_view<A>(ym.data(), t_count, d, d));
      const double num = squared_error<A>(ctx, y.data(), ym.data(), t_count, d);
      const double den = squared_error<A>(ctx, y.data(), static_cast<const A*>(nullptr), t_count, d);
      gr.error = den > 0 ? num / den : num;
    }
  }
  for (index_t e = 0; e < e_count; ++e) out.map[e] = labels[e];
  return report;
}

}  // namespace detail
}  // namespace merge
MOECOMP_NAMESPACE_END
