#pragma once
// The compression pipeline as a library (what `moecomp compress` runs): a Hugging Face MoE checkpoint compressed
// one MoE layer at a time with HC-SMoE, the fourth paper's CKA merge, ResMoE or expert pruning, or a dense
// checkpoint's FFNs split into experts (moefy). Needs nlohmann-json (the safetensors reader's). Host only.
// Documentation: docs/compress.md.
//
//   resolved_params(params, model, calibrated, expert_dtype)  every "auto" settled, every rule between the fields
//                                                             checked once, before any layer is loaded
//   compress_layer(ctx, params, model, weights, x, dtypes, report)
//                                                             one layer: pure, no files; the new layer and its
//                                                             output error on the tokens x in the report
//   compress_checkpoint(ctx, params, checkpoint, model, layout, config_text, calibration, writer, dense_writer,
//                       observer)                             every layer, written shard by shard to `writer`
//                                                             (io::safetensors_sharded_writer); the other tensors;
//                                                             the output's config.json text in the report
//   compress_dense_checkpoint(...)                            the same for moefy on a dense checkpoint
//   assign_layers(layer_bytes(checkpoint, model), parts)      the MoE layers spread over parts (processes) by bytes
//   compress_checkpoint_layers(..., layers, writer, ...)      some layers only, each written as its own shard
//   finish_checkpoint(..., every layer's report, writer, ...) the rest of the run, once every layer's shard is in
//                                                             the directory (the others' adopted): one checkpoint
//                                                             from several processes (docs/compress.md)
//   layer_report_json(report) / parse_layer_report(json)      a layer's report to another process and back
//   report_json(report, model, calibration, seconds, peak_rss_bytes)
//                                                             the report as compression_report.json holds it
//
// Example: the embedded model to 4 experts per layer with HC-SMoE, into an existing directory `out`:
//
//   namespace io = moecomp::io; namespace model = moecomp::model; namespace compress = moecomp::compress;
//   auto layouts = model::read_checkpoint_layouts("layouts");
//   const std::string config = model::read_text_file("models/tiny-moe/config.json");
//   io::safetensors_checkpoint checkpoint = io::open_safetensors_checkpoint("models/tiny-moe");
//   const model::moe_model m = model::describe_moe_model(layouts, config, checkpoint);
//   io::safetensors_file calibration = io::read_safetensors("models/tiny-moe/calibration.safetensors");
//   compress::compress_params p;
//   p.method = compress::method::hc_smoe;
//   p.experts = 4;
//   p = compress::resolved_params(p, m, /*calibrated=*/true, compress::expert_dtype_of(checkpoint, m));
//   io::safetensors_sharded_writer writer("out", "model");
//   const compress::checkpoint_report r = compress::compress_checkpoint(
//       moecomp::host_context{}, p, checkpoint, m, compress::layout_of(layouts, m), config, &calibration, writer,
//       nullptr, {});
//   // r.ok(): out/ holds the shards; write r.config_json as out/config.json.
//
// Determinism: the same inputs and seed give bit-identical checkpoints at any thread count (each step's own
// contract: docs of cluster, similarity, merge, ot, sparse). The float32 computation rounds every written tensor
// once to the checkpoint's dtype.
#include <moecomp/compress/compress_types.hpp>
#include <moecomp/compress/detail/compress_checkpoint.hpp>
#include <moecomp/compress/detail/compress_layer.hpp>
#include <moecomp/compress/detail/compress_params.hpp>
#include <moecomp/compress/detail/moefy.hpp>
#include <moecomp/compress/detail/report_json.hpp>
#include <moecomp/compress/detail/sadmoe_format.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace compress {

/// The dtype the checkpoint stores the model's experts in (the first MoE layer's down projection).
inline io::safetensors_dtype expert_dtype_of(const io::safetensors_checkpoint& checkpoint, const model::moe_model& m) {
  MOECOMP_EXPECTS(!m.layers.empty(), "expert_dtype_of: the model has no MoE layer");
  const model::moe_layer_names& first = m.layers.front();
  return checkpoint.info(first.fused() ? first.fused_down : first.down.front()).dtype;
}

