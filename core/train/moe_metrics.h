// The mixture-of-experts bookkeeping of one training iteration, after the optimizer step
// (Megatron-Core's _update_router_expert_bias and track_moe_metrics):
//
//   load       per MoE layer, the (token, expert) pairs each expert kept over the global batch:
//              the routers' counts of every microbatch, summed over the stage's tensor, context
//              and data ranks (each holds distinct tokens: MoE with t > 1 runs sequence
//              parallelism), so every layout sees the serial run's counts.
//   bias       with --moe-router-enable-expert-bias, every rank of the stage moves the layer's
//              expert_bias by rate * sign(mean load - load) (aux-loss-free balancing, Megatron's
//              get_updated_expert_bias), on the fp32 masters and the model weights alike; the
//              counts being the same everywhere, so is the bias. Megatron updates it once per
//              global batch whether or not the step was skipped, and so does this.
//   losses     load_balancing_loss (aux_loss, seq_aux_loss or global_aux_loss over its
//              coefficient) and z_loss (over its coefficient) as Megatron logs them: per layer the
//              mean over the global batch's microbatches (global_aux_loss: summed over the d
//              replicas, whose values each span all d, then the mean over a replica's
//              microbatches), then the mean over the MoE layers.
//
// The layers of other pipeline stages are gathered over the pipeline group, so every rank
// returns the whole model's figures.
#pragma once

#include <cstdint>

#include "core/model/gpt_pipeline.h"
#include "core/train/iteration_metrics.h"

namespace ptdp {

/// After the optimizer step of an iteration of `microbatches` microbatches per replica: the
/// loads, the expert-bias update and the losses (see the top of this file); clears the routers'
/// statistics. Collective over the world (nothing is communicated for a dense model).
MoeMetrics finish_moe_iteration(GptPipeline& model, ProcessGroups& groups, int64_t microbatches);

}  // namespace ptdp
