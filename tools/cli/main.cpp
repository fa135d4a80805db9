// moecomp: the command-line tool over .npy files. docs/cli.md is the contract:
// exit 0 on success, 2 on bad usage or input (one "moecomp: error:" line), 3 on a numerical failure, 1 on an
// internal failure.
#include "cli.hpp"
#include "process_group.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <new>

#if defined(__linux__) && defined(__GLIBC__)
#include <unistd.h>
#endif

namespace moecomp_cli {

namespace {

void print_help() {
  std::cout << "moecomp " << MOECOMP_VERSION_STRING
            << ": Mixture-of-Experts compression algorithms over .npy files\n\n"
               "usage: moecomp COMMAND [ARGS] [-o OUT] [--json] [--dtype float32|float64] [--threads N]\n"
               "       moecomp COMMAND --help\n       moecomp --version\n\ncommands:\n";
  for (const auto& c : commands()) std::printf("  %-16s %s\n", c.spec.name.c_str(), c.spec.summary.c_str());
  std::cout << "\nexit status: 0 success, 2 bad usage or input, 3 numerical failure, 1 internal failure\n";
}

void print_command_help(const command_spec& spec) {
  std::cout << "usage: moecomp " << spec.usage << "\n\n" << spec.summary << "\n\noptions:\n";
  auto line = [](const option_spec& o) {
    std::printf("  %-12s %s%s\n", o.name.c_str(), o.takes_value ? "VALUE  " : "       ", o.help.c_str());
  };
  for (const auto& o : spec.options) line(o);
  line({"-o", true, "output .npy file (written atomically)"});
  line({"--json", false, "one-line JSON summary on stdout, with \"seconds\" of the algorithm alone"});
  line({"--dtype", true, "float32|float64 computation precision (default: the input's)"});
  line({"--threads", true, "threads for moecomp's parallel loops (default 0: all)"});
  line({"--matmul", true, "exact|bf16: products with bfloat16 weights (default exact; docs/core.md)"});
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

/// `compress` touches many GB of fresh buffers per layer, and where each first touch of a 4 KB page is slow
/// (14 us on the 2-core build VM: 20 of the 25 s of loading a Mixtral layer) transparent huge pages halve
/// its time. glibc's malloc asks for them only when GLIBC_TUNABLES holds glibc.malloc.hugetlb=1, which it
/// reads at start-up, so the tool runs itself again, once, with it set (glibc 2.35 and later, Linux, not
/// when the variable already names the tunable, nor with MOECOMP_HUGEPAGES=0). It is advice: where the
/// kernel's THP mode is "never" nothing changes. docs/compress.md, "Cost".
void restart_with_huge_pages(char** argv) {
#if defined(__linux__) && defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
  const char* opt_out = std::getenv("MOECOMP_HUGEPAGES");
  if (opt_out != nullptr && std::strcmp(opt_out, "0") == 0) return;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  const bool had_tunables = tunables != nullptr;
  const std::string current = had_tunables ? tunables : "";  // a copy: setenv may free getenv's string
  if (current.find("glibc.malloc.hugetlb") != std::string::npos) return;
  const std::string wanted = (current.empty() ? "" : current + ":") + "glibc.malloc.hugetlb=1";
  if (::setenv("GLIBC_TUNABLES", wanted.c_str(), 1) != 0) return;
  ::execv("/proc/self/exe", argv);  // returns only on failure: then go on as we are
  if (had_tunables) ::setenv("GLIBC_TUNABLES", current.c_str(), 1);
  else ::unsetenv("GLIBC_TUNABLES");
#else
  (void)argv;
#endif
}

int fail(int status, const std::string& message) {
  std::fprintf(stderr, "moecomp: error: %s\n", one_line(message).c_str());
  return status;
}

}  // namespace
}  // namespace moecomp_cli

int main(int argc, char** argv) {
  using namespace moecomp_cli;
  install_signal_handlers();
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    print_help();
    return fail(2, "no command given (see the list above, or moecomp --help)");
  }
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_help();
    return 0;
  }
  if (args[0] == "--version") {
    std::cout << "moecomp " << MOECOMP_VERSION_STRING << "\n";
    return 0;
  }
  if (args[0] == "compress") restart_with_huge_pages(argv);
  // Only compress spreads its work over a launcher's ranks (docs/cli.md); any other command would run whole on
  // every rank, each replacing the same output. Rank 0 says so once.
  const bool known = std::any_of(commands().begin(), commands().end(), [&](const auto& c) { return c.spec.name == args[0]; });
  if (known && args[0] != "compress" && launcher_size() > 1) {
    if (launcher_rank() != 0) return 2;
    return fail(2, "'" + args[0] + "' runs on one process, and this launch has " + std::to_string(launcher_size()) +
                       " ranks: only compress spreads its work over ranks (start '" + args[0] + "' without mpirun or srun)");
  }
  for (const auto& c : commands()) {
    if (c.spec.name != args[0]) continue;
    try {
      const arguments parsed(c.spec, std::vector<std::string>(args.begin() + 1, args.end()));
      if (parsed.help()) {
        print_command_help(c.spec);
        return 0;
      }
      output_files outputs(c.spec, parsed);  // checked before any work; removed unless committed
      return c.run(parsed, outputs);
    } catch (const silent_failure& e) {
      return e.status;
    } catch (const usage_error& e) {
      return fail(2, e.what());
    } catch (const numerical_failure& e) {
      return fail(exit_numerical_failure, e.what());
    } catch (const moecomp::invalid_argument& e) {
      return fail(2, e.what());
    } catch (const moecomp::io_error& e) {
      return fail(2, e.what());
    } catch (const std::bad_alloc&) {
      return fail(1, "out of memory");
    } catch (const std::exception& e) {
      return fail(1, std::string("internal failure: ") + e.what());
    }
  }
  return fail(2, "unknown command '" + args[0] + "' (see moecomp --help)");
}
