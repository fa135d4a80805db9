// moecomp compress [MODEL_DIR] -o OUT_DIR --method hc-smoe|cka-merge|resmoe|prune|moefy|sadmoe [options]: a
// Hugging Face MoE checkpoint in, a compressed checkpoint and a report out, one MoE layer at a time; or (moefy,
// sadmoe) a dense checkpoint whose FFNs are split into experts (sadmoe: with a trained router each). Without
// MODEL_DIR it compresses the embedded model (models/tiny-moe; models/tiny-dense for moefy and sadmoe). The contract: docs/cli.md; the methods: docs/compress.md.
//
// A thin shell over the library's pipeline (<moecomp/compress/compress.hpp>): the options become
// compress::compress_params, compress::resolved_params settles and checks them, compress::compress_checkpoint
// writes the shards into the staging directory beside OUT_DIR; this file writes config.json, the report and the
// model directory's other files there, shows the progress, and commits OUT_DIR (output_files) as the last step.
// Under an MPI launch with several ranks (process_group.hpp) each rank compresses its share of the layers
// (compress::compress_checkpoint_layers) into that directory and rank 0 finishes (compress::finish_checkpoint).
#include "cli.hpp"
#include "process_group.hpp"

#include <moecomp/compress/compress.hpp>
#include <moecomp/io/safetensors.hpp>
#include <moecomp/model/layout.hpp>
#include <moecomp/version.hpp>

#include <nlohmann/json.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace moecomp_cli {

const std::vector<std::pair<std::string, std::string>>& builtin_layouts();

