// The pass in two steps, both on the time model (transfers.h says what each does).
//
// Step 1 is PipelineRun handing data over at the first chance; its meetings and times are
// then fixed. Step 2 moves each transfer, on both of its ranks at once, to a later pair of
// gaps that both ranks stand at together, for p2p_latency at least, before the data is used;
// a moved transfer completes there before either rank leaves, so no action starts later than
// in step 1's run.
//
// Why the lists cannot deadlock under the batch semantics of schedule.h: every transfer has
// one moment tau (its meeting), inside its gap on both ranks, and a rank's gaps are separated
// by actions of positive length, so the transfers of a rank's later batch all have a larger
// tau than those of an earlier one. A rank blocked at a batch waits for a peer that has not
// reached the matching batch, so is blocked at an earlier one, whose transfers have a smaller
// tau: along a chain of waiting ranks tau falls strictly, and the chain cannot close into a
// cycle. Both sides order the transfers of a gap alike, so the k-th transfer of a kind between
// two ranks is the same one on both. check_schedule() confirms it for every generated schedule.
#include "core/pipeline/transfers.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "base/error.h"

namespace ptdp {
namespace {

constexpr std::size_t kNone = static_cast<std::size_t>(-1);

// Whether gap g of rank r (before its action g) may hold transfers.
bool open(const BackToBack& joined, std::size_t r, std::size_t g) {
  return r >= joined.size() || g >= joined[r].size() || !joined[r][g];
}

// The order of one rank's transfers at one gap: sends, then receives, activations first (as
// Megatron's batches list them), then by moment. Between two ranks the transfers of one kind
// are all sends on one side and receives on the other, so both sides order them alike.
auto batch_order(const GapTransfer& t, bool sends) {
  return std::make_tuple(!sends, t.send.kind == ActionKind::SendGradient, t.met, t.send.microbatch, t.send.chunk,
                         t.from);
}

void check_costs(const ScheduleCosts& c) {
  const std::pair<const char*, double> compute[] = {{"forward", c.forward},
                                                    {"backward", c.backward},
                                                    {"backward_input", c.backward_input},
                                                    {"backward_weight", c.backward_weight}};
  for (const auto& [name, value] : compute) {
    PTDP_CHECK_ARG(std::isfinite(value) && value > 0,
                   std::string("cost ") + name + " = " + std::to_string(value) + " is not a finite number > 0");
  }
  PTDP_CHECK_ARG(std::isfinite(c.p2p_latency) && c.p2p_latency >= 0,
                 "cost p2p_latency = " + std::to_string(c.p2p_latency) + " is not a finite number >= 0");
}

void check_orders(const Schedule& s, const BackToBack& back_to_back) {
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const Action& a = s.ranks[r][i];
      PTDP_CHECK_ARG(!is_communication(a.kind), "add_transfers takes compute orders, but rank " + std::to_string(r) +
                                                    " action " + std::to_string(i) + " is " + a.str());
    }
  }
  PTDP_CHECK_ARG(back_to_back.empty() || back_to_back.size() == s.ranks.size(),
                 "back_to_back has " + std::to_string(back_to_back.size()) + " rank entries for " +
                     std::to_string(s.ranks.size()) + " ranks");
  for (std::size_t r = 0; r < back_to_back.size(); ++r) {
    PTDP_CHECK_ARG(back_to_back[r].size() <= s.ranks[r].size() && (back_to_back[r].empty() || !back_to_back[r][0]),
                   "back_to_back[" + std::to_string(r) + "] joins gaps that rank " + std::to_string(r) +
                       "'s list does not have (gap 0, before its first action, or past its " +
                       std::to_string(s.ranks[r].size()) + " actions)");
  }
}

