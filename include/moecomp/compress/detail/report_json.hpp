#pragma once
// The compression report as JSON (compress::report_json): compression_report.json's layout.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/compress/compress_types.hpp>
#include <moecomp/version.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace compress {
namespace detail {

inline nlohmann::ordered_json number_or_null(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

inline nlohmann::ordered_json layer_json(const layer_report& l, method how) {
  using json = nlohmann::ordered_json;
  json record;
  record["layer"] = l.layer;
  if (splits_dense(how)) {
    record["experts"] = l.experts;
    record["expert_size"] = l.expert_size;
    record["top_k"] = l.top_k;
    record["output_relative_error"] = number_or_null(l.output_relative_error);
    record["calibration_tokens"] = l.calibration_tokens;
    json kmeans;
    kmeans["inertia"] = l.kmeans_inertia;
    kmeans["iterations"] = l.kmeans_iterations;
    kmeans["status"] = to_string(l.kmeans_status);
    kmeans["best_run"] = l.kmeans_best_run;
    kmeans["assignment_gap"] = l.kmeans_assignment_gap;
    kmeans["smallest_expert"] = l.smallest_expert;
    kmeans["largest_expert"] = l.largest_expert;
    record["balanced_kmeans"] = kmeans;
    if (how == method::sadmoe) {
      json router;
      router["steps"] = l.router_steps;
      router["validation_mse"] = number_or_null(l.router_validation_mse);
      router["top1_agreement"] = number_or_null(l.router_top1_agreement);
      router["train_loss"] = l.router_train_loss;
      json vl = json::array();
      for (double v : l.router_validation_loss) vl.push_back(number_or_null(v));
      router["validation_loss"] = vl;
      router["top_k_output_relative_error"] = number_or_null(l.router_top_k_error);
      router["top_k_flops_ratio"] = l.router_top_k_flops_ratio;
      record["router"] = router;
      json points = json::array();
      for (const auto& d : l.dynamic_k)
        points.push_back({{"tau", d.tau},
                          {"mean_experts", d.mean_experts},
                          {"flops_ratio", d.flops_ratio},
                          {"output_relative_error", number_or_null(d.output_relative_error)}});
      record["dynamic_k"] = points;
    }
    record["bytes_before"] = l.bytes_before;
    record["bytes_after"] = l.bytes_after;
  } else {
    record["experts"] = l.experts;
    record["distinct_experts"] = l.distinct_experts;
    if (how == method::hc_smoe || how == method::cka_merge || how == method::m_smoe) {
      json groups = json::array();
      std::int64_t g = 0;
      for (std::int64_t label : l.groups) g = std::max<std::int64_t>(g, label + 1);
      for (std::int64_t k = 0; k < g; ++k) {
        json members = json::array();
        for (std::size_t e = 0; e < l.groups.size(); ++e)
          if (l.groups[e] == k) members.push_back(e);
        groups.push_back(members);
      }
      record["groups"] = groups;
      record["dominants"] = l.dominants;
      record["coefficients"] = l.coefficients;
      json errors = json::array();
      for (double e : l.group_merge_errors) errors.push_back(number_or_null(e));
      record["group_merge_errors"] = errors;
      record["router"] = l.router_rule;
      if (!l.id_map.empty()) record["id_map"] = l.id_map;
      if (how == method::m_smoe) record["frequencies"] = l.frequencies;
      if (how == method::cka_merge && (l.similarity_tokens > 0 || l.augmented_tokens > 0)) {
        record["similarity_tokens"] = l.similarity_tokens;
        record["augmented_tokens"] = l.augmented_tokens;
      }
    } else if (how == method::prune) {
      record["criterion"] = l.criterion;
      record["scores"] = l.scores;
      record["kept"] = l.kept;
    } else {
      record["keep"] = l.keep;
      record["values"] = l.values;
      record["formats"] = l.formats;
      record["residual_bytes"] = l.residual_bytes;
      record["barycenter"] = {{"iterations", l.barycenter_iterations},
                              {"status", to_string(l.barycenter_status)},
                              {"objective", l.barycenter_objective}};
      record["resmoe_approximation_error"] = l.resmoe_approximation_error;
    }
    record["output_relative_error"] = number_or_null(l.output_relative_error);
    record["calibration_tokens"] = l.calibration_tokens;
    record["bytes_before"] = l.bytes_before;
    record["bytes_after"] = l.bytes_after;
    record["bytes_written"] = l.bytes_written;
    if (l.stored_experts > 0) record["stored_experts"] = l.stored_experts;  // expert storage (issue 34): as written
    if (!l.expert_map_tensor.empty()) record["expert_map_tensor"] = l.expert_map_tensor;
  }
  record["bits_per_weight"] = l.bits_per_weight;
  json steps = json::object();
  for (const auto& [step, seconds] : l.steps_seconds) steps[step] = seconds;
  record["steps_seconds"] = steps;
  record["seconds"] = l.seconds;
  return record;
}

inline nlohmann::ordered_json report_json(const checkpoint_report& r, const std::string& model,
                                          const std::string& calibration, double seconds, double peak_rss_bytes) {
  using json = nlohmann::ordered_json;
  const compress_params& p = r.params;
  json report;
  report["moecomp_version"] = MOECOMP_VERSION_STRING;
  report["method"] = to_string(p.method);
  report["model"] = model;
  report["family"] = r.family;
  report["experts_before"] = r.experts_before;
  report["experts_after"] = r.experts_after;
  json options = json::object();
  if (splits_dense(p.method)) {
    options["experts"] = p.experts;
    options["expert_size"] = r.experts_after > 0 && !r.layers.empty() ? r.layers.front().expert_size : 0;
    options["top_k"] = p.top_k;
    options["n_init"] = p.restarts;
    options["max_iter"] = p.max_iterations;
    if (p.method == method::sadmoe) {
      options["router_hidden"] = p.router.hidden;
      options["router_bias"] = p.router.bias;
      options["router_objective"] = gating::to_string(p.router.objective);
      options["router_lr"] = p.router.learning_rate;
      options["router_epochs"] = p.router.epochs;
      options["router_steps"] = p.router.steps;
      options["router_batch_size"] = p.router.batch_size;
      options["tau"] = p.tau;
      options["taus"] = p.taus;
    }
  } else if (p.method == method::hc_smoe) {
    options["features"] = to_string(p.features);
    options["linkage"] = cluster::to_string(p.linkage);
    options["merge"] = merge::to_string(*p.merge);
    options["expert_storage"] = to_string(p.expert_storage);
  } else if (p.method == method::cka_merge) {
    options["similarity"] = to_string(p.similarity);
    options["merge"] = merge::to_string(*p.merge);
    options["similarity_tokens"] = p.similarity_tokens;
    options["augment"] = p.augment;
    options["router"] = merge::to_string(p.merge_router);
  } else if (p.method == method::m_smoe) {
    options["merge"] = merge::to_string(*p.merge);
    options["align"] = "weights (inner product)";
    options["router"] = "map";
  } else if (p.method == method::resmoe) {
    options["keep"] = p.keep;
    options["center"] = to_string(p.center);  // resmoe's ablations
    options["residual"] = to_string(p.residual);
    options["rank"] = p.rank;
    options["format"] = sparse::to_string(p.format);
    options["values"] = sparse::to_string(*p.values);
    options["max_iter"] = p.max_iterations;
    options["restore_dense"] = p.restore_dense;
  } else {
    options["criterion"] = to_string(p.criterion);
  }
  options["seed"] = p.seed;
  options["matmul"] = to_string(r.matmul);  // products with bf16 weights: exact, or bf16 dot products (--matmul)
  options["calibration"] = calibration.empty() ? json(nullptr) : json(calibration);
  report["options"] = options;
  if (!r.expert_storage.empty()) report["expert_storage"] = r.expert_storage;  // the form written (issue 34)
  if (splits_dense(p.method)) {
    json flops;
    flops["dense_ffn_macs_per_token"] = r.dense_ffn_macs_per_token;
    flops["expert_macs_per_token"] = r.expert_macs_per_token;
    flops["router_macs_per_token"] = r.router_macs_per_token;
    flops["moe_macs_per_token"] = r.moe_macs_per_token;
    flops["ratio"] = r.flops_ratio;
    report["flops"] = flops;
  }
  json layers = json::array();
  for (const layer_report& l : r.layers) layers.push_back(layer_json(l, p.method));
  report["layers"] = layers;
  json totals;
  totals["bytes_before"] = r.bytes_before;
  totals["bytes_after"] = r.bytes_after;
  if (!splits_dense(p.method)) totals["bytes_written"] = r.bytes_written;  // the MoE layers' tensors as on disk
  totals["bits_per_weight"] = r.parameters_before > 0 ? 8.0 * r.bytes_after / r.parameters_before : 0.0;
  totals["seconds"] = seconds;
  totals["peak_rss_bytes"] = peak_rss_bytes;
  report["totals"] = totals;
  return report;
}

/// A double for layer_report_json: the number, or "nan" / "inf" / "-inf" (JSON has no such numbers).
inline nlohmann::ordered_json exact_number(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

/// A field of a layer_report_json record; io_error naming it when it is missing or of another type.
class layer_record_reader {
 public:
  explicit layer_record_reader(const nlohmann::ordered_json& record) : record_(record) {
    if (!record.is_object()) fail("the record", "an object");
  }
  const nlohmann::ordered_json& at(const char* field, nlohmann::ordered_json::value_t type) const {
    const auto found = record_.find(field);
    if (found == record_.end()) fail(field, "present");
    const bool numbers = type == nlohmann::ordered_json::value_t::number_integer;
    if (numbers ? !found->is_number_integer() : found->type() != type) fail(field, type_name(type));
    return *found;
  }
  double number(const char* field) const { return number_of(field, record_.contains(field) ? record_.at(field) : nullptr); }
  double number_of(const char* field, const nlohmann::ordered_json& v) const {
    if (v.is_number()) return v.get<double>();
    if (v.is_string()) {
      const std::string text = v.get<std::string>();
      if (text == "nan") return std::numeric_limits<double>::quiet_NaN();
      if (text == "inf") return std::numeric_limits<double>::infinity();
      if (text == "-inf") return -std::numeric_limits<double>::infinity();
    }
    fail(field, "a number, \"nan\", \"inf\" or \"-inf\"");
  }
  std::int64_t integer(const char* field) const { return at(field, nlohmann::ordered_json::value_t::number_integer).get<std::int64_t>(); }
  std::string text(const char* field) const { return at(field, nlohmann::ordered_json::value_t::string).get<std::string>(); }
  std::vector<double> numbers(const char* field) const {
    std::vector<double> out;
    for (const auto& v : at(field, nlohmann::ordered_json::value_t::array)) out.push_back(number_of(field, v));
    return out;
  }
  template <class I>
  std::vector<I> integers(const char* field) const {
    std::vector<I> out;
    for (const auto& v : at(field, nlohmann::ordered_json::value_t::array)) {
      if (!v.is_number_integer()) fail(field, "an array of integers");
      out.push_back(v.get<I>());
    }
    return out;
  }
  [[noreturn]] static void fail(const std::string& field, const std::string& expected) {
    MOECOMP_FAIL(error_kind::io_error, "parse_layer_report: ", field, " must be ", expected);
  }

 private:
  static const char* type_name(nlohmann::ordered_json::value_t t) {
    switch (t) {
      case nlohmann::ordered_json::value_t::string: return "a string";
      case nlohmann::ordered_json::value_t::array: return "an array";
      case nlohmann::ordered_json::value_t::object: return "an object";
      default: return "an integer";
    }
  }
  const nlohmann::ordered_json& record_;
};

inline nlohmann::ordered_json layer_report_json(const layer_report& l) {
  using json = nlohmann::ordered_json;
  const auto numbers = [](const std::vector<double>& v) {
    json a = json::array();
    for (double x : v) a.push_back(exact_number(x));
    return a;
  };
  json r;
  r["layer"] = l.layer;
  r["experts"] = l.experts;
  r["distinct_experts"] = l.distinct_experts;
  r["groups"] = l.groups;
  r["dominants"] = l.dominants;
  r["coefficients"] = numbers(l.coefficients);
  r["group_merge_errors"] = numbers(l.group_merge_errors);
  r["router_rule"] = l.router_rule;
  r["id_map"] = l.id_map;
  r["frequencies"] = numbers(l.frequencies);
  r["similarity_tokens"] = l.similarity_tokens;
  r["augmented_tokens"] = l.augmented_tokens;
  r["criterion"] = l.criterion;
  r["scores"] = numbers(l.scores);
  r["kept"] = l.kept;
  r["keep"] = exact_number(l.keep);
  r["values"] = l.values;
  r["formats"] = l.formats;
  r["residual_bytes"] = l.residual_bytes;
  r["barycenter_iterations"] = l.barycenter_iterations;
  r["barycenter_status"] = static_cast<int>(l.barycenter_status);
  r["barycenter_objective"] = exact_number(l.barycenter_objective);
  r["resmoe_approximation_error"] = exact_number(l.resmoe_approximation_error);
  r["center"] = l.center;
  r["residual"] = l.residual;
  r["rank"] = l.rank;
  r["output_relative_error"] = exact_number(l.output_relative_error);
  r["calibration_tokens"] = l.calibration_tokens;
  r["bytes_before"] = exact_number(l.bytes_before);
  r["bytes_after"] = exact_number(l.bytes_after);
  r["bytes_written"] = exact_number(l.bytes_written);
  r["bits_per_weight"] = exact_number(l.bits_per_weight);
  json steps = json::array();
  for (const auto& [step, seconds] : l.steps_seconds) steps.push_back(json::array({step, exact_number(seconds)}));
  r["steps_seconds"] = steps;
  r["stored_experts"] = l.stored_experts;
  r["expert_map_tensor"] = l.expert_map_tensor;
  r["seconds"] = exact_number(l.seconds);
  return r;
}

inline layer_report parse_layer_report(const nlohmann::ordered_json& record) {
  using json = nlohmann::ordered_json;
  const layer_record_reader f(record);
  layer_report l;
  l.layer = f.text("layer");
  l.experts = f.integer("experts");
  l.distinct_experts = f.integer("distinct_experts");
  l.groups = f.integers<std::int64_t>("groups");
  l.dominants = f.integers<std::int64_t>("dominants");
  l.coefficients = f.numbers("coefficients");
  l.group_merge_errors = f.numbers("group_merge_errors");
  l.router_rule = f.text("router_rule");
  l.id_map = f.integers<std::int64_t>("id_map");
  l.frequencies = f.numbers("frequencies");
  l.similarity_tokens = f.integer("similarity_tokens");
  l.augmented_tokens = f.integer("augmented_tokens");
  l.criterion = f.text("criterion");
  l.scores = f.numbers("scores");
  l.kept = f.integers<std::int64_t>("kept");
  l.keep = f.number("keep");
  l.values = f.text("values");
  for (const json& expert : f.at("formats", json::value_t::array)) {
    std::vector<std::string> formats;
    if (!expert.is_array()) layer_record_reader::fail("formats", "an array of arrays of strings");
    for (const json& v : expert) {
      if (!v.is_string()) layer_record_reader::fail("formats", "an array of arrays of strings");
      formats.push_back(v.get<std::string>());
    }
    l.formats.push_back(std::move(formats));
  }
  l.residual_bytes = f.integers<std::uint64_t>("residual_bytes");
  l.barycenter_iterations = f.integer("barycenter_iterations");
  const std::int64_t status_code = f.integer("barycenter_status");
  if (status_code < 0 || status_code > static_cast<std::int64_t>(moecomp::status::numerical_error))
    layer_record_reader::fail("barycenter_status", "a status code");
  l.barycenter_status = static_cast<moecomp::status>(status_code);
  l.barycenter_objective = f.number("barycenter_objective");
  l.resmoe_approximation_error = f.number("resmoe_approximation_error");
  l.center = f.text("center");
  l.residual = f.text("residual");
  l.rank = f.integer("rank");
  l.output_relative_error = f.number("output_relative_error");
  l.calibration_tokens = f.integer("calibration_tokens");
  l.bytes_before = f.number("bytes_before");
  l.bytes_after = f.number("bytes_after");
  l.bytes_written = f.number("bytes_written");
  l.bits_per_weight = f.number("bits_per_weight");
  for (const json& step : f.at("steps_seconds", json::value_t::array)) {
    if (!step.is_array() || step.size() != 2 || !step[0].is_string())
      layer_record_reader::fail("steps_seconds", "an array of [step, seconds] pairs");
    l.steps_seconds.emplace_back(step[0].get<std::string>(), f.number_of("steps_seconds", step[1]));
  }
  l.stored_experts = f.integer("stored_experts");
  l.expert_map_tensor = f.text("expert_map_tensor");
  l.seconds = f.number("seconds");
  return l;
}

}  // namespace detail
}  // namespace compress
MOECOMP_NAMESPACE_END
