// The GEMM under every GEMM-bound algorithm (core/detail/gemm.hpp), through whichever provider this file is
// compiled with: Eigen's (test_gemm_providers), oneDNN's (test_gemm_providers_onednn, MOECOMP_USE_ONEDNN) or
// a CBLAS (test_gemm_providers_cblas, MOECOMP_USE_CBLAS). Each checks:
// - float and bfloat16 GEMMs against a double-precision reference, within the float summation bound;
// - that the results do not depend on the thread count (distances, expert forwards, the MoE layer);
// - the bf16 matmul precision (docs/core.md, "Matmul precision") against the exact one, within its documented
//   error, and that both products paths of the expert forward (panels, token tiles) honour it, as do the
//   alignment costs on design rows and the learned merge's pre-activations.
#include <moecomp/align/align.hpp>
#include <moecomp/core/gemm.hpp>
#include <moecomp/distance/pairwise_distance.hpp>
#include <moecomp/merge/merge.hpp>
#include <moecomp/moe/layer.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace {

using bf16_t = moecomp::bfloat16;  // (OpenBLAS's cblas.h declares a global bfloat16)
using moecomp::index_t;
namespace moe = moecomp::moe;

template <class T>
std::vector<T> random_values(index_t n, std::uint64_t seed, double scale = 1.0) {
  moecomp::random_generator rng(seed);
  std::vector<T> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = moecomp::convert_to<T>(scale * rng.normal<double>());
  return v;
}

/// The largest |got - want| / bound over a GEMM's entries, bound = 2 d u sum_k |a_ik b_jk| (u = 2^-24, the
/// float unit roundoff; the textbook bound for any summation order is d u): below 1 passes.
template <class T>
double worst_bound_ratio(float alpha, const std::vector<T>& a, index_t lda, const std::vector<T>& b, index_t ldb,
                         index_t r, index_t c, index_t d, const std::vector<float>& out, index_t ldo) {
  double worst = 0;
  for (index_t i = 0; i < r; ++i)
    for (index_t j = 0; j < c; ++j) {
      double want = 0, magnitude = 0;
      for (index_t k = 0; k < d; ++k) {
        const double p = static_cast<double>(moecomp::convert_to<float>(a[static_cast<std::size_t>(i * lda + k)])) *
                         static_cast<double>(moecomp::convert_to<float>(b[static_cast<std::size_t>(j * ldb + k)]));
        want += p;
        magnitude += std::fabs(p);
      }
      want *= alpha;
      const double bound = 2.0 * static_cast<double>(d + 1) * std::ldexp(1.0, -24) * std::fabs(alpha) * magnitude +
                           std::numeric_limits<float>::min();
      worst = std::max(worst, std::fabs(static_cast<double>(out[static_cast<std::size_t>(i * ldo + j)]) - want) / bound);
    }
  return worst;
}

}  // namespace

TEST_CASE("the provider this test was built with") {
  const std::string name = moecomp::detail::gemm_provider_name();
#if defined(MOECOMP_USE_ONEDNN)
  CHECK(name == "onednn");
#elif defined(MOECOMP_USE_CBLAS)
  CHECK(name == "cblas");
#else
  CHECK(name == "eigen");
#endif
  MESSAGE("GEMM provider: " << name);
}

TEST_CASE("float GEMM: A B^T within the float summation bound, any strides, alpha, d = 0") {
  struct shape {
    index_t r, c, d, pad;
    float alpha;
  };
  for (const shape s : {shape{1, 1, 1, 0, 1.0f}, shape{7, 5, 3, 2, 1.0f}, shape{64, 33, 129, 0, 1.0f},
                        shape{130, 70, 300, 5, -0.5f}, shape{256, 256, 512, 0, 2.0f}}) {
    CAPTURE(s.r);
    CAPTURE(s.c);
    CAPTURE(s.d);
    const index_t lda = s.d + s.pad, ldb = s.d + 2 * s.pad, ldo = s.c + s.pad;
    const auto a = random_values<float>(s.r * lda, 1), b = random_values<float>(s.c * ldb, 2);
    std::vector<float> out(static_cast<std::size_t>(s.r * ldo), 7.0f);
    moecomp::detail::gemm_abt<float>(s.alpha, a.data(), lda, b.data(), ldb, s.r, s.c, s.d, out.data(), ldo);
    CHECK(worst_bound_ratio(s.alpha, a, lda, b, ldb, s.r, s.c, s.d, out, ldo) < 1.0);
    // The padding between rows is never written.
    if (s.pad > 0) CHECK(out[static_cast<std::size_t>(s.c)] == 7.0f);
  }
  std::vector<float> out(6, 3.0f);
  moecomp::detail::gemm_abt<float>(1.0f, nullptr, 0, nullptr, 0, 2, 3, 0, out.data(), 3);
  CHECK(out == std::vector<float>(6, 0.0f));
}

