#include "io/file_write.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "base/error.h"

namespace ptdp {

namespace fs = std::filesystem;

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) throw_io_error(path, "missing");
    throw_io_error(path, str_cat("cannot open to sync: ", std::strerror(errno)));
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    throw_io_error(path, str_cat("fsync failed: ", std::strerror(err)));
  }
  ::close(fd);
}

void write_file_synced(const std::string& path, const std::string& content) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_io_error(path, str_cat("cannot create: ", std::strerror(errno)));
  const char* p = content.data();
  std::size_t left = content.size();
  while (left > 0) {
    const ssize_t w = ::write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw_io_error(path, str_cat("write failed: ", std::strerror(err)));
    }
    p += w;
    left -= static_cast<std::size_t>(w);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    throw_io_error(path, str_cat("fsync failed: ", std::strerror(err)));
  }
  if (::close(fd) != 0) throw_io_error(path, str_cat("close failed: ", std::strerror(errno)));
}

void write_file_atomic(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  write_file_synced(tmp, content);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw_io_error(path, str_cat("cannot rename ", tmp, " over it: ", std::strerror(err)));
  }
  std::string parent = fs::path(path).parent_path().string();
  fsync_path(parent.empty() ? "." : parent);
}

}  // namespace ptdp
