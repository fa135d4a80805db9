// moecomp::compress, the pipeline as a library: planted solutions a correct pipeline must find exactly (HC-SMoE
// merging pairs of identical experts loses nothing; pruning the experts no token reaches loses nothing), the
// rules resolved_params settles and refuses, a whole checkpoint written shard by shard (identical at 1 and 2
// threads, the kept experts the input's bytes, config.json's expert count), and the outcomes that stop a run
// (the observer's cancellation, a non-finite output error) leaving nothing behind. The tool's end-to-end checks
// against numpy are tests/peers/test_compress_python.py; the tool before and after the move to the library is
// compared by scripts/compare-compress-outputs.py.
#include <moecomp/compress/compress.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/io/safetensors.hpp>
#include <moecomp/model/layout.hpp>

#include <doctest/doctest.h>

#include "test_files.hpp"
#include "test_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace io = moecomp::io;
namespace model = moecomp::model;
namespace compress = moecomp::compress;
using moecomp::index_t;
using moecomp_test::temp_dir;
using moecomp_test::thrown_message;

namespace {

constexpr index_t E = 8, I = 6, H = 10, T = 64, layers = 2;

const std::vector<model::checkpoint_layout>& repository_layouts() {
  static const std::vector<model::checkpoint_layout> layouts = model::read_checkpoint_layouts(MOECOMP_LAYOUTS_DIR);
  return layouts;
}

std::string prefix(index_t layer) { return "model.layers." + std::to_string(layer) + ".block_sparse_moe."; }

/// A 2-layer Mixtral checkpoint (float32) with its calibration tokens. Experts 2k and 2k + 1 are identical
/// (`pairs`), and the router sends every token to experts 2 and 5 (`two_used`: their rows score 10 and 5 on the
/// all-positive tokens, the others -1), or is random. `scale` multiplies every expert weight (1e30: a forward
/// that overflows float).
struct planted_model {
  std::map<std::string, std::vector<float>> tensors;
  std::map<std::string, std::vector<index_t>> shapes;
  std::map<std::string, std::vector<float>> calibration;

  io::safetensors_dtype dtype = io::safetensors_dtype::f32;  // the tensors' storage (bf16: each value rounded)

  planted_model(bool pairs, bool two_used, float scale = 1.0f) {
    moecomp::random_generator rng(7);
    auto random = [&](index_t n) {
      std::vector<float> v(static_cast<std::size_t>(n));
      for (float& x : v) x = scale * static_cast<float>(rng.uniform<double>(-0.5, 0.5));
      return v;
    };
    for (index_t l = 0; l < layers; ++l) {
      std::vector<float> router(static_cast<std::size_t>(E * H));
      for (index_t e = 0; e < E; ++e)
        for (index_t h = 0; h < H; ++h)
          router[static_cast<std::size_t>(e * H + h)] =
              two_used ? (e == 2 ? 10.0f : e == 5 ? 5.0f : -1.0f) : static_cast<float>(rng.uniform<double>(-1, 1));
      add(prefix(l) + "gate.weight", {E, H}, router);
      for (index_t e = 0; e < E; ++e) {
        const std::string p = prefix(l) + "experts." + std::to_string(e) + ".";
        if (pairs && e % 2 == 1) {  // the twin of expert e - 1
          const std::string twin = prefix(l) + "experts." + std::to_string(e - 1) + ".";
          for (const char* w : {"w1", "w3", "w2"}) add(p + w + ".weight", shapes[twin + w + ".weight"], tensors[twin + w + ".weight"]);
          continue;
        }
        add(p + "w1.weight", {I, H}, random(I * H));
        add(p + "w3.weight", {I, H}, random(I * H));
        add(p + "w2.weight", {H, I}, random(H * I));
      }
      std::vector<float> x(static_cast<std::size_t>(T * H));
      for (float& v : x) v = static_cast<float>(two_used ? rng.uniform<double>(0.1, 1.0) : rng.uniform<double>(-1, 1)) *
                             (scale > 1 ? 1e10f : 1.0f);
      calibration["layers." + std::to_string(l) + ".moe_input"] = x;
    }
    add("model.embed_tokens.weight", {4, H}, random(4 * H));
  }
  void add(const std::string& name, std::vector<index_t> shape, std::vector<float> values) {
    tensors[name] = std::move(values);
    shapes[name] = std::move(shape);
  }
  void write(const temp_dir& dir) const {
    std::vector<io::safetensors_entry> entries, calib;
    std::vector<std::vector<moecomp::bfloat16>> rounded;
    rounded.reserve(tensors.size());  // entries point into it
    for (const auto& [name, v] : tensors) {
      if (dtype == io::safetensors_dtype::bf16) {
        rounded.emplace_back(v.begin(), v.end());
        entries.push_back({name, dtype, shapes.at(name), rounded.back().data()});
      } else {
        entries.push_back({name, io::safetensors_dtype::f32, shapes.at(name), v.data()});
      }
    }
    for (const auto& [name, v] : calibration) calib.push_back({name, io::safetensors_dtype::f32, {T, H}, v.data()});
    io::write_safetensors(dir.file("model.safetensors"), entries, {{"format", "pt"}});
    io::write_safetensors(dir.file("calibration.safetensors"), calib, {});
    moecomp_test::write_file(dir.file("config.json"),
                             "{\"model_type\": \"mixtral\", \"num_hidden_layers\": 2, \"num_local_experts\": 8, "
                             "\"num_experts_per_tok\": 2, \"hidden_size\": 10, \"intermediate_size\": 6, "
                             "\"hidden_act\": \"silu\"}");
  }
};

/// A written planted model, opened.
struct opened {
  planted_model planted;
  temp_dir dir;
  std::string config;
  io::safetensors_checkpoint checkpoint;
  model::moe_model m;
  io::safetensors_file calibration;
  opened(const planted_model& p, const std::string& tag)
      : planted(p),
        dir(tag),
        config((p.write(dir), moecomp_test::read_file(dir.file("config.json")))),
        checkpoint(io::open_safetensors_checkpoint(dir.path.string())),
        m(model::describe_moe_model(repository_layouts(), config, checkpoint)),
        calibration(io::read_safetensors(dir.file("calibration.safetensors"))) {}
};

compress::compress_params resolved(const opened& o, compress::method how, index_t experts, bool calibrated = true) {
  compress::compress_params p;
  p.method = how;
  p.experts = experts;
  return compress::resolved_params(p, o.m, calibrated, compress::expert_dtype_of(o.checkpoint, o.m));
}

}  // namespace

TEST_CASE("compress_layer: HC-SMoE on weights merges pairs of identical experts with no loss") {
  const opened o(planted_model(/*pairs=*/true, /*two_used=*/false), "compress_pairs");
  compress::compress_params p;
  p.method = compress::method::hc_smoe;
  p.experts = 4;
  p.features = compress::expert_features::weights;
  p.merge = moecomp::merge::merge_method::average;
  p = compress::resolved_params(p, o.m, true, io::safetensors_dtype::f32);
  const moecomp::host_context ctx(2);
  const model::moe_layer_weights<float> w = model::load_moe_layer<float>(o.checkpoint, o.m, 1);
  const moecomp::host_matrix<float> x = model::read_calibration_tokens(o.calibration, "layers.1.moe_input", H);
  compress::layer_report report;
  const compress::compressed_layer c = compress::compress_layer(ctx, p, o.m, w, x.const_view(), {}, report);
  // The twins are at distance 0, so the 4 groups are the pairs, numbered by first appearance.
  CHECK(report.groups == std::vector<std::int64_t>{0, 0, 1, 1, 2, 2, 3, 3});
  CHECK(report.id_map == std::vector<std::int64_t>{0, 0, 1, 1, 2, 2, 3, 3});
  CHECK(c.slots == report.id_map);
  CHECK(c.stack_experts == 4);
  // Each merged expert is its pair's weights exactly, so the layer computes the same function.
  for (index_t g = 0; g < 4; ++g)
    for (index_t k = 0; k < I * H; ++k) {
      CHECK(c.w1[static_cast<std::size_t>(g * I * H + k)] == w.w1[static_cast<std::size_t>(2 * g * I * H + k)]);
      CHECK(c.w2[static_cast<std::size_t>(g * I * H + k)] == w.w2[static_cast<std::size_t>(2 * g * I * H + k)]);
    }
  CHECK(report.output_relative_error < 1e-6);
  CHECK(report.output_relative_error == compress::layer_output_error(ctx, o.m, w, c, x.const_view()));
  CHECK(report.distinct_experts == 4);
  CHECK(report.calibration_tokens == T);
}

TEST_CASE("compress_layer: pruning the experts no token reaches loses nothing") {
  const opened o(planted_model(false, /*two_used=*/true), "compress_two_used");
  const moecomp::host_context ctx(1);
  const model::moe_layer_weights<float> w = model::load_moe_layer<float>(o.checkpoint, o.m, 0);
  const moecomp::host_matrix<float> x = model::read_calibration_tokens(o.calibration, "layers.0.moe_input", H);
  for (compress::prune_criterion criterion : {compress::prune_criterion::frequency, compress::prune_criterion::reap}) {
    compress::compress_params p;
    p.method = compress::method::prune;
    p.experts = 3;
    p.criterion = criterion;
    p = compress::resolved_params(p, o.m, true, io::safetensors_dtype::f32);
    compress::layer_report report;
    const compress::compressed_layer c = compress::compress_layer(ctx, p, o.m, w, x.const_view(), {}, report);
    // Experts 2 and 5 take every token; the third kept is the lowest index among the unused (score 0).
    CHECK(report.kept == std::vector<std::int64_t>{0, 2, 5});
    CHECK(c.slots == report.kept);
    if (criterion == compress::prune_criterion::frequency) {
      CHECK(report.scores[2] == 0.5);
      CHECK(report.scores[5] == 0.5);
    }
    for (index_t e : {1, 3, 4, 6, 7}) CHECK(report.scores[static_cast<std::size_t>(e)] == 0.0);
    for (index_t h = 0; h < H; ++h) CHECK(c.router(1, h) == w.router(2, h));
    CHECK(report.output_relative_error < 1e-6);
  }
}

