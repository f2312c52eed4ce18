#include "capi/src/convert.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>
#include <string>

#include "base/error.h"
#include "capi/src/api_guard.h"
#include "core/model/moe_layer_freq.h"
#include "core/model/pipeline_split.h"
#include "core/plan/cluster.h"

namespace ptdp::capi {

namespace {

/// Throws InvalidArgument "options->NAME = V WANT" unless `ok` (the range checks that name the
/// struct's fields; the core checks again, in its own words).
void require_field(bool ok, const char* name, double v, const char* want) {
  if (ok) return;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  throw_error(ErrorCode::InvalidArgument, std::string("options->") + name + " = " + buf + " " + want);
}

void require_flag(int32_t v, const char* name) {
  PTDP_CHECK_ARG(v == 0 || v == 1, std::string("options->") + name + " = " + std::to_string(v) + " is not 0 or 1");
}

/// `v`, or `fallback` for the 0 that means "the default".
float or_default(double v, float fallback) { return v != 0 ? static_cast<float>(v) : fallback; }

// The Llama family's fields, spelled the same in ptdp_gpt_options and ptdp_plan_options. Each
// one's 0 means the GPT's behaviour (a zero tail from an older program is the old model).
template <typename Options>
void llama_fields_to_core(const Options& o, LayerConfig& c) {
  PTDP_CHECK_ARG(o.normalization == PTDP_NORMALIZATION_LAYERNORM || o.normalization == PTDP_NORMALIZATION_RMSNORM,
                 "options->normalization = " + std::to_string(static_cast<int>(o.normalization)) +
                     " is not a ptdp_normalization (PTDP_NORMALIZATION_LAYERNORM or PTDP_NORMALIZATION_RMSNORM)");
  PTDP_CHECK_ARG(o.position_embedding_type >= PTDP_POSITION_EMBEDDING_LEARNED_ABSOLUTE &&
                     o.position_embedding_type <= PTDP_POSITION_EMBEDDING_NONE,
                 "options->position_embedding_type = " + std::to_string(static_cast<int>(o.position_embedding_type)) +
                     " is not a ptdp_position_embedding (LEARNED_ABSOLUTE, ROPE or NONE)");
  require_flag(o.swiglu, "swiglu");
  require_flag(o.use_rope_scaling, "use_rope_scaling");
  require_flag(o.disable_bias_linear, "disable_bias_linear");
  require_flag(o.add_qkv_bias, "add_qkv_bias");
  require_flag(o.qk_layernorm, "qk_layernorm");
  const auto non_negative_float = [](double v, const char* name, const char* want) {
    require_field(std::isfinite(v) && v >= 0 && std::isfinite(static_cast<float>(v)), name, v, want);
  };
  non_negative_float(o.rotary_base, "rotary_base", "must be >= 0 (0: 10000)");
  require_field(std::isfinite(o.rotary_percent) && o.rotary_percent >= 0 && o.rotary_percent <= 1, "rotary_percent",
                o.rotary_percent, "must be in (0, 1] (0: 1)");
  non_negative_float(o.rope_scaling_factor, "rope_scaling_factor", "must be >= 1 (0: 8)");
  require_field(o.rope_scaling_factor == 0 || o.rope_scaling_factor >= 1, "rope_scaling_factor", o.rope_scaling_factor,
                "must be >= 1 (0: 8)");
  non_negative_float(o.rope_low_freq_factor, "rope_low_freq_factor", "must be >= 0 (0: 1)");
  non_negative_float(o.rope_high_freq_factor, "rope_high_freq_factor", "must be >= 0 (0: 4)");
  require_field(o.rope_original_max_position_embeddings >= 0, "rope_original_max_position_embeddings",
                o.rope_original_max_position_embeddings, "must be >= 0 (0: 8192)");
  require_field(o.num_query_groups >= 0, "num_query_groups", o.num_query_groups,
                "must be >= 0 (0: num_attention_heads)");
  require_field(o.kv_channels >= 0, "kv_channels", o.kv_channels, "must be >= 0 (0: hidden_size / num_attention_heads)");
  const LayerConfig d;
  c.normalization = static_cast<Normalization>(o.normalization);
  c.swiglu = o.swiglu == 1;
  c.position_embedding = static_cast<PositionEmbedding>(o.position_embedding_type);
  c.rotary_base = or_default(o.rotary_base, d.rotary_base);
  c.rotary_percent = or_default(o.rotary_percent, d.rotary_percent);
  c.rope_scaling.enabled = o.use_rope_scaling == 1;
  c.rope_scaling.factor = or_default(o.rope_scaling_factor, d.rope_scaling.factor);
  c.rope_scaling.low_freq_factor = or_default(o.rope_low_freq_factor, d.rope_scaling.low_freq_factor);
  c.rope_scaling.high_freq_factor = or_default(o.rope_high_freq_factor, d.rope_scaling.high_freq_factor);
  c.rope_scaling.original_max_position_embeddings = o.rope_original_max_position_embeddings != 0
                                                        ? o.rope_original_max_position_embeddings
                                                        : d.rope_scaling.original_max_position_embeddings;
  c.num_query_groups = o.num_query_groups;
  c.kv_channels = o.kv_channels;
  c.add_bias_linear = o.disable_bias_linear == 0;
  c.add_qkv_bias = o.add_qkv_bias == 1;
  c.qk_layernorm = o.qk_layernorm == 1;
}

/// The C fields of `c`, the rotary numbers resolved (10000 rather than 0).
template <typename Options>
void llama_fields_to_c(const LayerConfig& c, Options& o) {
  o.normalization = static_cast<ptdp_normalization>(c.normalization);
  o.swiglu = c.swiglu ? 1 : 0;
  o.position_embedding_type = static_cast<ptdp_position_embedding>(c.position_embedding);
  o.rotary_base = c.rotary_base;
  o.rotary_percent = c.rotary_percent;
  o.use_rope_scaling = c.rope_scaling.enabled ? 1 : 0;
  o.rope_scaling_factor = c.rope_scaling.factor;
  o.rope_low_freq_factor = c.rope_scaling.low_freq_factor;
  o.rope_high_freq_factor = c.rope_scaling.high_freq_factor;
  o.rope_original_max_position_embeddings = c.rope_scaling.original_max_position_embeddings;
  o.num_query_groups = c.num_query_groups;
  o.kv_channels = c.kv_channels;
  o.disable_bias_linear = c.add_bias_linear ? 0 : 1;
  o.add_qkv_bias = c.add_qkv_bias ? 1 : 0;
  o.qk_layernorm = c.qk_layernorm ? 1 : 0;
}

/// `text` in storage kept for the life of the process: the strings of the option structs the
/// library fills, whose callers own no buffer for them. Equal strings share one copy, so two
/// structs filled from equal configs hold equal bytes.
const char* interned(const std::string& text) {
  static std::mutex mutex;
  static std::set<std::string> pool;
  const std::lock_guard<std::mutex> lock(mutex);
  return pool.insert(text).first->c_str();
}

// The MoE fields, spelled the same in ptdp_gpt_options and ptdp_plan_options. Each one's 0
// means Megatron's default (num_experts 0: a dense model), so a zero tail is the old model.
template <typename Options>
void moe_fields_to_core(const Options& o, GptConfig& c) {
  require_field(o.num_experts >= 0, "num_experts", o.num_experts, "must be >= 0 (0: a dense model)");
  require_field(o.moe_router_topk >= 0, "moe_router_topk", o.moe_router_topk, "must be >= 0 (0: 2)");
  require_field(o.moe_ffn_hidden_size >= 0, "moe_ffn_hidden_size", o.moe_ffn_hidden_size,
                "must be >= 0 (0: ffn_hidden_size)");
  require_field(o.moe_shared_expert_intermediate_size >= 0, "moe_shared_expert_intermediate_size",
                o.moe_shared_expert_intermediate_size, "must be >= 0 (0: no shared expert)");
  require_field(o.moe_router_num_groups >= 0, "moe_router_num_groups", o.moe_router_num_groups,
                "must be >= 0 (0: none)");
  require_field(o.moe_router_group_topk >= 0, "moe_router_group_topk", o.moe_router_group_topk,
                "must be >= 0 (0: none)");
  require_flag(o.moe_shared_expert_gate, "moe_shared_expert_gate");
  require_flag(o.moe_router_pre_softmax, "moe_router_pre_softmax");
  require_flag(o.moe_router_enable_expert_bias, "moe_router_enable_expert_bias");
  require_flag(o.moe_pad_expert_input_to_capacity, "moe_pad_expert_input_to_capacity");
  require_flag(o.moe_layer_recompute, "moe_layer_recompute");
  PTDP_CHECK_ARG(o.moe_router_score_function == PTDP_MOE_SCORE_SOFTMAX ||
                     o.moe_router_score_function == PTDP_MOE_SCORE_SIGMOID,
                 str_cat("options->moe_router_score_function = ", static_cast<int>(o.moe_router_score_function),
                         " is not a ptdp_moe_score_function (SOFTMAX or SIGMOID)"));
  PTDP_CHECK_ARG(o.moe_router_load_balancing_type >= PTDP_MOE_BALANCING_AUX_LOSS &&
                     o.moe_router_load_balancing_type <= PTDP_MOE_BALANCING_NONE,
                 str_cat("options->moe_router_load_balancing_type = ",
                         static_cast<int>(o.moe_router_load_balancing_type), " is not a ptdp_moe_load_balancing"));
  PTDP_CHECK_ARG(o.moe_token_drop_policy == PTDP_MOE_DROP_PROBS || o.moe_token_drop_policy == PTDP_MOE_DROP_POSITION,
                 str_cat("options->moe_token_drop_policy = ", static_cast<int>(o.moe_token_drop_policy),
                         " is not a ptdp_moe_drop_policy"));
  PTDP_CHECK_ARG(o.moe_token_dispatcher_type == PTDP_MOE_DISPATCHER_ALLTOALL ||
                     o.moe_token_dispatcher_type == PTDP_MOE_DISPATCHER_ALLGATHER,
                 str_cat("options->moe_token_dispatcher_type = ", static_cast<int>(o.moe_token_dispatcher_type),
                         " is not a ptdp_moe_dispatcher"));
  for (const auto& [v, name] : {std::pair{o.moe_router_topk_scaling_factor, "moe_router_topk_scaling_factor"},
                                std::pair{o.moe_router_bias_update_rate, "moe_router_bias_update_rate"},
                                std::pair{o.moe_aux_loss_coeff, "moe_aux_loss_coeff"},
                                std::pair{o.moe_z_loss_coeff, "moe_z_loss_coeff"},
                                std::pair{o.moe_expert_capacity_factor, "moe_expert_capacity_factor"}}) {
    require_field(std::isfinite(v) && v >= 0, name, v, "must be >= 0");
  }
  MoeConfig& m = c.moe;
  const MoeConfig d;
  m.num_experts = o.num_experts;
  if (o.moe_layer_freq != nullptr && o.moe_layer_freq[0] != '\0') {
    try {
      m.layer_pattern = parse_moe_layer_freq(o.moe_layer_freq, c.num_layers);
    } catch (const Error& e) {
      throw_error(ErrorCode::InvalidArgument, str_cat("options->moe_layer_freq: ", e.what()));
    }
  }
  m.router_topk = o.moe_router_topk != 0 ? o.moe_router_topk : d.router_topk;
  m.ffn_hidden_size = o.moe_ffn_hidden_size;
  m.shared_expert_intermediate_size = o.moe_shared_expert_intermediate_size;
  m.shared_expert_gate = o.moe_shared_expert_gate == 1;
  m.score_function = static_cast<MoeScoreFunction>(o.moe_router_score_function);
  m.pre_softmax = o.moe_router_pre_softmax == 1;
  m.topk_scaling_factor = o.moe_router_topk_scaling_factor;
  m.num_groups = o.moe_router_num_groups;
  m.group_topk = o.moe_router_group_topk;
  m.enable_expert_bias = o.moe_router_enable_expert_bias == 1;
  m.bias_update_rate = or_default(o.moe_router_bias_update_rate, d.bias_update_rate);
  m.load_balancing = static_cast<MoeLoadBalancing>(o.moe_router_load_balancing_type);
  m.aux_loss_coeff = o.moe_aux_loss_coeff;
  m.z_loss_coeff = o.moe_z_loss_coeff;
  m.capacity_factor = o.moe_expert_capacity_factor;
  m.drop_policy = static_cast<MoeDropPolicy>(o.moe_token_drop_policy);
  m.pad_expert_input_to_capacity = o.moe_pad_expert_input_to_capacity == 1;
  m.dispatcher = static_cast<MoeDispatcher>(o.moe_token_dispatcher_type);
  m.recompute = o.moe_layer_recompute == 1;
}

/// The C fields of `c`'s MoE settings, the defaults resolved (2 rather than 0 for k); the layer
/// pattern as the shortest --moe-layer-freq that reads back as it (NULL: every layer).
template <typename Options>
void moe_fields_to_c(const LayerConfig& c, Options& o) {
  const MoeConfig& m = c.moe;
  o.moe_layer_freq = m.layer_pattern.empty() ? nullptr : interned(format_moe_layer_freq(m.layer_pattern, c.num_layers));
  o.num_experts = m.num_experts;
  o.moe_router_topk = m.router_topk;
  o.moe_ffn_hidden_size = m.ffn_hidden_size;
  o.moe_shared_expert_intermediate_size = m.shared_expert_intermediate_size;
  o.moe_shared_expert_gate = m.shared_expert_gate ? 1 : 0;
  o.moe_router_score_function = static_cast<ptdp_moe_score_function>(m.score_function);
  o.moe_router_pre_softmax = m.pre_softmax ? 1 : 0;
  o.moe_router_topk_scaling_factor = m.topk_scaling_factor;
  o.moe_router_num_groups = m.num_groups;
  o.moe_router_group_topk = m.group_topk;
  o.moe_router_enable_expert_bias = m.enable_expert_bias ? 1 : 0;
  o.moe_router_bias_update_rate = m.bias_update_rate;
  o.moe_router_load_balancing_type = static_cast<ptdp_moe_load_balancing>(m.load_balancing);
  o.moe_aux_loss_coeff = m.aux_loss_coeff;
  o.moe_z_loss_coeff = m.z_loss_coeff;
  o.moe_expert_capacity_factor = m.capacity_factor;
  o.moe_token_drop_policy = static_cast<ptdp_moe_drop_policy>(m.drop_policy);
  o.moe_pad_expert_input_to_capacity = m.pad_expert_input_to_capacity ? 1 : 0;
  o.moe_token_dispatcher_type = static_cast<ptdp_moe_dispatcher>(m.dispatcher);
  o.moe_layer_recompute = m.recompute ? 1 : 0;
}

// YaRN's fields, spelled the same in ptdp_gpt_options and ptdp_plan_options; each 0 means
// Megatron's default (LayerConfig's).
template <typename Options>
void yarn_fields_to_core(const Options& o, LayerConfig& c) {
  PTDP_CHECK_ARG(o.rope_type == PTDP_ROPE_TYPE_ROPE || o.rope_type == PTDP_ROPE_TYPE_YARN,
                 "options->rope_type = " + std::to_string(static_cast<int>(o.rope_type)) +
                     " is not a ptdp_rope_type (PTDP_ROPE_TYPE_ROPE or PTDP_ROPE_TYPE_YARN)");
  require_flag(o.yarn_no_round_to_int, "yarn_no_round_to_int");
  const auto non_negative_float = [](float v, const char* name, const char* want) {
    require_field(std::isfinite(v) && v >= 0, name, v, want);
  };
  non_negative_float(o.rotary_scaling_factor, "rotary_scaling_factor", "must be > 0 (0: 1)");
  non_negative_float(o.mscale, "mscale", "must be > 0 (0: 1)");
  non_negative_float(o.mscale_all_dim, "mscale_all_dim", "must be >= 0 (0: unset)");
  non_negative_float(o.beta_fast, "beta_fast", "must be > 0 (0: 32)");
  non_negative_float(o.beta_slow, "beta_slow", "must be > 0 (0: 1)");
  require_field(o.original_max_position_embeddings >= 0, "original_max_position_embeddings",
                o.original_max_position_embeddings, "must be >= 0 (0: 4096)");
  const YarnScaling d;
  c.rope_type = static_cast<RopeType>(o.rope_type);
  c.yarn.factor = or_default(o.rotary_scaling_factor, d.factor);
  c.yarn.mscale = or_default(o.mscale, d.mscale);
  c.yarn.mscale_all_dim = o.mscale_all_dim;
  c.yarn.original_max_position_embeddings =
      o.original_max_position_embeddings != 0 ? o.original_max_position_embeddings : d.original_max_position_embeddings;
  c.yarn.beta_fast = or_default(o.beta_fast, d.beta_fast);
  c.yarn.beta_slow = or_default(o.beta_slow, d.beta_slow);
  c.yarn.truncate = o.yarn_no_round_to_int == 0;
}

template <typename Options>
void yarn_fields_to_c(const LayerConfig& c, Options& o) {
  o.rope_type = static_cast<ptdp_rope_type>(c.rope_type);
  o.rotary_scaling_factor = c.yarn.factor;
  o.mscale = c.yarn.mscale;
  o.mscale_all_dim = c.yarn.mscale_all_dim;
  o.original_max_position_embeddings = c.yarn.original_max_position_embeddings;
  o.beta_fast = c.yarn.beta_fast;
  o.beta_slow = c.yarn.beta_slow;
  o.yarn_no_round_to_int = c.yarn.truncate ? 0 : 1;
}

// The multi-latent attention fields: 0 means Megatron's default (q_lora_rank 0: no query
// compression), so a zero tail is a model without MLA.
template <typename Options>
void mla_fields_to_core(const Options& o, GptConfig& c) {
  require_flag(o.multi_latent_attention, "multi_latent_attention");
  for (const auto& [v, name] : {std::pair{o.q_lora_rank, "q_lora_rank"}, std::pair{o.kv_lora_rank, "kv_lora_rank"},
                                std::pair{o.qk_head_dim, "qk_head_dim"},
                                std::pair{o.qk_pos_emb_head_dim, "qk_pos_emb_head_dim"},
                                std::pair{o.v_head_dim, "v_head_dim"}}) {
    require_field(v >= 0, name, v, "must be >= 0 (0: Megatron's default)");
  }
  const LayerConfig d;
  c.multi_latent_attention = o.multi_latent_attention == 1;
  c.q_lora_rank = o.q_lora_rank;
  c.kv_lora_rank = o.kv_lora_rank != 0 ? o.kv_lora_rank : d.kv_lora_rank;
  c.qk_head_dim = o.qk_head_dim != 0 ? o.qk_head_dim : d.qk_head_dim;
  c.qk_pos_emb_head_dim = o.qk_pos_emb_head_dim != 0 ? o.qk_pos_emb_head_dim : d.qk_pos_emb_head_dim;
  c.v_head_dim = o.v_head_dim != 0 ? o.v_head_dim : d.v_head_dim;
}

/// The MLA fields of `c`: its sizes resolved with MLA, all zero without (they do not apply).
template <typename Options>
void mla_fields_to_c(const LayerConfig& c, Options& o) {
  if (!c.multi_latent_attention) return;
  o.multi_latent_attention = 1;
  o.q_lora_rank = c.q_lora_rank;
  o.kv_lora_rank = c.kv_lora_rank;
  o.qk_head_dim = c.qk_head_dim;
  o.qk_pos_emb_head_dim = c.qk_pos_emb_head_dim;
  o.v_head_dim = c.v_head_dim;
}

/// The C options of `c` with every byte defined (padding zero), so that two can be compared.
ptdp_gpt_options gpt_options_bytes(const GptConfig& c, ptdp_device device = PTDP_DEVICE_CPU) {
  ptdp_gpt_options o;
  std::memset(static_cast<void*>(&o), 0, sizeof o);
  o.struct_size = sizeof o;
  o.num_layers = c.num_layers;
  o.hidden_size = c.hidden_size;
  o.num_attention_heads = c.num_attention_heads;
  o.ffn_hidden_size = c.ffn_hidden_size;
  o.vocab_size = c.vocab_size;
  o.make_vocab_size_divisible_by = c.make_vocab_size_divisible_by;
  o.seq_length = c.seq_length;
  o.max_position_embeddings = c.max_position_embeddings;
  o.hidden_dropout = c.hidden_dropout;
  o.attention_dropout = c.attention_dropout;
  o.init_method_std = c.init_method_std;
  o.layernorm_epsilon = c.layernorm_epsilon;
  o.untie_embeddings_and_output_weights = c.tie_embeddings ? 0 : 1;
  o.recompute_granularity = static_cast<ptdp_recompute>(c.recompute);
  o.seed = c.seed;
  o.device = device;
  o.precision = static_cast<ptdp_dtype>(c.precision);
  o.attention = static_cast<ptdp_attention>(c.attention);
  llama_fields_to_c(c, o);
  o.qk_layernorm_across_heads = c.qk_layernorm_across_heads ? 1 : 0;
  moe_fields_to_c(c, o);
  yarn_fields_to_c(c, o);
  mla_fields_to_c(c, o);
  o.mtp_num_layers = c.mtp_num_layers;
  o.mtp_loss_scaling_factor = c.mtp_loss_scaling_factor;
  o.moe_router_group_score_topk = c.moe.group_score_topk;
  o.moe_router_topk_limited_devices = c.moe.topk_limited_devices;
  return o;
}

/// The fields of ptdp_gpt_options added since its first version, by offset (for naming the
/// one a caller's struct cannot hold).
struct FieldName {
  std::size_t offset;
  const char* name;
};
#define PTDP_FIELD(f) FieldName{offsetof(ptdp_gpt_options, f), #f}
constexpr FieldName kLaterGptFields[] = {
    PTDP_FIELD(device),           PTDP_FIELD(precision),
    PTDP_FIELD(attention),        PTDP_FIELD(rotary_base),
    PTDP_FIELD(normalization),    PTDP_FIELD(swiglu),
    PTDP_FIELD(position_embedding_type), PTDP_FIELD(rotary_percent),
    PTDP_FIELD(use_rope_scaling), PTDP_FIELD(rope_scaling_factor),
    PTDP_FIELD(rope_low_freq_factor), PTDP_FIELD(rope_high_freq_factor),
    PTDP_FIELD(rope_original_max_position_embeddings), PTDP_FIELD(num_query_groups),
    PTDP_FIELD(kv_channels),      PTDP_FIELD(disable_bias_linear),
    PTDP_FIELD(add_qkv_bias),     PTDP_FIELD(qk_layernorm),
    PTDP_FIELD(moe_layer_freq),   PTDP_FIELD(num_experts),
    PTDP_FIELD(moe_router_topk),  PTDP_FIELD(moe_ffn_hidden_size),
    PTDP_FIELD(moe_shared_expert_intermediate_size), PTDP_FIELD(moe_shared_expert_gate),
    PTDP_FIELD(moe_router_score_function), PTDP_FIELD(moe_router_pre_softmax),
    PTDP_FIELD(moe_router_topk_scaling_factor), PTDP_FIELD(moe_router_num_groups),
    PTDP_FIELD(moe_router_group_topk), PTDP_FIELD(moe_router_enable_expert_bias),
    PTDP_FIELD(moe_router_bias_update_rate), PTDP_FIELD(moe_router_load_balancing_type),
    PTDP_FIELD(moe_aux_loss_coeff), PTDP_FIELD(moe_z_loss_coeff),
    PTDP_FIELD(moe_expert_capacity_factor), PTDP_FIELD(moe_token_drop_policy),
    PTDP_FIELD(moe_pad_expert_input_to_capacity), PTDP_FIELD(moe_token_dispatcher_type),
    PTDP_FIELD(moe_layer_recompute), PTDP_FIELD(qk_layernorm_across_heads),
    PTDP_FIELD(rope_type),        PTDP_FIELD(rotary_scaling_factor),
    PTDP_FIELD(mscale),           PTDP_FIELD(mscale_all_dim),
    PTDP_FIELD(original_max_position_embeddings), PTDP_FIELD(beta_fast),
    PTDP_FIELD(beta_slow),        PTDP_FIELD(yarn_no_round_to_int),
    PTDP_FIELD(multi_latent_attention), PTDP_FIELD(q_lora_rank),
    PTDP_FIELD(kv_lora_rank),     PTDP_FIELD(qk_head_dim),
    PTDP_FIELD(qk_pos_emb_head_dim), PTDP_FIELD(v_head_dim),
    PTDP_FIELD(mtp_num_layers),   PTDP_FIELD(mtp_loss_scaling_factor),
    PTDP_FIELD(moe_router_group_score_topk), PTDP_FIELD(moe_router_topk_limited_devices)};
#undef PTDP_FIELD

const char* field_at(std::size_t offset) {
  const char* name = "?";
  for (const FieldName& f : kLaterGptFields) {
    if (f.offset <= offset) name = f.name;
  }
  return name;
}

}  // namespace

namespace {

/// ptdp_gpt_options' DeepSeek routing fields: the group score's size and device-limited routing,
/// which sets group_topk to its M over the groups the caller gives.
template <typename Options>
void deepseek_routing_to_core(const Options& o, MoeConfig& m) {
  require_field(o.moe_router_group_score_topk >= 0, "moe_router_group_score_topk", o.moe_router_group_score_topk,
                "must be >= 0 (0: moe_router_topk / moe_router_group_topk)");
  require_field(o.moe_router_topk_limited_devices >= 0, "moe_router_topk_limited_devices",
                o.moe_router_topk_limited_devices, "must be >= 0 (0: none)");
  m.group_score_topk = o.moe_router_group_score_topk;
  const int limited = o.moe_router_topk_limited_devices;
  if (limited == 0) return;
  require_field(o.moe_router_num_groups > 0, "moe_router_topk_limited_devices", limited,
                "needs moe_router_num_groups (--moe-router-num-groups), the expert-parallel size its device groups "
                "are defined at");
  require_field(o.moe_router_group_topk == 0 || o.moe_router_group_topk == limited, "moe_router_group_topk",
                o.moe_router_group_topk, str_cat("must be 0 or moe_router_topk_limited_devices = ", limited).c_str());
  m.topk_limited_devices = limited;
  m.group_topk = limited;
}

}  // namespace

GptConfig gpt_config(const ptdp_gpt_options* user) {
  ptdp_gpt_options defaults;
  ptdp_gpt_options_init(&defaults);
  const ptdp_gpt_options o =
      read_options(user, defaults, "options", "ptdp_gpt_options_init");
  PTDP_CHECK_ARG(o.untie_embeddings_and_output_weights == 0 || o.untie_embeddings_and_output_weights == 1,
                 "options->untie_embeddings_and_output_weights = " +
                     std::to_string(o.untie_embeddings_and_output_weights) + " is not 0 or 1");
  PTDP_CHECK_ARG(o.recompute_granularity >= PTDP_RECOMPUTE_NONE && o.recompute_granularity <= PTDP_RECOMPUTE_SELECTIVE,
                 "options->recompute_granularity = " + std::to_string(static_cast<int>(o.recompute_granularity)) +
                     " is not a ptdp_recompute");
  GptConfig c;
  c.num_layers = o.num_layers;
  c.hidden_size = o.hidden_size;
  c.num_attention_heads = o.num_attention_heads;
  c.ffn_hidden_size = o.ffn_hidden_size;
  c.vocab_size = o.vocab_size;
  c.make_vocab_size_divisible_by = o.make_vocab_size_divisible_by;
  c.seq_length = o.seq_length;
  c.max_position_embeddings = o.max_position_embeddings;
  c.hidden_dropout = o.hidden_dropout;
  c.attention_dropout = o.attention_dropout;
  c.init_method_std = o.init_method_std;
  c.layernorm_epsilon = o.layernorm_epsilon;
  c.tie_embeddings = o.untie_embeddings_and_output_weights == 0;
  c.recompute = static_cast<Recompute>(o.recompute_granularity);
  c.seed = o.seed;
  PTDP_CHECK_ARG(o.precision == PTDP_DTYPE_F32 || o.precision == PTDP_DTYPE_BF16 || o.precision == PTDP_DTYPE_F16,
                 "options->precision = " + std::to_string(static_cast<int>(o.precision)) +
                     " is not PTDP_DTYPE_F32, PTDP_DTYPE_BF16 or PTDP_DTYPE_F16");
  c.precision = static_cast<DType>(o.precision);
  PTDP_CHECK_ARG(o.attention >= PTDP_ATTENTION_AUTO && o.attention <= PTDP_ATTENTION_UNFUSED,
                 "options->attention = " + std::to_string(static_cast<int>(o.attention)) + " is not a ptdp_attention");
  c.attention = static_cast<AttentionImpl>(o.attention);
  llama_fields_to_core(o, c);
  require_flag(o.qk_layernorm_across_heads, "qk_layernorm_across_heads");
  c.qk_layernorm_across_heads = o.qk_layernorm_across_heads == 1;
  moe_fields_to_core(o, c);
  yarn_fields_to_core(o, c);
  mla_fields_to_core(o, c);
  PTDP_CHECK_ARG(o.mtp_num_layers >= 0,
                 "options->mtp_num_layers = " + std::to_string(o.mtp_num_layers) + " must be >= 0 (0: no MTP)");
  PTDP_CHECK_ARG(std::isfinite(o.mtp_loss_scaling_factor) && o.mtp_loss_scaling_factor >= 0.0f,
                 "options->mtp_loss_scaling_factor = " + std::to_string(o.mtp_loss_scaling_factor) +
                     " must be finite and >= 0 (0: Megatron's default 0.1)");
  c.mtp_num_layers = o.mtp_num_layers;
  if (o.mtp_loss_scaling_factor > 0.0f) c.mtp_loss_scaling_factor = o.mtp_loss_scaling_factor;
  deepseek_routing_to_core(o, c.moe);
  return c;
}

void gpt_options(const GptConfig& c, ptdp_gpt_options* o) {
  require_non_null(o, "options");
  const ptdp_gpt_options full = gpt_options_bytes(c);
  std::memcpy(static_cast<void*>(o), &full, sizeof full);
}

void gpt_options_sized(const GptConfig& c, ptdp_gpt_options* o, ptdp_device device) {
  const std::size_t size = require_out_struct(o, "options");
  const ptdp_gpt_options full = gpt_options_bytes(c, device);
  const std::size_t n = std::min(size, sizeof full);
  if (n < sizeof full) {
    // What the caller's shorter struct would describe, read back as ptdp_model_create reads it:
    // the fields it lacks must not matter for this model.
    ptdp_gpt_options cut = full;
    cut.struct_size = n;
    const bool has_device = n >= offsetof(ptdp_gpt_options, device) + sizeof(ptdp_device);
    const ptdp_gpt_options back = gpt_options_bytes(gpt_config(&cut), has_device ? device : PTDP_DEVICE_CPU);
    const auto* a = reinterpret_cast<const unsigned char*>(&full);
    const auto* b = reinterpret_cast<const unsigned char*>(&back);
    for (std::size_t i = n; i < sizeof full; ++i) {
      PTDP_CHECK_ARG(a[i] == b[i], "options->struct_size = " + std::to_string(size) +
                                       " cannot hold these options: they set ptdp_gpt_options::" + field_at(i) +
                                       " (at byte " + std::to_string(i) +
                                       "), which a struct of that size lacks; build against a newer ptdp.h");
    }
  }
  std::memcpy(static_cast<void*>(o), &full, n);
  o->struct_size = n;
}

RuntimeOptions runtime_options(const ptdp_runtime_options* user, bool* use_mpi) {
  ptdp_runtime_options defaults;
  ptdp_runtime_options_init(&defaults);
  const ptdp_runtime_options o = read_options(user, defaults, "options",
                                                          "ptdp_runtime_options_init");
  require_finite(o.comm_timeout_s, "options->comm_timeout_s");  // <= 0: the default
  PTDP_CHECK_ARG(o.verify_collectives == 0 || o.verify_collectives == 1,
                 "options->verify_collectives = " + std::to_string(o.verify_collectives) + " is not 0 or 1");
  PTDP_CHECK_ARG(o.use_mpi == 0 || o.use_mpi == 1,
                 "options->use_mpi = " + std::to_string(o.use_mpi) + " is not 0 or 1");
  PTDP_CHECK_ARG(o.use_nccl == 0 || o.use_nccl == 1,
                 "options->use_nccl = " + std::to_string(o.use_nccl) + " is not 0 or 1");
  PTDP_CHECK_ARG(o.cpu_threads >= 0, "options->cpu_threads = " + std::to_string(o.cpu_threads) +
                                         " is negative (0: OMP_NUM_THREADS, else the node's CPUs over its ranks)");
  if (use_mpi) *use_mpi = o.use_mpi == 1;
  RuntimeOptions out;
  out.cpu_threads = o.cpu_threads;
  out.timeout_s = o.comm_timeout_s;
  out.verify_collectives = o.verify_collectives == 1;
  out.use_nccl = o.use_nccl == 1;
  return out;
}

ParallelConfig parallel_config(const ptdp_parallel_options* user) {
  ptdp_parallel_options defaults;
  ptdp_parallel_options_init(&defaults);
  const ptdp_parallel_options o = read_options(user, defaults, "options",
                                                           "ptdp_parallel_options_init");
  ParallelConfig c;
  c.world = 0;  // the runtime's world size, or set by the caller
  c.tensor = o.tensor_model_parallel_size;
  c.pipeline = o.pipeline_model_parallel_size;
  c.virtual_stages = o.virtual_pipeline_model_parallel_size;
  for (const auto& [v, field] : {std::pair{o.tensor_model_parallel_size, "tensor_model_parallel_size"},
                                 std::pair{o.pipeline_model_parallel_size, "pipeline_model_parallel_size"},
                                 std::pair{o.virtual_pipeline_model_parallel_size, "virtual_pipeline_model_parallel_size"}}) {
    PTDP_CHECK_ARG(v > 0, str_cat("options->", field, " = ", v, " is not > 0"));
  }
  const auto stage_layers = [](int64_t n, const char* field) {
    PTDP_CHECK_ARG(n >= 0 && n <= std::numeric_limits<int32_t>::max(),
                   str_cat("options->", field, " = ", n, " is not a layer count (>= 0; 0: an even split)"));
    return static_cast<int>(n);
  };
  c.first_stage_layers = stage_layers(o.decoder_first_pipeline_num_layers, "decoder_first_pipeline_num_layers");
  c.last_stage_layers = stage_layers(o.decoder_last_pipeline_num_layers, "decoder_last_pipeline_num_layers");
  PTDP_CHECK_ARG(o.sequence_parallel == 0 || o.sequence_parallel == 1,
                 str_cat("options->sequence_parallel = ", o.sequence_parallel, " is not 0 or 1"));
  c.sequence_parallel = o.sequence_parallel == 1;
  if (o.pipeline_model_parallel_layout != nullptr && o.pipeline_model_parallel_layout[0] != '\0') {
    c.pipeline_layout = o.pipeline_model_parallel_layout;
    try {
      const PipelineLayout l = parse_pipeline_layout(c.pipeline_layout, c.pipeline);
      if (c.virtual_stages == 1) c.virtual_stages = l.virtual_stages;
    } catch (const Error& e) {
      throw_error(ErrorCode::InvalidArgument, str_cat("options->pipeline_model_parallel_layout: ", e.what()));
    }
  }
  PTDP_CHECK_ARG(o.pipeline_chunk_placement == PTDP_CHUNK_PLACEMENT_ROUND_ROBIN ||
                     o.pipeline_chunk_placement == PTDP_CHUNK_PLACEMENT_V,
                 str_cat("options->pipeline_chunk_placement = ", o.pipeline_chunk_placement,
                         " is not a ptdp_chunk_placement (0 round-robin, 1 V)"));
  c.chunk_placement = static_cast<int>(o.pipeline_chunk_placement);
  PTDP_CHECK_ARG(o.context_parallel_size >= 1 && o.context_parallel_size <= std::numeric_limits<int32_t>::max(),
                 str_cat("options->context_parallel_size = ", o.context_parallel_size, " is not >= 1"));
  c.context = static_cast<int>(o.context_parallel_size);
  PTDP_CHECK_ARG(
      o.expert_model_parallel_size >= 0,
      str_cat("options->expert_model_parallel_size = ", o.expert_model_parallel_size, " is not >= 0 (0: 1)"));
  PTDP_CHECK_ARG(o.expert_tensor_parallel_size >= 0, str_cat("options->expert_tensor_parallel_size = ",
                                                             o.expert_tensor_parallel_size, " is not >= 0 (0: t)"));
  c.expert_model = o.expert_model_parallel_size > 0 ? o.expert_model_parallel_size : 1;
  c.expert_tensor = o.expert_tensor_parallel_size;
  return c;
}

namespace {

/// The Muon fields' checks, each naming `options->field` (read whatever the optimizer kind, as
/// every other field is; the core checks them again in its own words).
void check_muon_options(const ptdp_optimizer_options& o) {
  const auto flag = [](int32_t v, const char* name) {
    PTDP_CHECK_ARG(v == 0 || v == 1, str_cat("options->", name, " = ", v, " is not 0 or 1"));
  };
  flag(o.muon_nesterov, "muon_nesterov");
  flag(o.muon_split_qkv, "muon_split_qkv");
  flag(o.qk_clip, "qk_clip");
  const auto in_enum = [](int v, int last, const char* name, const char* type, const char* values) {
    PTDP_CHECK_ARG(v >= 0 && v <= last, str_cat("options->", name, " = ", v, " is not a ", type, " (", values, ")"));
  };
  in_enum(static_cast<int>(o.muon_coefficient_type), PTDP_NS_COEFFICIENTS_AOL, "muon_coefficient_type",
          "ptdp_ns_coefficients", "0 quintic, 1 simple, 2 polar_express, 3 aol");
  in_enum(static_cast<int>(o.muon_fp32_matmul_prec), PTDP_NS_PRECISION_MEDIUM, "muon_fp32_matmul_prec",
          "ptdp_ns_precision", "0 highest, 1 high, 2 medium");
  in_enum(static_cast<int>(o.muon_scale_mode), PTDP_MUON_SCALE_SHAPE_SCALING, "muon_scale_mode",
          "ptdp_muon_scale_mode", "0 spectral, 1 unit_rms_norm, 2 shape_scaling");
  in_enum(static_cast<int>(o.muon_tp_mode), PTDP_MUON_TP_BLOCKWISE, "muon_tp_mode", "ptdp_muon_tp_mode",
          "0 distributed, 1 duplicated, 2 blockwise");
  const auto field = [](bool ok, const char* name, double v, const char* want) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", v);
    PTDP_CHECK_ARG(ok, str_cat("options->", name, " = ", buf, " ", want));
  };
  field(o.muon_momentum >= 0 && o.muon_momentum < 1, "muon_momentum", o.muon_momentum, "must be in [0, 1)");
  field(o.muon_num_ns_steps >= 1 && o.muon_num_ns_steps <= 100, "muon_num_ns_steps", o.muon_num_ns_steps,
        "must be in [1, 100]");
  field(std::isfinite(o.muon_extra_scale_factor) && o.muon_extra_scale_factor > 0, "muon_extra_scale_factor",
        o.muon_extra_scale_factor, "must be > 0");
  field(std::isfinite(o.qk_clip_threshold) && o.qk_clip_threshold > 0, "qk_clip_threshold", o.qk_clip_threshold,
        "must be > 0");
  field(o.qk_clip_alpha >= 0 && o.qk_clip_alpha <= 1, "qk_clip_alpha", o.qk_clip_alpha, "must be in [0, 1]");
}

}  // namespace

