// Pipeline schedules through the public C ABI only: generation, inspection, custom schedules,
// checking, simulation and the SVG drawing; every bad input is refused with a message naming
// the argument and leaves the outputs alone.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ptdp/ptdp.h"
#include "xml_check.h"

namespace {

std::string err() { return ptdp_last_error(); }

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

ptdp_schedule make(ptdp_schedule_kind kind, int32_t p, int32_t m, int32_t v) {
  ptdp_schedule s = nullptr;
  REQUIRE(ptdp_schedule_create(kind, p, m, v, &s) == PTDP_SUCCESS);
  REQUIRE(s != nullptr);
  return s;
}

std::vector<ptdp_action> actions_of(ptdp_schedule s, int32_t rank) {
  int32_t n = -1;
  REQUIRE(ptdp_schedule_num_actions(s, rank, &n) == PTDP_SUCCESS);
  std::vector<ptdp_action> out(static_cast<std::size_t>(n));
  int32_t got = -1;
  REQUIRE(ptdp_schedule_actions(s, rank, out.data(), n, &got) == PTDP_SUCCESS);
  REQUIRE(got == n);
  return out;
}

// All ranks' lists, concatenated, with their counts: the input of ptdp_schedule_create_custom.
void flatten(ptdp_schedule s, int32_t p, std::vector<ptdp_action>* all, std::vector<int32_t>* counts) {
  for (int32_t r = 0; r < p; ++r) {
    const auto a = actions_of(s, r);
    all->insert(all->end(), a.begin(), a.end());
    counts->push_back(static_cast<int32_t>(a.size()));
  }
}

std::pair<int32_t, std::string> check(ptdp_schedule s) {
  int32_t ok = -1;
  char message[512];
  REQUIRE(ptdp_schedule_check(s, &ok, message, sizeof message) == PTDP_SUCCESS);
  return {ok, message};
}

}  // namespace

TEST_CASE("C API schedule: generated schedules check and describe themselves", "[capi][pipeline][schedule]") {
  const ptdp_schedule_kind kinds[] = {PTDP_SCHEDULE_GPIPE, PTDP_SCHEDULE_1F1B, PTDP_SCHEDULE_INTERLEAVED_1F1B,
                                      PTDP_SCHEDULE_ZB_H1};
  for (ptdp_schedule_kind kind : kinds) {
    const int32_t v = kind == PTDP_SCHEDULE_INTERLEAVED_1F1B ? 2 : 1;
    ptdp_schedule s = make(kind, 4, 8, v);
    const auto [ok, message] = check(s);
    CHECK(ok == 1);
    CHECK(message.empty());
    ptdp_schedule_kind k = PTDP_SCHEDULE_GPIPE;
    int32_t p = 0, m = 0, vv = 0;
    REQUIRE(ptdp_schedule_info(s, &k, &p, &m, &vv) == PTDP_SUCCESS);
    CHECK((k == kind && p == 4 && m == 8 && vv == v));
    int computes = 0;
    for (int32_t r = 0; r < 4; ++r) {
      for (const ptdp_action& a : actions_of(s, r)) {
        CHECK(a.chunk % 4 == r);
        if (a.kind <= PTDP_ACTION_BACKWARD_WEIGHT) {
          ++computes;
          CHECK(a.peer == -1);
        } else {
          CHECK((a.peer >= 0 && a.peer < 4 && a.peer != r));
        }
      }
    }
    CHECK(computes == (kind == PTDP_SCHEDULE_ZB_H1 ? 3 : 2) * 8 * v * 4);
    CHECK(ptdp_schedule_destroy(s) == PTDP_SUCCESS);
  }
  // 1F1B's rank 0 starts F0 [send activation 0 to rank 1].
  ptdp_schedule s = make(PTDP_SCHEDULE_1F1B, 4, 8, 1);
  const auto a = actions_of(s, 0);
  CHECK((a[0].kind == PTDP_ACTION_FORWARD && a[0].microbatch == 0 && a[0].chunk == 0));
  CHECK((a[1].kind == PTDP_ACTION_SEND_ACTIVATION && a[1].microbatch == 0 && a[1].peer == 1));
  ptdp_schedule_destroy(s);
  CHECK(ptdp_schedule_destroy(nullptr) == PTDP_SUCCESS);
}

