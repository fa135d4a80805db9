// moecomp::model checkpoint layouts: each family of layouts/ on a small synthetic checkpoint written in that
// family's naming (random weights from moecomp's generator), its MoE layers found by the family's rule, its
// routing configuration read, and one layer's weights loaded exactly; every error a user can meet; and the
// embedded trained model (models/tiny-moe), whose MoE layers moecomp runs as its torch forward does.
#include <moecomp/core/context.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/io/npy.hpp>
#include <moecomp/io/safetensors.hpp>
#include <moecomp/model/layout.hpp>
#include <moecomp/moe/layer.hpp>

#include <doctest/doctest.h>

#include "test_files.hpp"
#include "test_special_files.hpp"
#include "test_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace io = moecomp::io;
namespace model = moecomp::model;
using moecomp::bfloat16;
using moecomp::index_t;
using moecomp_test::temp_dir;
using moecomp_test::write_file;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

const std::vector<model::checkpoint_layout>& repository_layouts() {
  static const std::vector<model::checkpoint_layout> layouts = model::read_checkpoint_layouts(MOECOMP_LAYOUTS_DIR);
  return layouts;
}

// A checkpoint under construction: named tensors of random values (float32 or bf16), kept for comparison.
struct synthetic_checkpoint {
  moecomp::random_generator rng{42};
  io::safetensors_dtype dtype = io::safetensors_dtype::f32;
  std::map<std::string, std::vector<float>> values;  // as the file holds them (bf16 values rounded)
  std::map<std::string, std::vector<index_t>> shapes;
  std::vector<std::vector<float>> f32_storage;
  std::vector<std::vector<bfloat16>> bf16_storage;

  void add(const std::string& name, std::vector<index_t> shape) {
    index_t n = 1;
    for (index_t e : shape) n *= e;
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& x : v) x = static_cast<float>(rng.uniform<double>(-1.0, 1.0));
    if (dtype == io::safetensors_dtype::bf16)
      for (float& x : v) x = static_cast<float>(bfloat16(x));
    values[name] = v;
    shapes[name] = std::move(shape);
  }
  std::vector<io::safetensors_entry> entries() {
    std::vector<io::safetensors_entry> result;
    for (const auto& [name, v] : values) {
      if (dtype == io::safetensors_dtype::bf16) {
        bf16_storage.emplace_back();
        for (float x : v) bf16_storage.back().push_back(bfloat16(x));
        result.push_back({name, dtype, shapes[name], bf16_storage.back().data()});
      } else {
        f32_storage.push_back(v);
        result.push_back({name, dtype, shapes[name], f32_storage.back().data()});
      }
    }
    return result;
  }
  void write(const temp_dir& dir, const std::string& config) {
    io::write_safetensors(dir.file("model.safetensors"), entries(), {{"format", "pt"}});
    write_file(dir.file("config.json"), config);
  }
};

model::moe_model describe(const temp_dir& dir) {
  const io::safetensors_checkpoint c = io::open_safetensors_checkpoint(dir.path.string());
  return model::describe_moe_model(repository_layouts(), moecomp_test::read_file(dir.file("config.json")), c,
                                   dir.file("config.json"));
}

std::string describe_error(const temp_dir& dir) {
  try {
    describe(dir);
  } catch (const moecomp::io_error& e) {
    return e.what();
  }
  FAIL_CHECK("expected an io_error");
  return "";
}

std::vector<index_t> layer_indices(const model::moe_model& m, const std::string& stack) {
  std::vector<index_t> result;
  for (const auto& l : m.layers)
    if (l.stack == stack) result.push_back(l.layer);
  return result;
}

// Mixtral-style names: E experts of I x H, per-expert tensors under model.layers.{l}.block_sparse_moe.
void add_mixtral_layer(synthetic_checkpoint& s, index_t layer, index_t E, index_t I, index_t H) {
  const std::string p = "model.layers." + std::to_string(layer) + ".block_sparse_moe.";
  s.add(p + "gate.weight", {E, H});
  for (index_t e = 0; e < E; ++e) {
    const std::string x = p + "experts." + std::to_string(e) + ".";
    s.add(x + "w1.weight", {I, H});
    s.add(x + "w3.weight", {I, H});
    s.add(x + "w2.weight", {H, I});
  }
}

}  // namespace

TEST_CASE("layouts: every file of the repository's layouts/ parses, and each family is there") {
  std::vector<std::string> families;
  for (const auto& l : repository_layouts()) families.push_back(l.family);
  CHECK(families == std::vector<std::string>{"deepseek", "mistral", "mixtral-fused", "mixtral", "olmoe", "qwen2_moe",
                                             "switch_transformers"});
}

TEST_CASE("layouts: Mixtral, per-expert tensors in bf16, loaded exactly as float") {
  temp_dir dir("layout_mixtral");
  synthetic_checkpoint s;
  s.dtype = io::safetensors_dtype::bf16;
  const index_t E = 4, I = 6, H = 5;
  for (index_t l = 0; l < 2; ++l) add_mixtral_layer(s, l, E, I, H);
  s.add("model.embed_tokens.weight", {7, H});  // not an MoE tensor: ignored
  s.write(dir, R"({"model_type": "mixtral", "num_hidden_layers": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
                  "hidden_size": 5, "intermediate_size": 6, "hidden_act": "silu"})");
  const model::moe_model m = describe(dir);
  CHECK(m.family == "mixtral");
  CHECK(m.num_experts == 4);
  CHECK(m.top_k == 2);
  CHECK(m.hidden_size == 5);
  CHECK(m.expert_size == 6);
  CHECK(m.gated);
  CHECK(m.activation == moecomp::moe::activation::silu);
  CHECK(m.scoring == "softmax");
  CHECK(m.normalize_top_k);  // the layout's default: Mixtral always renormalises
  CHECK(layer_indices(m, "decoder") == std::vector<index_t>{0, 1});
  CHECK(m.layers[1].router == "model.layers.1.block_sparse_moe.gate.weight");
  CHECK(m.layers[1].gate[3] == "model.layers.1.block_sparse_moe.experts.3.w1.weight");
  CHECK(m.layers[0].tensor_names().size() == 1 + 3 * 4);

  const io::safetensors_checkpoint c = io::open_safetensors_checkpoint(dir.path.string());
  const auto w = model::load_moe_layer<float>(c, m, 1);
  const auto experts = w.experts_view();
  CHECK(experts.experts() == 4);
  CHECK(experts.d_ff() == 6);
  CHECK(experts.d_model() == 5);
  const auto& w3_of_2 = s.values["model.layers.1.block_sparse_moe.experts.2.w3.weight"];
  const auto& w2_of_3 = s.values["model.layers.1.block_sparse_moe.experts.3.w2.weight"];
  for (index_t i = 0; i < I; ++i)
    for (index_t j = 0; j < H; ++j) {
      CHECK(experts.w3.matrix(2)(i, j) == w3_of_2[static_cast<std::size_t>(i * H + j)]);
      CHECK(experts.w2.matrix(3)(j, i) == w2_of_3[static_cast<std::size_t>(j * I + i)]);
    }
  CHECK(w.router(3, 4) == s.values["model.layers.1.block_sparse_moe.gate.weight"][19]);
  CHECK_FALSE(w.has_shared_expert());
  // bfloat16 storage round-trips bit for bit.
  const auto wb = model::load_moe_layer<bfloat16>(c, m, 0);
  CHECK(static_cast<float>(wb.w1[7]) == s.values["model.layers.0.block_sparse_moe.experts.0.w1.weight"][7]);
}

