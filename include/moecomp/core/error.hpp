#pragma once
// Errors. Misuse (bad shapes, NaN where forbidden, out-of-range parameters, malformed files) is reported
// through MOECOMP_EXPECTS / MOECOMP_FAIL; numerical outcomes (no convergence, infeasible) are never
// errors: they come back in result structs (see status.hpp).
//
// Overridable, as Eigen's and xtensor's asserts are:
//  * MOECOMP_THROW(kind, message): define before including moecomp to replace the throw; `kind` is one of
//    the error_kind enumerators, `message` a std::string.
//  * Without exceptions (-fno-exceptions or MOECOMP_NO_EXCEPTIONS), the default prints
//    "moecomp: <kind>: <message>" on stderr and calls std::abort(). Define MOECOMP_ERROR_HANDLER(kind,
//    message) (a function-call-like expression) to route it elsewhere; it should not return, and if it
//    does, std::abort() follows.
#include <moecomp/core/config.hpp>

#include <charconv>
#include <cstdint>
#include <string_view>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#if defined(MOECOMP_NO_EXCEPTIONS)
#include <cstdio>
#include <cstdlib>
#endif

MOECOMP_NAMESPACE_BEGIN

enum class error_kind {
  invalid_argument,  // the caller passed something the function cannot accept
  io_error,          // a file could not be opened, read, written, or is malformed
  cuda_error,        // a CUDA runtime or cuBLAS call failed
  logic_error        // an internal invariant broke: a moecomp bug
};

inline const char* to_string(error_kind kind) noexcept {
  switch (kind) {
    case error_kind::invalid_argument: return "invalid argument";
    case error_kind::io_error: return "I/O error";
    case error_kind::cuda_error: return "CUDA error";
    case error_kind::logic_error: return "internal error";
  }
  return "error";
}

/// Base of every exception moecomp throws; `kind()` tells which family it is.
class error : public std::runtime_error {
 public:
  error(error_kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  error_kind kind() const noexcept { return kind_; }

 private:
  error_kind kind_;
};

/// Thrown for bad arguments: the message names the argument and the expected and actual value or shape.
class invalid_argument : public error {
 public:
  explicit invalid_argument(const std::string& message) : error(error_kind::invalid_argument, message) {}
};

/// Thrown for files that cannot be read or written, or whose content is malformed.
class io_error : public error {
 public:
  explicit io_error(const std::string& message) : error(error_kind::io_error, message) {}
};

/// Thrown when a CUDA or cuBLAS call fails (only from the *.cuh device headers).
class cuda_error : public error {
 public:
  explicit cuda_error(const std::string& message) : error(error_kind::cuda_error, message) {}
};

/// Thrown when an internal invariant is broken: please report it.
class logic_error : public error {
 public:
  explicit logic_error(const std::string& message) : error(error_kind::logic_error, message) {}
};

namespace detail {

/// A floating-point value as its shortest text that reads back to the same value ("0.1", "1.0000001",
/// "1e-320"): a message must show the difference between two numbers it says differ.
template <class F>
std::string shortest_text(F value) {
  char text[64];
  const std::to_chars_result written = std::to_chars(text, text + sizeof text, value);
  return std::string(text, written.ptr);
}

/// An unsigned integer in lower-case hexadecimal, without prefix (addresses in messages).
inline std::string hex_text(std::uint64_t value) {
  char text[24];
  const std::to_chars_result written = std::to_chars(text, text + sizeof text, value, 16);
  return std::string(text, written.ptr);
}

/// Appends one message part: text as is, integers in decimal, floating-point values in shortest round-trip
/// form, bool as 1 / 0 (as operator<< would). Written with std::to_chars rather than <sstream>, which every
/// header would otherwise pull in.
template <class T>
void append_message_part(std::string& out, const T& value) {
  using U = std::decay_t<T>;
  if constexpr (std::is_same_v<U, bool>) {
    out += value ? '1' : '0';
  } else if constexpr (std::is_same_v<U, char>) {
    out += value;
  } else if constexpr (std::is_floating_point_v<U>) {
    out += shortest_text(value);
  } else if constexpr (std::is_integral_v<U>) {
    char text[24];
    const std::to_chars_result written = std::to_chars(text, text + sizeof text, value);
    out.append(text, written.ptr);
  } else if constexpr (std::is_convertible_v<const U&, std::string_view>) {
    out += std::string_view(value);
  } else {
    static_assert(std::is_convertible_v<const U&, std::string_view>,
                  "moecomp::detail::concat: message parts are text, integers, floating-point values or bool");
  }
}

/// Concatenates its arguments into one message; floating-point values in shortest round-trip form.
template <class... Args>
std::string concat(const Args&... args) {
  std::string out;
  (append_message_part(out, args), ...);
  return out;
}

#if !defined(MOECOMP_NO_EXCEPTIONS)
[[noreturn]] inline void throw_error(error_kind kind, const std::string& message) {
  switch (kind) {
    case error_kind::invalid_argument: throw invalid_argument(message);
    case error_kind::io_error: throw io_error(message);
    case error_kind::cuda_error: throw cuda_error(message);
    case error_kind::logic_error: break;
  }
  throw logic_error(message);
}
#else
[[noreturn]] inline void abort_with(error_kind kind, const std::string& message) {
  std::fprintf(stderr, "moecomp: %s: %s\n", to_string(kind), message.c_str());
  std::abort();
}
#endif

}  // namespace detail

MOECOMP_NAMESPACE_END

#if !defined(MOECOMP_THROW)
#if !defined(MOECOMP_NO_EXCEPTIONS)
#define MOECOMP_THROW(kind, message) ::moecomp::detail::throw_error((kind), (message))
#elif defined(MOECOMP_ERROR_HANDLER)
// A handler that returns anyway gets std::abort(): no code runs on past a failed check, and the compiler
// knows MOECOMP_FAIL does not return (no -Wreturn-type in functions that end with it).
#define MOECOMP_THROW(kind, message) (MOECOMP_ERROR_HANDLER((kind), (message)), ::std::abort())
#else
#define MOECOMP_THROW(kind, message) ::moecomp::detail::abort_with((kind), (message))
#endif
#endif

/// Fails with `kind` and a message built from the remaining arguments (streamed with <<).
#define MOECOMP_FAIL(kind, ...) MOECOMP_THROW((kind), ::moecomp::detail::concat(__VA_ARGS__))

/// Checks a precondition on the caller's input: MOECOMP_EXPECTS(x.cols() == y.cols(), "pairwise_distances: "
/// "y must have ", x.cols(), " columns like x, got ", y.cols()). The message is built only on failure.
#define MOECOMP_EXPECTS(condition, ...)                                                          \
  do {                                                                                           \
    if (MOECOMP_UNLIKELY(!(condition)))                                                          \
      MOECOMP_THROW(::moecomp::error_kind::invalid_argument, ::moecomp::detail::concat(__VA_ARGS__)); \
  } while (0)

/// Checks an internal invariant (a failure is a moecomp bug, reported as logic_error).
#define MOECOMP_ENSURES(condition, ...)                                                      \
  do {                                                                                       \
    if (MOECOMP_UNLIKELY(!(condition)))                                                      \
      MOECOMP_THROW(::moecomp::error_kind::logic_error, ::moecomp::detail::concat(__VA_ARGS__)); \
  } while (0)