namespace {

using moecomp::index_t;
namespace fs = std::filesystem;
namespace compress = moecomp::compress;
using json = nlohmann::ordered_json;

// ---------------------------------------------------------------------------------------------- progress

/// "layer i of L, step, elapsed, ETA" on stderr: redrawn in place on a terminal, one line per update with
/// --progress, nothing with --quiet or when stderr is not a terminal.
class progress_display {
 public:
  progress_display(bool terminal, bool lines, index_t layers) : terminal_(terminal), lines_(lines), layers_(layers) {}
  void update(index_t layer, const std::string& name, const std::string& step) {
    if (!terminal_ && !lines_) return;
    const double elapsed = seconds();
    std::ostringstream s;
    s.setf(std::ios::fixed);
    s.precision(1);
    if (terminal_) {  // a bar of the layers done
      const auto done = static_cast<int>(20 * layer / std::max<index_t>(1, layers_));
      s << "[" << std::string(static_cast<std::size_t>(done), '#') << std::string(static_cast<std::size_t>(20 - done), '.')
        << "] ";
    }
    s << "layer " << layer + 1 << " of " << layers_ << " (" << name << "): " << step << ", " << elapsed << " s";
    if (layer > 0) s << ", about " << elapsed / static_cast<double>(layer) * static_cast<double>(layers_ - layer) << " s left";
    if (terminal_) std::fprintf(stderr, "\r\033[K%s", s.str().c_str());
    else std::fprintf(stderr, "moecomp: compress: %s\n", s.str().c_str());
    std::fflush(stderr);
  }
  void finish() {
    if (terminal_) std::fprintf(stderr, "\r\033[K");
  }
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  bool terminal_, lines_;
  index_t layers_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// ---------------------------------------------------------------------------------------------- options

/// Parses the value of `option` with `parse` (a library parse_* function), naming the option in its error.
template <class Parse>
auto parse_option(const arguments& args, const std::string& option, Parse&& parse) {
  try {
    return parse(*args.value(option));
  } catch (const moecomp::invalid_argument& e) {
    throw usage_error("option " + option + ": " + e.what());
  }
}

/// The options of another method, refused by name: each option belongs to the methods listed.
void refuse_other_methods_options(const arguments& args, compress::method how) {
  using m = compress::method;
  const struct {
    const char* option;
    bool flag;
    std::vector<m> methods;
    const char* owners;
  } rules[] = {
      {"--features", false, {m::hc_smoe}, "hc-smoe only"},
      {"--linkage", false, {m::hc_smoe}, "hc-smoe only"},
      {"--merge", false, {m::hc_smoe, m::cka_merge}, "hc-smoe and cka-merge only"},
      {"--similarity", false, {m::cka_merge}, "cka-merge only"},
      {"--criterion", false, {m::prune}, "prune only"},
      {"--samples", false, {m::prune}, "prune --criterion output only"},
      {"--global", true, {m::prune}, "prune only"},
      {"--align", false, {m::hc_smoe, m::cka_merge}, "hc-smoe and cka-merge only (the methods that merge)"},
      {"--keep", false, {m::resmoe}, "resmoe only"},
      {"--format", false, {m::resmoe}, "resmoe only"},
      {"--values", false, {m::resmoe}, "resmoe only"},
      {"--max-iter", false, {m::resmoe, m::moefy, m::sadmoe}, "resmoe, moefy and sadmoe only"},
      {"--restore-dense", true, {m::resmoe}, "resmoe only"},
      {"--center", false, {m::resmoe}, "resmoe only"},  // resmoe's ablations
      {"--residual", false, {m::resmoe}, "resmoe only"},
      {"--rank", false, {m::resmoe}, "resmoe only"},
      {"--top-k", false, {m::moefy, m::sadmoe}, "moefy and sadmoe only"},
      {"--n-init", false, {m::moefy, m::sadmoe}, "moefy and sadmoe only"},
      {"--expert-size", false, {m::moefy, m::sadmoe}, "moefy and sadmoe only"},
      {"--router-hidden", false, {m::sadmoe}, "sadmoe only"},
      {"--router-bias", true, {m::sadmoe}, "sadmoe only"},
      {"--router-objective", false, {m::sadmoe}, "sadmoe only"},
      {"--router-lr", false, {m::sadmoe}, "sadmoe only"},
      {"--router-epochs", false, {m::sadmoe}, "sadmoe only"},
      {"--router-steps", false, {m::sadmoe}, "sadmoe only"},
      {"--router-batch-size", false, {m::sadmoe}, "sadmoe only"},
      {"--tau", false, {m::sadmoe}, "sadmoe only"},
      // expert storage (issue 34): only hc-smoe's id map repeats experts
      {"--expert-storage", false, {m::hc_smoe, m::m_smoe, m::cka_merge}, "hc-smoe, m-smoe and cka-merge --router map only"},
      // cka-merge's Table 3-4 settings (issue 34)
      {"--similarity-tokens", false, {m::cka_merge}, "cka-merge only"},
      {"--augment", false, {m::cka_merge}, "cka-merge only"},
      {"--router", false, {m::cka_merge}, "cka-merge only"},
  };
  for (const auto& r : rules) {
    const bool given = r.flag ? args.flag(r.option) : static_cast<bool>(args.value(r.option));
    if (!given || std::find(r.methods.begin(), r.methods.end(), how) != r.methods.end()) continue;
    if (compress::splits_dense(how))
      throw usage_error(std::string("option ") + r.option + ": not a " + compress::to_string(how) + " option");
    throw usage_error(std::string("option ") + r.option + ": " + r.owners);
  }
}

/// compress_params from the command line; "auto" where an option is left out.
compress::compress_params params_from_options(const arguments& args, compress::method how) {
  refuse_other_methods_options(args, how);
  compress::compress_params p;
  p.method = how;
  p.experts = args.integer("--experts", 0, 1, std::numeric_limits<std::int32_t>::max());
  if (args.value("--features"))
    p.features = parse_option(args, "--features", [](const std::string& v) {
      if (v == "auto") throw moecomp::invalid_argument("features: expected outputs, router-logits or weights, got 'auto'");
      return compress::parse_expert_features(v);
    });
  if (args.value("--linkage")) p.linkage = parse_option(args, "--linkage", moecomp::cluster::parse_linkage_method);
  if (args.value("--merge")) p.merge = parse_option(args, "--merge", moecomp::merge::parse_merge_method);
  if (args.value("--similarity"))
    p.similarity = parse_option(args, "--similarity", [](const std::string& v) {
      if (v == "auto") throw moecomp::invalid_argument("similarity: expected cka, weights or surrogate, got 'auto'");
      return compress::parse_expert_similarity(v);
    });
  if (args.value("--criterion")) p.criterion = parse_option(args, "--criterion", compress::parse_prune_criterion);
  p.samples = args.integer("--samples", 0, 1, std::numeric_limits<std::int32_t>::max());
  p.global = args.flag("--global");
  if (args.value("--align")) p.align = parse_option(args, "--align", compress::parse_merge_alignment);
  p.seed = static_cast<std::uint64_t>(args.integer("--seed", 0, 0, std::numeric_limits<long long>::max()));
  p.keep = args.number("--keep", 0.25);
  if (args.value("--format")) p.format = parse_option(args, "--format", moecomp::sparse::parse_sparse_format);
  if (args.value("--values")) p.values = parse_option(args, "--values", moecomp::sparse::parse_value_dtype);
  p.max_iterations = args.integer("--max-iter", 0, 1, std::numeric_limits<std::int32_t>::max());
  p.restore_dense = args.flag("--restore-dense");
  // resmoe's ablations
  if (args.value("--center")) p.center = parse_option(args, "--center", compress::parse_resmoe_center);
  if (args.value("--residual")) p.residual = parse_option(args, "--residual", compress::parse_resmoe_residual);
  p.rank = args.integer("--rank", 0, 1, std::numeric_limits<std::int32_t>::max());
  p.top_k = args.integer("--top-k", 0, 1, std::numeric_limits<std::int32_t>::max());
  p.restarts = args.integer("--n-init", 10, 1, std::numeric_limits<std::int32_t>::max());
  if (args.value("--expert-size") && args.value("--experts"))
    throw usage_error("option --expert-size: give --experts or --expert-size, not both");
  p.expert_size = args.integer("--expert-size", 0, 1, std::numeric_limits<std::int32_t>::max());
  constexpr long long most = std::numeric_limits<std::int32_t>::max();
  p.router.hidden = args.integer("--router-hidden", p.router.hidden, 1, most);
  p.router.bias = args.flag("--router-bias");
  if (args.value("--router-objective"))
    p.router.objective = parse_option(args, "--router-objective", moecomp::gating::parse_router_objective);
  p.router.learning_rate = args.number("--router-lr", p.router.learning_rate);
  p.router.epochs = args.integer("--router-epochs", p.router.epochs, 1, most);
  p.router.steps = args.integer("--router-steps", 0, 1, most);
  p.router.batch_size = args.integer("--router-batch-size", p.router.batch_size, 1, most);
  p.router.seed = p.seed;
  if (args.value("--tau")) {  // the report's thresholds; the first goes to config.json
    p.taus = args.numbers("--tau", 0.0, 1.0);
    p.tau = p.taus.front();
  }
  // expert storage (issue 34)
  if (args.value("--expert-storage"))
    p.expert_storage = parse_option(args, "--expert-storage", compress::parse_expert_storage);
  // cka-merge's Table 3-4 settings (issue 34): the similarity's tokens, its mixed tokens, the router
  p.similarity_tokens = args.integer("--similarity-tokens", 0, 1, most);
  p.augment = args.integer("--augment", 0, 0, most);
  if (args.value("--router"))
    p.merge_router = parse_option(args, "--router", [](const std::string& v) {
      if (v == "auto") throw moecomp::invalid_argument("router: expected merged, map or dominant, got 'auto'");
      return moecomp::merge::parse_router_rule(v);
    });
  if (args.value("--dtype") && args.value_or("--dtype", "") != "float32")
    throw usage_error("option --dtype: compress computes in float32 (weights are stored as the checkpoint's dtype), got '" +
                      args.value_or("--dtype", "") + "'");
  return p;
}

/// A library message about a parameter, with the option that set it named first.
std::string name_the_compress_option(const std::string& message) {
  return name_the_option(message, {{"--experts", "params.experts"},
                                   {"--features", "params.features"},
                                   {"--merge", "params.merge"},
                                   {"--similarity", "params.similarity"},
                                   {"--criterion", "params.criterion"},
                                   {"--samples", "params.samples"},
                                   {"--global", "params.global"},
                                   {"--align", "params.align"},
                                   {"--keep", "params.keep"},
                                   {"--format", "params.format"},
                                   {"--restore-dense", "params.restore_dense"},
                                   {"--center", "params.center"},
                                   {"--residual", "params.residual"},
                                   {"--rank", "params.rank"},
                                   {"--max-iter", "params.max_iterations"},
                                   {"--top-k", "params.top_k"},
                                   {"--n-init", "params.restarts"},
                                   {"--expert-size", "params.expert_size"},
                                   {"--router-hidden", "params.router.hidden"},
                                   {"--router-lr", "params.router.learning_rate"},
                                   {"--router-epochs", "params.router.epochs"},
                                   {"--router-steps", "params.router.steps"},
                                   {"--router-batch-size", "params.router.batch_size"},
                                   {"--calibration", "params.method sadmoe trains"},
                                   {"--tau", "params.taus"},
                                   {"--expert-storage", "params.expert_storage"},
                                   {"--similarity-tokens", "params.similarity_tokens"},
                                   {"--augment", "params.augment"},
                                   {"--router", "params.merge_router"},
                                   {"--method", "params.method"}});
}

// ---------------------------------------------------------------------------------------------- files

/// Peak resident set of this process so far, in bytes (getrusage; Linux reports kilobytes).
double peak_rss_bytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;
}

/// Where the embedded model `name` (tiny-moe, or tiny-dense for moefy) is: installed beside the tool
/// (share/moecomp/models/NAME), else the source tree this tool was built from.
std::string default_model_dir(const std::string& name) {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / "share" / "moecomp" / "models" / name;
    if (fs::is_directory(installed, ec)) return installed.string();
  }
#if defined(MOECOMP_SOURCE_MODELS_DIR)
  return std::string(MOECOMP_SOURCE_MODELS_DIR) + "/" + name;
#else
  throw usage_error("compress: no MODEL_DIR given and no embedded model installed beside the tool");
#endif
}

