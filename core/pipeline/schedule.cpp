// The schedule generators. Each rank's list carries its sends and receives at the points where
// the rank issues them; consecutive ones form one batch (schedule.h). The placements follow
// Megatron-LM's p2p calls (send_forward_recv_backward and friends), which pair every batch of a
// rank with one batch of its neighbour, so the ranks advance in lockstep and never deadlock.
#include "core/pipeline/schedule.h"

#include <algorithm>
#include <cstddef>
#include <deque>
#include <string>
#include <vector>

#include "core/pipeline/checker.h"
#include "kernels/error.h"

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
  }
  return "?";
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

// Forward only: microbatch after microbatch, each rank's chunks in order, receiving each
// chunk's input from the previous chunk's rank and sending its output on.
void forward_only(Schedule& s) {
  const int p = s.p, chunks = s.num_chunks();
  for (int r = 0; r < p; ++r) {
    auto& acts = s.ranks[static_cast<std::size_t>(r)];
    for (int mb = 0; mb < s.m; ++mb) {
      for (int j = 0; j < s.v; ++j) {
        const int c = j * p + r;
        // With p = 1 every chunk is on this rank: nothing to send.
        if (c > 0 && p > 1) acts.push_back({ActionKind::RecvActivation, mb, c, (c - 1) % p});
        acts.push_back({ActionKind::Forward, mb, c, -1});
        if (c + 1 < chunks && p > 1) acts.push_back({ActionKind::SendActivation, mb, c, (c + 1) % p});
      }
    }
  }
}

}  // namespace

Schedule make_schedule(ScheduleKind kind, int p, int m, int v) {
  const int k = static_cast<int>(kind);
  PTDP_CHECK_ARG(k >= 0 && k <= static_cast<int>(ScheduleKind::ForwardOnly),
                 "unknown schedule kind " + to_string(k));
  const std::string name = schedule_kind_name(kind);
  PTDP_CHECK_ARG(p > 0, "pipeline size p = " + to_string(p) + " must be > 0");
  PTDP_CHECK_ARG(m > 0, "number of microbatches m = " + to_string(m) + " must be > 0");
  PTDP_CHECK_ARG(v > 0, "chunks per rank v = " + to_string(v) + " must be > 0");
  PTDP_CHECK_ARG(static_cast<long long>(p) * m * v <= kMaxUnits,
                 "p * m * v = " + to_string(p) + " * " + to_string(m) + " * " + to_string(v) +
                     " exceeds the largest supported schedule (" + to_string(kMaxUnits) +
                     " chunk-microbatches)");
  if (kind == ScheduleKind::Interleaved1F1B) {
    PTDP_CHECK_ARG(v > 1, "interleaved 1F1B needs v > 1 chunks per rank, got v = 1; use 1F1B "
                          "for one chunk per rank");
    PTDP_CHECK_ARG(m % p == 0, "interleaved 1F1B needs the number of microbatches to be a "
                               "multiple of the pipeline size: m = " +
                                   to_string(m) + ", p = " + to_string(p));
  } else if (kind != ScheduleKind::ForwardOnly) {
    PTDP_CHECK_ARG(v == 1, name + " has one chunk per rank, got v = " + to_string(v) +
                               "; use interleaved 1F1B for v > 1");
  }
  Schedule s;
  s.kind = kind;
  s.p = p;
  s.m = m;
  s.v = v;
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
