#pragma once
// Checkpoint layouts: from a Hugging Face checkpoint's config.json and tensor names to moecomp's MoE layers,
// with the mapping kept as data (layouts/*.json, one file per family) rather than code. Needs nlohmann-json
// (link moecomp::safetensors). Documentation: docs/compress.md, "Checkpoint layouts".
//
//   auto layouts = model::read_checkpoint_layouts("layouts");              // every *.json
//   io::safetensors_checkpoint c = io::open_safetensors_checkpoint(dir);
//   model::moe_model m = model::describe_moe_model(layouts, read_text(dir + "/config.json"), c);
//   model::moe_layer_weights<float> w = model::load_moe_layer<float>(c, m, 0);  // one layer, converted
//   moe::ffn_expert_stack_view<float> experts = w.experts();                     // E x I x H stacks
//
// describe_moe_model picks the layout by config.json's model_type and, among the layouts of that type, the
// first whose tensors the checkpoint has. It checks every MoE layer's names and shapes against the config,
// reading headers only. An unknown model_type, a checkpoint that no layout of its type fits, a config that
// lacks a key the layout needs, and a tensor of the wrong shape are io_errors naming what is missing.
//
// Dense families (a layout with "dense_ffn": Mistral, Llama, Qwen2) are what the MoEfication split reads:
// describe_dense_model and load_dense_ffn do for their FFNs what the two above do for MoE layers.
#include <moecomp/core/error.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/core/detail/input_file.hpp>
#include <moecomp/core/detail/little_endian.hpp>
#include <moecomp/gating/routing_types.hpp>
#include <moecomp/io/safetensors.hpp>
#include <moecomp/model/layout_types.hpp>
#include <moecomp/moe/ffn_types.hpp>
#include <moecomp/model/detail/layout_parse.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace model {

/// Parses one layout file's text; `source` names it in messages. io_error for anything malformed (unknown
/// keys and fields included, so that a typo is not silently ignored).
inline checkpoint_layout parse_checkpoint_layout(const std::string& text, const std::string& source = "<memory>") {
  return detail::parse_layout(text, source);
}

/// The whole text of a regular file of at most `limit` bytes (config.json, layout files): io_error naming
/// the path when it cannot be opened or read, when it is not a regular file (a FIFO, a device or a
/// directory is refused before anything is read) and when it is larger than `limit`.
inline std::string read_text_file(const std::string& path, std::uint64_t limit = io::text_file_limit) {
  moecomp::detail::input_file file(path, "read_text_file", limit);
  return file.read_all<std::string>();
}

/// Every *.json of `directory`, parsed, in file-name order. io_error when the directory has none.
inline std::vector<checkpoint_layout> read_checkpoint_layouts(const std::string& directory) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(directory, ec))
    MOECOMP_FAIL(error_kind::io_error, "read_checkpoint_layouts: '", directory, "' is not a directory");
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(directory, ec))
    if (entry.path().extension() == ".json") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  if (files.empty()) MOECOMP_FAIL(error_kind::io_error, "read_checkpoint_layouts: '", directory, "' has no *.json layout");
  std::vector<checkpoint_layout> layouts;
  for (const std::string& f : files) layouts.push_back(parse_checkpoint_layout(read_text_file(f), f));
  return layouts;
}

/// moecomp's activation for a config's hidden_act (Hugging Face's ACT2FN names): silu/swish, gelu,
/// gelu_new/gelu_pytorch_tanh/gelu_fast (tanh approximations), relu; nullopt for any other.
inline std::optional<moe::activation> activation_from_config(const std::string& name) {
  if (name == "silu" || name == "swish") return moe::activation::silu;
  if (name == "gelu") return moe::activation::gelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast" || name == "gelu_tanh")
    return moe::activation::gelu_tanh;
  if (name == "relu") return moe::activation::relu;
  return std::nullopt;
}

namespace detail {

/// Reads a layout's fields from a config: the mapped key, else the layout's default.
class config_reader {
 public:
  /// `function` names the caller in messages.
  config_reader(const nlohmann::json& config, const checkpoint_layout& layout, const std::string& source,
                const char* function = "describe_moe_model")
      : config_(config), layout_(layout), source_(source), function_(function) {}

  std::optional<nlohmann::json> field(const char* name) const {
    const auto key = layout_.config.find(name);
    if (key != layout_.config.end()) {
      const auto it = config_.find(key->second);
      if (it != config_.end() && !it->is_null()) return *it;
    }
    const auto fallback = layout_.defaults.find(name);
    if (fallback != layout_.defaults.end()) return nlohmann::json::parse(fallback->second, nullptr, false);
    return std::nullopt;
  }
  [[noreturn]] void lacks(const char* name) const {
    const auto key = layout_.config.find(name);
    if (key == layout_.config.end())
      MOECOMP_FAIL(error_kind::io_error, function_, ": the ", layout_.family, " layout ('", layout_.source,
                   "') maps no config key to ", name, " and gives no default");
    MOECOMP_FAIL(error_kind::io_error, function_, ": config '", source_, "' lacks \"", key->second, "\" (the ",
                 layout_.family, " layout's ", name, ")");
  }
  index_t integer(const char* name, std::optional<index_t> otherwise = std::nullopt) const {
    const auto value = field(name);
    if (!value) {
      if (otherwise) return *otherwise;
      lacks(name);
    }
    return checked_integer(*value, describe(name));
  }
  bool boolean(const char* name) const {
    const auto value = field(name);
    if (!value) lacks(name);
    if (!value->is_boolean()) MOECOMP_FAIL(error_kind::io_error, function_, ": ", describe(name), " must be true or false");
    return value->get<bool>();
  }
  std::string text(const char* name) const {
    const auto value = field(name);
    if (!value) lacks(name);
    if (!value->is_string()) MOECOMP_FAIL(error_kind::io_error, function_, ": ", describe(name), " must be a string");
    return value->get<std::string>();
  }
  double number(const char* name) const {
    const auto value = field(name);
    if (!value) lacks(name);
    if (!value->is_number()) MOECOMP_FAIL(error_kind::io_error, function_, ": ", describe(name), " must be a number");
    return value->get<double>();
  }
  /// A config key read directly (the sparse-layer rules' keys).
  index_t config_integer(const std::string& key, index_t otherwise) const {
    const auto it = config_.find(key);
    if (key.empty() || it == config_.end() || it->is_null()) return otherwise;
    return checked_integer(*it, "config '" + source_ + "' key \"" + key + "\"");
  }
  std::vector<index_t> config_list(const std::string& key) const {
    std::vector<index_t> values;
    const auto it = config_.find(key);
    if (key.empty() || it == config_.end() || it->is_null()) return values;
    if (!it->is_array()) MOECOMP_FAIL(error_kind::io_error, function_, ": config '", source_, "' key \"", key, "\" must be a list");
    for (const auto& v : *it) values.push_back(checked_integer(v, "config '" + source_ + "' key \"" + key + "\""));
    return values;
  }

