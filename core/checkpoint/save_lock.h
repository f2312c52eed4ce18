// The advisory lock of a save directory: DIR/ptdp.lock, held with flock() for as long as a run
// saves into DIR, and naming its holder (host, process id, start time). A second run that would
// save into the same directory is refused up front instead of overwriting the first's
// iterations. The kernel drops the lock when its holder exits or dies, so a lock file that is
// there but not held is stale: it is taken over (previous_holder() says whose it was). A clean
// release empties the file, so only a run that died leaves a holder behind.
#pragma once

#include <string>

namespace ptdp {

inline constexpr const char* kSaveLockFile = "ptdp.lock";

class SaveDirLock {
 public:
  enum class Mode {
    /// A whole run (ptdp-train, a trainer): refused when any holder has it, this process included.
    Run,
    /// One save: shares the lock this process already holds for DIR (a run saving), else takes
    /// it for the save's duration.
    Save,
  };
  /// Takes DIR's lock, creating DIR when missing. Throws Error(InvalidState) "DIR/ptdp.lock: the
  /// save directory DIR is in use by another run (host H, pid P, started T); ..." when held, and
  /// Error(Io) when the lock file cannot be created.
  SaveDirLock(const std::string& dir, Mode mode);
  ~SaveDirLock();
  SaveDirLock(const SaveDirLock&) = delete;
  SaveDirLock& operator=(const SaveDirLock&) = delete;

  /// The holder a stale lock named when this one took it over; empty when it was free.
  const std::string& previous_holder() const { return previous_holder_; }
  const std::string& path() const { return path_; }

 private:
  std::string key_;   // the canonical directory (this process's registry of held locks)
  std::string path_;  // DIR/ptdp.lock
  std::string previous_holder_;
  bool shared_ = false;  // Mode::Save reusing this process's lock
};

}  // namespace ptdp
