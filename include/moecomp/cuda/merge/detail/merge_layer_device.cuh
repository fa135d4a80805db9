#pragma once
// Device implementation of the layer-level merge (<moecomp/cuda/merge/merge.cuh>'s merge_experts): the host's
// merge_experts_host (<moecomp/merge/detail/merge_host.hpp>) step for step, its bookkeeping the same host code
// (merge/detail/merge_layer_rules.hpp) over routes computed on the device:
//   - routing: the logits x R^T by cuBLAS, gating::route_fixed (top-k of the softmax, not renormalised) on the
//     device, the ids and probabilities copied back (SYNCHRONISES); a second routing with frequency_top_k when
//     the frequencies are counted with another k than the groups' tokens;
//   - per group (plan_group: dominant, merge order, capped tokens, fixed coefficients):
//       average, uniform, frequency, dominant: the weighted sum (gather_experts, merge_weighted's kernels);
//       aligned: align::align_experts on the device per non-dominant member (SYNCHRONISES each), then the
//                weighted sum with the permutations;
//       fix_dom: fix_dom_group on HC-SMoE's concatenated token list;
//       learned: learned_group on the group's tokens and the router probabilities (SYNCHRONISES per evaluation);
//   - the merge error: the target (the members' device forwards weighted in double, the host's group_target),
//     the merged expert's forward, the two sums of squares by cub::DeviceSegmentedReduce in double, copied back
//     (SYNCHRONISES per group);
//   - the router rows: the router copied to the host once (SYNCHRONISES), the rows by the host's router_row, then
//     copied to the output.
// Workspace: the routing buffers, then one region reused by every group (the largest group's need, with the token
// counts bounded above: every token for a group's tokens, T min(k, n) for fix-dom's concatenation).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/merge/merge_types.hpp>
#include <moecomp/merge/detail/fix_dom_rules.hpp>
#include <moecomp/merge/detail/merge_layer_rules.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/expert_gather.hpp>
#include <moecomp/cuda/align/align.cuh>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/cuda/core/kernel.cuh>
#include <moecomp/cuda/core/detail/cublas.cuh>
#include <moecomp/cuda/core/detail/expert_gather.cuh>
#include <moecomp/cuda/core/detail/workspace.cuh>
#include <moecomp/cuda/gating/routing.cuh>
#include <moecomp/cuda/merge/merge_types.cuh>
#include <moecomp/cuda/merge/detail/fix_dom_device.cuh>
#include <moecomp/cuda/merge/detail/learned_device.cuh>
#include <moecomp/cuda/merge/detail/merge_device_checks.cuh>
#include <moecomp/cuda/moe/expert.cuh>
#include <moecomp/cuda/moe/expert_types.cuh>

