// Refusing a run that would not fit, before it allocates: the planner's per-rank memory model
// (core/plan: parameters, gradients, optimizer state, activations of the schedule's in-flight
// microbatches) for the run's real layout, against the memory this rank can have (CPU: the
// node's available memory, or its cgroup's limit if lower, shared by the ranks on the node;
// CUDA: the device's free memory). Set PTDP_MEMORY_CHECK=0 to run anyway.
#pragma once

#include <string>

#include "core/model/gpt_config.h"
#include "core/parallel/groups.h"
#include "core/train/training_loop.h"

namespace ptdp::capi {

/// Bytes one rank will need, by item (the most loaded pipeline stage).
struct MemoryNeed {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0;
  double total() const { return weights + gradients + optimizer + activations; }
};

/// The planner's estimate for `shape`; false when the planner cannot model the layout.
bool estimate_run_memory(const RunShape& shape, MemoryNeed* need);

/// Bytes this rank can use on `device` with `local_size` ranks sharing the node, and in `source`
/// where the figure comes from; a negative value when it cannot be told.
double available_memory_bytes(const Device& device, int local_size, std::string* source);

/// Whether PTDP_MEMORY_CHECK leaves the check on (unset, or anything but "0", "off", "false").
bool memory_check_enabled();

/// Throws Error(OutOfMemory) with the estimate, its biggest items and the limit when the run
/// does not fit (TrainingLoopHooks::before_allocation of ptdp_train_main and ptdp_trainer_create).
void refuse_run_that_does_not_fit(const RunShape& shape);

/// The same for a model alone (ptdp_model_create): this rank's parameters and gradients
/// (and fp32 masters for 16-bit weights) of `config` on `groups`, against the memory available
/// on `device`. Throws Error(OutOfMemory) naming the sizes when they do not fit.
void refuse_model_that_does_not_fit(const GptConfig& config, const ProcessGroups& groups, const Device& device,
                                    int local_size);

}  // namespace ptdp::capi
