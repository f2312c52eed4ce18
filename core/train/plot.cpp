#include "core/train/plot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "io/file_read.h"
#include "io/file_write.h"
#include "io/json_text.h"
#include "io/svg.h"

namespace ptdp {
namespace {

namespace fs = std::filesystem;
using svg::escape;
using svg::num;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ------------------------------------------------------------------------------------------
// Reading the JSON lines.

// `line` with the bare words C's printf writes for non-finite values (nan, -nan, inf,
// -infinity, any case) replaced by null outside strings, so that a loss that overflowed does
// not make its whole line unreadable.
std::string nonfinite_words_to_null(const std::string& line) {
  std::string out;
  out.reserve(line.size());
  bool in_string = false;
  for (std::size_t i = 0; i < line.size();) {
    const char c = line[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < line.size()) {
        out += line[i + 1];
        i += 2;
        continue;
      }
      if (c == '"') in_string = false;
      ++i;
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      ++i;
      continue;
    }
    std::size_t j = i;
    if (c == '-' || c == '+') ++j;
    std::size_t k = j;
    while (k < line.size() && std::isalpha(static_cast<unsigned char>(line[k]))) ++k;
    if (k > j) {
      std::string word = line.substr(j, k - j);
      std::transform(word.begin(), word.end(), word.begin(), [](unsigned char ch) { return std::tolower(ch); });
      if (word == "nan" || word == "inf" || word == "infinity") {
        out += "null";
      } else {
        out.append(line, i, k - i);
      }
      i = k;
      continue;
    }
    out += c;
    ++i;
  }
  return out;
}

// Parses `text` into `out`; false, with the column where the parser gave up, when it is not JSON.
bool parse_json(const std::string& text, nlohmann::json& out, std::size_t& column) {
  try {
    out = nlohmann::json::parse(text);
    return true;
  } catch (const nlohmann::json::parse_error& e) {
    column = e.byte;
    return false;
  }
}

// A finite number under `key`, else NaN.
double number_or_nan(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return kNaN;
  const double v = it->get<double>();
  return std::isfinite(v) ? v : kNaN;
}

int64_t iteration_of(const nlohmann::json& object, const char* key, const std::string& path, std::size_t line) {
  const nlohmann::json& v = object.at(key);
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    const auto i = v.get<int64_t>();
    if (i >= 0) return i;
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d >= 0 && d < 9.2e18 && std::floor(d) == d) return static_cast<int64_t>(d);
  }
  throw_io_error(path, str_cat("line ", line, ": \"", key, "\" is ", json_text(v), ", not a non-negative integer"));
}

// A short, printable excerpt of a bad line for the message.
std::string excerpt(const std::string& line) {
  std::string out;
  for (char c : line.substr(0, 60)) out += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  if (line.size() > 60) out += "...";
  return out;
}

// ------------------------------------------------------------------------------------------
// Drawing.

// Layout in pixels.
constexpr double kWidth = 1000;
constexpr double kMargin = 20;        // right and outer margins
constexpr double kLeft = 70;          // room for a panel's y tick labels
constexpr double kLegendTop = 44;     // below the title
constexpr double kLegendRow = 18;     // height of a legend row
constexpr double kPanelTitle = 26;    // room above a panel for its title
constexpr double kPanelAxis = 40;     // room below a panel for the x ticks and the axis name
constexpr double kLossHeight = 240;   // the loss panel, full width
constexpr double kSmallHeight = 170;  // the other panels, two per row
constexpr int kMaxMarkers = 300;      // validation markers drawn per run at most

// Distinct colours for the first ten runs (the usual categorical palette), then hues spaced by
// the golden angle.
std::string run_colour(std::size_t i) {
  static const char* const kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  if (i < 10) return kPalette[i];
  return svg::hsl_hex(std::fmod(37.0 + 137.508 * static_cast<double>(i), 360.0), 0.6, 0.42);
}

