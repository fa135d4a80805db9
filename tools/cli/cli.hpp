#pragma once
// Shared machinery of the moecomp tool: argument parsing, the error convention (exit 2 with one
// "moecomp: error:" line), the output files (checked first, committed together), the numerical-outcome
// rule, --json summaries, timing, resource checks, and loading .npy operands. The contract: docs/cli.md.
#include <moecomp/io/npy.hpp>
#include <moecomp/io/residual_file.hpp>
#include <moecomp/moecomp.hpp>

#include <chrono>
#include <initializer_list>
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

/// A numerical failure found outside conclude() (compress's per-layer checks): exit status 3, one error line,
/// nothing written.
class numerical_failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A rank of a multi-process run that ends because another rank failed first and says so (compress under MPI):
/// exit `status` without a line of its own, so that the run prints one error line.
struct silent_failure {
  int status;
};

/// What a command accepts: options that take a value and flags that do not.
struct option_spec {
  std::string name;  // with the dashes: "--metric", "-o"
  bool takes_value;
  std::string help;     // one line, e.g. "euclidean|sqeuclidean|cosine|correlation (default euclidean)"
  bool output = false;  // its value is an output file (see output_files)
};

struct command_spec {
  std::string name;
  std::string summary;
  std::string usage;  // e.g. "pdist X.npy [--metric M] [-o OUT.npy] [--json]"
  std::size_t min_positional, max_positional;
  std::vector<option_spec> options;  // the common ones (-o, --json, --dtype, --threads) are added for all
  /// -o names a directory that the command writes whole (output_files::stage_in_directory), not a file.
  bool output_directory = false;
};

/// Parsed command line of one command.
class arguments {
 public:
  arguments(const command_spec& spec, const std::vector<std::string>& argv);  // throws usage_error
  const std::vector<std::string>& positional() const { return positional_; }
  /// Every option given with a value, by name ("--calibration" -> "c.safetensors").
  const std::map<std::string, std::string>& values() const { return values_; }
  bool flag(const std::string& name) const { return flags_.count(name) != 0; }
  std::optional<std::string> value(const std::string& name) const;
  std::string value_or(const std::string& name, const std::string& fallback) const;
  double number(const std::string& name, double fallback) const;         // throws usage_error naming the option
  long long integer(const std::string& name, long long fallback) const;  // throws usage_error naming the option
  /// The integer option `name` in [least, most] (decimal digits, a '-' only where least < 0), else fallback;
  /// usage_error naming the option and the range otherwise. The one parser of integer options.
  long long integer(const std::string& name, long long fallback, long long least, long long most) const;
  /// A comma-separated list of decimal numbers in [least, most] given to `name` (which must have been given),
  /// as number() reads each; usage_error naming the option otherwise.
  std::vector<double> numbers(const std::string& name, double least, double most) const;
  bool help() const { return help_; }

 private:
  std::vector<std::string> positional_;
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> flags_;
  bool help_ = false;
};

/// Which option sets which library parameter ({"--reg", "params.reg"}). The library checks parameter values
/// once; the tool does not check them again, it names the option in the library's message.
struct option_parameter {
  const char* option;
  const char* parameter;
};

/// A library invalid_argument message, with "option --reg: " in front when it is about a parameter that one
/// of `options` sets (the library names parameters "params.<name>"; the one named first wins).
std::string name_the_option(const std::string& message, std::initializer_list<option_parameter> options);

/// The pruning options of prune and residual-encode: --scope matrix|row|column-block|N:M (scope_default when
/// absent), --column-block B, and exactly one of --keep F / --sparsity F (neither for N:M). Returns the
/// parameters (checked by the library later) and the scope's text.
std::pair<moecomp::sparse::prune_params, std::string> prune_options(const arguments& args,
                                                                    const std::string& scope_default);

/// name_the_option for the pruning parameters that prune_options sets.
std::string name_the_prune_option(const std::string& message);

/// Loads a 1-D int32 / int64 array of `rows` entries given to `option` (a row permutation); usage_error
/// naming the option and the file otherwise. Whether it is a permutation is the library's check.
std::vector<moecomp::index_t> load_permutation(const std::string& option, const std::string& path,
                                               moecomp::index_t rows);

/// Computation precision: --dtype if given, else the input's.
enum class precision { float32, float64 };
precision choose_precision(const arguments& args, moecomp::io::npy_dtype input_dtype, const std::string& input_name);

/// Loads a 2-D float array, failing with usage_error naming the file for anything else (wrong ndim, integer
/// dtype, non-finite values when `require_finite`).
template <class T>
moecomp::host_matrix<T> load_float_matrix(const std::string& path, const moecomp::io::npy_array& array,
                                          bool require_finite);

