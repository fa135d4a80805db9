#pragma once
// One MoE layer's compression on the host (compress::compress_layer): prune, HC-SMoE, the CKA merge and ResMoE,
// the layer's output error, and the layer's tensors in the checkpoint's names and dtypes.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/parallel.hpp>
#include <moecomp/core/detail/ffn_checks.hpp>
#include <moecomp/core/detail/parallel.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/cluster/fcluster.hpp>
#include <moecomp/cluster/grouping.hpp>
#include <moecomp/cluster/linkage.hpp>
#include <moecomp/compress/compress_types.hpp>
#include <moecomp/distance/pairwise_distance.hpp>
#include <moecomp/gating/routing.hpp>
#include <moecomp/io/residual_file.hpp>
#include <moecomp/io/safetensors.hpp>
#include <moecomp/merge/merge.hpp>
#include <moecomp/model/layout.hpp>
#include <moecomp/moe/features.hpp>
#include <moecomp/moe/ffn.hpp>
#include <moecomp/moe/layer.hpp>
#include <moecomp/moe/shared_base.hpp>
#include <moecomp/ot/free_support_barycenter.hpp>
#include <moecomp/similarity/cka.hpp>
#include <moecomp/similarity/partition.hpp>
#include <moecomp/sparse/residual.hpp>
#include <moecomp/sparse/low_rank.hpp>
#include <moecomp/align/align.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace compress {
namespace detail {

/// Runs `work` as the step `step` of layer `number` (of `layers`), telling the observer first and recording the
/// step's wall time in the report.
class step_timer {
 public:
  step_timer(const compress_observer& observer, index_t number, index_t layers, std::string name, layer_report& report)
      : observer_(observer), number_(number), layers_(layers), name_(std::move(name)), report_(report) {}
  void announce(const std::string& step) const {
    if (observer_.step) observer_.step(number_, layers_, name_, step);
  }
  template <class Work>
  void operator()(const std::string& step, Work&& work) const {
    announce(step);
    const auto t0 = std::chrono::steady_clock::now();
    work();
    report_.steps_seconds.emplace_back(step, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }

 private:
  const compress_observer& observer_;
  index_t number_, layers_;
  std::string name_;
  layer_report& report_;
};

inline moe::ffn_expert_stack_view<float> stack_view(const std::vector<float>& w1, const std::vector<float>& w3,
                                                    const std::vector<float>& w2, index_t experts, index_t d_ff,
                                                    index_t d_model, bool gated) {
  moe::ffn_expert_stack_view<float> v;
  v.w1 = matrix_stack_view<const float>(w1.data(), experts, d_ff, d_model);
  if (gated) v.w3 = matrix_stack_view<const float>(w3.data(), experts, d_ff, d_model);
  v.w2 = matrix_stack_view<const float>(w2.data(), experts, d_model, d_ff);
  return v;
}

/// Owned copies of the caller's router and biases (any strides), for the compressed layer.
inline host_matrix<float> copy_of(matrix_view<const float> a) {
  host_matrix<float> out(a.rows(), a.cols());
  for (index_t i = 0; i < a.rows(); ++i)
    for (index_t j = 0; j < a.cols(); ++j) out(i, j) = a(i, j);
  return out;
}
inline std::vector<float> copy_of(vector_view<const float> v) {
  std::vector<float> out(static_cast<std::size_t>(v.size()));
  for (index_t i = 0; i < v.size(); ++i) out[static_cast<std::size_t>(i)] = v[i];
  return out;
}

/// A loaded layer as compress_layer's view of it (nothing copied).
template <class W>
basic_moe_layer_weights_view<W> layer_view(const model::moe_layer_weights<W>& w) {
  basic_moe_layer_weights_view<W> v;
  v.experts = w.experts_view();
  v.router = w.router.const_view();
  if (!w.router_bias.empty()) v.router_bias = make_vector_view(w.router_bias.data(), w.experts);
  if (!w.correction_bias.empty()) v.correction_bias = make_vector_view(w.correction_bias.data(), w.experts);
  if (w.has_shared_expert()) v.shared = w.shared_expert_view();
  if (!w.shared_gate.empty()) v.shared_gate = make_vector_view(w.shared_gate.data(), w.d_model);
  return v;
}

/// A loaded layer's shared expert and its gate alone (no experts, no router): what layer_output needs beside a
/// compressed layer's own stack, valid after moe_layer_weights::drop_experts.
template <class W>
basic_moe_layer_weights_view<W> shared_view(const model::moe_layer_weights<W>& w) {
  basic_moe_layer_weights_view<W> v;
  if (w.has_shared_expert()) v.shared = w.shared_expert_view();
  if (!w.shared_gate.empty()) v.shared_gate = make_vector_view(w.shared_gate.data(), w.d_model);
  return v;
}

/// compress_layer's checks of a layer given as views: the model's shapes, no expert biases, finite values.
inline void check_layer_view(const char* fn, const model::moe_model& m, const moe_layer_weights_view& w) {
  using moecomp::detail::shape_string;
  const moe::ffn_expert_stack_view<float>& s = w.experts;
  const index_t E = m.num_experts, H = m.hidden_size, I = m.expert_size;
  MOECOMP_EXPECTS(s.experts() == E && s.d_ff() == I && s.d_model() == H && s.gated() == m.gated, fn,
                  ": the experts must be the model's: ", E, " experts of ", shape_string(I, H), m.gated ? ", gated" : ", not gated",
                  ", got ", s.experts(), " of ", shape_string(s.d_ff(), s.d_model()), s.gated() ? ", gated" : ", not gated");
  moecomp::detail::check_ffn_stack(fn, s);
  MOECOMP_EXPECTS(s.b1.empty() && s.b3.empty() && s.b2.empty(), fn, ": the experts must have no biases (compress writes none)");
  MOECOMP_EXPECTS(w.router.rows() == E && w.router.cols() == H, fn, ": router must be ", shape_string(E, H),
                  " (experts x hidden size), got ", shape_string(w.router.rows(), w.router.cols()));
  MOECOMP_EXPECTS(w.router_bias.empty() || w.router_bias.size() == E, fn, ": router_bias must be empty or have ", E,
                  " entries, got ", w.router_bias.size());
  MOECOMP_EXPECTS(w.correction_bias.empty() || w.correction_bias.size() == E, fn, ": correction_bias must be empty or have ",
                  E, " entries, got ", w.correction_bias.size());
  const bool shared = !w.shared.w1.empty();
  MOECOMP_EXPECTS(shared == (m.shared_expert_size > 0), fn, shared ? ": the model has no shared expert, got one"
                                                                   : ": the model has a shared expert of ",
                  m.shared_expert_size, shared ? "" : " neurons, got none");
  if (shared) {
    moecomp::detail::check_ffn_expert(fn, w.shared);
    MOECOMP_EXPECTS(w.shared.d_ff() == m.shared_expert_size && w.shared.d_model() == H, fn, ": the shared expert must be ",
                    m.shared_expert_size, " neurons over ", H, " inputs, got ", shape_string(w.shared.d_ff(), w.shared.d_model()));
    MOECOMP_EXPECTS(w.shared.b1.empty() && w.shared.b3.empty() && w.shared.b2.empty(), fn,
                    ": the shared expert must have no biases");
  }
  MOECOMP_EXPECTS(w.shared_gate.empty() || (shared && w.shared_gate.size() == H), fn,
                  ": shared_gate must be empty or have ", H, " entries with a shared expert, got ", w.shared_gate.size());
  for (index_t e = 0; e < E; ++e) {
    moecomp::detail::check_finite(fn, "experts.w1", s.w1.matrix(e));
    if (s.gated()) moecomp::detail::check_finite(fn, "experts.w3", s.w3.matrix(e));
    moecomp::detail::check_finite(fn, "experts.w2", s.w2.matrix(e));
  }
  moecomp::detail::check_finite(fn, "router", w.router);
  const auto finite_vector = [&](const char* name, vector_view<const float> v) {
    for (index_t i = 0; i < v.size(); ++i)
      MOECOMP_EXPECTS(std::isfinite(v[i]), fn, ": ", name, " must be finite, got ", v[i], " at ", i);
  };
  finite_vector("router_bias", w.router_bias);
  finite_vector("correction_bias", w.correction_bias);
  finite_vector("shared_gate", w.shared_gate);
  if (shared) {
    moecomp::detail::check_finite(fn, "shared.w1", w.shared.w1);
    if (w.shared.gated()) moecomp::detail::check_finite(fn, "shared.w3", w.shared.w3);
    moecomp::detail::check_finite(fn, "shared.w2", w.shared.w2);
  }
}

/// The compressed layer's own stack matrix (1: w1, 3: w3, 2: w2) in W: the float vectors, or the bfloat16 ones.
template <class W>
const std::vector<W>& own_stack_of(const compressed_layer& c, int which) {
  if constexpr (std::is_same_v<W, float>)
    return which == 1 ? c.w1 : which == 3 ? c.w3 : c.w2;
  else
    return which == 1 ? c.w1_bf16 : which == 3 ? c.w3_bf16 : c.w2_bf16;
}
template <class W>
std::vector<W>& own_stack_of(compressed_layer& c, int which) {
  return const_cast<std::vector<W>&>(own_stack_of<W>(static_cast<const compressed_layer&>(c), which));
}

/// Gives the compressed layer its own stack in W (float, or bfloat16 for a layer read as bfloat16) of `experts`
/// experts of I x H (W3 only when gated), zero-filled, for own_stack_of<W> to address.
template <class W>
void allocate_own_stack(compressed_layer& c, index_t experts, index_t I, index_t H, bool gated) {
  c.stack_experts = experts;
  own_stack_of<W>(c, 1).resize(static_cast<std::size_t>(experts * I * H));
  if (gated) own_stack_of<W>(c, 3).resize(static_cast<std::size_t>(experts * I * H));
  own_stack_of<W>(c, 2).resize(static_cast<std::size_t>(experts * I * H));
}

/// `values` as W: the float vector itself, or for another W a converted copy kept in `copy` (for bfloat16 rounded
/// to nearest even; exact for values that came from bfloat16).
template <class W>
const W* as_weight_type(const std::vector<float>& values, std::vector<W>& copy) {
  if constexpr (std::is_same_v<W, float>) {
    return values.data();
  } else {
    copy.resize(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) copy[i] = convert_to<W>(values[i]);
    return copy.data();
  }
}

/// Merges the groups `labels` of the layer's experts with `params`; the router rule decides whether the
/// router keeps its E rows (id map) or gets one row per group, whose biases are merged with the rows'
/// coefficients.
template <class W>
compressed_layer merge_layer(const host_context& ctx, const basic_moe_layer_weights_view<W>& w,
                             const std::vector<std::int64_t>& labels, const merge::merge_params& params,
                                    matrix_view<const float> x, const std::vector<std::int64_t>& dominants,
                                    layer_report& report) {
  const index_t E = w.experts.experts(), I = w.experts.d_ff(), H = w.experts.d_model();
  const index_t g = merge::group_count(make_vector_view(labels.data(), E));
  compressed_layer out;
  // The merged stack in W: float, or (a layer read as bfloat16) bfloat16, each weight computed in float and
  // rounded once, the value the float path writes after round_layer_to_storage.
  static_assert(std::is_same_v<W, float> || std::is_same_v<W, bfloat16>, "merge_layer: float or bfloat16 layers");
  allocate_own_stack<W>(out, g, I, H, w.experts.gated());
  std::vector<W>& w1_out = own_stack_of<W>(out, 1);
  std::vector<W>& w3_out = own_stack_of<W>(out, 3);
  std::vector<W>& w2_out = own_stack_of<W>(out, 2);
  host_matrix<float> merged_router(g, H);
  std::vector<std::int64_t> map(static_cast<std::size_t>(E));
  merge::merge_data<float> data;
  data.x = x;
  data.router = w.router;
  if (!dominants.empty()) data.dominants = make_vector_view(dominants.data(), g);
  merge::merge_outputs<W> outputs;
  outputs.experts.w1 = matrix_stack_view<W>(w1_out.data(), g, I, H);
  if (w.experts.gated()) outputs.experts.w3 = matrix_stack_view<W>(w3_out.data(), g, I, H);
  outputs.experts.w2 = matrix_stack_view<W>(w2_out.data(), g, H, I);
  const merge::router_rule rule = merge::resolve_router_rule(params, true);
  if (rule != merge::router_rule::id_map) outputs.router = merged_router.view();
  outputs.map = make_vector_view(map.data(), E);
  const merge::merge_report merged =
      merge::merge_experts<W>(ctx, params, w.experts, make_vector_view(labels.data(), E), data, outputs);
  report.groups = labels;
  for (const auto& gr : merged.groups) {
    report.dominants.push_back(gr.dominant);
    report.group_merge_errors.push_back(gr.error);
  }
  report.coefficients = merged.coefficients;
  report.router_rule = merge::to_string(merged.router);
  if (rule == merge::router_rule::id_map) {  // HC-SMoE: the router keeps its rows, each old id maps to its group
    out.slots = map;
    out.router = copy_of(w.router);
    out.router_bias = copy_of(w.router_bias);
    out.correction_bias = copy_of(w.correction_bias);
    report.id_map = map;
  } else {  // one router row per group; biases merged with the same coefficients as the rows
    out.slots.resize(static_cast<std::size_t>(g));
    std::iota(out.slots.begin(), out.slots.end(), 0);
    out.router = std::move(merged_router);
    auto merge_bias = [&](vector_view<const float> bias) {
      std::vector<float> result;
      if (bias.empty()) return result;
      result.resize(static_cast<std::size_t>(g));
      merge::merge_router_bias(make_vector_view(labels.data(), E), merged.coefficients, bias,
                               make_vector_view(result.data(), g));
      return result;
    };
    out.router_bias = merge_bias(w.router_bias);
    out.correction_bias = merge_bias(w.correction_bias);
  }
  return out;
}

// ---- resmoe's ablations (issue 34): the plain centres and the svd / structured residuals ----

/// center mean: the element-wise mean of the E experts' design matrices (E*I x width, experts stacked), in double,
/// with identity permutations; none: zeros.
inline void resmoe_plain_center(resmoe_center center, matrix_view<const float> design, index_t E,
                                matrix_view<float> out, matrix_view<index_t> permutations) {
  const index_t I = out.rows(), width = out.cols();
  for (index_t e = 0; e < E; ++e)
    for (index_t i = 0; i < I; ++i) permutations(e, i) = i;
  for (index_t i = 0; i < I; ++i)
    for (index_t j = 0; j < width; ++j) {
      double sum = 0;
      if (center == resmoe_center::mean)
        for (index_t e = 0; e < E; ++e) sum += design(e * I + i, j);
      out(i, j) = static_cast<float>(sum / static_cast<double>(E));
    }
}

inline io::safetensors_dtype storage_of(sparse::value_dtype v) noexcept {
  return v == sparse::value_dtype::bfloat16  ? io::safetensors_dtype::bf16
         : v == sparse::value_dtype::float16 ? io::safetensors_dtype::f16
                                             : io::safetensors_dtype::f32;
}

/// The svd and structured residuals of every expert: the design residual (moe::expert_design_residual) either
/// replaced by its rank-params.rank truncated SVD (factors rounded to the values dtype; `stored` gets each
/// product for the restore) or pruned to its sparse::rows_kept rows of largest norm and encoded as prune's are.
/// squared_errors: ||D - stored||_F^2 per expert (Appendix A.6), with the rounding of what is stored.
template <class W>
void resmoe_other_residuals(const host_context& ctx, const compress_params& params, const moe::ffn_expert_view<W>& base,
                                   const moe::ffn_expert_stack_view<W>& stack, compressed_layer::resmoe_part& r,
                                   std::vector<host_matrix<float>>& stored, std::vector<double>& squared_errors,
                                   layer_report& report) {
  const index_t E = stack.experts(), H = stack.d_model(), I = stack.d_ff(), width = (stack.gated() ? 3 : 2) * H;
  sparse::encode_params ep;
  ep.format = params.format;
  ep.values = *params.values;
  if (params.residual == resmoe_residual::structured) {
    for (index_t e = 0; e < E; ++e) {
      const host_matrix<float> full =
          moe::expert_design_residual<W>(ctx, base, stack.expert(e), r.permutations.const_view().row(e));
      host_matrix<float> pruned(I, width);
      sparse::prune_rows<float>(ctx, params.keep, full.const_view(), pruned.view());
      squared_errors.push_back(sparse::stored_squared_error<float>(ctx, full.const_view(), pruned.const_view(), ep.values));
      moe::expert_residual& res = r.residuals[static_cast<std::size_t>(e)];
      report.residual_bytes.push_back(moe::encode_design_residual<float>(ctx, ep, pruned.const_view(), H, stack.gated(), res));
      report.formats.push_back({sparse::to_string(res.w1.format()), stack.gated() ? sparse::to_string(res.w3.format()) : "-",
                                sparse::to_string(res.w2.format())});
    }
    return;
  }
  // svd: the experts' factorisations (serial each, so deterministic) run side by side, `threads` at a time.
  const index_t k = params.rank, chunk = std::max(1, ctx.threads());
  r.svd_u.resize(static_cast<std::size_t>(E));
  r.svd_v.resize(static_cast<std::size_t>(E));
  stored.resize(static_cast<std::size_t>(E));
  squared_errors.resize(static_cast<std::size_t>(E));
  for (index_t first = 0; first < E; first += chunk) {
    const index_t count = std::min(chunk, E - first);
    std::vector<host_matrix<float>> full;
    for (index_t e = first; e < first + count; ++e)
      full.push_back(moe::expert_design_residual<W>(ctx, base, stack.expert(e), r.permutations.const_view().row(e)));
    std::vector<std::exception_ptr> failed(static_cast<std::size_t>(count));
    moecomp::detail::parallel_for(count, ctx.threads(), [&](index_t n, int) {
      try {
        const index_t e = first + n;
        const host_matrix<float>& d = full[static_cast<std::size_t>(n)];
        host_matrix<double> u(I, k), v(k, width);
        sparse::truncated_svd<float>(host_context(1), d.const_view(), k, u.view(), v.view());
        host_matrix<float> uf(I, k), vf(k, width);
        for (index_t i = 0; i < I * k; ++i) uf.data()[i] = static_cast<float>(u.data()[i]);
        for (index_t i = 0; i < k * width; ++i) vf.data()[i] = static_cast<float>(v.data()[i]);
        io::round_to_storage(uf.data(), static_cast<std::size_t>(I * k), storage_of(ep.values));
        io::round_to_storage(vf.data(), static_cast<std::size_t>(k * width), storage_of(ep.values));
        host_matrix<float> product(I, width);
        double squared = 0;
        std::vector<double> row(static_cast<std::size_t>(width));
        for (index_t i = 0; i < I; ++i) {
          std::fill(row.begin(), row.end(), 0.0);
          for (index_t q = 0; q < k; ++q) {
            const double a = uf(i, q);
            for (index_t j = 0; j < width; ++j) row[static_cast<std::size_t>(j)] += a * static_cast<double>(vf(q, j));
          }
          for (index_t j = 0; j < width; ++j) {
            product(i, j) = static_cast<float>(row[static_cast<std::size_t>(j)]);
            const double diff = static_cast<double>(d(i, j)) - row[static_cast<std::size_t>(j)];
            squared += diff * diff;
          }
        }
        squared_errors[static_cast<std::size_t>(e)] = squared;
        r.svd_u[static_cast<std::size_t>(e)] = std::move(uf);
        r.svd_v[static_cast<std::size_t>(e)] = std::move(vf);
        stored[static_cast<std::size_t>(e)] = std::move(product);
      } catch (...) {
        failed[static_cast<std::size_t>(n)] = std::current_exception();
      }
    });
    for (const auto& f : failed)
      if (f) std::rethrow_exception(f);
  }
  for (index_t e = 0; e < E; ++e) {
    report.residual_bytes.push_back(static_cast<std::uint64_t>((I + width) * k) * sparse::value_size(ep.values));
    report.formats.push_back({"svd", stack.gated() ? "svd" : "-", "svd"});
  }
}

// ---- end of resmoe's ablations ----

/// ResMoE: the free-support barycenter of the experts' design rows [W1_i | W3_i | W2[:, i]] (uniform weights,
/// init = expert 0), the base expert from it (rounded to the experts' dtype), each expert's design residual in
/// the base's neuron order pruned to the fraction params.keep as one matrix and encoded
/// (moe::encode_expert_residual), and the experts restored from base and residuals (sparse::restore_dense).
/// params.center and params.residual select the ablations instead (resmoe_plain_center, resmoe_other_residuals).
/// W: the experts' storage, float or bfloat16 (compress_checkpoint's bf16-resident read). Everything is computed in
/// float either way (the design rows, the barycenter, the residuals); a bfloat16 layer's restored experts are held
/// as bfloat16 (out.w1_bf16 ..., each value the float path's after its rounding to storage), the float path's as
/// float.
template <class W>
compressed_layer resmoe_layer(const host_context& ctx, const compress_params& params,
                              const basic_moe_layer_weights_view<W>& w, io::safetensors_dtype expert_dtype,
                              const step_timer& timed, layer_report& report) {
  static_assert(std::is_same_v<W, float> || std::is_same_v<W, bfloat16>, "resmoe_layer: W must be float or bfloat16");
  const index_t E = w.experts.experts(), I = w.experts.d_ff(), H = w.experts.d_model(), pieces = w.experts.gated() ? 3 : 2, width = pieces * H;
  compressed_layer out;
  out.resmoe = std::make_shared<compressed_layer::resmoe_part>();
  compressed_layer::resmoe_part& r = *out.resmoe;
  const moe::ffn_expert_stack_view<W> stack = w.experts;
  host_matrix<float> design(E * I, width);
  timed("design rows", [&] {
    for (index_t e = 0; e < E; ++e)
      align::design_matrix<W>(ctx, stack.expert(e), design.view().row_range(e * I, I));
  });
  host_matrix<float> barycenter(I, width);
  r.permutations = host_matrix<index_t>(E, I);
  r.center = params.center;
  r.residual = params.residual;
  r.values = *params.values;
  ot::free_support_barycenter_result bary;
  if (params.center == resmoe_center::barycenter) {
    timed("barycenter", [&] {
      ot::free_support_barycenter_params bp;
      bp.max_iterations = params.max_iterations;
      bary = ot::free_support_barycenter<float>(ctx, bp, split_rows(design.const_view(), E),
                                                design.const_view().row_range(0, I), barycenter.view(),
                                                r.permutations.view());
    });
  } else {
    // The ablations' centres: the mean of the unaligned experts, or none (a zero base: each expert alone).
    timed("centre", [&] { resmoe_plain_center(params.center, design.const_view(), E, barycenter.view(), r.permutations.view()); });
  }
  design = host_matrix<float>();  // the largest buffer: freed before the restore's
  r.w1.resize(static_cast<std::size_t>(I * H));
  if (w.experts.gated()) r.w3.resize(r.w1.size());
  r.w2.resize(r.w1.size());
  for (index_t i = 0; i < I; ++i)
    for (index_t j = 0; j < H; ++j) {
      r.w1[static_cast<std::size_t>(i * H + j)] = barycenter(i, j);
      if (w.experts.gated()) r.w3[static_cast<std::size_t>(i * H + j)] = barycenter(i, H + j);
      r.w2[static_cast<std::size_t>(j * I + i)] = barycenter(i, (pieces - 1) * H + j);
    }
  io::round_to_storage(r.w1.data(), r.w1.size(), expert_dtype);
  io::round_to_storage(r.w3.data(), r.w3.size(), expert_dtype);
  io::round_to_storage(r.w2.data(), r.w2.size(), expert_dtype);
  // The base as W (float: r's vectors themselves; bfloat16: exactly the rounded values), so that base and experts
  // share one type.
  std::vector<W> base1, base3, base2;
  moe::ffn_expert_view<W> base;
  base.w1 = matrix_view<const W>(as_weight_type(r.w1, base1), I, H, H);
  if (w.experts.gated()) base.w3 = matrix_view<const W>(as_weight_type(r.w3, base3), I, H, H);
  base.w2 = matrix_view<const W>(as_weight_type(r.w2, base2), H, I, I);
  r.residuals.resize(static_cast<std::size_t>(E));
  std::vector<double> squared_errors;
  std::vector<host_matrix<float>> svd_residuals;  // svd: each expert's stored residual, for the restore
  timed("residuals", [&] {
    sparse::residual_params rp;
    rp.prune.keep = params.keep;
    rp.prune.scope = sparse::prune_scope::matrix;
    rp.encode.format = params.format;
    rp.encode.values = *params.values;
    if (params.residual != resmoe_residual::prune) {
      resmoe_other_residuals(ctx, params, base, stack, r, svd_residuals, squared_errors, report);
      return;
    }
    for (index_t e = 0; e < E; ++e) {
      const moe::expert_residual_info info = moe::encode_expert_residual<W>(
          ctx, rp, base, stack.expert(e), r.permutations.const_view().row(e), r.residuals[static_cast<std::size_t>(e)]);
      squared_errors.push_back(info.squared_error);
      report.residual_bytes.push_back(info.bytes);
      const auto& res = r.residuals[static_cast<std::size_t>(e)];
      report.formats.push_back({sparse::to_string(res.w1.format()), w.experts.gated() ? sparse::to_string(res.w3.format()) : "-",
                                sparse::to_string(res.w2.format())});
    }
  });
  // The restored experts: float, or (a bfloat16 layer) bfloat16, each value the float sum rounded once, as the
  // float path's rounding to storage rounds it.
  allocate_own_stack<W>(out, E, I, H, w.experts.gated());
  std::vector<W>& w1_out = own_stack_of<W>(out, 1);
  std::vector<W>& w3_out = own_stack_of<W>(out, 3);
  std::vector<W>& w2_out = own_stack_of<W>(out, 2);
  timed("restore", [&] {
    host_matrix<float> down(H, I);
    for (index_t e = 0; e < E; ++e) {
      const vector_view<const index_t> p = r.permutations.const_view().row(e);
      if (params.residual == resmoe_residual::svd) {  // base + the factors' product, row p(i) for neuron i
        const host_matrix<float>& d = svd_residuals[static_cast<std::size_t>(e)];
        for (index_t i = 0; i < I; ++i)
          for (index_t j = 0; j < H; ++j) {
            w1_out[static_cast<std::size_t>((e * I + i) * H + j)] = convert_to<W>(r.w1[static_cast<std::size_t>(p[i] * H + j)] + d(p[i], j));
            if (w.experts.gated())
              w3_out[static_cast<std::size_t>((e * I + i) * H + j)] = convert_to<W>(r.w3[static_cast<std::size_t>(p[i] * H + j)] + d(p[i], H + j));
            w2_out[static_cast<std::size_t>((e * H + j) * I + i)] =
                convert_to<W>(r.w2[static_cast<std::size_t>(j * I + p[i])] + d(p[i], (pieces - 1) * H + j));
          }
        continue;
      }
      const auto& res = r.residuals[static_cast<std::size_t>(e)];
      sparse::restore_dense<W, W>(ctx, base.w1, res.w1.view(), matrix_view<W>(w1_out.data() + e * I * H, I, H, H), p);
      if (w.experts.gated())
        sparse::restore_dense<W, W>(ctx, base.w3, res.w3.view(), matrix_view<W>(w3_out.data() + e * I * H, I, H, H), p);
      // W2's neurons are its columns: restore in the base's order (in float), then gather column p(i) into column i.
      sparse::restore_dense<W, float>(ctx, base.w2, res.w2.view(), down.view());
      W* w2 = w2_out.data() + e * H * I;
      for (index_t j = 0; j < H; ++j)
        for (index_t i = 0; i < I; ++i) w2[j * I + i] = convert_to<W>(down(j, p[i]));
    }
  });
  out.slots.resize(static_cast<std::size_t>(E));
  std::iota(out.slots.begin(), out.slots.end(), 0);
  out.router = copy_of(w.router);
  out.router_bias = copy_of(w.router_bias);
  out.correction_bias = copy_of(w.correction_bias);
  report.keep = params.keep;
  report.values = sparse::to_string(*params.values);
  report.barycenter_iterations = bary.iterations;
  report.barycenter_status = bary.status;
  report.barycenter_objective = bary.objective;
  report.resmoe_approximation_error = sparse::layer_approximation_error(squared_errors, I);
  report.center = to_string(params.center);
  report.residual = to_string(params.residual);
  report.rank = params.residual == resmoe_residual::svd ? params.rank : 0;
  return out;
}

/// prune's per-expert score (frequency, reap, router_score; see prune_criterion). Frequency and router_score sum
/// to 1 over the layer's experts.
template <class W>
std::vector<double> prune_scores(const host_context& ctx, const compress_params& params, const model::moe_model& m,
                                 const basic_moe_layer_weights_view<W>& w, matrix_view<const float> x) {
  const index_t E = w.experts.experts();
  moe::ffn_params ffn;
  ffn.act = m.activation;
  std::vector<double> score(static_cast<std::size_t>(E), 0.0);
  if (params.criterion == prune_criterion::frequency) {
    merge::routing_frequencies<float>(ctx, m.top_k, x, w.router, make_vector_view(score.data(), E));
    return score;
  }
  const index_t T = x.rows();
  host_matrix<float> logits(T, E);
  moe::router_logits<float>(ctx, x, w.router, w.router_bias, logits.view());
  if (params.criterion == prune_criterion::router_score) {
    // S-prune: each token's router probabilities (the model's score function; softmax for raw-logit routers),
    // summed over the tokens in token order, then scaled to sum 1 over the experts.
    const bool sigmoid = model::routing_of(m).scores == gating::score_function::sigmoid;
    std::vector<double> p(static_cast<std::size_t>(E));
    double total = 0;
    for (index_t t = 0; t < T; ++t) {
      double top = -std::numeric_limits<double>::infinity(), sum = 0;
      for (index_t e = 0; e < E; ++e) top = std::max(top, static_cast<double>(logits(t, e)));
      for (index_t e = 0; e < E; ++e) {
        const double l = logits(t, e);
        p[static_cast<std::size_t>(e)] = sigmoid ? 1.0 / (1.0 + std::exp(-l)) : std::exp(l - top);
        sum += p[static_cast<std::size_t>(e)];
      }
      for (index_t e = 0; e < E; ++e) score[static_cast<std::size_t>(e)] += sigmoid ? p[static_cast<std::size_t>(e)] : p[static_cast<std::size_t>(e)] / sum;
    }
    for (double v : score) total += v;
    if (total > 0)
      for (double& v : score) v /= total;
    return score;
  }
  // REAP's saliency: the mean over the tokens routed to e of gate weight x ||f_e(x_t)||.
  const index_t K = gating::max_experts_per_token(model::routing_of(m), E);
  host_matrix<float> weights(T, K), norms(T, E);
  host_matrix<std::int64_t> ids(T, K);
  gating::route_fixed<float>(ctx, model::routing_of(m), logits.const_view(), w.correction_bias, ids.view(), weights.view());
  moe::expert_output_norms<W>(ctx, ffn, w.experts, x, norms.view());
  std::vector<double> count(static_cast<std::size_t>(E), 0.0);
  for (index_t t = 0; t < T; ++t)
    for (index_t q = 0; q < K; ++q) {
      const std::int64_t e = ids(t, q);
      if (e >= E) continue;
      score[static_cast<std::size_t>(e)] += static_cast<double>(weights(t, q)) * static_cast<double>(norms(t, e));
      count[static_cast<std::size_t>(e)] += 1.0;
    }
  for (index_t e = 0; e < E; ++e)
    if (count[static_cast<std::size_t>(e)] > 0) score[static_cast<std::size_t>(e)] /= count[static_cast<std::size_t>(e)];
  return score;
}

/// The N highest scores' experts (ties to the lowest index), in increasing order.
inline std::vector<std::int64_t> top_scores(const std::vector<double>& score, index_t N) {
  std::vector<index_t> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) {
    return score[static_cast<std::size_t>(a)] > score[static_cast<std::size_t>(b)];
  });
  std::vector<std::int64_t> kept(order.begin(), order.begin() + N);
  std::sort(kept.begin(), kept.end());
  return kept;
}

