// moecomp partition D.npy --groups R [--max-size S] [--seed S] [--method auto|exact|heuristic] [--restarts N]
// [--kicks K] [-o LABELS.npy] [--json]: the expert-graph partition of the fourth paper's Eq. 5, labels int64
// 0-based, groups numbered by their smallest member. The contract: docs/cli.md; the algorithm:
// docs/partition.md.
#include "cli.hpp"

#include <moecomp/similarity/partition.hpp>

namespace moecomp_cli {
namespace {

template <class T>
int run_partition(const arguments& args, output_files& outputs, const moecomp::io::npy_array& input,
                  const std::string& path) {
  using namespace moecomp;
  const host_matrix<T> d = load_float_matrix<T>(path, input, /*require_finite=*/true);
  // Values are checked by the library (once); its message is given the option's name below.
  similarity::partition_params params;
  if (!args.value("--groups")) throw usage_error("option --groups: required (the number of groups, >= 1)");
  params.groups = args.integer("--groups", 0);
  params.max_size = args.integer("--max-size", 0);
  if (args.integer("--seed", 0) < 0) throw usage_error("option --seed: expected an integer >= 0, got " + *args.value("--seed"));
  params.seed = static_cast<std::uint64_t>(args.integer("--seed", 0));
  params.restarts = args.integer("--restarts", params.restarts);
  params.kicks = args.integer("--kicks", params.kicks);
  try {
    params.method = similarity::parse_partition_method(args.value_or("--method", "auto"));
  } catch (const invalid_argument& e) {
    throw usage_error(std::string("option --") + e.what());
  }
  const host_context ctx = make_context(args);

  host_vector<std::int64_t> labels(d.rows());
  const stopwatch timer;
  similarity::partition_result result;
  try {
    result = similarity::partition_experts<T>(ctx, params, d.const_view(), labels.view());
  } catch (const invalid_argument& e) {
    const std::string message = name_the_option(e.what(), {{"--groups", "params.groups"},
                                                           {"--max-size", "params.max_size"},
                                                           {"--method", "params.method"},
                                                           {"--restarts", "params.restarts"},
                                                           {"--kicks", "params.kicks"}});
    throw usage_error(message != e.what() ? message : path + ": " + e.what());
  }
  const double seconds = timer.seconds();
  outputs.stage("-o", labels.const_view());
  std::vector<long long> sizes(static_cast<std::size_t>(params.groups), 0);
  for (index_t i = 0; i < labels.size(); ++i) ++sizes[static_cast<std::size_t>(labels[i])];
  return conclude(args, outputs,
                  json_summary()
                      .add("command", std::string("partition"))
                      .add("n", static_cast<long long>(d.rows()))
                      .add("groups", static_cast<long long>(params.groups))
                      .add("method", std::string(similarity::to_string(result.method)))
                      .add("dtype", std::string(std::is_same_v<T, float> ? "float32" : "float64"))
                      .add("objective", result.objective)
                      .add("within", result.within)
                      .add("lower_bound", result.lower_bound)
                      .add("within_lower_bound", result.within_lower_bound)
                      .add("optimal", result.optimal)
                      .add("best_restart", static_cast<long long>(result.best_restart))
                      .add("iterations", static_cast<long long>(result.iterations))
                      .add("sizes", sizes)
                      .add("seconds", seconds),
                  result.status, "partition", "");
}

int partition(const arguments& args, output_files& outputs) {
  const std::string& path = args.positional()[0];
  const moecomp::io::npy_array input = read_operand(path);
  return choose_precision(args, input.dtype(), path) == precision::float32
             ? run_partition<float>(args, outputs, input, path)
             : run_partition<double>(args, outputs, input, path);
}

}  // namespace

const command_registration partition_registration{command{
    {"partition",
     "expert-graph partition (Eq. 5 of the CKA expert-merging paper): labels int64, groups by smallest member",
     "partition D.npy --groups R [--max-size S] [--seed S] [--method auto|exact|heuristic] [--restarts N] "
     "[--kicks K] [-o LABELS.npy] [--json]",
     1,
     1,
     {{"--groups", true, "number of groups, 1 <= R <= N (required)"},
      {"--max-size", true, "S: at most S experts per group, R x S >= N (default 0: no bound)"},
      {"--seed", true, "seed of moecomp's generator, >= 0 (default 0); start s uses stream s"},
      {"--method", true, "auto (default: exact for N <= 16) | exact (N <= 20) | heuristic"},
      {"--restarts", true, "heuristic starts, the lowest objective wins (default 10)"},
      {"--kicks", true, "heuristic perturbation rounds per start (default 20)"}}},
    partition}};

}  // namespace moecomp_cli