TEST_CASE("bfloat16 GEMM: exact products, float sums, float result") {
  const moecomp::host_context ctx(1);
  struct shape {
    index_t r, c, d, pad;
  };
  for (const shape s : {shape{1, 1, 1, 0}, shape{3, 300, 17, 1}, shape{300, 64, 257, 3}, shape{512, 40, 2048, 0}}) {
    CAPTURE(s.r);
    CAPTURE(s.c);
    CAPTURE(s.d);
    const index_t lda = s.d + s.pad, ldb = s.d + s.pad, ldo = s.c + s.pad;
    const auto a = random_values<bf16_t>(s.r * lda, 3), b = random_values<bf16_t>(s.c * ldb, 4);
    std::vector<float> out(static_cast<std::size_t>(s.r * ldo), 7.0f);
    moecomp::detail::gemm_abt_bf16(ctx, 1.0f, a.data(), lda, b.data(), ldb, s.r, s.c, s.d, out.data(), ldo);
    CHECK(worst_bound_ratio(1.0f, a, lda, b, ldb, s.r, s.c, s.d, out, ldo) < 1.0);
  }
  // One product whose exact value needs all 16 significant bits: (1 + 2^-7)^2 = 1 + 2^-6 + 2^-14.
  const std::vector<bf16_t> one{bf16_t(1.0f + 0x1p-7f)};
  float out = 0;
  moecomp::detail::gemm_abt_bf16(ctx, 1.0f, one.data(), 1, one.data(), 1, 1, 1, 1, &out, 1);
  CHECK(out == 1.0f + 0x1p-6f + 0x1p-14f);
}

TEST_CASE("matmul_abt: the public GEMM over tiles, float and bfloat16, the same bytes at any thread count") {
  // 600 x 1100 outputs: 3 x 3 tiles of 256 x 512, the last ones partial; padded row strides.
  const index_t n = 600, m = 1100, d = 70, lda = 72, ldo = 1104;
  const auto a = random_values<float>(n * lda, 21), b = random_values<float>(m * d, 22);
  const moecomp::matrix_view<const float> av(a.data(), n, d, lda), bv(b.data(), m, d);
  auto run = [&](const moecomp::host_context& ctx) {
    std::vector<float> out(static_cast<std::size_t>(n * ldo), 0.0f);
    moecomp::matmul_abt<float>(ctx, 0.5f, av, bv, moecomp::matrix_view<float>(out.data(), n, m, ldo));
    return out;
  };
  CHECK(worst_bound_ratio(0.5f, a, lda, b, d, n, m, d, run(moecomp::host_context(1)), ldo) < 1.0);
  moecomp_test::check_same_at_thread_counts(run);

  std::vector<bf16_t> ab(a.size()), bb(b.size());
  for (std::size_t i = 0; i < a.size(); ++i) ab[i] = bf16_t(a[i]);
  for (std::size_t i = 0; i < b.size(); ++i) bb[i] = bf16_t(b[i]);
  auto run_bf16 = [&](const moecomp::host_context& ctx) {
    std::vector<float> out(static_cast<std::size_t>(n * m));
    moecomp::matmul_abt(ctx, 1.0f, moecomp::matrix_view<const bf16_t>(ab.data(), n, d, lda),
                        moecomp::matrix_view<const bf16_t>(bb.data(), m, d), moecomp::matrix_view<float>(out.data(), n, m));
    return out;
  };
  CHECK(worst_bound_ratio(1.0f, ab, lda, bb, d, n, m, d, run_bf16(moecomp::host_context(1)), m) < 1.0);
  moecomp_test::check_same_at_thread_counts(run_bf16);

  std::vector<float> out(8);
  CHECK(moecomp_test::thrown_message([&] {
          moecomp::matmul_abt<float>({}, 1.0f, moecomp::matrix_view<const float>(a.data(), 2, 3),
                                     moecomp::matrix_view<const float>(b.data(), 4, 4), moecomp::matrix_view<float>(out.data(), 2, 4));
        }) == "matmul_abt: a and b must have the same columns, got 3 and 4");
  CHECK(moecomp_test::thrown_message([&] {
          moecomp::matmul_abt<float>({}, 1.0f, moecomp::matrix_view<const float>(a.data(), 2, 3),
                                     moecomp::matrix_view<const float>(b.data(), 5, 3), moecomp::matrix_view<float>(out.data(), 2, 4));
        }) == "matmul_abt: out must be 2 x 5 (a's rows by b's rows), got 2 x 4");
}

