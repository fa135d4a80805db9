#include "cli.hpp"

#include <algorithm>
#include <chrono>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <new>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#endif

namespace moecomp_cli {

namespace {

const std::vector<option_spec>& common_options() {
  static const std::vector<option_spec> options = {
      {"-o", true, "write the main output to this .npy file (atomically: no partial file on failure)", true},
      {"--json", false, "print a one-line JSON summary on stdout"},
      {"--dtype", true, "float32|float64: computation precision (default: the input's)"},
      {"--threads", true, "threads for moecomp's parallel loops (default 0: all)"},
      {"--matmul", true, "exact|bf16: products with bfloat16 weights (default exact; bf16: bfloat16 dot products)"},
  };
  return options;
}

const option_spec* find_option(const command_spec& spec, const std::string& name) {
  for (const auto& o : spec.options)
    if (o.name == name) return &o;
  for (const auto& o : common_options())
    if (o.name == name) return &o;
  return nullptr;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
          out += buffer;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace

arguments::arguments(const command_spec& spec, const std::vector<std::string>& argv) {
  bool options_done = false;
  for (std::size_t k = 0; k < argv.size(); ++k) {
    const std::string& a = argv[k];
    if (!options_done && a == "--") {
      options_done = true;
      continue;
    }
    if (!options_done && (a == "--help" || a == "-h")) {
      help_ = true;
      continue;
    }
    if (!options_done && a.size() > 1 && a[0] == '-' && !(a.size() > 1 && (std::isdigit(static_cast<unsigned char>(a[1])) || a[1] == '.'))) {
      std::string name = a, inline_value;
      bool has_inline = false;
      if (const auto eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
        name = a.substr(0, eq);
        inline_value = a.substr(eq + 1);
        has_inline = true;
      }
      const option_spec* o = find_option(spec, name);
      if (!o) throw usage_error(spec.name + ": unknown option '" + name + "' (see moecomp " + spec.name + " --help)");
      if (!o->takes_value) {
        if (has_inline) throw usage_error(spec.name + ": option " + name + " takes no value");
        if (flags_.count(name)) throw usage_error(spec.name + ": option " + name + " given twice");
        flags_[name] = true;
        continue;
      }
      if (values_.count(name)) throw usage_error(spec.name + ": option " + name + " given twice");
      if (has_inline) {
        values_[name] = inline_value;
      } else {
        if (k + 1 >= argv.size()) throw usage_error(spec.name + ": option " + name + " needs a value");
        values_[name] = argv[++k];
      }
      continue;
    }
    positional_.push_back(a);
  }
  if (help_) return;
  if (positional_.size() < spec.min_positional || positional_.size() > spec.max_positional) {
    std::ostringstream m;
    m << spec.name << ": expected ";
    if (spec.min_positional == spec.max_positional)
      m << spec.min_positional;
    else if (spec.max_positional == static_cast<std::size_t>(-1))
      m << "at least " << spec.min_positional;
    else
      m << spec.min_positional << " to " << spec.max_positional;
    m << " input file(s), got " << positional_.size() << " (usage: moecomp " << spec.usage << ")";
    throw usage_error(m.str());
  }
}

std::optional<std::string> arguments::value(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string arguments::value_or(const std::string& name, const std::string& fallback) const {
  return value(name).value_or(fallback);
}

namespace {

// Numbers are written in decimal, as a person types them: no leading or trailing space, no hex ("0x10"),
// no "inf" or "nan". The parsers of the C library accept all of those; these helpers refuse them first.
bool plain_decimal(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front())) ||
      std::isspace(static_cast<unsigned char>(text.back())))
    return false;
  const std::size_t digits = (text[0] == '-' || text[0] == '+') ? 1 : 0;
  if (text.size() > digits + 1 && text[digits] == '0' && (text[digits + 1] == 'x' || text[digits + 1] == 'X'))
    return false;
  return text.find_first_not_of("+-0123456789.eE") == std::string::npos;
}

/// A bound as a person writes it: 0, 1, 0.5.
std::string number_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

double arguments::number(const std::string& name, double fallback) const {
  const auto v = value(name);
  if (!v) return fallback;
  const std::string& text = *v;
  char* end = nullptr;
  errno = 0;
  const double x = plain_decimal(text) ? std::strtod(text.c_str(), &end) : 0.0;
  const bool parsed = end != nullptr && end == text.c_str() + text.size();
  // ERANGE on a finite non-zero result is a subnormal (1e-320): representable, so accepted. A value that
  // rounds to zero or to infinity is out of range.
  const bool in_range = errno != ERANGE || (std::isfinite(x) && x != 0.0);
  if (!parsed || !std::isfinite(x) || !in_range)
    throw usage_error("option " + name + ": expected a finite decimal number, got '" + text + "'");
  return x;
}

long long arguments::integer(const std::string& name, long long fallback) const {
  return integer(name, fallback, std::numeric_limits<long long>::min(), std::numeric_limits<long long>::max());
}

long long arguments::integer(const std::string& name, long long fallback, long long least, long long most) const {
  const auto v = value(name);
  if (!v) return fallback;
  const std::string& text = *v;
  // Decimal digits, with a minus sign where negatives are allowed: no '+', spaces, hex, exponent or point.
  const std::size_t sign = (!text.empty() && text[0] == '-') ? 1 : 0;
  const bool digits_only = text.size() > sign && text.find_first_not_of("0123456789", sign) == std::string::npos;
  auto range = [&] {
    if (least == std::numeric_limits<long long>::min() && most == std::numeric_limits<long long>::max())
      return std::string("a decimal integer");
    if (most == std::numeric_limits<long long>::max()) return "a decimal integer >= " + std::to_string(least);
    return "a decimal integer in [" + std::to_string(least) + ", " + std::to_string(most) + "]";
  };
  if (!digits_only) throw usage_error("option " + name + ": expected " + range() + ", got '" + text + "'");
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(text.c_str(), &end, 10);
  if (end != text.c_str() + text.size() || errno == ERANGE || x < least || x > most)
    throw usage_error("option " + name + ": expected " + range() + ", got '" + text + "'");
  return x;
}

std::vector<double> arguments::numbers(const std::string& name, double least, double most) const {
  const std::string text = value_or(name, "");
  std::vector<double> out;
  std::size_t at = 0;
  for (;;) {
    const std::size_t comma = text.find(',', at);
    const std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    char* end = nullptr;
    errno = 0;
    const double x = plain_decimal(item) ? std::strtod(item.c_str(), &end) : 0.0;
    if (end == nullptr || end != item.c_str() + item.size() || !std::isfinite(x) || x < least || x > most)
      throw usage_error("option " + name + ": expected numbers in [" + number_text(least) + ", " + number_text(most) +
                        "] separated by commas, got '" + text + "'");
    out.push_back(x);
    if (comma == std::string::npos) return out;
    at = comma + 1;
  }
}

precision choose_precision(const arguments& args, moecomp::io::npy_dtype input_dtype, const std::string& input_name) {
  if (const auto d = args.value("--dtype")) {
    if (*d == "float32") return precision::float32;
    if (*d == "float64") return precision::float64;
    throw usage_error("option --dtype: expected float32 or float64, got '" + *d + "'");
  }
  switch (input_dtype) {
    case moecomp::io::npy_dtype::float32: return precision::float32;
    case moecomp::io::npy_dtype::float64: return precision::float64;
    default: break;
  }
  throw usage_error(input_name + ": dtype " + moecomp::io::to_string(input_dtype) +
                    " is not accepted here, expected float32 or float64");
}

template <class T>
moecomp::host_matrix<T> load_float_matrix(const std::string& path, const moecomp::io::npy_array& array,
                                          bool require_finite) {
  if (array.dtype() != moecomp::io::npy_dtype::float32 && array.dtype() != moecomp::io::npy_dtype::float64)
    throw usage_error(path + ": dtype " + moecomp::io::to_string(array.dtype()) +
                      " is not accepted here, expected float32 or float64");
  if (array.ndim() != 2) {
    std::ostringstream m;
    m << path << ": expected a 2-D array (n x d), got shape (";
    for (std::size_t k = 0; k < array.shape().size(); ++k) m << (k ? ", " : "") << array.shape()[k];
    m << (array.shape().size() == 1 ? ",)" : ")");
    throw usage_error(m.str());
  }
  moecomp::host_matrix<T> m = array.to_matrix<T>();
  if (require_finite) {
    for (moecomp::index_t i = 0; i < m.rows(); ++i)
      for (moecomp::index_t j = 0; j < m.cols(); ++j)
        if (!std::isfinite(m(i, j))) {
          std::ostringstream msg;
          msg << path << ": element (" << i << ", " << j << ") is " << m(i, j) << "; finite values are required";
          throw usage_error(msg.str());
        }
  }
  return m;
}
template moecomp::host_matrix<float> load_float_matrix<float>(const std::string&, const moecomp::io::npy_array&, bool);
template moecomp::host_matrix<double> load_float_matrix<double>(const std::string&, const moecomp::io::npy_array&,
                                                                bool);

template <class T>
loaded_stack<T> load_float_stack(const std::string& path, const moecomp::io::npy_array& array, bool require_finite,
                                 const std::string& what) {
  if (array.dtype() != moecomp::io::npy_dtype::float32 && array.dtype() != moecomp::io::npy_dtype::float64)
    throw usage_error(path + ": dtype " + moecomp::io::to_string(array.dtype()) +
                      " is not accepted here, expected float32 or float64");
  if (array.ndim() != 3)
    throw usage_error(path + ": expected a 3-D array (" + what + "), got shape " + shape_text(array.shape()));
  loaded_stack<T> stack;
  stack.count = array.shape()[0];
  stack.rows = array.shape()[1];
  stack.cols = array.shape()[2];
  stack.values = array.to_flat_vector<T>();
  if (require_finite)
    for (moecomp::index_t q = 0; q < stack.values.size(); ++q)
      if (!std::isfinite(stack.values[q])) {
        const moecomp::index_t plane = stack.rows * stack.cols;
        std::ostringstream msg;
        msg << path << ": element (" << q / plane << ", " << (q % plane) / stack.cols << ", " << q % stack.cols
            << ") is " << stack.values[q] << "; finite values are required";
        throw usage_error(msg.str());
      }
  return stack;
}
template loaded_stack<float> load_float_stack<float>(const std::string&, const moecomp::io::npy_array&, bool,
                                                     const std::string&);
template loaded_stack<double> load_float_stack<double>(const std::string&, const moecomp::io::npy_array&, bool,
                                                       const std::string&);

namespace {

// The tool's workspace allocator. Large workspaces (a float copy of a kernel, say) are touched once per run
// of a short-lived process, so their page faults are a visible part of the run time: on Linux they get
// 2 MiB-aligned memory with transparent huge pages requested (as numpy does for its large arrays).
constexpr std::size_t huge_page_bytes = std::size_t(2) << 20;

void* allocate_workspace(std::size_t bytes, std::size_t alignment, void*) {
#if defined(__linux__)
  if (bytes >= huge_page_bytes) {
    void* p = nullptr;
    if (posix_memalign(&p, alignment > huge_page_bytes ? alignment : huge_page_bytes, bytes) != 0) throw std::bad_alloc();
    madvise(p, bytes, MADV_HUGEPAGE);  // advice only: failure leaves ordinary pages
    return p;
  }
#endif
  return ::operator new(bytes, std::align_val_t(alignment));
}

void deallocate_workspace(void* pointer, std::size_t bytes, std::size_t alignment, void*) {
#if defined(__linux__)
  if (bytes >= huge_page_bytes) {
    std::free(pointer);
    return;
  }
#endif
  ::operator delete(pointer, std::align_val_t(alignment));
}

}  // namespace

namespace {

/// The CPUs this process may run on (its affinity mask where the system tells), at least 1.
int usable_cpus() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace

namespace {
int threads_used = 0;  // what make_context settled on, for the summary (one context per run)
}  // namespace

int repeat_count(const arguments& args) {
  const long long repeat = args.integer("--repeat", 1);
  if (repeat < 1 || repeat > 1000000)
    throw usage_error("option --repeat: expected an integer in [1, 1000000], got " + std::to_string(repeat));
  return static_cast<int>(repeat);
}

moecomp::host_context make_context(const arguments& args) {
  const long long threads = args.integer("--threads", 0);
  if (threads < 0) throw usage_error("option --threads: expected an integer >= 0, got " + std::to_string(threads));
  const int cpus = usable_cpus();
  threads_used = threads == 0 || threads > cpus ? cpus : static_cast<int>(threads);
  moecomp::host_context ctx(threads_used);
  try {  // the library's parser names the accepted values
    ctx.matmul = moecomp::parse_matmul_precision(args.value("--matmul").value_or("exact"));
  } catch (const moecomp::invalid_argument& e) {
    throw usage_error(std::string("option --matmul: ") + e.what());
  }
#if defined(_OPENMP)
  // Start OpenMP's threads now, so that the commands' "seconds" time the library call and not the
  // process's one-time thread creation (an engine pays it once; torch's pool is warm in the peer scripts).
#pragma omp parallel num_threads(threads_used)
  { (void)0; }
#endif
  ctx.allocator.allocate = allocate_workspace;
  ctx.allocator.deallocate = deallocate_workspace;
  return ctx;
}

json_summary& json_summary::add(const std::string& key, double value) {
  // JSON has no infinity or NaN: those are written as the strings "inf", "-inf" and "nan".
  char buffer[32];
  if (std::isfinite(value))
    std::snprintf(buffer, sizeof buffer, "%.17g", value);
  else
    std::snprintf(buffer, sizeof buffer, "%s", std::isnan(value) ? "\"nan\"" : value > 0 ? "\"inf\"" : "\"-inf\"");
  if (!std::isfinite(value))
    non_finite_.push_back(key + " is " + (std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf"));
  fields_.emplace_back(key, buffer);
  return *this;
}
json_summary& json_summary::add(const std::string& key, long long value) {
  fields_.emplace_back(key, std::to_string(value));
  return *this;
}
json_summary& json_summary::add(const std::string& key, const std::string& value) {
  fields_.emplace_back(key, quote(value));
  return *this;
}
json_summary& json_summary::add(const std::string& key, bool value) {
  fields_.emplace_back(key, value ? "true" : "false");
  return *this;
}
json_summary& json_summary::add(const std::string& key, const std::vector<long long>& values) {
  std::string s = "[";
  for (std::size_t k = 0; k < values.size(); ++k) s += (k ? ", " : "") + std::to_string(values[k]);
  fields_.emplace_back(key, s + "]");
  return *this;
}
json_summary& json_summary::add(const std::string& key, const std::vector<double>& values) {
  std::string s = "[";
  for (std::size_t k = 0; k < values.size(); ++k) {
    char buffer[32];
    const double v = values[k];
    if (std::isfinite(v))
      std::snprintf(buffer, sizeof buffer, "%.17g", v);
    else
      std::snprintf(buffer, sizeof buffer, "%s", std::isnan(v) ? "\"nan\"" : v > 0 ? "\"inf\"" : "\"-inf\"");
    s += (k ? ", " : "") + std::string(buffer);
  }
  fields_.emplace_back(key, s + "]");
  return *this;
}
std::string json_summary::str() const {
  std::string s = "{";
  for (std::size_t k = 0; k < fields_.size(); ++k) s += (k ? ", " : "") + quote(fields_[k].first) + ": " + fields_[k].second;
  return s + "}";
}

void report(const arguments& args, const json_summary& summary) {
  if (args.flag("--json")) std::cout << summary.str() << std::endl;
}

moecomp::io::npy_array read_operand(const std::string& path) {
  try {
    return moecomp::io::read_npy(path);
  } catch (const moecomp::error& e) {
    throw usage_error(e.what());
  }
}

std::string shape_text(const std::vector<moecomp::index_t>& shape) {
  std::ostringstream s;
  s << "(";
  for (std::size_t k = 0; k < shape.size(); ++k) s << (k ? ", " : "") << shape[k];
  s << (shape.size() == 1 ? ",)" : ")");
  return s.str();
}

std::vector<double> load_weights(const std::string& path, moecomp::index_t k, const std::string& items) {
  using namespace moecomp;
  const io::npy_array array = read_operand(path);
  if (array.dtype() != io::npy_dtype::float32 && array.dtype() != io::npy_dtype::float64)
    throw usage_error("option --weights: " + path + ": dtype " + io::to_string(array.dtype()) +
                      " is not accepted here, expected float32 or float64");
  if (array.ndim() != 1 || array.shape()[0] != k)
    throw usage_error("option --weights: " + path + ": expected shape (" + std::to_string(k) + ",) for " +
                      std::to_string(k) + " " + items + ", got shape " + shape_text(array.shape()));
  const host_vector<double> w = array.to_vector<double>();
  double sum = 0.0;
  for (index_t j = 0; j < k; ++j) {
    if (!(std::isfinite(w[j]) && w[j] >= 0.0)) {
      std::ostringstream m;
      m << "option --weights: " << path << ": entries must be finite and >= 0, got " << w[j] << " at index " << j;
      throw usage_error(m.str());
    }
    sum += w[j];
  }
  if (std::abs(sum - 1.0) > 1e-6) {
    std::ostringstream m;
    m.precision(17);
    m << "option --weights: " << path << ": entries must sum to 1 (within 1e-6), got " << sum;
    throw usage_error(m.str());
  }
  return std::vector<double>(w.storage().begin(), w.storage().end());
}

// ---------------------------------------------------------------------------------------------- commands

namespace {
std::vector<command>& command_table() {
  static std::vector<command> table;  // built before main by the command_registration objects
  return table;
}
}  // namespace

command_registration::command_registration(const command& c) {
  std::vector<command>& table = command_table();
  const auto at = std::find_if(table.begin(), table.end(), [&](const command& other) {
    return other.spec.name > c.spec.name;
  });
  table.insert(at, c);
}

const std::vector<command>& commands() { return command_table(); }

// ---------------------------------------------------------------------------------------------- resources

namespace {

/// Bytes of memory available to this process: what the system has available (MemAvailable on Linux, the
/// free physical pages elsewhere), capped by an address-space limit (ulimit -v). Negative if unknown.
double available_memory_bytes() {
  double available = -1.0;
#if defined(__linux__)
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") {
      available = kib * 1024.0;
      break;
    }
  }
#endif
#if defined(_SC_AVPHYS_PAGES) && defined(_SC_PAGESIZE)
  if (available < 0) {
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) available = static_cast<double>(pages) * static_cast<double>(page);
  }
#endif
#if defined(__unix__) || defined(__APPLE__)
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    const double cap = static_cast<double>(limit.rlim_cur);
    available = available < 0 ? cap : std::min(available, cap);
  }
#endif
  return available;
}

std::string gigabytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GB", bytes / 1e9);
  return text;
}

}  // namespace