/// The layout of `layouts` that describe_moe_model chose for `m`; invalid_argument if none is.
inline const model::checkpoint_layout& layout_of(const std::vector<model::checkpoint_layout>& layouts,
                                                 const model::moe_model& m) {
  for (const auto& l : layouts)
    if (l.source == m.layout_source) return l;
  MOECOMP_FAIL(error_kind::invalid_argument, "layout_of: no layout of the list is the model's ('", m.layout_source, "')");
}

/// The default experts per layer: half the experts, at least top-k, and for a group-limited router (DeepSeek-V2/V3
/// with n_group > 1) and a method that drops router rows, the smallest count from there up that the router can
/// route (a multiple of n_group whose topk_group kept groups hold top-k experts; V3's group score needs two a group).
inline index_t resolved_experts(method how, const model::moe_model& m) {
  return detail::default_experts(how, m);
}

/// `params` with every "auto" settled for the MoE model `m`, its calibration tokens (calibrated) and the experts'
/// dtype; invalid_argument naming the field (params.experts, params.merge, ...) for a value the method cannot
/// use: experts outside [1, E] (fewer than top-k where router rows are dropped, or a count a group-limited router
/// cannot route), a merge of the other method, a similarity or features that need calibration tokens without
/// them, keep outside (0, 1], the 2:4 format, a method that is moefy (use resolved_dense_params).
inline compress_params resolved_params(const compress_params& params, const model::moe_model& m, bool calibrated,
                                       io::safetensors_dtype expert_dtype) {
  return detail::resolve_moe_params(params, m, calibrated, expert_dtype);
}

/// moefy's and sadmoe's `params` settled for the dense model `m`: experts (0: experts of 32 neurons; else a
/// divisor of the FFN's neurons), top_k (0: max(1, E / 4)), restarts >= 1, max_iterations (0: 300); sadmoe needs
/// calibration tokens, a router of d_h >= 1 and taus in [0, 1]. invalid_argument otherwise.
inline compress_params resolved_dense_params(const compress_params& params, const model::dense_model& m,
                                             bool calibrated = false) {
  return detail::resolve_dense_params(params, m, calibrated);
}

/// The dtypes a layer's computed tensors are stored in; compress_layer rounds each to its dtype before measuring,
/// so the error is the written checkpoint's. F32 (the default) leaves values as computed.
struct storage_dtypes {
  io::safetensors_dtype experts = io::safetensors_dtype::f32;
  io::safetensors_dtype router = io::safetensors_dtype::f32;
  io::safetensors_dtype router_bias = io::safetensors_dtype::f32;
  io::safetensors_dtype correction_bias = io::safetensors_dtype::f32;
};

/// One MoE layer compressed by `params` (resolved): the new layer, rounded to `dtypes`, and in `report` its
/// method's record, the steps' times and its output error on the tokens x (T x H; 0 rows: no tokens, error NaN).
/// Pure: no files. `observer.step` hears each step (layer number 0 of 1). The weights are read through `w`, views
/// of the caller's memory (any row and matrix strides), never copied; they must be the model's shape (m's
/// num_experts, hidden_size, expert_size, gated, shared_expert_size) and finite: invalid_argument naming the
/// view otherwise. A prune result's empty w1 means the caller's stack, addressed through the slots.
inline compressed_layer compress_layer(const host_context& ctx, const compress_params& params, const model::moe_model& m,
                                       const moe_layer_weights_view& w, matrix_view<const float> x,
                                       const storage_dtypes& dtypes, layer_report& report,
                                       const compress_observer& observer = {}) {
  constexpr const char* fn = "compress_layer";
  MOECOMP_EXPECTS(!splits_dense(params.method), fn, ": params.method must be a method for MoE layers, got ",
                  to_string(params.method));
  detail::check_layer_view(fn, m, w);
  MOECOMP_EXPECTS(x.cols() == m.hidden_size, fn, ": x must have ", m.hidden_size, " columns (the hidden size), got ",
                  x.cols());
  MOECOMP_EXPECTS(params.experts >= 1 && params.experts <= m.num_experts,
                  fn, ": params must be resolved (resolved_params), got params.experts ", params.experts);
  MOECOMP_EXPECTS(!params.global, fn, ": params.global ranks the experts of every layer together: use ",
                  "compress_checkpoint (or prune_scores per layer and choose), got params.global true");
  moecomp::detail::check_finite(fn, "x", x, ctx.threads());
  const auto t0 = std::chrono::steady_clock::now();
  const detail::step_timer timed(observer, 0, 1, report.layer, report);
  compressed_layer c = detail::compress_layer_host(ctx, params, m, w, x, dtypes.experts, timed, report);
  detail::round_layer_to_storage(c, dtypes.experts, dtypes.router, dtypes.router_bias, dtypes.correction_bias);
  timed("error", [&] { report.output_relative_error = detail::layer_error(ctx, m, w, c, x); });
  report.experts = static_cast<index_t>(c.slots.size());
  report.distinct_experts = params.method == method::prune || c.resmoe ? report.experts : c.stack_experts;
  report.calibration_tokens = x.rows();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return c;
}

