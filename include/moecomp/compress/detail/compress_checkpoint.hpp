#pragma once
// A whole MoE checkpoint compressed layer by layer (compress::compress_checkpoint): each layer loaded, compressed,
// measured and written as the next shard in the input's names and dtypes; the other tensors copied; the output's
// config.json built.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/compress/detail/compress_layer.hpp>
#include <moecomp/compress/detail/compress_params.hpp>
#include <moecomp/core/detail/little_endian.hpp>
#include <moecomp/version.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace compress {
namespace detail {

/// A tensor this run computed, stored in the dtype its original had: its encoded bytes, or (borrowed) the
/// address of memory that already holds exactly those bytes (an expert of a bf16 stack written as BF16, or of
/// the input's mapping), which then must outlive the write.
struct owned_tensor {
  std::string name;
  io::safetensors_dtype dtype;
  std::vector<index_t> shape;
  std::vector<unsigned char> bytes;
  const void* borrowed = nullptr;
  std::size_t borrowed_bytes = 0;

  const void* data() const noexcept { return borrowed != nullptr ? borrowed : bytes.data(); }
  std::size_t byte_size() const noexcept { return borrowed != nullptr ? borrowed_bytes : bytes.size(); }
  io::safetensors_entry entry() const { return {name, dtype, shape, data(), 0}; }
};

inline void require_float_dtype(io::safetensors_dtype dtype, const std::string& name) {
  if (!io::is_float_storage(dtype))
    MOECOMP_FAIL(error_kind::io_error, "compress: tensor '", name, "' is stored as ", io::to_string(dtype),
                 "; compress writes merged experts as F32, F64, BF16 or F16 only");
}

inline std::uint64_t tensor_bytes(const io::safetensors_checkpoint& checkpoint, const std::string& name) {
  const auto& info = checkpoint.info(name);
  return info.end - info.begin;
}

/// The layer's tensor prefix ("model.layers.3.block_sparse_moe"): what its router's and first expert's names
/// share, up to the last dot.
inline std::string layer_prefix(const model::moe_layer_names& names) {
  const std::string& a = names.router;
  const std::string& b = names.fused() ? names.gate_up : names.gate.front();
  std::size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  const std::size_t dot = a.rfind('.', n == 0 ? 0 : n - 1);
  return dot == std::string::npos ? names.stack + "." + std::to_string(names.layer) : a.substr(0, dot);
}

/// The layer's tensors in the checkpoint's names and dtypes: router id r of the output uses the names of
/// original expert r (E_out <= E), and holds stack expert slots[r]; the fused layout (E x 2I x H gate and up,
/// E x H x I down) is written as it is read. distinct (hc_smoe's expert_storage::distinct): the stack's experts
/// once each under the names of experts 0 .. S-1, and the slots as the id-map tensor (I64, E_out entries, named
/// by model::expert_map_name).
template <class W>
std::vector<owned_tensor> layer_tensors(const io::safetensors_checkpoint& checkpoint, const model::moe_layer_names& names,
                                        const model::moe_model& m, const model::moe_layer_weights<W>* original,
                                        const compressed_layer& c, bool distinct = false) {
  static_assert(std::is_same_v<W, float> || std::is_same_v<W, bfloat16>, "layer_tensors: W must be float or bfloat16");
  const index_t I = m.expert_size, H = m.hidden_size, matrix = I * H, out_experts = static_cast<index_t>(c.slots.size());
  const bool own_stack = c.own_stack();
  MOECOMP_EXPECTS(!distinct || own_stack, "compress: distinct expert storage needs the layer's own stack");
  MOECOMP_EXPECTS(own_stack || original != nullptr, "compress: a pruned layer is written from its original stack");
  const index_t written_experts = distinct ? c.stack_experts : out_experts;  // expert tensors written
  const moe::ffn_expert_stack_view<W> input = original != nullptr ? original->experts_view() : moe::ffn_expert_stack_view<W>{};
  // Expert r's matrix (1: w1, 3: w3, 2: w2): the layer's own stack (float or bf16), or the original stack's slot
  // (a strided stack or, read in place, a gathered one).
  auto source = [&](int which, index_t r) -> std::pair<const void*, io::safetensors_dtype> {
    const std::int64_t k = distinct ? r : c.slots[static_cast<std::size_t>(r)];
    if (own_stack) {
      if (!c.w1.empty()) return {own_stack_of<float>(c, which).data() + k * matrix, io::safetensors_dtype::f32};
      return {own_stack_of<bfloat16>(c, which).data() + k * matrix, io::safetensors_dtype::bf16};
    }
    const matrix_stack_view<const W>& from = which == 1 ? input.w1 : which == 3 ? input.w3 : input.w2;
    return {from.matrix_ptr(k), io::safetensors_dtype_of<W>::value};
  };
  auto append = [&](int which, index_t r, owned_tensor& t) {
    const auto [from, dtype] = source(which, r);
    const auto count = static_cast<std::size_t>(matrix);
    if (dtype == io::safetensors_dtype::f32)  // a float stack; else a bfloat16 one (W is float or bfloat16)
      io::append_encoded(static_cast<const float*>(from), count, t.dtype, t.bytes);
    else
      io::append_encoded(static_cast<const bfloat16*>(from), count, t.dtype, t.bytes);
  };
  // One expert matrix as its own tensor: borrowed where the source already holds the tensor's bytes (the same
  // dtype on a little-endian host), so that a large layer is not copied once more to be written.
  auto one_matrix = [&](int which, index_t r, owned_tensor& t) {
    const auto [from, dtype] = source(which, r);
    if (dtype == t.dtype && moecomp::detail::host_is_little_endian) {
      t.borrowed = from;
      t.borrowed_bytes = static_cast<std::size_t>(matrix) * io::item_size(dtype);
    } else {
      append(which, r, t);
    }
  };
  std::vector<owned_tensor> out;
  out.reserve(4 + 3 * static_cast<std::size_t>(out_experts));  // add() hands out references: no reallocation
  auto add = [&](const std::string& name, std::vector<index_t> shape) -> owned_tensor& {
    const auto dtype = checkpoint.info(name).dtype;
    require_float_dtype(dtype, name);
    out.push_back({name, dtype, std::move(shape), {}});
    return out.back();
  };
  {
    owned_tensor& r = add(names.router, {out_experts, H});
    io::append_encoded(c.router.data(), static_cast<std::size_t>(out_experts * H), r.dtype, r.bytes);
  }
  if (!names.router_bias.empty()) {
    owned_tensor& b = add(names.router_bias, {out_experts});
    io::append_encoded(c.router_bias.data(), c.router_bias.size(), b.dtype, b.bytes);
  }
  if (!names.correction_bias.empty()) {
    owned_tensor& b = add(names.correction_bias, {out_experts});
    io::append_encoded(c.correction_bias.data(), c.correction_bias.size(), b.dtype, b.bytes);
  }
  if (distinct) {  // the id map: router id r -> stored expert slots[r], little-endian I64
    owned_tensor map{model::expert_map_name(names), io::safetensors_dtype::i64, {out_experts}, {}};
    map.bytes.resize(static_cast<std::size_t>(out_experts) * 8);
    for (index_t r = 0; r < out_experts; ++r)
      moecomp::detail::store_le<std::uint64_t>(map.bytes.data() + 8 * r,
                                               static_cast<std::uint64_t>(c.slots[static_cast<std::size_t>(r)]));
    out.push_back(std::move(map));
  }
  if (names.fused()) {
    owned_tensor& gu = add(names.gate_up, {written_experts, 2 * I, H});
    owned_tensor& down = add(names.fused_down, {written_experts, H, I});
    for (index_t r = 0; r < written_experts; ++r) {
      append(1, r, gu);
      append(3, r, gu);
      append(2, r, down);
    }
    return out;
  }
  for (index_t r = 0; r < written_experts; ++r) {
    const auto u = static_cast<std::size_t>(r);
    owned_tensor& g = add(names.gate[u], {I, H});
    one_matrix(1, r, g);
    if (!names.up.empty()) {
      owned_tensor& up = add(names.up[u], {I, H});
      one_matrix(3, r, up);
    }
    owned_tensor& d = add(names.down[u], {H, I});
    one_matrix(2, r, d);
  }
  return out;
}

/// resmoe's tensors of a layer: the base expert (`PREFIX.resmoe.base.w1/w3/w2.weight`, in the experts' dtype),
/// the permutations (`PREFIX.resmoe.permutations`, I32, E x I) and each expert's residuals
/// (`PREFIX.resmoe.experts.E.w1/w3/w2.residual`: U8, the bytes of a moecomp residual file).
template <class W>
std::vector<owned_tensor> resmoe_layer_tensors(const std::string& prefix, const model::moe_layer_weights<W>& w,
                                               const compressed_layer::resmoe_part& r, io::safetensors_dtype dtype) {
  const index_t E = w.experts, I = w.d_ff, H = w.d_model;
  std::vector<owned_tensor> out;
  const std::string base = prefix + ".resmoe.";
  auto dense = [&](const std::string& name, const std::vector<float>& values, std::vector<index_t> shape) {
    out.push_back({base + name, dtype, std::move(shape), {}});
    io::append_encoded(values.data(), values.size(), dtype, out.back().bytes);
  };
  // resmoe's ablations: center none stores no base (it is zero), mean no permutations (identity).
  if (r.center != resmoe_center::none) {
    dense("base.w1.weight", r.w1, {I, H});
    if (w.gated) dense("base.w3.weight", r.w3, {I, H});
    dense("base.w2.weight", r.w2, {H, I});
  }
  if (r.center == resmoe_center::barycenter) {
    owned_tensor perms{base + "permutations", io::safetensors_dtype::i32, {E, I}, {}};
    perms.bytes.resize(static_cast<std::size_t>(E * I) * 4);
    for (index_t k = 0; k < E * I; ++k) {
      const auto v = static_cast<std::int32_t>(r.permutations.data()[k]);
      std::memcpy(perms.bytes.data() + 4 * k, &v, 4);
    }
    out.push_back(std::move(perms));
  }
  if (r.residual == resmoe_residual::svd) {  // each expert's factors, dense in the residual values' dtype
    const io::safetensors_dtype factors = storage_of(r.values);
    for (index_t e = 0; e < E; ++e) {
      const host_matrix<float>& u = r.svd_u[static_cast<std::size_t>(e)];
      const host_matrix<float>& v = r.svd_v[static_cast<std::size_t>(e)];
      const std::string name = base + "experts." + std::to_string(e) + ".";
      out.push_back({name + "svd.u", factors, {u.rows(), u.cols()}, {}});
      io::append_encoded(u.data(), static_cast<std::size_t>(u.size()), factors, out.back().bytes);
      out.push_back({name + "svd.v", factors, {v.rows(), v.cols()}, {}});
      io::append_encoded(v.data(), static_cast<std::size_t>(v.size()), factors, out.back().bytes);
    }
    return out;
  }
  for (index_t e = 0; e < E; ++e) {
    const auto& res = r.residuals[static_cast<std::size_t>(e)];
    const std::pair<const char*, const sparse::sparse_matrix*> pieces[] = {{"w1", &res.w1}, {"w3", &res.w3}, {"w2", &res.w2}};
    for (const auto& [piece, matrix] : pieces) {
      if (std::string(piece) == "w3" && !w.gated) continue;
      std::vector<std::uint8_t> bytes = io::serialize_residual(matrix->view());
      const auto size = static_cast<index_t>(bytes.size());
      out.push_back({base + "experts." + std::to_string(e) + "." + piece + ".residual", io::safetensors_dtype::u8, {size},
                     std::move(bytes)});
    }
  }
  return out;
}

/// The calibration key of a layer: `layers.{i}.moe_input`, with the stack's name in front for every stack but
/// the first (Switch's decoder: `decoder.layers.{i}.moe_input`).
inline std::string calibration_key(const model::moe_model& m, const model::moe_layer_names& names) {
  return (m.layers.front().stack == names.stack ? "" : names.stack + ".") + "layers." + std::to_string(names.layer) +
         ".moe_input";
}

inline bool stop_requested(const compress_observer& observer) { return observer.stop && observer.stop(); }

/// Marks `result` cancelled when the observer asks to stop; true then.
inline bool stopped(const compress_observer& observer, checkpoint_report& result) {
  if (!stop_requested(observer)) return false;
  result.cancelled = true;
  result.status = moecomp::status::not_converged;
  return true;
}

/// The last shard: every tensor of `checkpoint` not in `written`, unconverted, to `writer` (and `dense_writer`),
/// which are then finished.
inline void write_other_tensors(const io::safetensors_checkpoint& checkpoint, const std::set<std::string>& written,
                                io::safetensors_sharded_writer& writer, io::safetensors_sharded_writer* dense_writer,
                                const compress_observer& observer, index_t layers) {
  if (observer.step) observer.step(layers - 1, layers, "rest", "writing the other tensors");
  std::vector<io::safetensors_entry> rest;
  for (const std::string& n : checkpoint.names())
    if (written.count(n) == 0) rest.push_back(io::safetensors_entry::of(n, checkpoint.tensor(n)));
  for (io::safetensors_sharded_writer* w : {&writer, dense_writer}) {
    if (w == nullptr) continue;
    if (!rest.empty()) w->write_shard(rest, checkpoint.metadata());
    w->finish();
  }
}

/// Global pruning's share of each layer: N x L experts in all, each layer's top-k best first (so every layer can
/// route), then the rest by score over all layers (ties to the lower layer, then the lower expert); each layer's
/// kept experts in increasing order.
inline std::vector<std::vector<std::int64_t>> global_prune_allocation(const std::vector<std::vector<double>>& scores,
                                                                      index_t per_layer, index_t top_k) {
  const auto L = scores.size();
  std::vector<std::vector<std::int64_t>> kept(L);
  std::vector<std::vector<bool>> taken(L);
  struct candidate {
    double score;
    std::size_t layer;
    std::int64_t expert;
  };
  std::vector<candidate> rest;
  for (std::size_t l = 0; l < L; ++l) {
    const std::vector<std::int64_t> first = top_scores(scores[l], top_k);
    taken[l].assign(scores[l].size(), false);
    for (std::int64_t e : first) taken[l][static_cast<std::size_t>(e)] = true;
    kept[l] = first;
    for (std::size_t e = 0; e < scores[l].size(); ++e)
      if (!taken[l][e]) rest.push_back({scores[l][e], l, static_cast<std::int64_t>(e)});
  }
  std::stable_sort(rest.begin(), rest.end(), [](const candidate& a, const candidate& b) { return a.score > b.score; });
  const std::size_t extra = static_cast<std::size_t>(per_layer - top_k) * L;
  for (std::size_t q = 0; q < extra && q < rest.size(); ++q) kept[rest[q].layer].push_back(rest[q].expert);
  for (auto& k : kept) std::sort(k.begin(), k.end());
  return kept;
}

/// Takes the pages of every tensor of layer `names` out of the resident set (safetensors_file::release).
inline void release_layer(const io::safetensors_checkpoint& checkpoint, const model::moe_layer_names& names) {
  for (const std::string& n : names.tensor_names()) checkpoint.release(n);
}

/// Layer i's weights as W: for bfloat16 (bf16-resident) read in place from the checkpoint where it can be
/// (model::map_moe_layer: no copy of the experts), else copied with each tensor's pages released once read.
template <class W>
model::moe_layer_weights<W> read_layer(const io::safetensors_checkpoint& checkpoint, const model::moe_model& m, index_t i,
                                       bool resident) {
  if constexpr (std::is_same_v<W, bfloat16>)
    if (model::can_map_moe_layer<W>(checkpoint, m, i)) return model::map_moe_layer<W>(checkpoint, m, i);
  return model::load_moe_layer<W>(checkpoint, m, i, resident);
}

/// Whether layer `names` is compressed bf16-resident: prune, hc-smoe, cka-merge, m-smoe and resmoe on a layer whose
/// experts are stored as BF16 read them as bfloat16 (in place, no float copy of the input stack) and compute from
/// them (the expert forward widens one expert or panel at a time; merges and resmoe's design rows, barycenter and
/// residuals compute in float, and new experts are rounded once to bf16); the checkpoint written is the same bytes
/// (docs/compress.md, "The pipeline").
inline bool bf16_resident(const io::safetensors_checkpoint& checkpoint, const compress_params& params,
                          const model::moe_layer_names& names) {
  const bool method_reads_bf16 = params.method == method::prune || params.method == method::hc_smoe ||
                                 params.method == method::cka_merge || params.method == method::m_smoe ||
                                 params.method == method::resmoe;
  return method_reads_bf16 &&
         checkpoint.info(names.fused() ? names.fused_down : names.down[0]).dtype == io::safetensors_dtype::bf16;
}

/// The expert weights of one MoE layer of `m` (E experts of 2 or 3 matrices of expert_size x hidden_size).
inline double layer_parameters(const model::moe_model& m, bool gated) {
  return static_cast<double>(m.num_experts) * static_cast<double>(m.expert_size) * static_cast<double>(m.hidden_size) *
         (gated ? 3.0 : 2.0);
}

/// A compressed layer's share of the run's totals (added in layer order, so that any split of the layers over
/// processes gives the same sums).
inline void add_layer_totals(checkpoint_report& result, const layer_report& l, double parameters) {
  result.bytes_before += l.bytes_before;
  result.bytes_after += l.bytes_after;
  result.bytes_written += l.bytes_written;
  result.parameters_before += parameters;
  result.criterion = std::max(result.criterion, std::isnan(l.output_relative_error) ? 0.0 : l.output_relative_error);
}

/// The rest of one layer once it is loaded as W (bfloat16 where bf16_resident, else float): the reference output,
/// the method, the rounding to storage, the error, the written shard and the report's figures. `loaded`'s experts
/// are dropped once a method with its own stack no longer needs them. True when the run must end (stopped, or a
/// non-finite error): `result` says why.
template <class W>
bool compress_loaded_layer(const host_context& ctx, const compress_params& params,
                           const io::safetensors_checkpoint& checkpoint, const model::moe_model& m,
                           const model::moe_layer_names& names, index_t i,
                           std::optional<model::moe_layer_weights<W>>& loaded, const host_matrix<float>& x,
                           io::safetensors_dtype expert_dtype, const step_timer& timed,
                           layer_report& report, const std::vector<std::vector<std::int64_t>>& global_kept,
                           const std::vector<std::vector<double>>& global_scores, const compress_observer& observer,
                           checkpoint_report& result,
                           io::safetensors_sharded_writer& writer, io::safetensors_sharded_writer* dense_writer,
                           std::chrono::steady_clock::time_point t0) {
  const index_t E = m.num_experts;
  const model::moe_layer_weights<W>& w = *loaded;
  const bool gated = w.gated;
  // The original layer's output on the calibration tokens, before the method runs: its forward's buffers (each
  // thread's widened expert) are then never held beside the method's new stack.
  host_matrix<float> y;
  if (x.rows() > 0) timed("reference", [&] { y = layer_output(ctx, m, layer_view(w), nullptr, x.const_view()); });
  // Experts read in place leave the resident set after each pass over them (the kernel could reclaim them anyway:
  // they are the file's clean pages; releasing keeps the peak RSS honest).
  if (w.in_place()) release_layer(checkpoint, names);
  compressed_layer c;
  if (params.global) {
    c = prune_layer(ctx, params, m, layer_view(w), x.const_view(), static_cast<std::uint64_t>(i), timed, report,
                    &global_kept[static_cast<std::size_t>(i)], &global_scores[static_cast<std::size_t>(i)]);
  } else {
    c = compress_layer_host(ctx, params, m, layer_view(w), x.const_view(), expert_dtype, timed, report,
                            static_cast<std::uint64_t>(i));
  }
  if (w.in_place()) release_layer(checkpoint, names);
  round_layer_to_storage(c, expert_dtype, checkpoint.info(names.router).dtype,
                         names.router_bias.empty() ? io::safetensors_dtype::f32 : checkpoint.info(names.router_bias).dtype,
                         names.correction_bias.empty() ? io::safetensors_dtype::f32
                                                       : checkpoint.info(names.correction_bias).dtype);
  if (stopped(observer, result)) return true;
  double error = 0;
  const bool drop_input = c.own_stack();  // the input stack is not written (resmoe's writer reads its shapes only)
  timed("error", [&] {
    // A layer with its own stack frees the input's experts before its own forward, so that the two stacks and a
    // forward's buffers are never held at once.
    if (drop_input) loaded->drop_experts();
    if (x.rows() == 0) {
      error = std::numeric_limits<double>::quiet_NaN();
      return;
    }
    error = relative_output_error(y, layer_output(ctx, m, drop_input ? shared_view(*loaded) : layer_view(*loaded), &c,
                                                  x.const_view()));
  });
  if (x.rows() > 0 && !std::isfinite(error)) {
    result.status = moecomp::status::numerical_error;
    result.failed_layer = report.layer;
    result.criterion = error;
    return true;
  }
  if (stopped(observer, result)) return true;
  timed.announce("writing");
  const auto writing_started = std::chrono::steady_clock::now();
  // The written layer: the method's tensors, and the input's for what it leaves unchanged (the shared
  // expert; for resmoe also the router). With a dense writer, the restored experts go there too.
  // The id-map methods' expert storage (issue 34): distinct writes each merged expert once, with the id map.
  const bool distinct = keeps_router_rows(params) && params.expert_storage == expert_storage::distinct;
  const std::vector<owned_tensor> tensors =
      layer_tensors(checkpoint, names, m, drop_input ? nullptr : &*loaded, c, distinct);
  const bool resmoe = c.resmoe != nullptr;
  std::vector<owned_tensor> resmoe_tensors;
  if (resmoe) resmoe_tensors = resmoe_layer_tensors(report.layer, *loaded, *c.resmoe, expert_dtype);
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
    if (is_expert(n)) continue;  // replaced, dropped, or (resmoe) stored as base plus residuals
    const bool replaced = std::any_of(tensors.begin(), tensors.end(), [&](const owned_tensor& t) { return t.name == n; });
    if (!replaced || resmoe) {
      entries.push_back(io::safetensors_entry::of(n, checkpoint.tensor(n)));
      layer_after += bytes;
    }
    if (!replaced) dense_entries.push_back(io::safetensors_entry::of(n, checkpoint.tensor(n)));
  }
  for (const owned_tensor& t : resmoe ? resmoe_tensors : tensors) {
    entries.push_back(t.entry());
    layer_after += static_cast<double>(t.byte_size());
  }
  for (const owned_tensor& t : tensors) dense_entries.push_back(t.entry());
  // HC-SMoE's slots repeat merged experts: the distinct experts are what a deduplicating loader keeps.
  double distinct_after = layer_after;
  if (keeps_router_rows(params)) {
    const double expert_bytes = static_cast<double>(tensor_bytes(checkpoint, names.fused() ? names.fused_down : names.down[0])) *
                                (names.fused() ? 1.0 / static_cast<double>(E) : 1.0) * (gated ? 3.0 : 2.0);
    // duplicated: the slots beyond the distinct experts; distinct: the id map (I64, E entries).
    distinct_after = distinct ? layer_after - 8.0 * static_cast<double>(E)
                              : layer_after - expert_bytes * static_cast<double>(E - c.stack_experts);
  }
  // Layer i is shard i, whichever process writes it (compress_checkpoint_layers); the other tensors are shard L.
  writer.write_shard_at(static_cast<std::size_t>(i), entries, checkpoint.metadata());
  if (dense_writer != nullptr) dense_writer->write_shard_at(static_cast<std::size_t>(i), dense_entries, checkpoint.metadata());
  // The layer's input pages leave the resident set: one layer in memory at a time, as RSS counts it too.
  release_layer(checkpoint, names);
  report.steps_seconds.emplace_back(
      "writing", std::chrono::duration<double>(std::chrono::steady_clock::now() - writing_started).count());
  const double parameters = layer_parameters(m, gated);
  report.experts = static_cast<index_t>(c.slots.size());
  report.distinct_experts = params.method == method::prune || resmoe ? static_cast<index_t>(c.slots.size()) : c.stack_experts;
  report.output_relative_error = error;
  report.calibration_tokens = x.rows();
  report.bytes_before = layer_before;
  report.bytes_after = distinct_after;
  report.bytes_written = layer_after;
  report.stored_experts = distinct ? c.stack_experts : static_cast<index_t>(c.slots.size());
  if (distinct) report.expert_map_tensor = model::expert_map_name(names);
  report.bits_per_weight = 8.0 * distinct_after / parameters;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  add_layer_totals(result, report, parameters);
  return false;
}

