// moecomp compress [MODEL_DIR] -o OUT_DIR --method hc-smoe|cka-merge|resmoe|prune|moefy [options]: a Hugging
// Face MoE checkpoint in, a compressed checkpoint and a report out, one MoE layer at a time; or (moefy) a dense
// checkpoint whose FFNs are split into experts. Without MODEL_DIR it compresses the embedded model
// (models/tiny-moe; models/tiny-dense for moefy). The contract: docs/cli.md; the methods: docs/compress.md.
//
// The pipeline per MoE layer: load the layer (model::load_moe_layer, float), read its calibration tokens
// (`layers.{i}.moe_input` of --calibration), compute the method's new layer (a stack of experts, the
// router-id -> expert map, the router rows), measure the layer's output error on the calibration tokens
// (moe::moe_layer_forward of the original and of the new layer), and write the layer's tensors as the next
// shard, in the dtype each tensor had. The other tensors are written from the input's mapping, unconverted.
// Everything goes to a temporary directory beside OUT_DIR that is renamed into place at the end.
#include "cli.hpp"

#include <moecomp/cluster/fcluster.hpp>
#include <moecomp/cluster/grouping.hpp>
#include <moecomp/cluster/linkage.hpp>
#include <moecomp/cluster/moefication.hpp>
#include <moecomp/core/detail/parallel.hpp>
#include <moecomp/distance/pairwise_distance.hpp>
#include <moecomp/gating/routing.hpp>
#include <moecomp/io/residual_file.hpp>
#include <moecomp/io/safetensors.hpp>
#include <moecomp/merge/merge.hpp>
#include <moecomp/model/layout.hpp>
#include <moecomp/moe/features.hpp>
#include <moecomp/moe/ffn.hpp>
#include <moecomp/moe/layer.hpp>
#include <moecomp/moe/shared_base.hpp>
#include <moecomp/ot/free_support_barycenter.hpp>
#include <moecomp/similarity/cka.hpp>
#include <moecomp/similarity/partition.hpp>
#include <moecomp/sparse/residual.hpp>
#include <moecomp/version.hpp>

#include <nlohmann/json.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