OptimizerConfig optimizer_config(const ptdp_optimizer_options* user) {
  ptdp_optimizer_options d;
  ptdp_optimizer_options_init(&d);
  const ptdp_optimizer_options o =
      read_options(user, d, "options", "ptdp_optimizer_options_init");
  PTDP_CHECK_ARG(o.optimizer == PTDP_OPTIMIZER_ADAM || o.optimizer == PTDP_OPTIMIZER_SGD ||
                     o.optimizer == PTDP_OPTIMIZER_MUON,
                 "options->optimizer = " + std::to_string(static_cast<int>(o.optimizer)) +
                     " is not a ptdp_optimizer_kind (0 adam, 1 sgd, 2 muon)");
  PTDP_CHECK_ARG(o.lr_decay_style >= PTDP_LR_CONSTANT && o.lr_decay_style <= PTDP_LR_COSINE,
                 "options->lr_decay_style = " + std::to_string(static_cast<int>(o.lr_decay_style)) +
                     " is not a ptdp_lr_decay_style");
  PTDP_CHECK_ARG(o.dynamic_loss_scale == 0 || o.dynamic_loss_scale == 1,
                 "options->dynamic_loss_scale = " + std::to_string(o.dynamic_loss_scale) + " is not 0 or 1");
  PTDP_CHECK_ARG(o.use_distributed_optimizer == 0 || o.use_distributed_optimizer == 1,
                 "options->use_distributed_optimizer = " + std::to_string(o.use_distributed_optimizer) + " is not 0 or 1");
  PTDP_CHECK_ARG(o.overlap_grad_reduce == 0 || o.overlap_grad_reduce == 1,
                 "options->overlap_grad_reduce = " + std::to_string(o.overlap_grad_reduce) + " is not 0 or 1");
  PTDP_CHECK_ARG(o.overlap_param_gather == 0 || o.overlap_param_gather == 1,
                 "options->overlap_param_gather = " + std::to_string(o.overlap_param_gather) + " is not 0 or 1");
  PTDP_CHECK_ARG(o.overlap_param_gather == 0 || (o.use_distributed_optimizer == 1 && o.overlap_grad_reduce == 1),
                 "options->overlap_param_gather = 1 needs options->use_distributed_optimizer = 1 and "
                 "options->overlap_grad_reduce = 1");
  // Range checks that name the struct's fields (the core checks again, in its own words).
  const auto field = [](bool ok, const char* name, double v, const char* want) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", v);
    PTDP_CHECK_ARG(ok, std::string("options->") + name + " = " + buf + " " + want);
  };
  field(std::isfinite(o.lr) && o.lr >= 0, "lr", o.lr, "must be >= 0");
  field(std::isfinite(o.min_lr) && o.min_lr >= 0 && o.min_lr <= o.lr, "min_lr", o.min_lr, "must be in [0, lr]");
  field(o.lr_warmup_iters >= 0, "lr_warmup_iters", static_cast<double>(o.lr_warmup_iters), "must be >= 0");
  field(o.lr_decay_iters >= 0, "lr_decay_iters", static_cast<double>(o.lr_decay_iters), "must be >= 0");
  field(o.adam_beta1 >= 0 && o.adam_beta1 < 1, "adam_beta1", o.adam_beta1, "must be in [0, 1)");
  field(o.adam_beta2 >= 0 && o.adam_beta2 < 1, "adam_beta2", o.adam_beta2, "must be in [0, 1)");
  field(o.adam_eps > 0, "adam_eps", o.adam_eps, "must be > 0");
  field(o.weight_decay >= 0, "weight_decay", o.weight_decay, "must be >= 0");
  field(o.sgd_momentum >= 0, "sgd_momentum", o.sgd_momentum, "must be >= 0");
  field(o.clip_grad >= 0, "clip_grad", o.clip_grad, "must be >= 0 (0: no clipping)");
  field(std::isfinite(o.initial_loss_scale) && o.initial_loss_scale > 0, "initial_loss_scale", o.initial_loss_scale,
        "must be > 0");
  field(o.min_loss_scale > 0 && o.min_loss_scale <= o.initial_loss_scale, "min_loss_scale", o.min_loss_scale,
        "must be in (0, initial_loss_scale]");
  field(o.loss_scale_window > 0, "loss_scale_window", o.loss_scale_window, "must be > 0");
  field(o.hysteresis > 0, "hysteresis", o.hysteresis, "must be > 0");
  field(o.ddp_bucket_size >= 0, "ddp_bucket_size", static_cast<double>(o.ddp_bucket_size), "must be >= 0 (0: one bucket)");
  check_muon_options(o);
  OptimizerConfig c;
  c.kind = static_cast<OptimizerKind>(o.optimizer);
  c.lr.lr = o.lr;
  c.lr.min_lr = o.min_lr;
  c.lr.style = static_cast<LrDecayStyle>(o.lr_decay_style);
  c.lr.warmup_iters = o.lr_warmup_iters;
  c.lr.decay_iters = o.lr_decay_iters;
  c.beta1 = o.adam_beta1;
  c.beta2 = o.adam_beta2;
  c.eps = o.adam_eps;
  c.weight_decay = o.weight_decay;
  c.momentum = o.sgd_momentum;
  c.clip_grad = o.clip_grad;
  c.loss_scale.dynamic = o.dynamic_loss_scale == 1;
  c.loss_scale.initial_scale = o.initial_loss_scale;
  c.loss_scale.min_scale = o.min_loss_scale;
  c.loss_scale.growth_interval = o.loss_scale_window;
  c.loss_scale.hysteresis = o.hysteresis;
  c.distributed = o.use_distributed_optimizer == 1;
  c.bucket_elements = o.ddp_bucket_size;
  c.overlap_grad_reduce = o.overlap_grad_reduce == 1;
  c.overlap_param_gather = o.overlap_param_gather == 1;
  c.muon.momentum = o.muon_momentum;
  c.muon.nesterov = o.muon_nesterov == 1;
  c.muon.ns_steps = o.muon_num_ns_steps;
  c.muon.coefficients = static_cast<NsCoefficients>(o.muon_coefficient_type);
  c.muon.precision = static_cast<NsPrecision>(o.muon_fp32_matmul_prec);
  c.muon.scale_mode = static_cast<MuonScaleMode>(o.muon_scale_mode);
  c.muon.extra_scale_factor = o.muon_extra_scale_factor;
  c.muon.split_qkv = o.muon_split_qkv == 1;
  c.muon.tp_mode = static_cast<MuonTpMode>(o.muon_tp_mode);
  c.muon.qk_clip = o.qk_clip == 1;
  c.muon.qk_clip_threshold = o.qk_clip_threshold;
  c.muon.qk_clip_alpha = o.qk_clip_alpha;
  c.validate();
  return c;
}

