#pragma once
// Parameters, weights and result of SADMoE's router training (<moecomp/gating/router_training.hpp>).
// Documentation: docs/gating.md ("Router training").
#include <moecomp/core/config.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/status.hpp>
#include <moecomp/core/views.hpp>

#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace gating {

/// What the router learns.
///   output_norm  SADMoE (D2DMoE's code): R(z) = |W2 relu(W1 z + b1) + b2| regresses each expert's output l2
///                norm; loss = mean squared error over tokens and experts;
///   moefication  MoEfication's router (SADMoE's baseline, its Appendix A): the targets are each expert's
///                activation sum, divided by their maximum over the minibatch as labels in [0, 1]; the router's
///                raw output u is a logit, loss = mean binary cross-entropy of sigmoid(u); its scores are
///                sigmoid(u).
enum class router_objective { output_norm, moefication };

inline const char* to_string(router_objective o) noexcept {
  return o == router_objective::output_norm ? "norm" : o == router_objective::moefication ? "moefication" : "unknown";
}

/// Parses norm or moefication; invalid_argument otherwise.
inline router_objective parse_router_objective(std::string_view name) {
  if (name == "norm") return router_objective::output_norm;
  if (name == "moefication") return router_objective::moefication;
  MOECOMP_FAIL(error_kind::invalid_argument, "objective: expected norm or moefication, got '", std::string(name), "'");
}

/// The learning-rate schedule over the steps s = 0 .. S - 1 (Hugging Face's schedules, which D2DMoE uses):
/// a linear warm-up lr s / W over the first W steps, then constant: lr; linear: lr (S - s) / (S - W); cosine:
/// lr (1 + cos(pi (s - W) / (S - W))) / 2.
enum class lr_schedule { constant, linear, cosine };

inline const char* to_string(lr_schedule s) noexcept {
  switch (s) {
    case lr_schedule::constant: return "constant";
    case lr_schedule::linear: return "linear";
    case lr_schedule::cosine: return "cosine";
  }
  return "unknown";
}

/// Parses constant, linear or cosine; invalid_argument otherwise.
inline lr_schedule parse_lr_schedule(std::string_view name) {
  for (lr_schedule s : {lr_schedule::constant, lr_schedule::linear, lr_schedule::cosine})
    if (name == to_string(s)) return s;
  MOECOMP_FAIL(error_kind::invalid_argument, "schedule: expected constant, linear or cosine, got '", std::string(name),
               "'");
}

/// Every tunable of train_router. Defaults follow D2DMoE's router training where it states one (ReLU hidden
/// activation, |.| output, MSE, Adam, lr 1e-3, no biases) and SADMoE's paper for the width (128).
struct router_training_params {
  router_objective objective = router_objective::output_norm;
  /// d_h, the hidden width (the paper's 128). >= 1.
  index_t hidden = 128;
  /// Biases b1 and b2 (D2DMoE's routers have none: its MoeficationRouter defaults to bias=False).
  bool bias = false;
  /// Adam (torch.optim.Adam: weight decay added to the gradient, not decoupled). lr > 0, betas in [0, 1),
  /// epsilon > 0, weight_decay >= 0.
  double learning_rate = 1e-3;
  double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8, weight_decay = 0.0;
  lr_schedule schedule = lr_schedule::constant;
  index_t warmup_steps = 0;
  /// Clip the gradient's global l2 norm to this before each step, as torch.nn.utils.clip_grad_norm_ (0: off).
  double max_grad_norm = 0.0;
  /// Tokens per minibatch (the last batch of an epoch may be smaller, as a DataLoader without drop_last).
  index_t batch_size = 64;
  /// Passes over the training tokens; `steps` > 0 stops after that many steps instead (the epochs then repeat
  /// as needed).
  index_t epochs = 1;
  index_t steps = 0;
  /// Each epoch's order: a permutation drawn by moecomp's generator from `seed` (stream: the epoch), or the
  /// tokens in order (shuffle = false), so that a peer can replay the run exactly.
  bool shuffle = true;
  std::uint64_t seed = 0;
  /// The last floor(validation_fraction T) tokens are held out for validation (0: none), in [0, 1).
  double validation_fraction = 0.1;
  /// Record the losses every this many steps (0: at the end of each epoch).
  index_t log_every = 0;
};

/// A router's weights, in torch.nn.Linear's layout: w1 (d_h x d), b1 (d_h), w2 (n x d_h), b2 (n). Biases are
/// empty views when params.bias is false.
template <class T>
struct router_weights_view {
  matrix_view<T> w1;
  vector_view<T> b1;
  matrix_view<T> w2;
  vector_view<T> b2;
};

/// What train_router reports. iterations: the optimizer steps taken. criterion: the final validation loss (the
/// final training loss without validation tokens). status: ok, or numerical_error when a loss or a weight
/// became non-finite (training stops there; the weights are the last finite ones).
struct router_training_result : convergence_info {
  /// The step at each record, the mean training loss over the steps since the previous record, and the
  /// validation loss then (NaN without validation tokens).
  std::vector<std::int64_t> logged_steps;
  std::vector<double> train_loss, validation_loss;
  /// The validation set's mean squared error of the scores against the targets (output_norm), or its
  /// binary cross-entropy (moefication), after training; NaN without validation tokens.
  double validation_mse = std::numeric_limits<double>::quiet_NaN();
  /// The share of validation tokens whose highest predicted score is at the expert with the highest target
  /// (ties to the lowest index on both sides); NaN without validation tokens.
  double top1_agreement = std::numeric_limits<double>::quiet_NaN();
  index_t training_tokens = 0, validation_tokens = 0;
};

}  // namespace gating
MOECOMP_NAMESPACE_END
