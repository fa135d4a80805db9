// Errors: the exception hierarchy, MOECOMP_EXPECTS / MOECOMP_FAIL / MOECOMP_ENSURES, and the
// MOECOMP_THROW override. This file overrides MOECOMP_THROW before including moecomp, so every check in
// moecomp's own headers (views, here) goes through the hook below; the hook counts calls and then either
// forwards to the default (detail::throw_error) or throws a type of its own.
#include <moecomp/core/config.hpp>

#include <string>

namespace test_hooks {
template <class Kind>
[[noreturn]] void on_throw(Kind kind, const std::string& message);
}  // namespace test_hooks

#define MOECOMP_THROW(kind, message) ::test_hooks::on_throw((kind), (message))

#include <moecomp/core/error.hpp>
#include <moecomp/core/status.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/ot/emd_types.hpp>
#include <moecomp/ot/fixed_support_barycenter_types.hpp>
#include <moecomp/ot/free_support_barycenter_types.hpp>
#include <moecomp/ot/linear_assignment_types.hpp>
#include <moecomp/ot/sinkhorn_types.hpp>

#include <doctest/doctest.h>

#include <exception>
#include <ostream>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace test_hooks {

int throw_count = 0;
bool throw_own_type = false;

struct own_exception {
  moecomp::error_kind kind;
  std::string message;
};

template <class Kind>
[[noreturn]] void on_throw(Kind kind, const std::string& message) {
  ++throw_count;
  if (throw_own_type) throw own_exception{kind, message};
  ::moecomp::detail::throw_error(kind, message);
}

}  // namespace test_hooks

namespace {

int evaluations = 0;
// An argument with a visible side effect: counts how often the message is built.
int counted(int value) {
  ++evaluations;
  return value;
}

// A text part that counts how often it is read (message parts are text, numbers or bool, docs/core.md).
struct streamed {
  int* count;
  operator std::string_view() const {  // NOLINT(implicit): a message part converts to text
    ++*count;
    return "<streamed>";
  }
};

// Catches as `Caught` and returns the exception's what() and kind().
template <class Caught, class F>
std::pair<std::string, moecomp::error_kind> caught(F&& f) {
  try {
    f();
  } catch (const Caught& e) {
    const auto* as_error = dynamic_cast<const moecomp::error*>(&e);
    REQUIRE(as_error != nullptr);
    return {e.what(), as_error->kind()};
  }
  FAIL("nothing was thrown");
  return {};
}

// MOECOMP_FAIL at the end of a value-returning function: the macro must be known not to return.
int parse_positive(int x) {
  if (x > 0) return x;
  MOECOMP_FAIL(moecomp::error_kind::invalid_argument, "parse_positive: x must be > 0, got ", x);
}

}  // namespace

static_assert(std::is_base_of_v<std::runtime_error, moecomp::error>);
static_assert(std::is_base_of_v<moecomp::error, moecomp::invalid_argument>);
static_assert(std::is_base_of_v<moecomp::error, moecomp::io_error>);
static_assert(std::is_base_of_v<moecomp::error, moecomp::cuda_error>);
static_assert(std::is_base_of_v<moecomp::error, moecomp::logic_error>);
// moecomp's families are its own: not the std:: classes of the same names.
static_assert(!std::is_base_of_v<std::invalid_argument, moecomp::invalid_argument>);
static_assert(!std::is_base_of_v<std::logic_error, moecomp::logic_error>);

TEST_CASE("MOECOMP_EXPECTS builds its message only when the check fails") {
  evaluations = 0;
  int streams = 0;
  int condition_evaluations = 0;
  MOECOMP_EXPECTS((++condition_evaluations, true), "never built ", counted(1), streamed{&streams});
  CHECK(condition_evaluations == 1);
  CHECK(evaluations == 0);
  CHECK(streams == 0);
  for (int i = 0; i < 1000; ++i) MOECOMP_EXPECTS(i >= 0, "loop: ", counted(i), streamed{&streams});
  CHECK(evaluations == 0);
  CHECK(streams == 0);

  test_hooks::throw_count = 0;
  condition_evaluations = 0;
  const auto [message, kind] = caught<moecomp::invalid_argument>([&] {
    MOECOMP_EXPECTS((++condition_evaluations, false), "f: x must be ", counted(3), " wide, got ", 2.5, " ",
                    streamed{&streams});
  });
  CHECK(condition_evaluations == 1);
  CHECK(evaluations == 1);  // each argument exactly once
  CHECK(streams == 1);
  CHECK(message == "f: x must be 3 wide, got 2.5 <streamed>");
  CHECK(kind == moecomp::error_kind::invalid_argument);
  CHECK(test_hooks::throw_count == 1);
}