 private:
  std::string describe(const char* name) const {
    const auto key = layout_.config.find(name);
    return key == layout_.config.end() ? std::string("the default of ") + name
                                       : "config '" + source_ + "' key \"" + key->second + "\"";
  }
  index_t checked_integer(const nlohmann::json& value, const std::string& what) const {
    if (!value.is_number_integer() || (value.is_number_integer() && !value.is_number_unsigned() && value.get<std::int64_t>() < 0))
      MOECOMP_FAIL(error_kind::io_error, function_, ": ", what, " must be a non-negative integer, got ", value.dump());
    const auto v = value.get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(std::numeric_limits<index_t>::max()))
      MOECOMP_FAIL(error_kind::io_error, function_, ": ", what, " is too large: ", v);
    return static_cast<index_t>(v);
  }

  const nlohmann::json& config_;
  const checkpoint_layout& layout_;
  const std::string& source_;
  const char* function_;
};

/// config.json's "model_type" (the key that picks the layout); io_error naming `function` without it.
inline std::string config_model_type(const nlohmann::json& config, const char* function, const std::string& source) {
  const auto type = config.find("model_type");
  if (type == config.end() || !type->is_string())
    MOECOMP_FAIL(error_kind::io_error, function, ": config '", source,
                 "' lacks the string \"model_type\" that picks the checkpoint layout");
  return type->get<std::string>();
}

/// "a, b, c": the distinct strings of `items`, sorted.
inline std::string sorted_list(std::vector<std::string> items) {
  std::sort(items.begin(), items.end());
  items.erase(std::unique(items.begin(), items.end()), items.end());
  std::string list;
  for (const std::string& k : items) list += (list.empty() ? "" : ", ") + k;
  return list;
}

