// GptModel: the decoder built from the tensor-parallel layers (the GPT-2 architecture, or with
// GptConfig's options a Llama-family model: RMSNorm, SwiGLU, RoPE instead of a position table,
// grouped-query attention, no biases, an untied output layer), or one pipeline chunk of it.
// Parameters are named and laid out as in Megatron-Core's GPT (docs/architecture.md), live
// in one flat buffer per chunk with a table of named views, and start from a pure function of
// (seed, name, element index), so every tensor- and pipeline-parallel layout starts from the
// same full weights and draws the same dropout masks.
//
// Masks and documents (supervised fine-tuning, packed documents; Megatron's --eod-mask-loss,
// --reset-position-ids, --reset-attention-mask): a label of kIgnoreIndex (-100, PyTorch's and
// Hugging Face's ignore_index) takes no part in the loss; a DocumentLayout gives each token's
// position (learned position embeddings and RoPE both read it) and the first position of its
// document, past which no query attends (core/layers/attention.h). The loss of a microbatch is
// Megatron's masked mean: sum(loss * mask) / sum(mask) over its tokens, mask = label not
// ignored, and 0 when every label is ignored (Megatron would divide by zero). A batch of m
// microbatches, on one rank or spread over data-parallel replicas, averages those m (or d * m)
// microbatch losses with equal weights, as Megatron does without --calculate-per-token-loss; so
// the loss and the gradients depend only on how the global batch is cut into microbatches,
// never on t, p, v or d.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/layers/cross_entropy.h"
#include "core/layers/embedding.h"
#include "core/layers/kv_cache.h"
#include "core/layers/transformer_layer.h"
#include "core/model/gpt_config.h"
#include "core/model/mtp.h"
#include "core/model/pipeline_split.h"
#include "core/params/params.h"

namespace ptdp {

/// Per-token extras of a batch besides its tokens and labels: host arrays laid out like the
/// tokens ([b, seq_length] row-major; for the m microbatches of a pipeline batch, [m * b,
/// seq_length]). A NULL member means the default. GptModel checks the values (naming the first
/// bad one) before it keeps anything.
struct DocumentLayout {
  /// Position of each token: >= 0, and below max_position_embeddings with learned position
  /// embeddings. NULL: token i of a sample is at position i.
  const int32_t* position_ids = nullptr;
  /// The first position of each token's document (AttentionDesc::document_starts): in each
  /// sample's row, 0 <= start[i] <= i and start[i] >= start[i - 1]. NULL: causal attention over
  /// the whole sample.
  const int32_t* document_starts = nullptr;

  bool empty() const { return position_ids == nullptr && document_starts == nullptr; }
  /// The layout of the samples from `sample` on, for samples of `seq_length` tokens.
  DocumentLayout from_sample(int64_t sample, int64_t seq_length) const {
    const int64_t at = sample * seq_length;
    return {position_ids ? position_ids + at : nullptr, document_starts ? document_starts + at : nullptr};
  }
};

/// Which part of the model a chunk holds.
struct GptStage {
  int first_layer = 0;
  int num_layers = -1;       ///< -1: every layer from first_layer on
  bool pre_process = true;   ///< word and position embeddings (the first chunk)
  bool post_process = true;  ///< final norm, LM head and loss (the last chunk)

  /// Chunk `chunk` (= vp_stage * p + pp_rank) of the split's p * v chunks: its layers as
  /// core/model/pipeline_split.h assigns them (even, or Megatron's uneven first and last
  /// stages), the embedding on chunk 0, the head and loss on the last. Throws
  /// Error(InvalidArgument) naming the numbers for a split the model's layers do not allow.
  static GptStage chunk_of(const GptConfig& cfg, const PipelineSplit& split, int chunk);
  /// Chunk `chunk` of `chunks` = p * v equal chunks of the model.
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
  /// The decoder layers this chunk holds: layer(j) is the model's layer stage().first_layer + j.
  int local_layers() const { return static_cast<int>(layers_.size()); }
  TransformerLayer& layer(int j) { return *layers_.at(static_cast<std::size_t>(j)); }
  /// The multi-token prediction modules this chunk holds (D on the post-processing chunk, else
  /// none): mtp_layer(k) is depth k's transformer layer (an MoE layer with GptConfig::mtp_moe()).
  int mtp_modules() const { return static_cast<int>(mtp_.size()); }
  TransformerLayer& mtp_layer(int k) { return mtp_.at(static_cast<std::size_t>(k))->layer(); }
  /// Rows of the [rows, h] activation a chunk passes on for b samples: s * b, or this rank's
  /// s * b / t under sequence parallelism (LayerConfig::sequence_parallel with t > 1).
  int64_t activation_rows(int64_t b) const;
  /// Index of the word embedding copy on a post-processing chunk without pre-processing (the
  /// tied LM head's weight, or the multi-token prediction modules' embedding; kept in step with
  /// the first chunk's through the embedding group), else -1.
  int tied_head_weight() const;
  /// The multi-token prediction losses of a post-processing chunk's last training forward of
  /// the microbatch: each depth's masked mean (core/model/mtp.h), D values; empty without MTP
  /// or when the forward did not run the modules (evaluation). Call before its backward.
  std::vector<float> mtp_losses(const Step& step);