// Every transfer the orders of `s` need, and for each the index of the action taking its data
// in the receiver's order.
std::vector<GapTransfer> transfers_of(const Schedule& s, std::vector<std::size_t>& used_by) {
  const int nc = s.num_chunks();
  auto unit = [&](int mb, int c) {
    return static_cast<std::size_t>(mb) * static_cast<std::size_t>(nc) + static_cast<std::size_t>(c);
  };
  // Where each (microbatch, chunk)'s forward and backward (full or B) sit in its rank's order.
  std::vector<std::size_t> forward_at(static_cast<std::size_t>(s.m) * static_cast<std::size_t>(nc), kNone);
  std::vector<std::size_t> backward_at(forward_at.size(), kNone);
  for (const auto& order : s.ranks) {
    for (std::size_t i = 0; i < order.size(); ++i) {
      const Action& a = order[i];
      if (a.kind == ActionKind::Forward) forward_at[unit(a.microbatch, a.chunk)] = i;
      if (a.kind == ActionKind::Backward || a.kind == ActionKind::BackwardInput) {
        backward_at[unit(a.microbatch, a.chunk)] = i;
      }
    }
  }
  std::vector<GapTransfer> out;
  for (int r = 0; r < s.p; ++r) {
    const auto& order = s.ranks[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < order.size(); ++i) {
      const Action& a = order[i];
      const int mb = a.microbatch, c = a.chunk;
      GapTransfer t;
      t.from = r;
      t.made_by = i;
      std::size_t use = kNone;
      if (a.kind == ActionKind::Forward && c + 1 < nc && s.rank_of_chunk(c + 1) != r) {
        t.to = s.rank_of_chunk(c + 1);
        t.send = Action{ActionKind::SendActivation, mb, c, t.to};
        t.recv = Action{ActionKind::RecvActivation, mb, c + 1, r};
        use = forward_at[unit(mb, c + 1)];
      } else if ((a.kind == ActionKind::Backward || a.kind == ActionKind::BackwardInput) && c > 0 &&
                 s.rank_of_chunk(c - 1) != r) {
        t.to = s.rank_of_chunk(c - 1);
        t.send = Action{ActionKind::SendGradient, mb, c, t.to};
        t.recv = Action{ActionKind::RecvGradient, mb, c - 1, r};
        use = backward_at[unit(mb, c - 1)];
      } else {
        continue;
      }
      PTDP_CHECK_ARG(use != kNone, "rank " + std::to_string(r) + "'s " + a.str() + " makes data for rank " +
                                       std::to_string(t.to) + ", whose order holds no " +
                                       (a.kind == ActionKind::Forward ? "forward" : "backward") + " of microbatch " +
                                       std::to_string(t.recv.microbatch) + " chunk " + std::to_string(t.recv.chunk) +
                                       " to take it");
      out.push_back(t);
      used_by.push_back(use);
    }
  }
  return out;
}

// Gap g of a rank lies before its action g (g = size: after the last); the rank arrives there
// when action g - 1 ends and leaves when action g starts.
double arrive(const std::vector<TimedCompute>& l, std::size_t g) { return g == 0 ? 0.0 : l[g - 1].end; }
double leave(const std::vector<TimedCompute>& l, std::size_t g) {
  return g < l.size() ? l[g].start : PipelineClock::kNever;
}

