// The settings of a transformer layer, with Megatron-LM's names and defaults. GptConfig
// (core/model/) adds the model's own: vocabulary, positions, tied embeddings.
//
// One decoder covers the GPT family (LayerNorm, GeLU MLP, learned positions, multi-head
// attention with biases) and the Llama family (RMSNorm, SwiGLU, rotary positions, grouped-query
// attention, no biases; Qwen2's qkv bias, OLMo 2's and Qwen3's q/k norms) as options.
#pragma once

#include <cstdint>
#include <vector>

#include "base/dtype.h"

namespace ptdp {

/// Megatron's --recompute-granularity.
enum class Recompute : int { None = 0, Full = 1, Selective = 2 };

/// How self-attention is computed: Auto takes the backend's fused (flash) kernel where it has
/// one for the model dtype and head dim, else the unfused GEMM + softmax + GEMM path; Fused
/// insists on the fused kernel (an error where there is none); Unfused never uses it.
enum class AttentionImpl : int { Auto = 0, Fused = 1, Unfused = 2 };

/// Megatron's --normalization: every norm of the model (input, pre-MLP, final, q/k).
enum class Normalization : int { LayerNorm = 0, RMSNorm = 1 };

/// Megatron's --position-embedding-type.
enum class PositionEmbedding : int { LearnedAbsolute = 0, Rope = 1, None = 2 };

/// Llama 3.1's rotary frequency scaling (Megatron's --use-rope-scaling and
/// --rope-scaling-factor; the thresholds are Llama 3.1's and Hugging Face's rope_scaling
/// fields): wavelengths above original_max_position_embeddings / low_freq_factor are divided
/// by factor, those below original_max_position_embeddings / high_freq_factor are kept, and
/// those between are interpolated.
struct RopeScaling {
  bool enabled = false;
  float factor = 8.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
};

/// Megatron's --rope-type (its MLA flag; here it applies to every RoPE model).
enum class RopeType : int { Rope = 0, Yarn = 1 };

/// YaRN (Peng et al. 2023) with the numbers of Hugging Face's `_compute_yarn_parameters` and the
/// flags of Megatron-Core's MLATransformerConfig (docs/deepseek.md, "YaRN"). Frequency i of the
/// rotary dim d has the correction dim c(r) = d ln(original / (2 pi r)) / (2 ln base); between
/// low = c(beta_fast) and high = c(beta_slow) (rounded outwards when truncate) the frequency
/// ramps linearly from base^(-2i/d) (extrapolation, below low) to base^(-2i/d) / factor
/// (interpolation, above high). cos and sin are multiplied by rope_amplitude().
struct YarnScaling {
  float factor = 1.0f;                         ///< --rotary-scaling-factor (HF's factor), > 0
  float mscale = 1.0f;                         ///< --mscale
  float mscale_all_dim = 0.0f;                 ///< --mscale-all-dim; 0: unset
  int original_max_position_embeddings = 4096;  ///< --original-max-position-embeddings
  float beta_fast = 32.0f;                     ///< --beta-fast
  float beta_slow = 1.0f;                      ///< --beta-slow
  /// HF's truncate (Megatron's correction_range_round_to_int): floor low and ceil high.
  bool truncate = true;
};

/// Megatron's --moe-router-score-function.
enum class MoeScoreFunction : int { Softmax = 0, Sigmoid = 1 };
/// Megatron's --moe-router-load-balancing-type.
enum class MoeLoadBalancing : int { AuxLoss = 0, SeqAuxLoss = 1, GlobalAuxLoss = 2, None = 3 };
/// Megatron's --moe-token-drop-policy: with a capacity factor, which of an expert's tokens are
/// kept: those with the highest routing probabilities, or the first ones in the microbatch.
enum class MoeDropPolicy : int { Probs = 0, Position = 1 };
/// Megatron's --moe-token-dispatcher-type.
enum class MoeDispatcher : int { AllToAll = 0, AllGather = 1 };

/// Mixture-of-experts settings (Megatron-Core's --num-experts, --moe-*): num_experts == 0 is a
/// dense model. Names, defaults and semantics are Megatron-Core's (docs/moe.md).
struct MoeConfig {
  int num_experts = 0;               ///< --num-experts E; 0: dense MLPs only
  int router_topk = 2;               ///< --moe-router-topk k
  int ffn_hidden_size = 0;           ///< --moe-ffn-hidden-size; 0: the model's ffn_hidden_size
  /// --moe-layer-freq as one entry per layer (1: MoE, 0: dense); empty: every layer is MoE.
  std::vector<int> layer_pattern;
  int shared_expert_intermediate_size = 0;  ///< --moe-shared-expert-intermediate-size; 0: none
  bool shared_expert_gate = false;   ///< --moe-shared-expert-gate (Qwen2-MoE's sigmoid gate)
  MoeScoreFunction score_function = MoeScoreFunction::Softmax;
  bool pre_softmax = false;          ///< --moe-router-pre-softmax
  float topk_scaling_factor = 0.0f;  ///< --moe-router-topk-scaling-factor; 0: none
  int num_groups = 0;                ///< --moe-router-num-groups; 0: no group-limited routing
  int group_topk = 0;                ///< --moe-router-group-topk
  bool enable_expert_bias = false;   ///< --moe-router-enable-expert-bias (aux-loss-free balancing)
  float bias_update_rate = 1e-3f;    ///< --moe-router-bias-update-rate
  MoeLoadBalancing load_balancing = MoeLoadBalancing::AuxLoss;
  float aux_loss_coeff = 0.0f;       ///< --moe-aux-loss-coeff
  float z_loss_coeff = 0.0f;         ///< --moe-z-loss-coeff; 0: none
  float capacity_factor = 0.0f;      ///< --moe-expert-capacity-factor; 0: dropless
  MoeDropPolicy drop_policy = MoeDropPolicy::Probs;
  bool pad_expert_input_to_capacity = false;  ///< --moe-pad-expert-input-to-capacity
  MoeDispatcher dispatcher = MoeDispatcher::AllToAll;
  /// Recompute the MoE layer alone in the backward (Megatron's --recompute-modules moe).
  bool recompute = false;
  /// [ptdp] --moe-router-group-score-topk m: a group's score is the sum of its m best selection
  /// values; 0: Megatron's router_topk / group_topk. 1 is DeepSeek-V2's group_limited_greedy (the
  /// group's max), 2 DeepSeek-V3's noaux_tc (its top-2 sum, whatever k and group_topk are).
  int group_score_topk = 0;
  /// --moe-router-topk-limited-devices M (Megatron's deprecated flag): group-limited routing with
  /// group_topk = M over num_groups groups, each the experts one rank holds at expert-parallel
  /// size num_groups. A model hyperparameter like num_groups (never the run's e): every e that
  /// divides num_groups runs the same model and sends each token to at most M ranks
  /// (validate_experts refuses the others). 0: none; else group_topk must equal it.
  int topk_limited_devices = 0;

