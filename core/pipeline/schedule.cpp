// The schedule generators. Each writes every rank's compute order, the F, B (full or input
// gradient only) and W of its (microbatch, chunk)s in the order the rank runs them, and one
// pass, add_transfers() (transfers.h), places the sends and receives for every kind alike. The
// zero-bubble orders depend on when data arrives: they come from list scheduling on the time
// model the simulator times schedules with (time_model.h), at the papers' unit costs.
#include "core/pipeline/schedule.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "base/error.h"
#include "core/pipeline/checker.h"
#include "core/pipeline/time_model.h"
#include "core/pipeline/transfers.h"

namespace ptdp {

const char* action_kind_name(ActionKind k) {
  switch (k) {
    case ActionKind::Forward: return "Forward";
    case ActionKind::Backward: return "Backward";
    case ActionKind::BackwardInput: return "BackwardInput";
    case ActionKind::BackwardWeight: return "BackwardWeight";
    case ActionKind::SendActivation: return "SendActivation";
    case ActionKind::RecvActivation: return "RecvActivation";
    case ActionKind::SendGradient: return "SendGradient";
    case ActionKind::RecvGradient: return "RecvGradient";
  }
  return "?";
}

namespace {

// How Action::str() names each kind, and for a transfer the arrow towards its peer.
struct KindText {
  ActionKind kind;
  const char* name;
  const char* arrow;
};
constexpr KindText kKindTexts[] = {
    {ActionKind::Forward, "F", nullptr},           {ActionKind::Backward, "B", nullptr},
    {ActionKind::BackwardInput, "Bi", nullptr},    {ActionKind::BackwardWeight, "W", nullptr},
    {ActionKind::SendActivation, "SendAct", "->"}, {ActionKind::RecvActivation, "RecvAct", "<-"},
    {ActionKind::SendGradient, "SendGrad", "->"},  {ActionKind::RecvGradient, "RecvGrad", "<-"},
};

const KindText* kind_text(ActionKind k) {
  for (const KindText& t : kKindTexts) {
    if (t.kind == k) return &t;
  }
  return nullptr;
}

// The whole of `text` as an int.
bool read_int(std::string_view text, int& out) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end && !text.empty();
}

}  // namespace

std::string Action::str() const {
  // Built by appending: GCC 12 warns spuriously (-Wrestrict) on "literal" + std::string.
  const KindText* t = kind_text(kind);
  std::string out;
  if (t != nullptr) {
    out.append(t->name);
  } else {
    out.append("?").append(std::to_string(static_cast<int>(kind)));
  }
  out.append(" mb").append(std::to_string(microbatch)).append(" c").append(std::to_string(chunk));
  if (t != nullptr && t->arrow != nullptr) out.append(" ").append(t->arrow).append(" ").append(std::to_string(peer));
  return out;
}

std::optional<Action> parse_action(std::string_view text) {
  std::vector<std::string_view> words;
  for (std::size_t at = 0; at <= text.size();) {
    const std::size_t space = std::min(text.find(' ', at), text.size());
    words.push_back(text.substr(at, space - at));
    at = space + 1;
  }
  if (words.size() != 3 && words.size() != 5) return std::nullopt;
  for (const KindText& t : kKindTexts) {
    if (words[0] != t.name || (words.size() == 5) != (t.arrow != nullptr)) continue;
    Action a;
    a.kind = t.kind;
    const bool named = words[1].substr(0, 2) == "mb" && read_int(words[1].substr(2), a.microbatch) &&
                       words[2].substr(0, 1) == "c" && read_int(words[2].substr(1), a.chunk);
    if (!named) return std::nullopt;
    if (t.arrow != nullptr && (words[3] != t.arrow || !read_int(words[4], a.peer))) return std::nullopt;
    return a;
  }
  return std::nullopt;
}

