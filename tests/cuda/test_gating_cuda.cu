// Device routing and dispatch against the host's: route_fixed for top-k (softmax, renormalised), the
// dynamic rules and the DeepSeek group rules (V3 with bias, groups and scaling; V2; these compiled, not yet
// run on hardware); the dispatch plan with padding and capacity; gather and combine. Argument checks pass
// without a GPU; the rest runs under `ctest -L cuda`.
#include <doctest/doctest.h>
#include <moecomp/cuda/moecomp.cuh>
#include <moecomp/gating/dispatch.hpp>
#include <moecomp/gating/routing.hpp>  // Eigen-free host code: the reference

#include "device_test_support.cuh"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

using moecomp::index_t;
namespace gating = moecomp::gating;
using moecomp_test::device_fixture;

}  // namespace

TEST_CASE("device routing: argument checks run before any device work") {
  const moecomp::cuda_context ctx(nullptr);
  float storage[64] = {0};
  std::int64_t id_storage[64] = {0};
  const auto logits = moecomp::matrix_view<const float, moecomp::device_memory>(storage, 4, 8);
  const auto ids = moecomp::matrix_view<std::int64_t, moecomp::device_memory>(id_storage, 4, 2);
  const auto w = moecomp::matrix_view<float, moecomp::device_memory>(storage + 32, 4, 2);
  gating::routing_params p;
  p.top_k = 9;
  CHECK_THROWS_WITH_AS(gating::route_fixed<float>(ctx, p, logits, ids, w),
                       "route_fixed: params.top_k must be in [1, 8] (the experts), got 9", moecomp::invalid_argument);
  // The DeepSeek group rules run on the device now: their parameter and bias checks come first.
  p.rule = gating::routing_rule::deepseek_v3;
  p.top_k = 2;
  p.n_group = 3;
  CHECK_THROWS_WITH_AS(gating::route_fixed<float>(ctx, p, logits, ids, w),
                       "route_fixed: params.n_group must divide the 8 experts, got 3", moecomp::invalid_argument);
  p.n_group = 2;
  const auto bias = moecomp::vector_view<const float, moecomp::device_memory>(storage + 48, 5);
  CHECK_THROWS_WITH_AS(gating::route_fixed<float>(ctx, p, logits, bias, ids, w),
                       "route_fixed: bias (the selection-only correction) must be empty, or have 8 entries with the "
                       "deepseek_v3 rule, got 5",
                       moecomp::invalid_argument);
  p.rule = gating::routing_rule::group_limited_greedy;
  const auto bias8 = moecomp::vector_view<const float, moecomp::device_memory>(storage + 48, 8);
  CHECK_THROWS_AS(gating::route_fixed<float>(ctx, p, logits, bias8, ids, w), moecomp::invalid_argument);
  p.top_k = 5;  // more than the kept group's 4 experts
  CHECK_THROWS_AS(gating::route_fixed<float>(ctx, p, logits, ids, w), moecomp::invalid_argument);
}

