// ZB-V, DualPipeV and interleaved zero bubble: the V placement, the generators over a sweep
// (every schedule passes the checker, holds each unit's passes once, in the placement its kind
// runs), DualPipeV's order against dualpipev.py's steps, ZB-V's memory and bubble against
// 1F1B's, the refusals, the drawing, and the simulator with per-chunk (measured) costs and its
// per-layer fit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "core/pipeline/checker.h"
#include "core/pipeline/schedule.h"
#include "core/pipeline/simulator.h"
#include "core/pipeline/svg.h"

using ptdp::Action;
using ptdp::ActionKind;
using ptdp::ChunkPlacement;
using ptdp::ScheduleKind;

namespace {

std::string name_of(ScheduleKind k, int p, int m, int v) {
  return std::string(ptdp::schedule_kind_name(k)) + " p=" + std::to_string(p) + " m=" + std::to_string(m) +
         " v=" + std::to_string(v);
}

std::string error_of(ScheduleKind kind, int p, int m, int v) {
  try {
    ptdp::make_schedule(kind, p, m, v);
  } catch (const ptdp::Error& e) {
    CHECK(e.code() == ptdp::ErrorCode::InvalidArgument);
    return e.what();
  }
  return "(no error)";
}

std::vector<Action> compute_only(const std::vector<Action>& list) {
  std::vector<Action> out;
  for (const Action& a : list) {
    if (!ptdp::is_communication(a.kind)) out.push_back(a);
  }
  return out;
}

// Each (microbatch, chunk) of the rank: its forward once, and a full backward or B and W.
void require_complete(const ptdp::Schedule& s, int r) {
  std::map<std::pair<int, int>, std::vector<ActionKind>> seen;
  for (const Action& a : compute_only(s.ranks[static_cast<std::size_t>(r)])) {
    REQUIRE(s.rank_of_chunk(a.chunk) == r);
    seen[{a.microbatch, a.chunk}].push_back(a.kind);
  }
  REQUIRE(seen.size() == static_cast<std::size_t>(s.m * s.v));
  for (const auto& [unit, kinds] : seen) {
    const bool full = kinds == std::vector<ActionKind>{ActionKind::Forward, ActionKind::Backward};
    const bool split = kinds == std::vector<ActionKind>{ActionKind::Forward, ActionKind::BackwardInput,
                                                        ActionKind::BackwardWeight};
    INFO("microbatch " << unit.first << " chunk " << unit.second);
    REQUIRE((full || split));
  }
}

int peak(const ptdp::SimulationResult& r) { return *std::max_element(r.peak_slots.begin(), r.peak_slots.end()); }

}  // namespace

TEST_CASE("V placement: rank r holds chunks r and 2p-1-r", "[pipeline][schedule][vshape]") {
  const int p = 4;
  const int want_rank[8] = {0, 1, 2, 3, 3, 2, 1, 0};
  const int want_local[8] = {0, 0, 0, 0, 1, 1, 1, 1};
  for (int c = 0; c < 2 * p; ++c) {
    CHECK(ptdp::placement_rank(ChunkPlacement::V, p, c) == want_rank[c]);
    CHECK(ptdp::placement_local(ChunkPlacement::V, p, c) == want_local[c]);
    CHECK(ptdp::placement_chunk(ChunkPlacement::V, p, want_rank[c], want_local[c]) == c);
    // Round-robin, for comparison: chunk c on rank c % p.
    CHECK(ptdp::placement_rank(ChunkPlacement::RoundRobin, p, c) == c % p);
    CHECK(ptdp::placement_chunk(ChunkPlacement::RoundRobin, p, c % p, c / p) == c);
  }
  CHECK(ptdp::placement_of(ScheduleKind::ZeroBubbleV) == ChunkPlacement::V);
  CHECK(ptdp::placement_of(ScheduleKind::DualPipeV) == ChunkPlacement::V);
  CHECK(ptdp::placement_of(ScheduleKind::InterleavedZeroBubble) == ChunkPlacement::RoundRobin);
  CHECK(ptdp::placement_of(ScheduleKind::Interleaved1F1B) == ChunkPlacement::RoundRobin);
  CHECK(std::string(ptdp::chunk_placement_name(ChunkPlacement::V)) == "V");
  CHECK(std::string(ptdp::schedule_kind_name(ScheduleKind::ZeroBubbleV)) == "ZB-V");
  CHECK(std::string(ptdp::schedule_kind_name(ScheduleKind::DualPipeV)) == "DualPipeV");
  CHECK(std::string(ptdp::schedule_kind_name(ScheduleKind::InterleavedZeroBubble)) == "interleaved zero bubble");
}

