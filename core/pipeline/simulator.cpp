#include "core/pipeline/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <exception>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "core/pipeline/checker.h"

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

namespace {

template <typename Cost>
SimulationResult run_simulation(const Schedule& s, Cost cost, double p2p_latency) {
  const CheckResult check = check_schedule(s);
  PTDP_CHECK_ARG(check.ok, "the schedule is not valid: " + check.message);

  const auto p = static_cast<std::size_t>(s.p);
  const CommLayout cl = comm_layout(s);
  SimulationResult res;
  res.timeline.resize(p);
  res.peak_slots.assign(p, 0);
  for (std::size_t r = 0; r < p; ++r) {
    res.timeline[r].resize(s.ranks[r].size());
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
  PTDP_CHECK_ARG(res.ideal > 0, "the costs give the schedule no compute time (every compute "
                                "action it holds costs 0)");

  // Post times of batches, known once their rank reaches them; a rank stops at a batch until
  // every partner's post time is known. The check above guarantees that all ranks finish.
  std::vector<std::vector<double>> post(p);
  for (std::size_t r = 0; r < p; ++r) post[r].assign(cl.batches[r].size(), -1);
  std::vector<std::size_t> pos(p, 0);
  std::vector<double> clock(p, 0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (std::size_t r = 0; r < p; ++r) {
      const auto& list = s.ranks[r];
      while (pos[r] < list.size()) {
        const Action& a = list[pos[r]];
        if (!is_communication(a.kind)) {
          TimedAction& t = res.timeline[r][pos[r]];
          t.start = clock[r];
          t.end = clock[r] + cost(a);
          clock[r] = t.end;
          ++pos[r];
          progress = true;
          continue;
        }
        const auto b = static_cast<std::size_t>(cl.batch_of[r][pos[r]]);
        if (post[r][b] < 0) {
          post[r][b] = clock[r];
          progress = true;
        }
        const CommLayout::Batch batch = cl.batches[r][b];
        double done = post[r][b];
        bool ready = true;
        for (int i = batch.begin; i < batch.end && ready; ++i) {
          const ActionRef& other = cl.partner[r][static_cast<std::size_t>(i)];
          const auto q = static_cast<std::size_t>(other.rank);
          const auto qb = static_cast<std::size_t>(cl.batch_of[q][static_cast<std::size_t>(other.index)]);
          if (post[q][qb] < 0) {
            ready = false;
          } else {
            done = std::max(done, std::max(post[r][b], post[q][qb]) + p2p_latency);
          }
        }
        if (!ready) break;
        for (int i = batch.begin; i < batch.end; ++i) {
          res.timeline[r][static_cast<std::size_t>(i)] = TimedAction{post[r][b], done};
        }
        clock[r] = done;
        pos[r] = static_cast<std::size_t>(batch.end);
        progress = true;
      }
    }
  }
  for (std::size_t r = 0; r < p; ++r) {
    if (pos[r] < s.ranks[r].size()) {
      throw_error(ErrorCode::Internal, "simulate: rank " + std::to_string(r) + " stopped at action " +
                                           std::to_string(pos[r]) + " of a checked schedule");
    }
    res.makespan = std::max(res.makespan, clock[r]);
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
    // "<kind> mb<i> c<chunk>" with kind F, B (full backward), Bi or W.
    const std::size_t sp1 = sp.name.find(' ');
    const std::size_t cpos = sp.name.rfind(" c");
    if (sp1 == std::string::npos || cpos == std::string::npos || cpos + 2 >= sp.name.size()) continue;
    const std::string kind = sp.name.substr(0, sp1);
    int k = -1;
    if (kind == "F") k = 0;
    if (kind == "B") k = 1;
    if (kind == "Bi") k = 2;
    if (kind == "W") k = 3;
    int c = -1;
    try {
      c = std::stoi(sp.name.substr(cpos + 2));
    } catch (const std::exception&) {
      continue;
    }
    if (k < 0 || c < 0 || c >= chunks) continue;
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