/// --calibration FILE, else MODEL_DIR/calibration.safetensors when it exists, else "" (none). Whatever is
/// named must be a regular file (or a link to one): a directory, FIFO or device there is an error, not "none".
std::string calibration_file(const arguments& args, const std::string& model_dir) {
  std::error_code ec;
  if (const auto c = args.value("--calibration")) {
    if (c->empty()) throw usage_error("option --calibration: expected a .safetensors file name, got ''");
    const fs::file_status status = fs::status(*c, ec);
    if (!fs::exists(status)) throw usage_error("option --calibration: no file '" + *c + "'");
    if (!fs::is_regular_file(status))
      throw usage_error("option --calibration: '" + *c + "' is " + moecomp::io::file_kind_text(status.type()) +
                        ", not a regular file");
    return *c;
  }
  const std::string fallback = (fs::path(model_dir) / "calibration.safetensors").string();
  if (!fs::exists(fs::symlink_status(fallback, ec))) return std::string();
  const fs::file_status status = fs::status(fallback, ec);
  if (!fs::is_regular_file(status))
    throw usage_error("compress: '" + fallback + "' is " +
                      (fs::exists(status) ? moecomp::io::file_kind_text(status.type()) : "a link to nothing") +
                      ", not a regular file of calibration tokens (remove it, or name one with --calibration FILE)");
  return fallback;
}

