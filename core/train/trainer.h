// One training iteration of full PTD-P: every microbatch of the replica's batch through the
// pipeline schedule, data-parallel gradient reduction overlapped with the backward, the tied
// embedding's reduction, then the optimizer step; the loss averaged over the replicas.
#pragma once

#include "core/optim/optimizer.h"
#include "core/train/forward_backward.h"
#include "core/train/moe_metrics.h"
#include "core/train/training_hooks.h"

namespace ptdp {

/// What train_iteration did: the global batch's loss, the optimizer's step and the time it took.
struct IterationOutcome {
  float loss = 0;  ///< mean over the global batch (every replica's microbatches)
  OptimizerStepResult step;
  double seconds = 0;            ///< wall time of the iteration on this rank
  double comm_wait_seconds = 0;  ///< of which blocked waiting on communication
  MoeMetrics moe;                ///< the MoE losses and expert loads (empty for a dense model)
  /// Each multi-token prediction depth's loss (mtp_1, ..., mtp_D), averaged as `loss` is;
  /// empty without MTP.
  std::vector<float> mtp_losses;
  /// Of `seconds`, the MoE token dispatchers' communication on this rank (moe_exchange_seconds(),
  /// core/layers/moe/token_dispatcher.h): 0 for a dense model.
  double moe_exchange_seconds = 0;
  /// QK-clip's per-layer figures (core/train/qk_clip.h); empty unless the optimizer is Muon with
  /// MuonConfig::qk_clip.
  QkClipMetrics qk_clip;
};

/// An optimizer over `model`'s chunks (the last stage's copy of a tied embedding is left out
/// of the norm: the first stage counts it).
std::unique_ptr<Optimizer> make_optimizer(GptPipeline& model, ProcessGroups& groups, const OptimizerConfig& config);

/// tokens and labels are this replica's [m * b, seq_length] (m = schedule.m microbatches), and
/// `layout` its positions and documents (labels of kIgnoreIndex and the layout as in
/// forward_backward). The loss is the mean of the microbatches' masked means over every
/// replica (each replica's mean averaged over the data-parallel group, as its gradients are):
/// the serial run's over the same global batch cut into the same microbatches. Runs `hooks`
/// from before_iteration (with iteration + 1) to after_optimizer_step; the time reported
/// starts after before_iteration. After the step, MoE models get their expert loads, losses and
/// expert-bias update (core/train/moe_metrics.h), and with Muon's QK-clip (MuonConfig::qk_clip,
/// Muon only, as in Megatron) the query and key weights of the heads whose largest logit
/// exceeded the threshold are rescaled (core/train/qk_clip.h; not after a skipped step).
IterationOutcome train_iteration(GptPipeline& model, Optimizer& optimizer, ProcessGroups& groups,
                                 const Schedule& schedule, const int32_t* tokens, const int32_t* labels, int64_t b,
                                 int64_t iteration, const ExecutorOptions& options = {},
                                 const DocumentLayout& layout = {}, const TrainingHooks& hooks = {});

}  // namespace ptdp