TEST_CASE("layouts: a dense Mistral or Llama checkpoint, each layer's FFN loaded exactly (moefy's input)") {
  temp_dir dir("layout_dense");
  synthetic_checkpoint s;
  s.dtype = io::safetensors_dtype::bf16;
  const index_t F = 8, H = 5;
  for (index_t l = 0; l < 3; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.";
    s.add(p + "gate_proj.weight", {F, H});
    s.add(p + "up_proj.weight", {F, H});
    s.add(p + "down_proj.weight", {H, F});
    s.add("model.layers." + std::to_string(l) + ".self_attn.q_proj.weight", {H, H});  // not the FFN: ignored
  }
  for (const char* type : {"mistral", "llama", "qwen2"}) {
    CAPTURE(type);
    s.write(dir, std::string(R"({"model_type": ")") + type +
                     R"(", "num_hidden_layers": 3, "hidden_size": 5, "intermediate_size": 8, "hidden_act": "silu"})");
    const io::safetensors_checkpoint c = io::open_safetensors_checkpoint(dir.path.string());
    const model::dense_model m =
        model::describe_dense_model(repository_layouts(), moecomp_test::read_file(dir.file("config.json")), c);
    CHECK(m.family == "mistral");
    CHECK(m.model_type == type);
    CHECK(m.hidden_size == H);
    CHECK(m.ffn_size == F);
    CHECK(m.gated);
    CHECK(m.activation == moecomp::moe::activation::silu);
    REQUIRE(m.layers.size() == 3);
    CHECK(m.layers[2].gate == "model.layers.2.mlp.gate_proj.weight");
    CHECK(m.layers[2].prefix == "model.layers.2.mlp.");
    CHECK(m.layers[2].tensor_names() == std::vector<std::string>{"model.layers.2.mlp.gate_proj.weight",
                                                                 "model.layers.2.mlp.up_proj.weight",
                                                                 "model.layers.2.mlp.down_proj.weight"});
    const auto w = model::load_dense_ffn<float>(c, m, 1);
    const auto ffn = w.view();
    CHECK(ffn.w1.rows() == F);
    CHECK(ffn.w2.rows() == H);
    const auto& up = s.values["model.layers.1.mlp.up_proj.weight"];
    const auto& down = s.values["model.layers.1.mlp.down_proj.weight"];
    for (index_t i = 0; i < F; ++i)
      for (index_t j = 0; j < H; ++j) {
        CHECK(ffn.w3(i, j) == up[static_cast<std::size_t>(i * H + j)]);
        CHECK(ffn.w2(j, i) == down[static_cast<std::size_t>(j * F + i)]);
      }
  }
  // intermediate_size missing: read from the tensors.
  s.write(dir, R"({"model_type": "llama", "num_hidden_layers": 3, "hidden_act": "silu"})");
  {
    const io::safetensors_checkpoint c = io::open_safetensors_checkpoint(dir.path.string());
    const auto m = model::describe_dense_model(repository_layouts(), moecomp_test::read_file(dir.file("config.json")), c);
    CHECK(m.ffn_size == F);
    CHECK(m.hidden_size == H);
    CHECK(contains(moecomp_test::thrown_message([&] { (void)model::load_dense_ffn<float>(c, m, 3); }),
                   "load_dense_ffn: index must be in [0, 3), got 3"));
  }
  // The kind of each model type, as compress and inspect ask it before describing.
  using model::model_kind;
  std::string type;
  CHECK(model::kind_of_model(repository_layouts(), R"({"model_type": "llama"})", &type) == model_kind::dense);
  CHECK(type == "llama");
  CHECK(model::kind_of_model(repository_layouts(), R"({"model_type": "mixtral"})") == model_kind::moe);
  CHECK(model::kind_of_model(repository_layouts(), R"({"model_type": "gpt2"})", &type) == model_kind::none);
  CHECK(type == "gpt2");
  CHECK(model::kind_of_model(repository_layouts(), R"({"model_type": 3})", &type) == model_kind::none);
  CHECK(type.empty());
  CHECK(model::kind_of_model(repository_layouts(), "{") == model_kind::none);
  // A type that both kinds list is MoE.
  auto both = repository_layouts();
  both.front().model_types.push_back("mistral");  // deepseek.json, an MoE layout
  CHECK(model::kind_of_model(both, R"({"model_type": "mistral"})") == model_kind::moe);
  // Each describe function refuses the other kind of model, and says which to use.
  auto dense_error = [&](const std::string& config) {
    write_file(dir.file("config.json"), config);
    const io::safetensors_checkpoint c = io::open_safetensors_checkpoint(dir.path.string());
    try {
      model::describe_dense_model(repository_layouts(), config, c, "config.json");
    } catch (const moecomp::io_error& e) {
      return std::string(e.what());
    }
    FAIL_CHECK("expected an io_error");
    return std::string();
  };
  write_file(dir.file("config.json"), R"({"model_type": "mistral", "num_hidden_layers": 3})");
  CHECK(contains(describe_error(dir), "describe_moe_model: model_type 'mistral' is a dense family (the mistral layout"));
  CHECK(contains(dense_error(R"({"model_type": "mixtral", "num_hidden_layers": 3})"),
                 "describe_dense_model: model_type 'mixtral' is an MoE family (the mixtral-fused layout"));
  CHECK(contains(dense_error(R"({"model_type": "gpt2", "num_hidden_layers": 3})"),
                 "unknown architecture: no dense checkpoint layout maps model_type 'gpt2' (the dense layouts know llama, "
                 "mistral, qwen2)"));
  CHECK(contains(dense_error(R"({"model_type": "mistral", "num_hidden_layers": 4})"),
                 "no layout of model_type 'mistral' fits the checkpoint: the mistral layout ('"));
  CHECK(contains(dense_error(R"({"model_type": "mistral", "num_hidden_layers": 4})"),
                 "needs 'model.layers.3.mlp.gate_proj.weight'"));
  CHECK(contains(dense_error(R"({"model_type": "mistral", "num_hidden_layers": 3, "intermediate_size": 9})"),
                 "tensor 'model.layers.0.mlp.gate_proj.weight' (the FFN's gate projection) must have the shape [9, 5], "
                 "got [8, 5]"));
  CHECK(contains(dense_error(R"({"model_type": "mistral", "num_hidden_layers": 3, "hidden_act": "mish"})"),
                 "describe_dense_model: config 'config.json' has the activation 'mish'"));
  CHECK(contains(dense_error(R"({"model_type": "mistral"})"), "lacks \"num_hidden_layers\""));
}