void require_memory(double bytes, const std::string& what, const std::string& alternative) {
  const double available = available_memory_bytes();
  if (available < 0 || bytes <= available) return;
  throw usage_error(what + " needs about " + gigabytes(bytes) + " of memory and " + gigabytes(available) +
                    " is available" + (alternative.empty() ? "" : "; " + alternative));
}

// ---------------------------------------------------------------------------------------------- outputs

namespace {

// The temporaries being written, for the signal handler: fixed slots, since a handler may not allocate.
// A slot's name is copied before its flag is set and the flag cleared before the slot is reused.
constexpr int temporary_slots = 32;
constexpr std::size_t temporary_name_size = 4096;
char temporary_names[temporary_slots][temporary_name_size];
volatile std::sig_atomic_t temporary_in_use[temporary_slots];

void temporary_creating(const char* path, void*) {
  if (std::strlen(path) >= temporary_name_size) return;  // longer than any path the system accepts
  for (int k = 0; k < temporary_slots; ++k) {
    if (temporary_in_use[k]) continue;
    std::strcpy(temporary_names[k], path);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    temporary_in_use[k] = 1;
    return;
  }
}

void temporary_released(const char* path, void*) {
  for (int k = 0; k < temporary_slots; ++k) {
    if (temporary_in_use[k] && std::strcmp(temporary_names[k], path) == 0) {
      temporary_in_use[k] = 0;
      std::atomic_signal_fence(std::memory_order_seq_cst);
      return;
    }
  }
}

// Where the run is, for the handler (docs/cli.md, "Signals and limits"). One atomic word that the handler and
// commit() change by compare-and-swap, so that exactly one of them decides what a signal does:
// - working: a signal removes every temporary (files and staging directories, whole) and ends the process;
// - committing: the renames are under way; a termination request waits for them (a few system calls) and then
//   ends the process, with the outputs in place;
// - committed: the outputs are in place; a signal ends the process and changes nothing on disk;
// - dying: a handler is removing the temporaries; commit() and any second handler wait for it to end the process.
enum run_phase : int { working = 0, committing = 1, committed = 2, dying = 3 };
std::atomic<int> phase{working};
static_assert(ATOMIC_INT_LOCK_FREE == 2, "the signal handler needs a lock-free atomic int");
volatile std::sig_atomic_t deferred_signal = 0;

bool is_crash(int signal_number) {
  return signal_number == SIGSEGV || signal_number == SIGBUS || signal_number == SIGFPE || signal_number == SIGILL ||
         signal_number == SIGABRT || signal_number == SIGSYS || signal_number == SIGTRAP;
}

#if defined(__linux__)
/// Removes `name` (relative to the directory `parent`), a file or a directory tree, with async-signal-safe
/// system calls only: unlinkat, openat, getdents64, close. The staging directories hold files and at most a
/// few levels of directories (compress's dense/), so the depth is bounded.
void remove_tree_at(int parent, const char* name, int depth) {
  if (::unlinkat(parent, name, 0) == 0 || errno == ENOENT) return;
  if (depth > 8) return;
  const int directory = ::openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (directory < 0) return;
  alignas(8) char buffer[4096];
  for (int pass = 0; pass < 1024; ++pass) {  // entries go while the listing is read: read it again until empty
    bool removed_any = false;
    ::lseek(directory, 0, SEEK_SET);
    long got;
    while ((got = ::syscall(SYS_getdents64, directory, buffer, sizeof buffer)) > 0) {
      for (long offset = 0; offset < got;) {
        // struct linux_dirent64: u64 d_ino, s64 d_off, u16 d_reclen, u8 d_type, char d_name[].
        unsigned short length;
        std::memcpy(&length, buffer + offset + 16, sizeof length);
        const char* entry = buffer + offset + 19;
        offset += length;
        if (entry[0] == '.' && (entry[1] == '\0' || (entry[1] == '.' && entry[2] == '\0'))) continue;
        remove_tree_at(directory, entry, depth + 1);
        removed_any = true;
      }
    }
    if (!removed_any) break;
  }
  ::close(directory);
  ::unlinkat(parent, name, AT_REMOVEDIR);
}
#endif

void remove_temporaries() {
  for (int k = 0; k < temporary_slots; ++k) {
    if (!temporary_in_use[k]) continue;
#if defined(__linux__)
    remove_tree_at(AT_FDCWD, temporary_names[k], 0);
#else
    if (::unlink(temporary_names[k]) != 0) ::rmdir(temporary_names[k]);
#endif
  }
}

/// Writes `text` and the signal's number to stderr with write(2) (async-signal-safe; a failure is ignored).
void say_signal(const char* text, int signal_number) {
  char line[160];
  std::size_t n = 0;
  for (const char* c = "moecomp: error: "; *c; ++c) line[n++] = *c;
  for (const char* c = text; *c && n < 120; ++c) line[n++] = *c;
  char digits[12];
  int d = 0;
  for (int v = signal_number; d == 0 || v > 0; v /= 10) digits[d++] = static_cast<char>('0' + v % 10);
  while (d > 0) line[n++] = digits[--d];
  for (const char* c = "; nothing was written\n"; *c; ++c) line[n++] = *c;
  const ssize_t ignored = ::write(2, line, n);
  (void)ignored;
}

[[noreturn]] void end_by_signal(int signal_number) {
  std::signal(signal_number, SIG_DFL);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, signal_number);
  std::raise(signal_number);
  pthread_sigmask(SIG_UNBLOCK, &only, nullptr);  // the raised signal, pending while the handler runs, ends us here
  for (;;) ::pause();
}