inline std::string shape_text(const std::vector<index_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

/// The shape of `name`, required to be `want`; -1 in `want` matches any extent.
inline void expect_shape(const io::safetensors_checkpoint& c, const std::string& name, const std::vector<index_t>& want,
                         const char* what) {
  const auto& got = c.info(name).shape;
  bool match = got.size() == want.size();
  for (std::size_t i = 0; match && i < got.size(); ++i) match = want[i] < 0 || got[i] == want[i];
  if (!match)
    MOECOMP_FAIL(error_kind::io_error, "describe_moe_model: tensor '", name, "' (", what, ") must have the shape ",
                 shape_text(want), ", got ", shape_text(got));
}

/// The id-map tensor of moecomp's distinct expert storage: beside the router's tensor, its last dotted component
/// replaced by `expert_map` ("model.layers.3.block_sparse_moe.gate.weight" -> "...gate.expert_map").
inline std::string expert_map_name(const std::string& router) {
  const std::size_t dot = router.rfind('.');
  return (dot == std::string::npos ? router + "." : router.substr(0, dot + 1)) + "expert_map";
}

/// The layout's names for one layer; the first name the checkpoint lacks goes to `missing`.
inline moe_layer_names layer_names(const checkpoint_layout& layout, const layout_stack& stack, index_t layer,
                                   index_t experts) {
  const std::string prefix = substitute(stack.prefix, "layer", layer);
  auto full = [&prefix](const std::string& relative) { return relative.empty() ? std::string() : prefix + relative; };
  moe_layer_names n;
  n.stack = stack.name;
  n.layer = layer;
  n.router = full(layout.router_weight);
  n.router_bias = full(layout.router_bias);
  n.correction_bias = full(layout.router_correction_bias);
  if (layout.fused()) {
    n.gate_up = full(layout.expert_gate_up);
    n.fused_down = full(layout.expert_down);
  } else {
    for (index_t e = 0; e < experts; ++e) {
      n.gate.push_back(full(substitute(layout.expert_gate, "expert", e)));
      if (!layout.expert_up.empty()) n.up.push_back(full(substitute(layout.expert_up, "expert", e)));
      n.down.push_back(full(substitute(layout.expert_down, "expert", e)));
    }
  }
  n.shared_gate = full(layout.shared_gate);
  n.shared_up = full(layout.shared_up);
  n.shared_down = full(layout.shared_down);
  n.shared_gate_weight = full(layout.shared_gate_weight);
  return n;
}

/// moecomp's distinct expert storage: the stored experts of a layer whose id-map tensor `map` the checkpoint
/// has (its names rebuilt for them); io_error when the map is not I64 of E entries or the stored experts do
/// not fit it (1 to E of them, numbered from 0).
inline void resolve_distinct_storage(const checkpoint_layout& layout, const layout_stack& stack,
                                     const io::safetensors_checkpoint& c, const std::string& map, index_t E,
                                     moe_layer_names& names) {
  const auto& info = c.info(map);
  if (info.dtype != io::safetensors_dtype::i64 || info.shape != std::vector<index_t>{E})
    MOECOMP_FAIL(error_kind::io_error, "describe_moe_model: tensor '", map, "' (the layer's expert id map) must be I64 of ",
                 "shape [", E, "] (one stored expert per router id), got ", io::to_string(info.dtype), " of shape ",
                 shape_text(info.shape));
  index_t stored = 0;
  if (layout.fused()) {
    const auto& shape = c.info(names.gate_up).shape;
    stored = shape.size() == 3 ? shape[0] : 0;
  } else {
    while (stored < E && c.contains(names.gate[static_cast<std::size_t>(stored)])) ++stored;
  }
  if (stored < 1 || stored > E)
    MOECOMP_FAIL(error_kind::io_error, "describe_moe_model: tensor '", map, "' says the layer stores distinct experts, ",
                 "and it holds ", stored, "; it needs 1 to ", E);
  names = layer_names(layout, stack, names.layer, stored);
  names.expert_map = map;
  names.stored_experts = stored;
}

/// The most layers one stack of a config may give (real models have at most a few hundred).
inline constexpr index_t max_layers = index_t{1} << 20;

/// Resolves `layout` against a config and a checkpoint; nullopt (with `missing` set) when the checkpoint
/// lacks one of the layout's required tensors, so that the next layout of the model type can be tried.
inline std::optional<moe_model> resolve(const checkpoint_layout& layout, const nlohmann::json& config,
                                        const std::string& config_source, const io::safetensors_checkpoint& c,
                                        std::string& missing) {
  const config_reader read(config, layout, config_source);
  moe_model m;
  m.family = layout.family;
  m.layout_source = layout.source;
  m.model_type = config.value("model_type", std::string());
  m.num_experts = read.integer("num_experts");
  m.top_k = read.integer("top_k");
  if (m.num_experts < 1 || m.top_k < 1 || m.top_k > m.num_experts)
    MOECOMP_FAIL(error_kind::io_error, "describe_moe_model: config '", config_source, "' gives ", m.num_experts,
                 " experts and top-k ", m.top_k, "; it needs 1 <= top_k <= experts");
  const std::string act = read.text("activation");
  const auto activation = activation_from_config(act);
  if (!activation)
    MOECOMP_FAIL(error_kind::io_error, "describe_moe_model: config '", config_source, "' has the activation '", act,
                 "', which moecomp does not compute (silu, swish, gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu)");
  m.activation = *activation;
  m.scoring = read.text("scoring");
  if (m.scoring != "softmax" && m.scoring != "sigmoid")
    MOECOMP_FAIL(error_kind::io_error, "describe_moe_model: config '", config_source, "' has the scoring function '",
                 m.scoring, "'; moecomp routes with softmax or sigmoid");
  m.normalize_top_k = read.boolean("normalize_top_k");
  if (read.field("topk_method")) m.topk_method = read.text("topk_method");
  if (read.field("n_group")) m.n_group = read.integer("n_group");
  if (read.field("topk_group")) m.topk_group = read.integer("topk_group");
  if (read.field("routed_scaling_factor")) m.routed_scaling_factor = read.number("routed_scaling_factor");
  m.gated = layout.fused() || !layout.expert_up.empty();

  // Experts named one by one need tensors of their own: more experts than the checkpoint has tensors cannot
  // fit it (and would make a name list as long as the config says).
  const auto tensors = static_cast<index_t>(c.names().size());
  if (!layout.fused() && m.num_experts > tensors) {
    missing = "the " + layout.family + " layout ('" + layout.source + "') needs the tensors of " +
              std::to_string(m.num_experts) + " experts per layer, more than the " + std::to_string(tensors) +
              " tensors '" + c.source() + "' holds";
    return std::nullopt;
  }
  for (const layout_stack& stack : layout.stacks) {
    const index_t count = read.config_integer(stack.layers, -1);
    if (count < 0)
      MOECOMP_FAIL(error_kind::io_error, "describe_moe_model: config '", config_source, "' lacks \"", stack.layers,
                   "\" (the ", layout.family, " layout's layer count of the ", stack.name, " stack)");
    if (count > max_layers)
      MOECOMP_FAIL(error_kind::io_error, "describe_moe_model: config '", config_source, "' gives the ", stack.name,
                   " stack ", count, " layers; moecomp reads at most ", max_layers);
    const index_t step = read.config_integer(stack.step, 1);
    std::vector<index_t> except = read.config_list(stack.except);
    std::sort(except.begin(), except.end());
    const index_t first_dense = read.config_integer(stack.first_dense, 0);
    const index_t frequency = read.config_integer(stack.frequency, 1);
    for (index_t layer = 0; layer < count; ++layer) {
      if (!is_sparse_layer(stack.rule, layer, step, {}, first_dense, frequency) ||
          (stack.rule == sparse_rule::every_step && std::binary_search(except.begin(), except.end(), layer)))
        continue;
      moe_layer_names names = layer_names(layout, stack, layer, m.num_experts);
      const std::string map = expert_map_name(names.router);
      // Distinct storage, when this layout's first expert is there (another layout of the type may be the one).
      if (c.contains(map) && c.contains(layout.fused() ? names.gate_up : names.gate.front()))
        resolve_distinct_storage(layout, stack, c, map, m.num_experts, names);
      // The optional names: kept only when the checkpoint has them.
      for (std::string* optional : {&names.router_bias, &names.correction_bias, &names.shared_gate_weight})
        if (!optional->empty() && !c.contains(*optional)) optional->clear();
      if (!names.shared_gate.empty() && !c.contains(names.shared_gate)) {
        names.shared_gate.clear();
        names.shared_up.clear();
        names.shared_down.clear();
      }
      for (const std::string& name : names.tensor_names())
        if (!c.contains(name)) {
          missing = "the " + layout.family + " layout ('" + layout.source + "') needs '" + name + "', which '" +
                    c.source() + "' lacks";
          return std::nullopt;
        }
      m.layers.push_back(std::move(names));
    }
  }
  if (m.layers.empty())
    MOECOMP_FAIL(error_kind::io_error, "describe_moe_model: config '", config_source, "' gives the ", layout.family,
                 " layout no MoE layer");

  // Sizes: from the config where the layout maps them, else from the first layer's tensors.
  const moe_layer_names& first = m.layers.front();
  const auto& router_shape = c.info(first.router).shape;
  m.hidden_size = read.field("hidden_size") ? read.integer("hidden_size")
                                            : (router_shape.size() == 2 ? router_shape[1] : -1);
  const std::string& gate0 = first.fused() ? first.gate_up : first.gate.front();
  const auto& gate_shape = c.info(gate0).shape;
  m.expert_size = read.field("expert_size") ? read.integer("expert_size")
                  : first.fused() ? (gate_shape.size() == 3 ? gate_shape[1] / 2 : -1)
                                  : (gate_shape.size() == 2 ? gate_shape[0] : -1);
  const index_t E = m.num_experts, H = m.hidden_size, I = m.expert_size;
  if (I > std::numeric_limits<index_t>::max() / 2)
    MOECOMP_FAIL(error_kind::io_error, "describe_moe_model: config '", config_source, "' gives the expert size ", I,
                 ", larger than any tensor");
  if (first.has_shared_expert()) {
    const auto& shared_shape = c.info(first.shared_gate).shape;
    m.shared_expert_size = shared_shape.size() == 2 ? shared_shape[0] : -1;
    if (read.field("shared_expert_size") && read.integer("shared_expert_size") != m.shared_expert_size)
      MOECOMP_FAIL(error_kind::io_error, "describe_moe_model: tensor '", first.shared_gate, "' has ",
                   m.shared_expert_size, " rows, but the config's shared expert size is ",
                   read.integer("shared_expert_size"));
    if (read.field("shared_experts")) {
      const index_t shared = read.integer("shared_experts");
      const bool too_many = I > 0 && shared > std::numeric_limits<index_t>::max() / I;
      if (too_many || m.shared_expert_size != shared * I)
        MOECOMP_FAIL(error_kind::io_error, "describe_moe_model: tensor '", first.shared_gate, "' has ",
                     m.shared_expert_size, " rows, but the config's ", shared, " shared experts of ", I, " need ",
                     too_many ? std::string("more than any tensor holds") : std::to_string(shared * I));
    }
  }
  for (const moe_layer_names& n : m.layers) {
    expect_shape(c, n.router, {E, H}, "the router");
    if (!n.router_bias.empty()) expect_shape(c, n.router_bias, {E}, "the router bias");
    if (!n.correction_bias.empty()) expect_shape(c, n.correction_bias, {E}, "the selection bias");
    if (n.fused()) {
      const index_t S = n.distinct_storage() ? n.stored_experts : E;  // distinct storage: the stored experts
      expect_shape(c, n.gate_up, {S, 2 * I, H}, "the fused gate and up projections");
      expect_shape(c, n.fused_down, {S, H, I}, "the fused down projections");
    }
    for (std::size_t e = 0; e < n.gate.size(); ++e) {
      expect_shape(c, n.gate[e], {I, H}, "an expert's gate projection");
      if (!n.up.empty()) expect_shape(c, n.up[e], {I, H}, "an expert's up projection");
      expect_shape(c, n.down[e], {H, I}, "an expert's down projection");
    }
    if (n.has_shared_expert()) {
      const index_t S = m.shared_expert_size;
      expect_shape(c, n.shared_gate, {S, H}, "the shared expert's gate projection");
      if (!n.shared_up.empty()) expect_shape(c, n.shared_up, {S, H}, "the shared expert's up projection");
      expect_shape(c, n.shared_down, {H, S}, "the shared expert's down projection");
      if (!n.shared_gate_weight.empty()) expect_shape(c, n.shared_gate_weight, {1, H}, "the shared expert's gate");
    }
  }
  for (const moe_layer_names& n : m.layers)
    for (const std::string& name : n.tensor_names())
      if (!io::is_floating(c.info(name).dtype))
        MOECOMP_FAIL(error_kind::io_error, "describe_moe_model: tensor '", name, "' must hold floating-point values, got ",
                     to_string(c.info(name).dtype));
  return m;
}

/// "nan", "inf", "-inf" or the value: how messages name an element.
inline std::string describe_value(double value) {
  if (value != value) return "nan";
  if (value == std::numeric_limits<double>::infinity()) return "inf";
  if (value == -std::numeric_limits<double>::infinity()) return "-inf";
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", value);
  return text;
}

/// "(i, j, k)": the C-order position of flat element `flat` of a tensor of `shape`.
inline std::string element_position(const std::vector<index_t>& shape, index_t index) {
  auto flat = static_cast<std::uint64_t>(index);
  std::vector<std::uint64_t> at(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    const auto extent = static_cast<std::uint64_t>(shape[d]);
    at[d] = extent == 0 ? 0 : flat % extent;
    flat = extent == 0 ? 0 : flat / extent;
  }
  std::string text = "(";
  for (std::size_t d = 0; d < at.size(); ++d) text += (d ? ", " : "") + std::to_string(at[d]);
  return text + ")";
}

/// Element `index` of `t` as double (exact for every floating dtype).
inline double element_value(const io::safetensors_tensor& t, index_t index) {
  double value = 0;
  t.convert_into(&value, 1, index);
  return value;
}

/// io_error naming `function`, the tensor and the element when tensor `name` holds a NaN or an infinity.
inline void check_finite(const io::safetensors_checkpoint& c, const std::string& name, const char* function) {
  const io::safetensors_tensor t = c.tensor(name);
  const index_t bad = t.find_non_finite();
  if (bad < 0) return;
  MOECOMP_FAIL(error_kind::io_error, function, ": tensor '", name, "' element ", element_position(t.shape(), bad), " is ",
               describe_value(element_value(t, bad)), "; the weights moecomp loads must be finite");
}

}  // namespace detail