TEST_CASE("device route_fixed equals the host's for top-k and the dynamic rules") {
  device_fixture fixture;
  const moecomp::cuda_context ctx(fixture.stream, fixture.handle);
  const index_t t = 300, e = 40;
  moecomp::host_matrix<float> logits(t, e);
  moecomp::random_generator rng(1);
  rng.fill_normal(logits.view());
  moecomp::device_buffer<float> dl(ctx, t * e);
  moecomp::copy_to_device(ctx, logits.const_view(), dl.view(t, e));
  for (auto rule : {gating::routing_rule::top_k, gating::routing_rule::threshold, gating::routing_rule::cumulative,
                    gating::routing_rule::top_p}) {
    gating::routing_params p;
    p.rule = rule;
    p.top_k = 4;
    p.renormalize = true;
    p.tau = 0.6;
    p.max_k = rule == gating::routing_rule::top_k ? 0 : 12;
    const index_t k = gating::max_experts_per_token(p, e);
    moecomp::host_matrix<std::int64_t> host_ids(t, k), dev_ids(t, k);
    moecomp::host_matrix<float> host_w(t, k), dev_w(t, k);
    (void)gating::route_fixed<float>(moecomp::host_context(1), p, logits.const_view(), {}, host_ids.view(), host_w.view());
    moecomp::device_buffer<std::int64_t> di(ctx, t * k);
    moecomp::device_buffer<float> dw(ctx, t * k);
    gating::route_fixed<float>(ctx, p, dl.view(t, e).as_const(), di.view(t, k), dw.view(t, k));
    moecomp::copy_to_host(ctx, di.view(t, k).as_const(), dev_ids.view());
    moecomp::copy_to_host(ctx, dw.view(t, k).as_const(), dev_w.view());
    REQUIRE(cudaStreamSynchronize(ctx.stream) == cudaSuccess);
    for (index_t i = 0; i < t; ++i)
      for (index_t q = 0; q < k; ++q) {
        CHECK(dev_ids(i, q) == host_ids(i, q));
        CHECK(std::abs(dev_w(i, q) - host_w(i, q)) <= 1e-6f);
      }
  }
}

namespace {

/// The device route_fixed of a DeepSeek group rule against the host's on the same logits and bias: ids equal,
/// weights to `tolerance` relative (the device's exp is CUDA's), K = top_k + 2 so the sentinel slots are filled.
template <class A>
void check_group_rule(const gating::routing_params& p, index_t t, index_t e, bool with_bias, double tolerance,
                      std::uint64_t seed) {
  device_fixture fixture;
  const moecomp::cuda_context ctx(fixture.stream, fixture.handle);
  moecomp::host_matrix<A> logits(t, e);
  moecomp::random_generator rng(seed);
  rng.fill_normal(logits.view());
  std::vector<A> bias;
  if (with_bias)
    for (index_t j = 0; j < e; ++j)  // every fifth strongly negative: kept keys below the masked 0.0
      bias.push_back(static_cast<A>(j % 5 == 0 ? -1.5 : 0.3 * rng.normal<double>()));
  const auto host_bias = moecomp::make_vector_view(static_cast<const A*>(bias.data()), static_cast<index_t>(bias.size()));
  const index_t k = p.top_k + 2;
  moecomp::host_matrix<std::int64_t> host_ids(t, k), dev_ids(t, k);
  moecomp::host_matrix<A> host_w(t, k), dev_w(t, k);
  (void)gating::route_fixed<A>(moecomp::host_context(1), p, logits.const_view(), host_bias, host_ids.view(),
                               host_w.view());
  moecomp::device_buffer<A> dl(ctx, t * e), db(ctx, e), dw(ctx, t * k);
  moecomp::device_buffer<std::int64_t> di(ctx, t * k);
  moecomp::copy_to_device(ctx, logits.const_view(), dl.view(t, e));
  moecomp::vector_view<const A, moecomp::device_memory> device_bias;
  if (with_bias) {
    moecomp::copy_to_device(ctx, host_bias, db.view());
    device_bias = db.view().as_const();
  }
  gating::route_fixed<A>(ctx, p, dl.view(t, e).as_const(), device_bias, di.view(t, k), dw.view(t, k));
  moecomp::copy_to_host(ctx, di.view(t, k).as_const(), dev_ids.view());
  moecomp::copy_to_host(ctx, dw.view(t, k).as_const(), dev_w.view());
  REQUIRE(cudaStreamSynchronize(ctx.stream) == cudaSuccess);
  for (index_t i = 0; i < t; ++i)
    for (index_t q = 0; q < k; ++q) {
      CHECK(dev_ids(i, q) == host_ids(i, q));
      const double h = static_cast<double>(host_w(i, q)), d = static_cast<double>(dev_w(i, q));
      CHECK(std::abs(d - h) <= tolerance * std::max(1.0, std::abs(h)));
    }
}

}  // namespace

