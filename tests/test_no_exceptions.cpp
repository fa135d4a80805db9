// moecomp without exceptions (this file is compiled with -fno-exceptions, and without doctest, which needs
// them). Every host header must compile so, and a failed check must end in the error handler:
//  * MOECOMP_ERROR_HANDLER, defined below, receives the kind and the message;
//  * a handler that returns anyway is followed by std::abort();
//  * the default handler, detail::abort_with, prints "moecomp: <kind>: <message>" on stderr and aborts.
// Each failing scenario runs in a forked child whose stderr is captured through a pipe (POSIX only).
#include <moecomp/core/config.hpp>

#include <string>

namespace test_hooks {
enum class mode { report_and_exit, report_and_return, default_handler };
template <class Kind>
void on_error(Kind kind, const std::string& message);  // deliberately not [[noreturn]]
}  // namespace test_hooks

#define MOECOMP_ERROR_HANDLER(kind, message) ::test_hooks::on_error((kind), (message))

#include <moecomp/moecomp.hpp>

#if !defined(MOECOMP_NO_EXCEPTIONS)
#error "test_no_exceptions.cpp must be compiled with -fno-exceptions"
#endif

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

namespace test_hooks {

mode current_mode = mode::report_and_exit;
int calls = 0;
constexpr int handled_exit_code = 42;  // the handler ran and ended the child
constexpr int returned_exit_code = 3;  // the failing code returned to the scenario: nothing stopped it

void write_stderr(const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(2, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

template <class Kind>
void on_error(Kind kind, const std::string& message) {
  ++calls;
  switch (current_mode) {
    case mode::report_and_exit:
      write_stderr(std::string("handled: ") + moecomp::to_string(kind) + ": " + message + "\n");
      std::_Exit(handled_exit_code);
    case mode::report_and_return:
      write_stderr(std::string("returning: ") + message + "\n");
      return;
    case mode::default_handler:
      moecomp::detail::abort_with(kind, message);
  }
}

}  // namespace test_hooks

namespace {

int failures = 0;

#define EXPECT(condition)                                                           \
  do {                                                                              \
    if (!(condition)) {                                                             \
      ++failures;                                                                   \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition); \
    }                                                                               \
  } while (0)

struct child_result {
  bool exited = false;
  int exit_code = -1;
  bool signalled = false;
  int signal = 0;
  std::string stderr_text;
};

// Runs `body` in a forked child with `mode`, capturing its stderr.
template <class Body>
child_result run_in_child(test_hooks::mode mode, Body body) {
  child_result result;
  int fds[2];
  if (::pipe(fds) != 0) {
    std::perror("pipe");
    std::exit(2);
  }
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("fork");
    std::exit(2);
  }
  if (pid == 0) {
    const rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);  // the aborts below are expected: no core files
    ::close(fds[0]);
    ::dup2(fds[1], 2);
    ::close(fds[1]);
    test_hooks::current_mode = mode;
    body();
    std::_Exit(test_hooks::returned_exit_code);
  }
  ::close(fds[1]);
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n <= 0) break;
    result.stderr_text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exited = WIFEXITED(status);
  result.exit_code = result.exited ? WEXITSTATUS(status) : -1;
  result.signalled = WIFSIGNALED(status);
  result.signal = result.signalled ? WTERMSIG(status) : 0;
  return result;
}

bool handled_with(const child_result& r, const std::string& expected_stderr) {
  if (r.exited && r.exit_code == test_hooks::handled_exit_code && r.stderr_text == expected_stderr) return true;
  std::fprintf(stderr, "child: exited=%d code=%d signalled=%d signal=%d\n  stderr:   [%s]\n  expected: [%s]\n",
               int(r.exited), r.exit_code, int(r.signalled), r.signal, r.stderr_text.c_str(),
               expected_stderr.c_str());
  return false;
}

bool aborted_with(const child_result& r, const std::string& expected_stderr) {
  if (r.signalled && r.signal == SIGABRT && r.stderr_text == expected_stderr) return true;
  std::fprintf(stderr, "child: exited=%d code=%d signalled=%d signal=%d\n  stderr:   [%s]\n  expected: [%s]\n",
               int(r.exited), r.exit_code, int(r.signalled), r.signal, r.stderr_text.c_str(),
               expected_stderr.c_str());
  return false;
}

// MOECOMP_FAIL at the end of a value-returning function: with a handler that is not [[noreturn]], this
// compiles without -Wreturn-type only because moecomp follows the handler with std::abort().
int checked_positive(int x) {
  if (x > 0) return x;
  MOECOMP_FAIL(moecomp::error_kind::invalid_argument, "checked_positive: x must be > 0, got ", x);
}

}  // namespace

