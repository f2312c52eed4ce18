// The one pass that places every schedule's sends and receives (add_transfers), and the time
// model it, the generators and the simulator share: the pass gives lists that check on any
// compute orders that can run, even random ones; it refuses what it cannot place, naming it;
// Megatron's batches come out of it; and the clock times implicit transfers as documented.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "core/pipeline/checker.h"
#include "core/pipeline/schedule.h"
#include "core/pipeline/simulator.h"
#include "core/pipeline/time_model.h"
#include "core/pipeline/transfers.h"
#include "schedule_sweep.h"

using ptdp::Action;
using ptdp::ActionKind;
using ptdp::Schedule;
using ptdp::ScheduleKind;

namespace {

std::vector<Action> compute_only(const std::vector<Action>& list) {
  std::vector<Action> out;
  for (const Action& a : list) {
    if (!ptdp::is_communication(a.kind)) out.push_back(a);
  }
  return out;
}

Schedule orders_of(const Schedule& s) {
  Schedule o = s;
  for (auto& l : o.ranks) l = compute_only(l);
  return o;
}

std::string error_of(Schedule s, const ptdp::ScheduleCosts& costs = {}, const ptdp::BackToBack& joined = {}) {
  try {
    ptdp::add_transfers(s, costs, joined);
  } catch (const ptdp::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Compute orders from a random order of every compute action of a (p, m, v) round-robin
// schedule that respects the data (a forward after the previous chunk's, a backward after its
// forward and the next chunk's backward, W after B), each rank's the actions it holds in that
// order: orders that can run, which add_transfers must place for any interleaving.
Schedule random_orders(std::mt19937& rng, int p, int m, int v, bool split) {
  Schedule s;
  s.kind = split ? ScheduleKind::ZeroBubbleH1 : ScheduleKind::OneFOneB;
  s.p = p;
  s.m = m;
  s.v = v;
  s.ranks.resize(static_cast<std::size_t>(p));
  const int nc = p * v;
  // Per (microbatch, chunk): 0 nothing, 1 forward, 2 backward (B), 3 W done.
  std::map<std::pair<int, int>, int> done;
  std::vector<Action> ready;
  auto offer = [&](int mb, int c) {
    const int d = done[{mb, c}];
    const bool input = c == 0 || done[{mb, c - 1}] >= 1;
    const bool grad = c + 1 == nc || done[{mb, c + 1}] >= 2;
    if (d == 0 && input) ready.push_back({ActionKind::Forward, mb, c, -1});
    if (d == 1 && grad) ready.push_back({split ? ActionKind::BackwardInput : ActionKind::Backward, mb, c, -1});
    if (d == 2 && split) ready.push_back({ActionKind::BackwardWeight, mb, c, -1});
  };
  for (int mb = 0; mb < m; ++mb) offer(mb, 0);
  while (!ready.empty()) {
    const std::size_t i = std::uniform_int_distribution<std::size_t>(0, ready.size() - 1)(rng);
    const Action a = ready[i];
    ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(i));
    s.ranks[static_cast<std::size_t>(s.rank_of_chunk(a.chunk))].push_back(a);
    int& d = done[{a.microbatch, a.chunk}];
    d = a.kind == ActionKind::Forward ? 1 : a.kind == ActionKind::BackwardWeight ? 3 : 2;
    if (a.kind == ActionKind::Backward) d = 3;
    // What this action's data lets go next: its own next pass and its neighbours'.
    if (a.kind == ActionKind::Forward) {
      if (a.chunk + 1 < nc) offer(a.microbatch, a.chunk + 1);
      offer(a.microbatch, a.chunk);
    } else if (a.kind != ActionKind::BackwardWeight) {
      if (a.chunk > 0) offer(a.microbatch, a.chunk - 1);
      if (split) offer(a.microbatch, a.chunk);
    }
  }
  return s;
}

}  // namespace

TEST_CASE("add_transfers places the transfers of random compute orders so that they check and run",
          "[pipeline][schedule][transfers]") {
  std::mt19937 rng(20240611);
  int placed = 0;
  for (int p = 2; p <= 5; ++p) {
    for (int m = 1; m <= 6; ++m) {
      for (int v = 1; v <= 2; ++v) {
        for (bool split : {false, true}) {
          for (int trial = 0; trial < 4; ++trial) {
            Schedule s = random_orders(rng, p, m, v, split);
            INFO("p=" << p << " m=" << m << " v=" << v << " split=" << split << " trial " << trial);
            const Schedule orders = s;
            ptdp::add_transfers(s);
            const ptdp::CheckResult check = ptdp::check_schedule(s);
            INFO(check.message);
            REQUIRE(check.ok);
            // The compute orders stay as given.
            for (int r = 0; r < p; ++r) {
              REQUIRE(compute_only(s.ranks[static_cast<std::size_t>(r)]) == orders.ranks[static_cast<std::size_t>(r)]);
            }
            ptdp::ScheduleCosts slow;
            slow.p2p_latency = 0.3;
            CHECK(ptdp::simulate(s, slow).makespan > 0);
            ++placed;
          }
        }
      }
    }
  }
  CHECK(placed == 4 * 6 * 2 * 2 * 4);
}

TEST_CASE("add_transfers gives the generators' lists back from their compute orders", "[pipeline][schedule][transfers]") {
  // Every generator but interleaved 1F1B (whose steps run back to back) places its transfers
  // with add_transfers at unit costs and nothing more.
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH1,
                            ScheduleKind::ZeroBubbleV, ScheduleKind::DualPipeV, ScheduleKind::InterleavedZeroBubble}) {
    for (int p : {2, 3, 4}) {
      const int v = kind == ScheduleKind::GPipe || kind == ScheduleKind::OneFOneB || kind == ScheduleKind::ZeroBubbleH1 ? 1 : 2;
      const Schedule s = ptdp::make_schedule(kind, p, 4 * p, v);
      INFO(ptdp_test::describe(kind, p, 4 * p, v));
      Schedule again = orders_of(s);
      ptdp::add_transfers(again);
      CHECK(again.ranks == s.ranks);
    }
  }
}

