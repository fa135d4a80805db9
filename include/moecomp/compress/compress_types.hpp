#pragma once
// Parameters, results and reports of the compression pipeline (<moecomp/compress/compress.hpp>): the methods,
// their options with "auto" defaults (settled by compress::resolved_params), one compressed layer, and the
// typed reports of a layer and of a checkpoint. Documentation: docs/compress.md.
#include <moecomp/core/config.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/status.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/cluster/linkage_types.hpp>
#include <moecomp/gating/router_training_types.hpp>
#include <moecomp/merge/merge_types.hpp>
#include <moecomp/moe/ffn_types.hpp>
#include <moecomp/moe/shared_base.hpp>
#include <moecomp/sparse/residual_types.hpp>

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace compress {

/// The compression method.
///   hc_smoe    HC-SMoE: experts grouped by hierarchical clustering of a feature, each group merged, the router
///              kept with an id map (router id -> merged expert);
///   cka_merge  the fourth paper: experts partitioned by similarity (CKA of outputs, weights or the surrogate),
///              each group merged with its router rows;
///   prune      the experts with the highest scores kept (frequency, or REAP's saliency), the router's rows of
///              the others dropped;
///   resmoe     ResMoE: a Wasserstein-barycenter base expert plus each expert's magnitude-pruned residual;
///   sadmoe     SADMoE: moefy's split, then per FFN a router trained on the calibration tokens to predict each
///              expert's output norm (gating::train_router), for dynamic-k inference;
///   moefy      MoEfication (SADMoE's first step): a dense checkpoint's FFNs split into equal experts by
///              balanced k-means, with a centre router;
///   m_smoe     M-SMoE (MC-SMoE's merge stage, task-agnostic, no retraining): the N most frequently routed
///              experts are the dominants, every other expert joins the dominant whose router-logit column is
///              the most cosine-similar, each group's frequency-weighted mean after aligning its members to
///              the dominant (weight matching); the router kept with an id map, as hc_smoe.
enum class method { hc_smoe, cka_merge, prune, resmoe, moefy, sadmoe, m_smoe };

/// Whether the method splits a dense checkpoint's FFNs (moefy, sadmoe) rather than compressing an MoE one.
inline bool splits_dense(method m) noexcept { return m == method::moefy || m == method::sadmoe; }

inline const char* to_string(method m) noexcept {
  switch (m) {
    case method::hc_smoe: return "hc-smoe";
    case method::cka_merge: return "cka-merge";
    case method::prune: return "prune";
    case method::resmoe: return "resmoe";
    case method::moefy: return "moefy";
    case method::sadmoe: return "sadmoe";
    case method::m_smoe: return "m-smoe";
  }
  return "unknown";
}

/// Parses hc-smoe, cka-merge, m-smoe, resmoe, prune, moefy or sadmoe; invalid_argument otherwise.
inline method parse_method(std::string_view name) {
  for (method m : {method::hc_smoe, method::cka_merge, method::m_smoe, method::resmoe, method::prune, method::moefy,
                   method::sadmoe})
    if (name == to_string(m)) return m;
  MOECOMP_FAIL(error_kind::invalid_argument,
               "method: expected hc-smoe, cka-merge, m-smoe, resmoe, prune, moefy or sadmoe, got '", std::string(name),
               "'");
}

/// hc_smoe's clustering feature of each expert: its mean output on the calibration tokens (HC-SMoE's default),
/// its router-logit column over the tokens, or its flattened weights. automatic: outputs with calibration
/// tokens, weights without.
enum class expert_features { automatic, outputs, router_logits, weights };

inline const char* to_string(expert_features f) noexcept {
  switch (f) {
    case expert_features::automatic: return "auto";
    case expert_features::outputs: return "outputs";
    case expert_features::router_logits: return "router-logits";
    case expert_features::weights: return "weights";
  }
  return "unknown";
}

/// Parses auto, outputs, router-logits or weights; invalid_argument otherwise.
inline expert_features parse_expert_features(std::string_view name) {
  for (expert_features f : {expert_features::automatic, expert_features::outputs, expert_features::router_logits,
                            expert_features::weights})
    if (name == to_string(f)) return f;
  MOECOMP_FAIL(error_kind::invalid_argument, "features: expected auto, outputs, router-logits or weights, got '",
               std::string(name), "'");
}

/// cka_merge's dissimilarity of two experts: 1 - linear CKA of their outputs on the calibration tokens (the
/// fourth paper's), the Euclidean distance of their flattened weights, or of their surrogate weights W2 (W1 o W3).
/// automatic: cka with calibration tokens, weights without.
enum class expert_similarity { automatic, cka, weights, surrogate };

inline const char* to_string(expert_similarity s) noexcept {
  switch (s) {
    case expert_similarity::automatic: return "auto";
    case expert_similarity::cka: return "cka";
    case expert_similarity::weights: return "weights";
    case expert_similarity::surrogate: return "surrogate";
  }
  return "unknown";
}

/// Parses auto, cka, weights or surrogate; invalid_argument otherwise.
inline expert_similarity parse_expert_similarity(std::string_view name) {
  for (expert_similarity s : {expert_similarity::automatic, expert_similarity::cka, expert_similarity::weights,
                              expert_similarity::surrogate})
    if (name == to_string(s)) return s;
  MOECOMP_FAIL(error_kind::invalid_argument, "similarity: expected auto, cka, weights or surrogate, got '",
               std::string(name), "'");
}

/// prune's choice of the kept experts:
///   frequency     the N experts most often in the model's top-k on the calibration tokens (F-prune; count / (T k));
///   reap          REAP's saliency: the mean, over the tokens routed to the expert, of gate weight x ||output||;
///   router_score  S-prune (He et al. 2024): the router's probabilities (softmax of the logits; sigmoid for a
///                 DeepSeek-V3 router) of the expert, summed over the tokens, / T;
///   output        O-prune (Lu et al. 2024; the fourth paper's "Enumerate"): the subset of N experts whose layer
///                 output, routed over that subset only, is closest to the original layer's output on the tokens
///                 (squared Frobenius error), searched exhaustively or over seeded random subsets (params.samples).
enum class prune_criterion { frequency, reap, router_score, output };

inline const char* to_string(prune_criterion c) noexcept {
  switch (c) {
    case prune_criterion::frequency: return "frequency";
    case prune_criterion::reap: return "reap";
    case prune_criterion::router_score: return "router-score";
    case prune_criterion::output: return "output";
  }
  return "unknown";
}

/// Parses frequency, reap, router-score or output; invalid_argument otherwise.
inline prune_criterion parse_prune_criterion(std::string_view name) {
  for (prune_criterion c : {prune_criterion::frequency, prune_criterion::reap, prune_criterion::router_score,
                            prune_criterion::output})
    if (name == to_string(c)) return c;
  MOECOMP_FAIL(error_kind::invalid_argument, "criterion: expected frequency, reap, router-score or output, got '",
               std::string(name), "'");
}

/// Neuron alignment before a merge (hc_smoe, cka_merge): none (the papers' merges), weights (each member's
/// neurons matched to its group's dominant by the squared distance of their design rows [W1_i | W3_i | W2[:, i]],
/// Git Re-Basin's and ResMoE's weight matching) or activations (by the correlation of their hidden activations on
/// the group's calibration tokens, ZipIt's and HC-SMoE's neuron feature), each solved exactly
/// (merge::merge_params::align_members).
enum class merge_alignment { none, weights, activations };

inline const char* to_string(merge_alignment a) noexcept {
  switch (a) {
    case merge_alignment::none: return "none";
    case merge_alignment::weights: return "weights";
    case merge_alignment::activations: return "activations";
  }
  return "unknown";
}

/// Parses none, weights or activations; invalid_argument otherwise.
inline merge_alignment parse_merge_alignment(std::string_view name) {
  for (merge_alignment a : {merge_alignment::none, merge_alignment::weights, merge_alignment::activations})
    if (name == to_string(a)) return a;
  MOECOMP_FAIL(error_kind::invalid_argument, "align: expected none, weights or activations, got '", std::string(name), "'");
}

// ---------------------------------------------------------------------------- expert storage (issue 34)

/// How compress_checkpoint stores the experts of a method whose router ids share experts (hc_smoe's id map):
///   distinct    each distinct expert once, numbered 0 .. S-1 under the family's expert names, plus per layer
///               the id map as a tensor (I64, E entries: router id -> stored expert; model::expert_map_name):
///               the smaller checkpoint, read by moecomp's loader (model::load_moe_layer expands it) and by
///               models/evaluate.py, not by Hugging Face's loaders;
///   duplicated  every router id's slot holds its expert (E slots, as large as the input): the form any loader
///               of the family reads.
/// The other methods store each expert once in the family's own form already: they take distinct only.
enum class expert_storage { distinct, duplicated };

inline const char* to_string(expert_storage s) noexcept {
  return s == expert_storage::distinct ? "distinct" : s == expert_storage::duplicated ? "duplicated" : "unknown";
}

/// Parses distinct or duplicated; invalid_argument otherwise.
inline expert_storage parse_expert_storage(std::string_view name) {
  if (name == "distinct") return expert_storage::distinct;
  if (name == "duplicated") return expert_storage::duplicated;
  MOECOMP_FAIL(error_kind::invalid_argument, "expert_storage: expected distinct or duplicated, got '", std::string(name),
               "'");
}

// ---- resmoe's ablations (ResMoE's Tables 1, 4, 5; issue 34) ----

/// resmoe's centre: the Wasserstein barycenter (ResMoE), the element-wise mean of the experts without neuron
/// alignment (its "Avg" ablation; identity permutations), or none (each expert compressed alone: with
/// resmoe_residual::prune ResMoE's UP baseline, with structured its SP baseline).
enum class resmoe_center { barycenter, mean, none };

inline const char* to_string(resmoe_center c) noexcept {
  switch (c) {
    case resmoe_center::barycenter: return "barycenter";
    case resmoe_center::mean: return "mean";
    case resmoe_center::none: return "none";
  }
  return "unknown";
}

/// Parses barycenter, mean or none; invalid_argument otherwise.
inline resmoe_center parse_resmoe_center(std::string_view name) {
  for (resmoe_center c : {resmoe_center::barycenter, resmoe_center::mean, resmoe_center::none})
    if (name == to_string(c)) return c;
  MOECOMP_FAIL(error_kind::invalid_argument, "center: expected barycenter, mean or none, got '", std::string(name), "'");
}

/// resmoe's compression of each expert's design residual (one matrix, d_ff x (2 or 3) d): magnitude pruning to
/// `keep` of its entries (ResMoE), its truncated SVD at the same parameter count (sparse::svd_budget_rank, or
/// `rank`), or structured pruning: the `keep` fraction of its rows (neurons) with the largest l2 norm.
enum class resmoe_residual { prune, svd, structured };

inline const char* to_string(resmoe_residual r) noexcept {
  switch (r) {
    case resmoe_residual::prune: return "prune";
    case resmoe_residual::svd: return "svd";
    case resmoe_residual::structured: return "structured";
  }
  return "unknown";
}

/// Parses prune, svd or structured; invalid_argument otherwise.
inline resmoe_residual parse_resmoe_residual(std::string_view name) {
  for (resmoe_residual r : {resmoe_residual::prune, resmoe_residual::svd, resmoe_residual::structured})
    if (name == to_string(r)) return r;
  MOECOMP_FAIL(error_kind::invalid_argument, "residual: expected prune, svd or structured, got '", std::string(name), "'");
}

// ---- end of resmoe's ablations ----

/// Every tunable of a compression. A field left at its "auto" value (0, automatic, nullopt) is settled for the
/// model and its calibration tokens by resolved_params, which also checks every rule between the fields once,
/// before any layer is loaded.
struct compress_params {
  compress::method method = compress::method::hc_smoe;
  /// Experts per MoE layer after compression (hc_smoe, cka_merge, prune). 0: half the experts, at least the
  /// model's top-k, and for a group-limited router (DeepSeek, n_group > 1) the smallest count from there up that
  /// it can route. resmoe keeps every expert. moefy: experts per dense FFN, a divisor of its neurons (0: experts
  /// of 32 neurons).
  index_t experts = 0;
  /// hc_smoe: the clustering feature, the linkage and the merge (automatic/nullopt: frequency with calibration
  /// tokens, average without).
  expert_features features = expert_features::automatic;
  cluster::linkage_method linkage = cluster::linkage_method::average;
  /// hc_smoe: frequency, average or fix_dom; cka_merge: uniform (the default), dominant or learned.
  std::optional<merge::merge_method> merge;
  /// cka_merge: the similarity the partition uses.
  expert_similarity similarity = expert_similarity::automatic;
  /// prune: the score.
  prune_criterion criterion = prune_criterion::frequency;
  /// prune with criterion output: the subsets searched. 0: every subset when C(E, N) <= 100,000, else 100,000
  /// random subsets (HC-SMoE's setting for Qwen); S > 0: every subset when C(E, N) <= S, else S random subsets,
  /// drawn by moecomp's generator from `seed` (stream: the layer). The first best subset found is kept.
  index_t samples = 0;
  /// prune with criterion frequency or router_score: rank the experts of all layers together (HC-SMoE's
  /// "global" F-prune and S-prune), keeping experts x layers in all; each layer keeps at least the model's top-k.
  /// Both scores sum to 1 over a layer's experts, so they compare across layers.
  bool global = false;
  /// hc_smoe, cka_merge: neuron alignment of each group's members to its dominant before the merge.
  merge_alignment align = merge_alignment::none;
  /// moecomp's generator: the merges' token caps, the partition's restarts, moefy's k-means starts.
  std::uint64_t seed = 0;
  /// resmoe: the fraction of each expert's design residual kept, (0, 1] (ResMoE's 0.25).
  double keep = 0.25;
  /// resmoe: the residuals' format (automatic: the smallest of csr16 and bitmap) and value dtype (nullopt: the
  /// experts' own dtype: bf16, fp16, else fp32).
  sparse::sparse_format format = sparse::sparse_format::automatic;
  std::optional<sparse::value_dtype> values;
  /// resmoe: barycenter iterations (0: 100, POT's and ResMoE's); moefy: k-means iterations (0: 300).
  index_t max_iterations = 0;
  /// resmoe: also write the restored experts as an ordinary checkpoint (compress_checkpoint's dense_writer).
  bool restore_dense = false;
  /// moefy: experts per token of the router the output records and the reported error (0: max(1, E / 4)), and
  /// the balanced k-means runs (the lowest inertia kept).
  index_t top_k = 0;
  index_t restarts = 10;
  /// moefy, sadmoe: neurons per expert, instead of `experts` (0: `experts` decides).
  index_t expert_size = 0;
  /// sadmoe: each FFN's router, trained on the layer's calibration tokens (gating::train_router; by default 10
  /// epochs, d_h 128, Adam at 1e-3, the last tenth of the tokens held out), and the dynamic-k thresholds the
  /// report measures on the held-out tokens (each: mean experts per token, FLOPs ratio, output error); `tau` is
  /// the threshold written to config.json.
  gating::router_training_params router = default_router();
  std::vector<double> taus = {0.1, 0.3, 0.5, 0.7, 0.9};
  double tau = 0.5;

  /// hc_smoe: how the checkpoint stores the merged experts (expert_storage above). distinct by default: the id
  /// map is the method's point, and writing its repeats would make the output as large as the input.
  compress::expert_storage expert_storage = compress::expert_storage::distinct;
  // ---- resmoe's ablations (issue 34) ----
  /// resmoe: the centre and the residual's compression (above); svd's rank (0: sparse::svd_budget_rank of the
  /// design residual at `keep`; at most min(d_ff, (2 or 3) d)).
  resmoe_center center = resmoe_center::barycenter;
  resmoe_residual residual = resmoe_residual::prune;
  index_t rank = 0;
  // ---- end of resmoe's ablations ----

  static gating::router_training_params default_router() {
    gating::router_training_params r;
    r.epochs = 10;
    return r;
  }

  // ---- cka_merge: the fourth paper's Table 3-4 settings (issue 34) ----
  /// cka_merge with similarity cka: the calibration tokens the similarity uses, the first N of the layer's
  /// (0: all; at most the layer's tokens). The merge and the reported error always use every token.
  index_t similarity_tokens = 0;
  /// cka_merge with similarity cka: mixed tokens appended to the similarity's tokens (the paper's "randomly mix
  /// the token embedding for data augmentation"): token j = lambda x_a + (1 - lambda) x_b, a and b uniform over
  /// the similarity's tokens and lambda uniform in [0, 1) (float), drawn by moecomp's generator from `seed`. 0: none.
  index_t augment = 0;
  /// cka_merge: the router after the merge. automatic: merged_rows for the uniform and learned merges,
  /// dominant_row for the dominant merge; merged_rows (Eq. 6), dominant_row (M-SMoE's), or id_map (Table 4's
  /// "without merging the routers": the router kept, each old id mapped to its group, as hc_smoe).
  merge::router_rule merge_router = merge::router_rule::automatic;
};

/// Whether the method keeps the router's E rows with an id map (router id -> merged expert) rather than one
/// row per kept expert: hc_smoe, m_smoe, and cka_merge with merge_router id_map. Such a layer can have fewer
/// experts than the model's top-k, and config.json keeps the expert count.
inline bool keeps_router_rows(const compress_params& p) noexcept {
  return p.method == method::hc_smoe || p.method == method::m_smoe ||
         (p.method == method::cka_merge && p.merge_router == merge::router_rule::id_map);
}

/// One MoE layer's float weights as views of the caller's memory: what compress_layer reads, nothing copied
/// (model::moe_layer_weights, which owns its tensors, is viewed this way by compress_layer's other overload).
/// experts: E experts in nn.Linear layout (W1, W3: E x I x H; W2: E x H x I; W3 empty for plain FFNs; no
/// biases); router: E x H; router_bias: the router's logit bias (Switch), correction_bias: the selection bias
/// (DeepSeek-V3), E each or empty; shared: the shared expert (I_s x H, I_s x H or empty, H x I_s; w1 empty: none)
/// and shared_gate its sigmoid gate row (H, Qwen2-MoE; or empty).
/// basic_moe_layer_weights_view<W>: the same with the experts (and the shared expert) stored as W; the pipeline
/// reads bfloat16 layers this way for prune (compress_checkpoint, "bf16-resident" in docs/compress.md).
template <class W>
struct basic_moe_layer_weights_view {
  moe::ffn_expert_stack_view<W> experts;
  matrix_view<const float> router;
  vector_view<const float> router_bias, correction_bias;
  moe::ffn_expert_view<W> shared;
  vector_view<const float> shared_gate;
};
using moe_layer_weights_view = basic_moe_layer_weights_view<float>;

/// One MoE layer after compression: `stack_experts` experts (W1, W3: S x I x H; W2: S x H x I, float, rounded to
/// the checkpoint's dtype), `slots[r]` the stack expert that router id r uses (E_out entries), the router rows
/// (E_out x H) and, where the original has them, the router bias and the correction bias (E_out each). An empty
/// w1 means the original stack, addressed through the slots (prune). A layer that compress_checkpoint read as
/// bfloat16 (its bf16-resident merges) holds its merged stack in w1_bf16, w3_bf16, w2_bf16 instead, w1 .. w2 empty.
struct compressed_layer {
  index_t stack_experts = 0;
  std::vector<float> w1, w3, w2;
  std::vector<bfloat16> w1_bf16, w3_bf16, w2_bf16;
  /// Whether the layer has its own stack (float or bf16) rather than the original's slots.
  bool own_stack() const noexcept { return !w1.empty() || !w1_bf16.empty(); }
  std::vector<std::int64_t> slots;
  host_matrix<float> router;
  std::vector<float> router_bias, correction_bias;
  /// resmoe: the base expert (nn.Linear layout, rounded to the experts' dtype), the permutations (E x I: row i of
  /// expert e is base row p(e, i)) and each expert's residuals; w1/w3/w2 then hold the restored experts.
  struct resmoe_part {
    std::vector<float> w1, w3, w2;
    host_matrix<index_t> permutations;
    std::vector<moe::expert_residual> residuals;
    // ---- resmoe's ablations: what the writer stores (no base with center none, no permutations unless
    // barycenter) and, for svd, each expert's factors instead of residuals (u: d_ff x rank = U_k S_k, v: rank x
    // design width = V_k^T, rounded to `values`).
    resmoe_center center = resmoe_center::barycenter;
    resmoe_residual residual = resmoe_residual::prune;
    sparse::value_dtype values = sparse::value_dtype::float32;
    std::vector<host_matrix<float>> svd_u, svd_v;
  };
  std::shared_ptr<resmoe_part> resmoe;
};

/// What compress_layer and compress_checkpoint say about one layer. The fields of other methods stay empty.
struct layer_report {
  std::string layer;                      ///< the layer's tensor prefix ("model.layers.3.block_sparse_moe")
  index_t experts = 0;                    ///< router ids after compression
  index_t distinct_experts = 0;           ///< distinct experts stored (hc_smoe: the groups)
  // hc_smoe, cka_merge:
  std::vector<std::int64_t> groups;       ///< group of each original expert (numbered by first appearance)
  std::vector<std::int64_t> dominants;    ///< each group's dominant (representative) expert
  std::vector<double> coefficients;       ///< each expert's merge coefficient
  std::vector<double> group_merge_errors; ///< each group's relative merge error (NaN: not measured)
  std::string router_rule;                ///< merge::to_string(router_rule) of the merge
  std::vector<std::int64_t> id_map;       ///< hc_smoe: router id -> merged expert
  // m_smoe: each expert's routing frequency (top-k counts on the calibration tokens, the model's k).
  std::vector<double> frequencies;
  // cka_merge with similarity cka: the similarity's real and mixed tokens (params.similarity_tokens, augment).
  index_t similarity_tokens = 0, augmented_tokens = 0;
  // prune:
  std::string criterion;
  std::vector<double> scores;             ///< each expert's score
  std::vector<std::int64_t> kept;         ///< the kept experts, in increasing order
  // resmoe:
  double keep = 0;
  std::string values;
  std::vector<std::vector<std::string>> formats;  ///< each expert's residual formats (w1, w3 or "-", w2)
  std::vector<std::uint64_t> residual_bytes;      ///< each expert's encoded residual bytes
  std::int64_t barycenter_iterations = 0;
  moecomp::status barycenter_status = moecomp::status::ok;
  double barycenter_objective = 0;
  double resmoe_approximation_error = 0;          ///< ResMoE's Appendix A.6 error over the layer
  std::string center, residual;                   ///< resmoe's ablations: to_string of params.center, .residual
  index_t rank = 0;                               ///< svd: the factors' rank
  // every method:
  double output_relative_error = std::numeric_limits<double>::quiet_NaN();  ///< ||Y - Y'|| / ||Y|| (NaN: no tokens)
  index_t calibration_tokens = 0;
  double bytes_before = 0, bytes_after = 0, bytes_written = 0, bits_per_weight = 0;
  std::vector<std::pair<std::string, double>> steps_seconds;  ///< each step's wall time, in order
  /// The experts the written checkpoint holds for the layer (hc_smoe distinct: the groups; duplicated: every slot),
  /// and its id-map tensor's name (hc_smoe distinct; else empty).
  index_t stored_experts = 0;
  std::string expert_map_tensor;
  double seconds = 0;
  // moefy (per dense FFN): the split's size, the router's top-k, the balanced k-means outcome.
  index_t expert_size = 0, top_k = 0;
  double kmeans_inertia = 0;
  std::int64_t kmeans_iterations = 0;
  moecomp::status kmeans_status = moecomp::status::ok;
  index_t kmeans_best_run = 0;
  double kmeans_assignment_gap = 0;
  index_t smallest_expert = 0, largest_expert = 0;
  // sadmoe (per dense FFN): the trained router and dynamic-k on the held-out tokens.
  struct dynamic_k_point {
    double tau = 0, mean_experts = 0, flops_ratio = 0, output_relative_error = 0;
  };
  std::int64_t router_steps = 0;
  double router_validation_mse = std::numeric_limits<double>::quiet_NaN();
  double router_top1_agreement = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> router_train_loss, router_validation_loss;  ///< per epoch
  std::vector<dynamic_k_point> dynamic_k;                         ///< one per params.taus
  double router_top_k_error = std::numeric_limits<double>::quiet_NaN();  ///< the trained router at top_k
  double router_top_k_flops_ratio = 0;
};

/// The result of compress_checkpoint and compress_dense_checkpoint. status: ok; numerical_error when a layer's
/// output error on the calibration tokens is not finite (the run stops there; `failed_layer` names it);
/// not_converged when the observer asked to stop (`cancelled`). iterations: the layers compressed. Nothing is
/// left in the writer's directory unless ok (the writer is finished only then).
struct checkpoint_report : convergence_info {
  compress_params params;       ///< as resolved
  std::string family;
  index_t experts_before = 0, experts_after = 0;
  std::vector<layer_report> layers;
  double bytes_before = 0, bytes_after = 0, parameters_before = 0;
  bool cancelled = false;
  /// The bytes of the MoE layers' tensors as written (the layers' bytes_written summed), and hc_smoe's
  /// expert_storage as written ("distinct" or "duplicated"; empty for the other methods).
  double bytes_written = 0;
  std::string expert_storage;
  /// The context's matmul precision the run computed with (host_context::matmul; docs/core.md).
  matmul_precision matmul = matmul_precision::exact;
  std::string failed_layer;
  /// The output's config.json text (the input's, with the new expert count where the method drops router rows
  /// and moecomp's record), and with restore_dense the dense checkpoint's.
  std::string config_json, dense_config_json;
  /// moefy: the FLOPs model per token (dense FFN, one expert, the router, the MoE at top_k) and their ratio.
  double dense_ffn_macs_per_token = 0, expert_macs_per_token = 0, router_macs_per_token = 0, moe_macs_per_token = 0;
  double flops_ratio = 0;
};

/// Progress and cancellation of compress_checkpoint. `step` runs before each step of each layer with (layer,
/// layers, the layer's name, the step: "loading", "features", "clustering", "merging", "error", "writing", ...),
/// and once with layer = layers - 1, name "rest", for the tensors outside the MoE layers. `stop` is asked at the
/// same points; true ends the run (checkpoint_report::cancelled). Either may be empty.
struct compress_observer {
  std::function<void(index_t layer, index_t layers, const std::string& name, const std::string& step)> step;
  std::function<bool()> stop;
};

}  // namespace compress
MOECOMP_NAMESPACE_END
