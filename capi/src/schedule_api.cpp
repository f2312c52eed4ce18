// Pipeline schedules through the C API: generation, inspection, checking, simulation, drawing.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "capi/src/api_guard.h"
#include "capi/src/handles.h"
#include "core/pipeline/checker.h"
#include "core/pipeline/schedule.h"
#include "core/pipeline/simulator.h"
#include "core/pipeline/svg.h"
#include "io/file_read.h"

static_assert(PTDP_SCHEDULE_GPIPE == static_cast<int>(ptdp::ScheduleKind::GPipe));
static_assert(PTDP_SCHEDULE_1F1B == static_cast<int>(ptdp::ScheduleKind::OneFOneB));
static_assert(PTDP_SCHEDULE_INTERLEAVED_1F1B == static_cast<int>(ptdp::ScheduleKind::Interleaved1F1B));
static_assert(PTDP_SCHEDULE_ZB_H1 == static_cast<int>(ptdp::ScheduleKind::ZeroBubbleH1));
static_assert(PTDP_SCHEDULE_FORWARD_ONLY == static_cast<int>(ptdp::ScheduleKind::ForwardOnly));
static_assert(PTDP_ACTION_FORWARD == static_cast<int>(ptdp::ActionKind::Forward));
static_assert(PTDP_ACTION_BACKWARD == static_cast<int>(ptdp::ActionKind::Backward));
static_assert(PTDP_ACTION_BACKWARD_INPUT == static_cast<int>(ptdp::ActionKind::BackwardInput));
static_assert(PTDP_ACTION_BACKWARD_WEIGHT == static_cast<int>(ptdp::ActionKind::BackwardWeight));
static_assert(PTDP_ACTION_SEND_ACTIVATION == static_cast<int>(ptdp::ActionKind::SendActivation));
static_assert(PTDP_ACTION_RECV_ACTIVATION == static_cast<int>(ptdp::ActionKind::RecvActivation));
static_assert(PTDP_ACTION_SEND_GRADIENT == static_cast<int>(ptdp::ActionKind::SendGradient));
static_assert(PTDP_ACTION_RECV_GRADIENT == static_cast<int>(ptdp::ActionKind::RecvGradient));

