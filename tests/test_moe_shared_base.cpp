// ResMoE's shared-base layer (<moecomp/moe/shared_base.hpp>): experts encoded from the design matrix
// [W1 | W3 | W2^T] against a base, with a neuron permutation, pruned as one matrix; the layer forward against
// the dense forward of the original experts (nothing pruned: the same function) and of the restored experts
// (pruned); the squared approximation error against its definition; thread-count independence; the checks.
#include <moecomp/moe/ffn.hpp>
#include <moecomp/moe/shared_base.hpp>
#include <moecomp/sparse/residual.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <cmath>
#include <numeric>
#include <vector>

namespace {

using moecomp::host_context;
using moecomp::host_matrix;
using moecomp::index_t;
namespace moe = moecomp::moe;
namespace sparse = moecomp::sparse;

constexpr index_t d = 24, d_ff = 40;

struct expert {
  host_matrix<float> w1, w3, w2;
  moe::ffn_expert_view<float> view() const {
    moe::ffn_expert_view<float> v;
    v.w1 = w1.view();
    v.w3 = w3.view();
    v.w2 = w2.view();
    return v;
  }
};

expert random_expert(std::uint64_t seed, const expert* near = nullptr, double spread = 0.05) {
  moecomp::random_generator rng(seed);
  expert e{host_matrix<float>(d_ff, d), host_matrix<float>(d_ff, d), host_matrix<float>(d, d_ff)};
  auto fill = [&](host_matrix<float>& m, const host_matrix<float>* around, double scale) {
    for (index_t i = 0; i < m.rows() * m.cols(); ++i)
      m.data()[i] = static_cast<float>((around ? around->data()[i] : 0.0) + scale * rng.normal<double>());
  };
  const double s1 = 1.0 / std::sqrt(double(d)), s2 = 1.0 / std::sqrt(double(d_ff));
  fill(e.w1, near ? &near->w1 : nullptr, near ? spread * s1 : s1);
  fill(e.w3, near ? &near->w3 : nullptr, near ? spread * s1 : s1);
  fill(e.w2, near ? &near->w2 : nullptr, near ? spread * s2 : s2);
  return e;
}

/// The expert with its neurons permuted by p: row i goes to row p[i] (W2's column i to column p[i]).
expert permuted(const expert& e, const std::vector<index_t>& p) {
  expert out = e;
  for (index_t i = 0; i < d_ff; ++i) {
    const index_t s = p[static_cast<std::size_t>(i)];
    for (index_t j = 0; j < d; ++j) {
      out.w1(s, j) = e.w1(i, j);
      out.w3(s, j) = e.w3(i, j);
      out.w2(j, s) = e.w2(j, i);
    }
  }
  return out;
}

host_matrix<float> tokens(index_t n, std::uint64_t seed) {
  moecomp::random_generator rng(seed);
  host_matrix<float> x(n, d);
  for (index_t i = 0; i < n * d; ++i) x.data()[i] = static_cast<float>(rng.normal<double>());
  return x;
}


struct layer_data {
  expert base;
  std::vector<expert> experts;
  std::vector<std::vector<index_t>> perms;
  std::vector<moe::expert_residual> residuals;
  std::vector<moe::expert_residual_info> infos;
  moe::shared_base_ffn_view<float> view() const {
    moe::shared_base_ffn_view<float> v;
    v.w1 = base.w1.view();
    v.w3 = base.w3.view();
    v.w2 = base.w2.view();
    for (const auto& r : residuals) {
      v.r1.push_back(r.w1.view());
      v.r3.push_back(r.w3.view());
      v.r2.push_back(r.w2.view());
    }
    return v;
  }
};

/// Three experts near a base, each with its neurons shuffled (so the permutation matters), encoded.
layer_data make_layer(const sparse::residual_params& params) {
  layer_data L;
  L.base = random_expert(1);
  moecomp::random_generator rng(2);
  for (int e = 0; e < 3; ++e) {
    std::vector<index_t> p(d_ff);
    std::iota(p.begin(), p.end(), index_t(0));
    rng.shuffle(p.begin(), p.end());
    // The expert in its own order is the base-order expert with neurons moved by the inverse of p, so that
    // row i of it goes to base row p[i].
    std::vector<index_t> inverse(d_ff);
    for (index_t i = 0; i < d_ff; ++i) inverse[static_cast<std::size_t>(p[static_cast<std::size_t>(i)])] = i;
    L.experts.push_back(permuted(random_expert(10 + e, &L.base), inverse));
    L.perms.push_back(p);
    L.residuals.emplace_back();
    L.infos.push_back(moe::encode_expert_residual<float>(host_context(2), params, L.base.view(), L.experts.back().view(),
                                                         moecomp::make_vector_view<const index_t>(p.data(), d_ff),
                                                         L.residuals.back()));
  }
  return L;
}

/// The dense forward of each expert on its rows.
host_matrix<float> dense_forward(const std::vector<expert>& experts, const host_matrix<float>& x,
                                 const std::vector<index_t>& offsets) {
  host_matrix<float> y(x.rows(), d);
  for (std::size_t e = 0; e < experts.size(); ++e) {
    const index_t first = offsets[e], m = offsets[e + 1] - first;
    if (m == 0) continue;
    moe::ffn_forward<float>(host_context(1), {}, experts[e].view(), moecomp::matrix_view<const float>(x.data() + first * d, m, d),
                            moecomp::matrix_view<float>(y.data() + first * d, m, d));
  }
  return y;
}

}  // namespace