  bool enabled() const { return num_experts > 0; }
  /// Whether decoder layer `layer` (global index) has an MoE MLP.
  bool is_moe_layer(int layer) const {
    if (!enabled()) return false;
    if (layer_pattern.empty()) return true;
    return layer >= 0 && layer < static_cast<int>(layer_pattern.size()) && layer_pattern[static_cast<std::size_t>(layer)] != 0;
  }
};

struct LayerConfig {
  int num_layers = 2;  ///< depth of the model (the output projections' init is scaled by it)
  int hidden_size = 64;
  int num_attention_heads = 4;
  /// 0: 4 * hidden_size, or with SwiGLU Megatron's int(8 h / 3 / 64) * 64.
  int ffn_hidden_size = 0;
  int seq_length = 32;
  float hidden_dropout = 0.1f;
  float attention_dropout = 0.1f;
  float init_method_std = 0.02f;
  float layernorm_epsilon = 1e-5f;  ///< the epsilon of every norm (Megatron's --norm-epsilon)
  Recompute recompute = Recompute::None;
  uint64_t seed = 1234;
  /// Storage type of the model weights and activations: f32, or bf16/f16 with fp32 master
  /// weights and fp32 gradients (Megatron's --bf16 / --fp16).
  DType precision = DType::F32;
  AttentionImpl attention = AttentionImpl::Auto;

