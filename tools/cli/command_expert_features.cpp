// moecomp expert-features --w1 W1.npy --w2 W2.npy [--w3 W3.npy] [--b1 B1.npy] [--b3 B3.npy] [--b2 B2.npy]
// --kind vectorized|surrogate|weight-distances|mean-output|outputs|router-logits [--inputs X.npy] [--router R.npy]
// [--router-bias b.npy] [--activation silu|gelu|gelu_tanh|relu] -o F.npy [--json]: expert representations of
// a stack of E FFN experts (W1, W3: E x d_ff x d; W2: E x d x d_ff; biases E x d_ff / E x d). The contract:
// docs/cli.md; the definitions: docs/expert_features.md.
#include "cli.hpp"

#include <moecomp/moe/features.hpp>
#include <moecomp/moe/ffn.hpp>

namespace moecomp_cli {
namespace {

template <class T>
int run_features(const arguments& args, output_files& outputs) {
  using namespace moecomp;
  const std::string kind = args.value_or("--kind", "");
  if (kind != "vectorized" && kind != "surrogate" && kind != "weight-distances" && kind != "mean-output" &&
      kind != "outputs" && kind != "router-logits")
    throw usage_error("option --kind: expected vectorized, surrogate, weight-distances, mean-output, outputs or "
                      "router-logits, got '" + kind + "'");
  moe::ffn_params params;
  try {
    params.act = moe::parse_activation(args.value_or("--activation", "silu"));
  } catch (const invalid_argument& e) {
    throw usage_error(std::string("option --") + e.what());
  }
  const host_context ctx = make_context(args);
  const stopwatch timer;
  json_summary summary;
  summary.add("command", std::string("expert-features")).add("kind", kind);
  if (kind == "router-logits") {
    if (!args.value("--inputs") || !args.value("--router"))
      throw usage_error("option --kind: router-logits needs --inputs X.npy (n x d) and --router R.npy (E x d)");
    const host_matrix<T> x = load_matrix_option<T>(args, "--inputs");
    const host_matrix<T> router = load_matrix_option<T>(args, "--router");
    host_vector<T> bias;
    if (const auto b = args.value("--router-bias")) bias = read_operand(*b).to_vector<T>();
    host_matrix<T> logits(x.rows(), router.rows());
    try {
      moe::router_logits<T>(ctx, x.const_view(), router.const_view(), bias.const_view(), logits.view());
    } catch (const invalid_argument& e) {
      throw usage_error(std::string("option --router: ") + e.what());
    }
    outputs.stage("-o", logits.const_view());
    return conclude(args, outputs, summary.add("seconds", timer.seconds()), status::ok, "expert-features", "");
  }
  if (!args.value("--w1") || !args.value("--w2"))
    throw usage_error("option --w1: --w1 W1.npy and --w2 W2.npy are required (E x d_ff x d and E x d x d_ff)");
  const loaded_stack<T> w1 = load_stack_option<T>(args, "--w1", "E x d_ff x d");
  const loaded_stack<T> w2 = load_stack_option<T>(args, "--w2", "E x d x d_ff");
  const loaded_stack<T> w3 = args.value("--w3") ? load_stack_option<T>(args, "--w3", "E x d_ff x d") : loaded_stack<T>();
  const host_matrix<T> b1 = args.value("--b1") ? load_matrix_option<T>(args, "--b1") : host_matrix<T>();
  const host_matrix<T> b3 = args.value("--b3") ? load_matrix_option<T>(args, "--b3") : host_matrix<T>();
  const host_matrix<T> b2 = args.value("--b2") ? load_matrix_option<T>(args, "--b2") : host_matrix<T>();
  moe::ffn_expert_stack_view<T> stack{w1.view(), w3.view(), w2.view(), b1.const_view(), b3.const_view(),
                                      b2.const_view()};
  const index_t e = w1.count, d = w1.cols, d_ff = w1.rows;
  summary.add("experts", static_cast<long long>(e)).add("d", static_cast<long long>(d)).add("d_ff", static_cast<long long>(d_ff));
  // The library names the piece (w1, w3, w2, b1, ...); the tool puts the option in front.
  auto run_library = [&](auto&& call) {
    try {
      call();
    } catch (const invalid_argument& e) {
      std::string message = e.what();
      for (const char* piece : {"w3", "w2", "b1", "b3", "b2", "w1", "x"}) {
        const std::string needle = std::string(": ") + piece + " must";
        if (message.find(needle) != std::string::npos) {
          throw usage_error(std::string("option --") + (std::string(piece) == "x" ? "inputs" : piece) + ": " + message);
        }
      }
      throw usage_error(message);
    }
  };
  if (kind == "vectorized") {
    host_matrix<T> f(e, stack.d_ff() * stack.d_model() * (stack.gated() ? 3 : 2));
    run_library([&] { moe::vectorized_weights<T>(stack, f.view()); });
    outputs.stage("-o", f.const_view());
  } else if (kind == "surrogate") {
    host_matrix<T> f(e, d * d);
    run_library([&] { moe::surrogate_weights<T>(ctx, stack, f.view()); });
    outputs.stage("-o", f.const_view());
  } else if (kind == "weight-distances") {  // the vectorised weights' pdist, float64; the biases are not part of it
    if (args.value("--b1") || args.value("--b3") || args.value("--b2"))
      throw usage_error("option --kind: weight-distances compares the weights W1, W2, W3 only; drop --b1, --b3 and --b2");
    host_vector<double> f(e * (e - 1) / 2);
    const stopwatch compute;  // the algorithm alone, as scipy's pdist is timed around its call
    run_library([&] { moe::expert_weight_distances<T>(ctx, stack, f.view()); });
    summary.add("seconds", compute.seconds());
    outputs.stage("-o", f.const_view());
    return conclude(args, outputs, summary, status::ok, "expert-features", "");
  } else {
    if (!args.value("--inputs")) throw usage_error("option --kind: " + kind + " needs --inputs X.npy (n x d tokens)");
    const host_matrix<T> x = load_matrix_option<T>(args, "--inputs");
    summary.add("n", static_cast<long long>(x.rows()));
    if (kind == "mean-output") {
      host_matrix<T> f(e, d);
      run_library([&] { moe::expert_mean_outputs<T>(ctx, params, stack, x.const_view(), f.view()); });
      outputs.stage("-o", f.const_view());
      summary.add("seconds", timer.seconds());
      return conclude(args, outputs, summary, status::ok, "expert-features", "");
    }
    host_vector<T> y(e * x.rows() * d);
    const auto ys = make_matrix_stack_view(y.data(), e, x.rows(), d);
    run_library([&] { moe::ffn_stack_forward<T>(ctx, params, stack, x.const_view(), ys); });
    outputs.stage("-o", matrix_stack_view<const T>(ys));
  }
  summary.add("seconds", timer.seconds());
  return conclude(args, outputs, summary, status::ok, "expert-features", "");
}

int expert_features(const arguments& args, output_files& outputs) {
  // Precision: float64 when any weight (or the inputs) is float64, or --dtype float64.
  precision p = precision::float32;
  for (const char* option : {"--w1", "--w2", "--w3", "--inputs", "--router"})
    if (const auto path = args.value(option))
      if (choose_precision(args, read_operand(*path).dtype(), *path) == precision::float64) p = precision::float64;
  return p == precision::float32 ? run_features<float>(args, outputs) : run_features<double>(args, outputs);
}

}  // namespace

const command_registration expert_features_registration{command{
    {"expert-features",
     "Expert representations of a stack of FFN experts: vectorised or surrogate weights, outputs, mean outputs",
     "expert-features --w1 W1.npy --w2 W2.npy [--w3 W3.npy] [--b1 B1.npy] [--b3 B3.npy] [--b2 B2.npy] --kind "
     "vectorized|surrogate|weight-distances|mean-output|outputs|router-logits [--inputs X.npy] [--router R.npy] "
     "[--router-bias b.npy] "
     "[--activation silu|gelu|gelu_tanh|relu] -o F.npy [--json]",
     0,
     0,
     {{"--w1", true, "W1.npy: E x d_ff x d gate (or first) projections"},
      {"--w2", true, "W2.npy: E x d x d_ff down projections"},
      {"--w3", true, "W3.npy: E x d_ff x d up projections (gated experts)"},
      {"--b1", true, "B1.npy: E x d_ff biases of W1"},
      {"--b3", true, "B3.npy: E x d_ff biases of W3"},
      {"--b2", true, "B2.npy: E x d biases of W2"},
      {"--kind", true, "vectorized | surrogate | weight-distances | mean-output | outputs | router-logits (required)"},
      {"--inputs", true, "X.npy: n x d tokens (mean-output, outputs, router-logits)"},
      {"--router", true, "R.npy: E x d router weights (router-logits)"},
      {"--router-bias", true, "b.npy: E router biases (router-logits)"},
      {"--activation", true, "silu (default) | gelu | gelu_tanh | relu"}}},
    expert_features}};

}  // namespace moecomp_cli
