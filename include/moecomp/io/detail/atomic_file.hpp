#pragma once
// Atomic file replacement: write everything to a new temporary file in the target's directory, check
// every write, flush and close, then std::rename it over the target. A reader (or a failed run) sees
// either the old file or the complete new one, never a partial or empty file at the target path. On
// POSIX, rename within one directory is atomic; the temporary is removed on every failure path.
//
// Not covered: durability across power loss (no fsync, which plain C++17 does not offer), and the new
// file gets the default permissions (0666 & ~umask), not the replaced file's.
#include <moecomp/core/error.hpp>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

MOECOMP_NAMESPACE_BEGIN
namespace io {
namespace detail {

class atomic_file_writer {
 public:
  /// Creates the temporary file next to `target`. `function` names the caller in error messages.
  atomic_file_writer(std::string target, const char* function) : target_(std::move(target)), function_(function) {
    // A name no other writer uses: mixed from the clock, this object's address and the attempt, and
    // created with "x" (O_EXCL), so a collision is detected and retried rather than overwritten.
    const auto ticks = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    const auto address = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(this));
    int last_errno = 0;
    for (std::uint64_t attempt = 0; attempt < 16 && file_ == nullptr; ++attempt) {
      temporary_ = target_ + ".tmp-" + hex(mix(ticks ^ mix(address + attempt)));
      errno = 0;
      file_ = std::fopen(temporary_.c_str(), "wbx");
      last_errno = errno;
      if (file_ == nullptr && last_errno != EEXIST) break;
    }
    if (file_ == nullptr) {
      const std::string attempted = temporary_;
      temporary_.clear();  // nothing was created
      MOECOMP_FAIL(error_kind::io_error, function_, ": cannot write '", target_, "': cannot create the temporary file '",
                   attempted, "': ", describe_errno(last_errno));
    }
  }

  atomic_file_writer(const atomic_file_writer&) = delete;
  atomic_file_writer& operator=(const atomic_file_writer&) = delete;

  /// Removes the temporary unless commit() succeeded; the target is never touched.
  ~atomic_file_writer() { abandon(); }

  /// Appends bytes to the temporary file.
  void write(const void* data, std::size_t bytes) {
    if (bytes == 0) return;
    errno = 0;
    if (std::fwrite(data, 1, bytes, file_) != bytes) fail("writing ", bytes, " bytes failed", errno);
  }

  /// Flushes, closes and renames the temporary over the target.
  void commit() {
    errno = 0;
    if (std::fflush(file_) != 0 || std::ferror(file_) != 0) fail("flushing the data failed", "", errno);
    std::FILE* file = file_;
    file_ = nullptr;
    errno = 0;
    if (std::fclose(file) != 0) fail("closing the file failed", "", errno);
    errno = 0;
    if (std::rename(temporary_.c_str(), target_.c_str()) != 0)
      fail("renaming the temporary file '", temporary_, "' over it failed", errno);
    temporary_.clear();
  }

  const std::string& temporary_path() const noexcept { return temporary_; }

 private:
  static std::uint64_t mix(std::uint64_t z) noexcept {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  static std::string hex(std::uint64_t value) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string text(16, '0');
    for (int i = 15; i >= 0; --i, value >>= 4) text[static_cast<std::size_t>(i)] = digits[value & 15];
    return text;
  }
  static std::string describe_errno(int code) { return code != 0 ? std::strerror(code) : "unknown error"; }

  void abandon() noexcept {
    if (file_ != nullptr) {
      std::fclose(file_);
      file_ = nullptr;
    }
    if (!temporary_.empty()) {
      std::remove(temporary_.c_str());
      temporary_.clear();
    }
  }

  // Arguments by value: `a` may be temporary_, which abandon() clears.
  template <class A, class B>
  [[noreturn]] void fail(const char* what, A a, B b, int code) {
    abandon();  // before reporting, so the temporary is gone even when errors abort instead of throwing
    MOECOMP_FAIL(error_kind::io_error, function_, ": cannot write '", target_, "': ", what, a, b, ": ",
                 describe_errno(code));
  }
  template <class A>
  [[noreturn]] void fail(const char* what, A a, int code) {
    fail(what, a, "", code);
  }

  std::string target_;
  const char* function_;
  std::string temporary_;
  std::FILE* file_ = nullptr;
};

}  // namespace detail
}  // namespace io
MOECOMP_NAMESPACE_END