TEST_CASE("layouts: map_moe_layer reads a bf16 layer in place, the same values as load_moe_layer, no copy") {
  temp_dir dir("layout_map");
  synthetic_checkpoint s;
  s.dtype = io::safetensors_dtype::bf16;
  const index_t E = 4, I = 6, H = 5;
  for (index_t l = 0; l < 2; ++l) add_mixtral_layer(s, l, E, I, H);
  s.write(dir, R"({"model_type": "mixtral", "num_hidden_layers": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
                  "hidden_size": 5, "intermediate_size": 6, "hidden_act": "silu"})");
  const model::moe_model m = describe(dir);
  const io::safetensors_checkpoint c = io::open_safetensors_checkpoint(dir.path.string());
  CHECK(model::can_map_moe_layer<bfloat16>(c, m, 1));
  CHECK_FALSE(model::can_map_moe_layer<float>(c, m, 1));  // stored as BF16: float needs a conversion
  const auto mapped = model::map_moe_layer<bfloat16>(c, m, 1);
  const auto loaded = model::load_moe_layer<bfloat16>(c, m, 1);
  CHECK(mapped.in_place());
  CHECK(mapped.w1.empty());  // nothing copied
  CHECK_FALSE(loaded.in_place());
  const auto a = mapped.experts_view(), b = loaded.experts_view();
  CHECK(a.w1.is_gathered());
  for (index_t e = 0; e < E; ++e) {
    // Each matrix is the tensor's own bytes in the file.
    const std::string x = "model.layers.1.block_sparse_moe.experts." + std::to_string(e) + ".";
    CHECK(static_cast<const void*>(a.w1.matrix_ptr(e)) == c.tensor(x + "w1.weight").data());
    CHECK(static_cast<const void*>(a.w2.matrix_ptr(e)) == c.tensor(x + "w2.weight").data());
    for (index_t i = 0; i < I; ++i)
      for (index_t j = 0; j < H; ++j) {
        CHECK(static_cast<float>(a.w1(e, i, j)) == static_cast<float>(b.w1(e, i, j)));
        CHECK(static_cast<float>(a.w3(e, i, j)) == static_cast<float>(b.w3(e, i, j)));
        CHECK(static_cast<float>(a.w2(e, j, i)) == static_cast<float>(b.w2(e, j, i)));
      }
  }
  CHECK(mapped.router(3, 4) == loaded.router(3, 4));
  auto dropped = model::map_moe_layer<bfloat16>(c, m, 0);
  dropped.drop_experts();
  CHECK_FALSE(dropped.in_place());
  CHECK(moecomp_test::thrown_message([&] { (void)model::map_moe_layer<float>(c, m, 0); }) ==
        "map_moe_layer: layer 0's experts must be stored as F32 at aligned addresses on a little-endian host "
        "(can_map_moe_layer), got: tensor 'model.layers.0.block_sparse_moe.experts.0.w1.weight' is BF16");
}

TEST_CASE("layouts: Mixtral with fused 3-D expert tensors splits gate rows from up rows") {
  temp_dir dir("layout_fused");
  synthetic_checkpoint s;
  const index_t E = 3, I = 4, H = 5;
  s.add("model.layers.0.mlp.gate.weight", {E, H});
  s.add("model.layers.0.mlp.experts.gate_up_proj", {E, 2 * I, H});
  s.add("model.layers.0.mlp.experts.down_proj", {E, H, I});
  s.write(dir, R"({"model_type": "mixtral", "num_hidden_layers": 1, "num_local_experts": 3, "num_experts_per_tok": 2,
                  "hidden_size": 5, "intermediate_size": 4, "hidden_act": "silu"})");
  const model::moe_model m = describe(dir);
  CHECK(m.family == "mixtral-fused");
  REQUIRE(m.layers.size() == 1);
  CHECK(m.layers[0].fused());
  const io::safetensors_checkpoint c = io::open_safetensors_checkpoint(dir.path.string());
  const auto w = model::load_moe_layer<double>(c, m, 0);
  const auto& gate_up = s.values["model.layers.0.mlp.experts.gate_up_proj"];
  const auto& down = s.values["model.layers.0.mlp.experts.down_proj"];
  // Read in place (F32 as float), each expert's gate and up rows are addresses inside the one fused tensor.
  REQUIRE(model::can_map_moe_layer<float>(c, m, 0));
  const auto mapped = model::map_moe_layer<float>(c, m, 0);
  for (index_t e = 0; e < E; ++e) {
    CHECK(static_cast<const void*>(mapped.experts_view().w3.matrix_ptr(e)) ==
          c.tensor("model.layers.0.mlp.experts.gate_up_proj").data() + 4 * (e * 2 * I + I) * H);
    for (index_t i = 0; i < I; ++i)
      for (index_t j = 0; j < H; ++j) {
        CHECK(w.experts_view().w1.matrix(e)(i, j) == gate_up[static_cast<std::size_t>((e * 2 * I + i) * H + j)]);
        CHECK(w.experts_view().w3.matrix(e)(i, j) == gate_up[static_cast<std::size_t>((e * 2 * I + I + i) * H + j)]);
        CHECK(w.experts_view().w2.matrix(e)(j, i) == down[static_cast<std::size_t>((e * H + j) * I + i)]);
        CHECK(mapped.experts_view().w1(e, i, j) == w.experts_view().w1(e, i, j));
        CHECK(mapped.experts_view().w3(e, i, j) == w.experts_view().w3(e, i, j));
        CHECK(mapped.experts_view().w2(e, j, i) == w.experts_view().w2(e, j, i));
      }
  }
}

TEST_CASE("layouts: Qwen2-MoE's sparse step, mlp_only_layers, norm_topk_prob and the gated shared expert") {
  temp_dir dir("layout_qwen");
  synthetic_checkpoint s;
  const index_t E = 4, I = 3, H = 6, S = 8;
  for (index_t l : {1, 5}) {  // 6 layers, step 2 -> 1, 3, 5; layer 3 is in mlp_only_layers
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.";
    s.add(p + "gate.weight", {E, H});
    for (index_t e = 0; e < E; ++e)
      for (const char* w : {"gate_proj", "up_proj"}) s.add(p + "experts." + std::to_string(e) + "." + w + ".weight", {I, H});
    for (index_t e = 0; e < E; ++e) s.add(p + "experts." + std::to_string(e) + ".down_proj.weight", {H, I});
    s.add(p + "shared_expert.gate_proj.weight", {S, H});
    s.add(p + "shared_expert.up_proj.weight", {S, H});
    s.add(p + "shared_expert.down_proj.weight", {H, S});
    s.add(p + "shared_expert_gate.weight", {1, H});
  }
  s.add("model.layers.3.mlp.gate_proj.weight", {10, H});  // a dense layer
  s.write(dir, R"({"model_type": "qwen2_moe", "num_hidden_layers": 6, "num_experts": 4, "num_experts_per_tok": 2,
                  "hidden_size": 6, "moe_intermediate_size": 3, "shared_expert_intermediate_size": 8,
                  "decoder_sparse_step": 2, "mlp_only_layers": [3], "norm_topk_prob": true, "hidden_act": "silu"})");
  const model::moe_model m = describe(dir);
  CHECK(m.family == "qwen2_moe");
  CHECK(layer_indices(m, "decoder") == std::vector<index_t>{1, 5});
  CHECK(m.normalize_top_k);
  CHECK(m.shared_expert_size == 8);
  CHECK(m.layers[0].has_shared_expert());
  CHECK(m.layers[0].shared_gate_weight == "model.layers.1.mlp.shared_expert_gate.weight");
  const io::safetensors_checkpoint c = io::open_safetensors_checkpoint(dir.path.string());
  const auto w = model::load_moe_layer<float>(c, m, 1);
  REQUIRE(w.has_shared_expert());
  CHECK(w.shared_expert_view().w2(5, 7) == s.values["model.layers.5.mlp.shared_expert.down_proj.weight"][47]);
  CHECK(w.shared_gate == s.values["model.layers.5.mlp.shared_expert_gate.weight"]);
}