/// The name of a layer's id-map tensor in moecomp's distinct expert storage (compress --expert-storage distinct):
/// the router's tensor with its last dotted component replaced by `expert_map`
/// ("model.layers.3.block_sparse_moe.gate.weight" -> "model.layers.3.block_sparse_moe.gate.expert_map").
/// describe_moe_model takes a layer whose checkpoint has this tensor to store its experts distinct.
inline std::string expert_map_name(const moe_layer_names& names) { return detail::expert_map_name(names.router); }

/// Resolves a checkpoint: the layout of config.json's model_type whose tensors the checkpoint has, and every
/// MoE layer's names, checked. `config_source` names the config in messages.
inline moe_model describe_moe_model(const std::vector<checkpoint_layout>& layouts, const std::string& config_text,
                                    const io::safetensors_checkpoint& checkpoint,
                                    const std::string& config_source = "config.json") {
  const nlohmann::json config = detail::parse_json_text(config_text, "config", config_source);
  const std::string model_type = detail::config_model_type(config, "describe_moe_model", config_source);
  std::vector<std::string> known;
  std::string missing;
  const checkpoint_layout* dense_family = nullptr;
  for (const checkpoint_layout& layout : layouts) {
    if (!layout.dense())
      for (const std::string& t : layout.model_types) known.push_back(t);
    if (std::find(layout.model_types.begin(), layout.model_types.end(), model_type) == layout.model_types.end())
      continue;
    if (layout.dense()) {
      if (dense_family == nullptr) dense_family = &layout;
      continue;
    }
    std::string why;
    if (auto m = detail::resolve(layout, config, config_source, checkpoint, why)) return std::move(*m);
    missing += (missing.empty() ? "" : "; ") + why;
  }
  if (!missing.empty())
    MOECOMP_FAIL(error_kind::io_error, "describe_moe_model: no layout of model_type '", model_type,
                 "' fits the checkpoint: ", missing);
  if (dense_family != nullptr)
    MOECOMP_FAIL(error_kind::io_error, "describe_moe_model: model_type '", model_type, "' is a dense family (the ",
                 dense_family->family, " layout, '", dense_family->source,
                 "'): it has no MoE layer (describe_dense_model reads its FFNs, for the MoEfication split)");
  MOECOMP_FAIL(error_kind::io_error, "describe_moe_model: unknown architecture: no checkpoint layout maps model_type '",
               model_type, "' (the MoE layouts know ", detail::sorted_list(known),
               "); adding a family means adding a layouts/*.json file");
}

/// The kind of family a config.json's model_type belongs to.
enum class model_kind { none, moe, dense };

/// Which layouts list config.json's model_type: an MoE layout (moe), else only dense ones (dense, the models
/// describe_dense_model reads), else none, also for a config that is not JSON or has no string model_type.
/// `model_type`, if given, receives the type ("" when there is none).
inline model_kind kind_of_model(const std::vector<checkpoint_layout>& layouts, const std::string& config_text,
                                std::string* model_type = nullptr) {
  const nlohmann::json config = nlohmann::json::parse(config_text.begin(), config_text.end(), nullptr, false);
  const bool typed = config.is_object() && config.contains("model_type") && config["model_type"].is_string();
  const std::string type = typed ? config["model_type"].get<std::string>() : std::string();
  if (model_type != nullptr) *model_type = type;
  model_kind kind = model_kind::none;
  for (const checkpoint_layout& layout : layouts)
    if (typed && std::find(layout.model_types.begin(), layout.model_types.end(), type) != layout.model_types.end()) {
      if (!layout.dense()) return model_kind::moe;
      kind = model_kind::dense;
    }
  return kind;
}