/// Waits for the handler that owns the `dying` phase to end the process.
[[noreturn]] void wait_for_death() {
  for (;;) {
    const timespec second{1, 0};
    ::nanosleep(&second, nullptr);
  }
}

extern "C" void on_fatal_signal(int signal_number) {
  const int saved_errno = errno;
  int expected = working;
  if (phase.compare_exchange_strong(expected, dying)) {
    remove_temporaries();
    say_signal(is_crash(signal_number) ? "internal failure: signal " : "stopped by signal ", signal_number);
    end_by_signal(signal_number);
  }
  if (expected == committing && !is_crash(signal_number)) {  // commit() ends the process once the renames are done
    deferred_signal = signal_number;
    errno = saved_errno;
    return;
  }
  if (expected == dying) wait_for_death();
  end_by_signal(signal_number);  // committed (or a crash while committing): the outputs are as they are
}

/// "-o" and "--duals" or "--duals and --duals-v": the options that name one file, for the message.
std::string option_list(const std::vector<std::string>& options) {
  std::string text;
  for (std::size_t k = 0; k < options.size(); ++k)
    text += (k == 0 ? "" : k + 1 == options.size() ? " and " : ", ") + options[k];
  return text;
}

}  // namespace

moecomp::io::temporary_file_hooks temporary_file_hooks() {
  moecomp::io::temporary_file_hooks hooks;
  hooks.creating = temporary_creating;
  hooks.released = temporary_released;
  return hooks;
}

