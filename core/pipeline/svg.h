// A schedule's timeline as a standalone SVG picture in the style of the papers' schedule
// figures: one row per pipeline rank, one box per compute action labelled with its microbatch.
#pragma once

#include <string>

#include "core/pipeline/schedule.h"
#include "core/pipeline/simulator.h"

namespace ptdp {

/// The SVG document (with its XML declaration) drawing `sim`, a simulation of `s`. Forward,
/// full backward, input-gradient backward (B) and weight-gradient backward (W) boxes have
/// different hues; higher chunks of a rank are drawn lighter. Every compute action is exactly
/// one <rect> (with a <title> giving its name and times); the legend, axis and grid use other
/// elements, so counting <rect> elements counts boxes.
std::string schedule_svg(const Schedule& s, const SimulationResult& sim);

/// Simulates `s` with `costs` and writes schedule_svg() to `path`. Throws what simulate()
/// throws, and Error(Io) naming the path when the file cannot be written.
void write_schedule_svg(const Schedule& s, const ScheduleCosts& costs, const std::string& path);

/// Small helpers shared by the library's SVG drawings (this file's schedules and
/// core/train/plot's training curves).
namespace svg {

/// `text` made safe for XML text and attribute values: & < > " escaped, control characters
/// other than tab and newline dropped, and bytes that are not UTF-8 replaced by U+FFFD, so that
/// a file name or label of any bytes still gives a document browsers accept.
std::string escape(const std::string& text);
/// A coordinate with two decimals ("12.50").
std::string num(double x);
/// #rrggbb of the HSL colour (h in degrees, s and l in [0, 1]): SVG 1.1 viewers need not
/// understand hsl().
std::string hsl_hex(double h, double s, double l);
/// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `ticks` ticks over `span`
/// (> 0).
double tick_step(double span, int ticks);

}  // namespace svg

}  // namespace ptdp