/// C(n, k), or `cap` + 1 when it exceeds `cap`.
inline std::uint64_t capped_binomial(index_t n, index_t k, std::uint64_t cap) {
  k = std::min(k, n - k);
  std::uint64_t c = 1;
  for (index_t i = 1; i <= k; ++i) {
    // c * (n - k + i) / i is exact at every step; c <= cap < 2^32 before the product, so it cannot overflow
    // for n < 2^32, and the loop stops once past the cap (c only grows).
    c = c * static_cast<std::uint64_t>(n - k + i) / static_cast<std::uint64_t>(i);
    if (c > cap) return cap + 1;
  }
  return c;
}

/// O-prune: the subset of N experts whose layer output, routed over that subset only (the pruned layer's router
/// rows and biases), is closest to the original layer output on x, in squared Frobenius norm accumulated in
/// double. The experts' outputs are computed once; each subset routes the tokens over its logits. Every subset in
/// lexicographic order when there are at most `budget` (params.samples, or 100,000), else `budget` subsets drawn
/// by partial Fisher-Yates from moecomp's generator (seed, stream = layer). The first strictly best is kept.
/// scores[e] = -(best error of a searched subset holding e), for the report; error_out the best error / ||y||^2.
template <class W>
std::vector<std::int64_t> output_subset(const host_context& ctx, const compress_params& params, const model::moe_model& m,
                                        const basic_moe_layer_weights_view<W>& w, matrix_view<const float> x,
                                        std::uint64_t layer, std::vector<double>& scores) {
  const index_t E = w.experts.experts(), H = w.experts.d_model(), T = x.rows(), N = params.experts;
  moe::ffn_params ffn;
  ffn.act = m.activation;
  host_matrix<float> outputs(E * T, H), logits(T, E);
  moe::ffn_stack_forward<W>(ctx, ffn, w.experts, x, matrix_stack_view<float>(outputs.data(), E, T, H));
  moe::router_logits<float>(ctx, x, w.router, w.router_bias, logits.view());
  const gating::routing_params routing = model::routing_of(m);
  // The original routed output (the shared expert is in both outputs and cancels).
  const auto routed_output = [&](const std::vector<index_t>& subset, std::vector<double>& y) {
    const index_t n = static_cast<index_t>(subset.size());
    const index_t k = gating::max_experts_per_token(routing, n);
    host_matrix<float> sub(T, n), wts(T, k);
    host_matrix<std::int64_t> ids(T, k);
    std::vector<float> bias;
    for (index_t t = 0; t < T; ++t)
      for (index_t j = 0; j < n; ++j) sub(t, j) = logits(t, subset[static_cast<std::size_t>(j)]);
    for (index_t j = 0; j < n && !w.correction_bias.empty(); ++j) bias.push_back(w.correction_bias[subset[static_cast<std::size_t>(j)]]);
    gating::route_fixed<float>(host_context(1), routing, sub.const_view(),
                               bias.empty() ? vector_view<const float>() : make_vector_view<const float>(bias.data(), n),
                               ids.view(), wts.view());
    std::fill(y.begin(), y.end(), 0.0);
    for (index_t t = 0; t < T; ++t)
      for (index_t q = 0; q < k; ++q) {
        const std::int64_t j = ids(t, q);
        if (j < 0 || j >= n) continue;
        const float* o = outputs.data() + (static_cast<index_t>(subset[static_cast<std::size_t>(j)]) * T + t) * H;
        const double g = wts(t, q);
        for (index_t h = 0; h < H; ++h) y[static_cast<std::size_t>(t * H + h)] += g * static_cast<double>(o[h]);
      }
  };
  std::vector<index_t> all(static_cast<std::size_t>(E));
  std::iota(all.begin(), all.end(), 0);
  std::vector<double> reference(static_cast<std::size_t>(T * H));
  routed_output(all, reference);
  const std::uint64_t budget = params.samples > 0 ? static_cast<std::uint64_t>(params.samples) : 100000u;
  const std::uint64_t total = capped_binomial(E, N, budget);
  const bool exhaustive = total <= budget;
  const std::uint64_t count = exhaustive ? total : budget;
  // The candidates, materialised in order (exhaustive: lexicographic; else the generator's draws).
  std::vector<std::vector<index_t>> candidates(static_cast<std::size_t>(count));
  if (exhaustive) {
    std::vector<index_t> c(static_cast<std::size_t>(N));
    std::iota(c.begin(), c.end(), 0);
    for (std::uint64_t i = 0; i < count; ++i) {
      candidates[static_cast<std::size_t>(i)] = c;
      index_t j = N - 1;
      while (j >= 0 && c[static_cast<std::size_t>(j)] == E - N + j) --j;
      if (j < 0) break;
      ++c[static_cast<std::size_t>(j)];
      for (index_t q = j + 1; q < N; ++q) c[static_cast<std::size_t>(q)] = c[static_cast<std::size_t>(q - 1)] + 1;
    }
  } else {
    random_generator rng(params.seed, layer);
    std::vector<index_t> p(static_cast<std::size_t>(E));
    for (std::uint64_t i = 0; i < count; ++i) {
      std::iota(p.begin(), p.end(), 0);
      for (index_t q = 0; q < N; ++q)
        std::swap(p[static_cast<std::size_t>(q)], p[static_cast<std::size_t>(q + static_cast<index_t>(rng.uniform_index(static_cast<std::uint64_t>(E - q))))]);
      std::vector<index_t> c(p.begin(), p.begin() + N);
      std::sort(c.begin(), c.end());
      candidates[static_cast<std::size_t>(i)] = std::move(c);
    }
  }
  // Each candidate's error, over the threads (each writes its own slot), then the first minimum in order.
  std::vector<double> errors(static_cast<std::size_t>(count));
  moecomp::detail::parallel_for(static_cast<index_t>(count), ctx.threads(), [&](index_t i, int) {
    std::vector<double> y(static_cast<std::size_t>(T * H));
    routed_output(candidates[static_cast<std::size_t>(i)], y);
    double err = 0;
    for (std::size_t q = 0; q < y.size(); ++q) err += (y[q] - reference[q]) * (y[q] - reference[q]);
    errors[static_cast<std::size_t>(i)] = err;
  });
  std::size_t best = 0;
  for (std::size_t i = 1; i < errors.size(); ++i)
    if (errors[i] < errors[best]) best = i;
  scores.assign(static_cast<std::size_t>(E), -std::numeric_limits<double>::infinity());
  for (std::size_t i = 0; i < errors.size(); ++i)
    for (index_t e : candidates[i])
      scores[static_cast<std::size_t>(e)] = std::max(scores[static_cast<std::size_t>(e)], -errors[i]);
  return std::vector<std::int64_t>(candidates[best].begin(), candidates[best].end());
}

