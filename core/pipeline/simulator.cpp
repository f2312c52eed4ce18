#include "core/pipeline/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <utility>

#include "core/pipeline/checker.h"
#include "kernels/error.h"

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

SimulationResult simulate(const Schedule& s, const ScheduleCosts& costs) {
  const std::pair<const char*, double> named[] = {{"forward", costs.forward},
                                                  {"backward", costs.backward},
                                                  {"backward_input", costs.backward_input},
                                                  {"backward_weight", costs.backward_weight},
                                                  {"p2p_latency", costs.p2p_latency}};
  for (const auto& [name, value] : named) {
    PTDP_CHECK_ARG(std::isfinite(value) && value >= 0,
                   std::string("cost ") + name + " = " + std::to_string(value) +
                       " is not a finite number >= 0");
  }
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
      busy += action_cost(s, costs, a.kind);
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
          t.end = clock[r] + action_cost(s, costs, a.kind);
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
            done = std::max(done, std::max(post[r][b], post[q][qb]) + costs.p2p_latency);
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

}  // namespace ptdp
