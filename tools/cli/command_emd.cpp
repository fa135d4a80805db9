// moecomp emd a.npy b.npy M.npy [--max-iter N] [--sparse] [--duals U.npy V.npy] [-o plan.npy] [--json]: exact
// optimal transport plan (POT's ot.emd; cost as ot.emd2) by the network simplex of <moecomp/ot/emd.hpp>.
// The plan is written as n x m float64 (with --sparse: k x 3 float64 rows (i, j, mass) of its positive
// entries). Exit status: 0 when solved, and also when the pivot limit was reached (the plan is then the last
// basic one, "status": "iteration_limit" and a warning line on stderr); 2 for bad input, including a
// problem whose +inf (forbidden) entries leave no feasible plan (nothing is written then).
#include "cli.hpp"

#include <moecomp/ot/emd.hpp>

#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <type_traits>

namespace moecomp_cli {
namespace {

template <class T>
moecomp::host_vector<T> load_histogram(const std::string& path, const moecomp::io::npy_array& array) {
  using namespace moecomp;
  if (array.dtype() != io::npy_dtype::float32 && array.dtype() != io::npy_dtype::float64)
    throw usage_error(path + ": dtype " + io::to_string(array.dtype()) +
                      " is not accepted here, expected float32 or float64");
  if (array.ndim() != 1) throw usage_error(path + ": expected a 1-D histogram, got shape " + shape_text(array.shape()));
  if (array.shape()[0] < 1) throw usage_error(path + ": expected at least one entry, got shape (0,)");
  host_vector<T> h = array.to_vector<T>();
  for (index_t i = 0; i < h.size(); ++i)
    if (!(std::isfinite(h[i]) && h[i] >= 0)) {
      std::ostringstream m;
      m << path << ": element " << i << " is " << h[i] << "; masses must be finite and >= 0";
      throw usage_error(m.str());
    }
  return h;
}

template <class T>
int run_emd(const arguments& args, output_files& outputs, const std::vector<moecomp::io::npy_array>& inputs) {
  using namespace moecomp;
  const std::vector<std::string>& paths = args.positional();
  const host_vector<T> a = load_histogram<T>(paths[0], inputs[0]);
  const host_vector<T> b = load_histogram<T>(paths[1], inputs[1]);
  // +inf marks a forbidden pair; NaN and -inf are refused with their position.
  const host_matrix<T> cost = load_float_matrix<T>(paths[2], inputs[2], /*require_finite=*/false);
  if (cost.rows() != a.size() || cost.cols() != b.size())
    throw usage_error(paths[2] + ": expected shape " + shape_text({a.size(), b.size()}) + " (len(a), len(b)), got " +
                      shape_text(inputs[2].shape()));
  for (index_t i = 0; i < cost.rows(); ++i)
    for (index_t j = 0; j < cost.cols(); ++j)
      if (!(cost(i, j) > -std::numeric_limits<T>::infinity())) {
        std::ostringstream m;
        m << paths[2] << ": element (" << i << ", " << j << ") is " << cost(i, j)
          << "; costs must be numbers (+inf marks a forbidden pair)";
        throw usage_error(m.str());
      }

  ot::emd_params params;
  // Checked by the library (once); its message is given the option's name below.
  params.max_iterations = args.integer("--max-iter", static_cast<long long>(params.max_iterations));
  const auto duals = args.value("--duals");
  const bool sparse = args.flag("--sparse");
  const host_context ctx = make_context(args);

  const index_t n = a.size(), m = b.size();
  if (!sparse) outputs.require_space("-o", static_cast<double>(n) * static_cast<double>(m) * sizeof(double) + 128);
  const vector_view<const T> av(a.data(), n), bv(b.data(), m);
  host_vector<double> u(duals ? n : 0), v(duals ? m : 0);
  host_matrix<double> plan;
  host_vector<index_t> rows, cols;
  host_vector<double> mass;
  ot::emd_result result;
  double seconds = 0;
  try {
    if (sparse) {
      rows = host_vector<index_t>(n + m - 1);
      cols = host_vector<index_t>(n + m - 1);
      mass = host_vector<double>(n + m - 1);
      const stopwatch timer;
      result = duals ? ot::emd_sparse(ctx, params, av, bv, cost.const_view(), rows.view(), cols.view(), mass.view(),
                                      u.view(), v.view())
                     : ot::emd_sparse(ctx, params, av, bv, cost.const_view(), rows.view(), cols.view(), mass.view());
      seconds = timer.seconds();
    } else {
      plan = host_matrix<double>(n, m);
      const stopwatch timer;
      result = duals ? ot::emd(ctx, params, av, bv, cost.const_view(), plan.view(), u.view(), v.view())
                     : ot::emd(ctx, params, av, bv, cost.const_view(), plan.view());
      seconds = timer.seconds();
    }
  } catch (const invalid_argument& e) {
    // The library names a, b and cost; say which files those are (or which option a parameter came from).
    const std::string message = name_the_option(e.what(), {{"--max-iter", "params.max_iterations"}});
    if (message != e.what()) throw usage_error(message);
    throw usage_error(message + " (a = " + paths[0] + ", b = " + paths[1] + ", cost = " + paths[2] + ")");
  }
  if (result.status == moecomp::status::infeasible)
    throw usage_error(paths[2] + ": no feasible plan: the +inf (forbidden) entries leave some mass of a with no "
                      "allowed column of b");

  {
    if (sparse) {
      host_matrix<double> list(result.nonzeros, 3);
      for (index_t k = 0; k < result.nonzeros; ++k) {
        list(k, 0) = static_cast<double>(rows[k]);
        list(k, 1) = static_cast<double>(cols[k]);
        list(k, 2) = mass[k];
      }
      outputs.stage("-o", list.const_view());
    } else {
      outputs.stage("-o", plan.const_view());
    }
  }
  outputs.stage("--duals", u.const_view());
  outputs.stage("--duals-v", v.const_view());
  return conclude(args, outputs, json_summary()
                   .add("command", std::string("emd"))
                   .add("n", static_cast<long long>(n))
                   .add("m", static_cast<long long>(m))
                   .add("dtype", std::string(std::is_same_v<T, float> ? "float32" : "float64"))
                   .add("cost", result.cost)
                   .add("iterations", static_cast<long long>(result.iterations))
                   .add("nonzeros", static_cast<long long>(result.nonzeros))
                   .add("seconds", seconds),
                  result.status, "emd",
                  "the pivot limit (--max-iter " + std::to_string(params.max_iterations) +
                      ") was reached: the plan is feasible but not proven optimal");
}

int emd(const arguments& args, output_files& outputs) {
  using namespace moecomp;
  if (args.value("--duals-v") && !args.value("--duals"))
    throw usage_error("option --duals-v: needs --duals U.npy as well");
  std::vector<io::npy_array> inputs;
  for (const std::string& path : args.positional()) inputs.push_back(read_operand(path));
  return choose_precision(args, inputs[2].dtype(), args.positional()[2]) == precision::float32
             ? run_emd<float>(args, outputs, inputs)
             : run_emd<double>(args, outputs, inputs);
}

}  // namespace

const command_registration emd_registration{command{
    {"emd",
     "exact optimal transport plan (POT ot.emd / ot.emd2) by network simplex; plan n x m float64",
     "emd a.npy b.npy M.npy [--max-iter N] [--sparse] [--duals U.npy [--duals-v V.npy]] [-o PLAN.npy] [--json]",
     3,
     3,
     {{"--max-iter", true, "N >= 0 simplex pivots at most (default 100000000); when reached the last basic plan is "
                           "written, status iteration_limit, exit 0 with a warning"},
      {"--sparse", false, "write the plan as k x 3 float64 rows (i, j, mass) of its positive entries"},
      {"--duals", true, "also write the dual potential u (length n, float64, centred as POT) to this file", true},
      {"--duals-v", true, "with --duals: write the dual potential v (length m) to this file", true}}},
    emd}};

}  // namespace moecomp_cli