/// compress_checkpoint's (and its parts') checks of the call.
inline void check_checkpoint_call(const char* fn, const compress_params& params, const io::safetensors_checkpoint& checkpoint,
                                  const model::moe_model& m, bool has_dense_writer) {
  MOECOMP_EXPECTS(!splits_dense(params.method), fn, ": params.method must be a method for MoE checkpoints, got ",
                  to_string(params.method), " (compress_dense_checkpoint splits dense ones)");
  MOECOMP_EXPECTS(params.experts >= 1 && params.experts <= m.num_experts, fn,
                  ": params must be resolved (resolved_params), got params.experts ", params.experts);
  MOECOMP_EXPECTS(!params.restore_dense || has_dense_writer, fn, ": params.restore_dense needs a dense_writer");
  check_checkpoint_dtypes(checkpoint, m);
}

/// assign_layers' rule (compress.hpp).
inline std::vector<std::vector<index_t>> assign_layers(const std::vector<std::uint64_t>& bytes, index_t parts) {
  std::vector<index_t> order(bytes.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<index_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) {
    return bytes[static_cast<std::size_t>(a)] > bytes[static_cast<std::size_t>(b)];
  });
  std::vector<std::vector<index_t>> assigned(static_cast<std::size_t>(parts));
  std::vector<std::uint64_t> load(static_cast<std::size_t>(parts), 0);
  for (index_t layer : order) {
    std::size_t lightest = 0;
    for (std::size_t p = 1; p < load.size(); ++p)
      if (load[p] < load[lightest]) lightest = p;
    load[lightest] += bytes[static_cast<std::size_t>(layer)];
    assigned[lightest].push_back(layer);
  }
  for (auto& a : assigned) std::sort(a.begin(), a.end());
  return assigned;
}

