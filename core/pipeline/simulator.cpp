#include "core/pipeline/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "core/pipeline/checker.h"

namespace ptdp {

namespace {

// The busy time of the busiest rank, and each rank's most activations held at once.
void count_work(const Schedule& s, const PipelineClock::Cost& cost, SimulationResult& res) {
  res.peak_slots.assign(s.ranks.size(), 0);
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    double busy = 0;
    int held = 0;
    for (const Action& a : s.ranks[r]) {
      busy += cost(a);
      if (a.kind == ActionKind::Forward) res.peak_slots[r] = std::max(res.peak_slots[r], ++held);
      // A slot is freed by the backward that needs it; a forward-only pass keeps none.
      if (a.kind == ActionKind::Backward || a.kind == ActionKind::BackwardWeight ||
          (a.kind == ActionKind::Forward && s.kind == ScheduleKind::ForwardOnly)) {
        --held;
      }
    }
    res.ideal = std::max(res.ideal, busy);
  }
}

// A schedule's lists as the time model runs them: each rank's compute order, and each transfer
// between the gaps holding its two sides (gap g of a rank: before its compute action g).
struct Split {
  std::vector<std::vector<Action>> orders;
  std::vector<std::vector<std::size_t>> gap_of;  // [rank][list index]: the gap a transfer sits in
  std::vector<GapTransfer> transfers;
};

Split split(const Schedule& s) {
  Split out;
  const std::size_t p = s.ranks.size();
  out.orders.resize(p);
  out.gap_of.resize(p);
  for (std::size_t r = 0; r < p; ++r) {
    for (const Action& a : s.ranks[r]) {
      out.gap_of[r].push_back(out.orders[r].size());
      if (!is_communication(a.kind)) out.orders[r].push_back(a);
    }
  }
  const CommLayout cl = comm_layout(s);
  for (std::size_t r = 0; r < p; ++r) {
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const Action& a = s.ranks[r][i];
      if (a.kind != ActionKind::SendActivation && a.kind != ActionKind::SendGradient) continue;
      const ActionRef& other = cl.partner[r][i];
      const auto q = static_cast<std::size_t>(other.rank), j = static_cast<std::size_t>(other.index);
      GapTransfer t;
      t.from = static_cast<int>(r);
      t.to = other.rank;
      t.send = a;
      t.recv = s.ranks[q][j];
      t.send_gap = out.gap_of[r][i];
      t.recv_gap = out.gap_of[q][j];
      out.transfers.push_back(t);
    }
  }
  return out;
}

SimulationResult run_simulation(const Schedule& s, const PipelineClock::Cost& cost, double p2p_latency) {
  const CheckResult check = check_schedule(s);
  PTDP_CHECK_ARG(check.ok, "the schedule is not valid: " + check.message);
  SimulationResult res;
  count_work(s, cost, res);
  PTDP_CHECK_ARG(res.ideal > 0, "the costs give the schedule no compute time (every compute "
                                "action it holds costs 0)");
  Split lists = split(s);
  PipelineClock clock(s, cost, p2p_latency, PipelineClock::Transfers::Explicit);
  PipelineRun run(clock, lists.orders);
  run.listed(lists.transfers);
  const ComputeTimeline ran = run.run("simulate");
  // A batch is posted when its rank reaches its gap and completes with its last transfer.
  const std::size_t p = s.ranks.size();
  std::vector<std::vector<double>> done(p);
  for (std::size_t r = 0; r < p; ++r) done[r].assign(lists.orders[r].size() + 1, 0);
  for (const GapTransfer& t : lists.transfers) {
    double& sent = done[static_cast<std::size_t>(t.from)][t.send_gap];
    double& received = done[static_cast<std::size_t>(t.to)][t.recv_gap];
    sent = std::max(sent, t.met + p2p_latency);
    received = std::max(received, t.met + p2p_latency);
  }
  res.timeline.resize(p);
  for (std::size_t r = 0; r < p; ++r) {
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
      const std::size_t g = lists.gap_of[r][i];
      if (!is_communication(s.ranks[r][i].kind)) {
        res.timeline[r].push_back(TimedAction{ran[r][g].start, ran[r][g].end});
      } else {
        res.timeline[r].push_back(TimedAction{g == 0 ? 0.0 : ran[r][g - 1].end, done[r][g]});
      }
    }
    res.makespan = std::max(res.makespan, run.finish(static_cast<int>(r)));
  }
  res.bubble_fraction = (res.makespan - res.ideal) / res.ideal;
  return res;
}