// A value's text for a tick: in thousands (k, M, G) when `magnitude`, the axis's largest tick
// (or the tick itself on a log axis), is 10k or more; as many decimals as the step needs (up to
// six, then scientific notation).
std::string tick_label(double v, double step, double magnitude) {
  if (std::fabs(v) < std::fabs(step) * 1e-6) return "0";
  const double a = std::fabs(magnitude);
  char buf[40];
  if (a >= 1e4) {
    const double scale = a >= 1e9 ? 1e9 : a >= 1e6 ? 1e6 : 1e3;
    const char* suffix = a >= 1e9 ? "G" : a >= 1e6 ? "M" : "k";
    const int decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(step / scale) - 1e-9)), 0, 6);
    std::snprintf(buf, sizeof buf, "%.*f%s", decimals, v / scale, suffix);
  } else {
    const int decimals = std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
    if (decimals <= 6) {
      std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    } else {
      std::snprintf(buf, sizeof buf, "%.3g", v);
    }
  }
  return buf;
}

std::string exact(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

std::string short_value(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// An axis: its range, whether it is logarithmic, and its ticks (inside the range, both ends
// included: the range is widened to round values that enclose the data).
struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  bool empty = true;  // no data: no ticks drawn
  std::vector<double> ticks;
  std::vector<double> steps;  // the step each tick's label is written for

  // Position in [0, 1] of `v`; NaN where it cannot be drawn.
  double frac(double v) const {
    if (!std::isfinite(v)) return kNaN;
    if (log) {
      if (v <= 0) return kNaN;
      return (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
    }
    return (v - lo) / (hi - lo);
  }
};

// Finite minimum and maximum of `values` (NaN, NaN when there is none).
struct Range {
  double min = kNaN, max = kNaN;
  bool any() const { return !std::isnan(min); }
  void add(double v) {
    if (!std::isfinite(v)) return;
    if (!any()) {
      min = max = v;
      return;
    }
    min = std::min(min, v);
    max = std::max(max, v);
  }
};

Axis linear_axis(Range r, int ticks, bool integer) {
  Axis a;
  a.empty = !r.any();
  if (a.empty) r = Range{0, 1};
  if (r.max == r.min) {  // one value: a range around it (from 0 for a first iteration)
    const double pad = integer ? 1 : (r.min == 0 ? 1 : std::fabs(r.min) * 0.1);
    r.min = integer && r.min >= 0 ? std::max(0.0, r.min - pad) : r.min - pad;
    r.max += pad;
  }
  double step = svg::tick_step(r.max - r.min, ticks);
  if (integer) step = std::max(step, 1.0);
  const double klo = std::floor(r.min / step + 1e-9);
  const double khi = std::ceil(r.max / step - 1e-9);
  a.lo = klo * step;
  a.hi = khi * step;
  if (!(a.hi > a.lo)) a.hi = a.lo + step;  // values so large that the step vanished in rounding
  for (double k = klo; k <= khi + 0.5 && a.ticks.size() < 64; k += 1) {
    a.ticks.push_back(k * step);
    a.steps.push_back(step);
  }
  return a;
}

// A decade axis for positive values.
Axis log_axis(Range r) {
  Axis a;
  a.empty = false;
  a.log = true;
  const double elo = std::floor(std::log10(r.min) + 1e-9);
  double ehi = std::ceil(std::log10(r.max) - 1e-9);
  if (ehi <= elo) ehi = elo + 1;
  a.lo = std::pow(10.0, elo);
  a.hi = std::pow(10.0, ehi);
  const double every = std::ceil((ehi - elo) / 8);  // at most about eight labelled decades
  for (double e = elo; e <= ehi + 0.5; e += every) {
    const double v = std::pow(10.0, e);
    a.ticks.push_back(v);
    a.steps.push_back(v);
  }
  if (a.ticks.back() < a.hi * 0.999) {
    a.ticks.push_back(a.hi);
    a.steps.push_back(a.hi);
  }
  return a;
}

// One curve as path data, in pixels; NaN y values break it. Points falling into the same pixel
// column are reduced to the first, the lowest, the highest and the last of them, in the order
// they came, so spikes survive and the path stays as long as the panel is wide. A point with no
// neighbour is drawn as a dot (a zero-length segment with round caps).
class PathBuilder {
 public:
  void add(double x, double y) {
    if (!std::isfinite(x) || !std::isfinite(y)) {
      flush();
      end_segment();
      return;
    }
    const long column = std::lround(std::floor(x));
    if (have_bucket_ && column != column_) flush();
    if (!have_bucket_) {
      have_bucket_ = true;
      column_ = column;
      bucket_ = {{x, y}};
      lo_ = hi_ = 0;
      return;
    }
    bucket_.push_back({x, y});
    const std::size_t i = bucket_.size() - 1;
    if (y < bucket_[lo_].y) lo_ = i;
    if (y > bucket_[hi_].y) hi_ = i;
  }

  std::string finish() {
    flush();
    end_segment();
    return out_.str();
  }

 private:
  struct P {
    double x, y;
  };

  void flush() {
    if (!have_bucket_) return;
    std::vector<std::size_t> keep = {0, lo_, hi_, bucket_.size() - 1};
    std::sort(keep.begin(), keep.end());
    keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
    for (std::size_t i : keep) emit(bucket_[i]);
    bucket_.clear();
    have_bucket_ = false;
  }

  void emit(const P& p) {
    const std::string x = num(p.x), y = num(p.y);
    if (segment_points_ > 0 && x == last_x_ && y == last_y_) return;
    out_ << (segment_points_ == 0 ? (first_ ? "M" : " M") : " L") << x << " " << y;
    first_ = false;
    last_x_ = x;
    last_y_ = y;
    ++segment_points_;
  }

  void end_segment() {
    if (segment_points_ == 1) out_ << " h0.01";
    segment_points_ = 0;
  }

  std::ostringstream out_;
  bool first_ = true;
  std::size_t segment_points_ = 0;
  std::string last_x_, last_y_;
  bool have_bucket_ = false;
  long column_ = 0;
  std::vector<P> bucket_;
  std::size_t lo_ = 0, hi_ = 0;
};

// A quantity drawn in one panel.
struct Series {
  const char* key;    // data-series
  const char* title;  // the panel's title
  double TrainPoint::*field;
  bool log_allowed;   // switch to a log axis when the values span two decades
};

const Series kLoss = {"lm_loss", "loss", &TrainPoint::lm_loss, false};
const Series kSmall[] = {
    {"learning_rate", "learning rate", &TrainPoint::learning_rate, false},
    {"grad_norm", "grad norm", &TrainPoint::grad_norm, true},
    {"loss_scale", "loss scale", &TrainPoint::loss_scale, true},
    {"tokens_per_second", "tokens per second", &TrainPoint::tokens_per_second, false},
};

struct Box {
  double x0, y0, w, h;
};

// The y axis of a panel over the values of every run.
Axis value_axis(const std::vector<PlotRun>& runs, const Series& s, bool with_validation) {
  Range r;
  bool all_positive = true;
  for (const PlotRun& run : runs) {
    for (const TrainPoint& p : run.train) {
      const double v = p.*s.field;
      r.add(v);
      if (std::isfinite(v) && v <= 0) all_positive = false;
    }
    if (with_validation) {
      for (const ValidPoint& p : run.valid) r.add(p.lm_loss);
    }
  }
  if (s.log_allowed && r.any() && all_positive && r.max >= 100 * r.min) return log_axis(r);
  return linear_axis(r, 5, false);
}

// Frame, grid, ticks and titles of a panel.
void draw_frame(std::ostringstream& o, const Box& b, const Axis& x, const Axis& y, const std::string& key,
                const std::string& title) {
  o << "<text x=\"" << num(b.x0) << "\" y=\"" << num(b.y0 - 9) << "\" font-size=\"13\" font-weight=\"bold\">"
    << escape(title) << (y.log ? " (log scale)" : "") << "</text>\n";
  o << "<g stroke=\"#e4e4e4\" stroke-width=\"1\">\n";
  for (double t : x.ticks) {
    const double px = b.x0 + x.frac(t) * b.w;
    o << "<line x1=\"" << num(px) << "\" y1=\"" << num(b.y0) << "\" x2=\"" << num(px) << "\" y2=\""
      << num(b.y0 + b.h) << "\"/>\n";
  }
  if (!y.empty) {
    for (double t : y.ticks) {
      const double py = b.y0 + b.h - y.frac(t) * b.h;
      o << "<line x1=\"" << num(b.x0) << "\" y1=\"" << num(py) << "\" x2=\"" << num(b.x0 + b.w) << "\" y2=\""
        << num(py) << "\"/>\n";
    }
  }
  o << "</g>\n";
  o << "<path d=\"M" << num(b.x0) << " " << num(b.y0) << " h" << num(b.w) << " v" << num(b.h) << " h-" << num(b.w)
    << " z\" fill=\"none\" stroke=\"#888\" stroke-width=\"1\"/>\n";
  const auto magnitude = [](const Axis& a, std::size_t i) {
    if (a.log) return a.ticks[i];
    double m = 0;
    for (double t : a.ticks) m = std::max(m, std::fabs(t));
    return m;
  };
  o << "<g class=\"ticks\" data-panel=\"" << key << "\" data-axis=\"x\" text-anchor=\"middle\" fill=\"#333\">\n";
  for (std::size_t i = 0; i < x.ticks.size(); ++i) {
    o << "<text x=\"" << num(b.x0 + x.frac(x.ticks[i]) * b.w) << "\" y=\"" << num(b.y0 + b.h + 15)
      << "\" data-value=\"" << exact(x.ticks[i]) << "\">" << tick_label(x.ticks[i], x.steps[i], magnitude(x, i)) << "</text>\n";
  }
  o << "</g>\n";
  o << "<text x=\"" << num(b.x0 + b.w) << "\" y=\"" << num(b.y0 + b.h + 31)
    << "\" text-anchor=\"end\" fill=\"#555\">iteration</text>\n";
  if (y.empty) {
    o << "<text x=\"" << num(b.x0 + b.w / 2) << "\" y=\"" << num(b.y0 + b.h / 2)
      << "\" text-anchor=\"middle\" fill=\"#999\">no data</text>\n";
    return;
  }
  o << "<g class=\"ticks\" data-panel=\"" << key << "\" data-axis=\"y\" text-anchor=\"end\" fill=\"#333\">\n";
  for (std::size_t i = 0; i < y.ticks.size(); ++i) {
    o << "<text x=\"" << num(b.x0 - 6) << "\" y=\"" << num(b.y0 + b.h - y.frac(y.ticks[i]) * b.h + 4)
      << "\" data-value=\"" << exact(y.ticks[i]) << "\">" << tick_label(y.ticks[i], y.steps[i], magnitude(y, i)) << "</text>\n";
  }
  o << "</g>\n";
}

double px_of(const Axis& a, double v, const Box& b) { return b.x0 + a.frac(v) * b.w; }
double py_of(const Axis& a, double v, const Box& b) { return b.y0 + b.h - a.frac(v) * b.h; }

void open_series(std::ostringstream& o, std::size_t run, const char* key, const std::string& colour, bool dashed) {
  o << "<path class=\"series\" data-run=\"" << run << "\" data-series=\"" << key << "\" fill=\"none\" stroke=\""
    << colour << "\" stroke-width=\"1.5\" stroke-linejoin=\"round\" stroke-linecap=\"round\"";
  if (dashed) o << " stroke-dasharray=\"6 4\"";
  o << " d=\"";
}

void close_series(std::ostringstream& o, const std::string& label, const char* what) {
  o << "\"><title>" << escape(label) << ": " << what << "</title></path>\n";
}

// The training points of a run, by iteration.
std::vector<TrainPoint> sorted(std::vector<TrainPoint> v) {
  std::stable_sort(v.begin(), v.end(), [](const TrainPoint& a, const TrainPoint& b) { return a.iteration < b.iteration; });
  return v;
}
std::vector<ValidPoint> sorted(std::vector<ValidPoint> v) {
  std::stable_sort(v.begin(), v.end(), [](const ValidPoint& a, const ValidPoint& b) { return a.iteration < b.iteration; });
  return v;
}

// The legend's summary of a run: its last iteration, training and validation loss.
std::string summary(const PlotRun& run) {
  std::string out;
  for (auto it = run.train.rbegin(); it != run.train.rend(); ++it) {
    if (std::isfinite(it->lm_loss)) {
      out = str_cat("iteration ", it->iteration, ": loss ", short_value(it->lm_loss));
      break;
    }
  }
  for (auto it = run.valid.rbegin(); it != run.valid.rend(); ++it) {
    if (std::isfinite(it->lm_loss)) {
      out += str_cat(out.empty() ? "" : ", ", "validation ", short_value(it->lm_loss), " at ", it->iteration);
      break;
    }
  }
  return out.empty() ? "no data yet" : out;
}

// Rough width of a text in the document's 11 px sans-serif.
double text_width(const std::string& s, double px_per_char = 6.2) {
  return px_per_char * static_cast<double>(s.size());
}

// Where everything of the picture goes: the legend's entries laid out in rows (a line in the
// run's colour, its label, its summary), the key, the loss panel and the four small panels two
// per row.
struct Page {
  struct Point {
    double x, y;
  };
  std::vector<Point> entries;  // one per run
  Point key_at;
  Box loss;
  Box small[4];
  bool moe = false;  // a row of the MoE panels below: losses, expert load
  Box moe_panels[2];
  double height;
};

// Whether any run has MoE figures (a dense run's picture keeps its four small panels).
bool has_moe(const std::vector<PlotRun>& runs) {
  for (const PlotRun& r : runs)
    for (const TrainPoint& p : r.train)
      if (std::isfinite(p.load_balancing_loss) || std::isfinite(p.z_loss) || !p.expert_load.empty()) return true;
  return false;
}

constexpr const char* kLegendKey = "solid: training; dashed with markers: validation";

Page lay_out_page(const std::vector<PlotRun>& runs) {
  Page page;
  double lx = kMargin, ly = kLegendTop;
  for (const PlotRun& r : runs) {
    const double w = 30 + text_width(r.label, 6.8) + 8 + text_width(summary(r), 5.6) + 24;
    if (lx > kMargin && lx + w > kWidth - kMargin) {
      lx = kMargin;
      ly += kLegendRow;
    }
    page.entries.push_back({lx, ly});
    lx += w;
  }
  if (lx > kMargin && lx + text_width(kLegendKey) > kWidth - kMargin) {
    lx = kMargin;
    ly += kLegendRow;
  }
  page.key_at = {lx, ly};
  const double panels_top = ly + kLegendRow + kPanelTitle;
  page.loss = {kLeft, panels_top, kWidth - kLeft - kMargin, kLossHeight};
  const double half = kWidth / 2;
  for (int i = 0; i < 4; ++i) {
    const double top =
        panels_top + kLossHeight + kPanelAxis + kPanelTitle + (i / 2) * (kSmallHeight + kPanelAxis + kPanelTitle);
    page.small[i] = {(i % 2) * half + kLeft, top, half - kLeft - kMargin, kSmallHeight};
  }
  page.height = page.small[3].y0 + kSmallHeight + kPanelAxis + 4;
  page.moe = has_moe(runs);
  if (page.moe) {
    const double top = page.small[3].y0 + kSmallHeight + kPanelAxis + kPanelTitle;
    for (int i = 0; i < 2; ++i) page.moe_panels[i] = {i * half + kLeft, top, half - kLeft - kMargin, kSmallHeight};
    page.height = top + kSmallHeight + kPanelAxis + 4;
  }
  return page;
}

// The document's opening, its title and the legend.
void draw_heading(std::ostringstream& o, const std::vector<PlotRun>& runs, const Page& page, const std::string& title) {
  const std::string heading = title.empty() ? std::string("training") : title;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" << num(kWidth) << "\" height=\""
    << num(page.height) << "\" viewBox=\"0 0 " << num(kWidth) << " " << num(page.height)
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  o << "<title>" << escape(heading) << "</title>\n";
  o << "<path d=\"M0 0 h" << num(kWidth) << " v" << num(page.height) << " h-" << num(kWidth)
    << " z\" fill=\"#fff\"/>\n";
  o << "<text x=\"" << num(kMargin) << "\" y=\"26\" font-size=\"16\">" << escape(heading) << "</text>\n";

  o << "<g class=\"legend\">\n";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const Page::Point e = page.entries[i];
    o << "<line x1=\"" << num(e.x) << "\" y1=\"" << num(e.y - 4) << "\" x2=\"" << num(e.x + 24) << "\" y2=\""
      << num(e.y - 4) << "\" stroke=\"" << run_colour(i) << "\" stroke-width=\"3\"/>\n";
    o << "<text class=\"run-label\" data-run=\"" << i << "\" x=\"" << num(e.x + 30) << "\" y=\"" << num(e.y)
      << "\" fill=\"" << run_colour(i) << "\" font-weight=\"bold\">" << escape(runs[i].label) << "</text>\n";
    o << "<text x=\"" << num(e.x + 30 + text_width(runs[i].label, 6.8) + 8) << "\" y=\"" << num(e.y)
      << "\" fill=\"#555\" font-size=\"10\">" << escape(summary(runs[i])) << "</text>\n";
  }
  o << "<text x=\"" << num(page.key_at.x) << "\" y=\"" << num(page.key_at.y) << "\" fill=\"#555\" font-size=\"10\">"
    << kLegendKey << "</text>\n";
  o << "</g>\n";
}

// Loss: training solid, validation dashed, with a marker per validation when they are few.
void draw_loss_panel(std::ostringstream& o, const std::vector<PlotRun>& runs, const Axis& x, const Box& box) {
  const Axis y = value_axis(runs, kLoss, true);
  draw_frame(o, box, x, y, kLoss.key, kLoss.title);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const PlotRun& r = runs[i];
    const std::string colour = run_colour(i);
    PathBuilder train;
    for (const TrainPoint& p : r.train) {
      train.add(px_of(x, static_cast<double>(p.iteration), box), py_of(y, p.lm_loss, box));
    }
    open_series(o, i, "lm_loss", colour, false);
    o << train.finish();
    close_series(o, r.label, "training loss");
    PathBuilder valid;
    for (const ValidPoint& p : r.valid) {
      valid.add(px_of(x, static_cast<double>(p.iteration), box), py_of(y, p.lm_loss, box));
    }
    open_series(o, i, "validation_lm_loss", colour, true);
    o << valid.finish();
    close_series(o, r.label, "validation loss");
    if (r.valid.size() > static_cast<std::size_t>(kMaxMarkers)) continue;
    o << "<g class=\"markers\" data-run=\"" << i << "\" fill=\"#fff\" stroke=\"" << colour
      << "\" stroke-width=\"1.5\">\n";
    for (const ValidPoint& p : r.valid) {
      const double py = py_of(y, p.lm_loss, box);
      if (!std::isfinite(py)) continue;
      o << "<circle cx=\"" << num(px_of(x, static_cast<double>(p.iteration), box)) << "\" cy=\"" << num(py)
        << "\" r=\"3\"><title>" << escape(r.label) << ": validation loss " << short_value(p.lm_loss)
        << " at iteration " << p.iteration << "</title></circle>\n";
    }
    o << "</g>\n";
  }
}

