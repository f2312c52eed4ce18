#include "core/checkpoint/save_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>

#include "base/error.h"

namespace ptdp {
namespace {

namespace fs = std::filesystem;

// The locks this process holds: canonical directory -> descriptor and users. flock() locks
// belong to an open file description, so a second open() of the same file in this process would
// conflict with our own lock; the registry lets a save share its run's lock instead.
struct Held {
  int fd = -1;
  int users = 0;
};
std::mutex g_mutex;
std::map<std::string, Held>& held() {
  static std::map<std::string, Held> m;
  return m;
}

std::string read_fd(int fd) {
  std::string text;
  char buf[512];
  for (off_t at = 0; text.size() < 4096;) {
    const ssize_t r = ::pread(fd, buf, sizeof buf, at);
    if (r <= 0) break;
    text.append(buf, static_cast<std::size_t>(r));
    at += r;
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

std::string holder_text() {
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown");
  char when[64] = {0};
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return str_cat("host ", host, ", pid ", ::getpid(), ", started ", when);
}

}  // namespace

SaveDirLock::SaveDirLock(const std::string& dir, Mode mode) {
  PTDP_CHECK_ARG(!dir.empty(), std::string("the save directory is empty"));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw_io_error(dir, str_cat("cannot create the save directory: ", ec.message()));
  key_ = fs::weakly_canonical(dir, ec).string();
  if (ec || key_.empty()) key_ = dir;
  path_ = (fs::path(dir) / kSaveLockFile).string();

  std::lock_guard<std::mutex> guard(g_mutex);
  auto it = held().find(key_);
  if (it != held().end()) {
    if (mode == Mode::Save) {
      ++it->second.users;
      shared_ = true;
      return;
    }
    throw_error(ErrorCode::InvalidState,
                str_cat(path_, ": the save directory ", dir, " is in use by another run in this process (",
                        read_fd(it->second.fd), "); two runs must not save into one directory"));
  }
  const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd < 0) throw_io_error(path_, str_cat("cannot create the lock file: ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_io_error(path_, "the lock file is not a regular file");
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = read_fd(fd);
    ::close(fd);
    if (err == EWOULDBLOCK)
      throw_error(ErrorCode::InvalidState,
                  str_cat(path_, ": the save directory ", dir, " is in use by another run (",
                          holder.empty() ? std::string("holder unknown") : holder,
                          "); two runs must not save into one directory: wait for it to end or choose another --save"));
    throw_io_error(path_, str_cat("cannot lock: ", std::strerror(err)));
  }
  // Ours. A holder still written there died without releasing it.
  previous_holder_ = read_fd(fd);
  const std::string me = holder_text() + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    const int err = errno;
    ::close(fd);
    throw_io_error(path_, str_cat("cannot write the lock file: ", std::strerror(err)));
  }
  held()[key_] = Held{fd, 1};
}

SaveDirLock::~SaveDirLock() {
  std::lock_guard<std::mutex> guard(g_mutex);
  auto it = held().find(key_);
  if (it == held().end()) return;
  if (--it->second.users > 0) return;
  // A clean release leaves an empty file: only a holder that died leaves its name behind.
  if (::ftruncate(it->second.fd, 0) != 0) {
    // Nothing to do: the next run reads a stale holder and takes the lock over with a note.
  }
  ::flock(it->second.fd, LOCK_UN);
  ::close(it->second.fd);
  held().erase(it);
}

}  // namespace ptdp
