// GptPipeline: this rank's share of a GPT laid out over tensor, pipeline and virtual
// (interleaved) stages, and one training step of a global batch through a pipeline schedule.
// Chunks are assigned round-robin (chunk c on pipeline rank c % p); with tied embeddings the
// first and last stages each hold the word embedding and their gradients are summed over the
// embedding group after the backward passes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/model/gpt.h"
#include "core/parallel/groups.h"
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

class GptPipeline {
 public:
  /// v = groups.layout().virtual_stages() chunks per pipeline rank; the layers must split
  /// evenly over p * v chunks (else Error(InvalidArgument) naming layers, p and v).
  /// The chunks' parameters and activations live on `device` (CPU by default).
  GptPipeline(const GptConfig& cfg, ProcessGroups& groups, Device device = {});

  const GptConfig& config() const { return cfg_; }
  int pipeline_size() const { return p_; }
  int virtual_stages() const { return v_; }
  /// This rank's chunks, in order of their global chunk index (chunk j is c = j * p + rank).
  std::vector<std::unique_ptr<GptModel>>& chunks() { return chunks_; }
  int chunk_index(int j) const { return j * p_ + pp_rank_; }
  const TensorParallel& tensor_parallel() const { return tp_; }

  /// One global batch through `schedule` (whose p and v must match): m microbatches of b
  /// samples, tokens and labels [m * b, seq_length] row-major in host memory, the same on every
  /// rank of a pipeline. Gradients of the mean loss accumulate; the tied-embedding gradients are
  /// summed over the embedding group. Returns the mean loss, on every rank.
  float train_step(const Schedule& schedule, const int32_t* tokens, const int32_t* labels, int64_t b,
                   int64_t iteration, const ExecutorOptions& options, const struct TrainHooks& hooks);
  float train_step(const Schedule& schedule, const int32_t* tokens, const int32_t* labels, int64_t b,
                   int64_t iteration, const ExecutorOptions& options);
  /// Forward-only evaluation of m microbatches of b samples (tokens and labels as for
  /// train_step): dropout off, nothing kept, gradients untouched. Every rank of the pipeline
  /// runs microbatch after microbatch through its chunks. Returns the mean loss over the
  /// replica's batch averaged over the data-parallel group, on every rank (collective over the
  /// model's world).
  float evaluate(const int32_t* tokens, const int32_t* labels, int64_t b, int m);
  ProcessGroups& groups() { return groups_; }
  Device device() const { return device_; }

  /// Index of the tied word embedding in local chunk j's table (both stages' copies with
  /// p > 1), or -1.
  int tied_embedding(int j) const;
  void zero_grads();

  /// Every parameter of the whole model in model order (names unique; the last stage's copy of
  /// a tied word embedding is not listed), whichever rank holds it.
  const std::vector<ParamInfo>& all_params() const { return all_params_; }
  /// Global-shape value (or gradient) of a parameter; collective over the model-parallel group
  /// (the holding stage gathers over its tensor group and broadcasts along the pipeline).
  void get_global(const std::string& name, bool gradient, float* host);
  /// Sets a parameter from its global-shape value on every stage holding it (both copies of a
  /// tied embedding). No communication.
  void set_global(const std::string& name, const float* host);

 private:
  int owner_chunk(const std::string& name) const;

  GptConfig cfg_;
  ProcessGroups& groups_;
  Device device_;
  TensorParallel tp_;
  int p_, v_, pp_rank_, layers_per_chunk_;
  std::vector<std::unique_ptr<GptModel>> chunks_;
  std::vector<ParamInfo> all_params_;
};

}  // namespace ptdp
