#pragma once
// The vocabulary of <moecomp/model/layout.hpp>: a checkpoint layout as a layouts/*.json file states it, and
// the MoE model a layout resolves a checkpoint to. Documentation: docs/compress.md, "Checkpoint layouts".
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/moe/ffn_types.hpp>

#include <map>
#include <string>
#include <string_view>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace model {

/// Which layers of a stack are MoE layers, as the families' modelling code decides (i counts from 0):
///   all          every layer;
///   every_step   (i + 1) % step == 0 and i not in `except` (Qwen2-MoE: decoder_sparse_step, mlp_only_layers);
///   after_dense  i >= first_dense and i % frequency == 0 (DeepSeek: first_k_dense_replace, moe_layer_freq);
///   switch_step  step == 1, or step > 0 and i % step == 1 (Switch Transformers: encoder/decoder_sparse_step;
///                step 0 means none).
enum class sparse_rule { all, every_step, after_dense, switch_step };

inline const char* to_string(sparse_rule rule) noexcept {
  switch (rule) {
    case sparse_rule::all: return "all";
    case sparse_rule::every_step: return "every_step";
    case sparse_rule::after_dense: return "after_dense";
    case sparse_rule::switch_step: return "switch_step";
  }
  return "unknown";
}

/// Parses a rule's name; invalid_argument naming the four otherwise.
inline sparse_rule parse_sparse_rule(std::string_view name) {
  for (sparse_rule r : {sparse_rule::all, sparse_rule::every_step, sparse_rule::after_dense, sparse_rule::switch_step})
    if (name == to_string(r)) return r;
  MOECOMP_FAIL(error_kind::invalid_argument, "parse_sparse_rule: rule must be all, every_step, after_dense or "
               "switch_step, got '", std::string(name), "'");
}

/// Whether layer `layer` is an MoE layer under `rule` with the config's values.
inline bool is_sparse_layer(sparse_rule rule, index_t layer, index_t step, const std::vector<index_t>& except,
                            index_t first_dense, index_t frequency) noexcept {
  switch (rule) {
    case sparse_rule::all: return true;
    case sparse_rule::every_step:
      if (step <= 0 || (layer + 1) % step != 0) return false;
      for (index_t e : except)
        if (e == layer) return false;
      return true;
    case sparse_rule::after_dense: return layer >= first_dense && frequency > 0 && layer % frequency == 0;
    case sparse_rule::switch_step: return step == 1 || (step > 0 && layer % step == 1);
  }
  return false;
}

/// One stack of layers (a decoder; or Switch's encoder and decoder). Every string is a config.json key
/// except `prefix`, the tensor-name prefix with "{layer}" for the layer's index.
struct layout_stack {
  std::string name;
  std::string layers;  // the config key of the stack's layer count
  std::string prefix;
  sparse_rule rule = sparse_rule::all;
  std::string step, except, first_dense, frequency;  // the rule's config keys (empty: not used)
};

/// A checkpoint layout: how a family names its MoE tensors and config keys. Tensor names are relative to the
/// stack's prefix, with "{expert}" for the expert's index.
struct checkpoint_layout {
  std::string family;
  std::string description;
  std::string source;  // the file it was read from
  std::vector<std::string> model_types;
  /// moecomp's field -> the config.json key (num_experts, top_k, hidden_size, expert_size,
  /// shared_expert_size, shared_experts, normalize_top_k, scoring, topk_method, n_group, topk_group,
  /// routed_scaling_factor, activation; ffn_size, a dense family's intermediate size).
  std::map<std::string, std::string> config;
  /// moecomp's field -> its value when the config lacks the key, as JSON text ("true", "1", "\"silu\"").
  std::map<std::string, std::string> defaults;
  std::vector<layout_stack> stacks;
  std::string router_weight, router_bias, router_correction_bias;
  /// Per-expert names (gate, up, down; up empty for ungated experts), or a fused stack: gate_up
  /// (E x 2I x H, gate rows first) and down (E x H x I).
  std::string expert_gate, expert_up, expert_down, expert_gate_up;
  /// Shared experts (one FFN; DeepSeek's n_shared_experts are concatenated into it) and Qwen2-MoE's sigmoid
  /// gate row; all empty when the family has none.
  std::string shared_gate, shared_up, shared_down, shared_gate_weight;
  /// A dense family (its file has "dense_ffn" instead of "router" and "experts"): each layer's one FFN, gate
  /// (d_ff x H), up (d_ff x H; empty when ungated) and down (H x d_ff), relative to the stack's prefix.
  std::string dense_gate, dense_up, dense_down;