TEST_CASE("C API schedule: invalid combinations are refused with the numbers", "[capi][pipeline][schedule][errors]") {
  ptdp_schedule s = nullptr;
  CHECK(ptdp_schedule_create(PTDP_SCHEDULE_INTERLEAVED_1F1B, 4, 6, 2, &s) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_schedule_create: interleaved 1F1B needs the number of microbatches to be a multiple "
                 "of the pipeline size: m = 6, p = 4");
  CHECK(ptdp_schedule_create(PTDP_SCHEDULE_INTERLEAVED_1F1B, 4, 8, 1, &s) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(has(err(), "use 1F1B"));
  CHECK(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 4, 8, 2, &s) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(has(err(), "v = 2"));
  CHECK(ptdp_schedule_create(PTDP_SCHEDULE_GPIPE, 0, 8, 1, &s) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(has(err(), "p = 0"));
  CHECK(ptdp_schedule_create(PTDP_SCHEDULE_ZB_H1, 2, 0, 1, &s) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(has(err(), "m = 0"));
  CHECK(ptdp_schedule_create(static_cast<ptdp_schedule_kind>(9), 2, 2, 1, &s) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_schedule_create: kind = 9 is not a ptdp_schedule_kind");
  CHECK(ptdp_schedule_create(PTDP_SCHEDULE_GPIPE, 2, 2, 1, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_schedule_create: out is NULL");
  CHECK(s == nullptr);  // never written by a failing call

  ptdp_schedule ok = make(PTDP_SCHEDULE_1F1B, 2, 2, 1);
  int32_t n = -7;
  CHECK(ptdp_schedule_num_actions(ok, 2, &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_schedule_num_actions: rank = 2 is outside the pipeline [0, 2)");
  CHECK(ptdp_schedule_num_actions(ok, 0, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_schedule_num_actions: count is NULL");
  CHECK(ptdp_schedule_num_actions(nullptr, 0, &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_schedule_num_actions: schedule is NULL");
  ptdp_action few[2];
  CHECK(ptdp_schedule_actions(ok, 0, few, 2, &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(has(err(), "capacity = 2 is smaller than the"));
  CHECK(ptdp_schedule_actions(ok, 0, few, -1, &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(has(err(), "capacity = -1 is negative"));
  CHECK(n == -7);
  int32_t flag = -1;
  CHECK(ptdp_schedule_check(ok, nullptr, nullptr, 0) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_schedule_check: ok is NULL");
  CHECK(ptdp_schedule_check(ok, &flag, nullptr, 10) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_schedule_check: message is NULL");
  CHECK(flag == -1);
  CHECK(ptdp_schedule_check(ok, &flag, nullptr, 0) == PTDP_SUCCESS);
  CHECK(flag == 1);
  ptdp_schedule_destroy(ok);
}

TEST_CASE("C API schedule: custom schedules round-trip and broken ones are explained", "[capi][pipeline][schedule]") {
  ptdp_schedule gen = make(PTDP_SCHEDULE_1F1B, 4, 8, 1);
  std::vector<ptdp_action> all;
  std::vector<int32_t> counts;
  flatten(gen, 4, &all, &counts);

  ptdp_schedule mine = nullptr;
  REQUIRE(ptdp_schedule_create_custom(PTDP_SCHEDULE_1F1B, 4, 8, 1, all.data(), counts.data(), &mine) == PTDP_SUCCESS);
  CHECK(check(mine).first == 1);
  double a = 0, b = 0;
  REQUIRE(ptdp_schedule_simulate(mine, nullptr, &a, nullptr, nullptr, 0) == PTDP_SUCCESS);
  REQUIRE(ptdp_schedule_simulate(gen, nullptr, &b, nullptr, nullptr, 0) == PTDP_SUCCESS);
  CHECK(a == b);
  ptdp_schedule_destroy(mine);

  // Address rank 0's first send (action 1) to rank 2.
  std::vector<ptdp_action> wrong = all;
  wrong[1].peer = 2;
  REQUIRE(ptdp_schedule_create_custom(PTDP_SCHEDULE_1F1B, 4, 8, 1, wrong.data(), counts.data(), &mine) == PTDP_SUCCESS);
  const auto [ok, message] = check(mine);
  CHECK(ok == 0);
  CHECK(message == "rank 0 action 1 (SendAct mb0 c0 -> 2): the activation of chunk 0 goes to rank 1 (the rank "
                   "of chunk 1), not rank 2");
  // The message is truncated to the buffer.
  char small[8];
  int32_t flag = -1;
  REQUIRE(ptdp_schedule_check(mine, &flag, small, sizeof small) == PTDP_SUCCESS);
  CHECK(flag == 0);
  CHECK(std::string(small) == "rank 0 ");
  // A schedule that fails the check can be neither simulated nor drawn.
  double makespan = -1;
  CHECK(ptdp_schedule_simulate(mine, nullptr, &makespan, nullptr, nullptr, 0) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_schedule_simulate: schedule fails ptdp_schedule_check: " + message);
  CHECK(makespan == -1);
  CHECK(ptdp_schedule_write_svg(mine, nullptr, PTDP_TEST_OUTPUT_DIR "/never.svg") == PTDP_ERR_INVALID_ARGUMENT);
  ptdp_schedule_destroy(mine);

  // Representation errors are refused at creation.
  ptdp_schedule none = nullptr;
  std::vector<ptdp_action> bad = all;
  bad[5].kind = static_cast<ptdp_action_kind>(12);
  CHECK(ptdp_schedule_create_custom(PTDP_SCHEDULE_1F1B, 4, 8, 1, bad.data(), counts.data(), &none) ==
        PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_schedule_create_custom: actions[5].kind = 12 is not a ptdp_action_kind (rank 0, action 5)");
  std::vector<int32_t> negative = counts;
  negative[2] = -1;
  CHECK(ptdp_schedule_create_custom(PTDP_SCHEDULE_1F1B, 4, 8, 1, all.data(), negative.data(), &none) ==
        PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_schedule_create_custom: counts_per_rank[2] = -1 is negative");
  CHECK(ptdp_schedule_create_custom(PTDP_SCHEDULE_1F1B, 4, 8, 1, nullptr, counts.data(), &none) ==
        PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_schedule_create_custom: actions is NULL");
  CHECK(ptdp_schedule_create_custom(PTDP_SCHEDULE_1F1B, 4, 8, 1, all.data(), nullptr, &none) ==
        PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_schedule_create_custom: counts_per_rank is NULL");
  CHECK(ptdp_schedule_create_custom(PTDP_SCHEDULE_1F1B, 4, 0, 1, all.data(), counts.data(), &none) ==
        PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_schedule_create_custom: m = 0 is not > 0");
  CHECK(ptdp_schedule_create_custom(static_cast<ptdp_schedule_kind>(-1), 4, 8, 1, all.data(), counts.data(),
                                    &none) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_schedule_create_custom: kind_label = -1 is not a ptdp_schedule_kind");
  CHECK(none == nullptr);
  ptdp_schedule_destroy(gen);
}

TEST_CASE("C API schedule: simulated bubble fractions and peak slots for p = 4, m = 8", "[capi][pipeline][schedule]") {
  ptdp_schedule_costs unit;
  REQUIRE(ptdp_schedule_costs_init(&unit) == PTDP_SUCCESS);
  CHECK(unit.struct_size == sizeof unit);
  CHECK((unit.forward == 1 && unit.backward == 2 && unit.backward_input == 1 && unit.backward_weight == 1 &&
         unit.p2p_latency == 0));
  struct Expect {
    ptdp_schedule_kind kind;
    int32_t v;
    double bubble;
    std::vector<int32_t> peak;
  };
  const Expect expect[] = {
      {PTDP_SCHEDULE_GPIPE, 1, 3.0 / 8, {8, 8, 8, 8}},
      {PTDP_SCHEDULE_1F1B, 1, 3.0 / 8, {4, 3, 2, 1}},
      {PTDP_SCHEDULE_INTERLEAVED_1F1B, 2, 3.0 / 16, {11, 9, 7, 5}},
      {PTDP_SCHEDULE_ZB_H1, 1, 3.0 / 24, {4, 4, 4, 4}},
  };
  for (const Expect& e : expect) {
    ptdp_schedule s = make(e.kind, 4, 8, e.v);
    double makespan = 0, bubble = -1;
    std::vector<int32_t> peak(4, -1);
    REQUIRE(ptdp_schedule_simulate(s, &unit, &makespan, &bubble, peak.data(), 4) == PTDP_SUCCESS);
    INFO("kind " << e.kind);
    CHECK(std::fabs(bubble - e.bubble) < 1e-12);
    CHECK(std::fabs(makespan - 24 * (1 + e.bubble)) < 1e-9);
    CHECK(peak == e.peak);
    ptdp_schedule_destroy(s);
  }

  ptdp_schedule s = make(PTDP_SCHEDULE_1F1B, 4, 8, 1);
  int32_t peak[3] = {-1, -1, -1};
  CHECK(ptdp_schedule_simulate(s, nullptr, nullptr, nullptr, peak, 3) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_schedule_simulate: capacity = 3 is smaller than the 4 pipeline ranks of peak_slots");
  CHECK(peak[0] == -1);
  ptdp_schedule_costs c = unit;
  c.backward = -2;
  CHECK(ptdp_schedule_simulate(s, &c, nullptr, nullptr, nullptr, 0) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_schedule_simulate: costs->backward = -2.000000 is not a finite number >= 0");
  c = unit;
  c.p2p_latency = NAN;
  CHECK(ptdp_schedule_simulate(s, &c, nullptr, nullptr, nullptr, 0) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(has(err(), "costs->p2p_latency"));
  c = unit;
  c.struct_size = 0;
  CHECK(ptdp_schedule_simulate(s, &c, nullptr, nullptr, nullptr, 0) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(has(err(), "costs->struct_size is 0"));
  c = unit;
  c.forward = 0;
  c.backward = 0;
  CHECK(ptdp_schedule_simulate(s, &c, nullptr, nullptr, nullptr, 0) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(has(err(), "no compute time"));
  CHECK(ptdp_schedule_costs_init(nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  ptdp_schedule_destroy(s);
}

TEST_CASE("C API schedule: the SVG of interleaved p = 4, m = 8, v = 2 is well-formed", "[capi][pipeline][schedule][svg]") {
  ptdp_schedule s = make(PTDP_SCHEDULE_INTERLEAVED_1F1B, 4, 8, 2);
  const std::string path = PTDP_TEST_OUTPUT_DIR "/schedule_interleaved_p4_m8_v2.svg";
  std::remove(path.c_str());
  REQUIRE(ptdp_schedule_write_svg(s, nullptr, path.c_str()) == PTDP_SUCCESS);
  std::ifstream f(path);
  REQUIRE(f.good());
  std::stringstream buf;
  buf << f.rdbuf();
  const std::string svg = buf.str();
  const ptdp_test::XmlSummary x = ptdp_test::parse_xml(svg);
  INFO(x.error);
  REQUIRE(x.ok);
  CHECK(x.root == "svg");
  CHECK(svg.rfind("<?xml version=\"1.0\"", 0) == 0);
  // One box per compute action: a forward and a backward per (microbatch, chunk), 8 x 8 chunks.
  CHECK(x.elements.at("rect") == 2 * 8 * 8);

  CHECK(ptdp_schedule_write_svg(s, nullptr, "/nonexistent-dir-ptdp/x.svg") == PTDP_ERR_IO);
  CHECK(has(err(), "/nonexistent-dir-ptdp/x.svg"));
  CHECK(ptdp_schedule_write_svg(s, nullptr, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_schedule_write_svg: path is NULL");
  ptdp_schedule_destroy(s);
}

TEST_CASE("C API: the forward-only schedule has one forward per chunk and microbatch, any v", "[pipeline][capi]") {
  ptdp_schedule s = make(PTDP_SCHEDULE_FORWARD_ONLY, 2, 3, 2);
  ptdp_schedule_kind kind = PTDP_SCHEDULE_GPIPE;
  int32_t p = 0, m = 0, v = 0;
  REQUIRE(ptdp_schedule_info(s, &kind, &p, &m, &v) == PTDP_SUCCESS);
  CHECK(kind == PTDP_SCHEDULE_FORWARD_ONLY);
  CHECK((p == 2 && m == 3 && v == 2));
  int32_t ok = 0;
  char message[256];
  REQUIRE(ptdp_schedule_check(s, &ok, message, sizeof message) == PTDP_SUCCESS);
  CHECK(ok == 1);
  for (int32_t rank = 0; rank < 2; ++rank) {
    int forwards = 0;
    for (const ptdp_action& a : actions_of(s, rank)) {
      CHECK(a.kind != PTDP_ACTION_BACKWARD);
      CHECK(a.kind != PTDP_ACTION_SEND_GRADIENT);
      CHECK(a.kind != PTDP_ACTION_RECV_GRADIENT);
      forwards += a.kind == PTDP_ACTION_FORWARD;
    }
    CHECK(forwards == 3 * 2);
  }
  CHECK(ptdp_schedule_destroy(s) == PTDP_SUCCESS);
}

TEST_CASE("C API schedule: ZB-V, DualPipeV and interleaved zero bubble", "[capi][pipeline][schedule][vshape]") {
  const ptdp_schedule_kind kinds[] = {PTDP_SCHEDULE_ZB_V, PTDP_SCHEDULE_DUALPIPE_V, PTDP_SCHEDULE_INTERLEAVED_ZB};
  for (ptdp_schedule_kind kind : kinds) {
    INFO("kind " << static_cast<int>(kind));
    ptdp_schedule s = make(kind, 4, 8, 2);
    CHECK(check(s).first == 1);
    ptdp_schedule_kind k{};
    int32_t p = 0, m = 0, v = 0;
    REQUIRE(ptdp_schedule_info(s, &k, &p, &m, &v) == PTDP_SUCCESS);
    CHECK(k == kind);
    CHECK(v == 2);
    // The V placement: rank 0 runs chunks 0 and 7, rank 3 chunks 3 and 4.
    if (kind != PTDP_SCHEDULE_INTERLEAVED_ZB) {
      bool seven = false, four = false;
      for (const ptdp_action& a : actions_of(s, 0)) seven = seven || (a.kind == PTDP_ACTION_FORWARD && a.chunk == 7);
      for (const ptdp_action& a : actions_of(s, 3)) four = four || (a.kind == PTDP_ACTION_FORWARD && a.chunk == 4);
      CHECK(seven);
      CHECK(four);
    }
    // Rebuilt from its own lists under its kind label, the placement follows the label.
    std::vector<ptdp_action> all;
    std::vector<int32_t> counts;
    flatten(s, 4, &all, &counts);
    ptdp_schedule t = nullptr;
    REQUIRE(ptdp_schedule_create_custom(kind, 4, 8, 2, all.data(), counts.data(), &t) == PTDP_SUCCESS);
    CHECK(check(t).first == 1);
    ptdp_schedule_destroy(t);
    ptdp_schedule_destroy(s);
  }
  ptdp_schedule s = nullptr;
  CHECK(ptdp_schedule_create(PTDP_SCHEDULE_DUALPIPE_V, 4, 6, 2, &s) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_schedule_create: DualPipeV needs at least 2p microbatches: m = 6, p = 4 (2p = 8)");
  CHECK(s == nullptr);
}

TEST_CASE("C API schedule: simulation with measured per-chunk costs", "[capi][pipeline][schedule][predict]") {
  ptdp_schedule s = make(PTDP_SCHEDULE_1F1B, 2, 1, 1);
  ptdp_schedule_costs c;
  REQUIRE(ptdp_schedule_costs_init(&c) == PTDP_SUCCESS);
  CHECK(c.chunk_forward == nullptr);
  const double f[2] = {1, 2}, b[2] = {3, 4}, zero[2] = {0, 0};
  c.chunk_forward = f;
  c.chunk_backward = b;
  c.chunk_backward_input = zero;
  c.chunk_backward_weight = zero;
  c.p2p_latency = 0.5;
  double makespan = 0, bubble = -1;
  REQUIRE(ptdp_schedule_simulate(s, &c, &makespan, &bubble, nullptr, 0) == PTDP_SUCCESS);
  CHECK(makespan == Approx(11));  // F0 1, transfer 0.5, F1 2, B1 4, transfer 0.5, B0 3
  CHECK(bubble == Approx((11.0 - 6.0) / 6.0));
  c.chunk_backward = nullptr;
  CHECK(ptdp_schedule_simulate(s, &c, &makespan, nullptr, nullptr, 0) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_schedule_simulate: costs->chunk_backward is NULL while other chunk costs are set: set all "
                 "four or none");
  c.chunk_backward = b;
  const double negative[2] = {1, -2};
  c.chunk_forward = negative;
  CHECK(ptdp_schedule_simulate(s, &c, &makespan, nullptr, nullptr, 0) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_schedule_simulate: costs->chunk_forward[1] = -2.000000 is not a finite number >= 0");
  ptdp_schedule_destroy(s);
}

TEST_CASE("C API schedule: per-chunk costs from a trace predict a schedule", "[capi][pipeline][schedule][predict]") {
  const std::string path = std::string(PTDP_TEST_OUTPUT_DIR) + "/predict_trace.json";
  {
    // Two chunks (p = 2, v = 1) of a zero-bubble run: F, B and W spans of both, in microseconds.
    std::ofstream f(path);
    f << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n"
         "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"args\": {\"name\": \"rank 0\"}},\n"
         "{\"name\": \"F mb0 c0\", \"cat\": \"compute\", \"ph\": \"X\", \"ts\": 0, \"dur\": 1000, \"pid\": 0, \"tid\": 0},\n"
         "{\"name\": \"F mb1 c0\", \"cat\": \"compute\", \"ph\": \"X\", \"ts\": 0, \"dur\": 1000, \"pid\": 0, \"tid\": 0},\n"
         "{\"name\": \"F mb0 c1\", \"cat\": \"compute\", \"ph\": \"X\", \"ts\": 0, \"dur\": 2000, \"pid\": 1, \"tid\": 0},\n"
         "{\"name\": \"Bi mb0 c1\", \"cat\": \"compute\", \"ph\": \"X\", \"ts\": 0, \"dur\": 3000, \"pid\": 1, \"tid\": 0},\n"
         "{\"name\": \"W mb0 c1\", \"cat\": \"compute\", \"ph\": \"X\", \"ts\": 0, \"dur\": 1000, \"pid\": 1, \"tid\": 0},\n"
         "{\"name\": \"B mb0 c0\", \"cat\": \"compute\", \"ph\": \"X\", \"ts\": 0, \"dur\": 3000, \"pid\": 0, \"tid\": 0},\n"
         "{\"name\": \"SendAct mb0 c0 peer 1\", \"cat\": \"communication\", \"ph\": \"X\", \"ts\": 0, \"dur\": 500, "
         "\"pid\": 0, \"tid\": 1}\n"
         "]}\n";
  }
  double f[2], b[2], bi[2], w[2], lat = -1;
  REQUIRE(ptdp_schedule_costs_from_trace(path.c_str(), 2, f, b, bi, w, &lat) == PTDP_SUCCESS);
  CHECK(f[0] == Approx(1e-3));
  CHECK(f[1] == Approx(2e-3));
  CHECK(b[1] == Approx(4e-3));   // B + W of the zero-bubble spans
  CHECK(bi[0] == Approx(1.5e-3));  // half of chunk 0's full backward
  CHECK(w[0] == Approx(1.5e-3));
  CHECK(lat == Approx(0.5e-3));
  // Fed to the simulator: 1F1B, one microbatch: F0 + transfer + F1 + B1 + transfer + B0.
  ptdp_schedule s = make(PTDP_SCHEDULE_1F1B, 2, 1, 1);
  ptdp_schedule_costs c;
  ptdp_schedule_costs_init(&c);
  c.chunk_forward = f;
  c.chunk_backward = b;
  c.chunk_backward_input = bi;
  c.chunk_backward_weight = w;
  c.p2p_latency = lat;
  double makespan = 0;
  REQUIRE(ptdp_schedule_simulate(s, &c, &makespan, nullptr, nullptr, 0) == PTDP_SUCCESS);
  CHECK(makespan == Approx(1e-3 + 0.5e-3 + 2e-3 + 4e-3 + 0.5e-3 + 3e-3));
  ptdp_schedule_destroy(s);
  // Errors name what is wrong.
  CHECK(ptdp_schedule_costs_from_trace(path.c_str(), 3, f, nullptr, nullptr, nullptr, nullptr) ==
        PTDP_ERR_INVALID_ARGUMENT);
  CHECK(has(err(), "predict_trace.json': no forward time measured for chunk 2"));
  CHECK(ptdp_schedule_costs_from_trace("/nonexistent-ptdp/trace.json", 2, f, b, bi, w, &lat) == PTDP_ERR_IO);
  CHECK(has(err(), "/nonexistent-ptdp/trace.json: cannot open the trace file: missing"));
  // A directory is no trace: refused naming what it is.
  CHECK(ptdp_schedule_costs_from_trace("/tmp", 2, f, b, bi, w, &lat) == PTDP_ERR_IO);
  CHECK(has(err(), "/tmp: is a directory, not a regular file"));
  CHECK(ptdp_schedule_costs_from_trace(path.c_str(), 0, f, b, bi, w, &lat) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_schedule_costs_from_trace: chunks = 0 is not > 0");
}