TEST_CASE("resolved_params: the auto values and the rules between the fields") {
  const opened o(planted_model(false, false), "compress_params");
  SUBCASE("defaults") {
    const compress::compress_params calibrated = resolved(o, compress::method::hc_smoe, 0);
    CHECK(calibrated.experts == 4);  // half of 8, at least top-2
    CHECK(calibrated.features == compress::expert_features::outputs);
    CHECK(*calibrated.merge == moecomp::merge::merge_method::frequency);
    const compress::compress_params bare = resolved(o, compress::method::hc_smoe, 0, /*calibrated=*/false);
    CHECK(bare.features == compress::expert_features::weights);
    CHECK(*bare.merge == moecomp::merge::merge_method::average);
    const compress::compress_params cka = resolved(o, compress::method::cka_merge, 0);
    CHECK(cka.similarity == compress::expert_similarity::cka);
    CHECK(*cka.merge == moecomp::merge::merge_method::uniform);
    compress::compress_params r;
    r.method = compress::method::resmoe;
    r = compress::resolved_params(r, o.m, false, io::safetensors_dtype::bf16);
    CHECK(r.experts == 8);
    CHECK(*r.values == moecomp::sparse::value_dtype::bfloat16);
    CHECK(r.max_iterations == 100);
  }
  SUBCASE("refusals name the field") {
    CHECK(thrown_message([&] { resolved(o, compress::method::prune, 9); }).find("params.experts must be 1 to 8") !=
          std::string::npos);
    CHECK(thrown_message([&] { resolved(o, compress::method::prune, 1); }).find("top-k") != std::string::npos);
    CHECK(thrown_message([&] { resolved(o, compress::method::prune, 4, false); }).find("needs calibration tokens") !=
          std::string::npos);
    compress::compress_params p;
    p.method = compress::method::hc_smoe;
    p.merge = moecomp::merge::merge_method::uniform;
    CHECK(thrown_message([&] { compress::resolved_params(p, o.m, true, io::safetensors_dtype::f32); })
              .find("params.merge must be frequency, average or fix-dom") != std::string::npos);
    p.method = compress::method::resmoe;
    p.merge.reset();
    p.keep = 1.5;
    CHECK(thrown_message([&] { compress::resolved_params(p, o.m, true, io::safetensors_dtype::f32); })
              .find("params.keep") != std::string::npos);
    p.method = compress::method::moefy;
    CHECK(thrown_message([&] { compress::resolved_params(p, o.m, true, io::safetensors_dtype::f32); })
              .find("moefy splits dense checkpoints") != std::string::npos);
  }
}

TEST_CASE("compress_checkpoint: every layer written shard by shard, identically at any thread count") {
  const opened o(planted_model(false, true), "compress_checkpoint");
  const compress::compress_params p = resolved(o, compress::method::prune, 3);
  std::map<int, std::string> shards;
  for (int threads : {1, 2}) {
    temp_dir out("compress_checkpoint_out_" + std::to_string(threads));
    io::safetensors_sharded_writer writer(out.path.string(), "model");
    std::vector<std::string> steps;
    compress::compress_observer observer;
    observer.step = [&](index_t layer, index_t count, const std::string& name, const std::string& step) {
      steps.push_back(std::to_string(layer) + "/" + std::to_string(count) + " " + name + " " + step);
    };
    const compress::checkpoint_report r =
        compress::compress_checkpoint(moecomp::host_context(threads), p, o.checkpoint, o.m,
                                      compress::layout_of(repository_layouts(), o.m), o.config, &o.calibration, writer,
                                      nullptr, observer);
    REQUIRE(r.ok());
    CHECK(r.iterations == layers);
    REQUIRE(r.layers.size() == 2);
    CHECK(steps.front() == "0/2 model.layers.0.block_sparse_moe loading");
    CHECK(steps.back() == "1/2 rest writing the other tensors");
    // Three shards (two layers and the rest) and their index; the kept experts are the input's bytes.
    const io::safetensors_checkpoint written = io::open_safetensors_checkpoint(out.path.string());
    CHECK(written.names().size() == 1 + layers * (1 + 3 * 3));
    for (index_t l = 0; l < layers; ++l) {
      CHECK(r.layers[static_cast<std::size_t>(l)].kept == std::vector<std::int64_t>{0, 2, 5});
      const io::safetensors_tensor kept = written.tensor(prefix(l) + "experts.2.w2.weight");  // slot 2 holds expert 5
      const std::vector<float>& original = o.planted.tensors.at(prefix(l) + "experts.5.w2.weight");
      CHECK(std::memcmp(kept.data(), original.data(), original.size() * sizeof(float)) == 0);
      CHECK(written.info(prefix(l) + "gate.weight").shape == std::vector<index_t>{3, H});
    }
    CHECK(r.config_json.find("\"num_local_experts\": 3") != std::string::npos);
    CHECK(r.config_json.find("\"moecomp_compression\"") != std::string::npos);
    std::string bytes;
    for (const auto& entry : std::filesystem::directory_iterator(out.path))
      if (entry.path().extension() == ".safetensors") bytes += moecomp_test::read_file(entry.path().string());
    shards[threads] = bytes;
    const auto report = compress::report_json(r, "planted", "c.safetensors", 0.0, 0.0);
    CHECK(report["layers"][0]["kept"] == nlohmann::ordered_json({0, 2, 5}));
    CHECK(report["options"]["criterion"] == "frequency");
    CHECK(report["options"]["matmul"] == "exact");
  }
  CHECK(shards[1] == shards[2]);
}

TEST_CASE("compress_checkpoint: a cancelled run and a non-finite output error leave no shard") {
  SUBCASE("cancelled after the first layer") {
    const opened o(planted_model(false, false), "compress_cancel");
    const compress::compress_params p = resolved(o, compress::method::hc_smoe, 4);
    temp_dir out("compress_cancel_out");
    compress::checkpoint_report r;
    {
      io::safetensors_sharded_writer writer(out.path.string(), "model");
      int asked = 0;
      compress::compress_observer observer;
      observer.stop = [&] { return ++asked > 3; };  // three checks a layer: the second layer's first check stops
      r = compress::compress_checkpoint(moecomp::host_context(1), p, o.checkpoint, o.m,
                                        compress::layout_of(repository_layouts(), o.m), o.config, &o.calibration, writer,
                                        nullptr, observer);
    }
    CHECK(r.cancelled);
    CHECK(r.status == moecomp::status::not_converged);
    CHECK(r.iterations == 1);
    CHECK(out.entries().empty());
  }
  SUBCASE("an expert forward that overflows float") {
    // Pruning scores by routing alone; the error's forward through the experts overflows.
    const opened o(planted_model(false, false, /*scale=*/1e30f), "compress_overflow");
    const compress::compress_params p = resolved(o, compress::method::prune, 4);
    temp_dir out("compress_overflow_out");
    compress::checkpoint_report r;
    {
      io::safetensors_sharded_writer writer(out.path.string(), "model");
      r = compress::compress_checkpoint(moecomp::host_context(1), p, o.checkpoint, o.m,
                                        compress::layout_of(repository_layouts(), o.m), o.config, &o.calibration, writer);
    }
    CHECK(r.status == moecomp::status::numerical_error);
    CHECK(r.failed_layer == "model.layers.0.block_sparse_moe");
    CHECK(!std::isfinite(r.criterion));
    CHECK(out.entries().empty());
  }
}

// ------------------------------------------------------------------------------- expert storage (issue 34)

namespace {

/// The message of the io_error `f` throws ("" and a failed check when it throws none).
template <class F>
std::string io_error_message(F&& f) {
  try {
    f();
  } catch (const moecomp::io_error& e) {
    return e.what();
  }
  FAIL_CHECK("expected moecomp::io_error");
  return "";
}

/// hc-smoe of the paired planted model (the groups are the twins: id map 0 0 1 1 2 2 3 3) written with `storage`
/// into `out`, with its config.json.
template <class Opened>  // opened, or fused_opened below
compress::checkpoint_report write_hc_smoe(const Opened& o, compress::expert_storage storage, const temp_dir& out) {
  compress::compress_params p;
  p.method = compress::method::hc_smoe;
  p.experts = 4;
  p.features = compress::expert_features::weights;
  p.merge = moecomp::merge::merge_method::average;
  p.expert_storage = storage;
  p = compress::resolved_params(p, o.m, true, io::safetensors_dtype::f32);
  compress::checkpoint_report r;
  {
    io::safetensors_sharded_writer writer(out.path.string(), "model");
    r = compress::compress_checkpoint(moecomp::host_context(1), p, o.checkpoint, o.m,
                                      compress::layout_of(repository_layouts(), o.m), o.config, &o.calibration, writer);
  }
  moecomp_test::write_file(out.file("config.json"), r.config_json);
  return r;
}

/// The paired planted model in the fused layout (mixtral-fused: `model.layers.{l}.mlp.experts.gate_up_proj`
/// E x 2I x H, gate rows first, and `experts.down_proj` E x H x I), written and opened.
struct fused_opened {
  temp_dir dir;
  std::string config;
  io::safetensors_checkpoint checkpoint;
  model::moe_model m;
  io::safetensors_file calibration;

  static std::string write(const temp_dir& dir) {
    planted_model planted(/*pairs=*/true, false);
    planted.write(dir);  // the calibration tokens and config.json; model.safetensors is replaced below
    std::map<std::string, std::vector<float>> t;
    std::map<std::string, std::vector<index_t>> shapes;
    for (index_t l = 0; l < layers; ++l) {
      const std::string in = prefix(l), out = "model.layers." + std::to_string(l) + ".mlp.";
      t[out + "gate.weight"] = planted.tensors.at(in + "gate.weight");
      shapes[out + "gate.weight"] = {E, H};
      std::vector<float>& gate_up = t[out + "experts.gate_up_proj"];
      std::vector<float>& down = t[out + "experts.down_proj"];
      for (index_t e = 0; e < E; ++e) {
        const std::string p = in + "experts." + std::to_string(e) + ".";
        for (const char* w : {"w1.weight", "w3.weight"})
          gate_up.insert(gate_up.end(), planted.tensors.at(p + w).begin(), planted.tensors.at(p + w).end());
        down.insert(down.end(), planted.tensors.at(p + "w2.weight").begin(), planted.tensors.at(p + "w2.weight").end());
      }
      shapes[out + "experts.gate_up_proj"] = {E, 2 * I, H};
      shapes[out + "experts.down_proj"] = {E, H, I};
    }
    t["model.embed_tokens.weight"] = planted.tensors.at("model.embed_tokens.weight");
    shapes["model.embed_tokens.weight"] = {4, H};
    std::vector<io::safetensors_entry> entries;
    for (const auto& [name, v] : t) entries.push_back({name, io::safetensors_dtype::f32, shapes.at(name), v.data()});
    io::write_safetensors(dir.file("model.safetensors"), entries, {{"format", "pt"}});
    return moecomp_test::read_file(dir.file("config.json"));
  }
  fused_opened()
      : dir("compress_storage_fused"),
        config(write(dir)),
        checkpoint(io::open_safetensors_checkpoint(dir.path.string())),
        m(model::describe_moe_model(repository_layouts(), config, checkpoint)),
        calibration(io::read_safetensors(dir.file("calibration.safetensors"))) {}
};

}  // namespace

