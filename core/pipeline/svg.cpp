#include "core/pipeline/svg.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>

#include "base/error.h"
#include "io/svg.h"

namespace ptdp {
namespace {

// Layout in pixels.
constexpr double kLeft = 70;       // room for the rank labels
constexpr double kTop = 40;        // room for the title
constexpr double kRow = 30;        // height of a rank's row
constexpr double kBox = 24;        // height of a box
constexpr double kPlotWidth = 960; // width of the timeline
constexpr double kAxis = 40;       // room for the time axis under the rows
constexpr double kLegend = 30;     // room for the legend under the axis

using svg::escape;
using svg::hsl_hex;
using svg::num;

std::string fraction(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

// Hue per compute kind; lightness grows with the local chunk index.
int hue(ActionKind k) {
  switch (k) {
    case ActionKind::Forward: return 212;         // blue
    case ActionKind::Backward: return 130;        // green
    case ActionKind::BackwardInput: return 160;   // teal
    case ActionKind::BackwardWeight: return 32;   // orange
    default: return 0;
  }
}

double lightness(int local_chunk, int v) { return v <= 1 ? 45 : 38 + 32.0 * local_chunk / (v - 1); }

std::string fill(ActionKind k, int local_chunk, int v) {
  return hsl_hex(hue(k), 0.65, lightness(local_chunk, v) / 100);
}

// Label colour readable on the box.
const char* ink(int local_chunk, int v) { return lightness(local_chunk, v) > 55 ? "#222" : "#fff"; }

// A "nice" tick step giving about eight ticks over `span`.
double tick_step(double span) { return svg::tick_step(span, 8); }

// A filled rectangle drawn as a path, so that <rect> stays reserved for action boxes.
std::string swatch(double x, double y, double w, double h, const std::string& color) {
  return "<path d=\"M" + num(x) + " " + num(y) + " h" + num(w) + " v" + num(h) + " h-" + num(w) +
         " z\" fill=\"" + color + "\" stroke=\"#333\" stroke-width=\"0.5\"/>\n";
}


// Where the drawing puts things: time t at x = kLeft + t * scale.
struct Frame {
  double makespan, scale, rows_bottom;
};

void title(std::ostream& o, const Schedule& s, const SimulationResult& sim, const Frame& f) {
  const double width = kLeft + kPlotWidth + 20;
  const double height = f.rows_bottom + kAxis + kLegend + 10;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" << num(width)
    << "\" height=\"" << num(height) << "\" viewBox=\"0 0 " << num(width) << " " << num(height)
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  o << "<title>" << escape(schedule_kind_name(s.kind)) << " schedule, p = " << s.p
    << ", m = " << s.m << ", v = " << s.v << "</title>\n";
  o << "<text x=\"" << num(kLeft) << "\" y=\"22\" font-size=\"14\">"
    << escape(schedule_kind_name(s.kind)) << ": p = " << s.p << ", m = " << s.m << ", v = " << s.v
    << "; makespan " << num(sim.makespan) << ", bubble fraction " << fraction(sim.bubble_fraction)
    << "</text>\n";
}

// The vertical grid lines, the time axis with its ticks and their labels.
void axis(std::ostream& o, const Frame& f) {
  const double step = tick_step(f.makespan);
  o << "<g stroke=\"#ddd\" stroke-width=\"1\">\n";
  for (double t = 0; t <= f.makespan + 1e-9; t += step) {
    const double x = kLeft + t * f.scale;
    o << "<line x1=\"" << num(x) << "\" y1=\"" << num(kTop) << "\" x2=\"" << num(x) << "\" y2=\""
      << num(f.rows_bottom) << "\"/>\n";
  }
  o << "</g>\n";
  o << "<g stroke=\"#333\" stroke-width=\"1\">\n";
  o << "<line x1=\"" << num(kLeft) << "\" y1=\"" << num(f.rows_bottom) << "\" x2=\""
    << num(kLeft + kPlotWidth) << "\" y2=\"" << num(f.rows_bottom) << "\"/>\n";
  for (double t = 0; t <= f.makespan + 1e-9; t += step) {
    const double x = kLeft + t * f.scale;
    o << "<line x1=\"" << num(x) << "\" y1=\"" << num(f.rows_bottom) << "\" x2=\"" << num(x)
      << "\" y2=\"" << num(f.rows_bottom + 5) << "\"/>\n";
  }
  o << "</g>\n";
  o << "<g text-anchor=\"middle\">\n";
  for (double t = 0; t <= f.makespan + 1e-9; t += step) {
    char label[32];
    std::snprintf(label, sizeof label, "%g", t);
    o << "<text x=\"" << num(kLeft + t * f.scale) << "\" y=\"" << num(f.rows_bottom + 17) << "\">"
      << label << "</text>\n";
  }
  o << "<text x=\"" << num(kLeft + kPlotWidth / 2) << "\" y=\"" << num(f.rows_bottom + 32)
    << "\">time</text>\n";
  o << "</g>\n";
}

// Rank r's row: its label, one box per compute action, and the microbatches where they fit.
void row(std::ostream& o, const Schedule& s, const SimulationResult& sim, const Frame& f, int r) {
  const double y = kTop + kRow * r + (kRow - kBox) / 2;
  o << "<text x=\"" << num(kLeft - 8) << "\" y=\"" << num(y + kBox / 2 + 4)
    << "\" text-anchor=\"end\">rank " << r << "</text>\n";
  o << "<g stroke=\"#333\" stroke-width=\"0.5\">\n";
  const auto& list = s.ranks[static_cast<std::size_t>(r)];
  const auto& times = sim.timeline[static_cast<std::size_t>(r)];
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    if (is_communication(a.kind)) continue;
    const TimedAction& t = times[i];
    const double x = kLeft + t.start * f.scale;
    const double w = std::max(0.0, (t.end - t.start) * f.scale);
    o << "<rect x=\"" << num(x) << "\" y=\"" << num(y) << "\" width=\"" << num(w)
      << "\" height=\"" << num(kBox) << "\" fill=\"" << fill(a.kind, s.local_index(a.chunk), s.v)
      << "\"><title>" << escape(a.str()) << " [" << num(t.start) << ", " << num(t.end)
      << "]</title></rect>\n";
  }
  o << "</g>\n";
  o << "<g text-anchor=\"middle\" font-size=\"" << (s.v > 1 || s.m > 20 ? 9 : 11) << "\">\n";
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    if (is_communication(a.kind)) continue;
    const TimedAction& t = times[i];
    if ((t.end - t.start) * f.scale < 9) continue;  // no room for a label
    o << "<text x=\"" << num(kLeft + (t.start + t.end) / 2 * f.scale) << "\" y=\""
      << num(y + kBox / 2 + 4) << "\" fill=\"" << ink(s.local_index(a.chunk), s.v) << "\">" << a.microbatch
      << "</text>\n";
  }
  o << "</g>\n";
}

// The kinds present, each for the lowest and highest chunk when v > 1.
void legend(std::ostream& o, const Schedule& s, const Frame& f) {
  bool present[4] = {false, false, false, false};
  for (const auto& list : s.ranks) {
    for (const Action& a : list) {
      if (!is_communication(a.kind)) present[static_cast<int>(a.kind)] = true;
    }
  }
  static const char* const kNames[4] = {"forward (F)", "backward (B)", "input-gradient backward (B)",
                                        "weight-gradient backward (W)"};
  double x = kLeft;
  const double ly = f.rows_bottom + kAxis;
  for (int k = 0; k < 4; ++k) {
    if (!present[k]) continue;
    const auto kind = static_cast<ActionKind>(k);
    o << swatch(x, ly, 14, 14, fill(kind, 0, s.v));
    x += 16;
    if (s.v > 1) {
      o << swatch(x, ly, 14, 14, fill(kind, s.v - 1, s.v));
      x += 16;
    }
    o << "<text x=\"" << num(x + 2) << "\" y=\"" << num(ly + 11) << "\">" << kNames[k] << "</text>\n";
    x += 8 + 6.5 * static_cast<double>(std::strlen(kNames[k])) + 16;
  }
  if (s.v > 1) {
    o << "<text x=\"" << num(x) << "\" y=\"" << num(ly + 11)
      << "\">(lighter: higher chunk of the rank)</text>\n";
  }
}

}  // namespace

std::string schedule_svg(const Schedule& s, const SimulationResult& sim) {
  const double makespan = sim.makespan > 0 ? sim.makespan : 1;
  const Frame f{makespan, kPlotWidth / makespan, kTop + kRow * s.p};
  std::ostringstream o;
  title(o, s, sim, f);
  axis(o, f);
  for (int r = 0; r < s.p; ++r) row(o, s, sim, f, r);
  legend(o, s, f);
  o << "</svg>\n";
  return o.str();
}

void write_schedule_svg(const Schedule& s, const ScheduleCosts& costs, const std::string& path) {
  const std::string svg = schedule_svg(s, simulate(s, costs));
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) {
    throw_error(ErrorCode::Io, "cannot open '" + path + "' for writing: " + std::strerror(errno));
  }
  f << svg;
  f.close();
  if (!f) throw_error(ErrorCode::Io, "writing '" + path + "' failed");
}

}  // namespace ptdp
