// Small helpers shared by the library's SVG drawings: the pipeline schedules
// (core/pipeline/svg), the training curves (core/train/plot) and the planner's pictures.
#pragma once

#include <string>

namespace ptdp {

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