  // ---- Llama-family options (Megatron's flags) ----------------------------------------------
  Normalization normalization = Normalization::LayerNorm;
  /// --swiglu: fc1 is [2 ffn, h], the gate rows then the up rows; act = silu(gate) * up.
  bool swiglu = false;
  PositionEmbedding position_embedding = PositionEmbedding::LearnedAbsolute;
  float rotary_base = 10000.0f;   ///< --rotary-base
  float rotary_percent = 1.0f;    ///< --rotary-percent: share of each head's dims rotated
  RopeScaling rope_scaling;       ///< --use-rope-scaling
  RopeType rope_type = RopeType::Rope;  ///< --rope-type
  YarnScaling yarn;                     ///< YaRN's settings (rope_type Yarn only)
  /// --num-query-groups with --group-query-attention: key/value heads g; 0: num_attention_heads
  /// (multi-head attention). g = 1 is multi-query attention.
  int num_query_groups = 0;
  /// --kv-channels: the head dim; 0: hidden_size / num_attention_heads.
  int kv_channels = 0;
  bool add_bias_linear = true;  ///< false: --disable-bias-linear (no linear layer has a bias)
  bool add_qkv_bias = false;    ///< --add-qkv-bias: linear_qkv has a bias even without the others
  bool qk_layernorm = false;    ///< --qk-layernorm: a norm over each query and key head
  /// --qk-layernorm-across-heads (with --qk-layernorm and RMSNorm; OLMo 2 and OLMoE): the q and k
  /// norms are RMSNorms over the whole query projection (weight [a*dh]) and the whole key
  /// projection (weight [g*dh]) of a token instead of over each head (weight [dh]). Their weights
  /// are split over the tensor ranks by heads; the row sums of squares (and the backward's row
  /// sums) are all-reduced over the tensor group.
  bool qk_layernorm_across_heads = false;
  /// --sequence-parallel (Korthikanti et al. 2022): with tensor-parallel size t > 1 the norms,
  /// dropouts and residuals work on s/t of the sequence on each tensor rank, the tensor-parallel
  /// blocks gather it and reduce-scatter their outputs. Needs seq_length divisible by t. The
  /// results are the same as without it (up to the order of fp32 sums).
  bool sequence_parallel = false;
  /// Mixture of experts (core/layers/moe/); num_experts == 0: every MLP is dense.
  MoeConfig moe;

  // ---- multi-latent attention (DeepSeek-V2/V3; Megatron-Core's MLATransformerConfig) --------
  /// --multi-latent-attention: every layer's attention is MlaAttention (core/layers/
  /// mla_attention.h): low-rank query and key/value projections with a decoupled RoPE part.
  /// Multi-head only (num_query_groups 0 or num_attention_heads); needs RoPE. With
  /// --qk-layernorm the latents are normalised (q_layernorm, kv_layernorm, `normalization`).
  bool multi_latent_attention = false;
  /// --q-lora-rank: the query latent's width; 0 (Megatron's None): no query compression, one
  /// column-parallel linear_q_proj (DeepSeek-V2-Lite).
  int q_lora_rank = 0;
  int kv_lora_rank = 32;          ///< --kv-lora-rank: the compressed key/value latent's width
  int qk_head_dim = 128;          ///< --qk-head-dim: each query/key head's part without RoPE
  int qk_pos_emb_head_dim = 64;   ///< --qk-pos-emb-head-dim: each query/key head's RoPE part
  int v_head_dim = 128;           ///< --v-head-dim: each value head's width

  /// MLA's query/key head dim: qk_head_dim + qk_pos_emb_head_dim.
  int64_t mla_qk_dim() const { return int64_t{qk_head_dim} + qk_pos_emb_head_dim; }
  /// The head dim the core attention computes with (its kernels' choice depends on it): dh, or
  /// with MLA the query/key head dim (the value heads are padded to it).
  int64_t attention_head_dim() const { return multi_latent_attention ? mla_qk_dim() : head_dim(); }
  /// Width of one routed expert's MLP: moe.ffn_hidden_size, or ffn().
  int moe_ffn() const { return moe.ffn_hidden_size > 0 ? moe.ffn_hidden_size : ffn(); }
  /// Decoder layers with an MoE MLP (0 for a dense model).
  int num_moe_layers() const;
  /// Throws Error(InvalidArgument), naming Megatron's flags, for MoE settings that cannot be
  /// split over e = expert_model ranks of etp = expert_tensor ranks each: num_experts not
  /// divisible by e, an expert MLP width not divisible by etp, e > 1 without experts, expert
  /// biases with etp > 1 (Megatron's "Bias in MoE is only supported when ETP==1"). validate()
  /// checks what does not depend on e and etp; whoever builds the experts calls this too.
  void validate_experts(int expert_model, int expert_tensor) const;