namespace moecomp_cli {

const std::vector<std::pair<std::string, std::string>>& builtin_layouts();

namespace {

using moecomp::index_t;
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

// ---------------------------------------------------------------------------------------------- progress

/// "layer i of L, step, elapsed, ETA" on stderr: redrawn in place on a terminal, one line per update with
/// --progress, nothing with --quiet or when stderr is not a terminal.
class progress_display {
 public:
  progress_display(bool terminal, bool lines, index_t layers) : terminal_(terminal), lines_(lines), layers_(layers) {}
  void update(index_t layer, const std::string& name, const std::string& step) {
    if (!terminal_ && !lines_) return;
    const double elapsed = seconds();
    std::ostringstream s;
    s.setf(std::ios::fixed);
    s.precision(1);
    if (terminal_) {  // a bar of the layers done
      const auto done = static_cast<int>(20 * layer / std::max<index_t>(1, layers_));
      s << "[" << std::string(static_cast<std::size_t>(done), '#') << std::string(static_cast<std::size_t>(20 - done), '.')
        << "] ";
    }
    s << "layer " << layer + 1 << " of " << layers_ << " (" << name << "): " << step << ", " << elapsed << " s";
    if (layer > 0) s << ", about " << elapsed / static_cast<double>(layer) * static_cast<double>(layers_ - layer) << " s left";
    if (terminal_) std::fprintf(stderr, "\r\033[K%s", s.str().c_str());
    else std::fprintf(stderr, "moecomp: compress: %s\n", s.str().c_str());
    std::fflush(stderr);
  }
  void finish() {
    if (terminal_) std::fprintf(stderr, "\r\033[K");
  }
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  bool terminal_, lines_;
  index_t layers_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// ---------------------------------------------------------------------------------------------- options

enum class method { hc_smoe, cka_merge, prune, resmoe, moefy };

method parse_method(const std::string& name) {
  if (name == "hc-smoe") return method::hc_smoe;
  if (name == "cka-merge") return method::cka_merge;
  if (name == "prune") return method::prune;
  if (name == "resmoe") return method::resmoe;
  if (name == "moefy") return method::moefy;
  throw usage_error("option --method: expected hc-smoe, cka-merge, resmoe, prune or moefy, got '" + name + "'");
}

const char* method_name(method m) {
  switch (m) {
    case method::hc_smoe: return "hc-smoe";
    case method::cka_merge: return "cka-merge";
    case method::prune: return "prune";
    case method::resmoe: return "resmoe";
    case method::moefy: return "moefy";
  }
  return "?";
}

/// Picks one of `choices` for `option`; usage_error listing them otherwise.
std::string choose(const arguments& args, const std::string& option, const std::vector<std::string>& choices,
                   const std::string& fallback) {
  const std::string v = args.value_or(option, fallback);
  if (std::find(choices.begin(), choices.end(), v) != choices.end()) return v;
  std::string list;
  for (std::size_t i = 0; i < choices.size(); ++i) list += (i ? i + 1 == choices.size() ? " or " : ", " : "") + choices[i];
  throw usage_error("option " + option + ": expected " + list + ", got '" + v + "'");
}

struct settings {
  method how = method::hc_smoe;
  index_t experts = 0;                 // per layer after compression
  std::string features = "outputs";    // hc-smoe: outputs | router-logits | weights
  moecomp::cluster::linkage_method linkage = moecomp::cluster::linkage_method::average;
  moecomp::merge::merge_method merge = moecomp::merge::merge_method::frequency;
  std::string similarity = "cka";      // cka-merge: cka | weights | surrogate
  std::string criterion = "frequency"; // prune: frequency | reap
  std::uint64_t seed = 0;
  std::string calibration;             // file, or empty: none
  double keep = 0.25;                  // resmoe: the fraction of each design residual kept (ResMoE: 0.25)
  moecomp::sparse::sparse_format format = moecomp::sparse::sparse_format::automatic;
  moecomp::sparse::value_dtype values = moecomp::sparse::value_dtype::bfloat16;
  index_t max_iterations = 100;        // resmoe: barycenter updates (POT's and ResMoE's default)
};

// ---------------------------------------------------------------------------------------------- tensors

/// A tensor this run computed, stored in the dtype its original had.
struct owned_tensor {
  std::string name;
  moecomp::io::safetensors_dtype dtype;
  std::vector<index_t> shape;
  std::vector<unsigned char> bytes;
};

/// Refuses a tensor the method would rewrite but append_encoded cannot store (an integer or FP8 dtype).
void require_float_dtype(moecomp::io::safetensors_dtype dtype, const std::string& name) {
  using moecomp::io::safetensors_dtype;
  if (dtype == safetensors_dtype::f32 || dtype == safetensors_dtype::f64 || dtype == safetensors_dtype::bf16 ||
      dtype == safetensors_dtype::f16)
    return;
  throw usage_error("compress: tensor '" + name + "' is stored as " + std::string(moecomp::io::to_string(dtype)) +
                    "; compress writes merged experts as F32, F64, BF16 or F16 only");
}

/// Appends `count` floats to `out`, converted to `dtype` (one rounding, to nearest even).
void append_encoded(const float* src, std::size_t count, moecomp::io::safetensors_dtype dtype,
                    std::vector<unsigned char>& out) {
  using moecomp::io::safetensors_dtype;
  const std::size_t at = out.size();
  switch (dtype) {
    case safetensors_dtype::f32:
      out.resize(at + 4 * count);
      std::memcpy(out.data() + at, src, 4 * count);
      return;
    case safetensors_dtype::f64: {
      out.resize(at + 8 * count);
      for (std::size_t i = 0; i < count; ++i) {
        const double v = src[i];
        std::memcpy(out.data() + at + 8 * i, &v, 8);
      }
      return;
    }
    case safetensors_dtype::bf16: {
      out.resize(at + 2 * count);
      for (std::size_t i = 0; i < count; ++i) {
        const moecomp::bfloat16 v(src[i]);
        std::memcpy(out.data() + at + 2 * i, &v, 2);
      }
      return;
    }
    case safetensors_dtype::f16: {
      out.resize(at + 2 * count);
      for (std::size_t i = 0; i < count; ++i) {
        const moecomp::half v(src[i]);
        std::memcpy(out.data() + at + 2 * i, &v, 2);
      }
      return;
    }
    default: break;
  }
}

/// Rounds `values` in place to what `dtype` stores, so that the errors this run reports are those of the
/// checkpoint it writes.
void round_to_storage(std::vector<float>& values, moecomp::io::safetensors_dtype dtype) {
  using moecomp::io::safetensors_dtype;
  if (dtype == safetensors_dtype::bf16)
    for (float& v : values) v = static_cast<float>(moecomp::bfloat16(v));
  else if (dtype == safetensors_dtype::f16)
    for (float& v : values) v = static_cast<float>(moecomp::half(v));
}

// ---------------------------------------------------------------------------------------------- one layer

/// The compressed layer: `stack` experts (W1, W3: S x I x H; W2: S x H x I), `slots[r]` the stack expert that
/// router id r uses (E_out entries), the router rows (E_out x H) and, where the original has them, the router
/// bias and the correction bias (E_out each).
struct new_layer {
  index_t stack_experts = 0;
  std::vector<float> w1, w3, w2;
  std::vector<std::int64_t> slots;
  moecomp::host_matrix<float> router;
  std::vector<float> router_bias, correction_bias;
  json record = json::object();  // the method's part of the report (groups, map, kept experts)
  /// resmoe: the base expert (nn.Linear layout, rounded to the experts' dtype), the permutations (E x I: row
  /// i of expert e is base row p(e, i)) and each expert's residuals; w1/w3/w2 then hold the restored experts.
  struct resmoe_part {
    std::vector<float> w1, w3, w2;
    moecomp::host_matrix<index_t> permutations;
    std::vector<moecomp::moe::expert_residual> residuals;
  };
  std::unique_ptr<resmoe_part> resmoe;
};

moecomp::moe::ffn_expert_stack_view<float> stack_view(const std::vector<float>& w1, const std::vector<float>& w3,
                                                      const std::vector<float>& w2, index_t experts, index_t d_ff,
                                                      index_t d_model, bool gated) {
  moecomp::moe::ffn_expert_stack_view<float> v;
  v.w1 = moecomp::matrix_stack_view<const float>(w1.data(), experts, d_ff, d_model);
  if (gated) v.w3 = moecomp::matrix_stack_view<const float>(w3.data(), experts, d_ff, d_model);
  v.w2 = moecomp::matrix_stack_view<const float>(w2.data(), experts, d_model, d_ff);
  return v;
}

/// labels (E int64, groups 0 .. g-1) as a JSON list of member lists.
json groups_json(const std::vector<std::int64_t>& labels) {
  index_t g = 0;
  for (std::int64_t l : labels) g = std::max<index_t>(g, l + 1);
  json groups = json::array();
  for (index_t k = 0; k < g; ++k) {
    json members = json::array();
    for (std::size_t e = 0; e < labels.size(); ++e)
      if (labels[e] == k) members.push_back(e);
    groups.push_back(members);
  }
  return groups;
}

/// The Euclidean distances between the experts' flattened weights (W1, W2, W3 of each expert, as
/// moe::vectorized_weights lays them out), condensed in scipy's pdist order, computed from the contiguous
/// stacks directly: no E x 3IH feature matrix and no prepared copy of it (at Mixtral's shape, 5.6 GB each).
/// Chunks of 2^14 entries are read once for all pairs; each chunk's per-pair sums of squares (double) are
/// added in chunk order, so the result is the same at any thread count.
std::vector<double> weight_distances(const moecomp::host_context& ctx, const moecomp::moe::ffn_expert_stack_view<float>& stack) {
  using moecomp::index_t;
  const index_t E = stack.experts(), pairs = E * (E - 1) / 2;
  struct piece {
    const float* data;
    index_t size;  // entries per expert
  };
  std::vector<piece> pieces;
  for (const auto* v : {&stack.w1, &stack.w2, &stack.w3})
    if (!v->empty()) {
      if (!v->is_contiguous()) throw std::logic_error("weight_distances: the expert stacks must be contiguous");
      pieces.push_back({v->data(), v->rows() * v->cols()});
    }
  constexpr index_t chunk = index_t{1} << 14;
  std::vector<index_t> first_chunk{0};  // chunk numbers where each piece starts
  for (const piece& p : pieces) first_chunk.push_back(first_chunk.back() + (p.size + chunk - 1) / chunk);
  const index_t chunks = first_chunk.back();
  std::vector<double> partial(static_cast<std::size_t>(chunks * pairs));
  moecomp::detail::parallel_for(chunks, ctx.threads(), [&](index_t c, int) {
    std::size_t k = 0;
    while (c >= first_chunk[k + 1]) ++k;
    const piece& p = pieces[k];
    const index_t begin = (c - first_chunk[k]) * chunk, end = std::min(p.size, begin + chunk);
    double* out = partial.data() + c * pairs;
    index_t pair = 0;
    for (index_t a = 0; a < E; ++a)
      for (index_t b = a + 1; b < E; ++b, ++pair) {
        const float* x = p.data + a * p.size;
        const float* y = p.data + b * p.size;
        double sum = 0;
        for (index_t j = begin; j < end; ++j) {
          const double diff = static_cast<double>(x[j]) - static_cast<double>(y[j]);
          sum += diff * diff;
        }
        out[pair] = sum;
      }
  });
  std::vector<double> distances(static_cast<std::size_t>(pairs), 0.0);
  for (index_t c = 0; c < chunks; ++c)
    for (index_t pair = 0; pair < pairs; ++pair) distances[static_cast<std::size_t>(pair)] += partial[static_cast<std::size_t>(c * pairs + pair)];
  for (double& d : distances) d = std::sqrt(d);
  return distances;
}

/// HC-SMoE's representative of each group from the condensed distances: the member nearest the group's mean
/// feature, which is the member with the least sum of squared distances to the group's members
/// (||f_i - mean||^2 = (1/|G|) sum_j ||f_i - f_j||^2 - a constant of the group); ties to the lower index.
std::vector<std::int64_t> representatives_from_distances(const std::vector<double>& condensed,
                                                         const std::vector<std::int64_t>& labels, index_t groups) {
  const auto E = static_cast<index_t>(labels.size());
  auto distance = [&](index_t a, index_t b) {
    if (a == b) return 0.0;
    return condensed[static_cast<std::size_t>(moecomp::distance::condensed_index(E, std::min(a, b), std::max(a, b)))];
  };
  std::vector<std::int64_t> best(static_cast<std::size_t>(groups), -1);
  std::vector<double> best_sum(static_cast<std::size_t>(groups), 0.0);
  for (index_t i = 0; i < E; ++i) {
    const auto g = static_cast<std::size_t>(labels[static_cast<std::size_t>(i)]);
    double sum = 0;
    for (index_t j = 0; j < E; ++j)
      if (labels[static_cast<std::size_t>(j)] == labels[static_cast<std::size_t>(i)]) sum += distance(i, j) * distance(i, j);
    if (best[g] < 0 || sum < best_sum[g]) {
      best[g] = i;
      best_sum[g] = sum;
    }
  }
  return best;
}

/// Merges the groups `labels` of the layer's experts with `params`; the router rule decides whether the
/// router keeps its E rows (id map) or gets one row per group.
new_layer merge_layer(const moecomp::host_context& ctx, const moecomp::model::moe_layer_weights<float>& w,
                      const std::vector<std::int64_t>& labels, const moecomp::merge::merge_params& params,
                      moecomp::matrix_view<const float> x, const std::vector<std::int64_t>& dominants) {
  using namespace moecomp;
  const index_t E = w.experts, I = w.d_ff, H = w.d_model;
  const index_t g = merge::group_count(make_vector_view(labels.data(), E));
  new_layer out;
  out.stack_experts = g;
  out.w1.resize(static_cast<std::size_t>(g * I * H));
  if (w.gated) out.w3.resize(out.w1.size());
  out.w2.resize(out.w1.size());
  host_matrix<float> merged_router(g, H);
  std::vector<std::int64_t> map(static_cast<std::size_t>(E));
  merge::merge_data<float> data;
  data.x = x;
  data.router = w.router.const_view();
  if (!dominants.empty()) data.dominants = make_vector_view(dominants.data(), g);
  merge::merge_outputs<float> outputs;
  outputs.experts.w1 = matrix_stack_view<float>(out.w1.data(), g, I, H);
  if (w.gated) outputs.experts.w3 = matrix_stack_view<float>(out.w3.data(), g, I, H);
  outputs.experts.w2 = matrix_stack_view<float>(out.w2.data(), g, H, I);
  const merge::router_rule rule = merge::resolve_router_rule(params, true);
  if (rule != merge::router_rule::id_map) outputs.router = merged_router.view();
  outputs.map = make_vector_view(map.data(), E);
  const merge::merge_report report =
      merge::merge_experts<float>(ctx, params, w.experts_view(), make_vector_view(labels.data(), E), data, outputs);
  out.record["groups"] = groups_json(labels);
  json dominant = json::array(), group_errors = json::array();
  for (const auto& gr : report.groups) {
    dominant.push_back(gr.dominant);
    group_errors.push_back(std::isnan(gr.error) ? json(nullptr) : json(gr.error));
  }
  out.record["dominants"] = dominant;
  out.record["coefficients"] = report.coefficients;
  out.record["group_merge_errors"] = group_errors;
  out.record["router"] = merge::to_string(report.router);
  if (rule == merge::router_rule::id_map) {  // HC-SMoE: the router keeps its rows, each old id maps to its group
    out.slots = map;
    out.router = w.router;
    out.router_bias = w.router_bias;
    out.correction_bias = w.correction_bias;
    out.record["id_map"] = map;
  } else {  // one router row per group; biases merged with the same coefficients as the rows
    out.slots.resize(static_cast<std::size_t>(g));
    std::iota(out.slots.begin(), out.slots.end(), 0);
    out.router = std::move(merged_router);
    auto merge_bias = [&](const std::vector<float>& bias) {
      std::vector<float> merged;
      if (bias.empty()) return merged;
      std::vector<double> sum(static_cast<std::size_t>(g), 0.0);
      for (index_t e = 0; e < E; ++e)
        sum[static_cast<std::size_t>(labels[static_cast<std::size_t>(e)])] +=
            report.coefficients[static_cast<std::size_t>(e)] * static_cast<double>(bias[static_cast<std::size_t>(e)]);
      for (double s : sum) merged.push_back(static_cast<float>(s));
      return merged;
    };
    out.router_bias = merge_bias(w.router_bias);
    out.correction_bias = merge_bias(w.correction_bias);
  }
  return out;
}

/// ResMoE: the free-support barycenter of the experts' design rows [W1_i | W3_i | W2[:, i]] (uniform weights,
/// init = expert 0), the base expert from it (rounded to the experts' dtype), each expert's design residual in
/// the base's neuron order pruned to the fraction s.keep as one matrix and encoded
/// (moe::encode_expert_residual), and the experts restored from base and residuals (sparse::restore_dense).
template <class Timed>
new_layer resmoe_layer(const moecomp::host_context& ctx, const settings& s, const moecomp::model::moe_layer_weights<float>& w,
                       moecomp::io::safetensors_dtype expert_dtype, Timed&& timed) {
  using namespace moecomp;
  const index_t E = w.experts, I = w.d_ff, H = w.d_model, pieces = w.gated ? 3 : 2, width = pieces * H;
  new_layer out;
  out.resmoe = std::make_unique<new_layer::resmoe_part>();
  new_layer::resmoe_part& r = *out.resmoe;
  host_matrix<float> design(E * I, width);
  timed("design rows", [&] {
    for (index_t e = 0; e < E; ++e) {
      const float* w1 = w.w1.data() + e * I * H;
      const float* w3 = w.gated ? w.w3.data() + e * I * H : nullptr;
      const float* w2 = w.w2.data() + e * H * I;
      for (index_t i = 0; i < I; ++i) {
        float* row = design.view().row_ptr(e * I + i);
        std::copy(w1 + i * H, w1 + (i + 1) * H, row);
        if (w3 != nullptr) std::copy(w3 + i * H, w3 + (i + 1) * H, row + H);
        float* down = row + (pieces - 1) * H;
        for (index_t j = 0; j < H; ++j) down[j] = w2[j * I + i];
      }
    }
  });
  host_matrix<float> barycenter(I, width);
  r.permutations = host_matrix<index_t>(E, I);
  ot::free_support_barycenter_result bary;
  timed("barycenter", [&] {
    ot::free_support_barycenter_params bp;
    bp.max_iterations = s.max_iterations;
    bary = ot::free_support_barycenter<float>(ctx, bp, split_rows(design.const_view(), E),
                                              design.const_view().row_range(0, I), barycenter.view(),
                                              r.permutations.view());
  });
  design = host_matrix<float>();  // the largest buffer: freed before the restore's
  r.w1.resize(static_cast<std::size_t>(I * H));
  if (w.gated) r.w3.resize(r.w1.size());
  r.w2.resize(r.w1.size());
  for (index_t i = 0; i < I; ++i)
    for (index_t j = 0; j < H; ++j) {
      r.w1[static_cast<std::size_t>(i * H + j)] = barycenter(i, j);
      if (w.gated) r.w3[static_cast<std::size_t>(i * H + j)] = barycenter(i, H + j);
      r.w2[static_cast<std::size_t>(j * I + i)] = barycenter(i, (pieces - 1) * H + j);
    }
  round_to_storage(r.w1, expert_dtype);
  round_to_storage(r.w3, expert_dtype);
  round_to_storage(r.w2, expert_dtype);
  moe::ffn_expert_view<float> base;
  base.w1 = matrix_view<const float>(r.w1.data(), I, H, H);
  if (w.gated) base.w3 = matrix_view<const float>(r.w3.data(), I, H, H);
  base.w2 = matrix_view<const float>(r.w2.data(), H, I, I);
  r.residuals.resize(static_cast<std::size_t>(E));
  std::vector<double> squared_errors;
  json residual_bytes = json::array(), formats = json::array();
  timed("residuals", [&] {
    sparse::residual_params rp;
    rp.prune.keep = s.keep;
    rp.prune.scope = sparse::prune_scope::matrix;
    rp.encode.format = s.format;
    rp.encode.values = s.values;
    for (index_t e = 0; e < E; ++e) {
      moe::ffn_expert_view<float> expert;
      expert.w1 = matrix_view<const float>(w.w1.data() + e * I * H, I, H, H);
      if (w.gated) expert.w3 = matrix_view<const float>(w.w3.data() + e * I * H, I, H, H);
      expert.w2 = matrix_view<const float>(w.w2.data() + e * H * I, H, I, I);
      const moe::expert_residual_info info = moe::encode_expert_residual<float>(
          ctx, rp, base, expert, r.permutations.const_view().row(e), r.residuals[static_cast<std::size_t>(e)]);
      squared_errors.push_back(info.squared_error);
      residual_bytes.push_back(info.bytes);
      const auto& res = r.residuals[static_cast<std::size_t>(e)];
      formats.push_back(json::array({sparse::to_string(res.w1.format()),
                                     w.gated ? sparse::to_string(res.w3.format()) : "-",
                                     sparse::to_string(res.w2.format())}));
    }
  });
  out.stack_experts = E;
  out.w1.resize(static_cast<std::size_t>(E * I * H));
  if (w.gated) out.w3.resize(out.w1.size());
  out.w2.resize(out.w1.size());
  timed("restore", [&] {
    host_matrix<float> down(H, I);
    for (index_t e = 0; e < E; ++e) {
      const auto& res = r.residuals[static_cast<std::size_t>(e)];
      const vector_view<const index_t> p = r.permutations.const_view().row(e);
      sparse::restore_dense<float, float>(ctx, base.w1, res.w1.view(), matrix_view<float>(out.w1.data() + e * I * H, I, H, H), p);
      if (w.gated)
        sparse::restore_dense<float, float>(ctx, base.w3, res.w3.view(), matrix_view<float>(out.w3.data() + e * I * H, I, H, H), p);
      // W2's neurons are its columns: restore in the base's order, then gather column p(i) into column i.
      sparse::restore_dense<float, float>(ctx, base.w2, res.w2.view(), down.view());
      float* w2 = out.w2.data() + e * H * I;
      for (index_t j = 0; j < H; ++j)
        for (index_t i = 0; i < I; ++i) w2[j * I + i] = down(j, p[i]);
    }
  });
  out.slots.resize(static_cast<std::size_t>(E));
  std::iota(out.slots.begin(), out.slots.end(), 0);
  out.router = w.router;
  out.router_bias = w.router_bias;
  out.correction_bias = w.correction_bias;
  out.record["keep"] = s.keep;
  out.record["values"] = sparse::to_string(s.values);
  out.record["formats"] = formats;
  out.record["residual_bytes"] = residual_bytes;
  out.record["barycenter"] = {{"iterations", bary.iterations}, {"status", to_string(bary.status)},
                              {"objective", bary.objective}};
  out.record["resmoe_approximation_error"] = sparse::layer_approximation_error(squared_errors, I);
  return out;
}

/// The layer's new form by `s.how`. x: the calibration tokens (0 rows without them).
new_layer compress_layer(const moecomp::host_context& ctx, const settings& s, const moecomp::model::moe_model& m,
                         const moecomp::model::moe_layer_weights<float>& w, moecomp::matrix_view<const float> x,
                         progress_display& progress, index_t layer_number, const std::string& layer_name,
                         json& steps, moecomp::io::safetensors_dtype expert_dtype) {
  using namespace moecomp;
  const index_t E = w.experts, H = w.d_model, N = s.experts;
  const bool calibrated = x.rows() > 0;
  moe::ffn_params ffn;
  ffn.act = m.activation;
  auto timed = [&](const std::string& step, auto&& work) {
    progress.update(layer_number, layer_name, step);
    const auto t0 = std::chrono::steady_clock::now();
    work();
    steps[step] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };

  if (s.how == method::prune) {
    std::vector<double> score(static_cast<std::size_t>(E), 0.0);
    timed("scores", [&] {
      if (s.criterion == "frequency") {
        merge::routing_frequencies<float>(ctx, m.top_k, x, w.router.const_view(), make_vector_view(score.data(), E));
        return;
      }
      // REAP's saliency: the mean over the tokens routed to e of gate weight x ||f_e(x_t)||.
      const index_t T = x.rows(), K = gating::max_experts_per_token(model::routing_of(m), E);
      host_matrix<float> logits(T, E), weights(T, K), norms(T, E);
      host_matrix<std::int64_t> ids(T, K);
      const std::vector<float>& bias = w.correction_bias;
      moe::router_logits<float>(ctx, x, w.router.const_view(),
                                w.router_bias.empty() ? vector_view<const float>()
                                                      : make_vector_view(w.router_bias.data(), E),
                                logits.view());
      gating::route_fixed<float>(ctx, model::routing_of(m), logits.const_view(),
                                 bias.empty() ? vector_view<const float>() : make_vector_view(bias.data(), E),
                                 ids.view(), weights.view());
      moe::expert_output_norms<float>(ctx, ffn, w.experts_view(), x, norms.view());
      std::vector<double> count(static_cast<std::size_t>(E), 0.0);
      for (index_t t = 0; t < T; ++t)
        for (index_t q = 0; q < K; ++q) {
          const std::int64_t e = ids(t, q);
          if (e >= E) continue;
          score[static_cast<std::size_t>(e)] += static_cast<double>(weights(t, q)) * static_cast<double>(norms(t, e));
          count[static_cast<std::size_t>(e)] += 1.0;
        }
      for (index_t e = 0; e < E; ++e)
        if (count[static_cast<std::size_t>(e)] > 0) score[static_cast<std::size_t>(e)] /= count[static_cast<std::size_t>(e)];
    });
    // The N highest scores, ties to the lowest index, kept in their original order.
    std::vector<index_t> order(static_cast<std::size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) {
      return score[static_cast<std::size_t>(a)] > score[static_cast<std::size_t>(b)];
    });
    std::vector<std::int64_t> kept(order.begin(), order.begin() + N);
    std::sort(kept.begin(), kept.end());
    new_layer out;
    out.stack_experts = E;  // the original stack, addressed through the slots
    out.slots = kept;
    out.router = host_matrix<float>(N, H);
    for (index_t r = 0; r < N; ++r)
      for (index_t c = 0; c < H; ++c) out.router(r, c) = w.router(kept[static_cast<std::size_t>(r)], c);
    for (std::int64_t e : kept) {
      if (!w.router_bias.empty()) out.router_bias.push_back(w.router_bias[static_cast<std::size_t>(e)]);
      if (!w.correction_bias.empty()) out.correction_bias.push_back(w.correction_bias[static_cast<std::size_t>(e)]);
    }
    out.record["criterion"] = s.criterion;
    out.record["scores"] = score;
    out.record["kept"] = kept;
    return out;
  }

