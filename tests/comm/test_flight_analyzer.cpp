// The flight recorder's ring and JSON, and the analyzer on synthetic records of several ranks:
// all consistent, a rank that never reached a collective, a rank with no record, ranks that
// disagree on a collective's size, a cascade whose first timeout is on another group, and ranks
// waiting on each other.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "core/comm/flight_analyzer.h"
#include "core/comm/flight_recorder.h"

namespace {

using nlohmann::json;
using ptdp::FlightFinding;

struct G {
  std::string name;
  std::vector<int> ranks;
  int last = 0, done = 0;
};

json entry(int group, int seq, int coll, const std::string& op, const std::string& state, double start,
           int64_t count = 8, std::vector<std::pair<int, bool>> peers = {}) {
  json p = json::array();
  for (auto [r, recv] : peers) p.push_back({{"rank", r}, {"dir", recv ? "recv" : "send"}});
  return {{"id", seq},  {"group", group}, {"seq", seq}, {"collective", coll}, {"op", op},
          {"reduction", coll > 0 && op == "all_reduce" ? "sum" : ""}, {"dtype", 0}, {"count", count},
          {"bytes", count * 4}, {"root", -1}, {"transfers", peers.size()}, {"peers", p}, {"start", start},
          {"end", state == "started" ? 0.0 : start + 2}, {"state", state}};
}

std::string record(int rank, int world, const std::vector<G>& groups, const std::vector<json>& entries) {
  json gs = json::array();
  for (std::size_t i = 0; i < groups.size(); ++i) {
    gs.push_back({{"index", i}, {"name", groups[i].name}, {"instance", 0}, {"ranks", groups[i].ranks},
                  {"timeout_s", 2.0}, {"last_seq", groups[i].last}, {"last_collective", groups[i].last},
                  {"completed_collective", groups[i].done}});
  }
  json j = {{"format", "ptdp-flight-recorder"}, {"version", 1}, {"rank", rank}, {"world_size", world},
            {"capacity", 64}, {"recorded", entries.size()}, {"dumped_at", 1.7e9 + 100}, {"groups", gs},
            {"entries", entries}};
  return j.dump();
}

constexpr double T = 1.7e9;  // wall-clock base of the synthetic records

const FlightFinding* find_kind(const ptdp::FlightAnalysis& a, FlightFinding::Kind k) {
  for (const FlightFinding& f : a.findings) {
    if (f.kind == k) return &f;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("flight analyzer: consistent records name no culprit", "[flight]") {
  const G world{"world group [0, 1]", {0, 1}, 2, 2};
  std::vector<std::string> recs;
  for (int r = 0; r < 2; ++r) {
    recs.push_back(record(r, 2, {world},
                          {entry(0, 1, 1, "all_reduce", "completed", T), entry(0, 2, 2, "broadcast", "completed", T + 1)}));
  }
  const ptdp::FlightAnalysis a = ptdp::analyze_flight_texts(recs);
  CHECK(a.culprit == -1);
  CHECK(a.findings.empty());
  CHECK(a.world_size == 2);
  CHECK(a.ranks_missing.empty());
  CHECK(a.report.find("consistent") != std::string::npos);
}

TEST_CASE("flight analyzer: the rank that never reached a collective", "[flight]") {
  // W = 6, data group [1, 5]: rank 1 is stuck in all_reduce #37 (the group's 30th collective);
  // rank 5 stopped after its 29th collective there. The other ranks are idle.
  std::vector<std::string> recs;
  for (int r = 0; r < 6; ++r) {
    std::vector<G> groups = {{"world group [0, 1, 2, 3, 4, 5]", {0, 1, 2, 3, 4, 5}, 1, 1}};
    std::vector<json> entries = {entry(0, 1, 1, "barrier", "completed", T)};
    if (r == 1 || r == 5) {
      groups.push_back({"data group [1, 5]", {1, 5}, r == 1 ? 30 : 29, 29});
      entries.push_back(entry(1, 36, 29, "all_reduce", "completed", T + 1));
      if (r == 1) entries.push_back(entry(1, 37, 30, "all_reduce", "timed_out", T + 2, 1024));
    }
    recs.push_back(record(r, 6, groups, entries));
  }
  const ptdp::FlightAnalysis a = ptdp::analyze_flight_texts(recs);
  INFO(a.report);
  CHECK(a.culprit == 5);
  const FlightFinding* f = find_kind(a, FlightFinding::Kind::NeverReached);
  REQUIRE(f != nullptr);
  CHECK(f->rank == 5);
  CHECK(f->group == "data group [1, 5]");
  CHECK(f->op == "all_reduce");
  CHECK(f->seq == 37);
  CHECK(f->waiting == std::vector<int>{1});
  CHECK(a.report.find("rank 5 never reached all_reduce #37 on data group [1, 5]") != std::string::npos);
  CHECK(a.report.find("rank 1 timed out in all_reduce(sum) 1024 x f32 #37") != std::string::npos);
}

TEST_CASE("flight analyzer: a rank without a record", "[flight]") {
  // W = 4; rank 3 wrote nothing; rank 2 waits for it in a tensor-group all_reduce.
  std::vector<std::string> recs;
  for (int r = 0; r < 3; ++r) {
    std::vector<G> groups = {{"world group [0, 1, 2, 3]", {0, 1, 2, 3}, 1, 1}};
    std::vector<json> entries = {entry(0, 1, 1, "barrier", "completed", T)};
    if (r == 2) {
      groups.push_back({"tensor group [2, 3]", {2, 3}, 4, 3});
      entries.push_back(entry(1, 4, 4, "all_reduce", "started", T + 3));
    }
    recs.push_back(record(r, 4, groups, entries));
  }
  const ptdp::FlightAnalysis a = ptdp::analyze_flight_texts(recs);
  INFO(a.report);
  CHECK(a.ranks_missing == std::vector<int>{3});
  CHECK(a.culprit == 3);
  const FlightFinding* f = find_kind(a, FlightFinding::Kind::NoRecord);
  REQUIRE(f != nullptr);
  CHECK(f->group == "tensor group [2, 3]");
  CHECK(f->waiting == std::vector<int>{2});
  CHECK(a.report.find("rank 3 wrote no flight record") != std::string::npos);
}

TEST_CASE("flight analyzer: ranks that disagree on a collective's size", "[flight]") {
  const G world{"world group [0, 1, 2]", {0, 1, 2}, 1, 0};
  std::vector<std::string> recs;
  for (int r = 0; r < 3; ++r) {
    recs.push_back(record(r, 3, {world}, {entry(0, 1, 1, "all_reduce", "failed", T, r == 2 ? 16 : 8)}));
  }
  const ptdp::FlightAnalysis a = ptdp::analyze_flight_texts(recs);
  INFO(a.report);
  CHECK(a.culprit == 2);
  const FlightFinding* f = find_kind(a, FlightFinding::Kind::Mismatch);
  REQUIRE(f != nullptr);
  CHECK(f->rank == 2);
  CHECK(f->waiting == std::vector<int>{0, 1});
  CHECK(a.report.find("ranks disagree on collective 1 of world group [0, 1, 2]") != std::string::npos);
  CHECK(a.report.find("16 x f32") != std::string::npos);
}

TEST_CASE("flight analyzer: a divergent operation at the same position", "[flight]") {
  const G world{"world group [0, 1]", {0, 1}, 1, 0};
  const std::vector<std::string> recs = {
      record(0, 2, {world}, {entry(0, 1, 1, "all_reduce", "failed", T)}),
      record(1, 2, {world}, {entry(0, 1, 1, "all_gather", "failed", T)})};
  const ptdp::FlightAnalysis a = ptdp::analyze_flight_texts(recs);
  INFO(a.report);
  const FlightFinding* f = find_kind(a, FlightFinding::Kind::Mismatch);
  REQUIRE(f != nullptr);
  CHECK(f->rank == 1);
  CHECK(f->op == "all_gather");
  CHECK(a.culprit == 1);
}

TEST_CASE("flight analyzer: a cascade still names the rank that hangs", "[flight]") {
  // t = 2, p = 2: tensor groups [0, 1], [2, 3]; pipeline groups [0, 2], [1, 3]. Rank 3 hangs
  // before its second tensor-group all_reduce; rank 2 waits there; ranks 0 and 1 time out first,
  // in pipeline receives from 2 and 3.
  const G t01{"tensor group [0, 1]", {0, 1}, 1, 1}, t23a{"tensor group [2, 3]", {2, 3}, 2, 1},
      t23b{"tensor group [2, 3]", {2, 3}, 1, 1}, p02{"pipeline group [0, 2]", {0, 2}, 0, 0},
      p13{"pipeline group [1, 3]", {1, 3}, 0, 0};
  const std::vector<std::string> recs = {
      record(0, 4, {t01, p02}, {entry(0, 1, 1, "all_reduce", "completed", T),
                                entry(1, 1, 0, "batch_p2p", "timed_out", T + 1, 8, {{2, true}})}),
      record(1, 4, {t01, p13}, {entry(0, 1, 1, "all_reduce", "completed", T),
                                entry(1, 1, 0, "batch_p2p", "timed_out", T + 1.1, 8, {{3, true}})}),
      record(2, 4, {t23a, p02}, {entry(0, 1, 1, "all_reduce", "completed", T),
                                 entry(0, 2, 2, "all_reduce", "timed_out", T + 1.5)}),
      record(3, 4, {t23b, p13}, {entry(0, 1, 1, "all_reduce", "completed", T)})};
  const ptdp::FlightAnalysis a = ptdp::analyze_flight_texts(recs);
  INFO(a.report);
  CHECK(a.culprit == 3);
  const FlightFinding* f = find_kind(a, FlightFinding::Kind::NeverReached);
  REQUIRE(f != nullptr);
  CHECK(f->group == "tensor group [2, 3]");
  CHECK(f->op == "all_reduce");
  CHECK(f->seq == 2);
  CHECK(f->waiting == std::vector<int>{1, 2});
  CHECK(a.report.find("first timeout: rank 0 in batch_p2p") != std::string::npos);
  CHECK(a.report.find("pipeline group [0, 2]") != std::string::npos);
  CHECK(a.report.find("a consequence") != std::string::npos);
}

TEST_CASE("flight analyzer: ranks waiting on each other", "[flight]") {
  // Both ranks receive from each other with no send: nobody is outside communication.
  const G p{"pipeline group [0, 1]", {0, 1}, 0, 0};
  const std::vector<std::string> recs = {
      record(0, 2, {p}, {entry(0, 1, 0, "batch_p2p", "timed_out", T, 8, {{1, true}})}),
      record(1, 2, {p}, {entry(0, 1, 0, "batch_p2p", "timed_out", T, 8, {{0, true}})})};
  const ptdp::FlightAnalysis a = ptdp::analyze_flight_texts(recs);
  INFO(a.report);
  REQUIRE(find_kind(a, FlightFinding::Kind::Cycle) != nullptr);
  CHECK(a.culprit >= 0);
  CHECK(a.report.find("wait for each other") != std::string::npos);
}

TEST_CASE("flight analyzer: a rank that joined but did not run", "[flight]") {
  // Both ranks joined all_reduce #34; rank 1 was stopped inside it: its 2 s deadline fired 28 s late.
  const G world{"world group [0, 1]", {0, 1}, 34, 33};
  json late = entry(0, 34, 34, "all_reduce", "timed_out", T + 0.1);
  late["end"] = T + 30.1;
  const std::vector<std::string> recs = {
      record(0, 2, {world}, {entry(0, 34, 34, "all_reduce", "timed_out", T)}),
      record(1, 2, {world}, {late})};
  const ptdp::FlightAnalysis a = ptdp::analyze_flight_texts(recs);
  INFO(a.report);
  CHECK(a.culprit == 1);
  const FlightFinding* f = find_kind(a, FlightFinding::Kind::Stalled);
  REQUIRE(f != nullptr);
  CHECK(f->seq == 34);
  CHECK(f->waiting == std::vector<int>{0});
  CHECK(a.report.find("did not run: its deadline fired 28.0 s late") != std::string::npos);
  // Deadlines that fired on time name nobody.
  const std::vector<std::string> on_time = {
      record(0, 2, {world}, {entry(0, 34, 34, "all_reduce", "timed_out", T)}),
      record(1, 2, {world}, {entry(0, 34, 34, "all_reduce", "timed_out", T + 0.1)})};
  CHECK(ptdp::analyze_flight_texts(on_time).culprit == -1);
}

TEST_CASE("flight analyzer: bad input is an Io error naming it", "[flight]") {
  try {
    ptdp::analyze_flight_texts({"{not json"});
    FAIL("no error");
  } catch (const ptdp::Error& e) {
    CHECK(e.code() == ptdp::ErrorCode::Io);
    CHECK(std::string(e.what()).find("not valid JSON") != std::string::npos);
  }
  CHECK_THROWS_AS(ptdp::analyze_flight_texts({"{\"format\": \"other\"}"}), ptdp::Error);
  CHECK_THROWS_AS(ptdp::analyze_flight_records("/nonexistent/ptdp-flight"), ptdp::Error);
}

TEST_CASE("flight recorder: a fixed ring, valid JSON, and a file the analyzer reads", "[flight]") {
  ptdp::FlightRecorder& fr = ptdp::FlightRecorder::instance();
  fr.reset(3);
  fr.set_world(0, 1);
  CHECK(fr.capacity() == 3);
  const int g = fr.add_group("world group [0]", {0});
  const int g2 = fr.add_group("world group [0]", {0});
  ptdp::FlightOp op;
  op.op = "all_reduce";
  op.reduction = "sum";
  op.dtype = 0;
  op.count = 4;
  op.bytes = 16;
  uint64_t last = 0;
  for (int i = 1; i <= 5; ++i) {
    last = fr.start(g, static_cast<uint64_t>(i), op);
    if (i < 5) fr.end(last, ptdp::FlightState::Completed);
  }
  CHECK(last == 5);
  fr.end(1, ptdp::FlightState::Completed);  // slot reused since: no effect
  const json j = json::parse(fr.to_json());
  CHECK(j["format"] == "ptdp-flight-recorder");
  CHECK(j["recorded"] == 5);
  REQUIRE(j["entries"].size() == 3);
  CHECK(j["entries"][0]["id"] == 3);
  CHECK(j["entries"][2]["id"] == 5);
  CHECK(j["entries"][2]["state"] == "started");
  CHECK(j["entries"][1]["state"] == "completed");
  CHECK(j["entries"][1]["collective"] == 4);
  CHECK(j["groups"][1]["instance"] == 1);
  CHECK(j["groups"][0]["last_collective"] == 5);
  CHECK(j["groups"][0]["completed_collective"] == 4);
  CHECK(g2 == g + 1);

  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "ptdp-test-flight-recorder";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  fr.dump((dir / ptdp::FlightRecorder::file_name(0)).string());
  CHECK(std::filesystem::exists(dir / "flight-rank00000.json"));
  const ptdp::FlightAnalysis a = ptdp::analyze_flight_records(dir.string());
  CHECK(a.world_size == 1);
  CHECK(a.culprit == -1);  // one rank in flight, waiting for nobody
  std::filesystem::remove_all(dir);

  fr.reset(0);
  CHECK(fr.start(g, 1, op) == 0);  // recording off
  fr.reset(ptdp::kDefaultFlightEntries);
}
