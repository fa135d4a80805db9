#pragma once
// Helpers for the tests that give moecomp's readers something other than a regular file: a FIFO, a directory,
// a character device. A reader that blocked on a FIFO would hang the test suite, so every such read runs on a
// thread of its own with a deadline: past it the check fails, and the FIFO is opened for writing (without
// blocking) and closed, which lets a reader stuck in open() or read() go on to end of file.
#include <moecomp/core/error.hpp>

#include <doctest/doctest.h>

#include "test_files.hpp"

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#if defined(MOECOMP_TEST_POSIX)
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

namespace moecomp_test {

/// Makes a FIFO at `path`; false where the system has none (the FIFO checks are then skipped).
inline bool make_fifo(const std::string& path) {
#if defined(MOECOMP_TEST_POSIX)
  return ::mkfifo(path.c_str(), 0600) == 0;
#else
  (void)path;
  return false;
#endif
}

/// Whether /dev/zero exists (a character device that never ends).
inline bool have_dev_zero() {
  std::error_code ec;
  return std::filesystem::is_character_file("/dev/zero", ec);
}

/// Runs `read`, which must throw moecomp::io_error, on a thread of its own and returns the error's message.
/// A failed check (and "") when it returns, throws something else, or takes longer than `seconds`; then
/// `fifo`, if given, is opened for writing and closed to unblock it.
template <class Read>
std::string io_error_within(Read read, const std::string& fifo = {}, double seconds = 5.0) {
  auto result = std::make_shared<std::promise<std::string>>();
  std::future<std::string> message = result->get_future();
  std::thread([result, read]() mutable {
    try {
      read();
      result->set_value("<returned without an error>");
    } catch (const moecomp::io_error& e) {
      result->set_value(std::string("io_error: ") + e.what());
    } catch (const std::exception& e) {
      result->set_value(std::string("<another exception: ") + e.what() + ">");
    }
  }).detach();
  if (message.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    FAIL_CHECK("the read did not return within " << seconds << " s (it blocked)");
#if defined(MOECOMP_TEST_POSIX)
    if (!fifo.empty()) {
      const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (writer >= 0) ::close(writer);
    }
#else
    (void)fifo;
#endif
    if (message.wait_for(std::chrono::seconds(5)) != std::future_status::ready) return "";  // the thread is left
  }
  std::string text = message.get();
  const std::string prefix = "io_error: ";
  if (text.compare(0, prefix.size(), prefix) != 0) {
    FAIL_CHECK("expected an io_error, got " << text);
    return "";
  }
  return text.substr(prefix.size());
}

}  // namespace moecomp_test