/// The same on a loaded layer (model::load_moe_layer's), viewed in place.
inline compressed_layer compress_layer(const host_context& ctx, const compress_params& params, const model::moe_model& m,
                                       const model::moe_layer_weights<float>& w, matrix_view<const float> x,
                                       const storage_dtypes& dtypes, layer_report& report,
                                       const compress_observer& observer = {}) {
  MOECOMP_EXPECTS(w.experts == m.num_experts && x.cols() == w.d_model, "compress_layer: the weights must be the model's ",
                  "layer (", m.num_experts, " experts) and x must have ", w.d_model, " columns, got ", w.experts, " and ",
                  x.cols());
  return compress_layer(ctx, params, m, detail::layer_view(w), x, dtypes, report, observer);
}

/// || y - y' ||_F / || y ||_F: the output of the layer `c` against the original's on x (0 rows: NaN), both through
/// moe::moe_layer_forward with the model's routing (shared experts included).
inline double layer_output_error(const host_context& ctx, const model::moe_model& m,
                                 const model::moe_layer_weights<float>& w, const compressed_layer& c,
                                 matrix_view<const float> x) {
  return detail::layer_error(ctx, m, detail::layer_view(w), c, x);
}

/// The same with the original layer given as views.
inline double layer_output_error(const host_context& ctx, const model::moe_model& m, const moe_layer_weights_view& w,
                                 const compressed_layer& c, matrix_view<const float> x) {
  detail::check_layer_view("layer_output_error", m, w);
  return detail::layer_error(ctx, m, w, c, x);
}

/// Every MoE layer of `checkpoint` (described by `m`, its layout `layout`, its config.json text) compressed by
/// `params` (resolved) and written to `writer`, one shard per layer in the input's names and dtypes (the fused
/// layout as it is read), then a shard of every other tensor unconverted; `writer` is finished. With
/// params.restore_dense (resmoe), `dense_writer` receives an ordinary checkpoint of the restored experts.
/// calibration: the file with each layer's `layers.{i}.moe_input` (null: none). One layer is in memory at a time.
/// The report: each layer's, the totals, and the output's config.json text. A layer whose output error is not
/// finite stops the run (status numerical_error); the observer's stop, too (cancelled). Then the writer is not
/// finished and removes its shards when destroyed. io_error for a layer's bad tensor or calibration (the loader's
/// and read_calibration_tokens' checks).
inline checkpoint_report compress_checkpoint(const host_context& ctx, const compress_params& params,
                                             const io::safetensors_checkpoint& checkpoint, const model::moe_model& m,
                                             const model::checkpoint_layout& layout, const std::string& config_text,
                                             const io::safetensors_file* calibration, io::safetensors_sharded_writer& writer,
                                             io::safetensors_sharded_writer* dense_writer = nullptr,
                                             const compress_observer& observer = {}) {
  detail::check_checkpoint_call("compress_checkpoint", params, checkpoint, m, dense_writer != nullptr);
  return detail::compress_checkpoint_host(ctx, params, checkpoint, m, layout, config_text, calibration, writer,
                                          params.restore_dense ? dense_writer : nullptr, observer);
}