TEST_CASE("compress_checkpoint: hc-smoe's experts stored distinct or duplicated, loaded back the same") {
  const opened o(planted_model(/*pairs=*/true, false), "compress_storage");
  temp_dir distinct_dir("compress_storage_distinct"), duplicated_dir("compress_storage_duplicated");
  const compress::checkpoint_report d = write_hc_smoe(o, compress::expert_storage::distinct, distinct_dir);
  const compress::checkpoint_report u = write_hc_smoe(o, compress::expert_storage::duplicated, duplicated_dir);
  REQUIRE(d.ok());
  REQUIRE(u.ok());
  CHECK(compress::compress_params{}.expert_storage == compress::expert_storage::distinct);  // the default
  const std::vector<std::int64_t> map{0, 0, 1, 1, 2, 2, 3, 3};
  const double router = E * H * 4.0, expert = 3.0 * I * H * 4.0;  // float32 bytes
  for (std::size_t l = 0; l < layers; ++l) {
    CHECK(d.layers[l].id_map == map);
    CHECK(d.layers[l].stored_experts == 4);
    CHECK(u.layers[l].stored_experts == 8);
    CHECK(d.layers[l].expert_map_tensor == prefix(static_cast<index_t>(l)) + "gate.expert_map");
    CHECK(u.layers[l].expert_map_tensor.empty());
    // On disk: the router, the 4 distinct experts and the I64 map; or the router and 8 slots.
    CHECK(d.layers[l].bytes_written == router + 4 * expert + 8 * 8.0);
    CHECK(u.layers[l].bytes_written == router + 8 * expert);
    CHECK(d.layers[l].bytes_after == router + 4 * expert);  // the distinct experts' bytes, as before
    CHECK(u.layers[l].bytes_after == d.layers[l].bytes_after);
    CHECK(d.layers[l].output_relative_error == u.layers[l].output_relative_error);
  }
  CHECK(d.bytes_written == layers * (router + 4 * expert + 64.0));
  CHECK(u.bytes_written == layers * (router + 8 * expert));
  CHECK(d.expert_storage == "distinct");
  CHECK(u.expert_storage == "duplicated");
  CHECK(d.config_json.find("\"num_local_experts\": 8") != std::string::npos);  // router ids
  CHECK(d.config_json.find("\"expert_storage\": \"distinct\"") != std::string::npos);
  CHECK(u.config_json.find("\"expert_storage\": \"duplicated\"") != std::string::npos);
  const auto json = compress::report_json(d, "planted", "c.safetensors", 0.0, 0.0);
  CHECK(json["expert_storage"] == "distinct");
  CHECK(json["options"]["expert_storage"] == "distinct");
  CHECK(json["totals"]["bytes_written"] == d.bytes_written);
  CHECK(json["layers"][0]["stored_experts"] == 4);
  CHECK(json["layers"][0]["expert_map_tensor"] == prefix(0) + "gate.expert_map");

  // Read back: the distinct form names experts 0..3 and the map; the loader expands it to the duplicated stacks.
  const io::safetensors_checkpoint dc = io::open_safetensors_checkpoint(distinct_dir.path.string());
  const io::safetensors_checkpoint uc = io::open_safetensors_checkpoint(duplicated_dir.path.string());
  CHECK(dc.names().size() == 1 + layers * (1 + 1 + 4 * 3));
  CHECK(uc.names().size() == 1 + layers * (1 + 8 * 3));
  CHECK(dc.info(prefix(0) + "gate.expert_map").dtype == io::safetensors_dtype::i64);
  CHECK(!dc.contains(prefix(0) + "experts.4.w1.weight"));
  const model::moe_model dm = model::describe_moe_model(repository_layouts(), d.config_json, dc);
  const model::moe_model um = model::describe_moe_model(repository_layouts(), u.config_json, uc);
  CHECK(dm.num_experts == 8);
  for (index_t l = 0; l < layers; ++l) {
    const model::moe_layer_names& n = dm.layers[static_cast<std::size_t>(l)];
    CHECK(n.distinct_storage());
    CHECK(n.stored_experts == 4);
    CHECK(n.expert_map == model::expert_map_name(n));
    CHECK(n.gate.size() == 4);
    CHECK(!um.layers[static_cast<std::size_t>(l)].distinct_storage());
    CHECK(model::load_expert_map(dc, dm, l) == map);
    CHECK(model::load_expert_map(uc, um, l).empty());
    const model::moe_layer_weights<float> a = model::load_moe_layer<float>(dc, dm, l);
    const model::moe_layer_weights<float> b = model::load_moe_layer<float>(uc, um, l);
    CHECK(a.experts == 8);
    CHECK(a.w1 == b.w1);
    CHECK(a.w3 == b.w3);
    CHECK(a.w2 == b.w2);
    // The twins merge to themselves: router id e holds the planted expert 2 (e / 2).
    const model::moe_layer_weights<float> original = model::load_moe_layer<float>(o.checkpoint, o.m, l);
    CHECK(a.w1 == original.w1);
    CHECK(a.w2 == original.w2);
  }
  // compress reads one expert per router id: a distinct checkpoint is refused, by name.
  CHECK(thrown_message([&] { compress::resolved_params(compress::compress_params{}, dm, true, io::safetensors_dtype::f32); })
            .find("stores its experts distinct (tensor 'model.layers.0.block_sparse_moe.gate.expert_map'") !=
        std::string::npos);
}

TEST_CASE("expert storage: the option's values, its methods, and malformed id maps") {
  CHECK(compress::parse_expert_storage("distinct") == compress::expert_storage::distinct);
  CHECK(compress::parse_expert_storage("duplicated") == compress::expert_storage::duplicated);
  CHECK(std::string(compress::to_string(compress::expert_storage::duplicated)) == "duplicated");
  CHECK(thrown_message([] { compress::parse_expert_storage("shared"); }) ==
        "expert_storage: expected distinct or duplicated, got 'shared'");
  const opened o(planted_model(false, false), "compress_storage_rules");
  for (compress::method how : {compress::method::prune, compress::method::cka_merge, compress::method::resmoe}) {
    compress::compress_params p;
    p.method = how;
    p.expert_storage = compress::expert_storage::duplicated;
    CHECK(thrown_message([&] { compress::resolved_params(p, o.m, true, io::safetensors_dtype::f32); })
              .find("params.expert_storage duplicated is for hc-smoe") != std::string::npos);
  }
  // A planted checkpoint given an id map: an entry beyond the stored experts, a map of the wrong dtype.
  planted_model planted(false, false);
  for (const bool wrong_dtype : {false, true}) {
    temp_dir dir(wrong_dtype ? "compress_map_dtype" : "compress_map_range");
    planted.write(dir);
    std::vector<io::safetensors_entry> entries;
    for (const auto& [name, v] : planted.tensors)
      entries.push_back({name, io::safetensors_dtype::f32, planted.shapes.at(name), v.data()});
    const std::vector<std::int64_t> bad_map{0, 1, 2, 3, 4, 5, 6, 9};
    const std::vector<std::int32_t> small_map{0, 1, 2, 3, 4, 5, 6, 7};
    for (index_t l = 0; l < layers; ++l)
      entries.push_back({prefix(l) + "gate.expert_map", wrong_dtype ? io::safetensors_dtype::i32 : io::safetensors_dtype::i64,
                         {E}, wrong_dtype ? static_cast<const void*>(small_map.data()) : bad_map.data()});
    io::write_safetensors(dir.file("model.safetensors"), entries, {{"format", "pt"}});
    const std::string config = moecomp_test::read_file(dir.file("config.json"));
    const io::safetensors_checkpoint c = io::open_safetensors_checkpoint(dir.path.string());
    if (wrong_dtype) {
      CHECK(io_error_message([&] { model::describe_moe_model(repository_layouts(), config, c); })
                .find("tensor 'model.layers.0.block_sparse_moe.gate.expert_map' (the layer's expert id map) must be I64 "
                      "of shape [8] (one stored expert per router id), got I32 of shape [8]") != std::string::npos);
      continue;
    }
    const model::moe_model m = model::describe_moe_model(repository_layouts(), config, c);
    CHECK(m.layers[0].stored_experts == 8);
    CHECK(io_error_message([&] { model::load_moe_layer<float>(c, m, 0); }) ==
          "load_expert_map: tensor 'model.layers.0.block_sparse_moe.gate.expert_map' entry 7 is 9; the layer stores "
          "experts 0 to 7");
  }
}

TEST_CASE("expert storage: a fused layout's distinct stacks (S x 2I x H, S x H x I) load as the duplicated ones") {
  const fused_opened o;
  REQUIRE(o.m.family == "mixtral-fused");
  temp_dir distinct_dir("compress_fused_distinct"), duplicated_dir("compress_fused_duplicated");
  const compress::checkpoint_report d = write_hc_smoe(o, compress::expert_storage::distinct, distinct_dir);
  const compress::checkpoint_report u = write_hc_smoe(o, compress::expert_storage::duplicated, duplicated_dir);
  REQUIRE(d.ok());
  REQUIRE(u.ok());
  const io::safetensors_checkpoint dc = io::open_safetensors_checkpoint(distinct_dir.path.string());
  const io::safetensors_checkpoint uc = io::open_safetensors_checkpoint(duplicated_dir.path.string());
  CHECK(dc.info("model.layers.0.mlp.experts.gate_up_proj").shape == std::vector<index_t>{4, 2 * I, H});
  CHECK(dc.info("model.layers.0.mlp.experts.down_proj").shape == std::vector<index_t>{4, H, I});
  CHECK(uc.info("model.layers.0.mlp.experts.down_proj").shape == std::vector<index_t>{E, H, I});
  CHECK(d.layers[0].bytes_written == E * H * 4.0 + 4 * 3.0 * I * H * 4 + 64);
  const model::moe_model dm = model::describe_moe_model(repository_layouts(), d.config_json, dc);
  const model::moe_model um = model::describe_moe_model(repository_layouts(), u.config_json, uc);
  for (index_t l = 0; l < layers; ++l) {
    CHECK(dm.layers[static_cast<std::size_t>(l)].stored_experts == 4);
    CHECK(dm.layers[static_cast<std::size_t>(l)].expert_map == "model.layers." + std::to_string(l) + ".mlp.gate.expert_map");
    CHECK(model::load_expert_map(dc, dm, l) == std::vector<std::int64_t>{0, 0, 1, 1, 2, 2, 3, 3});
    const model::moe_layer_weights<float> a = model::load_moe_layer<float>(dc, dm, l);
    const model::moe_layer_weights<float> b = model::load_moe_layer<float>(uc, um, l);
    const model::moe_layer_weights<float> original = model::load_moe_layer<float>(o.checkpoint, o.m, l);
    CHECK(a.w1 == b.w1);
    CHECK(a.w3 == b.w3);
    CHECK(a.w2 == b.w2);
    CHECK(a.w1 == original.w1);  // the twins merge to themselves
    CHECK(a.w3 == original.w3);
    CHECK(a.w2 == original.w2);
  }
}

// ---- resmoe's ablations (issue 34): the centres, the svd and structured residuals, their rules and files ----