void check_cost(const std::string& name, double value) {
  PTDP_CHECK_ARG(std::isfinite(value) && value >= 0,
                 "cost " + name + " = " + std::to_string(value) + " is not a finite number >= 0");
}

const char* const kKindNames[4] = {"forward", "backward", "backward_input", "backward_weight"};

const std::vector<double>& kind_vector(const ChunkCosts& c, int k) {
  switch (k) {
    case 0: return c.forward;
    case 1: return c.backward;
    case 2: return c.backward_input;
    default: return c.backward_weight;
  }
}

std::vector<double>& kind_vector(ChunkCosts& c, int k) {
  return const_cast<std::vector<double>&>(kind_vector(static_cast<const ChunkCosts&>(c), k));
}

}  // namespace

SimulationResult simulate(const Schedule& s, const ScheduleCosts& costs) {
  const std::pair<const char*, double> named[] = {{"forward", costs.forward},
                                                  {"backward", costs.backward},
                                                  {"backward_input", costs.backward_input},
                                                  {"backward_weight", costs.backward_weight},
                                                  {"p2p_latency", costs.p2p_latency}};
  for (const auto& [name, value] : named) check_cost(name, value);
  return run_simulation(s, [&](const Action& a) { return action_cost(s, costs, a.kind); }, costs.p2p_latency);
}

SimulationResult simulate(const Schedule& s, const ChunkCosts& costs) {
  const auto n = static_cast<std::size_t>(s.num_chunks());
  for (int k = 0; k < 4; ++k) {
    const std::vector<double>& v = kind_vector(costs, k);
    PTDP_CHECK_ARG(v.size() == n, std::string("costs.") + kKindNames[k] + " has " + std::to_string(v.size()) +
                                      " entries, the schedule has p * v = " + std::to_string(n) + " chunks");
    for (std::size_t c = 0; c < n; ++c) {
      check_cost(std::string(kKindNames[k]) + "[" + std::to_string(c) + "]", v[c]);
    }
  }
  check_cost("p2p_latency", costs.p2p_latency);
  return run_simulation(
      s,
      [&](const Action& a) {
        const int k = static_cast<int>(a.kind);
        if (k < 0 || k > 3) return 0.0;
        return kind_vector(costs, k)[static_cast<std::size_t>(a.chunk)];
      },
      costs.p2p_latency);
}

ChunkCosts complete_chunk_costs(const ChunkCosts& measured) {
  ChunkCosts m = measured;
  const std::size_t n = m.forward.size();
  for (int k = 1; k < 4; ++k) {
    PTDP_CHECK_ARG(kind_vector(m, k).size() == n, std::string("measured.") + kKindNames[k] + " has " +
                                                      std::to_string(kind_vector(m, k).size()) + " entries, forward " +
                                                      std::to_string(n));
  }
  auto known = [](double x) { return std::isfinite(x) && x >= 0; };
  for (std::size_t c = 0; c < n; ++c) {
    double& f = m.forward[c];
    double& b = m.backward[c];
    double& bi = m.backward_input[c];
    double& w = m.backward_weight[c];
    PTDP_CHECK_ARG(known(f), "no forward time measured for chunk " + std::to_string(c));
    if (!known(b)) {
      PTDP_CHECK_ARG(known(bi) && known(w), "chunk " + std::to_string(c) +
                                                " has neither a full backward nor both B and W measured");
      b = bi + w;
    }
    if (!known(bi) || !known(w)) {
      bi = b / 2;
      w = b / 2;
    }
  }
  return m;
}

