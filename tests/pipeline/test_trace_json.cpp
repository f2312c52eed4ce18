// The trace JSON is valid JSON for every span: a long name is not truncated mid-string, quotes
// and control characters in names are escaped or dropped, a time that is not finite is null.
#include <catch2/catch.hpp>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "core/pipeline/trace.h"

TEST_CASE("trace: events_json parses for long names and odd characters", "[pipeline][json]") {
  ptdp::TraceRecorder r;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string long_name(2000, 'x');
  r.add(long_name, "compute", t0, t0 + std::chrono::microseconds(5), 0);
  r.add("a \"quoted\" \\ name\twith a tab", "communication", t0, t0 + std::chrono::microseconds(1), 1);
  std::string text = "[";
  text += r.events_json(3);
  text += "]";
  const nlohmann::json j = nlohmann::json::parse(text);
  REQUIRE(j.size() == 5);  // three metadata events, two spans
  CHECK(j[3]["name"] == long_name);
  CHECK(j[3]["dur"].get<double>() == Approx(5.0));
  CHECK(j[3]["pid"] == 3);
  CHECK(j[4]["name"] == "a \"quoted\" \\ namewith a tab");
  CHECK(j[4]["tid"] == 1);
}
