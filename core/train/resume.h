// Where a training run starts (--load, Megatron's): from the latest checkpoint of the folder
// when it holds one, going on with its iteration and data position unless --finetune takes its
// parameters only; resuming with flags that would change the training trajectory is refused.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/args/train_args.h"
#include "core/checkpoint/checkpoint.h"

namespace ptdp {

/// Loads --load's latest checkpoint into `model` and (without --finetune) `optimizer`, and
/// returns the iteration and samples consumed the run goes on from (zeros for a new run, with
/// --finetune, or when the folder holds no checkpoint yet). `flags` are this run's
/// (train_args_to_json), compared with the checkpoint's: a change of a flag that alters the
/// trajectory is refused with Error(InvalidArgument) naming each such flag and both values,
/// unless --override-resume-check. The logging rank's `log` (null elsewhere) gets a line saying
/// what was loaded. Collective over the world; its failures are every rank's.
CheckpointState resume_from_checkpoint(const TrainArgs& args, GptPipeline& model, Optimizer& optimizer,
                                       const nlohmann::json& flags, std::FILE* log);

}  // namespace ptdp
