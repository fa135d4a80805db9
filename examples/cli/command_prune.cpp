// moecomp prune W.npy (--keep F | --sparsity F) [--scope matrix|row|column-block|N:M] [--column-block B]
// -o W_pruned.npy [--json]: magnitude pruning with torch.nn.utils.prune.l1_unstructured's count (round(F x
// size), half to even) and a deterministic tie rule (ties at the threshold kept by lowest flat index). The
// contract: docs/cli.md; the semantics: docs/sparse.md.
#include "cli.hpp"

#include <moecomp/sparse/prune.hpp>

#include <cstdlib>

namespace moecomp_cli {
namespace {

template <class T>
int run_prune(const arguments& args, output_files& outputs, const moecomp::io::npy_array& input,
              const std::string& path) {
  using namespace moecomp;
  host_matrix<T> w = load_float_matrix<T>(path, input, /*require_finite=*/true);
  sparse::prune_params params;
  const std::string scope = args.value_or("--scope", "matrix");
  const auto colon = scope.find(':');
  if (scope == "matrix") {
    params.scope = sparse::prune_scope::matrix;
  } else if (scope == "row") {
    params.scope = sparse::prune_scope::row;
  } else if (scope == "column-block") {
    params.scope = sparse::prune_scope::column_block;
    if (!args.value("--column-block")) throw usage_error("option --scope: column-block needs --column-block B (the block width)");
    params.column_block = args.integer("--column-block", 0);
  } else if (colon != std::string::npos && colon > 0 && colon + 1 < scope.size() &&
             scope.find_first_not_of("0123456789:") == std::string::npos && scope.find(':', colon + 1) == std::string::npos) {
    params.scope = sparse::prune_scope::n_of_m;
    params.n = std::atoll(scope.substr(0, colon).c_str());
    params.m = std::atoll(scope.substr(colon + 1).c_str());
  } else {
    throw usage_error("option --scope: expected matrix, row, column-block or N:M (e.g. 2:4), got '" + scope + "'");
  }
  if (params.scope == sparse::prune_scope::n_of_m) {
    if (args.value("--keep") || args.value("--sparsity"))
      throw usage_error("option --scope: " + scope + " keeps N of every M entries; give no --keep or --sparsity");
  } else {
    if (args.value("--keep") && args.value("--sparsity"))
      throw usage_error("option --keep: give either --keep or --sparsity, not both");
    if (!args.value("--keep") && !args.value("--sparsity"))
      throw usage_error("option --sparsity: one of --sparsity F (the fraction to prune) or --keep F is required");
    if (args.value("--keep")) params.keep = args.number("--keep", -1);
    if (args.value("--sparsity")) params.sparsity = args.number("--sparsity", -1);
  }
  const host_context ctx = make_context(args);
  const stopwatch timer;
  sparse::prune_result r;
  try {
    r = sparse::prune_magnitude<T>(ctx, params, w.view());
  } catch (const invalid_argument& e) {
    const std::string message = name_the_option(e.what(), {{"--sparsity", "params.sparsity"},
                                                           {"--keep", "params.keep"},
                                                           {"--column-block", "params.column_block"},
                                                           {"--scope", "params.n"},
                                                           {"--scope", "params.m"}});
    throw usage_error(message != e.what() ? message : path + ": " + e.what());
  }
  const double seconds = timer.seconds();
  outputs.stage("-o", w.const_view());
  return conclude(args, outputs,
                  json_summary()
                      .add("command", std::string("prune"))
                      .add("rows", static_cast<long long>(w.rows()))
                      .add("cols", static_cast<long long>(w.cols()))
                      .add("scope", scope)
                      .add("dtype", std::string(std::is_same_v<T, float> ? "float32" : "float64"))
                      .add("kept", static_cast<long long>(r.kept))
                      .add("pruned", static_cast<long long>(r.pruned))
                      .add("threshold", r.threshold)
                      .add("seconds", seconds),
                  status::ok, "prune", "");
}

int prune(const arguments& args, output_files& outputs) {
  const std::string& path = args.positional()[0];
  const moecomp::io::npy_array input = read_operand(path);
  return choose_precision(args, input.dtype(), path) == precision::float32 ? run_prune<float>(args, outputs, input, path)
                                                                           : run_prune<double>(args, outputs, input, path);
}

}  // namespace

const command_registration prune_registration{command{
    {"prune",
     "Magnitude pruning with torch's l1_unstructured count and a deterministic tie rule (matrix, row, blocks, N:M)",
     "prune W.npy (--keep F | --sparsity F) [--scope matrix|row|column-block|N:M] [--column-block B] -o W_pruned.npy "
     "[--json]",
     1,
     1,
     {{"--sparsity", true, "F in [0, 1]: prune round(F x size) entries of each group (torch's amount)"},
      {"--keep", true, "F in [0, 1]: keep size - round((1 - F) x size) entries of each group"},
      {"--scope", true, "matrix (default) | row | column-block | N:M (keep N of every M in a row, e.g. 2:4)"},
      {"--column-block", true, "B: the block width of --scope column-block"}}},
    prune}};

}  // namespace moecomp_cli
