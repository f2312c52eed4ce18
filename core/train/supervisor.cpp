#include "core/train/supervisor.h"

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/error.h"
#include "core/train/run_stop.h"

namespace ptdp {

namespace {

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// The value of --NAME in the command (either spelling); empty when absent.
std::string flag_value(const std::vector<std::string>& command, const std::string& name) {
  std::string value;
  for (std::size_t i = 1; i < command.size(); ++i) {
    const std::string& a = command[i];
    if (a == name && i + 1 < command.size()) value = command[i + 1];
    else if (a.rfind(name + "=", 0) == 0) value = a.substr(name.size() + 1);
  }
  return value;
}

std::atomic<pid_t> g_job_group{0};
std::atomic<int> g_signal{0};

void forward_signal(int sig) {
  g_signal.store(sig);
  const pid_t g = g_job_group.load();
  if (g > 0) ::kill(-g, sig);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// The latest complete checkpoint of `dir`: its tracker's iteration, or -1.
long long latest_iteration(const std::string& dir) {
  std::ifstream in(dir + "/latest_checkpointed_iteration.txt");
  long long it = -1;
  if (in && (in >> it)) return it;
  return -1;
}

// Runs argv in a process group of its own; returns its wait status (or -1 when fork fails,
// -2 when exec fails). Every process left in the group afterwards is killed and waited for.
int run_job(const std::vector<std::string>& argv, int attempt) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    ::setpgid(0, 0);
    const std::string a = std::to_string(attempt);
    ::setenv("PTDP_RESTART_ATTEMPT", a.c_str(), 1);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "ptdp-train supervisor: cannot start '%s': %s\n", args[0], std::strerror(errno));
    std::_Exit(127);
  }
  ::setpgid(pid, pid);  // both sides, so that a signal right after fork finds the group
  g_job_group.store(pid);
  if (g_signal.load() != 0) ::kill(-pid, g_signal.load());
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      status = -1;
      break;
    }
  }
  // Whatever the launcher left behind (a rank it did not reap) goes before a relaunch.
  if (::kill(-pid, 0) == 0) {
    ::kill(-pid, SIGKILL);
    for (int i = 0; i < 600 && ::kill(-pid, 0) == 0; ++i) {
      while (::waitpid(-pid, nullptr, WNOHANG) > 0) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  g_job_group.store(0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) return -2;
  return status;
}

}  // namespace

bool started_by_mpi_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

void check_supervisor_options(const SupervisorOptions& o) {
  PTDP_CHECK_ARG(!o.command.empty() && !o.command[0].empty(), "the command is empty (its first word is the program)");
  PTDP_CHECK_ARG(o.max_restarts >= 0, "max_restarts = " + std::to_string(o.max_restarts) + " is not >= 0");
  PTDP_CHECK_ARG(std::isfinite(o.backoff_s) && o.backoff_s >= 0,
                 "backoff_seconds = " + std::to_string(o.backoff_s) + " is not a finite number >= 0");
  PTDP_CHECK_ARG(o.max_restarts == 0 || !flag_value(o.command, "--save").empty(),
                 "the command (argv) has no --save DIR: each restart resumes from the latest checkpoint there");
}

std::vector<std::string> supervised_argv(const SupervisorOptions& o, int attempt, bool resume) {
  std::string launcher = o.launcher;
  if (launcher.empty()) {
    if (const char* env = std::getenv("PTDP_LAUNCHER")) launcher = env;
  }
  std::vector<std::string> out = words(launcher);
  const std::string save = flag_value(o.command, "--save");
  const bool resuming = attempt > 0 && resume && !save.empty();
  out.push_back(o.command[0]);
  for (std::size_t i = 1; i < o.command.size(); ++i) {
    const std::string& a = o.command[i];
    if (a == "--max-restarts" || a == "--launcher" || (resuming && a == "--load")) {
      ++i;  // and its value
      continue;
    }
    if (a.rfind("--max-restarts=", 0) == 0 || a.rfind("--launcher=", 0) == 0 ||
        (resuming && (a.rfind("--load=", 0) == 0 || a == "--finetune"))) {
      continue;
    }
    out.push_back(a);
  }
  if (resuming) {
    out.push_back("--load");
    out.push_back(save);
  }
  return out;
}