namespace {

/// Row i of expert e's design matrix [W1_i | W3_i | W2[:, i]] (nn.Linear layout, experts stacked).
std::vector<double> design_row(const model::moe_layer_weights<float>& w, index_t e, index_t i) {
  std::vector<double> row;
  for (index_t j = 0; j < H; ++j) row.push_back(w.w1[static_cast<std::size_t>((e * I + i) * H + j)]);
  for (index_t j = 0; j < H; ++j) row.push_back(w.w3[static_cast<std::size_t>((e * I + i) * H + j)]);
  for (index_t j = 0; j < H; ++j) row.push_back(w.w2[static_cast<std::size_t>((e * H + j) * I + i)]);
  return row;
}

/// The same row of the compressed layer's restored expert e.
std::vector<double> restored_row(const compress::compressed_layer& c, index_t e, index_t i) {
  std::vector<double> row;
  for (index_t j = 0; j < H; ++j) row.push_back(c.w1[static_cast<std::size_t>((e * I + i) * H + j)]);
  for (index_t j = 0; j < H; ++j) row.push_back(c.w3[static_cast<std::size_t>((e * I + i) * H + j)]);
  for (index_t j = 0; j < H; ++j) row.push_back(c.w2[static_cast<std::size_t>((e * H + j) * I + i)]);
  return row;
}

compress::compressed_layer resmoe_of(const opened& o, const model::moe_layer_weights<float>& w, compress::resmoe_center center,
                                     compress::resmoe_residual residual, double keep, index_t rank,
                                     compress::layer_report& report) {
  compress::compress_params p;
  p.method = compress::method::resmoe;
  p.center = center;
  p.residual = residual;
  p.keep = keep;
  p.rank = rank;
  p = compress::resolved_params(p, o.m, true, io::safetensors_dtype::f32);
  const moecomp::host_matrix<float> x = model::read_calibration_tokens(o.calibration, "layers.0.moe_input", H);
  return compress::compress_layer(moecomp::host_context(1), p, o.m, w, x.const_view(), {}, report);
}

}  // namespace

TEST_CASE("truncated_svd: a planted U diag(s) V^T, both orientations; the budget rank") {
  // Orthonormal columns by Gram-Schmidt of random vectors; singular values 5, 3, 2, 1, 0.5 (distinct).
  moecomp::random_generator rng(11);
  auto orthonormal = [&](index_t n, index_t k) {
    std::vector<std::vector<double>> q;
    while (static_cast<index_t>(q.size()) < k) {
      std::vector<double> v(static_cast<std::size_t>(n));
      for (double& x : v) x = rng.uniform<double>(-1, 1);
      for (const auto& b : q) {
        double d = 0;
        for (index_t i = 0; i < n; ++i) d += v[static_cast<std::size_t>(i)] * b[static_cast<std::size_t>(i)];
        for (index_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] -= d * b[static_cast<std::size_t>(i)];
      }
      double norm = 0;
      for (double x : v) norm += x * x;
      for (double& x : v) x /= std::sqrt(norm);
      q.push_back(v);
    }
    return q;
  };
  const std::vector<double> s = {5, 3, 2, 1, 0.5};
  for (const auto& [m, n] : std::vector<std::pair<index_t, index_t>>{{7, 5}, {5, 9}}) {
    const auto left = orthonormal(m, 5), right = orthonormal(n, 5);
    moecomp::host_matrix<double> a(m, n, 0.0);
    for (index_t r = 0; r < 5; ++r)
      for (index_t i = 0; i < m; ++i)
        for (index_t j = 0; j < n; ++j)
          a(i, j) += s[static_cast<std::size_t>(r)] * left[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] *
                     right[static_cast<std::size_t>(r)][static_cast<std::size_t>(j)];
    for (index_t k : {index_t{1}, index_t{2}, index_t{5}}) {
      moecomp::host_matrix<double> u(m, k), v(k, n);
      const std::vector<double> sigma =
          moecomp::sparse::truncated_svd<double>(moecomp::host_context(1), a.const_view(), k, u.view(), v.view());
      REQUIRE(sigma.size() == 5);
      for (std::size_t r = 0; r < 5; ++r) CHECK(sigma[r] == doctest::Approx(s[r]).epsilon(1e-12));
      // u v is the sum of the k leading planted terms; v's rows are orthonormal.
      double worst = 0;
      for (index_t i = 0; i < m; ++i)
        for (index_t j = 0; j < n; ++j) {
          double want = 0, got = 0;
          for (index_t r = 0; r < k; ++r) {
            want += s[static_cast<std::size_t>(r)] * left[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] *
                    right[static_cast<std::size_t>(r)][static_cast<std::size_t>(j)];
            got += u(i, r) * v(r, j);
          }
          worst = std::max(worst, std::abs(want - got));
        }
      CHECK(worst < 1e-12);
      for (index_t r = 0; r < k; ++r)
        for (index_t q = 0; q < k; ++q) {
          double d = 0;
          for (index_t j = 0; j < n; ++j) d += v(r, j) * v(q, j);
          CHECK(d == doctest::Approx(r == q ? 1.0 : 0.0).epsilon(1e-12));
        }
    }
    moecomp::host_matrix<double> u(m, 6), v(6, n);
    CHECK(thrown_message([&] { moecomp::sparse::truncated_svd<double>(moecomp::host_context(1), a.const_view(), 6, u.view(), v.view()); })
              .find("rank must be 1 to min(rows, cols) = 5") != std::string::npos);
  }
  // ResMoE's Appendix A.5: k (rows + cols) <= keep rows cols, the largest such k.
  CHECK(moecomp::sparse::svd_budget_rank(256, 384, 0.25) == 38);  // 24576 / 640 = 38.4
  CHECK(moecomp::sparse::svd_budget_rank(6, 30, 0.25) == 1);      // 1.25
  CHECK(moecomp::sparse::svd_budget_rank(6, 30, 0.01) == 1);      // at least 1
  CHECK(moecomp::sparse::svd_budget_rank(4, 4, 1.0) == 2);
}

TEST_CASE("prune_rows: the rows of largest norm, ties to the lower row; Python's rounding of the count") {
  // Row norms^2: 1, 9, 4, 9, 0, 4 -> keep 3: rows 1, 3 (norm 3) and 2 (norm 2, before row 5 on the tie).
  moecomp::host_matrix<float> a(6, 2, 0.0f);
  const float rows[6][2] = {{1, 0}, {0, 3}, {2, 0}, {3, 0}, {0, 0}, {0, -2}};
  for (index_t i = 0; i < 6; ++i)
    for (index_t j = 0; j < 2; ++j) a(i, j) = rows[i][j];
  moecomp::host_matrix<float> out(6, 2);
  const auto kept = moecomp::sparse::prune_rows<float>(moecomp::host_context(1), 0.5, a.const_view(), out.view());
  CHECK(kept == std::vector<index_t>{1, 2, 3});
  for (index_t i = 0; i < 6; ++i)
    for (index_t j = 0; j < 2; ++j) CHECK(out(i, j) == (i >= 1 && i <= 3 ? a(i, j) : 0.0f));
  CHECK(moecomp::sparse::rows_kept(256, 0.25) == 64);
  CHECK(moecomp::sparse::rows_kept(6, 0.25) == 2);  // round(4.5) = 4 pruned (half to even)
  CHECK(moecomp::sparse::rows_kept(10, 0.25) == 2);  // round(7.5) = 8 pruned
}

TEST_CASE("resmoe ablations: resolved_params' rank and refusals") {
  const opened o(planted_model(false, false), "compress_resmoe_params");
  compress::compress_params p;
  p.method = compress::method::resmoe;
  p.residual = compress::resmoe_residual::svd;
  CHECK(compress::resolved_params(p, o.m, true, io::safetensors_dtype::f32).rank == 1);  // floor(0.25 6 30 / 36)
  p.keep = 0.5;
  CHECK(compress::resolved_params(p, o.m, true, io::safetensors_dtype::f32).rank == 2);  // floor(2.5)
  p.rank = 7;
  CHECK(thrown_message([&] { compress::resolved_params(p, o.m, true, io::safetensors_dtype::f32); })
            .find("params.rank must be 1 to 6 (the rank of a 6 x 30 design residual") != std::string::npos);
  p.rank = 6;
  CHECK(compress::resolved_params(p, o.m, true, io::safetensors_dtype::f32).rank == 6);
  p.residual = compress::resmoe_residual::prune;
  CHECK(thrown_message([&] { compress::resolved_params(p, o.m, true, io::safetensors_dtype::f32); })
            .find("params.rank is for resmoe with params.residual svd, got rank 6 with residual prune") != std::string::npos);
  compress::compress_params q;
  q.method = compress::method::prune;
  q.center = compress::resmoe_center::mean;
  CHECK(thrown_message([&] { compress::resolved_params(q, o.m, true, io::safetensors_dtype::f32); })
            .find("params.center is for resmoe only, got mean with prune") != std::string::npos);
  q.center = compress::resmoe_center::barycenter;
  q.residual = compress::resmoe_residual::structured;
  CHECK(thrown_message([&] { compress::resolved_params(q, o.m, true, io::safetensors_dtype::f32); })
            .find("params.residual is for resmoe only, got structured with prune") != std::string::npos);
  CHECK(compress::parse_resmoe_center("mean") == compress::resmoe_center::mean);
  CHECK(thrown_message([] { compress::parse_resmoe_center("median"); }) ==
        "center: expected barycenter, mean or none, got 'median'");
  CHECK(compress::parse_resmoe_residual("svd") == compress::resmoe_residual::svd);
  CHECK(thrown_message([] { compress::parse_resmoe_residual("lowrank"); }) ==
        "residual: expected prune, svd or structured, got 'lowrank'");
}

