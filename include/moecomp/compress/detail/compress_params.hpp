#pragma once
// compress_params' "auto" values settled and every rule between the fields checked (resolved_params,
// resolved_dense_params), before any layer is loaded.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/compress/compress_types.hpp>
#include <moecomp/gating/routing.hpp>
#include <moecomp/io/safetensors.hpp>
#include <moecomp/model/layout.hpp>
#include <moecomp/sparse/low_rank.hpp>

#include <algorithm>
#include <cmath>
#include <string>

MOECOMP_NAMESPACE_BEGIN
namespace compress {
namespace detail {

/// Whether `n` experts suit the model's router after a method that drops router rows: a group-limited rule
/// (n_group > 1) routes over n_group equal groups whose topk_group kept groups must hold top-k experts, and V3's
/// group score sums two experts a group.
inline bool routable(method how, const model::moe_model& m, index_t n) {
  if (how == method::hc_smoe || how == method::resmoe || how == method::m_smoe) return true;
  const gating::routing_params r = model::routing_of(m);
  const bool grouped = (r.rule == gating::routing_rule::deepseek_v3 || r.rule == gating::routing_rule::group_limited_greedy) &&
                       r.n_group > 1;
  if (!grouped) return true;
  const index_t per_group = n / r.n_group;
  return n % r.n_group == 0 && r.topk_group * per_group >= r.top_k &&
         (r.rule != gating::routing_rule::deepseek_v3 || per_group >= 2);
}

inline index_t default_experts(method how, const model::moe_model& m) {
  if (how == method::resmoe) return m.num_experts;
  index_t n = std::max<index_t>(m.num_experts / 2, m.top_k);
  while (n < m.num_experts && !routable(how, m, n)) ++n;
  return n;
}

/// params.expert_storage: duplicated only for the methods whose router ids share experts (keeps_router_rows:
/// hc_smoe, m_smoe, cka_merge with the id map).
inline void check_expert_storage(const compress_params& p) {
  MOECOMP_EXPECTS(keeps_router_rows(p) || p.expert_storage == expert_storage::distinct,
                  "compress: params.expert_storage duplicated is for hc-smoe, m-smoe and cka-merge with the router "
                  "kept (their router ids share merged experts); ",
                  to_string(p.method), " stores each expert once, got ", to_string(p.expert_storage));
}

inline compress_params resolve_moe_params(const compress_params& given, const model::moe_model& m, bool calibrated,
                                          io::safetensors_dtype expert_dtype) {
  constexpr const char* fn = "compress";
  compress_params p = given;
  const index_t E = m.num_experts;
  MOECOMP_EXPECTS(!splits_dense(p.method), fn, ": params.method ", to_string(p.method), " splits dense checkpoints, and this is an MoE ",
                  "model (model_type '", m.model_type, "'): use hc-smoe, cka-merge, m-smoe, resmoe or prune");
  MOECOMP_EXPECTS(!(p.method == method::resmoe && p.experts != 0 && p.experts != E), fn,
                  ": params.experts is for the methods that drop experts: resmoe keeps every expert (as a shared base plus a sparse residual each), got ",
                  p.experts);
  // cka_merge's router (issue 34), settled first: its id map keeps every router row, as hc_smoe's.
  MOECOMP_EXPECTS(p.merge_router == merge::router_rule::automatic || p.method == method::cka_merge, fn,
                  ": params.merge_router is for cka-merge only (", to_string(p.method), " decides its router), got ",
                  merge::to_string(p.merge_router));
  if (p.method == method::cka_merge && p.merge_router == merge::router_rule::automatic)
    p.merge_router = p.merge && *p.merge == merge::merge_method::dominant ? merge::router_rule::dominant_row
                                                                          : merge::router_rule::merged_rows;
  const bool id_map = keeps_router_rows(p);
  if (p.experts == 0) p.experts = default_experts(p.method, m);
  MOECOMP_EXPECTS(p.experts >= 1 && p.experts <= E, fn, ": params.experts must be 1 to ", E,
                  " (the model's experts per layer), got ", p.experts);
  MOECOMP_EXPECTS(id_map || p.method == method::resmoe || p.experts >= m.top_k, fn,
                  ": params.experts ", p.experts, " is too few: ", to_string(p.method), " leaves the router ", p.experts,
                  " experts, fewer than the model's top-k (", m.top_k, ")");
  if (!id_map && !routable(p.method, m, p.experts)) {
    const gating::routing_params r = model::routing_of(m);
    MOECOMP_FAIL(error_kind::invalid_argument, fn, ": params.experts ", p.experts, " cannot be routed: ", to_string(p.method), " leaves the router ",
                 p.experts, " experts, and its group-limited rule (n_group ", r.n_group, ", topk_group ", r.topk_group,
                 ", top-k ", r.top_k, ") needs a multiple of ", r.n_group, " whose ", r.topk_group,
                 " kept group(s) hold at least ", r.top_k, " experts",
                 r.rule == gating::routing_rule::deepseek_v3 ? " (and 2 or more experts a group)" : "",
                 "; for example ", default_experts(p.method, m));
  }
  if (p.features == expert_features::automatic)
    p.features = calibrated ? expert_features::outputs : expert_features::weights;
  if (p.similarity == expert_similarity::automatic)
    p.similarity = calibrated ? expert_similarity::cka : expert_similarity::weights;
  if (p.method == method::hc_smoe) {
    if (!p.merge) p.merge = calibrated ? merge::merge_method::frequency : merge::merge_method::average;
    MOECOMP_EXPECTS(*p.merge == merge::merge_method::frequency || *p.merge == merge::merge_method::average ||
                        *p.merge == merge::merge_method::fix_dom,
                    fn, ": params.merge must be frequency, average or fix-dom for hc-smoe, got ", merge::to_string(*p.merge));
  } else if (p.method == method::cka_merge) {
    if (!p.merge) p.merge = merge::merge_method::uniform;
    MOECOMP_EXPECTS(*p.merge == merge::merge_method::uniform || *p.merge == merge::merge_method::dominant ||
                        *p.merge == merge::merge_method::learned,
                    fn, ": params.merge must be uniform, dominant or learned for cka-merge, got ", merge::to_string(*p.merge));
  } else if (p.method == method::m_smoe) {
    // M-SMoE's merge: each member's neurons aligned to its dominant's (weight matching, MC-SMoE's inner
    // objective), then the frequency-weighted mean.
    if (!p.merge) p.merge = merge::merge_method::frequency;
    MOECOMP_EXPECTS(*p.merge == merge::merge_method::frequency, fn,
                    ": params.merge is fixed for m-smoe (frequency, after weight matching to the dominant), got ",
                    merge::to_string(*p.merge));
    MOECOMP_EXPECTS(p.align == merge_alignment::none, fn,
                    ": params.align is fixed for m-smoe (weight matching to the dominant), got ", to_string(p.align));
  } else {
    MOECOMP_EXPECTS(!p.merge, fn, ": params.merge is for hc-smoe and cka-merge: ", to_string(p.method), " merges nothing, got ",
                    merge::to_string(*p.merge));
  }
  // The baselines' options (issue 34): each only where it means something.
  MOECOMP_EXPECTS(p.align == merge_alignment::none || p.method == method::hc_smoe || p.method == method::cka_merge, fn,
                  ": params.align is for the methods that merge (hc-smoe, cka-merge): ", to_string(p.method),
                  " merges nothing, got ", to_string(p.align));
  MOECOMP_EXPECTS(p.align == merge_alignment::none || !p.merge ||
                      (*p.merge != merge::merge_method::fix_dom && *p.merge != merge::merge_method::dominant),
                  fn, ": params.align must be none with params.merge ", p.merge ? merge::to_string(*p.merge) : "",
                  *p.merge == merge::merge_method::fix_dom ? " (fix-dom matches the neurons itself)" : " (it keeps one expert)",
                  ", got ", to_string(p.align));
  MOECOMP_EXPECTS(p.samples >= 0, fn, ": params.samples must be >= 0 (0: the default), got ", p.samples);
  MOECOMP_EXPECTS(p.samples == 0 || (p.method == method::prune && p.criterion == prune_criterion::output), fn,
                  ": params.samples is for prune with criterion output, got ", p.samples, " with ", to_string(p.method),
                  p.method == method::prune ? std::string(" criterion ") + to_string(p.criterion) : std::string());
  MOECOMP_EXPECTS(!p.global || (p.method == method::prune && (p.criterion == prune_criterion::frequency ||
                                                              p.criterion == prune_criterion::router_score)),
                  fn, ": params.global is for prune with criterion frequency or router-score (scores that sum to 1 in ",
                  "every layer), got ", to_string(p.method),
                  p.method == method::prune ? std::string(" criterion ") + to_string(p.criterion) : std::string());
  if (p.global) {
    const gating::routing_params r = model::routing_of(m);
    MOECOMP_EXPECTS(r.n_group <= 1 || (r.rule != gating::routing_rule::deepseek_v3 &&
                                       r.rule != gating::routing_rule::group_limited_greedy),
                    fn, ": params.global cannot prune a group-limited router (n_group ", r.n_group,
                    "): its layers must keep a multiple of the groups");
  }
  // What needs calibration tokens, said before any work.
  std::string needs;
  if (p.method == method::hc_smoe && p.features != expert_features::weights)
    needs = std::string("params.features ") + to_string(p.features);
  if (p.method == method::hc_smoe && *p.merge != merge::merge_method::average)
    needs = std::string("params.merge ") + merge::to_string(*p.merge);
  if (p.method == method::cka_merge && p.similarity == expert_similarity::cka) needs = "params.similarity cka";
  if (p.method == method::cka_merge && *p.merge != merge::merge_method::uniform)
    needs = std::string("params.merge ") + merge::to_string(*p.merge);
  if (p.method == method::prune) needs = std::string("params.criterion ") + to_string(p.criterion);
  if (p.align == merge_alignment::activations) needs = "params.align activations";
  if (p.method == method::m_smoe) needs = "params.method m-smoe (routing frequencies and router logits)";
  MOECOMP_EXPECTS(needs.empty() || calibrated, fn, ": ", needs,
                  " needs calibration tokens (a calibration file with layers.{i}.moe_input)");
  // cka_merge's similarity tokens and augmentation (issue 34): for the CKA of outputs only.
  MOECOMP_EXPECTS(p.similarity_tokens >= 0 && p.augment >= 0, fn,
                  ": params.similarity_tokens and params.augment must be >= 0, got ", p.similarity_tokens, " and ",
                  p.augment);
  if (p.similarity_tokens != 0 || p.augment != 0) {
    const char* field = p.similarity_tokens != 0 ? "params.similarity_tokens" : "params.augment";
    MOECOMP_EXPECTS(p.method == method::cka_merge, fn, ": ", field, " is for cka-merge only, got method ",
                    to_string(p.method));
    MOECOMP_EXPECTS(p.similarity == expert_similarity::cka, fn, ": ", field,
                    " is for the CKA of the experts' outputs (params.similarity cka), got similarity ",
                    to_string(p.similarity));
  }
  MOECOMP_EXPECTS(p.method == method::resmoe || !p.restore_dense, fn,
                  ": params.restore_dense is for resmoe only (the other methods write an ordinary checkpoint)");
  MOECOMP_EXPECTS(p.keep > 0 && p.keep <= 1, fn, ": params.keep must be a fraction in (0, 1], got ", p.keep);
  MOECOMP_EXPECTS(p.format != sparse::sparse_format::two_of_four, fn,
                  ": params.format 2:4 needs N:M pruning, which compress does not do; use csr16, bitmap or auto");
  // ---- resmoe's ablations (issue 34) ----
  if (p.method != method::resmoe) {
    MOECOMP_EXPECTS(p.center == resmoe_center::barycenter, fn, ": params.center is for resmoe only, got ",
                    to_string(p.center), " with ", to_string(p.method));
    MOECOMP_EXPECTS(p.residual == resmoe_residual::prune, fn, ": params.residual is for resmoe only, got ",
                    to_string(p.residual), " with ", to_string(p.method));
  }
  MOECOMP_EXPECTS(p.rank == 0 || p.residual == resmoe_residual::svd, fn,
                  ": params.rank is for resmoe with params.residual svd, got rank ", p.rank, " with ",
                  p.method == method::resmoe ? std::string("residual ") + to_string(p.residual) : std::string(to_string(p.method)));
  if (p.method == method::resmoe && p.residual == resmoe_residual::svd) {
    const index_t rows = m.expert_size, cols = (m.gated ? 3 : 2) * m.hidden_size;
    MOECOMP_EXPECTS(p.rank >= 0 && p.rank <= std::min(rows, cols), fn, ": params.rank must be 1 to ",
                    std::min(rows, cols), " (the rank of a ", rows, " x ", cols,
                    " design residual: min(d_ff, width)) or 0 (the budget rule), got ", p.rank);
    if (p.rank == 0) p.rank = sparse::svd_budget_rank(rows, cols, p.keep);
  }
  // ---- end of resmoe's ablations ----
  if (!p.values)
    p.values = expert_dtype == io::safetensors_dtype::bf16  ? sparse::value_dtype::bfloat16
               : expert_dtype == io::safetensors_dtype::f16 ? sparse::value_dtype::float16
                                                            : sparse::value_dtype::float32;
  if (p.max_iterations == 0) p.max_iterations = 100;
  MOECOMP_EXPECTS(p.max_iterations >= 1, fn, ": params.max_iterations must be >= 1 (0: the default), got ",
                  p.max_iterations);
  // Expert storage (issue 34): only an id map repeats experts; the input must store one expert per router id.
  check_expert_storage(p);
  for (const model::moe_layer_names& names : m.layers)
    MOECOMP_EXPECTS(!names.distinct_storage(), fn, ": the checkpoint stores its experts distinct (tensor '",
                    names.expert_map, "', an id map of compress --expert-storage distinct); compress reads a checkpoint ",
                    "with one expert per router id: compress the original, or write this one with --expert-storage duplicated");
  return p;
}

inline compress_params resolve_dense_params(const compress_params& given, const model::dense_model& m, bool calibrated) {
  constexpr const char* fn = "compress";
  compress_params p = given;
  const index_t F = m.ffn_size;
  MOECOMP_EXPECTS(splits_dense(p.method), fn, ": params.method ", to_string(p.method),
                  " compresses MoE checkpoints, and this is a dense model (model_type '", m.model_type,
                  "'): moefy or sadmoe splits its FFNs into experts");
  MOECOMP_EXPECTS(p.expert_size == 0 || p.experts == 0, fn, ": params.expert_size and params.experts exclude each other, got ",
                  p.expert_size, " and ", p.experts);
  if (p.expert_size != 0) {
    MOECOMP_EXPECTS(p.expert_size >= 1 && p.expert_size <= F && F % p.expert_size == 0, fn,
                    ": params.expert_size must be a divisor of the FFN's ", F, " neurons, got ", p.expert_size);
    p.experts = F / p.expert_size;
  }
  MOECOMP_EXPECTS(p.experts != 0 || F % 32 == 0, fn, ": params.experts is required here: the FFN's ", F,
                  " neurons are not a multiple of 32 (the default expert size)");
  if (p.experts == 0) p.experts = F / 32;
  MOECOMP_EXPECTS(p.experts >= 1 && p.experts <= F && F % p.experts == 0, fn,
                  ": params.experts must be a divisor of the FFN's ", F, " neurons (intermediate size), got ", p.experts);
  if (p.top_k == 0) p.top_k = std::max<index_t>(1, p.experts / 4);
  MOECOMP_EXPECTS(p.top_k >= 1 && p.top_k <= p.experts, fn, ": params.top_k must be 1 to ", p.experts,
                  " (the experts), got ", p.top_k);
  MOECOMP_EXPECTS(p.restarts >= 1, fn, ": params.restarts must be at least 1, got ", p.restarts);
  check_expert_storage(p);  // expert storage (issue 34)
  if (p.max_iterations == 0) p.max_iterations = 300;
  MOECOMP_EXPECTS(p.max_iterations >= 1, fn, ": params.max_iterations must be >= 1 (0: the default), got ",
                  p.max_iterations);
  if (p.method == method::sadmoe) {
    MOECOMP_EXPECTS(calibrated, fn, ": params.method sadmoe trains each FFN's router on calibration tokens (a ",
                    "calibration file with layers.{i}.moe_input), and there are none");
    MOECOMP_EXPECTS(p.router.hidden >= 1, fn, ": params.router.hidden (d_h) must be >= 1, got ", p.router.hidden);
    MOECOMP_EXPECTS(std::isfinite(p.router.learning_rate) && p.router.learning_rate > 0, fn,
                    ": params.router.learning_rate must be > 0, got ", p.router.learning_rate);
    MOECOMP_EXPECTS(p.router.epochs >= 1 || p.router.steps >= 1, fn,
                    ": params.router.epochs or params.router.steps must be >= 1, got ", p.router.epochs, " and ",
                    p.router.steps);
    MOECOMP_EXPECTS(std::isfinite(p.tau) && p.tau >= 0 && p.tau <= 1, fn, ": params.tau must be in [0, 1], got ", p.tau);
    for (double t : p.taus)
      MOECOMP_EXPECTS(std::isfinite(t) && t >= 0 && t <= 1, fn, ": params.taus must be in [0, 1], got ", t);
  }
  return p;
}

/// Every tensor compress rewrites (routers, their biases, the experts) is stored in a float dtype it can write.
inline void check_checkpoint_dtypes(const io::safetensors_checkpoint& checkpoint, const model::moe_model& m) {
  for (const model::moe_layer_names& names : m.layers) {
    std::vector<const std::string*> rewritten{&names.router, &names.router_bias, &names.correction_bias, &names.gate_up,
                                              &names.fused_down};
    for (const auto* list : {&names.gate, &names.up, &names.down})
      for (const std::string& n : *list) rewritten.push_back(&n);
    for (const std::string* n : rewritten)
      if (!n->empty() && !io::is_float_storage(checkpoint.info(*n).dtype))
        MOECOMP_FAIL(error_kind::io_error, "compress: tensor '", *n, "' is stored as ", io::to_string(checkpoint.info(*n).dtype),
                     "; compress writes merged experts as F32, F64, BF16 or F16 only");
  }
}

}  // namespace detail
}  // namespace compress
MOECOMP_NAMESPACE_END
