// The checker catches deliberately broken schedules and says what is wrong, where.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/pipeline/checker.h"
#include "core/pipeline/schedule.h"

using ptdp::Action;
using ptdp::ActionKind;
using ptdp::Schedule;
using ptdp::ScheduleKind;

namespace {

std::vector<Action>& rank(Schedule& s, int r) { return s.ranks[static_cast<std::size_t>(r)]; }

// Index of `a` in rank r's list; fails the test when it is absent.
int index_of(const Schedule& s, int r, const Action& a) {
  const auto& l = s.ranks[static_cast<std::size_t>(r)];
  const auto it = std::find(l.begin(), l.end(), a);
  REQUIRE(it != l.end());
  return static_cast<int>(it - l.begin());
}

void erase(Schedule& s, int r, const Action& a) {
  auto& l = rank(s, r);
  l.erase(l.begin() + index_of(s, r, a));
}

void swap_actions(Schedule& s, int r, int i, int j) {
  std::swap(rank(s, r)[static_cast<std::size_t>(i)], rank(s, r)[static_cast<std::size_t>(j)]);
}

std::string failure(const Schedule& s) {
  const ptdp::CheckResult r = ptdp::check_schedule(s);
  CHECK_FALSE(r.ok);
  return r.message;
}

Action F(int mb, int c) { return {ActionKind::Forward, mb, c, -1}; }
Action B(int mb, int c) { return {ActionKind::Backward, mb, c, -1}; }
Action Bi(int mb, int c) { return {ActionKind::BackwardInput, mb, c, -1}; }
Action W(int mb, int c) { return {ActionKind::BackwardWeight, mb, c, -1}; }
Action SendAct(int mb, int c, int peer) { return {ActionKind::SendActivation, mb, c, peer}; }
Action RecvAct(int mb, int c, int peer) { return {ActionKind::RecvActivation, mb, c, peer}; }
Action SendGrad(int mb, int c, int peer) { return {ActionKind::SendGradient, mb, c, peer}; }
Action RecvGrad(int mb, int c, int peer) { return {ActionKind::RecvGradient, mb, c, peer}; }

std::string at(int r, int i) { return "rank " + std::to_string(r) + " action " + std::to_string(i); }

}  // namespace

TEST_CASE("schedule checker: a missing receive leaves its send unmatched", "[pipeline][schedule][checker]") {
  Schedule s = ptdp::make_schedule(ScheduleKind::OneFOneB, 4, 8);
  erase(s, 1, RecvAct(3, 1, 0));
  const int send = index_of(s, 0, SendAct(3, 0, 1));
  CHECK(failure(s) == "rank 0: send of activation mb 3 chunk 0 to rank 1 (action " +
                          std::to_string(send) + ") has no matching receive");

  Schedule g = ptdp::make_schedule(ScheduleKind::GPipe, 4, 8);
  erase(g, 3, RecvAct(4, 3, 2));
  CHECK(failure(g) == "rank 2: send of activation mb 4 chunk 2 to rank 3 (action " +
                          std::to_string(index_of(g, 2, SendAct(4, 2, 3))) + ") has no matching receive");
}

TEST_CASE("schedule checker: a missing send leaves its receive unmatched", "[pipeline][schedule][checker]") {
  Schedule s = ptdp::make_schedule(ScheduleKind::OneFOneB, 4, 8);
  erase(s, 2, SendGrad(2, 2, 1));
  const int recv = index_of(s, 1, RecvGrad(2, 1, 2));
  CHECK(failure(s) == "rank 1: receive of gradient mb 2 chunk 1 from rank 2 (action " +
                          std::to_string(recv) + ") has no matching send");
}