TEST_CASE("nothing pruned: the shared-base layer is the original experts, neuron order and all") {
  sparse::residual_params params;
  params.prune.sparsity = 0.0;
  const layer_data L = make_layer(params);
  const host_matrix<float> x = tokens(10, 3);
  const std::vector<index_t> offsets = {0, 4, 4, 10};  // expert 1 has no rows
  host_matrix<float> y(10, d);
  moe::shared_base_ffn_forward<float>(host_context(2), {}, L.view(), x.view(), moecomp::make_vector_view(offsets.data(), 4),
                                      y.view());
  CHECK(moecomp_test::max_relative_error(y, dense_forward(L.experts, x, offsets)) < 1e-5);
  for (const auto& info : L.infos) CHECK(info.squared_error < 1e-10);
}

TEST_CASE("ResMoE's pruning: one threshold over the whole design matrix, and the layer runs the restored experts") {
  sparse::residual_params params;
  params.prune.sparsity = 0.75;
  params.encode.values = sparse::value_dtype::bfloat16;
  const layer_data L = make_layer(params);
  const index_t design = d_ff * 3 * d;
  for (std::size_t e = 0; e < 3; ++e) {
    CAPTURE(e);
    const moe::expert_residual_info& info = L.infos[e];
    CHECK(info.pruned.kept == design - 2160);  // round(0.75 x 2880)
    CHECK(L.residuals[e].w1.count() + L.residuals[e].w3.count() + L.residuals[e].w2.count() ==
          static_cast<std::uint64_t>(info.pruned.kept));
    // Restore each matrix (base order) and check the approximation error against its definition:
    // ||T W - (B + R)||^2 over W1, W3 and W2, T moving row i to row p[i].
    host_matrix<float> r1(d_ff, d), r3(d_ff, d), r2(d, d_ff);
    sparse::decode_sparse<float>(host_context(1), L.residuals[e].w1.view(), r1.view());
    sparse::decode_sparse<float>(host_context(1), L.residuals[e].w3.view(), r3.view());
    sparse::decode_sparse<float>(host_context(1), L.residuals[e].w2.view(), r2.view());
    const std::vector<index_t>& p = L.perms[e];
    const expert& w = L.experts[e];
    double error = 0;
    for (index_t i = 0; i < d_ff; ++i) {
      const index_t s = p[static_cast<std::size_t>(i)];
      for (index_t j = 0; j < d; ++j) {
        const double a = double(w.w1(i, j)) - (double(L.base.w1(s, j)) + r1(s, j));
        const double b = double(w.w3(i, j)) - (double(L.base.w3(s, j)) + r3(s, j));
        const double c = double(w.w2(j, i)) - (double(L.base.w2(j, s)) + r2(j, s));
        error += a * a + b * b + c * c;
      }
    }
    CHECK(info.squared_error == doctest::Approx(error).epsilon(1e-5));
    CHECK(info.squared_error > 0);
  }
  // The layer equals the dense forward of the restored experts (in the base's order).
  std::vector<expert> restored;
  for (std::size_t e = 0; e < 3; ++e) {
    expert r = L.base;
    sparse::restore_dense<float, float>(host_context(1), L.base.w1.view(), L.residuals[e].w1.view(), r.w1.view());
    sparse::restore_dense<float, float>(host_context(1), L.base.w3.view(), L.residuals[e].w3.view(), r.w3.view());
    sparse::restore_dense<float, float>(host_context(1), L.base.w2.view(), L.residuals[e].w2.view(), r.w2.view());
    restored.push_back(r);
  }
  const host_matrix<float> x = tokens(12, 4);
  const std::vector<index_t> offsets = {0, 5, 7, 12};
  host_matrix<float> y(12, d);
  moe::shared_base_ffn_forward<float>(host_context(3), {}, L.view(), x.view(), moecomp::make_vector_view(offsets.data(), 4),
                                      y.view());
  CHECK(moecomp_test::max_relative_error(y, dense_forward(restored, x, offsets)) < 1e-5);
  // The layer error: the mean over experts, divided by d_ff.
  std::vector<double> errors;
  for (const auto& info : L.infos) errors.push_back(info.squared_error);
  CHECK(sparse::layer_approximation_error(errors, d_ff) ==
        doctest::Approx((errors[0] + errors[1] + errors[2]) / 3 / d_ff));
}

