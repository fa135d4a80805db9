// moecomp kmeans X.npy --k K [--balanced | --size-min A --size-max B] [--init k-means++|random|C0.npy] [--seed S] [--n-init N] [--max-iter N] [--tol T]
// [--weights W.npy] [--centers C.npy] [-o LABELS.npy] [--json]: Lloyd's k-means (scikit-learn's KMeans with
// algorithm="lloyd"), labels int64 0-based, centres k x d. The contract: docs/cli.md; the algorithm:
// docs/kmeans.md.
#include "cli.hpp"

#include <moecomp/cluster/kmeans.hpp>

namespace moecomp_cli {
namespace {

template <class T>
int run_kmeans(const arguments& args, output_files& outputs, const moecomp::io::npy_array& input,
               const std::string& path) {
  using namespace moecomp;
  const host_matrix<T> x = load_float_matrix<T>(path, input, /*require_finite=*/true);
  // Values are checked by the library (once); its message is given the option's name below.
  cluster::kmeans_params params;
  if (!args.value("--k")) throw usage_error("option --k: required (the number of clusters, >= 1)");
  params.clusters = args.integer("--k", 8);
  params.seed = static_cast<std::uint64_t>(args.integer("--seed", 0));
  if (args.integer("--seed", 0) < 0) throw usage_error("option --seed: expected an integer >= 0, got " + *args.value("--seed"));
  params.restarts = args.integer("--n-init", 1);
  params.max_iterations = args.integer("--max-iter", 300);
  params.tolerance = args.number("--tol", 1e-4);
  // Size bounds: --balanced is equal sizes n / k; --size-min / --size-max as k-means-constrained.
  if (args.flag("--balanced")) {
    if (args.value("--size-min") || args.value("--size-max"))
      throw usage_error("option --balanced: give either --balanced or --size-min / --size-max, not both");
    if (params.clusters < 1 || x.rows() % params.clusters != 0)
      throw usage_error("option --balanced: the rows of " + path + " (" + std::to_string(x.rows()) +
                        ") must be a multiple of --k (" + std::to_string(params.clusters) + ")");
    params.size_min = params.size_max = x.rows() / params.clusters;
  } else {
    params.size_min = args.integer("--size-min", 0);
    params.size_max = args.integer("--size-max", 0);
  }
  host_matrix<T> centers(params.clusters > 0 ? params.clusters : 0, x.cols());
  const std::string init = args.value_or("--init", "k-means++");
  if (init == "k-means++" || init == "random") {
    params.init = cluster::parse_kmeans_init(init);
  } else {
    // A file of initial centres: k x d like the output.
    params.init = cluster::kmeans_init::given;
    const io::npy_array start = read_operand(init);
    centers = load_float_matrix<T>(init, start, /*require_finite=*/true);
    if (centers.rows() != params.clusters || centers.cols() != x.cols())
      throw usage_error("option --init: " + init + ": expected shape " + shape_text({params.clusters, x.cols()}) +
                        " (--k x the columns of " + path + "), got " + shape_text(start.shape()));
  }
  host_vector<T> weights;
  if (const auto w = args.value("--weights")) {
    const io::npy_array array = read_operand(*w);
    if (array.ndim() != 1 || array.shape()[0] != x.rows())
      throw usage_error("option --weights: " + *w + ": expected shape " + shape_text({x.rows()}) + " (one per row of " +
                        path + "), got " + shape_text(array.shape()));
    weights = array.to_vector<T>();
  }
  const host_context ctx = make_context(args);

  host_vector<std::int64_t> labels(x.rows());
  host_vector<index_t> sizes(params.clusters > 0 ? params.clusters : 0);
  const stopwatch timer;
  cluster::kmeans_result result;
  try {
    result = cluster::kmeans<T>(ctx, params, x.const_view(), weights.const_view(), centers.view(), labels.view(),
                                sizes.view());
  } catch (const invalid_argument& e) {
    const std::string message = name_the_option(e.what(), {{"--size-min", "params.size_min"},
                                                           {"--size-max", "params.size_max"},
                                                           {"--k", "params.clusters"},
                                                           {"--n-init", "params.restarts"},
                                                           {"--max-iter", "params.max_iterations"},
                                                           {"--tol", "params.tolerance"},
                                                           {"--weights", "sample_weight"}});
    throw usage_error(message != e.what() ? message : path + ": " + e.what());
  }
  const double seconds = timer.seconds();
  outputs.stage("-o", labels.const_view());
  if (args.value("--centers")) outputs.stage("--centers", centers.const_view());
  std::vector<long long> size_list(sizes.data(), sizes.data() + sizes.size());
  return conclude(args, outputs,
                  json_summary()
                      .add("command", std::string("kmeans"))
                      .add("n", static_cast<long long>(x.rows()))
                      .add("d", static_cast<long long>(x.cols()))
                      .add("k", static_cast<long long>(params.clusters))
                      .add("init", std::string(cluster::to_string(params.init)))
                      .add("dtype", std::string(std::is_same_v<T, float> ? "float32" : "float64"))
                      .add("inertia", result.inertia)
                      .add("iterations", static_cast<long long>(result.iterations))
                      .add("converged", result.ok())
                      .add("best_run", static_cast<long long>(result.best_run))
                      .add("sizes", size_list)
                      .add("assignment_gap", result.assignment_gap)
                      .add("seconds", seconds),
                  result.status, "kmeans", "more --max-iter or a larger --tol");
}

int kmeans(const arguments& args, output_files& outputs) {
  const std::string& path = args.positional()[0];
  const moecomp::io::npy_array input = read_operand(path);
  return choose_precision(args, input.dtype(), path) == precision::float32
             ? run_kmeans<float>(args, outputs, input, path)
             : run_kmeans<double>(args, outputs, input, path);
}

}  // namespace

const command_registration kmeans_registration{command{
    {"kmeans",
     "Lloyd's k-means (scikit-learn KMeans, algorithm lloyd): labels int64 0-based, optional centres",
     "kmeans X.npy --k K [--balanced | --size-min A --size-max B] [--init k-means++|random|C0.npy] [--seed S] "
     "[--n-init N] [--max-iter N] [--tol T] [--weights W.npy] [--centers C.npy] [-o LABELS.npy] [--json]",
     1,
     1,
     {{"--k", true, "number of clusters, 1 <= K <= rows of X (required)"},
      {"--balanced", false, "clusters of exactly n / K rows (exact transportation assignment step)"},
      {"--size-min", true, "A: at least A rows per cluster (k-means-constrained's size_min)"},
      {"--size-max", true, "B: at most B rows per cluster (size_max)"},
      {"--init", true, "k-means++ (default, greedy, 2 + ln K trials) | random (K distinct rows) | C0.npy (K x d)"},
      {"--seed", true, "seed of moecomp's generator, >= 0 (default 0); run r uses stream r"},
      {"--n-init", true, "runs from different starts, the lowest inertia wins (default 1)"},
      {"--max-iter", true, "Lloyd iterations per run (default 300)"},
      {"--tol", true, "stop when the squared centre shift <= tol x mean feature variance (default 1e-4)"},
      {"--weights", true, "W.npy: one sample weight per row, >= 0"},
      {"--centers", true, "C.npy: also write the K x d centres", true}}},
    kmeans}};

}  // namespace moecomp_cli