  bool fused() const noexcept { return !expert_gate_up.empty(); }
  bool dense() const noexcept { return !dense_gate.empty(); }
};

/// One MoE layer's tensor names in a checkpoint.
struct moe_layer_names {
  std::string stack;
  index_t layer = 0;  // the layer's index within its stack
  std::string router, router_bias, correction_bias;  // empty when absent
  std::vector<std::string> gate, up, down;            // one per expert; up empty for ungated experts
  std::string gate_up, fused_down;                    // the fused form (then gate/up/down are empty)
  std::string shared_gate, shared_up, shared_down, shared_gate_weight;
  /// moecomp's distinct expert storage (compress --expert-storage distinct): the layer's id-map tensor (I64, one
  /// entry per router id: the stored expert it uses) and the experts stored (the names above then list these
  /// stored_experts, 0 .. S-1). Empty and 0 for a checkpoint that stores one expert per router id. The id map is
  /// not in tensor_names(), which lists the float tensors.
  std::string expert_map;
  index_t stored_experts = 0;

  bool fused() const noexcept { return !gate_up.empty(); }
  bool distinct_storage() const noexcept { return !expert_map.empty(); }
  bool has_shared_expert() const noexcept { return !shared_gate.empty(); }
  /// Every tensor name of the layer, in a fixed order: the router's, the experts', the shared expert's.
  std::vector<std::string> tensor_names() const {
    std::vector<std::string> names;
    for (const std::string* n : {&router, &router_bias, &correction_bias, &gate_up, &fused_down})
      if (!n->empty()) names.push_back(*n);
    for (std::size_t e = 0; e < gate.size(); ++e) {
      names.push_back(gate[e]);
      if (!up.empty()) names.push_back(up[e]);
      names.push_back(down[e]);
    }
    for (const std::string* n : {&shared_gate, &shared_up, &shared_down, &shared_gate_weight})
      if (!n->empty()) names.push_back(*n);
    return names;
  }
};

/// A checkpoint resolved by its layout: the family, the routing configuration and every MoE layer.
struct moe_model {
  std::string family;
  std::string model_type;
  std::string layout_source;
  index_t num_experts = 0;
  index_t top_k = 0;
  index_t hidden_size = 0;
  index_t expert_size = 0;         // I: the rows of each expert's gate
  index_t shared_expert_size = 0;  // the rows of the shared FFN's gate (0: no shared expert)
  bool gated = true;               // SwiGLU-style experts with an up projection
  moe::activation activation = moe::activation::silu;
  std::string scoring = "softmax";  // softmax or sigmoid
  bool normalize_top_k = false;
  std::string topk_method = "greedy";
  index_t n_group = 1;
  index_t topk_group = 1;
  double routed_scaling_factor = 1.0;
  std::vector<moe_layer_names> layers;
};

/// One dense FFN layer's tensor names in a checkpoint.
struct dense_layer_names {
  std::string stack;
  index_t layer = 0;
  std::string prefix;          // the stack's prefix for this layer ("model.layers.3.mlp.")
  std::string gate, up, down;  // up empty for an ungated FFN

  std::vector<std::string> tensor_names() const {
    std::vector<std::string> names{gate};
    if (!up.empty()) names.push_back(up);
    names.push_back(down);
    return names;
  }
};

/// A dense checkpoint resolved by a dense family's layout: every layer's FFN (the input of the MoEfication
/// split, <moecomp/cluster/moefication.hpp>).
struct dense_model {
  std::string family;
  std::string model_type;
  std::string layout_source;
  index_t hidden_size = 0;
  index_t ffn_size = 0;  // d_ff: the rows of each layer's gate projection
  bool gated = true;
  moe::activation activation = moe::activation::silu;
  std::vector<dense_layer_names> layers;
};

}  // namespace model
MOECOMP_NAMESPACE_END