TEST_CASE("V-shaped and interleaved zero-bubble generators: every schedule of the sweep passes the checker",
          "[pipeline][schedule][vshape]") {
  int count = 0;
  auto one = [&](ScheduleKind kind, int p, int m, int v) {
    INFO(name_of(kind, p, m, v));
    const ptdp::Schedule s = ptdp::make_schedule(kind, p, m, v);
    REQUIRE(s.kind == kind);
    REQUIRE(s.placement == ptdp::placement_of(kind));
    const ptdp::CheckResult r = ptdp::check_schedule(s);
    INFO(r.message);
    REQUIRE(r.ok);
    for (int rank = 0; rank < p; ++rank) require_complete(s, rank);
    // The V placement hands chunk p - 1's output to chunk p on rank p - 1: no transfer names it.
    if (s.placement == ChunkPlacement::V) {
      for (const auto& list : s.ranks) {
        for (const Action& a : list) {
          REQUIRE_FALSE((a.kind == ActionKind::SendActivation && a.chunk == p - 1));
          REQUIRE_FALSE((a.kind == ActionKind::SendGradient && a.chunk == p));
        }
      }
    }
    ++count;
  };
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 4 * p; ++m) one(ScheduleKind::ZeroBubbleV, p, m, 2);
    for (int m = 2 * p; m <= 4 * p; ++m) one(ScheduleKind::DualPipeV, p, m, 2);
    for (int m = p; m <= 4 * p; m += p) {
      for (int v = 2; v <= 3; ++v) one(ScheduleKind::InterleavedZeroBubble, p, m, v);
    }
  }
  // ZB-V: sum 4p = 144; DualPipeV: sum (2p + 1) = 80; interleaved ZB: 4 m's x 2 v's x 8 = 64.
  CHECK(count == 288);
}

TEST_CASE("DualPipeV: each rank runs dualpipev.py's steps", "[pipeline][schedule][vshape]") {
  const int p = 4, m = 10;
  const ptdp::Schedule s = ptdp::make_schedule(ScheduleKind::DualPipeV, p, m, 2);
  for (int r = 0; r < p; ++r) {
    INFO("rank " << r);
    const std::vector<Action> l = compute_only(s.ranks[static_cast<std::size_t>(r)]);
    const int c0 = r, c1 = 2 * p - 1 - r;
    std::size_t i = 0;
    // Step 1: 2 (p - r - 1) forwards of the first chunk, microbatches 0, 1, ...
    for (int k = 0; k < 2 * (p - r - 1); ++k, ++i) {
      REQUIRE(l[i] == Action{ActionKind::Forward, k, c0, -1});
    }
    // Step 2: (r + 1) x (F0 F1).
    for (int k = 0; k < r + 1; ++k) {
      CHECK(l[i++] == Action{ActionKind::Forward, 2 * (p - r - 1) + k, c0, -1});
      CHECK(l[i++] == Action{ActionKind::Forward, k, c1, -1});
    }
    // Step 3: (p - r - 1) x (B1 as zero bubble, its W, F1).
    for (int k = 0; k < p - r - 1; ++k) {
      CHECK(l[i++] == Action{ActionKind::BackwardInput, k, c1, -1});
      CHECK(l[i++] == Action{ActionKind::BackwardWeight, k, c1, -1});
      CHECK(l[i++] == Action{ActionKind::Forward, r + 1 + k, c1, -1});
    }
    // Step 4 starts with F0 B1 F1 B0, full backwards.
    CHECK(l[i++].kind == ActionKind::Forward);
    CHECK(l[i] == Action{ActionKind::Backward, p - r - 1, c1, -1});
    // Zero-bubble backwards: step 3's p - r - 1, step 7's p - r - 1, and step 6's.
    int zb = 0;
    for (const Action& a : l) zb += a.kind == ActionKind::BackwardInput ? 1 : 0;
    const int step6 = r + 1, half = step6 / 2;
    const int zb6 = r % 2 == 1 ? 2 * (step6 - half) : (step6 - half) + (step6 - half - 1);
    CHECK(zb == 2 * (p - r - 1) + zb6);
    // The last r + 1 actions are W (step 8).
    for (int k = 0; k < r + 1; ++k) CHECK(l[l.size() - 1 - static_cast<std::size_t>(k)].kind == ActionKind::BackwardWeight);
  }
}