#include <cub/device/device_segmented_reduce.cuh>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace merge {
namespace cuda_detail {

static_assert(merge_max_routed_experts == gating::cuda_detail::routing_max_experts,
              "merge_max_routed_experts must be the device routing's limit");

/// (a[k] - b[k])^2 in double.
template <class A>
struct squared_difference_of {
  const A* a;
  const A* b;
  __host__ __device__ double operator()(index_t k) const {
    const double v = static_cast<double>(a[k]) - static_cast<double>(b[k]);
    return v * v;
  }
};

/// One group's share of the workspace, offsets from the group region's (aligned) start: the gathered tokens
/// (ids, xg) first, then a scratch area used by the method and, after it, by the merge error.
struct group_layout {
  index_t t = 0, n = 0;
  bool gather = false, error = false, routed = false;
  std::size_t ids = 0, xg = 0, scratch = 0, scratch_bytes = 0;
  // The method's use of the scratch: aligned's permutations and align_experts' workspace; fix_dom's and learned's
  // whole workspaces.
  std::size_t perms = 0, method = 0, method_bytes = 0;
  // The error's: the router weights, the target and its double accumulator, the forward's output and workspace,
  // the two sums and CUB's temporary storage.
  std::size_t weights = 0, y = 0, acc = 0, total = 0, fout = 0, ffn = 0, sums = 0, cub_temp = 0, cub_bytes = 0;
  moe::cuda_detail::ffn_device_plan ffn_plan;
  std::size_t bytes = 0;
};

/// The layout of a group of n members with t tokens (after the cap), fix_tokens fix-dom tokens and learn_tokens
/// learned tokens (both before the cap).
template <class W, class A = accumulator_t<W>>
group_layout make_group_layout(const char* fn, const merge_params& params,
                               const moe::ffn_expert_stack_device_view<W>& experts, index_t n, index_t t,
                               index_t fix_tokens, index_t learn_tokens, bool have_x, bool routed) {
  const index_t d = experts.d_model(), d_ff = experts.d_ff();
  const bool gated = experts.gated();
  group_layout g;
  g.t = t;
  g.n = n;
  g.routed = routed;
  const bool correlation = params.method == merge_method::aligned &&
                           params.align.objective == align::align_objective::correlation && t >= 2;
  g.error = have_x && t > 0 && params.report_errors;
  g.gather = correlation || g.error;
  moecomp::detail::workspace_layout outer(fn);
  if (g.gather) {
    g.ids = outer.take(t, sizeof(index_t));
    g.xg = outer.take(t * d, sizeof(A));
  }
  // The method's scratch.
  moecomp::detail::workspace_layout method(fn);
  switch (params.method) {
    case merge_method::aligned: {
      g.perms = method.take(n * d_ff, sizeof(index_t));
      const bool can_align = params.align.objective != align::align_objective::correlation || t >= 2;
      if (can_align && n >= 2) {
        g.method_bytes = align::align_experts_workspace_size<W>(params.align, experts.expert(0), correlation ? t : 0);
        g.method = method.take(static_cast<index_t>(g.method_bytes), 1);
      }
      break;
    }
    case merge_method::fix_dom:
      g.method_bytes = make_fix_dom_plan<W>(fn, merge::detail::capped_count(fix_tokens, params.token_cap), n, d, d_ff,
                                            gated)
                           .bytes;
      g.method = method.take(static_cast<index_t>(g.method_bytes), 1);
      break;
    case merge_method::learned: {
      const index_t kept = merge::detail::capped_count(learn_tokens, params.token_cap);
      if (kept > 0) g.method_bytes = make_learned_plan<W>(fn, kept, n, d, d_ff, gated, routed).bytes;
      g.method = method.take(static_cast<index_t>(g.method_bytes), 1);
      break;
    }
    default: break;
  }
  // The error's scratch (after the method: the same bytes).
  moecomp::detail::workspace_layout error(fn);
  if (g.error) {
    const index_t td = t * d;
    if (routed) g.weights = error.take(t * n, sizeof(double));
    g.y = error.take(td, sizeof(A));
    g.acc = error.take(td, sizeof(double));
    g.total = error.take(t, sizeof(double));
    g.fout = error.take(td, sizeof(A));
    g.ffn_plan = moe::cuda_detail::make_ffn_plan<W>(fn, t, d, d_ff, gated, true);
    g.ffn = error.take(static_cast<index_t>(g.ffn_plan.bytes), 1);
    g.sums = error.take(2, sizeof(double));
    std::size_t cub = 0, b = 0;
    MOECOMP_CUDA_TRY(cub::DeviceSegmentedReduce::Sum(
        nullptr, b, indexed(squared_difference_of<A>{nullptr, nullptr}), static_cast<double*>(nullptr), std::int64_t(1),
        indexed(segment_offset<index_t>{td, 0}), indexed(segment_offset<index_t>{td, td})));
    cub = std::max(cub, b);
    b = 0;
    MOECOMP_CUDA_TRY(cub::DeviceSegmentedReduce::Sum(
        nullptr, b, indexed(element_square_of<A>{nullptr}), static_cast<double*>(nullptr), std::int64_t(1),
        indexed(segment_offset<index_t>{td, 0}), indexed(segment_offset<index_t>{td, td})));
    g.cub_bytes = std::max(cub, b);
    g.cub_temp = error.take(static_cast<index_t>(g.cub_bytes), 1);
  }
  g.scratch_bytes = std::max(method.total(), error.total());
  g.scratch = outer.take(static_cast<index_t>(g.scratch_bytes), 1);
  g.bytes = outer.total();
  return g;
}

/// The whole call's workspace: the routing buffers, then the group region (the largest group's layout with
/// upper bounds on its token counts).
struct layer_plan {
  index_t route_columns = 0;
  std::size_t logits = 0, ids = 0, weights = 0, group = 0, group_bytes = 0, bytes = 0;
};

template <class W, class A = accumulator_t<W>>
layer_plan make_layer_plan(const char* fn, const merge_params& params, const moe::ffn_expert_stack_device_view<W>& experts,
                           const std::vector<std::vector<index_t>>& members, index_t x_rows, bool routed) {
  layer_plan p;
  moecomp::detail::workspace_layout layout(fn);
  const index_t t = x_rows, e = experts.experts();
  if (routed) {
    p.route_columns = std::max(params.routing_top_k, params.frequency_top_k);
    p.logits = layout.take(t * e, sizeof(A));
    p.ids = layout.take(t * p.route_columns, sizeof(std::int64_t));
    p.weights = layout.take(t * p.route_columns, sizeof(A));
  }
  for (const std::vector<index_t>& m : members) {
    const auto n = static_cast<index_t>(m.size());
    const index_t fix = routed ? t * std::min(params.routing_top_k, n) : t;
    const group_layout g = make_group_layout<W>(fn, params, experts, n, merge::detail::capped_count(t, params.token_cap),
                                                fix, t, t > 0, routed);
    p.group_bytes = std::max(p.group_bytes, g.bytes);
  }
  p.group = layout.take(static_cast<index_t>(p.group_bytes), 1);
  p.bytes = layout.total();
  return p;
}

/// Routes the T tokens' logits (device, T x E) with the top k of the softmax into the plan's buffers and copies
/// the ids and probabilities back. SYNCHRONISES.
template <class A>
merge::detail::token_routes<A> route_on_device(const cuda_context& ctx, const layer_plan& plan, std::byte* base,
                                               index_t t, index_t e, index_t k) {
  gating::routing_params p;
  p.rule = gating::routing_rule::top_k;
  p.scores = gating::score_function::softmax;
  p.top_k = k;
  p.renormalize = false;
  const matrix_view<std::int64_t, device_memory> ids(at<std::int64_t>(base, plan.ids), t, k, k);
  const matrix_view<A, device_memory> weights(at<A>(base, plan.weights), t, k, k);
  gating::route_fixed<A>(ctx, p, matrix_view<const A, device_memory>(at<A>(base, plan.logits), t, e, e), ids, weights);
  merge::detail::token_routes<A> r;
  r.tokens = t;
  r.k = k;
  r.ids.resize(static_cast<std::size_t>(t * k));
  r.weights.resize(r.ids.size());
  MOECOMP_CUDA_TRY(cudaMemcpyAsync(r.ids.data(), ids.data(), sizeof(std::int64_t) * r.ids.size(), cudaMemcpyDeviceToHost,
                                   ctx.stream));
  MOECOMP_CUDA_TRY(cudaMemcpyAsync(r.weights.data(), weights.data(), sizeof(A) * r.weights.size(),
                                   cudaMemcpyDeviceToHost, ctx.stream));
  MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
  return r;
}

/// The relative merge error of one group on its gathered tokens xg (device, t x d): the target y (the members'
/// outputs weighted by `weights`, t x n in `members`' order, renormalised per token; the mean without), the
/// merged expert's output, sum (y - f)^2 / sum y^2 (the sum itself when y is 0). SYNCHRONISES.
template <class W, class A = accumulator_t<W>>
double group_error(const cuda_context& ctx, const moe::ffn_params& forward, const group_layout& g, std::byte* base,
                   const moe::ffn_expert_stack_device_view<W>& experts, const std::vector<index_t>& members,
                   const std::vector<double>& weights, matrix_view<const A, device_memory> xg,
                   const moe::ffn_expert_device_view<W>& merged) {
  const index_t t = g.t, d = experts.d_model(), td = t * d;
  std::byte* scratch = base + g.scratch;
  double* dev_weights = nullptr;
  if (g.routed) {
    dev_weights = at<double>(scratch, g.weights);
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(dev_weights, weights.data(), sizeof(double) * weights.size(), cudaMemcpyHostToDevice,
                                     ctx.stream));
  }
  A* fout = at<A>(scratch, g.fout);
  A* y = at<A>(scratch, g.y);
  std::byte* ffn_space = at<std::byte>(scratch, g.ffn);
  group_target_device<W>(ctx, forward, experts, members, xg, dev_weights, at<double>(scratch, g.acc),
                         at<double>(scratch, g.total), fout, y, g.ffn_plan, ffn_space);
  const matrix_view<A, device_memory> fview(fout, t, d, d);
  moe::cuda_detail::ffn_forward_device<W>(ctx, forward, merged, xg, fview, {}, g.ffn_plan, ffn_space);
  double* sums = at<double>(scratch, g.sums);
  std::byte* temp = at<std::byte>(scratch, g.cub_temp);
  std::size_t bytes = g.cub_bytes;
  MOECOMP_CUDA_TRY(cub::DeviceSegmentedReduce::Sum(temp, bytes, indexed(squared_difference_of<A>{y, fout}), sums,
                                                   std::int64_t(1), indexed(segment_offset<index_t>{td, 0}),
                                                   indexed(segment_offset<index_t>{td, td}), ctx.stream));
  bytes = g.cub_bytes;
  MOECOMP_CUDA_TRY(cub::DeviceSegmentedReduce::Sum(temp, bytes, indexed(element_square_of<A>{y}), sums + 1,
                                                   std::int64_t(1), indexed(segment_offset<index_t>{td, 0}),
                                                   indexed(segment_offset<index_t>{td, td}), ctx.stream));
  double host[2] = {0, 0};
  MOECOMP_CUDA_TRY(cudaMemcpyAsync(host, sums, sizeof(host), cudaMemcpyDeviceToHost, ctx.stream));
  MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
  return host[1] > 0 ? host[0] / host[1] : host[0];
}