void install_signal_handlers() {
#if defined(__unix__) || defined(__APPLE__)
  // Every signal whose default action ends the process and that can be caught: the termination requests,
  // the limits (CPU time), and the crashes (a bug, but its temporaries should still go). While the handler
  // runs, all of them are blocked on its thread, so a second one waits for the first.
  const int fatal[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM,
                       SIGPROF, SIGXCPU, SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGSYS, SIGTRAP};
  struct sigaction action {};
  action.sa_handler = on_fatal_signal;
  sigemptyset(&action.sa_mask);
  for (int signal_number : fatal) sigaddset(&action.sa_mask, signal_number);
  for (int signal_number : fatal) sigaction(signal_number, &action, nullptr);
  // Past a file-size limit the write then fails with EFBIG, reported and cleaned up like any failed write.
  std::signal(SIGXFSZ, SIG_IGN);
#else
  for (int signal_number : {SIGINT, SIGTERM}) std::signal(signal_number, on_fatal_signal);
#endif
}

namespace {

void begin_commit() {
  int expected = working;
  if (!phase.compare_exchange_strong(expected, committing)) wait_for_death();  // a handler is ending the run
}

void end_commit() {
  phase.store(committed);
  if (deferred_signal != 0) end_by_signal(deferred_signal);
}

/// A commit that failed: back to working, so that the temporaries left are removed on the way out (and by a
/// signal that came meanwhile).
void abort_commit() {
  phase.store(working);
  if (const int signal_number = deferred_signal; signal_number != 0) on_fatal_signal(signal_number);
}

}  // namespace