TEST_CASE("device route_fixed equals the host's for DeepSeek-V3 (bias, groups, scaling)") {
  gating::routing_params p;
  p.rule = gating::routing_rule::deepseek_v3;
  p.n_group = 8;
  p.topk_group = 4;
  p.top_k = 8;
  p.renormalize = true;
  p.routed_scaling_factor = 2.5;
  check_group_rule<double>(p, 300, 256, true, 1e-12, 3);  // DeepSeek-V3's shape: 256 experts in 8 groups
  check_group_rule<double>(p, 300, 256, false, 1e-12, 4);
  check_group_rule<float>(p, 300, 256, true, 1e-6, 5);
  p.renormalize = false;
  p.n_group = 5;  // 40 experts: groups of 8 that straddle the lanes
  p.topk_group = 2;
  p.top_k = 3;
  p.routed_scaling_factor = 1.5;
  check_group_rule<double>(p, 200, 40, true, 1e-12, 6);
  p.n_group = 1;  // one group: plain top-k on the corrected keys
  p.topk_group = 1;
  check_group_rule<double>(p, 100, 40, true, 1e-12, 7);
}

TEST_CASE("device route_fixed equals the host's for DeepSeek-V2's group_limited_greedy") {
  gating::routing_params p;
  p.rule = gating::routing_rule::group_limited_greedy;
  p.scores = gating::score_function::softmax;
  p.n_group = 8;
  p.topk_group = 3;
  p.top_k = 6;
  p.routed_scaling_factor = 16.0;  // V2: scaled, not renormalised
  check_group_rule<double>(p, 300, 160, false, 1e-12, 8);  // DeepSeek-V2's shape: 160 experts in 8 groups
  check_group_rule<float>(p, 300, 160, false, 1e-6, 9);
  p.renormalize = true;  // top_k > 1: renormalised, not scaled
  check_group_rule<double>(p, 300, 160, false, 1e-12, 10);
  p.top_k = 1;  // top_k 1: scaled even with renormalize
  check_group_rule<double>(p, 300, 160, false, 1e-12, 11);
  p.n_group = 64;  // groups of 1: a group's score is its only score
  p.topk_group = 5;
  p.top_k = 4;
  check_group_rule<double>(p, 100, 64, false, 1e-12, 12);
  p.n_group = 16;
  p.topk_group = 2;
  p.top_k = 5;
  check_group_rule<double>(p, 50, 512, false, 1e-12, 13);  // the most experts the device takes
}

TEST_CASE("device dispatch plan, gather and combine equal the host's") {
  device_fixture fixture;
  const moecomp::cuda_context ctx(fixture.stream, fixture.handle);
  const index_t t = 100, k = 2, e = 6, d = 8;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(t * k));
  moecomp::random_generator rng(2);
  for (auto& id : ids) id = static_cast<std::int64_t>(rng.uniform_index(e + 1));
  gating::dispatch_params params;
  params.block_size = 4;
  params.capacity = 20;
  const auto host = gating::make_dispatch_plan(params, e, moecomp::make_matrix_view(ids.data(), t, k));
  const index_t capacity = t * k + e * (params.block_size - 1);
  moecomp::device_buffer<std::int64_t> di(ctx, t * k), sorted(ctx, capacity), experts(ctx, capacity), counts(ctx, e),
      offsets(ctx, e + 1), position(ctx, t * k);
  moecomp::copy_to_device(ctx, moecomp::make_vector_view(static_cast<const std::int64_t*>(ids.data()), t * k), di.view());
  const gating::device_dispatch_plan plan{sorted.view(), experts.view(), counts.view(), offsets.view(), position.view()};
  const index_t total = gating::make_dispatch_plan(ctx, params, e, di.view(t, k).as_const(), plan);
  CHECK(total == host.num_tokens_post_pad);
  std::vector<std::int64_t> got(static_cast<std::size_t>(total));
  moecomp::copy_to_host(ctx, sorted.view().as_const().subview(0, total), moecomp::make_vector_view(got.data(), total));
  REQUIRE(cudaStreamSynchronize(ctx.stream) == cudaSuccess);
  CHECK(got == host.sorted_token_ids);
  (void)d;
}
