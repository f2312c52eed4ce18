// The simulator reproduces the bubble fractions and activation-memory figures of the papers
// exactly under their cost assumptions, and its timelines are consistent.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"
#include "core/pipeline/schedule.h"
#include "core/pipeline/simulator.h"
#include "schedule_sweep.h"

using ptdp::ActionKind;
using ptdp::ScheduleCosts;
using ptdp::ScheduleKind;
using ptdp_test::describe;

namespace {

// The paper's unit costs: F = 1, B = 2, no W split, zero latency.
ScheduleCosts unit_costs() {
  ScheduleCosts c;
  c.forward = 1;
  c.backward = 2;
  c.p2p_latency = 0;
  return c;
}

// F = B = W = 1 (the zero-bubble paper's assumption); a full backward is B + W.
ScheduleCosts equal_costs() {
  ScheduleCosts c;
  c.forward = 1;
  c.backward = 2;
  c.backward_input = 1;
  c.backward_weight = 1;
  return c;
}

ptdp::SimulationResult run(ScheduleKind kind, int p, int m, int v, const ScheduleCosts& c) {
  return ptdp::simulate(ptdp::make_schedule(kind, p, m, v), c);
}

int max_of(const std::vector<int>& xs) { return *std::max_element(xs.begin(), xs.end()); }

}  // namespace

TEST_CASE("schedule simulator: bubble fractions are (p-1)/m and (p-1)/(v*m) exactly", "[pipeline][schedule][simulator]") {
  ptdp_test::for_each_combination([&](ScheduleKind kind, int p, int m, int v) {
    if (kind == ScheduleKind::ZeroBubbleH1) return;
    INFO(describe(kind, p, m, v));
    const ptdp::SimulationResult r = run(kind, p, m, v, unit_costs());
    const double expected = static_cast<double>(p - 1) / (kind == ScheduleKind::Interleaved1F1B ? v * m : m);
    CHECK(std::fabs(r.bubble_fraction - expected) < 1e-12);
    CHECK(std::fabs(r.ideal - 3.0 * m) < 1e-9);
  });
}

TEST_CASE("schedule simulator: ZB-H1's bubble is below 1F1B's, (p-1)/(3m) with F = B = W", "[pipeline][schedule][simulator]") {
  for (int p = 1; p <= 8; ++p) {
    for (int m = p; m <= 4 * p; ++m) {
      INFO("p=" << p << " m=" << m);
      const ptdp::SimulationResult zb = run(ScheduleKind::ZeroBubbleH1, p, m, 1, equal_costs());
      const ptdp::SimulationResult one = run(ScheduleKind::OneFOneB, p, m, 1, equal_costs());
      if (p >= 2) CHECK(zb.bubble_fraction < one.bubble_fraction);
      // The paper's figure for ZB-H1: a third of 1F1B's bubble.
      CHECK(std::fabs(zb.bubble_fraction - (p - 1) / (3.0 * m)) < 1e-12);
      CHECK(std::fabs(zb.ideal - one.ideal) < 1e-12);
    }
  }
}

TEST_CASE("schedule simulator: peak activation slots per rank", "[pipeline][schedule][simulator]") {
  ptdp_test::for_each_combination([&](ScheduleKind kind, int p, int m, int v) {
    INFO(describe(kind, p, m, v));
    const ptdp::SimulationResult r = run(kind, p, m, v, unit_costs());
    REQUIRE(r.peak_slots.size() == static_cast<std::size_t>(p));
    for (int rank = 0; rank < p; ++rank) {
      const int peak = r.peak_slots[static_cast<std::size_t>(rank)];
      INFO("rank " << rank << " peak " << peak);
      switch (kind) {
        case ScheduleKind::GPipe: CHECK(peak == m); break;
        case ScheduleKind::OneFOneB: CHECK(peak == std::min(p - rank, m)); break;
        case ScheduleKind::ZeroBubbleH1: CHECK(peak <= std::min(p, m)); break;
        case ScheduleKind::ForwardOnly: CHECK(peak == 1); break;
        case ScheduleKind::Interleaved1F1B:
          // A slot is one chunk's activations, 1/v of a microbatch's on the rank. Megatron's
          // warm-up keeps (p - rank - 1) * 2 + (v - 1) * p forwards in flight, one more in the
          // steady state: at most v*p + p - 1 slots, i.e. below p * (1 + 1/v) microbatches.
          if (m == p) {
            CHECK(peak == m * v);  // all forwards first (Megatron's m == p case)
          } else {
            CHECK(peak == (p - rank - 1) * 2 + (v - 1) * p + 1);
          }
          CHECK(static_cast<double>(peak) / v <= p * (1.0 + 1.0 / v));
          break;
        case ScheduleKind::ZeroBubbleV:  // not in this sweep: test_schedule_vshape.cpp
        case ScheduleKind::DualPipeV:
        case ScheduleKind::InterleavedZeroBubble: break;
      }
    }
    // ZB-H1 keeps 1F1B's peak: the largest over the ranks is the same.
    if (kind == ScheduleKind::ZeroBubbleH1) {
      CHECK(max_of(r.peak_slots) == max_of(run(ScheduleKind::OneFOneB, p, m, 1, unit_costs()).peak_slots));
    }
  });
}

