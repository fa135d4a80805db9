#pragma once
// File helpers shared by the tests of moecomp's readers and writers: a scratch directory removed at scope
// exit, whole-file reads and writes, and Python scripts run by the peer interpreter (MOECOMP_PEER_PYTHON,
// /usr/bin/python3 by default) with the scratch directory as argv[1].
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/wait.h>
#include <unistd.h>
#define MOECOMP_TEST_POSIX 1
#endif

namespace moecomp_test {

/// A fresh directory under the system temp dir, removed with everything in it at scope exit.
struct temp_dir {
  std::filesystem::path path;
  explicit temp_dir(const std::string& tag) {
#if defined(MOECOMP_TEST_POSIX)
    const std::string unique = std::to_string(::getpid());
#else
    const std::string unique = "0";
#endif
    path = std::filesystem::temp_directory_path() / ("moecomp_test_" + tag + "_" + unique);
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  /// The names in the directory (not recursive), in directory order.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path)) names.push_back(entry.path().filename().string());
    return names;
  }
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}
inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string peer_python() {
  const char* configured = std::getenv("MOECOMP_PEER_PYTHON");
  return configured != nullptr && *configured != '\0' ? configured : "/usr/bin/python3";
}
inline bool peers_required() {
  const char* required = std::getenv("MOECOMP_REQUIRE_PEERS");
  return required != nullptr && std::string(required) == "1";
}

/// Runs `script` with the directory as argv[1]; returns the exit code (77 by convention: a module is
/// missing) and the output.
inline int run_python(const temp_dir& dir, const std::string& script, std::string& log) {
  const std::string script_path = dir.file("script.py");
  write_file(script_path, script);
  const std::string log_path = dir.file("python.log");
  const std::string command = "\"" + peer_python() + "\" \"" + script_path + "\" \"" + dir.path.string() + "\" > \"" +
                              log_path + "\" 2>&1";
  const int status = std::system(command.c_str());
  log = read_file(log_path);
#if defined(MOECOMP_TEST_POSIX)
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
#else
  return status;
#endif
}

/// Whether a script's exit code says its peer is missing (77, or 127: no interpreter): a skip, or a
/// failure when MOECOMP_REQUIRE_PEERS=1.
inline bool skip_without_peer(int code, const std::string& log, const char* peer) {
  if (code != 77 && code != 127) return false;
  if (peers_required()) FAIL(peer << " is required (MOECOMP_REQUIRE_PEERS=1) but not importable by " << peer_python() << ": " << log);
  MESSAGE(peer << " is not importable by " << peer_python() << ": its cross-checks are skipped");
  return true;
}

}  // namespace moecomp_test