  if (s.how == method::resmoe) return resmoe_layer(ctx, s, w, expert_dtype, timed);

  std::vector<std::int64_t> labels(static_cast<std::size_t>(E));
  std::vector<std::int64_t> dominants;
  merge::merge_params params;
  params.forward = ffn;
  params.routing_top_k = m.top_k;
  params.seed = s.seed;
  params.report_errors = calibrated;

  if (s.how == method::hc_smoe) {
    host_matrix<float> features;
    std::vector<double> weight_condensed;  // --features weights: the condensed distances instead
    timed("features", [&] {
      if (s.features == "outputs") {
        features = host_matrix<float>(E, H);
        moe::expert_mean_outputs<float>(ctx, ffn, w.experts_view(), x, features.view());
      } else if (s.features == "router-logits") {  // each expert's logit column over the tokens
        host_matrix<float> logits(x.rows(), E);
        moe::router_logits<float>(ctx, x, w.router.const_view(), vector_view<const float>(), logits.view());
        features = host_matrix<float>(E, x.rows());
        for (index_t t = 0; t < x.rows(); ++t)
          for (index_t e = 0; e < E; ++e) features(e, t) = logits(t, e);
      } else {  // the distances straight from the stacks (the features would be E x 3IH floats, twice)
        weight_condensed = weight_distances(ctx, w.experts_view());
      }
    });
    timed("clustering", [&] {
      cluster::linkage_params lp;
      lp.method = s.linkage;
      const host_matrix<double> z =
          s.features == "weights"
              ? cluster::linkage_condensed(ctx, lp, vector_view<const double>(weight_condensed.data(),
                                                                              static_cast<index_t>(weight_condensed.size())))
              : cluster::linkage(ctx, lp, features.const_view());
      cluster::fcluster_params fp;
      fp.criterion = cluster::fcluster_criterion::maxclust;
      fp.max_clusters = N;
      std::vector<std::int64_t> raw(static_cast<std::size_t>(E));
      cluster::fcluster(ctx, fp, z.const_view(), make_vector_view(raw.data(), E));
      cluster::relabel_by_first_appearance(ctx, make_vector_view<const std::int64_t>(raw.data(), E),
                                           make_vector_view(labels.data(), E));
      // HC-SMoE's representative: the member nearest its group's mean feature.
      if (s.features == "weights") {
        const std::vector<std::int64_t> representatives = representatives_from_distances(weight_condensed, labels, N);
        dominants.assign(representatives.begin(), representatives.end());
      } else {
        std::vector<index_t> representatives(static_cast<std::size_t>(N));
        cluster::group_representatives(ctx, features.const_view(), make_vector_view<const std::int64_t>(labels.data(), E),
                                       make_vector_view(representatives.data(), N));
        dominants.assign(representatives.begin(), representatives.end());
      }
    });
    params.method = s.merge;
    params.router = merge::router_rule::id_map;
  } else {  // cka-merge
    host_matrix<double> distances(E, E);
    timed("similarity", [&] {
      if (s.similarity == "cka") {
        const index_t T = x.rows();
        host_matrix<float> outputs(E * T, H);
        moe::ffn_stack_forward<float>(ctx, ffn, w.experts_view(), x,
                                      matrix_stack_view<float>(outputs.data(), E, T, H));
        host_matrix<double> cka(E, E);
        similarity::cka_params cp;
        similarity::cka_matrix<float>(ctx, cp, split_rows(outputs.const_view(), E), cka.view());
        for (index_t a = 0; a < E; ++a)
          for (index_t b = 0; b < E; ++b) distances(a, b) = a == b ? 0.0 : 1.0 - cka(a, b);
      } else if (s.similarity == "weights") {  // from the stacks, without the E x 3IH features
        const std::vector<double> condensed = weight_distances(ctx, w.experts_view());
        for (index_t a = 0, pair = 0; a < E; ++a) {
          distances(a, a) = 0;
          for (index_t b = a + 1; b < E; ++b, ++pair) distances(a, b) = distances(b, a) = condensed[static_cast<std::size_t>(pair)];
        }
      } else {
        host_matrix<float> features(E, H * H);
        moe::surrogate_weights<float>(ctx, w.experts_view(), features.view());
        host_matrix<float> d(E, E);
        distance::pairwise_distance_params dp;
        distance::pairwise_distances(ctx, dp, features.const_view(), d.view());
        for (index_t a = 0; a < E; ++a)
          for (index_t b = 0; b < E; ++b) distances(a, b) = d(a, b);
      }
      // CKA rounds to a matrix that is symmetric only to rounding; the partition wants it exactly.
      for (index_t a = 0; a < E; ++a)
        for (index_t b = a + 1; b < E; ++b) distances(a, b) = distances(b, a) = 0.5 * (distances(a, b) + distances(b, a));
    });
    timed("partition", [&] {
      similarity::partition_params pp;
      pp.groups = N;
      pp.seed = s.seed;
      similarity::partition_experts<double>(ctx, pp, distances.const_view(), make_vector_view(labels.data(), E));
    });
    params.method = s.merge;
    params.router = merge::router_rule::automatic;  // uniform, learned: merged rows; dominant: the dominant's row
  }
  new_layer out;
  timed("merging", [&] { out = merge_layer(ctx, w, labels, params, x, dominants); });
  return out;
}

/// || y - y' ||_F / || y ||_F of the layer's output on x (0 rows: NaN), through moe_layer_forward.
double layer_error(const moecomp::host_context& ctx, const moecomp::model::moe_model& m,
                   const moecomp::model::moe_layer_weights<float>& w, const new_layer& c,
                   moecomp::matrix_view<const float> x) {
  using namespace moecomp;
  if (x.rows() == 0) return std::numeric_limits<double>::quiet_NaN();
  moe::moe_layer_params params;
  params.routing = model::routing_of(m);
  params.ffn.act = m.activation;
  host_matrix<float> shared_gate;
  auto base = [&](moe::moe_layer_view<float>& v) {
    if (w.has_shared_expert()) {
      const auto s = w.shared_expert_view();
      v.shared.w1 = matrix_stack_view<const float>(s.w1.data(), 1, s.w1.rows(), s.w1.cols());
      if (!s.w3.empty()) v.shared.w3 = matrix_stack_view<const float>(s.w3.data(), 1, s.w3.rows(), s.w3.cols());
      v.shared.w2 = matrix_stack_view<const float>(s.w2.data(), 1, s.w2.rows(), s.w2.cols());
      if (!w.shared_gate.empty()) v.shared_gate = matrix_view<const float>(w.shared_gate.data(), 1, w.d_model);
    }
  };
  moe::moe_layer_view<float> original;
  original.router = w.router.const_view();
  if (!w.correction_bias.empty()) original.router_bias = make_vector_view(w.correction_bias.data(), w.experts);
  original.experts = w.experts_view();
  base(original);
  host_matrix<float> y(x.rows(), x.cols()), z(x.rows(), x.cols());
  moe::moe_layer_forward<float>(ctx, params, original, x, y.view());

  const index_t out_experts = static_cast<index_t>(c.slots.size());
  moe::moe_layer_view<float> compressed;
  compressed.router = c.router.const_view();
  if (!c.correction_bias.empty()) compressed.router_bias = make_vector_view(c.correction_bias.data(), out_experts);
  const bool own_stack = !c.w1.empty();
  compressed.experts = own_stack ? stack_view(c.w1, c.w3, c.w2, c.stack_experts, w.d_ff, w.d_model, w.gated)
                                 : w.experts_view();
  compressed.expert_map = make_vector_view(c.slots.data(), out_experts);
  base(compressed);
  moe::moe_layer_forward<float>(ctx, params, compressed, x, z.view());
  double diff = 0, ref = 0;
  for (index_t t = 0; t < x.rows(); ++t)
    for (index_t k = 0; k < x.cols(); ++k) {
      const double a = y(t, k), b = z(t, k);
      diff += (a - b) * (a - b);
      ref += a * a;
    }
  return std::sqrt(diff) / std::sqrt(ref);
}

// ---------------------------------------------------------------------------------------------- writing

/// The layer's tensors in the checkpoint's names and dtypes: router id r of the output uses the names of
/// original expert r (E_out <= E), and holds stack expert slots[r].
std::vector<owned_tensor> layer_tensors(const moecomp::io::safetensors_checkpoint& checkpoint,
                                        const moecomp::model::moe_layer_names& names,
                                        const moecomp::model::moe_layer_weights<float>& w, const new_layer& c) {
  const index_t I = w.d_ff, H = w.d_model, matrix = I * H, out_experts = static_cast<index_t>(c.slots.size());
  const bool own_stack = !c.w1.empty();
  auto source = [&](const std::vector<float>& mine, const std::vector<float>& original, index_t r) {
    const std::int64_t k = c.slots[static_cast<std::size_t>(r)];
    return (own_stack ? mine.data() : original.data()) + k * matrix;
  };
  std::vector<owned_tensor> out;
  out.reserve(3 + 3 * static_cast<std::size_t>(out_experts));  // add() hands out references: no reallocation
  auto add = [&](const std::string& name, std::vector<index_t> shape) -> owned_tensor& {
    const auto dtype = checkpoint.info(name).dtype;
    out.push_back({name, dtype, std::move(shape), {}});
    require_float_dtype(dtype, name);
    return out.back();
  };
  {
    owned_tensor& r = add(names.router, {out_experts, H});
    append_encoded(c.router.data(), static_cast<std::size_t>(out_experts * H), r.dtype, r.bytes);
  }
  if (!names.router_bias.empty()) {
    owned_tensor& b = add(names.router_bias, {out_experts});
    append_encoded(c.router_bias.data(), c.router_bias.size(), b.dtype, b.bytes);
  }
  if (!names.correction_bias.empty()) {
    owned_tensor& b = add(names.correction_bias, {out_experts});
    append_encoded(c.correction_bias.data(), c.correction_bias.size(), b.dtype, b.bytes);
  }
  if (names.fused()) {
    owned_tensor& gu = add(names.gate_up, {out_experts, 2 * I, H});
    owned_tensor& down = add(names.fused_down, {out_experts, H, I});
    for (index_t r = 0; r < out_experts; ++r) {
      append_encoded(source(c.w1, w.w1, r), static_cast<std::size_t>(matrix), gu.dtype, gu.bytes);
      append_encoded(source(c.w3, w.w3, r), static_cast<std::size_t>(matrix), gu.dtype, gu.bytes);
      append_encoded(source(c.w2, w.w2, r), static_cast<std::size_t>(matrix), down.dtype, down.bytes);
    }
    return out;
  }
  for (index_t r = 0; r < out_experts; ++r) {
    const auto u = static_cast<std::size_t>(r);
    owned_tensor& g = add(names.gate[u], {I, H});
    append_encoded(source(c.w1, w.w1, r), static_cast<std::size_t>(matrix), g.dtype, g.bytes);
    if (!names.up.empty()) {
      owned_tensor& up = add(names.up[u], {I, H});
      append_encoded(source(c.w3, w.w3, r), static_cast<std::size_t>(matrix), up.dtype, up.bytes);
    }
    owned_tensor& d = add(names.down[u], {H, I});
    append_encoded(source(c.w2, w.w2, r), static_cast<std::size_t>(matrix), d.dtype, d.bytes);
  }
  return out;
}

/// resmoe's tensors of a layer: the base expert (`PREFIX.resmoe.base.w1/w3/w2.weight`, in the experts' dtype),
/// the permutations (`PREFIX.resmoe.permutations`, I32, E x I) and each expert's residuals
/// (`PREFIX.resmoe.experts.E.w1/w3/w2.residual`: U8, the bytes of a moecomp residual file).
std::vector<owned_tensor> resmoe_layer_tensors(const std::string& prefix, const moecomp::model::moe_layer_weights<float>& w,
                                               const new_layer::resmoe_part& r, moecomp::io::safetensors_dtype dtype) {
  using moecomp::io::safetensors_dtype;
  const index_t E = w.experts, I = w.d_ff, H = w.d_model;
  std::vector<owned_tensor> out;
  const std::string base = prefix + ".resmoe.";
  auto dense = [&](const std::string& name, const std::vector<float>& values, std::vector<index_t> shape) {
    out.push_back({base + name, dtype, std::move(shape), {}});
    append_encoded(values.data(), values.size(), dtype, out.back().bytes);
  };
  dense("base.w1.weight", r.w1, {I, H});
  if (w.gated) dense("base.w3.weight", r.w3, {I, H});
  dense("base.w2.weight", r.w2, {H, I});
  owned_tensor perms{base + "permutations", safetensors_dtype::i32, {E, I}, {}};
  perms.bytes.resize(static_cast<std::size_t>(E * I) * 4);
  for (index_t k = 0; k < E * I; ++k) {
    const auto v = static_cast<std::int32_t>(r.permutations.data()[k]);
    std::memcpy(perms.bytes.data() + 4 * k, &v, 4);
  }
  out.push_back(std::move(perms));
  for (index_t e = 0; e < E; ++e) {
    const auto& res = r.residuals[static_cast<std::size_t>(e)];
    const std::pair<const char*, const moecomp::sparse::sparse_matrix*> pieces[] = {
        {"w1", &res.w1}, {"w3", &res.w3}, {"w2", &res.w2}};
    for (const auto& [piece, matrix] : pieces) {
      if (std::string(piece) == "w3" && !w.gated) continue;
      std::vector<std::uint8_t> bytes = moecomp::io::serialize_residual(matrix->view());
      const auto size = static_cast<index_t>(bytes.size());
      out.push_back({base + "experts." + std::to_string(e) + "." + piece + ".residual", safetensors_dtype::u8, {size},
                     std::move(bytes)});
    }
  }
  return out;
}

std::uint64_t tensor_bytes(const moecomp::io::safetensors_checkpoint& checkpoint, const std::string& name) {
  const auto& info = checkpoint.info(name);
  return info.end - info.begin;
}

/// The layer's tensor prefix ("model.layers.3.block_sparse_moe"): what its router's and first expert's names
/// share, up to the last dot.
std::string layer_prefix(const moecomp::model::moe_layer_names& names) {
  const std::string& a = names.router;
  const std::string& b = names.fused() ? names.gate_up : names.gate.front();
  std::size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  const std::size_t dot = a.rfind('.', n == 0 ? 0 : n - 1);
  return dot == std::string::npos ? names.stack + "." + std::to_string(names.layer) : a.substr(0, dot);
}

/// Peak resident set of this process so far, in bytes (getrusage; Linux reports kilobytes).
double peak_rss_bytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;
}

/// Where the embedded model `name` (tiny-moe, or tiny-dense for moefy) is: installed beside the tool
/// (share/moecomp/models/NAME), else the source tree this tool was built from.
std::string default_model_dir(const std::string& name) {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / "share" / "moecomp" / "models" / name;
    if (fs::is_directory(installed, ec)) return installed.string();
  }
#if defined(MOECOMP_SOURCE_MODELS_DIR)
  return std::string(MOECOMP_SOURCE_MODELS_DIR) + "/" + name;
#else
  throw usage_error("compress: no MODEL_DIR given and no embedded model installed beside the tool");
#endif
}