TEST_CASE("the GEMM-bound algorithms give the same bytes at any thread count") {
  const auto points = random_values<float>(600 * 96, 5);
  moecomp_test::check_same_at_thread_counts([&](const moecomp::host_context& ctx) {
    std::vector<float> out(600 * 600);
    moecomp::distance::pairwise_distances<float>(ctx, {}, moecomp::matrix_view<const float>(points.data(), 600, 96),
                                                moecomp::matrix_view<float>(out.data(), 600, 600));
    return out;
  });
}

namespace {

/// An 8-expert bfloat16 MoE layer with a top-2 router and the forward of `tokens` tokens.
struct bf16_layer {
  index_t e = 8, d = 96, d_ff = 160;
  std::vector<bf16_t> w1, w3, w2;
  std::vector<float> router;
  bf16_layer()
      : w1(random_values<bf16_t>(e * d_ff * d, 11, 1 / std::sqrt(96.0))),
        w3(random_values<bf16_t>(e * d_ff * d, 12, 1 / std::sqrt(96.0))),
        w2(random_values<bf16_t>(e * d * d_ff, 13, 1 / std::sqrt(160.0))),
        router(random_values<float>(e * d, 14)) {}
  moe::moe_layer_view<bf16_t> view() const {
    moe::moe_layer_view<bf16_t> v;
    v.router = moecomp::matrix_view<const float>(router.data(), e, d);
    v.experts = {moecomp::make_matrix_stack_view(w1.data(), e, d_ff, d),
                 moecomp::make_matrix_stack_view(w3.data(), e, d_ff, d),
                 moecomp::make_matrix_stack_view(w2.data(), e, d, d_ff), {}, {}, {}};
    return v;
  }
  std::vector<float> forward(moecomp::host_context ctx, moecomp::matmul_precision precision,
                             const std::vector<float>& x) const {
    ctx.matmul = precision;
    const index_t t = static_cast<index_t>(x.size()) / d;
    std::vector<float> y(x.size());
    moe::moe_layer_params p;
    p.routing.top_k = 2;
    (void)moe::moe_layer_forward<bf16_t>(ctx, p, view(), moecomp::matrix_view<const float>(x.data(), t, d),
                                           moecomp::matrix_view<float>(y.data(), t, d));
    return y;
  }
};

/// max |got - want| / max |want|.
double relative_max_error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  return err / scale;
}

}  // namespace

TEST_CASE("bf16 matmul precision: the MoE layer and the expert forward within 1e-2 of exact, any thread count") {
  const bf16_layer layer;
  const auto x = random_values<float>(700 * layer.d, 15);
  const auto exact = layer.forward(moecomp::host_context(1), moecomp::matmul_precision::exact, x);
  const auto bf16 = layer.forward(moecomp::host_context(1), moecomp::matmul_precision::bf16, x);
  const double err = relative_max_error(bf16, exact);
  MESSAGE("MoE layer, bf16 against exact products: max error " << err << " of the largest output");
  CHECK(err < 1e-2);
  CHECK(err > 0);  // the activations were rounded: the paths differ
  for (auto precision : {moecomp::matmul_precision::exact, moecomp::matmul_precision::bf16})
    moecomp_test::check_same_at_thread_counts(
        [&](const moecomp::host_context& ctx) { return layer.forward(ctx, precision, x); });

  // One expert: the panel path (tokens <= token_tile) and the tile path (more).
  const moe::ffn_expert_view<bf16_t> expert = layer.view().experts.expert(3);
  for (index_t tokens : {index_t{40}, index_t{700}}) {
    CAPTURE(tokens);
    auto run = [&](moecomp::matmul_precision precision, int threads) {
      moecomp::host_context ctx(threads);
      ctx.matmul = precision;
      std::vector<float> y(static_cast<std::size_t>(tokens * layer.d));
      moe::ffn_forward<bf16_t>(ctx, {}, expert, moecomp::matrix_view<const float>(x.data(), tokens, layer.d),
                                 moecomp::matrix_view<float>(y.data(), tokens, layer.d));
      return y;
    };
    const auto e_exact = run(moecomp::matmul_precision::exact, 1), e_bf16 = run(moecomp::matmul_precision::bf16, 1);
    CHECK(relative_max_error(e_bf16, e_exact) < 1e-2);
    CHECK(relative_max_error(e_bf16, e_exact) > 0);
    CHECK(moecomp_test::detail::differing_entries(run(moecomp::matmul_precision::bf16, 2), e_bf16) == 0);
  }
}

