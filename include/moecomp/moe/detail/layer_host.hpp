#pragma once
// The MoE layer forward on the host, behind <moecomp/moe/layer.hpp>.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/gating/dispatch.hpp>
#include <moecomp/gating/routing.hpp>
#include <moecomp/moe/features.hpp>
#include <moecomp/moe/ffn.hpp>
#include <moecomp/moe/ffn_types.hpp>
#include <moecomp/moe/layer_types.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/ffn_checks.hpp>

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace moe {

namespace detail {

/// Every expert's forward on its run of the gathered rows. The work items are (expert, tile of its tokens)
/// pairs in expert order, spread over the threads: a few dozen tokens per expert (512 tokens, top-4 of 60)
/// would leave threads idle if each expert ran alone. Each thread converts 16-bit weights into its own
/// buffer, once per run of items of one expert, and every buffer is allocated once per call (fresh pages
/// per expert cost more than the conversion). Each item writes only its rows: the same result at any
/// thread count.
template <class W, class A>
void run_experts(const host_context& ctx, const ffn_params& params, const ffn_expert_stack_view<W>& experts,
                 const gating::dispatch_plan& plan, matrix_view<const A> gathered, matrix_view<A> out) {
  const index_t tile = params.token_tile;  // checked by the caller (check_ffn_params)
  struct item {
    index_t expert, first, rows;
  };
  std::vector<item> items;
  for (index_t j = 0; j < experts.experts(); ++j) {
    const index_t begin = plan.offsets[static_cast<std::size_t>(j)], rows = plan.counts[static_cast<std::size_t>(j)];
    for (index_t r = 0; r < rows; r += tile) items.push_back({j, begin + r, std::min(tile, rows - r)});
  }
  if (items.empty()) return;
  const ffn_expert_view<W> shape = experts.expert(0);
  const int threads = static_cast<int>(std::min<index_t>(std::max(1, ctx.threads()), static_cast<index_t>(items.size())));
  const bool bf16 = ffn_bf16_products<W>(ctx);
  const std::size_t weights_size = expert_weights<W, A>::storage_size(shape, !bf16),
                    scratch_size = ffn_tile_scratch(shape, tile, bf16);
  host_workspace<A> buffers(ctx, (weights_size + scratch_size) * static_cast<std::size_t>(threads));
  std::vector<index_t> converted(static_cast<std::size_t>(threads), -1);  // the expert in each thread's buffer
  std::vector<std::optional<expert_weights<W, A>>> weights(static_cast<std::size_t>(threads));
  moecomp::detail::parallel_for(static_cast<index_t>(items.size()), threads, [&](index_t i, int thread) {
    const item& it = items[static_cast<std::size_t>(i)];
    A* mine = buffers.data() + (weights_size + scratch_size) * static_cast<std::size_t>(thread);
    const ffn_expert_view<W> expert = experts.expert(it.expert);
    auto& w = weights[static_cast<std::size_t>(thread)];
    if (converted[static_cast<std::size_t>(thread)] != it.expert) {
      w.emplace(ctx, expert, mine, !bf16);  // allocates nothing: the storage is the thread's buffer
      converted[static_cast<std::size_t>(thread)] = it.expert;
    }
    ffn_forward_tile<W, A>(ctx, params, expert, *w, gathered, out, matrix_view<A>(), it.first, it.rows,
                           mine + weights_size);
  });
}

template <class W, class A = accumulator_t<W>>
gating::routing_result moe_layer_forward_host(const host_context& ctx, const moe_layer_params& params,
                                              const moe_layer_view<W>& layer, matrix_view<const A> x,
                                              matrix_view<A> y) {
  constexpr const char* fn = "moe_layer_forward";
  const index_t t_count = x.rows(), d = x.cols(), e = layer.router.rows(), e_out = layer.experts.experts();
  moecomp::detail::check_ffn_params(fn, params.ffn);
  moecomp::detail::check_ffn_stack(fn, layer.experts);
  MOECOMP_EXPECTS(layer.router.cols() == d && layer.experts.d_model() == d, fn, ": router and experts must have d = ",
                  d, " (the columns of x), got ", layer.router.cols(), " and ", layer.experts.d_model());
  MOECOMP_EXPECTS(y.rows() == t_count && y.cols() == d, fn, ": y must be ", moecomp::detail::shape_string(t_count, d),
                  ", got ", moecomp::detail::shape_string(y.rows(), y.cols()));
  if (layer.expert_map.empty()) {
    MOECOMP_EXPECTS(e_out == e, fn, ": experts must hold one expert per router row (", e, ") without expert_map, got ",
                    e_out);
  } else {
    MOECOMP_EXPECTS(layer.expert_map.size() == e, fn, ": expert_map must have ", e, " entries (router rows), got ",
                    layer.expert_map.size());
    for (index_t j = 0; j < e; ++j)
      MOECOMP_EXPECTS(layer.expert_map[j] >= 0 && layer.expert_map[j] < e_out, fn, ": expert_map entries must be in [0, ",
                      e_out, ") (the stack's experts), got ", layer.expert_map[j], " at ", j);
  }
  const bool has_shared = !layer.shared.w1.empty();
  if (has_shared) {
    moecomp::detail::check_ffn_stack(fn, layer.shared);
    MOECOMP_EXPECTS(layer.shared.d_model() == d, fn, ": shared experts must have d = ", d, ", got ",
                    layer.shared.d_model());
  }
  MOECOMP_EXPECTS(layer.shared_gate.empty() || (layer.shared_gate.rows() == 1 && layer.shared_gate.cols() == d), fn,
                  ": shared_gate must be empty or 1 x ", d, ", got ",
                  moecomp::detail::shape_string(layer.shared_gate.rows(), layer.shared_gate.cols()));
  // Route.
  std::vector<A> logits(static_cast<std::size_t>(t_count * e));
  router_logits<A>(ctx, x, layer.router, {}, matrix_view<A>(logits.data(), t_count, e));
  const index_t k = gating::max_experts_per_token(params.routing, e);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(t_count * k));
  std::vector<A> weights(ids.size());
  const gating::routing_result routed = gating::route_fixed<A>(
      ctx, params.routing, matrix_view<const A>(logits.data(), t_count, e), layer.router_bias,
      matrix_view<std::int64_t>(ids.data(), t_count, k), matrix_view<A>(weights.data(), t_count, k));
  // Map router ids to the stack's experts (the sentinel e becomes e_out).
  for (auto& id : ids) id = id == e ? e_out : (layer.expert_map.empty() ? id : layer.expert_map[id]);
  const gating::dispatch_plan plan =
      gating::make_dispatch_plan(gating::dispatch_params{}, e_out, matrix_view<const std::int64_t>(ids.data(), t_count, k));
  std::vector<A> gathered(static_cast<std::size_t>(plan.num_tokens_post_pad * d)), out(gathered.size());
  gating::dispatch_gather<A>(ctx, plan, k, x, matrix_view<A>(gathered.data(), plan.num_tokens_post_pad, d));
  run_experts<W, A>(ctx, params.ffn, layer.experts, plan,
                    matrix_view<const A>(gathered.data(), plan.num_tokens_post_pad, d),
                    matrix_view<A>(out.data(), plan.num_tokens_post_pad, d));
  gating::dispatch_combine<A>(ctx, plan, matrix_view<const A>(out.data(), plan.num_tokens_post_pad, d),
                              matrix_view<const A>(weights.data(), t_count, k), y);
  if (has_shared) {
    std::vector<A> shared_out(static_cast<std::size_t>(t_count * d));
    for (index_t s = 0; s < layer.shared.experts(); ++s) {
      ffn_forward<W>(ctx, params.ffn, layer.shared.expert(s), x, matrix_view<A>(shared_out.data(), t_count, d));
      for (index_t t = 0; t < t_count; ++t) {
        double g = 1.0;
        if (!layer.shared_gate.empty()) {
          double z = 0;
          for (index_t c = 0; c < d; ++c) z += static_cast<double>(x(t, c)) * static_cast<double>(layer.shared_gate(0, c));
          g = 1.0 / (1.0 + std::exp(-z));
        }
        A* row = y.row_ptr(t);
        for (index_t c = 0; c < d; ++c) row[c] += static_cast<A>(g) * shared_out[static_cast<std::size_t>(t * d + c)];
      }
    }
  }
  return routed;
}

}  // namespace detail
}  // namespace moe
MOECOMP_NAMESPACE_END