/// A 3-D float array (count x rows x cols, e.g. E experts' outputs or weights) loaded as one stack.
template <class T>
struct loaded_stack {
  moecomp::host_vector<T> values;
  moecomp::index_t count = 0, rows = 0, cols = 0;
  moecomp::matrix_stack_view<const T> view() const {
    return moecomp::make_matrix_stack_view(values.data(), count, rows, cols);
  }
};

/// Loads a 3-D float array, failing with usage_error naming the file for anything else (wrong ndim, integer
/// dtype, non-finite values when `require_finite`); `what` says what the axes are ("E x n x d").
template <class T>
loaded_stack<T> load_float_stack(const std::string& path, const moecomp::io::npy_array& array, bool require_finite,
                                 const std::string& what);

/// Host context from --threads: 0 (default) or any larger count means every CPU this process may run on;
/// counts beyond that are capped there, since more threads than CPUs only add overhead.
moecomp::host_context make_context(const arguments& args);

/// --repeat N (N >= 1, default 1) of the commands that time short computations: the computation runs N times
/// in one process and "seconds" reports the fastest, as the peer scripts time their peers (best of N calls
/// in one process). The outputs are the last run's (every run gives the same).
int repeat_count(const arguments& args);

/// Fails with a usage_error (exit 2) before any work when `bytes` exceed the memory this machine has
/// available (and any address-space limit), naming what needs it and `alternative`, the way out.
void require_memory(double bytes, const std::string& what, const std::string& alternative);

/// Exit status of a numerical failure: the input was valid but the result cannot be trusted.
inline constexpr int exit_numerical_failure = 3;

/// A flat JSON object printed on one line.
class json_summary {
 public:
  json_summary& add(const std::string& key, double value);
  json_summary& add(const std::string& key, long long value);
  json_summary& add(const std::string& key, const std::string& value);
  json_summary& add(const std::string& key, bool value);
  json_summary& add(const std::string& key, const std::vector<long long>& values);
  /// A list of numbers; non-finite entries are written as strings like add(key, double) (and not warned about:
  /// a list's NaN means "not measured", e.g. a merge error without calibration tokens).
  json_summary& add(const std::string& key, const std::vector<double>& values);
  std::string str() const;
  /// "cost is inf", ... for every non-finite number added (conclude warns about each).
  const std::vector<std::string>& non_finite() const { return non_finite_; }

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
  std::vector<std::string> non_finite_;
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

/// The output files of one run (docs/cli.md, "Outputs"). Every output option given is checked before any
/// work: each names its own file (two options naming one file is an error), in a directory that exists,
/// and is not a directory, device, FIFO or socket. stage() writes an output to a temporary file beside its
/// target; commit() renames them all at the end. A run that fails before commit() leaves every target as it
/// was. Temporaries are removed on every exit path, including every catchable terminating signal
/// (install_signal_handlers) and a file-size limit (SIGXFSZ is ignored, so the write fails cleanly).
class output_files {
 public:
  output_files(const command_spec& spec, const arguments& args);  // throws usage_error
  /// The path given to the output option `option`, if it was given.
  std::optional<std::string> path(const std::string& option) const;
  /// Writes `view` for `option` to its temporary file (nothing if the option was not given), stored as
  /// `dtype` if set (float32 <-> float64, streamed).
  template <class View>
  void stage(const std::string& option, View view, std::optional<moecomp::io::npy_dtype> dtype = std::nullopt);
  /// Fails with a usage_error (exit 2) before any work when the file system of `option`'s target has less
  /// than `bytes` free (nothing if the option was not given).
  void require_space(const std::string& option, double bytes) const;
  /// For a command whose -o is a directory (command_spec::output_directory): writes `view` as `name`.npy
  /// into a temporary directory `<target>.moecomp-tmp-<hex>` beside the target (created at the first call;
  /// nothing if -o was not given). commit() renames it into place (an existing target directory is replaced
  /// whole); a run that fails before leaves no partial directory.
  template <class View>
  void stage_in_directory(const std::string& name, View view);
  /// For a command whose -o is a directory: the temporary directory beside the target (created at the first
  /// call), for a command that writes its files there itself. commit() renames it into place; a run that
  /// fails or is interrupted before removes it whole.
  std::string staging_directory();
  /// Writes a residual file for `option` to its temporary file (nothing if the option was not given).
  void stage_residual(const std::string& option, const moecomp::sparse::sparse_matrix_view& m);
  /// Writes `text` for `option` (a report) to its temporary file (nothing if the option was not given).
  void stage_text(const std::string& option, const std::string& text);
  /// An input the command reads that its arguments do not name (compress's default model directory): usage_error
  /// when an output is it, lies inside it, or (a directory output) holds it. The constructor does the same for
  /// the positional arguments and every option value that names an existing path. `what` names it in messages.
  void add_input(const std::string& path, const std::string& what);
  /// Renames the staged directory over its target, then every staged file over its target. A termination
  /// signal that arrives meanwhile takes effect after the last rename (docs/cli.md, "Signals and limits").
  void commit();
  output_files(const output_files&) = delete;
  output_files& operator=(const output_files&) = delete;
  ~output_files();

