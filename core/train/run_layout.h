// The layout a training run's flags give on a world of ranks: the tensor, pipeline (and virtual
// stage), context and data-parallel sizes and how the global batch is cut into microbatches.
#pragma once

#include <cstdint>

#include "core/args/train_args.h"

namespace ptdp {

struct RunLayout {
  int world = 1;
  int t = 1, p = 1, v = 1, c = 1, d = 1;
  int b = 1;  ///< micro-batch size
  int m = 1;  ///< microbatches per pipeline and iteration
  int64_t global_batch = 0;
};

/// d = world / (t p c), the global batch (--global-batch-size, else b d) and m = global batch /
/// (b d). Throws Error(InvalidArgument) naming the flags when the world is not a multiple of
/// t p c or the global batch not a multiple of b d. The same on every rank.
RunLayout run_layout(const TrainArgs& args, int world);

}  // namespace ptdp
