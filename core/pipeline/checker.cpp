#include "core/pipeline/checker.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace ptdp {
namespace {

// Largest p * m * v the checker keeps per-(microbatch, chunk) state for.
constexpr long long kMaxUnits = 1LL << 24;

using std::to_string;

bool valid_kind(ActionKind k) {
  const int i = static_cast<int>(k);
  return i >= 0 && i <= static_cast<int>(ActionKind::RecvGradient);
}

bool is_send(ActionKind k) { return k == ActionKind::SendActivation || k == ActionKind::SendGradient; }
bool is_activation(ActionKind k) {
  return k == ActionKind::SendActivation || k == ActionKind::RecvActivation;
}

std::string where(int rank, int index, const Action& a) {
  return "rank " + to_string(rank) + " action " + to_string(index) + " (" + a.str() + ")";
}

std::string unit(const Action& a) {
  return "microbatch " + to_string(a.microbatch) + " chunk " + to_string(a.chunk);
}

// The chunk on the other side of a transfer.
int other_chunk(const Action& a) {
  switch (a.kind) {
    case ActionKind::SendActivation:
    case ActionKind::RecvGradient: return a.chunk + 1;
    default: return a.chunk - 1;
  }
}

std::string transfer_text(const Action& a) {
  const bool send = is_send(a.kind);
  return std::string(send ? "send of " : "receive of ") +
         (is_activation(a.kind) ? "activation" : "gradient") + " mb " + to_string(a.microbatch) +
         " chunk " + to_string(a.chunk) + (send ? " to rank " : " from rank ") + to_string(a.peer);
}

// Step 2: each action on its own.
std::string check_action(const Schedule& s, int r, int i, const Action& a) {
  const int nc = s.num_chunks();
  if (!valid_kind(a.kind)) {
    return "rank " + to_string(r) + " action " + to_string(i) + ": unknown action kind " +
           to_string(static_cast<int>(a.kind));
  }
  if (s.kind == ScheduleKind::ForwardOnly && a.kind != ActionKind::Forward && !is_activation(a.kind)) {
    return where(r, i, a) + ": a forward-only schedule has no backward and no gradient transfers";
  }
  if (a.microbatch < 0 || a.microbatch >= s.m) {
    return where(r, i, a) + ": microbatch " + to_string(a.microbatch) + " is out of range [0, " +
           to_string(s.m) + ")";
  }
  if (a.chunk < 0 || a.chunk >= nc) {
    return where(r, i, a) + ": chunk " + to_string(a.chunk) + " is out of range [0, " +
           to_string(nc) + ")";
  }
  if (s.rank_of_chunk(a.chunk) != r) {
    return where(r, i, a) + ": chunk " + to_string(a.chunk) + " lives on rank " +
           to_string(s.rank_of_chunk(a.chunk)) + ", not rank " + to_string(r);
  }
  if (!is_communication(a.kind)) return {};
  const int other = other_chunk(a);
  const bool activation = is_activation(a.kind);
  if (other < 0) {
    return where(r, i, a) + ": chunk 0 is the first chunk: its input comes from the data, " +
           (activation ? "not from another rank" : "and its input has no gradient to send");
  }
  if (other >= nc) {
    return where(r, i, a) + ": chunk " + to_string(a.chunk) + " is the last chunk: " +
           (activation ? "its output goes to the loss, not to another rank"
                       : "its output gradient comes from the loss, not from another rank");
  }
  const int peer = s.rank_of_chunk(other);
  if (peer == r) {
    return where(r, i, a) + ": chunks " + to_string(std::min(a.chunk, other)) + " and " +
           to_string(std::max(a.chunk, other)) + " both live on rank " + to_string(r) +
           ": no transfer is needed";
  }
  if (a.peer != peer) {
    const char* what = activation ? "activation" : "gradient";
    const bool send = is_send(a.kind);
    return where(r, i, a) + ": the " + what + " of chunk " +
           to_string(send ? a.chunk : other) + (send ? " goes to rank " : " comes from rank ") +
           to_string(peer) + " (the rank of chunk " + to_string(other) + "), not rank " +
           to_string(a.peer);
  }
  return {};
}

// Step 4: one rank's list in order, then its completeness.
class RankOrder {
 public:
  RankOrder(const Schedule& s, int r)
      : s_(s), r_(r), st_(static_cast<std::size_t>(s.m) * static_cast<std::size_t>(s.v)) {}

