#pragma once
// Reading layouts/*.json and config.json with nlohmann-json's document tree (both are small), with every
// type checked before it is read, so that a malformed file is an io_error naming the file and the key, never
// a nlohmann exception (or an abort when exceptions are off).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/model/layout_types.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace model {
namespace detail {

template <class... Parts>
[[noreturn]] void layout_fail(const std::string& source, const Parts&... parts) {
  MOECOMP_FAIL(error_kind::io_error, "checkpoint layout '", source, "' is not valid: ", parts...);
}

inline nlohmann::json parse_json_text(const std::string& text, const char* what, const std::string& source) {
  nlohmann::json value = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (value.is_discarded()) MOECOMP_FAIL(error_kind::io_error, what, " '", source, "' is not valid JSON");
  if (!value.is_object()) MOECOMP_FAIL(error_kind::io_error, what, " '", source, "' must be a JSON object");
  return value;
}

/// object[key] as a string: "" when absent (and `required` false), io_error when not a string.
inline std::string layout_string(const nlohmann::json& object, const char* key, const std::string& source,
                                 const std::string& where, bool required = false) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    if (required) layout_fail(source, where, "lacks \"", key, "\"");
    return {};
  }
  if (!it->is_string()) layout_fail(source, where, "\"", key, "\" must be a string");
  return it->get<std::string>();
}

inline const char* const layout_fields[] = {"num_experts",  "top_k",       "hidden_size",    "expert_size",
                                            "shared_expert_size", "shared_experts", "normalize_top_k",
                                            "scoring",      "topk_method", "n_group",        "topk_group",
                                            "routed_scaling_factor", "activation", "ffn_size"};

inline bool is_layout_field(const std::string& key) {
  for (const char* f : layout_fields)
    if (key == f) return true;
  return false;
}

/// Checks a name template: "{layer}" only in prefixes, "{expert}" only where `expert` says.
inline void check_template(const std::string& text, bool layer, bool expert, const std::string& source,
                           const std::string& where) {
  std::size_t at = 0;
  while ((at = text.find('{', at)) != std::string::npos) {
    const std::size_t end = text.find('}', at);
    if (end == std::string::npos) layout_fail(source, where, "'", text, "' has an unclosed '{'");
    const std::string field = text.substr(at + 1, end - at - 1);
    if (!((field == "layer" && layer) || (field == "expert" && expert)))
      layout_fail(source, where, "'", text, "' has the placeholder {", field, "}, which is not allowed there");
    at = end + 1;
  }
}