TEST_CASE("resmoe ablations: the mean centre, UP, SP and a full-rank SVD on planted experts") {
  const opened o(planted_model(false, false), "compress_resmoe_ablations");
  const model::moe_layer_weights<float> w = model::load_moe_layer<float>(o.checkpoint, o.m, 0);
  SUBCASE("mean: the base is the unaligned mean, the permutations identity, keep 1 restores exactly") {
    compress::layer_report report;
    const auto c = resmoe_of(o, w, compress::resmoe_center::mean, compress::resmoe_residual::prune, 1.0, 0, report);
    REQUIRE(c.resmoe);
    for (index_t i = 0; i < I; ++i) {
      std::vector<double> mean(3 * H, 0.0);
      for (index_t e = 0; e < E; ++e) {
        const auto row = design_row(w, e, i);
        for (index_t j = 0; j < 3 * H; ++j) mean[static_cast<std::size_t>(j)] += row[static_cast<std::size_t>(j)];
        CHECK(c.resmoe->permutations(e, i) == i);
      }
      for (index_t j = 0; j < H; ++j) {
        CHECK(c.resmoe->w1[static_cast<std::size_t>(i * H + j)] == static_cast<float>(mean[static_cast<std::size_t>(j)] / E));
        CHECK(c.resmoe->w2[static_cast<std::size_t>(j * I + i)] == static_cast<float>(mean[static_cast<std::size_t>(2 * H + j)] / E));
      }
    }
    CHECK(report.resmoe_approximation_error == 0.0);
    CHECK(report.center == "mean");
    CHECK(report.output_relative_error < 1e-6);
  }
  SUBCASE("none + prune (UP): each expert magnitude-pruned alone, kept entries exact") {
    compress::layer_report report;
    const auto c = resmoe_of(o, w, compress::resmoe_center::none, compress::resmoe_residual::prune, 0.25, 0, report);
    double squared = 0;
    for (index_t e = 0; e < E; ++e) {
      std::vector<double> all, kept;
      index_t nonzero = 0;
      for (index_t i = 0; i < I; ++i) {
        const auto a = design_row(w, e, i), b = restored_row(c, e, i);
        for (std::size_t j = 0; j < a.size(); ++j) {
          all.push_back(std::abs(a[j]));
          if (b[j] != 0) {
            ++nonzero;
            CHECK(b[j] == a[j]);
            kept.push_back(std::abs(a[j]));
          } else {
            squared += a[j] * a[j];
          }
        }
      }
      CHECK(nonzero == 180 - 135);  // 180 entries, round(0.75 x 180) = 135 pruned
      std::sort(all.begin(), all.end());
      CHECK(*std::min_element(kept.begin(), kept.end()) == all[135]);  // the 45 largest magnitudes
    }
    CHECK(report.resmoe_approximation_error == doctest::Approx(squared / E / I).epsilon(1e-9));
  }
  SUBCASE("none + structured (SP): each expert's 2 neurons of largest design-row norm, the rest zero") {
    compress::layer_report report;
    const auto c = resmoe_of(o, w, compress::resmoe_center::none, compress::resmoe_residual::structured, 0.25, 0, report);
    double squared = 0;
    for (index_t e = 0; e < E; ++e) {
      std::vector<std::pair<double, index_t>> norms;
      for (index_t i = 0; i < I; ++i) {
        double n = 0;
        for (double x : design_row(w, e, i)) n += x * x;
        norms.push_back({-n, i});
      }
      std::sort(norms.begin(), norms.end());
      for (index_t i = 0; i < I; ++i) {
        const bool kept = i == norms[0].second || i == norms[1].second;  // rows_kept(6, 0.25) = 2
        const auto a = design_row(w, e, i), b = restored_row(c, e, i);
        for (std::size_t j = 0; j < a.size(); ++j) {
          CHECK(b[j] == (kept ? a[j] : 0.0));
          if (!kept) squared += a[j] * a[j];
        }
      }
    }
    CHECK(report.resmoe_approximation_error == doctest::Approx(squared / E / I).epsilon(1e-9));
  }
  SUBCASE("barycenter + svd at full rank restores the experts; at rank 1 the error is the tail's") {
    compress::layer_report full, one;
    const auto c = resmoe_of(o, w, compress::resmoe_center::barycenter, compress::resmoe_residual::svd, 0.25, 6, full);
    for (index_t e = 0; e < E; ++e)
      for (index_t i = 0; i < I; ++i) {
        const auto a = design_row(w, e, i), b = restored_row(c, e, i);
        for (std::size_t j = 0; j < a.size(); ++j) CHECK(b[j] == doctest::Approx(a[j]).epsilon(1e-5));
      }
    CHECK(full.resmoe_approximation_error < 1e-10);
    CHECK(full.rank == 6);
    CHECK(full.residual_bytes[0] == (6 + 30) * 6 * 4);  // fp32 factors
    REQUIRE(c.resmoe->svd_u.size() == 8);
    CHECK(c.resmoe->svd_u[0].rows() == I);
    CHECK(c.resmoe->svd_v[0].cols() == 30);
    // Rank 1: the error of each expert is the sum of its residual's squared singular values past the first.
    const auto c1 = resmoe_of(o, w, compress::resmoe_center::barycenter, compress::resmoe_residual::svd, 0.25, 1, one);
    double tail = 0;
    for (index_t e = 0; e < E; ++e) {
      const moecomp::moe::ffn_expert_view<float> base = [&] {
        moecomp::moe::ffn_expert_view<float> b;
        b.w1 = moecomp::matrix_view<const float>(c1.resmoe->w1.data(), I, H, H);
        b.w3 = moecomp::matrix_view<const float>(c1.resmoe->w3.data(), I, H, H);
        b.w2 = moecomp::matrix_view<const float>(c1.resmoe->w2.data(), H, I, I);
        return b;
      }();
      const auto d = moecomp::moe::expert_design_residual<float>(moecomp::host_context(1), base, w.experts_view().expert(e),
                                                        c1.resmoe->permutations.const_view().row(e));
      moecomp::host_matrix<double> u(I, I), v(I, 30);
      const auto sigma = moecomp::sparse::truncated_svd<float>(moecomp::host_context(1), d.const_view(), I, u.view(), v.view());
      for (std::size_t r = 1; r < sigma.size(); ++r) tail += sigma[r] * sigma[r];
    }
    CHECK(one.resmoe_approximation_error == doctest::Approx(tail / E / I).epsilon(1e-5));
    CHECK(one.resmoe_approximation_error > full.resmoe_approximation_error);
  }
}

TEST_CASE("resmoe ablations: what compress_checkpoint writes for each centre and residual") {
  const opened o(planted_model(false, false), "compress_resmoe_files");
  for (const auto& [center, residual] : std::vector<std::pair<compress::resmoe_center, compress::resmoe_residual>>{
           {compress::resmoe_center::none, compress::resmoe_residual::prune},
           {compress::resmoe_center::mean, compress::resmoe_residual::svd},
           {compress::resmoe_center::barycenter, compress::resmoe_residual::structured}}) {
    compress::compress_params p;
    p.method = compress::method::resmoe;
    p.center = center;
    p.residual = residual;
    p = compress::resolved_params(p, o.m, true, io::safetensors_dtype::f32);
    temp_dir out(std::string("compress_resmoe_files_") + compress::to_string(center));
    io::safetensors_sharded_writer writer(out.path.string(), "model");
    const compress::checkpoint_report r =
        compress::compress_checkpoint(moecomp::host_context(1), p, o.checkpoint, o.m,
                                      compress::layout_of(repository_layouts(), o.m), o.config, &o.calibration, writer);
    REQUIRE(r.ok());
    const io::safetensors_checkpoint written = io::open_safetensors_checkpoint(out.path.string());
    const std::string q = prefix(0) + "resmoe.";
    CHECK(written.contains(q + "base.w1.weight") == (center != compress::resmoe_center::none));
    CHECK(written.contains(q + "permutations") == (center == compress::resmoe_center::barycenter));
    CHECK(written.contains(q + "experts.3.w3.residual") == (residual != compress::resmoe_residual::svd));
    if (residual == compress::resmoe_residual::svd) {
      CHECK(written.info(q + "experts.3.svd.u").shape == std::vector<index_t>{I, 1});
      CHECK(written.info(q + "experts.3.svd.v").shape == std::vector<index_t>{1, 30});
    }
    // bytes_written: the layer's tensors as written (the router and the method's tensors).
    double bytes = 0;
    for (const std::string& n : written.names())
      if (n.rfind(prefix(0), 0) == 0) bytes += static_cast<double>(written.info(n).bytes());
    CHECK(r.layers[0].bytes_written == bytes);
    CHECK(r.config_json.find(std::string("\"center\": \"") + compress::to_string(center) + "\"") != std::string::npos);
  }
}

TEST_CASE("compress_checkpoint: a BF16 layer read in place gives the float path's layer, rounded once") {
  // The float path: compress_layer on the layer loaded as float with bf16 storage dtypes. The bf16-resident path:
  // compress_checkpoint, which reads a BF16 layer in place (map_moe_layer) and computes from bfloat16.
  planted_model planted(false, false);
  planted.dtype = io::safetensors_dtype::bf16;
  const opened o(planted, "compress_bf16_in_place");
  const moecomp::host_context ctx(2);
  const compress::storage_dtypes bf16{io::safetensors_dtype::bf16, io::safetensors_dtype::bf16, io::safetensors_dtype::f32,
                                      io::safetensors_dtype::f32};
  for (const compress::method how : {compress::method::prune, compress::method::hc_smoe, compress::method::cka_merge,
                                     compress::method::m_smoe, compress::method::resmoe}) {
    const std::string name = compress::to_string(how);
    CAPTURE(name);
    const compress::compress_params p = resolved(o, how, how == compress::method::resmoe ? 0 : 4);  // resmoe keeps all
    temp_dir out(std::string("compress_bf16_in_place_") + compress::to_string(how));
    io::safetensors_sharded_writer writer(out.path.string(), "model");
    const compress::checkpoint_report r = compress::compress_checkpoint(
        ctx, p, o.checkpoint, o.m, compress::layout_of(repository_layouts(), o.m), o.config, &o.calibration, writer);
    REQUIRE(r.ok());
    // The in-place path on one thread writes the same bytes.
    temp_dir one(std::string("compress_bf16_in_place_1_") + name);
    io::safetensors_sharded_writer one_writer(one.path.string(), "model");
    REQUIRE(compress::compress_checkpoint(moecomp::host_context(1), p, o.checkpoint, o.m,
                                          compress::layout_of(repository_layouts(), o.m), o.config, &o.calibration,
                                          one_writer)
                .ok());
    for (const auto& entry : std::filesystem::directory_iterator(out.path))
      CHECK(moecomp_test::read_file(entry.path().string()) ==
            moecomp_test::read_file((one.path / entry.path().filename()).string()));
    const io::safetensors_checkpoint written = io::open_safetensors_checkpoint(out.path.string());
    for (index_t l = 0; l < layers; ++l) {
      CAPTURE(l);
      const model::moe_layer_weights<float> w = model::load_moe_layer<float>(o.checkpoint, o.m, l);
      const moecomp::host_matrix<float> x =
          model::read_calibration_tokens(o.calibration, "layers." + std::to_string(l) + ".moe_input", H);
      compress::layer_report report;
      const compress::compressed_layer c = compress::compress_layer(ctx, p, o.m, w, x.const_view(), bf16, report);
      CHECK(r.layers[static_cast<std::size_t>(l)].output_relative_error == report.output_relative_error);
      if (how == compress::method::resmoe) {  // the base and every residual file, byte for byte
        const std::string q = prefix(l) + "resmoe.";
        const std::vector<float> base = written.tensor(q + "base.w2.weight").to_vector<float>();
        CHECK(base == c.resmoe->w2);
        for (index_t e = 0; e < E; ++e) {
          const io::safetensors_tensor t = written.tensor(q + "experts." + std::to_string(e) + ".w1.residual");
          const std::vector<std::uint8_t> expected =
              io::serialize_residual(c.resmoe->residuals[static_cast<std::size_t>(e)].w1.view());
          CHECK(std::vector<std::uint8_t>(t.data(), t.data() + t.byte_size()) == expected);
        }
        continue;
      }
      // Every written expert: the float path's expert, rounded. Distinct storage (hc-smoe's and m-smoe's default)
      // writes stack expert s under expert s's names; otherwise router id r holds stack expert slots[r].
      const bool distinct = compress::keeps_router_rows(p) && p.expert_storage == compress::expert_storage::distinct;
      const index_t written_experts = distinct ? c.stack_experts : static_cast<index_t>(c.slots.size());
      for (index_t id = 0; id < written_experts; ++id) {
        const std::int64_t k = distinct ? id : c.slots[static_cast<std::size_t>(id)];
        const std::vector<float>& from = c.own_stack() ? c.w1 : w.w1;
        const std::vector<float> expert(from.begin() + k * I * H, from.begin() + (k + 1) * I * H);
        CHECK(written.tensor(prefix(l) + "experts." + std::to_string(id) + ".w1.weight").to_vector<float>() == expert);
      }
    }
  }
}