std::string fixed(double v, int digits) {
  if (std::isnan(v)) return "-";
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << v;
  return s.str();
}

/// --calibration FILE, else MODEL_DIR/calibration.safetensors when it exists, else "" (none). Whatever is
/// named must be a regular file (or a link to one): a directory, FIFO or device there is an error, not "none".
std::string calibration_file(const arguments& args, const std::string& model_dir) {
  std::error_code ec;
  if (const auto c = args.value("--calibration")) {
    if (c->empty()) throw usage_error("option --calibration: expected a .safetensors file name, got ''");
    const fs::file_status status = fs::status(*c, ec);
    if (!fs::exists(status)) throw usage_error("option --calibration: no file '" + *c + "'");
    if (!fs::is_regular_file(status))
      throw usage_error("option --calibration: '" + *c + "' is " + moecomp::io::file_kind_text(status.type()) +
                        ", not a regular file");
    return *c;
  }
  const std::string fallback = (fs::path(model_dir) / "calibration.safetensors").string();
  if (!fs::exists(fs::symlink_status(fallback, ec))) return std::string();
  const fs::file_status status = fs::status(fallback, ec);
  if (!fs::is_regular_file(status))
    throw usage_error("compress: '" + fallback + "' is " +
                      (fs::exists(status) ? moecomp::io::file_kind_text(status.type()) : "a link to nothing") +
                      ", not a regular file of calibration tokens (remove it, or name one with --calibration FILE)");
  return fallback;
}

/// The calibration file `path`, read; usage_error when it is not a regular file.
moecomp::io::safetensors_file open_calibration(const std::string& path) {
  try {
    return moecomp::io::read_safetensors(path);
  } catch (const moecomp::io_error& e) {
    throw usage_error(std::string("option --calibration: ") + e.what());
  }
}

/// The calibration tokens `key` of `file` (read from `path`) for `layer`: model::read_calibration_tokens (T x
/// hidden, T >= 1, a float dtype, finite), its io_error named as the --calibration option's.
moecomp::host_matrix<float> calibration_tokens(const moecomp::io::safetensors_file& file, const std::string& path,
                                               const std::string& key, index_t hidden, const std::string& layer) {
  if (!file.contains(key))
    throw usage_error("option --calibration: '" + path + "' has no tensor '" + key + "' for " + layer);
  try {
    return moecomp::model::read_calibration_tokens(file, key, hidden);
  } catch (const moecomp::io_error& e) {
    throw usage_error(std::string("option --calibration: ") + e.what());
  }
}

