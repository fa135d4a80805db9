#pragma once
// Helpers shared by the doctest suites.
#include <doctest/doctest.h>
#include <moecomp/core/error.hpp>

#include <string>

namespace moecomp_test {

/// Runs `f` and returns the message of the moecomp::invalid_argument it throws; a failed check (and "")
/// when it throws nothing.
template <class F>
std::string thrown_message(F&& f) {
  try {
    f();
  } catch (const moecomp::invalid_argument& e) {
    return e.what();
  }
  FAIL_CHECK("expected moecomp::invalid_argument");
  return "";
}

}  // namespace moecomp_test