/// The report's frame: what every part of a run knows before any layer.
inline checkpoint_report report_frame(const host_context& ctx, const compress_params& params, const model::moe_model& m) {
  checkpoint_report result;
  result.params = params;
  result.matmul = ctx.matmul;
  result.family = m.family;
  result.experts_before = m.num_experts;
  result.experts_after = params.experts;
  return result;
}

/// The MoE layers `layers` (ascending, distinct indices into m.layers) compressed, layer i written as shard i of
/// `writer` (and `dense_writer`). The report holds those layers, in that order, and their totals.
inline checkpoint_report compress_layers_host(const host_context& ctx, const compress_params& params,
                                              const io::safetensors_checkpoint& checkpoint, const model::moe_model& m,
                                              const io::safetensors_file* calibration, const std::vector<index_t>& layers,
                                              io::safetensors_sharded_writer& writer,
                                              io::safetensors_sharded_writer* dense_writer,
                                              const compress_observer& observer) {
  const index_t L = static_cast<index_t>(m.layers.size());
  checkpoint_report result = report_frame(ctx, params, m);
  // Global pruning (HC-SMoE's F-prune and S-prune): every layer's scores first, then the kept experts of each.
  // Each part computes every layer's scores, so that every part allocates the same experts.
  std::vector<std::vector<double>> global_scores;
  std::vector<std::vector<std::int64_t>> global_kept;
  if (params.global) {
    for (index_t i = 0; i < L; ++i) {
      if (stopped(observer, result)) return result;
      const model::moe_layer_names& names = m.layers[static_cast<std::size_t>(i)];
      if (observer.step) observer.step(i, L, layer_prefix(names), "scores");
      const host_matrix<float> x = model::read_calibration_tokens(*calibration, calibration_key(m, names), m.hidden_size);
      const bool resident = bf16_resident(checkpoint, params, names);
      auto scores_as = [&](auto type) {  // the layer read as bfloat16 (resident) or float
        using W = typename decltype(type)::type;
        const auto w = read_layer<W>(checkpoint, m, i, resident);
        return prune_scores(ctx, params, m, layer_view(w), x.const_view());
      };
      global_scores.push_back(resident ? scores_as(moecomp::detail::type_identity<bfloat16>{})
                                       : scores_as(moecomp::detail::type_identity<float>{}));
      release_layer(checkpoint, names);
    }
    global_kept = global_prune_allocation(global_scores, params.experts, m.top_k);
  }
  for (index_t i : layers) {
    const model::moe_layer_names& names = m.layers[static_cast<std::size_t>(i)];
    layer_report report;
    report.layer = layer_prefix(names);
    const step_timer timed(observer, i, L, report.layer, report);
    const auto t0 = std::chrono::steady_clock::now();
    if (stopped(observer, result)) return result;
    timed.announce("loading");
    const bool resident = bf16_resident(checkpoint, params, names);
    const auto expert_dtype = checkpoint.info(names.fused() ? names.fused_down : names.down[0]).dtype;
    // The layer's weights: bfloat16 as stored for the bf16-resident methods (read in place: no copy), else float.
    auto compress_as = [&](auto type) {
      using W = typename decltype(type)::type;
      std::optional<model::moe_layer_weights<W>> loaded(read_layer<W>(checkpoint, m, i, resident));
      host_matrix<float> x(0, m.hidden_size);
      if (calibration != nullptr) x = model::read_calibration_tokens(*calibration, calibration_key(m, names), m.hidden_size);
      report.steps_seconds.emplace_back("loading",
                                        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      return compress_loaded_layer(ctx, params, checkpoint, m, names, i, loaded, x, expert_dtype, timed, report,
                                   global_kept, global_scores, observer, result, writer, dense_writer, t0);
    };
    const bool stop = resident ? compress_as(moecomp::detail::type_identity<bfloat16>{})
                               : compress_as(moecomp::detail::type_identity<float>{});
    if (stop) return result;
    result.layers.push_back(std::move(report));
    result.iterations = static_cast<std::int64_t>(result.layers.size());
  }
  return result;
}

/// The run's end once every MoE layer's shard is written (shards 0 to L - 1, by this writer or adopted from the
/// directory): the other tensors as shard L, the writers finished, the totals from `layers` (every layer's
/// report, in layer order) and config.json's text.
inline checkpoint_report finish_checkpoint_host(const host_context& ctx, const compress_params& params,
                                                const io::safetensors_checkpoint& checkpoint, const model::moe_model& m,
                                                const model::checkpoint_layout& layout, const std::string& config_text,
                                                std::vector<layer_report> layers, io::safetensors_sharded_writer& writer,
                                                io::safetensors_sharded_writer* dense_writer,
                                                const compress_observer& observer) {
  using json = nlohmann::ordered_json;
  const index_t E = m.num_experts, L = static_cast<index_t>(m.layers.size());
  checkpoint_report result = report_frame(ctx, params, m);
  json id_maps = json::object();
  for (const layer_report& l : layers) {
    add_layer_totals(result, l, layer_parameters(m, m.gated));
    if (!l.id_map.empty()) id_maps[l.layer] = l.id_map;
  }
  result.layers = std::move(layers);
  result.iterations = static_cast<std::int64_t>(result.layers.size());
  if (stopped(observer, result)) return result;
  std::set<std::string> written;
  for (index_t i = 0; i < L; ++i) {
    const model::moe_layer_names& names = m.layers[static_cast<std::size_t>(i)];
    for (const std::string& n : names.tensor_names()) written.insert(n);
    for (io::safetensors_sharded_writer* w : {&writer, dense_writer})
      if (w != nullptr && !w->holds_shard(static_cast<std::size_t>(i))) w->adopt_shard(static_cast<std::size_t>(i));
  }
  write_other_tensors(checkpoint, written, writer, dense_writer, observer, L);

  // config.json: the family's expert-count key for the methods that drop router rows, and moecomp's record.
  json config = json::parse(config_text);
  index_t most_experts = 0;
  json per_layer = json::array();
  for (const auto& l : result.layers) {
    most_experts = std::max(most_experts, l.experts);
    per_layer.push_back(l.experts);
  }
  if (!keeps_router_rows(params)) {
    // A global prune's layers differ: config.json holds the largest (one key cannot say more), the record each.
    const auto key = layout.config.find("num_experts");
    if (key != layout.config.end()) config[key->second] = params.global ? most_experts : params.experts;
  }
  json record;
  record["method"] = to_string(params.method);
  record["experts_before"] = E;
  if (params.global) {
    record["global"] = true;
    record["experts_per_layer"] = per_layer;
  }
  record["version"] = MOECOMP_VERSION_STRING;
  if (!id_maps.empty()) record["id_maps"] = id_maps;
  if (keeps_router_rows(params)) {  // expert storage (issue 34): the form written
    record["expert_storage"] = to_string(params.expert_storage);
    result.expert_storage = to_string(params.expert_storage);
  }
  if (params.method == method::resmoe) {
    record["center"] = to_string(params.center);  // resmoe's ablations
    record["residual"] = to_string(params.residual);
    if (params.residual == resmoe_residual::svd) record["rank"] = params.rank;
    record["keep"] = params.keep;
    record["values"] = sparse::to_string(*params.values);
    record["format"] = sparse::to_string(params.format);
    json prefixes = json::array();
    for (const auto& l : result.layers) prefixes.push_back(l.layer);
    record["layers"] = prefixes;
  }
  config["moecomp_compression"] = record;
  result.config_json = config.dump(2) + "\n";
  if (params.restore_dense) {  // an ordinary checkpoint of the restored experts: the input's config, and a record
    json dense_config = json::parse(config_text);
    dense_config["moecomp_compression"] = record;
    dense_config["moecomp_compression"]["restored_dense"] = true;
    result.dense_config_json = dense_config.dump(2) + "\n";
  }
  return result;
}

inline checkpoint_report compress_checkpoint_host(const host_context& ctx, const compress_params& params,
                                                  const io::safetensors_checkpoint& checkpoint, const model::moe_model& m,
                                                  const model::checkpoint_layout& layout, const std::string& config_text,
                                                  const io::safetensors_file* calibration,
                                                  io::safetensors_sharded_writer& writer,
                                                  io::safetensors_sharded_writer* dense_writer,
                                                  const compress_observer& observer) {
  std::vector<index_t> all(m.layers.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<index_t>(i);
  checkpoint_report part = compress_layers_host(ctx, params, checkpoint, m, calibration, all, writer, dense_writer, observer);
  if (part.status != moecomp::status::ok) return part;  // a layer's numerical failure, or stopped
  return finish_checkpoint_host(ctx, params, checkpoint, m, layout, config_text, std::move(part.layers), writer,
                                dense_writer, observer);
}

}  // namespace detail
}  // namespace compress
MOECOMP_NAMESPACE_END
