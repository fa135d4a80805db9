#pragma once
// A dense checkpoint's FFNs split into experts (compress::compress_dense_checkpoint, method moefy): each FFN's
// neurons grouped by balanced k-means (cluster::moefication_split), written as the same architecture with the
// neurons permuted so that expert e is a contiguous block, plus the MoEfication router and the permutation.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/cluster/moefication.hpp>
#include <moecomp/compress/detail/compress_checkpoint.hpp>
#include <moecomp/gating/router_training.hpp>
#include <moecomp/moe/dynamic_k.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace compress {
namespace detail {

/// Row p of the result is row permutation[p] of the 2-D tensor `t`: its bytes moved, never converted, so that
/// any dtype is kept exactly.
inline std::vector<unsigned char> permute_rows(const io::safetensors_tensor& t, const std::vector<index_t>& permutation) {
  const auto row_bytes = static_cast<std::size_t>(t.byte_size() / static_cast<std::uint64_t>(t.shape()[0]));
  std::vector<unsigned char> out(static_cast<std::size_t>(t.byte_size()));
  for (std::size_t p = 0; p < permutation.size(); ++p)
    std::memcpy(out.data() + p * row_bytes, t.data() + static_cast<std::size_t>(permutation[p]) * row_bytes, row_bytes);
  return out;
}

/// Column p of the result is column permutation[p] of the 2-D tensor `t` (bytes moved, as permute_rows).
inline std::vector<unsigned char> permute_columns(const io::safetensors_tensor& t, const std::vector<index_t>& permutation) {
  const index_t rows = t.shape()[0], cols = t.shape()[1];
  const auto item = static_cast<std::size_t>(t.byte_size() / static_cast<std::uint64_t>(rows * cols));
  std::vector<unsigned char> out(static_cast<std::size_t>(t.byte_size()));
  for (index_t r = 0; r < rows; ++r) {
    const unsigned char* src = t.data() + static_cast<std::size_t>(r * cols) * item;
    unsigned char* dst = out.data() + static_cast<std::size_t>(r * cols) * item;
    for (index_t p = 0; p < cols; ++p)
      std::memcpy(dst + static_cast<std::size_t>(p) * item, src + static_cast<std::size_t>(permutation[static_cast<std::size_t>(p)]) * item, item);
  }
  return out;
}

/// The MoEfied FFN's output error on x against the dense FFN's: token t runs the top_k experts whose router
/// rows score highest (x_t . row, ties to the lower index), each with weight 1, and the FFN's output is their
/// sum; || y_dense - y_moe ||_F / || y_dense ||_F. With top_k = E it is the dense FFN up to summation order.
inline double moefy_error(const host_context& ctx, const moe::ffn_params& params, const moe::ffn_expert_view<float>& dense,
                          const std::vector<float>& w1, const std::vector<float>& w3, const std::vector<float>& w2,
                          matrix_view<const float> router, index_t top_k, matrix_view<const float> x) {
  if (x.rows() == 0) return std::numeric_limits<double>::quiet_NaN();
  const index_t T = x.rows(), H = x.cols(), E = router.rows(), S = dense.w1.rows() / E;
  host_matrix<float> y(T, H), z(T, H), scores(T, E);
  moe::ffn_forward<float>(ctx, params, dense, x, y.view());
  moe::router_logits<float>(ctx, x, router, vector_view<const float>(), scores.view());
  // Each token's top_k experts by raw score, ties to the lower index: moecomp's top-k rule.
  gating::routing_params routing;
  routing.rule = gating::routing_rule::top_k;
  routing.scores = gating::score_function::none;
  routing.top_k = top_k;
  host_matrix<std::int64_t> ids(T, top_k);
  host_matrix<float> weights(T, top_k);
  gating::route_fixed<float>(ctx, routing, scores.const_view(), vector_view<const float>(), ids.view(), weights.view());
  std::vector<std::vector<index_t>> tokens(static_cast<std::size_t>(E));
  for (index_t t = 0; t < T; ++t)
    for (index_t k = 0; k < top_k; ++k) tokens[static_cast<std::size_t>(ids(t, k))].push_back(t);
  for (index_t t = 0; t < T; ++t)
    for (index_t k = 0; k < H; ++k) z(t, k) = 0;
  for (index_t e = 0; e < E; ++e) {
    const auto& mine = tokens[static_cast<std::size_t>(e)];
    if (mine.empty()) continue;
    const auto n = static_cast<index_t>(mine.size());
    host_matrix<float> xe(n, H), ye(n, H);
    for (index_t i = 0; i < n; ++i)
      for (index_t k = 0; k < H; ++k) xe(i, k) = x(mine[static_cast<std::size_t>(i)], k);
    moe::ffn_expert_view<float> expert;
    expert.w1 = matrix_view<const float>(w1.data() + e * S * H, S, H, H);
    if (!w3.empty()) expert.w3 = matrix_view<const float>(w3.data() + e * S * H, S, H, H);
    expert.w2 = matrix_view<const float>(w2.data() + e * H * S, H, S, S);
    moe::ffn_forward<float>(ctx, params, expert, xe.const_view(), ye.view());
    for (index_t i = 0; i < n; ++i)
      for (index_t k = 0; k < H; ++k) z(mine[static_cast<std::size_t>(i)], k) += ye(i, k);
  }
  double diff = 0, ref = 0;
  for (index_t t = 0; t < T; ++t)
    for (index_t k = 0; k < H; ++k) {
      const double a = y(t, k), b = z(t, k);
      diff += (a - b) * (a - b);
      ref += a * a;
    }
  return std::sqrt(diff) / std::sqrt(ref);
}

/// SADMoE on one split FFN: the router trained on the tokens x to predict each expert's output norm (or, with
/// the moefication objective, its hidden-activation sum), rounded to the checkpoint's dtype, and dynamic-k
/// measured on the held-out tokens (the last validation share; all tokens without one) against the dense FFN.
/// Returns the router's tensors (`PREFIX.sadmoe.router.w1`, `.w2`, and `.b1`, `.b2` with biases).
inline std::vector<owned_tensor> sadmoe_router(const host_context& ctx, const compress_params& params,
                                               const moe::ffn_params& ffn, const moe::ffn_expert_view<float>& dense,
                                               const moe::ffn_expert_stack_view<float>& experts,
                                               matrix_view<const float> x, io::safetensors_dtype dtype,
                                               const std::string& prefix, const step_timer& timed, layer_report& report) {
  const index_t T = x.rows(), H = x.cols(), E = experts.experts(), S = experts.d_ff(), dh = params.router.hidden;
  host_matrix<float> targets(T, E);
  timed("router targets", [&] {
    if (params.router.objective == gating::router_objective::output_norm) {
      moe::expert_output_norms<float>(ctx, ffn, experts, x, targets.view());
      return;
    }
    host_matrix<float> hidden(T, S);  // MoEfication's labels: each expert's summed |hidden activation|
    for (index_t e = 0; e < E; ++e) {
      moe::ffn_hidden<float>(ctx, ffn, experts.expert(e), x, hidden.view());
      for (index_t t = 0; t < T; ++t) {
        double sum = 0;
        for (index_t j = 0; j < S; ++j) sum += std::abs(static_cast<double>(hidden(t, j)));
        targets(t, e) = static_cast<float>(sum);
      }
    }
  });
  host_matrix<float> w1(dh, H), w2(E, dh);
  std::vector<float> b1(params.router.bias ? static_cast<std::size_t>(dh) : 0), b2(params.router.bias ? static_cast<std::size_t>(E) : 0);
  gating::router_weights_view<float> w{w1.view(), vector_view<float>(b1.data(), static_cast<index_t>(b1.size())), w2.view(),
                                       vector_view<float>(b2.data(), static_cast<index_t>(b2.size()))};
  gating::router_training_result trained;
  timed("router training", [&] {
    gating::init_router_weights<float>(params.router, params.seed, w);
    trained = gating::train_router<float>(ctx, params.router, x, targets.const_view(), w);
  });
  io::round_to_storage(w1.data(), static_cast<std::size_t>(w1.size()), dtype);
  io::round_to_storage(w2.data(), static_cast<std::size_t>(w2.size()), dtype);
  io::round_to_storage(b1.data(), b1.size(), dtype);
  io::round_to_storage(b2.data(), b2.size(), dtype);
  report.router_steps = trained.iterations;
  report.router_validation_mse = trained.validation_mse;
  report.router_top1_agreement = trained.top1_agreement;
  report.router_train_loss = trained.train_loss;
  report.router_validation_loss = trained.validation_loss;
  timed("dynamic-k", [&] {
    const index_t held = trained.validation_tokens > 0 ? trained.validation_tokens : T;
    const matrix_view<const float> xv = x.row_range(T - held, held);
    host_matrix<float> y(held, H), z(held, H);
    moe::ffn_forward<float>(ctx, ffn, dense, xv, y.view());
    auto error = [&]() {
      double diff = 0, ref = 0;
      for (index_t t = 0; t < held; ++t)
        for (index_t k = 0; k < H; ++k) {
          const double a = y(t, k), b = z(t, k);
          diff += (a - b) * (a - b);
          ref += a * a;
        }
      return std::sqrt(diff) / std::sqrt(ref);
    };
    const gating::router_weights_view<const float> router{w1.const_view(), vector_view<const float>(b1.data(), static_cast<index_t>(b1.size())),
                                                          w2.const_view(), vector_view<const float>(b2.data(), static_cast<index_t>(b2.size()))};
    moe::dynamic_k_params dk;
    dk.objective = params.router.objective;
    dk.ffn = ffn;
    for (double tau : params.taus) {
      dk.routing.rule = gating::routing_rule::threshold;
      dk.routing.tau = tau;
      const moe::dynamic_k_result r = moe::dynamic_k_forward<float>(ctx, dk, experts, router, xv, z.view());
      report.dynamic_k.push_back({tau, r.mean_experts, r.cost.ratio, error()});
    }
    dk.routing.rule = gating::routing_rule::top_k;
    dk.routing.top_k = params.top_k;
    const moe::dynamic_k_result r = moe::dynamic_k_forward<float>(ctx, dk, experts, router, xv, z.view());
    report.router_top_k_error = error();
    report.router_top_k_flops_ratio = r.cost.ratio;
  });
  std::vector<owned_tensor> out;
  auto add = [&](const std::string& name, std::vector<index_t> shape, const float* values, std::size_t count) {
    out.push_back({prefix + ".sadmoe.router." + name, dtype, std::move(shape), {}});
    io::append_encoded(values, count, dtype, out.back().bytes);
  };
  add("w1", {dh, H}, w1.data(), static_cast<std::size_t>(w1.size()));
  add("w2", {E, dh}, w2.data(), static_cast<std::size_t>(w2.size()));
  if (params.router.bias) {
    add("b1", {dh}, b1.data(), b1.size());
    add("b2", {E}, b2.data(), b2.size());
  }
  return out;
}

/// The tensor prefix without its final dot ("model.layers.3.mlp").
inline std::string dense_prefix(const model::dense_layer_names& names) {
  return !names.prefix.empty() && names.prefix.back() == '.' ? names.prefix.substr(0, names.prefix.size() - 1)
                                                             : names.prefix;
}

inline checkpoint_report compress_dense_checkpoint_host(const host_context& ctx, const compress_params& params,
                                                        const io::safetensors_checkpoint& checkpoint,
                                                        const model::dense_model& m, const std::string& config_text,
                                                        const io::safetensors_file* calibration,
                                                        io::safetensors_sharded_writer& writer,
                                                        const compress_observer& observer) {
  using json = nlohmann::ordered_json;
  const index_t L = static_cast<index_t>(m.layers.size()), F = m.ffn_size, H = m.hidden_size;
  const index_t E = params.experts, S = F / E, top_k = params.top_k;
  cluster::kmeans_params kp;
  kp.clusters = E;
  kp.restarts = params.restarts;
  kp.max_iterations = params.max_iterations;
  kp.seed = params.seed;
  moe::ffn_params ffn;
  ffn.act = m.activation;
  checkpoint_report result;
  result.params = params;
  result.family = m.family;
  result.experts_before = 1;
  result.experts_after = E;
  // The FLOPs model per token (multiply-accumulates; activations and biases left out): the dense FFN costs
  // (2 or 3) H F; the MoEfied one top_k experts of (2 or 3) H S plus the router's H E.
  const double matrices = m.gated ? 3.0 : 2.0;
  result.dense_ffn_macs_per_token = matrices * static_cast<double>(H) * static_cast<double>(F);
  result.expert_macs_per_token = matrices * static_cast<double>(H) * static_cast<double>(S);
  result.router_macs_per_token = static_cast<double>(H) * static_cast<double>(E);
  result.moe_macs_per_token = static_cast<double>(top_k) * result.expert_macs_per_token + result.router_macs_per_token;
  result.flops_ratio = result.moe_macs_per_token / result.dense_ffn_macs_per_token;
  json prefixes = json::array();
  std::set<std::string> written;
  for (index_t i = 0; i < L; ++i) {
    const model::dense_layer_names& names = m.layers[static_cast<std::size_t>(i)];
    layer_report report;
    report.layer = dense_prefix(names);
    const step_timer timed(observer, i, L, report.layer, report);
    const auto t0 = std::chrono::steady_clock::now();
    if (stopped(observer, result)) return result;
    std::optional<model::dense_ffn_weights<float>> w;
    host_matrix<float> x(0, H);
    timed("loading", [&] {
      w.emplace(model::load_dense_ffn<float>(checkpoint, m, i));
      if (calibration != nullptr)
        x = model::read_calibration_tokens(*calibration, "layers." + std::to_string(names.layer) + ".moe_input", H);
    });
    const moe::ffn_expert_view<float> dense = w->view();
    std::vector<float> e1(static_cast<std::size_t>(F * H)), e3(m.gated ? e1.size() : 0), e2(e1.size());
    host_matrix<float> router(E, H);
    std::vector<std::int64_t> labels(static_cast<std::size_t>(F));
    std::vector<index_t> permutation(static_cast<std::size_t>(F));
    cluster::kmeans_result split;
    timed("balanced k-means", [&] {
      cluster::dense_ffn_view<float> in;
      in.w1 = dense.w1;
      in.w3 = dense.w3;
      in.w2 = dense.w2;
      cluster::expert_stack_outputs<float> out;
      out.w1 = matrix_stack_view<float>(e1.data(), E, S, H);
      if (m.gated) out.w3 = matrix_stack_view<float>(e3.data(), E, S, H);
      out.w2 = matrix_stack_view<float>(e2.data(), E, H, S);
      out.router = router.view();
      out.labels = make_vector_view(labels.data(), F);
      out.permutation = make_vector_view(permutation.data(), F);
      split = cluster::moefication_split<float>(ctx, kp, in, out);
    });
    const auto router_dtype = checkpoint.info(names.gate).dtype;
    io::round_to_storage(router.data(), static_cast<std::size_t>(router.size()), router_dtype);
    double error = 0;
    timed("error", [&] { error = moefy_error(ctx, ffn, dense, e1, e3, e2, router.const_view(), top_k, x.const_view()); });
    if (x.rows() > 0 && !std::isfinite(error)) {
      result.status = moecomp::status::numerical_error;
      result.failed_layer = report.layer;
      result.criterion = error;
      return result;
    }
    std::vector<owned_tensor> router_tensors;  // sadmoe: the trained router, rounded to the gate's dtype
    if (params.method == method::sadmoe) {
      moe::ffn_expert_stack_view<float> experts;
      experts.w1 = matrix_stack_view<const float>(e1.data(), E, S, H);
      if (m.gated) experts.w3 = matrix_stack_view<const float>(e3.data(), E, S, H);
      experts.w2 = matrix_stack_view<const float>(e2.data(), E, H, S);
      router_tensors = sadmoe_router(ctx, params, ffn, dense, experts, x.const_view(), router_dtype, report.layer, timed,
                                     report);
    }
    timed.announce("writing");
    const auto writing_started = std::chrono::steady_clock::now();
    std::vector<owned_tensor> tensors;
    {
      const io::safetensors_tensor gate = checkpoint.tensor(names.gate);
      tensors.push_back({names.gate, gate.dtype(), gate.shape(), permute_rows(gate, permutation)});
      if (m.gated) {
        const io::safetensors_tensor up = checkpoint.tensor(names.up);
        tensors.push_back({names.up, up.dtype(), up.shape(), permute_rows(up, permutation)});
      }
      const io::safetensors_tensor down = checkpoint.tensor(names.down);
      tensors.push_back({names.down, down.dtype(), down.shape(), permute_columns(down, permutation)});
      owned_tensor r{report.layer + ".moefy.router.weight", router_dtype, {E, H}, {}};
      io::append_encoded(router.data(), static_cast<std::size_t>(E * H), router_dtype, r.bytes);
      tensors.push_back(std::move(r));
      owned_tensor p{report.layer + ".moefy.permutation", io::safetensors_dtype::i32, {F}, {}};
      p.bytes.resize(static_cast<std::size_t>(F) * 4);
      for (index_t k = 0; k < F; ++k) {
        const auto v = static_cast<std::int32_t>(permutation[static_cast<std::size_t>(k)]);
        std::memcpy(p.bytes.data() + 4 * k, &v, 4);
      }
      tensors.push_back(std::move(p));
    }
    for (owned_tensor& t : router_tensors) tensors.push_back(std::move(t));
    std::vector<io::safetensors_entry> entries;
    double layer_before = 0, layer_after = 0;
    for (const std::string& n : names.tensor_names()) {
      layer_before += static_cast<double>(tensor_bytes(checkpoint, n));
      written.insert(n);
    }
    for (const owned_tensor& t : tensors) {
      entries.push_back(t.entry());
      layer_after += static_cast<double>(t.byte_size());
    }
    writer.write_shard(entries, checkpoint.metadata());
    for (const std::string& n : names.tensor_names()) checkpoint.release(n);
    report.steps_seconds.emplace_back(
        "writing", std::chrono::duration<double>(std::chrono::steady_clock::now() - writing_started).count());
    const double parameters = matrices * static_cast<double>(F) * static_cast<double>(H);
    std::vector<index_t> sizes(static_cast<std::size_t>(E), 0);
    for (std::int64_t l : labels) ++sizes[static_cast<std::size_t>(l)];
    report.experts = E;
    report.distinct_experts = E;
    report.expert_size = S;
    report.top_k = top_k;
    report.output_relative_error = error;
    report.calibration_tokens = x.rows();
    report.kmeans_inertia = split.inertia;
    report.kmeans_iterations = split.iterations;
    report.kmeans_status = split.status;
    report.kmeans_best_run = split.best_run;
    report.kmeans_assignment_gap = split.assignment_gap;
    report.smallest_expert = *std::min_element(sizes.begin(), sizes.end());
    report.largest_expert = *std::max_element(sizes.begin(), sizes.end());
    report.bytes_before = layer_before;
    report.bytes_after = layer_after;
    report.bytes_written = layer_after;
    report.bits_per_weight = 8.0 * layer_after / parameters;
    report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    prefixes.push_back(report.layer);
    result.bytes_before += layer_before;
    result.bytes_after += layer_after;
    result.parameters_before += parameters;
    result.criterion = std::max(result.criterion, std::isnan(error) ? 0.0 : error);
    result.layers.push_back(std::move(report));
    result.iterations = i + 1;
  }
  if (stopped(observer, result)) return result;
  write_other_tensors(checkpoint, written, writer, nullptr, observer, L);
  json config = json::parse(config_text);
  json record;
  record["num_experts"] = E;
  record["expert_size"] = S;
  record["top_k"] = top_k;
  record["router"] = "moefy.router.weight";
  record["permutation"] = "moefy.permutation";
  record["scores"] = "x . router row; top_k experts per token, ties to the lower index, each with weight 1";
  record["layers"] = prefixes;
  record["version"] = MOECOMP_VERSION_STRING;
  config["moecomp_moefy"] = record;
  if (params.method == method::sadmoe) {
    json sadmoe;
    sadmoe["num_experts"] = E;
    sadmoe["expert_size"] = S;
    sadmoe["router_hidden"] = params.router.hidden;
    sadmoe["router_bias"] = params.router.bias;
    sadmoe["objective"] = gating::to_string(params.router.objective);
    sadmoe["tau"] = params.tau;
    sadmoe["top_k"] = top_k;
    sadmoe["router"] = "sadmoe.router.{w1,w2}" + std::string(params.router.bias ? " and {b1,b2}" : "");
    sadmoe["scores"] = params.router.objective == gating::router_objective::output_norm
                           ? "|w2 relu(w1 x + b1) + b2|; expert i runs iff score_i >= tau max score, each with weight 1"
                           : "sigmoid(w2 relu(w1 x + b1) + b2); expert i runs iff score_i >= tau max score, weight 1";
    sadmoe["layers"] = prefixes;
    sadmoe["version"] = MOECOMP_VERSION_STRING;
    config["moecomp_sadmoe"] = sadmoe;
  }
  result.config_json = config.dump(2) + "\n";
  return result;
}

}  // namespace detail
}  // namespace compress
MOECOMP_NAMESPACE_END