void optimizer_options(const OptimizerConfig& k, ptdp_optimizer_options* o) {
  ptdp_optimizer_options_init(o);
  o->optimizer = static_cast<ptdp_optimizer_kind>(k.kind);
  o->lr = k.lr.lr;
  o->min_lr = k.lr.min_lr;
  o->lr_decay_style = static_cast<ptdp_lr_decay_style>(k.lr.style);
  o->lr_warmup_iters = k.lr.warmup_iters;
  o->lr_decay_iters = k.lr.decay_iters;
  o->adam_beta1 = k.beta1;
  o->adam_beta2 = k.beta2;
  o->adam_eps = k.eps;
  o->weight_decay = k.weight_decay;
  o->sgd_momentum = k.momentum;
  o->clip_grad = k.clip_grad;
  o->dynamic_loss_scale = k.loss_scale.dynamic ? 1 : 0;
  o->initial_loss_scale = k.loss_scale.initial_scale;
  o->min_loss_scale = k.loss_scale.min_scale;
  o->loss_scale_window = k.loss_scale.growth_interval;
  o->hysteresis = k.loss_scale.hysteresis;
  o->use_distributed_optimizer = k.distributed ? 1 : 0;
  o->ddp_bucket_size = k.bucket_elements;
  o->overlap_grad_reduce = k.overlap_grad_reduce ? 1 : 0;
  o->overlap_param_gather = k.overlap_param_gather ? 1 : 0;
  o->muon_momentum = k.muon.momentum;
  o->muon_nesterov = k.muon.nesterov ? 1 : 0;
  o->muon_num_ns_steps = k.muon.ns_steps;
  o->muon_coefficient_type = static_cast<ptdp_ns_coefficients>(k.muon.coefficients);
  o->muon_fp32_matmul_prec = static_cast<ptdp_ns_precision>(k.muon.precision);
  o->muon_scale_mode = static_cast<ptdp_muon_scale_mode>(k.muon.scale_mode);
  o->muon_extra_scale_factor = k.muon.extra_scale_factor;
  o->muon_split_qkv = k.muon.split_qkv ? 1 : 0;
  o->muon_tp_mode = static_cast<ptdp_muon_tp_mode>(k.muon.tp_mode);
  o->qk_clip = k.muon.qk_clip ? 1 : 0;
  o->qk_clip_threshold = k.muon.qk_clip_threshold;
  o->qk_clip_alpha = k.muon.qk_clip_alpha;
}