TEST_CASE("layouts: DeepSeek-V3's dense first layers, sigmoid scores, selection bias, groups and shared experts") {
  temp_dir dir("layout_deepseek");
  synthetic_checkpoint s;
  const index_t E = 8, I = 2, H = 4;
  for (index_t l = 1; l < 3; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.";
    s.add(p + "gate.weight", {E, H});
    s.add(p + "gate.e_score_correction_bias", {E});
    for (index_t e = 0; e < E; ++e) {
      const std::string x = p + "experts." + std::to_string(e) + ".";
      s.add(x + "gate_proj.weight", {I, H});
      s.add(x + "up_proj.weight", {I, H});
      s.add(x + "down_proj.weight", {H, I});
    }
    s.add(p + "shared_experts.gate_proj.weight", {2 * I, H});
    s.add(p + "shared_experts.up_proj.weight", {2 * I, H});
    s.add(p + "shared_experts.down_proj.weight", {H, 2 * I});
  }
  s.write(dir, R"({"model_type": "deepseek_v3", "num_hidden_layers": 3, "n_routed_experts": 8, "num_experts_per_tok": 2,
                  "hidden_size": 4, "moe_intermediate_size": 2, "n_shared_experts": 2, "first_k_dense_replace": 1,
                  "moe_layer_freq": 1, "scoring_func": "sigmoid", "topk_method": "noaux_tc", "n_group": 4,
                  "topk_group": 2, "routed_scaling_factor": 2.5, "norm_topk_prob": true, "hidden_act": "silu"})");
  const model::moe_model m = describe(dir);
  CHECK(m.family == "deepseek");
  CHECK(layer_indices(m, "decoder") == std::vector<index_t>{1, 2});
  CHECK(m.scoring == "sigmoid");
  CHECK(m.topk_method == "noaux_tc");
  CHECK(m.n_group == 4);
  CHECK(m.topk_group == 2);
  CHECK(m.routed_scaling_factor == 2.5);
  CHECK(m.shared_expert_size == 4);
  CHECK(m.layers[0].correction_bias == "model.layers.1.mlp.gate.e_score_correction_bias");
  const io::safetensors_checkpoint c = io::open_safetensors_checkpoint(dir.path.string());
  const auto w = model::load_moe_layer<float>(c, m, 0);
  CHECK(w.correction_bias == s.values["model.layers.1.mlp.gate.e_score_correction_bias"]);
  CHECK(w.shared_d_ff == 4);

  // The routing parameters that reproduce the router: DeepSeek-V3's rule.
  const auto routing = model::routing_of(m);
  CHECK(routing.rule == moecomp::gating::routing_rule::deepseek_v3);
  CHECK(routing.scores == moecomp::gating::score_function::sigmoid);
  CHECK(routing.top_k == 2);
  CHECK(routing.renormalize);
  CHECK(routing.n_group == 4);
  CHECK(routing.topk_group == 2);
  CHECK(routing.routed_scaling_factor == 2.5);
  // DeepSeek-V2: greedy with a factor is group-limited greedy over one group; without one, plain top-k.
  model::moe_model v2 = m;
  v2.topk_method = "greedy";
  v2.scoring = "softmax";
  v2.routed_scaling_factor = 16.0;
  CHECK(model::routing_of(v2).rule == moecomp::gating::routing_rule::group_limited_greedy);
  CHECK(model::routing_of(v2).n_group == 1);
  CHECK(model::routing_of(v2).routed_scaling_factor == 16.0);
  v2.routed_scaling_factor = 1.0;
  CHECK(model::routing_of(v2).rule == moecomp::gating::routing_rule::top_k);
  v2.topk_method = "sparse_magic";
  try {
    (void)model::routing_of(v2);
    FAIL("expected an io_error");
  } catch (const moecomp::io_error& e) {
    CHECK(contains(e.what(), "topk_method 'sparse_magic' is not one moecomp implements"));
  }
}

TEST_CASE("layouts: OLMoE's defaults, and Switch Transformers' two stacks of ungated ReLU experts, top-1") {
  SUBCASE("OLMoE") {
    temp_dir dir("layout_olmoe");
    synthetic_checkpoint s;
    const std::string p = "model.layers.0.mlp.";
    s.add(p + "gate.weight", {2, 3});
    for (int e = 0; e < 2; ++e)
      for (const char* w : {"gate_proj", "up_proj"}) s.add(p + "experts." + std::to_string(e) + "." + w + ".weight", {4, 3});
    for (int e = 0; e < 2; ++e) s.add(p + "experts." + std::to_string(e) + ".down_proj.weight", {3, 4});
    s.write(dir, R"({"model_type": "olmoe", "num_hidden_layers": 1, "num_experts": 2, "num_experts_per_tok": 1,
                    "hidden_size": 3, "intermediate_size": 4, "hidden_act": "silu"})");
    const model::moe_model m = describe(dir);
    CHECK(m.family == "olmoe");
    CHECK_FALSE(m.normalize_top_k);  // norm_topk_prob absent: OLMoE's default, false
  }
  SUBCASE("Switch Transformers") {
    temp_dir dir("layout_switch");
    synthetic_checkpoint s;
    const index_t E = 4, F = 6, H = 5;
    auto add_block = [&](const std::string& p) {
      s.add(p + "router.classifier.weight", {E, H});
      for (index_t e = 0; e < E; ++e) {
        s.add(p + "experts.expert_" + std::to_string(e) + ".wi.weight", {F, H});
        s.add(p + "experts.expert_" + std::to_string(e) + ".wo.weight", {H, F});
      }
    };
    add_block("encoder.block.1.layer.1.mlp.");
    add_block("encoder.block.3.layer.1.mlp.");
    add_block("decoder.block.1.layer.2.mlp.");
    s.write(dir, R"({"model_type": "switch_transformers", "num_layers": 4, "num_decoder_layers": 2, "num_experts": 4,
                    "d_model": 5, "d_ff": 6, "encoder_sparse_step": 2, "decoder_sparse_step": 2,
                    "dense_act_fn": "relu"})");
    const model::moe_model m = describe(dir);
    CHECK(m.family == "switch_transformers");
    CHECK(layer_indices(m, "encoder") == std::vector<index_t>{1, 3});
    CHECK(layer_indices(m, "decoder") == std::vector<index_t>{1});
    CHECK(m.top_k == 1);
    CHECK_FALSE(m.gated);
    CHECK(m.activation == moecomp::moe::activation::relu);
    CHECK(m.layers[0].router_bias.empty());  // router_bias is off in Switch's config: no such tensor
    const io::safetensors_checkpoint c = io::open_safetensors_checkpoint(dir.path.string());
    const auto w = model::load_moe_layer<float>(c, m, 2);
    CHECK(w.w3.empty());
    CHECK_FALSE(w.experts_view().gated());
    CHECK(w.experts_view().w1.matrix(3)(5, 4) == s.values["decoder.block.1.layer.2.mlp.experts.expert_3.wi.weight"][29]);
  }
}

