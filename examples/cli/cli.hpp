#pragma once
// Shared machinery of the moecomp tool: argument parsing, the error convention (exit 2 with one
// "moecomp: error:" line), --json summaries, timing, and loading/saving .npy operands.
#include <moecomp/io/npy.hpp>
#include <moecomp/moecomp.hpp>

#include <chrono>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace moecomp_cli {

/// Bad usage or bad input: exit status 2.
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// What a command accepts: options that take a value and flags that do not.
struct option_spec {
  std::string name;  // with the dashes: "--metric", "-o"
  bool takes_value;
  std::string help;  // one line, e.g. "euclidean|sqeuclidean|cosine|correlation (default euclidean)"
};

struct command_spec {
  std::string name;
  std::string summary;
  std::string usage;  // e.g. "pdist X.npy [--metric M] [-o OUT.npy] [--json]"
  std::size_t min_positional, max_positional;
  std::vector<option_spec> options;  // the common ones (-o, --json, --dtype, --threads) are added for all
};

/// Parsed command line of one command.
class arguments {
 public:
  arguments(const command_spec& spec, const std::vector<std::string>& argv);  // throws usage_error
  const std::vector<std::string>& positional() const { return positional_; }
  bool flag(const std::string& name) const { return flags_.count(name) != 0; }
  std::optional<std::string> value(const std::string& name) const;
  std::string value_or(const std::string& name, const std::string& fallback) const;
  double number(const std::string& name, double fallback) const;         // throws usage_error naming the option
  long long integer(const std::string& name, long long fallback) const;  // throws usage_error naming the option
  bool help() const { return help_; }

 private:
  std::vector<std::string> positional_;
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> flags_;
  bool help_ = false;
};

/// Computation precision: --dtype if given, else the input's.
enum class precision { float32, float64 };
precision choose_precision(const arguments& args, moecomp::io::npy_dtype input_dtype, const std::string& input_name);

/// Loads a 2-D float array, failing with usage_error naming the file for anything else (wrong ndim, integer
/// dtype, non-finite values when `require_finite`).
template <class T>
moecomp::host_matrix<T> load_float_matrix(const std::string& path, const moecomp::io::npy_array& array,
                                          bool require_finite);

/// Host context from --threads (0 = OpenMP default).
moecomp::host_context make_context(const arguments& args);

/// A flat JSON object printed on one line.
class json_summary {
 public:
  json_summary& add(const std::string& key, double value);
  json_summary& add(const std::string& key, long long value);
  json_summary& add(const std::string& key, const std::string& value);
  json_summary& add(const std::string& key, bool value);
  json_summary& add(const std::string& key, const std::vector<long long>& values);
  std::string str() const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

/// Wall time of the algorithm only.
class stopwatch {
 public:
  stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

/// Prints the summary when --json was given.
void report(const arguments& args, const json_summary& summary);

/// Reads an .npy operand; a missing or malformed file is a usage_error (exit 2) naming the argument.
moecomp::io::npy_array read_operand(const std::string& path);

/// A shape as numpy prints it: "(3, 4)", "(5,)".
std::string shape_text(const std::vector<moecomp::index_t>& shape);

/// Mixing weights from a --weights file: 1-D float32/float64 of k finite entries >= 0 summing to 1 (within
/// 1e-6); `items` names what they weigh ("clouds", "histograms") in the messages.
std::vector<double> load_weights(const std::string& path, moecomp::index_t k, const std::string& items);

/// The command table: each command_*.cpp defines one entry.
struct command {
  command_spec spec;
  int (*run)(const arguments& args);
};
const std::vector<command>& commands();

}  // namespace moecomp_cli