/// The model directory's other files (tokenizer, generation config), copied unchanged into `dir`.
void copy_other_files(const std::string& model_dir, const std::string& dir) {
  for (const auto& entry : fs::directory_iterator(model_dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name == "config.json" || entry.path().extension() == ".safetensors" ||
        name == "model.safetensors.index.json" || name.rfind('.', 0) == 0)
      continue;
    fs::copy_file(entry.path(), fs::path(dir) / name);
  }
}

/// Writes `text` as `dir`/`name` (inside the staging directory).
void write_text(const std::string& dir, const std::string& name, const std::string& text) {
  std::ofstream f(fs::path(dir) / name);
  f << text;
  f.close();
  if (!f) throw moecomp::io_error("compress: cannot write " + name + " into '" + dir + "'");
}

std::string fixed(double v, int digits) {
  if (std::isnan(v)) return "-";
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << v;
  return s.str();
}

/// The table of the layers on stdout.
void print_table(const compress::checkpoint_report& r, const std::string& model_dir, const json& totals) {
  const compress::compress_params& p = r.params;
  const bool dense = compress::splits_dense(p.method);
  if (dense) {
    const index_t S = r.layers.empty() ? 0 : r.layers.front().expert_size;
    std::printf("moecomp compress: %s, %s (%s), %lld dense FFNs of %lld neurons -> %lld experts of %lld, top-%lld "
                "(%.1f%% of the FFN's multiply-adds)\n",
                compress::to_string(p.method), model_dir.c_str(), r.family.c_str(), static_cast<long long>(r.layers.size()),
                static_cast<long long>(S * p.experts), static_cast<long long>(p.experts), static_cast<long long>(S),
                static_cast<long long>(p.top_k), 100.0 * r.flops_ratio);
    std::printf("%-34s %10s %12s %12s %8s\n", "layer", "error", "MB before", "MB after", "seconds");
  } else {
    std::printf("moecomp compress: %s, %s (%s), %lld MoE layers, %lld -> %lld experts per layer\n",
                compress::to_string(p.method), model_dir.c_str(), r.family.c_str(), static_cast<long long>(r.layers.size()),
                static_cast<long long>(r.experts_before), static_cast<long long>(r.experts_after));
    std::printf("%-34s %9s %10s %12s %12s %8s\n", "layer", "experts", "error", "MB before", "MB after", "seconds");
  }
  for (const compress::layer_report& l : r.layers) {
    const std::string error = fixed(l.output_relative_error, 4);
    if (dense)
      std::printf("%-34s %10s %12.3f %12.3f %8.2f\n", l.layer.c_str(), error.c_str(), l.bytes_before / 1e6,
                  l.bytes_after / 1e6, l.seconds);
    else
      std::printf("%-34s %4lld->%-4lld %10s %12.3f %12.3f %8.2f\n", l.layer.c_str(), static_cast<long long>(r.experts_before),
                  static_cast<long long>(l.distinct_experts), error.c_str(), l.bytes_before / 1e6, l.bytes_after / 1e6,
                  l.seconds);
  }
  std::printf("total: %.3f MB -> %.3f MB of %s tensors (%.2f bits per weight), %.2f s, peak RSS %.1f MB\n",
              r.bytes_before / 1e6, r.bytes_after / 1e6, dense ? "FFN" : "MoE", totals["bits_per_weight"].get<double>(),
              totals["seconds"].get<double>(), totals["peak_rss_bytes"].get<double>() / 1e6);
  if (!r.expert_storage.empty())  // expert storage (issue 34): the form written, and its bytes
    std::printf("experts stored %s: %.3f MB of MoE tensors written%s\n", r.expert_storage.c_str(), r.bytes_written / 1e6,
                r.expert_storage == "distinct" ? " (each merged expert once, with an id map per layer)"
                                               : " (every router id's slot, Hugging Face-loadable)");
}

