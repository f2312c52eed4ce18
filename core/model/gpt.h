// GptModel: the decoder built from the tensor-parallel layers (the GPT-2 architecture, or with
// GptConfig's options a Llama-family model: RMSNorm, SwiGLU, RoPE instead of a position table,
// grouped-query attention, no biases, an untied output layer), or one pipeline chunk of it. Parameters are named and laid out as in Megatron-Core's GPT (DESIGN.md), live
// in one flat buffer per chunk with a table of named views, and start from a pure function of
// (seed, name, element index), so every tensor- and pipeline-parallel layout starts from the
// same full weights and draws the same dropout masks.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/layers/cross_entropy.h"
#include "core/layers/embedding.h"
#include "core/layers/kv_cache.h"
#include "core/layers/transformer_layer.h"
#include "core/model/gpt_config.h"
#include "core/params/params.h"

namespace ptdp {

/// Which part of the model a chunk holds.
struct GptStage {
  int first_layer = 0;
  int num_layers = -1;       ///< -1: every layer from first_layer on
  bool pre_process = true;   ///< word and position embeddings (the first chunk)
  bool post_process = true;  ///< final norm, LM head and loss (the last chunk)

  /// Chunk `chunk` of `chunks` equal chunks of the model; throws Error(InvalidArgument) naming
  /// the numbers when the layers do not split evenly.
  static GptStage chunk_of(const GptConfig& cfg, int chunk, int chunks, int p, int v);
};

class GptModel {
 public:
  /// Validates the config for tp.size and initialises the parameters from cfg.seed. With
  /// `materialize` false only the parameter table is built (names, shapes; no memory).
  GptModel(const GptConfig& cfg, TensorParallel tp, Device device = {}, GptStage stage = {},
           bool materialize = true);

  const GptConfig& config() const { return cfg_; }
  const GptStage& stage() const { return stage_; }
  ParamTable& params() { return params_; }
  const ParamTable& params() const { return params_; }
  int64_t padded_vocab() const { return padded_vocab_; }
  /// Index of the word embedding the loss ties to on a post-processing chunk without
  /// pre-processing (its copy is kept in step through the embedding group), else -1.
  int tied_head_weight() const;

  /// Forward and backward of one microbatch through the whole model (a chunk holding both
  /// ends). tokens and labels are [b, seq_length] i32 in host memory, row-major (batch-major,
  /// as data sets give them), values in [0, vocab_size). Returns the mean loss over the
  /// b * seq_length tokens; adds the gradients of mean loss * grad_scale.
  float forward_backward(const int32_t* tokens, const int32_t* labels, int64_t b, const Step& step,
                         float grad_scale = 1.0f);
  /// The mean loss only; nothing is kept (evaluation). Dropout follows step.training.
  float forward_loss(const int32_t* tokens, const int32_t* labels, int64_t b, const Step& step);

  /// Logits of the true vocabulary for every position (dropout off, nothing kept), gathered
  /// from the tensor ranks: host [b, seq_length, vocab_size] row-major. Needs the whole model;
  /// collective over the tensor group.
  std::vector<float> logits(const int32_t* tokens, int64_t b);
  /// Logits of the true vocabulary for `n` new tokens of one sequence that continue the
  /// `cache->length` tokens already in `cache` (their keys and values are appended; positions
  /// cache->length, ...): host [n, vocab_size]. Dropout off. Needs the whole model; collective
  /// over the tensor group. The cache's capacity must not exceed the position table (learned
  /// positions) and its length grows by n.
  std::vector<float> decode(const int32_t* tokens, int64_t n, KvCache& cache);

  // ---- one chunk of a pipeline -------------------------------------------------------------
  /// Forward of this chunk for one microbatch of b samples. `input` is the previous chunk's
  /// output [s*b, h] (ignored by a pre-processing chunk, which reads `tokens`); `labels` is
  /// read by a post-processing chunk. Returns [s*b, h], or the per-token losses [s*b] on a
  /// post-processing chunk.
  Tensor stage_forward(const Tensor& input, const int32_t* tokens, const int32_t* labels, int64_t b,
                       const Step& step);
  /// Input gradient of this chunk: from `grad_output` [s*b, h], or (post-processing) from the
  /// mean loss scaled by grad_scale. Returns [s*b, h], undefined for a pre-processing chunk.
  Tensor stage_backward_input(const Tensor& grad_output, const Step& step, float grad_scale);
  /// Called with a range [first, end) of parameter indices whose gradients this microbatch's
  /// backward has just completed (for overlapping the data-parallel reduction).
  using ParamsReady = std::function<void(int first, int end)>;
  /// Weight gradients of this chunk for the microbatch; `ready` (if set) hears each finished
  /// component: the head, each layer from the last, then the embeddings.
  void stage_backward_weight(const Step& step, const ParamsReady& ready = {});
  /// Drops whatever is kept for the microbatch.
  void release(const Step& step);
  static float mean(const Tensor& losses);

 private:
  /// Embeddings (pre-processing chunk) or `input`, the layers, and on a post-processing chunk
  /// the final norm and the LM head: [s*b, h], or this rank's logits [s*b, V_padded / t].
  Tensor stage_logits(const Tensor& input, const int32_t* tokens, int64_t b, const Step& step);
  Tensor to_sequence_major(const int32_t* ids, int64_t b, const char* what) const;
  Tensor positions(int64_t b) const;
  /// Embedding (word, plus position table) of ids [s*b] at positions pos [s*b], with dropout.
  Tensor embed(const Tensor& ids, const Tensor& pos, const Step& step);
  /// The whole vocabulary's logits [rows, vocab] (row r = sequence position r / b of sample
  /// r % b, written at [r % b][r / b]) from each tensor rank's [rows, V_padded / t] columns.
  std::vector<float> gather_logits(Tensor local, int64_t s, int64_t b);

  GptConfig cfg_;
  GptStage stage_;
  TensorParallel tp_;
  Device device_;
  int64_t padded_vocab_;
  ParamTable params_;
  std::unique_ptr<VocabParallelEmbedding> word_;
  std::unique_ptr<ReplicatedEmbedding> position_;
  std::vector<std::unique_ptr<TransformerLayer>> layers_;
  std::unique_ptr<Norm> final_ln_;
  std::unique_ptr<ColumnParallelLinear> head_;
  std::unique_ptr<VocabParallelCrossEntropy> loss_;
  int tied_copy_ = -1;  // the last chunk's copy of the word embedding (pipelines with p > 1)
  // Parameter index ranges [first, end) of the components, for ParamsReady.
  std::pair<int, int> embedding_params_{0, 0}, head_params_{0, 0};
  std::vector<std::pair<int, int>> layer_params_;
};

}  // namespace ptdp
