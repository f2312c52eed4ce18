// A global batch through a GPT's pipeline chunks: forward and backward over a schedule (the
// executor driving the chunks' stage passes), and the forward-only pass of evaluation.
#pragma once

#include <functional>

#include "core/model/gpt_pipeline.h"
#include "core/pipeline/executor.h"

namespace ptdp {

/// How a training step reports to the optimizer.
struct TrainHooks {
  /// Global index of the replica's first microbatch (keys dropout masks): the data-parallel
  /// rank times m, so every layout draws the serial run's masks.
  int64_t microbatch_offset = 0;
  /// Multiplies every gradient (the loss scale).
  float grad_scale = 1.0f;
  /// Parameters [first, end) of local chunk j have their final gradients for the step.
  std::function<void(int j, int first, int end)> params_ready;
};

/// Forward and backward of one global batch through `schedule` (whose p and v must match the
/// model's): m microbatches of b samples, tokens and labels [m * b, seq_length] row-major in
/// host memory, the same on every rank of a pipeline (labels may be kIgnoreIndex); `layout`
/// (the same shape) gives positions and documents, read by every chunk. Gradients of the loss
/// accumulate (no optimizer step); the tied-embedding gradients are summed over the embedding
/// group. The loss is the mean of the m microbatches' masked means (core/model/gpt.h), each
/// microbatch's gradient scaled by grad_scale / m. Returns it on every rank of the pipeline.
float forward_backward(GptPipeline& model, const Schedule& schedule, const int32_t* tokens, const int32_t* labels,
                       int64_t b, int64_t iteration, const ExecutorOptions& options = {},
                       const TrainHooks& hooks = {}, const DocumentLayout& layout = {});

/// Forward-only evaluation of m microbatches of b samples (tokens, labels and layout as for
/// forward_backward) through the forward-only schedule: dropout off, nothing kept, gradients
/// untouched. Returns the mean of the microbatches' masked mean losses over the replica's batch,
/// averaged over the data-parallel group, on every rank (collective over the model's world).
float evaluate(GptPipeline& model, const int32_t* tokens, const int32_t* labels, int64_t b, int m,
               const DocumentLayout& layout = {});

}  // namespace ptdp
