// A global batch through a GPT's pipeline chunks: forward and backward over a schedule (the
// executor driving the chunks' stage passes), then what the model's gradients need before the
// optimizer (finalize_model_grads); and the forward-only pass of evaluation. pipeline/ runs the
// schedule and knows no model: what is GPT-specific about a step is here.
#pragma once

#include <functional>

#include "core/model/gpt_pipeline.h"
#include "core/pipeline/executor.h"

namespace ptdp {

/// What differs between the data-parallel replicas' forward-backward of one global batch.
struct ReplicaSettings {
  /// Global index of the replica's first microbatch (keys dropout masks): the data-parallel
  /// rank times m, so every layout draws the serial run's masks.
  int64_t microbatch_offset = 0;
  /// Multiplies every gradient (the loss scale).
  float grad_scale = 1.0f;
};

/// Parameters [first, end) of local chunk `chunk` have their final gradients for the step (the
/// optimizer starts their data-parallel reduction).
using GradsReady = std::function<void(int chunk, int first, int end)>;

/// Forward and backward of one global batch through `schedule` (whose p and v must match the
/// model's): m microbatches of b samples, tokens and labels [m * b, seq_length] row-major in
/// host memory, the same on every rank of a pipeline (labels may be kIgnoreIndex); `layout`
/// (the same shape) gives positions and documents, read by every chunk. Gradients of the loss
/// accumulate (no optimizer step), each microbatch's scaled by grad_scale / m; after the
/// schedule, finalize_model_grads. The loss is the mean of the m microbatches' masked means
/// (core/model/gpt.h). Returns it on every rank of the pipeline. With multi-token prediction,
/// `mtp_losses` (if set) receives each depth's loss, the mean of its microbatch losses, on every
/// rank of the pipeline (the gradient carries them scaled, the returned loss does not).
float forward_backward(GptPipeline& model, const Schedule& schedule, const int32_t* tokens, const int32_t* labels,
                       int64_t b, int64_t iteration, const ExecutorOptions& options = {},
                       const ReplicaSettings& replica = {}, const DocumentLayout& layout = {},
                       const GradsReady& grads_ready = {}, std::vector<float>* mtp_losses = nullptr);

/// What the model's gradients need after the schedule and before the optimizer (Megatron's
/// finalize_model_grads): the tied word embedding's two copies summed, over the embedding group
/// (first and last pipeline stage), or on the first stage itself under the V placement, which
/// holds both; each summed copy is then reported to `grads_ready`. Collective over the
/// embedding group when the copies are on two stages.
void finalize_model_grads(GptPipeline& model, const GradsReady& grads_ready = {});

/// Forward-only evaluation of m microbatches of b samples (tokens, labels and layout as for
/// forward_backward) through the forward-only schedule: dropout off, nothing kept, gradients
/// untouched. Returns the mean of the microbatches' masked mean losses over the replica's batch,
/// averaged over the data-parallel group, on every rank (collective over the model's world).
float evaluate(GptPipeline& model, const int32_t* tokens, const int32_t* labels, int64_t b, int m,
               const DocumentLayout& layout = {});

}  // namespace ptdp