TEST_CASE("bf16 matmul precision: the Gram tiles of bfloat16 rows are exact products with float sums") {
  // 300 x 260 outputs over 2 x 2 tiles of 256; the float result against the double sum of the exact products.
  const index_t n = 300, m = 260, d = 130;
  const auto a = random_values<bf16_t>(n * d, 31), b = random_values<bf16_t>(m * d, 32);
  auto run = [&](const moecomp::host_context& ctx) {
    std::vector<float> out(static_cast<std::size_t>(n * m));
    moecomp::detail::gram_product<bf16_t>(ctx, moecomp::matrix_view<const bf16_t>(a.data(), n, d),
                                          moecomp::matrix_view<const bf16_t>(b.data(), m, d),
                                          moecomp::matrix_view<float>(out.data(), n, m));
    return out;
  };
  CHECK(worst_bound_ratio(1.0f, a, d, b, d, n, m, d, run(moecomp::host_context(1)), m) < 1.0);
  moecomp_test::check_same_at_thread_counts(run);
}

TEST_CASE("bf16 matmul precision: aligning bfloat16 experts by their design rows finds the exact path's matching") {
  // Two gated bfloat16 experts of 300 neurons (design rows of 3 x 64 values, 2 x 2 Gram tiles). Under bf16 the
  // design rows stay bfloat16 and only the order of the cost's float sums changes, so the matching and its cost
  // (recomputed from the rows in double) are the exact path's.
  const index_t d = 64, d_ff = 300;
  const auto w1 = random_values<bf16_t>(2 * d_ff * d, 41, 0.125), w3 = random_values<bf16_t>(2 * d_ff * d, 42, 0.125);
  const auto w2 = random_values<bf16_t>(2 * d * d_ff, 43, 0.06);
  const moe::ffn_expert_stack_view<bf16_t> stack{moecomp::make_matrix_stack_view(w1.data(), 2, d_ff, d),
                                                 moecomp::make_matrix_stack_view(w3.data(), 2, d_ff, d),
                                                 moecomp::make_matrix_stack_view(w2.data(), 2, d, d_ff), {}, {}, {}};
  for (auto objective : {moecomp::align::align_objective::weights, moecomp::align::align_objective::inner}) {
    CAPTURE(moecomp::align::to_string(objective));
    moecomp::align::align_params params;
    params.objective = objective;
    auto run = [&](moecomp::host_context ctx, moecomp::matmul_precision precision) {
      ctx.matmul = precision;
      std::vector<index_t> p(static_cast<std::size_t>(d_ff));
      const auto r = moecomp::align::align_experts<bf16_t>(ctx, params, stack.expert(0), stack.expert(1), {},
                                                           moecomp::make_vector_view(p.data(), d_ff));
      CHECK(r.ok());
      return std::make_tuple(p, std::vector<double>{r.cost});
    };
    const auto exact = run(moecomp::host_context(1), moecomp::matmul_precision::exact);
    const auto bf16 = run(moecomp::host_context(1), moecomp::matmul_precision::bf16);
    CHECK(std::get<0>(bf16) == std::get<0>(exact));
    CHECK(std::get<1>(bf16) == std::get<1>(exact));
    moecomp_test::check_same_at_thread_counts(
        [&](const moecomp::host_context& ctx) { return run(ctx, moecomp::matmul_precision::bf16); });
  }
  // A planted matching: expert 0 with its neurons shuffled is aligned back to expert 0 exactly.
  std::vector<index_t> shuffle(static_cast<std::size_t>(d_ff));
  for (index_t i = 0; i < d_ff; ++i) shuffle[static_cast<std::size_t>(i)] = (i * 7 + 3) % d_ff;
  std::vector<bf16_t> s1(static_cast<std::size_t>(d_ff * d)), s3(s1.size()), s2(s1.size());
  const moe::ffn_expert_mutable_view<bf16_t> shuffled{moecomp::matrix_view<bf16_t>(s1.data(), d_ff, d),
                                                      moecomp::matrix_view<bf16_t>(s3.data(), d_ff, d),
                                                      moecomp::matrix_view<bf16_t>(s2.data(), d, d_ff), {}, {}, {}};
  moecomp::align::permute_neurons<bf16_t>(moecomp::host_context(1), stack.expert(0),
                                          moecomp::make_vector_view<const index_t>(shuffle.data(), d_ff), shuffled);
  moecomp::host_context ctx(2);
  ctx.matmul = moecomp::matmul_precision::bf16;
  std::vector<index_t> p(static_cast<std::size_t>(d_ff));
  const auto r = moecomp::align::align_experts<bf16_t>(ctx, {}, stack.expert(0), shuffled.as_const(), {},
                                                       moecomp::make_vector_view(p.data(), d_ff));
  CHECK(r.cost == 0.0);
  for (index_t i = 0; i < d_ff; ++i) CHECK(shuffle[static_cast<std::size_t>(p[static_cast<std::size_t>(i)])] == i);
}

