// moecomp sinkhorn a.npy b.npy M.npy --reg R [--method plain|log|stabilized|epsilon_scaling] [--tol T]
// [--max-iter N] [--check-every K] [-o plan.npy] [--json]: entropic OT plan as POT's ot.sinkhorn.
#include "cli.hpp"

#include <moecomp/ot/sinkhorn.hpp>

#include <cmath>
#include <sstream>
#include <type_traits>

namespace moecomp_cli {
namespace {

/// A 1-D float histogram operand, converted to T.
template <class T>
moecomp::host_vector<T> load_histogram(const std::string& path, const moecomp::io::npy_array& array) {
  using namespace moecomp;
  if (array.dtype() != io::npy_dtype::float32 && array.dtype() != io::npy_dtype::float64)
    throw usage_error(path + ": dtype " + io::to_string(array.dtype()) +
                      " is not accepted here, expected float32 or float64");
  if (array.ndim() != 1)
    throw usage_error(path + ": expected a 1-D histogram, got shape " + shape_text(array.shape()));
  return array.to_vector<T>();
}

template <class T>
int run_sinkhorn(const arguments& args, output_files& outputs, const std::vector<moecomp::io::npy_array>& inputs) {
  using namespace moecomp;
  const std::vector<std::string>& paths = args.positional();
  const host_vector<T> a = load_histogram<T>(paths[0], inputs[0]);
  const host_vector<T> b = load_histogram<T>(paths[1], inputs[1]);
  // +inf marks a forbidden pair (as in POT); NaN, -inf and a row or column forbidden everywhere are refused
  // by the library, named below.
  const host_matrix<T> cost = load_float_matrix<T>(paths[2], inputs[2], /*require_finite=*/false);
  if (cost.rows() != a.size() || cost.cols() != b.size())
    throw usage_error(paths[2] + ": expected shape " + shape_text({a.size(), b.size()}) + " (len(a), len(b)), got " +
                      shape_text(inputs[2].shape()));

  ot::sinkhorn_params params;
  if (!args.value("--reg")) throw usage_error("option --reg: required (absolute regularisation, > 0)");
  params.reg = args.number("--reg", 0.0);
  try {
    params.method = ot::parse_sinkhorn_method(args.value_or("--method", "plain"));
  } catch (const invalid_argument& e) {
    throw usage_error(std::string("option --") + e.what());
  }
  // Values are checked by the library (once); its message is given the option's name below.
  params.max_iterations = args.integer("--max-iter", 1000);
  params.tolerance = args.number("--tol", 1e-9);
  // Absent or 0: POT's period for the method (20 for stabilized, else 10).
  params.check_every = args.integer("--check-every", 0);
  const host_context ctx = make_context(args);

  outputs.require_space("-o", static_cast<double>(a.size()) * static_cast<double>(b.size()) * sizeof(T) + 128);
  host_matrix<T> plan(a.size(), b.size());
  const stopwatch timer;
  ot::sinkhorn_result result;
  try {
    result = ot::sinkhorn(ctx, params, vector_view<const T>(a.data(), a.size()),
                          vector_view<const T>(b.data(), b.size()), cost.const_view(), plan.view());
  } catch (const invalid_argument& e) {
    const std::string message = name_the_option(e.what(), {{"--reg", "params.reg"},
                                                           {"--max-iter", "params.max_iterations"},
                                                           {"--tol", "params.tolerance"},
                                                           {"--check-every", "params.check_every"}});
    if (message != e.what()) throw usage_error(message);
    throw usage_error(message + " (a = " + paths[0] + ", b = " + paths[1] + ", cost = " + paths[2] + ")");
  }
  const double seconds = timer.seconds();
  outputs.stage("-o", plan.const_view());
  return conclude(args, outputs, json_summary()
                   .add("command", std::string("sinkhorn"))
                   .add("n", static_cast<long long>(a.size()))
                   .add("m", static_cast<long long>(b.size()))
                   .add("dtype", std::string(std::is_same_v<T, float> ? "float32" : "float64"))
                   .add("method", std::string(ot::to_string(params.method)))
                   .add("cost", result.cost)
                   .add("iterations", static_cast<long long>(result.iterations))
                   .add("converged", result.ok())
                   .add("marginal_error", result.criterion)
                   .add("seconds", seconds),
                  result.status, "sinkhorn",
                  result.status != moecomp::status::numerical_error ? "more --max-iter or a larger --tol"
                  : params.method == ot::sinkhorn_method::log
                      ? "the log-domain iterations failed at this --reg; a larger --reg, or check M for huge values"
                  : params.method == ot::sinkhorn_method::plain
                      ? "the kernel exp(-M / reg) under- or overflows at this --reg; --method log is stable for any reg"
                      : "the kernel exp(-M / reg) under- or overflows at this --reg even with absorption; --method log "
                        "is stable for any reg");
}

int sinkhorn(const arguments& args, output_files& outputs) {
  using namespace moecomp;
  std::vector<io::npy_array> inputs;
  for (const std::string& path : args.positional()) inputs.push_back(read_operand(path));
  return choose_precision(args, inputs[2].dtype(), args.positional()[2]) == precision::float32
             ? run_sinkhorn<float>(args, outputs, inputs)
             : run_sinkhorn<double>(args, outputs, inputs);
}

}  // namespace

const command_registration sinkhorn_registration{command{
    {"sinkhorn",
     "entropic OT plan (POT ot.sinkhorn: sinkhorn_knopp, sinkhorn_log, sinkhorn_stabilized, epsilon scaling)",
     "sinkhorn a.npy b.npy M.npy --reg R [--method plain|log|stabilized|epsilon_scaling] [--tol T] [--max-iter N] "
     "[--check-every K] [-o PLAN.npy] [--json]",
     3,
     3,
     {{"--reg", true, "R > 0: absolute entropic regularisation, as POT's reg (required)"},
      {"--method", true, "plain|log|stabilized|epsilon_scaling (default plain = POT sinkhorn_knopp)"},
      {"--tol", true, "stop when ||P^T 1 - b||_2 < T (default 1e-9, POT stopThr)"},
      {"--max-iter", true, "N >= 1 iterations at most (default 1000, POT numItermax)"},
      {"--check-every", true, "K >= 1: test the error every K iterations (default as POT: 20 for stabilized, else 10)"}}},
    sinkhorn}};

}  // namespace moecomp_cli