const char* schedule_kind_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::GPipe: return "GPipe";
    case ScheduleKind::OneFOneB: return "1F1B";
    case ScheduleKind::Interleaved1F1B: return "interleaved 1F1B";
    case ScheduleKind::ZeroBubbleH1: return "ZB-H1";
    case ScheduleKind::ForwardOnly: return "forward-only";
    case ScheduleKind::ZeroBubbleV: return "ZB-V";
    case ScheduleKind::DualPipeV: return "DualPipeV";
    case ScheduleKind::InterleavedZeroBubble: return "interleaved zero bubble";
  }
  return "?";
}


ChunkPlacement placement_of(ScheduleKind kind) {
  return kind == ScheduleKind::ZeroBubbleV || kind == ScheduleKind::DualPipeV ? ChunkPlacement::V
                                                                               : ChunkPlacement::RoundRobin;
}

namespace {

using std::to_string;
using Orders = std::vector<std::vector<Action>>;

// Largest p * m * v a generator accepts (about 2^24 forward passes).
constexpr long long kMaxUnits = 1LL << 24;

Action compute(ActionKind k, int mb, int chunk) { return Action{k, mb, chunk, -1}; }

// GPipe: every forward, then every backward, in microbatch order.
Orders gpipe(const Schedule& s) {
  Orders orders(static_cast<std::size_t>(s.p));
  for (int r = 0; r < s.p; ++r) {
    auto& l = orders[static_cast<std::size_t>(r)];
    for (int i = 0; i < s.m; ++i) l.push_back(compute(ActionKind::Forward, i, r));
    for (int i = 0; i < s.m; ++i) l.push_back(compute(ActionKind::Backward, i, r));
  }
  return orders;
}

// 1F1B (PipeDream-Flush) as Megatron-LM's forward_backward_pipelining_without_interleaving: a
// warm-up of p - r - 1 forwards, then one forward and one backward at a time, then the
// cool-down backwards.
Orders one_f_one_b(const Schedule& s) {
  Orders orders(static_cast<std::size_t>(s.p));
  for (int r = 0; r < s.p; ++r) {
    auto& l = orders[static_cast<std::size_t>(r)];
    const int warmup = std::min(s.p - r - 1, s.m);
    const int steady = s.m - warmup;
    for (int i = 0; i < warmup; ++i) l.push_back(compute(ActionKind::Forward, i, r));
    for (int i = 0; i < steady; ++i) {
      l.push_back(compute(ActionKind::Forward, warmup + i, r));
      l.push_back(compute(ActionKind::Backward, i, r));
    }
    for (int i = steady; i < s.m; ++i) l.push_back(compute(ActionKind::Backward, i, r));
  }
  return orders;
}

// Megatron's warm-up of interleaved 1F1B on rank r: 2 (p - r - 1) + (v - 1) p forwards, every
// forward when m = p.
int interleaved_warmup(const Schedule& s, int r) {
  const int total = s.m * s.v;
  return s.m == s.p ? total : std::min((s.p - r - 1) * 2 + (s.v - 1) * s.p, total);
}

// Interleaved 1F1B as Megatron-LM's forward_backward_pipelining_with_interleaving (the
// schedule of the paper). Forward number k of a rank runs local chunk (k mod pv) / p on
// microbatch (k / pv) * p + k mod p; backwards walk the chunks in reverse. The warm-up
// forwards, then one forward and one backward at a time, then the cool-down backwards.
Orders interleaved(const Schedule& s) {
  const int p = s.p, v = s.v, nc = p * v, total = s.m * v;
  auto microbatch = [&](int k) { return k / nc * p + k % nc % p; };
  Orders orders(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) {
    auto forward = [&](int k) { return compute(ActionKind::Forward, microbatch(k), k % nc / p * p + r); };
    auto backward = [&](int k) { return compute(ActionKind::Backward, microbatch(k), (v - 1 - k % nc / p) * p + r); };
    auto& l = orders[static_cast<std::size_t>(r)];
    const int warmup = interleaved_warmup(s, r);
    const int steady = total - warmup;
    for (int k = 0; k < warmup; ++k) l.push_back(forward(k));
    for (int k = 0; k < steady; ++k) {
      l.push_back(forward(warmup + k));
      l.push_back(backward(k));
    }
    for (int k = steady; k < total; ++k) l.push_back(backward(k));
  }
  return orders;
}

// Megatron's interleaved 1F1B exchanges once per step of its steady state, after the forward
// and the backward have run back to back: [rank][i] marks the gap before each such backward.
BackToBack interleaved_steps(const Schedule& s) {
  BackToBack joined(static_cast<std::size_t>(s.p));
  for (int r = 0; r < s.p; ++r) {
    const int total = s.m * s.v, warmup = interleaved_warmup(s, r);
    auto& j = joined[static_cast<std::size_t>(r)];
    j.assign(static_cast<std::size_t>(2 * total), false);
    for (int k = 0; k < total - warmup; ++k) j[static_cast<std::size_t>(warmup + 2 * k + 1)] = true;
  }
  return joined;
}

// The clock the generators decide by: F = B = W = 1 per chunk and a full backward 2, transfers
// free, the unit costs of the papers and the ones add_transfers() places the transfers with.
PipelineClock unit_clock(const Schedule& s) {
  return PipelineClock(s, per_chunk_cost(ScheduleCosts{}), 0, PipelineClock::Transfers::Implicit);
}

Orders orders_of(const ComputeTimeline& ran) {
  Orders orders(ran.size());
  for (std::size_t r = 0; r < ran.size(); ++r) {
    for (const TimedCompute& t : ran[r]) orders[r].push_back(t.action);
  }
  return orders;
}

// Zero-bubble schedules on a base order (ZB-H1 on 1F1B's, interleaved zero bubble on
// interleaved 1F1B's), with each backward split into B and a W queued behind it. Whenever it is
// free a rank runs the next action of the base order if its data is there, unless that is a
// forward that would hold more than limit[rank] activations (a slot is held from a forward to
// its W); else the oldest queued W. So the W fill the waits of the base order (Qi et al.,
// ICLR'24) at the base order's peak activation memory, and leftover W end the schedule.
Orders deferred_weights(const Schedule& s, const Orders& base, const std::vector<int>& limit) {
  const auto p = static_cast<std::size_t>(s.p);
  std::vector<std::size_t> counts(p), next(p, 0);
  std::vector<std::deque<Action>> queued(p);
  std::vector<int> held(p, 0);
  for (std::size_t r = 0; r < p; ++r) {
    counts[r] = base[r].size();
    for (const Action& a : base[r]) counts[r] += a.kind == ActionKind::Backward;
  }
  auto pick = [&](int rank, double now, const PipelineClock& clock) -> std::optional<Action> {
    const auto r = static_cast<std::size_t>(rank);
    if (next[r] < base[r].size()) {
      Action a = base[r][next[r]];
      if (a.kind == ActionKind::Backward) a.kind = ActionKind::BackwardInput;
      const bool fits = a.kind != ActionKind::Forward || held[r] < limit[r];
      if (clock.ready(a) <= now && fits) {
        ++next[r];
        if (a.kind == ActionKind::Forward) ++held[r];
        if (a.kind == ActionKind::BackwardInput) {
          queued[r].push_back(compute(ActionKind::BackwardWeight, a.microbatch, a.chunk));
        }
        return a;
      }
    }
    if (queued[r].empty()) return std::nullopt;
    const Action w = queued[r].front();
    queued[r].pop_front();
    --held[r];
    return w;
  };
  PipelineClock clock = unit_clock(s);
  return orders_of(PipelineRun(clock, counts, pick).run(schedule_kind_name(s.kind)));
}

// The most activations each rank of `orders` holds at once (a slot from a forward to its backward).
std::vector<int> peak_activations(const Orders& orders) {
  std::vector<int> peak;
  for (const auto& l : orders) {
    int held = 0, most = 0;
    for (const Action& a : l) {
      if (a.kind == ActionKind::Forward) most = std::max(most, ++held);
      if (a.kind == ActionKind::Backward) --held;
    }
    peak.push_back(most);
  }
  return peak;
}

// ZB-V as list scheduling, in the manner of the zero-bubble authors' greedy V-schedule builder:
// a free rank runs, in this order of preference, the input-gradient backward (B) of its oldest
// microbatch whose output gradient has arrived (the later chunk first); the forward of its
// second (returning) chunk; the forward of its first chunk, while fewer than p microbatches
// hold activations on the rank (W of the first chunk not yet run): the activation memory of
// 1F1B, p microbatches of a whole stage; else the oldest pending W. Idle otherwise.
Orders zero_bubble_v(const Schedule& s) {
  const auto p = static_cast<std::size_t>(s.p);
  const int m = s.m;
  std::vector<std::deque<Action>> pending(p);
  std::vector<std::array<int, 2>> next_f(p, {0, 0}), next_b(p, {0, 0});
  std::vector<int> inflight(p, 0);
  auto pick = [&](int rank, double now, const PipelineClock& clock) -> std::optional<Action> {
    const auto r = static_cast<std::size_t>(rank);
    const int c[2] = {s.chunk_at(rank, 0), s.chunk_at(rank, 1)};
    auto ready = [&](const Action& a) { return clock.ready(a) <= now; };
    std::optional<Action> pick;
    // B of the oldest microbatch: per chunk the backwards go in microbatch order.
    for (int j : {1, 0}) {
      const int mb = next_b[r][static_cast<std::size_t>(j)];
      const Action b = compute(ActionKind::BackwardInput, mb, c[j]);
      if (mb < m && ready(b) && (!pick || mb < pick->microbatch)) pick = b;
    }
    if (!pick && next_f[r][1] < m && ready(compute(ActionKind::Forward, next_f[r][1], c[1]))) {
      pick = compute(ActionKind::Forward, next_f[r][1], c[1]);
    }
    const bool room = inflight[r] < s.p;
    if (!pick && next_f[r][0] < m && room && ready(compute(ActionKind::Forward, next_f[r][0], c[0]))) {
      pick = compute(ActionKind::Forward, next_f[r][0], c[0]);
    }
    if (!pick && !pending[r].empty()) {
      pick = pending[r].front();
      pending[r].pop_front();
    }
    if (!pick) return std::nullopt;
    const auto j = static_cast<std::size_t>(s.local_index(pick->chunk));
    if (pick->kind == ActionKind::Forward) {
      ++next_f[r][j];
      if (j == 0) ++inflight[r];
    } else if (pick->kind == ActionKind::BackwardInput) {
      ++next_b[r][j];
      pending[r].push_back(compute(ActionKind::BackwardWeight, pick->microbatch, pick->chunk));
    } else if (j == 0) {
      --inflight[r];
    }
    return pick;
  };
  PipelineClock clock = unit_clock(s);
  const std::vector<std::size_t> counts(p, 6 * static_cast<std::size_t>(m));  // F, B and W of two chunks
  return orders_of(PipelineRun(clock, counts, pick).run("ZB-V"));
}

// DualPipeV in the order of DeepSeek's dualpipev.py (DualPipeV.step), single-stream: phase 0 is
// the rank's first chunk (r), phase 1 its second (2p - 1 - r); each phase runs its microbatches
// in order; a zero-bubble backward (B) queues its W, which a later W step runs (first in, first
// out, as its WeightGradStore); the other backwards are full. Steps, for rank r:
//  1. 2 (p - r - 1) x F0;  2. (r + 1) x (F0 F1);  3. (p - r - 1) x (B1zb W F1);
//  4. (m - 2p + r + 1) x (F0 B1 F1 B0);  5. (p - r - 1) x (B1 F1 B0);
//  6. (r + 1) x (B1 B0), zero-bubble from the middle iteration on (odd ranks from its B1, even
//     ranks from its B0);  7. (p - r - 1) x (W B0zb);  8. (r + 1) x W.
// The F0 B1 of step 4 are the pair DualPipe overlaps (forward of one microbatch with backward of
// another); run on one stream here they keep that order.
Orders dual_pipe_v(const Schedule& s) {
  const int p = s.p, m = s.m;
  Orders orders(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) {
    auto& l = orders[static_cast<std::size_t>(r)];
    const int c[2] = {s.chunk_at(r, 0), s.chunk_at(r, 1)};
    int nf[2] = {0, 0}, nb[2] = {0, 0};
    std::deque<Action> store;
    auto F = [&](int ph) { l.push_back(compute(ActionKind::Forward, nf[ph]++, c[ph])); };
    auto B = [&](int ph, bool zb) {
      const int mb = nb[ph]++;
      if (zb) {
        l.push_back(compute(ActionKind::BackwardInput, mb, c[ph]));
        store.push_back(compute(ActionKind::BackwardWeight, mb, c[ph]));
      } else {
        l.push_back(compute(ActionKind::Backward, mb, c[ph]));
      }
    };
    auto W = [&] {
      if (store.empty()) throw_error(ErrorCode::Internal, "DualPipeV: a W step with no queued weight gradient");
      l.push_back(store.front());
      store.pop_front();
    };
    for (int i = 0; i < 2 * (p - r - 1); ++i) F(0);
    for (int i = 0; i < r + 1; ++i) F(0), F(1);
    for (int i = 0; i < p - r - 1; ++i) B(1, true), W(), F(1);
    for (int i = 0; i < m - 2 * p + r + 1; ++i) F(0), B(1, false), F(1), B(0, false);
    for (int i = 0; i < p - r - 1; ++i) B(1, false), F(1), B(0, false);
    const int step6 = r + 1;
    bool zb = false;
    for (int i = 0; i < step6; ++i) {
      if (i == step6 / 2 && r % 2 == 1) zb = true;
      B(1, zb);
      if (i == step6 / 2 && r % 2 == 0) zb = true;
      B(0, zb);
    }
    for (int i = 0; i < p - r - 1; ++i) W(), B(0, true);
    for (int i = 0; i < r + 1; ++i) W();
    if (!store.empty()) throw_error(ErrorCode::Internal, "DualPipeV: weight gradients left in the queue");
  }
  return orders;
}

// Forward only: microbatch after microbatch, each rank's chunks in model order.
Orders forward_only(const Schedule& s) {
  Orders orders(static_cast<std::size_t>(s.p));
  for (int r = 0; r < s.p; ++r) {
    for (int mb = 0; mb < s.m; ++mb) {
      for (int j = 0; j < s.v; ++j) {
        orders[static_cast<std::size_t>(r)].push_back(compute(ActionKind::Forward, mb, s.chunk_at(r, j)));
      }
    }
  }
  return orders;
}

// Every rank's compute order for the kind and sizes of `s`.
Orders compute_orders(const Schedule& s) {
  switch (s.kind) {
    case ScheduleKind::GPipe: return gpipe(s);
    case ScheduleKind::OneFOneB: return one_f_one_b(s);
    case ScheduleKind::Interleaved1F1B: return interleaved(s);
    case ScheduleKind::ZeroBubbleH1:
      // 1F1B's peak activation memory: min(p, m) microbatches, what its first rank holds.
      return deferred_weights(s, one_f_one_b(s), std::vector<int>(static_cast<std::size_t>(s.p), std::min(s.p, s.m)));
    case ScheduleKind::ForwardOnly: return forward_only(s);
    case ScheduleKind::ZeroBubbleV: return zero_bubble_v(s);
    case ScheduleKind::DualPipeV: return dual_pipe_v(s);
    case ScheduleKind::InterleavedZeroBubble: {
      // Each rank's peak of interleaved 1F1B.
      const Orders base = interleaved(s);
      return deferred_weights(s, base, peak_activations(base));
    }
  }
  throw_error(ErrorCode::Internal, "no generator for schedule kind " + to_string(static_cast<int>(s.kind)));
}

// The compute orders of `s`'s kind with their transfers, placed at unit costs, checked.
void generate(Schedule& s) {
  s.ranks = compute_orders(s);
  const BackToBack steps = s.kind == ScheduleKind::Interleaved1F1B ? interleaved_steps(s) : BackToBack{};
  add_transfers(s, ScheduleCosts{}, steps);
  const CheckResult check = check_schedule(s);
  if (!check.ok) {
    throw_error(ErrorCode::Internal, std::string(schedule_kind_name(s.kind)) + " schedule for p = " + to_string(s.p) +
                                         ", m = " + to_string(s.m) + ", v = " + to_string(s.v) + " (" +
                                         chunk_placement_name(s.placement) + " placement) fails its check: " +
                                         check.message);
  }
}

}  // namespace

