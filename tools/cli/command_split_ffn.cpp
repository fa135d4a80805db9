// moecomp split-ffn --w1 W1.npy --w2 W2.npy [--w3 W3.npy] [--b1 b1.npy] [--b3 b3.npy] --experts E [--seed S]
// [--n-init N] [--max-iter N] -o OUT_DIR [--json]: the MoEfication split of a dense FFN (nn.Linear layout)
// into E equal experts by balanced k-means on its normalised gate rows (cluster::moefication_split). Writes
// a directory of .npy files, whole or not at all. The contract: docs/cli.md; the algorithm: docs/kmeans.md.
#include "cli.hpp"

#include <moecomp/cluster/moefication.hpp>

namespace moecomp_cli {
namespace {

template <class T>
moecomp::host_matrix<T> load_weight(const std::string& option, const std::string& path) {
  const moecomp::io::npy_array array = read_operand(path);
  if (array.ndim() != 2)
    throw usage_error("option " + option + ": " + path + ": expected a 2-D weight, got shape " +
                      shape_text(array.shape()));
  return load_float_matrix<T>(path, array, /*require_finite=*/true);
}

template <class T>
moecomp::host_vector<T> load_bias(const std::string& option, const std::string& path, moecomp::index_t size) {
  const moecomp::io::npy_array array = read_operand(path);
  if (array.ndim() != 1 || array.shape()[0] != size)
    throw usage_error("option " + option + ": " + path + ": expected shape " + shape_text({size}) +
                      " (one per neuron: the rows of --w1), got " + shape_text(array.shape()));
  if (array.dtype() != moecomp::io::npy_dtype::float32 && array.dtype() != moecomp::io::npy_dtype::float64)
    throw usage_error("option " + option + ": " + path + ": dtype " + moecomp::io::to_string(array.dtype()) +
                      " is not accepted here, expected float32 or float64");
  return array.to_vector<T>();
}

template <class T>
int run_split(const arguments& args, output_files& outputs, const std::string& w1_path) {
  using namespace moecomp;
  const host_matrix<T> w1 = load_weight<T>("--w1", w1_path);
  const host_matrix<T> w2 = load_weight<T>("--w2", *args.value("--w2"));
  const auto w3_path = args.value("--w3");
  const host_matrix<T> w3 = w3_path ? load_weight<T>("--w3", *w3_path) : host_matrix<T>();
  const index_t d_ff = w1.rows(), d = w1.cols();
  const auto b1_path = args.value("--b1"), b3_path = args.value("--b3");
  if (b3_path && !w3_path) throw usage_error("option --b3: needs --w3 (the up projection it belongs to)");
  const host_vector<T> b1 = b1_path ? load_bias<T>("--b1", *b1_path, d_ff) : host_vector<T>();
  const host_vector<T> b3 = b3_path ? load_bias<T>("--b3", *b3_path, d_ff) : host_vector<T>();
  if (!args.value("--experts")) throw usage_error("option --experts: required (the number of experts E)");
  // MoEfication's clustering: k-means++, 10 restarts, 300 iterations, tol 1e-4, seed 0.
  cluster::kmeans_params params;
  params.clusters = args.integer("--experts", 1);
  params.restarts = args.integer("--n-init", 10);
  params.max_iterations = args.integer("--max-iter", 300);
  if (args.integer("--seed", 0) < 0) throw usage_error("option --seed: expected an integer >= 0, got " + *args.value("--seed"));
  params.seed = static_cast<std::uint64_t>(args.integer("--seed", 0));
  if (params.clusters >= 1 && d_ff % params.clusters != 0)
    throw usage_error("option --experts: the neurons (rows of --w1, " + std::to_string(d_ff) +
                      ") must be a multiple of --experts (" + std::to_string(params.clusters) + ")");
  const index_t experts = params.clusters >= 1 ? params.clusters : 1, s = d_ff / experts;
  const host_context ctx = make_context(args);

  const bool glu = w3_path.has_value();
  host_matrix<T> e1(experts * s, d), e3(glu ? experts * s : 0, d), e2(experts * d, s);
  host_matrix<T> eb1(b1_path ? experts : 0, s), eb3(b3_path ? experts : 0, s), router(experts, d);
  host_vector<std::int64_t> labels(d_ff);
  host_vector<index_t> perm(d_ff);
  const cluster::dense_ffn_view<T> ffn{w1.const_view(), glu ? w3.const_view() : matrix_view<const T>(),
                                       w2.const_view(), b1.const_view(), b3.const_view()};
  const cluster::expert_stack_outputs<T> out{split_rows(e1.view(), experts),
                                             glu ? split_rows(e3.view(), experts) : matrix_stack_view<T>(),
                                             split_rows(e2.view(), experts),
                                             eb1.view(),
                                             eb3.view(),
                                             router.view(),
                                             labels.view(),
                                             perm.view()};
  const stopwatch timer;
  cluster::kmeans_result result;
  try {
    result = cluster::moefication_split<T>(ctx, params, ffn, out);
  } catch (const invalid_argument& e) {
    throw usage_error(name_the_option(e.what(), {{"--experts", "params.clusters"},
                                                 {"--n-init", "params.restarts"},
                                                 {"--max-iter", "params.max_iterations"}}));
  }
  const double seconds = timer.seconds();
  outputs.stage_in_directory("labels", labels.const_view());
  outputs.stage_in_directory("perm", perm.const_view());
  outputs.stage_in_directory("w1", split_rows(e1.const_view(), experts));
  outputs.stage_in_directory("w2", split_rows(e2.const_view(), experts));
  if (glu) outputs.stage_in_directory("w3", split_rows(e3.const_view(), experts));
  if (b1_path) outputs.stage_in_directory("b1", eb1.const_view());
  if (b3_path) outputs.stage_in_directory("b3", eb3.const_view());
  outputs.stage_in_directory("router", router.const_view());
  return conclude(args, outputs,
                  json_summary()
                      .add("command", std::string("split-ffn"))
                      .add("neurons", static_cast<long long>(d_ff))
                      .add("d", static_cast<long long>(d))
                      .add("experts", static_cast<long long>(experts))
                      .add("neurons_per_expert", static_cast<long long>(s))
                      .add("glu", glu)
                      .add("inertia", result.inertia)
                      .add("iterations", static_cast<long long>(result.iterations))
                      .add("assignment_gap", result.assignment_gap)
                      .add("seconds", seconds),
                  result.status, "split-ffn", "more --max-iter");
}

int split_ffn(const arguments& args, output_files& outputs) {
  const auto w1_path = args.value("--w1");
  if (!w1_path) throw usage_error("option --w1: required (the gate / first projection, d_ff x d)");
  if (!args.value("--w2")) throw usage_error("option --w2: required (the down projection, d x d_ff)");
  const moecomp::io::npy_array probe = read_operand(*w1_path);
  return choose_precision(args, probe.dtype(), *w1_path) == precision::float32
             ? run_split<float>(args, outputs, *w1_path)
             : run_split<double>(args, outputs, *w1_path);
}

}  // namespace

const command_registration split_ffn_registration{command{
    {"split-ffn",
     "MoEfication: split a dense FFN into E equal experts by balanced k-means on its normalised gate rows",
     "split-ffn --w1 W1.npy --w2 W2.npy [--w3 W3.npy] [--b1 b1.npy] [--b3 b3.npy] --experts E [--seed S] "
     "[--n-init N] [--max-iter N] -o OUT_DIR [--json]",
     0,
     0,
     {{"--w1", true, "W1.npy: the first (gate, for GLU) projection, d_ff x d, nn.Linear layout (required)"},
      {"--w2", true, "W2.npy: the down projection, d x d_ff (required)"},
      {"--w3", true, "W3.npy: the up projection of a GLU FFN, d_ff x d"},
      {"--b1", true, "b1.npy: the bias of W1, d_ff"},
      {"--b3", true, "b3.npy: the bias of W3, d_ff"},
      {"--experts", true, "E: the number of experts; d_ff must be a multiple of E (required)"},
      {"--seed", true, "seed of moecomp's generator, >= 0 (default 0)"},
      {"--n-init", true, "k-means runs, the lowest inertia wins (default 10, as MoEfication)"},
      {"--max-iter", true, "iterations per run (default 300)"}},
     /*output_directory=*/true},
    split_ffn}};

}  // namespace moecomp_cli
