// moecomp fcluster Z.npy (--maxclust K | --distance T) [-o labels.npy] [--json]: flat clusters from a linkage
// matrix, as scipy.cluster.hierarchy.fcluster's 'maxclust' and 'distance' criteria, labels 0-based by first
// appearance.
#include "cli.hpp"

#include <moecomp/cluster/fcluster.hpp>

#include <sstream>

namespace moecomp_cli {
namespace {

int fcluster(const arguments& args, output_files& outputs) {
  using namespace moecomp;
  const bool by_count = args.value("--maxclust").has_value(), by_height = args.value("--distance").has_value();
  if (by_count == by_height)
    throw usage_error(std::string("fcluster: give exactly one of --maxclust K and --distance T, got ") +
                      (by_count ? "both" : "neither"));
  // Values are checked by the library (once); its message is given the option's name below.
  cluster::fcluster_params params;
  params.criterion = by_count ? cluster::fcluster_criterion::maxclust : cluster::fcluster_criterion::distance;
  params.max_clusters = args.integer("--maxclust", 1);
  params.height = args.number("--distance", 0.0);
  const host_context ctx = make_context(args);
  // The cut is exact bookkeeping on float64 Z whatever --dtype says; the option is still checked.
  (void)choose_precision(args, io::npy_dtype::float64, "Z");

  const std::string& path = args.positional()[0];
  const io::npy_array input = read_operand(path);
  if (input.ndim() != 2 || input.shape()[1] != 4)
    throw usage_error(path + ": expected a linkage matrix of shape (n - 1, 4), got shape " + shape_text(input.shape()));
  // Linkage matrices are float64 by contract; a float32 one is widened (its ids and sizes stay exact).
  const host_matrix<double> z = load_float_matrix<double>(path, input, /*require_finite=*/false);
  try {
    cluster::validate_linkage(ctx, z.view());
  } catch (const invalid_argument& e) {
    throw usage_error(path + ": not a valid linkage matrix: " + e.what());
  }

  host_vector<std::int64_t> labels(z.rows() + 1);
  const stopwatch timer;
  index_t clusters = 0;
  try {
    clusters = cluster::fcluster(ctx, params, z.view(), labels.view());
  } catch (const invalid_argument& e) {
    throw usage_error(name_the_option(e.what(), {{"--maxclust", "params.max_clusters"}, {"--distance", "params.height"}}));
  }
  const double seconds = timer.seconds();

  outputs.stage("-o", labels.const_view());
  json_summary summary;
  summary.add("command", std::string("fcluster"))
      .add("n", static_cast<long long>(labels.size()))
      .add("criterion", std::string(by_count ? "maxclust" : "distance"));
  if (by_count)
    summary.add("maxclust", static_cast<long long>(params.max_clusters));
  else
    summary.add("distance", params.height);
  return conclude(args, outputs, summary.add("clusters", static_cast<long long>(clusters)).add("seconds", seconds),
                  moecomp::status::ok, "fcluster", "");
}

}  // namespace

const command_registration fcluster_registration{command{
    {"fcluster",
     "flat clusters of a linkage matrix (scipy fcluster maxclust or distance), labels 0-based",
     "fcluster Z.npy (--maxclust K | --distance T) [-o LABELS.npy] [--json]",
     1,
     1,
     {{"--maxclust", true, "K >= 1: cut into exactly min(K, n) clusters (ties: lower Z row merged first)"},
      {"--distance", true, "T: join points whose merge height (max over the subtree) is <= T"}}},
    fcluster}};

}  // namespace moecomp_cli
