// moecomp cka X.npy Y.npy [--kernel linear|rbf] [--sigma F | --threshold F] [--unbiased] [--route R] [--json]:
// CKA (or debiased CKA) and the three HSICs of two representations of the same samples. Prints the CKA, or
// with --json the summary. The contract: docs/cli.md; the formulas: docs/similarity.md.
#include "cli.hpp"

#include <moecomp/similarity/cka.hpp>

#include <cstdio>

namespace moecomp_cli {

/// The CKA parameters of the similarity commands' shared options (--kernel, --sigma, --threshold,
/// --unbiased, --route).
moecomp::similarity::cka_params cka_params_from(const arguments& args) {
  using namespace moecomp::similarity;
  cka_params params;
  try {
    params.kernel = parse_cka_kernel(args.value_or("--kernel", "linear"));
  } catch (const moecomp::invalid_argument& e) {
    throw usage_error(std::string("option --") + e.what());
  }
  try {
    params.route = parse_cka_route(args.value_or("--route", "automatic"));
  } catch (const moecomp::invalid_argument& e) {
    throw usage_error(std::string("option --") + e.what());
  }
  if (args.value("--sigma") && args.value("--threshold"))
    throw usage_error("option --sigma: give either --sigma (a fixed bandwidth) or --threshold (the median heuristic), "
                      "not both");
  if ((args.value("--sigma") || args.value("--threshold")) && params.kernel != cka_kernel::rbf)
    throw usage_error(std::string("option ") + (args.value("--sigma") ? "--sigma" : "--threshold") +
                      ": applies to --kernel rbf only");
  params.sigma = args.number("--sigma", 0.0);
  if (args.value("--sigma") && !(params.sigma > 0))
    throw usage_error("option --sigma: expected a bandwidth > 0, got " + *args.value("--sigma"));
  params.threshold = args.number("--threshold", 1.0);
  params.unbiased = args.flag("--unbiased");
  return params;
}

/// A library message about CKA parameters with the option's name in front.
std::string cka_option_message(const std::string& message) {
  return name_the_option(message, {{"--sigma", "params.sigma"},
                                   {"--threshold", "params.threshold"},
                                   {"--route", "params.route"}});
}

namespace {

template <class T>
int run_cka(const arguments& args, output_files& outputs, const moecomp::io::npy_array& xa,
            const moecomp::io::npy_array& ya) {
  using namespace moecomp;
  const std::string& xp = args.positional()[0];
  const std::string& yp = args.positional()[1];
  const host_matrix<T> x = load_float_matrix<T>(xp, xa, /*require_finite=*/true);
  const host_matrix<T> y = load_float_matrix<T>(yp, ya, /*require_finite=*/true);
  const similarity::cka_params params = cka_params_from(args);
  if (x.rows() != y.rows())
    throw usage_error(yp + ": expected " + std::to_string(x.rows()) + " rows (the samples of " + xp + "), got " +
                      std::to_string(y.rows()));
  const host_context ctx = make_context(args);
  const stopwatch timer;
  similarity::cka_result r;
  try {
    r = similarity::cka<T>(ctx, params, x.const_view(), y.const_view());
  } catch (const invalid_argument& e) {
    const std::string message = cka_option_message(e.what());
    throw usage_error(message != e.what() ? message : xp + ": " + e.what());
  }
  const double seconds = timer.seconds();
  if (!args.flag("--json")) std::printf("%.17g\n", r.cka);
  return conclude(args, outputs,
                  json_summary()
                      .add("command", std::string("cka"))
                      .add("n", static_cast<long long>(x.rows()))
                      .add("dx", static_cast<long long>(x.cols()))
                      .add("dy", static_cast<long long>(y.cols()))
                      .add("kernel", std::string(similarity::to_string(params.kernel)))
                      .add("unbiased", params.unbiased)
                      .add("route", std::string(similarity::to_string(r.route)))
                      .add("dtype", std::string(std::is_same_v<T, float> ? "float32" : "float64"))
                      .add("cka", r.cka)
                      .add("hsic_xy", r.hsic_xy)
                      .add("hsic_xx", r.hsic_xx)
                      .add("hsic_yy", r.hsic_yy)
                      .add("defined", r.ok())
                      .add("cka_status", std::string(similarity::to_string(r.status)))
                      .add("sigma_x", r.sigma_x)
                      .add("sigma_y", r.sigma_y)
                      .add("seconds", seconds),
                  status::ok, "cka", "");
}

int cka(const arguments& args, output_files& outputs) {
  const moecomp::io::npy_array x = read_operand(args.positional()[0]);
  const moecomp::io::npy_array y = read_operand(args.positional()[1]);
  // float64 if either input is (or --dtype says so).
  const bool single = choose_precision(args, x.dtype(), args.positional()[0]) == precision::float32 &&
                      choose_precision(args, y.dtype(), args.positional()[1]) == precision::float32;
  return single ? run_cka<float>(args, outputs, x, y) : run_cka<double>(args, outputs, x, y);
}

}  // namespace

const command_registration cka_registration{command{
    {"cka",
     "CKA (Kornblith et al.) and HSIC of two representations of the same samples; prints the CKA",
     "cka X.npy Y.npy [--kernel linear|rbf] [--sigma F | --threshold F] [--unbiased] [--route R] [--json]",
     2,
     2,
     {{"--kernel", true, "linear (default) | rbf"},
      {"--sigma", true, "rbf bandwidth in the features' units (default: the median heuristic)"},
      {"--threshold", true, "rbf median heuristic: sigma^2 = threshold^2 x median squared distance (default 1)"},
      {"--unbiased", false, "unbiased HSIC (Song et al.) and debiased CKA; needs >= 4 samples"},
      {"--route", true, "automatic (default) | feature | gram: how the linear kernel's products are formed"}}},
    cka}};

}  // namespace moecomp_cli