TEST_CASE("add_transfers keeps Megatron's batches", "[pipeline][schedule][transfers]") {
  SECTION("1F1B: a middle rank's first steady forward receives its input after the backward before it") {
    // p = 4, rank 1: F0 F1 | F2 [SendAct 2, RecvGrad 0] B0 [SendGrad 0, RecvAct 3] F3 ...
    const Schedule s = ptdp::make_schedule(ScheduleKind::OneFOneB, 4, 8);
    const auto& l = s.ranks[1];
    const auto b0 = std::find(l.begin(), l.end(), Action{ActionKind::Backward, 0, 1, -1});
    REQUIRE(b0 != l.end());
    CHECK(*(b0 - 2) == Action{ActionKind::SendActivation, 2, 1, 2});
    CHECK(*(b0 - 1) == Action{ActionKind::RecvGradient, 0, 1, 2});
    CHECK(*(b0 + 1) == Action{ActionKind::SendGradient, 0, 1, 0});
    CHECK(*(b0 + 2) == Action{ActionKind::RecvActivation, 3, 1, 0});
    CHECK(*(b0 + 3) == Action{ActionKind::Forward, 3, 1, -1});
  }
  SECTION("interleaved 1F1B: one exchange per steady step, after its forward and backward") {
    const int p = 4, m = 8, v = 2;
    const Schedule s = ptdp::make_schedule(ScheduleKind::Interleaved1F1B, p, m, v);
    for (int r = 0; r < p; ++r) {
      const auto& l = s.ranks[static_cast<std::size_t>(r)];
      const int warmup = (p - r - 1) * 2 + (v - 1) * p;
      int forwards = 0, steps = 0;
      for (std::size_t i = 0; i + 1 < l.size(); ++i) {
        if (l[i].kind != ActionKind::Forward || forwards++ < warmup) continue;
        // A steady forward: its backward right after it, with no transfer between.
        CHECK(l[i + 1].kind == ActionKind::Backward);
        ++steps;
      }
      CHECK(steps == m * v - warmup);
    }
  }
}