  // What is wrong with `a` coming next, or nothing.
  std::string take(const Action& a) {
    switch (a.kind) {
      case ActionKind::Forward: return forward(a);
      case ActionKind::Backward:
      case ActionKind::BackwardInput: return backward(a);
      case ActionKind::BackwardWeight: return weight(a);
      default: return transfer(a);
    }
  }

  // What a (microbatch, chunk) of the rank lacks at the end, or nothing.
  std::string complete() {
    for (int mb = 0; mb < s_.m; ++mb) {
      for (int j = 0; j < s_.v; ++j) {
        const int chunk = s_.chunk_at(r_, j);
        const UnitState& u = at(mb, chunk);
        auto what = [&] {
          return "rank " + to_string(r_) + ": microbatch " + to_string(mb) + " chunk " + to_string(chunk);
        };
        if (!u.forward) return what() + " has no forward";
        if (s_.kind == ScheduleKind::ForwardOnly) continue;
        if (!u.backward && !u.input) return what() + " has no backward";
        if (u.input && !u.weight) {
          return what() + " has an input-gradient backward (B) but no weight-gradient backward (W)";
        }
      }
    }
    return {};
  }

 private:
  struct UnitState {
    bool forward = false, backward = false, input = false, weight = false;
    bool recv_act = false, recv_grad = false, sent_act = false, sent_grad = false;
  };

  // Local chunk index j = s.local_index(chunk) for chunks of this rank.
  UnitState& at(int mb, int chunk) {
    return st_[static_cast<std::size_t>(mb) * static_cast<std::size_t>(s_.v) +
               static_cast<std::size_t>(s_.local_index(chunk))];
  }

  std::string forward(const Action& a) {
    UnitState& u = at(a.microbatch, a.chunk);
    if (u.forward) return "second forward of " + unit(a);
    if (a.chunk > 0) {
      if (s_.rank_of_chunk(a.chunk - 1) == r_) {
        if (!at(a.microbatch, a.chunk - 1).forward) {
          return "forward of " + unit(a) + " before the forward of chunk " + to_string(a.chunk - 1) +
                 " it takes its input from";
        }
      } else if (!u.recv_act) {
        return "forward of " + unit(a) + " before its input was received";
      }
    }
    u.forward = true;
    return {};
  }

  std::string backward(const Action& a) {
    UnitState& u = at(a.microbatch, a.chunk);
    const bool full = a.kind == ActionKind::Backward;
    const char* name = full ? "backward" : "input-gradient backward (B)";
    if (u.backward || u.input) return "second backward of " + unit(a);
    if (!u.forward) return name + (" of " + unit(a)) + " before its forward";
    if (a.chunk + 1 < s_.num_chunks()) {
      if (s_.rank_of_chunk(a.chunk + 1) == r_) {
        const UnitState& next = at(a.microbatch, a.chunk + 1);
        if (!next.backward && !next.input) {
          return name + (" of " + unit(a)) + " before the backward of chunk " + to_string(a.chunk + 1) +
                 " it takes its output gradient from";
        }
      } else if (!u.recv_grad) {
        return name + (" of " + unit(a)) + " before its output gradient was received";
      }
    }
    (full ? u.backward : u.input) = true;
    return {};
  }

  std::string weight(const Action& a) {
    UnitState& u = at(a.microbatch, a.chunk);
    if (u.weight) return "second weight-gradient backward (W) of " + unit(a);
    if (u.backward) {
      return "weight-gradient backward (W) of " + unit(a) +
             " after a full backward, which already computed the weight gradients";
    }
    if (!u.input) return "weight-gradient backward (W) of " + unit(a) + " before its input-gradient backward (B)";
    u.weight = true;
    return {};
  }

