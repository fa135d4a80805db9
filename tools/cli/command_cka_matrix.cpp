// moecomp cka-matrix F.npy [--kernel linear|rbf] [--sigma F | --threshold F] [--unbiased] [--route R] -o S.npy
// [--json]: the E x E CKA matrix of E experts' features on one token set (F: E x n x d), float64. The
// contract: docs/cli.md; the algorithm: docs/similarity.md.
#include "cli.hpp"

#include <moecomp/similarity/cka.hpp>

namespace moecomp_cli {

moecomp::similarity::cka_params cka_params_from(const arguments& args);
std::string cka_option_message(const std::string& message);

namespace {

template <class T>
int run_cka_matrix(const arguments& args, output_files& outputs, const moecomp::io::npy_array& input,
                   const std::string& path) {
  using namespace moecomp;
  const loaded_stack<T> f = load_float_stack<T>(path, input, /*require_finite=*/true, "E x n x d: experts x samples x features");
  const similarity::cka_params params = cka_params_from(args);
  const host_context ctx = make_context(args);
  host_matrix<double> s(f.count, f.count);
  const stopwatch timer;
  similarity::cka_matrix_result r;
  try {
    r = similarity::cka_matrix<T>(ctx, params, f.view(), s.view());
  } catch (const invalid_argument& e) {
    const std::string message = cka_option_message(e.what());
    throw usage_error(message != e.what() ? message : path + ": " + e.what());
  }
  const double seconds = timer.seconds();
  outputs.stage("-o", s.const_view());
  return conclude(args, outputs,
                  json_summary()
                      .add("command", std::string("cka-matrix"))
                      .add("experts", static_cast<long long>(f.count))
                      .add("n", static_cast<long long>(f.rows))
                      .add("d", static_cast<long long>(f.cols))
                      .add("kernel", std::string(similarity::to_string(params.kernel)))
                      .add("unbiased", params.unbiased)
                      .add("route", std::string(similarity::to_string(r.route)))
                      .add("dtype", std::string(std::is_same_v<T, float> ? "float32" : "float64"))
                      .add("undefined_pairs", static_cast<long long>(r.undefined_pairs))
                      .add("first_undefined", std::string(similarity::to_string(r.first_undefined)))
                      .add("seconds", seconds),
                  status::ok, "cka-matrix", "");
}

int cka_matrix(const arguments& args, output_files& outputs) {
  const std::string& path = args.positional()[0];
  const moecomp::io::npy_array input = read_operand(path);
  return choose_precision(args, input.dtype(), path) == precision::float32
             ? run_cka_matrix<float>(args, outputs, input, path)
             : run_cka_matrix<double>(args, outputs, input, path);
}

}  // namespace

const command_registration cka_matrix_registration{command{
    {"cka-matrix",
     "The E x E CKA matrix of E experts' features on one token set (E x n x d), without E^2 separate CKAs",
     "cka-matrix F.npy [--kernel linear|rbf] [--sigma F | --threshold F] [--unbiased] [--route R] -o S.npy [--json]",
     1,
     1,
     {{"--kernel", true, "linear (default) | rbf"},
      {"--sigma", true, "rbf bandwidth in the features' units (default: the median heuristic, per expert)"},
      {"--threshold", true, "rbf median heuristic threshold (default 1)"},
      {"--unbiased", false, "unbiased HSIC and debiased CKA; needs >= 4 samples"},
      {"--route", true, "automatic (default) | feature | gram"}}},
    cka_matrix}};

}  // namespace moecomp_cli
