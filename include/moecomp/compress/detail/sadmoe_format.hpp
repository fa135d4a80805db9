#pragma once
// Reading back what compress --method sadmoe wrote: config.json's moecomp_sadmoe record and each FFN's router
// tensors, checked against the dense model (compress::describe_sadmoe).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/compress/compress_types.hpp>
#include <moecomp/io/safetensors.hpp>
#include <moecomp/model/layout.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace compress {

/// A SADMoE checkpoint's routing: from config.json's `moecomp_sadmoe`, checked against the tensors.
struct sadmoe_description {
  index_t experts = 0, expert_size = 0, router_hidden = 0;
  bool router_bias = false;
  gating::router_objective objective = gating::router_objective::output_norm;
  double tau = 0.5;
  std::vector<std::string> layers;  ///< each FFN's prefix ("model.layers.3.mlp")
};

namespace detail {

inline sadmoe_description describe_sadmoe_host(const std::string& config_text, const io::safetensors_checkpoint& checkpoint,
                                               const model::dense_model& m) {
  constexpr const char* fn = "describe_sadmoe";
  const nlohmann::json config = nlohmann::json::parse(config_text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object() || !config.contains("moecomp_sadmoe") ||
      !config["moecomp_sadmoe"].is_object())
    MOECOMP_FAIL(error_kind::io_error, fn, ": config.json has no moecomp_sadmoe record");
  const nlohmann::json& r = config["moecomp_sadmoe"];
  sadmoe_description d;
  auto whole = [&](const char* key) -> index_t {
    if (!r.contains(key) || !r[key].is_number_integer() || r[key].get<long long>() < 1)
      MOECOMP_FAIL(error_kind::io_error, fn, ": moecomp_sadmoe.", key, " must be a whole number >= 1, got ",
                   r.contains(key) ? r[key].dump() : std::string("nothing"));
    return static_cast<index_t>(r[key].get<long long>());
  };
  d.experts = whole("num_experts");
  d.expert_size = whole("expert_size");
  d.router_hidden = whole("router_hidden");
  if (d.experts * d.expert_size != m.ffn_size)
    MOECOMP_FAIL(error_kind::io_error, fn, ": moecomp_sadmoe has ", d.experts, " experts of ", d.expert_size,
                 " neurons, but the FFN has ", m.ffn_size);
  d.router_bias = r.value("router_bias", false);
  d.objective = gating::parse_router_objective(r.value("objective", std::string("norm")));
  d.tau = r.value("tau", 0.5);
  if (!(d.tau >= 0 && d.tau <= 1))
    MOECOMP_FAIL(error_kind::io_error, fn, ": moecomp_sadmoe.tau must be in [0, 1], got ", d.tau);
  auto require = [&](const std::string& name, std::vector<index_t> shape) {
    if (!checkpoint.contains(name)) MOECOMP_FAIL(error_kind::io_error, fn, ": the checkpoint lacks the router tensor '", name, "'");
    const auto& got = checkpoint.info(name).shape;
    if (got != shape) {
      auto text = [](const std::vector<index_t>& s) {
        std::string t = "(";
        for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
        return t + ")";
      };
      MOECOMP_FAIL(error_kind::io_error, fn, ": router tensor '", name, "' must have the shape ", text(shape), ", got ",
                   text(got));
    }
  };
  for (const model::dense_layer_names& layer : m.layers) {
    std::string prefix = layer.prefix;
    if (!prefix.empty() && prefix.back() == '.') prefix.pop_back();
    d.layers.push_back(prefix);
    require(prefix + ".sadmoe.router.w1", {d.router_hidden, m.hidden_size});
    require(prefix + ".sadmoe.router.w2", {d.experts, d.router_hidden});
    if (d.router_bias) {
      require(prefix + ".sadmoe.router.b1", {d.router_hidden});
      require(prefix + ".sadmoe.router.b2", {d.experts});
    }
  }
  return d;
}

}  // namespace detail
}  // namespace compress
MOECOMP_NAMESPACE_END