TEST_CASE("ZB-V: 1F1B's activation memory, a smaller bubble, and interleaved zero bubble beats interleaved 1F1B",
          "[pipeline][schedule][vshape]") {
  ptdp::ScheduleCosts c;  // F = 1, B = 2 = 1 + 1 per rank's share of a microbatch
  for (int p : {2, 4, 8}) {
    for (int m : {2 * p, 4 * p}) {
      INFO("p=" << p << " m=" << m);
      const auto zbv = ptdp::simulate(ptdp::make_schedule(ScheduleKind::ZeroBubbleV, p, m, 2), c);
      const auto one = ptdp::simulate(ptdp::make_schedule(ScheduleKind::OneFOneB, p, m, 1), c);
      // A slot of ZB-V is half a stage: 2p slots are 1F1B's p microbatches of a whole stage.
      CHECK(peak(zbv) <= 2 * p);
      CHECK(peak(one) == p);
      CHECK(zbv.bubble_fraction < one.bubble_fraction / 2);
      const auto izb = ptdp::simulate(ptdp::make_schedule(ScheduleKind::InterleavedZeroBubble, p, m, 2), c);
      const auto il = ptdp::simulate(ptdp::make_schedule(ScheduleKind::Interleaved1F1B, p, m, 2), c);
      CHECK(izb.bubble_fraction < il.bubble_fraction);
      CHECK(peak(izb) <= peak(il));
    }
  }
  // The numbers at p = 4, m = 16 (F = B = W per chunk): 1F1B 0.1875, ZB-V 0.031.
  const auto z = ptdp::simulate(ptdp::make_schedule(ScheduleKind::ZeroBubbleV, 4, 16, 2), c);
  CHECK(z.bubble_fraction == Approx(0.03125));
}

TEST_CASE("V-shaped schedules: refusals name the numbers", "[pipeline][schedule][vshape]") {
  CHECK(error_of(ScheduleKind::DualPipeV, 4, 7, 2) == "DualPipeV needs at least 2p microbatches: m = 7, p = 4 (2p = 8)");
  CHECK(error_of(ScheduleKind::ZeroBubbleV, 4, 8, 1) == "ZB-V places v = 2 chunks per rank in a V, got v = 1");
  CHECK(error_of(ScheduleKind::DualPipeV, 4, 8, 3) == "DualPipeV places v = 2 chunks per rank in a V, got v = 3");
  CHECK(error_of(ScheduleKind::InterleavedZeroBubble, 4, 8, 1) ==
        "interleaved zero bubble needs v > 1 chunks per rank, got v = 1; use ZB-H1 for one chunk per rank");
  CHECK(error_of(ScheduleKind::InterleavedZeroBubble, 4, 6, 2) ==
        "interleaved zero bubble needs the number of microbatches to be a multiple of the pipeline size: m = 6, p = 4");
}

TEST_CASE("checker: the V placement's rules", "[pipeline][schedule][vshape]") {
  ptdp::Schedule s = ptdp::make_schedule(ScheduleKind::ZeroBubbleV, 4, 8, 2);
  SECTION("v must be 2") {
    s.v = 3;
    const ptdp::CheckResult r = ptdp::check_schedule(s);
    CHECK_FALSE(r.ok);
    CHECK(r.message == "the V placement holds v = 2 chunks per rank, the schedule has v = 3");
  }
  SECTION("chunks p - 1 and p share rank p - 1: a transfer between them is refused") {
    auto& l = s.ranks[3];
    const auto it = std::find_if(l.begin(), l.end(), [](const Action& a) { return a.kind == ActionKind::Forward && a.chunk == 3; });
    REQUIRE(it != l.end());
    l.insert(it + 1, Action{ActionKind::SendActivation, it->microbatch, 3, 3});
    const ptdp::CheckResult r = ptdp::check_schedule(s);
    CHECK_FALSE(r.ok);
    CHECK(r.message.find("chunks 3 and 4 both live on rank 3: no transfer is needed") != std::string::npos);
  }
  SECTION("the same lists read round-robin put chunks on the wrong ranks") {
    s.placement = ChunkPlacement::RoundRobin;
    const ptdp::CheckResult r = ptdp::check_schedule(s);
    CHECK_FALSE(r.ok);
    CHECK(r.message.find("chunk 7 lives on rank 3, not rank 0") != std::string::npos);
  }
}