/// The pruned layer: the original stack addressed through the kept experts (increasing order), their router rows
/// and biases.
template <class W>
compressed_layer pruned_layer(const basic_moe_layer_weights_view<W>& w, const std::vector<std::int64_t>& kept) {
  const index_t E = w.experts.experts(), H = w.experts.d_model(), N = static_cast<index_t>(kept.size());
  compressed_layer out;
  out.stack_experts = E;  // the original stack, addressed through the slots
  out.slots = kept;
  out.router = host_matrix<float>(N, H);
  for (index_t r = 0; r < N; ++r)
    for (index_t c = 0; c < H; ++c) out.router(r, c) = w.router(kept[static_cast<std::size_t>(r)], c);
  for (std::int64_t e : kept) {
    if (!w.router_bias.empty()) out.router_bias.push_back(w.router_bias[e]);
    if (!w.correction_bias.empty()) out.correction_bias.push_back(w.correction_bias[e]);
  }
  return out;
}

/// prune: each expert's score and the N highest kept (ties to the lowest index), or O-prune's best subset; the
/// router's rows (and biases) of the kept experts. `kept_given` (global pruning): the layer's share, chosen by
/// compress_checkpoint from every layer's scores.
template <class W>
compressed_layer prune_layer(const host_context& ctx, const compress_params& params, const model::moe_model& m,
                             const basic_moe_layer_weights_view<W>& w, matrix_view<const float> x, std::uint64_t layer,
                             const step_timer& timed, layer_report& report,
                             const std::vector<std::int64_t>* kept_given = nullptr,
                             const std::vector<double>* scores_given = nullptr) {
  std::vector<double> score;
  std::vector<std::int64_t> kept;
  if (kept_given != nullptr) {
    kept = *kept_given;
    score = *scores_given;
  } else {
    timed(params.criterion == prune_criterion::output ? "subsets" : "scores", [&] {
      if (params.criterion == prune_criterion::output) {
        kept = output_subset(ctx, params, m, w, x, layer, score);
      } else {
        score = prune_scores(ctx, params, m, w, x);
        kept = top_scores(score, params.experts);
      }
    });
  }
  report.criterion = to_string(params.criterion);
  report.scores = score;
  report.kept = kept;
  return pruned_layer(w, kept);
}