inline checkpoint_layout parse_layout(const std::string& text, const std::string& source) {
  const nlohmann::json root = parse_json_text(text, "checkpoint layout", source);
  checkpoint_layout layout;
  layout.source = source;
  layout.family = layout_string(root, "family", source, "", true);
  layout.description = layout_string(root, "description", source, "");
  const auto types = root.find("model_types");
  if (types == root.end() || !types->is_array() || types->empty())
    layout_fail(source, "\"model_types\" must be a non-empty array of config.json model_type values");
  for (const auto& t : *types) {
    if (!t.is_string()) layout_fail(source, "\"model_types\" must hold strings");
    layout.model_types.push_back(t.get<std::string>());
  }
  for (const char* section : {"config", "defaults"}) {
    const auto it = root.find(section);
    if (it == root.end()) continue;
    if (!it->is_object()) layout_fail(source, "\"", section, "\" must be an object");
    for (auto field = it->begin(); field != it->end(); ++field) {
      if (!is_layout_field(field.key()))
        layout_fail(source, "\"", section, "\" has the unknown field \"", field.key(),
                    "\" (known: num_experts, top_k, hidden_size, expert_size, shared_expert_size, shared_experts, "
                    "normalize_top_k, scoring, topk_method, n_group, topk_group, routed_scaling_factor, activation, ffn_size)");
      if (std::string(section) == "config") {
        if (!field->is_string()) layout_fail(source, "\"config\": \"", field.key(), "\" must name a config.json key");
        layout.config[field.key()] = field->get<std::string>();
      } else {
        layout.defaults[field.key()] = field->dump();
      }
    }
  }
  const auto stacks = root.find("stacks");
  if (stacks == root.end() || !stacks->is_array() || stacks->empty())
    layout_fail(source, "\"stacks\" must be a non-empty array");
  for (const auto& s : *stacks) {
    if (!s.is_object()) layout_fail(source, "each of \"stacks\" must be an object");
    layout_stack stack;
    const std::string where = "a stack ";
    stack.name = layout_string(s, "name", source, where, true);
    stack.layers = layout_string(s, "layers", source, where, true);
    stack.prefix = layout_string(s, "prefix", source, where, true);
    check_template(stack.prefix, true, false, source, "stack '" + stack.name + "': ");
    if (stack.prefix.find("{layer}") == std::string::npos)
      layout_fail(source, "stack '", stack.name, "': the prefix must hold {layer}");
    const auto rule = s.find("sparse_layers");
    if (rule != s.end()) {
      if (!rule->is_object()) layout_fail(source, "stack '", stack.name, "': \"sparse_layers\" must be an object");
      const std::string name = layout_string(*rule, "rule", source, "stack '" + stack.name + "': ", true);
      bool known = false;
      for (sparse_rule r : {sparse_rule::all, sparse_rule::every_step, sparse_rule::after_dense, sparse_rule::switch_step})
        if (name == to_string(r)) {
          stack.rule = r;
          known = true;
        }
      if (!known)
        layout_fail(source, "stack '", stack.name, "': the rule '", name,
                    "' is not one of all, every_step, after_dense, switch_step");
      const std::string w = "stack '" + stack.name + "': ";
      stack.step = layout_string(*rule, "step", source, w, stack.rule == sparse_rule::every_step ||
                                                               stack.rule == sparse_rule::switch_step);
      stack.except = layout_string(*rule, "except", source, w);
      stack.first_dense = layout_string(*rule, "first_dense", source, w, stack.rule == sparse_rule::after_dense);
      stack.frequency = layout_string(*rule, "frequency", source, w);
    }
    layout.stacks.push_back(stack);
  }
  const auto dense = root.find("dense_ffn");
  if (dense != root.end()) {  // a dense family: one FFN per layer, no router and no experts
    if (!dense->is_object()) layout_fail(source, "\"dense_ffn\" must be an object");
    for (const char* moe_key : {"router", "experts", "shared_experts"})
      if (root.contains(moe_key))
        layout_fail(source, "it has \"dense_ffn\" (a dense family) and also \"", moe_key, "\"; give one kind");
    layout.dense_gate = layout_string(*dense, "gate", source, "\"dense_ffn\" ", true);
    layout.dense_up = layout_string(*dense, "up", source, "\"dense_ffn\" ");
    layout.dense_down = layout_string(*dense, "down", source, "\"dense_ffn\" ", true);
    for (auto it = dense->begin(); it != dense->end(); ++it)
      if (it.key() != "gate" && it.key() != "up" && it.key() != "down")
        layout_fail(source, "\"dense_ffn\" has the unknown key \"", it.key(), "\" (known: gate, up, down)");
    for (const std::string* n : {&layout.dense_gate, &layout.dense_up, &layout.dense_down})
      check_template(*n, false, false, source, "\"dense_ffn\": ");
  }
  if (!layout.dense()) {  // an MoE family: the router and the experts
    const auto router = root.find("router");
    if (router == root.end() || !router->is_object())
      layout_fail(source, "it lacks the \"router\" object (or \"dense_ffn\" for a dense family)");
    layout.router_weight = layout_string(*router, "weight", source, "\"router\" ", true);
    layout.router_bias = layout_string(*router, "bias", source, "\"router\" ");
    layout.router_correction_bias = layout_string(*router, "correction_bias", source, "\"router\" ");
    const auto experts = root.find("experts");
    if (experts == root.end() || !experts->is_object()) layout_fail(source, "it lacks the \"experts\" object");
    layout.expert_gate_up = layout_string(*experts, "gate_up", source, "\"experts\" ");
    layout.expert_down = layout_string(*experts, "down", source, "\"experts\" ", true);
    if (layout.fused()) {
      if (experts->contains("gate") || experts->contains("up"))
        layout_fail(source, "\"experts\" has \"gate_up\" (fused) and also \"gate\" or \"up\"; give one form");
      check_template(layout.expert_gate_up, false, false, source, "\"experts\": ");
      check_template(layout.expert_down, false, false, source, "\"experts\": ");
    } else {
      layout.expert_gate = layout_string(*experts, "gate", source, "\"experts\" ", true);
      layout.expert_up = layout_string(*experts, "up", source, "\"experts\" ");
      for (const std::string* n : {&layout.expert_gate, &layout.expert_up, &layout.expert_down}) {
        check_template(*n, false, true, source, "\"experts\": ");
        if (!n->empty() && n->find("{expert}") == std::string::npos)
          layout_fail(source, "\"experts\": '", *n, "' must hold {expert}");
      }
    }
    const auto shared = root.find("shared_experts");
    if (shared != root.end()) {
      if (!shared->is_object()) layout_fail(source, "\"shared_experts\" must be an object");
      layout.shared_gate = layout_string(*shared, "gate", source, "\"shared_experts\" ", true);
      layout.shared_up = layout_string(*shared, "up", source, "\"shared_experts\" ");
      layout.shared_down = layout_string(*shared, "down", source, "\"shared_experts\" ", true);
      layout.shared_gate_weight = layout_string(*shared, "gate_weight", source, "\"shared_experts\" ");
    }
  }
  for (auto it = root.begin(); it != root.end(); ++it) {
    static const char* const known[] = {"family", "description", "model_types", "config", "defaults", "stacks",
                                        "router", "experts", "shared_experts", "dense_ffn"};
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) layout_fail(source, "it has the unknown key \"", it.key(), "\"");
  }
  return layout;
}

/// Replaces every "{name}" in `text` with `value`.
inline std::string substitute(std::string text, const char* name, index_t value) {
  const std::string placeholder = std::string("{") + name + "}";
  const std::string replacement = std::to_string(value);
  for (std::size_t at = text.find(placeholder); at != std::string::npos; at = text.find(placeholder, at))
    text.replace(at, placeholder.size(), replacement), at += replacement.size();
  return text;
}

}  // namespace detail
}  // namespace model
MOECOMP_NAMESPACE_END
