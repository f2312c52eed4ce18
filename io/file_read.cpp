#include "io/file_read.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "base/error.h"

namespace ptdp {
namespace {

const char* kind_of(const struct stat& st) {
  if (S_ISREG(st.st_mode)) return "a regular file";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  return "not a regular file";
}

[[noreturn]] void refuse_kind(const std::string& path, const struct stat& st, std::string_view what) {
  throw_io_error(path, str_cat("is ", kind_of(st), ", not a regular file: only regular files are read as ", what));
}

[[noreturn]] void refuse_open(const std::string& path, int err, std::string_view what) {
  if (err == ENOENT || err == ENOTDIR)
    throw_io_error(path, str_cat("cannot open the ", what, ": missing (no such file)"));
  throw_io_error(path, str_cat("cannot open the ", what, ": ", std::strerror(err)));
}

}  // namespace

std::string describe_path_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno == ENOENT || errno == ENOTDIR ? "missing" : std::strerror(errno);
  return kind_of(st);
}

RegularFile::RegularFile(const std::string& path, std::string_view what, uint64_t max_bytes)
    : path_(path), what_(what) {
  // Looked at before opening, so that opening has no side effect on a device or FIFO (a FIFO
  // opened for reading would otherwise be a reader its writer sees); checked again after, on the
  // descriptor, because the path may change in between.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) refuse_open(path, errno, what);
  if (!S_ISREG(st.st_mode)) refuse_kind(path, st, what);
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd_ < 0) refuse_open(path, errno, what);
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    close();
    throw_io_error(path, str_cat("cannot stat the ", what, ": ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    close();
    refuse_kind(path, st, what);
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > max_bytes) {
    close();
    throw_io_error(path, str_cat(size_, " bytes exceeds the limit of ", max_bytes, " bytes for a ", what));
  }
}

RegularFile::~RegularFile() { close(); }

RegularFile::RegularFile(RegularFile&& o) noexcept
    : path_(std::move(o.path_)), what_(std::move(o.what_)), fd_(std::exchange(o.fd_, -1)), size_(o.size_) {}

RegularFile& RegularFile::operator=(RegularFile&& o) noexcept {
  if (this != &o) {
    close();
    path_ = std::move(o.path_);
    what_ = std::move(o.what_);
    fd_ = std::exchange(o.fd_, -1);
    size_ = o.size_;
  }
  return *this;
}

void RegularFile::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void RegularFile::read_at(uint64_t offset, void* dst, uint64_t n) const {
  if (fd_ < 0) throw_error(ErrorCode::InvalidState, str_cat(path_, ": read after close"));
  if (offset > size_ || n > size_ - offset)
    throw_io_error(path_, str_cat("truncated: reading bytes [", offset, ", ", offset, " + ", n, ") of a ", what_,
                                  " of ", size_, " bytes"));
  auto* p = static_cast<unsigned char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_io_error(path_, str_cat("read failed: ", std::strerror(errno)));
    }
    if (r == 0)
      throw_io_error(path_, str_cat("truncated while reading: the ", what_, " shrank below ", offset + n,
                                    " bytes (it had ", size_, " when opened)"));
    p += r;
    offset += static_cast<uint64_t>(r);
    n -= static_cast<uint64_t>(r);
  }
}

std::string RegularFile::read_all() const {
  std::string text(static_cast<std::size_t>(size_), '\0');
  read_at(0, text.data(), size_);
  return text;
}

const unsigned char* RegularFile::map() const {
  if (size_ == 0) return nullptr;
  void* m = ::mmap(nullptr, static_cast<std::size_t>(size_), PROT_READ, MAP_PRIVATE, fd_, 0);
  if (m == MAP_FAILED) throw_io_error(path_, str_cat("cannot map the ", what_, ": ", std::strerror(errno)));
  return static_cast<const unsigned char*>(m);
}

void unmap_file(const unsigned char* p, uint64_t size) {
  if (p != nullptr && size > 0) ::munmap(const_cast<unsigned char*>(p), static_cast<std::size_t>(size));
}

std::string read_regular_file(const std::string& path, std::string_view what, uint64_t max_bytes) {
  return RegularFile(path, what, max_bytes).read_all();
}

std::vector<unsigned char> read_regular_file_bytes(const std::string& path, std::string_view what, uint64_t max_bytes) {
  const RegularFile f(path, what, max_bytes);
  std::vector<unsigned char> bytes(static_cast<std::size_t>(f.size()));
  f.read_at(0, bytes.data(), f.size());
  return bytes;
}

void check_regular_file(const std::string& path, std::string_view what, uint64_t max_bytes) {
  RegularFile f(path, what, max_bytes);
}

uint64_t checked_mul(uint64_t a, uint64_t b, const std::string& path, std::string_view what) {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) {
    const std::string msg = str_cat(what, " overflows: ", a, " * ", b, " does not fit in 64 bits");
    if (path.empty()) throw_error(ErrorCode::Io, msg);
    throw_io_error(path, msg);
  }
  return r;
}

uint64_t checked_add(uint64_t a, uint64_t b, const std::string& path, std::string_view what) {
  uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) {
    const std::string msg = str_cat(what, " overflows: ", a, " + ", b, " does not fit in 64 bits");
    if (path.empty()) throw_error(ErrorCode::Io, msg);
    throw_io_error(path, msg);
  }
  return r;
}

}  // namespace ptdp