TEST_CASE("schedule checker: swapped actions break the order of data or of transfers", "[pipeline][schedule][checker]") {
  SECTION("a forward before the receive of its input") {
    Schedule s = ptdp::make_schedule(ScheduleKind::OneFOneB, 4, 8);
    const int i = index_of(s, 1, RecvAct(3, 1, 0));
    REQUIRE(rank(s, 1)[static_cast<std::size_t>(i + 1)] == F(3, 1));
    swap_actions(s, 1, i, i + 1);
    CHECK(failure(s) == at(1, i) + " (F mb3 c1): forward of microbatch 3 chunk 1 before its input was received");
  }
  SECTION("a send before the forward producing it") {
    Schedule s = ptdp::make_schedule(ScheduleKind::OneFOneB, 4, 8);
    swap_actions(s, 0, 0, 1);  // F mb0 c0, SendAct mb0 c0 -> 1
    CHECK(failure(s) == at(0, 0) + " (SendAct mb0 c0 -> 1): send of activation mb 0 chunk 0 to rank 1 "
                                   "before its forward");
  }
  SECTION("a backward before the receive of its output gradient") {
    Schedule s = ptdp::make_schedule(ScheduleKind::OneFOneB, 4, 8);
    const int i = index_of(s, 2, RecvGrad(5, 2, 3));
    REQUIRE(rank(s, 2)[static_cast<std::size_t>(i + 1)] == B(5, 2));
    swap_actions(s, 2, i, i + 1);
    CHECK(failure(s) == at(2, i) + " (B mb5 c2): backward of microbatch 5 chunk 2 before its output gradient "
                                   "was received");
  }
  SECTION("two sends of one kind to one rank in the wrong order") {
    Schedule s = ptdp::make_schedule(ScheduleKind::GPipe, 2, 3);
    // Rank 0: F0 [SendAct 0] F1 [SendAct 1] ...: exchange the two sends.
    const int a = index_of(s, 0, SendAct(0, 0, 1)), b = index_of(s, 0, SendAct(1, 0, 1));
    swap_actions(s, 0, a, b);
    CHECK(failure(s) == at(0, a) + " (SendAct mb1 c0 -> 1) is activation send number 1 from rank 0 to "
                                   "rank 1, but activation receive number 1 on rank 1 from rank 0 is "
                                   "action 0 (RecvAct mb0 c1 <- 0): transfers of one kind between two "
                                   "ranks are matched in order");
  }
  SECTION("a weight-gradient pass before its input-gradient pass") {
    Schedule s = ptdp::make_schedule(ScheduleKind::ZeroBubbleH1, 2, 4);
    const int b = index_of(s, 0, Bi(0, 0)), w = index_of(s, 0, W(0, 0));
    swap_actions(s, 0, b, w);
    CHECK(failure(s) == at(0, b) + " (W mb0 c0): weight-gradient backward (W) of microbatch 0 chunk 0 before "
                                   "its input-gradient backward (B)");
  }
}

TEST_CASE("schedule checker: a transfer addressed to the wrong rank", "[pipeline][schedule][checker]") {
  Schedule s = ptdp::make_schedule(ScheduleKind::OneFOneB, 4, 8);
  rank(s, 0)[1].peer = 2;
  CHECK(failure(s) == "rank 0 action 1 (SendAct mb0 c0 -> 2): the activation of chunk 0 goes to rank 1 "
                      "(the rank of chunk 1), not rank 2");
  Schedule t = ptdp::make_schedule(ScheduleKind::OneFOneB, 4, 8);
  const int i = index_of(t, 1, RecvAct(0, 1, 0));
  rank(t, 1)[static_cast<std::size_t>(i)].peer = 3;
  CHECK(failure(t) == at(1, i) + " (RecvAct mb0 c1 <- 3): the activation of chunk 0 comes from rank 0 "
                                 "(the rank of chunk 0), not rank 3");
}

TEST_CASE("schedule checker: a duplicated forward", "[pipeline][schedule][checker]") {
  Schedule s = ptdp::make_schedule(ScheduleKind::OneFOneB, 4, 8);
  const int i = index_of(s, 2, F(0, 2));
  rank(s, 2).insert(rank(s, 2).begin() + i + 1, F(0, 2));
  CHECK(failure(s) == at(2, i + 1) + " (F mb0 c2): second forward of microbatch 0 chunk 2");
}

TEST_CASE("schedule checker: a receive moved ahead of what its sender waits for deadlocks",
          "[pipeline][schedule][checker]") {
  // 1F1B, p = 2. Rank 0 now waits for gradient 1 before computing and sending forward 2, and
  // rank 1 waits for forward 2's activation before sending gradient 1: each batch's partner
  // sits in a later batch of the other rank. The data dependencies are all still met.
  Schedule s = ptdp::make_schedule(ScheduleKind::OneFOneB, 2, 4);
  erase(s, 0, RecvGrad(1, 0, 1));
  rank(s, 0).insert(rank(s, 0).begin() + index_of(s, 0, F(2, 0)), RecvGrad(1, 0, 1));
  erase(s, 1, SendGrad(1, 1, 0));
  rank(s, 1).insert(rank(s, 1).begin() + index_of(s, 1, F(2, 1)) + 1, SendGrad(1, 1, 0));
  const int wait0 = index_of(s, 0, RecvGrad(1, 0, 1));
  const int wait1 = index_of(s, 1, RecvAct(2, 1, 0));
  CHECK(failure(s) == "deadlock: rank 0 waits at action " + std::to_string(wait0) +
                          " (RecvGrad mb1 c0 <- 1) for rank 1, which waits at action " +
                          std::to_string(wait1) + " (RecvAct mb2 c1 <- 0) for rank 0");
}

