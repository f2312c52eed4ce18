// The shape and training-time settings of a GPT, with Megatron-LM's names and defaults.
#pragma once

#include <cstdint>
#include <string>

#include "core/layers/layer_config.h"

namespace ptdp {

/// A transformer layer's settings (LayerConfig) and the model's own.
struct GptConfig : LayerConfig {
  int vocab_size = 256;
  int make_vocab_size_divisible_by = 128;  ///< the padded vocabulary is a multiple of this * t
  int max_position_embeddings = 0;  ///< 0: seq_length
  bool tie_embeddings = true;  ///< the LM head reuses the word embedding

  // Multi-token prediction (Megatron-Core's --mtp-num-layers, --mtp-loss-scaling-factor;
  // core/model/mtp.h): D modules after the decoder on the last pipeline stage, module k
  // predicting the token k + 1 positions ahead. 0: none.
  int mtp_num_layers = 0;
  /// The D depths' losses enter the gradient as mtp_loss_scaling_factor / D times their sum.
  float mtp_loss_scaling_factor = 0.1f;

  /// Whether each MTP module's transformer layer is an MoE layer: Megatron-Core builds it from
  /// the decoder's last layer's spec (get_gpt_mtp_block_spec), so it is one exactly when the
  /// decoder's last layer is (--moe-layer-freq).
  bool mtp_moe() const { return mtp_num_layers > 0 && moe.is_moe_layer(num_layers - 1); }
  /// The MoE layers of the model: the decoder's and, with mtp_moe(), the D modules' (Megatron's
  /// track_moe_metrics count, whose mean the logged aux losses are).
  int num_moe_layers_with_mtp() const { return num_moe_layers() + (mtp_moe() ? mtp_num_layers : 0); }

  int max_positions() const { return max_position_embeddings > 0 ? max_position_embeddings : seq_length; }
  /// Vocabulary padded to a multiple of make_vocab_size_divisible_by * t (Megatron's rule);
  /// the padded rows never take part in the loss.
  int64_t padded_vocab(int tensor_parallel) const;

  /// Whether the model has a learned position table (embedding.position_embeddings.weight).
  bool learned_positions() const { return position_embedding == PositionEmbedding::LearnedAbsolute; }

  /// Throws Error(InvalidArgument) naming the numbers for a config that cannot be built with
  /// tensor-parallel size t: LayerConfig::validate's checks, a non-positive vocabulary, a
  /// sequence longer than max_position_embeddings, and the like.
  void validate(int tensor_parallel) const;

  /// Model FLOPs of one training iteration over `samples` sequences of seq_length tokens, the
  /// one place ptdp counts them: Megatron-LM's num_floating_point_operations (the paper's
  /// formula, Narayanan et al. 2021, with the grouped-query and SwiGLU terms), for forward and
  /// backward, 12 B s l h^2 ((1 + g/a + s/h) a dh / h + (ffn/h)(3/2 with SwiGLU) + V/(2 l h));
  /// with `full_recompute`, what is executed: the layers' forward once more (16 instead of 12
  /// for the layer terms). For the GPT (g = a, a dh = h, ffn = 4h) this is 72 B s l h^2 (1 +
  /// s/(6h) + V/(12 l h)), and 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) recomputing. B = samples,
  /// V the unpadded vocabulary (the paper's; Megatron counts the padded one). MFU counts the
  /// first; TFLOP/s per device (as the paper) the second.
  ///
  /// With MoE (Megatron's MoE terms), each MoE layer's MLP term counts the k routed experts a
  /// token visits and the shared experts, k moe_ffn + shared in place of ffn; a dense layer of a
  /// mixed model keeps ffn. As Megatron, the router's 2 s h E per layer (and Qwen2-MoE's shared
  /// expert gate) are left out: under 0.1% of a layer for the presets.
  ///
  /// With multi-latent attention the attention term is Megatron's MLA count per token and layer,
  /// 6 (q + r (h + a (dn + dv) + 1) + h dr + a dv h + s a (dq + dv)) with q = r_q (h + a dq + 1)
  /// (or h a dq without query compression), r = kv_lora_rank, dn, dr, dv the head dims and dq =
  /// dn + dr; the core attention's s a (dq + dv) is not halved for the causal mask, as the dense
  /// term's s/h is not (the paper's convention; Megatron's current code halves both).
  /// With multi-token prediction (Megatron's terms) the D modules add D layers (l + D in the layer
  /// terms), D more logits (V (1 + D)) and 6 B s D (3h + 2h^2) for their norms and eh_proj; each
  /// module's layer is of the decoder's last layer's kind (its MLP term k moe_ffn + shared when
  /// that layer is MoE).
  double paper_flops(int64_t samples, bool full_recompute = false) const;
  /// Parameters of the unpartitioned model (with the padded vocabulary for t): with MoE, every
  /// expert of every MoE layer, the routers (and their expert biases) and the shared experts;
  /// with MTP, each module's three norms, eh_proj and layer (the embedding and head are shared;
  /// an MoE layer, router and experts included, when the decoder's last layer is one).
  int64_t parameter_count(int tensor_parallel) const;
  /// The parameters one token's forward uses: parameter_count() with each MoE layer's routed
  /// experts counted k times instead of E times (the model cards' "active" count); equal to
  /// parameter_count() for a dense model.
  int64_t active_parameter_count(int tensor_parallel) const;
  /// Whether parameter_count() fits int64 (validate() refuses a model whose count does not).
  bool parameter_count_fits(int tensor_parallel) const;

  /// paper_flops()'s MLA attention term over 12 h^2, per token and layer (12 B s h^2 times it
  /// is one layer's multi-latent attention, forward and backward).
  double mla_attention_factor() const;

 private:
  /// parameter_count() with `routed` experts per MoE layer.
  int64_t count_parameters(int tensor_parallel, int64_t routed) const;
  /// One layer's multi-latent attention parameters without linear_proj (down and up
  /// projections, latent norms).
  int64_t mla_projection_parameters() const;
};

}  // namespace ptdp
