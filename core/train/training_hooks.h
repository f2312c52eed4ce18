// The points of a training iteration where a caller, and the loop's own checks (fault injection,
// --check-for-nan-in-loss-and-grad), may act: one set of hooks, each named after when it runs.
// train_iteration runs the first five, the training loop adds the last two.
#pragma once

#include <cstdint>
#include <functional>

#include "core/optim/optimizer.h"
#include "core/train/iteration_metrics.h"

namespace ptdp {

/// Every member is optional and called on every rank, in this order within an iteration. A
/// hook may throw; a failure that is not every rank's alike ends the run on this rank alone.
struct TrainingHooks {
  /// After the iteration's batch is read, before its first forward and before its clock starts;
  /// `iteration` is 1-based (the log line's count).
  std::function<void(int64_t iteration)> before_iteration;
  /// During the backward: parameters [first, end) of local chunk `chunk` have their final local
  /// gradients, before their data-parallel reduction starts (may change them).
  std::function<void(int chunk, int first, int end)> on_grads_ready;
  /// After the backward, with this rank's loss before the replicas' average (may change it).
  std::function<void(float& loss)> after_backward;
  /// After the data-parallel gradient reduction, before the optimizer step (collective checks
  /// go here: nothing is in flight).
  std::function<void()> before_optimizer_step;
  /// After the optimizer step.
  std::function<void(const OptimizerStepResult& step)> after_optimizer_step;
  /// The training loop's checkpoint saves after `iteration`: runs `save` (once) in whatever
  /// conditions the hook sets up, such as a disk that fails this rank's writes.
  std::function<void(int64_t iteration, const std::function<void()>& save)> around_save;
  /// The training loop, after the iteration, its validation and its interval save. Returning
  /// true asks the run to stop: the ranks agree, save with --save, and TrainingLoop::run returns.
  std::function<bool(const IterationMetrics& metrics)> after_iteration;
};

/// The hooks of `first` then those of `second` at every point (a member is set when either
/// sets it, so an empty set adds no work). after_iteration calls both and asks to stop when
/// either does; around_save runs `second`'s inside `first`'s.
TrainingHooks chain(TrainingHooks first, TrainingHooks second);

}  // namespace ptdp