// ---------------------------------------------------------------------------------------------- the command

/// What every rank reads and settles before any layer: the options, the model, its calibration tokens.
struct compress_inputs {
  compress::method how{};
  std::string model_dir, calibration_path, config_text;
  compress::compress_params params;
  std::vector<moecomp::model::checkpoint_layout> layouts;
  std::optional<moecomp::io::safetensors_checkpoint> checkpoint;
  std::optional<moecomp::model::moe_model> moe;
  std::optional<moecomp::model::dense_model> dense;
  std::optional<moecomp::io::safetensors_file> calibration;
  const moecomp::io::safetensors_file* calibration_file() const { return calibration ? &*calibration : nullptr; }
};

compress_inputs read_compress_inputs(const arguments& args, output_files& outputs) {
  using namespace moecomp;
  compress_inputs in;
  if (!args.value("--method"))
    throw usage_error("option --method: required: hc-smoe, cka-merge, m-smoe, resmoe, prune (MoE checkpoints), moefy or "
                      "sadmoe (dense)");
  in.how = parse_option(args, "--method", compress::parse_method);
  const compress::method how = in.how;
  in.model_dir = args.positional().empty()
                     ? default_model_dir(how == compress::method::sadmoe ? "tiny-dense-hoyer"
                                       : how == compress::method::moefy ? "tiny-dense" : "tiny-moe")
                     : args.positional()[0];
  const std::string& model_dir = in.model_dir;
  if (!args.value("-o")) throw usage_error("option -o: required: the output directory OUT_DIR");
  if (args.positional().empty()) outputs.add_input(model_dir, "embedded model '" + model_dir + "'");
  in.params = params_from_options(args, how);

  // The model: config.json, the checkpoint, the layout.
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec)) throw usage_error("compress: MODEL_DIR '" + model_dir + "' is not a directory");
  const std::string config_path = (fs::path(model_dir) / "config.json").string();
  if (!fs::exists(fs::symlink_status(config_path, ec))) throw usage_error("compress: '" + model_dir + "' has no config.json");
  if (const auto dir = args.value("--layouts")) {
    in.layouts = model::read_checkpoint_layouts(*dir);
  } else {
    for (const auto& [name, text] : builtin_layouts()) in.layouts.push_back(model::parse_checkpoint_layout(text, "layouts/" + name));
  }
  in.config_text = model::read_text_file(config_path);
  in.checkpoint.emplace(io::open_safetensors_checkpoint(model_dir));
  // A method of the other kind: said in the tool's words before the library's checks.
  std::string model_type;
  const model::model_kind kind = model::kind_of_model(in.layouts, in.config_text, &model_type);
  if (compress::splits_dense(how) && kind == model::model_kind::moe)
    throw usage_error("compress: --method " + std::string(compress::to_string(how)) + " splits dense checkpoints, and '" +
                      model_dir + "' is an MoE model (model_type '" +
                      model_type + "'): use hc-smoe, cka-merge, m-smoe, resmoe or prune");
  if (!compress::splits_dense(how) && kind == model::model_kind::dense)
    throw usage_error("compress: --method " + std::string(compress::to_string(how)) + " compresses MoE checkpoints, and '" +
                      model_dir + "' is a dense model (model_type '" + model_type +
                      "'): --method moefy or sadmoe splits its FFNs into experts");
  in.calibration_path = calibration_file(args, model_dir);
  try {
    if (compress::splits_dense(how)) {
      in.dense.emplace(model::describe_dense_model(in.layouts, in.config_text, *in.checkpoint, config_path));
      in.params = compress::resolved_dense_params(in.params, *in.dense, !in.calibration_path.empty());
    } else {
      in.moe.emplace(model::describe_moe_model(in.layouts, in.config_text, *in.checkpoint, config_path));
      if (in.moe->layers.empty())
        throw usage_error("compress: '" + model_dir + "' has no MoE layer under its layout (" + in.moe->family + ")");
      in.params = compress::resolved_params(in.params, *in.moe, !in.calibration_path.empty(),
                                            compress::expert_dtype_of(*in.checkpoint, *in.moe));
    }
  } catch (const invalid_argument& e) {
    throw usage_error(name_the_compress_option(e.what()));
  }
  if (!in.calibration_path.empty()) {
    try {
      in.calibration.emplace(io::read_safetensors(in.calibration_path));
    } catch (const io_error& e) {
      throw usage_error(std::string("option --calibration: ") + e.what());
    }
  }
  return in;
}

/// Runs `step` on every rank of `group`, then settles who failed: the first rank that failed rethrows its error
/// (the run's one error line), the other ranks end silently with status 2. One process: `step` as it is.
template <class Step>
void on_every_rank(process_group& group, Step&& step) {
  if (!group.distributed()) {
    step();
    return;
  }
  std::exception_ptr failure;
  try {
    step();
  } catch (...) {
    failure = std::current_exception();
  }
  const int first = group.first_failure(failure != nullptr);
  if (first == group.size()) return;
  if (first == group.rank()) std::rethrow_exception(failure);
  throw silent_failure{2};
}