  std::string transfer(const Action& a) {
    UnitState& u = at(a.microbatch, a.chunk);
    const bool send = is_send(a.kind), activation = is_activation(a.kind);
    bool& seen = send ? (activation ? u.sent_act : u.sent_grad) : (activation ? u.recv_act : u.recv_grad);
    if (seen) return "second " + transfer_text(a);
    if (send && activation && !u.forward) return transfer_text(a) + " before its forward";
    if (send && !activation && !u.backward && !u.input) return transfer_text(a) + " before its backward";
    seen = true;
    return {};
  }

  const Schedule& s_;
  int r_;
  std::vector<UnitState> st_;
};

std::string check_rank_order(const Schedule& s, int r) {
  RankOrder order(s, r);
  const auto& list = s.ranks[static_cast<std::size_t>(r)];
  for (int i = 0; i < static_cast<int>(list.size()); ++i) {
    const Action& a = list[static_cast<std::size_t>(i)];
    if (std::string e = order.take(a); !e.empty()) return where(r, i, a) + ": " + e;
  }
  return order.complete();
}

// Step 3: the k-th send of a kind from A to B names what the k-th receive on B from A expects.
// The transfers of one kind from rank `from` to rank `to`: sends at `sv` in from's list,
// receives at `rv` in to's, matched in order.
std::string check_pair(const Schedule& s, int from, int to, bool activation, const std::vector<int>& sv,
                       const std::vector<int>& rv) {
  const auto& from_list = s.ranks[static_cast<std::size_t>(from)];
  const auto& to_list = s.ranks[static_cast<std::size_t>(to)];
  const char* what = activation ? "activation" : "gradient";
  // What the receiving side names: (microbatch, receiver's chunk), counted only once a pair of
  // transfers disagrees (to tell a missing transfer from one out of order).
  std::map<std::pair<int, int>, int> sent, received;
  bool counted = false;
  auto count = [&](bool of_sends, std::pair<int, int> key) {
    if (!counted) {
      for (int i : sv) {
        const Action& a = from_list[static_cast<std::size_t>(i)];
        ++sent[{a.microbatch, other_chunk(a)}];
      }
      for (int i : rv) {
        const Action& a = to_list[static_cast<std::size_t>(i)];
        ++received[{a.microbatch, a.chunk}];
      }
      counted = true;
    }
    const auto& m = of_sends ? sent : received;
    const auto it = m.find(key);
    return it == m.end() ? 0 : it->second;
  };
  auto no_receive = [&](int i) {
    return "rank " + to_string(from) + ": " + transfer_text(from_list[static_cast<std::size_t>(i)]) + " (action " +
           to_string(i) + ") has no matching receive";
  };
  auto no_send = [&](int i) {
    return "rank " + to_string(to) + ": " + transfer_text(to_list[static_cast<std::size_t>(i)]) + " (action " +
           to_string(i) + ") has no matching send";
  };
  const std::size_t common = std::min(sv.size(), rv.size());
  for (std::size_t k = 0; k <= common; ++k) {
    const bool has_send = k < sv.size(), has_recv = k < rv.size();
    if (!has_send && !has_recv) break;
    if (has_send && !has_recv) return no_receive(sv[k]);
    if (!has_send && has_recv) return no_send(rv[k]);
    const Action& snd = from_list[static_cast<std::size_t>(sv[k])];
    const Action& rcv = to_list[static_cast<std::size_t>(rv[k])];
    if (snd.microbatch == rcv.microbatch && other_chunk(snd) == rcv.chunk) continue;
    const std::pair<int, int> sk{snd.microbatch, other_chunk(snd)}, rk{rcv.microbatch, rcv.chunk};
    if (count(false, sk) < count(true, sk)) return no_receive(sv[k]);
    if (count(true, rk) < count(false, rk)) return no_send(rv[k]);
    return where(from, sv[k], snd) + " is " + what + " send number " + to_string(k + 1) + " from rank " +
           to_string(from) + " to rank " + to_string(to) + ", but " + what + " receive number " + to_string(k + 1) +
           " on rank " + to_string(to) + " from rank " + to_string(from) + " is action " + to_string(rv[k]) + " (" +
           rcv.str() + "): transfers of one kind between two ranks are matched in order";
  }
  return {};
}

std::string check_matching(const Schedule& s) {
  // (from, to, activation?) -> positions of sends / receives in order.
  using Key = std::tuple<int, int, bool>;
  std::map<Key, std::vector<int>> sends, recvs;
  for (int r = 0; r < s.p; ++r) {
    const auto& list = s.ranks[static_cast<std::size_t>(r)];
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[static_cast<std::size_t>(i)];
      if (!is_communication(a.kind)) continue;
      if (is_send(a.kind)) {
        sends[{r, a.peer, is_activation(a.kind)}].push_back(i);
      } else {
        recvs[{a.peer, r, is_activation(a.kind)}].push_back(i);
      }
    }
  }
  std::map<Key, bool> keys;
  for (const auto& kv : sends) keys[kv.first] = true;
  for (const auto& kv : recvs) keys[kv.first] = true;
  static const std::vector<int> kNone;
  for (const auto& kv : keys) {
    const auto [from, to, activation] = kv.first;
    const auto si = sends.find(kv.first);
    const auto ri = recvs.find(kv.first);
    std::string e = check_pair(s, from, to, activation, si == sends.end() ? kNone : si->second,
                               ri == recvs.end() ? kNone : ri->second);
    if (!e.empty()) return e;
  }
  return {};
}

