// The dispatch plan (<moecomp/gating/dispatch.hpp>): a hand-worked plan with padding, the sentinel and
// capacity; gather then combine against a direct loop over (token, slot) pairs. Against vLLM's
// moe_align_block_size and torch's stable sort: tests/peers/test_dispatch_torch.py.
#include <moecomp/gating/dispatch.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <cstdint>
#include <vector>

namespace {

using moecomp::index_t;
namespace gating = moecomp::gating;
using ids_t = std::vector<std::int64_t>;

}  // namespace

TEST_CASE("dispatch: pairs by expert in flat order, runs padded with the sentinel T K, one expert per block") {
  // 3 tokens x 2 slots, 3 experts; pair p = 2 t + k. Expert 0: pairs 1, 4; expert 1: none (the id 3 is an
  // unused slot); expert 2: pairs 0, 2, 5.
  const ids_t ids = {2, 0, 2, 3, 0, 2};
  gating::dispatch_params p;
  p.block_size = 2;
  const auto plan = gating::make_dispatch_plan(p, 3, moecomp::make_matrix_view(ids.data(), 3, 2));
  CHECK(plan.counts == ids_t{2, 0, 3});
  CHECK(plan.offsets == ids_t{0, 2, 2, 6});
  CHECK(plan.sorted_token_ids == ids_t{1, 4, 0, 2, 5, 6});  // 6 = T K: padding
  CHECK(plan.expert_ids == ids_t{0, 2, 2});
  CHECK(plan.num_tokens_post_pad == 6);
  CHECK(plan.position == ids_t{2, 0, 3, -1, 1, 4});
  p.block_size = 1;
  p.capacity = 2;  // expert 2 keeps pairs 0 and 2, drops 5
  const auto capped = gating::make_dispatch_plan(p, 3, moecomp::make_matrix_view(ids.data(), 3, 2));
  CHECK(capped.counts == ids_t{2, 0, 2});
  CHECK(capped.dropped == 1);
  CHECK(capped.sorted_token_ids == ids_t{1, 4, 0, 2});
  CHECK(capped.position[5] == -1);
}

TEST_CASE("dispatch: gather then a per-expert map then combine equals the direct weighted sum") {
  const index_t t = 50, k = 3, e = 7, d = 5;
  moecomp::random_generator rng(3);
  ids_t ids(static_cast<std::size_t>(t * k));
  for (auto& id : ids) id = static_cast<std::int64_t>(rng.uniform_index(e + 1));  // some unused slots (= e)
  moecomp::host_matrix<double> hidden(t, d), weights(t, k);
  rng.fill_normal(hidden.view());
  rng.fill_normal(weights.view());
  gating::dispatch_params p;
  p.block_size = 4;
  const auto plan = gating::make_dispatch_plan(p, e, moecomp::make_matrix_view(ids.data(), t, k));
  moecomp::host_matrix<double> permuted(plan.num_tokens_post_pad, d), expert_out(plan.num_tokens_post_pad, d), out(t, d);
  const moecomp::host_context ctx(2);
  gating::dispatch_gather<double>(ctx, plan, k, hidden.const_view(), permuted.view());
  // "Expert" e scales its rows by (e + 1); the block's expert id says which.
  for (index_t i = 0; i < plan.num_tokens_post_pad; ++i)
    for (index_t c = 0; c < d; ++c)
      expert_out(i, c) = static_cast<double>(plan.expert_ids[static_cast<std::size_t>(i / p.block_size)] + 1) * permuted(i, c);
  gating::dispatch_combine<double>(ctx, plan, expert_out.const_view(), weights.const_view(), out.view());
  for (index_t i = 0; i < t; ++i)
    for (index_t c = 0; c < d; ++c) {
      double ref = 0;
      for (index_t q = 0; q < k; ++q) {
        const std::int64_t x = ids[static_cast<std::size_t>(i * k + q)];
        if (x != e) ref += weights(i, q) * static_cast<double>(x + 1) * hidden(i, c);
      }
      CHECK(out(i, c) == doctest::Approx(ref).epsilon(1e-14));
    }
}

TEST_CASE("dispatch: bad input is refused with a message naming the argument") {
  const ids_t ids = {0, 5};
  CHECK_THROWS_WITH_AS(gating::make_dispatch_plan(gating::dispatch_params{}, 4, moecomp::make_matrix_view(ids.data(), 1, 2)),
                       "make_dispatch_plan: ids must be expert ids in [0, 4] (4: an unused slot), got 5 at (0, 1)",
                       moecomp::invalid_argument);
  gating::dispatch_params p;
  p.block_size = 0;
  CHECK_THROWS_WITH_AS(gating::make_dispatch_plan(p, 8, moecomp::make_matrix_view(ids.data(), 1, 2)),
                       "make_dispatch_plan: params.block_size must be >= 1, got 0", moecomp::invalid_argument);
}