TEST_CASE("layouts: a sharded checkpoint resolves through its index") {
  temp_dir dir("layout_sharded");
  synthetic_checkpoint s;
  for (index_t l = 0; l < 2; ++l) add_mixtral_layer(s, l, 2, 3, 4);
  const auto entries = s.entries();
  io::safetensors_sharded_writer writer(dir.path.string());
  std::vector<io::safetensors_entry> first, second;
  for (const auto& e : entries) (e.name.rfind("model.layers.0.", 0) == 0 ? first : second).push_back(e);
  writer.write_shard(first);
  writer.write_shard(second);
  writer.finish();
  write_file(dir.file("config.json"), R"({"model_type": "mixtral", "num_hidden_layers": 2, "num_local_experts": 2,
      "num_experts_per_tok": 2, "hidden_size": 4, "intermediate_size": 3, "hidden_act": "silu"})");
  const model::moe_model m = describe(dir);
  CHECK(m.layers.size() == 2);
  const io::safetensors_checkpoint c = io::open_safetensors_checkpoint(dir.path.string());
  CHECK(model::load_moe_layer<float>(c, m, 1).w2[5] == s.values["model.layers.1.block_sparse_moe.experts.0.w2.weight"][5]);
}

TEST_CASE("layouts: errors name what is missing") {
  temp_dir dir("layout_errors");
  synthetic_checkpoint s;
  add_mixtral_layer(s, 0, 2, 3, 4);
  const std::string good = R"({"model_type": "mixtral", "num_hidden_layers": 1, "num_local_experts": 2,
      "num_experts_per_tok": 2, "hidden_size": 4, "intermediate_size": 3, "hidden_act": "silu"})";
  s.write(dir, good);
  REQUIRE_NOTHROW(describe(dir));

  SUBCASE("an unknown architecture names the model_type and the known ones") {
    write_file(dir.file("config.json"), R"({"model_type": "jamba", "num_hidden_layers": 1})");
    const std::string message = describe_error(dir);
    CHECK_MESSAGE(contains(message, "unknown architecture: no checkpoint layout maps model_type 'jamba' (the MoE "
                                    "layouts know deepseek_v2, deepseek_v3, mixtral, olmoe, qwen2_moe, switch_transformers)"),
                  message);
  }
  SUBCASE("a checkpoint that no layout of its type fits names each layout's missing tensor") {
    write_file(dir.file("config.json"), R"({"model_type": "olmoe", "num_hidden_layers": 1, "num_experts": 2,
        "num_experts_per_tok": 2, "intermediate_size": 3, "hidden_act": "silu"})");
    const std::string message = describe_error(dir);
    CHECK_MESSAGE(contains(message, "no layout of model_type 'olmoe' fits the checkpoint: the olmoe layout"), message);
    CHECK(contains(message, "needs 'model.layers.0.mlp.gate.weight', which"));
  }
  SUBCASE("a config without a key the layout needs") {
    write_file(dir.file("config.json"), R"({"model_type": "mixtral", "num_hidden_layers": 1, "num_experts_per_tok": 2,
        "hidden_act": "silu"})");
    CHECK(contains(describe_error(dir), "lacks \"num_local_experts\" (the mixtral-fused layout's num_experts)"));
    write_file(dir.file("config.json"), R"({"model_type": "mixtral", "num_local_experts": 2, "num_experts_per_tok": 2})");
    CHECK(contains(describe_error(dir), "lacks \"num_hidden_layers\""));
    write_file(dir.file("config.json"), R"({"num_local_experts": 2})");
    CHECK(contains(describe_error(dir), "lacks the string \"model_type\""));
    write_file(dir.file("config.json"), "{");
    CHECK(contains(describe_error(dir), "is not valid JSON"));
  }
  SUBCASE("config values out of range or of the wrong type") {
    write_file(dir.file("config.json"), R"({"model_type": "mixtral", "num_hidden_layers": 1, "num_local_experts": 2,
        "num_experts_per_tok": 3, "hidden_act": "silu"})");
    CHECK(contains(describe_error(dir), "gives 2 experts and top-k 3; it needs 1 <= top_k <= experts"));
    write_file(dir.file("config.json"), R"({"model_type": "mixtral", "num_hidden_layers": 1, "num_local_experts": -2,
        "num_experts_per_tok": 2, "hidden_act": "silu"})");
    CHECK(contains(describe_error(dir), "key \"num_local_experts\" must be a non-negative integer, got -2"));
    write_file(dir.file("config.json"), R"({"model_type": "mixtral", "num_hidden_layers": 1, "num_local_experts": 2,
        "num_experts_per_tok": 2, "hidden_act": "mish"})");
    CHECK(contains(describe_error(dir), "has the activation 'mish', which moecomp does not compute"));
  }
  SUBCASE("a tensor of the wrong shape") {
    write_file(dir.file("config.json"), R"({"model_type": "mixtral", "num_hidden_layers": 1, "num_local_experts": 2,
        "num_experts_per_tok": 2, "hidden_size": 4, "intermediate_size": 5, "hidden_act": "silu"})");
    CHECK(contains(describe_error(dir), "tensor 'model.layers.0.block_sparse_moe.experts.0.w1.weight' (an expert's gate "
                                        "projection) must have the shape [5, 4], got [3, 4]"));
  }
  SUBCASE("a malformed layout file names the file and the key") {
    auto refused = [](const std::string& text) {
      try {
        model::parse_checkpoint_layout(text, "bad.json");
      } catch (const moecomp::io_error& e) {
        return std::string(e.what());
      }
      FAIL_CHECK("expected an io_error");
      return std::string();
    };
    const std::string minimal = R"("family": "x", "model_types": ["x"], "stacks": [{"name": "d", "layers": "n", "prefix": "l.{layer}."}], "router": {"weight": "g"}, "experts": {"gate": "e.{expert}.a", "down": "e.{expert}.b"})";
    CHECK_NOTHROW(model::parse_checkpoint_layout("{" + minimal + "}"));
    CHECK(contains(refused("{" + minimal + R"(, "extra": 1})"), "checkpoint layout 'bad.json' is not valid: it has the unknown key \"extra\""));
    CHECK(contains(refused("{" + minimal + R"(, "config": {"experts": "n"}})"), "\"config\" has the unknown field \"experts\""));
    CHECK(contains(refused(R"({"family": "x", "model_types": []})"), "\"model_types\" must be a non-empty array"));
    CHECK(contains(refused(R"({"family": "x", "model_types": ["x"], "stacks": [{"name": "d", "layers": "n", "prefix": "l.{layer}.", "sparse_layers": {"rule": "odd"}}]})"),
                   "the rule 'odd' is not one of all, every_step, after_dense, switch_step"));
    CHECK(contains(refused(R"({"family": "x", "model_types": ["x"], "stacks": [{"name": "d", "layers": "n", "prefix": "l."}]})"),
                   "the prefix must hold {layer}"));
    CHECK(contains(refused(R"({"family": "x", "model_types": ["x"], "stacks": [{"name": "d", "layers": "n", "prefix": "l.{layer}."}], "router": {"weight": "g"}, "experts": {"gate": "e.a", "down": "e.{expert}.b"}})"),
                   "'e.a' must hold {expert}"));
    CHECK(contains(refused(R"({"family": "x", "model_types": ["x"], "stacks": [{"name": "d", "layers": "n", "prefix": "l.{layer}.{expert}"}]})"),
                   "has the placeholder {expert}, which is not allowed there"));
    CHECK(contains(refused("[1]"), "checkpoint layout 'bad.json' must be a JSON object"));
    // Dense families: "dense_ffn" instead of "router" and "experts", never both.
    const std::string dense = R"("family": "x", "model_types": ["x"], "stacks": [{"name": "d", "layers": "n", "prefix": "l.{layer}."}])";
    const auto parsed = model::parse_checkpoint_layout("{" + dense + R"(, "dense_ffn": {"gate": "g", "down": "d"}})");
    CHECK(parsed.dense());
    CHECK(parsed.dense_up.empty());
    CHECK(contains(refused("{" + dense + "}"), "it lacks the \"router\" object (or \"dense_ffn\" for a dense family)"));
    CHECK(contains(refused("{" + dense + R"(, "dense_ffn": {"gate": "g", "down": "d"}, "router": {"weight": "r"}})"),
                   "it has \"dense_ffn\" (a dense family) and also \"router\"; give one kind"));
    CHECK(contains(refused("{" + dense + R"(, "dense_ffn": {"gate": "g", "down": "d", "bias": "b"}})"),
                   "\"dense_ffn\" has the unknown key \"bias\" (known: gate, up, down)"));
    CHECK(contains(refused("{" + dense + R"(, "dense_ffn": {"down": "d"}})"), "\"dense_ffn\" lacks \"gate\""));
    CHECK(contains(refused("{" + dense + R"(, "dense_ffn": {"gate": "e.{expert}", "down": "d"}})"),
                   "has the placeholder {expert}, which is not allowed there"));
  }
  SUBCASE("load_moe_layer refuses an index out of range") {
    const io::safetensors_checkpoint c = io::open_safetensors_checkpoint(dir.path.string());
    const model::moe_model m = describe(dir);
    const std::string message = moecomp_test::thrown_message([&] { (void)model::load_moe_layer<float>(c, m, 1); });
    CHECK(contains(message, "load_moe_layer: index must be in [0, 1), got 1"));
  }
}