void iteration_result(const OptimizerStepResult& s, int64_t skipped_total, float loss, ptdp_iteration_result* out,
                      double seconds, double comm_wait_seconds) {
  if (!out) return;
  out->seconds = seconds;
  out->comm_wait_seconds = comm_wait_seconds;
  out->loss = loss;
  out->grad_norm = s.grad_norm;
  out->learning_rate = s.lr;
  out->loss_scale = s.loss_scale;
  out->skipped = s.skipped ? 1 : 0;
  out->skipped_iterations = skipped_total;
}

void cluster_to_c(const plan::Cluster& c, ptdp_cluster* out) {
  ptdp_cluster o{};
  o.struct_size = sizeof(ptdp_cluster);
  std::strncpy(o.name, c.name.c_str(), sizeof(o.name) - 1);
  o.gpus_per_node = c.gpus_per_node;
  o.nodes = c.nodes;
  o.memory_bytes = c.memory_bytes;
  o.memory_reserve_bytes = c.memory_reserve_bytes;
  o.peak_flops_16bit = c.peak_flops_16bit;
  o.peak_flops_fp32 = c.peak_flops_fp32;
  o.gemm_efficiency = c.gemm_efficiency;
  o.memory_bandwidth = c.memory_bandwidth;
  o.intra_node_bandwidth = c.intra_node_bandwidth;
  o.intra_node_latency = c.intra_node_latency;
  o.inter_node_bandwidth = c.inter_node_bandwidth;
  o.inter_node_latency = c.inter_node_latency;
  o.elementwise_bandwidth = c.elementwise_bandwidth;
  std::strncpy(o.gemm_table_16bit, c.gemm_table_16bit.c_str(), sizeof(o.gemm_table_16bit) - 1);
  std::strncpy(o.gemm_table_fp32, c.gemm_table_fp32.c_str(), sizeof(o.gemm_table_fp32) - 1);
  *out = o;
}

