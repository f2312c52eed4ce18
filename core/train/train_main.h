// ptdp-train whole, for every front end: its flags parsed, --help, --max-restarts' supervisor,
// the run on MPI_COMM_WORLD, and a failure reported as the program's exit status.
#pragma once

#include <string>
#include <vector>

namespace ptdp {

/// Parses `args` (without the program name), prints --help, trains on MPI_COMM_WORLD
/// (initialising MPI when nobody has) with the training loop, and reports a failure as
/// "PROGRAM: rank R: message" on stderr. With --max-restarts outside an MPI launcher it
/// supervises itself instead (supervisor.h). Returns the exit status: 0 done, 1 failed, 2 bad
/// flags, or a RunStopped's status (run_stop.h). Never throws.
int train_main(const std::string& program, const std::vector<std::string>& args);

}  // namespace ptdp