  int head_dim() const { return kv_channels > 0 ? kv_channels : hidden_size / num_attention_heads; }
  int query_groups() const { return num_query_groups > 0 ? num_query_groups : num_attention_heads; }
  /// Query heads per key/value head.
  int queries_per_group() const { return num_attention_heads / query_groups(); }
  /// Rows of linear_qkv: (a + 2 g) dh (3 h for the GPT).
  int64_t qkv_rows() const {
    return static_cast<int64_t>(num_attention_heads + 2 * query_groups()) * head_dim();
  }
  /// Width of the attention context, linear_proj's input: a dh (h for the GPT; a v_head_dim
  /// with multi-latent attention).
  int64_t attention_width() const {
    return static_cast<int64_t>(num_attention_heads) * (multi_latent_attention ? v_head_dim : head_dim());
  }
  int ffn() const { return static_cast<int>(ffn_wide()); }
  /// ffn() in 64 bits: the default 4 h (or SwiGLU's int(8 h / 3 / 64) * 64) of a large h does not
  /// fit an int; validate() refuses that before ffn() is used.
  int64_t ffn_wide() const {
    if (ffn_hidden_size > 0) return ffn_hidden_size;
    return swiglu ? static_cast<int64_t>(4.0 * hidden_size * 2.0 / 3.0 / 64.0) * 64 : int64_t{4} * hidden_size;
  }
  /// The sizes derived from the user's numbers (MLP width, attention width, weight and
  /// activation element counts), computed with checked int64 arithmetic: throws
  /// InvalidArgument naming the fields and values when one overflows. Part of validate().
  void check_sizes() const;
  bool qkv_bias() const { return add_bias_linear || add_qkv_bias; }
  bool rope() const { return position_embedding == PositionEmbedding::Rope; }
  /// The part of each query/key head that RoPE sees: dh, or MLA's qk_pos_emb_head_dim.
  int rope_head_dim() const { return multi_latent_attention ? qk_pos_emb_head_dim : head_dim(); }
  /// Rotated dims of each head: rotary_percent * rope_head_dim() (RoPE only).
  int rotary_dim() const { return static_cast<int>(static_cast<float>(rope_head_dim()) * rotary_percent); }
  /// The rotary inverse frequencies [rotary_dim / 2], fp32 as Megatron and Hugging Face compute
  /// them (1 / base^(2i / rotary_dim)), with Llama 3.1's scaling when enabled.
  std::vector<float> rotary_inv_freq() const;
  /// The same for `dim` rotated dims (even, > 0): multi-latent attention rotates its
  /// qk_pos_emb_head_dim dims, not rotary_dim().
  std::vector<float> rotary_inv_freq(int dim) const;
  /// The factor of RoPE's cos and sin (HF's attention_factor, Megatron's concentration factor):
  /// with YaRN, yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim) when
  /// mscale_all_dim is set, else yarn_get_mscale(factor) = 0.1 ln(factor) + 1 (1 for factor
  /// <= 1); without YaRN exactly 1.
  float rope_amplitude() const;
  /// The factor m whose square multiplies the softmax scale (DeepSeek's
  /// yarn_get_mscale(factor, mscale_all_dim), HF's yarn_apply_mscale): with YaRN and
  /// mscale_all_dim set, 0.1 mscale_all_dim ln(factor) + 1; else exactly 1. Hugging Face applies
  /// it in its multi-latent attention models only (DeepSeek-V2/V3 and their kin), never in
  /// Llama, Qwen2 or Mistral, so the dense SelfAttention does not use it.
  float yarn_softmax_mscale() const;
  bool uses_yarn() const { return rope() && rope_type == RopeType::Yarn; }

  /// Throws Error(InvalidArgument) naming the settings (with Megatron's flag names) for a
  /// layer that cannot be built with tensor-parallel size t: heads not divisible by t, query
  /// groups not dividing the heads or not divisible by t, an odd rotary dimension, and the like.
  void validate(int tensor_parallel) const;

 private:
  /// validate()'s MoE part: Megatron's refusals of arguments.py and TransformerConfig.
  void validate_moe(int tensor_parallel) const;
  /// validate()'s YaRN part.
  void validate_yarn() const;
  /// rotary_inv_freq(dim) with YaRN: [dim / 2].
  std::vector<float> yarn_inv_freq(int dim) const;
  /// validate()'s multi-latent attention part.
  void validate_mla() const;
};

const char* recompute_name(Recompute r);
const char* normalization_name(Normalization n);
const char* position_embedding_name(PositionEmbedding p);

}  // namespace ptdp
