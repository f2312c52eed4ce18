// Refusing a run that would not fit, before it allocates: the planner's per-rank memory model
// (core/plan: parameters, gradients, optimizer state, activations of the schedule's in-flight
// microbatches) for the run's real layout, against the memory this rank can have (CPU: the
// node's available memory, or its cgroup's limit if lower, shared by the ranks on the node;
// CUDA: the device's free memory). The training loop checks every run this way; the C API
// checks a model alone (ptdp_model_create). Set PTDP_MEMORY_CHECK=0 to run anyway.
#pragma once

#include <optional>
#include <string>

#include "core/args/train_args.h"
#include "core/model/gpt_config.h"
#include "core/parallel/groups.h"
#include "core/tensor/tensor.h"
#include "core/train/run_layout.h"

namespace ptdp {

/// Bytes one rank will need, by item (the most loaded pipeline stage).
struct MemoryNeed {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0;
  double total() const { return weights + gradients + optimizer + activations; }
};

/// The planner's estimate for a run of `args` laid out as `layout` on `device`; nullopt for a
/// layout the planner does not model (the model's own checks then refuse it by its flags, or it
/// runs unchecked), with the planner's reason in `why_not` (may be null).
std::optional<MemoryNeed> estimate_run_memory(const TrainArgs& args, const RunLayout& layout, const Device& device,
                                              std::string* why_not = nullptr);

/// Bytes this rank can use on `device` with `local_size` ranks sharing the node, and in `source`
/// where the figure comes from; a negative value when it cannot be told.
double available_memory_bytes(const Device& device, int local_size, std::string* source);

/// Whether PTDP_MEMORY_CHECK leaves the check on (unset, or anything but "0", "off", "false").
bool memory_check_enabled();

/// Throws Error(OutOfMemory) with the estimate, its biggest items and the limit when a run of
/// `args` laid out as `layout` on `device`, with `local_size` ranks sharing the node, does not
/// fit (the training loop, before it allocates anything).
void refuse_run_that_does_not_fit(const TrainArgs& args, const RunLayout& layout, const Device& device,
                                  int local_size);

/// The same for a model alone (ptdp_model_create): this rank's parameters and gradients
/// (and fp32 masters for 16-bit weights) of `config` on `groups`, against the memory available
/// on `device`. Throws Error(OutOfMemory) naming the sizes when they do not fit.
void refuse_model_that_does_not_fit(const GptConfig& config, const ProcessGroups& groups, const Device& device,
                                    int local_size);

}  // namespace ptdp
