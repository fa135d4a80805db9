// moecomp train-router Z.npy Y.npy -o OUT_DIR [options]: SADMoE's router (gating::train_router): a two-layer MLP
// R(z) = |W2 relu(W1 z + b1) + b2| trained by minibatch Adam to predict the targets Y (T x n: each expert's
// output norm on the tokens Z, T x d), or MoEfication's router objective. Writes w1.npy, w2.npy (and b1.npy,
// b2.npy with --bias) into OUT_DIR, whole or not at all; --json prints the losses. With --init DIR (its
// w1.npy, ...) and --no-shuffle a peer can replay the run exactly. The contract: docs/cli.md; the algorithm:
// docs/gating.md.
#include "cli.hpp"

#include <moecomp/gating/router_training.hpp>

#include <filesystem>
#include <limits>

namespace moecomp_cli {
namespace {

using moecomp::index_t;

template <class T>
moecomp::host_matrix<T> load_init_matrix(const std::string& dir, const std::string& name, index_t rows, index_t cols) {
  const std::string path = (std::filesystem::path(dir) / (name + ".npy")).string();
  moecomp::host_matrix<T> m;
  try {
    m = load_float_matrix<T>(path, read_operand(path), /*require_finite=*/true);
  } catch (const usage_error& e) {
    throw usage_error(std::string("option --init: ") + e.what());
  }
  if (m.rows() != rows || m.cols() != cols)
    throw usage_error("option --init: " + path + ": expected shape " + shape_text({rows, cols}) + ", got " +
                      shape_text({m.rows(), m.cols()}));
  return m;
}

template <class T>
moecomp::host_vector<T> load_init_vector(const std::string& dir, const std::string& name, index_t size) {
  const std::string path = (std::filesystem::path(dir) / (name + ".npy")).string();
  const moecomp::io::npy_array a = read_operand(path);
  if (a.ndim() != 1 || a.shape()[0] != size)
    throw usage_error("option --init: " + path + ": expected shape " + shape_text({size}) + ", got " + shape_text(a.shape()));
  if (a.dtype() != moecomp::io::npy_dtype::float32 && a.dtype() != moecomp::io::npy_dtype::float64)
    throw usage_error("option --init: " + path + ": dtype " + moecomp::io::to_string(a.dtype()) +
                      " is not accepted here, expected float32 or float64");
  return a.to_vector<T>();
}

template <class T>
int run_train(const arguments& args, output_files& outputs, const moecomp::io::npy_array& z_array,
              const moecomp::io::npy_array& y_array) {
  using namespace moecomp;
  const std::string& z_path = args.positional()[0];
  const std::string& y_path = args.positional()[1];
  const host_matrix<T> z = load_float_matrix<T>(z_path, z_array, /*require_finite=*/true);
  const host_matrix<T> y = load_float_matrix<T>(y_path, y_array, /*require_finite=*/true);
  if (y.rows() != z.rows())
    throw usage_error(y_path + ": expected " + std::to_string(z.rows()) + " rows (one per token of " + z_path + "), got " +
                      std::to_string(y.rows()));
  gating::router_training_params p;
  try {
    if (args.value("--objective")) p.objective = gating::parse_router_objective(*args.value("--objective"));
    if (args.value("--schedule")) p.schedule = gating::parse_lr_schedule(*args.value("--schedule"));
  } catch (const invalid_argument& e) {
    throw usage_error(std::string("option --") + e.what());
  }
  constexpr long long most = std::numeric_limits<std::int32_t>::max();
  p.hidden = args.integer("--hidden", 128, 1, most);
  p.bias = args.flag("--bias");
  p.learning_rate = args.number("--lr", 1e-3);
  p.beta1 = args.number("--beta1", 0.9);
  p.beta2 = args.number("--beta2", 0.999);
  p.epsilon = args.number("--eps", 1e-8);
  p.weight_decay = args.number("--weight-decay", 0.0);
  p.warmup_steps = args.integer("--warmup", 0, 0, most);
  p.max_grad_norm = args.number("--max-grad-norm", 0.0);
  p.batch_size = args.integer("--batch-size", 64, 1, most);
  p.epochs = args.integer("--epochs", 1, 1, most);
  p.steps = args.integer("--steps", 0, 0, most);
  p.shuffle = !args.flag("--no-shuffle");
  p.seed = static_cast<std::uint64_t>(args.integer("--seed", 0, 0, std::numeric_limits<long long>::max()));
  p.validation_fraction = args.number("--validation", 0.1);
  p.log_every = args.integer("--log-every", 0, 0, most);
  const index_t d = z.cols(), n = y.cols(), h = p.hidden;
  host_matrix<T> w1(h, d), w2(n, h);
  host_vector<T> b1(p.bias ? h : 0), b2(p.bias ? n : 0);
  if (const auto init = args.value("--init")) {
    w1 = load_init_matrix<T>(*init, "w1", h, d);
    w2 = load_init_matrix<T>(*init, "w2", n, h);
    if (p.bias) {
      b1 = load_init_vector<T>(*init, "b1", h);
      b2 = load_init_vector<T>(*init, "b2", n);
    }
  }
  gating::router_weights_view<T> w{w1.view(), b1.view(), w2.view(), b2.view()};
  const host_context ctx = make_context(args);
  gating::router_training_result r;
  const stopwatch timer;
  try {
    if (!args.value("--init")) gating::init_router_weights<T>(p, p.seed, w);
    r = gating::train_router<T>(ctx, p, z.const_view(), y.const_view(), w);
  } catch (const invalid_argument& e) {
    throw usage_error(name_the_option(e.what(), {{"--hidden", "params.hidden"},
                                                 {"--lr", "params.learning_rate"},
                                                 {"--beta1", "params.beta1"},
                                                 {"--beta2", "params.beta2"},
                                                 {"--eps", "params.epsilon"},
                                                 {"--weight-decay", "params.weight_decay"},
                                                 {"--max-grad-norm", "params.max_grad_norm"},
                                                 {"--batch-size", "params.batch_size"},
                                                 {"--validation", "params.validation_fraction"}}));
  }
  const double seconds = timer.seconds();
  outputs.stage_in_directory("w1", w1.const_view());
  outputs.stage_in_directory("w2", w2.const_view());
  if (p.bias) {
    outputs.stage_in_directory("b1", b1.const_view());
    outputs.stage_in_directory("b2", b2.const_view());
  }
  return conclude(args, outputs,
                  json_summary()
                      .add("command", std::string("train-router"))
                      .add("objective", std::string(gating::to_string(p.objective)))
                      .add("tokens", static_cast<long long>(z.rows()))
                      .add("training_tokens", static_cast<long long>(r.training_tokens))
                      .add("validation_tokens", static_cast<long long>(r.validation_tokens))
                      .add("d", static_cast<long long>(d))
                      .add("experts", static_cast<long long>(n))
                      .add("hidden", static_cast<long long>(h))
                      .add("steps", static_cast<long long>(r.iterations))
                      .add("logged_steps", std::vector<long long>(r.logged_steps.begin(), r.logged_steps.end()))
                      .add("train_loss", r.train_loss)
                      .add("validation_loss", r.validation_loss)
                      .add("validation_mse", r.validation_mse)
                      .add("top1_agreement", r.top1_agreement)
                      .add("seconds", seconds),
                  r.status, "train-router", "a smaller --lr (the loss or a weight became non-finite)");
}

int train_router_command(const arguments& args, output_files& outputs) {
  const moecomp::io::npy_array z = read_operand(args.positional()[0]);
  const moecomp::io::npy_array y = read_operand(args.positional()[1]);
  return choose_precision(args, z.dtype(), args.positional()[0]) == precision::float32
             ? run_train<float>(args, outputs, z, y)
             : run_train<double>(args, outputs, z, y);
}

}  // namespace

const command_registration train_router_registration{command{
    {"train-router",
     "SADMoE's router: a two-layer MLP trained by Adam to predict each expert's output norm (or MoEfication's labels)",
     "train-router Z.npy Y.npy -o OUT_DIR [--hidden H] [--bias] [--objective norm|moefication] [--lr F] [--beta1 F] "
     "[--beta2 F] [--eps F] [--weight-decay F] [--schedule constant|linear|cosine] [--warmup N] [--max-grad-norm F] "
     "[--batch-size B] [--epochs N] [--steps N] [--no-shuffle] [--seed S] [--validation F] [--log-every N] "
     "[--init DIR] [--json]",
     2,
     2,
     {{"--hidden", true, "d_h, the hidden width (default 128, the paper's)"},
      {"--bias", false, "biases b1 and b2 (D2DMoE's routers have none)"},
      {"--objective", true, "norm (SADMoE: MSE to Y) | moefication (BCE to Y over its batch maximum) (default norm)"},
      {"--lr", true, "Adam's learning rate (default 1e-3)"},
      {"--beta1", true, "Adam's beta1 (default 0.9)"},
      {"--beta2", true, "Adam's beta2 (default 0.999)"},
      {"--eps", true, "Adam's epsilon (default 1e-8)"},
      {"--weight-decay", true, "L2 weight decay added to the gradient, as torch.optim.Adam (default 0)"},
      {"--schedule", true, "constant|linear|cosine learning-rate schedule after --warmup (default constant)"},
      {"--warmup", true, "linear warm-up steps (default 0)"},
      {"--max-grad-norm", true, "clip the gradient's global norm (default 0: off)"},
      {"--batch-size", true, "tokens per step (default 64)"},
      {"--epochs", true, "passes over the training tokens (default 1)"},
      {"--steps", true, "stop after this many steps instead (default 0: the epochs decide)"},
      {"--no-shuffle", false, "batches in order (default: a seeded permutation per epoch)"},
      {"--seed", true, "seed of the initialisation and the shuffling, >= 0 (default 0)"},
      {"--validation", true, "the share of tokens, the last ones, held out, in [0, 1) (default 0.1)"},
      {"--log-every", true, "record the losses every N steps (default 0: each epoch)"},
      {"--init", true, "DIR: initial weights w1.npy (d_h x d), w2.npy (n x d_h) [, b1.npy, b2.npy]"}},
     /*output_directory=*/true},
    train_router_command}};

}  // namespace moecomp_cli