TEST_CASE("bf16 matmul precision: the learned merge of bfloat16 experts stays within 1e-2 of the exact path") {
  // Experts 0, 2 and 5 of the bfloat16 layer merged with learned coefficients on 300 tokens: under bf16 the
  // tokens are rounded to bfloat16 for the pre-activations x W1^T and x W3^T, so the objective and the
  // coefficients move by the activations' rounding only.
  const bf16_layer layer;
  const auto x = random_values<float>(300 * layer.d, 51);
  const std::vector<std::int64_t> groups{0, 1, 0, 2, 3, 0, 4, 5};
  auto run = [&](moecomp::host_context ctx, moecomp::matmul_precision precision) {
    ctx.matmul = precision;
    moecomp::merge::merge_params params;
    params.method = moecomp::merge::merge_method::learned;
    moecomp::merge::merge_data<float> data;
    data.x = moecomp::matrix_view<const float>(x.data(), 300, layer.d);
    std::vector<bf16_t> o1(static_cast<std::size_t>(6 * layer.d_ff * layer.d)), o3(o1.size()), o2(o1.size());
    std::vector<float> router(static_cast<std::size_t>(6 * layer.d));
    std::vector<std::int64_t> map(8);
    const moecomp::merge::merge_outputs<bf16_t> out{
        {moecomp::make_matrix_stack_view(o1.data(), 6, layer.d_ff, layer.d),
         moecomp::make_matrix_stack_view(o3.data(), 6, layer.d_ff, layer.d),
         moecomp::make_matrix_stack_view(o2.data(), 6, layer.d, layer.d_ff), {}, {}, {}},
        moecomp::matrix_view<float>(router.data(), 6, layer.d),
        moecomp::make_vector_view(map.data(), 8)};
    data.router = moecomp::matrix_view<const float>(layer.router.data(), layer.e, layer.d);
    const auto report = moecomp::merge::merge_experts<bf16_t>(
        ctx, params, layer.view().experts, moecomp::make_vector_view<const std::int64_t>(groups.data(), 8), data, out);
    CHECK(report.ok());
    std::vector<std::uint16_t> bits;  // the merged experts' bytes
    for (const auto* v : {&o1, &o3, &o2})
      for (bf16_t w : *v) bits.push_back(w.bits);
    return std::make_tuple(report.coefficients, std::vector<double>{report.groups[0].objective_final}, bits);
  };
  const auto exact = run(moecomp::host_context(1), moecomp::matmul_precision::exact);
  const auto bf16 = run(moecomp::host_context(1), moecomp::matmul_precision::bf16);
  const double objective_exact = std::get<1>(exact)[0], objective_bf16 = std::get<1>(bf16)[0];
  MESSAGE("learned merge objective: exact " << objective_exact << ", bf16 " << objective_bf16);
  CHECK(std::fabs(objective_bf16 - objective_exact) <= 1e-2 * objective_exact);
  CHECK(objective_bf16 != objective_exact);  // the tokens were rounded: the paths differ
  double coefficient_gap = 0;
  for (std::size_t e : {std::size_t{0}, std::size_t{2}, std::size_t{5}})
    coefficient_gap = std::max(coefficient_gap, std::fabs(std::get<0>(bf16)[e] - std::get<0>(exact)[e]));
  MESSAGE("learned coefficients: largest change " << coefficient_gap);
  CHECK(coefficient_gap <= 1e-2);
  moecomp_test::check_same_at_thread_counts(
      [&](const moecomp::host_context& ctx) { return run(ctx, moecomp::matmul_precision::bf16); });
}

TEST_CASE("matmul_precision: names round-trip, others are refused naming the choices") {
  for (auto p : {moecomp::matmul_precision::exact, moecomp::matmul_precision::bf16})
    CHECK(moecomp::parse_matmul_precision(moecomp::to_string(p)) == p);
  CHECK(moecomp_test::thrown_message([] { (void)moecomp::parse_matmul_precision("fp16"); }) ==
        "matmul_precision: expected exact or bf16, got 'fp16'");
  CHECK(moecomp::host_context().matmul == moecomp::matmul_precision::exact);
}