TEST_CASE("the shared-base layer gives the same bytes at any thread count") {
  sparse::residual_params params;
  params.prune.keep = 0.3;
  params.encode.format = sparse::sparse_format::csr16;
  const layer_data L = make_layer(params);
  const host_matrix<float> x = tokens(70, 5);
  const std::vector<index_t> offsets = {0, 30, 31, 70};
  moecomp_test::check_same_at_thread_counts([&](const host_context& ctx) {
    host_matrix<float> y(70, d);
    moe::shared_base_ffn_forward<float>(ctx, {}, L.view(), x.view(), moecomp::make_vector_view(offsets.data(), 4), y.view());
    return y.storage();
  });
}

TEST_CASE("encode_expert_residual refuses biases, non-finite weights and other shapes") {
  using moecomp_test::thrown_message;
  const expert base = random_expert(1), other = random_expert(2);
  sparse::residual_params params;
  params.prune.keep = 0.25;
  moe::expert_residual out;
  std::vector<float> bias(d_ff, 1.0f);
  moe::ffn_expert_view<float> with_bias = other.view();
  with_bias.b1 = moecomp::vector_view<const float>(bias.data(), d_ff);
  CHECK(thrown_message([&] {
          moe::encode_expert_residual<float>(host_context(1), params, base.view(), with_bias, {}, out);
        }) == "encode_expert_residual: expert must have no biases (shared-base experts are bias-free), got 40 bias entries");
  expert broken = random_expert(3);
  broken.w2(3, 5) = NAN;
  CHECK(thrown_message([&] {
          moe::encode_expert_residual<float>(host_context(1), params, base.view(), broken.view(), {}, out);
        }) == "encode_expert_residual: expert.w2 must be finite, got nan at (3, 5)");
  moe::ffn_expert_view<float> plain = other.view();
  plain.w3 = {};
  CHECK(thrown_message([&] {
          moe::encode_expert_residual<float>(host_context(1), params, base.view(), plain, {}, out);
        }) == "encode_expert_residual: expert must have the base's shape (d_ff 40, d 24, gated), got d_ff 40, d 24, not gated");
}
