// The time model of pipeline schedules, one for the simulator (simulator.h), the generators
// (schedule.h) and the pass placing transfers (transfers.h). Every rank runs one action at a
// time; a compute action starts once its rank is free and the data it takes is on the rank, and
// lasts its cost. Data made on the same rank is there when the action making it ends; data made
// on another rank crosses by a transfer, as PipelineRun describes. PipelineClock keeps the
// times; PipelineRun is the one loop that advances them.
#pragma once

#include <cstddef>
#include <functional>
#include <limits>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <utility>
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

/// The cost of one action of `s` (0 for communication actions).
double action_cost(const Schedule& s, const ScheduleCosts& costs, ActionKind kind);

/// Each chunk's action costing the whole figure of `costs`, not 1/v of it: the cost function of
/// the generators, which decide by the order of events alone (a common factor changes none) and
/// keep whole-number times exact with the default (unit) costs.
std::function<double(const Action&)> per_chunk_cost(const ScheduleCosts& costs);

/// A compute action with the times it ran.
struct TimedCompute {
  Action action;
  double start = 0;
  double end = 0;
};

/// [rank] -> the compute actions of the rank in the order they ran.
using ComputeTimeline = std::vector<std::vector<TimedCompute>>;

/// The clock of a run: when each rank is free and when each piece of data is where it is used.
/// With implicit transfers data made for another rank lands there p2p_latency after it is made;
/// with explicit ones when deliver() says.
class PipelineClock {
 public:
  enum class Transfers { Explicit, Implicit };
  using Cost = std::function<double(const Action&)>;
  static constexpr double kNever = std::numeric_limits<double>::infinity();

  /// A clock for schedules of `shape`'s sizes and placement (its lists are not read).
  PipelineClock(const Schedule& shape, Cost cost, double p2p_latency, Transfers transfers);

  int ranks() const { return p_; }
  double latency() const { return latency_; }
  int rank_of(int chunk) const { return placement_rank(placement_, p_, chunk); }
  double free_at(int rank) const { return free_[static_cast<std::size_t>(rank)]; }

  /// When the data compute action `a` takes is all on its rank: kNever while some is not made
  /// (or, with explicit transfers, not received) yet.
  double ready(const Action& a) const;
  /// When the data compute action `a` takes from other ranks is on its rank: 0 when it takes
  /// none, kNever while some has not come.
  double received(const Action& a) const;

  /// Runs compute action `a` on its rank, from when the rank is free and the data is ready.
  TimedCompute run(const Action& a);

  /// `rank` stays busy (waiting at a gap) until `until`.
  void hold(int rank, double until);
  /// Explicit transfers: the data receive `recv` names is on its rank from `at`.
  void deliver(const Action& recv, double at);

  /// Implicit transfers: (when, rank) for each piece of data that will land on another rank,
  /// made since the last call.
  std::vector<std::pair<double, int>> take_landed();

 private:
  std::size_t unit(int microbatch, int chunk) const;

  int p_, chunks_;
  ChunkPlacement placement_;
  Cost cost_;
  double latency_;
  Transfers transfers_;
  std::vector<double> free_;
  // Per (microbatch, chunk): when its forward and its input-gradient backward ended, when its
  // input and its output gradient are on its rank (kNever: not yet).
  std::vector<double> forward_end_, backward_end_, input_at_, grad_at_;
  std::vector<std::pair<double, int>> landed_;  // implicit transfers: see take_landed()
};

/// What rank `rank` runs next at `now`: a compute action whose data is ready by then
/// (clock.ready(a) <= now), or nothing to wait for the next event.
using NextAction = std::function<std::optional<Action>(int rank, double now, const PipelineClock& clock)>;

/// A transfer of a run. Gap g of a rank lies before its compute action g (g = the number of
/// its compute actions: after the last one).
struct GapTransfer {
  int from = 0, to = 0;                    ///< the sending and the receiving rank
  Action send, recv;                       ///< its two sides
  std::size_t made_by = 0;                 ///< the sender's compute action making the data
  std::size_t send_gap = 0, recv_gap = 0;  ///< the gaps holding it: given, or where it met
  double met = PipelineClock::kNever;      ///< when both ranks stood at those gaps
};

/// [rank][gap]: set where a gap may hold no transfer, so that the actions on both of its sides
/// run back to back as one step (the data of both there before the first starts).
using BackToBack = std::vector<std::vector<bool>>;