namespace {

using Impl = ptdp_schedule_impl;
using ptdp::capi::guard;
using ptdp::capi::live;
using ptdp::capi::require_non_null;

// Largest p * m * v accepted, as make_schedule().
constexpr long long kMaxUnits = 1LL << 24;

ptdp::ScheduleKind checked_kind(ptdp_schedule_kind kind, const char* name) {
  const int k = static_cast<int>(kind);
  PTDP_CHECK_ARG(k >= PTDP_SCHEDULE_GPIPE && k <= PTDP_SCHEDULE_INTERLEAVED_ZB,
                 std::string(name) + " = " + std::to_string(k) + " is not a ptdp_schedule_kind");
  return static_cast<ptdp::ScheduleKind>(k);
}

void positive(const char* name, int32_t value) {
  PTDP_CHECK_ARG(value > 0, std::string(name) + " = " + std::to_string(value) + " is not > 0");
}

const ptdp::Schedule& rank_list_owner(ptdp_schedule schedule, int32_t rank) {
  const ptdp::Schedule& s = live(schedule, "schedule").schedule;
  PTDP_CHECK_ARG(rank >= 0 && rank < s.p, "rank = " + std::to_string(rank) +
                                              " is outside the pipeline [0, " + std::to_string(s.p) + ")");
  return s;
}

ptdp::ScheduleCosts costs_of(const ptdp_schedule_costs* user) {
  ptdp_schedule_costs defaults;
  ptdp_schedule_costs_init(&defaults);
  const ptdp_schedule_costs c =
      ptdp::capi::read_options(user, defaults, "costs", "ptdp_schedule_costs_init");
  const std::pair<const char*, double> fields[] = {{"forward", c.forward},
                                                   {"backward", c.backward},
                                                   {"backward_input", c.backward_input},
                                                   {"backward_weight", c.backward_weight},
                                                   {"p2p_latency", c.p2p_latency}};
  for (const auto& [name, value] : fields) {
    PTDP_CHECK_ARG(std::isfinite(value) && value >= 0, std::string("costs->") + name + " = " +
                                                           std::to_string(value) +
                                                           " is not a finite number >= 0");
  }
  ptdp::ScheduleCosts out;
  out.forward = c.forward;
  out.backward = c.backward;
  out.backward_input = c.backward_input;
  out.backward_weight = c.backward_weight;
  out.p2p_latency = c.p2p_latency;
  return out;
}

// The measured per-chunk costs of `user` when it sets them (all four arrays), for `s`.
bool chunk_costs_of(const ptdp_schedule_costs* user, const ptdp::Schedule& s, ptdp::ChunkCosts& out) {
  if (user == nullptr) return false;
  ptdp_schedule_costs defaults;
  ptdp_schedule_costs_init(&defaults);
  const ptdp_schedule_costs c = ptdp::capi::read_options(user, defaults, "costs", "ptdp_schedule_costs_init");
  const double* arrays[4] = {c.chunk_forward, c.chunk_backward, c.chunk_backward_input, c.chunk_backward_weight};
  const char* names[4] = {"chunk_forward", "chunk_backward", "chunk_backward_input", "chunk_backward_weight"};
  int set = 0;
  for (const double* a : arrays) set += a != nullptr ? 1 : 0;
  if (set == 0) return false;
  for (int k = 0; k < 4; ++k) {
    PTDP_CHECK_ARG(arrays[k] != nullptr, std::string("costs->") + names[k] +
                                             " is NULL while other chunk costs are set: set all four or none");
  }
  const auto n = static_cast<std::size_t>(s.num_chunks());
  std::vector<double>* dst[4] = {&out.forward, &out.backward, &out.backward_input, &out.backward_weight};
  for (int k = 0; k < 4; ++k) {
    dst[k]->assign(arrays[k], arrays[k] + n);
    for (std::size_t i = 0; i < n; ++i) {
      const double x = (*dst[k])[i];
      PTDP_CHECK_ARG(std::isfinite(x) && x >= 0, std::string("costs->") + names[k] + "[" + std::to_string(i) +
                                                     "] = " + std::to_string(x) + " is not a finite number >= 0");
    }
  }
  out.p2p_latency = c.p2p_latency;
  return true;
}

// Simulation and drawing need a schedule that passes the check.
void require_valid(const ptdp::Schedule& s) {
  const ptdp::CheckResult r = ptdp::check_schedule(s);
  PTDP_CHECK_ARG(r.ok, "schedule fails ptdp_schedule_check: " + r.message);
}

ptdp_schedule wrap(ptdp::Schedule s) {
  auto* h = new Impl;
  h->schedule = std::move(s);
  return h;
}

}  // namespace