TEST_CASE("schedule checker: missing computations", "[pipeline][schedule][checker]") {
  Schedule z = ptdp::make_schedule(ScheduleKind::ZeroBubbleH1, 2, 4);
  erase(z, 1, W(2, 1));
  CHECK(failure(z) == "rank 1: microbatch 2 chunk 1 has an input-gradient backward (B) but no "
                      "weight-gradient backward (W)");
  Schedule one = ptdp::make_schedule(ScheduleKind::OneFOneB, 1, 3);
  erase(one, 0, F(1, 0));
  erase(one, 0, B(1, 0));
  CHECK(failure(one) == "rank 0: microbatch 1 chunk 0 has no forward");
  Schedule g = ptdp::make_schedule(ScheduleKind::GPipe, 1, 3);
  erase(g, 0, B(2, 0));
  CHECK(failure(g) == "rank 0: microbatch 2 chunk 0 has no backward");
}

TEST_CASE("schedule checker: chunks on one rank pass data without transfers", "[pipeline][schedule][checker]") {
  Schedule s = ptdp::make_schedule(ScheduleKind::Interleaved1F1B, 1, 2, 2);
  const int a = index_of(s, 0, F(0, 0)), b = index_of(s, 0, F(0, 1));
  swap_actions(s, 0, a, b);
  CHECK(failure(s) == at(0, a) + " (F mb0 c1): forward of microbatch 0 chunk 1 before the forward of chunk 0 "
                                 "it takes its input from");
  Schedule t = ptdp::make_schedule(ScheduleKind::Interleaved1F1B, 1, 2, 2);
  rank(t, 0).insert(rank(t, 0).begin() + 1, SendAct(0, 0, 0));
  CHECK(failure(t) == at(0, 1) + " (SendAct mb0 c0 -> 0): chunks 0 and 1 both live on rank 0: no "
                                 "transfer is needed");
}

TEST_CASE("schedule checker: malformed actions and shapes", "[pipeline][schedule][checker]") {
  Schedule s = ptdp::make_schedule(ScheduleKind::OneFOneB, 2, 2);
  rank(s, 0)[0].microbatch = 2;
  CHECK(failure(s) == "rank 0 action 0 (F mb2 c0): microbatch 2 is out of range [0, 2)");
  s = ptdp::make_schedule(ScheduleKind::OneFOneB, 2, 2);
  rank(s, 0)[0].chunk = 1;
  CHECK(failure(s) == "rank 0 action 0 (F mb0 c1): chunk 1 lives on rank 1, not rank 0");
  s = ptdp::make_schedule(ScheduleKind::OneFOneB, 2, 2);
  rank(s, 0)[0].chunk = 2;
  CHECK(failure(s) == "rank 0 action 0 (F mb0 c2): chunk 2 is out of range [0, 2)");
  s = ptdp::make_schedule(ScheduleKind::OneFOneB, 2, 2);
  rank(s, 0)[0].kind = static_cast<ActionKind>(11);
  CHECK(failure(s) == "rank 0 action 0: unknown action kind 11");
  s = ptdp::make_schedule(ScheduleKind::OneFOneB, 2, 2);
  rank(s, 0).insert(rank(s, 0).begin(), RecvAct(0, 0, 1));
  CHECK(failure(s) == "rank 0 action 0 (RecvAct mb0 c0 <- 1): chunk 0 is the first chunk: its input comes "
                      "from the data, not from another rank");
  s = ptdp::make_schedule(ScheduleKind::OneFOneB, 2, 2);
  rank(s, 1).push_back(SendAct(1, 1, 0));
  CHECK(failure(s) == "rank 1 action " + std::to_string(rank(s, 1).size() - 1) +
                          " (SendAct mb1 c1 -> 0): chunk 1 is the last chunk: its output goes to the "
                          "loss, not to another rank");
  s = ptdp::make_schedule(ScheduleKind::OneFOneB, 2, 2);
  s.ranks.pop_back();
  CHECK(failure(s) == "the schedule has 1 rank lists for p = 2");
  s.p = 0;
  CHECK(failure(s) == "pipeline size p = 0 is not > 0");
}

TEST_CASE("schedule checker: the communication layout pairs transfers and finds batches", "[pipeline][schedule][checker]") {
  const Schedule s = ptdp::make_schedule(ScheduleKind::OneFOneB, 2, 2);
  // Rank 0: F0 [SendAct 0] F1 [SendAct 1, RecvGrad 0] B0 [RecvGrad 1] B1.
  const ptdp::CommLayout cl = ptdp::comm_layout(s);
  REQUIRE(cl.batches[0].size() == 3);
  CHECK(cl.batches[0][1].begin == 3);
  CHECK(cl.batches[0][1].end == 5);
  CHECK(cl.batch_of[0][0] == -1);
  CHECK(cl.batch_of[0][4] == 1);
  const ptdp::ActionRef partner = cl.partner[0][4];  // RecvGrad 0 <- SendGrad 0 on rank 1
  REQUIRE(partner.rank == 1);
  CHECK(s.ranks[1][static_cast<std::size_t>(partner.index)] == SendGrad(0, 1, 0));
}