 private:
  struct output_target {
    std::string option, resolved;  // resolved: absolute, links resolved as far as the path exists
    bool directory;
  };
  std::vector<std::pair<std::string, std::string>> requested_;  // option, path
  std::vector<output_target> targets_;
  std::vector<moecomp::io::staged_file> staged_;
  std::string directory_target_, directory_temporary_;
  int directory_lock_ = -1;  // flock'd descriptor of the staging directory: this run is alive
  void create_temporary_directory();
  void discard_temporary_directory() noexcept;
  void release_directory_lock() noexcept;
};

/// The hooks that let install_signal_handlers' handler remove the temporaries being written.
moecomp::io::temporary_file_hooks temporary_file_hooks();

/// Installs the tool's handlers: every catchable signal whose default ends the process removes the temporary
/// files being written and then ends the process as the signal would; SIGXFSZ is ignored.
void install_signal_handlers();

template <class View>
void output_files::stage(const std::string& option, View view, std::optional<moecomp::io::npy_dtype> dtype) {
  const auto target = path(option);
  if (!target) return;
  moecomp::io::write_options options;
  options.hooks = temporary_file_hooks();
  options.dtype = dtype;
  staged_.push_back(moecomp::io::stage_npy(*target, view, options));
}

template <class View>
void output_files::stage_in_directory(const std::string& name, View view) {
  if (directory_target_.empty()) return;
  if (directory_temporary_.empty()) create_temporary_directory();
  moecomp::io::write_options options;
  options.hooks = temporary_file_hooks();
  staged_.push_back(moecomp::io::stage_npy(directory_temporary_ + "/" + name + ".npy", view, options));
}

/// The one rule for numerical outcomes (docs/cli.md, "Numerical outcomes"), ending every command:
/// - ok: the outputs are committed, the summary printed (--json), exit 0;
/// - iteration_limit or not_converged: the same, plus one "moecomp: warning:" line saying so, exit 0;
/// - numerical_error, unbounded or infeasible: nothing is written, the summary is printed (with its status),
///   one "moecomp: error:" line says what failed and `hint` what to try, exit 3.
/// `summary` gains "status"; `what` names the computation in the messages.
int conclude(const arguments& args, output_files& outputs, json_summary summary, moecomp::status outcome,
             const std::string& what, const std::string& hint);

/// Reads an .npy operand; a missing or malformed file is a usage_error (exit 2) naming the argument.
moecomp::io::npy_array read_operand(const std::string& path);

/// A shape as numpy prints it: "(3, 4)", "(5,)".
std::string shape_text(const std::vector<moecomp::index_t>& shape);

/// load_float_stack of the file given to `option` (which must have been given), finite values required;
/// errors name the option.
template <class T>
loaded_stack<T> load_stack_option(const arguments& args, const std::string& option, const std::string& axes) {
  const std::string path = *args.value(option);
  try {
    return load_float_stack<T>(path, read_operand(path), /*require_finite=*/true, axes);
  } catch (const usage_error& e) {
    throw usage_error("option " + option + ": " + e.what());
  }
}

/// load_float_matrix of the file given to `option` (which must have been given), finite values required.
template <class T>
moecomp::host_matrix<T> load_matrix_option(const arguments& args, const std::string& option) {
  const std::string path = *args.value(option);
  try {
    return load_float_matrix<T>(path, read_operand(path), /*require_finite=*/true);
  } catch (const usage_error& e) {
    throw usage_error("option " + option + ": " + e.what());
  }
}

/// Mixing weights from a --weights file: 1-D float32/float64 of k finite entries >= 0 summing to 1 (within
/// 1e-6); `items` names what they weigh ("clouds", "histograms") in the messages.
std::vector<double> load_weights(const std::string& path, moecomp::index_t k, const std::string& items);

/// One command of the tool. Adding a command is adding one file, command_NAME.cpp, that ends with
///   const command_registration NAME_registration{command{{"name", "summary", "usage", ...}, run_function}};
/// CMake compiles every command_*.cpp, and the registration puts the command in the table at start-up.
struct command {
  command_spec spec;
  int (*run)(const arguments& args, output_files& outputs);
};
struct command_registration {
  explicit command_registration(const command& c);
};
/// Every registered command, by name.
const std::vector<command>& commands();

}  // namespace moecomp_cli
