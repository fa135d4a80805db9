// moecomp prune W.npy (--keep F | --sparsity F) [--scope matrix|row|column-block|N:M] [--column-block B]
// -o W_pruned.npy [--json]: magnitude pruning with torch.nn.utils.prune.l1_unstructured's count (round(F x
// size), half to even) and a deterministic tie rule (ties at the threshold kept by lowest flat index). The
// contract: docs/cli.md; the semantics: docs/sparse.md.
#include "cli.hpp"

#include <moecomp/sparse/prune.hpp>

namespace moecomp_cli {
namespace {

template <class T>
int run_prune(const arguments& args, output_files& outputs, const moecomp::io::npy_array& input,
              const std::string& path) {
  using namespace moecomp;
  host_matrix<T> w = load_float_matrix<T>(path, input, /*require_finite=*/true);
  const auto [params, scope] = prune_options(args, "matrix");
  const host_context ctx = make_context(args);
  const stopwatch timer;
  sparse::prune_result r;
  try {
    r = sparse::prune_magnitude<T>(ctx, params, w.view());
  } catch (const invalid_argument& e) {
    const std::string message = name_the_prune_option(e.what());
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