/// HC-SMoE's grouping: the features, the linkage, fcluster to N groups (relabelled by first appearance), and
/// each group's representative (the member nearest its group's mean feature) as its dominant.
template <class W>
void hc_smoe_groups(const host_context& ctx, const compress_params& params, const model::moe_model& m,
                    const basic_moe_layer_weights_view<W>& w, matrix_view<const float> x, const step_timer& timed,
                           std::vector<std::int64_t>& labels, std::vector<std::int64_t>& dominants) {
  const index_t E = w.experts.experts(), H = w.experts.d_model(), N = params.experts;
  moe::ffn_params ffn;
  ffn.act = m.activation;
  host_matrix<float> features;
  std::vector<double> weight_condensed;  // features weights: the condensed distances instead
  timed("features", [&] {
    if (params.features == expert_features::outputs) {
      features = host_matrix<float>(E, H);
      moe::expert_mean_outputs<W>(ctx, ffn, w.experts, x, features.view());
    } else if (params.features == expert_features::router_logits) {  // each expert's logit column over the tokens
      host_matrix<float> logits(x.rows(), E);
      moe::router_logits<float>(ctx, x, w.router, vector_view<const float>(), logits.view());
      features = host_matrix<float>(E, x.rows());
      for (index_t t = 0; t < x.rows(); ++t)
        for (index_t e = 0; e < E; ++e) features(e, t) = logits(t, e);
    } else {  // the distances straight from the stacks (the features would be E x 3IH floats, twice)
      weight_condensed.resize(static_cast<std::size_t>(E * (E - 1) / 2));
      moe::expert_weight_distances(ctx, w.experts,
                                   make_vector_view(weight_condensed.data(), static_cast<index_t>(weight_condensed.size())));
    }
  });
  timed("clustering", [&] {
    cluster::linkage_params lp;
    lp.method = params.linkage;
    const vector_view<const double> condensed(weight_condensed.data(), static_cast<index_t>(weight_condensed.size()));
    const host_matrix<double> z = params.features == expert_features::weights
                                      ? cluster::linkage_condensed(ctx, lp, condensed)
                                      : cluster::linkage(ctx, lp, features.const_view());
    cluster::fcluster_params fp;
    fp.criterion = cluster::fcluster_criterion::maxclust;
    fp.max_clusters = N;
    std::vector<std::int64_t> raw(static_cast<std::size_t>(E));
    cluster::fcluster(ctx, fp, z.const_view(), make_vector_view(raw.data(), E));
    cluster::relabel_by_first_appearance(ctx, make_vector_view<const std::int64_t>(raw.data(), E),
                                         make_vector_view(labels.data(), E));
    const index_t groups = cluster::group_count(ctx, make_vector_view<const std::int64_t>(labels.data(), E));
    std::vector<index_t> representatives(static_cast<std::size_t>(groups));
    if (params.features == expert_features::weights)
      cluster::group_representatives_from_distances(ctx, condensed, make_vector_view<const std::int64_t>(labels.data(), E),
                                                    make_vector_view(representatives.data(), groups));
    else
      cluster::group_representatives(ctx, features.const_view(), make_vector_view<const std::int64_t>(labels.data(), E),
                                     make_vector_view(representatives.data(), groups));
    dominants.assign(representatives.begin(), representatives.end());
  });
}

