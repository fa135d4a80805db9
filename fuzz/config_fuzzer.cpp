// libFuzzer entry point for config.json and layout selection: moecomp::model::kind_of_model,
// describe_moe_model and describe_dense_model (then routing_of and loading the first layer when a config
// resolves), all against the repository's layouts/*.json and one small synthetic checkpoint that holds
// tensors in the naming of every family (Mixtral per-expert and fused, OLMoE / Qwen2-MoE / DeepSeek under
// mlp., Switch Transformers, dense Mistral/Llama FFNs). The same bytes are also parsed as a layout file, and
// as a layer report from another process (compress::parse_layer_report), which must round-trip when accepted.
// Not part of the CMake build; see fuzz/README.md.
//
// kind_of_model must never throw; everything else must succeed or be refused with moecomp::io_error.
// Anything else (another exception, a crash, a sanitizer report, a long loop or a huge allocation driven
// by a number in the config) is a bug.
//
// The layouts are read from $MOECOMP_LAYOUTS_DIR, else ./layouts (scripts/run-fuzzers.sh runs in the
// repository root); the checkpoint is written once into a temporary directory, removed at exit.
#include <moecomp/compress/compress.hpp>
#include <moecomp/io/safetensors.hpp>
#include <moecomp/model/layout.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

namespace io = moecomp::io;
namespace model = moecomp::model;
using moecomp::index_t;

std::vector<model::checkpoint_layout> layouts;
std::unique_ptr<io::safetensors_checkpoint> checkpoint;
std::filesystem::path directory;

void remove_directory() {
  std::error_code ignored;
  std::filesystem::remove_all(directory, ignored);
}

// E = 2 experts of I = 3 x H = 4, shared experts of 3 rows, dense FFNs of 6; layers 0 and 1 (Switch: block 1).
void write_checkpoint() {
  const index_t E = 2, I = 3, H = 4, F = 6;
  std::map<std::string, std::vector<index_t>> shapes;
  for (int l = 0; l < 2; ++l) {
    const std::string layer = "model.layers." + std::to_string(l) + ".";
    const std::string b = layer + "block_sparse_moe.", m = layer + "mlp.";
    shapes[b + "gate.weight"] = {E, H};
    shapes[m + "gate.weight"] = {E, H};
    shapes[m + "gate.e_score_correction_bias"] = {E};
    for (int e = 0; e < E; ++e) {
      const std::string x = b + "experts." + std::to_string(e) + ".", y = m + "experts." + std::to_string(e) + ".";
      shapes[x + "w1.weight"] = shapes[x + "w3.weight"] = {I, H};
      shapes[x + "w2.weight"] = {H, I};
      shapes[y + "gate_proj.weight"] = shapes[y + "up_proj.weight"] = {I, H};
      shapes[y + "down_proj.weight"] = {H, I};
    }
    shapes[m + "experts.gate_up_proj"] = {E, 2 * I, H};
    shapes[m + "experts.down_proj"] = {E, H, I};
    for (const char* shared : {"shared_expert.", "shared_experts."}) {
      shapes[m + shared + "gate_proj.weight"] = shapes[m + shared + "up_proj.weight"] = {I, H};
      shapes[m + shared + "down_proj.weight"] = {H, I};
    }
    shapes[m + "shared_expert_gate.weight"] = {1, H};
    shapes[m + "gate_proj.weight"] = shapes[m + "up_proj.weight"] = {F, H};
    shapes[m + "down_proj.weight"] = {H, F};
  }
  for (const char* stack : {"encoder.block.1.layer.1.mlp.", "decoder.block.1.layer.2.mlp."}) {
    const std::string s = stack;
    shapes[s + "router.classifier.weight"] = {E, H};
    for (int e = 0; e < E; ++e) {
      shapes[s + "experts.expert_" + std::to_string(e) + ".wi.weight"] = {I, H};
      shapes[s + "experts.expert_" + std::to_string(e) + ".wo.weight"] = {H, I};
    }
  }
  std::vector<std::vector<float>> storage;
  std::vector<io::safetensors_entry> entries;
  for (const auto& [name, shape] : shapes) {
    index_t n = 1;
    for (index_t extent : shape) n *= extent;
    storage.emplace_back(static_cast<std::size_t>(n));
    for (index_t k = 0; k < n; ++k) storage.back()[static_cast<std::size_t>(k)] = 0.25f * static_cast<float>(k % 7) - 0.5f;
    entries.push_back({name, io::safetensors_dtype::f32, shape, storage.back().data()});
  }
  directory = std::filesystem::temp_directory_path() / ("moecomp_config_fuzzer_" + std::to_string(::getpid()));
  std::filesystem::create_directories(directory);
  std::atexit(remove_directory);
  io::write_safetensors((directory / "model.safetensors").string(), entries);
  checkpoint = std::make_unique<io::safetensors_checkpoint>(io::open_safetensors_checkpoint(directory.string()));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* configured = std::getenv("MOECOMP_LAYOUTS_DIR");
  layouts = model::read_checkpoint_layouts(configured != nullptr && *configured != '\0' ? configured : "layouts");
  write_checkpoint();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::string type;
  const model::model_kind kind = model::kind_of_model(layouts, text, &type);  // never throws
  if (kind == model::model_kind::none && !type.empty()) {
    for (const auto& l : layouts)
      for (const auto& t : l.model_types)
        if (t == type) std::abort();  // a known type must have a kind
  }
  try {
    const model::moe_model m = model::describe_moe_model(layouts, text, *checkpoint, "fuzz-config");
    if (m.layers.empty() || kind != model::model_kind::moe) std::abort();
    try {
      (void)model::routing_of(m);
    } catch (const moecomp::io_error&) {
    }
    const model::moe_layer_weights<float> w = model::load_moe_layer<float>(*checkpoint, m, 0);
    if (w.w1.size() != static_cast<std::size_t>(m.num_experts * m.expert_size * m.hidden_size)) std::abort();
  } catch (const moecomp::io_error&) {
  }
  try {
    const model::dense_model m = model::describe_dense_model(layouts, text, *checkpoint, "fuzz-config");
    if (m.layers.empty() || kind != model::model_kind::dense) std::abort();
    const model::dense_ffn_weights<float> w = model::load_dense_ffn<float>(*checkpoint, m, 0);
    if (w.w1.size() != static_cast<std::size_t>(m.ffn_size * m.hidden_size)) std::abort();
  } catch (const moecomp::io_error&) {
  }
  try {
    (void)model::parse_checkpoint_layout(text, "fuzz-layout");
  } catch (const moecomp::io_error&) {
  }
  const nlohmann::ordered_json record = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!record.is_discarded()) {
    try {
      const nlohmann::ordered_json again = moecomp::compress::layer_report_json(moecomp::compress::parse_layer_report(record));
      if (moecomp::compress::layer_report_json(moecomp::compress::parse_layer_report(again)) != again) std::abort();
    } catch (const moecomp::io_error&) {
    }
  }
  return 0;
}