/// Resolves a dense checkpoint (for the MoEfication split): the dense layout of config.json's model_type whose
/// tensors the checkpoint has, and every layer's FFN names and shapes, checked against the config. io_errors
/// as describe_moe_model's; an MoE model_type is one ("use describe_moe_model").
inline dense_model describe_dense_model(const std::vector<checkpoint_layout>& layouts, const std::string& config_text,
                                        const io::safetensors_checkpoint& checkpoint,
                                        const std::string& config_source = "config.json") {
  constexpr const char* fn = "describe_dense_model";
  const nlohmann::json config = detail::parse_json_text(config_text, "config", config_source);
  const std::string model_type = detail::config_model_type(config, fn, config_source);
  std::vector<std::string> known;
  std::string missing;
  const checkpoint_layout* moe_family = nullptr;
  for (const checkpoint_layout& layout : layouts) {
    if (layout.dense())
      for (const std::string& t : layout.model_types) known.push_back(t);
    if (std::find(layout.model_types.begin(), layout.model_types.end(), model_type) == layout.model_types.end())
      continue;
    if (!layout.dense()) {
      if (moe_family == nullptr) moe_family = &layout;
      continue;
    }
    const detail::config_reader read(config, layout, config_source, fn);
    dense_model m;
    m.family = layout.family;
    m.layout_source = layout.source;
    m.model_type = model_type;
    m.gated = !layout.dense_up.empty();
    const std::string act = read.text("activation");
    const auto activation = activation_from_config(act);
    if (!activation)
      MOECOMP_FAIL(error_kind::io_error, fn, ": config '", config_source, "' has the activation '", act,
                   "', which moecomp does not compute (silu, swish, gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu)");
    m.activation = *activation;
    std::string why;
    for (const layout_stack& stack : layout.stacks) {
      const index_t count = read.config_integer(stack.layers, -1);
      if (count < 0)
        MOECOMP_FAIL(error_kind::io_error, fn, ": config '", config_source, "' lacks \"", stack.layers, "\" (the ",
                     layout.family, " layout's layer count of the ", stack.name, " stack)");
      if (count > detail::max_layers)
        MOECOMP_FAIL(error_kind::io_error, fn, ": config '", config_source, "' gives the ", stack.name, " stack ", count,
                     " layers; moecomp reads at most ", detail::max_layers);
      for (index_t layer = 0; layer < count && why.empty(); ++layer) {
        const std::string prefix = detail::substitute(stack.prefix, "layer", layer);
        dense_layer_names n;
        n.stack = stack.name;
        n.layer = layer;
        n.prefix = prefix;
        n.gate = prefix + layout.dense_gate;
        if (m.gated) n.up = prefix + layout.dense_up;
        n.down = prefix + layout.dense_down;
        for (const std::string& name : n.tensor_names())
          if (why.empty() && !checkpoint.contains(name))
            why = "the " + layout.family + " layout ('" + layout.source + "') needs '" + name + "', which '" +
                  checkpoint.source() + "' lacks";
        m.layers.push_back(std::move(n));
      }
    }
    if (!why.empty()) {
      missing += (missing.empty() ? "" : "; ") + why;
      continue;
    }
    if (m.layers.empty())
      MOECOMP_FAIL(error_kind::io_error, fn, ": config '", config_source, "' gives the ", layout.family, " layout no layer");
    const auto& gate_shape = checkpoint.info(m.layers.front().gate).shape;
    m.hidden_size = read.field("hidden_size") ? read.integer("hidden_size") : (gate_shape.size() == 2 ? gate_shape[1] : -1);
    m.ffn_size = read.field("ffn_size") ? read.integer("ffn_size") : (gate_shape.size() == 2 ? gate_shape[0] : -1);
    for (const dense_layer_names& n : m.layers) {
      detail::expect_shape(checkpoint, n.gate, {m.ffn_size, m.hidden_size}, "the FFN's gate projection");
      if (m.gated) detail::expect_shape(checkpoint, n.up, {m.ffn_size, m.hidden_size}, "the FFN's up projection");
      detail::expect_shape(checkpoint, n.down, {m.hidden_size, m.ffn_size}, "the FFN's down projection");
      for (const std::string& name : n.tensor_names())
        if (!io::is_floating(checkpoint.info(name).dtype))
          MOECOMP_FAIL(error_kind::io_error, fn, ": tensor '", name, "' must hold floating-point values, got ",
                       to_string(checkpoint.info(name).dtype));
    }
    return m;
  }
  if (!missing.empty())
    MOECOMP_FAIL(error_kind::io_error, fn, ": no layout of model_type '", model_type, "' fits the checkpoint: ", missing);
  if (moe_family != nullptr)
    MOECOMP_FAIL(error_kind::io_error, fn, ": model_type '", model_type, "' is an MoE family (the ", moe_family->family,
                 " layout, '", moe_family->source, "'): its FFNs are experts already (use describe_moe_model)");
  MOECOMP_FAIL(error_kind::io_error, fn, ": unknown architecture: no dense checkpoint layout maps model_type '", model_type,
               "' (the dense layouts know ", detail::sorted_list(known),
               "); adding a family means adding a layouts/*.json file with \"dense_ffn\"");
}

/// One dense FFN layer's weights converted to W: w1 (gate) and w3 (up, empty when ungated) d_ff x H, w2 H x d_ff.
template <class W>
struct dense_ffn_weights {
  index_t d_model = 0, d_ff = 0;
  bool gated = true;
  std::vector<W> w1, w3, w2;

  /// The FFN as one moe expert (moe::ffn_forward computes it).
  moe::ffn_expert_view<W> view() const {
    moe::ffn_expert_view<W> v;
    v.w1 = matrix_view<const W>(w1.data(), d_ff, d_model, d_model);
    if (gated) v.w3 = matrix_view<const W>(w3.data(), d_ff, d_model, d_model);
    v.w2 = matrix_view<const W>(w2.data(), d_model, d_ff, d_ff);
    return v;
  }
};

/// Reads dense layer `index` (0 .. model.layers.size() - 1) of a checkpoint described by describe_dense_model,
/// converting to W (float, double, bfloat16 or half); exactly that layer's bytes. Every weight must be finite:
/// a NaN or an infinity in the file is an io_error naming the tensor and the element
/// ("load_dense_ffn: tensor 'model.layers.0.mlp.up_proj.weight' element (5, 7) is nan; ...").
template <class W>
dense_ffn_weights<W> load_dense_ffn(const io::safetensors_checkpoint& checkpoint, const dense_model& model, index_t index) {
  static_assert(moecomp::detail::is_weight_type_v<W>, "load_dense_ffn: W must be float, double, bfloat16 or half");
  MOECOMP_EXPECTS(index >= 0 && index < static_cast<index_t>(model.layers.size()), "load_dense_ffn: index must be in [0, ",
                  model.layers.size(), "), got ", index);
  const dense_layer_names& n = model.layers[static_cast<std::size_t>(index)];
  for (const std::string& name : n.tensor_names()) detail::check_finite(checkpoint, name, "load_dense_ffn");
  dense_ffn_weights<W> w;
  w.d_model = model.hidden_size;
  w.d_ff = model.ffn_size;
  w.gated = model.gated;
  w.w1 = checkpoint.tensor(n.gate).to_vector<W>();
  if (w.gated) w.w3 = checkpoint.tensor(n.up).to_vector<W>();
  w.w2 = checkpoint.tensor(n.down).to_vector<W>();
  return w;
}