/// The generator stream of cka_merge's augmentation (any fixed value: the seed is params.seed).
constexpr std::uint64_t augment_stream = 0x6175676d656e74ull;  // "augment"

/// cka_merge's similarity tokens (issue 34): the first params.similarity_tokens rows of x (0: all), then
/// params.augment mixed rows, row j = lambda x_a + (1 - lambda) x_b with, drawn in this order from moecomp's
/// generator (params.seed, augment_stream), a = uniform_index(N), b = uniform_index(N), lambda = uniform<float>()
/// (k 2^-24). lambda x_a and (1 - lambda) x_b are exact in double, so the row is their sum rounded to double, then
/// to float, on every compiler (contracted or not).
inline host_matrix<float> similarity_tokens_of(const compress_params& params, matrix_view<const float> x) {
  const index_t T = x.rows(), H = x.cols();
  const index_t N = params.similarity_tokens == 0 ? T : params.similarity_tokens;
  MOECOMP_EXPECTS(N <= T, "compress: params.similarity_tokens ", N, " is more than the layer's ", T,
                  " calibration tokens");
  MOECOMP_EXPECTS(N >= 1 || params.augment == 0, "compress: params.augment needs calibration tokens to mix, got 0");
  const index_t A = params.augment;
  host_matrix<float> out(N + A, H);
  for (index_t t = 0; t < N; ++t)
    for (index_t k = 0; k < H; ++k) out(t, k) = x(t, k);
  random_generator rng(params.seed, augment_stream);
  for (index_t j = 0; j < A; ++j) {
    const auto a = static_cast<index_t>(rng.uniform_index(static_cast<std::uint64_t>(N)));
    const auto b = static_cast<index_t>(rng.uniform_index(static_cast<std::uint64_t>(N)));
    const double lambda = static_cast<double>(rng.uniform<float>());
    for (index_t k = 0; k < H; ++k)
      out(N + j, k) = static_cast<float>(lambda * static_cast<double>(x(a, k)) +
                                         (1.0 - lambda) * static_cast<double>(x(b, k)));
  }
  return out;
}

