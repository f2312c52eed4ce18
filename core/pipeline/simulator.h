// Timing of a schedule under a simple cost model: what the paper's bubble fractions and
// activation-memory claims are about, computed from the very lists the executor runs.
#pragma once

#include <string>
#include <vector>

#include "core/pipeline/schedule.h"
#include "core/pipeline/time_model.h"

namespace ptdp {

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

/// Runs every rank of `s` on the time model (time_model.h), its transfers where the lists put
/// them. Compute actions run in list order, each starting when the previous action of its rank
/// has finished (the checker guarantees that its data is there by then). A batch (schedule.h)
/// is posted when its rank reaches it; each of its transfers meets at the later of the two
/// sides' post times and completes p2p_latency after that, on both sides (the receiver's data
/// is available then); a batch completes with its last transfer. A slot is held from a
/// (microbatch, chunk)'s Forward until its Backward or, in zero-bubble schedules, its
/// BackwardWeight.
/// Throws Error(InvalidArgument) when `s` fails check_schedule() (the message says why), or
/// when a cost is negative or not finite, or no rank has any compute time.
SimulationResult simulate(const Schedule& s, const ScheduleCosts& costs);

/// Measured costs (the simulator as a predictor): the time of each compute kind for each global
/// chunk of the schedule (vectors of p * v), as a trace of a run gives them, and the time a
/// batch of transfers takes once both sides have posted it.
struct ChunkCosts {
  std::vector<double> forward, backward, backward_input, backward_weight;  ///< [chunk]
  double p2p_latency = 0;
};

/// simulate() with per-chunk costs: an action of kind k on chunk c costs costs.k[c]. Throws
/// Error(InvalidArgument) when a vector's size is not p * v, a cost is negative or not finite,
/// or the schedule fails check_schedule().
SimulationResult simulate(const Schedule& s, const ChunkCosts& costs);

/// What a run costs per part of the model, to predict schedules and layouts other than the one
/// measured: per decoder layer, and the extra of the chunk holding the embedding (first) and
/// of the one holding the final norm, output layer and loss (last), for each compute kind
/// (index: ActionKind Forward, Backward, BackwardInput, BackwardWeight).
struct LayerCosts {
  double layer[4] = {0, 0, 0, 0};
  double first_extra[4] = {0, 0, 0, 0};
  double last_extra[4] = {0, 0, 0, 0};
  double p2p_latency = 0;
};

/// Fits LayerCosts to measured per-chunk costs of a model whose chunk c holds layers[c] decoder
/// layers: the per-layer cost from the chunks holding neither end (at least one such chunk, so
/// p * v >= 3), the ends' extras from the first and last chunks. A kind not measured (NaN or
/// negative entries, e.g. full backwards in a zero-bubble trace) is derived: Backward = B + W,
/// or B and W as halves of Backward. Throws Error(InvalidArgument) naming what is missing.
LayerCosts fit_layer_costs(const ChunkCosts& measured, const std::vector<int>& layers);

/// Per-action costs measured from executor trace spans (TraceRecorder::events() of one or more
/// ranks of a run over `chunks` global chunks): per compute kind and chunk the mean span
/// duration in seconds, NaN where the run had no such action; p2p_latency the lower quartile of
/// the communication batches' durations (a batch whose peer was already there costs just the
/// transfer). Names it cannot read are skipped.
struct TraceSpan {
  std::string name;
  bool communication = false;
  double seconds = 0;
};
ChunkCosts measure_chunk_costs(const std::vector<TraceSpan>& spans, int chunks);

/// `measured` with the kinds a run did not have derived, chunk by chunk: a full backward as
/// B + W, B and W as halves of a full backward. Throws Error(InvalidArgument) naming the chunk
/// when its forward, or both its full backward and one of B and W, are missing (NaN).
ChunkCosts complete_chunk_costs(const ChunkCosts& measured);

/// The transfer time that makes the simulated makespan of `s` under `costs` equal `measured`,
/// the measured duration of the very iteration whose trace gave the compute costs: what the
/// spans do not show (transfers, waking a waiting peer, the end-of-iteration collectives) lumped
/// into the one unknown, found by bisection (the makespan grows with it). 0 when the compute
/// alone already takes `measured`. Throws Error(InvalidArgument) when `measured` is not finite
/// and > 0, or as simulate().
double fit_p2p_latency(const Schedule& s, ChunkCosts costs, double measured);

/// Per-chunk costs of a layout whose chunk c holds layers[c] decoder layers.
ChunkCosts chunk_costs(const LayerCosts& fit, const std::vector<int>& layers);

}  // namespace ptdp