TEST_CASE("MOECOMP_EXPECTS and MOECOMP_ENSURES behave as single statements") {
  int branch = 0;
  const bool take_if = false;
  // Without braces: the macro must not capture the else.
  if (take_if)
    MOECOMP_EXPECTS(false, "not reached");
  else
    branch = 2;
  CHECK(branch == 2);
  if (!take_if)
    MOECOMP_ENSURES(true, "holds");
  else
    branch = 3;
  CHECK(branch == 2);
}

TEST_CASE("each error kind is thrown as its own class, a moecomp::error and a std::runtime_error") {
  using moecomp::error_kind;
  test_hooks::throw_count = 0;

  auto r = caught<moecomp::invalid_argument>([] { MOECOMP_FAIL(error_kind::invalid_argument, "a", 1); });
  CHECK(r.first == "a1");
  CHECK(r.second == error_kind::invalid_argument);
  r = caught<moecomp::io_error>([] { MOECOMP_FAIL(error_kind::io_error, "read: ", "x.npy", " is truncated"); });
  CHECK(r.first == "read: x.npy is truncated");
  CHECK(r.second == error_kind::io_error);
  r = caught<moecomp::cuda_error>([] { MOECOMP_FAIL(error_kind::cuda_error, "cudaMalloc: out of memory"); });
  CHECK(r.second == error_kind::cuda_error);
  r = caught<moecomp::logic_error>([] { MOECOMP_ENSURES(1 + 1 == 3, "invariant ", 7, " broken"); });
  CHECK(r.first == "invariant 7 broken");
  CHECK(r.second == error_kind::logic_error);

  // The common bases catch everything, and keep kind() and what().
  r = caught<moecomp::error>([] { MOECOMP_FAIL(error_kind::io_error, "io"); });
  CHECK(r.second == error_kind::io_error);
  r = caught<std::runtime_error>([] { MOECOMP_FAIL(error_kind::cuda_error, "cuda"); });
  CHECK(r.first == "cuda");
  CHECK(r.second == error_kind::cuda_error);
  r = caught<std::exception>([] { MOECOMP_EXPECTS(false, "std::exception"); });
  CHECK(r.second == error_kind::invalid_argument);

  // A family does not catch another.
  CHECK_THROWS_AS(
      [] {
        try {
          MOECOMP_FAIL(error_kind::io_error, "io");
        } catch (const moecomp::invalid_argument&) {
        }
      }(),
      moecomp::io_error);
  CHECK(test_hooks::throw_count == 8);

  CHECK_THROWS_WITH_AS(parse_positive(-4), "parse_positive: x must be > 0, got -4", moecomp::invalid_argument);
  CHECK(parse_positive(5) == 5);
}

TEST_CASE("detail::throw_error, the default MOECOMP_THROW, maps each kind to its class") {
  using moecomp::error_kind;
  CHECK_THROWS_AS(moecomp::detail::throw_error(error_kind::invalid_argument, "m"), moecomp::invalid_argument);
  CHECK_THROWS_AS(moecomp::detail::throw_error(error_kind::io_error, "m"), moecomp::io_error);
  CHECK_THROWS_AS(moecomp::detail::throw_error(error_kind::cuda_error, "m"), moecomp::cuda_error);
  CHECK_THROWS_AS(moecomp::detail::throw_error(error_kind::logic_error, "m"), moecomp::logic_error);
  // An out-of-range kind still throws (as an internal error) rather than falling through.
  CHECK_THROWS_AS(moecomp::detail::throw_error(static_cast<error_kind>(99), "m"), moecomp::logic_error);
  CHECK_THROWS_WITH(moecomp::detail::throw_error(error_kind::io_error, "exact text"), "exact text");

  const moecomp::error direct(error_kind::cuda_error, "direct");
  CHECK(direct.kind() == error_kind::cuda_error);
  CHECK(std::string(direct.what()) == "direct");
}