namespace {

/// `path` made absolute with its links, "." and ".." resolved as far as it exists.
std::filesystem::path resolved_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path absolute = fs::absolute(path, ec);
  if (ec) return fs::path(path).lexically_normal();
  fs::path canonical = fs::weakly_canonical(absolute, ec);
  return ec ? absolute.lexically_normal() : canonical;
}

/// Whether `inner` lies strictly inside the directory `outer` (both resolved).
bool lies_inside(const std::filesystem::path& inner, const std::filesystem::path& outer) {
  auto i = inner.begin(), o = outer.begin();
  for (; o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // a trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  for (; i != inner.end(); ++i)
    if (!i->empty()) return true;
  return false;
}

bool same_file(const std::filesystem::path& a, const std::filesystem::path& b) {
  std::error_code ec;
  return a == b || std::filesystem::equivalent(a, b, ec);
}

}  // namespace

output_files::output_files(const command_spec& spec, const arguments& args) {
  namespace fs = std::filesystem;
  std::vector<const option_spec*> outputs;
  for (const auto& o : spec.options)
    if (o.output) outputs.push_back(&o);
  for (const auto& o : common_options())
    if (o.output) outputs.push_back(&o);
  std::vector<std::pair<std::string, std::vector<std::string>>> by_file;  // canonical path, options
  if (spec.output_directory) {
    if (const auto given = args.value("-o")) {
      std::string path = *given;
      if (path.empty()) throw usage_error("option -o: expected a directory name, got ''");
      while (path.size() > 1 && path.back() == '/') path.pop_back();  // "out/" names the directory out
      const fs::path normal = fs::path(path).lexically_normal();
      const std::string last = normal.filename().string();
      if (last.empty() || last == "." || last == "..")
        throw usage_error("option -o: expected the name of a directory to create or replace, got '" + *given +
                          "' (a directory is replaced whole: name a new one, such as OUT)");
      std::error_code ec;
      const fs::file_status status = fs::status(path, ec);
      if (fs::exists(status) && !fs::is_directory(status))
        throw usage_error("option -o: '" + path + "' is " + moecomp::io::file_kind_text(status.type()) +
                          ", not a directory; " + spec.name + " writes a directory of .npy files");
      fs::path parent = normal.parent_path();
      if (parent.empty()) parent = ".";
      if (!fs::is_directory(fs::status(parent, ec)))
        throw usage_error("option -o: cannot write '" + path + "': directory '" + parent.string() +
                          "' does not exist");
      if (::access(parent.c_str(), W_OK | X_OK) != 0)
        throw usage_error("option -o: cannot write '" + path + "': directory '" + parent.string() +
                          "' is not writable");
      directory_target_ = normal.string();
      targets_.push_back({"-o", resolved_path(directory_target_).string(), true});
    }
  }
  for (const option_spec* o : outputs) {
    if (spec.output_directory && o->name == "-o") continue;
    const auto given = args.value(o->name);
    if (!given) continue;
    const std::string& path = *given;
    if (path.empty()) throw usage_error("option " + o->name + ": expected a file name, got ''");
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (fs::exists(status) && !fs::is_regular_file(status))
      throw usage_error("option " + o->name + ": '" + path + "' is " + moecomp::io::file_kind_text(status.type()) +
                        ", not a regular file; outputs are written only to regular files (leave the option out to "
                        "write nothing)");
    // A file its owner made read-only is not replaced behind their back (numpy.save could not open it).
    if (fs::exists(status) && ::access(path.c_str(), W_OK) != 0)
      throw usage_error("option " + o->name + ": '" + path + "' exists and is not writable (" +
                        std::strerror(errno) + ")");
    fs::path directory = fs::path(path).parent_path();
    if (directory.empty()) directory = ".";
    const fs::file_status directory_status = fs::status(directory, ec);
    if (!fs::exists(directory_status))
      throw usage_error("option " + o->name + ": cannot write '" + path + "': directory '" + directory.string() +
                        "' does not exist");
    if (!fs::is_directory(directory_status))
      throw usage_error("option " + o->name + ": cannot write '" + path + "': '" + directory.string() +
                        "' is not a directory");
    if (::access(directory.c_str(), W_OK | X_OK) != 0)
      throw usage_error("option " + o->name + ": cannot write '" + path + "': directory '" + directory.string() +
                        "' is not writable");
    // One file under two names: the same canonical path (links, "./", ".."), or for files that exist, the
    // same device and inode (hard links).
    const std::string key = resolved_path(path).string();
    auto same = std::find_if(by_file.begin(), by_file.end(), [&](const auto& entry) {
      return same_file(entry.first, key);
    });
    if (same != by_file.end()) {
      same->second.push_back(o->name);
      throw usage_error("options " + option_list(same->second) + " name the same file '" + path +
                        "'; each output needs a file of its own");
    }
    // A file inside the output directory would be replaced with it (or land in its staging copy).
    if (!directory_target_.empty()) {
      const fs::path inside = resolved_path(directory_target_);
      if (same_file(key, inside) || lies_inside(key, inside))
        throw usage_error("option " + o->name + ": '" + path + "' lies inside the output directory -o '" +
                          directory_target_ + "', which is replaced whole; write it elsewhere");
    }
    by_file.push_back({key, {o->name}});
    requested_.emplace_back(o->name, path);
    targets_.push_back({o->name, key, false});
  }
  // Inputs: the positional arguments and the values of the other options that name existing files or
  // directories. No output may be one of them, lie inside an input directory, or (a directory) hold one.
  for (const std::string& p : args.positional()) add_input(p, "input '" + p + "'");
  for (const auto& [name, value] : args.values()) {
    const option_spec* o = find_option(spec, name);
    if (o == nullptr || o->output || value.empty()) continue;
    std::error_code ec;
    if (fs::exists(fs::symlink_status(value, ec))) add_input(value, "option " + name + " '" + value + "'");
  }
}