/// The routing parameters of moecomp's gating (<moecomp/gating/routing.hpp>) that reproduce the model's
/// router: top-k for topk_method "greedy" (Mixtral, Qwen2-MoE, OLMoE, Switch, DeepSeek-V2's default; with a
/// routed_scaling_factor other than 1, group-limited greedy over a single group, which is top-k scaled),
/// group-limited greedy for "group_limited_greedy" (DeepSeek-V2), DeepSeek-V3's rule for "noaux_tc";
/// softmax or sigmoid scores; renormalisation and the scaling factor as the config says. io_error for a
/// topk_method moecomp does not implement.
inline gating::routing_params routing_of(const moe_model& m) {
  gating::routing_params p;
  if (m.topk_method == "greedy" && m.routed_scaling_factor == 1.0) {
    p.rule = gating::routing_rule::top_k;
  } else if (m.topk_method == "greedy") {
    // DeepSeek-V2 scales greedy top-k too: group-limited greedy over one group is top-k with the factor.
    p.rule = gating::routing_rule::group_limited_greedy;
    p.scores = m.scoring == "sigmoid" ? gating::score_function::sigmoid : gating::score_function::softmax;
    p.top_k = m.top_k;
    p.renormalize = m.normalize_top_k;
    p.routed_scaling_factor = m.routed_scaling_factor;
    return p;  // n_group = topk_group = 1
  } else if (m.topk_method == "group_limited_greedy") {
    p.rule = gating::routing_rule::group_limited_greedy;
  } else if (m.topk_method == "noaux_tc") {
    p.rule = gating::routing_rule::deepseek_v3;
  } else {
    MOECOMP_FAIL(error_kind::io_error, "routing_of: the ", m.family, " model's topk_method '", m.topk_method,
                 "' is not one moecomp implements (greedy, group_limited_greedy, noaux_tc)");
  }
  p.scores = m.scoring == "sigmoid" ? gating::score_function::sigmoid : gating::score_function::softmax;
  p.top_k = m.top_k;
  p.renormalize = m.normalize_top_k;
  p.n_group = m.n_group;
  p.topk_group = m.topk_group;
  p.routed_scaling_factor = m.routed_scaling_factor;
  return p;
}

/// One MoE layer's weights, converted to W and laid out as moecomp's stacks: W1 and W3 E x I x H, W2 E x H x I
/// (nn.Linear layout), the router E x H in float, and the shared expert when the layer has one. A layer read in
/// place (map_moe_layer) holds no expert stack: w1_in_place .. w2_in_place address each expert's matrices in the
/// checkpoint's memory, and experts_view() is a gathered stack of them.
template <class W>
struct moe_layer_weights {
  index_t experts = 0, d_model = 0, d_ff = 0;
  bool gated = true;
  std::vector<W> w1, w3, w2;
  std::vector<const W*> w1_in_place, w3_in_place, w2_in_place;  // E each (w3: empty when not gated), or empty
  host_matrix<float> router;
  std::vector<float> router_bias, correction_bias;  // E each, or empty
  index_t shared_d_ff = 0;
  std::vector<W> shared_w1, shared_w3, shared_w2;  // empty without a shared expert
  std::vector<float> shared_gate;                   // H, or empty (Qwen2-MoE's sigmoid gate row)

  /// Whether the experts are read in place from a checkpoint (map_moe_layer), which must then outlive this.
  bool in_place() const noexcept { return !w1_in_place.empty(); }
  moe::ffn_expert_stack_view<W> experts_view() const {
    moe::ffn_expert_stack_view<W> v;
    if (in_place()) {
      v.w1 = matrix_stack_view<const W>(w1_in_place.data(), experts, d_ff, d_model, d_model);
      if (gated) v.w3 = matrix_stack_view<const W>(w3_in_place.data(), experts, d_ff, d_model, d_model);
      v.w2 = matrix_stack_view<const W>(w2_in_place.data(), experts, d_model, d_ff, d_ff);
      return v;
    }
    v.w1 = matrix_stack_view<const W>(w1.data(), experts, d_ff, d_model);
    if (gated) v.w3 = matrix_stack_view<const W>(w3.data(), experts, d_ff, d_model);
    v.w2 = matrix_stack_view<const W>(w2.data(), experts, d_model, d_ff);
    return v;
  }
  bool has_shared_expert() const noexcept { return shared_d_ff > 0; }
  /// Frees the expert stacks (w1, w3, w2), keeping the router, its biases and the shared expert: for a caller
  /// done with the experts (compress, once a merged layer no longer needs its input). experts_view() is then
  /// invalid (its stacks are empty).
  void drop_experts() noexcept {
    std::vector<W>().swap(w1);
    std::vector<W>().swap(w3);
    std::vector<W>().swap(w2);
    std::vector<const W*>().swap(w1_in_place);
    std::vector<const W*>().swap(w3_in_place);
    std::vector<const W*>().swap(w2_in_place);
  }
  moe::ffn_expert_view<W> shared_expert_view() const {
    MOECOMP_EXPECTS(has_shared_expert(), "moe_layer_weights::shared_expert_view: the layer has no shared expert");
    moe::ffn_expert_view<W> v;
    v.w1 = matrix_view<const W>(shared_w1.data(), shared_d_ff, d_model, d_model);
    if (!shared_w3.empty()) v.w3 = matrix_view<const W>(shared_w3.data(), shared_d_ff, d_model, d_model);
    v.w2 = matrix_view<const W>(shared_w2.data(), d_model, shared_d_ff, shared_d_ff);
    return v;
  }
};

/// The id map of MoE layer `index` in moecomp's distinct expert storage: E entries, router id r uses stored
/// expert map[r]; empty for a layer that stores one expert per router id. io_error naming the tensor and the
/// entry when one lies outside [0, stored experts).
inline std::vector<std::int64_t> load_expert_map(const io::safetensors_checkpoint& checkpoint, const moe_model& model,
                                                 index_t index) {
  MOECOMP_EXPECTS(index >= 0 && index < static_cast<index_t>(model.layers.size()), "load_expert_map: index must be in [0, ",
                  model.layers.size(), "), got ", index);
  const moe_layer_names& n = model.layers[static_cast<std::size_t>(index)];
  if (!n.distinct_storage()) return {};
  const io::safetensors_tensor t = checkpoint.tensor(n.expert_map);
  if (t.dtype() != io::safetensors_dtype::i64 || t.size() != model.num_experts)  // describe_moe_model checked it
    MOECOMP_FAIL(error_kind::io_error, "load_expert_map: tensor '", n.expert_map, "' must be I64 of ", model.num_experts,
                 " entries, got ", io::to_string(t.dtype()), " of ", t.size());
  std::vector<std::int64_t> map(static_cast<std::size_t>(t.size()));
  for (std::size_t r = 0; r < map.size(); ++r)
    map[r] = static_cast<std::int64_t>(moecomp::detail::load_le<std::uint64_t>(t.data() + 8 * r));
  for (std::size_t r = 0; r < map.size(); ++r)
    if (map[r] < 0 || map[r] >= n.stored_experts)
      MOECOMP_FAIL(error_kind::io_error, "load_expert_map: tensor '", n.expert_map, "' entry ", r, " is ", map[r],
                   "; the layer stores experts 0 to ", n.stored_experts - 1);
  return map;
}

