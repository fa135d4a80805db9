// Device routing and dispatch against the host's: route_fixed for top-k (softmax, renormalised) and the
// dynamic rules; the dispatch plan with padding and capacity; gather and combine. Argument checks pass
// without a GPU; the rest runs under `ctest -L cuda`.
#include <doctest/doctest.h>
#include <moecomp/cuda/moecomp.cuh>
#include <moecomp/gating/dispatch.hpp>
#include <moecomp/gating/routing.hpp>  // Eigen-free host code: the reference

#include "device_test_support.cuh"

#include <cuda_runtime_api.h>

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
  p.rule = gating::routing_rule::deepseek_v3;
  p.top_k = 2;
  p.n_group = 2;
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