int main() {
  using test_hooks::mode;
  float storage[8] = {1, 2, 3, 4, 5, 6, 7, 8};

  // Valid use never reaches the handler.
  {
    const auto m = moecomp::make_matrix_view(storage, 2, 3, 4);
    EXPECT(m(1, 2) == 7.0f);
    EXPECT(m.block(1, 1, 1, 2)(0, 1) == 7.0f);
    EXPECT(m.column(2)(1) == 7.0f);
    moecomp::host_matrix<double> owned(3, 3, 1.5);
    EXPECT(owned.view()(2, 2) == 1.5);
    EXPECT(checked_positive(4) == 4);
    moecomp::random_generator rng(1);
    EXPECT(rng.uniform_index(10) < 10);
    EXPECT(moecomp::half(1.0f).bits == 0x3c00);
    const moecomp::host_context ctx(1);
    moecomp::detail::host_workspace<double> workspace(ctx, 16);
    EXPECT(workspace.data() != nullptr);
    EXPECT(test_hooks::calls == 0);
  }

  // The handler gets the kind and the exact message, for checks inside moecomp's headers and in user code.
  EXPECT(handled_with(run_in_child(mode::report_and_exit, [&] { moecomp::matrix_view<float>(storage, 2, 3, 2); }),
                      "handled: invalid argument: matrix_view: row_stride must be >= cols (3), got 2\n"));
  EXPECT(handled_with(
      run_in_child(mode::report_and_exit, [&] { (void)moecomp::vector_view<float>(storage, 8).subview(6, 3); }),
      "handled: invalid argument: vector_view::subview: 3 elements from 6 do not fit in a vector of size 8\n"));
  EXPECT(handled_with(run_in_child(mode::report_and_exit, [] { (void)checked_positive(-2); }),
                      "handled: invalid argument: checked_positive: x must be > 0, got -2\n"));
  EXPECT(handled_with(run_in_child(mode::report_and_exit,
                                   [] { MOECOMP_FAIL(moecomp::error_kind::io_error, "read: ", "w.npy", " truncated"); }),
                      "handled: I/O error: read: w.npy truncated\n"));
  EXPECT(handled_with(run_in_child(mode::report_and_exit, [] { MOECOMP_ENSURES(2 < 1, "broken at ", 7); }),
                      "handled: internal error: broken at 7\n"));
  EXPECT(handled_with(run_in_child(mode::report_and_exit,
                                   [] {
                                     const moecomp::host_context ctx(1);
                                     (void)ctx.allocate(64, 48);
                                   }),
                      "handled: invalid argument: host_context::allocate: alignment must be a power of two, "
                      "got 48\n"));

  // A handler that returns is followed by std::abort(): the failing code never runs on.
  EXPECT(aborted_with(run_in_child(mode::report_and_return, [&] { moecomp::vector_view<float>(storage, -1); }),
                      "returning: vector_view: size must be >= 0, got -1\n"));
  EXPECT(aborted_with(run_in_child(mode::report_and_return, [] { (void)checked_positive(0); }),
                      "returning: checked_positive: x must be > 0, got 0\n"));

  // The default handler: message on stderr, then SIGABRT.
  EXPECT(aborted_with(run_in_child(mode::default_handler, [] { moecomp::matrix_view<float>(nullptr, 2, 2); }),
                      "moecomp: invalid argument: matrix_view: data is null but shape is 2 x 2\n"));
  EXPECT(aborted_with(run_in_child(mode::default_handler, [] { moecomp::host_context(-3); }),
                      "moecomp: invalid argument: host_context: num_threads must be >= 0, got -3\n"));
  EXPECT(aborted_with(
      run_in_child(mode::default_handler, [] { MOECOMP_FAIL(moecomp::error_kind::cuda_error, "cudaMemcpy failed"); }),
      "moecomp: CUDA error: cudaMemcpy failed\n"));

  // A scenario that does not fail really returns (the harness itself works).
  const child_result quiet = run_in_child(mode::report_and_exit, [] {});
  EXPECT(quiet.exited && quiet.exit_code == test_hooks::returned_exit_code && quiet.stderr_text.empty());

  if (failures != 0) {
    std::fprintf(stderr, "test_no_exceptions: %d check(s) failed\n", failures);
    return 1;
  }
  std::printf("test_no_exceptions: all checks passed\n");
  return 0;
}