TEST_CASE("forward-only schedule in the V placement", "[pipeline][schedule][vshape]") {
  const ptdp::Schedule s = ptdp::make_forward_only(4, 3, 2, ChunkPlacement::V);
  CHECK(s.placement == ChunkPlacement::V);
  CHECK(ptdp::check_schedule(s).ok);
  // Rank 0 runs chunk 0 then chunk 7 of each microbatch; rank 3 chunks 3 and 4 back to back.
  const std::vector<Action> r0 = compute_only(s.ranks[0]), r3 = compute_only(s.ranks[3]);
  CHECK(r0[0] == Action{ActionKind::Forward, 0, 0, -1});
  CHECK(r0[1] == Action{ActionKind::Forward, 0, 7, -1});
  CHECK(r3[0] == Action{ActionKind::Forward, 0, 3, -1});
  CHECK(r3[1] == Action{ActionKind::Forward, 0, 4, -1});
  CHECK_THROWS_AS(ptdp::make_forward_only(4, 3, 3, ChunkPlacement::V), ptdp::Error);
}

TEST_CASE("SVG of the new schedules: one rect per compute action", "[pipeline][schedule][vshape][svg]") {
  for (ScheduleKind kind : {ScheduleKind::ZeroBubbleV, ScheduleKind::DualPipeV, ScheduleKind::InterleavedZeroBubble}) {
    const ptdp::Schedule s = ptdp::make_schedule(kind, 4, 8, 2);
    const std::string svg = ptdp::schedule_svg(s, ptdp::simulate(s, ptdp::ScheduleCosts{}));
    std::size_t rects = 0, computes = 0;
    for (std::size_t at = svg.find("<rect "); at != std::string::npos; at = svg.find("<rect ", at + 1)) ++rects;
    for (const auto& l : s.ranks) computes += compute_only(l).size();
    INFO(ptdp::schedule_kind_name(kind));
    CHECK(rects == computes);
    CHECK(svg.find("weight-gradient backward (W)") != std::string::npos);
  }
}

TEST_CASE("simulator with per-chunk costs", "[pipeline][schedule][vshape][predict]") {
  // 1F1B, p = 2, one microbatch: F0, F1, B1, B0 in sequence.
  const ptdp::Schedule s = ptdp::make_schedule(ScheduleKind::OneFOneB, 2, 1, 1);
  ptdp::ChunkCosts c;
  c.forward = {1, 2};
  c.backward = {3, 4};
  c.backward_input = {0, 0};
  c.backward_weight = {0, 0};
  c.p2p_latency = 0.5;
  const ptdp::SimulationResult r = ptdp::simulate(s, c);
  CHECK(r.makespan == Approx(1 + 0.5 + 2 + 4 + 0.5 + 3));
  CHECK(r.ideal == Approx(6));
  c.forward = {1};
  try {
    ptdp::simulate(s, c);
    FAIL("no error");
  } catch (const ptdp::Error& e) {
    CHECK(std::string(e.what()) == "costs.forward has 1 entries, the schedule has p * v = 2 chunks");
  }
  c.forward = {1, -1};
  CHECK_THROWS_WITH(ptdp::simulate(s, c), "cost forward[1] = -1.000000 is not a finite number >= 0");
}