/// Each MoE layer's bytes in `checkpoint`: the sizes of the tensors its compression reads (router, experts, shared
/// expert), in layer order. What assign_layers balances.
inline std::vector<std::uint64_t> layer_bytes(const io::safetensors_checkpoint& checkpoint, const model::moe_model& m) {
  std::vector<std::uint64_t> bytes;
  bytes.reserve(m.layers.size());
  for (const model::moe_layer_names& names : m.layers) {
    std::uint64_t b = 0;
    for (const std::string& n : names.tensor_names()) b += detail::tensor_bytes(checkpoint, n);
    bytes.push_back(b);
  }
  return bytes;
}

/// The layers 0 .. n - 1 (n = bytes.size()) spread over `parts` processes, balanced by bytes: the largest layer
/// first (ties: the lower index) to the part with the fewest bytes so far (ties: the lower part); each part's
/// layers ascending. Deterministic; a part gets no layer when parts > n. O(n log n + n parts).
inline std::vector<std::vector<index_t>> assign_layers(const std::vector<std::uint64_t>& bytes, index_t parts) {
  MOECOMP_EXPECTS(parts >= 1, "assign_layers: parts must be >= 1, got ", parts);
  return detail::assign_layers(bytes, parts);
}

/// Part of a compress_checkpoint run, for one of several processes (docs/compress.md, "One checkpoint from
/// several processes"): the MoE layers `layers` (distinct indices into m.layers, ascending) compressed as
/// compress_checkpoint compresses them, layer i written as shard i of `writer` (and of `dense_writer` with
/// params.restore_dense); the other tensors, config.json and the writer's finish are left to finish_checkpoint.
/// The report holds those layers (in the order given) and their totals; a layer's numerical failure or the
/// observer's stop ends the part as compress_checkpoint's run ends. With params.global each part computes every
/// layer's scores (the allocation spans the layers). The same checks as compress_checkpoint.
inline checkpoint_report compress_checkpoint_layers(const host_context& ctx, const compress_params& params,
                                                    const io::safetensors_checkpoint& checkpoint, const model::moe_model& m,
                                                    const io::safetensors_file* calibration,
                                                    const std::vector<index_t>& layers,
                                                    io::safetensors_sharded_writer& writer,
                                                    io::safetensors_sharded_writer* dense_writer = nullptr,
                                                    const compress_observer& observer = {}) {
  constexpr const char* fn = "compress_checkpoint_layers";
  detail::check_checkpoint_call(fn, params, checkpoint, m, dense_writer != nullptr);
  const index_t L = static_cast<index_t>(m.layers.size());
  for (std::size_t k = 0; k < layers.size(); ++k)
    MOECOMP_EXPECTS(layers[k] >= 0 && layers[k] < L && (k == 0 || layers[k] > layers[k - 1]), fn,
                    ": layers must be ascending distinct layer indices in [0, ", L, "), got ", layers[k], " at position ", k);
  return detail::compress_layers_host(ctx, params, checkpoint, m, calibration, layers, writer,
                                      params.restore_dense ? dense_writer : nullptr, observer);
}

/// The end of a run whose layers were compressed by compress_checkpoint_layers, here or in other processes: every
/// layer's shard that `writer` (and `dense_writer`) does not hold is adopted from the writer's directory (where
/// the other processes wrote and released them), the other tensors are written as shard L, the writers are
/// finished, and the report gets the totals and config.json's text as compress_checkpoint's. `layers`: every
/// layer's report, in layer order (parse_layer_report brings them from other processes). The checkpoint is the
/// same bytes as one compress_checkpoint call writes. io_error when a layer's shard is missing from the directory.
inline checkpoint_report finish_checkpoint(const host_context& ctx, const compress_params& params,
                                           const io::safetensors_checkpoint& checkpoint, const model::moe_model& m,
                                           const model::checkpoint_layout& layout, const std::string& config_text,
                                           std::vector<layer_report> layers, io::safetensors_sharded_writer& writer,
                                           io::safetensors_sharded_writer* dense_writer = nullptr,
                                           const compress_observer& observer = {}) {
  constexpr const char* fn = "finish_checkpoint";
  detail::check_checkpoint_call(fn, params, checkpoint, m, dense_writer != nullptr);
  MOECOMP_EXPECTS(layers.size() == m.layers.size(), fn, ": layers must hold every MoE layer's report (",
                  m.layers.size(), "), got ", layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i)
    MOECOMP_EXPECTS(layers[i].layer == detail::layer_prefix(m.layers[i]), fn, ": layers[", i, "] must be layer '",
                    detail::layer_prefix(m.layers[i]), "', got '", layers[i].layer, "'");
  return detail::finish_checkpoint_host(ctx, params, checkpoint, m, layout, config_text, std::move(layers), writer,
                                        params.restore_dense ? dense_writer : nullptr, observer);
}