extern "C" {

PTDP_API ptdp_status ptdp_schedule_costs_init(ptdp_schedule_costs* costs) {
  return guard(__func__, [&] {
    ptdp::capi::reset_options(costs, "costs");
    costs->forward = 1;
    costs->backward = 2;
    costs->backward_input = 1;
    costs->backward_weight = 1;
    costs->p2p_latency = 0;
  });
}

PTDP_API ptdp_status ptdp_schedule_create(ptdp_schedule_kind kind, int32_t p, int32_t m, int32_t v,
                                          ptdp_schedule* out) {
  return guard(__func__, [&] {
    const ptdp::ScheduleKind k = checked_kind(kind, "kind");
    require_non_null(out, "out");
    *out = wrap(ptdp::make_schedule(k, p, m, v));
  });
}

PTDP_API ptdp_status ptdp_schedule_create_custom(ptdp_schedule_kind kind_label, int32_t p, int32_t m,
                                                 int32_t v, const ptdp_action* actions,
                                                 const int32_t* counts_per_rank, ptdp_schedule* out) {
  return guard(__func__, [&] {
    const ptdp::ScheduleKind k = checked_kind(kind_label, "kind_label");
    positive("p", p);
    positive("m", m);
    positive("v", v);
    PTDP_CHECK_ARG(static_cast<long long>(p) * m * v <= kMaxUnits,
                   "p * m * v = " + std::to_string(p) + " * " + std::to_string(m) + " * " +
                       std::to_string(v) + " exceeds the largest supported schedule (" +
                       std::to_string(kMaxUnits) + " chunk-microbatches)");
    require_non_null(counts_per_rank, "counts_per_rank");
    require_non_null(out, "out");
    long long total = 0;
    for (int32_t r = 0; r < p; ++r) {
      PTDP_CHECK_ARG(counts_per_rank[r] >= 0, "counts_per_rank[" + std::to_string(r) + "] = " +
                                                  std::to_string(counts_per_rank[r]) + " is negative");
      total += counts_per_rank[r];
    }
    if (total > 0) require_non_null(actions, "actions");
    ptdp::Schedule s;
    s.kind = k;
    s.p = p;
    s.m = m;
    s.v = v;
    s.placement = ptdp::placement_of(k);
    s.ranks.resize(static_cast<std::size_t>(p));
    long long at = 0;
    for (int32_t r = 0; r < p; ++r) {
      auto& list = s.ranks[static_cast<std::size_t>(r)];
      list.reserve(static_cast<std::size_t>(counts_per_rank[r]));
      for (int32_t i = 0; i < counts_per_rank[r]; ++i, ++at) {
        const ptdp_action& a = actions[at];
        const int kind = static_cast<int>(a.kind);
        PTDP_CHECK_ARG(kind >= PTDP_ACTION_FORWARD && kind <= PTDP_ACTION_RECV_GRADIENT,
                       "actions[" + std::to_string(at) + "].kind = " + std::to_string(kind) +
                           " is not a ptdp_action_kind (rank " + std::to_string(r) + ", action " +
                           std::to_string(i) + ")");
        ptdp::Action x;
        x.kind = static_cast<ptdp::ActionKind>(kind);
        x.microbatch = a.microbatch;
        x.chunk = a.chunk;
        x.peer = ptdp::is_communication(x.kind) ? a.peer : -1;
        list.push_back(x);
      }
    }
    *out = wrap(std::move(s));
  });
}

PTDP_API ptdp_status ptdp_schedule_destroy(ptdp_schedule schedule) {
  return guard(__func__, [&] {
    if (schedule == nullptr) return;
    live(schedule, "schedule");
    ptdp::capi::release(schedule);
  });
}

PTDP_API ptdp_status ptdp_schedule_info(ptdp_schedule schedule, ptdp_schedule_kind* kind, int32_t* p,
                                        int32_t* m, int32_t* v) {
  return guard(__func__, [&] {
    const ptdp::Schedule& s = live(schedule, "schedule").schedule;
    if (kind != nullptr) *kind = static_cast<ptdp_schedule_kind>(static_cast<int>(s.kind));
    if (p != nullptr) *p = s.p;
    if (m != nullptr) *m = s.m;
    if (v != nullptr) *v = s.v;
  });
}

PTDP_API ptdp_status ptdp_schedule_num_actions(ptdp_schedule schedule, int32_t rank, int32_t* count) {
  return guard(__func__, [&] {
    const ptdp::Schedule& s = rank_list_owner(schedule, rank);
    require_non_null(count, "count");
    *count = static_cast<int32_t>(s.ranks[static_cast<std::size_t>(rank)].size());
  });
}

PTDP_API ptdp_status ptdp_schedule_actions(ptdp_schedule schedule, int32_t rank, ptdp_action* out,
                                           int32_t capacity, int32_t* count) {
  return guard(__func__, [&] {
    const ptdp::Schedule& s = rank_list_owner(schedule, rank);
    require_non_null(count, "count");
    PTDP_CHECK_ARG(capacity >= 0, "capacity = " + std::to_string(capacity) + " is negative");
    const auto& list = s.ranks[static_cast<std::size_t>(rank)];
    const auto n = static_cast<int32_t>(list.size());
    PTDP_CHECK_ARG(capacity >= n, "capacity = " + std::to_string(capacity) + " is smaller than the " +
                                      std::to_string(n) + " actions of rank " + std::to_string(rank) +
                                      " (ptdp_schedule_num_actions gives the count)");
    if (n > 0) require_non_null(out, "out");
    for (int32_t i = 0; i < n; ++i) {
      const ptdp::Action& a = list[static_cast<std::size_t>(i)];
      out[i] = ptdp_action{static_cast<ptdp_action_kind>(static_cast<int>(a.kind)), a.microbatch,
                           a.chunk, a.peer};
    }
    *count = n;
  });
}

PTDP_API ptdp_status ptdp_schedule_check(ptdp_schedule schedule, int32_t* ok, char* message,
                                         size_t capacity) {
  return guard(__func__, [&] {
    const ptdp::Schedule& s = live(schedule, "schedule").schedule;
    require_non_null(ok, "ok");
    if (capacity > 0) require_non_null(message, "message");
    const ptdp::CheckResult r = ptdp::check_schedule(s);
    if (capacity > 0) {
      const std::size_t n = std::min(r.message.size(), capacity - 1);
      std::memcpy(message, r.message.data(), n);
      message[n] = '\0';
    }
    *ok = r.ok ? 1 : 0;
  });
}

PTDP_API ptdp_status ptdp_schedule_simulate(ptdp_schedule schedule, const ptdp_schedule_costs* costs,
                                            double* makespan, double* bubble_fraction,
                                            int32_t* peak_slots, int32_t capacity) {
  return guard(__func__, [&] {
    const ptdp::Schedule& s = live(schedule, "schedule").schedule;
    const ptdp::ScheduleCosts c = costs_of(costs);
    if (peak_slots != nullptr) {
      PTDP_CHECK_ARG(capacity >= s.p, "capacity = " + std::to_string(capacity) +
                                          " is smaller than the " + std::to_string(s.p) +
                                          " pipeline ranks of peak_slots");
    }
    require_valid(s);
    ptdp::ChunkCosts measured;
    const ptdp::SimulationResult r = chunk_costs_of(costs, s, measured) ? ptdp::simulate(s, measured) : ptdp::simulate(s, c);
    if (makespan != nullptr) *makespan = r.makespan;
    if (bubble_fraction != nullptr) *bubble_fraction = r.bubble_fraction;
    if (peak_slots != nullptr) {
      for (int32_t i = 0; i < s.p; ++i) peak_slots[i] = r.peak_slots[static_cast<std::size_t>(i)];
    }
  });
}

PTDP_API ptdp_status ptdp_schedule_write_svg(ptdp_schedule schedule, const ptdp_schedule_costs* costs,
                                             const char* path) {
  return guard(__func__, [&] {
    const ptdp::Schedule& s = live(schedule, "schedule").schedule;
    const ptdp::ScheduleCosts c = costs_of(costs);
    ptdp::capi::require_path(path, "path");
    require_valid(s);
    ptdp::write_schedule_svg(s, c, path);
  });
}

PTDP_API ptdp_status ptdp_schedule_costs_from_trace(const char* path, int32_t chunks, double* forward, double* backward,
                                                    double* backward_input, double* backward_weight,
                                                    double* p2p_latency) {
  return guard(__func__, [&] {
    ptdp::capi::require_path(path, "path");
    positive("chunks", chunks);
    const std::string text = ptdp::read_regular_file(path, "trace file", ptdp::kMaxJsonFileBytes);
    nlohmann::json trace;
    try {
      trace = nlohmann::json::parse(text);
    } catch (const std::exception& e) {
      ptdp::throw_error(ptdp::ErrorCode::Io, std::string("'") + path + "' is not JSON: " + e.what());
    }
    if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array()) {
      ptdp::throw_error(ptdp::ErrorCode::Io, std::string("'") + path + "' is not a Chrome trace (no traceEvents)");
    }
    std::vector<ptdp::TraceSpan> spans;
    for (const auto& e : trace["traceEvents"]) {
      if (!e.is_object() || e.value("ph", "") != "X" || !e.contains("dur") || !e["dur"].is_number()) continue;
      spans.push_back({e.value("name", ""), e.value("cat", "") == "communication", e["dur"].get<double>() * 1e-6});
    }
    const ptdp::ChunkCosts measured = ptdp::measure_chunk_costs(spans, chunks);
    ptdp::ChunkCosts c;
    try {
      c = ptdp::complete_chunk_costs(measured);
    } catch (const ptdp::Error& e) {
      PTDP_CHECK_ARG(false, "the trace '" + std::string(path) + "': " + e.what());
    }
    const std::vector<double>* from[4] = {&c.forward, &c.backward, &c.backward_input, &c.backward_weight};
    double* to[4] = {forward, backward, backward_input, backward_weight};
    for (int k = 0; k < 4; ++k) {
      if (to[k] != nullptr) std::copy(from[k]->begin(), from[k]->end(), to[k]);
    }
    if (p2p_latency != nullptr) *p2p_latency = c.p2p_latency;
  });
}

}  // extern "C"
