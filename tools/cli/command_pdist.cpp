// moecomp pdist X.npy [--metric M] [-o D.npy] [--json]: scipy.spatial.distance.pdist over an .npy file.
#include "cli.hpp"

#include <moecomp/distance/pairwise_distance.hpp>

#include <cmath>
#include <cstdio>
#include <type_traits>

namespace moecomp_cli {
namespace {

template <class T>
int run_pdist(const arguments& args, output_files& outputs, const moecomp::io::npy_array& input,
              const std::string& path) {
  using namespace moecomp;
  const distance::metric m = distance::parse_metric(args.value_or("--metric", "euclidean"));
  const host_matrix<T> x = load_float_matrix<T>(path, input, /*require_finite=*/true);
  const host_context ctx = make_context(args);
  distance::pairwise_distance_params params;
  params.metric = m;

  // The condensed result (T) is the one large allocation; the float64 file is converted as it streams out.
  const double pairs = static_cast<double>(x.rows()) * static_cast<double>(x.rows() - 1) / 2.0;
  require_memory(pairs * sizeof(T) + static_cast<double>(x.size()) * sizeof(T) * 2,
                 "pdist: the " + std::to_string(static_cast<long long>(pairs)) + " distances of " +
                     std::to_string(x.rows()) + " rows (" + (std::is_same_v<T, float> ? "float32" : "float64") + ")",
                 std::is_same_v<T, float> ? "use fewer rows" : "--dtype float32 halves it, or use fewer rows");
  outputs.require_space("-o", pairs * sizeof(double) + 128);
  host_vector<T> condensed(distance::condensed_size(x.rows()));
  const stopwatch timer;
  distance::pairwise_distances_condensed(ctx, params, x.view(), condensed.view());
  const double seconds = timer.seconds();

  // Inputs are scaled so that no square overflows; a distance itself beyond T's range (sqeuclidean only)
  // is inf, correctly rounded, and said so.
  long long overflowed = 0;
  for (index_t k = 0; k < condensed.size(); ++k) overflowed += std::isinf(condensed[k]) ? 1 : 0;
  if (overflowed > 0)
    std::fprintf(stderr, "moecomp: warning: pdist: %lld distances exceed the %s range and are inf%s\n", overflowed,
                 std::is_same_v<T, float> ? "float32" : "float64",
                 std::is_same_v<T, float> ? "; --dtype float64 holds them" : "");
  // The contract: distances are written as float64 whatever the computation's precision.
  outputs.stage("-o", condensed.const_view(), io::npy_dtype::float64);
  return conclude(args, outputs, json_summary()
                   .add("command", std::string("pdist"))
                   .add("n", static_cast<long long>(x.rows()))
                   .add("d", static_cast<long long>(x.cols()))
                   .add("metric", std::string(distance::to_string(m)))
                   .add("dtype", std::string(std::is_same_v<T, float> ? "float32" : "float64"))
                   .add("overflowed", overflowed)
                   .add("seconds", seconds),
                  moecomp::status::ok, "pdist", "");
}

int pdist(const arguments& args, output_files& outputs) {
  const std::string& path = args.positional()[0];
  if (const auto m = args.value("--metric")) {
    try {
      moecomp::distance::parse_metric(*m);
    } catch (const moecomp::error& e) {
      throw usage_error(std::string("option --metric: ") + e.what());
    }
  }
  const moecomp::io::npy_array input = read_operand(path);
  return choose_precision(args, input.dtype(), path) == precision::float32
             ? run_pdist<float>(args, outputs, input, path)
             : run_pdist<double>(args, outputs, input, path);
}

}  // namespace

const command_registration pdist_registration{command{
    {"pdist",
     "pairwise distances between the rows of X (condensed, scipy pdist order)",
     "pdist X.npy [--metric euclidean|sqeuclidean|cosine|correlation] [-o D.npy] [--json]",
     1,
     1,
     {{"--metric", true, "euclidean|sqeuclidean|cosine|correlation (default euclidean)"}}},
    pdist}};

}  // namespace moecomp_cli