TEST_CASE("a user-defined MOECOMP_THROW receives every failure, including those inside moecomp's headers") {
  float storage[4] = {};
  test_hooks::throw_count = 0;
  test_hooks::throw_own_type = true;
  try {
    moecomp::matrix_view<float> bad(storage, 2, 3, 2);
    FAIL("the view was built");
  } catch (const test_hooks::own_exception& e) {
    CHECK(e.kind == moecomp::error_kind::invalid_argument);
    CHECK(e.message == "matrix_view: row_stride must be >= cols (3), got 2");
  }
  try {
    moecomp::vector_view<float>(storage, 4).subview(3, 2);
    FAIL("the subview was built");
  } catch (const test_hooks::own_exception& e) {
    CHECK(e.kind == moecomp::error_kind::invalid_argument);
    CHECK(e.message == "vector_view::subview: 2 elements from 3 do not fit in a vector of size 4");
  }
  try {
    MOECOMP_ENSURES(false, "mine");
    FAIL("not thrown");
  } catch (const test_hooks::own_exception& e) {
    CHECK(e.kind == moecomp::error_kind::logic_error);
    CHECK(e.message == "mine");
  }
  test_hooks::throw_own_type = false;
  CHECK(test_hooks::throw_count == 3);
  CHECK_THROWS_AS(moecomp::matrix_view<float>(storage, -1, 1), moecomp::invalid_argument);
  CHECK(test_hooks::throw_count == 4);
}

TEST_CASE("error kinds and statuses have stable names") {
  using moecomp::error_kind;
  CHECK(std::string(moecomp::to_string(error_kind::invalid_argument)) == "invalid argument");
  CHECK(std::string(moecomp::to_string(error_kind::io_error)) == "I/O error");
  CHECK(std::string(moecomp::to_string(error_kind::cuda_error)) == "CUDA error");
  CHECK(std::string(moecomp::to_string(error_kind::logic_error)) == "internal error");
  CHECK(std::string(moecomp::to_string(static_cast<error_kind>(42))) == "error");

  using moecomp::status;
  CHECK(std::string(moecomp::to_string(status::ok)) == "ok");
  CHECK(std::string(moecomp::to_string(status::iteration_limit)) == "iteration_limit");
  CHECK(std::string(moecomp::to_string(status::not_converged)) == "not_converged");
  CHECK(std::string(moecomp::to_string(status::infeasible)) == "infeasible");
  CHECK(std::string(moecomp::to_string(status::unbounded)) == "unbounded");
  CHECK(std::string(moecomp::to_string(status::numerical_error)) == "numerical_error");
  CHECK(std::string(moecomp::to_string(static_cast<status>(42))) == "unknown");
}

// One result convention (docs/core.md): every iterative algorithm's result is a convergence_info.
static_assert(std::is_base_of_v<moecomp::convergence_info, moecomp::ot::sinkhorn_result>);
static_assert(std::is_base_of_v<moecomp::convergence_info, moecomp::ot::fixed_support_barycenter_result>);
static_assert(std::is_base_of_v<moecomp::convergence_info, moecomp::ot::free_support_barycenter_result>);
static_assert(std::is_base_of_v<moecomp::convergence_info, moecomp::ot::emd_result>);
static_assert(std::is_base_of_v<moecomp::convergence_info, moecomp::ot::auction_result>);
// Results stay trivially copyable: the device writes sinkhorn_result from a kernel and copies it back.
static_assert(std::is_trivially_copyable_v<moecomp::ot::sinkhorn_result>);

TEST_CASE("convergence_info defaults to ok and reports anything else as not ok") {
  moecomp::convergence_info info;
  CHECK(info.ok());
  CHECK(info.status == moecomp::status::ok);
  CHECK(info.iterations == 0);
  CHECK(info.criterion == 0.0);
  info.status = moecomp::status::iteration_limit;
  info.iterations = 100;
  info.criterion = 1e-3;
  CHECK_FALSE(info.ok());
  info.status = moecomp::status::numerical_error;
  CHECK_FALSE(info.ok());
}