plan::Cluster cluster_from_c(const ptdp_cluster* user) {
  ptdp_cluster defaults;
  cluster_to_c(plan::cluster_preset("dgx-a100"), &defaults);
  // A struct from before the GEMM tables (0.2.0's 128 bytes) gets the fields added since from
  // the preset it names (ptdp_cluster_preset() filled it), else ptdp_cluster_init()'s.
  if (user != nullptr && user->struct_size >= offsetof(ptdp_cluster, name) + sizeof(user->name) &&
      user->struct_size < sizeof(ptdp_cluster) && std::memchr(user->name, '\0', sizeof(user->name)) != nullptr) {
    for (const std::string& preset : plan::cluster_preset_names()) {
      if (preset == user->name) cluster_to_c(plan::cluster_preset(preset), &defaults);
    }
  }
  const ptdp_cluster c = read_options(user, defaults, "cluster", "ptdp_cluster_init");
  plan::Cluster out;
  PTDP_CHECK_ARG(std::memchr(c.name, '\0', sizeof(c.name)) != nullptr, "cluster->name is not NUL-terminated");
  out.name = c.name[0] != '\0' ? std::string(c.name) : std::string("custom");
  out.gpus_per_node = c.gpus_per_node;
  out.nodes = c.nodes;
  out.memory_bytes = c.memory_bytes;
  out.memory_reserve_bytes = c.memory_reserve_bytes;
  out.peak_flops_16bit = c.peak_flops_16bit;
  out.peak_flops_fp32 = c.peak_flops_fp32;
  out.gemm_efficiency = c.gemm_efficiency;
  out.memory_bandwidth = c.memory_bandwidth;
  out.intra_node_bandwidth = c.intra_node_bandwidth;
  out.intra_node_latency = c.intra_node_latency;
  out.inter_node_bandwidth = c.inter_node_bandwidth;
  out.inter_node_latency = c.inter_node_latency;
  PTDP_CHECK_ARG(std::memchr(c.gemm_table_16bit, '\0', sizeof(c.gemm_table_16bit)) != nullptr,
                 "cluster->gemm_table_16bit is not NUL-terminated");
  PTDP_CHECK_ARG(std::memchr(c.gemm_table_fp32, '\0', sizeof(c.gemm_table_fp32)) != nullptr,
                 "cluster->gemm_table_fp32 is not NUL-terminated");
  out.elementwise_bandwidth = c.elementwise_bandwidth;
  out.gemm_table_16bit = c.gemm_table_16bit;
  out.gemm_table_fp32 = c.gemm_table_fp32;
  out.validate();
  return out;
}

