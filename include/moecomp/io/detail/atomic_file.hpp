#pragma once
// Atomic file replacement: write everything to a new temporary file in the target's directory, check
// every write, flush and close, then std::rename it over the target. A reader (or a failed run) sees
// either the old file or the complete new one, never a partial or empty file at the target path. On
// POSIX, rename within one directory is atomic; the temporary is removed on every failure path.
//
// The target must be a regular file or not exist: renaming over a device, a FIFO or a socket would replace
// the special file itself (as root, /dev/null with a regular file), so those are refused before anything is
// created. A symbolic link is followed: the file it points to is replaced and the link stays.
//
// Not covered: durability across power loss (no fsync, which plain C++17 does not offer), and the new
// file gets the default permissions (0666 & ~umask), not the replaced file's.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

MOECOMP_NAMESPACE_BEGIN
namespace io {

/// Watches the temporary files that writes create, for a program that must remove them when it is killed
/// by a signal (the library installs no signal handler). `creating` runs with the temporary's name just
/// before the file is created, `released` once it is gone: renamed over its target or removed. Both
/// default to nothing.
struct temporary_file_hooks {
  void (*creating)(const char* temporary_path, void* user) = nullptr;
  void (*released)(const char* temporary_path, void* user) = nullptr;
  void* user = nullptr;
};

/// Every temporary file is named `<target>.moecomp-tmp-<16 hex digits>`, so that one left behind by a
/// process killed outright (SIGKILL, power loss) can be recognised and removed.
inline constexpr const char* temporary_file_marker = ".moecomp-tmp-";

/// What a path names, in words, for messages: "a directory", "a character device", ...
inline const char* file_kind_text(std::filesystem::file_type type) noexcept {
  switch (type) {
    case std::filesystem::file_type::regular: return "a regular file";
    case std::filesystem::file_type::directory: return "a directory";
    case std::filesystem::file_type::symlink: return "a symbolic link";
    case std::filesystem::file_type::block: return "a block device";
    case std::filesystem::file_type::character: return "a character device";
    case std::filesystem::file_type::fifo: return "a FIFO";
    case std::filesystem::file_type::socket: return "a socket";
    default: return "not a regular file";
  }
}

namespace detail {

/// The file a write to `path` replaces: `path` itself, or where its symbolic links lead. Refuses (io_error
/// naming `function`) a target that exists and is not a regular file, and a link that leads nowhere.
inline std::string resolve_write_target(const std::string& path, const char* function) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(path, ec);
  if (ec || !fs::exists(link)) return path;  // nothing there yet (or unreadable: the create step reports it)
  const fs::file_status target = fs::status(path, ec);
  if (fs::is_symlink(link) && (ec || !fs::exists(target)))
    MOECOMP_FAIL(error_kind::io_error, function, ": cannot write '", path,
                 "': it is a symbolic link to a file that does not exist");
  if (!fs::is_regular_file(target))
    MOECOMP_FAIL(error_kind::io_error, function, ": cannot write '", path, "': it is ", file_kind_text(target.type()),
                 ", not a regular file; moecomp replaces only regular files");
  if (!fs::is_symlink(link)) return path;
  const fs::path resolved = fs::canonical(path, ec);
  return ec ? path : resolved.string();
}

class atomic_file_writer {
 public:
  /// Creates the temporary file next to `target` (or next to the file a symbolic link leads to).
  /// `function` names the caller in error messages.
  atomic_file_writer(std::string target, const char* function, const temporary_file_hooks& hooks = {})
      : path_(std::move(target)), function_(function), hooks_(hooks) {
    target_ = resolve_write_target(path_, function_);
    // A name no other writer uses: mixed from the clock, this object's address and the attempt, and
    // created with "x" (O_EXCL), so a collision is detected and retried rather than overwritten.
    const auto ticks = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    const auto address = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(this));
    int last_errno = 0;
    for (std::uint64_t attempt = 0; attempt < 16 && file_ == nullptr; ++attempt) {
      temporary_ = target_ + temporary_file_marker + hex(mix(ticks ^ mix(address + attempt)));
      if (hooks_.creating) hooks_.creating(temporary_.c_str(), hooks_.user);
      errno = 0;
      file_ = std::fopen(temporary_.c_str(), "wbx");
      last_errno = errno;
      if (file_ == nullptr && hooks_.released) hooks_.released(temporary_.c_str(), hooks_.user);
      if (file_ == nullptr && last_errno != EEXIST) break;
    }
    if (file_ == nullptr) {
      const std::string attempted = temporary_;
      temporary_.clear();  // nothing was created
      MOECOMP_FAIL(error_kind::io_error, function_, ": cannot write '", path_, "': cannot create the temporary file '",
                   attempted, "': ", describe_errno(last_errno));
    }
  }

  atomic_file_writer(const atomic_file_writer&) = delete;
  atomic_file_writer& operator=(const atomic_file_writer&) = delete;

  /// Removes the temporary unless publish() succeeded; the target is never touched.
  ~atomic_file_writer() { abandon(); }

  /// Appends bytes to the temporary file.
  void write(const void* data, std::size_t bytes) {
    if (bytes == 0) return;
    errno = 0;
    if (std::fwrite(data, 1, bytes, file_) != bytes) fail("writing ", bytes, " bytes failed", errno);
  }

  /// Flushes and closes the temporary file: every byte is written, nothing is in place yet.
  void finish() {
    if (file_ == nullptr) return;
    errno = 0;
    if (std::fflush(file_) != 0 || std::ferror(file_) != 0) fail("flushing the data failed", "", errno);
    std::FILE* file = file_;
    file_ = nullptr;
    errno = 0;
    if (std::fclose(file) != 0) fail("closing the file failed", "", errno);
  }

  /// Renames the finished temporary over the target.
  void publish() {
    finish();
    errno = 0;
    if (std::rename(temporary_.c_str(), target_.c_str()) != 0)
      fail("renaming the temporary file '", temporary_, "' over it failed", errno);
    if (hooks_.released) hooks_.released(temporary_.c_str(), hooks_.user);
    temporary_.clear();
  }

  /// finish() and publish().
  void commit() { publish(); }

  const std::string& temporary_path() const noexcept { return temporary_; }
  /// The path as given, and the file it replaces (different only through a symbolic link).
  const std::string& path() const noexcept { return path_; }
  const std::string& target_path() const noexcept { return target_; }

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
      if (hooks_.released) hooks_.released(temporary_.c_str(), hooks_.user);
      temporary_.clear();
    }
  }

  // Arguments by value: `a` may be temporary_, which abandon() clears.
  template <class A, class B>
  [[noreturn]] void fail(const char* what, A a, B b, int code) {
    abandon();  // before reporting, so the temporary is gone even when errors abort instead of throwing
    MOECOMP_FAIL(error_kind::io_error, function_, ": cannot write '", path_, "': ", what, a, b, ": ",
                 describe_errno(code));
  }
  template <class A>
  [[noreturn]] void fail(const char* what, A a, int code) {
    fail(what, a, "", code);
  }

  std::string path_;
  std::string target_;
  const char* function_;
  temporary_file_hooks hooks_;
  std::string temporary_;
  std::FILE* file_ = nullptr;
};

}  // namespace detail
}  // namespace io
MOECOMP_NAMESPACE_END
