#include "core/train/train_main.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>

#include "base/error.h"
#include "core/args/train_args.h"
#include "core/comm/runtime.h"
#include "core/train/run_stop.h"
#include "core/train/supervisor.h"
#include "core/train/training_loop.h"

namespace ptdp {

namespace {

// --max-restarts outside an MPI launcher: this program becomes the supervisor of the job and
// relaunches itself (its executable, the same flags) under --launcher.
int supervise_self(const std::string& program, const std::vector<std::string>& args, const TrainArgs& parsed) {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec || exe.filename().string() != program) {
    std::fprintf(stderr,
                 "%s: --max-restarts: this front end runs in %s and cannot relaunch itself; run ptdp-train, or "
                 "call ptdp_train_supervise() with the job's command\n",
                 program.c_str(), ec ? "an unknown program" : exe.c_str());
    return 2;
  }
  SupervisorOptions o;
  o.command.push_back(exe.string());
  o.command.insert(o.command.end(), args.begin(), args.end());
  o.launcher = parsed.launcher;
  o.max_restarts = parsed.max_restarts;
  if (const char* b = std::getenv("PTDP_RESTART_BACKOFF_S"); b && *b) {
    char* end = nullptr;
    const double v = std::strtod(b, &end);
    if (end != b && *end == '\0' && std::isfinite(v) && v >= 0) o.backoff_s = v;
  }
  return supervise(o);
}

}  // namespace

int train_main(const std::string& program, const std::vector<std::string>& args) {
  int rank = 0;
  try {
    TrainArgs parsed;
    try {
      parsed = parse_train_args(args);
    } catch (const Error& e) {
      std::fprintf(stderr, "%s: %s\nrun '%s --help' for the flags\n", program.c_str(), e.what(), program.c_str());
      return 2;
    }
    if (parsed.help) {
      std::fputs(train_args_help(program).c_str(), stdout);
      std::fflush(stdout);
      return 0;
    }
    if (parsed.max_restarts > 0 && !started_by_mpi_launcher()) return supervise_self(program, args, parsed);
    RuntimeOptions ro;
    ro.timeout_s = parsed.comm_timeout.value_or(0);  // unset: PTDP_COMM_TIMEOUT_S, else 300
    std::shared_ptr<Runtime> rt = Runtime::create(ro);
    rank = rt->world_rank();
    TrainingLoop loop(parsed, rt);
    loop.run();
    return 0;
  } catch (const RunStopped& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: rank %d: %s\n", program.c_str(), rank, e.what());
    std::fflush(stderr);
    return e.exit_status();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: rank %d: %s\n", program.c_str(), rank, e.what());
    std::fflush(stderr);
    return 1;
  } catch (...) {
    std::fprintf(stderr, "%s: rank %d: unknown failure\n", program.c_str(), rank);
    return 1;
  }
}

}  // namespace ptdp
