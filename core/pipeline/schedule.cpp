// The schedule generators. Each rank's list carries its sends and receives at the points where
// the rank issues them; consecutive ones form one batch (schedule.h). The placements follow
// Megatron-LM's p2p calls (send_forward_recv_backward and friends), which pair every batch of a
// rank with one batch of its neighbour, so the ranks advance in lockstep and never deadlock.
#include "core/pipeline/schedule.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <deque>
#include <string>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "core/pipeline/checker.h"

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

std::string Action::str() const {
  // Built by appending: GCC 12 warns spuriously (-Wrestrict) on "literal" + std::string.
  std::string out;
  const char* prefix = nullptr;
  const char* arrow = nullptr;
  switch (kind) {
    case ActionKind::Forward: prefix = "F"; break;
    case ActionKind::Backward: prefix = "B"; break;
    case ActionKind::BackwardInput: prefix = "Bi"; break;
    case ActionKind::BackwardWeight: prefix = "W"; break;
    case ActionKind::SendActivation: prefix = "SendAct mb"; arrow = " -> "; break;
    case ActionKind::RecvActivation: prefix = "RecvAct mb"; arrow = " <- "; break;
    case ActionKind::SendGradient: prefix = "SendGrad mb"; arrow = " -> "; break;
    case ActionKind::RecvGradient: prefix = "RecvGrad mb"; arrow = " <- "; break;
  }
  if (prefix == nullptr) {
    out.append("?").append(std::to_string(static_cast<int>(kind))).append(" mb");
  } else {
    out.append(prefix);
  }
  out.append(std::to_string(microbatch));
  out.append(arrow == nullptr && prefix != nullptr ? "c" : " c");
  out.append(std::to_string(chunk));
  if (arrow != nullptr) out.append(arrow).append(std::to_string(peer));
  return out;
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

// Largest p * m * v a generator accepts (about 2^24 forward passes).
constexpr long long kMaxUnits = 1LL << 24;

Action compute(ActionKind k, int mb, int chunk) { return Action{k, mb, chunk, -1}; }
Action transfer(ActionKind k, int mb, int chunk, int peer) { return Action{k, mb, chunk, peer}; }

// GPipe: every forward, then every backward in microbatch order. Each forward's output leaves in
// the batch that receives the next forward's input (Megatron's send_forward_recv_forward).
void gpipe(Schedule& s) {
  const int p = s.p, m = s.m;
  for (int r = 0; r < p; ++r) {
    auto& l = s.ranks[static_cast<std::size_t>(r)];
    const bool first = r == 0, last = r == p - 1;
    if (!first) l.push_back(transfer(ActionKind::RecvActivation, 0, r, r - 1));
    for (int i = 0; i < m; ++i) {
      l.push_back(compute(ActionKind::Forward, i, r));
      if (!last) l.push_back(transfer(ActionKind::SendActivation, i, r, r + 1));
      if (!first && i + 1 < m) l.push_back(transfer(ActionKind::RecvActivation, i + 1, r, r - 1));
    }
    if (!last) l.push_back(transfer(ActionKind::RecvGradient, 0, r, r + 1));
    for (int i = 0; i < m; ++i) {
      l.push_back(compute(ActionKind::Backward, i, r));
      if (!first) l.push_back(transfer(ActionKind::SendGradient, i, r, r - 1));
      if (!last && i + 1 < m) l.push_back(transfer(ActionKind::RecvGradient, i + 1, r, r + 1));
    }
  }
}

// 1F1B (PipeDream-Flush) as Megatron-LM's forward_backward_pipelining_without_interleaving:
// warm-up of p - r - 1 forwards, then one forward and one backward with the batches
// send_forward_recv_backward / send_backward_recv_forward, then the cool-down backwards.
void one_f_one_b(Schedule& s, ActionKind backward) {
  const int p = s.p, m = s.m;
  for (int r = 0; r < p; ++r) {
    auto& l = s.ranks[static_cast<std::size_t>(r)];
    const bool first = r == 0, last = r == p - 1;
    const int warmup = std::min(p - r - 1, m);
    const int steady = m - warmup;
    auto recv_forward = [&](int mb) {
      if (!first) l.push_back(transfer(ActionKind::RecvActivation, mb, r, r - 1));
    };
    auto send_forward = [&](int mb) {
      if (!last) l.push_back(transfer(ActionKind::SendActivation, mb, r, r + 1));
    };
    auto recv_backward = [&](int mb) {
      if (!last) l.push_back(transfer(ActionKind::RecvGradient, mb, r, r + 1));
    };
    auto send_backward = [&](int mb) {
      if (!first) l.push_back(transfer(ActionKind::SendGradient, mb, r, r - 1));
    };
    for (int i = 0; i < warmup; ++i) {
      recv_forward(i);
      l.push_back(compute(ActionKind::Forward, i, r));
      send_forward(i);
    }
    if (steady > 0) recv_forward(warmup);
    for (int i = 0; i < steady; ++i) {
      l.push_back(compute(ActionKind::Forward, warmup + i, r));
      send_forward(warmup + i);
      recv_backward(i);
      l.push_back(compute(backward, i, r));
      send_backward(i);
      if (i + 1 < steady) recv_forward(warmup + i + 1);
    }
    for (int i = steady; i < m; ++i) {
      recv_backward(i);
      l.push_back(compute(backward, i, r));
      send_backward(i);
    }
  }
}

int floor_mod(int a, int b) {
  const int r = a % b;
  return r < 0 ? r + b : r;
}

// Interleaved 1F1B as Megatron-LM's forward_backward_pipelining_with_interleaving (the
// schedule of the paper). Forward number k of a rank runs local chunk (k mod pv) / p on
// microbatch (k / pv) * p + k mod p; backwards walk the chunks in reverse. In each batch a rank
// sends what it just computed and receives whatever its ring neighbours send in their batch of
// the same step, to be consumed later (Megatron's per-chunk queues); the receives are therefore
// emitted as placeholders and named afterwards from the matching sends.
void interleaved(Schedule& s) {
  const int p = s.p, m = s.m, v = s.v, nc = p * v, total = m * v;
  const bool all_warmup = m == p;
  auto local_chunk = [&](int k, bool forward) {
    const int j = floor_mod(k, nc) / p;
    return forward ? j : v - 1 - j;
  };
  auto microbatch = [&](int k) { return k / nc * p + k % nc % p; };
  for (int r = 0; r < p; ++r) {
    auto& l = s.ranks[static_cast<std::size_t>(r)];
    const int prev = (r + p - 1) % p, next = (r + 1) % p;
    auto chunk = [&](int k, bool forward) { return local_chunk(k, forward) * p + r; };
    auto send_forward = [&](int k) {
      const int c = chunk(k, true);
      if (p > 1 && c + 1 < nc) l.push_back(transfer(ActionKind::SendActivation, microbatch(k), c, next));
    };
    auto send_backward = [&](int k) {
      const int c = chunk(k, false);
      if (p > 1 && c > 0) l.push_back(transfer(ActionKind::SendGradient, microbatch(k), c, prev));
    };
    auto recv_forward = [&] {
      if (p > 1) l.push_back(transfer(ActionKind::RecvActivation, -1, -1, prev));
    };
    auto recv_backward = [&] {
      if (p > 1) l.push_back(transfer(ActionKind::RecvGradient, -1, -1, next));
    };
    const int warmup = all_warmup ? total : std::min((p - r - 1) * 2 + (v - 1) * p, total);
    const int steady = total - warmup;
    if (r != 0) recv_forward();
    for (int k = 0; k < warmup; ++k) {
      l.push_back(compute(ActionKind::Forward, microbatch(k), chunk(k, true)));
      send_forward(k);
      const bool recv_prev = !(r == 0 && local_chunk(k + 1, true) == 0) && k != total - 1;
      if (recv_prev) recv_forward();
      if (k == warmup - 1 && !all_warmup && r != p - 1) recv_backward();
    }
    for (int k = 0; k < steady; ++k) {
      const int fk = k + warmup;
      l.push_back(compute(ActionKind::Forward, microbatch(fk), chunk(fk, true)));
      l.push_back(compute(ActionKind::Backward, microbatch(k), chunk(k, false)));
      send_forward(fk);
      send_backward(k);
      // The first rank is p - 1 forwards ahead of the last one, the last rank p - 1
      // backwards ahead of the first: what they receive now was computed that many steps ago.
      bool recv_prev = !(r == 0 && local_chunk(fk - (p - 1), true) == v - 1);
      const bool recv_next = !(r == p - 1 && local_chunk(k - (p - 1), false) == 0);
      if (k == steady - 1) recv_prev = false;
      if (recv_prev) recv_forward();
      if (recv_next) recv_backward();
    }
    if (all_warmup && r != p - 1) recv_backward();
    for (int k = steady; k < total; ++k) {
      l.push_back(compute(ActionKind::Backward, microbatch(k), chunk(k, false)));
      send_backward(k);
      const bool recv_next = !(r == p - 1 && local_chunk(k + 1, false) == v - 1) && k != total - 1;
      if (recv_next) recv_backward();
    }
  }
  if (p == 1) return;
  // Name each receive after the send it meets: the k-th of a kind from a rank.
  for (int r = 0; r < p; ++r) {
    const int prev = (r + p - 1) % p, next = (r + 1) % p;
    std::vector<const Action*> act, grad;
    for (const Action& a : s.ranks[static_cast<std::size_t>(prev)]) {
      if (a.kind == ActionKind::SendActivation && a.peer == r) act.push_back(&a);
    }
    for (const Action& a : s.ranks[static_cast<std::size_t>(next)]) {
      if (a.kind == ActionKind::SendGradient && a.peer == r) grad.push_back(&a);
    }
    std::size_t ia = 0, ig = 0;
    for (Action& a : s.ranks[static_cast<std::size_t>(r)]) {
      if (a.kind == ActionKind::RecvActivation) {
        if (ia >= act.size()) {
          throw_error(ErrorCode::Internal, "interleaved 1F1B: rank " + to_string(r) +
                                               " receives more activations than rank " +
                                               to_string(prev) + " sends");
        }
        a.microbatch = act[ia]->microbatch;
        a.chunk = act[ia]->chunk + 1;
        ++ia;
      } else if (a.kind == ActionKind::RecvGradient) {
        if (ig >= grad.size()) {
          throw_error(ErrorCode::Internal, "interleaved 1F1B: rank " + to_string(r) +
                                               " receives more gradients than rank " +
                                               to_string(next) + " sends");
        }
        a.microbatch = grad[ig]->microbatch;
        a.chunk = grad[ig]->chunk - 1;
        ++ig;
      }
    }
  }
}

// ZB-H1 (Qi et al., ICLR'24): 1F1B with the backward split into B (input gradient, on the
// critical path) and W (weight gradients, deferrable). The batches are those of 1F1B; each W
// goes where its rank would otherwise wait. The placement comes from running the ranks with
// F = B = W = 1 and zero latency:
//  - a rank reaching a batch none of whose partners has reached its side yet runs a pending W
//    instead of posting (it would idle, and nobody waits for it);
//  - a rank waiting at a batch of which only some transfers can complete (in the cool-down:
//    the gradient it sends is awaited, the one it receives is not ready) completes those as a
//    batch of their own, runs a pending W, then posts the rest, as Megatron's separate
//    send_backward and recv_backward calls would;
//  - a forward that would exceed min(p, m) activations held on the rank first runs a W, which
//    keeps the peak activation memory of 1F1B;
//  - leftover W fill the end.
void add_weight_passes(Schedule& s) {
  const auto p = static_cast<std::size_t>(s.p);
  const int limit = std::min(s.p, s.m);
  const CommLayout cl = comm_layout(s);
  std::vector<std::vector<Action>> out(p);
  std::vector<std::vector<char>> done(p);
  std::vector<std::size_t> pos(p, 0);  // first action not yet emitted
  std::vector<long long> free_at(p, 0);
  std::vector<char> posted(p, 0);
  std::vector<std::deque<Action>> pending(p);
  std::vector<int> held(p, 0);
  std::size_t total = 0;
  for (std::size_t r = 0; r < p; ++r) {
    done[r].assign(s.ranks[r].size(), 0);
    total += s.ranks[r].size();
  }
  auto size = [&](std::size_t r) { return s.ranks[r].size(); };
  auto run_weight = [&](std::size_t r, long long t) {
    out[r].push_back(pending[r].front());
    pending[r].pop_front();
    --held[r];
    free_at[r] = t + 1;
  };
  // Moves pos past emitted actions.
  auto advance = [&](std::size_t r) {
    while (pos[r] < size(r) && done[r][pos[r]]) ++pos[r];
  };
  const long long horizon = 4 * static_cast<long long>(total) + 16;
  long long t = 0;
  while (true) {
    // Whether the partner's side of a transfer has completed, or is in the batch its rank
    // stands at now (and has posted, if `need_posted`).
    auto there = [&](const ActionRef& ref, bool need_posted) {
      const auto q = static_cast<std::size_t>(ref.rank);
      const auto j = static_cast<std::size_t>(ref.index);
      if (done[q][j]) return true;
      if (pos[q] >= size(q) || free_at[q] > t || cl.batch_of[q][pos[q]] != cl.batch_of[q][j]) return false;
      return !need_posted || posted[q] != 0;
    };
    // The not yet emitted actions of the batch rank r stands at.
    auto remaining = [&](std::size_t r) {
      std::vector<std::size_t> idx;
      const CommLayout::Batch b = cl.batches[r][static_cast<std::size_t>(cl.batch_of[r][pos[r]])];
      for (auto i = static_cast<std::size_t>(b.begin); i < static_cast<std::size_t>(b.end); ++i) {
        if (!done[r][i]) idx.push_back(i);
      }
      return idx;
    };
    auto emit = [&](std::size_t r, std::size_t i) {
      out[r].push_back(s.ranks[r][i]);
      done[r][i] = 1;
    };
    bool changed = true;
    while (changed) {
      changed = false;
      for (std::size_t r = 0; r < p; ++r) {
        while (free_at[r] <= t) {
          if (pos[r] >= size(r)) {
            if (!pending[r].empty()) {
              run_weight(r, t);
              changed = true;
            }
            break;
          }
          const Action& a = s.ranks[r][pos[r]];
          if (!is_communication(a.kind)) {
            if (a.kind == ActionKind::Forward && held[r] >= limit && !pending[r].empty()) {
              run_weight(r, t);
            } else {
              emit(r, pos[r]);
              if (a.kind == ActionKind::Forward) ++held[r];
              if (a.kind == ActionKind::BackwardInput) {
                pending[r].push_back(compute(ActionKind::BackwardWeight, a.microbatch, a.chunk));
              }
              advance(r);
              free_at[r] = t + 1;
            }
            changed = true;
            break;
          }
          if (!posted[r]) break;  // decided below
          const std::vector<std::size_t> rest = remaining(r);
          std::vector<std::size_t> ready;
          for (std::size_t i : rest) {
            if (there(cl.partner[r][i], true)) ready.push_back(i);
          }
          if (ready.size() == rest.size()) {
            for (std::size_t i : rest) emit(r, i);
            advance(r);
            posted[r] = 0;
            changed = true;
            continue;
          }
          if (!ready.empty() && !pending[r].empty()) {
            for (std::size_t i : ready) emit(r, i);
            advance(r);
            posted[r] = 0;
            run_weight(r, t);
            changed = true;
          }
          break;
        }
      }
      if (changed) continue;
      for (std::size_t r = 0; r < p; ++r) {
        if (free_at[r] > t || pos[r] >= size(r) || posted[r]) continue;
        if (!is_communication(s.ranks[r][pos[r]].kind)) continue;
        bool awaited = false;
        for (std::size_t i : remaining(r)) awaited = awaited || there(cl.partner[r][i], false);
        if (awaited || pending[r].empty()) {
          posted[r] = 1;
        } else {
          run_weight(r, t);
        }
        changed = true;
      }
    }
    bool finished = true;
    long long next = -1;
    for (std::size_t r = 0; r < p; ++r) {
      if (pos[r] < size(r) || !pending[r].empty()) finished = false;
      if (free_at[r] > t && (next < 0 || free_at[r] < next)) next = free_at[r];
    }
    if (finished) break;
    if (next < 0 || next > horizon) {
      throw_error(ErrorCode::Internal, "ZB-H1: placing the W passes stalled at time " + to_string(t));
    }
    t = next;
  }
  s.ranks = std::move(out);
}

// ---------------------------------------------------------------------------------------------
// Schedules given as compute orders. ZB-V, DualPipeV and interleaved zero bubble are written as
// each rank's order of F, B (full or input-only) and W; their sends and receives are derived
// from a run of those orders with unit costs (F = B(input) = W = 1, full B = 2, transfers free):
//  - the receiver takes a transfer in the gap before its first compute action starting at or
//    after the time the data is produced (the end of the F or B making it), so before the
//    consumer; that action's start is the transfer's key, and (key, kind, microbatch, chunk)
//    orders all transfers;
//  - the sender posts it in its last gap reached by the key (at or after the producing
//    action), so that in the unit-cost run neither side waits past the key;
//  - both gaps move monotonically with the key, so each rank's transfers appear in the total
//    order, and every compute action before a transfer depends only on transfers earlier in
//    it. Under the batch semantics of schedule.h this cannot deadlock: a rank blocked at a
//    batch waits for a peer blocked at a batch whose transfers all come earlier in the order,
//    a chain that cannot close into a cycle. check_schedule() confirms it for every generated
//    schedule.

struct Timed {
  Action a;
  double start = 0, end = 0;
};

double unit_cost(ActionKind k) { return k == ActionKind::Backward ? 2 : 1; }

// Per (microbatch, chunk): when its forward and its input-gradient backward ended (-1: not yet).
struct UnitTimes {
  int m = 0, nc = 0;
  std::vector<double> f, b;
  UnitTimes(int m_, int nc_)
      : m(m_), nc(nc_),
        f(static_cast<std::size_t>(m_) * static_cast<std::size_t>(nc_), -1),
        b(static_cast<std::size_t>(m_) * static_cast<std::size_t>(nc_), -1) {}
  double& fwd(int mb, int c) { return f[static_cast<std::size_t>(mb) * static_cast<std::size_t>(nc) + static_cast<std::size_t>(c)]; }
  double& bwd(int mb, int c) { return b[static_cast<std::size_t>(mb) * static_cast<std::size_t>(nc) + static_cast<std::size_t>(c)]; }
  // When the input of a compute action is available, or -1 when not yet.
  double ready(const Action& a) {
    switch (a.kind) {
      case ActionKind::Forward: return a.chunk == 0 ? 0 : fwd(a.microbatch, a.chunk - 1);
      case ActionKind::Backward:
      case ActionKind::BackwardInput:
        if (fwd(a.microbatch, a.chunk) < 0) return -1;
        return a.chunk + 1 == nc ? fwd(a.microbatch, a.chunk) : bwd(a.microbatch, a.chunk + 1);
      default: return bwd(a.microbatch, a.chunk);
    }
  }
  void finish(const Action& a, double t) {
    if (a.kind == ActionKind::Forward) fwd(a.microbatch, a.chunk) = t;
    if (a.kind == ActionKind::Backward || a.kind == ActionKind::BackwardInput) bwd(a.microbatch, a.chunk) = t;
  }
};

// Runs fixed compute orders with unit costs. Throws Internal when the orders wait on each other.
std::vector<std::vector<Timed>> run_orders(const Schedule& s, const std::vector<std::vector<Action>>& orders) {
  const auto p = static_cast<std::size_t>(s.p);
  UnitTimes u(s.m, s.num_chunks());
  std::vector<std::vector<Timed>> out(p);
  std::vector<std::size_t> pos(p, 0);
  std::vector<double> clock(p, 0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (std::size_t r = 0; r < p; ++r) {
      while (pos[r] < orders[r].size()) {
        const Action& a = orders[r][pos[r]];
        const double ready = u.ready(a);
        if (ready < 0) break;
        const double start = std::max(clock[r], ready);
        clock[r] = start + unit_cost(a.kind);
        u.finish(a, clock[r]);
        out[r].push_back({a, start, clock[r]});
        ++pos[r];
        progress = true;
      }
    }
  }
  for (std::size_t r = 0; r < p; ++r) {
    if (pos[r] < orders[r].size()) {
      throw_error(ErrorCode::Internal, std::string(schedule_kind_name(s.kind)) + ": rank " + to_string(r) +
                                           " waits forever at " + orders[r][pos[r]].str());
    }
  }
  return out;
}

// Fills s.ranks from timed compute orders, adding the transfers as described above.
void add_transfers(Schedule& s, const std::vector<std::vector<Timed>>& timed) {
  const int p = s.p, nc = s.num_chunks();
  // Gap i of a rank: before its compute action i (i = n: after the last); the rank arrives
  // there when action i - 1 ends and leaves when action i starts.
  auto arrive = [&](int r, std::size_t i) { return i == 0 ? 0.0 : timed[static_cast<std::size_t>(r)][i - 1].end; };
  auto leave = [&](int r, std::size_t i) {
    const auto& l = timed[static_cast<std::size_t>(r)];
    return i < l.size() ? l[i].start : 1e300;
  };
  struct Transfer {
    double key;
    int kind, mb, chunk;  // order after the key
    Action a;
    bool operator<(const Transfer& o) const {
      return std::tie(key, kind, mb, chunk) < std::tie(o.key, o.kind, o.mb, o.chunk);
    }
  };
  // [rank][gap] -> transfers posted there.
  std::vector<std::vector<std::vector<Transfer>>> at(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) at[static_cast<std::size_t>(r)].resize(timed[static_cast<std::size_t>(r)].size() + 1);
  auto place = [&](int from, int to, double produced, int kind, const Action& a, const Action& send, const Action& recv) {
    // The receiver takes it in its first gap left at or after the data exists; the sender
    // posts it in its last gap reached by then, so that neither side waits past that time.
    // A rank's actions run one after another, so its gaps' leave and arrive times rise with the
    // gap: both searches are binary (the planner places thousands of transfers per schedule).
    const auto& to_list = timed[static_cast<std::size_t>(to)];
    const auto& from_list = timed[static_cast<std::size_t>(from)];
    const std::size_t g = static_cast<std::size_t>(
        std::partition_point(to_list.begin(), to_list.end(), [&](const Timed& t) { return t.start < produced; }) -
        to_list.begin());
    const double key = leave(to, g) < 1e299 ? leave(to, g) : arrive(to, g);
    const std::size_t h = static_cast<std::size_t>(
        std::partition_point(from_list.begin(), from_list.end(), [&](const Timed& t) { return t.end <= key; }) -
        from_list.begin());
    at[static_cast<std::size_t>(to)][g].push_back({key, kind, a.microbatch, a.chunk, recv});
    at[static_cast<std::size_t>(from)][h].push_back({key, kind, a.microbatch, a.chunk, send});
  };
  for (int r = 0; r < p; ++r) {
    for (const Timed& t : timed[static_cast<std::size_t>(r)]) {
      const Action& a = t.a;
      if (a.kind == ActionKind::Forward && a.chunk + 1 < nc && s.rank_of_chunk(a.chunk + 1) != r) {
        const int q = s.rank_of_chunk(a.chunk + 1);
        place(r, q, t.end, 0, a, transfer(ActionKind::SendActivation, a.microbatch, a.chunk, q),
              transfer(ActionKind::RecvActivation, a.microbatch, a.chunk + 1, r));
      }
      if ((a.kind == ActionKind::Backward || a.kind == ActionKind::BackwardInput) && a.chunk > 0 &&
          s.rank_of_chunk(a.chunk - 1) != r) {
        const int q = s.rank_of_chunk(a.chunk - 1);
        place(r, q, t.end, 1, a, transfer(ActionKind::SendGradient, a.microbatch, a.chunk, q),
              transfer(ActionKind::RecvGradient, a.microbatch, a.chunk - 1, r));
      }
    }
  }
  for (int r = 0; r < p; ++r) {
    auto& l = s.ranks[static_cast<std::size_t>(r)];
    l.clear();
    const auto& list = timed[static_cast<std::size_t>(r)];
    for (std::size_t g = 0; g <= list.size(); ++g) {
      auto& here = at[static_cast<std::size_t>(r)][g];
      std::sort(here.begin(), here.end());
      for (const Transfer& x : here) l.push_back(x.a);
      if (g < list.size()) l.push_back(list[g].a);
    }
  }
}

// ZB-V as list scheduling, in the manner of the zero-bubble authors' greedy V-schedule builder:
// ranks advance in unit time steps (F = B = W = 1 per chunk); a free rank runs, in this order
// of preference, the input-gradient backward (B) of its oldest microbatch whose output gradient
// has arrived (the later chunk first); the forward of its second (returning) chunk; the forward
// of its first chunk, while fewer than p microbatches hold activations on the rank (W of the
// first chunk not yet run): the activation memory of 1F1B, p microbatches of a whole stage;
// else the oldest pending W. Idle otherwise.
std::vector<std::vector<Timed>> zero_bubble_v(const Schedule& s) {
  const int p = s.p, m = s.m, nc = s.num_chunks();
  UnitTimes u(m, nc);
  std::vector<std::vector<Timed>> out(static_cast<std::size_t>(p));
  std::vector<std::deque<Action>> pending(static_cast<std::size_t>(p));
  std::vector<std::array<int, 2>> next_f(static_cast<std::size_t>(p), {0, 0});
  std::vector<std::array<int, 2>> next_b(static_cast<std::size_t>(p), {0, 0});
  std::vector<int> inflight(static_cast<std::size_t>(p), 0);
  int remaining = 6 * m * p;
  const long long horizon = 64LL * m * p + 64;
  for (long long t = 0; remaining > 0; ++t) {
    if (t > horizon) throw_error(ErrorCode::Internal, "ZB-V: list scheduling stalled at time " + to_string(t));
    const double now = static_cast<double>(t);
    std::vector<Action> chosen(static_cast<std::size_t>(p));
    std::vector<char> busy(static_cast<std::size_t>(p), 0);
    for (int r = 0; r < p; ++r) {
      const auto R = static_cast<std::size_t>(r);
      if (!out[R].empty() && out[R].back().end > now) continue;
      const int c0 = s.chunk_at(r, 0), c1 = s.chunk_at(r, 1);
      auto ready = [&](const Action& a) {
        const double at = u.ready(a);
        return at >= 0 && at <= now;
      };
      // B of the oldest microbatch: per chunk the backwards go in microbatch order.
      Action pick{};
      bool found = false;
      for (int j : {1, 0}) {
        const int mb = next_b[R][static_cast<std::size_t>(j)];
        if (mb >= m) continue;
        const Action b = compute(ActionKind::BackwardInput, mb, j == 0 ? c0 : c1);
        if (ready(b) && (!found || mb < pick.microbatch)) {
          pick = b;
          found = true;
        }
      }
      if (!found && next_f[R][1] < m) {
        const Action f = compute(ActionKind::Forward, next_f[R][1], c1);
        if (ready(f)) pick = f, found = true;
      }
      if (!found && next_f[R][0] < m && inflight[R] < p) {
        const Action f = compute(ActionKind::Forward, next_f[R][0], c0);
        if (ready(f)) pick = f, found = true;
      }
      if (!found && !pending[R].empty()) {
        pick = pending[R].front();
        pending[R].pop_front();
        found = true;
      }
      if (!found) continue;
      chosen[R] = pick;
      busy[R] = 1;
    }
    for (int r = 0; r < p; ++r) {
      const auto R = static_cast<std::size_t>(r);
      if (!busy[R]) continue;
      const Action& a = chosen[R];
      const int j = s.local_index(a.chunk);
      if (a.kind == ActionKind::Forward) {
        ++next_f[R][static_cast<std::size_t>(j)];
        if (j == 0) ++inflight[R];
      } else if (a.kind == ActionKind::BackwardInput) {
        ++next_b[R][static_cast<std::size_t>(j)];
        pending[R].push_back(compute(ActionKind::BackwardWeight, a.microbatch, a.chunk));
      } else if (j == 0) {
        --inflight[R];
      }
      u.finish(a, now + 1);
      out[R].push_back({a, now, now + 1});
      --remaining;
    }
  }
  return out;
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
std::vector<std::vector<Action>> dual_pipe_v(const Schedule& s) {
  const int p = s.p, m = s.m;
  std::vector<std::vector<Action>> orders(static_cast<std::size_t>(p));
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

// Interleaved zero bubble: interleaved 1F1B's compute order with each backward split into B and
// a W that runs, with unit costs, where the rank would wait for an input; before a forward that
// would hold more activations than interleaved 1F1B's peak on that rank; or at the end.
std::vector<std::vector<Timed>> interleaved_zero_bubble(const Schedule& s) {
  Schedule base = s;
  base.kind = ScheduleKind::Interleaved1F1B;
  base.ranks.assign(static_cast<std::size_t>(s.p), {});
  interleaved(base);
  const auto p = static_cast<std::size_t>(s.p);
  std::vector<std::vector<Action>> orders(p);
  std::vector<int> limit(p, 0);
  for (std::size_t r = 0; r < p; ++r) {
    int held = 0;
    for (const Action& a : base.ranks[r]) {
      if (a.kind == ActionKind::Forward) limit[r] = std::max(limit[r], ++held);
      if (a.kind == ActionKind::Backward) --held;
      if (is_communication(a.kind)) continue;
      Action b = a;
      if (b.kind == ActionKind::Backward) b.kind = ActionKind::BackwardInput;
      orders[r].push_back(b);
    }
  }
  UnitTimes u(s.m, s.num_chunks());
  std::vector<std::vector<Timed>> out(p);
  std::vector<std::size_t> pos(p, 0);
  std::vector<std::deque<Action>> pending(p);
  std::vector<int> held(p, 0);
  std::size_t left = 0;
  for (std::size_t r = 0; r < p; ++r) left += 2 * orders[r].size() - orders[r].size() / 2;
  const long long horizon = 16LL * static_cast<long long>(left) + 64;
  for (long long t = 0; left > 0; ++t) {
    if (t > horizon) throw_error(ErrorCode::Internal, "interleaved zero bubble: placing W stalled at " + to_string(t));
    const double now = static_cast<double>(t);
    std::vector<std::pair<std::size_t, Action>> chosen;
    for (std::size_t r = 0; r < p; ++r) {
      if (!out[r].empty() && out[r].back().end > now) continue;
      bool run_w = false;
      if (pos[r] < orders[r].size()) {
        const Action& a = orders[r][pos[r]];
        const double at = u.ready(a);
        const bool ready = at >= 0 && at <= now;
        if (!ready || (a.kind == ActionKind::Forward && held[r] >= limit[r])) {
          run_w = !pending[r].empty();
          if (!run_w) continue;
        } else {
          chosen.emplace_back(r, a);
          ++pos[r];
          if (a.kind == ActionKind::Forward) ++held[r];
          if (a.kind == ActionKind::BackwardInput) pending[r].push_back(compute(ActionKind::BackwardWeight, a.microbatch, a.chunk));
          continue;
        }
      } else {
        run_w = !pending[r].empty();
      }
      if (run_w) {
        chosen.emplace_back(r, pending[r].front());
        pending[r].pop_front();
        --held[r];
      }
    }
    for (const auto& [r, a] : chosen) {
      u.finish(a, now + 1);
      out[r].push_back({a, now, now + 1});
      --left;
    }
  }
  return out;
}

// Forward only: microbatch after microbatch, each rank's chunks in order, receiving each
// chunk's input from the previous chunk's rank and sending its output on.
void forward_only(Schedule& s) {
  const int p = s.p, chunks = s.num_chunks();
  for (int r = 0; r < p; ++r) {
    auto& acts = s.ranks[static_cast<std::size_t>(r)];
    for (int mb = 0; mb < s.m; ++mb) {
      for (int j = 0; j < s.v; ++j) {
        const int c = s.chunk_at(r, j);
        // With p = 1 every chunk is on this rank: nothing to send.
        // Under the V placement chunks p - 1 and p share a rank: a local hand-off.
        if (c > 0 && s.rank_of_chunk(c - 1) != r) {
          acts.push_back({ActionKind::RecvActivation, mb, c, s.rank_of_chunk(c - 1)});
        }
        acts.push_back({ActionKind::Forward, mb, c, -1});
        if (c + 1 < chunks && s.rank_of_chunk(c + 1) != r) {
          acts.push_back({ActionKind::SendActivation, mb, c, s.rank_of_chunk(c + 1)});
        }
      }
    }
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
  for (auto& l : s.ranks) l.clear();
  forward_only(s);
  const CheckResult check = check_schedule(s);
  if (!check.ok) throw_error(ErrorCode::Internal, "V-placed forward-only schedule fails its check: " + check.message);
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
  s.ranks.resize(static_cast<std::size_t>(p));
  switch (kind) {
    case ScheduleKind::GPipe: gpipe(s); break;
    case ScheduleKind::OneFOneB: one_f_one_b(s, ActionKind::Backward); break;
    case ScheduleKind::Interleaved1F1B: interleaved(s); break;
    case ScheduleKind::ZeroBubbleH1:
      one_f_one_b(s, ActionKind::BackwardInput);
      add_weight_passes(s);
      break;
    case ScheduleKind::ForwardOnly: forward_only(s); break;
    case ScheduleKind::ZeroBubbleV: add_transfers(s, zero_bubble_v(s)); break;
    case ScheduleKind::DualPipeV: add_transfers(s, run_orders(s, dual_pipe_v(s))); break;
    case ScheduleKind::InterleavedZeroBubble: add_transfers(s, interleaved_zero_bubble(s)); break;
  }
  const CheckResult check = check_schedule(s);
  if (!check.ok) {
    throw_error(ErrorCode::Internal, name + " schedule for p = " + to_string(p) + ", m = " +
                                         to_string(m) + ", v = " + to_string(v) +
                                         " fails its check: " + check.message);
  }
  return s;
}

}  // namespace ptdp
