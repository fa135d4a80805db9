// moecomp dispatch IDS.npy --experts E [--block-size B] [--capacity C] [--repeat N] -o OUT_DIR [--json]: the dispatch plan
// of a T x K routing layout (int32 or int64 expert ids, E for an unused slot): the pairs sorted by expert
// (stable), padded to blocks as vLLM's moe_align_block_size, with an optional per-expert capacity. Writes
// sorted_token_ids.npy, expert_ids.npy, counts.npy, offsets.npy (int64) into OUT_DIR, whole or not at all.
// The contract: docs/cli.md; the semantics: docs/gating.md.
#include "cli.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include <moecomp/gating/dispatch.hpp>

namespace moecomp_cli {
namespace {

int dispatch(const arguments& args, output_files& outputs) {
  using namespace moecomp;
  const std::string& path = args.positional()[0];
  const io::npy_array input = read_operand(path);
  if (input.dtype() != io::npy_dtype::int32 && input.dtype() != io::npy_dtype::int64)
    throw usage_error(path + ": dtype " + io::to_string(input.dtype()) + " is not accepted here, expected int32 or int64");
  if (input.ndim() != 2) throw usage_error(path + ": expected a 2-D array (T x K expert ids), got " + shape_text(input.shape()));
  if (!args.value("--experts")) throw usage_error("option --experts: required (the number of experts E)");
  const index_t experts = args.integer("--experts", 0, 1, std::numeric_limits<std::int32_t>::max());
  gating::dispatch_params params;
  params.block_size = args.integer("--block-size", 1, 1, std::numeric_limits<std::int32_t>::max());
  params.capacity = args.integer("--capacity", 0, 0, std::numeric_limits<long long>::max());
  // The plan's size grows with E and B (each expert's run padded to a whole block): said before allocating.
  {
    const double pairs = static_cast<double>(input.shape()[0]) * static_cast<double>(input.shape()[1]);
    const double chunks = std::ceil(static_cast<double>(input.shape()[0]) /
                                    std::max(1.0, std::floor(16384.0 / std::max<double>(1.0, static_cast<double>(input.shape()[1])))));
    const double padded = pairs + static_cast<double>(experts) * static_cast<double>(params.block_size - 1);
    const double bytes = 8.0 * ((chunks + 3.0) * (static_cast<double>(experts) + 1.0) + 2.0 * padded + 2.0 * pairs);
    require_memory(bytes, "dispatch: the plan of " + std::to_string(experts) + " experts in blocks of " +
                              std::to_string(params.block_size),
                   "lower --experts or --block-size");
  }
  const host_matrix<std::int64_t> ids = input.to_matrix<std::int64_t>();
  const host_context ctx = make_context(args);
  // The plan's storage is sized (and its pages touched) before the clock starts, as an engine reuses one
  // plan from step to step; the clock then times the plan itself.
  gating::dispatch_plan plan;
  if (experts >= 1 && experts <= ids.rows() * ids.cols() + 1 && params.block_size >= 1 && params.block_size <= 4096) {
    const auto pairs = static_cast<std::size_t>(ids.rows() * ids.cols());
    const auto most_padded = pairs + static_cast<std::size_t>(experts) * static_cast<std::size_t>(params.block_size - 1);
    plan.sorted_token_ids.assign(most_padded, 0);
    plan.expert_ids.assign(most_padded / static_cast<std::size_t>(params.block_size) + static_cast<std::size_t>(experts), 0);
    plan.position.assign(pairs, 0);
  }
  double seconds = std::numeric_limits<double>::infinity();
  for (int run = 0, runs = repeat_count(args); run < runs; ++run) {
    const stopwatch timer;
    try {
      gating::make_dispatch_plan(ctx, params, experts, ids.const_view(), plan);
    } catch (const invalid_argument& e) {
      const std::string message = name_the_option(e.what(), {{"--block-size", "params.block_size"},
                                                             {"--capacity", "params.capacity"},
                                                             {"--experts", "experts"}});
      throw usage_error(message != e.what() ? message : path + ": " + e.what());
    }
    seconds = std::min(seconds, timer.seconds());
  }
  auto stage = [&](const char* name, const std::vector<std::int64_t>& v) {
    outputs.stage_in_directory(name, make_vector_view(v.data(), static_cast<index_t>(v.size())));
  };
  stage("sorted_token_ids", plan.sorted_token_ids);
  stage("expert_ids", plan.expert_ids);
  stage("counts", plan.counts);
  stage("offsets", plan.offsets);
  return conclude(args, outputs,
                  json_summary()
                      .add("command", std::string("dispatch"))
                      .add("tokens", static_cast<long long>(ids.rows()))
                      .add("slots", static_cast<long long>(ids.cols()))
                      .add("experts", static_cast<long long>(experts))
                      .add("num_tokens_post_pad", static_cast<long long>(plan.num_tokens_post_pad))
                      .add("dropped", static_cast<long long>(plan.dropped))
                      .add("seconds", seconds),
                  status::ok, "dispatch", "");
}

}  // namespace

const command_registration dispatch_registration{command{
    {"dispatch",
     "The dispatch plan of T x K expert ids: sorted by expert (stable), padded to blocks as vLLM, with capacity",
     "dispatch IDS.npy --experts E [--block-size B] [--capacity C] [--repeat N] -o OUT_DIR [--json]",
     1,
     1,
     {{"--experts", true, "E: the number of experts; the id E marks an unused slot (required)"},
      {"--block-size", true, "B: pad each expert's run to a multiple of B (default 1: no padding)"},
      {"--capacity", true, "C: at most C pairs per expert, earlier tokens first (default 0: no limit)"},
      {"--repeat", true, "N >= 1: build the plan N times, report the fastest in \"seconds\" (default 1)"}},
     /*output_directory=*/true},
    dispatch}};

}  // namespace moecomp_cli