/// One run of every rank on `clock`, event by event: the one loop of the time model. Between
/// two steps (an action, or actions run back to back) a rank stands at a gap; it starts its
/// next step once the step's data is there and the gap lets it go. How data crosses ranks:
///  - implicit (the default, with an implicit clock): it lands p2p_latency after it is made;
///  - listed transfers (the simulator): a transfer meets when both of its ranks stand at the
///    gaps holding it, and completes p2p_latency later; a rank leaves a gap once every transfer
///    there has completed;
///  - transfers met at first chance (the transfer pass): a transfer meets at the first moment
///    its data is made and both ranks stand at a gap; a rank leaves a gap once the transfers
///    met there have completed and it has handed over all the data it made (a send waits for
///    its receiver).
class PipelineRun {
 public:
  /// Ranks running fixed orders, each action once its data is there.
  PipelineRun(PipelineClock& clock, const std::vector<std::vector<Action>>& orders);
  /// Ranks choosing at every gap: `next` names the action, `counts[rank]` how many a rank runs.
  PipelineRun(PipelineClock& clock, std::vector<std::size_t> counts, NextAction next);
  PipelineRun(const PipelineRun&) = delete;
  PipelineRun& operator=(const PipelineRun&) = delete;

  /// Hands data over by `transfers` at the gaps they name (needs fixed orders).
  void listed(std::vector<GapTransfer>& transfers);
  /// Hands data over by `transfers` at the first chance, filling in their gaps; none at the
  /// gaps `back_to_back` marks (needs fixed orders).
  void first_chance(std::vector<GapTransfer>& transfers, const BackToBack& back_to_back);

  /// Runs to the end. Returns each rank's compute actions with their times; throws
  /// Error(Internal) naming `what` and the action a rank waits at forever.
  ComputeTimeline run(const std::string& what);
  /// When `rank` is done, the transfers of its last gap included (after run()).
  double finish(int rank) const;

 private:
  enum class Handover { Implicit, Listed, FirstChance };
  struct Rank {
    std::size_t next = 0;    // its next compute action, and the gap it stands at
    double released = 0;     // when the transfers met at its gap have completed
    std::size_t unsent = 0;  // first chance: transfers of data it made, not met yet
    double woken_at = -1;    // the last moment it was woken for
  };

  // A rank running a step stands at no gap until the step ends.
  bool at_gap(int rank, double now) const { return clock_.free_at(rank) <= now; }
  void wake(double at, int rank);
  void meet(GapTransfer& t, double now);
  void meet_at(int rank, double now);
  bool start_step(int rank, double now);
  void check_done(const std::string& what) const;

  PipelineClock& clock_;
  const std::vector<std::vector<Action>>* orders_ = nullptr;
  std::vector<std::size_t> counts_;
  NextAction next_;
  Handover handover_ = Handover::Implicit;
  std::vector<GapTransfer>* transfers_ = nullptr;
  const BackToBack* back_to_back_ = nullptr;
  std::vector<Rank> ranks_;
  ComputeTimeline ran_;
  // Transfers grouped by (rank, index): those of (r, i) are items[first[base[r] + i] ..
  // first[base[r] + i + 1]), in one array (schedules hold hundreds of thousands of actions).
  struct Groups {
    std::vector<std::size_t> base, first, items;
    std::span<const std::size_t> of(int rank, std::size_t i) const {
      const std::size_t k = base[static_cast<std::size_t>(rank)] + i;
      return {items.data() + first[k], items.data() + first[k + 1]};
    }
  };
  // `keys[r]` indices per rank; `key_of(t)` gives each transfer's (rank, index) pairs.
  template <typename KeyOf>
  Groups group(const std::vector<std::size_t>& keys, KeyOf key_of) const;

  Groups at_;     // listed: (rank, gap) -> the transfers there
  Groups makes_;  // first chance: (rank, action) -> the transfers of the data it makes
  std::vector<std::vector<std::size_t>> pending_;  // first chance: [rank] -> its transfers with data made, not met
  // When each rank may go on: its step ends, its gap's transfers complete, data lands for it.
  std::priority_queue<std::pair<double, int>, std::vector<std::pair<double, int>>, std::greater<>> wakes_;
};

}  // namespace ptdp