TEST_CASE("add_transfers refuses what it cannot place, naming it", "[pipeline][schedule][transfers]") {
  const Schedule s = ptdp::make_schedule(ScheduleKind::OneFOneB, 2, 2);
  CHECK(error_of(s) == "add_transfers takes compute orders, but rank 0 action 1 is SendAct mb0 c0 -> 1");
  const Schedule orders = orders_of(s);
  ptdp::ScheduleCosts costs;
  costs.backward = 0;
  CHECK(error_of(orders, costs) == "cost backward = 0.000000 is not a finite number > 0");
  costs = {};
  costs.p2p_latency = -1;
  CHECK(error_of(orders, costs) == "cost p2p_latency = -1.000000 is not a finite number >= 0");
  CHECK(error_of(orders, {}, {{false}}) == "back_to_back has 1 rank entries for 2 ranks");
  CHECK(error_of(orders, {}, {{true}, {}}) ==
        "back_to_back[0] joins gaps that rank 0's list does not have (gap 0, before its first action, or past "
        "its 4 actions)");
  Schedule missing = orders;
  missing.ranks[1].erase(missing.ranks[1].begin());  // rank 1's F mb0 c1
  CHECK(error_of(missing) == "rank 0's F mb0 c0 makes data for rank 1, whose order holds no forward of microbatch 0 "
                             "chunk 1 to take it");
  // Orders that wait on each other: rank 1 runs the backward of microbatch 1 before its
  // forward of microbatch 0, whose data rank 0 only sends after its own backward of 0.
  Schedule stuck = orders;
  stuck.ranks[0] = {{ActionKind::Forward, 1, 0, -1}, {ActionKind::Backward, 1, 0, -1},
                    {ActionKind::Forward, 0, 0, -1}, {ActionKind::Backward, 0, 0, -1}};
  stuck.ranks[1] = {{ActionKind::Forward, 0, 1, -1}, {ActionKind::Backward, 0, 1, -1},
                    {ActionKind::Forward, 1, 1, -1}, {ActionKind::Backward, 1, 1, -1}};
  const std::string e = error_of(stuck);
  CHECK(e.find("rank 0 waits forever at B mb1 c0") != std::string::npos);
}

TEST_CASE("the time model: implicit transfers land p2p_latency after the data is made", "[pipeline][schedule][transfers]") {
  // 1F1B, p = 2, m = 1 at F = 1, B = 2 per chunk, latency 0.5: rank 0 F [0, 1]; rank 1 F
  // [1.5, 2.5] and B [2.5, 4.5]; rank 0 B [5, 7].
  const Schedule s = orders_of(ptdp::make_schedule(ScheduleKind::OneFOneB, 2, 1));
  ptdp::ScheduleCosts costs;
  costs.p2p_latency = 0.5;
  ptdp::PipelineClock clock(s, ptdp::per_chunk_cost(costs), costs.p2p_latency,
                            ptdp::PipelineClock::Transfers::Implicit);
  const ptdp::ComputeTimeline ran = ptdp::PipelineRun(clock, s.ranks).run("test");
  REQUIRE(ran.size() == 2);
  CHECK(ran[0][0].start == 0);
  CHECK(ran[0][0].end == 1);
  CHECK(ran[1][0].start == 1.5);
  CHECK(ran[1][1].end == 4.5);
  CHECK(ran[0][1].start == 5);
  CHECK(ran[0][1].end == 7);
  CHECK(clock.free_at(0) == 7);
}
