// Hugging Face config.json <-> GptConfig for the classes ptdp converts (hf_checkpoint.h moves the
// tensors).
//
// Both spellings of the RoPE settings are read: transformers 4 writes `rope_theta` and Llama's
// `rope_scaling` at the top level, transformers 5 writes them inside `rope_parameters`
// (`rope_theta`, `rope_type`, Llama 3.1's `factor`, `low_freq_factor`, `high_freq_factor`,
// `original_max_position_embeddings`; YaRN's `factor`, `original_max_position_embeddings`,
// `beta_fast`, `beta_slow`, `mscale`, `mscale_all_dim`, `truncate`, docs/deepseek.md). Where both
// are present they must agree: the two versions
// would build different models from the file. Exports write both, so that either version reads
// the model back.
//
// A setting that changes the model's math and that ptdp does not compute is refused with
// Unsupported, naming the field (another rope_type, a partial rotary factor, a sliding window
// narrower than the context, attention biases where ptdp has none, router jitter, clip_qkv,
// pruned heads, ...). The fields known to leave the math alone (token ids, output switches,
// use_cache, ...) are listed with their reasons in docs/guides/checkpoint-format.md; the test
// tests/tools/test_hf_config_fields.py walks every field of every class's config in
// transformers 5 and 4 and checks that each one is read, on that list, or refused.
//
// Mixtures of experts (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE) map onto MoeConfig with Megatron-Core's
// semantics:
//   - num_local_experts / num_experts -> num_experts, num_experts_per_tok -> router_topk.
//   - Routing: Mixtral softmaxes over all experts, takes the top k and renormalises them, which
//     is Megatron's default router (top k of the logits, softmax over those k); Qwen's
//     norm_topk_prob = true is the same, norm_topk_prob = false keeps the top k of the full
//     softmax unnormalised: --moe-router-pre-softmax.
//   - Widths: Mixtral's intermediate_size is the experts'; Qwen's moe_intermediate_size is the
//     experts' and intermediate_size the dense layers'; Qwen2-MoE's shared expert
//     (shared_expert_intermediate_size) always has its sigmoid gate (--moe-shared-expert-gate).
//   - Qwen's dense layers (mlp_only_layers, and every layer i with (i + 1) % decoder_sparse_step
//     != 0) become MoeConfig::layer_pattern.
//   - router_aux_loss_coef -> aux_loss_coeff (load-balancing type aux_loss).
//   - Qwen3-MoE's per-head q_norm / k_norm are --qk-layernorm; OLMoE's q_norm [hidden_size] and
//     k_norm [num_key_value_heads * head_dim], RMSNorms over the whole query and key projections,
//     are --qk-layernorm --qk-layernorm-across-heads. OLMoE's intermediate_size is the experts'
//     width (every layer is MoE); its clip_qkv, when set, is refused.
//
// DeepSeek-V2 and V3 (transformers' DeepseekV2Config / DeepseekV3Config, the hub's config.json)
// map onto multi-latent attention (--multi-latent-attention --qk-layernorm: the latent norms
// q_a_layernorm and kv_a_layernorm) and DeepSeek's routers (docs/deepseek.md, "Hugging Face
// DeepSeek-V2/V3 checkpoints"):
//   - q_lora_rank (null: a plain q_proj, V2-Lite) -> q_lora_rank 0; kv_lora_rank;
//     qk_nope_head_dim -> qk_head_dim (Megatron's name of the part without RoPE);
//     qk_rope_head_dim -> qk_pos_emb_head_dim; v_head_dim. head_dim and qk_head_dim are derived
//     (transformers overwrites them), num_key_value_heads must be num_attention_heads.
//   - intermediate_size is the dense layers' width, moe_intermediate_size the experts';
//     n_shared_experts shared experts are one shared MLP n_shared_experts * moe_intermediate_size
//     wide; the layers before first_k_dense_replace are dense (moe_layer_freq, the hub's V2 field
//     that transformers does not read, must be 1).
//   - V3's router (noaux_tc): sigmoid scores, e_score_correction_bias -> the expert bias, n_group
//     groups of which topk_group are kept, each scored by its top-2 sum (group_score_topk 2),
//     the top-k weights renormalised (norm_topk_prob, which ptdp does for k > 1) and times
//     routed_scaling_factor (--moe-router-topk-scaling-factor).
//   - V2's router: softmax over all experts, its top k never renormalised (--moe-router-pre-softmax;
//     transformers ignores norm_topk_prob there, so true is refused), times routed_scaling_factor;
//     topk_method "greedy", or "group_limited_greedy" (groups scored by their maximum:
//     group_score_topk 1).
//   - aux_loss_alpha and seq_aux (the hub's training settings) -> the aux loss's coefficient and
//     its per-sequence form; they do not change the forward.
//   - attention_bias, mlp_bias, another scoring_func or topk_method, norm_topk_prob the router
//     does not compute are refused by name.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/checkpoint/safetensors.h"
#include "core/model/gpt_config.h"