void plan_options_defaults(ptdp_plan_options* o) {
  const ptdp::GptConfig g;
  o->num_layers = g.num_layers;
  o->hidden_size = g.hidden_size;
  o->num_attention_heads = g.num_attention_heads;
  o->ffn_hidden_size = g.ffn_hidden_size;
  o->vocab_size = g.vocab_size;
  o->make_vocab_size_divisible_by = g.make_vocab_size_divisible_by;
  o->seq_length = g.seq_length;
  o->max_position_embeddings = g.max_position_embeddings;
  o->untie_embeddings_and_output_weights = 0;
  o->attention_dropout = g.attention_dropout;
  o->global_batch_size = 0;
  o->precision = PTDP_DTYPE_F32;
  o->use_distributed_optimizer = 0;
  o->recompute_granularity = -1;
  o->num_gpus = 0;
  o->tensor_model_parallel_size = 0;
  o->pipeline_model_parallel_size = 0;
  o->num_layers_per_virtual_pipeline_stage = 0;
  o->micro_batch_size = 0;
  o->pipeline_schedule = -1;
  o->scatter_gather = 1;
  o->overlap_grad_reduce = 1;
  o->top = 5;
  o->hidden_dropout_set = 1;
  o->hidden_dropout = 0.1f;
  o->sequence_parallel = 0;
  o->context_parallel_size = 1;
  o->attention = PTDP_ATTENTION_AUTO;
  // The Llama fields stay zero: the GPT (reset_options zeroed them).
}