/// The fourth paper's grouping: the experts' dissimilarity matrix and its partition into N groups.
template <class W>
void cka_merge_groups(const host_context& ctx, const compress_params& params, const model::moe_model& m,
                      const basic_moe_layer_weights_view<W>& w, matrix_view<const float> x,
                             const step_timer& timed, std::vector<std::int64_t>& labels, layer_report& report) {
  const index_t E = w.experts.experts(), H = w.experts.d_model();
  moe::ffn_params ffn;
  ffn.act = m.activation;
  host_matrix<double> distances(E, E);
  timed("similarity", [&] {
    if (params.similarity == expert_similarity::cka) {
      // The similarity's own tokens (a prefix, plus mixed ones); the merge and the error use x itself.
      const bool all_of_x = params.similarity_tokens == 0 && params.augment == 0;
      host_matrix<float> own;
      if (!all_of_x) own = similarity_tokens_of(params, x);
      const matrix_view<const float> xs = all_of_x ? x : own.const_view();
      report.similarity_tokens = xs.rows() - params.augment;
      report.augmented_tokens = params.augment;
      const index_t T = xs.rows();
      host_matrix<float> outputs(E * T, H);
      moe::ffn_stack_forward<W>(ctx, ffn, w.experts, xs, matrix_stack_view<float>(outputs.data(), E, T, H));
      host_matrix<double> cka(E, E);
      similarity::cka_params cp;
      similarity::cka_matrix<float>(ctx, cp, split_rows(outputs.const_view(), E), cka.view());
      for (index_t a = 0; a < E; ++a)
        for (index_t b = 0; b < E; ++b)  // CKA <= 1; rounding can pass it for experts that compute the same function
          distances(a, b) = a == b ? 0.0 : std::max(0.0, 1.0 - cka(a, b));
    } else if (params.similarity == expert_similarity::weights) {  // from the stacks, without the E x 3IH features
      std::vector<double> condensed(static_cast<std::size_t>(E * (E - 1) / 2));
      moe::expert_weight_distances(ctx, w.experts,
                                   make_vector_view(condensed.data(), static_cast<index_t>(condensed.size())));
      for (index_t a = 0, pair = 0; a < E; ++a) {
        distances(a, a) = 0;
        for (index_t b = a + 1; b < E; ++b, ++pair) distances(a, b) = distances(b, a) = condensed[static_cast<std::size_t>(pair)];
      }
    } else {
      host_matrix<float> features(E, H * H);
      moe::surrogate_weights<W>(ctx, w.experts, features.view());
      host_matrix<float> d(E, E);
      distance::pairwise_distance_params dp;
      distance::pairwise_distances(ctx, dp, features.const_view(), d.view());
      for (index_t a = 0; a < E; ++a)
        for (index_t b = 0; b < E; ++b) distances(a, b) = d(a, b);
    }
    // CKA rounds to a matrix that is symmetric only to rounding; the partition wants it exactly.
    for (index_t a = 0; a < E; ++a)
      for (index_t b = a + 1; b < E; ++b) distances(a, b) = distances(b, a) = 0.5 * (distances(a, b) + distances(b, a));
  });
  timed("partition", [&] {
    similarity::partition_params pp;
    pp.groups = params.experts;
    pp.seed = params.seed;
    similarity::partition_experts<double>(ctx, pp, distances.const_view(), make_vector_view(labels.data(), E));
  });
}