// One of the other quantities, a curve per run.
void draw_small_panel(std::ostringstream& o, const std::vector<PlotRun>& runs, const Axis& x, const Series& s,
                      const Box& b) {
  const Axis y = value_axis(runs, s, false);
  draw_frame(o, b, x, y, s.key, s.title);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    PathBuilder path;
    for (const TrainPoint& p : runs[i].train) {
      path.add(px_of(x, static_cast<double>(p.iteration), b), py_of(y, p.*s.field, b));
    }
    open_series(o, i, s.key, run_colour(i), false);
    o << path.finish();
    close_series(o, runs[i].label, s.title);
  }
}

// A curve of `value` of every point of `run`.
template <typename Value>
std::string curve(const PlotRun& run, const Axis& x, const Axis& y, const Box& b, Value value) {
  PathBuilder path;
  for (const TrainPoint& p : run.train) path.add(px_of(x, static_cast<double>(p.iteration), b), py_of(y, value(p), b));
  return path.finish();
}

// The MoE losses as Megatron logs them: load_balancing_loss solid, z_loss dashed.
void draw_moe_loss_panel(std::ostringstream& o, const std::vector<PlotRun>& runs, const Axis& x, const Box& b) {
  Range r;
  for (const PlotRun& run : runs) {
    for (const TrainPoint& p : run.train) {
      r.add(p.load_balancing_loss);
      r.add(p.z_loss);
    }
  }
  const Axis y = linear_axis(r, 5, false);
  draw_frame(o, b, x, y, "moe_loss", "MoE losses (z_loss dashed)");
  for (std::size_t i = 0; i < runs.size(); ++i) {
    open_series(o, i, "load_balancing_loss", run_colour(i), false);
    o << curve(runs[i], x, y, b, [](const TrainPoint& p) { return p.load_balancing_loss; });
    close_series(o, runs[i].label, "load_balancing_loss");
    open_series(o, i, "z_loss", run_colour(i), true);
    o << curve(runs[i], x, y, b, [](const TrainPoint& p) { return p.z_loss; });
    close_series(o, runs[i].label, "z_loss");
  }
}

