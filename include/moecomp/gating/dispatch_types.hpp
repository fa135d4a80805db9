#pragma once
// Parameters and result of the dispatch plan (<moecomp/gating/dispatch.hpp>). Documentation: docs/gating.md.
#include <moecomp/core/views.hpp>

#include <cstdint>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace gating {

struct dispatch_params {
  /// Pads each expert's run to a multiple of this (vLLM's block_size). >= 1.
  index_t block_size = 1;
  /// At most this many pairs per expert (0: no limit).
  index_t capacity = 0;
};

/// The plan. sorted_token_ids holds flat pair indices t K + k in expert order, padded with the sentinel T K;
/// expert_ids one expert per block of block_size entries; counts[e] the pairs kept for e; offsets[e] where
/// e's (padded) run starts, offsets[E] = num_tokens_post_pad; position[p] where pair p went (-1: unused slot
/// or dropped).
struct dispatch_plan {
  std::vector<std::int64_t> sorted_token_ids, expert_ids, counts, offsets, position;
  index_t num_tokens_post_pad = 0;
  index_t dropped = 0;
};

}  // namespace gating
MOECOMP_NAMESPACE_END