Schedule make_forward_only(int p, int m, int v, ChunkPlacement placement) {
  PTDP_CHECK_ARG(placement == ChunkPlacement::RoundRobin || placement == ChunkPlacement::V,
                 "unknown chunk placement " + to_string(static_cast<int>(placement)));
  PTDP_CHECK_ARG(placement != ChunkPlacement::V || v == 2,
                 "the V placement holds v = 2 chunks per rank, got v = " + to_string(v));
  if (placement == ChunkPlacement::RoundRobin) return make_schedule(ScheduleKind::ForwardOnly, p, m, v);
  Schedule s = make_schedule(ScheduleKind::ForwardOnly, p, m, 1);  // checks p and m
  s.v = v;
  s.placement = placement;
  generate(s);
  return s;
}

Schedule make_schedule(ScheduleKind kind, int p, int m, int v) {
  const int k = static_cast<int>(kind);
  PTDP_CHECK_ARG(k >= 0 && k <= static_cast<int>(ScheduleKind::InterleavedZeroBubble),
                 "unknown schedule kind " + to_string(k));
  const std::string name = schedule_kind_name(kind);
  PTDP_CHECK_ARG(p > 0, "pipeline size p = " + to_string(p) + " must be > 0");
  PTDP_CHECK_ARG(m > 0, "number of microbatches m = " + to_string(m) + " must be > 0");
  PTDP_CHECK_ARG(v > 0, "chunks per rank v = " + to_string(v) + " must be > 0");
  PTDP_CHECK_ARG(static_cast<long long>(p) * m * v <= kMaxUnits,
                 "p * m * v = " + to_string(p) + " * " + to_string(m) + " * " + to_string(v) +
                     " exceeds the largest supported schedule (" + to_string(kMaxUnits) +
                     " chunk-microbatches)");
  if (kind == ScheduleKind::Interleaved1F1B || kind == ScheduleKind::InterleavedZeroBubble) {
    PTDP_CHECK_ARG(v > 1, name + " needs v > 1 chunks per rank, got v = 1; use " +
                              (kind == ScheduleKind::Interleaved1F1B ? "1F1B" : "ZB-H1") +
                              " for one chunk per rank");
    PTDP_CHECK_ARG(m % p == 0, name + " needs the number of microbatches to be a "
                                      "multiple of the pipeline size: m = " +
                                   to_string(m) + ", p = " + to_string(p));
  } else if (kind == ScheduleKind::ZeroBubbleV || kind == ScheduleKind::DualPipeV) {
    PTDP_CHECK_ARG(v == 2, name + " places v = 2 chunks per rank in a V, got v = " + to_string(v));
    PTDP_CHECK_ARG(kind != ScheduleKind::DualPipeV || m >= 2 * p,
                   "DualPipeV needs at least 2p microbatches: m = " + to_string(m) + ", p = " + to_string(p) +
                       " (2p = " + to_string(2 * p) + ")");
  } else if (kind != ScheduleKind::ForwardOnly) {
    PTDP_CHECK_ARG(v == 1, name + " has one chunk per rank, got v = " + to_string(v) +
                               "; use interleaved 1F1B for v > 1");
  }
  Schedule s;
  s.kind = kind;
  s.p = p;
  s.m = m;
  s.v = v;
  s.placement = placement_of(kind);
  generate(s);
  return s;
}

}  // namespace ptdp