LayerCosts fit_layer_costs(const ChunkCosts& measured, const std::vector<int>& layers) {
  const std::size_t n = layers.size();
  PTDP_CHECK_ARG(n >= 3, "fitting per-layer costs needs a run of at least 3 model chunks (one holding neither "
                         "the embedding nor the output layer), got " + std::to_string(n));
  for (int k = 0; k < 4; ++k) {
    PTDP_CHECK_ARG(kind_vector(measured, k).size() == n,
                   std::string("measured.") + kKindNames[k] + " has " + std::to_string(kind_vector(measured, k).size()) +
                       " entries for " + std::to_string(n) + " chunks");
  }
  for (std::size_t c = 0; c < n; ++c) {
    PTDP_CHECK_ARG(layers[c] > 0, "chunk " + std::to_string(c) + " holds " + std::to_string(layers[c]) + " layers");
  }
  const ChunkCosts m = complete_chunk_costs(measured);
  LayerCosts fit;
  fit.p2p_latency = measured.p2p_latency;
  for (int k = 0; k < 4; ++k) {
    const std::vector<double>& v = kind_vector(m, k);
    double sum = 0;
    int count = 0;
    for (std::size_t c = 1; c + 1 < n; ++c) {
      sum += v[c];
      count += layers[c];
    }
    fit.layer[k] = sum / count;
    fit.first_extra[k] = v.front() - fit.layer[k] * layers.front();
    fit.last_extra[k] = v.back() - fit.layer[k] * layers.back();
  }
  return fit;
}

double fit_p2p_latency(const Schedule& s, ChunkCosts costs, double measured) {
  PTDP_CHECK_ARG(std::isfinite(measured) && measured > 0,
                 "measured iteration time " + std::to_string(measured) + " is not a finite number > 0");
  costs.p2p_latency = 0;
  if (simulate(s, costs).makespan >= measured) return 0;
  double lo = 0, hi = measured;
  costs.p2p_latency = hi;
  // With one transfer on the critical path the makespan reaches `measured` by hi = measured.
  while (simulate(s, costs).makespan < measured) {
    lo = hi;
    hi *= 2;
    costs.p2p_latency = hi;
  }
  for (int i = 0; i < 50 && hi - lo > 1e-12 * measured; ++i) {
    costs.p2p_latency = 0.5 * (lo + hi);
    (simulate(s, costs).makespan < measured ? lo : hi) = costs.p2p_latency;
  }
  return 0.5 * (lo + hi);
}

ChunkCosts chunk_costs(const LayerCosts& fit, const std::vector<int>& layers) {
  ChunkCosts out;
  out.p2p_latency = fit.p2p_latency;
  const std::size_t n = layers.size();
  for (int k = 0; k < 4; ++k) {
    std::vector<double>& v = kind_vector(out, k);
    v.assign(n, 0);
    for (std::size_t c = 0; c < n; ++c) {
      double x = fit.layer[k] * layers[c];
      if (c == 0) x += fit.first_extra[k];
      if (c + 1 == n) x += fit.last_extra[k];
      v[c] = std::max(0.0, x);
    }
  }
  return out;
}

ChunkCosts measure_chunk_costs(const std::vector<TraceSpan>& spans, int chunks) {
  PTDP_CHECK_ARG(chunks > 0, "chunks = " + std::to_string(chunks) + " is not > 0");
  const auto n = static_cast<std::size_t>(chunks);
  std::vector<std::vector<double>> samples[4];
  for (auto& v : samples) v.assign(n, {});
  std::vector<double> comm;
  for (const TraceSpan& sp : spans) {
    if (sp.communication) {
      comm.push_back(sp.seconds);
      continue;
    }
    // A compute span is named after its action (Action::str()).
    const std::optional<Action> a = parse_action(sp.name);
    if (!a || is_communication(a->kind) || a->chunk < 0 || a->chunk >= chunks) continue;
    const int k = static_cast<int>(a->kind), c = a->chunk;
    samples[k][static_cast<std::size_t>(c)].push_back(sp.seconds);
  }
  auto quantile = [](std::vector<double> v, double q) {
    if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
    std::sort(v.begin(), v.end());
    return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
  };
  auto mean = [](const std::vector<double>& v) {
    if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
    double sum = 0;
    for (double x : v) sum += x;
    return sum / static_cast<double>(v.size());
  };
  ChunkCosts out;
  for (int k = 0; k < 4; ++k) {
    std::vector<double>& dst = kind_vector(out, k);
    dst.assign(n, 0);
    for (std::size_t c = 0; c < n; ++c) dst[c] = mean(samples[k][c]);
  }
  out.p2p_latency = comm.empty() ? 0.0 : quantile(comm, 0.25);
  return out;
}

}  // namespace ptdp
