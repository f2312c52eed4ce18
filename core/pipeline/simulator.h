// Timing of a schedule under a simple cost model: what the paper's bubble fractions and
// activation-memory claims are about, computed from the very lists the executor runs.
#pragma once

#include <vector>

#include "core/pipeline/schedule.h"

namespace ptdp {

/// Costs of one pipeline rank's whole share of the model for one microbatch, in any time unit.
/// With v chunks per rank a chunk's action costs 1/v of these.
struct ScheduleCosts {
  double forward = 1;          ///< F
  double backward = 2;         ///< full backward (input and weight gradients)
  double backward_input = 1;   ///< B of zero-bubble schedules
  double backward_weight = 1;  ///< W of zero-bubble schedules
  double p2p_latency = 0;      ///< from a transfer's meeting to its data being available
};

/// Start and end of one action. For a communication action: when its batch was posted and when
/// the batch completed.
struct TimedAction {
  double start = 0;
  double end = 0;
};

struct SimulationResult {
  std::vector<std::vector<TimedAction>> timeline;  ///< [rank][action], parallel to the lists
  double makespan = 0;         ///< when the last rank finishes; all ranks start at 0
  double ideal = 0;            ///< the largest total compute time of a rank
  double bubble_fraction = 0;  ///< (makespan - ideal) / ideal: the paper's t_bubble / t_ideal
  std::vector<int> peak_slots;  ///< [rank]: most (microbatch, chunk) activations held at once
};

/// The cost of one action of `s` (0 for communication actions).
double action_cost(const Schedule& s, const ScheduleCosts& costs, ActionKind kind);

/// Runs every rank of `s`. Compute actions run in list order, each starting when the previous
/// action of its rank has finished. A batch (schedule.h) is posted when its rank reaches it;
/// each of its transfers meets at the later of the two sides' post times and completes
/// p2p_latency after that, on both sides (the receiver's data is available then); a batch
/// completes with its last transfer. A slot is held from a (microbatch, chunk)'s Forward until
/// its Backward or, in zero-bubble schedules, its BackwardWeight.
/// Throws Error(InvalidArgument) when `s` fails check_schedule() (the message says why), or
/// when a cost is negative or not finite, or no rank has any compute time.
SimulationResult simulate(const Schedule& s, const ScheduleCosts& costs);

}  // namespace ptdp