/// M-SMoE's grouping (MC-SMoE's merge stage): f = the routing frequencies (top-k counts of the router's logits on
/// x, the model's k); the N dominants = the N largest f (ties to the lowest index); every other expert e joins
/// the dominant d maximising cos(l_e, l_d), l_e = expert e's router-logit column over the T tokens (x router_e^T
/// + the router bias, in double; a zero column has cosine 0 with everything), ties to the lowest dominant
/// index. Groups numbered by first appearance; dominants[g] = group g's dominant.
template <class W>
void m_smoe_groups(const host_context& ctx, const model::moe_model& m, const basic_moe_layer_weights_view<W>& w,
                          index_t N, matrix_view<const float> x, const step_timer& timed,
                          std::vector<std::int64_t>& labels, std::vector<std::int64_t>& dominants,
                          layer_report& report) {
  const index_t E = w.experts.experts(), H = w.experts.d_model(), T = x.rows();
  MOECOMP_EXPECTS(T >= 1, "compress: params.method m-smoe needs calibration tokens (routing frequencies and router ",
                  "logits), got 0");
  std::vector<double> f(static_cast<std::size_t>(E), 0.0);
  std::vector<index_t> dom;
  timed("frequencies", [&] {
    merge::routing_frequencies<float>(ctx, m.top_k, x, w.router, make_vector_view(f.data(), E));
    std::vector<index_t> order(static_cast<std::size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) {
      return f[static_cast<std::size_t>(a)] > f[static_cast<std::size_t>(b)];
    });
    dom.assign(order.begin(), order.begin() + N);
    std::sort(dom.begin(), dom.end());  // increasing index: the ties of the assignment go to the lowest
  });
  std::vector<index_t> joins(static_cast<std::size_t>(E));  // each expert's dominant
  timed("similarity", [&] {
    // logits(e, t) in double, and each column's Gram entries with the dominants.
    host_matrix<double> logits(E, T);
    moecomp::detail::parallel_for(T, ctx.threads(), [&](index_t t, int) {
      for (index_t e = 0; e < E; ++e) {
        double s = w.router_bias.empty() ? 0.0 : static_cast<double>(w.router_bias[e]);
        for (index_t k = 0; k < H; ++k) s += static_cast<double>(x(t, k)) * static_cast<double>(w.router(e, k));
        logits(e, t) = s;
      }
    });
    std::vector<double> norm(static_cast<std::size_t>(E), 0.0);
    for (index_t e = 0; e < E; ++e) {
      double s = 0;
      for (index_t t = 0; t < T; ++t) s += logits(e, t) * logits(e, t);
      norm[static_cast<std::size_t>(e)] = std::sqrt(s);
    }
    std::vector<bool> is_dominant(static_cast<std::size_t>(E), false);
    for (index_t d : dom) is_dominant[static_cast<std::size_t>(d)] = true;
    for (index_t e = 0; e < E; ++e) {
      if (is_dominant[static_cast<std::size_t>(e)]) {
        joins[static_cast<std::size_t>(e)] = e;
        continue;
      }
      double best = -std::numeric_limits<double>::infinity();
      index_t best_d = dom.front();
      for (index_t d : dom) {
        double dot = 0;
        for (index_t t = 0; t < T; ++t) dot += logits(e, t) * logits(d, t);
        const double scale = norm[static_cast<std::size_t>(e)] * norm[static_cast<std::size_t>(d)];
        const double c = scale > 0 ? dot / scale : 0.0;
        if (c > best) {
          best = c;
          best_d = d;
        }
      }
      joins[static_cast<std::size_t>(e)] = best_d;
    }
  });
  // Groups by first appearance of their dominant in the experts' order.
  std::vector<std::int64_t> group_of(static_cast<std::size_t>(E), -1);
  dominants.clear();
  for (index_t e = 0; e < E; ++e) {
    const index_t d = joins[static_cast<std::size_t>(e)];
    if (group_of[static_cast<std::size_t>(d)] < 0) {
      group_of[static_cast<std::size_t>(d)] = static_cast<std::int64_t>(dominants.size());
      dominants.push_back(d);
    }
    labels[static_cast<std::size_t>(e)] = group_of[static_cast<std::size_t>(d)];
  }
  report.frequencies = f;
}

