// moecomp linkage X.npy --method M [--metric M] [--condensed] [--low-memory] [-o Z.npy] [--json]:
// scipy.cluster.hierarchy.linkage over an .npy file (points n x d, or with --condensed a condensed distance
// vector). Z is written as (n - 1) x 4 float64.
#include "cli.hpp"

#include <moecomp/cluster/linkage.hpp>

#include <sstream>

namespace moecomp_cli {
namespace {

template <class T>
int run_linkage(const arguments& args, output_files& outputs, const moecomp::io::npy_array& input,
                const std::string& path, const moecomp::cluster::linkage_params& params) {
  using namespace moecomp;
  const bool condensed = args.flag("--condensed"), low_memory = args.flag("--low-memory");
  const host_context ctx = make_context(args);
  host_matrix<double> z;
  index_t n = 0;
  double seconds = 0.0;
  if (condensed) {
    if (input.dtype() != io::npy_dtype::float32 && input.dtype() != io::npy_dtype::float64)
      throw usage_error(path + ": dtype " + io::to_string(input.dtype()) +
                        " is not accepted here, expected float32 or float64");
    if (input.ndim() != 1)
      throw usage_error(path + ": --condensed expects a 1-D condensed distance vector, got shape " +
                        shape_text(input.shape()));
    // The input, its T copy, and the working copy the linkage edits, all of the condensed length.
    require_memory(static_cast<double>(input.size()) * (2.0 * sizeof(double) + sizeof(T)),
                   "linkage: " + std::to_string(input.size()) + " condensed distances", "");
    const host_vector<T> distances = input.to_vector<T>();
    n = distance::points_of_condensed_size(distances.size());
    z = host_matrix<double>(n > 1 ? n - 1 : 0, 4);
    const stopwatch timer;
    cluster::linkage_condensed(ctx, params, distances.view(), z.view());
    seconds = timer.seconds();
  } else {
    // NaN and inf are refused here with their position; the library would refuse them too.
    const host_matrix<T> x = load_float_matrix<T>(path, input, /*require_finite=*/true);
    n = x.rows();
    if (n < 1) throw usage_error(path + ": expected at least one point, got shape " + shape_text(input.shape()));
    if (!low_memory) {
      const double pairs = static_cast<double>(n) * static_cast<double>(n - 1) / 2.0;
      const bool has_low_memory = params.method == cluster::linkage_method::single ||
                                  cluster::requires_euclidean(params.method);
      require_memory(pairs * sizeof(double) + static_cast<double>(x.size()) * sizeof(T) * 2,
                     "linkage: the " + std::to_string(static_cast<long long>(pairs)) + " pairwise distances of " +
                         std::to_string(n) + " points",
                     has_low_memory ? "--low-memory needs only O(n d) memory for method " +
                                          std::string(cluster::to_string(params.method))
                                    : "--low-memory (O(n d) memory) supports single, ward, centroid and median");
    }
    z = host_matrix<double>(n - 1, 4);
    const stopwatch timer;
    if (low_memory)
      cluster::linkage_low_memory(ctx, params, x.view(), z.view());
    else
      cluster::linkage(ctx, params, x.view(), z.view());
    seconds = timer.seconds();
  }
  outputs.stage("-o", z.const_view());
  return conclude(args, outputs, json_summary()
                   .add("command", std::string("linkage"))
                   .add("n", static_cast<long long>(n))
                   .add("method", std::string(cluster::to_string(params.method)))
                   .add("metric", std::string(condensed ? "precomputed" : distance::to_string(params.metric)))
                   .add("low_memory", low_memory)
                   .add("dtype", std::string(std::is_same_v<T, float> ? "float32" : "float64"))
                   .add("seconds", seconds),
                  moecomp::status::ok, "linkage", "");
}

int linkage(const arguments& args, output_files& outputs) {
  using namespace moecomp;
  const std::string& path = args.positional()[0];
  cluster::linkage_params params;
  const auto method = args.value("--method");
  if (!method) throw usage_error("linkage: option --method is required (single, complete, average, weighted, ward, "
                                 "centroid or median)");
  try {
    params.method = cluster::parse_linkage_method(*method);
  } catch (const error& e) {
    throw usage_error(std::string("option --method: ") + e.what());
  }
  if (const auto m = args.value("--metric")) {
    try {
      params.metric = distance::parse_metric(*m);
    } catch (const error& e) {
      throw usage_error(std::string("option --metric: ") + e.what());
    }
  }
  const bool condensed = args.flag("--condensed"), low_memory = args.flag("--low-memory");
  if (condensed && low_memory)
    throw usage_error("linkage: --low-memory works from points and cannot be combined with --condensed");
  if (condensed && args.value("--metric"))
    throw usage_error("linkage: --metric applies to points; a --condensed input already holds the distances");
  if (!condensed && cluster::requires_euclidean(params.method) && params.metric != distance::metric::euclidean)
    throw usage_error(std::string("option --metric: method ") + cluster::to_string(params.method) +
                      " is defined for euclidean distances only, got " + distance::to_string(params.metric));
  if (low_memory && !(params.method == cluster::linkage_method::single || cluster::requires_euclidean(params.method)))
    throw usage_error(std::string("option --low-memory: supports single, ward, centroid and median, got ") +
                      cluster::to_string(params.method));
  const io::npy_array input = read_operand(path);
  return choose_precision(args, input.dtype(), path) == precision::float32
             ? run_linkage<float>(args, outputs, input, path, params)
             : run_linkage<double>(args, outputs, input, path, params);
}

}  // namespace

const command_registration linkage_registration{command{
    {"linkage",
     "hierarchical clustering (scipy linkage): Z, (n - 1) x 4 float64",
     "linkage X.npy --method single|complete|average|weighted|ward|centroid|median [--metric M] [--condensed] "
     "[--low-memory] [-o Z.npy] [--json]",
     1,
     1,
     {{"--method", true, "single|complete|average|weighted|ward|centroid|median (required)"},
      {"--metric", true, "euclidean|sqeuclidean|cosine|correlation for points (default euclidean)"},
      {"--condensed", false, "X is a condensed distance vector (scipy pdist order), not points"},
      {"--low-memory", false, "O(n d) memory from points: single, ward, centroid, median"}}},
    linkage}};

}  // namespace moecomp_cli
