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

TEST_CASE("dispatch: the chunked plan is the serial counting sort at any thread count, and reuses a plan") {
  // 70000 tokens x 4 slots: several chunks of pairs, and enough pairs (> 2^18) for a second thread. The
  // reference is the plain stable counting sort: walk the pairs in flat order, keep an expert's first C,
  // place each at the expert's next slot.
  const index_t t = 70000, k = 4, e = 9;
  moecomp::random_generator rng(8);
  ids_t ids(static_cast<std::size_t>(t * k));
  for (auto& id : ids) id = static_cast<std::int64_t>(rng.uniform_index(e + 1));  // (= e: unused slots)
  for (const index_t capacity : {index_t(0), index_t(25000)}) {
    gating::dispatch_params p;
    p.block_size = 16;
    p.capacity = capacity;
    std::vector<std::int64_t> counts(static_cast<std::size_t>(e), 0), seen(static_cast<std::size_t>(e), 0);
    for (const std::int64_t id : ids)
      if (id != e && (capacity == 0 || counts[static_cast<std::size_t>(id)] < capacity)) ++counts[static_cast<std::size_t>(id)];
    std::vector<std::int64_t> offsets(static_cast<std::size_t>(e + 1), 0);
    for (index_t x = 0; x < e; ++x)
      offsets[static_cast<std::size_t>(x + 1)] = offsets[static_cast<std::size_t>(x)] + (counts[static_cast<std::size_t>(x)] + 15) / 16 * 16;
    ids_t sorted(static_cast<std::size_t>(offsets.back()), t * k), position(ids.size(), -1);
    index_t dropped = 0;
    for (index_t pair = 0; pair < t * k; ++pair) {
      const std::int64_t id = ids[static_cast<std::size_t>(pair)];
      if (id == e) continue;
      std::int64_t& n = seen[static_cast<std::size_t>(id)];
      if (capacity > 0 && n >= capacity) {
        ++dropped;
        continue;
      }
      position[static_cast<std::size_t>(pair)] = offsets[static_cast<std::size_t>(id)] + n;
      sorted[static_cast<std::size_t>(offsets[static_cast<std::size_t>(id)] + n++)] = pair;
    }
    gating::dispatch_plan plan;  // reused: a larger plan first, then this one into the same storage
    const ids_t few(static_cast<std::size_t>(t * k), 0);
    gating::make_dispatch_plan(moecomp::host_context(1), p, e, moecomp::make_matrix_view(few.data(), t, k), plan);
    for (const int threads : {1, 2, 3}) {
      CAPTURE(threads);
      gating::make_dispatch_plan(moecomp::host_context(threads), p, e, moecomp::make_matrix_view(ids.data(), t, k), plan);
      CHECK(plan.counts == counts);
      CHECK(plan.offsets == offsets);
      CHECK(plan.sorted_token_ids == sorted);
      CHECK(plan.position == position);
      CHECK(plan.dropped == dropped);
      CHECK(plan.num_tokens_post_pad == offsets.back());
      CHECK(static_cast<index_t>(plan.expert_ids.size()) == offsets.back() / 16);
    }
    CHECK((capacity == 0 || dropped > 0));  // the capacity case does drop
  }
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