/// The layer's new form by params.method (resolved). x: the calibration tokens (0 rows without them).
template <class W>
compressed_layer compress_layer_host(const host_context& ctx, const compress_params& params,
                                     const model::moe_model& m, const basic_moe_layer_weights_view<W>& w,
                                            matrix_view<const float> x, io::safetensors_dtype expert_dtype,
                                            const step_timer& timed, layer_report& report, std::uint64_t layer = 0) {
  if (params.method == method::prune) return prune_layer(ctx, params, m, w, x, layer, timed, report);
  if constexpr (std::is_same_v<W, float> || std::is_same_v<W, bfloat16>) {
    if (params.method == method::resmoe) return resmoe_layer(ctx, params, w, expert_dtype, timed, report);
  } else {
    MOECOMP_EXPECTS(params.method != method::resmoe, "compress: resmoe reads its layers as float or bfloat16");
  }
  const index_t E = w.experts.experts();
  std::vector<std::int64_t> labels(static_cast<std::size_t>(E));
  std::vector<std::int64_t> dominants;
  merge::merge_params mp;
  mp.forward.act = m.activation;
  mp.routing_top_k = m.top_k;
  mp.seed = params.seed;
  mp.report_errors = x.rows() > 0;
  mp.method = *params.merge;
  mp.align_members = params.align != merge_alignment::none;
  mp.align.objective = params.align == merge_alignment::activations ? align::align_objective::correlation
                                                                    : align::align_objective::weights;
  mp.align.forward.act = m.activation;
  if (params.method == method::hc_smoe) {
    hc_smoe_groups(ctx, params, m, w, x, timed, labels, dominants);
    mp.router = merge::router_rule::id_map;
  } else if (params.method == method::m_smoe) {
    m_smoe_groups(ctx, m, w, params.experts, x, timed, labels, dominants, report);
    mp.router = merge::router_rule::id_map;  // MC-SMoE keeps the gate: each old id maps to its group
    mp.align_members = true;                             // MC-SMoE aligns every member to its dominant,
    mp.align.objective = align::align_objective::inner;  // by weight matching, before the frequency merge
    mp.frequency_top_k = m.top_k;  // the frequencies that chose the dominants
  } else {
    cka_merge_groups(ctx, params, m, w, x, timed, labels, report);
    // automatic (uniform, learned: merged rows; dominant: the dominant's row), or params.merge_router (issue 34)
    mp.router = params.merge_router;
  }
  compressed_layer out;
  timed("merging", [&] { out = merge_layer(ctx, w, labels, mp, x, dominants, report); });
  return out;
}

/// Rounds the layer's computed tensors to the checkpoint's dtypes (the experts' for the stack, each bias's own),
/// so that the error measured next is the written checkpoint's.
inline void round_layer_to_storage(compressed_layer& c, io::safetensors_dtype expert_dtype, io::safetensors_dtype router_dtype,
                                   io::safetensors_dtype router_bias_dtype, io::safetensors_dtype correction_bias_dtype) {
  io::round_to_storage(c.w1.data(), c.w1.size(), expert_dtype);
  io::round_to_storage(c.w3.data(), c.w3.size(), expert_dtype);
  io::round_to_storage(c.w2.data(), c.w2.size(), expert_dtype);
  io::round_to_storage(c.router.data(), static_cast<std::size_t>(c.router.size()), router_dtype);
  io::round_to_storage(c.router_bias.data(), c.router_bias.size(), router_bias_dtype);
  io::round_to_storage(c.correction_bias.data(), c.correction_bias.size(), correction_bias_dtype);
}

/// The layer's output on x through moe_layer_forward with the model's routing: the original layer (c null) or the
/// compressed one (its own stack, float or bfloat16, or the original's through the slots), with w's shared expert.
/// Only the original needs w's experts; the compressed layer with its own stack reads w's router-free parts (the
/// shared expert and its gate) alone.
template <class W>
host_matrix<float> layer_output(const host_context& ctx, const model::moe_model& m, const basic_moe_layer_weights_view<W>& w,
                                const compressed_layer* c, matrix_view<const float> x) {
  moe::moe_layer_params params;
  params.routing = model::routing_of(m);
  params.ffn.act = m.activation;
  const index_t H = m.hidden_size, I = m.expert_size;
  std::vector<float> shared_gate(static_cast<std::size_t>(w.shared_gate.size()));  // 1 x H, whatever its stride
  for (index_t k = 0; k < w.shared_gate.size(); ++k) shared_gate[static_cast<std::size_t>(k)] = w.shared_gate[k];
  auto one = [](matrix_view<const W> a) {
    return matrix_stack_view<const W>(a.data(), 1, a.rows(), a.cols(), a.row_stride(), a.rows() * a.row_stride());
  };
  moe::moe_layer_view<W> v;
  if (!w.shared.w1.empty()) {
    v.shared.w1 = one(w.shared.w1);
    if (!w.shared.w3.empty()) v.shared.w3 = one(w.shared.w3);
    v.shared.w2 = one(w.shared.w2);
    if (!shared_gate.empty()) v.shared_gate = matrix_view<const float>(shared_gate.data(), 1, H);
  }
  if (c == nullptr) {
    v.router = w.router;
    v.router_bias = w.correction_bias;
    v.experts = w.experts;
  } else {
    const index_t out_experts = static_cast<index_t>(c->slots.size());
    v.router = c->router.const_view();
    if (!c->correction_bias.empty()) v.router_bias = make_vector_view(c->correction_bias.data(), out_experts);
    v.expert_map = make_vector_view(c->slots.data(), out_experts);
    if (c->own_stack()) {
      const std::vector<W>& w1 = own_stack_of<W>(*c, 1);
      MOECOMP_EXPECTS(!w1.empty(), "layer_output: the compressed stack must be in the layer's weight type");
      const index_t S = c->stack_experts;
      v.experts.w1 = matrix_stack_view<const W>(w1.data(), S, I, H);
      if (m.gated) v.experts.w3 = matrix_stack_view<const W>(own_stack_of<W>(*c, 3).data(), S, I, H);
      v.experts.w2 = matrix_stack_view<const W>(own_stack_of<W>(*c, 2).data(), S, H, I);
    } else {
      v.experts = w.experts;
    }
  }
  host_matrix<float> y(x.rows(), x.cols());
  moe::moe_layer_forward<W>(ctx, params, v, x, y.view());
  return y;
}

/// || y - y' ||_F / || y ||_F over the tokens, in double.
inline double relative_output_error(const host_matrix<float>& y, const host_matrix<float>& z) {
  double diff = 0, ref = 0;
  for (index_t t = 0; t < y.rows(); ++t)
    for (index_t k = 0; k < y.cols(); ++k) {
      const double a = y(t, k), b = z(t, k);
      diff += (a - b) * (a - b);
      ref += a * a;
    }
  return std::sqrt(diff) / std::sqrt(ref);
}

/// || y - y' ||_F / || y ||_F of the layer's output on x (0 rows: NaN), through moe_layer_forward with the model's
/// routing.
template <class W>
double layer_error(const host_context& ctx, const model::moe_model& m, const basic_moe_layer_weights_view<W>& w,
                   const compressed_layer& c, matrix_view<const float> x) {
  if (x.rows() == 0) return std::numeric_limits<double>::quiet_NaN();
  const host_matrix<float> y = layer_output(ctx, m, w, nullptr, x);
  return relative_output_error(y, layer_output(ctx, m, w, &c, x));
}

}  // namespace detail
}  // namespace compress
MOECOMP_NAMESPACE_END
