#include "cli.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <new>
#include <sstream>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace moecomp_cli {

namespace {

const std::vector<option_spec>& common_options() {
  static const std::vector<option_spec> options = {
      {"-o", true, "write the main output to this .npy file (atomically: no partial file on failure)"},
      {"--json", false, "print a one-line JSON summary on stdout"},
      {"--dtype", true, "float32|float64: computation precision (default: the input's)"},
      {"--threads", true, "threads for moecomp's parallel loops (default 0: all)"},
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

double arguments::number(const std::string& name, double fallback) const {
  const auto v = value(name);
  if (!v) return fallback;
  std::size_t used = 0;
  double x = 0;
  try {
    x = std::stod(*v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v->size() || !std::isfinite(x))
    throw usage_error("option " + name + ": expected a finite number, got '" + *v + "'");
  return x;
}

long long arguments::integer(const std::string& name, long long fallback) const {
  const auto v = value(name);
  if (!v) return fallback;
  std::size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(*v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v->size()) throw usage_error("option " + name + ": expected an integer, got '" + *v + "'");
  return x;
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

moecomp::host_context make_context(const arguments& args) {
  const long long threads = args.integer("--threads", 0);
  if (threads < 0 || threads > 4096) throw usage_error("option --threads: expected 0..4096, got " + std::to_string(threads));
  moecomp::host_context ctx(static_cast<int>(threads));
  ctx.allocator.allocate = allocate_workspace;
  ctx.allocator.deallocate = deallocate_workspace;
  return ctx;
}

json_summary& json_summary::add(const std::string& key, double value) {
  char buffer[32];
  if (std::isfinite(value))
    std::snprintf(buffer, sizeof buffer, "%.17g", value);
  else
    std::snprintf(buffer, sizeof buffer, "null");
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

}  // namespace moecomp_cli
