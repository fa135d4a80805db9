// moecomp barycenter-fixed A.npy M.npy --reg R [--weights w.npy] [--log-domain] [--max-iter N] [--tol T]
// [-o bary.npy] [--json]: entropic barycenter of the histograms in the columns of A on a fixed support, as
// POT's ot.bregman.barycenter (method 'sinkhorn', or 'sinkhorn_log' with --log-domain).
#include "cli.hpp"

#include <moecomp/ot/fixed_support_barycenter.hpp>

#include <cmath>
#include <sstream>
#include <type_traits>

namespace moecomp_cli {
namespace {

template <class T>
int run_barycenter_fixed(const arguments& args, output_files& outputs,
                         const std::vector<moecomp::io::npy_array>& inputs) {
  using namespace moecomp;
  const std::vector<std::string>& paths = args.positional();
  const host_matrix<T> histograms = load_float_matrix<T>(paths[0], inputs[0], /*require_finite=*/true);
  const host_matrix<T> cost = load_float_matrix<T>(paths[1], inputs[1], /*require_finite=*/true);
  const index_t n = histograms.rows(), k = histograms.cols();
  if (n < 1 || k < 1)
    throw usage_error(paths[0] + ": expected n x k histograms as columns with n, k >= 1, got shape " +
                      shape_text(inputs[0].shape()));
  if (cost.rows() != n || cost.cols() != n)
    throw usage_error(paths[1] + ": expected shape " + shape_text({n, n}) + " (n = rows of " + paths[0] + "), got " +
                      shape_text(inputs[1].shape()));
  std::vector<double> weights(static_cast<std::size_t>(k), 1.0 / static_cast<double>(k));
  if (const auto w = args.value("--weights")) weights = load_weights(*w, k, "histograms");

  ot::fixed_support_barycenter_params params;
  if (!args.value("--reg")) throw usage_error("option --reg: required (absolute regularisation, > 0)");
  // Values are checked by the library (once); its message is given the option's name below.
  params.reg = args.number("--reg", 0.0);
  params.max_iterations = args.integer("--max-iter", 10000);
  params.tolerance = args.number("--tol", 1e-4);
  params.log_domain = args.flag("--log-domain");
  const host_context ctx = make_context(args);

  std::vector<T> weights_t(weights.begin(), weights.end());
  host_vector<T> barycenter(n);
  const stopwatch timer;
  ot::fixed_support_barycenter_result result;
  try {
    result = ot::fixed_support_barycenter(ctx, params, histograms.const_view(), cost.const_view(),
                                          vector_view<const T>(weights_t.data(), k), barycenter.view());
  } catch (const invalid_argument& e) {
    throw usage_error(name_the_option(e.what(), {{"--reg", "params.reg"},
                                                 {"--max-iter", "params.max_iterations"},
                                                 {"--tol", "params.tolerance"}}));
  }
  const double seconds = timer.seconds();
  outputs.stage("-o", barycenter.const_view());
  return conclude(args, outputs, json_summary()
                   .add("command", std::string("barycenter-fixed"))
                   .add("n", static_cast<long long>(n))
                   .add("k", static_cast<long long>(k))
                   .add("dtype", std::string(std::is_same_v<T, float> ? "float32" : "float64"))
                   .add("log_domain", params.log_domain)
                   .add("iterations", static_cast<long long>(result.iterations))
                   .add("residual", result.criterion)
                   .add("converged", result.ok())
                   .add("seconds", seconds),
                  result.status, "barycenter-fixed",
                  result.status == moecomp::status::numerical_error
                      ? "the kernel exp(-M / reg) under- or overflows at this --reg; --log-domain is stable for any reg"
                      : "more --max-iter or a larger --tol");
}

int barycenter_fixed(const arguments& args, output_files& outputs) {
  using namespace moecomp;
  std::vector<io::npy_array> inputs;
  for (const std::string& path : args.positional()) inputs.push_back(read_operand(path));
  return choose_precision(args, inputs[1].dtype(), args.positional()[1]) == precision::float32
             ? run_barycenter_fixed<float>(args, outputs, inputs)
             : run_barycenter_fixed<double>(args, outputs, inputs);
}

}  // namespace

const command_registration barycenter_fixed_registration{command{
    {"barycenter-fixed",
     "entropic barycenter of histograms on a fixed support (POT ot.bregman.barycenter)",
     "barycenter-fixed A.npy M.npy --reg R [--weights w.npy] [--log-domain] [--max-iter N] [--tol T] "
     "[-o BARY.npy] [--json]",
     2,
     2,
     {{"--reg", true, "R > 0: absolute entropic regularisation, as POT's reg (required)"},
      {"--weights", true, "k histogram weights, >= 0, summing to 1 (default uniform)"},
      {"--log-domain", false, "iterate on log scalings (POT method 'sinkhorn_log'), stable for small R"},
      {"--max-iter", true, "N >= 1 iterations at most (default 10000, POT numItermax)"},
      {"--tol", true, "stop when sum_i std_k of the plans' marginals < T (default 1e-4, POT stopThr)"}}},
    barycenter_fixed}};

}  // namespace moecomp_cli
