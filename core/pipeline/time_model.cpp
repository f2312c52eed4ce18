#include "core/pipeline/time_model.h"

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "base/error.h"

namespace ptdp {

double action_cost(const Schedule& s, const ScheduleCosts& c, ActionKind kind) {
  const double v = s.v;
  switch (kind) {
    case ActionKind::Forward: return c.forward / v;
    case ActionKind::Backward: return c.backward / v;
    case ActionKind::BackwardInput: return c.backward_input / v;
    case ActionKind::BackwardWeight: return c.backward_weight / v;
    default: return 0;
  }
}

std::function<double(const Action&)> per_chunk_cost(const ScheduleCosts& costs) {
  return [costs](const Action& a) {
    switch (a.kind) {
      case ActionKind::Forward: return costs.forward;
      case ActionKind::Backward: return costs.backward;
      case ActionKind::BackwardInput: return costs.backward_input;
      case ActionKind::BackwardWeight: return costs.backward_weight;
      default: return 0.0;
    }
  };
}

PipelineClock::PipelineClock(const Schedule& shape, Cost cost, double p2p_latency, Transfers transfers)
    : p_(shape.p),
      chunks_(shape.num_chunks()),
      placement_(shape.placement),
      cost_(std::move(cost)),
      latency_(p2p_latency),
      transfers_(transfers),
      free_(static_cast<std::size_t>(shape.p), 0.0) {
  const std::size_t units = static_cast<std::size_t>(shape.m) * static_cast<std::size_t>(chunks_);
  forward_end_.assign(units, kNever);
  backward_end_.assign(units, kNever);
  input_at_.assign(units, kNever);
  grad_at_.assign(units, kNever);
}

std::size_t PipelineClock::unit(int microbatch, int chunk) const {
  return static_cast<std::size_t>(microbatch) * static_cast<std::size_t>(chunks_) + static_cast<std::size_t>(chunk);
}

double PipelineClock::ready(const Action& a) const {
  const std::size_t u = unit(a.microbatch, a.chunk);
  switch (a.kind) {
    case ActionKind::Forward: return a.chunk == 0 ? 0.0 : input_at_[u];
    case ActionKind::Backward:
    case ActionKind::BackwardInput: return std::max(forward_end_[u], a.chunk + 1 == chunks_ ? 0.0 : grad_at_[u]);
    case ActionKind::BackwardWeight: return backward_end_[u];
    default: return kNever;
  }
}

double PipelineClock::received(const Action& a) const {
  const std::size_t u = unit(a.microbatch, a.chunk);
  const int r = rank_of(a.chunk);
  switch (a.kind) {
    case ActionKind::Forward: return a.chunk == 0 || rank_of(a.chunk - 1) == r ? 0.0 : input_at_[u];
    case ActionKind::Backward:
    case ActionKind::BackwardInput: return a.chunk + 1 == chunks_ || rank_of(a.chunk + 1) == r ? 0.0 : grad_at_[u];
    default: return 0;
  }
}

TimedCompute PipelineClock::run(const Action& a) {
  const int r = rank_of(a.chunk);
  const double start = std::max(free_at(r), ready(a));
  if (start == kNever) {
    throw_error(ErrorCode::Internal, "time model: " + a.str() + " runs before the data it takes exists");
  }
  const double end = start + cost_(a);
  free_[static_cast<std::size_t>(r)] = end;
  // Data for chunk `to` of the same microbatch: there at `end` on the same rank, by a transfer
  // otherwise.
  auto pass = [&](std::vector<double>& at, int to) {
    double& there = at[unit(a.microbatch, to)];
    if (rank_of(to) == r) {
      there = end;
    } else if (transfers_ == Transfers::Implicit) {
      there = end + latency_;
      landed_.emplace_back(there, rank_of(to));
    }
  };
  const std::size_t u = unit(a.microbatch, a.chunk);
  if (a.kind == ActionKind::Forward) {
    forward_end_[u] = end;
    if (a.chunk + 1 < chunks_) pass(input_at_, a.chunk + 1);
  } else if (a.kind == ActionKind::Backward || a.kind == ActionKind::BackwardInput) {
    backward_end_[u] = end;
    if (a.chunk > 0) pass(grad_at_, a.chunk - 1);
  }
  return {a, start, end};
}

void PipelineClock::hold(int rank, double until) {
  double& f = free_[static_cast<std::size_t>(rank)];
  f = std::max(f, until);
}

void PipelineClock::deliver(const Action& recv, double at) {
  const std::size_t u = unit(recv.microbatch, recv.chunk);
  if (recv.kind == ActionKind::RecvActivation) input_at_[u] = at;
  if (recv.kind == ActionKind::RecvGradient) grad_at_[u] = at;
}

std::vector<std::pair<double, int>> PipelineClock::take_landed() {
  std::vector<std::pair<double, int>> out;
  out.swap(landed_);
  return out;
}

PipelineRun::PipelineRun(PipelineClock& clock, const std::vector<std::vector<Action>>& orders)
    : clock_(clock), orders_(&orders), ranks_(static_cast<std::size_t>(clock.ranks())), ran_(ranks_.size()) {
  for (const auto& o : orders) counts_.push_back(o.size());
  next_ = [this](int rank, double, const PipelineClock&) -> std::optional<Action> {
    return (*orders_)[static_cast<std::size_t>(rank)][ranks_[static_cast<std::size_t>(rank)].next];
  };
}

PipelineRun::PipelineRun(PipelineClock& clock, std::vector<std::size_t> counts, NextAction next)
    : clock_(clock),
      counts_(std::move(counts)),
      next_(std::move(next)),
      ranks_(static_cast<std::size_t>(clock.ranks())),
      ran_(ranks_.size()) {}

template <typename KeyOf>
PipelineRun::Groups PipelineRun::group(const std::vector<std::size_t>& keys, KeyOf key_of) const {
  Groups g;
  std::size_t total = 0;
  for (std::size_t n : keys) {
    g.base.push_back(total);
    total += n;
  }
  g.first.assign(total + 1, 0);
  auto each = [&](auto f) {
    for (std::size_t i = 0; i < transfers_->size(); ++i) {
      for (const auto& [rank, index] : key_of((*transfers_)[i])) f(g.base[static_cast<std::size_t>(rank)] + index, i);
    }
  };
  each([&](std::size_t k, std::size_t) { ++g.first[k + 1]; });
  for (std::size_t k = 0; k < total; ++k) g.first[k + 1] += g.first[k];
  g.items.resize(g.first[total]);
  std::vector<std::size_t> fill(g.first.begin(), g.first.end() - 1);
  each([&](std::size_t k, std::size_t i) { g.items[fill[k]++] = i; });
  return g;
}

void PipelineRun::listed(std::vector<GapTransfer>& transfers) {
  handover_ = Handover::Listed;
  transfers_ = &transfers;
  std::vector<std::size_t> gaps;
  for (std::size_t n : counts_) gaps.push_back(n + 1);
  at_ = group(gaps, [](const GapTransfer& t) {
    return std::array<std::pair<int, std::size_t>, 2>{{{t.from, t.send_gap}, {t.to, t.recv_gap}}};
  });
}

void PipelineRun::first_chance(std::vector<GapTransfer>& transfers, const BackToBack& back_to_back) {
  handover_ = Handover::FirstChance;
  transfers_ = &transfers;
  back_to_back_ = &back_to_back;
  pending_.assign(ranks_.size(), {});
  makes_ = group(counts_, [](const GapTransfer& t) {
    return std::array<std::pair<int, std::size_t>, 1>{{{t.from, t.made_by}}};
  });
}

void PipelineRun::wake(double at, int rank) {
  // The transfers of a batch wake their ranks at one moment: once is enough.
  double& last = ranks_[static_cast<std::size_t>(rank)].woken_at;
  if (last == at) return;
  last = at;
  wakes_.emplace(at, rank);
}

void PipelineRun::meet(GapTransfer& t, double now) {
  Rank& from = ranks_[static_cast<std::size_t>(t.from)];
  Rank& to = ranks_[static_cast<std::size_t>(t.to)];
  t.met = now;
  t.send_gap = from.next;
  t.recv_gap = to.next;
  const double done = now + clock_.latency();
  from.released = std::max(from.released, done);
  to.released = std::max(to.released, done);
  if (handover_ == Handover::FirstChance) --from.unsent;
  clock_.deliver(t.recv, done);
  // Both may go on once it completes.
  wake(done, t.from);
  wake(done, t.to);
}

// The transfers of `rank`, standing at a gap, whose other rank stands where they may meet.
void PipelineRun::meet_at(int rank, double now) {
  const auto r = static_cast<std::size_t>(rank);
  auto other_ready = [&](const GapTransfer& t) {
    const int q = t.from == rank ? t.to : t.from;
    if (!at_gap(q, now)) return false;
    return handover_ != Handover::Listed || ranks_[static_cast<std::size_t>(q)].next == (t.from == rank ? t.recv_gap : t.send_gap);
  };
  if (handover_ == Handover::Listed) {
    for (std::size_t i : at_.of(rank, ranks_[r].next)) {
      GapTransfer& t = (*transfers_)[i];
      if (t.met == PipelineClock::kNever && other_ready(t)) meet(t, now);
    }
  } else if (handover_ == Handover::FirstChance) {
    auto& mine = pending_[r];
    for (std::size_t i : mine) {
      GapTransfer& t = (*transfers_)[i];
      if (t.met == PipelineClock::kNever && other_ready(t)) meet(t, now);
    }
    mine.erase(std::remove_if(mine.begin(), mine.end(),
                              [&](std::size_t i) { return (*transfers_)[i].met != PipelineClock::kNever; }),
               mine.end());
  }
}

// Starts the next step of `rank`, standing at a gap, if the gap and the step's data let it.
bool PipelineRun::start_step(int rank, double now) {
  const auto r = static_cast<std::size_t>(rank);
  Rank& k = ranks_[r];
  if (k.next >= counts_[r] || k.released > now || k.unsent > 0) return false;
  if (handover_ == Handover::Listed) {
    for (std::size_t i : at_.of(rank, k.next)) {
      if ((*transfers_)[i].met == PipelineClock::kNever) return false;
    }
  }
  const std::optional<Action> first = next_(rank, now, clock_);
  if (!first) return false;
  if (!(clock_.ready(*first) <= now)) {
    if (orders_ != nullptr) return false;
    throw_error(ErrorCode::Internal, "rank " + std::to_string(rank) + " chose " + first->str() + " at time " +
                                         std::to_string(now) + ", before its data is there");
  }
  if (clock_.rank_of(first->chunk) != rank) {
    throw_error(ErrorCode::Internal,
                "rank " + std::to_string(rank) + " is given " + first->str() + ", which is not its own");
  }
  // The step: this action and those joined back to back to it, whose data from other ranks
  // must be there before it starts.
  std::size_t end = k.next + 1;
  if (back_to_back_ != nullptr && r < back_to_back_->size()) {
    const auto& joined = (*back_to_back_)[r];
    while (end < counts_[r] && end < joined.size() && joined[end]) ++end;
    for (std::size_t i = k.next + 1; i < end; ++i) {
      if (!(clock_.received((*orders_)[r][i]) <= now)) return false;
    }
  }
  clock_.hold(rank, now);
  for (; k.next < end; ++k.next) {
    ran_[r].push_back(clock_.run(orders_ != nullptr ? (*orders_)[r][k.next] : *first));
    for (const auto& [at, q] : clock_.take_landed()) wake(at, q);
    if (handover_ == Handover::FirstChance) {
      for (std::size_t i : makes_.of(rank, k.next)) {
        pending_[r].push_back(i);
        pending_[static_cast<std::size_t>((*transfers_)[i].to)].push_back(i);
        ++k.unsent;
      }
    }
  }
  wake(ran_[r].back().end, rank);
  return true;
}

ComputeTimeline PipelineRun::run(const std::string& what) {
  for (int r = 0; r < static_cast<int>(ranks_.size()); ++r) wake(0, r);
  std::vector<char> in_round(ranks_.size(), 0);
  std::vector<int> round;
  auto gather = [&](double now) {  // the ranks woken at `now` join the round
    for (; !wakes_.empty() && wakes_.top().first == now; wakes_.pop()) {
      const auto r = static_cast<std::size_t>(wakes_.top().second);
      if (!in_round[r]) round.push_back(wakes_.top().second);
      in_round[r] = 1;
    }
  };
  while (!wakes_.empty()) {
    const double now = wakes_.top().first;
    // The ranks woken now: first the transfers meet (one that costs nothing wakes its partner
    // now, who joins), then the ranks that may go on start their steps; again while an action
    // of zero cost ends now.
    while (!wakes_.empty() && wakes_.top().first == now) {
      round.clear();
      gather(now);
      for (std::size_t i = 0; i < round.size(); ++i) {
        if (at_gap(round[i], now)) meet_at(round[i], now);
        gather(now);
      }
      std::sort(round.begin(), round.end());
      for (int r : round) {
        in_round[static_cast<std::size_t>(r)] = 0;
        while (at_gap(r, now) && start_step(r, now)) {
        }
      }
    }
  }
  check_done(what);
  return std::move(ran_);
}

void PipelineRun::check_done(const std::string& what) const {
  for (std::size_t r = 0; r < ranks_.size(); ++r) {
    const std::size_t n = ranks_[r].next;
    if (n < counts_[r]) {
      throw_error(ErrorCode::Internal, what + ": rank " + std::to_string(r) + " waits forever" +
                                           (orders_ ? " at " + (*orders_)[r][n].str() : "") + " after " +
                                           std::to_string(n) + " of its " + std::to_string(counts_[r]) + " actions");
    }
  }
  if (transfers_ != nullptr) {
    for (const GapTransfer& t : *transfers_) {
      if (t.met == PipelineClock::kNever) {
        throw_error(ErrorCode::Internal, what + ": " + t.send.str() + " of rank " + std::to_string(t.from) +
                                             " never meets its receive");
      }
    }
  }
}

double PipelineRun::finish(int rank) const {
  return std::max(clock_.free_at(rank), ranks_[static_cast<std::size_t>(rank)].released);
}

}  // namespace ptdp
