// The executor: runs one pipeline rank's action list on its model chunks. Consecutive
// communication actions go out as one batched send/recv; with t > 1 the scatter/gather
// optimisation sends each tensor rank's 1/t of a stage-boundary tensor (they all hold the
// same one) and the receiving stage re-assembles it with an all-gather inside the tensor group.
#pragma once

#include <map>
#include <utility>

#include "core/parallel/tensor_parallel.h"
#include "core/pipeline/schedule.h"
#include "core/pipeline/trace.h"

namespace ptdp {

/// What the executor drives on one pipeline rank: the model chunks this rank holds.
class PipelineStages {
 public:
  virtual ~PipelineStages() = default;
  /// Shape of the tensor chunk `chunk` receives from chunk - 1 (and of the gradient it sends
  /// back) for `microbatch`.
  virtual Shape input_shape(int chunk, int microbatch) = 0;
  /// Forward of (chunk, microbatch). `input` is undefined for chunk 0. The result of the last
  /// chunk is not sent anywhere and may be undefined.
  virtual Tensor forward(int chunk, int microbatch, const Tensor& input) = 0;
  /// Input gradient of (chunk, microbatch) from `grad_output` (undefined for the last chunk,
  /// which starts from its loss). The result of chunk 0 is ignored and may be undefined.
  virtual Tensor backward_input(int chunk, int microbatch, const Tensor& grad_output) = 0;
  /// Weight gradients of (chunk, microbatch), after its backward_input.
  virtual void backward_weight(int chunk, int microbatch) = 0;
  /// Where received activations and gradients are placed (the chunks' device).
  virtual Device device() { return {}; }
  /// Element type of the activations and gradients the stages exchange.
  virtual DType activation_dtype() { return DType::F32; }
};

struct ExecutorOptions {
  /// Send 1/t of each stage-boundary tensor per tensor rank and all-gather on arrival (t > 1).
  bool scatter_gather = true;
  /// Records a span per action when set.
  TraceRecorder* trace = nullptr;
};

/// Runs rank `rank`'s actions of `schedule`. `pipeline` is the pipeline group's communicator
/// (group rank = pipeline rank); it may be null when p == 1. Throws on a schedule whose actions
/// are inconsistent for this rank (an input that never arrived), naming the action.
void run_schedule(const Schedule& schedule, int rank, PipelineStages& stages, Communicator* pipeline,
                  const TensorParallel& tp, const ExecutorOptions& options = {});

}  // namespace ptdp