TEST_CASE("layouts: the sparse-layer rules as each family's modelling code states them") {
  using model::sparse_rule;
  auto layers = [](sparse_rule rule, index_t count, index_t step, std::vector<index_t> except, index_t first, index_t freq) {
    std::vector<index_t> result;
    for (index_t i = 0; i < count; ++i)
      if (model::is_sparse_layer(rule, i, step, except, first, freq)) result.push_back(i);
    return result;
  };
  CHECK(layers(sparse_rule::all, 3, 1, {}, 0, 1) == std::vector<index_t>{0, 1, 2});
  CHECK(layers(sparse_rule::every_step, 8, 1, {}, 0, 1) == std::vector<index_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(layers(sparse_rule::every_step, 8, 2, {5}, 0, 1) == std::vector<index_t>{1, 3, 7});
  CHECK(layers(sparse_rule::after_dense, 6, 1, {}, 1, 1) == std::vector<index_t>{1, 2, 3, 4, 5});
  CHECK(layers(sparse_rule::after_dense, 8, 1, {}, 3, 2) == std::vector<index_t>{4, 6});
  CHECK(layers(sparse_rule::switch_step, 6, 2, {}, 0, 1) == std::vector<index_t>{1, 3, 5});
  CHECK(layers(sparse_rule::switch_step, 6, 4, {}, 0, 1) == std::vector<index_t>{1, 5});
  CHECK(layers(sparse_rule::switch_step, 3, 1, {}, 0, 1) == std::vector<index_t>{0, 1, 2});
  CHECK(layers(sparse_rule::switch_step, 3, 0, {}, 0, 1).empty());
  CHECK(model::parse_sparse_rule("after_dense") == sparse_rule::after_dense);
  CHECK(contains(moecomp_test::thrown_message([] { (void)model::parse_sparse_rule("x"); }), "got 'x'"));
}

// ------------------------------------------------------------- the embedded model against torch

TEST_CASE("layouts: the embedded model's MoE layers, loaded and run by moecomp, match its torch forward") {
  const std::string dir = std::string(MOECOMP_MODELS_DIR) + "/tiny-moe";
  const io::safetensors_checkpoint c = io::open_safetensors_checkpoint(dir);
  const model::moe_model m =
      model::describe_moe_model(repository_layouts(), model::read_text_file(dir + "/config.json"), c, dir + "/config.json");
  CHECK(m.family == "mixtral");
  CHECK(m.layers.size() == 4);
  CHECK(m.num_experts == 8);
  CHECK(m.top_k == 2);
  CHECK(m.normalize_top_k);
  const io::safetensors_file calibration = io::read_safetensors(dir + "/calibration.safetensors");

  temp_dir scratch("layout_embedded");
  const std::string script = std::string("import sys\nsys.path.insert(0, '") + MOECOMP_MODELS_DIR + "')\n" + R"PY(
try:
    import numpy as np
    import torch
    import tiny_moe
except ImportError:
    sys.exit(77)
torch.set_num_threads(1)
out = sys.argv[1]
w, config = tiny_moe.load(MODEL_DIR)
inputs = tiny_moe.read_safetensors(MODEL_DIR + '/calibration.safetensors')
with torch.no_grad():
    for layer in range(config['num_hidden_layers']):
        x = inputs[f'layers.{layer}.moe_input'].float()
        y, _ = tiny_moe.moe_block(x, w, f'model.layers.{layer}.block_sparse_moe.', config)
        np.save(f'{out}/y{layer}.npy', y.double().numpy())
)PY";
  std::string log;
  const int code = moecomp_test::run_python(scratch, "MODEL_DIR = '" + dir + "'\n" + script, log);
  if (moecomp_test::skip_without_peer(code, log, "torch")) return;
  REQUIRE_MESSAGE(code == 0, log);

  const moecomp::host_context ctx(2);
  moecomp::moe::moe_layer_params params;
  params.routing = model::routing_of(m);
  params.ffn.act = m.activation;
  for (index_t layer = 0; layer < 4; ++layer) {
    const auto w = model::load_moe_layer<float>(c, m, layer);
    moecomp::moe::moe_layer_view<float> view;
    view.router = w.router.const_view();
    view.experts = w.experts_view();
    const auto x = calibration.tensor("layers." + std::to_string(layer) + ".moe_input").to_matrix<float>();
    moecomp::host_matrix<float> y(x.rows(), x.cols());
    moecomp::moe::moe_layer_forward<float>(ctx, params, view, x.const_view(), y.view());
    const auto want = io::read_npy(scratch.file("y" + std::to_string(layer) + ".npy")).to_matrix<double>();
    REQUIRE(want.rows() == y.rows());
    double worst = 0, scale = 0;
    for (index_t i = 0; i < y.size(); ++i) {
      worst = std::max(worst, std::abs(static_cast<double>(y.data()[i]) - want.data()[i]));
      scale = std::max(scale, std::abs(want.data()[i]));
    }
    CHECK_MESSAGE(worst <= 1e-5 * scale, "layer " << layer << ": max |moecomp - torch| " << worst << " of " << scale);
  }
}