// Element i of a vector, for int indices.
template <typename T>
decltype(auto) item(T& v, int i) {
  return v[static_cast<std::size_t>(i)];
}

// Step 5: run every rank; a batch completes once each of its transfers' partners has reached
// (posted) the batch holding it. Compute actions always proceed.
std::string check_deadlock(const Schedule& s, const CommLayout& cl) {
  const int p = s.p;
  std::vector<int> pos(static_cast<std::size_t>(p), 0);
  auto size_of = [&](int r) { return static_cast<int>(item(s.ranks, r).size()); };
  auto batch_at = [&](int r, int i) { return item(item(cl.batches, r), item(item(cl.batch_of, r), i)); };
  auto posted = [&](const ActionRef& ref) { return item(pos, ref.rank) >= batch_at(ref.rank, ref.index).begin; };
  // The first transfer of r's current batch whose partner has not posted, or -1.
  auto blocking = [&](int r) {
    const CommLayout::Batch b = batch_at(r, item(pos, r));
    for (int i = b.begin; i < b.end; ++i) {
      if (!posted(item(item(cl.partner, r), i))) return i;
    }
    return -1;
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      int& at = item(pos, r);
      while (at < size_of(r)) {
        if (!is_communication(item(item(s.ranks, r), at).kind)) {
          ++at;
        } else if (blocking(r) < 0) {
          at = batch_at(r, at).end;
        } else {
          break;
        }
        progress = true;
      }
    }
  }
  int start = -1;
  for (int r = 0; r < p && start < 0; ++r) {
    if (item(pos, r) < size_of(r)) start = r;
  }
  if (start < 0) return {};
  // Follow who waits for whom until a rank repeats.
  std::string msg = "deadlock: rank " + to_string(start) + " ";
  std::vector<char> seen(static_cast<std::size_t>(p), 0);
  for (int r = start;;) {
    item(seen, r) = 1;
    const int i = blocking(r);
    const Action& a = item(item(s.ranks, r), i);
    msg += "waits at action " + to_string(i) + " (" + a.str() + ") for rank " + to_string(a.peer);
    if (item(seen, a.peer) || item(pos, a.peer) >= size_of(a.peer)) break;
    msg += ", which ";
    r = a.peer;
  }
  return msg;
}

}  // namespace