TEST_CASE("resmoe ablations: svd residuals are the same bytes at 1 and 2 threads") {
  const opened o(planted_model(false, false), "compress_resmoe_threads");
  compress::compress_params p;
  p.method = compress::method::resmoe;
  p.residual = compress::resmoe_residual::svd;
  p.rank = 3;
  p = compress::resolved_params(p, o.m, true, io::safetensors_dtype::f32);
  std::map<int, std::string> shards;
  for (int threads : {1, 2}) {
    temp_dir out("compress_resmoe_threads_" + std::to_string(threads));
    io::safetensors_sharded_writer writer(out.path.string(), "model");
    const compress::checkpoint_report r =
        compress::compress_checkpoint(moecomp::host_context(threads), p, o.checkpoint, o.m,
                                      compress::layout_of(repository_layouts(), o.m), o.config, &o.calibration, writer);
    REQUIRE(r.ok());
    std::vector<std::string> files;  // in name order: a directory's listing order is not
    for (const auto& entry : std::filesystem::directory_iterator(out.path))
      if (entry.path().extension() == ".safetensors") files.push_back(entry.path().string());
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) shards[threads] += moecomp_test::read_file(f);
  }
  CHECK(!shards[1].empty());
  CHECK(shards[1] == shards[2]);
}

// ---- issue 34: M-SMoE, and cka-merge's Table 3-4 settings (similarity tokens, augmentation, router) ----

namespace {

/// The planted M-SMoE layer: positive tokens; experts 1 and 6 have router rows 20 e_0 and 20 e_1, experts 4 and 0
/// rows 12 e_0 and 12 e_1, the others small multiples of e_0 (5, 7) or e_1 (2, 3). A token's top-2 is the larger
/// of 20 x_0 and 20 x_1 and then the larger of the other 20 x and the winner's 12 x: experts 1 and 6 are the most
/// frequent, 0 and 4 routed sometimes, the rest never. Each logit column is a multiple of x[:, 0] or x[:, 1], so
/// exactly parallel to one dominant's: 0, 2, 3 join 6 and 4, 5, 7 join 1. Each non-dominant is its dominant with
/// its neurons rotated (W1, W3 rows, W2 columns), so weight matching undoes the rotation and every merged expert
/// is its dominant times (sum of the group's f) / (that sum + 1e-7).
planted_model msmoe_planted() {
  planted_model p(false, false);
  moecomp::random_generator rng(11);
  const std::vector<index_t> joins = {6, 1, 6, 6, 1, 1, 6, 1};
  for (index_t l = 0; l < layers; ++l) {
    std::vector<float> router(static_cast<std::size_t>(E * H), 0.0f);
    for (index_t e = 0; e < E; ++e) {
      const index_t axis = joins[static_cast<std::size_t>(e)] == 1 ? 0 : 1;
      router[static_cast<std::size_t>(e * H + axis)] =
          e == 1 || e == 6 ? 20.0f : e == 0 || e == 4 ? 12.0f : 0.25f * static_cast<float>(e + 1);
    }
    p.tensors[prefix(l) + "gate.weight"] = router;
    for (index_t e = 0; e < E; ++e) {
      const index_t d = joins[static_cast<std::size_t>(e)];
      if (d == e) continue;
      const std::string dst = prefix(l) + "experts." + std::to_string(e) + ".";
      const std::string src = prefix(l) + "experts." + std::to_string(d) + ".";
      for (const char* w : {"w1", "w3"}) {  // row i of e = row (i + e + 1) mod I of d
        const std::vector<float> dom = p.tensors.at(src + w + ".weight");
        std::vector<float>& out = p.tensors[dst + w + ".weight"];
        for (index_t i = 0; i < I; ++i)
          for (index_t h = 0; h < H; ++h)
            out[static_cast<std::size_t>(i * H + h)] = dom[static_cast<std::size_t>(((i + e + 1) % I) * H + h)];
      }
      const std::vector<float> dom = p.tensors.at(src + "w2.weight");
      std::vector<float>& out = p.tensors[dst + "w2.weight"];
      for (index_t h = 0; h < H; ++h)
        for (index_t i = 0; i < I; ++i)
          out[static_cast<std::size_t>(h * I + i)] = dom[static_cast<std::size_t>(h * I + (i + e + 1) % I)];
    }
    std::vector<float>& x = p.calibration["layers." + std::to_string(l) + ".moe_input"];
    for (float& v : x) v = static_cast<float>(rng.uniform<double>(0.1, 1.0));
  }
  return p;
}

compress::compressed_layer run_layer(const opened& o, const compress::compress_params& given, index_t layer,
                                     moecomp::matrix_view<const float> x, compress::layer_report& report) {
  const compress::compress_params p = compress::resolved_params(given, o.m, x.rows() > 0, io::safetensors_dtype::f32);
  const model::moe_layer_weights<float> w = model::load_moe_layer<float>(o.checkpoint, o.m, layer);
  return compress::compress_layer(moecomp::host_context(2), p, o.m, w, x, {}, report);
}

}  // namespace

TEST_CASE("compress_layer: M-SMoE finds the planted dominants, groups and weight matching") {
  const opened o(msmoe_planted(), "compress_msmoe");
  for (index_t layer = 0; layer < layers; ++layer) {
    const moecomp::host_matrix<float> x =
        model::read_calibration_tokens(o.calibration, "layers." + std::to_string(layer) + ".moe_input", H);
    const model::moe_layer_weights<float> w = model::load_moe_layer<float>(o.checkpoint, o.m, layer);
    compress::compress_params p;
    p.method = compress::method::m_smoe;
    p.experts = 2;
    compress::layer_report report;
    const compress::compressed_layer c = run_layer(o, p, layer, x.const_view(), report);
    const std::vector<double>& f = report.frequencies;
    REQUIRE(f.size() == 8);
    for (index_t e : {2, 3, 5, 7}) CHECK(f[static_cast<std::size_t>(e)] == 0.0);
    CHECK(f[0] > 0);
    CHECK(f[4] > 0);
    CHECK(std::min(f[1], f[6]) > std::max(f[0], f[4]));
    CHECK(f[0] + f[1] + f[4] + f[6] == doctest::Approx(1.0));
    // Expert 0 joins dominant 6 first: group 0 is 6's, group 1 is 1's.
    CHECK(report.groups == std::vector<std::int64_t>{0, 1, 0, 0, 1, 1, 0, 1});
    CHECK(report.dominants == std::vector<std::int64_t>{6, 1});
    CHECK(report.id_map == report.groups);
    CHECK(c.slots == report.groups);
    CHECK(report.router_rule == "map");
    CHECK(c.stack_experts == 2);
    // The router is kept; each merged expert is its dominant times its group's frequency share (the rotations
    // undone by the matching; without it the routed member's rotated neurons would be mixed in).
    for (index_t e = 0; e < E; ++e)
      for (index_t h = 0; h < H; ++h) CHECK(c.router(e, h) == w.router(e, h));
    const std::int64_t dominant[2] = {6, 1}, routed[2] = {0, 4};
    int off = 0;
    for (index_t g = 0; g < 2; ++g) {
      const double total = f[static_cast<std::size_t>(dominant[g])] + f[static_cast<std::size_t>(routed[g])];
      const double scale = total / (total + 1e-7);
      for (index_t k = 0; k < I * H; ++k) {
        const auto at = static_cast<std::size_t>(g * I * H + k), from = static_cast<std::size_t>(dominant[g] * I * H + k);
        for (const auto* pair : {&c.w1, &c.w3, &c.w2}) {
          const std::vector<float>& source = pair == &c.w1 ? w.w1 : pair == &c.w3 ? w.w3 : w.w2;
          const double want = scale * static_cast<double>(source[from]);
          off += std::abs(static_cast<double>((*pair)[at]) - want) > 1e-6 * std::abs(want);
        }
      }
    }
    CHECK(off == 0);
    CHECK(report.output_relative_error < 1e-6);
    CHECK(report.distinct_experts == 2);
    CHECK(report.experts == E);
  }
  // One dominant: everything joins the most frequent expert.
  const moecomp::host_matrix<float> x = model::read_calibration_tokens(o.calibration, "layers.0.moe_input", H);
  compress::compress_params p;
  p.method = compress::method::m_smoe;
  p.experts = 1;
  compress::layer_report report;
  run_layer(o, p, 0, x.const_view(), report);
  CHECK(report.dominants == std::vector<std::int64_t>{report.frequencies[6] > report.frequencies[1] ? 6 : 1});
  CHECK(report.groups == std::vector<std::int64_t>(8, 0));
}

