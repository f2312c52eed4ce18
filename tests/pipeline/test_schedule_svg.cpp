// The SVG drawing is a well-formed standalone document with one box per compute action.
#include <catch2/catch.hpp>

#include <cstddef>
#include <string>

#include "base/error.h"
#include "core/pipeline/schedule.h"
#include "core/pipeline/simulator.h"
#include "core/pipeline/svg.h"
#include "schedule_sweep.h"
#include "xml_check.h"

using ptdp::ScheduleKind;

namespace {

int compute_actions(const ptdp::Schedule& s) {
  int n = 0;
  for (const auto& list : s.ranks) {
    for (const ptdp::Action& a : list) n += !ptdp::is_communication(a.kind);
  }
  return n;
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("schedule SVG: well-formed, one rect per compute action, legend and axis", "[pipeline][schedule][svg]") {
  for (ScheduleKind kind : ptdp_test::kAllKinds) {
    const int v = kind == ScheduleKind::Interleaved1F1B ? 2 : 1;
    const ptdp::Schedule s = ptdp::make_schedule(kind, 4, 8, v);
    const std::string svg = ptdp::schedule_svg(s, ptdp::simulate(s, ptdp::ScheduleCosts{}));
    INFO(ptdp::schedule_kind_name(kind));
    const ptdp_test::XmlSummary x = ptdp_test::parse_xml(svg);
    INFO(x.error);
    REQUIRE(x.ok);
    CHECK(x.root == "svg");
    CHECK(x.elements.at("rect") == compute_actions(s));
    CHECK(occurrences(svg, "<rect ") == static_cast<std::size_t>(compute_actions(s)));
    CHECK(svg.find(">time</text>") != std::string::npos);       // axis title
    CHECK(svg.find("forward (F)") != std::string::npos);         // legend
    CHECK(svg.find(">rank 3</text>") != std::string::npos);      // row labels
    if (kind == ScheduleKind::ZeroBubbleH1) {
      CHECK(svg.find("weight-gradient backward (W)") != std::string::npos);
    }
    if (v > 1) CHECK(svg.find("lighter: higher chunk") != std::string::npos);
  }
}

TEST_CASE("schedule SVG: an unwritable path is an I/O error naming it", "[pipeline][schedule][svg]") {
  const ptdp::Schedule s = ptdp::make_schedule(ScheduleKind::GPipe, 2, 2);
  const std::string path = "/nonexistent-dir-ptdp/schedule.svg";
  try {
    ptdp::write_schedule_svg(s, ptdp::ScheduleCosts{}, path);
    FAIL("no error");
  } catch (const ptdp::Error& e) {
    CHECK(e.code() == ptdp::ErrorCode::Io);
    CHECK(std::string(e.what()).find(path) != std::string::npos);
  }
}