void output_files::add_input(const std::string& path, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty() || !fs::exists(fs::symlink_status(path, ec))) return;
  const fs::path input = resolved_path(path);
  const bool input_is_directory = fs::is_directory(fs::status(input, ec));
  for (const output_target& t : targets_) {
    const fs::path output(t.resolved);
    const char* kind = t.directory ? "directory" : "file";
    if (same_file(output, input))
      throw usage_error("option " + t.option + ": the output " + kind + " '" + t.resolved + "' is the " + what +
                        "; outputs never replace an input: write to a new " + kind);
    if (input_is_directory && lies_inside(output, input))
      throw usage_error("option " + t.option + ": the output " + kind + " '" + t.resolved + "' lies inside the " +
                        what + "; outputs never go into an input directory: write it elsewhere");
    if (t.directory && lies_inside(input, output))
      throw usage_error("option " + t.option + ": the output directory '" + t.resolved + "' holds the " + what +
                        ", and it is replaced whole; write to a directory that holds no input");
  }
}

std::optional<std::string> output_files::path(const std::string& option) const {
  for (const auto& entry : requested_)
    if (entry.first == option) return entry.second;
  return std::nullopt;
}

void output_files::require_space(const std::string& option, double bytes) const {
  const auto target = path(option);
  if (!target) return;
  namespace fs = std::filesystem;
  fs::path directory = fs::path(*target).parent_path();
  if (directory.empty()) directory = ".";
  std::error_code ec;
  const fs::space_info space = fs::space(directory, ec);
  if (ec || bytes <= static_cast<double>(space.available)) return;
  throw usage_error("option " + option + ": '" + *target + "' needs about " + gigabytes(bytes) + " and its file " +
                    "system has " + gigabytes(static_cast<double>(space.available)) + " free");
}