TEST_CASE("layouts: read_text_file reads regular files only, up to its limit") {
  temp_dir dir("layout_text_special");
  using moecomp_test::io_error_within;
  auto starts = [](const std::string& text, const std::string& start) { return text.find(start) == 0; };
  const std::string fifo = dir.file("config.json");
  if (moecomp_test::make_fifo(fifo)) {
    const std::string m = io_error_within([fifo] { model::read_text_file(fifo); }, fifo);
    CHECK_MESSAGE(starts(m, "read_text_file: cannot read '" + fifo + "': it is a FIFO, not a regular file"), m);
    // describe's usual caller: a FIFO as config.json of a checkpoint directory fails the same way.
    std::filesystem::remove(fifo);
  }
  const std::string d = dir.path.string();
  const std::string m = io_error_within([d] { model::read_text_file(d); });
  CHECK_MESSAGE(starts(m, "read_text_file: cannot read '" + d + "': it is a directory, not a regular file"), m);
  if (moecomp_test::have_dev_zero()) {
    const std::string zero = io_error_within([] { model::read_text_file("/dev/zero"); });
    CHECK_MESSAGE(starts(zero, "read_text_file: cannot read '/dev/zero': it is a character device"), zero);
  }
  write_file(dir.file("config.json"), "0123456789");
  CHECK(model::read_text_file(dir.file("config.json"), 10) == "0123456789");
  const std::string path = dir.file("config.json");
  const std::string big = io_error_within([path] { model::read_text_file(path, 9); });
  CHECK_MESSAGE(starts(big, "read_text_file: cannot read '" + path + "': the file is 10 bytes, larger than the "
                            "9-byte limit"),
                big);
  const std::string missing = io_error_within([&dir] { model::read_text_file(dir.file("nothere.json")); });
  CHECK_MESSAGE(starts(missing, "read_text_file: cannot open '" + dir.file("nothere.json") + "': No such file"), missing);
  CHECK(io::text_file_limit == 64u << 20);
}

TEST_CASE("layouts: a NaN or an infinity in a layer's weights is an io_error naming the tensor and the element") {
  temp_dir dir("layout_nonfinite");
  const std::string config = R"({"model_type": "mixtral", "num_hidden_layers": 1, "num_local_experts": 4,
      "num_experts_per_tok": 2, "hidden_size": 8, "intermediate_size": 6, "hidden_act": "silu"})";
  auto load_error = [&](synthetic_checkpoint& s) {
    s.write(dir, config);
    const io::safetensors_checkpoint c = io::open_safetensors_checkpoint(dir.path.string());
    const model::moe_model m = model::describe_moe_model(repository_layouts(), config, c);
    try {
      (void)model::load_moe_layer<float>(c, m, 0);
    } catch (const moecomp::io_error& e) {
      return std::string(e.what());
    }
    FAIL_CHECK("expected an io_error");
    return std::string();
  };
  const std::string p = "model.layers.0.block_sparse_moe.";
  for (const auto dtype : {io::safetensors_dtype::f32, io::safetensors_dtype::bf16}) {
    CAPTURE(io::to_string(dtype));
    {
      synthetic_checkpoint s;
      s.dtype = dtype;
      add_mixtral_layer(s, 0, 4, 6, 8);
      s.values[p + "experts.3.w1.weight"][5 * 8 + 7] = std::numeric_limits<float>::quiet_NaN();
      const std::string m = load_error(s);
      CHECK_MESSAGE(m == "load_moe_layer: tensor '" + p + "experts.3.w1.weight' element (5, 7) is nan; the weights "
                         "moecomp loads must be finite",
                    m);
    }
    {
      synthetic_checkpoint s;
      s.dtype = dtype;
      add_mixtral_layer(s, 0, 4, 6, 8);
      s.values[p + "experts.1.w2.weight"][8 * 6 - 1] = -std::numeric_limits<float>::infinity();
      const std::string m = load_error(s);
      CHECK_MESSAGE(contains(m, "tensor '" + p + "experts.1.w2.weight' element (7, 5) is -inf"), m);
    }
    {
      synthetic_checkpoint s;
      s.dtype = dtype;
      add_mixtral_layer(s, 0, 4, 6, 8);
      s.values[p + "gate.weight"][0] = std::numeric_limits<float>::infinity();
      const std::string m = load_error(s);
      CHECK_MESSAGE(contains(m, "tensor '" + p + "gate.weight' element (0, 0) is inf"), m);
    }
  }
  SUBCASE("fused 3-D stacks") {
    synthetic_checkpoint s;
    s.add("model.layers.0.mlp.gate.weight", {4, 8});
    s.add("model.layers.0.mlp.experts.gate_up_proj", {4, 12, 8});
    s.add("model.layers.0.mlp.experts.down_proj", {4, 8, 6});
    s.values["model.layers.0.mlp.experts.gate_up_proj"][(2 * 12 + 9) * 8 + 3] = std::numeric_limits<float>::quiet_NaN();
    const std::string m = load_error(s);
    CHECK_MESSAGE(contains(m, "load_moe_layer: tensor 'model.layers.0.mlp.experts.gate_up_proj' element (2, 9, 3) is nan"),
                  m);
  }
  SUBCASE("the dense loader") {
    synthetic_checkpoint s;
    s.add("model.layers.0.mlp.gate_proj.weight", {6, 8});
    s.add("model.layers.0.mlp.up_proj.weight", {6, 8});
    s.add("model.layers.0.mlp.down_proj.weight", {8, 6});
    s.values["model.layers.0.mlp.up_proj.weight"][5 * 8 + 7] = std::numeric_limits<float>::quiet_NaN();
    const std::string dense = R"({"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 8,
        "intermediate_size": 6, "hidden_act": "silu"})";
    s.write(dir, dense);
    const io::safetensors_checkpoint c = io::open_safetensors_checkpoint(dir.path.string());
    const model::dense_model m = model::describe_dense_model(repository_layouts(), dense, c);
    std::string message;
    try {
      (void)model::load_dense_ffn<float>(c, m, 0);
    } catch (const moecomp::io_error& e) {
      message = e.what();
    }
    CHECK_MESSAGE(message == "load_dense_ffn: tensor 'model.layers.0.mlp.up_proj.weight' element (5, 7) is nan; the "
                             "weights moecomp loads must be finite",
                  message);
  }
}