/// The model directory's other files (tokenizer, generation config), copied unchanged into `dir`.
void copy_other_files(const std::string& model_dir, const std::string& dir) {
  for (const auto& entry : fs::directory_iterator(model_dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name == "config.json" || entry.path().extension() == ".safetensors" ||
        name == "model.safetensors.index.json" || name.rfind('.', 0) == 0)
      continue;
    fs::copy_file(entry.path(), fs::path(dir) / name);
  }
}

/// Writes `config` as `dir`/config.json.
void write_config(const std::string& dir, const json& config) {
  std::ofstream f(fs::path(dir) / "config.json");
  f << config.dump(2) << "\n";
  if (!f) throw moecomp::io_error("compress: cannot write config.json into '" + dir + "'");
}

/// The report's totals: bytes before and after, bits per weight over the original parameters, the run's
/// seconds and the peak resident set.
json report_totals(double bytes_before, double bytes_after, double parameters_before,
                   std::chrono::steady_clock::time_point started) {
  json totals;
  totals["bytes_before"] = bytes_before;
  totals["bytes_after"] = bytes_after;
  totals["bits_per_weight"] = parameters_before > 0 ? 8.0 * bytes_after / parameters_before : 0.0;
  totals["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  totals["peak_rss_bytes"] = peak_rss_bytes();
  return totals;
}

/// Writes the report into the staging directory (and to --report), commits OUT_DIR, and prints the report as
/// one JSON line (--json), or `table` and the paths written.
template <class Table>
int finish_report(const arguments& args, output_files& outputs, const std::string& staging, const json& report,
                  Table&& table) {
  const std::string report_text = report.dump(2) + "\n";
  {
    std::ofstream f(fs::path(staging) / "compression_report.json");
    f << report_text;
    if (!f) throw moecomp::io_error("compress: cannot write compression_report.json into '" + staging + "'");
  }
  outputs.stage_text("--report", report_text);  // checked with the other outputs before any work
  outputs.commit();  // the last step: nothing before it is left behind, nothing after it changes the outputs
  if (args.flag("--json")) {  // the report itself, on one line
    std::printf("%s\n", report.dump().c_str());
    return 0;
  }
  table();
  const std::string out_dir = *args.value("-o");
  std::printf("wrote %s (report: %s)\n", out_dir.c_str(),
              args.value("--report") ? args.value("--report")->c_str() : (out_dir + "/compression_report.json").c_str());
  return 0;
}

// ---------------------------------------------------------------------------------------------- moefy

/// Row p of the result is row permutation[p] of the 2-D tensor `t`: its bytes moved, never converted, so that
/// any dtype is kept exactly.
std::vector<unsigned char> permute_rows(const moecomp::io::safetensors_tensor& t, const std::vector<index_t>& permutation) {
  const auto row_bytes = static_cast<std::size_t>(t.byte_size() / static_cast<std::uint64_t>(t.shape()[0]));
  std::vector<unsigned char> out(static_cast<std::size_t>(t.byte_size()));
  for (std::size_t p = 0; p < permutation.size(); ++p)
    std::memcpy(out.data() + p * row_bytes, t.data() + static_cast<std::size_t>(permutation[p]) * row_bytes, row_bytes);
  return out;
}

/// Column p of the result is column permutation[p] of the 2-D tensor `t` (bytes moved, as permute_rows).
std::vector<unsigned char> permute_columns(const moecomp::io::safetensors_tensor& t, const std::vector<index_t>& permutation) {
  const index_t rows = t.shape()[0], cols = t.shape()[1];
  const auto item = static_cast<std::size_t>(t.byte_size() / static_cast<std::uint64_t>(rows * cols));
  std::vector<unsigned char> out(static_cast<std::size_t>(t.byte_size()));
  for (index_t r = 0; r < rows; ++r) {
    const unsigned char* src = t.data() + static_cast<std::size_t>(r * cols) * item;
    unsigned char* dst = out.data() + static_cast<std::size_t>(r * cols) * item;
    for (index_t p = 0; p < cols; ++p)
      std::memcpy(dst + static_cast<std::size_t>(p) * item, src + static_cast<std::size_t>(permutation[static_cast<std::size_t>(p)]) * item, item);
  }
  return out;
}

/// The MoEfied FFN's output error on x against the dense FFN's: token t runs the top_k experts whose router
/// rows score highest (x_t . row, ties to the lower index), each with weight 1, and the FFN's output is their
/// sum; || y_dense - y_moe ||_F / || y_dense ||_F. With top_k = E it is the dense FFN up to summation order.
double moefy_error(const moecomp::host_context& ctx, const moecomp::moe::ffn_params& params,
                   const moecomp::moe::ffn_expert_view<float>& dense, const std::vector<float>& w1,
                   const std::vector<float>& w3, const std::vector<float>& w2, moecomp::matrix_view<const float> router,
                   index_t top_k, moecomp::matrix_view<const float> x) {
  using namespace moecomp;
  if (x.rows() == 0) return std::numeric_limits<double>::quiet_NaN();
  const index_t T = x.rows(), H = x.cols(), E = router.rows(), S = dense.w1.rows() / E;
  host_matrix<float> y(T, H), z(T, H), scores(T, E);
  moe::ffn_forward<float>(ctx, params, dense, x, y.view());
  moe::router_logits<float>(ctx, x, router, vector_view<const float>(), scores.view());
  // Each token's top_k experts by raw score, ties to the lower index: moecomp's top-k rule.
  gating::routing_params routing;
  routing.rule = gating::routing_rule::top_k;
  routing.scores = gating::score_function::none;
  routing.top_k = top_k;
  host_matrix<std::int64_t> ids(T, top_k);
  host_matrix<float> weights(T, top_k);
  gating::route_fixed<float>(ctx, routing, scores.const_view(), vector_view<const float>(), ids.view(), weights.view());
  std::vector<std::vector<index_t>> tokens(static_cast<std::size_t>(E));
  for (index_t t = 0; t < T; ++t)
    for (index_t k = 0; k < top_k; ++k) tokens[static_cast<std::size_t>(ids(t, k))].push_back(t);
  for (index_t t = 0; t < T; ++t)
    for (index_t k = 0; k < H; ++k) z(t, k) = 0;
  for (index_t e = 0; e < E; ++e) {
    const auto& mine = tokens[static_cast<std::size_t>(e)];
    if (mine.empty()) continue;
    const auto n = static_cast<index_t>(mine.size());
    host_matrix<float> xe(n, H), ye(n, H);
    for (index_t i = 0; i < n; ++i)
      for (index_t k = 0; k < H; ++k) xe(i, k) = x(mine[static_cast<std::size_t>(i)], k);
    moe::ffn_expert_view<float> expert;
    expert.w1 = matrix_view<const float>(w1.data() + e * S * H, S, H, H);
    if (!w3.empty()) expert.w3 = matrix_view<const float>(w3.data() + e * S * H, S, H, H);
    expert.w2 = matrix_view<const float>(w2.data() + e * H * S, H, S, S);
    moe::ffn_forward<float>(ctx, params, expert, xe.const_view(), ye.view());
    for (index_t i = 0; i < n; ++i)
      for (index_t k = 0; k < H; ++k) z(mine[static_cast<std::size_t>(i)], k) += ye(i, k);
  }
  double diff = 0, ref = 0;
  for (index_t t = 0; t < T; ++t)
    for (index_t k = 0; k < H; ++k) {
      const double a = y(t, k), b = z(t, k);
      diff += (a - b) * (a - b);
      ref += a * a;
    }
  return std::sqrt(diff) / std::sqrt(ref);
}

/// compress --method moefy: every dense FFN of a dense checkpoint (a layout with "dense_ffn") split into E
/// equal experts by cluster::moefication_split. The output is the same architecture with each FFN's neurons
/// permuted so that expert e is neurons [e s, (e + 1) s) (a lossless rewrite: the dense model computes the
/// same function), plus per layer the MoEfication router (`PREFIX.moefy.router.weight`, E x H, the centres of
/// the experts' normalised gate rows, in the gate's dtype) and the permutation (`PREFIX.moefy.permutation`,
/// I32: new neuron p is original neuron permutation[p]); config.json's "moecomp_moefy" says how to route.
int compress_moefy(const arguments& args, output_files& outputs, const std::string& model_dir,
                   const std::vector<moecomp::model::checkpoint_layout>& layouts, const std::string& config_text,
                   const moecomp::io::safetensors_checkpoint& checkpoint,
                   std::chrono::steady_clock::time_point started) {
  using namespace moecomp;
  const std::string config_path = (fs::path(model_dir) / "config.json").string();
  const model::dense_model m = model::describe_dense_model(layouts, config_text, checkpoint, config_path);
  const index_t L = static_cast<index_t>(m.layers.size()), F = m.ffn_size, H = m.hidden_size;
  for (const char* o : {"--features", "--linkage", "--merge", "--similarity", "--criterion", "--keep", "--format", "--values"})
    if (args.value(o)) throw usage_error(std::string("option ") + o + ": not a moefy option");
  if (args.flag("--restore-dense")) throw usage_error("option --restore-dense: resmoe only (moefy's output is dense already)");
  if (args.value("--dtype") && args.value_or("--dtype", "") != "float32")
    throw usage_error("option --dtype: compress computes in float32 (weights are stored as the checkpoint's dtype), got '" +
                      args.value_or("--dtype", "") + "'");
  // Experts of 32 neurons unless --experts says otherwise.
  if (!args.value("--experts") && F % 32 != 0)
    throw usage_error("option --experts: required here: the FFN's " + std::to_string(F) +
                      " neurons are not a multiple of 32 (the default expert size)");
  cluster::kmeans_params params;
  params.clusters = args.integer("--experts", F / 32);
  if (params.clusters < 1 || params.clusters > F || F % params.clusters != 0)
    throw usage_error("option --experts: expected a divisor of the FFN's " + std::to_string(F) +
                      " neurons (intermediate size), got " + std::to_string(params.clusters));
  const index_t E = params.clusters, S = F / E;
  const index_t top_k = args.integer("--top-k", std::max<index_t>(1, E / 4));
  if (top_k < 1 || top_k > E)
    throw usage_error("option --top-k: expected 1 to " + std::to_string(E) + " (the experts), got " + std::to_string(top_k));
  params.restarts = args.integer("--n-init", 10);
  if (params.restarts < 1) throw usage_error("option --n-init: expected at least 1, got " + std::to_string(params.restarts));
  params.max_iterations = args.integer("--max-iter", 300);
  if (params.max_iterations < 1)
    throw usage_error("option --max-iter: expected at least 1, got " + std::to_string(params.max_iterations));
  params.seed = static_cast<std::uint64_t>(args.integer("--seed", 0, 0, std::numeric_limits<long long>::max()));
  const std::string calibration_path = calibration_file(args, model_dir);
  std::optional<io::safetensors_file> calibration;
  if (!calibration_path.empty()) calibration.emplace(open_calibration(calibration_path));
  for (const model::dense_layer_names& n : m.layers)
    for (const std::string& name : n.tensor_names()) require_float_dtype(checkpoint.info(name).dtype, name);
  const host_context ctx = make_context(args);
  moe::ffn_params ffn;
  ffn.act = m.activation;

  const std::string staging = outputs.staging_directory();
  progress_display progress(!args.flag("--quiet") && ::isatty(2) != 0, args.flag("--progress") && !args.flag("--quiet"), L);
  io::safetensors_sharded_writer writer(staging, "model");
  json report;
  report["moecomp_version"] = MOECOMP_VERSION_STRING;
  report["method"] = "moefy";
  report["model"] = model_dir;
  report["family"] = m.family;
  report["experts_before"] = 1;
  report["experts_after"] = E;
  json options = json::object();
  options["experts"] = E;
  options["expert_size"] = S;
  options["top_k"] = top_k;
  options["n_init"] = params.restarts;
  options["max_iter"] = params.max_iterations;
  options["seed"] = params.seed;
  options["calibration"] = calibration ? json(calibration_path) : json(nullptr);
  report["options"] = options;
  // The FLOPs model per token (multiply-accumulates; activations and biases left out): the dense FFN costs
  // (2 or 3) H F; the MoEfied one top_k experts of (2 or 3) H S plus the router's H E.
  const double matrices = m.gated ? 3.0 : 2.0;
  json flops;
  flops["dense_ffn_macs_per_token"] = matrices * static_cast<double>(H) * static_cast<double>(F);
  flops["expert_macs_per_token"] = matrices * static_cast<double>(H) * static_cast<double>(S);
  flops["router_macs_per_token"] = static_cast<double>(H) * static_cast<double>(E);
  flops["moe_macs_per_token"] = static_cast<double>(top_k) * flops["expert_macs_per_token"].get<double>() +
                                flops["router_macs_per_token"].get<double>();
  flops["ratio"] = flops["moe_macs_per_token"].get<double>() / flops["dense_ffn_macs_per_token"].get<double>();
  report["flops"] = flops;
  json layers = json::array(), prefixes = json::array();
  std::set<std::string> written;
  double bytes_before = 0, bytes_after = 0, parameters_before = 0;
  {
    for (index_t i = 0; i < L; ++i) {
      const model::dense_layer_names& names = m.layers[static_cast<std::size_t>(i)];
      // The tensor prefix without its final dot ("model.layers.3.mlp"), as resmoe's tensors name it.
      const std::string prefix =
          !names.prefix.empty() && names.prefix.back() == '.' ? names.prefix.substr(0, names.prefix.size() - 1) : names.prefix;
      const auto t0 = std::chrono::steady_clock::now();
      json steps = json::object();
      auto timed = [&](const std::string& step, auto&& work) {
        progress.update(i, prefix, step);
        const auto s0 = std::chrono::steady_clock::now();
        work();
        steps[step] = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
      };
      std::optional<model::dense_ffn_weights<float>> w;
      host_matrix<float> x(0, H);
      timed("loading", [&] {
        w.emplace(model::load_dense_ffn<float>(checkpoint, m, i));
        if (calibration)
          x = calibration_tokens(*calibration, calibration_path, "layers." + std::to_string(names.layer) + ".moe_input",
                                 H, "layer " + prefix);
      });
      const moe::ffn_expert_view<float> dense = w->view();
      std::vector<float> e1(static_cast<std::size_t>(F * H)), e3(m.gated ? e1.size() : 0), e2(e1.size());
      host_matrix<float> router(E, H);
      std::vector<std::int64_t> labels(static_cast<std::size_t>(F));
      std::vector<index_t> permutation(static_cast<std::size_t>(F));
      cluster::kmeans_result split;
      timed("balanced k-means", [&] {
        cluster::dense_ffn_view<float> in;
        in.w1 = dense.w1;
        in.w3 = dense.w3;
        in.w2 = dense.w2;
        cluster::expert_stack_outputs<float> out;
        out.w1 = matrix_stack_view<float>(e1.data(), E, S, H);
        if (m.gated) out.w3 = matrix_stack_view<float>(e3.data(), E, S, H);
        out.w2 = matrix_stack_view<float>(e2.data(), E, H, S);
        out.router = router.view();
        out.labels = make_vector_view(labels.data(), F);
        out.permutation = make_vector_view(permutation.data(), F);
        split = cluster::moefication_split<float>(ctx, params, in, out);
      });
      const auto router_dtype = checkpoint.info(names.gate).dtype;
      round_to_storage(router.storage(), router_dtype);
      double error = 0;
      timed("error", [&] { error = moefy_error(ctx, ffn, dense, e1, e3, e2, router.const_view(), top_k, x.const_view()); });
      if (x.rows() > 0 && !std::isfinite(error))
        throw numerical_failure("compress: FFN " + prefix + ": the split FFN's output error on the calibration tokens is " +
                                (std::isnan(error) ? "nan" : "inf") +
                                " (numerical failure, status numerical_error), nothing was written");
      progress.update(i, prefix, "writing");
      const auto writing_started = std::chrono::steady_clock::now();
      std::vector<owned_tensor> tensors;
      {
        const io::safetensors_tensor gate = checkpoint.tensor(names.gate);
        tensors.push_back({names.gate, gate.dtype(), gate.shape(), permute_rows(gate, permutation)});
        if (m.gated) {
          const io::safetensors_tensor up = checkpoint.tensor(names.up);
          tensors.push_back({names.up, up.dtype(), up.shape(), permute_rows(up, permutation)});
        }
        const io::safetensors_tensor down = checkpoint.tensor(names.down);
        tensors.push_back({names.down, down.dtype(), down.shape(), permute_columns(down, permutation)});
        owned_tensor r{prefix + ".moefy.router.weight", router_dtype, {E, H}, {}};
        append_encoded(router.data(), static_cast<std::size_t>(E * H), router_dtype, r.bytes);
        tensors.push_back(std::move(r));
        owned_tensor p{prefix + ".moefy.permutation", io::safetensors_dtype::i32, {F}, {}};
        p.bytes.resize(static_cast<std::size_t>(F) * 4);
        for (index_t k = 0; k < F; ++k) {
          const auto v = static_cast<std::int32_t>(permutation[static_cast<std::size_t>(k)]);
          std::memcpy(p.bytes.data() + 4 * k, &v, 4);
        }
        tensors.push_back(std::move(p));
      }
      std::vector<io::safetensors_entry> entries;
      double layer_before = 0, layer_after = 0;
      for (const std::string& n : names.tensor_names()) {
        layer_before += static_cast<double>(tensor_bytes(checkpoint, n));
        written.insert(n);
      }
      for (const owned_tensor& t : tensors) {
        entries.push_back({t.name, t.dtype, t.shape, t.bytes.data(), 0});
        layer_after += static_cast<double>(t.bytes.size());
      }
      writer.write_shard(entries, checkpoint.metadata());
      for (const std::string& n : names.tensor_names()) checkpoint.release(n);
      steps["writing"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - writing_started).count();
      const double parameters = matrices * static_cast<double>(F) * static_cast<double>(H);
      std::vector<index_t> sizes(static_cast<std::size_t>(E), 0);
      for (std::int64_t l : labels) ++sizes[static_cast<std::size_t>(l)];
      json record;
      record["layer"] = prefix;
      record["experts"] = E;
      record["expert_size"] = S;
      record["top_k"] = top_k;
      record["output_relative_error"] = std::isnan(error) ? json(nullptr) : json(error);
      record["calibration_tokens"] = x.rows();
      json kmeans;
      kmeans["inertia"] = split.inertia;
      kmeans["iterations"] = split.iterations;
      kmeans["status"] = to_string(split.status);
      kmeans["best_run"] = split.best_run;
      kmeans["assignment_gap"] = split.assignment_gap;
      kmeans["smallest_expert"] = *std::min_element(sizes.begin(), sizes.end());
      kmeans["largest_expert"] = *std::max_element(sizes.begin(), sizes.end());
      record["balanced_kmeans"] = kmeans;
      record["bytes_before"] = layer_before;
      record["bytes_after"] = layer_after;
      record["bits_per_weight"] = 8.0 * layer_after / parameters;
      record["steps_seconds"] = steps;
      record["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      layers.push_back(record);
      prefixes.push_back(prefix);
      bytes_before += layer_before;
      bytes_after += layer_after;
      parameters_before += parameters;
    }
    progress.update(L - 1, "rest", "writing the other tensors");
    std::vector<io::safetensors_entry> rest;
    for (const std::string& n : checkpoint.names())
      if (written.count(n) == 0) rest.push_back(io::safetensors_entry::of(n, checkpoint.tensor(n)));
    if (!rest.empty()) writer.write_shard(rest, checkpoint.metadata());
    writer.finish();
    json config = json::parse(config_text);
    json record;
    record["num_experts"] = E;
    record["expert_size"] = S;
    record["top_k"] = top_k;
    record["router"] = "moefy.router.weight";
    record["permutation"] = "moefy.permutation";
    record["scores"] = "x . router row; top_k experts per token, ties to the lower index, each with weight 1";
    record["layers"] = prefixes;
    record["version"] = MOECOMP_VERSION_STRING;
    config["moecomp_moefy"] = record;
    write_config(staging, config);
    copy_other_files(model_dir, staging);
    progress.finish();
  }
  report["layers"] = layers;
  const json totals = report_totals(bytes_before, bytes_after, parameters_before, started);
  report["totals"] = totals;
  return finish_report(args, outputs, staging, report, [&] {
    std::printf("moecomp compress: moefy, %s (%s), %lld dense FFNs of %lld neurons -> %lld experts of %lld, top-%lld "
                "(%.1f%% of the FFN's multiply-adds)\n",
                model_dir.c_str(), m.family.c_str(), static_cast<long long>(L), static_cast<long long>(F),
                static_cast<long long>(E), static_cast<long long>(S), static_cast<long long>(top_k),
                100.0 * flops["ratio"].get<double>());
    std::printf("%-34s %10s %12s %12s %8s\n", "layer", "error", "MB before", "MB after", "seconds");
    for (const auto& l : layers)
      std::printf("%-34s %10s %12.3f %12.3f %8.2f\n", l["layer"].get<std::string>().c_str(),
                  l["output_relative_error"].is_null() ? "-" : fixed(l["output_relative_error"].get<double>(), 4).c_str(),
                  l["bytes_before"].get<double>() / 1e6, l["bytes_after"].get<double>() / 1e6, l["seconds"].get<double>());
    std::printf("total: %.3f MB -> %.3f MB of FFN tensors (%.2f bits per weight), %.2f s, peak RSS %.1f MB\n",
                bytes_before / 1e6, bytes_after / 1e6, totals["bits_per_weight"].get<double>(),
                totals["seconds"].get<double>(), totals["peak_rss_bytes"].get<double>() / 1e6);
  });
}

// ---------------------------------------------------------------------------------------------- the command

int compress(const arguments& args, output_files& outputs) {
  using namespace moecomp;
  const auto started = std::chrono::steady_clock::now();
  settings s;
  if (!args.value("--method"))
    throw usage_error("option --method: required: hc-smoe, cka-merge, resmoe, prune (MoE checkpoints) or moefy (dense)");
  s.how = parse_method(*args.value("--method"));
  const std::string model_dir = args.positional().empty()
                                    ? default_model_dir(s.how == method::moefy ? "tiny-dense" : "tiny-moe")
                                    : args.positional()[0];
  const auto out_dir = args.value("-o");
  if (!out_dir) throw usage_error("option -o: required: the output directory OUT_DIR");
  if (args.positional().empty()) outputs.add_input(model_dir, "embedded model '" + model_dir + "'");

  // The model: config.json, the checkpoint, the layout.
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec))
    throw usage_error("compress: MODEL_DIR '" + model_dir + "' is not a directory");
  const std::string config_path = (fs::path(model_dir) / "config.json").string();
  if (!fs::is_regular_file(config_path, ec))
    throw usage_error("compress: '" + model_dir + "' has no config.json");
  std::vector<model::checkpoint_layout> layouts;
  if (const auto dir = args.value("--layouts")) {
    layouts = model::read_checkpoint_layouts(*dir);
  } else {
    for (const auto& [name, text] : builtin_layouts())
      layouts.push_back(model::parse_checkpoint_layout(text, "layouts/" + name));
  }
  const std::string config_text = model::read_text_file(config_path);
  const io::safetensors_checkpoint checkpoint = io::open_safetensors_checkpoint(model_dir);
  // A method of the other kind: said in the tool's words before the library's checks.
  std::string model_type;
  const model::model_kind kind = model::kind_of_model(layouts, config_text, &model_type);
  if (s.how == method::moefy && kind == model::model_kind::moe)
    throw usage_error("compress: --method moefy splits dense checkpoints, and '" + model_dir + "' is an MoE model (model_type '" +
                      model_type + "'): use hc-smoe, cka-merge, resmoe or prune");
  if (s.how != method::moefy && kind == model::model_kind::dense)
    throw usage_error("compress: --method " + std::string(method_name(s.how)) + " compresses MoE checkpoints, and '" +
                      model_dir + "' is a dense model (model_type '" + model_type +
                      "'): --method moefy splits its FFNs into experts");
  if (s.how == method::moefy) return compress_moefy(args, outputs, model_dir, layouts, config_text, checkpoint, started);
  for (const char* o : {"--top-k", "--n-init"})
    if (args.value(o)) throw usage_error(std::string("option ") + o + ": moefy only");
  const model::moe_model m = model::describe_moe_model(layouts, config_text, checkpoint, config_path);
  const model::checkpoint_layout* layout = nullptr;
  for (const auto& l : layouts)
    if (l.source == m.layout_source) layout = &l;
  const index_t E = m.num_experts, L = static_cast<index_t>(m.layers.size());
  if (L == 0) throw usage_error("compress: '" + model_dir + "' has no MoE layer under its layout (" + m.family + ")");

  // Options.
  if (s.how == method::resmoe && args.value("--experts"))
    throw usage_error("option --experts: resmoe keeps every expert (as a shared base plus a sparse residual each)");
  // A group-limited router (DeepSeek-V2/V3) routes over n_group equal groups: the methods that drop router rows
  // must leave a count it can route (a multiple of n_group whose kept groups hold top-k experts; V3's group
  // score needs two experts a group). The default is the smallest such count from E/2 up.
  const gating::routing_params routing = model::routing_of(m);
  const bool grouped = (routing.rule == gating::routing_rule::deepseek_v3 ||
                        routing.rule == gating::routing_rule::group_limited_greedy) && routing.n_group > 1;
  auto routable = [&](index_t n) {
    if (!grouped || s.how == method::hc_smoe || s.how == method::resmoe) return true;
    const index_t per_group = n / routing.n_group;
    return n % routing.n_group == 0 && routing.topk_group * per_group >= routing.top_k &&
           (routing.rule != gating::routing_rule::deepseek_v3 || per_group >= 2);
  };
  index_t default_experts = std::max<index_t>(E / 2, m.top_k);
  while (default_experts < E && !routable(default_experts)) ++default_experts;
  s.experts = s.how == method::resmoe ? E : args.integer("--experts", default_experts);
  if (s.experts < 1 || s.experts > E)
    throw usage_error("option --experts: expected 1 to " + std::to_string(E) + " (the model's experts per layer), got " +
                      std::to_string(s.experts));
  if (!routable(s.experts))
    throw usage_error("option --experts: " + std::string(method_name(s.how)) + " leaves the router " +
                      std::to_string(s.experts) + " experts, and its group-limited rule (n_group " +
                      std::to_string(routing.n_group) + ", topk_group " + std::to_string(routing.topk_group) +
                      ", top-k " + std::to_string(routing.top_k) + ") needs a multiple of " +
                      std::to_string(routing.n_group) + " whose " + std::to_string(routing.topk_group) +
                      " kept group(s) hold at least " + std::to_string(routing.top_k) + " experts" +
                      (routing.rule == gating::routing_rule::deepseek_v3 ? " (and 2 or more experts a group)" : "") +
                      "; for example --experts " + std::to_string(default_experts));
  if (s.how != method::hc_smoe && s.experts < m.top_k)
    throw usage_error("option --experts: " + std::string(method_name(s.how)) + " leaves the router " +
                      std::to_string(s.experts) + " experts, fewer than the model's top-k (" + std::to_string(m.top_k) +
                      ")");
  s.seed = static_cast<std::uint64_t>(args.integer("--seed", 0, 0, std::numeric_limits<long long>::max()));
  s.calibration = calibration_file(args, model_dir);
  const bool calibrated = !s.calibration.empty();
  if (s.how == method::hc_smoe) {
    s.features = choose(args, "--features", {"outputs", "router-logits", "weights"}, calibrated ? "outputs" : "weights");
    s.linkage = cluster::parse_linkage_method(args.value_or("--linkage", "average"));
    const std::string merge = choose(args, "--merge", {"frequency", "average", "fix-dom"}, calibrated ? "frequency" : "average");
    s.merge = merge::parse_merge_method(merge);
  } else if (s.how == method::cka_merge) {
    s.similarity = choose(args, "--similarity", {"cka", "weights", "surrogate"}, calibrated ? "cka" : "weights");
    s.merge = merge::parse_merge_method(choose(args, "--merge", {"uniform", "dominant", "learned"}, "uniform"));
  } else {
    s.criterion = choose(args, "--criterion", {"frequency", "reap"}, "frequency");
  }
  for (const char* o : {"--keep", "--format", "--values"})
    if (args.value(o) && s.how != method::resmoe) throw usage_error(std::string("option ") + o + ": resmoe only");
  if (args.value("--max-iter") && s.how != method::resmoe) throw usage_error("option --max-iter: resmoe and moefy only");
  if (args.flag("--restore-dense") && s.how != method::resmoe) throw usage_error("option --restore-dense: resmoe only");
  if (s.how == method::resmoe) {
    s.keep = args.number("--keep", 0.25);
    if (!(s.keep > 0 && s.keep <= 1)) throw usage_error("option --keep: expected a fraction in (0, 1], got " + args.value_or("--keep", ""));
    s.format = sparse::parse_sparse_format(args.value_or("--format", "auto"));
    const auto expert_dtype = checkpoint.info(m.layers.front().fused() ? m.layers.front().fused_down
                                                                        : m.layers.front().down.front()).dtype;
    const char* natural = expert_dtype == io::safetensors_dtype::bf16  ? "bf16"
                          : expert_dtype == io::safetensors_dtype::f16 ? "fp16"
                                                                       : "fp32";
    s.values = sparse::parse_value_dtype(args.value_or("--values", natural));
    s.max_iterations = args.integer("--max-iter", 100);
    if (s.max_iterations < 1) throw usage_error("option --max-iter: expected at least 1, got " + std::to_string(s.max_iterations));
    if (s.format == sparse::sparse_format::two_of_four)
      throw usage_error("option --format: 2:4 needs N:M pruning, which compress does not do; use csr16, bitmap or auto");
  }
  if (args.value("--dtype") && args.value_or("--dtype", "") != "float32")
    throw usage_error("option --dtype: compress computes in float32 (weights are stored as the checkpoint's dtype), got '" +
                      args.value_or("--dtype", "") + "'");
  for (const char* o : {"--features", "--linkage"})
    if (args.value(o) && s.how != method::hc_smoe) throw usage_error(std::string("option ") + o + ": hc-smoe only");
  if (args.value("--similarity") && s.how != method::cka_merge) throw usage_error("option --similarity: cka-merge only");
  if (args.value("--criterion") && s.how != method::prune) throw usage_error("option --criterion: prune only");
  if (args.value("--merge") && s.how == method::prune) throw usage_error("option --merge: hc-smoe and cka-merge only");
  // What needs calibration tokens, and says so before any work.
  std::string needs;
  if (s.how == method::hc_smoe && s.features != "weights") needs = "--features " + s.features;
  if (s.how == method::hc_smoe && s.merge != merge::merge_method::average)
    needs = "--merge " + std::string(merge::to_string(s.merge));
  if (s.how == method::cka_merge && s.similarity == "cka") needs = "--similarity cka";
  if (s.how == method::cka_merge && s.merge != merge::merge_method::uniform)
    needs = "--merge " + std::string(merge::to_string(s.merge));
  if (s.how == method::prune) needs = "--criterion " + s.criterion;
  if (!needs.empty() && !calibrated)
    throw usage_error("compress: " + needs + " needs calibration tokens (--calibration FILE with layers.{i}.moe_input); '" +
                      model_dir + "' has no calibration.safetensors");
  std::optional<io::safetensors_file> calibration;
  if (calibrated) calibration.emplace(open_calibration(s.calibration));
  const host_context ctx = make_context(args);

  // The output directory's contents go to the temporary directory that commit() renames.
  const std::string staging = outputs.staging_directory();
  progress_display progress(!args.flag("--quiet") && ::isatty(2) != 0, args.flag("--progress") && !args.flag("--quiet"), L);
  io::safetensors_sharded_writer writer(staging, "model");
  std::optional<io::safetensors_sharded_writer> dense_writer;
  const std::string dense_dir = (fs::path(staging) / "dense").string();
  if (args.flag("--restore-dense")) {
    fs::create_directory(dense_dir);
    dense_writer.emplace(dense_dir, "model");
  }
  json report;
  report["moecomp_version"] = MOECOMP_VERSION_STRING;
  report["method"] = method_name(s.how);
  report["model"] = model_dir;
  report["family"] = m.family;
  report["experts_before"] = E;
  report["experts_after"] = s.experts;
  json options = json::object();
  if (s.how == method::hc_smoe) {
    options["features"] = s.features;
    options["linkage"] = cluster::to_string(s.linkage);
    options["merge"] = merge::to_string(s.merge);
  } else if (s.how == method::cka_merge) {
    options["similarity"] = s.similarity;
    options["merge"] = merge::to_string(s.merge);
  } else if (s.how == method::resmoe) {
    options["keep"] = s.keep;
    options["format"] = sparse::to_string(s.format);
    options["values"] = sparse::to_string(s.values);
    options["max_iter"] = s.max_iterations;
    options["restore_dense"] = args.flag("--restore-dense");
  } else {
    options["criterion"] = s.criterion;
  }
  options["seed"] = s.seed;
  options["calibration"] = calibrated ? json(s.calibration) : json(nullptr);
  report["options"] = options;
  json layers = json::array(), id_maps = json::object();
  std::set<std::string> written;
  double bytes_before = 0, bytes_after = 0, parameters_before = 0;
  {
    for (index_t i = 0; i < L; ++i) {
      const model::moe_layer_names& names = m.layers[static_cast<std::size_t>(i)];
      const std::string layer_name = layer_prefix(names);
      const auto t0 = std::chrono::steady_clock::now();
      progress.update(i, layer_name, "loading");
      json steps = json::object();
      auto lap = [](std::chrono::steady_clock::time_point since) {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
      };
      const model::moe_layer_weights<float> w = model::load_moe_layer<float>(checkpoint, m, i);
      host_matrix<float> x(0, w.d_model);
      if (calibrated)
        x = calibration_tokens(*calibration, s.calibration,
                               (m.layers.front().stack == names.stack ? "" : names.stack + ".") + "layers." +
                                   std::to_string(names.layer) + ".moe_input",
                               w.d_model, "MoE layer " + layer_name);
      steps["loading"] = lap(t0);
      const auto expert_dtype = checkpoint.info(names.fused() ? names.fused_down : names.down[0]).dtype;
      new_layer c = compress_layer(ctx, s, m, w, x.const_view(), progress, i, layer_name, steps, expert_dtype);
      {
        round_to_storage(c.w1, expert_dtype);
        round_to_storage(c.w3, expert_dtype);
        round_to_storage(c.w2, expert_dtype);
        round_to_storage(c.router.storage(), checkpoint.info(names.router).dtype);
        if (!names.router_bias.empty()) round_to_storage(c.router_bias, checkpoint.info(names.router_bias).dtype);
        if (!names.correction_bias.empty())
          round_to_storage(c.correction_bias, checkpoint.info(names.correction_bias).dtype);
      }
      progress.update(i, layer_name, "error");
      const auto error_started = std::chrono::steady_clock::now();
      const double error = layer_error(ctx, m, w, c, x.const_view());
      if (x.rows() > 0 && !std::isfinite(error))
        throw numerical_failure("compress: MoE layer " + layer_name + ": the compressed layer's output error on the " +
                                "calibration tokens is " + (std::isnan(error) ? "nan" : "inf") +
                                " (numerical failure, status numerical_error), nothing was written");
      steps["error"] = lap(error_started);
      progress.update(i, layer_name, "writing");
      const auto writing_started = std::chrono::steady_clock::now();
      // The written layer: the method's tensors, and the input's for what it leaves unchanged (the shared
      // expert; for resmoe also the router). With --restore-dense, the restored experts go to dense/ too.
      const std::vector<owned_tensor> tensors = layer_tensors(checkpoint, names, w, c);
      const bool resmoe = c.resmoe != nullptr;
      std::vector<owned_tensor> resmoe_tensors;
      if (resmoe) resmoe_tensors = resmoe_layer_tensors(layer_name, w, *c.resmoe, expert_dtype);
      auto is_expert = [&](const std::string& n) {
        return std::find(names.gate.begin(), names.gate.end(), n) != names.gate.end() ||
               std::find(names.up.begin(), names.up.end(), n) != names.up.end() ||
               std::find(names.down.begin(), names.down.end(), n) != names.down.end() || n == names.gate_up ||
               n == names.fused_down;
      };
      std::vector<io::safetensors_entry> entries, dense_entries;
      double layer_before = 0, layer_after = 0;
      for (const std::string& n : names.tensor_names()) {
        const auto bytes = static_cast<double>(tensor_bytes(checkpoint, n));
        layer_before += bytes;
        written.insert(n);
        if (is_expert(n)) continue;  // replaced, dropped, or (resmoe) stored as base plus residuals
        const bool replaced = std::any_of(tensors.begin(), tensors.end(), [&](const owned_tensor& t) { return t.name == n; });
        if (!replaced || resmoe) {
          entries.push_back(io::safetensors_entry::of(n, checkpoint.tensor(n)));
          layer_after += bytes;
        }
        if (!replaced) dense_entries.push_back(io::safetensors_entry::of(n, checkpoint.tensor(n)));
      }
      for (const owned_tensor& t : resmoe ? resmoe_tensors : tensors) {
        entries.push_back({t.name, t.dtype, t.shape, t.bytes.data(), 0});
        layer_after += static_cast<double>(t.bytes.size());
      }
      for (const owned_tensor& t : tensors) dense_entries.push_back({t.name, t.dtype, t.shape, t.bytes.data(), 0});
      // HC-SMoE's slots repeat merged experts: the distinct experts are what a deduplicating loader keeps.
      double distinct_after = layer_after;
      if (s.how == method::hc_smoe) {
        const double expert_bytes = static_cast<double>(tensor_bytes(checkpoint, names.fused() ? names.fused_down : names.down[0])) *
                                    (names.fused() ? 1.0 / static_cast<double>(E) : 1.0) * (w.gated ? 3.0 : 2.0);
        distinct_after = layer_after - expert_bytes * static_cast<double>(E - c.stack_experts);
      }
      writer.write_shard(entries, checkpoint.metadata());
      if (dense_writer) dense_writer->write_shard(dense_entries, checkpoint.metadata());
      // The layer's input pages leave the resident set: one layer in memory at a time, as RSS counts it too.
      for (const std::string& n : names.tensor_names()) checkpoint.release(n);
      steps["writing"] = lap(writing_started);
      const double parameters = static_cast<double>(E) * static_cast<double>(w.d_ff) * static_cast<double>(w.d_model) *
                                (w.gated ? 3.0 : 2.0);
      json record;
      record["layer"] = layer_name;
      record["experts"] = static_cast<index_t>(c.slots.size());
      record["distinct_experts"] =
          s.how == method::prune || resmoe ? static_cast<index_t>(c.slots.size()) : c.stack_experts;
      for (auto it = c.record.begin(); it != c.record.end(); ++it) record[it.key()] = it.value();
      record["output_relative_error"] = std::isnan(error) ? json(nullptr) : json(error);
      record["calibration_tokens"] = x.rows();
      record["bytes_before"] = layer_before;
      record["bytes_after"] = distinct_after;
      record["bytes_written"] = layer_after;
      record["bits_per_weight"] = 8.0 * distinct_after / parameters;
      record["steps_seconds"] = steps;
      record["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (c.record.contains("id_map")) id_maps[layer_name] = c.record["id_map"];
      layers.push_back(record);
      bytes_before += layer_before;
      bytes_after += distinct_after;
      parameters_before += parameters;
    }
    progress.update(L - 1, "rest", "writing the other tensors");
    std::vector<io::safetensors_entry> rest;
    for (const std::string& n : checkpoint.names())
      if (written.count(n) == 0) rest.push_back(io::safetensors_entry::of(n, checkpoint.tensor(n)));
    if (!rest.empty()) writer.write_shard(rest, checkpoint.metadata());
    writer.finish();
    if (dense_writer) {
      if (!rest.empty()) dense_writer->write_shard(rest, checkpoint.metadata());
      dense_writer->finish();
    }

    // config.json: the family's expert-count key for the methods that drop router rows, and moecomp's record.
    json config = json::parse(config_text);
    if (s.how != method::hc_smoe) {
      const auto key = layout->config.find("num_experts");
      if (key != layout->config.end()) config[key->second] = s.experts;
    }
    json record;
    record["method"] = method_name(s.how);
    record["experts_before"] = E;
    record["version"] = MOECOMP_VERSION_STRING;
    if (!id_maps.empty()) record["id_maps"] = id_maps;
    if (s.how == method::resmoe) {
      record["keep"] = s.keep;
      record["values"] = sparse::to_string(s.values);
      record["format"] = sparse::to_string(s.format);
      json prefixes = json::array();
      for (const auto& l : layers) prefixes.push_back(l["layer"]);
      record["layers"] = prefixes;
    }
    config["moecomp_compression"] = record;
    write_config(staging, config);
    copy_other_files(model_dir, staging);
    if (dense_writer) {  // an ordinary checkpoint of the restored experts: the input's config, and a record
      json dense_config = json::parse(config_text);
      dense_config["moecomp_compression"] = record;
      dense_config["moecomp_compression"]["restored_dense"] = true;
      write_config(dense_dir, dense_config);
      copy_other_files(model_dir, dense_dir);
    }
    progress.finish();
  }

  report["layers"] = layers;
  const json totals = report_totals(bytes_before, bytes_after, parameters_before, started);
  report["totals"] = totals;
  return finish_report(args, outputs, staging, report, [&] {
    std::printf("moecomp compress: %s, %s (%s), %lld MoE layers, %lld -> %lld experts per layer\n", method_name(s.how),
                model_dir.c_str(), m.family.c_str(), static_cast<long long>(L), static_cast<long long>(E),
                static_cast<long long>(s.experts));
    std::printf("%-34s %9s %10s %12s %12s %8s\n", "layer", "experts", "error", "MB before", "MB after", "seconds");
    for (const auto& l : layers)
      std::printf("%-34s %4lld->%-4lld %10s %12.3f %12.3f %8.2f\n", l["layer"].get<std::string>().c_str(),
                  static_cast<long long>(E), l["distinct_experts"].get<long long>(),
                  l["output_relative_error"].is_null() ? "-" : fixed(l["output_relative_error"].get<double>(), 4).c_str(),
                  l["bytes_before"].get<double>() / 1e6, l["bytes_after"].get<double>() / 1e6, l["seconds"].get<double>());
    std::printf("total: %.3f MB -> %.3f MB of MoE tensors (%.2f bits per weight), %.2f s, peak RSS %.1f MB\n",
                bytes_before / 1e6, bytes_after / 1e6, totals["bits_per_weight"].get<double>(),
                totals["seconds"].get<double>(), totals["peak_rss_bytes"].get<double>() / 1e6);
  });
}

}  // namespace

