// moecomp pdist X.npy [--metric M] [-o D.npy] [--json]: scipy.spatial.distance.pdist over an .npy file.
#include "cli.hpp"

#include <moecomp/distance/pairwise_distance.hpp>

namespace moecomp_cli {
namespace {

template <class T>
int run_pdist(const arguments& args, const moecomp::io::npy_array& input, const std::string& path) {
  using namespace moecomp;
  const distance::metric m = distance::parse_metric(args.value_or("--metric", "euclidean"));
  const host_matrix<T> x = load_float_matrix<T>(path, input, /*require_finite=*/true);
  const host_context ctx = make_context(args);
  distance::pairwise_distance_params params;
  params.metric = m;

  host_vector<T> condensed(distance::condensed_size(x.rows()));
  const stopwatch timer;
  distance::pairwise_distances_condensed(ctx, params, x.view(), condensed.view());
  const double seconds = timer.seconds();

  if (const auto out = args.value("-o")) {
    // The contract: distances are written as float64 whatever the computation's precision.
    host_vector<double> result(condensed.size());
    for (index_t k = 0; k < condensed.size(); ++k) result[k] = static_cast<double>(condensed[k]);
    io::write_npy(*out, result.const_view());
  }
  report(args, json_summary()
                   .add("command", std::string("pdist"))
                   .add("n", static_cast<long long>(x.rows()))
                   .add("d", static_cast<long long>(x.cols()))
                   .add("metric", std::string(distance::to_string(m)))
                   .add("dtype", std::string(std::is_same_v<T, float> ? "float32" : "float64"))
                   .add("seconds", seconds));
  return 0;
}

int pdist(const arguments& args) {
  const std::string& path = args.positional()[0];
  if (const auto m = args.value("--metric")) {
    try {
      moecomp::distance::parse_metric(*m);
    } catch (const moecomp::error& e) {
      throw usage_error(std::string("option --metric: ") + e.what());
    }
  }
  const moecomp::io::npy_array input = read_operand(path);
  return choose_precision(args, input.dtype(), path) == precision::float32 ? run_pdist<float>(args, input, path)
                                                                          : run_pdist<double>(args, input, path);
}

}  // namespace

extern const command pdist_command{
    {"pdist",
     "pairwise distances between the rows of X (condensed, scipy pdist order)",
     "pdist X.npy [--metric euclidean|sqeuclidean|cosine|correlation] [-o D.npy] [--json]",
     1,
     1,
     {{"--metric", true, "euclidean|sqeuclidean|cosine|correlation (default euclidean)"}}},
    pdist};

}  // namespace moecomp_cli