void plan_options_to_c(const plan::PlanRequest& r, ptdp_plan_options* out) {
  ptdp_plan_options o{};
  o.struct_size = sizeof(ptdp_plan_options);
  plan_options_defaults(&o);
  const ptdp::GptConfig& g = r.model;
  o.num_layers = g.num_layers;
  o.hidden_size = g.hidden_size;
  o.num_attention_heads = g.num_attention_heads;
  o.ffn_hidden_size = g.ffn_hidden_size;
  o.vocab_size = g.vocab_size;
  o.make_vocab_size_divisible_by = g.make_vocab_size_divisible_by;
  o.seq_length = g.seq_length;
  o.max_position_embeddings = g.max_position_embeddings;
  o.untie_embeddings_and_output_weights = g.tie_embeddings ? 0 : 1;
  o.attention_dropout = g.attention_dropout;
  o.hidden_dropout = g.hidden_dropout;
  o.global_batch_size = r.global_batch_size;
  o.precision = r.precision == plan::Precision::Bf16   ? PTDP_DTYPE_BF16
                : r.precision == plan::Precision::Fp16 ? PTDP_DTYPE_F16
                                                       : PTDP_DTYPE_F32;
  o.use_distributed_optimizer = r.allow_distributed_optimizer ? 1 : 0;
  int allowed = 0, which = -1;
  for (int i = 0; i < 3; ++i) {
    if (r.allow_recompute[i]) {
      ++allowed;
      which = i;
    }
  }
  o.recompute_granularity = allowed == 1 ? which : -1;
  o.num_gpus = r.num_gpus;
  o.tensor_model_parallel_size = r.tensor;
  o.pipeline_model_parallel_size = r.pipeline;
  o.num_layers_per_virtual_pipeline_stage = r.layers_per_virtual_stage;
  o.decoder_first_pipeline_num_layers = r.first_stage_layers;
  o.decoder_last_pipeline_num_layers = r.last_stage_layers;
  o.micro_batch_size = r.micro_batch;
  o.pipeline_schedule = r.schedule;
  o.scatter_gather = r.scatter_gather ? 1 : 0;
  o.overlap_grad_reduce = r.overlap_grad_reduce ? 1 : 0;
  o.top = r.top;
  o.sequence_parallel = r.allow_sequence_parallel ? 1 : 0;
  o.context_parallel_size = r.context_parallel;
  o.attention = static_cast<ptdp_attention>(g.attention);
  llama_fields_to_c(g, o);
  moe_fields_to_c(g, o);
  o.expert_model_parallel_size = r.expert_model;
  o.expert_tensor_parallel_size = r.expert_tensor;
  o.qk_layernorm_across_heads = g.qk_layernorm_across_heads ? 1 : 0;
  yarn_fields_to_c(g, o);
  mla_fields_to_c(g, o);
  o.mtp_num_layers = g.mtp_num_layers;
  o.mtp_loss_scaling_factor = g.mtp_loss_scaling_factor;
  o.moe_router_group_score_topk = g.moe.group_score_topk;
  o.moe_router_topk_limited_devices = g.moe.topk_limited_devices;
  o.optimizer = static_cast<ptdp_optimizer_kind>(r.optimizer);
  o.muon_num_ns_steps = r.muon_ns_steps;
  o.muon_no_split_qkv = r.muon_split_qkv ? 0 : 1;
  *out = o;
}