TEST_CASE("resolved_params: m-smoe and cka-merge's similarity tokens, augmentation and router") {
  const opened o(planted_model(false, false), "compress_params_34");
  const compress::compress_params ms = resolved(o, compress::method::m_smoe, 0);
  CHECK(ms.experts == 4);
  CHECK(*ms.merge == moecomp::merge::merge_method::frequency);
  CHECK(compress::keeps_router_rows(ms));
  CHECK(resolved(o, compress::method::m_smoe, 1).experts == 1);  // an id map may keep fewer than top-k
  CHECK(compress::parse_method("m-smoe") == compress::method::m_smoe);
  CHECK(std::string(compress::to_string(compress::method::m_smoe)) == "m-smoe");
  const compress::compress_params cka = resolved(o, compress::method::cka_merge, 0);
  CHECK(cka.merge_router == moecomp::merge::router_rule::merged_rows);
  CHECK(!compress::keeps_router_rows(cka));
  const auto fails = [&](compress::compress_params p, bool calibrated = true) {
    return thrown_message([&] { compress::resolved_params(p, o.m, calibrated, io::safetensors_dtype::f32); });
  };
  compress::compress_params p;
  p.method = compress::method::m_smoe;
  CHECK(fails(p, false).find("params.method m-smoe") != std::string::npos);
  CHECK(fails(p, false).find("needs calibration tokens") != std::string::npos);
  p.merge = moecomp::merge::merge_method::uniform;
  CHECK(fails(p).find("params.merge is fixed for m-smoe") != std::string::npos);
  p.merge.reset();
  p.align = compress::merge_alignment::weights;
  CHECK(fails(p).find("params.align is fixed for m-smoe") != std::string::npos);
  p = {};
  p.method = compress::method::cka_merge;
  p.merge = moecomp::merge::merge_method::dominant;
  CHECK(compress::resolved_params(p, o.m, true, io::safetensors_dtype::f32).merge_router ==
        moecomp::merge::router_rule::dominant_row);
  p.merge_router = moecomp::merge::router_rule::id_map;
  p.experts = 1;  // fewer than top-k: allowed with the id map, refused with merged rows
  CHECK(compress::resolved_params(p, o.m, true, io::safetensors_dtype::f32).experts == 1);
  p.merge_router = moecomp::merge::router_rule::merged_rows;
  CHECK(fails(p).find("top-k") != std::string::npos);
  p = {};
  p.method = compress::method::hc_smoe;
  p.similarity_tokens = 16;
  CHECK(fails(p).find("params.similarity_tokens is for cka-merge only") != std::string::npos);
  p.method = compress::method::cka_merge;
  p.similarity = compress::expert_similarity::weights;
  CHECK(fails(p).find("params.similarity_tokens is for the CKA") != std::string::npos);
  p.similarity_tokens = 0;
  p.augment = 4;
  CHECK(fails(p).find("params.augment is for the CKA") != std::string::npos);
  p.augment = -1;
  CHECK(fails(p).find("must be >= 0") != std::string::npos);
  p = {};
  p.method = compress::method::prune;
  p.merge_router = moecomp::merge::router_rule::id_map;
  CHECK(fails(p).find("params.merge_router is for cka-merge only") != std::string::npos);
}

TEST_CASE("compress_layer: cka-merge's similarity tokens, augmentation and router map") {
  const opened o(planted_model(false, false), "compress_cka_34");
  const moecomp::host_matrix<float> x = model::read_calibration_tokens(o.calibration, "layers.0.moe_input", H);
  const model::moe_layer_weights<float> w = model::load_moe_layer<float>(o.checkpoint, o.m, 0);
  compress::compress_params base;
  base.method = compress::method::cka_merge;
  base.experts = 3;
  compress::layer_report plain_report;
  const compress::compressed_layer plain = run_layer(o, base, 0, x.const_view(), plain_report);
  SUBCASE("all the tokens given as similarity_tokens is the default") {
    compress::compress_params p = base;
    p.similarity_tokens = T;
    compress::layer_report r;
    const compress::compressed_layer c = run_layer(o, p, 0, x.const_view(), r);
    CHECK(r.groups == plain_report.groups);
    CHECK(c.w1 == plain.w1);
    CHECK(r.similarity_tokens == T);
    CHECK(r.augmented_tokens == 0);
    CHECK(plain_report.similarity_tokens == T);
  }
  SUBCASE("the first N tokens: the partition of a run given only those tokens") {
    for (index_t n : {5, 16, 40}) {
      compress::compress_params p = base;
      p.similarity_tokens = n;
      compress::layer_report r, prefix_report;
      run_layer(o, p, 0, x.const_view(), r);
      const moecomp::matrix_view<const float> head(x.data(), n, H, H);
      run_layer(o, base, 0, head, prefix_report);
      CHECK(r.groups == prefix_report.groups);
      CHECK(r.similarity_tokens == n);
      CHECK(r.calibration_tokens == T);  // the merge and the error still use every token
    }
    compress::compress_params p = base;
    p.similarity_tokens = T + 1;
    compress::layer_report r;
    CHECK(thrown_message([&] { run_layer(o, p, 0, x.const_view(), r); })
              .find("params.similarity_tokens 65 is more than the layer's 64 calibration tokens") != std::string::npos);
  }
  SUBCASE("augmentation: the documented mixes, appended to the similarity's tokens only") {
    for (std::uint64_t seed : {0u, 3u}) {
      compress::compress_params p = base;
      p.similarity_tokens = 24;
      p.augment = 40;
      p.seed = seed;
      compress::layer_report r, by_hand;
      const compress::compressed_layer c = run_layer(o, p, 0, x.const_view(), r);
      CHECK(r.augmented_tokens == 40);
      // The same tokens built here from the definition: 24 real ones, then 40 mixes.
      moecomp::host_matrix<float> xs(64, H);
      for (index_t t = 0; t < 24; ++t)
        for (index_t k = 0; k < H; ++k) xs(t, k) = x(t, k);
      moecomp::random_generator rng(seed, 0x6175676d656e74ull);
      for (index_t j = 0; j < 40; ++j) {
        const auto a = static_cast<index_t>(rng.uniform_index(24));
        const auto b = static_cast<index_t>(rng.uniform_index(24));
        const double lambda = rng.uniform<float>();
        for (index_t k = 0; k < H; ++k)
          xs(24 + j, k) = static_cast<float>(lambda * x(a, k) + (1.0 - lambda) * x(b, k));
      }
      compress::compress_params q = base;
      q.seed = seed;
      run_layer(o, q, 0, xs.const_view(), by_hand);
      CHECK(r.groups == by_hand.groups);
      // The uniform merge does not see the tokens; the error is measured on x, not on the mixes.
      compress::compress_params same = p;
      compress::layer_report again;
      const compress::compressed_layer c2 = run_layer(o, same, 0, x.const_view(), again);
      CHECK(c2.w1 == c.w1);
      CHECK(again.groups == r.groups);
      CHECK(r.calibration_tokens == T);
    }
  }
  SUBCASE("router map: the router kept, each old id mapped to its group; the experts as merged rows'") {
    compress::compress_params p = base;
    p.merge_router = moecomp::merge::router_rule::id_map;
    compress::layer_report r;
    const compress::compressed_layer c = run_layer(o, p, 0, x.const_view(), r);
    CHECK(r.groups == plain_report.groups);
    CHECK(r.router_rule == "map");
    CHECK(plain_report.router_rule == "merged");
    CHECK(r.id_map == r.groups);
    CHECK(c.slots == r.groups);
    CHECK(c.w1 == plain.w1);
    CHECK(c.w2 == plain.w2);
    REQUIRE(c.router.rows() == E);
    for (index_t e = 0; e < E; ++e)
      for (index_t h = 0; h < H; ++h) CHECK(c.router(e, h) == w.router(e, h));
    CHECK(plain.router.rows() == 3);
    CHECK(r.experts == E);
    CHECK(r.distinct_experts == 3);
    CHECK(std::isfinite(r.output_relative_error));
  }
}

TEST_CASE("compress_checkpoint: m-smoe and cka-merge's router map keep config.json's expert count") {
  const opened o(msmoe_planted(), "compress_msmoe_checkpoint");
  for (compress::method how : {compress::method::m_smoe, compress::method::cka_merge}) {
    compress::compress_params p;
    p.method = how;
    p.experts = 2;
    if (how == compress::method::cka_merge) p.merge_router = moecomp::merge::router_rule::id_map;
    p.expert_storage = compress::expert_storage::duplicated;  // one tensor per router id (distinct: tested above)
    p = compress::resolved_params(p, o.m, true, io::safetensors_dtype::f32);
    temp_dir out(std::string("compress_msmoe_out_") + compress::to_string(how));
    io::safetensors_sharded_writer writer(out.path.string(), "model");
    const compress::checkpoint_report r =
        compress::compress_checkpoint(moecomp::host_context(1), p, o.checkpoint, o.m,
                                      compress::layout_of(repository_layouts(), o.m), o.config, &o.calibration, writer);
    REQUIRE(r.ok());
    CHECK(r.config_json.find("\"num_local_experts\": 8") != std::string::npos);
    CHECK(r.config_json.find("\"id_maps\"") != std::string::npos);
    const io::safetensors_checkpoint written = io::open_safetensors_checkpoint(out.path.string());
    CHECK(written.info(prefix(0) + "gate.weight").shape == std::vector<index_t>{E, H});
    const auto report = compress::report_json(r, "planted", "c.safetensors", 0.0, 0.0);
    CHECK(report["layers"][0]["router"] == "map");
    if (how == compress::method::m_smoe) {
      CHECK(report["layers"][0]["dominants"] == nlohmann::ordered_json({6, 1}));
      CHECK(report["layers"][0]["frequencies"][2] == 0.0);
      CHECK(report["options"]["router"] == "map");
      CHECK(report["options"]["merge"] == "frequency");
      // Each slot holds its group's merged expert, here its dominant's weights to 1e-6: slots 0 and 2 are 6's.
      const std::vector<float> slot0 = written.tensor(prefix(0) + "experts.0.w2.weight").to_vector<float>();
      const std::vector<float> slot2 = written.tensor(prefix(0) + "experts.2.w2.weight").to_vector<float>();
      const std::vector<float>& dominant = o.planted.tensors.at(prefix(0) + "experts.6.w2.weight");
      CHECK(slot0 == slot2);
      for (std::size_t k = 0; k < dominant.size(); ++k) CHECK(slot0[k] == doctest::Approx(dominant[k]).epsilon(1e-6));
    } else {
      CHECK(report["options"]["router"] == "map");
      CHECK(report["options"]["augment"] == 0);
    }
  }
}

namespace {

/// Every file under `root` (recursively), by relative path, with its bytes.
std::map<std::string, std::string> directory_files(const std::filesystem::path& root) {
  std::map<std::string, std::string> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root))
    if (entry.is_regular_file())
      files[std::filesystem::relative(entry.path(), root).string()] = moecomp_test::read_file(entry.path().string());
  return files;
}

}  // namespace