namespace {
/// 16 hex digits that no other run is likely to pick: the clock mixed with an address.
std::string unique_suffix(std::uint64_t salt) {
  std::uint64_t z = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^ (salt << 16);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(z ^ (z >> 31)));
  return hex;
}
}  // namespace

namespace {

/// Removes the staging directories `<target>.moecomp-tmp-*` that earlier runs left behind when they were
/// killed outright (SIGKILL: the OOM killer, `ulimit -t` with equal soft and hard limits, `kill -9`). A run
/// holds an exclusive lock (flock) on its staging directory while it lives, and the system drops it when the
/// process ends however it ends: a directory whose lock can be taken belongs to no running process.
void remove_stale_staging_directories(const std::string& target) {
  namespace fs = std::filesystem;
  const fs::path t(target);
  fs::path parent = t.parent_path();
  if (parent.empty()) parent = ".";
  const std::string prefix = t.filename().string() + moecomp::io::temporary_file_marker;
  std::error_code ec;
  std::vector<fs::path> stale;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() != prefix.size() + 16 || name.compare(0, prefix.size(), prefix) != 0) continue;
    if (name.find_first_not_of("0123456789abcdef", prefix.size()) != std::string::npos) continue;
    const int fd = ::open(it->path().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;  // not a directory (a file output's temporary), or not ours to open
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) stale.push_back(it->path());
    ::close(fd);
  }
  for (const fs::path& p : stale) fs::remove_all(p, ec);
}

}  // namespace

void output_files::create_temporary_directory() {
  namespace fs = std::filesystem;
  remove_stale_staging_directories(directory_target_);
  for (int attempt = 0; attempt < 16; ++attempt) {
    const std::string candidate =
        directory_target_ + moecomp::io::temporary_file_marker +
        unique_suffix(static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(this)) + static_cast<std::uint64_t>(attempt));
    temporary_creating(candidate.c_str(), nullptr);
    if (::mkdir(candidate.c_str(), 0777) == 0) {
      directory_temporary_ = candidate;
      // Held until the directory is renamed into place or removed: the mark of a live run (above).
      directory_lock_ = ::open(candidate.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (directory_lock_ >= 0) ::flock(directory_lock_, LOCK_EX | LOCK_NB);
      return;
    }
    const int code = errno;
    temporary_released(candidate.c_str(), nullptr);
    if (code != EEXIST)
      throw moecomp::io_error("cannot create the temporary directory '" + candidate + "' for -o '" +
                              directory_target_ + "': " + std::strerror(code));
  }
  throw moecomp::io_error("cannot create a temporary directory beside '" + directory_target_ + "'");
}

std::string output_files::staging_directory() {
  if (directory_target_.empty()) throw usage_error("option -o: an output directory is required");
  if (directory_temporary_.empty()) create_temporary_directory();
  return directory_temporary_;
}

