// moecomp align A.npy B.npy [--objective weights|inner|correlation] [--inputs X.npy] [--activation ACT]
// [-o P.npy] [--json]: neuron alignment of two experts by an exact linear assignment. Output: int64 length n,
// row P[i] of B matched to row i of A (so B[P] is B in A's order, and P is residual-encode's --permutation for
// W = A, BASE = B).
//   weights / inner: A (n x f) and B (m x f, n <= m) are design rows [W1 | W3 | W2^T]; minimise the summed
//     squared distances, or maximise the summed inner products;
//   correlation: A and B are hidden activations (tokens x n, tokens x m): maximise the summed Pearson
//     correlations of matched neurons; with --inputs X.npy (tokens x d) A and B are design rows instead (width
//     3d gated, 2d plain) and their activations act(X W1^T) (* X W3^T) are computed first.
#include "cli.hpp"

#include <moecomp/align/align.hpp>

#include <cstdint>
#include <vector>

namespace moecomp_cli {
namespace {

/// An expert view over design rows [W1 | W3 | W2^T] (width 3d) or [W1 | W2^T] (2d): W1 and W3 are column blocks
/// of the rows; W2 (d x n) is the transpose of the last block, materialised.
template <class T>
struct design_expert {
  moecomp::host_matrix<T> w2;
  moecomp::moe::ffn_expert_view<T> view;
};

template <class T>
design_expert<T> expert_from_design(const moecomp::host_matrix<T>& rows, moecomp::index_t d, const std::string& path) {
  using namespace moecomp;
  const index_t n = rows.rows(), f = rows.cols();
  if (f != 3 * d && f != 2 * d)
    throw usage_error(path + ": with --inputs, design rows must have 3d (gated: [W1 | W3 | W2^T]) or 2d ([W1 | W2^T]) "
                      "columns for the inputs' d = " + std::to_string(d) + ", got " + std::to_string(f));
  const bool gated = f == 3 * d;
  design_expert<T> e{host_matrix<T>(d, n), {}};
  const index_t down = gated ? 2 * d : d;
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < d; ++j) e.w2(j, i) = rows(i, down + j);
  e.view.w1 = matrix_view<const T>(rows.data(), n, d, f);
  if (gated) e.view.w3 = matrix_view<const T>(rows.data() + d, n, d, f);
  e.view.w2 = e.w2.view();
  return e;
}

/// Loads the operands, then aligns; `seconds` receives the time of the alignment alone (activations, cost,
/// assignment), without the loading.
template <class T>
moecomp::align::align_result run_align(const arguments& args, const moecomp::align::align_params& params,
                                       const std::string& path_a, const moecomp::io::npy_array& in_a,
                                       const std::string& path_b, const moecomp::io::npy_array& in_b,
                                       moecomp::host_vector<moecomp::index_t>& p, double& seconds) {
  using namespace moecomp;
  const host_matrix<T> a = load_float_matrix<T>(path_a, in_a, /*require_finite=*/true);
  const host_matrix<T> b = load_float_matrix<T>(path_b, in_b, /*require_finite=*/true);
  const host_context ctx = make_context(args);
  const bool correlation = params.objective == align::align_objective::correlation;
  const auto inputs = args.value("--inputs");
  if (correlation && inputs) {
    host_matrix<T> x;
    try {
      x = load_float_matrix<T>(*inputs, read_operand(*inputs), /*require_finite=*/true);
    } catch (const usage_error& e) {
      throw usage_error(std::string("option --inputs: ") + e.what());
    }
    if (b.cols() != a.cols())
      throw usage_error(path_b + ": design rows must have " + std::to_string(a.cols()) + " columns like " + path_a +
                        "'s, got " + std::to_string(b.cols()));
    if (b.rows() != a.rows())
      throw usage_error(path_b + ": with --inputs, the experts must have the same " + std::to_string(a.rows()) +
                        " neurons (rows) as " + path_a + ", got " + std::to_string(b.rows()));
    const design_expert<T> ea = expert_from_design<T>(a, x.cols(), path_a);
    const design_expert<T> eb = expert_from_design<T>(b, x.cols(), path_b);
    if (x.rows() < 2) throw usage_error("option --inputs: needs at least 2 tokens (rows), got " + std::to_string(x.rows()));
    p = host_vector<index_t>(a.rows());
    const stopwatch timer;
    const align::align_result r = align::align_experts<T>(ctx, params, ea.view, eb.view, x.view(), p.view());
    seconds = timer.seconds();
    return r;
  }
  try {
    p = host_vector<index_t>(correlation ? a.cols() : a.rows());
    const stopwatch timer;
    const align::align_result r = correlation ? align::align_activations<T>(ctx, a.view(), b.view(), p.view())
                                              : align::align_rows<T>(ctx, params, a.view(), b.view(), p.view());
    seconds = timer.seconds();
    return r;
  } catch (const invalid_argument& e) {
    throw usage_error(path_a + ", " + path_b + ": " + e.what());
  }
}

int align_command(const arguments& args, output_files& outputs) {
  using namespace moecomp;
  const std::string& path_a = args.positional()[0];
  const std::string& path_b = args.positional()[1];
  align::align_params params;
  try {
    params.objective = align::parse_align_objective(args.value_or("--objective", "weights"));
    params.forward.act = moe::parse_activation(args.value_or("--activation", "silu"));
  } catch (const invalid_argument& e) {
    throw usage_error(std::string("option --") + e.what());
  }
  if (args.value("--inputs") && params.objective != align::align_objective::correlation)
    throw usage_error("option --inputs: only meaningful with --objective correlation");
  if (args.value("--activation") && !args.value("--inputs"))
    throw usage_error("option --activation: only meaningful with --inputs");
  const io::npy_array in_a = read_operand(path_a), in_b = read_operand(path_b);
  const precision prec = choose_precision(args, in_a.dtype(), path_a);
  host_vector<index_t> p;
  double seconds = 0;
  const align::align_result r = prec == precision::float32
                                    ? run_align<float>(args, params, path_a, in_a, path_b, in_b, p, seconds)
                                    : run_align<double>(args, params, path_a, in_a, path_b, in_b, p, seconds);
  host_vector<std::int64_t> out(p.size());
  for (index_t i = 0; i < p.size(); ++i) out[i] = static_cast<std::int64_t>(p[i]);
  outputs.stage("-o", out.const_view());
  json_summary summary;
  summary.add("command", std::string("align"))
      .add("objective", std::string(align::to_string(params.objective)))
      .add("n", static_cast<long long>(p.size()))
      .add("dtype", std::string(prec == precision::float32 ? "float32" : "float64"))
      .add("cost", r.cost)
      .add("seconds", seconds);
  return conclude(args, outputs, summary, r.status, "align", "");
}

}  // namespace

const command_registration align_registration{command{
    {"align",
     "match the neurons of expert B to those of expert A (exact assignment on design rows or activations)",
     "align A.npy B.npy [--objective weights|inner|correlation] [--inputs X.npy] "
     "[--activation silu|gelu|gelu_tanh|relu] [-o P.npy] [--json]",
     2,
     2,
     {{"--objective", true,
       "weights (default: min summed squared distance of design rows) | inner (max summed inner product) | "
       "correlation (max summed Pearson correlation of activations)"},
      {"--inputs", true, "correlation: tokens x d; A and B are then design rows [W1 | W3 | W2^T] or [W1 | W2^T]"},
      {"--activation", true, "with --inputs: silu (default) | gelu | gelu_tanh | relu"}}},
    align_command}};

}  // namespace moecomp_cli