const command_registration compress_registration{command{
    {"compress",
     "compress a Hugging Face MoE checkpoint layer by layer: HC-SMoE, the CKA merge with router rows, ResMoE, "
     "expert pruning; or split a dense checkpoint's FFNs into experts (moefy)",
     "compress [MODEL_DIR] -o OUT_DIR --method hc-smoe|cka-merge|resmoe|prune|moefy [--experts N] [--calibration FILE] "
     "[--features F] [--linkage L] [--merge M] [--similarity S] [--criterion C] [--seed S] [--layouts DIR] "
     "[--keep F] [--format F] [--values V] [--max-iter N] [--restore-dense] [--top-k K] [--n-init N] "
     "[--report R.json] [--quiet] [--progress] [--json]",
     0,
     1,
     {{"--method", true, "hc-smoe|cka-merge|resmoe|prune (MoE checkpoints), moefy (dense checkpoints) (required)"},
      {"--experts", true,
       "N: experts per MoE layer after compression (default: half, at least top-k); moefy: experts per FFN, a divisor "
       "of its neurons (default: experts of 32 neurons)"},
      {"--calibration", true,
       "FILE.safetensors with layers.{i}.moe_input (T x hidden) per MoE layer (default MODEL_DIR/calibration.safetensors)"},
      {"--features", true, "hc-smoe: outputs|router-logits|weights (default outputs with calibration, else weights)"},
      {"--linkage", true, "hc-smoe: single|complete|average|weighted|ward|centroid|median (default average)"},
      {"--merge", true,
       "hc-smoe: frequency|average|fix-dom (default frequency; average without calibration); cka-merge: "
       "uniform|dominant|learned (default uniform)"},
      {"--similarity", true, "cka-merge: cka|weights|surrogate (default cka with calibration, else weights)"},
      {"--criterion", true, "prune: frequency|reap (default frequency)"},
      {"--seed", true, "seed of moecomp's generator (token caps, partition restarts; default 0)"},
      {"--layouts", true, "DIR: read the checkpoint layouts from DIR/*.json instead of the built-in ones"},
      {"--keep", true, "resmoe: the fraction of each expert's design residual kept, (0, 1] (default 0.25, ResMoE's)"},
      {"--format", true, "resmoe: the residuals' format csr16|bitmap|auto (default auto: the smallest)"},
      {"--values", true, "resmoe: the residuals' values fp32|fp16|bf16 (default: the experts' dtype)"},
      {"--max-iter", true, "resmoe: barycenter iterations (default 100, POT's and ResMoE's); moefy: k-means iterations (default 300)"},
      {"--restore-dense", false, "resmoe: also write OUT_DIR/dense, an ordinary checkpoint of the restored experts"},
      {"--top-k", true, "moefy: experts per token for the router the output records and the report's error (default E/4)"},
      {"--n-init", true, "moefy: balanced k-means runs, the lowest inertia kept (default 10)"},
      {"--report", true, "R.json: also write the report here (it is always in OUT_DIR/compression_report.json)", true},
      {"--quiet", false, "no progress display"},
      {"--progress", false, "progress as one line per step on stderr, also when stderr is not a terminal"}},
     /*output_directory=*/true},
    compress}};

}  // namespace moecomp_cli
