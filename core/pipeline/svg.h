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

}  // namespace ptdp