/// The layer (arguments checked by the caller): see the top of this file and merge_experts_host.
template <class W, class A = accumulator_t<W>>
merge_report run_merge_layer(const char* fn, const cuda_context& ctx, const merge_params& params, const layer_plan& plan,
                             const moe::ffn_expert_stack_device_view<W>& experts, vector_view<const std::int64_t> labels,
                             index_t group_count, const merge_data<A, device_memory>& data,
                             const merge_device_outputs<W>& out, std::byte* workspace) {
  namespace md = merge::detail;
  std::byte* base = moecomp::detail::aligned_base(workspace);
  const index_t e_count = experts.experts(), d = experts.d_model(), d_ff = experts.d_ff();
  const std::vector<std::vector<index_t>> members = md::group_members(labels, group_count);
  merge_report report = md::start_report(params, !data.router.empty(), e_count, group_count);
  const bool have_x = !data.x.empty();
  const index_t t_all = have_x ? data.x.rows() : 0;
  const bool routed = have_x && !data.router.empty();
  md::token_routes<A> routes;
  std::vector<double> freq;
  if (!data.frequencies.empty()) freq.assign(data.frequencies.data(), data.frequencies.data() + e_count);
  if (routed) {
    {
      const moecomp::detail::cublas_session blas(ctx);
      moecomp::detail::gemm_abt(blas.handle(), t_all, e_count, d, data.x.data(), data.x.row_stride(), data.router.data(),
                                data.router.row_stride(), at<A>(base, plan.logits), e_count);
    }
    if (freq.empty() && params.frequency_top_k != params.routing_top_k) {
      freq.resize(static_cast<std::size_t>(e_count));
      md::count_frequencies(route_on_device<A>(ctx, plan, base, t_all, e_count, params.frequency_top_k), e_count,
                            vector_view<double>(freq.data(), e_count));
    }
    routes = route_on_device<A>(ctx, plan, base, t_all, e_count, params.routing_top_k);
    if (freq.empty()) {
      freq.resize(static_cast<std::size_t>(e_count));
      md::count_frequencies(routes, e_count, vector_view<double>(freq.data(), e_count));
    }
  }
  // The router on the host for its merged rows. SYNCHRONISES.
  const bool router_rows = report.router == router_rule::merged_rows || report.router == router_rule::dominant_row;
  std::vector<A> router_host, rows_host;
  if (router_rows) {
    router_host.resize(static_cast<std::size_t>(e_count * d));
    rows_host.resize(static_cast<std::size_t>(group_count * d));
    MOECOMP_CUDA_TRY(cudaMemcpy2DAsync(router_host.data(), sizeof(A) * static_cast<std::size_t>(d), data.router.data(),
                                       sizeof(A) * static_cast<std::size_t>(data.router.row_stride()),
                                       sizeof(A) * static_cast<std::size_t>(d), static_cast<std::size_t>(e_count),
                                       cudaMemcpyDeviceToHost, ctx.stream));
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
  }
  std::byte* region = base + plan.group;
  for (index_t g = 0; g < group_count; ++g) {
    const md::group_plan gp = md::plan_group<A>(params, members[static_cast<std::size_t>(g)], g, freq, data.dominants,
                                                t_all, routed ? &routes : nullptr);
    const std::vector<index_t>& ordered = gp.ordered;
    const std::size_t n = ordered.size();
    const auto t = static_cast<index_t>(gp.tokens.size());
    merge_group_report& gr = report.groups[static_cast<std::size_t>(g)];
    gr.dominant = gp.dominant;
    gr.tokens = t;
    std::vector<double> c = gp.coefficients;
    const moe::ffn_expert_device_mutable_view<W> target = out.experts.expert(g);
    // The token lists of fix_dom and learned (before their caps, which those functions draw as the host does).
    std::vector<index_t> fix_tokens, learn_tokens;
    if (have_x && params.method == merge_method::fix_dom)
      fix_tokens = md::concatenated_tokens<A>(t_all, routed ? &routes : nullptr, gp.members);
    if (have_x && params.method == merge_method::learned)
      learn_tokens = md::group_tokens<A>(t_all, routed ? &routes : nullptr, gp.members);
    const group_layout layout =
        make_group_layout<W>(fn, params, experts, static_cast<index_t>(n), t, static_cast<index_t>(fix_tokens.size()),
                             static_cast<index_t>(learn_tokens.size()), have_x, routed);
    MOECOMP_EXPECTS(layout.bytes <= plan.group_bytes, fn, ": internal error: group ", g, " needs ", layout.bytes,
                    " workspace bytes, more than the bound ", plan.group_bytes);
    // The group's tokens on the device, when the correlation alignment or the error reads them.
    matrix_view<const A, device_memory> xg;
    if (layout.gather) {
      index_t* ids = at<index_t>(region, layout.ids);
      MOECOMP_CUDA_TRY(cudaMemcpyAsync(ids, gp.tokens.data(), sizeof(index_t) * gp.tokens.size(), cudaMemcpyHostToDevice,
                                       ctx.stream));
      A* rows = at<A>(region, layout.xg);
      gather_rows_kernel<A><<<grid_for(t * d, fix_dom_block), fix_dom_block, 0, ctx.stream>>>(
          data.x.data(), data.x.row_stride(), ids, t, d, rows);
      MOECOMP_CUDA_CHECK_LAUNCH();
      xg = matrix_view<const A, device_memory>(rows, t, d, d);
    }
    std::byte* scratch = region + layout.scratch;
    const vector_view<std::byte, device_memory> method_space(scratch + layout.method,
                                                             static_cast<index_t>(layout.method_bytes));
    const vector_view<const index_t> member_ids(gp.members.data(), static_cast<index_t>(gp.members.size()));
    std::vector<moe::ffn_expert_device_view<W>> views;
    for (index_t e : ordered) views.push_back(experts.expert(e));
    switch (params.method) {
      case merge_method::average:
      case merge_method::uniform:
      case merge_method::frequency: moecomp::detail::gather_experts<W>(ctx, views, c, nullptr, 0, target); break;
      case merge_method::dominant:
        moecomp::detail::gather_experts<W>(ctx, {experts.expert(gp.dominant)}, {1.0}, nullptr, 0, target);
        break;
      case merge_method::aligned: {
        index_t* perms = at<index_t>(scratch, layout.perms);
        const bool by_correlation = params.align.objective == align::align_objective::correlation;
        const bool can_align = !by_correlation || t >= 2;
        // Row 0 (the dominant) is the identity; every row when the group cannot be aligned (a plain mean).
        const std::size_t identity_rows = can_align ? 1 : n;
        for (std::size_t i = 0; i < identity_rows; ++i) {
          identity_matches_kernel<<<grid_for(d_ff, fix_dom_block), fix_dom_block, 0, ctx.stream>>>(
              perms + static_cast<index_t>(i) * d_ff, nullptr, 1, d_ff);  // one row: no sort keys written
          MOECOMP_CUDA_CHECK_LAUNCH();
        }
        if (can_align)
          for (std::size_t i = 1; i < n; ++i) {
            const align::align_result r = align::align_experts<W>(
                ctx, params.align, experts.expert(gp.dominant), experts.expert(ordered[i]),
                by_correlation ? xg : matrix_view<const A, device_memory>(),
                vector_view<index_t, device_memory>(perms + static_cast<index_t>(i) * d_ff, d_ff), method_space);
            if (report.ok() && !r.ok()) report.status = r.status;
          }
        moecomp::detail::gather_experts<W>(ctx, views, c, perms, d_ff, target);
        break;
      }
      case merge_method::fix_dom:
        fix_dom_group<W>(fn, ctx, params, experts, member_ids, gp.dominant, g, data.x,
                         vector_view<const index_t>(fix_tokens.data(), static_cast<index_t>(fix_tokens.size())), target,
                         {}, method_space);
        break;
      case merge_method::learned: {
        std::vector<double> w;
        if (routed) w = md::member_weights(routes, learn_tokens, gp.members);
        const auto count = static_cast<index_t>(learn_tokens.size());
        const merge_report lr = learned_group<W>(
            fn, ctx, params, experts, member_ids, gp.dominant, g, data.x,
            vector_view<const index_t>(learn_tokens.data(), count),
            routed ? matrix_view<const double>(w.data(), count, static_cast<index_t>(n)) : matrix_view<const double>(),
            target, method_space);
        for (std::size_t i = 0; i < n; ++i) c[i] = lr.coefficients[static_cast<std::size_t>(ordered[i])];
        const merge_group_report& lg = lr.groups.front();
        gr.objective_initial = lg.objective_initial;
        gr.objective_final = lg.objective_final;
        gr.iterations = lg.iterations;
        report.iterations += lg.iterations;
        report.criterion = std::max(report.criterion, lr.criterion);
        if (!lr.ok() && report.ok()) report.status = lr.status;
        break;
      }
    }
    for (std::size_t i = 0; i < n; ++i) report.coefficients[static_cast<std::size_t>(ordered[i])] = c[i];
    if (router_rows)
      md::router_row<A>(report.router, gp, c, matrix_view<const A>(router_host.data(), e_count, d, d),
                        rows_host.data() + g * d);
    if (layout.error) {
      const std::vector<double> w = routed ? md::member_weights(routes, gp.tokens, gp.members) : std::vector<double>();
      gr.error = group_error<W>(ctx, params.forward, layout, region, experts, gp.members, w, xg, target.as_const());
    }
  }
  if (router_rows)  // from pageable memory: returns once staged
    MOECOMP_CUDA_TRY(cudaMemcpy2DAsync(out.router.data(), sizeof(A) * static_cast<std::size_t>(out.router.row_stride()),
                                       rows_host.data(), sizeof(A) * static_cast<std::size_t>(d),
                                       sizeof(A) * static_cast<std::size_t>(d), static_cast<std::size_t>(group_count),
                                       cudaMemcpyHostToDevice, ctx.stream));
  for (index_t e = 0; e < e_count; ++e) out.map[e] = labels[e];
  return report;
}

}  // namespace cuda_detail
}  // namespace merge
MOECOMP_NAMESPACE_END
