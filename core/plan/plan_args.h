// ptdp-plan's command line: ptdp-train's flag names where they overlap (the model, the batch,
// precision, recomputation, the distributed optimizer, and t, p, v, b to pin them), plus the
// cluster and the output. Parsed in the library so that the C tool and every binding accept the
// same flags; nothing here prints or exits.
#pragma once

#include <string>
#include <vector>

#include "core/plan/cluster.h"
#include "core/plan/cost_model.h"

namespace ptdp::plan {

struct PlanArgs {
  bool help = false;           ///< --help / -h: print plan_args_help(); nothing else was read
  bool list_clusters = false;  ///< --list-clusters
  bool json = false;           ///< --json
  std::string schedule_svg;    ///< --schedule-svg PATH (empty: none)
  PlanRequest request;
  Cluster cluster;
};

/// Parses a command line (without the program name). Throws Error(InvalidArgument) whose
/// message names the flag and the value: unknown flags, missing or malformed values, values out
/// of range, flags that contradict each other, a missing --global-batch-size. A --cluster-file
/// that cannot be read gives Error(Io) naming the file.
PlanArgs parse_plan_args(const std::vector<std::string>& args);

/// The --help text.
std::string plan_args_help(const std::string& program);

}  // namespace ptdp::plan