namespace ptdp {

/// The Hugging Face model classes ptdp reads and writes. Auto: on export, the one the model's
/// settings call for (hf_default_architecture). Values only grow at the end (the C API's
/// ptdp_hf_architecture has the same numbers).
enum class HfArchitecture : int {
  Auto = 0,
  Gpt2 = 1,
  Llama = 2,
  Mistral = 3,
  Qwen2 = 4,
  Mixtral = 5,
  Qwen3Moe = 6,
  Qwen2Moe = 7,
  Olmoe = 8,
  DeepseekV2 = 9,
  DeepseekV3 = 10,
};

/// config.json's model_type: "gpt2", "llama", "mistral", "qwen2", "mixtral", "qwen3_moe",
/// "qwen2_moe", "olmoe", "deepseek_v2", "deepseek_v3" ("auto" for Auto).
const char* hf_model_type(HfArchitecture a);
/// The class config.json names in "architectures": "GPT2LMHeadModel", "LlamaForCausalLM", ...
const char* hf_class_name(HfArchitecture a);
/// Whether the class is a mixture of experts (Mixtral, Qwen3-MoE, Qwen2-MoE, OLMoE).
bool hf_is_moe(HfArchitecture a);
/// Whether the class is DeepSeek-V2 or V3 (multi-latent attention, DeepSeek's routers; its
/// layers from first_k_dense_replace on are MoE, a model with none is dense).
bool hf_is_deepseek(HfArchitecture a);

/// A Hugging Face config as a ptdp model config and the architecture it came from.
struct HfConfig {
  GptConfig model;                                      ///< what ptdp builds
  HfArchitecture architecture = HfArchitecture::Llama;  ///< the class config.json names
  /// DeepSeek's RoPE dims stored as interleaved pairs (x0, x1), (x2, x3), ... (DeepSeek-V2
  /// always, V3 with rope_interleave true): the RoPE rows of q_b_proj / q_proj and
  /// kv_a_proj_with_mqa are permuted to ptdp's rotate-half halves on import and back on export.
  bool rope_interleave = false;
  /// DeepSeek's num_nextn_predict_layers (its multi-token prediction layers, stored as
  /// model.layers.{num_hidden_layers + k}.*); 0 for the other classes.
  int nextn_predict_layers = 0;
};

/// The class a config names (model_type, else the first of "architectures"). Io (naming `source`)
/// when neither is there, Unsupported for a class ptdp does not convert.
HfArchitecture hf_architecture_of(const nlohmann::json& config, const std::string& source);

/// The model a config.json describes. seq_length is the model's context
/// (n_positions / max_position_embeddings), or a sliding window shorter than it (Mistral,
/// Mixtral, the Qwen classes), within which the window changes nothing. Throws Io (naming `source`
/// and the key) for a missing or mistyped field, Unsupported (naming the field) for what ptdp does
/// not compute (see the file comment), InvalidArgument for a shape ptdp refuses.
HfConfig hf_config_from_json(const nlohmann::json& config, const std::string& source);
/// hf_config_from_json of DIR/config.json; Io when it is missing or not JSON.
HfConfig read_hf_config(const std::string& dir);

/// Whether `architecture` stores DeepSeek's RoPE rows interleaved when written with the base
/// config `base` (an object or null): V2 always, V3 as base's rope_interleave (default true, as
/// transformers' and the hub's); false for the other classes.
bool hf_rope_interleave(HfArchitecture architecture, const nlohmann::json& base);

/// The class a ptdp model exports as by default: GPT-2 for LayerNorm with learned positions,
/// Qwen2 for a qkv bias without the other biases, Llama otherwise; for a mixture of experts
/// Qwen3-MoE with q/k norms, Qwen2-MoE with shared experts, Mixtral otherwise; with multi-latent
/// attention DeepSeek-V2 for a softmax router, DeepSeek-V3 otherwise.
HfArchitecture hf_default_architecture(const GptConfig& config);
/// Throws Unsupported naming the setting when `config` cannot be written as `architecture`
/// (e.g. RMSNorm as GPT-2, q/k norms as Llama, a partial rotary share, biases Mistral has no field
/// for, pre-softmax routing as Mixtral, an expert bias or capacity factor as any class).
void check_hf_architecture(const GptConfig& config, HfArchitecture architecture);
/// config.json for `config` as `architecture` (not Auto), stored as `dtype` ("torch_dtype", and
/// "dtype" where `base` has it): the fields of `base` (an object, may be empty: e.g. the imported
/// model's config.json with its token ids) that ptdp does not describe are kept, the others are set
/// from `config`. Floats are written as the shortest decimal that reads back as the same float
/// (1e-05, not 9.99999e-06).
nlohmann::json hf_config_to_json(const GptConfig& config, HfArchitecture architecture, StDType dtype,
                                 const nlohmann::json& base);

/// Throws InvalidArgument naming the field when `model` differs from the model the Hugging Face
/// config `hf` (read from `source`) describes in anything a checkpoint's tensors or math depend on.
void check_hf_model_matches(const GptConfig& hf, const GptConfig& model, const std::string& source);

}  // namespace ptdp