// Layer `layer`'s fewest (or most) tokens per expert at point p; NaN where it has none.
double load_of(const TrainPoint& p, int layer, bool most) {
  for (const ExpertLoadPoint& l : p.expert_load)
    if (l.layer == layer) return most ? l.max_tokens : l.min_tokens;
  return kNaN;
}

// Every MoE layer's expert load: the most tokens per expert solid, the fewest dashed.
void draw_expert_load_panel(std::ostringstream& o, const std::vector<PlotRun>& runs, const Axis& x, const Box& b) {
  Range r;
  std::set<int> layers;
  for (const PlotRun& run : runs) {
    for (const TrainPoint& p : run.train) {
      for (const ExpertLoadPoint& l : p.expert_load) {
        layers.insert(l.layer);
        r.add(l.min_tokens);
        r.add(l.max_tokens);
      }
    }
  }
  const Axis y = linear_axis(r, 5, true);
  draw_frame(o, b, x, y, "expert_load", "tokens per expert, each MoE layer (fewest dashed)");
  for (std::size_t i = 0; i < runs.size(); ++i) {
    for (int layer : layers) {
      for (const bool most : {true, false}) {
        const std::string key = str_cat("expert_load_", most ? "max" : "min", "_layer_", layer);
        const std::string what = str_cat(most ? "most" : "fewest", " tokens per expert of layer ", layer);
        open_series(o, i, key.c_str(), run_colour(i), !most);
        o << curve(runs[i], x, y, b, [&](const TrainPoint& p) { return load_of(p, layer, most); });
        close_series(o, runs[i].label, what.c_str());
      }
    }
  }
}