namespace detail {
/// The router, its biases (float) and the shared expert (W) of a layer, for load_moe_layer and map_moe_layer.
template <class W>
void load_router_and_shared(const io::safetensors_checkpoint& checkpoint, const moe_model& model,
                            const moe_layer_names& n, moe_layer_weights<W>& w) {
  w.router = checkpoint.tensor(n.router).to_matrix<float>();
  if (!n.router_bias.empty()) w.router_bias = checkpoint.tensor(n.router_bias).to_vector<float>();
  if (!n.correction_bias.empty()) w.correction_bias = checkpoint.tensor(n.correction_bias).to_vector<float>();
  if (n.has_shared_expert()) {
    w.shared_d_ff = model.shared_expert_size;
    w.shared_w1 = checkpoint.tensor(n.shared_gate).to_vector<W>();
    if (!n.shared_up.empty()) w.shared_w3 = checkpoint.tensor(n.shared_up).to_vector<W>();
    w.shared_w2 = checkpoint.tensor(n.shared_down).to_vector<W>();
    if (!n.shared_gate_weight.empty()) w.shared_gate = checkpoint.tensor(n.shared_gate_weight).to_vector<float>();
  }
}
}  // namespace detail

/// Reads MoE layer `index` (0 .. model.layers.size() - 1) of a checkpoint described by describe_moe_model,
/// converting every tensor to W (float, double, bfloat16 or half; the router to float). It reads exactly
/// that layer's bytes: one layer's experts in memory at a time. Every tensor of the layer (experts, fused
/// stacks, router and its biases, shared expert) must be finite as the file stores it: a NaN or an infinity
/// is an io_error naming the tensor and the element, checked before anything is converted
/// ("load_moe_layer: tensor '...experts.3.w1.weight' element (5, 7) is nan; the weights moecomp loads must be
/// finite"). A finite value beyond W's range (above 65504 for half) still rounds to infinity. A layer stored
/// distinct (moe_layer_names::distinct_storage) is expanded through its id map (load_expert_map): router id e
/// gets stored expert map[e], so the stacks hold E experts as in the duplicated form.
/// release_pages: each tensor's pages leave the resident set (safetensors_file::release) once it is checked and
/// again once it is converted, so that reading a layer holds its converted copy plus one tensor of the file,
/// not the whole layer twice (compress's bf16-resident prune; the result is the same either way).
template <class W>
moe_layer_weights<W> load_moe_layer(const io::safetensors_checkpoint& checkpoint, const moe_model& model, index_t index,
                                    bool release_pages = false) {
  static_assert(moecomp::detail::is_weight_type_v<W>, "load_moe_layer: W must be float, double, bfloat16 or half");
  MOECOMP_EXPECTS(index >= 0 && index < static_cast<index_t>(model.layers.size()), "load_moe_layer: index must be in [0, ",
                  model.layers.size(), "), got ", index);
  const moe_layer_names& n = model.layers[static_cast<std::size_t>(index)];
  auto done_with = [&](const std::string& name) {
    if (release_pages) checkpoint.release(name);
  };
  for (const std::string& name : n.tensor_names()) {
    detail::check_finite(checkpoint, name, "load_moe_layer");
    done_with(name);
  }
  moe_layer_weights<W> w;
  w.experts = model.num_experts;
  w.d_model = model.hidden_size;
  w.d_ff = model.expert_size;
  w.gated = model.gated;
  const index_t E = w.experts, H = w.d_model, I = w.d_ff, matrix = I * H;
  w.w1.resize(static_cast<std::size_t>(E * matrix));
  if (w.gated) w.w3.resize(w.w1.size());
  w.w2.resize(w.w1.size());
  // Distinct storage: router id e reads stored expert map[e] (the stack is expanded to one expert per id).
  const std::vector<std::int64_t> map = load_expert_map(checkpoint, model, index);
  auto stored = [&map](index_t e) { return map.empty() ? e : static_cast<index_t>(map[static_cast<std::size_t>(e)]); };
  if (n.fused()) {
    const io::safetensors_tensor gate_up = checkpoint.tensor(n.gate_up);
    const io::safetensors_tensor down = checkpoint.tensor(n.fused_down);
    for (index_t e = 0; e < E; ++e) {  // gate rows first, then up rows, in each expert's 2I x H block
      gate_up.convert_into(w.w1.data() + e * matrix, matrix, stored(e) * 2 * matrix);
      gate_up.convert_into(w.w3.data() + e * matrix, matrix, stored(e) * 2 * matrix + matrix);
      down.convert_into(w.w2.data() + e * matrix, matrix, stored(e) * matrix);
    }
    done_with(n.gate_up);
    done_with(n.fused_down);
  } else {
    for (index_t e = 0; e < E; ++e) {
      const auto u = static_cast<std::size_t>(stored(e));
      checkpoint.tensor(n.gate[u]).convert_into(w.w1.data() + e * matrix, matrix);
      done_with(n.gate[u]);
      if (w.gated) {
        checkpoint.tensor(n.up[u]).convert_into(w.w3.data() + e * matrix, matrix);
        done_with(n.up[u]);
      }
      checkpoint.tensor(n.down[u]).convert_into(w.w2.data() + e * matrix, matrix);
      done_with(n.down[u]);
    }
  }
  detail::load_router_and_shared(checkpoint, model, n, w);
  return w;
}

namespace detail {
/// Why MoE layer n cannot be read in place as W ("" when it can): the first expert tensor of another dtype or at an
/// address not aligned for W, or a big-endian host.
template <class W>
std::string unmappable_reason(const io::safetensors_checkpoint& checkpoint, const moe_layer_names& n) {
  if (!moecomp::detail::host_is_little_endian) return "the host is big-endian";
  std::vector<std::string> experts;
  if (n.fused()) {
    experts = {n.gate_up, n.fused_down};
  } else {
    experts = n.gate;
    experts.insert(experts.end(), n.up.begin(), n.up.end());
    experts.insert(experts.end(), n.down.begin(), n.down.end());
  }
  for (const std::string& name : experts) {
    const io::safetensors_tensor t = checkpoint.tensor(name);
    if (!t.holds<W>()) return "tensor '" + name + "' is " + io::to_string(t.dtype());
    if (reinterpret_cast<std::uintptr_t>(t.data()) % alignof(W) != 0)
      return "tensor '" + name + "' is at an address not aligned to " + std::to_string(alignof(W)) + " bytes";
  }
  return "";
}
}  // namespace detail