TEST_CASE("schedule simulator: timelines respect costs, order and transfers", "[pipeline][schedule][simulator]") {
  ScheduleCosts c = equal_costs();
  c.forward = 1.5;
  c.p2p_latency = 0.25;
  for (ScheduleKind kind : ptdp_test::kAllKinds) {
    const int v = kind == ScheduleKind::Interleaved1F1B ? 2 : 1;
    const ptdp::Schedule s = ptdp::make_schedule(kind, 4, 8, v);
    const ptdp::SimulationResult r = ptdp::simulate(s, c);
    double last_end = 0;
    for (int rank = 0; rank < 4; ++rank) {
      const auto& list = s.ranks[static_cast<std::size_t>(rank)];
      const auto& tl = r.timeline[static_cast<std::size_t>(rank)];
      REQUIRE(tl.size() == list.size());
      double clock = 0;
      for (std::size_t i = 0; i < list.size(); ++i) {
        const bool same_batch = i > 0 && ptdp::is_communication(list[i].kind) &&
                                ptdp::is_communication(list[i - 1].kind);
        if (same_batch) {  // a batch is posted and completes as one
          CHECK(tl[i].start == tl[i - 1].start);
          CHECK(tl[i].end == tl[i - 1].end);
        }
        CHECK(tl[i].start >= (same_batch ? tl[i - 1].start : clock - 1e-12));
        CHECK(tl[i].end >= tl[i].start);
        if (!ptdp::is_communication(list[i].kind)) {
          CHECK(std::fabs(tl[i].end - tl[i].start - ptdp::action_cost(s, c, list[i].kind)) < 1e-12);
        } else {
          CHECK(tl[i].end - tl[i].start >= c.p2p_latency - 1e-12);  // every transfer pays it
        }
        clock = tl[i].end;
      }
      last_end = std::max(last_end, clock);
    }
    CHECK(r.makespan == last_end);
  }
}

TEST_CASE("schedule simulator: latency on a two-rank pipeline", "[pipeline][schedule][simulator]") {
  // 1F1B, p = 2, m = 1, latency L: rank 0's forward [0, 1]; the activation arrives at 1 + L;
  // rank 1 computes F and B until 4 + L; the gradient arrives at 4 + 2L; rank 0's backward ends
  // at 6 + 2L.
  ScheduleCosts c = unit_costs();
  c.p2p_latency = 0.5;
  const ptdp::SimulationResult r = run(ScheduleKind::OneFOneB, 2, 1, 1, c);
  CHECK(r.makespan == 7.0);
  CHECK(r.bubble_fraction == (7.0 - 3.0) / 3.0);
  CHECK(r.timeline[1][1].start == 1.5);  // rank 1: [RecvAct] F0 ...
}

TEST_CASE("schedule simulator refuses invalid schedules and costs", "[pipeline][schedule][simulator]") {
  ptdp::Schedule s = ptdp::make_schedule(ScheduleKind::OneFOneB, 2, 2);
  ScheduleCosts c;
  c.forward = -1;
  CHECK_THROWS_WITH(ptdp::simulate(s, c), "cost forward = -1.000000 is not a finite number >= 0");
  c.forward = 0;
  c.backward = 0;
  CHECK_THROWS_WITH(ptdp::simulate(s, c),
                    "the costs give the schedule no compute time (every compute action it holds costs 0)");
  s.ranks[1].erase(s.ranks[1].begin());  // rank 1's first receive
  try {
    ptdp::simulate(s, ScheduleCosts{});
    FAIL("no error");
  } catch (const ptdp::Error& e) {
    CHECK(e.code() == ptdp::ErrorCode::InvalidArgument);
    CHECK(std::string(e.what()) == "the schedule is not valid: rank 0: send of activation mb 0 chunk 0 "
                                   "to rank 1 (action 1) has no matching receive");
  }
}