plan::PlanRequest plan_request(const ptdp_plan_options* user) {
  require_non_null(user, "options");
  ptdp_plan_options defaults{};
  defaults.struct_size = sizeof(defaults);
  plan_options_defaults(&defaults);
  const ptdp_plan_options o =
      read_options(user, defaults, "options", "ptdp_plan_options_init");
  plan::PlanRequest r;
  ptdp::GptConfig& g = r.model;
  g.num_layers = o.num_layers;
  g.hidden_size = o.hidden_size;
  g.num_attention_heads = o.num_attention_heads;
  g.ffn_hidden_size = o.ffn_hidden_size;
  g.vocab_size = o.vocab_size;
  g.make_vocab_size_divisible_by = o.make_vocab_size_divisible_by;
  g.seq_length = o.seq_length;
  g.max_position_embeddings = o.max_position_embeddings;
  PTDP_CHECK_ARG(o.untie_embeddings_and_output_weights == 0 || o.untie_embeddings_and_output_weights == 1,
                 str_cat("options->untie_embeddings_and_output_weights = ", o.untie_embeddings_and_output_weights,
                         " is not 0 or 1"));
  g.tie_embeddings = o.untie_embeddings_and_output_weights == 0;
  g.attention_dropout = o.attention_dropout;
  PTDP_CHECK_ARG(o.hidden_dropout_set == 0 || o.hidden_dropout_set == 1,
                 str_cat("options->hidden_dropout_set = ", o.hidden_dropout_set, " is not 0 or 1"));
  g.hidden_dropout = o.hidden_dropout_set == 1 ? o.hidden_dropout : 0.1f;
  llama_fields_to_core(o, g);
  moe_fields_to_core(o, g);  // after num_layers: the layer pattern is read against it
  PTDP_CHECK_ARG(o.expert_model_parallel_size >= 0,
                 str_cat("options->expert_model_parallel_size = ", o.expert_model_parallel_size,
                         " is negative (0: search)"));
  PTDP_CHECK_ARG(o.expert_tensor_parallel_size >= 0,
                 str_cat("options->expert_tensor_parallel_size = ", o.expert_tensor_parallel_size,
                         " is negative (0: search)"));
  r.expert_model = o.expert_model_parallel_size;
  r.expert_tensor = o.expert_tensor_parallel_size;
  require_flag(o.qk_layernorm_across_heads, "qk_layernorm_across_heads");
  g.qk_layernorm_across_heads = o.qk_layernorm_across_heads == 1;
  yarn_fields_to_core(o, g);
  mla_fields_to_core(o, g);
  PTDP_CHECK_ARG(o.mtp_num_layers >= 0,
                 "options->mtp_num_layers = " + std::to_string(o.mtp_num_layers) + " must be >= 0 (0: no MTP)");
  PTDP_CHECK_ARG(std::isfinite(o.mtp_loss_scaling_factor) && o.mtp_loss_scaling_factor >= 0.0f,
                 "options->mtp_loss_scaling_factor = " + std::to_string(o.mtp_loss_scaling_factor) +
                     " must be finite and >= 0 (0: Megatron's default 0.1)");
  g.mtp_num_layers = o.mtp_num_layers;
  if (o.mtp_loss_scaling_factor > 0.0f) g.mtp_loss_scaling_factor = o.mtp_loss_scaling_factor;
  deepseek_routing_to_core(o, g.moe);
  r.global_batch_size = o.global_batch_size;
  PTDP_CHECK_ARG(o.global_batch_size > 0, str_cat("options->global_batch_size = ", o.global_batch_size, " is not > 0"));
  switch (o.precision) {
    case PTDP_DTYPE_F32: r.precision = plan::Precision::Fp32; break;
    case PTDP_DTYPE_BF16: r.precision = plan::Precision::Bf16; break;
    case PTDP_DTYPE_F16: r.precision = plan::Precision::Fp16; break;
    default:
      ptdp::throw_error(ptdp::ErrorCode::InvalidArgument,
                        str_cat("options->precision = ", static_cast<int>(o.precision), " is not F32, BF16 or F16"));
  }
  PTDP_CHECK_ARG(o.use_distributed_optimizer == 0 || o.use_distributed_optimizer == 1,
                 str_cat("options->use_distributed_optimizer = ", o.use_distributed_optimizer, " is not 0 or 1"));
  r.allow_distributed_optimizer = o.use_distributed_optimizer == 1;
  PTDP_CHECK_ARG(o.recompute_granularity >= -1 && o.recompute_granularity <= 2,
                 str_cat("options->recompute_granularity = ", o.recompute_granularity,
                         " is not -1 (search) or a ptdp_recompute"));
  for (int i = 0; i < 3; ++i) r.allow_recompute[i] = o.recompute_granularity < 0 || o.recompute_granularity == i;
  r.num_gpus = o.num_gpus;
  r.tensor = o.tensor_model_parallel_size;
  r.pipeline = o.pipeline_model_parallel_size;
  r.layers_per_virtual_stage = o.num_layers_per_virtual_pipeline_stage;
  PTDP_CHECK_ARG(o.decoder_first_pipeline_num_layers >= 0,
                 str_cat("options->decoder_first_pipeline_num_layers = ", o.decoder_first_pipeline_num_layers,
                         " is not >= 0 (0: search)"));
  PTDP_CHECK_ARG(o.decoder_last_pipeline_num_layers >= 0,
                 str_cat("options->decoder_last_pipeline_num_layers = ", o.decoder_last_pipeline_num_layers,
                         " is not >= 0 (0: search)"));
  r.first_stage_layers = o.decoder_first_pipeline_num_layers;
  r.last_stage_layers = o.decoder_last_pipeline_num_layers;
  r.micro_batch = o.micro_batch_size;
  r.schedule = o.pipeline_schedule;
  PTDP_CHECK_ARG(o.scatter_gather == 0 || o.scatter_gather == 1,
                 str_cat("options->scatter_gather = ", o.scatter_gather, " is not 0 or 1"));
  PTDP_CHECK_ARG(o.overlap_grad_reduce == 0 || o.overlap_grad_reduce == 1,
                 str_cat("options->overlap_grad_reduce = ", o.overlap_grad_reduce, " is not 0 or 1"));
  r.scatter_gather = o.scatter_gather == 1;
  r.overlap_grad_reduce = o.overlap_grad_reduce == 1;
  r.top = o.top;
  PTDP_CHECK_ARG(o.sequence_parallel == 0 || o.sequence_parallel == 1,
                 str_cat("options->sequence_parallel = ", o.sequence_parallel, " is not 0 or 1"));
  r.allow_sequence_parallel = o.sequence_parallel == 1;
  PTDP_CHECK_ARG(o.context_parallel_size >= 0,
                 str_cat("options->context_parallel_size = ", o.context_parallel_size,
                         " is negative (1: none, N > 1: pin, 0: search)"));
  r.context_parallel = o.context_parallel_size;
  PTDP_CHECK_ARG(o.attention >= PTDP_ATTENTION_AUTO && o.attention <= PTDP_ATTENTION_UNFUSED,
                 str_cat("options->attention = ", static_cast<int>(o.attention), " is not a ptdp_attention"));
  g.attention = static_cast<ptdp::AttentionImpl>(o.attention);
  PTDP_CHECK_ARG(o.optimizer == PTDP_OPTIMIZER_ADAM || o.optimizer == PTDP_OPTIMIZER_SGD ||
                     o.optimizer == PTDP_OPTIMIZER_MUON,
                 str_cat("options->optimizer = ", static_cast<int>(o.optimizer),
                         " is not a ptdp_optimizer_kind (ADAM, SGD or MUON)"));
  r.optimizer = static_cast<plan::PlanOptimizer>(o.optimizer);
  PTDP_CHECK_ARG(o.muon_num_ns_steps >= 0 && o.muon_num_ns_steps <= 100,
                 str_cat("options->muon_num_ns_steps = ", o.muon_num_ns_steps, " is not in [1, 100] (0: 5)"));
  if (o.muon_num_ns_steps > 0) r.muon_ns_steps = o.muon_num_ns_steps;
  require_flag(o.muon_no_split_qkv, "muon_no_split_qkv");
  r.muon_split_qkv = o.muon_no_split_qkv == 0;
  r.validate();
  return r;
}

}  // namespace ptdp::capi