TEST_CASE("one checkpoint from two processes: compress_checkpoint_layers and finish_checkpoint write compress_checkpoint's bytes") {
  // "Process" 1 compresses layer 0 with its own writers and releases the shards; process 0 compresses layer 1,
  // receives layer 0's report as JSON, adopts its shards and finishes. Every file equals one run's, byte for byte.
  const opened o(planted_model(false, false), "compress_parts");
  struct run_case {
    compress::method how;
    bool global, restore_dense;
  };
  for (const run_case rc : {run_case{compress::method::prune, false, false}, run_case{compress::method::prune, true, false},
                            run_case{compress::method::hc_smoe, false, false}, run_case{compress::method::cka_merge, false, false},
                            run_case{compress::method::m_smoe, false, false}, run_case{compress::method::resmoe, false, true}}) {
    const std::string name = std::string(compress::to_string(rc.how)) + (rc.global ? "_global" : "");
    CAPTURE(name);
    compress::compress_params p;
    p.method = rc.how;
    p.experts = rc.how == compress::method::resmoe ? 0 : 4;
    p.global = rc.global;
    p.restore_dense = rc.restore_dense;
    p = compress::resolved_params(p, o.m, true, compress::expert_dtype_of(o.checkpoint, o.m));
    const auto& layout = compress::layout_of(repository_layouts(), o.m);
    const moecomp::host_context ctx(2);

    temp_dir one("compress_parts_one_" + name);
    std::filesystem::create_directory(one.path / "dense");
    compress::checkpoint_report whole;
    {
      io::safetensors_sharded_writer writer(one.path.string(), "model"), dense((one.path / "dense").string(), "model");
      whole = compress::compress_checkpoint(ctx, p, o.checkpoint, o.m, layout, o.config, &o.calibration, writer, &dense);
      REQUIRE(whole.ok());
    }

    temp_dir split("compress_parts_split_" + name);
    std::filesystem::create_directory(split.path / "dense");
    std::string layer0_record;  // what process 1 sends to process 0
    {
      io::safetensors_sharded_writer writer(split.path.string(), "model"), dense((split.path / "dense").string(), "model");
      const compress::checkpoint_report part =
          compress::compress_checkpoint_layers(ctx, p, o.checkpoint, o.m, &o.calibration, {0}, writer, &dense);
      REQUIRE(part.ok());
      REQUIRE(part.layers.size() == 1);
      CHECK(writer.release() == std::vector<std::size_t>{0});
      (void)dense.release();
      layer0_record = compress::layer_report_json(part.layers[0]).dump();
    }  // released: process 1's shards stay
    compress::checkpoint_report finished;
    {
      io::safetensors_sharded_writer writer(split.path.string(), "model"), dense((split.path / "dense").string(), "model");
      const compress::checkpoint_report part =
          compress::compress_checkpoint_layers(ctx, p, o.checkpoint, o.m, &o.calibration, {1}, writer, &dense);
      REQUIRE(part.ok());
      std::vector<compress::layer_report> every{compress::parse_layer_report(nlohmann::ordered_json::parse(layer0_record)),
                                                part.layers[0]};
      finished = compress::finish_checkpoint(ctx, p, o.checkpoint, o.m, layout, o.config, every, writer, &dense);
      REQUIRE(finished.ok());
    }
    CHECK(finished.config_json == whole.config_json);
    CHECK(finished.dense_config_json == whole.dense_config_json);
    CHECK(finished.bytes_before == whole.bytes_before);
    CHECK(finished.bytes_after == whole.bytes_after);
    CHECK(finished.bytes_written == whole.bytes_written);
    CHECK(finished.parameters_before == whole.parameters_before);
    CHECK(finished.criterion == whole.criterion);
    const auto want = directory_files(one.path), got = directory_files(split.path);
    CHECK(want.size() >= 3);  // two layer shards and the rest, and the index
    for (const auto& entry : want) {  // (not a structured binding: clang 14 cannot capture one in CAPTURE)
      const std::string& file = entry.first;
      CAPTURE(file);
      REQUIRE(got.count(file) == 1);
      CHECK(got.at(file) == entry.second);
    }
    CHECK(got.size() == want.size());
    // The layer reports came through JSON unchanged (all but the clocks, which no two runs share).
    for (std::size_t l = 0; l < 2; ++l) {
      auto untimed = [](compress::layer_report r) {
        r.steps_seconds.clear();
        r.seconds = 0;
        return compress::layer_report_json(r);
      };
      CHECK(untimed(finished.layers[l]) == untimed(whole.layers[l]));
    }
  }
}

TEST_CASE("compress_checkpoint_layers and finish_checkpoint refuse misuse, and a missing shard, by name") {
  const opened o(planted_model(false, false), "compress_parts_misuse");
  const compress::compress_params p = resolved(o, compress::method::prune, 4);
  const auto& layout = compress::layout_of(repository_layouts(), o.m);
  const moecomp::host_context ctx(1);
  temp_dir dir("compress_parts_misuse_out");
  io::safetensors_sharded_writer writer(dir.path.string(), "model");
  CHECK(moecomp_test::thrown_message([&] {
          (void)compress::compress_checkpoint_layers(ctx, p, o.checkpoint, o.m, &o.calibration, {1, 0}, writer);
        }) == "compress_checkpoint_layers: layers must be ascending distinct layer indices in [0, 2), got 0 at position 1");
  CHECK(moecomp_test::thrown_message([&] {
          (void)compress::compress_checkpoint_layers(ctx, p, o.checkpoint, o.m, &o.calibration, {2}, writer);
        }) == "compress_checkpoint_layers: layers must be ascending distinct layer indices in [0, 2), got 2 at position 0");
  const compress::checkpoint_report part =
      compress::compress_checkpoint_layers(ctx, p, o.checkpoint, o.m, &o.calibration, {1}, writer);
  REQUIRE(part.ok());
  std::vector<compress::layer_report> one{part.layers[0]};
  CHECK(moecomp_test::thrown_message([&] {
          (void)compress::finish_checkpoint(ctx, p, o.checkpoint, o.m, layout, o.config, one, writer);
        }) == "finish_checkpoint: layers must hold every MoE layer's report (2), got 1");
  std::vector<compress::layer_report> swapped{part.layers[0], part.layers[0]};
  CHECK(moecomp_test::thrown_message([&] {
          (void)compress::finish_checkpoint(ctx, p, o.checkpoint, o.m, layout, o.config, swapped, writer);
        }) == "finish_checkpoint: layers[0] must be layer 'model.layers.0.block_sparse_moe', got "
              "'model.layers.1.block_sparse_moe'");
  // Layer 0's shard was never written: the finish names the file it looked for.
  std::vector<compress::layer_report> both{part.layers[0], part.layers[0]};
  both[0].layer = "model.layers.0.block_sparse_moe";
  CHECK(io_error_message([&] {
          (void)compress::finish_checkpoint(ctx, p, o.checkpoint, o.m, layout, o.config, both, writer);
        }) == "safetensors_sharded_writer::adopt_shard: shard 0 ('" + (dir.path / "model.part-1.safetensors").string() +
                  "') was not written: no such regular file");
}

TEST_CASE("assign_layers: the largest layers first, each to the lightest part, ties to the lower index") {
  using parts = std::vector<std::vector<index_t>>;
  CHECK(compress::assign_layers({10, 10, 10, 10}, 2) == parts{{0, 2}, {1, 3}});
  CHECK(compress::assign_layers({5, 30, 10, 20}, 2) == parts{{0, 1}, {2, 3}});  // 30 | 20, 10 | 5 to the tie's first
  CHECK(compress::assign_layers({5, 40, 10, 20}, 2) == parts{{1}, {0, 2, 3}});  // 40 | 20 + 10 + 5
  CHECK(compress::assign_layers({7, 7}, 3) == parts{{0}, {1}, {}});
  CHECK(compress::assign_layers({}, 2) == parts{{}, {}});
  CHECK(compress::assign_layers({1, 2, 3}, 1) == parts{{0, 1, 2}});
  CHECK(moecomp_test::thrown_message([] { (void)compress::assign_layers({1}, 0); }) ==
        "assign_layers: parts must be >= 1, got 0");
}

TEST_CASE("layer reports through JSON: every field, non-finite numbers included; a bad record names its field") {
  compress::layer_report l;
  l.layer = "model.layers.3.mlp";
  l.experts = 8;
  l.groups = {0, 1, 0};
  l.group_merge_errors = {0.25, std::numeric_limits<double>::quiet_NaN()};
  l.scores = {-std::numeric_limits<double>::infinity(), 1.0 / 3.0};
  l.formats = {{"bitmap", "-", "csr"}};
  l.residual_bytes = {1ULL << 40};
  l.barycenter_status = moecomp::status::iteration_limit;
  l.steps_seconds = {{"loading", 0.125}, {"merging", 2.5}};
  l.output_relative_error = std::numeric_limits<double>::quiet_NaN();
  const compress::layer_report back =
      compress::parse_layer_report(nlohmann::ordered_json::parse(compress::layer_report_json(l).dump()));
  CHECK(compress::layer_report_json(back) == compress::layer_report_json(l));
  CHECK(back.scores[1] == 1.0 / 3.0);  // 17 significant digits: the double itself
  CHECK(std::isnan(back.group_merge_errors[1]));
  CHECK(back.barycenter_status == moecomp::status::iteration_limit);
  nlohmann::ordered_json bad = compress::layer_report_json(l);
  bad.erase("kept");
  CHECK(io_error_message([&] { (void)compress::parse_layer_report(bad); }) == "parse_layer_report: kept must be present");
  bad = compress::layer_report_json(l);
  bad["experts"] = "eight";
  CHECK(io_error_message([&] { (void)compress::parse_layer_report(bad); }) ==
        "parse_layer_report: experts must be an integer");
}

TEST_CASE("safetensors_sharded_writer: shards at positions, adopted from another writer, released, gaps refused") {
  temp_dir dir("sharded_writer_parts");
  const std::vector<float> v{1.0f, 2.0f};
  const auto entry = [&](const std::string& name) {
    return io::safetensors_entry::of(name, moecomp::make_vector_view<const float>(v.data(), 2));
  };
  {
    io::safetensors_sharded_writer other(dir.path.string());
    other.write_shard_at(1, {entry("b")});
    CHECK(other.release() == std::vector<std::size_t>{1});
    CHECK(moecomp_test::thrown_message([&] { other.write_shard({entry("c")}); }) ==
          "safetensors_sharded_writer::write_shard: the writer is finished (or released)");
  }
  CHECK(std::filesystem::exists(dir.path / "model.part-2.safetensors"));  // released: not removed
  io::safetensors_sharded_writer writer(dir.path.string());
  writer.write_shard_at(0, {entry("a")});
  CHECK(moecomp_test::thrown_message([&] { writer.write_shard_at(0, {entry("x")}); }) ==
        "safetensors_sharded_writer::write_shard: the writer already holds shard 0");
  CHECK(io_error_message([&] { writer.adopt_shard(3); }) ==
        "safetensors_sharded_writer::adopt_shard: shard 3 ('" + (dir.path / "model.part-4.safetensors").string() +
            "') was not written: no such regular file");
  writer.write_shard_at(2, {entry("c")});
  CHECK(moecomp_test::thrown_message([&] { (void)writer.finish(); }) ==
        "safetensors_sharded_writer::finish: shards must be positions 0 to 1 without a gap, got a shard at position 2");
  writer.adopt_shard(1);
  CHECK(writer.holds_shard(1));
  const std::vector<std::string> files = writer.finish();
  REQUIRE(files.size() == 4);
  const io::safetensors_checkpoint back = io::open_safetensors_checkpoint(dir.path.string());
  CHECK(back.names() == std::vector<std::string>{"a", "b", "c"});
  CHECK(back.tensor("b").to_vector<float>() == v);
}
