#pragma once
// Opening a file for reading, for every reader of moecomp (npy, residual files, safetensors, checkpoint
// indexes, config.json and layout files). Only regular files are read: a FIFO, a device, a socket or a
// directory is refused with an io_error naming the path and what it is, before a byte is read. On POSIX the
// file is opened with O_NONBLOCK, so that opening a FIFO that no writer holds does not wait for one, then
// fstat decides; O_NONBLOCK is cleared again before reading. An optional limit refuses a file larger than
// it (the text and JSON files, whose whole text is parsed in memory), naming the size and the limit.
//
// The file's size is taken once, at open; reads never go past it, so a file that grows while it is read is
// read as it was, and one that shrinks is an io_error ("the file ended early").
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <system_error>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#define MOECOMP_INPUT_FILE_POSIX 1
#else
#define MOECOMP_INPUT_FILE_POSIX 0
#endif

MOECOMP_NAMESPACE_BEGIN
namespace detail {

/// No limit on a file's size.
inline constexpr std::uint64_t no_size_limit = std::numeric_limits<std::uint64_t>::max();

/// A regular file open for reading, closed at destruction: the checks of the header comment, then whole
/// reads. `function` names the caller in every message.
class input_file {
 public:
  input_file(const std::string& path, const char* function, std::uint64_t limit = no_size_limit)
      : path_(path), function_(function) {
#if MOECOMP_INPUT_FILE_POSIX
    int flags = O_RDONLY | O_NONBLOCK;
#if defined(O_CLOEXEC)
    flags |= O_CLOEXEC;
#endif
#if defined(O_NOCTTY)
    flags |= O_NOCTTY;
#endif
    do {
      errno = 0;
      descriptor_ = ::open(path.c_str(), flags);
    } while (descriptor_ < 0 && errno == EINTR);
    if (descriptor_ < 0) fail_open(errno);
    struct stat status {};
    if (::fstat(descriptor_, &status) != 0) fail_open(errno);
    if (!S_ISREG(status.st_mode)) fail_kind(kind_of(status.st_mode));
    const int mode = ::fcntl(descriptor_, F_GETFL);
    if (mode == -1 || ::fcntl(descriptor_, F_SETFL, mode & ~O_NONBLOCK) == -1) fail_open(errno);
    size_ = static_cast<std::uint64_t>(status.st_size);
#else
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (!ec && fs::exists(status) && !fs::is_regular_file(status)) fail_kind(status.type());
    errno = 0;
    file_ = std::fopen(path.c_str(), "rb");
    if (file_ == nullptr) fail_open(errno);
    const std::uintmax_t size = fs::file_size(path, ec);
    if (ec) fail_open(ec.value());
    size_ = static_cast<std::uint64_t>(size);
#endif
    if (size_ > limit)
      fail("the file is ", size_, " bytes, larger than the ", limit, "-byte limit for this kind of file");
  }
  input_file(const input_file&) = delete;
  input_file& operator=(const input_file&) = delete;
  ~input_file() { close(); }

  /// The size at open: what read_all returns, and the most the reads deliver.
  std::uint64_t size() const noexcept { return size_; }
  const std::string& path() const noexcept { return path_; }
#if MOECOMP_INPUT_FILE_POSIX
  /// The open descriptor (for mmap); it stays owned by this object.
  int descriptor() const noexcept { return descriptor_; }
#endif

  /// The next `count` bytes into `target`; io_error when the file ends first or a read fails.
  void read(void* target, std::size_t count) {
    if (count > size_ - position_) fail("the file ended early (was it changed while being read?)");
    auto* out = static_cast<unsigned char*>(target);
    std::size_t done = 0;
    while (done < count) {
#if MOECOMP_INPUT_FILE_POSIX
      const std::size_t want = std::min<std::size_t>(count - done, std::size_t{1} << 30);
      errno = 0;
      const ::ssize_t got = ::read(descriptor_, out + done, want);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) fail(std::strerror(errno));
#else
      errno = 0;
      const std::size_t got = std::fread(out + done, 1, count - done, file_);
      if (got == 0 && std::ferror(file_)) fail(errno != 0 ? std::strerror(errno) : "read error");
#endif
      if (got == 0) fail("the file ended early (was it changed while being read?)");
      done += static_cast<std::size_t>(got);
    }
    position_ += count;
  }

  /// Every byte (size() of them, from the start) in a string or a byte vector.
  template <class Bytes>
  Bytes read_all() {
    if (size_ > static_cast<std::uint64_t>(std::numeric_limits<std::size_t>::max()))
      fail("the file is ", size_, " bytes, more than this machine's memory can address");
    Bytes bytes;
    bytes.resize(static_cast<std::size_t>(size_ - position_));
    read(bytes.data(), bytes.size());
    return bytes;
  }

  /// Closes the file (the destructor does it too).
  void close() noexcept {
#if MOECOMP_INPUT_FILE_POSIX
    if (descriptor_ >= 0) ::close(descriptor_);
    descriptor_ = -1;
#else
    if (file_ != nullptr) std::fclose(file_);
    file_ = nullptr;
#endif
  }

 private:
#if MOECOMP_INPUT_FILE_POSIX
  static std::filesystem::file_type kind_of(mode_t mode) noexcept {
    using type = std::filesystem::file_type;
    if (S_ISDIR(mode)) return type::directory;
    if (S_ISCHR(mode)) return type::character;
    if (S_ISBLK(mode)) return type::block;
    if (S_ISFIFO(mode)) return type::fifo;
    if (S_ISSOCK(mode)) return type::socket;
    return type::unknown;
  }
#endif
  template <class... Parts>
  [[noreturn]] void fail(const Parts&... parts) {
    close();
    MOECOMP_FAIL(error_kind::io_error, function_, ": cannot read '", path_, "': ", parts...);
  }
  [[noreturn]] void fail_open(int code) {
    close();
    MOECOMP_FAIL(error_kind::io_error, function_, ": cannot open '", path_, "': ",
                 code != 0 ? std::strerror(code) : "unknown error");
  }
  [[noreturn]] void fail_kind(std::filesystem::file_type type) {
    using kind = std::filesystem::file_type;
    const char* text = type == kind::directory   ? "a directory"
                       : type == kind::character ? "a character device"
                       : type == kind::block     ? "a block device"
                       : type == kind::fifo      ? "a FIFO"
                       : type == kind::socket    ? "a socket"
                       : type == kind::symlink   ? "a symbolic link"
                                                 : "a special file";
    fail("it is ", text, ", not a regular file; moecomp reads only regular files");
  }

  std::string path_;
  const char* function_;
  std::uint64_t size_ = 0;
  std::uint64_t position_ = 0;
#if MOECOMP_INPUT_FILE_POSIX
  int descriptor_ = -1;
#else
  std::FILE* file_ = nullptr;
#endif
};

}  // namespace detail
MOECOMP_NAMESPACE_END