/// A rank's hold on the staging directory rank 0 made (ranks other than 0): a signal removes it whole (the signal
/// handler's temporaries), and so does an error on the way out; rank 0 commits it.
class shared_staging {
 public:
  explicit shared_staging(std::string path) : path_(std::move(path)) {
    temporary_file_hooks().creating(path_.c_str(), nullptr);
  }
  ~shared_staging() {
    if (!path_.empty() && std::uncaught_exceptions() > 0) {
      std::error_code ignored;
      fs::remove_all(path_, ignored);
    }
    temporary_file_hooks().released(path_.c_str(), nullptr);
  }
  shared_staging(const shared_staging&) = delete;
  shared_staging& operator=(const shared_staging&) = delete;

 private:
  std::string path_;
};

/// compress's numerical failure: one layer's output error is not finite.
[[noreturn]] void throw_layer_failure(const compress::checkpoint_report& report, bool moe) {
  throw numerical_failure("compress: " + std::string(moe ? "MoE layer " : "FFN ") + report.failed_layer +
                          ": the compressed layer's output error on the calibration tokens is " +
                          (std::isnan(report.criterion) ? "nan" : "inf") +
                          " (numerical failure, status numerical_error), nothing was written");
}

int compress_command(const arguments& args, output_files& outputs) {
  using namespace moecomp;
  const auto started = std::chrono::steady_clock::now();
  // Under mpirun or srun with several ranks, the MoE layers are spread over them (docs/cli.md, "compress on
  // several processes"); rank 0 writes the rest, finishes and commits.
  process_group& group = process_group::world();
  const int rank = group.rank(), ranks = group.size();
  compress_inputs in;
  on_every_rank(group, [&] { in = read_compress_inputs(args, outputs); });
  const std::string& model_dir = in.model_dir;
  const std::string& calibration_path = in.calibration_path;
  const io::safetensors_checkpoint& checkpoint = *in.checkpoint;
  const std::optional<model::moe_model>& moe = in.moe;
  const compress::compress_params& params = in.params;
  const host_context ctx = make_context(args);

  // The output directory's contents go to the staging directory that commit() renames: rank 0 makes it beside
  // OUT_DIR, and every rank writes its layers' shards there.
  std::string staging;
  const std::string dense_subdir = "dense";
  on_every_rank(group, [&] {
    if (rank != 0) return;
    staging = outputs.staging_directory();
    if (params.restore_dense) fs::create_directory(fs::path(staging) / dense_subdir);
  });
  staging = group.broadcast(staging, 0);
  std::optional<shared_staging> hold;
  if (rank != 0) hold.emplace(staging);
  const std::string dense_dir = (fs::path(staging) / dense_subdir).string();

  const index_t layers = static_cast<index_t>(moe ? moe->layers.size() : in.dense->layers.size());
  progress_display progress(rank == 0 && !args.flag("--quiet") && ::isatty(2) != 0,
                            rank == 0 && args.flag("--progress") && !args.flag("--quiet"), layers);
  compress::compress_observer observer;
  observer.step = [&](index_t layer, index_t, const std::string& name, const std::string& step) {
    progress.update(layer, name, step);
  };
  compress::checkpoint_report report;
  json report_json_value;
  std::optional<io::safetensors_sharded_writer> writer, dense_writer;
  const auto library_errors = [&](auto&& run) {
    try {
      return run();
    } catch (const io_error& e) {
      const std::string what = e.what();
      if (what.find("read_calibration_tokens") != std::string::npos) throw usage_error("option --calibration: " + what);
      throw;
    } catch (const invalid_argument& e) {  // a layer's own rule (issue 34: more similarity tokens than it has)
      throw usage_error(name_the_compress_option(e.what()));
    }
  };
  // 1. Every rank its layers (one process: all of them; moefy and sadmoe: rank 0 alone). Each step ends with
  //    every rank agreeing that none failed (on_every_rank), so that the collectives stay matched.
  std::vector<index_t> mine;
  compress::checkpoint_report part;
  on_every_rank(group, [&] {
    writer.emplace(staging, "model");
    if (params.restore_dense) dense_writer.emplace(dense_dir, "model");
    io::safetensors_sharded_writer* dense_out = dense_writer ? &*dense_writer : nullptr;
    if (!moe) {
      if (rank != 0) return;
      report = library_errors([&] {
        return compress::compress_dense_checkpoint(ctx, params, checkpoint, *in.dense, in.config_text, in.calibration_file(),
                                                   *writer, observer);
      });
    } else if (ranks == 1) {
      report = library_errors([&] {
        return compress::compress_checkpoint(ctx, params, checkpoint, *moe, compress::layout_of(in.layouts, *moe),
                                             in.config_text, in.calibration_file(), *writer, dense_out, observer);
      });
    } else {
      mine = compress::assign_layers(compress::layer_bytes(checkpoint, *moe), ranks)[static_cast<std::size_t>(rank)];
      part = library_errors([&] {
        return compress::compress_checkpoint_layers(ctx, params, checkpoint, *moe, in.calibration_file(), mine, *writer,
                                                    dense_out, observer);
      });
      if (part.status == status::numerical_error) throw_layer_failure(part, true);
      if (rank != 0) {  // the shards stay for rank 0 to adopt
        writer->release();
        if (dense_writer) dense_writer->release();
      }
    }
  });
  // 2. The layer reports to rank 0 (distributed MoE runs).
  std::vector<compress::layer_report> every;
  if (moe && ranks > 1) {
    json records = json::array();
    for (std::size_t k = 0; k < mine.size(); ++k)
      records.push_back({{"index", mine[k]}, {"report", compress::layer_report_json(part.layers[k])}});
    const std::vector<std::string> gathered = group.gather(records.dump(), 0);
    if (rank == 0) {
      std::vector<std::optional<compress::layer_report>> by_layer(static_cast<std::size_t>(layers));
      for (const std::string& text : gathered)
        for (const json& record : json::parse(text))
          by_layer[record.at("index").get<std::size_t>()] = compress::parse_layer_report(record.at("report"));
      for (auto& l : by_layer) every.push_back(std::move(*l));
    }
  }
  // 3. Rank 0: the rest of the checkpoint, config.json, the report, and the commit.
  on_every_rank(group, [&] {
    if (rank != 0) return;
    if (moe && ranks > 1)
      report = library_errors([&] {
        return compress::finish_checkpoint(ctx, params, checkpoint, *moe, compress::layout_of(in.layouts, *moe),
                                           in.config_text, std::move(every), *writer,
                                           dense_writer ? &*dense_writer : nullptr, observer);
      });
    progress.finish();
    if (report.status == status::numerical_error) throw_layer_failure(report, moe.has_value());
    write_text(staging, "config.json", report.config_json);
    copy_other_files(model_dir, staging);
    if (dense_writer) {
      write_text(dense_dir, "config.json", report.dense_config_json);
      copy_other_files(model_dir, dense_dir);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    report_json_value = compress::report_json(report, model_dir, calibration_path, seconds, peak_rss_bytes());
    const std::string report_text = report_json_value.dump(2) + "\n";
    write_text(staging, "compression_report.json", report_text);
    outputs.stage_text("--report", report_text);  // checked with the other outputs before any work
    outputs.commit();  // the last step: nothing before it is left behind, nothing after it changes the outputs
  });
  hold.reset();  // committed by rank 0: nothing of the staging directory is this rank's any more
  group.finalize();
  if (rank != 0) return 0;
  if (args.flag("--json")) {  // the report itself, on one line
    std::printf("%s\n", report_json_value.dump().c_str());
    return 0;
  }
  print_table(report, model_dir, report_json_value["totals"]);
  const std::string out_dir = *args.value("-o");
  std::printf("wrote %s (report: %s)\n", out_dir.c_str(),
              args.value("--report") ? args.value("--report")->c_str() : (out_dir + "/compression_report.json").c_str());
  return 0;
}

}  // namespace

