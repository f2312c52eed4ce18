// The generators: every schedule of the sweep passes the checker and has the shape its paper
// describes; combinations a kind cannot serve are refused with the numbers in the message.
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "core/pipeline/checker.h"
#include "core/pipeline/schedule.h"
#include "core/pipeline/simulator.h"
#include "schedule_sweep.h"

using ptdp::Action;
using ptdp::ActionKind;
using ptdp::ScheduleKind;
using ptdp_test::describe;

namespace {

std::vector<Action> compute_only(const std::vector<Action>& list) {
  std::vector<Action> out;
  for (const Action& a : list) {
    if (!ptdp::is_communication(a.kind)) out.push_back(a);
  }
  return out;
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

}  // namespace

TEST_CASE("schedule generators: every schedule of the sweep passes the checker", "[pipeline][schedule]") {
  int count = 0;
  ptdp_test::for_each_combination([&](ScheduleKind kind, int p, int m, int v) {
    INFO(describe(kind, p, m, v));
    const ptdp::Schedule s = ptdp::make_schedule(kind, p, m, v);
    REQUIRE(s.kind == kind);
    REQUIRE(s.ranks.size() == static_cast<std::size_t>(p));
    const ptdp::CheckResult r = ptdp::check_schedule(s);
    INFO(r.message);
    REQUIRE(r.ok);
    for (int rank = 0; rank < p; ++rank) {
      const auto& list = s.ranks[static_cast<std::size_t>(rank)];
      // Two compute actions per (microbatch, chunk), three for zero bubble.
      const std::size_t per_unit = kind == ScheduleKind::ZeroBubbleH1 ? 3 : 2;
      REQUIRE(compute_only(list).size() == per_unit * static_cast<std::size_t>(m * v));
      if (p == 1) REQUIRE(compute_only(list).size() == list.size());
    }
    ++count;
  });
  CHECK(count == 412);
}

TEST_CASE("schedule generators: GPipe runs every forward before any backward", "[pipeline][schedule]") {
  const ptdp::Schedule s = ptdp::make_schedule(ScheduleKind::GPipe, 4, 6);
  for (int r = 0; r < 4; ++r) {
    const auto c = compute_only(s.ranks[static_cast<std::size_t>(r)]);
    for (int i = 0; i < 6; ++i) {
      CHECK(c[static_cast<std::size_t>(i)] == Action{ActionKind::Forward, i, r, -1});
      CHECK(c[static_cast<std::size_t>(6 + i)] == Action{ActionKind::Backward, i, r, -1});
    }
  }
}

TEST_CASE("schedule generators: 1F1B warms up with p - rank - 1 forwards, then alternates", "[pipeline][schedule]") {
  const int p = 4, m = 8;
  const ptdp::Schedule s = ptdp::make_schedule(ScheduleKind::OneFOneB, p, m);
  for (int r = 0; r < p; ++r) {
    const auto c = compute_only(s.ranks[static_cast<std::size_t>(r)]);
    const int warmup = p - r - 1;
    std::size_t i = 0;
    for (int f = 0; f < warmup; ++f) CHECK(c[i++].kind == ActionKind::Forward);
    for (int k = 0; k < m - warmup; ++k) {
      CHECK(c[i] == Action{ActionKind::Forward, warmup + k, r, -1});
      CHECK(c[i + 1] == Action{ActionKind::Backward, k, r, -1});
      i += 2;
    }
    for (; i < c.size(); ++i) CHECK(c[i].kind == ActionKind::Backward);
  }
}

TEST_CASE("schedule generators: 1F1B steady state sends the activation and receives the gradient in one batch",
          "[pipeline][schedule]") {
  // Megatron's send_forward_recv_backward: on a middle rank every steady forward is followed
  // by exactly the batch {send its activation, receive the oldest gradient}.
  const ptdp::Schedule s = ptdp::make_schedule(ScheduleKind::OneFOneB, 4, 8);
  const int r = 1, warmup = 2;
  const auto& l = s.ranks[r];
  int steady_seen = 0;
  for (std::size_t i = 0; i + 3 < l.size(); ++i) {
    if (l[i].kind != ActionKind::Forward || l[i].microbatch < warmup) continue;
    const int k = l[i].microbatch - warmup;
    CHECK(l[i + 1] == Action{ActionKind::SendActivation, l[i].microbatch, r, 2});
    CHECK(l[i + 2] == Action{ActionKind::RecvGradient, k, r, 2});
    CHECK(l[i + 3] == Action{ActionKind::Backward, k, r, -1});
    ++steady_seen;
  }
  CHECK(steady_seen == 6);
}

TEST_CASE("schedule generators: interleaved 1F1B follows Megatron's chunk order", "[pipeline][schedule]") {
  // p = 2, v = 2, m = 4: rank 0 holds chunks 0 and 2; forwards go in groups of p microbatches
  // per chunk: (mb0,c0) (mb1,c0) (mb0,c2) (mb1,c2) (mb2,c0) ...
  const ptdp::Schedule s = ptdp::make_schedule(ScheduleKind::Interleaved1F1B, 2, 4, 2);
  std::vector<std::pair<int, int>> forwards;
  for (const Action& a : s.ranks[0]) {
    if (a.kind == ActionKind::Forward) forwards.emplace_back(a.microbatch, a.chunk);
  }
  const std::vector<std::pair<int, int>> expected = {{0, 0}, {1, 0}, {0, 2}, {1, 2},
                                                     {2, 0}, {3, 0}, {2, 2}, {3, 2}};
  CHECK(forwards == expected);
  // Warm-up of rank 0: (p - 1) * 2 + (v - 1) * p = 4 forwards before the first backward.
  const auto c = compute_only(s.ranks[0]);
  for (int i = 0; i < 4; ++i) CHECK(c[static_cast<std::size_t>(i)].kind == ActionKind::Forward);
  CHECK(c[5].kind == ActionKind::Backward);
  CHECK(c[5].chunk == 2);  // backwards start on the last chunk
}

TEST_CASE("schedule generators: ZB-H1 splits every backward into B then W", "[pipeline][schedule]") {
  const ptdp::Schedule s = ptdp::make_schedule(ScheduleKind::ZeroBubbleH1, 4, 8);
  for (const auto& list : s.ranks) {
    int b = 0, w = 0;
    for (const Action& a : list) {
      CHECK(a.kind != ActionKind::Backward);
      b += a.kind == ActionKind::BackwardInput;
      w += a.kind == ActionKind::BackwardWeight;
    }
    CHECK(b == 8);
    CHECK(w == 8);
  }
  // The first rank runs each W right after its B (it holds p activations already); the last
  // rank defers its W into the end of the schedule.
  auto backwards_before_first_w = [&](int r) {
    int n = 0;
    for (const Action& a : compute_only(s.ranks[static_cast<std::size_t>(r)])) {
      if (a.kind == ActionKind::BackwardWeight) break;
      n += a.kind == ActionKind::BackwardInput;
    }
    return n;
  };
  CHECK(backwards_before_first_w(0) == 1);
  CHECK(backwards_before_first_w(3) > 1);
}

TEST_CASE("schedule generators: p = 1 works for every kind without communication", "[pipeline][schedule]") {
  for (ScheduleKind kind : ptdp_test::kAllKinds) {
    const int v = kind == ScheduleKind::Interleaved1F1B ? 3 : 1;
    const ptdp::Schedule s = ptdp::make_schedule(kind, 1, 5, v);
    CHECK(ptdp::check_schedule(s).ok);
    for (const Action& a : s.ranks[0]) CHECK(!ptdp::is_communication(a.kind));
  }
}

TEST_CASE("schedule generators: forward-only runs each microbatch through every chunk, any v", "[pipeline][schedule]") {
  for (int p = 1; p <= 6; ++p) {
    for (int m = 1; m <= 2 * p + 1; ++m) {
      for (int v = 1; v <= 3; ++v) {
        INFO("p=" << p << " m=" << m << " v=" << v);
        const ptdp::Schedule s = ptdp::make_schedule(ScheduleKind::ForwardOnly, p, m, v);
        REQUIRE(ptdp::check_schedule(s).ok);
        const ptdp::SimulationResult sim = ptdp::simulate(s, ptdp::ScheduleCosts{});
        for (int r = 0; r < p; ++r) {
          const auto c = compute_only(s.ranks[static_cast<std::size_t>(r)]);
          REQUIRE(c.size() == static_cast<std::size_t>(m * v));
          // Microbatch after microbatch, the rank's chunks in model order.
          for (int i = 0; i < m * v; ++i) {
            CHECK(c[static_cast<std::size_t>(i)] == Action{ActionKind::Forward, i / v, (i % v) * p + r, -1});
          }
          for (const Action& a : s.ranks[static_cast<std::size_t>(r)]) {
            CHECK(a.kind != ActionKind::SendGradient);
            CHECK(a.kind != ActionKind::RecvGradient);
          }
          CHECK(sim.peak_slots[static_cast<std::size_t>(r)] == 1);
        }
      }
    }
  }
  // A backward has no place in it: the checker names the action.
  ptdp::Schedule bad = ptdp::make_schedule(ScheduleKind::ForwardOnly, 1, 2, 1);
  bad.ranks[0].push_back({ActionKind::Backward, 0, 0, -1});
  const ptdp::CheckResult r = ptdp::check_schedule(bad);
  CHECK_FALSE(r.ok);
  CHECK(r.message.find("a forward-only schedule has no backward") != std::string::npos);
}

TEST_CASE("schedule generators refuse combinations they cannot serve, naming the numbers", "[pipeline][schedule]") {
  CHECK(error_of(ScheduleKind::OneFOneB, 0, 4, 1) == "pipeline size p = 0 must be > 0");
  CHECK(error_of(ScheduleKind::GPipe, 4, -1, 1) == "number of microbatches m = -1 must be > 0");
  CHECK(error_of(ScheduleKind::ZeroBubbleH1, 4, 8, 0) == "chunks per rank v = 0 must be > 0");
  CHECK(error_of(ScheduleKind::GPipe, 4, 8, 2) ==
        "GPipe has one chunk per rank, got v = 2; use interleaved 1F1B for v > 1");
  CHECK(error_of(ScheduleKind::OneFOneB, 4, 8, 3) ==
        "1F1B has one chunk per rank, got v = 3; use interleaved 1F1B for v > 1");
  CHECK(error_of(ScheduleKind::ZeroBubbleH1, 2, 8, 2) ==
        "ZB-H1 has one chunk per rank, got v = 2; use interleaved 1F1B for v > 1");
  CHECK(error_of(ScheduleKind::Interleaved1F1B, 4, 8, 1) ==
        "interleaved 1F1B needs v > 1 chunks per rank, got v = 1; use 1F1B for one chunk per rank");
  CHECK(error_of(ScheduleKind::Interleaved1F1B, 4, 6, 2) ==
        "interleaved 1F1B needs the number of microbatches to be a multiple of the pipeline size: "
        "m = 6, p = 4");
  CHECK(error_of(static_cast<ScheduleKind>(8), 4, 8, 1) == "unknown schedule kind 8");
  CHECK(error_of(ScheduleKind::GPipe, 4097, 4096, 1).find("p * m * v = 4097 * 4096 * 1 exceeds") == 0);
}

TEST_CASE("schedule actions have one text, which reads back", "[pipeline][schedule]") {
  const std::pair<Action, const char*> texts[] = {
      {{ActionKind::Forward, 3, 1, -1}, "F mb3 c1"},
      {{ActionKind::Backward, 0, 7, -1}, "B mb0 c7"},
      {{ActionKind::BackwardInput, 2, 0, -1}, "Bi mb2 c0"},
      {{ActionKind::BackwardWeight, 2, 0, -1}, "W mb2 c0"},
      {{ActionKind::SendActivation, 3, 1, 2}, "SendAct mb3 c1 -> 2"},
      {{ActionKind::RecvActivation, 3, 2, 1}, "RecvAct mb3 c2 <- 1"},
      {{ActionKind::SendGradient, 4, 2, 1}, "SendGrad mb4 c2 -> 1"},
      {{ActionKind::RecvGradient, 4, 1, 2}, "RecvGrad mb4 c1 <- 2"},
  };
  for (const auto& [action, text] : texts) {
    CHECK(action.str() == text);
    const std::optional<Action> back = ptdp::parse_action(text);
    REQUIRE(back.has_value());
    CHECK(*back == action);
  }
  CHECK(Action{static_cast<ActionKind>(11), 0, 1, -1}.str() == "?11 mb0 c1");
  for (const char* bad : {"", "F", "F mb3", "F mb3 c1 -> 2", "SendAct mb3 c1", "SendAct mb3 c1 <- 2", "F3c1",
                          "F mb c1", "F mb3 c1x", "X mb3 c1", "F  mb3 c1", "F mb3 c1 "}) {
    INFO(bad);
    CHECK_FALSE(ptdp::parse_action(bad).has_value());
  }
  CHECK(std::string(ptdp::action_kind_name(ActionKind::BackwardWeight)) == "BackwardWeight");
  CHECK(std::string(ptdp::schedule_kind_name(ScheduleKind::Interleaved1F1B)) == "interleaved 1F1B");
}
