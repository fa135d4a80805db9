// moecomp residual-decode BASE.npy RES.bin [--permutation P.npy] -o W.npy [--json]: restores W = B + R from a
// residual file written by residual-encode (rows back in W's own order with the same --permutation), in the
// base's precision. The contract: docs/cli.md; the formats and the file: docs/sparse.md.
#include "cli.hpp"

#include <moecomp/io/residual_file.hpp>
#include <moecomp/sparse/residual.hpp>

namespace moecomp_cli {
namespace {

template <class T>
int run_residual_decode(const arguments& args, output_files& outputs, const moecomp::io::npy_array& base_input,
                        const moecomp::io::residual_file& file) {
  using namespace moecomp;
  const std::string& base_path = args.positional()[0];
  const std::string& residual_path = args.positional()[1];
  const host_matrix<T> base = load_float_matrix<T>(base_path, base_input, /*require_finite=*/true);
  const sparse::sparse_matrix_view r = file.matrix();
  if (r.rows() != base.rows() || r.cols() != base.cols())
    throw usage_error(residual_path + ": the residual is " + std::to_string(r.rows()) + " x " +
                      std::to_string(r.cols()) + " but the base " + base_path + " is " + std::to_string(base.rows()) +
                      " x " + std::to_string(base.cols()));
  std::vector<index_t> permutation;
  if (const auto p = args.value("--permutation")) permutation = load_permutation("--permutation", *p, r.rows());
  const host_context ctx = make_context(args);
  host_matrix<T> w(r.rows(), r.cols());
  const stopwatch timer;
  try {
    sparse::restore_dense<T, T>(ctx, base.view(), r, w.view(),
                                make_vector_view<const index_t>(permutation.data(),
                                                                static_cast<index_t>(permutation.size())));
  } catch (const invalid_argument& e) {
    const std::string message = name_the_option(e.what(), {{"--permutation", "permutation"}});
    throw usage_error(message != e.what() ? message : residual_path + ": " + e.what());
  }
  const double seconds = timer.seconds();
  outputs.stage("-o", w.const_view());
  return conclude(args, outputs,
                  json_summary()
                      .add("command", std::string("residual-decode"))
                      .add("rows", static_cast<long long>(r.rows()))
                      .add("cols", static_cast<long long>(r.cols()))
                      .add("format", std::string(sparse::to_string(r.format())))
                      .add("values", std::string(sparse::to_string(r.values_dtype())))
                      .add("stored", static_cast<long long>(r.count()))
                      .add("bytes", static_cast<long long>(file.file_bytes()))
                      .add("dtype", std::string(std::is_same_v<T, float> ? "float32" : "float64"))
                      .add("seconds", seconds),
                  status::ok, "residual-decode", "");
}

int residual_decode(const arguments& args, output_files& outputs) {
  const std::string& base_path = args.positional()[0];
  const std::string& residual_path = args.positional()[1];
  const moecomp::io::npy_array base = read_operand(base_path);
  const moecomp::io::residual_file file = [&] {
    try {
      return moecomp::io::read_residual(residual_path);
    } catch (const moecomp::error& e) {
      throw usage_error(e.what());
    }
  }();
  return choose_precision(args, base.dtype(), base_path) == precision::float32
             ? run_residual_decode<float>(args, outputs, base, file)
             : run_residual_decode<double>(args, outputs, base, file);
}

}  // namespace

const command_registration residual_decode_registration{command{
    {"residual-decode",
     "Restores W = base + residual from a residual file (rows back in W's order with --permutation)",
     "residual-decode BASE.npy RES.bin [--permutation P.npy] -o W.npy [--json]",
     2,
     2,
     {{"--permutation", true, "P.npy: the permutation given to residual-encode; W's row i is base row P[i] + residual"}}},
    residual_decode}};

}  // namespace moecomp_cli