// The MoE fields of a JSON line into p (absent for a dense run: p keeps its NaNs and no loads).
void read_moe_fields(const nlohmann::json& j, TrainPoint& p) {
  p.load_balancing_loss = number_or_nan(j, "load_balancing_loss");
  p.z_loss = number_or_nan(j, "z_loss");
  const auto loads = j.find("moe_expert_load");
  if (loads == j.end() || !loads->is_array()) return;
  for (const nlohmann::json& l : *loads) {
    if (!l.is_object() || !l.contains("layer") || !l["layer"].is_number_integer()) continue;
    p.expert_load.push_back({l["layer"].get<int>(), number_or_nan(l, "min"), number_or_nan(l, "max")});
  }
}

}  // namespace

// ------------------------------------------------------------------------------------------

std::string training_plot_svg(const std::vector<PlotRun>& input, const std::string& title) {
  std::vector<PlotRun> runs;
  runs.reserve(input.size());
  for (const PlotRun& r : input) runs.push_back({r.label, sorted(r.train), sorted(r.valid)});
  // The shared iteration axis.
  Range xr;
  for (const PlotRun& r : runs) {
    for (const TrainPoint& p : r.train) xr.add(static_cast<double>(p.iteration));
    for (const ValidPoint& p : r.valid) xr.add(static_cast<double>(p.iteration));
  }
  const Axis x = linear_axis(xr, 8, true);
  const Page page = lay_out_page(runs);
  std::ostringstream o;
  draw_heading(o, runs, page, title);
  draw_loss_panel(o, runs, x, page.loss);
  for (int k = 0; k < 4; ++k) draw_small_panel(o, runs, x, kSmall[k], page.small[k]);
  if (page.moe) {
    draw_moe_loss_panel(o, runs, x, page.moe_panels[0]);
    draw_expert_load_panel(o, runs, x, page.moe_panels[1]);
  }
  o << "</svg>\n";
  return o.str();
}

