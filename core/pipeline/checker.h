// Static checks of a pipeline schedule (schedule.h): every (microbatch, chunk) computed exactly
// once in a valid order, every transfer sent to the right rank and met by a matching receive,
// and an abstract run of all ranks with the batch semantics of schedule.h that finishes. A
// schedule that passes can be simulated, drawn and executed without hanging.
#pragma once

#include <string>
#include <vector>

#include "core/pipeline/schedule.h"

namespace ptdp {

struct CheckResult {
  bool ok = true;
  std::string message;  ///< the first violation found, empty when ok
};

/// Checks in this order and reports the first violation, naming the rank, the action's index
/// and text, and what is wrong:
///  1. shape: p, m, v positive, one list per rank;
///  2. every action: microbatch and chunk in range, the chunk living on this rank, a transfer
///     only across an existing chunk edge between different ranks, addressed to the right peer;
///  3. sends and receives of each kind between each pair of ranks match one to one, in order
///     (a send whose (microbatch, chunk edge) no receive names "has no matching receive", and
///     the other way round; otherwise a pair naming different edges is out of order);
///  4. each rank's list in order: no (microbatch, chunk) computed twice; a forward after its
///     input arrived (a receive earlier in the list, or the previous chunk's forward when that
///     chunk lives on the same rank); a backward after its forward and its output gradient
///     (received, or the next chunk's backward on the same rank); W after B; a send after the
///     computation producing it; then every local (microbatch, chunk) has its forward and its
///     backward (Backward, or BackwardInput and BackwardWeight);
///  5. the batches of all ranks, run with the blocking semantics of schedule.h, all complete.
CheckResult check_schedule(const Schedule& s);

/// Where an action of a schedule is: rank and index in that rank's list.
struct ActionRef {
  int rank = -1;
  int index = -1;
};

/// The batch structure and the transfer partners of a schedule: what the simulator, the
/// deadlock check and the executor share. Built by comm_layout().
struct CommLayout {
  struct Batch {
    int begin = 0;  ///< first action of the batch
    int end = 0;    ///< one past the last
  };
  std::vector<std::vector<Batch>> batches;      ///< [rank][batch], in list order
  std::vector<std::vector<int>> batch_of;       ///< [rank][action]: batch index, -1 for compute
  std::vector<std::vector<ActionRef>> partner;  ///< [rank][action]: the matching transfer
                                                ///< (rank -1 for compute or an unmatched one)
};

/// Splits every rank's list into batches and pairs the k-th send of a kind from A to B with
/// the k-th receive of that kind on B from A. Pairs by position only: whether the pairs name
/// the same (microbatch, chunk edge) is check_schedule()'s business.
CommLayout comm_layout(const Schedule& s);

}  // namespace ptdp