namespace {

// While it lives, SIGINT and SIGTERM go to the job (forward_signal); the handlers before it come
// back when it goes, however supervise() returns.
class ForwardSignals {
 public:
  ForwardSignals() {
    struct sigaction fwd {};
    fwd.sa_handler = forward_signal;
    sigemptyset(&fwd.sa_mask);
    ::sigaction(SIGINT, &fwd, &old_int_);
    ::sigaction(SIGTERM, &fwd, &old_term_);
    g_signal.store(0);
  }
  ~ForwardSignals() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  ForwardSignals(const ForwardSignals&) = delete;
  ForwardSignals& operator=(const ForwardSignals&) = delete;

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

void log_attempt(std::FILE* log, const SupervisorOptions& o, int attempt, const std::vector<std::string>& argv) {
  if (!log) return;
  std::string line;
  for (const std::string& w : argv) line += (line.empty() ? "" : " ") + w;
  std::fprintf(log, "ptdp-train supervisor: attempt %d of %d: %s\n", attempt + 1, o.max_restarts + 1, line.c_str());
  std::fflush(log);
}

// Whether the job's failure with exit status `last` ends the supervision: the job was stopped
// by a signal, or failed in a way a restart would only repeat. Says why on `log`.
bool not_to_restart(std::FILE* log, int last) {
  if (g_signal.load() != 0) {
    if (log) std::fprintf(log, "ptdp-train supervisor: stopped by signal %d; not restarting\n", g_signal.load());
    return true;
  }
  if (last != 2 && last != kExitSkippedIterations && last != kExitNonFinite) return false;
  if (log) {
    std::fprintf(log, "ptdp-train supervisor: exit status %d (%s) would repeat on a restart; not restarting\n", last,
                 last == 2 ? "bad flags" : last == kExitSkippedIterations ? "--max-skipped-iterations"
                                                                          : "--check-for-nan-in-loss-and-grad");
  }
  return true;
}

void log_restart(std::FILE* log, double wait_s, const std::string& save) {
  if (!log) return;
  const long long it = latest_iteration(save);
  if (it >= 0) {
    std::fprintf(log, "ptdp-train supervisor: restarting in %.1f s from the checkpoint of iteration %lld in %s\n",
                 wait_s, it, save.c_str());
  } else {
    std::fprintf(log, "ptdp-train supervisor: restarting in %.1f s from scratch (no checkpoint in %s yet)\n", wait_s,
                 save.c_str());
  }
  std::fflush(log);
}

}  // namespace

int supervise(const SupervisorOptions& o) {
  check_supervisor_options(o);
  std::FILE* log = o.log;
  const std::string save = flag_value(o.command, "--save");
  const ForwardSignals forwarding;
  int last = 1;
  double wait_s = o.backoff_s;
  for (int attempt = 0; attempt <= o.max_restarts; ++attempt) {
    const std::vector<std::string> argv = supervised_argv(o, attempt, latest_iteration(save) >= 0);
    log_attempt(log, o, attempt, argv);
    const int status = run_job(argv, attempt);
    if (status == -1 || status == -2) {
      if (log) {
        std::fprintf(log, "ptdp-train supervisor: cannot start the job ('%s'): %s\n", argv[0].c_str(),
                     status == -1 ? "fork failed" : "no such program");
      }
      return 127;
    }
    last = exit_code_of(status);
    if (last == 0) {
      if (log && attempt > 0) {
        std::fprintf(log, "ptdp-train supervisor: the job succeeded on attempt %d (%d restarts)\n", attempt + 1,
                     attempt);
      }
      return 0;
    }
    if (log) std::fprintf(log, "ptdp-train supervisor: attempt %d failed: %s\n", attempt + 1,
                          describe_status(status).c_str());
    if (not_to_restart(log, last)) return last;
    if (attempt == o.max_restarts) break;
    log_restart(log, wait_s, save);
    std::this_thread::sleep_for(std::chrono::duration<double>(wait_s));
    wait_s = std::min(60.0, wait_s * 2);
    if (g_signal.load() != 0) break;
  }
  if (log) {
    std::fprintf(log,
                 "ptdp-train supervisor: the job failed %d times (--max-restarts %d): giving up (last %s); the latest "
                 "checkpoint in %s is of iteration %lld\n",
                 o.max_restarts + 1, o.max_restarts, ("exit status " + std::to_string(last)).c_str(), save.c_str(),
                 latest_iteration(save));
    std::fflush(log);
  }
  return g_signal.load() != 0 ? last : kExitRestartsExhausted;
}

}  // namespace ptdp