PlotRun read_training_log(const std::string& jsonl_path) {
  PTDP_CHECK_ARG(!jsonl_path.empty(), "the training log's path is empty");
  const std::string text = read_regular_file(jsonl_path, "training log", kMaxIndexFileBytes);
  PlotRun run;
  run.label = fs::path(jsonl_path).filename().string();
  if (run.label.empty()) run.label = jsonl_path;

  std::size_t line_no = 0;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = text.find('\n', at);
    const bool terminated = end != std::string::npos;
    if (!terminated) end = text.size();
    std::string line = text.substr(at, end - at);
    at = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;

    nlohmann::json j;
    std::size_t column = 0, unused = 0;
    if (!parse_json(line, j, column) && !parse_json(nonfinite_words_to_null(line), j, unused)) {
      if (!terminated) break;  // the writer's line in progress
      throw_io_error(jsonl_path, str_cat("line ", line_no, " is not JSON (column ", column, "): ", excerpt(line)));
    }
    if (!j.is_object()) {
      throw_io_error(jsonl_path, str_cat("line ", line_no, " is not a JSON object: ", excerpt(line)));
    }
    if (j.contains("iteration")) {
      TrainPoint p;
      p.iteration = iteration_of(j, "iteration", jsonl_path, line_no);
      p.lm_loss = number_or_nan(j, "lm_loss");
      p.learning_rate = number_or_nan(j, "learning_rate");
      p.grad_norm = number_or_nan(j, "grad_norm");
      if (p.grad_norm < 0) p.grad_norm = kNaN;  // the loop's -1: not finite
      p.loss_scale = number_or_nan(j, "loss_scale");
      p.tokens_per_second = number_or_nan(j, "tokens_per_second");
      read_moe_fields(j, p);
      if (!run.train.empty() && p.iteration <= run.train.back().iteration) {
        // A resumed run: what it repeats supersedes the records of the interrupted one.
        const int64_t from = p.iteration;
        while (!run.train.empty() && run.train.back().iteration >= from) run.train.pop_back();
        while (!run.valid.empty() && run.valid.back().iteration >= from) run.valid.pop_back();
      }
      run.train.push_back(p);
    } else if (j.contains("validation_iteration")) {
      ValidPoint p;
      p.iteration = iteration_of(j, "validation_iteration", jsonl_path, line_no);
      p.lm_loss = number_or_nan(j, "lm_loss");
      while (!run.valid.empty() && run.valid.back().iteration >= p.iteration) run.valid.pop_back();
      run.valid.push_back(p);
    }
  }
  return run;
}