TEST_CASE("layouts: read_calibration_tokens reads a T x hidden float tensor, finite, or names the problem") {
  const std::vector<float> f32 = {1.0f, -2.5f, 3.25f, 0.0f, 1e30f, -7.0f};  // 2 x 3
  std::vector<bfloat16> bf16;
  for (float x : {0.5f, -1.0f, 3.0f, 1024.0f, -0.125f, 2.0f}) bf16.push_back(bfloat16(x));
  const std::vector<double> f64 = {1.0, 2.0, 1e300, 4.0, 5.0, 6.0};
  const std::vector<std::int32_t> i32 = {1, 2, 3, 4, 5, 6};
  std::vector<float> nan = f32;
  nan[4] = std::numeric_limits<float>::quiet_NaN();
  std::vector<moecomp::half> f16;
  for (float x : {1.0f, 2.0f, 3.0f}) f16.push_back(moecomp::half(x));
  f16.push_back(moecomp::half::from_bits(0x7c00));  // +inf
  const std::string bytes = io::serialize_safetensors({
      {"layers.0.moe_input", io::safetensors_dtype::f32, {2, 3}, f32.data()},
      {"layers.1.moe_input", io::safetensors_dtype::bf16, {2, 3}, bf16.data()},
      {"i32", io::safetensors_dtype::i32, {2, 3}, i32.data()},
      {"flat", io::safetensors_dtype::f32, {6}, f32.data()},
      {"wide", io::safetensors_dtype::f32, {3, 2}, f32.data()},
      {"none", io::safetensors_dtype::f32, {0, 3}, nullptr},
      {"nan", io::safetensors_dtype::f32, {2, 3}, nan.data()},
      {"big", io::safetensors_dtype::f64, {2, 3}, f64.data()},
      {"inf16", io::safetensors_dtype::f16, {1, 4}, f16.data()},
  });
  const io::safetensors_file file = io::parse_safetensors(bytes, "calib.safetensors");
  const moecomp::host_matrix<float> x = model::read_calibration_tokens(file, "layers.0.moe_input", 3);
  REQUIRE(x.rows() == 2);
  REQUIRE(x.cols() == 3);
  for (index_t k = 0; k < 6; ++k) CHECK(x.data()[k] == f32[static_cast<std::size_t>(k)]);
  const moecomp::host_matrix<float> y = model::read_calibration_tokens(file, "layers.1.moe_input", 3);
  REQUIRE(y.rows() == 2);
  for (index_t k = 0; k < 6; ++k) CHECK(y.data()[k] == static_cast<float>(bf16[static_cast<std::size_t>(k)]));

  auto refused = [&file](const std::string& key, index_t hidden) {
    try {
      (void)model::read_calibration_tokens(file, key, hidden);
    } catch (const moecomp::io_error& e) {
      return std::string(e.what());
    }
    FAIL_CHECK("expected an io_error for " << key);
    return std::string();
  };
  CHECK(refused("layers.2.moe_input", 3) == "read_calibration_tokens: 'calib.safetensors' has no tensor 'layers.2.moe_input'");
  CHECK(refused("i32", 3) == "read_calibration_tokens: tensor 'i32' of 'calib.safetensors' is I32; calibration tokens "
                             "must be F32, F64, F16 or BF16");
  CHECK(refused("flat", 3) == "read_calibration_tokens: tensor 'flat' of 'calib.safetensors' must be T x 3 (tokens x "
                              "hidden size, T >= 1), got [6]");
  CHECK(contains(refused("wide", 3), "must be T x 3 (tokens x hidden size, T >= 1), got [3, 2]"));
  CHECK(contains(refused("layers.0.moe_input", 4), "must be T x 4 (tokens x hidden size, T >= 1), got [2, 3]"));
  CHECK(contains(refused("none", 3), "got [0, 3]"));
  CHECK(refused("nan", 3) == "read_calibration_tokens: tensor 'nan' of 'calib.safetensors' element (1, 1) is nan; "
                             "calibration tokens must be finite");
  CHECK(refused("big", 3) == "read_calibration_tokens: tensor 'big' of 'calib.safetensors' element (0, 2) is 1e+300, "
                             "beyond float's range; calibration tokens must be finite");
  CHECK(contains(refused("inf16", 4), "element (0, 3) is inf; calibration tokens must be finite"));
  CHECK(contains(moecomp_test::thrown_message([&] { (void)model::read_calibration_tokens(file, "i32", 0); }),
                 "read_calibration_tokens: hidden must be at least 1, got 0"));
}

TEST_CASE("layouts: numbers in a config that no checkpoint can match are refused at once, not looped over") {
  temp_dir dir("layout_huge");
  synthetic_checkpoint s;
  add_mixtral_layer(s, 0, 2, 3, 4);
  s.write(dir, "{}");
  const io::safetensors_checkpoint c = io::open_safetensors_checkpoint(dir.path.string());
  auto error = [&](const std::string& config) {
    try {
      (void)model::describe_moe_model(repository_layouts(), config, c);
    } catch (const moecomp::io_error& e) {
      return std::string(e.what());
    }
    FAIL_CHECK("expected an io_error for " << config);
    return std::string();
  };
  const std::string base = R"("model_type": "mixtral", "num_experts_per_tok": 2, "hidden_size": 4, "hidden_act": "silu")";
  CHECK(contains(error("{" + base + R"(, "num_hidden_layers": 1, "num_local_experts": 1000000000000, "intermediate_size": 3})"),
                 "the mixtral layout ('" MOECOMP_LAYOUTS_DIR "/mixtral.json') needs the tensors of 1000000000000 experts per "
                 "layer, more than the 7 tensors"));
  CHECK(contains(error("{" + base + R"(, "num_hidden_layers": 1099511627776, "num_local_experts": 2, "intermediate_size": 3})"),
                 "gives the decoder stack 1099511627776 layers; moecomp reads at most 1048576"));
  CHECK(contains(error("{" + base + R"(, "num_hidden_layers": 1, "num_local_experts": 2, "intermediate_size": 9223372036854775807})"),
                 "gives the expert size 9223372036854775807, larger than any tensor"));
}