CommLayout comm_layout(const Schedule& s) {
  CommLayout cl;
  const auto p = static_cast<std::size_t>(s.p);
  cl.batches.resize(p);
  cl.batch_of.resize(p);
  cl.partner.resize(p);
  using Key = std::tuple<int, int, bool>;
  std::map<Key, std::vector<int>> sends, recvs;
  for (std::size_t r = 0; r < p && r < s.ranks.size(); ++r) {
    const auto& list = s.ranks[r];
    cl.batch_of[r].assign(list.size(), -1);
    cl.partner[r].assign(list.size(), ActionRef{});
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[static_cast<std::size_t>(i)];
      if (!is_communication(a.kind)) continue;
      if (i == 0 || !is_communication(list[static_cast<std::size_t>(i - 1)].kind)) {
        cl.batches[r].push_back({i, i});
      }
      cl.batches[r].back().end = i + 1;
      cl.batch_of[r][static_cast<std::size_t>(i)] = static_cast<int>(cl.batches[r].size()) - 1;
      const int ri = static_cast<int>(r);
      if (is_send(a.kind)) {
        sends[{ri, a.peer, is_activation(a.kind)}].push_back(i);
      } else {
        recvs[{a.peer, ri, is_activation(a.kind)}].push_back(i);
      }
    }
  }
  for (const auto& [key, sv] : sends) {
    const auto it = recvs.find(key);
    if (it == recvs.end()) continue;
    const auto [from, to, activation] = key;
    (void)activation;
    const std::vector<int>& rv = it->second;
    if (to < 0 || to >= s.p) continue;
    for (std::size_t k = 0; k < std::min(sv.size(), rv.size()); ++k) {
      cl.partner[static_cast<std::size_t>(from)][static_cast<std::size_t>(sv[k])] = {to, rv[k]};
      cl.partner[static_cast<std::size_t>(to)][static_cast<std::size_t>(rv[k])] = {from, sv[k]};
    }
  }
  return cl;
}

CheckResult check_schedule(const Schedule& s) {
  auto fail = [](std::string m) { return CheckResult{false, std::move(m)}; };
  if (s.p <= 0) return fail("pipeline size p = " + to_string(s.p) + " is not > 0");
  if (s.m <= 0) return fail("number of microbatches m = " + to_string(s.m) + " is not > 0");
  if (s.v <= 0) return fail("chunks per rank v = " + to_string(s.v) + " is not > 0");
  if (s.placement != ChunkPlacement::RoundRobin && s.placement != ChunkPlacement::V) {
    return fail("unknown chunk placement " + to_string(static_cast<int>(s.placement)));
  }
  if (s.placement == ChunkPlacement::V && s.v != 2) {
    return fail("the V placement holds v = 2 chunks per rank, the schedule has v = " + to_string(s.v));
  }
  if (static_cast<long long>(s.p) * s.v > INT_MAX ||
      static_cast<long long>(s.p) * s.m * s.v > kMaxUnits) {
    return fail("schedule too large to check: p * m * v = " + to_string(s.p) + " * " +
                to_string(s.m) + " * " + to_string(s.v) + " exceeds " + to_string(kMaxUnits));
  }
  if (static_cast<long long>(s.ranks.size()) != s.p) {
    return fail("the schedule has " + to_string(s.ranks.size()) + " rank lists for p = " +
                to_string(s.p));
  }
  for (int r = 0; r < s.p; ++r) {
    const auto& list = s.ranks[static_cast<std::size_t>(r)];
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      std::string e = check_action(s, r, i, list[static_cast<std::size_t>(i)]);
      if (!e.empty()) return fail(std::move(e));
    }
  }
  if (std::string e = check_matching(s); !e.empty()) return fail(std::move(e));
  for (int r = 0; r < s.p; ++r) {
    std::string e = check_rank_order(s, r);
    if (!e.empty()) return fail(std::move(e));
  }
  if (std::string e = check_deadlock(s, comm_layout(s)); !e.empty()) return fail(std::move(e));
  return {};
}

}  // namespace ptdp
