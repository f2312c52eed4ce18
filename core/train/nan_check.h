// --check-for-nan-in-loss-and-grad (Megatron's flag): after the backward every rank checks its
// local loss and each of its parameters' gradients before the data-parallel reduction, agrees
// with the others on the first non-finite value (one small all-reduce), and every rank stops
// with one message naming the global rank, its (tensor, data, pipeline) coordinates, the
// iteration and the parameter; after the reduction the global gradient norm is checked too.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/model/gpt_pipeline.h"
#include "core/optim/optimizer.h"
#include "core/parallel/groups.h"
#include "core/train/failure_agreement.h"
#include "core/train/training_hooks.h"

namespace ptdp {

class NonFiniteCheck {
 public:
  /// `dynamic_loss_scale`: an infinite gradient is the loss scaler's overflow signal (the step
  /// is skipped and the scale backs off), so only NaN gradients are findings then (as Megatron).
  /// The run stops through `failures` (every rank alike).
  NonFiniteCheck(GptPipeline& model, ProcessGroups& groups, bool dynamic_loss_scale, FailureAgreement& failures);

  /// Forgets the last iteration's findings; `iteration` is 1-based (the log line's count).
  void begin(int64_t iteration);
  /// Parameters [first, end) of local chunk j have their final local gradients (before the
  /// data-parallel reduction): records the first non-finite one in parameter-table order.
  void check_grads(int j, int first, int end);
  /// This rank's copy of the loss after the backward (before the replicas' average).
  void check_loss(float loss);
  /// Collective over the world: when any rank found a non-finite value every rank throws
  /// RunStopped(kExitNonFinite) with the message of the lowest finding (a loss on the last
  /// stage before anything else, then by global rank).
  void agree();
  /// After the data-parallel reduction: a non-finite global gradient norm (without dynamic loss
  /// scaling) that no rank saw locally. The same on every rank; throws RunStopped.
  void check_after_reduction(const OptimizerStepResult& step);

 private:
  std::string where() const;
  GptPipeline& model_;
  ProcessGroups& groups_;
  bool dynamic_;
  FailureAgreement& failures_;
  int64_t iteration_ = 0;
  // The first finding of this iteration on this rank: category 0 the loss on the last stage,
  // 1 the loss elsewhere, 2 a gradient (then chunk and index in table order); -1 none.
  int category_ = -1;
  int chunk_ = 0, index_ = 0;
  std::string what_;
};

/// The check at its points of an iteration: begin before it, the gradients as they become final,
/// the loss after the backward, the agreement before the optimizer step, the norm after it.
TrainingHooks non_finite_check_hooks(std::shared_ptr<NonFiniteCheck> check);

}  // namespace ptdp