void output_files::discard_temporary_directory() noexcept {
  if (directory_temporary_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(directory_temporary_, ignored);
  temporary_released(directory_temporary_.c_str(), nullptr);
  directory_temporary_.clear();
  release_directory_lock();
}

void output_files::release_directory_lock() noexcept {
  if (directory_lock_ >= 0) ::close(directory_lock_);
  directory_lock_ = -1;
}

output_files::~output_files() {
  staged_.clear();  // each uncommitted file removes its temporary
  discard_temporary_directory();
}

void output_files::stage_residual(const std::string& option, const moecomp::sparse::sparse_matrix_view& m) {
  const auto target = path(option);
  if (!target) return;
  moecomp::io::write_options options;
  options.hooks = temporary_file_hooks();
  staged_.push_back(moecomp::io::stage_residual(*target, m, options));
}

void output_files::stage_text(const std::string& option, const std::string& text) {
  const auto target = path(option);
  if (!target) return;
  moecomp::io::write_options options;
  options.hooks = temporary_file_hooks();
  staged_.push_back(moecomp::io::stage_file_bytes(*target, text.data(), text.size(), options));
}

void output_files::commit() {
  namespace fs = std::filesystem;
  // From here a termination request waits for the renames (docs/cli.md, "Signals and limits").
  begin_commit();
  try {
    // The files inside the staging directory first, then the directory (its rename is the one that can
    // fail: a target in use), then the files beside it (a report), each within its own directory.
    const std::string staging_prefix = directory_temporary_.empty() ? std::string() : directory_temporary_ + "/";
    auto commit_files = [&](bool inside) {
      for (auto& file : staged_)
        if (!file.committed() && (!staging_prefix.empty() && file.path().rfind(staging_prefix, 0) == 0) == inside)
          file.commit();
    };
    if (!directory_temporary_.empty()) commit_files(true);
    if (!directory_temporary_.empty()) {
      // An existing target directory is moved aside, the new one renamed in, the old one removed.
      std::error_code ec;
      std::string old;
      if (fs::exists(fs::symlink_status(directory_target_, ec))) {
        old = directory_target_ + ".moecomp-old-" + unique_suffix(reinterpret_cast<std::uintptr_t>(this));
        fs::rename(directory_target_, old, ec);
        if (ec)
          throw moecomp::io_error("cannot replace the directory '" + directory_target_ + "': " + ec.message());
      }
      fs::rename(directory_temporary_, directory_target_, ec);
      if (ec) {
        std::error_code restore;
        if (!old.empty()) fs::rename(old, directory_target_, restore);
        throw moecomp::io_error("cannot rename '" + directory_temporary_ + "' to '" + directory_target_ +
                                "': " + ec.message());
      }
      temporary_released(directory_temporary_.c_str(), nullptr);
      directory_temporary_.clear();
      release_directory_lock();
      if (!old.empty()) fs::remove_all(old, ec);
    }
    commit_files(false);
    staged_.clear();
  } catch (...) {
    abort_commit();
    throw;
  }
  end_commit();
}

// ---------------------------------------------------------------------------------------------- outcomes

int conclude(const arguments& args, output_files& outputs, json_summary summary, moecomp::status outcome,
             const std::string& what, const std::string& hint) {
  summary.add("status", std::string(moecomp::to_string(outcome)));
  if (threads_used > 0) summary.add("threads", static_cast<long long>(threads_used));
  const bool failed = outcome == moecomp::status::numerical_error || outcome == moecomp::status::unbounded ||
                      outcome == moecomp::status::infeasible;
  if (failed) {
    report(args, summary);
    std::fprintf(stderr, "moecomp: error: %s: numerical failure (status %s), nothing was written%s%s\n", what.c_str(),
                 moecomp::to_string(outcome), hint.empty() ? "" : ": ", hint.c_str());
    return exit_numerical_failure;
  }
  outputs.commit();
  for (const std::string& value : summary.non_finite())
    std::fprintf(stderr, "moecomp: warning: %s: %s (beyond the float64 range)\n", what.c_str(), value.c_str());
  if (outcome != moecomp::status::ok)
    std::fprintf(stderr, "moecomp: warning: %s: stopped before its stopping rule held (status %s)%s%s\n", what.c_str(),
                 moecomp::to_string(outcome), hint.empty() ? "" : "; ", hint.c_str());
  report(args, summary);
  return 0;
}

std::pair<moecomp::sparse::prune_params, std::string> prune_options(const arguments& args,
                                                                    const std::string& scope_default) {
  namespace sparse = moecomp::sparse;
  sparse::prune_params params;
  const std::string scope = args.value_or("--scope", scope_default);
  const auto colon = scope.find(':');
  if (scope == "matrix") {
    params.scope = sparse::prune_scope::matrix;
  } else if (scope == "row") {
    params.scope = sparse::prune_scope::row;
  } else if (scope == "column-block") {
    params.scope = sparse::prune_scope::column_block;
    if (!args.value("--column-block"))
      throw usage_error("option --scope: column-block needs --column-block B (the block width)");
    params.column_block = args.integer("--column-block", 0);
  } else if (colon != std::string::npos && colon > 0 && colon + 1 < scope.size() &&
             scope.find_first_not_of("0123456789:") == std::string::npos &&
             scope.find(':', colon + 1) == std::string::npos) {
    params.scope = sparse::prune_scope::n_of_m;
    params.n = std::atoll(scope.substr(0, colon).c_str());
    params.m = std::atoll(scope.substr(colon + 1).c_str());
  } else {
    throw usage_error("option --scope: expected matrix, row, column-block or N:M (e.g. 2:4), got '" + scope + "'");
  }
  if (params.scope != sparse::prune_scope::column_block && args.value("--column-block"))
    throw usage_error("option --column-block: only with --scope column-block (the scope here is " + scope + ")");
  if (params.scope == sparse::prune_scope::n_of_m) {
    if (args.value("--keep") || args.value("--sparsity"))
      throw usage_error("option --scope: " + scope + " keeps N of every M entries; give no --keep or --sparsity");
  } else {
    if (args.value("--keep") && args.value("--sparsity"))
      throw usage_error("option --keep: give either --keep or --sparsity, not both");
    if (!args.value("--keep") && !args.value("--sparsity"))
      throw usage_error("option --sparsity: one of --sparsity F (the fraction to prune) or --keep F is required");
    if (args.value("--keep")) params.keep = args.number("--keep", -1);
    if (args.value("--sparsity")) params.sparsity = args.number("--sparsity", -1);
  }
  return {params, scope};
}

std::string name_the_prune_option(const std::string& message) {
  return name_the_option(message, {{"--sparsity", "params.sparsity"},
                                   {"--keep", "params.keep"},
                                   {"--column-block", "params.column_block"},
                                   {"--scope", "params.n"},
                                   {"--scope", "params.m"}});
}

std::vector<moecomp::index_t> load_permutation(const std::string& option, const std::string& path,
                                               moecomp::index_t rows) {
  namespace io = moecomp::io;
  io::npy_array array = [&] {
    try {
      return io::read_npy(path);
    } catch (const moecomp::error& e) {
      throw usage_error("option " + option + ": " + e.what());
    }
  }();
  if (array.dtype() != io::npy_dtype::int32 && array.dtype() != io::npy_dtype::int64)
    throw usage_error("option " + option + ": " + path + ": dtype " + io::to_string(array.dtype()) +
                      " is not accepted here, expected int32 or int64");
  if (array.ndim() != 1 || array.shape()[0] != rows)
    throw usage_error("option " + option + ": " + path + ": expected shape (" + std::to_string(rows) +
                      ",) (one entry per row), got " + shape_text(array.shape()));
  const moecomp::host_vector<std::int64_t> values = array.to_vector<std::int64_t>();
  return std::vector<moecomp::index_t>(values.data(), values.data() + values.size());
}

std::string name_the_option(const std::string& message, std::initializer_list<option_parameter> options) {
  // The parameter the message names first is the one it is about ("params.size_max must be >= params.size_min").
  const char* option = nullptr;
  std::size_t earliest = std::string::npos;
  for (const option_parameter& o : options) {
    const std::size_t at = message.find(std::string(o.parameter) + " ");
    if (at < earliest) {
      earliest = at;
      option = o.option;
    }
  }
  return option ? std::string("option ") + option + ": " + message : message;
}

}  // namespace moecomp_cli
