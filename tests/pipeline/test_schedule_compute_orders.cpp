// The compute order of every rank, for every kind over a grid of (p, m, v), is the one the
// generators gave at commit ead2a67, before the transfers were placed by one pass: those
// orders decide which gradients are summed in which order, so they keep training
// bit-identical. The fixture holds a digest of each schedule's per-rank compute sequences and
// the bubble fraction and peak activation slots the simulator gave that schedule then (unit
// costs, transfers free); the schedules of today must match the orders and be no worse.
//
// The fixture was written by the hidden test case below, built against ead2a67:
//   test_pipeline_schedule "[.write_compute_orders]" | grep '^[0-9]' > tests/pipeline/fixtures/compute_orders.txt
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/pipeline/schedule.h"
#include "core/pipeline/simulator.h"

using ptdp::ChunkPlacement;
using ptdp::Schedule;
using ptdp::ScheduleKind;

namespace {

// One schedule of the grid: a kind with its sizes, or the V-placed forward-only schedule
// (kind ForwardOnly, placement V).
struct Case {
  ScheduleKind kind;
  int p, m, v;
  ChunkPlacement placement;
};

std::vector<Case> grid() {
  std::vector<Case> out;
  auto add = [&](ScheduleKind k, int p, int m, int v) { out.push_back({k, p, m, v, ptdp::placement_of(k)}); };
  auto sizes = [&](int p, int m) {
    for (ScheduleKind k : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH1}) add(k, p, m, 1);
    for (int v = 1; v <= 3; ++v) add(ScheduleKind::ForwardOnly, p, m, v);
    out.push_back({ScheduleKind::ForwardOnly, p, m, 2, ChunkPlacement::V});
    add(ScheduleKind::ZeroBubbleV, p, m, 2);
    if (m >= 2 * p) add(ScheduleKind::DualPipeV, p, m, 2);
    if (m % p == 0) {
      for (int v = 2; v <= 3; ++v) {
        add(ScheduleKind::Interleaved1F1B, p, m, v);
        add(ScheduleKind::InterleavedZeroBubble, p, m, v);
      }
    }
  };
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 4 * p; ++m) sizes(p, m);
  }
  for (int p : {12, 16}) {
    for (int m : {p, p + 3, 2 * p, 4 * p}) sizes(p, m);
  }
  return out;
}

Schedule make(const Case& c) {
  if (c.kind == ScheduleKind::ForwardOnly) return ptdp::make_forward_only(c.p, c.m, c.v, c.placement);
  return ptdp::make_schedule(c.kind, c.p, c.m, c.v);
}

std::string name_of(const Case& c) {
  return std::string(ptdp::schedule_kind_name(c.kind)) + (c.placement == ChunkPlacement::V ? " (V)" : "") +
         " p=" + std::to_string(c.p) + " m=" + std::to_string(c.m) + " v=" + std::to_string(c.v);
}

// FNV-1a over each rank's actions as (kind, microbatch, chunk, peer), ranks in order; the
// compute actions only, or all of them.
std::uint64_t digest(const Schedule& s, bool transfers) {
  std::uint64_t h = 14695981039346656037ULL;
  auto mix = [&](long long x) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<std::uint64_t>(x >> (8 * i)) & 0xff;
      h *= 1099511628211ULL;
    }
  };
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    mix(-1 - static_cast<long long>(r));
    for (const ptdp::Action& a : s.ranks[r]) {
      if (ptdp::is_communication(a.kind) && !transfers) continue;
      mix(static_cast<long long>(a.kind));
      mix(a.microbatch);
      mix(a.chunk);
      if (transfers) mix(a.peer);
    }
  }
  return h;
}

struct Figures {
  double bubble = 0;
  int peak = 0;
};

Figures figures(const Schedule& s) {
  const ptdp::SimulationResult r = ptdp::simulate(s, ptdp::ScheduleCosts{});
  return {r.bubble_fraction, *std::max_element(r.peak_slots.begin(), r.peak_slots.end())};
}

// "kind placement p m v digest bubble peak", the bubble to the last bit.
std::string fixture_line(const Case& c) {
  const Schedule s = make(c);
  const Figures f = figures(s);
  char buf[160];
  std::snprintf(buf, sizeof buf, "%d %d %d %d %d %016llx %.17g %d", static_cast<int>(c.kind),
                static_cast<int>(c.placement), c.p, c.m, c.v, static_cast<unsigned long long>(digest(s, false)),
                f.bubble, f.peak);
  return buf;
}

}  // namespace

TEST_CASE("write the compute-order fixture", "[.write_compute_orders]") {
  for (const Case& c : grid()) std::printf("%s\n", fixture_line(c).c_str());
}

// The table of the change's report: per schedule, the bubble fraction with free transfers and
// with transfers costing a tenth of a forward, the peak slots and the number of batches.
TEST_CASE("print the schedule figures", "[.schedule_report]") {
  ptdp::ScheduleCosts slow = ptdp::ScheduleCosts{};
  slow.p2p_latency = 0.1;
  std::printf("kind,placement,p,m,v,bubble,bubble_latency,peak,batches,lists\n");
  for (const Case& c : grid()) {
    const Schedule s = make(c);
    const Figures f = figures(s);
    int batches = 0;
    for (const auto& list : s.ranks) {
      for (std::size_t i = 0; i < list.size(); ++i) {
        batches += ptdp::is_communication(list[i].kind) && (i == 0 || !ptdp::is_communication(list[i - 1].kind));
      }
    }
    std::printf("%d,%d,%d,%d,%d,%.17g,%.17g,%d,%d,%016llx\n", static_cast<int>(c.kind), static_cast<int>(c.placement),
                c.p, c.m, c.v, f.bubble, ptdp::simulate(s, slow).bubble_fraction, f.peak, batches,
                static_cast<unsigned long long>(digest(s, true)));
  }
}

TEST_CASE("schedules keep the compute orders of ead2a67, and their bubble and peak are no worse",
          "[pipeline][schedule]") {
  std::ifstream in(PTDP_TEST_FIXTURE_DIR "/compute_orders.txt");
  REQUIRE(in);
  const std::vector<Case> cases = grid();
  std::size_t n = 0;
  std::string line;
  while (std::getline(in, line)) {
    REQUIRE(n < cases.size());
    const Case& c = cases[n++];
    INFO(name_of(c));
    std::istringstream fields(line);
    int kind = -1, placement = -1, p = 0, m = 0, v = 0, peak = 0;
    std::string orders;
    double bubble = 0;
    fields >> kind >> placement >> p >> m >> v >> orders >> bubble >> peak;
    REQUIRE(fields);
    REQUIRE(kind == static_cast<int>(c.kind));
    REQUIRE(placement == static_cast<int>(c.placement));
    REQUIRE((p == c.p && m == c.m && v == c.v));
    const Schedule s = make(c);
    char now[17];
    std::snprintf(now, sizeof now, "%016llx", static_cast<unsigned long long>(digest(s, false)));
    CHECK(std::string(now) == orders);
    const Figures f = figures(s);
    CHECK(f.bubble <= bubble + 1e-12);
    CHECK(f.peak <= peak);
  }
  CHECK(n == cases.size());
}
