// The one pass that places a schedule's sends and receives, for every generator alike (as
// torch's pipelining adds them to compute-only schedules in _add_send_recv). The generators
// (schedule.h) write each rank's compute order only; this pass runs those orders on the time
// model (time_model.h) and puts every transfer where both of its ranks are between two actions,
// so that the lists run as that run went, in batches that pair up, and never deadlock.
#pragma once

#include "core/pipeline/time_model.h"

namespace ptdp {

/// Adds the sends and receives to `s`, whose lists hold compute actions only, each rank's in
/// the order it runs them. The orders run on the time model with `costs` (each chunk's action
/// costing the whole figure: a common factor changes no placement, and whole numbers keep
/// times exact), and the transfers are placed in two steps:
///  1. a run under the batch semantics of schedule.h that hands each piece of data over at the
///     first moment it is made and both ranks stand between two actions, a rank going on only
///     once it has handed over what it made (a send waits for its receiver, as Megatron's do);
///  2. each transfer then moves to the latest moment before its data is used at which both
///     ranks stand between two actions, for p2p_latency at least, at a gap that holds a
///     transfer already or where the rank waits anyway: receives land just before their use and
///     sends ride in batches their rank posts anyway, with no time of step 1 changing.
/// Consecutive transfers form one batch: sends, then receives, activations first. Where
/// `back_to_back[r][i]` is set, rank r runs its actions i - 1 and i as one step with no
/// transfer between them (Megatron's interleaved 1F1B, which exchanges once per forward and
/// backward of its steady state). The lists never deadlock, and run at the pass's costs they
/// take no longer than step 1 did.
/// Throws Error(InvalidArgument) when a list already holds a transfer, a compute cost is not a
/// finite number > 0 or p2p_latency not one >= 0, back_to_back does not fit the lists, or an
/// action makes data for an action that no order holds; Error(Internal), naming the action,
/// when the orders wait on each other forever.
void add_transfers(Schedule& s, const ScheduleCosts& costs = {}, const BackToBack& back_to_back = {});

}  // namespace ptdp
