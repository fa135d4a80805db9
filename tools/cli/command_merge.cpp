// moecomp merge --w1 W1.npy --w2 W2.npy [--w3 W3.npy] --groups G.npy --method M [--frequencies f.npy]
// [--inputs X.npy] [--router R.npy] [--dominants D.npy] [--activation ACT] [--router-rule RULE] [--top-k K]
// [--frequency-top-k K] [--token-cap N] [--seed S] [--objective O] [--max-iter N] [--no-errors] -o OUT_DIR [--json]:
// merge each group of a stack of E experts (W1, W3: E x d_ff x d; W2: E x d x d_ff) into one (merge::merge_experts).
// Writes w1.npy, w2.npy, w3.npy (g experts in group-id order), router.npy (g x d) when the router rule merges
// rows, and map.npy (int64, old id -> group id) into OUT_DIR, whole or not at all. The contract: docs/cli.md;
// the methods: docs/merge.md.
#include "cli.hpp"

#include <moecomp/merge/merge.hpp>

#include <cstdint>
#include <limits>
#include <vector>

namespace moecomp_cli {
namespace {

/// A 1-D int32 / int64 array given to `option`.
std::vector<std::int64_t> load_ids(const std::string& option, const std::string& path) {
  const moecomp::io::npy_array a = read_operand(path);
  if (a.ndim() != 1)
    throw usage_error("option " + option + ": " + path + ": expected a 1-D array, got shape " + shape_text(a.shape()));
  if (a.dtype() != moecomp::io::npy_dtype::int32 && a.dtype() != moecomp::io::npy_dtype::int64)
    throw usage_error("option " + option + ": " + path + ": dtype " + moecomp::io::to_string(a.dtype()) +
                      " is not accepted here, expected int32 or int64");
  const moecomp::host_vector<std::int64_t> v = a.to_vector<std::int64_t>();
  return std::vector<std::int64_t>(v.data(), v.data() + v.size());
}

std::vector<double> load_frequencies(const std::string& path) {
  const moecomp::io::npy_array a = read_operand(path);
  if (a.ndim() != 1)
    throw usage_error("option --frequencies: " + path + ": expected a 1-D array, got shape " + shape_text(a.shape()));
  if (a.dtype() != moecomp::io::npy_dtype::float32 && a.dtype() != moecomp::io::npy_dtype::float64)
    throw usage_error("option --frequencies: " + path + ": dtype " + moecomp::io::to_string(a.dtype()) +
                      " is not accepted here, expected float32 or float64");
  const moecomp::host_vector<double> v = a.to_vector<double>();
  return std::vector<double>(v.data(), v.data() + v.size());
}

/// The library's message with the option that gave the offending argument in front.
std::string name_the_merge_option(const std::string& message) {
  std::string m = name_the_option(message, {{"--top-k", "params.routing_top_k"},
                                            {"--frequency-top-k", "params.frequency_top_k"},
                                            {"--token-cap", "params.token_cap"},
                                            {"--max-iter", "params.max_iterations"}});
  if (m.rfind("option ", 0) == 0) return m;
  const std::pair<const char*, const char*> named[] = {
      {": frequencies", "--frequencies"}, {": dominants", "--dominants"}, {": x must", "--inputs"},
      {": router must", "--router"},      {": groups", "--groups"},       {"needs calibration tokens", "--inputs"},
      {"needs frequencies", "--frequencies"}, {"needs the router", "--router"}, {": w3", "--w3"},
      {": w2", "--w2"},                   {": w1", "--w1"}};
  for (const auto& [fragment, option] : named)
    if (m.find(fragment) != std::string::npos) return std::string("option ") + option + ": " + m;
  return m;
}

template <class T>
int run_merge(const arguments& args, output_files& outputs) {
  using namespace moecomp;
  merge::merge_params params;
  try {
    params.method = merge::parse_merge_method(args.value_or("--method", ""));
  } catch (const invalid_argument& e) {
    throw usage_error(std::string("option --") + e.what());
  }
  try {
    params.forward.act = moe::parse_activation(args.value_or("--activation", "silu"));
    params.align.forward.act = params.forward.act;
  } catch (const invalid_argument& e) {
    throw usage_error(std::string("option --") + e.what());
  }
  try {
    params.router = merge::parse_router_rule(args.value_or("--router-rule", "auto"));
  } catch (const invalid_argument& e) {
    throw usage_error("option --router-rule: " + std::string(e.what()).substr(std::string("router rule: ").size()));
  }
  try {
    params.align.objective = align::parse_align_objective(args.value_or("--objective", "weights"));
  } catch (const invalid_argument& e) {
    throw usage_error(std::string("option --") + e.what());
  }
  params.routing_top_k = args.integer("--top-k", 2);
  params.frequency_top_k = args.integer("--frequency-top-k", 2);
  params.token_cap = args.integer("--token-cap", 50000);
  params.seed = static_cast<std::uint64_t>(args.integer("--seed", 0, 0, std::numeric_limits<long long>::max()));
  params.report_errors = !args.flag("--no-errors");
  const long long max_iter = args.integer("--max-iter", 100);
  params.max_iterations = max_iter > 1000000000 ? 1000000000 : static_cast<int>(max_iter);

  const loaded_stack<T> w1 = load_stack_option<T>(args, "--w1", "E x d_ff x d");
  const loaded_stack<T> w2 = load_stack_option<T>(args, "--w2", "E x d x d_ff");
  const loaded_stack<T> w3 = args.value("--w3") ? load_stack_option<T>(args, "--w3", "E x d_ff x d") : loaded_stack<T>();
  const std::vector<std::int64_t> groups = load_ids("--groups", *args.value("--groups"));
  const std::vector<double> frequencies = args.value("--frequencies") ? load_frequencies(*args.value("--frequencies"))
                                                                       : std::vector<double>();
  const std::vector<std::int64_t> dominants =
      args.value("--dominants") ? load_ids("--dominants", *args.value("--dominants")) : std::vector<std::int64_t>();
  const host_matrix<T> x = args.value("--inputs") ? load_matrix_option<T>(args, "--inputs") : host_matrix<T>();
  const host_matrix<T> router = args.value("--router") ? load_matrix_option<T>(args, "--router") : host_matrix<T>();

  const moe::ffn_expert_stack_view<T> experts{w1.view(), w3.view(), w2.view(), {}, {}, {}};
  const index_t e = w1.count, d = w1.cols, d_ff = w1.rows;
  // Group count and the shapes first, so that a bad --groups is named before any allocation.
  index_t g = 0;
  try {
    if (static_cast<index_t>(groups.size()) != e)
      throw usage_error("option --groups: expected " + std::to_string(e) + " entries (one group id per expert of --w1), got " +
                        std::to_string(groups.size()));
    g = merge::group_count(make_vector_view<const std::int64_t>(groups.data(), e));
  } catch (const invalid_argument& err) {
    throw usage_error(name_the_merge_option(err.what()));
  }
  // HC-SMoE's frequency merge divides by the group's total frequency (plus an epsilon): a group whose experts
  // the router never picks comes out all zeros. That is no merge of them, so it is refused, naming the group.
  if (params.method == merge::merge_method::frequency) {
    std::vector<double> f = frequencies;
    if (f.empty() && router.rows() == e && x.rows() > 0 && router.cols() == d && x.cols() == d) {
      host_vector<double> counted(e);
      merge::routing_frequencies<T>(make_context(args), params.frequency_top_k, x.const_view(), router.const_view(),
                                    counted.view());
      f.assign(counted.data(), counted.data() + e);
    }
    if (static_cast<index_t>(f.size()) == e) {
      std::vector<double> total(static_cast<std::size_t>(g), 0.0);
      for (index_t k = 0; k < e; ++k) total[static_cast<std::size_t>(groups[static_cast<std::size_t>(k)])] += f[static_cast<std::size_t>(k)];
      for (index_t k = 0; k < g; ++k)
        if (total[static_cast<std::size_t>(k)] == 0.0) {
          std::string members;
          for (index_t m = 0; m < e; ++m)
            if (groups[static_cast<std::size_t>(m)] == k) members += (members.empty() ? "" : ", ") + std::to_string(m);
          throw usage_error(std::string("option ") + (frequencies.empty() ? "--inputs" : "--frequencies") + ": group " +
                            std::to_string(k) + " (experts " + members + ") has total routing frequency 0, and the " +
                            "frequency merge would make it all zeros; use --method average, or frequencies > 0");
        }
    }
  }
  const merge::router_rule rule = merge::resolve_router_rule(params, router.rows() > 0);
  host_matrix<T> o1(g * d_ff, d), o3(w3.count ? g * d_ff : 0, d), o2(g * d, d_ff);
  host_matrix<T> merged_router(rule == merge::router_rule::id_map ? 0 : g, d);
  host_vector<std::int64_t> map(e);
  const merge::merge_outputs<T> out{
      {make_matrix_stack_view(o1.data(), g, d_ff, d),
       w3.count ? make_matrix_stack_view(o3.data(), g, d_ff, d) : matrix_stack_view<T>(),
       make_matrix_stack_view(o2.data(), g, d, d_ff), {}, {}, {}},
      merged_router.view(),
      map.view()};
  merge::merge_data<T> data;
  data.x = x.const_view();
  data.router = router.const_view();
  data.frequencies = make_vector_view<const double>(frequencies.data(), static_cast<index_t>(frequencies.size()));
  data.dominants = make_vector_view<const std::int64_t>(dominants.data(), static_cast<index_t>(dominants.size()));
  const host_context ctx = make_context(args);
  const stopwatch timer;
  merge::merge_report report;
  try {
    report = merge::merge_experts<T>(ctx, params, experts, make_vector_view<const std::int64_t>(groups.data(), e), data, out);
  } catch (const invalid_argument& err) {
    throw usage_error(name_the_merge_option(err.what()));
  }
  const double seconds = timer.seconds();
  outputs.stage_in_directory("w1", make_matrix_stack_view<const T>(o1.data(), g, d_ff, d));
  outputs.stage_in_directory("w2", make_matrix_stack_view<const T>(o2.data(), g, d, d_ff));
  if (w3.count) outputs.stage_in_directory("w3", make_matrix_stack_view<const T>(o3.data(), g, d_ff, d));
  if (rule != merge::router_rule::id_map) outputs.stage_in_directory("router", merged_router.const_view());
  outputs.stage_in_directory("map", map.const_view());
  std::vector<long long> dominant_ids, token_counts;
  std::vector<double> errors, objective_initial, objective_final;
  for (const auto& gr : report.groups) {
    dominant_ids.push_back(static_cast<long long>(gr.dominant));
    token_counts.push_back(static_cast<long long>(gr.tokens));
    errors.push_back(gr.error);
    objective_initial.push_back(gr.objective_initial);
    objective_final.push_back(gr.objective_final);
  }
  json_summary summary;
  summary.add("command", std::string("merge"))
      .add("method", std::string(merge::to_string(params.method)))
      .add("router_rule", std::string(merge::to_string(report.router)))
      .add("experts", static_cast<long long>(e))
      .add("groups", static_cast<long long>(g))
      .add("d", static_cast<long long>(d))
      .add("d_ff", static_cast<long long>(d_ff))
      .add("dominants", dominant_ids)
      .add("coefficients", report.coefficients);
  if (x.rows() > 0) summary.add("tokens", token_counts);
  if (x.rows() > 0 && params.report_errors) summary.add("errors", errors);
  if (params.method == merge::merge_method::learned)
    summary.add("objective_initial", objective_initial)
        .add("objective_final", objective_final)
        .add("iterations", static_cast<long long>(report.iterations));
  summary.add("seconds", seconds);
  return conclude(args, outputs, summary, report.status, "merge", "more --max-iter");
}

int merge_command(const arguments& args, output_files& outputs) {
  for (const char* required : {"--w1", "--w2", "--groups", "--method"})
    if (!args.value(required))
      throw usage_error(std::string("option ") + required + ": required (" +
                        (std::string(required) == "--w1"     ? "the gate / first projections, E x d_ff x d"
                         : std::string(required) == "--w2"   ? "the down projections, E x d x d_ff"
                         : std::string(required) == "--groups" ? "int64 group ids of the E experts, 0..g-1"
                                                               : "average|frequency|uniform|dominant|aligned|fix-dom|learned") +
                        ")");
  const moecomp::io::npy_array probe = read_operand(*args.value("--w1"));
  return choose_precision(args, probe.dtype(), *args.value("--w1")) == precision::float32
             ? run_merge<float>(args, outputs)
             : run_merge<double>(args, outputs);
}

}  // namespace

const command_registration merge_registration{command{
    {"merge",
     "merge each group of a stack of experts into one (HC-SMoE, the fourth paper's router merge, aligned)",
     "merge --w1 W1.npy --w2 W2.npy [--w3 W3.npy] --groups G.npy --method "
     "average|frequency|uniform|dominant|aligned|fix-dom|learned [--frequencies f.npy] [--inputs X.npy] "
     "[--router R.npy] [--dominants D.npy] [--activation silu|gelu|gelu_tanh|relu] [--router-rule "
     "auto|map|merged|dominant] [--top-k K] [--frequency-top-k K] [--token-cap N] [--seed S] [--objective "
     "weights|inner|correlation] [--max-iter N] [--no-errors] -o OUT_DIR [--json]",
     0,
     0,
     {{"--w1", true, "W1.npy: the gate (first) projections, E x d_ff x d, nn.Linear layout (required)"},
      {"--w2", true, "W2.npy: the down projections, E x d x d_ff (required)"},
      {"--w3", true, "W3.npy: the up projections of GLU experts, E x d_ff x d"},
      {"--groups", true, "G.npy: int64 (or int32) group id of each expert, covering 0..g-1 (required)"},
      {"--method", true, "average|frequency|uniform|dominant|aligned|fix-dom|learned (required)"},
      {"--frequencies", true, "f.npy: routing frequencies, E entries >= 0 (frequency, dominant; default: counted "
                              "from --router on --inputs)"},
      {"--inputs", true, "X.npy: calibration tokens, T x d (fix-dom, learned; the merge errors)"},
      {"--router", true, "R.npy: the router, E x d (routes the tokens; merged by --router-rule merged|dominant)"},
      {"--dominants", true, "D.npy: each group's dominant expert, g entries (default: the most frequent member)"},
      {"--activation", true, "silu (default) | gelu | gelu_tanh | relu"},
      {"--router-rule", true, "auto (default: with --router, merged for uniform/learned, dominant for dominant; else map) | map | "
                              "merged | dominant"},
      {"--top-k", true, "experts per token when routing the tokens (default 2)"},
      {"--frequency-top-k", true, "experts per token counted for the frequencies (default 2, HC-SMoE's)"},
      {"--token-cap", true, "at most N tokens per group, a seeded draw (default 50000; 0: all)"},
      {"--seed", true, "seed of the token draw, >= 0 (default 0)"},
      {"--objective", true, "aligned: weights (default) | inner | correlation"},
      {"--max-iter", true, "learned: projected-gradient iterations per group (default 100)"},
      {"--no-errors", false, "do not compute the per-group merge errors (they cost the members' forwards again)"}},
     /*output_directory=*/true},
    merge_command}};

}  // namespace moecomp_cli
