// moecomp barycenter-free X1.npy ... Xk.npy [--weights w.npy] [--init X0.npy] [--max-iter N] [--tol T]
// [--perms P.npy] [-o B.npy] [--json]: free-support Wasserstein barycenter of k point clouds of equal shape
// n x d with uniform masses (POT's ot.lp.free_support_barycenter; ResMoE's barycenter expert), by the
// exact-assignment fast path. B is n x d in the computation precision; P is k x n int64: row i of cloud j
// goes to barycenter row P[j, i].
#include "cli.hpp"

#include <moecomp/ot/free_support_barycenter.hpp>

#include <cmath>
#include <sstream>

namespace moecomp_cli {
namespace {

template <class T>
int run_barycenter(const arguments& args, output_files& outputs, moecomp::io::npy_array first) {
  using namespace moecomp;
  const std::vector<std::string>& paths = args.positional();
  const auto k = static_cast<index_t>(paths.size());
  // The clouds are read one at a time straight into the stacked (k n) x d matrix, so that at the ResMoE size
  // (8 x 14336 x 12290 float32, 5.6 GB) only one extra cloud is ever held besides it. Every cloud must be
  // finite and shaped like the first.
  host_matrix<T> cloud0 = load_float_matrix<T>(paths[0], first, /*require_finite=*/true);
  first = io::npy_array();
  if (cloud0.rows() < 1)
    throw usage_error(paths[0] + ": expected at least one point, got shape " + shape_text({cloud0.rows(), cloud0.cols()}));
  const index_t n = cloud0.rows(), d = cloud0.cols();
  host_matrix<T> measures(k * n, d);
  std::copy(cloud0.storage().begin(), cloud0.storage().end(), measures.storage().begin());
  cloud0 = host_matrix<T>();
  for (index_t j = 1; j < k; ++j) {
    const std::string& path = paths[static_cast<std::size_t>(j)];
    const host_matrix<T> cloud = load_float_matrix<T>(path, read_operand(path), /*require_finite=*/true);
    if (cloud.rows() != n || cloud.cols() != d)
      throw usage_error(path + ": every cloud must have the shape of " + paths[0] + ", " + shape_text({n, d}) +
                        ", got " + shape_text({cloud.rows(), cloud.cols()}));
    std::copy(cloud.storage().begin(), cloud.storage().end(), measures.storage().begin() + j * n * d);
  }
  std::vector<double> weights(static_cast<std::size_t>(k), 1.0 / static_cast<double>(k));
  if (const auto w = args.value("--weights")) weights = load_weights(*w, k, "clouds");
  // Default start: cloud 0 itself (ResMoE), viewed in place.
  host_matrix<T> init_storage;
  matrix_view<const T> init = measures.const_view().row_range(0, n);
  if (const auto path = args.value("--init")) {
    const io::npy_array array = read_operand(*path);
    init_storage = load_float_matrix<T>("option --init: " + *path, array, /*require_finite=*/true);
    if (init_storage.rows() != n || init_storage.cols() != d)
      throw usage_error("option --init: " + *path + ": expected the clouds' shape " + shape_text({n, d}) + ", got " +
                        shape_text(array.shape()));
    init = init_storage.const_view();
  }
  ot::free_support_barycenter_params params;
  // Values are checked by the library (once); its message is given the option's name below.
  params.max_iterations = args.integer("--max-iter", 100);
  params.tolerance = args.number("--tol", 1e-7);
  const host_context ctx = make_context(args);

  host_matrix<T> barycenter(n, d);
  host_matrix<index_t> permutations(k, n);
  const stopwatch timer;
  ot::free_support_barycenter_result result;
  try {
    result = ot::free_support_barycenter<T>(ctx, params, split_rows(measures.const_view(), k),
                                            vector_view<const double>(weights.data(), k), init, barycenter.view(),
                                            permutations.view());
  } catch (const invalid_argument& e) {
    throw usage_error(name_the_option(e.what(), {{"--max-iter", "params.max_iterations"}, {"--tol", "params.tolerance"}}));
  }
  const double seconds = timer.seconds();
  outputs.stage("--perms", permutations.const_view());
  outputs.stage("-o", barycenter.const_view());
  return conclude(args, outputs, json_summary()
                   .add("command", std::string("barycenter-free"))
                   .add("k", static_cast<long long>(k))
                   .add("n", static_cast<long long>(n))
                   .add("d", static_cast<long long>(d))
                   .add("dtype", std::string(std::is_same_v<T, float> ? "float32" : "float64"))
                   .add("objective", result.objective)
                   .add("iterations", static_cast<long long>(result.iterations))
                   .add("displacement", result.criterion)
                   .add("seconds", seconds),
                  result.status, "barycenter-free", "more --max-iter or a larger --tol");
}

int barycenter_free(const arguments& args, output_files& outputs) {
  using namespace moecomp;
  io::npy_array first = read_operand(args.positional()[0]);
  return choose_precision(args, first.dtype(), args.positional()[0]) == precision::float32
             ? run_barycenter<float>(args, outputs, std::move(first))
             : run_barycenter<double>(args, outputs, std::move(first));
}

}  // namespace

const command_registration barycenter_free_registration{command{
    {"barycenter-free",
     "free-support Wasserstein barycenter of k point clouds n x d, uniform masses (POT's "
     "free_support_barycenter, exact assignments): B n x d",
     "barycenter-free X1.npy ... Xk.npy [--weights w.npy] [--init X0.npy] [--max-iter N] [--tol T] "
     "[--perms P.npy] [-o B.npy] [--json]",
     1,
     static_cast<std::size_t>(-1),
     {{"--weights", true, "k cloud weights, >= 0, summing to 1 (default uniform)"},
      {"--init", true, "starting support n x d (default the first cloud)"},
      {"--max-iter", true, "most barycenter updates (default 100)"},
      {"--tol", true, "stop once the squared displacement ||B_new - B||_F^2 <= T (default 1e-7)"},
      {"--perms", true, "write the k x n int64 permutations: row i of cloud j goes to row P[j, i]", true}}},
    barycenter_free}};

}  // namespace moecomp_cli
