// moecomp assign C.npy [--maximize] [--method jv|auction] [--epsilon E] [-o COLS.npy] [--json]: linear
// assignment (scipy.optimize.linear_sum_assignment's problem) of the n rows of an n x m cost (n <= m) to
// distinct columns. Output: int64 length n, the column of each row. +inf costs (-inf with --maximize) are
// forbidden pairs; an infeasible problem exits 2 with one error line and writes nothing, as `emd` does.
#include "cli.hpp"

#include <moecomp/ot/auction_assignment.hpp>
#include <moecomp/ot/linear_assignment.hpp>

#include <cmath>
#include <cstdio>
#include <sstream>

namespace moecomp_cli {
namespace {

struct assign_outcome {
  double cost = 0, seconds = 0, gap_bound = 0;
  long long bids = 0, phases = 0;
  moecomp::status status = moecomp::status::ok;
};

template <class T>
assign_outcome run_assign(const arguments& args, const moecomp::io::npy_array& input, const std::string& path,
                          bool auction, moecomp::host_vector<std::int64_t>& cols) {
  using namespace moecomp;
  // Non-finite values are the library's to judge (+inf / -inf are forbidden pairs): require_finite = false.
  const host_matrix<T> c = load_float_matrix<T>(path, input, /*require_finite=*/false);
  const host_context ctx = make_context(args);
  cols = host_vector<std::int64_t>(c.rows());
  assign_outcome out;
  try {
    if (auction) {
      ot::auction_params p;
      p.maximize = args.flag("--maximize");
      p.epsilon_final = args.number("--epsilon", 0.0);
      const stopwatch timer;
      const ot::auction_result r = ot::auction_assignment(ctx, p, c.view(), cols.view());
      out.seconds = timer.seconds();
      out.cost = r.cost;
      out.status = r.status;
      out.gap_bound = r.criterion;
      out.bids = static_cast<long long>(r.iterations);
      out.phases = r.phases;
    } else {
      ot::linear_assignment_params p;
      p.maximize = args.flag("--maximize");
      const stopwatch timer;
      const ot::linear_assignment_result r = ot::linear_assignment(ctx, p, c.view(), cols.view());
      out.seconds = timer.seconds();
      out.cost = r.cost;
      out.status = r.status;
    }
  } catch (const invalid_argument& e) {
    // A parameter the library refused is named by its option; anything else is about the cost file.
    const std::string message = name_the_option(e.what(), {{"--epsilon", "params.epsilon_final"}});
    throw usage_error(message != e.what() ? message : path + ": " + e.what());
  }
  return out;
}

int assign(const arguments& args, output_files& outputs) {
  using namespace moecomp;
  const std::string& path = args.positional()[0];
  const std::string method = args.value_or("--method", "jv");
  if (method != "jv" && method != "auction")
    throw usage_error("option --method: expected jv or auction, got '" + method + "'");
  const bool auction = method == "auction";
  // The value itself is checked by the library (params.epsilon_final); the tool checks only its own rule.
  if (args.value("--epsilon") && !auction) throw usage_error("option --epsilon: only meaningful with --method auction");
  const io::npy_array input = read_operand(path);
  const precision prec = choose_precision(args, input.dtype(), path);
  host_vector<std::int64_t> cols;
  const assign_outcome r = prec == precision::float32 ? run_assign<float>(args, input, path, auction, cols)
                                                      : run_assign<double>(args, input, path, auction, cols);
  // As scipy (ValueError) and `moecomp emd`: a problem without a feasible answer is bad input, so no file.
  if (r.status == status::infeasible)
    throw usage_error(path + ": no feasible assignment: every complete assignment uses a forbidden (" +
                      (args.flag("--maximize") ? "-inf" : "+inf") + ") pair");
  outputs.stage("-o", cols.const_view());
  json_summary summary;
  summary.add("command", std::string("assign"))
      .add("n", static_cast<long long>(cols.size()))
      .add("m", static_cast<long long>(input.ndim() == 2 ? input.shape()[1] : 0))
      .add("method", method)
      .add("maximize", args.flag("--maximize"))
      .add("dtype", std::string(prec == precision::float32 ? "float32" : "float64"))
      .add("cost", r.cost);
  if (auction) summary.add("gap_bound", r.gap_bound).add("bids", r.bids).add("phases", r.phases);
  // A total beyond float64 (the assignment itself is still exact) is "inf" in the JSON, with a warning.
  return conclude(args, outputs, summary.add("seconds", r.seconds), r.status, "assign", "");
}

}  // namespace

const command_registration assign_registration{command{
    {"assign",
     "linear assignment of the rows of an n x m cost (n <= m) to distinct columns (scipy linear_sum_assignment)",
     "assign C.npy [--maximize] [--method jv|auction] [--epsilon E] [-o COLS.npy] [--json]",
     1,
     1,
     {{"--maximize", false, "maximise the total instead of minimising it (-inf then marks forbidden pairs)"},
      {"--method", true, "jv (exact Jonker-Volgenant, default) | auction (epsilon-scaling, within gap_bound)"},
      {"--epsilon", true, "auction: final epsilon (default 0: automatic; exact on integer costs)"}}},
    assign}};

}  // namespace moecomp_cli