TEST_CASE("per-layer fit of measured chunk costs predicts other layouts", "[pipeline][schedule][vshape][predict]") {
  ptdp::LayerCosts truth;
  for (int k = 0; k < 4; ++k) {
    truth.layer[k] = 1.0 + k;
    truth.first_extra[k] = 0.25 * (k + 1);
    truth.last_extra[k] = 3.0 + k;
  }
  truth.layer[1] = truth.layer[2] + truth.layer[3];
  truth.first_extra[1] = truth.first_extra[2] + truth.first_extra[3];
  truth.last_extra[1] = truth.last_extra[2] + truth.last_extra[3];
  truth.p2p_latency = 0.125;
  // Measured on 4 chunks of 2 layers, from a zero-bubble run: no full backwards (NaN).
  ptdp::ChunkCosts measured = ptdp::chunk_costs(truth, {2, 2, 2, 2});
  for (double& b : measured.backward) b = std::numeric_limits<double>::quiet_NaN();
  const ptdp::LayerCosts fit = ptdp::fit_layer_costs(measured, {2, 2, 2, 2});
  for (int k = 0; k < 4; ++k) {
    CHECK(fit.layer[k] == Approx(truth.layer[k]));
    CHECK(fit.first_extra[k] == Approx(truth.first_extra[k]));
    CHECK(fit.last_extra[k] == Approx(truth.last_extra[k]));
  }
  CHECK(fit.p2p_latency == 0.125);
  // Another layout: 2 chunks of 4 layers.
  const ptdp::ChunkCosts two = ptdp::chunk_costs(fit, {4, 4});
  CHECK(two.forward[0] == Approx(4 * 1.0 + 0.25));
  CHECK(two.forward[1] == Approx(4 * 1.0 + 3.0));
  CHECK(two.backward[1] == Approx(4 * 7.0 + 3.0 + 2 + 3 + 3));
  CHECK_THROWS_WITH(ptdp::fit_layer_costs(ptdp::chunk_costs(truth, {2, 2}), {2, 2}),
                    Catch::Contains("at least 3 model chunks"));
}

TEST_CASE("measured chunk costs from executor spans", "[pipeline][schedule][vshape][predict]") {
  const std::vector<ptdp::TraceSpan> spans = {
      {"F mb0 c1", false, 0.010}, {"F mb1 c1", false, 0.035}, {"F mb2 c1", false, 0.015},
      {"Bi mb0 c1", false, 0.040}, {"W mb0 c1", false, 0.005}, {"B mb0 c0", false, 0.070},
      {"SendAct mb0 c1 peer 0 RecvGrad mb0 c1 peer 0", true, 0.004}, {"RecvAct mb1 c0 peer 1", true, 0.001},
      {"RecvAct mb2 c0 peer 1", true, 0.009}, {"RecvAct mb3 c0 peer 1", true, 0.002},
      {"F mb0 c9", false, 1.0},  // no such chunk: skipped
      {"garbage", false, 1.0}};
  const ptdp::ChunkCosts c = ptdp::measure_chunk_costs(spans, 2);
  CHECK(c.forward[1] == Approx(0.020));  // the mean
  CHECK(std::isnan(c.forward[0]));
  CHECK(c.backward_input[1] == Approx(0.040));
  CHECK(c.backward_weight[1] == Approx(0.005));
  CHECK(c.backward[0] == Approx(0.070));
  CHECK(std::isnan(c.backward[1]));
  CHECK(c.p2p_latency == Approx(0.002));  // the lower quartile of 1, 2, 4, 9 ms
}

TEST_CASE("transfer time fitted to a measured iteration", "[pipeline][schedule][vshape][predict]") {
  // 1F1B, p = 2, one microbatch: F0 1 + L + F1 2 + B1 4 + L + B0 3 = 10 + 2L.
  const ptdp::Schedule s = ptdp::make_schedule(ScheduleKind::OneFOneB, 2, 1, 1);
  ptdp::ChunkCosts c;
  c.forward = {1, 2};
  c.backward = {3, 4};
  c.backward_input = {0, 0};
  c.backward_weight = {0, 0};
  CHECK(ptdp::fit_p2p_latency(s, c, 11) == Approx(0.5));
  CHECK(ptdp::fit_p2p_latency(s, c, 9) == 0);  // compute alone takes longer
  CHECK_THROWS_WITH(ptdp::fit_p2p_latency(s, c, 0), "measured iteration time 0.000000 is not a finite number > 0");
}