// Step 2 for one transfer: the latest pair of gaps, the receiver's at or before the use (its
// action used_by) and the sender's at or after the data is made, at which both ranks stand
// together for at least `latency` before the use, each gap one the transfer may join (`joins`).
// Walks both ranks' gaps back from the use, down to step 1's meeting, which is such a pair.
template <typename Joins>
void move_late(GapTransfer& t, std::size_t used_by, const ComputeTimeline& ran, double latency, Joins joins) {
  const auto& from = ran[static_cast<std::size_t>(t.from)];
  const auto& to = ran[static_cast<std::size_t>(t.to)];
  const double used = to[used_by].start;
  std::size_t g = used_by;
  std::size_t h = static_cast<std::size_t>(
      std::partition_point(from.begin(), from.end(), [&](const TimedCompute& x) { return x.end <= used; }) -
      from.begin());
  // Step 1's gaps may be joined, so these stop there at the latest.
  while (!joins(t.to, g)) --g;
  while (!joins(t.from, h)) --h;
  while (g > t.recv_gap || h > t.send_gap) {
    const double lo = std::max(arrive(to, g), arrive(from, h));
    const double hi = std::min({leave(to, g), leave(from, h), used});
    if (lo + latency <= hi) {
      t.met = std::max(lo, hi - latency);
      t.recv_gap = g;
      t.send_gap = h;
      return;
    }
    // The gap that begins later lies wholly after the other: step back from it.
    const bool receiver = arrive(to, g) > arrive(from, h);
    if (receiver ? g == t.recv_gap : h == t.send_gap) return;
    if (receiver) {
      do --g; while (!joins(t.to, g));
    } else {
      do --h; while (!joins(t.from, h));
    }
  }
}

// Puts the transfers into the compute orders of `s`, each side at its gap.
void write_lists(Schedule& s, const std::vector<GapTransfer>& transfers) {
  struct Side {
    std::size_t rank, gap;
    const GapTransfer* t;
    bool sends;
  };
  std::vector<Side> sides;
  sides.reserve(2 * transfers.size());
  for (const GapTransfer& t : transfers) {
    sides.push_back({static_cast<std::size_t>(t.from), t.send_gap, &t, true});
    sides.push_back({static_cast<std::size_t>(t.to), t.recv_gap, &t, false});
  }
  std::sort(sides.begin(), sides.end(), [](const Side& x, const Side& y) {
    if (x.rank != y.rank || x.gap != y.gap) return std::tie(x.rank, x.gap) < std::tie(y.rank, y.gap);
    return batch_order(*x.t, x.sends) < batch_order(*y.t, y.sends);
  });
  auto side = sides.begin();
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    const std::vector<Action> order = std::move(s.ranks[r]);
    auto& list = s.ranks[r];
    list.clear();
    list.reserve(order.size() + 2 * transfers.size() / s.ranks.size());
    for (std::size_t g = 0; g <= order.size(); ++g) {
      for (; side != sides.end() && side->rank == r && side->gap == g; ++side) {
        list.push_back(side->sends ? side->t->send : side->t->recv);
      }
      if (g < order.size()) list.push_back(order[g]);
    }
  }
}

}  // namespace

void add_transfers(Schedule& s, const ScheduleCosts& costs, const BackToBack& back_to_back) {
  check_costs(costs);
  check_orders(s, back_to_back);
  std::vector<std::size_t> used_by;
  std::vector<GapTransfer> transfers = transfers_of(s, used_by);
  // Step 1.
  PipelineClock clock(s, per_chunk_cost(costs), costs.p2p_latency, PipelineClock::Transfers::Explicit);
  PipelineRun run(clock, s.ranks);
  run.first_chance(transfers, back_to_back);
  const ComputeTimeline ran = run.run(std::string(schedule_kind_name(s.kind)) + " (placing its transfers)");
  // Step 2: the gaps a transfer may move to are open ones that hold step 1's transfers or
  // where the rank waits.
  BackToBack held(static_cast<std::size_t>(s.p));
  for (std::size_t r = 0; r < held.size(); ++r) held[r].assign(s.ranks[r].size() + 1, false);
  for (const GapTransfer& t : transfers) {
    held[static_cast<std::size_t>(t.from)][t.send_gap] = true;
    held[static_cast<std::size_t>(t.to)][t.recv_gap] = true;
  }
  auto joins = [&](int rank, std::size_t g) {
    const auto r = static_cast<std::size_t>(rank);
    return open(back_to_back, r, g) && (held[r][g] || leave(ran[r], g) > arrive(ran[r], g));
  };
  for (std::size_t i = 0; i < transfers.size(); ++i) move_late(transfers[i], used_by[i], ran, costs.p2p_latency, joins);
  write_lists(s, transfers);
}

}  // namespace ptdp