/// Whether MoE layer `index` can be read in place as W (map_moe_layer): every expert tensor is stored as W's
/// dtype (BF16 for bfloat16, F32 for float, F16 for half, F64 for double) at an address aligned for W, on a
/// little-endian host.
template <class W>
bool can_map_moe_layer(const io::safetensors_checkpoint& checkpoint, const moe_model& model, index_t index) {
  static_assert(moecomp::detail::is_weight_type_v<W>, "can_map_moe_layer: W must be float, double, bfloat16 or half");
  MOECOMP_EXPECTS(index >= 0 && index < static_cast<index_t>(model.layers.size()), "can_map_moe_layer: index must be in [0, ",
                  model.layers.size(), "), got ", index);
  return detail::unmappable_reason<W>(checkpoint, model.layers[static_cast<std::size_t>(index)]).empty();
}

/// MoE layer `index` read in place: the experts are not copied; the result's experts_view() is a gathered stack
/// addressing each expert's matrices in `checkpoint`'s memory (its mapping), which must outlive the result and
/// every view of it. The router, its biases and the shared expert are read as load_moe_layer reads them. The same
/// checks as load_moe_layer (every tensor finite, the id map of distinct storage); each tensor's pages are released
/// after the check, so that the experts' pages are only resident while a caller reads them (and the kernel can
/// reclaim them: they are the file's clean pages). The values are load_moe_layer<W>'s, bit for bit. invalid_argument
/// unless can_map_moe_layer<W>.
template <class W>
moe_layer_weights<W> map_moe_layer(const io::safetensors_checkpoint& checkpoint, const moe_model& model, index_t index) {
  static_assert(moecomp::detail::is_weight_type_v<W>, "map_moe_layer: W must be float, double, bfloat16 or half");
  MOECOMP_EXPECTS(index >= 0 && index < static_cast<index_t>(model.layers.size()), "map_moe_layer: index must be in [0, ",
                  model.layers.size(), "), got ", index);
  const moe_layer_names& n = model.layers[static_cast<std::size_t>(index)];
  const std::string reason = detail::unmappable_reason<W>(checkpoint, n);
  MOECOMP_EXPECTS(reason.empty(), "map_moe_layer: layer ", index, "'s experts must be stored as ",
                  io::to_string(io::safetensors_dtype_of<W>::value),
                  " at aligned addresses on a little-endian host (can_map_moe_layer), got: ", reason);
  for (const std::string& name : n.tensor_names()) {
    detail::check_finite(checkpoint, name, "map_moe_layer");
    checkpoint.release(name);
  }
  moe_layer_weights<W> w;
  w.experts = model.num_experts;
  w.d_model = model.hidden_size;
  w.d_ff = model.expert_size;
  w.gated = model.gated;
  const index_t E = w.experts, matrix = w.d_ff * w.d_model;
  const std::vector<std::int64_t> map = load_expert_map(checkpoint, model, index);
  auto stored = [&map](index_t e) { return map.empty() ? e : static_cast<index_t>(map[static_cast<std::size_t>(e)]); };
  auto at = [&](const std::string& name, index_t first) {
    return reinterpret_cast<const W*>(checkpoint.tensor(name).data()) + first;
  };
  w.w1_in_place.resize(static_cast<std::size_t>(E));
  if (w.gated) w.w3_in_place.resize(static_cast<std::size_t>(E));
  w.w2_in_place.resize(static_cast<std::size_t>(E));
  for (index_t e = 0; e < E; ++e) {
    const auto u = static_cast<std::size_t>(e), s = static_cast<std::size_t>(stored(e));
    if (n.fused()) {  // gate rows first, then up rows, in each expert's 2I x H block
      w.w1_in_place[u] = at(n.gate_up, stored(e) * 2 * matrix);
      w.w3_in_place[u] = at(n.gate_up, stored(e) * 2 * matrix + matrix);
      w.w2_in_place[u] = at(n.fused_down, stored(e) * matrix);
    } else {
      w.w1_in_place[u] = at(n.gate[s], 0);
      if (w.gated) w.w3_in_place[u] = at(n.up[s], 0);
      w.w2_in_place[u] = at(n.down[s], 0);
    }
  }
  detail::load_router_and_shared(checkpoint, model, n, w);
  return w;
}

/// Calibration tokens for one layer: tensor `key` of `file`, T x `hidden` (T >= 1 tokens of the layer's
/// input), of a floating dtype (F32, F64, F16 or BF16), every value finite, converted to float. The tensor's
/// pages are released from the resident set afterwards (safetensors_file::release), so that reading the
/// layers one by one keeps one layer's tokens in memory. io_error naming the key and the file when the
/// tensor is missing, has another dtype or shape, or holds a NaN, an infinity or (from F64) a value float
/// cannot hold; invalid_argument when hidden < 1.
inline host_matrix<float> read_calibration_tokens(const io::safetensors_file& file, const std::string& key,
                                                  index_t hidden) {
  constexpr const char* fn = "read_calibration_tokens";
  MOECOMP_EXPECTS(hidden >= 1, fn, ": hidden must be at least 1, got ", hidden);
  if (!file.contains(key))
    MOECOMP_FAIL(error_kind::io_error, fn, ": '", file.source(), "' has no tensor '", key, "'");
  const io::safetensors_tensor t = file.tensor(key);
  const io::safetensors_dtype dtype = t.dtype();
  if (dtype != io::safetensors_dtype::f32 && dtype != io::safetensors_dtype::f64 &&
      dtype != io::safetensors_dtype::f16 && dtype != io::safetensors_dtype::bf16)
    MOECOMP_FAIL(error_kind::io_error, fn, ": tensor '", key, "' of '", file.source(), "' is ", io::to_string(dtype),
                 "; calibration tokens must be F32, F64, F16 or BF16");
  if (t.ndim() != 2 || t.shape()[0] < 1 || t.shape()[1] != hidden)
    MOECOMP_FAIL(error_kind::io_error, fn, ": tensor '", key, "' of '", file.source(), "' must be T x ", hidden,
                 " (tokens x hidden size, T >= 1), got ", detail::shape_text(t.shape()));
  host_matrix<float> x = t.to_matrix<float>();
  file.release(key);
  const float* values = x.data();
  for (index_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(values[i])) {
      const double stored = detail::element_value(t, i);
      MOECOMP_FAIL(error_kind::io_error, fn, ": tensor '", key, "' of '", file.source(), "' element ",
                   detail::element_position(t.shape(), i), " is ", detail::describe_value(stored),
                   std::isfinite(stored) ? ", beyond float's range" : "", "; calibration tokens must be finite");
    }
  return x;
}

}  // namespace model
MOECOMP_NAMESPACE_END