  /// Forward and backward of one microbatch through the whole model (a chunk holding both
  /// ends). tokens and labels are [b, seq_length] i32 in host memory, row-major (batch-major,
  /// as data sets give them), values in [0, vocab_size); a label may also be kIgnoreIndex.
  /// `layout` (same shape) gives positions and documents. Returns the masked mean loss over the
  /// b * seq_length tokens (see the top of this file); adds the gradients of that loss *
  /// grad_scale.
  float forward_backward(const int32_t* tokens, const int32_t* labels, int64_t b, const Step& step,
                         float grad_scale = 1.0f, const DocumentLayout& layout = {});
  /// The masked mean loss only; nothing is kept (evaluation). Dropout follows step.training.
  float forward_loss(const int32_t* tokens, const int32_t* labels, int64_t b, const Step& step,
                     const DocumentLayout& layout = {});

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
  /// output [activation_rows(b), h] (s*b, or this rank's rows under sequence parallelism) (ignored by a pre-processing chunk, which reads `tokens`); `labels` is
  /// read by a post-processing chunk; `layout` by every chunk (the same on each: positions
  /// reach the embedding and RoPE, documents every attention layer). Returns [s*b, h], or the
  /// per-token losses [s*b] on a post-processing chunk (0 where the label is ignored).
  Tensor stage_forward(const Tensor& input, const int32_t* tokens, const int32_t* labels, int64_t b,
                       const Step& step, const DocumentLayout& layout = {});
  /// The microbatch's loss from a post-processing chunk's stage_forward output: the masked mean
  /// (see the top of this file). Call before the microbatch's backward or release.
  float microbatch_loss(const Tensor& losses, const Step& step);
  /// Input gradient of this chunk: from `grad_output` [s*b, h], or (post-processing) from the
  /// masked mean loss scaled by grad_scale. Returns [s*b, h], undefined for a pre-processing
  /// chunk. The forward's layout is used again (it is kept until here, or release()).
  Tensor stage_backward_input(const Tensor& grad_output, const Step& step, float grad_scale);
  /// Called with a range [first, end) of parameter indices whose gradients this microbatch's
  /// backward has just completed (for overlapping the data-parallel reduction).
  using ParamsReady = std::function<void(int first, int end)>;
  /// Weight gradients of this chunk for the microbatch; `ready` (if set) hears each finished
  /// component: the head, each layer from the last, then the embeddings.
  void stage_backward_weight(const Step& step, const ParamsReady& ready = {});
  /// Drops whatever is kept for the microbatch.
  void release(const Step& step);

 private:
  /// Embeddings (pre-processing chunk) or `input`, the layers, and on a post-processing chunk
  /// the final norm and the LM head: [s*b, h], or this rank's logits [s*b, V_padded / t].
  Tensor stage_logits(const Tensor& input, const int32_t* tokens, int64_t b, const Step& step,
                      Tensor* normed = nullptr);
  /// The masked mean of per-token losses [s/c*b] whose `counted` labels count (over the whole
  /// microbatch under context parallelism).
  float masked_mean(const Tensor& losses, int64_t counted) const;
  /// The MTP modules' forward from the decoder's final-normed output h [rows, h]; keeps each
  /// depth's mean loss.
  void mtp_forward(const Tensor& h, const int32_t* tokens, const int32_t* labels, int64_t b, const Step& step);
  /// Their backward, each depth's loss gradient scaled by loss_scale * mtp_loss_scaling_factor
  /// / D: the gradient of h [rows, h].
  Tensor mtp_backward(float loss_scale, const Step& step);
  /// ids [b, s] row-major -> [s * b] sequence-major on the device, each in [0, vocab_size) (or
  /// kIgnoreIndex with `ignore_ok`), the first one outside named.
  Tensor to_sequence_major(const int32_t* ids, int64_t b, const char* what, bool ignore_ok = false) const;
  /// Position ids [s * b] (layout's, checked, or 0 .. s-1) and document starts [b, s] (checked;
  /// undefined without), on the device.
  TokenPositions token_positions(int64_t b, const DocumentLayout& layout) const;
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
  std::vector<std::unique_ptr<MtpModule>> mtp_;  // D modules on the post-processing chunk
  Slots<std::vector<float>> mtp_means_{"mtp losses"};  // per microbatch in flight: each depth's mean loss
  Slots<TokenPositions> positions_{"model positions"};  // per microbatch in flight: Step::positions
  int tied_copy_ = -1;  // the last chunk's copy of the word embedding (pipelines with p > 1)
  // Parameter index ranges [first, end) of the components, for ParamsReady.
  std::pair<int, int> embedding_params_{0, 0}, head_params_{0, 0}, mtp_params_{0, 0};
  std::vector<std::pair<int, int>> layer_params_;
};

}  // namespace ptdp
