// The supervisor of ptdp-train --max-restarts N (torchrun's flag). An MPI job cannot survive a
// dead rank, so the supervisor sits outside MPI: it launches the whole job with a launcher
// command ("mpiexec -n 8 ..."), waits for it, and after a failure relaunches it from the latest
// complete checkpoint of --save (passed as --load), after a back-off, at most N times. Each
// attempt is logged with its exit status; the attempt number is exported to the job as
// PTDP_RESTART_ATTEMPT (0 first). A failure a restart would only repeat (bad flags, exit status
// 2; the skipped-iterations budget, 3; a non-finite value found, 4) is not retried.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace ptdp {

struct SupervisorOptions {
  /// The job's program and its flags, e.g. {"/usr/bin/ptdp-train", "--save", "ckpt", ...}.
  /// --max-restarts and --launcher are dropped from what is launched.
  std::vector<std::string> command;
  /// Launcher words before the command ("mpiexec -n 8 --oversubscribe", split at blanks); empty:
  /// PTDP_LAUNCHER, and when that is unset or empty the program runs as one process.
  std::string launcher;
  int max_restarts = 0;
  /// The first wait before a relaunch; each further one doubles, at most 60 s.
  double backoff_s = 1.0;
  std::FILE* log = stderr;  ///< the supervisor's lines ("ptdp-train supervisor: ...")
};

/// Throws Error(InvalidArgument) naming what is wrong: an empty command, max_restarts < 0, a
/// negative or non-finite back-off, no --save in the command when max_restarts > 0.
void check_supervisor_options(const SupervisorOptions& options);

/// The argv of attempt `attempt` (0 first): the launcher's words, then the command without
/// --max-restarts N and --launcher C; from attempt 1 on, when `resume` (the command's --save DIR
/// holds a checkpoint), --load DIR replaces any --load, and --finetune is dropped (the run goes
/// on from its own checkpoint); without a checkpoint yet the command starts over as given.
std::vector<std::string> supervised_argv(const SupervisorOptions& options, int attempt, bool resume);

/// Runs the job until it succeeds, fails in a way a restart would repeat, or has failed
/// max_restarts + 1 times. Returns the exit status: the job's (0 on success), or
/// kExitRestartsExhausted (5) when the restarts are spent, 127 when the launcher cannot be
/// started. SIGINT and SIGTERM are passed on to the job, which is then not restarted. A
/// relaunch starts only after every process of the previous attempt is gone.
int supervise(const SupervisorOptions& options);

/// Whether this process was started by an MPI launcher (Open MPI, PMI, PMIx, MPICH's Hydra).
bool started_by_mpi_launcher();

}  // namespace ptdp