const command_registration compress_registration{command{
    {"compress",
     "compress a Hugging Face MoE checkpoint layer by layer: HC-SMoE, the CKA merge with router rows, ResMoE, "
     "expert pruning; or split a dense checkpoint's FFNs into experts (moefy)",
     "compress [MODEL_DIR] -o OUT_DIR --method hc-smoe|cka-merge|m-smoe|resmoe|prune|moefy|sadmoe [--experts N] "
     "[--calibration FILE] [--features F] [--linkage L] [--merge M] [--align A] [--similarity S] "
     "[--similarity-tokens N] [--augment N] [--router R] [--criterion C] [--samples S] [--global] "
     "[--seed S] [--layouts DIR] "
     "[--keep F] [--center C] [--residual R] [--rank K] [--format F] [--values V] [--max-iter N] [--restore-dense] "
     "[--top-k K] [--n-init N] [--expert-storage S] "
     "[--report R.json] [--quiet] [--progress] [--json]",
     0,
     1,
     {{"--method", true,
       "hc-smoe|cka-merge|m-smoe|resmoe|prune (MoE checkpoints), moefy|sadmoe (dense checkpoints) (required)"},
      {"--experts", true,
       "N: experts per MoE layer after compression (default: half, at least top-k); moefy: experts per FFN, a divisor "
       "of its neurons (default: experts of 32 neurons)"},
      {"--calibration", true,
       "FILE.safetensors with layers.{i}.moe_input (T x hidden) per MoE layer (default MODEL_DIR/calibration.safetensors)"},
      {"--features", true, "hc-smoe: outputs|router-logits|weights (default outputs with calibration, else weights)"},
      {"--linkage", true, "hc-smoe: single|complete|average|weighted|ward|centroid|median (default average)"},
      {"--merge", true,
       "hc-smoe: frequency|average|fix-dom (default frequency; average without calibration); cka-merge: "
       "uniform|dominant|learned (default uniform)"},
      {"--similarity", true, "cka-merge: cka|weights|surrogate (default cka with calibration, else weights)"},
      {"--align", true,
       "hc-smoe, cka-merge: none|weights|activations: align each member's neurons to its group's dominant before "
       "merging (default none, the papers')"},
      {"--similarity-tokens", true, "cka-merge (cka): the first N calibration tokens for the similarity (default all)"},
      {"--augment", true,
       "cka-merge (cka): N mixed tokens (lambda x_a + (1 - lambda) x_b, seeded) added for the similarity (default 0)"},
      {"--router", true,
       "cka-merge: merged|map|dominant: router rows merged (Eq. 6), kept with an id map, or the dominant's (default "
       "merged; dominant with --merge dominant)"},
      {"--criterion", true,
       "prune: frequency|reap|router-score|output (default frequency; router-score: S-prune; output: O-prune, the "
       "subset whose layer output is closest)"},
      {"--samples", true,
       "prune --criterion output: subsets searched, all of them when C(E, N) <= S, else S seeded random ones "
       "(default 100000)"},
      {"--global", false,
       "prune --criterion frequency|router-score: rank every layer's experts together (HC-SMoE's global F-prune and "
       "S-prune); layers keep different counts, N per layer on average, at least top-k each"},
      {"--seed", true, "seed of moecomp's generator (token caps, partition restarts; default 0)"},
      {"--layouts", true, "DIR: read the checkpoint layouts from DIR/*.json instead of the built-in ones"},
      {"--keep", true, "resmoe: the fraction of each expert's design residual kept, (0, 1] (default 0.25, ResMoE's)"},
      {"--center", true, "resmoe: barycenter|mean|none: the base expert (default barycenter; mean: unaligned "
                         "average; none: each expert compressed alone)"},
      {"--residual", true, "resmoe: prune|svd|structured: each design residual's compression (default prune)"},
      {"--rank", true, "resmoe --residual svd: the factors' rank, 1 to min(d_ff, width) (default: the parameters "
                       "of --keep, floor(keep rows cols / (rows + cols)))"},
      {"--format", true, "resmoe: the residuals' format csr16|bitmap|auto (default auto: the smallest)"},
      {"--values", true, "resmoe: the residuals' values fp32|fp16|bf16 (default: the experts' dtype)"},
      {"--max-iter", true, "resmoe: barycenter iterations (default 100, POT's and ResMoE's); moefy: k-means iterations (default 300)"},
      {"--restore-dense", false, "resmoe: also write OUT_DIR/dense, an ordinary checkpoint of the restored experts"},
      {"--top-k", true, "moefy: experts per token for the router the output records and the report's error (default E/4)"},
      {"--n-init", true, "moefy, sadmoe: balanced k-means runs, the lowest inertia kept (default 10)"},
      {"--expert-size", true, "moefy, sadmoe: neurons per expert instead of --experts (a divisor of the FFN's neurons)"},
      {"--router-hidden", true, "sadmoe: the router's hidden width d_h (default 128, the paper's)"},
      {"--router-bias", false, "sadmoe: biases in the router (D2DMoE's routers have none)"},
      {"--router-objective", true, "sadmoe: norm (SADMoE: each expert's output norm) | moefication (default norm)"},
      {"--router-lr", true, "sadmoe: Adam's learning rate (default 1e-3)"},
      {"--router-epochs", true, "sadmoe: passes over the calibration tokens (default 10)"},
      {"--router-steps", true, "sadmoe: stop after this many steps instead"},
      {"--router-batch-size", true, "sadmoe: tokens per step (default 64)"},
      {"--tau", true, "sadmoe: dynamic-k thresholds in [0, 1] the report measures, comma-separated (default "
                      "0.1,0.3,0.5,0.7,0.9); the first goes to config.json (default 0.5)"},
      {"--expert-storage", true,
       "hc-smoe, m-smoe, cka-merge --router map: distinct (each merged expert once, plus the id map; the default) | duplicated (every router id's "
       "slot, loadable by Hugging Face)"},
      {"--report", true, "R.json: also write the report here (it is always in OUT_DIR/compression_report.json)", true},
      {"--quiet", false, "no progress display"},
      {"--progress", false, "progress as one line per step on stderr, also when stderr is not a terminal"}},
     /*output_directory=*/true},
    compress_command}};

}  // namespace moecomp_cli
