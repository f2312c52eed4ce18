// The planner: searches every layout (t, p, d, v, b, schedule, recomputation, distributed
// optimizer) of a GPT or a Llama-family decoder on a cluster, ranks those that fit in memory by estimated time per
// iteration, and says why the best was chosen and what rules out the others (the paper's three
// takeaways, made quantitative).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/plan/cluster.h"
#include "core/plan/cost_model.h"

namespace ptdp::plan {

struct PlanResult {
  PlanRequest request;
  Cluster cluster;
  int num_gpus = 0;
  std::vector<Estimate> layouts;  ///< best first; feasible only; at most request.top
  std::vector<std::string> why;   ///< parallel to layouts: why chosen (first) or why worse
  std::vector<std::string> ruled_out;  ///< alternatives outside the table and what rules them out
  bool feasible = false;
  std::string reason;  ///< when not feasible: what is missing
  int considered = 0;  ///< layouts estimated
  int fitting = 0;     ///< of which fit in memory
};

/// Searches and ranks. Throws Error(InvalidArgument) for a malformed request or cluster (sizes
/// out of range, more GPUs asked for than the cluster has, a pin that cannot be honoured by any
/// layout is NOT an error: the result is infeasible with the reason).
PlanResult make_plan(const PlanRequest& request, const Cluster& cluster);

/// The human-readable answer: the model and cluster, the table of layouts, the reasons, the
/// chosen layout's memory and time breakdown, and what was ruled out; or why nothing fits.
std::string plan_report(const PlanResult& r);
/// The same for machines.
nlohmann::json plan_to_json(const PlanResult& r);
/// Draws layout `index`'s schedule (simulated with its per-microbatch costs, in milliseconds).
/// Throws Error(InvalidArgument) for a bad index, Error(Io) naming the path.
void write_plan_schedule_svg(const PlanResult& r, int index, const std::string& path);

}  // namespace ptdp::plan
