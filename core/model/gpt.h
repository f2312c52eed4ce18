// GptModel: the GPT-2 architecture built from the tensor-parallel layers. Parameters are named
// and laid out as in Megatron-Core's GPT (DESIGN.md), live in one flat buffer with a table of
// named views, and start from a pure function of (seed, name, element index), so every
// tensor-parallel size starts from the same full weights and draws the same dropout masks.
#pragma once

#include <memory>
#include <vector>

#include "core/layers/cross_entropy.h"
#include "core/layers/embedding.h"
#include "core/layers/transformer_layer.h"
#include "core/model/gpt_config.h"
#include "core/model/params.h"

namespace ptdp {

class GptModel {
 public:
  /// Validates the config for tp.size and initialises the parameters from cfg.seed.
  GptModel(const GptConfig& cfg, TensorParallel tp, Device device = {});

  const GptConfig& config() const { return cfg_; }
  ParamTable& params() { return params_; }
  const ParamTable& params() const { return params_; }
  int64_t padded_vocab() const { return padded_vocab_; }

  /// Forward and backward of one microbatch. tokens and labels are [b, seq_length] i32 in
  /// host memory, row-major (batch-major, as data sets give them), values in [0, vocab_size).
  /// Returns the mean loss over the b * seq_length tokens; adds the gradients of
  /// mean loss * grad_scale to the gradient buffer.
  float forward_backward(const int32_t* tokens, const int32_t* labels, int64_t b, const Step& step,
                         float grad_scale = 1.0f);
  /// The mean loss only; nothing is kept (evaluation). Dropout follows step.training.
  float forward_loss(const int32_t* tokens, const int32_t* labels, int64_t b, const Step& step);

 private:
  // [b, s] host ids -> [s * b] i32 device tensor in the [s, b] order, checking the range.
  Tensor to_sequence_major(const int32_t* ids, int64_t b, const char* what) const;
  Tensor positions(int64_t b) const;
  /// Returns the per-token losses [s * b]; keeps activations for backward.
  Tensor forward(const int32_t* tokens, const int32_t* labels, int64_t b, const Step& step);
  void backward(const Tensor& losses, const Step& step, float grad_scale);
  void release(const Step& step);
  static float mean(const Tensor& losses);

  GptConfig cfg_;
  TensorParallel tp_;
  Device device_;
  int64_t padded_vocab_;
  ParamTable params_;
  std::unique_ptr<VocabParallelEmbedding> word_;
  std::unique_ptr<ReplicatedEmbedding> position_;
  std::vector<std::unique_ptr<TransformerLayer>> layers_;
  std::unique_ptr<LayerNorm> final_ln_;
  std::unique_ptr<ColumnParallelLinear> head_;
  std::unique_ptr<VocabParallelCrossEntropy> loss_;
};

}  // namespace ptdp