/// A layer's report as JSON for another process (every field, lossless: non-finite numbers as "nan", "inf",
/// "-inf"), and back. parse_layer_report throws io_error naming the field for a record of another shape.
inline nlohmann::ordered_json layer_report_json(const layer_report& report) { return detail::layer_report_json(report); }
inline layer_report parse_layer_report(const nlohmann::ordered_json& record) { return detail::parse_layer_report(record); }

/// moefy and sadmoe: every dense FFN of `checkpoint` split into params.experts equal experts (params resolved by
/// resolved_dense_params), written as the same architecture with each FFN's neurons permuted so that expert e is
/// neurons [e s, (e + 1) s) (a lossless rewrite), plus per layer the MoEfication router
/// (`PREFIX.moefy.router.weight`, E x H, in the gate's dtype) and the permutation (`PREFIX.moefy.permutation`,
/// I32). The report gives each FFN's top-k output error on the calibration tokens and the FLOPs model. sadmoe
/// adds per FFN the router trained on the calibration tokens (`PREFIX.sadmoe.router.w1` d_h x H, `.w2` E x d_h,
/// `.b1` and `.b2` with params.router.bias, in the gate's dtype; config.json's `moecomp_sadmoe` says how to route)
/// and, on the held-out tokens, dynamic-k at each of params.taus and top-k with it (mean experts, FLOPs ratio of
/// SADMoE's Appendix B, output error against the dense FFN).
inline checkpoint_report compress_dense_checkpoint(const host_context& ctx, const compress_params& params,
                                                   const io::safetensors_checkpoint& checkpoint, const model::dense_model& m,
                                                   const std::string& config_text, const io::safetensors_file* calibration,
                                                   io::safetensors_sharded_writer& writer,
                                                   const compress_observer& observer = {}) {
  MOECOMP_EXPECTS(splits_dense(params.method), "compress_dense_checkpoint: params.method must be moefy or sadmoe, got ",
                  to_string(params.method));
  MOECOMP_EXPECTS(params.experts >= 1 && m.ffn_size % params.experts == 0 && params.top_k >= 1 &&
                      params.top_k <= params.experts,
                  "compress_dense_checkpoint: params must be resolved (resolved_dense_params)");
  for (const model::dense_layer_names& n : m.layers)
    for (const std::string& name : n.tensor_names()) detail::require_float_dtype(checkpoint.info(name).dtype, name);
  return detail::compress_dense_checkpoint_host(ctx, params, checkpoint, m, config_text, calibration, writer, observer);
}

/// A checkpoint that compress --method sadmoe wrote, read back: config.json's `moecomp_sadmoe` record (experts,
/// expert size, the router's d_h, biases, objective, tau) and every FFN's router tensors checked against the dense
/// model `m` (`PREFIX.sadmoe.router.w1` d_h x H, `.w2` E x d_h, and `.b1`, `.b2` with biases). io_error naming the
/// field or the tensor, its expected and its actual shape otherwise.
inline sadmoe_description describe_sadmoe(const std::string& config_text, const io::safetensors_checkpoint& checkpoint,
                                          const model::dense_model& m) {
  return detail::describe_sadmoe_host(config_text, checkpoint, m);
}

/// The report as `compression_report.json` holds it (and `moecomp compress --json` prints it): moecomp's version,
/// the method, `model` (the input's path as given), the family, the expert counts, the options as resolved (with
/// `calibration`, its path or null), every layer's record and the totals (with the caller's `seconds` and
/// `peak_rss_bytes`). Non-finite numbers (a merge error not measured) are null.
inline nlohmann::ordered_json report_json(const checkpoint_report& report, const std::string& model,
                                          const std::string& calibration, double seconds, double peak_rss_bytes) {
  return detail::report_json(report, model, calibration, seconds, peak_rss_bytes);
}

}  // namespace compress
MOECOMP_NAMESPACE_END
