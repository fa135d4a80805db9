// moecomp residual-encode BASE.npy W.npy (--keep F | --sparsity F) [--scope ...] [--format csr16|bitmap|2:4|auto]
// [--values fp32|fp16|bf16] [--permutation P.npy] -o RES.bin [--json]: ResMoE's residual R = P W - B, pruned
// by magnitude (torch's l1_unstructured count, ties to the lowest flat index) and written in a compact format
// inside moecomp's residual file. The contract: docs/cli.md; the formats and the file: docs/sparse.md.
#include "cli.hpp"

#include <moecomp/sparse/residual.hpp>

namespace moecomp_cli {
namespace {

template <class T>
int run_residual_encode(const arguments& args, output_files& outputs, const moecomp::io::npy_array& base_input,
                        const moecomp::io::npy_array& w_input) {
  using namespace moecomp;
  const std::string& base_path = args.positional()[0];
  const std::string& w_path = args.positional()[1];
  const host_matrix<T> base = load_float_matrix<T>(base_path, base_input, /*require_finite=*/true);
  const host_matrix<T> w = load_float_matrix<T>(w_path, w_input, /*require_finite=*/true);
  if (w.rows() != base.rows() || w.cols() != base.cols())
    throw usage_error(w_path + ": shape (" + std::to_string(w.rows()) + ", " + std::to_string(w.cols()) +
                      ") must equal the base's (" + std::to_string(base.rows()) + ", " + std::to_string(base.cols()) +
                      ") from " + base_path);
  sparse::residual_params params;
  try {
    params.encode.format = sparse::parse_sparse_format(args.value_or("--format", "auto"));
  } catch (const invalid_argument& e) {
    throw usage_error(std::string("option --") + e.what());
  }
  try {
    params.encode.values = sparse::parse_value_dtype(args.value_or("--values", "fp32"));
  } catch (const invalid_argument& e) {
    throw usage_error(std::string("option --") + e.what());
  }
  // --format 2:4 prunes 2 of every 4 unless another scope is asked for.
  if (params.encode.format == sparse::sparse_format::two_of_four && !args.value("--scope") &&
      (args.value("--keep") || args.value("--sparsity")))
    throw usage_error(std::string("option --format: 2:4 keeps 2 of every 4 entries; give no ") +
                      (args.value("--keep") ? "--keep" : "--sparsity") + " with it");
  const auto options = prune_options(args, params.encode.format == sparse::sparse_format::two_of_four ? "2:4" : "matrix");
  params.prune = options.first;
  const std::string scope = options.second;
  std::vector<index_t> permutation;
  if (const auto p = args.value("--permutation")) permutation = load_permutation("--permutation", *p, w.rows());
  const host_context ctx = make_context(args);
  const stopwatch timer;
  sparse::sparse_matrix residual;
  sparse::residual_info info;
  try {
    info = sparse::encode_residual<T>(ctx, params, base.view(), w.view(),
                                      make_vector_view<const index_t>(permutation.data(),
                                                                      static_cast<index_t>(permutation.size())),
                                      residual);
  } catch (const invalid_argument& e) {
    std::string message = name_the_prune_option(e.what());
    if (message == e.what())
      message = name_the_option(e.what(), {{"--format", "params.encode.format"},
                                           {"--values", "params.values"},
                                           {"--permutation", "permutation"}});
    throw usage_error(message != e.what() ? message : w_path + ": " + e.what());
  }
  const double seconds = timer.seconds();
  outputs.stage_residual("-o", residual.view());
  const std::uint64_t bytes = moecomp::io::residual_file_bytes(residual.view());
  return conclude(args, outputs,
                  json_summary()
                      .add("command", std::string("residual-encode"))
                      .add("rows", static_cast<long long>(w.rows()))
                      .add("cols", static_cast<long long>(w.cols()))
                      .add("scope", scope)
                      .add("format", std::string(sparse::to_string(info.format)))
                      .add("values", std::string(sparse::to_string(params.encode.values)))
                      .add("kept", static_cast<long long>(info.pruned.kept))
                      .add("pruned", static_cast<long long>(info.pruned.pruned))
                      .add("threshold", info.pruned.threshold)
                      .add("bytes", static_cast<long long>(bytes))
                      .add("section_bytes", static_cast<long long>(info.bytes))
                      .add("bits_per_weight", w.size() > 0 ? 8.0 * static_cast<double>(bytes) / static_cast<double>(w.size()) : 0.0)
                      .add("squared_error", info.squared_error)
                      .add("seconds", seconds),
                  status::ok, "residual-encode", "");
}

int residual_encode(const arguments& args, output_files& outputs) {
  const std::string& base_path = args.positional()[0];
  const std::string& w_path = args.positional()[1];
  const moecomp::io::npy_array base = read_operand(base_path);
  const moecomp::io::npy_array w = read_operand(w_path);
  const precision p = choose_precision(args, w.dtype(), w_path);
  return p == precision::float32 ? run_residual_encode<float>(args, outputs, base, w)
                                 : run_residual_encode<double>(args, outputs, base, w);
}

}  // namespace

const command_registration residual_encode_registration{command{
    {"residual-encode",
     "ResMoE's residual W - base (rows permuted), pruned by magnitude and written in a compact sparse format",
     "residual-encode BASE.npy W.npy (--keep F | --sparsity F) [--scope matrix|row|column-block|N:M] "
     "[--format csr16|bitmap|2:4|auto] [--values fp32|fp16|bf16] [--permutation P.npy] -o RES.bin [--json]",
     2,
     2,
     {{"--sparsity", true, "F in [0, 1]: prune round(F x size) entries of each group (torch's amount)"},
      {"--keep", true, "F in [0, 1]: keep size - round((1 - F) x size) entries of each group"},
      {"--scope", true, "matrix (default; 2:4 with --format 2:4) | row | column-block | N:M"},
      {"--column-block", true, "B: the block width of --scope column-block"},
      {"--format", true, "csr16 | bitmap | 2:4 | auto (default: the smallest)"},
      {"--values", true, "fp32 (default) | fp16 | bf16: how each kept value is stored"},
      {"--permutation", true, "P.npy (int, one per row): row i of W goes to base row P[i] (barycenter-free --perms)"}}},
    residual_encode}};

}  // namespace moecomp_cli
