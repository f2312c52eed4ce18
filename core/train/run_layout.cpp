#include "core/train/run_layout.h"

#include <string>

#include "base/error.h"

namespace ptdp {

RunLayout run_layout(const TrainArgs& args, int world) {
  RunLayout L;
  L.world = world;
  L.t = args.tensor_model_parallel_size;
  L.p = args.pipeline_model_parallel_size;
  L.v = virtual_pipeline_size(args);
  L.c = args.context_parallel_size;
  const int64_t model_ranks = static_cast<int64_t>(L.t) * L.p * L.c;  // int64: the flags are checked, not bounded
  if (world % model_ranks != 0) {
    throw_error(ErrorCode::InvalidArgument,
                "the world of " + std::to_string(world) + " ranks is not a multiple of --tensor-model-parallel-size " +
                    std::to_string(L.t) + " x --pipeline-model-parallel-size " + std::to_string(L.p) +
                    (L.c > 1 ? " x --context-parallel-size " + std::to_string(L.c) : std::string()));
  }
  L.d = static_cast<int>(world / model_ranks);
  L.b = args.micro_batch_size;
  L.global_batch = args.global_batch_size > 0 ? args.global_batch_size : static_cast<int64_t>(L.b) * L.d;
  if (L.global_batch % (static_cast<int64_t>(L.b) * L.d) != 0) {
    throw_error(ErrorCode::InvalidArgument, "--global-batch-size " + std::to_string(L.global_batch) +
                                                " is not a multiple of --micro-batch-size " + std::to_string(L.b) +
                                                " x data-parallel size " + std::to_string(L.d));
  }
  L.m = static_cast<int>(L.global_batch / (static_cast<int64_t>(L.b) * L.d));
  return L;
}

}  // namespace ptdp