void write_training_plot(const std::vector<PlotRun>& runs, const std::string& title, const std::string& svg_path) {
  PTDP_CHECK_ARG(!svg_path.empty(), "the plot's SVG path is empty");
  const std::string svg = training_plot_svg(runs, title);
  try {
    write_file_atomic(svg_path, svg);
  } catch (const Error& e) {
    throw_io_error(svg_path, str_cat("cannot write the plot: ", e.what()));
  }
}

void plot_training_logs(const std::vector<std::string>& jsonl_paths, const std::vector<std::string>& labels,
                        const std::string& title, const std::string& svg_path) {
  PTDP_CHECK_ARG(!jsonl_paths.empty(), "no training log to plot");
  PTDP_CHECK_ARG(labels.empty() || labels.size() == jsonl_paths.size(),
                 str_cat(labels.size(), " labels for ", jsonl_paths.size(), " logs: give one per log or none"));
  PTDP_CHECK_ARG(!svg_path.empty(), "the plot's SVG path is empty");
  for (std::size_t i = 0; i < jsonl_paths.size(); ++i) {
    const std::string& p = jsonl_paths[i];
    PTDP_CHECK_ARG(!p.empty(), str_cat("the path of log ", i, " is empty"));
    std::error_code ec;
    const bool same = fs::path(p).lexically_normal() == fs::path(svg_path).lexically_normal() ||
                      fs::equivalent(p, svg_path, ec);
    PTDP_CHECK_ARG(!same, str_cat("the SVG path '", svg_path, "' is the training log '", p, "' (log ", i,
                                  "): drawing would overwrite it"));
  }

  std::vector<PlotRun> runs;
  runs.reserve(jsonl_paths.size());
  std::map<std::string, int> names;
  for (const std::string& p : jsonl_paths) runs.push_back(read_training_log(p));
  for (const PlotRun& r : runs) ++names[r.label];
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (!labels.empty() && !labels[i].empty()) {
      runs[i].label = labels[i];
    } else if (names[runs[i].label] > 1) {
      runs[i].label = jsonl_paths[i];
    }
  }
  write_training_plot(runs, title, svg_path);
}

}  // namespace ptdp
