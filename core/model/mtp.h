// Multi-token prediction (DeepSeek-V3's MTP, as Megatron-Core's MultiTokenPredictionLayer and
// process_mtp_loss implement it): D sequential modules after the decoder, on the chunk that
// computes the loss. Module k (1-based; Megatron's `mtp.layers.{k-1}`) takes the previous
// depth's output h (for k = 1 the decoder's output after decoder.final_layernorm, as Megatron's
// TransformerBlock hands it over) and the embedding of the token k positions ahead, and computes
//   h' = final_layernorm(TransformerLayer(eh_proj([enorm(emb); hnorm(h)])))
// (the embedding's half first, as Megatron's torch.cat); the shared LM head gives its logits, and
// the cross-entropy against the label k positions ahead (the token k + 1 ahead) is its loss,
// Megatron's masked mean over the microbatch with the positions past the sequence's end masked
// (Megatron's roll_tensor fills them with token 0 and mask 0). Packed documents are rolled across
// their boundaries, as Megatron rolls without packed_seq_params (the --reset-attention-mask path).
//
// The loss the model reports is the main one; the MTP losses enter the gradient only, each depth
// weighted mtp_loss_scaling_factor / D (Megatron's MTPLossAutoScaler), and are reported apart.
#pragma once

#include <memory>
#include <string>

#include "core/layers/cross_entropy.h"
#include "core/layers/embedding.h"
#include "core/layers/linear.h"
#include "core/layers/norm.h"
#include "core/layers/transformer_layer.h"
#include "core/model/gpt_config.h"

namespace ptdp {

class MtpModule {
 public:
  /// Module `depth` (0-based): parameters "mtp.layers.<depth>.{enorm,hnorm,eh_proj,
  /// transformer_layer,final_layernorm}.*". `word_weight` is the word embedding table's index in
  /// `params` ([V_padded, h], split on dim 0), `head_weight` the LM head's (the same table when
  /// tied); both are shared, their gradients adding to the model's.
  MtpModule(ParamTable& params, const GptConfig& cfg, int depth, int word_weight, int head_weight, TensorParallel tp,
            Device device);

  struct Output {
    Tensor hidden;  // [rows, h]: the module's output (this rank's rows, as h)
    Tensor losses;  // [s/c*b] fp32: per-token cross-entropy, 0 where the label is ignored
  };
  /// h [rows, h] (rows = s/c*b, or this rank's s/c*b/t under sequence parallelism); ids and
  /// labels [s/c*b] i32, sequence-major over this context rank's positions: the token depth + 1
  /// positions ahead and the label depth + 1 positions ahead (kIgnoreIndex past the end).
  Output forward(const Tensor& h, const Tensor& ids, const Tensor& labels, const Step& step);
  /// Labels of the forward that count (under context parallelism, the whole microbatch's).
  int64_t counted(const Step& step) { return loss_.counted(step); }
  /// Input gradient: the gradient of `loss_scale` times this depth's masked mean loss, plus
  /// `dnext` [rows, h] (the next depth's gradient of this module's output; undefined for the
  /// last depth) -> the gradient of h [rows, h]. The embedding's gradient is kept.
  Tensor backward_input(const Tensor& dnext, float loss_scale, const Step& step);
  /// Weight gradients (the shared embedding's and head's included); frees the microbatch.
  void backward_weight(const Step& step);
  void release(const Step& step);
  /// The module's transformer layer (an MoE layer when GptConfig::mtp_moe()).
  TransformerLayer& layer() { return layer_; }

 private:
  const GptConfig& cfg_;
  int depth_;
  TensorParallel tp_;
  VocabParallelEmbedding embedding_;
  Norm enorm_, hnorm_;
  ColumnParallelLinear eh_proj_;
  TransformerLayer layer_;
  Norm final_ln_;
  ColumnParallelLinear head_;
  VocabParallelCrossEntropy loss_;
};

/// The token ids or labels `shift` positions ahead of each position of b samples of
/// seq_length ([b, seq_length] row-major, host), `fill` past each sample's end: Megatron's
/// roll_tensor(shifts=-shift) over the whole sequence.
std::vector<int32_t> shifted_ids(const int32_t* ids, int64_t b, int64_t seq_length, int shift, int32_t fill);

}  // namespace ptdp
