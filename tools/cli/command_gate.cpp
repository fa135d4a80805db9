// moecomp gate L.npy (--top-k K | --tau T | --tau-code T | --cumulative T | --top-p P | --deepseek-v3 --n-group G
// --topk-group K --top-k K [--bias b.npy] [--scale S] | --deepseek-v2 --n-group G --topk-group K --top-k K [--scale S])
// [--softmax | --sigmoid] [--renormalize] [--min-k A] [--max-k B] [--repeat N] -o W.npy [--json]: routing weights (T x E,
// 0 for unselected experts). The contract: docs/cli.md; the rules: docs/gating.md.
#include "cli.hpp"

#include <moecomp/gating/routing.hpp>

#include <algorithm>
#include <limits>

namespace moecomp_cli {
namespace {

template <class T>
int run_gate(const arguments& args, output_files& outputs, const moecomp::io::npy_array& input, const std::string& path) {
  using namespace moecomp;
  const host_matrix<T> logits = load_float_matrix<T>(path, input, /*require_finite=*/true);
  gating::routing_params p;
  int rules = 0;
  const char* rule_option = "";
  auto rule = [&](const char* option, gating::routing_rule r, bool takes_value) {
    if (takes_value ? static_cast<bool>(args.value(option)) : args.flag(option)) {
      ++rules;
      rule_option = option;
      p.rule = r;
    }
  };
  rule("--tau", gating::routing_rule::threshold, true);
  rule("--tau-code", gating::routing_rule::threshold_code, true);
  rule("--cumulative", gating::routing_rule::cumulative, true);
  rule("--top-p", gating::routing_rule::top_p, true);
  rule("--deepseek-v3", gating::routing_rule::deepseek_v3, false);
  rule("--deepseek-v2", gating::routing_rule::group_limited_greedy, false);
  const bool grouped = p.rule == gating::routing_rule::deepseek_v3 || p.rule == gating::routing_rule::group_limited_greedy;
  if (rules == 0 && args.value("--top-k")) {
    ++rules;
    rule_option = "--top-k";
    p.rule = gating::routing_rule::top_k;
  }
  if (rules != 1)
    throw usage_error(std::string("option ") + (rules == 0 ? "--top-k" : rule_option) +
                      ": give exactly one rule: --top-k, --tau, --tau-code, --cumulative, --top-p, --deepseek-v3 or "
                      "--deepseek-v2");
  if (grouped && !args.value("--top-k")) throw usage_error(std::string("option ") + rule_option + ": needs --top-k K");
  if (!grouped && p.rule != gating::routing_rule::top_k && args.value("--top-k"))
    throw usage_error(std::string("option --top-k: ") + rule_option + " selects a varying number of experts by its " +
                      "own rule, so --top-k would be ignored; give one rule (--max-k B caps the count)");
  for (const char* group_option : {"--n-group", "--topk-group", "--scale", "--bias"})
    if (!grouped && args.value(group_option))
      throw usage_error(std::string("option ") + group_option + ": only with --deepseek-v3 or --deepseek-v2");
  if (p.rule == gating::routing_rule::group_limited_greedy && args.value("--bias"))
    throw usage_error("option --bias: only with --deepseek-v3 (the selection-only correction bias)");
  for (const char* count_option : {"--min-k", "--max-k"})
    if ((grouped || p.rule == gating::routing_rule::top_k) && args.value(count_option))
      throw usage_error(std::string("option ") + count_option + ": bounds the count of the threshold rules (--tau, " +
                        "--tau-code, --cumulative, --top-p); " + rule_option + " selects exactly --top-k experts");
  if (args.value("--top-k")) p.top_k = args.integer("--top-k", 2);
  if (const auto v = args.value(rule_option); v && !grouped && p.rule != gating::routing_rule::top_k)
    p.tau = args.number(rule_option, 0.5);
  if (args.flag("--softmax") && args.flag("--sigmoid")) throw usage_error("option --softmax: give --softmax or --sigmoid, not both");
  p.scores = args.flag("--softmax")   ? gating::score_function::softmax
             : args.flag("--sigmoid") ? gating::score_function::sigmoid
             : p.rule == gating::routing_rule::top_p || p.rule == gating::routing_rule::group_limited_greedy
                 ? gating::score_function::softmax
                 : gating::score_function::none;
  p.renormalize = args.flag("--renormalize");
  p.n_group = args.integer("--n-group", 1);
  p.topk_group = args.integer("--topk-group", 1);
  p.routed_scaling_factor = args.number("--scale", 1.0);
  p.min_k = args.integer("--min-k", 0);
  p.max_k = args.integer("--max-k", 0);
  host_vector<T> bias;
  if (const auto b = args.value("--bias")) {
    const io::npy_array array = read_operand(*b);
    if (array.ndim() != 1) throw usage_error("option --bias: " + *b + ": expected a 1-D array, got " + shape_text(array.shape()));
    bias = array.to_vector<T>();
  }
  const host_context ctx = make_context(args);
  host_matrix<T> weights(logits.rows(), logits.cols());
  gating::routing_result r;
  double seconds = std::numeric_limits<double>::infinity();
  for (int run = 0, runs = repeat_count(args); run < runs; ++run) {
    const stopwatch timer;
    try {
      r = gating::route_dense<T>(ctx, p, logits.const_view(), bias.const_view(), weights.view());
    } catch (const invalid_argument& e) {
      const std::string message = name_the_option(e.what(), {{"--top-k", "params.top_k"},
                                                             {rule_option, "params.tau"},
                                                             {"--n-group", "params.n_group"},
                                                             {"--topk-group", "params.topk_group"},
                                                             {"--min-k", "params.min_k"},
                                                             {"--max-k", "params.max_k"},
                                                             {"--scale", "params.routed_scaling_factor"},
                                                             {"--bias", "bias"}});
      throw usage_error(message != e.what() ? message : path + ": " + e.what());
    }
    seconds = std::min(seconds, timer.seconds());
  }
  outputs.stage("-o", weights.const_view());
  return conclude(args, outputs,
                  json_summary()
                      .add("command", std::string("gate"))
                      .add("tokens", static_cast<long long>(logits.rows()))
                      .add("experts", static_cast<long long>(logits.cols()))
                      .add("rule", std::string(gating::to_string(p.rule)))
                      .add("scores", std::string(gating::to_string(p.scores)))
                      .add("experts_per_token_mean", r.experts_per_token_mean)
                      .add("min_experts", static_cast<long long>(r.min_experts))
                      .add("max_experts", static_cast<long long>(r.max_experts))
                      .add("seconds", seconds),
                  status::ok, "gate", "");
}

int gate(const arguments& args, output_files& outputs) {
  const std::string& path = args.positional()[0];
  const moecomp::io::npy_array input = read_operand(path);
  return choose_precision(args, input.dtype(), path) == precision::float32 ? run_gate<float>(args, outputs, input, path)
                                                                           : run_gate<double>(args, outputs, input, path);
}

}  // namespace

const command_registration gate_registration{command{
    {"gate",
     "Routing weights (T x E) by top-k, DeepSeek-V3/V2 group-limited, SADMoE dynamic-k, cumulative share or top-p",
     "gate L.npy (--top-k K | --tau T | --tau-code T | --cumulative T | --top-p P | --deepseek-v3 --n-group G "
     "--topk-group K --top-k K [--bias b.npy] [--scale S] | --deepseek-v2 --n-group G --topk-group K --top-k K "
     "[--scale S]) [--softmax | --sigmoid] [--renormalize] [--min-k A] [--max-k B] [--repeat N] -o W.npy [--json]",
     1,
     1,
     {{"--top-k", true, "K experts per token (the top-k rule, or with --deepseek-v3 / --deepseek-v2)"},
      {"--tau", true, "T in [0, 1]: SADMoE's rule, select i if s_i >= T max s"},
      {"--tau-code", true, "T in [0, 1]: D2DMoE's code form, s_i >= (1 - T) max s"},
      {"--cumulative", true, "T in [0, 1]: the fewest largest scores whose share of the sum exceeds T"},
      {"--top-p", true, "P in [0, 1]: largest probabilities until their sum exceeds P (softmax by default)"},
      {"--deepseek-v3", false, "DeepSeek-V3: sigmoid, --bias for selection only, group score = top-2 sum"},
      {"--deepseek-v2", false, "DeepSeek-V2 group_limited_greedy: softmax, group score = max"},
      {"--n-group", true, "G groups of experts (DeepSeek)"},
      {"--topk-group", true, "K groups kept (DeepSeek)"},
      {"--bias", true, "b.npy: E selection-only correction biases (--deepseek-v3)"},
      {"--scale", true, "routed_scaling_factor (DeepSeek; default 1)"},
      {"--softmax", false, "scores = softmax(logits)"},
      {"--sigmoid", false, "scores = sigmoid(logits)"},
      {"--renormalize", false, "the selected weights sum to 1 (top-k; DeepSeek's norm_topk_prob)"},
      {"--min-k", true, "dynamic rules: at least A experts"},
      {"--max-k", true, "dynamic rules: at most B experts"},
      {"--repeat", true, "N >= 1: route N times, report the fastest in \"seconds\" (default 1)"}}},
    gate}};

}  // namespace moecomp_cli
