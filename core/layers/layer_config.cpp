#include "core/layers/layer_config.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/checked_math.h"
#include "base/error.h"

namespace ptdp {

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::None: return "none";
    case Recompute::Full: return "full";
    case Recompute::Selective: return "selective";
  }
  return "?";
}

const char* normalization_name(Normalization n) {
  switch (n) {
    case Normalization::LayerNorm: return "LayerNorm";
    case Normalization::RMSNorm: return "RMSNorm";
  }
  return "?";
}

const char* position_embedding_name(PositionEmbedding p) {
  switch (p) {
    case PositionEmbedding::LearnedAbsolute: return "learned_absolute";
    case PositionEmbedding::Rope: return "rope";
    case PositionEmbedding::None: return "none";
  }
  return "?";
}

namespace {
std::string num(int v) { return std::to_string(v); }
std::string num(int64_t v) { return std::to_string(v); }
std::string num(float v) { return std::to_string(v); }
}  // namespace

void LayerConfig::validate(int t) const {
  const auto positive = [](const char* name, int64_t v) {
    PTDP_CHECK_ARG(v > 0, std::string(name) + " must be > 0, got " + num(v));
  };
  positive("num_layers", num_layers);
  positive("hidden_size", hidden_size);
  positive("num_attention_heads", num_attention_heads);
  positive("seq_length", seq_length);
  positive("tensor parallel size", t);
  check_sizes();
  PTDP_CHECK_ARG(ffn_hidden_size >= 0, "ffn_hidden_size must be >= 0 (0: 4 x hidden), got " + num(ffn_hidden_size));
  PTDP_CHECK_ARG(kv_channels >= 0, "kv_channels (--kv-channels) must be >= 0 (0: hidden_size / num_attention_heads), got " +
                                       num(kv_channels));
  PTDP_CHECK_ARG(num_query_groups >= 0, "num_query_groups (--num-query-groups) must be >= 0 (0: num_attention_heads), got " +
                                            num(num_query_groups));
  PTDP_CHECK_ARG(kv_channels > 0 || multi_latent_attention || hidden_size % num_attention_heads == 0,
                 "hidden_size " + num(hidden_size) + " is not divisible by num_attention_heads " +
                     num(num_attention_heads) + " (or set kv_channels, --kv-channels)");
  PTDP_CHECK_ARG(num_attention_heads % t == 0, "num_attention_heads " + num(num_attention_heads) +
                                                   " is not divisible by the tensor parallel size " + num(t));
  const int g = query_groups();
  PTDP_CHECK_ARG(g <= num_attention_heads && num_attention_heads % g == 0,
                 "num_query_groups (--num-query-groups) " + num(g) + " does not divide num_attention_heads " +
                     num(num_attention_heads));
  PTDP_CHECK_ARG(g % t == 0, "num_query_groups (--num-query-groups) " + num(g) +
                                 " is not divisible by the tensor parallel size " + num(t) +
                                 " (each tensor rank holds whole key/value heads)");
  PTDP_CHECK_ARG(ffn() > 0, "ffn_hidden_size is " + num(ffn()) + ": with --swiglu and hidden_size " + num(hidden_size) +
                                " Megatron's default int(8 h / 3 / 64) * 64 is 0; set ffn_hidden_size (--ffn-hidden-size)");
  PTDP_CHECK_ARG(ffn() % t == 0, "ffn_hidden_size " + num(ffn()) + " is not divisible by the tensor parallel size " + num(t));
  PTDP_CHECK_ARG(!sequence_parallel || seq_length % t == 0,
                 "seq_length " + num(seq_length) + " is not divisible by the tensor parallel size " + num(t) +
                     ": sequence parallelism (--sequence-parallel) gives each tensor rank s/t positions");
  PTDP_CHECK_ARG(!qk_layernorm_across_heads || qk_layernorm,
                 "--qk-layernorm-across-heads changes the q/k norms of --qk-layernorm, which is not set");
  PTDP_CHECK_ARG(!qk_layernorm_across_heads || normalization == Normalization::RMSNorm,
                 "--qk-layernorm-across-heads needs --normalization RMSNorm (its norms over the whole query and key "
                 "projections are RMSNorms), not LayerNorm");
  validate_moe(t);
  validate_mla();
  const auto rate = [](const char* name, float p) {
    PTDP_CHECK_ARG(p >= 0.0f && p < 1.0f, std::string(name) + " must be in [0, 1), got " + num(p));
  };
  rate("hidden_dropout", hidden_dropout);
  rate("attention_dropout", attention_dropout);
  PTDP_CHECK_ARG(init_method_std > 0.0f && std::isfinite(init_method_std),
                 "init_method_std must be > 0, got " + num(init_method_std));
  PTDP_CHECK_ARG(layernorm_epsilon > 0.0f && std::isfinite(layernorm_epsilon),
                 "layernorm_epsilon (--norm-epsilon) must be > 0, got " + num(layernorm_epsilon));
  PTDP_CHECK_ARG(static_cast<int>(recompute) >= 0 && static_cast<int>(recompute) <= 2,
                 "recompute granularity " + num(static_cast<int>(recompute)) + " is not none, full or selective");
  PTDP_CHECK_ARG(precision == DType::F32 || precision == DType::BF16 || precision == DType::F16,
                 "precision " + num(static_cast<int>(precision)) + " is not f32, bf16 or f16");
  PTDP_CHECK_ARG(static_cast<int>(attention) >= 0 && static_cast<int>(attention) <= 2,
                 "attention implementation " + num(static_cast<int>(attention)) + " is not auto, fused or unfused");
  PTDP_CHECK_ARG(static_cast<int>(normalization) >= 0 && static_cast<int>(normalization) <= 1,
                 "normalization (--normalization) " + num(static_cast<int>(normalization)) +
                     " is not LayerNorm (0) or RMSNorm (1)");
  PTDP_CHECK_ARG(static_cast<int>(position_embedding) >= 0 && static_cast<int>(position_embedding) <= 2,
                 "position_embedding_type (--position-embedding-type) " + num(static_cast<int>(position_embedding)) +
                     " is not learned_absolute (0), rope (1) or none (2)");
  PTDP_CHECK_ARG(!rope_scaling.enabled || rope(),
                 "use_rope_scaling (--use-rope-scaling) needs position_embedding_type rope, not " +
                     std::string(position_embedding_name(position_embedding)));
  PTDP_CHECK_ARG(static_cast<int>(rope_type) >= 0 && static_cast<int>(rope_type) <= 1,
                 "rope_type (--rope-type) " + num(static_cast<int>(rope_type)) + " is not rope (0) or yarn (1)");
  PTDP_CHECK_ARG(rope_type == RopeType::Rope || rope(),
                 "rope_type yarn (--rope-type yarn) needs position_embedding_type rope, not " +
                     std::string(position_embedding_name(position_embedding)));
  if (!rope()) return;
  if (rope_type == RopeType::Yarn) validate_yarn();
  PTDP_CHECK_ARG(rotary_percent > 0.0f && rotary_percent <= 1.0f,
                 "rotary_percent (--rotary-percent) must be in (0, 1], got " + num(rotary_percent));
  PTDP_CHECK_ARG(rotary_base > 0.0f && std::isfinite(rotary_base),
                 "rotary_base (--rotary-base) must be > 0, got " + num(rotary_base));
  const int rot = rotary_dim();
  PTDP_CHECK_ARG(rot >= 2 && rot % 2 == 0,
                 std::string(multi_latent_attention ? "rotary embedding: qk_pos_emb_head_dim (--qk-pos-emb-head-dim) "
                                                    : "rotary embedding: the head dim ") +
                     num(rope_head_dim()) + " times rotary_percent (--rotary-percent) " +
                     num(rotary_percent) + " gives " + num(rot) + " rotated dims; RoPE rotates pairs, so it must be even and > 0");
  if (rope_scaling.enabled) {
    PTDP_CHECK_ARG(rope_scaling.factor >= 1.0f && std::isfinite(rope_scaling.factor),
                   "rope_scaling_factor (--rope-scaling-factor) must be >= 1, got " + num(rope_scaling.factor));
    PTDP_CHECK_ARG(rope_scaling.low_freq_factor > 0.0f && rope_scaling.high_freq_factor > rope_scaling.low_freq_factor,
                   "rope scaling: high_freq_factor " + num(rope_scaling.high_freq_factor) +
                       " must exceed low_freq_factor " + num(rope_scaling.low_freq_factor) + " > 0");
    PTDP_CHECK_ARG(rope_scaling.original_max_position_embeddings > 0,
                   "rope scaling: original_max_position_embeddings must be > 0, got " +
                       num(rope_scaling.original_max_position_embeddings));
  }
}

void LayerConfig::validate_yarn() const {
  PTDP_CHECK_ARG(!rope_scaling.enabled, "rope_type yarn (--rope-type yarn) and Llama 3.1's use_rope_scaling "
                                        "(--use-rope-scaling) both rescale the rotary frequencies: give one");
  const YarnScaling& y = yarn;
  PTDP_CHECK_ARG(y.factor > 0.0f && std::isfinite(y.factor),
                 "rotary_scaling_factor (--rotary-scaling-factor) must be > 0, got " + num(y.factor));
  PTDP_CHECK_ARG(y.mscale > 0.0f && std::isfinite(y.mscale), "mscale (--mscale) must be > 0, got " + num(y.mscale));
  PTDP_CHECK_ARG(y.mscale_all_dim >= 0.0f && std::isfinite(y.mscale_all_dim),
                 "mscale_all_dim (--mscale-all-dim) must be >= 0 (0: unset), got " + num(y.mscale_all_dim));
  // Megatron divides by yarn_get_mscale(factor, 0) = 1 and so uses mscale alone; Hugging Face
  // ignores mscale without mscale_all_dim. Refused rather than silently taking one side.
  PTDP_CHECK_ARG(y.mscale == 1.0f || y.mscale_all_dim > 0.0f,
                 "mscale (--mscale) " + num(y.mscale) + " without mscale_all_dim (--mscale-all-dim): Megatron "
                 "scales cos and sin by 0.1 mscale ln(factor) + 1, Hugging Face ignores mscale; give both");
  PTDP_CHECK_ARG(y.original_max_position_embeddings > 0,
                 "original_max_position_embeddings (--original-max-position-embeddings) must be > 0, got " +
                     num(y.original_max_position_embeddings));
  PTDP_CHECK_ARG(y.beta_slow > 0.0f && std::isfinite(y.beta_fast) && y.beta_fast >= y.beta_slow,
                 "beta_fast (--beta-fast) " + num(y.beta_fast) + " must be >= beta_slow (--beta-slow) " +
                     num(y.beta_slow) + " > 0");
}

void LayerConfig::check_sizes() const {
  // Positive sizes only (validate() checks the signs first).
  const CheckedSize h = sized("hidden_size (--hidden-size)", hidden_size);
  const CheckedSize s = sized("seq_length (--seq-length)", seq_length);
  const CheckedSize a = sized("num_attention_heads (--num-attention-heads)", num_attention_heads);
  const CheckedSize ffn = ffn_hidden_size > 0 ? sized("ffn_hidden_size (--ffn-hidden-size)", ffn_hidden_size)
                          : swiglu ? CheckedSize{ffn_wide(), "int(8 * " + h.text + " / 3 / 64) * 64"}
                                   : 4 * h;
  fits_int32(ffn, "the MLP width ffn_hidden_size (--ffn-hidden-size)");
  const CheckedSize dh = kv_channels > 0 ? sized("kv_channels (--kv-channels)", kv_channels)
                                         : CheckedSize{hidden_size / num_attention_heads, "(" + h.text + " / " + a.text + ")"};
  const CheckedSize g = num_query_groups > 0 ? sized("num_query_groups (--num-query-groups)", num_query_groups) : a;
  fits_int32(a * dh, "the attention width a * dh");
  const CheckedSize qkv = (a + 2 * g) * dh;
  fits_int32(qkv, "the rows of linear_qkv (a + 2 g) * dh");
  (void)(qkv * h);                            // linear_qkv's weight
  (void)((swiglu ? 2 * ffn : ffn) * h);       // linear_fc1's weight
  (void)(s * h * ffn);                        // one sample's MLP activations
  (void)(s * s * a);                          // one sample's attention scores
  if (!moe.enabled()) return;
  const CheckedSize e = sized("num_experts (--num-experts)", moe.num_experts);
  const CheckedSize ffn_e =
      moe.ffn_hidden_size > 0 ? sized("moe_ffn_hidden_size (--moe-ffn-hidden-size)", moe.ffn_hidden_size) : ffn;
  (void)(e * (swiglu ? 2 * ffn_e : ffn_e) * h);  // one layer's routed experts' linear_fc1 weights
  (void)(s * h * ffn_e * sized("moe_router_topk (--moe-router-topk)", moe.router_topk));  // routed activations
  if (moe.shared_expert_intermediate_size > 0) {
    const CheckedSize shared = sized("moe_shared_expert_intermediate_size (--moe-shared-expert-intermediate-size)",
                                     moe.shared_expert_intermediate_size);
    (void)((swiglu ? 2 * shared : shared) * h);
  }
}

void LayerConfig::validate_mla() const {
  if (!multi_latent_attention) return;
  const auto positive = [](const char* name, int v) {
    PTDP_CHECK_ARG(v > 0, std::string(name) + " must be > 0 with --multi-latent-attention, got " + num(v));
  };
  PTDP_CHECK_ARG(q_lora_rank >= 0, "q_lora_rank (--q-lora-rank) must be >= 0 (0: no query compression, "
                                   "linear_q_proj), got " + num(q_lora_rank));
  positive("kv_lora_rank (--kv-lora-rank)", kv_lora_rank);
  positive("qk_head_dim (--qk-head-dim)", qk_head_dim);
  positive("qk_pos_emb_head_dim (--qk-pos-emb-head-dim)", qk_pos_emb_head_dim);
  positive("v_head_dim (--v-head-dim)", v_head_dim);
  // The core attention pads each value head to the query/key head dim (mla_attention.h).
  PTDP_CHECK_ARG(v_head_dim <= mla_qk_dim(),
                 "v_head_dim (--v-head-dim) " + num(v_head_dim) + " exceeds qk_head_dim + qk_pos_emb_head_dim " +
                     num(mla_qk_dim()) + " (--qk-head-dim, --qk-pos-emb-head-dim): the core attention pads the value "
                     "heads to the query/key head dim, not the other way");
  PTDP_CHECK_ARG(rope(), "--multi-latent-attention needs position_embedding_type rope (--position-embedding-type "
                         "rope): its decoupled RoPE part is the only position signal; got " +
                             std::string(position_embedding_name(position_embedding)));
  PTDP_CHECK_ARG(num_query_groups == 0 || num_query_groups == num_attention_heads,
                 "--multi-latent-attention is multi-head attention: num_query_groups (--num-query-groups) " +
                     num(num_query_groups) + " must be unset or num_attention_heads " + num(num_attention_heads) +
                     " (Megatron: group query attention is mutually exclusive with multi latent attention)");
  PTDP_CHECK_ARG(!qk_layernorm_across_heads, "--qk-layernorm-across-heads does not apply to --multi-latent-attention "
                                             "(its --qk-layernorm norms are the latents' q_layernorm, kv_layernorm)");
  PTDP_CHECK_ARG(!add_qkv_bias, "--add-qkv-bias does not apply to --multi-latent-attention (it has no linear_qkv; its "
                                "down and up projections have no bias, as Megatron-Core's)");
  const CheckedSize a = sized("num_attention_heads (--num-attention-heads)", num_attention_heads);
  const CheckedSize dq = sized("qk_head_dim + qk_pos_emb_head_dim", mla_qk_dim());
  fits_int32(3 * a * dq, "the multi-latent attention's per-token query, key and (padded) value width 3 a (qk_head_dim "
                         "+ qk_pos_emb_head_dim)");
}

int LayerConfig::num_moe_layers() const {
  int n = 0;
  for (int i = 0; i < num_layers; ++i) n += moe.is_moe_layer(i) ? 1 : 0;
  return n;
}

void LayerConfig::validate_moe(int t) const {
  const MoeConfig& m = moe;
  PTDP_CHECK_ARG(m.num_experts >= 0, "num_experts (--num-experts) must be >= 0 (0: a dense model), got " +
                                         num(m.num_experts));
  if (!m.enabled()) return;
  const std::string experts = "num_experts (--num-experts) " + num(m.num_experts);
  const std::string topk = "moe_router_topk (--moe-router-topk) " + num(m.router_topk);
  PTDP_CHECK_ARG(m.router_topk >= 1, topk + " must be >= 1");
  PTDP_CHECK_ARG(m.router_topk <= m.num_experts, topk + " is larger than " + experts +
                                                     ": each token is routed to k distinct experts");
  PTDP_CHECK_ARG(m.ffn_hidden_size >= 0, "moe_ffn_hidden_size (--moe-ffn-hidden-size) must be >= 0 (0: "
                                         "ffn_hidden_size), got " + num(m.ffn_hidden_size));
  PTDP_CHECK_ARG(m.layer_pattern.empty() || static_cast<int>(m.layer_pattern.size()) == num_layers,
                 "moe_layer_freq (--moe-layer-freq) gives a pattern of " +
                     num(static_cast<int>(m.layer_pattern.size())) + " layers, but num_layers (--num-layers) is " +
                     num(num_layers));
  for (std::size_t i = 0; i < m.layer_pattern.size(); ++i) {
    PTDP_CHECK_ARG(m.layer_pattern[i] == 0 || m.layer_pattern[i] == 1,
                   "moe_layer_freq (--moe-layer-freq): entry " + num(static_cast<int>(i)) + " is " +
                       num(m.layer_pattern[i]) + ", not 0 (dense) or 1 (MoE)");
  }
  const int shared = m.shared_expert_intermediate_size;
  const std::string shared_text = "moe_shared_expert_intermediate_size (--moe-shared-expert-intermediate-size) " +
                                  num(shared);
  PTDP_CHECK_ARG(shared >= 0, shared_text + " must be >= 0 (0: no shared expert)");
  PTDP_CHECK_ARG(shared % t == 0, shared_text + " is not divisible by the tensor parallel size " + num(t) +
                                      " (the shared experts are split over t like a dense MLP)");
  PTDP_CHECK_ARG(!m.shared_expert_gate || shared > 0,
                 "moe_shared_expert_gate (--moe-shared-expert-gate) gates the shared expert, but there is none: set "
                 "moe_shared_expert_intermediate_size (--moe-shared-expert-intermediate-size)");
  PTDP_CHECK_ARG(m.score_function == MoeScoreFunction::Softmax || m.score_function == MoeScoreFunction::Sigmoid,
                 "moe_router_score_function (--moe-router-score-function) " +
                     num(static_cast<int>(m.score_function)) + " is not softmax (0) or sigmoid (1)");
  PTDP_CHECK_ARG(static_cast<int>(m.load_balancing) >= 0 && static_cast<int>(m.load_balancing) <= 3,
                 "moe_router_load_balancing_type (--moe-router-load-balancing-type) " +
                     num(static_cast<int>(m.load_balancing)) +
                     " is not aux_loss (0), seq_aux_loss (1), global_aux_loss (2) or none (3)");
  // global_aux_loss is accepted: by Megatron's definition its counts span the d data-parallel
  // replicas, so it is the one balancing loss whose value depends on d (core/layers/moe/router.h).
  PTDP_CHECK_ARG(m.drop_policy == MoeDropPolicy::Probs || m.drop_policy == MoeDropPolicy::Position,
                 "moe_token_drop_policy (--moe-token-drop-policy) " + num(static_cast<int>(m.drop_policy)) +
                     " is not probs (0) or position (1)");
  PTDP_CHECK_ARG(m.dispatcher == MoeDispatcher::AllToAll || m.dispatcher == MoeDispatcher::AllGather,
                 "moe_token_dispatcher_type (--moe-token-dispatcher-type) " + num(static_cast<int>(m.dispatcher)) +
                     " is not alltoall (0) or allgather (1)");
  // Softmax over the k selected logits of k = 1 is the constant 1: the router would get no gradient.
  PTDP_CHECK_ARG(m.router_topk != 1 || m.score_function != MoeScoreFunction::Softmax || m.pre_softmax,
                 "moe_router_topk (--moe-router-topk) 1 with the softmax score function needs moe_router_pre_softmax "
                 "(--moe-router-pre-softmax): a softmax over one selected logit is 1 and gives the router no gradient");
  const auto non_negative = [](const char* name, float v) {
    PTDP_CHECK_ARG(std::isfinite(v) && v >= 0.0f, std::string(name) + " must be >= 0, got " + num(v));
  };
  non_negative("moe_router_topk_scaling_factor (--moe-router-topk-scaling-factor; 0: none)", m.topk_scaling_factor);
  non_negative("moe_router_bias_update_rate (--moe-router-bias-update-rate)", m.bias_update_rate);
  non_negative("moe_aux_loss_coeff (--moe-aux-loss-coeff)", m.aux_loss_coeff);
  non_negative("moe_z_loss_coeff (--moe-z-loss-coeff)", m.z_loss_coeff);
  non_negative("moe_expert_capacity_factor (--moe-expert-capacity-factor; 0: dropless)", m.capacity_factor);
  // Group-limited routing (Megatron's group_limited_topk): the experts form num_groups equal
  // groups, each scored by the sum of its top k / group_topk scores; the top group_topk groups
  // hold the k experts chosen.
  const std::string groups = "moe_router_num_groups (--moe-router-num-groups) " + num(m.num_groups);
  const std::string group_topk = "moe_router_group_topk (--moe-router-group-topk) " + num(m.group_topk);
  PTDP_CHECK_ARG(m.num_groups >= 0 && m.group_topk >= 0, groups + " and " + group_topk + " must be >= 0 (0: none)");
  PTDP_CHECK_ARG(m.group_topk == 0 || m.num_groups > 0,
                 group_topk + " needs moe_router_num_groups (--moe-router-num-groups): group-limited routing");
  PTDP_CHECK_ARG(m.num_groups == 0 || m.group_topk > 0,
                 groups + " is read only with moe_router_group_topk (--moe-router-group-topk), the groups each "
                          "token may use");
  const std::string score_topk =
      "moe_router_group_score_topk (--moe-router-group-score-topk) " + num(m.group_score_topk);
  const std::string limited =
      "moe_router_topk_limited_devices (--moe-router-topk-limited-devices) " + num(m.topk_limited_devices);
  PTDP_CHECK_ARG(m.group_score_topk >= 0, score_topk + " must be >= 0 (0: k / group_topk, Megatron's)");
  PTDP_CHECK_ARG(m.group_score_topk == 0 || m.group_topk > 0, score_topk + " needs group-limited routing (" +
                                                                  group_topk + ")");
  PTDP_CHECK_ARG(m.topk_limited_devices >= 0, limited + " must be >= 0 (0: none)");
  PTDP_CHECK_ARG(m.topk_limited_devices == 0 || m.group_topk == m.topk_limited_devices,
                 limited + " is group-limited routing with that many groups: " + group_topk + " must equal it");
  if (m.group_topk > 0) {
    PTDP_CHECK_ARG(m.num_experts % m.num_groups == 0, experts + " is not divisible by " + groups);
    PTDP_CHECK_ARG(m.group_topk <= m.num_groups, group_topk + " is larger than " + groups);
    PTDP_CHECK_ARG(m.group_score_topk > 0 || m.router_topk % m.group_topk == 0,
                   topk + " is not divisible by " + group_topk + ": each group is scored by its top k / group_topk");
    PTDP_CHECK_ARG(m.group_score_topk <= m.num_experts / m.num_groups,
                   score_topk + " exceeds the " + num(m.num_experts / m.num_groups) + " experts of a group");
    PTDP_CHECK_ARG(static_cast<int64_t>(m.group_topk) * (m.num_experts / m.num_groups) >= m.router_topk,
                   group_topk + " groups of num_experts / moe_router_num_groups = " +
                       num(m.num_experts / m.num_groups) + " experts hold fewer than the " + topk + " experts");
  }
  PTDP_CHECK_ARG(!m.enable_expert_bias || m.score_function == MoeScoreFunction::Sigmoid,
                 "moe_router_enable_expert_bias (--moe-router-enable-expert-bias) needs moe_router_score_function "
                 "(--moe-router-score-function) sigmoid, as Megatron's aux-loss-free routing");
  PTDP_CHECK_ARG(!m.pad_expert_input_to_capacity || m.capacity_factor > 0.0f,
                 "moe_pad_expert_input_to_capacity (--moe-pad-expert-input-to-capacity) needs "
                 "moe_expert_capacity_factor (--moe-expert-capacity-factor)");
  PTDP_CHECK_ARG(!m.recompute || recompute != Recompute::Full,
                 "moe_layer_recompute (--moe-layer-recompute, --recompute-modules moe) is not set with full recompute "
                 "granularity (--recompute-granularity full), which recomputes the whole layer already");
  PTDP_CHECK_ARG(t == 1 || sequence_parallel,
                 "MoE with tensor parallel size " + num(t) + " needs sequence parallelism (--sequence-parallel), as "
                 "Megatron requires: the router and the experts work on the s/t positions of each tensor rank");
}

void LayerConfig::validate_experts(int e, int etp) const {
  const std::string e_text = "expert_model_parallel_size (--expert-model-parallel-size) " + num(e);
  const std::string etp_text = "expert_tensor_parallel_size (--expert-tensor-parallel-size) " + num(etp);
  PTDP_CHECK_ARG(e >= 1, e_text + " must be >= 1");
  PTDP_CHECK_ARG(etp >= 1, etp_text + " must be >= 1");
  PTDP_CHECK_ARG(moe.enabled() || e == 1, e_text + " needs num_experts (--num-experts): there are no experts to split");
  if (!moe.enabled()) return;
  PTDP_CHECK_ARG(moe.num_experts % e == 0, "num_experts (--num-experts) " + num(moe.num_experts) +
                                               " is not a multiple of " + e_text);
  // Device-limited routing's groups are the experts of each rank at e = num_groups: at an e that
  // divides num_groups a rank holds whole groups, so a token reaches at most M ranks; at any other
  // e the model would be the same but the limit it is named for would not hold.
  PTDP_CHECK_ARG(moe.topk_limited_devices == 0 || moe.num_groups % e == 0,
                 "moe_router_topk_limited_devices (--moe-router-topk-limited-devices) " +
                     num(moe.topk_limited_devices) + " limits each token to the ranks of moe_router_num_groups "
                     "(--moe-router-num-groups) " + num(moe.num_groups) + " groups, which " + e_text +
                     " does not divide: a rank would hold parts of groups and a token could reach more ranks");
  PTDP_CHECK_ARG(moe_ffn() % etp == 0, "the expert MLP width moe_ffn_hidden_size (--moe-ffn-hidden-size) " +
                                           num(moe_ffn()) + " is not divisible by " + etp_text);
  PTDP_CHECK_ARG(!add_bias_linear || etp == 1,
                 etp_text + " with linear biases: expert biases need expert tensor parallel size 1, as in "
                            "Megatron (\"Bias in MoE is only supported when ETP==1\"); give --disable-bias-linear");
}

std::vector<float> LayerConfig::rotary_inv_freq() const { return rotary_inv_freq(rotary_dim()); }

std::vector<float> LayerConfig::rotary_inv_freq(int dim) const {
  if (uses_yarn()) return yarn_inv_freq(dim);
  std::vector<float> inv(static_cast<std::size_t>(dim / 2));
  for (int i = 0; i < dim / 2; ++i) {
    // torch: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), in fp32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv[static_cast<std::size_t>(i)] = 1.0f / std::pow(rotary_base, exponent);
  }
  if (!rope_scaling.enabled) return inv;
  // Llama 3.1 (Megatron's apply_scaling, Hugging Face's _compute_llama3_parameters).
  const double pi = 3.14159265358979323846;
  const double old_len = rope_scaling.original_max_position_embeddings;
  const double low_wavelen = old_len / rope_scaling.low_freq_factor;
  const double high_wavelen = old_len / rope_scaling.high_freq_factor;
  for (float& f : inv) {
    const double wavelen = 2.0 * pi / f;
    if (wavelen < high_wavelen) continue;
    if (wavelen > low_wavelen) {
      f = static_cast<float>(f / rope_scaling.factor);
      continue;
    }
    const double smooth = (old_len / wavelen - rope_scaling.low_freq_factor) /
                          (rope_scaling.high_freq_factor - rope_scaling.low_freq_factor);
    f = static_cast<float>((1.0 - smooth) * f / rope_scaling.factor + smooth * f);
  }
  return inv;
}

namespace {
// yarn_get_mscale of Hugging Face and DeepSeek: YaRN's eq. 21 (1 for factor <= 1).
double yarn_get_mscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}
}  // namespace

std::vector<float> LayerConfig::yarn_inv_freq(int dim) const {
  // Hugging Face's _compute_yarn_parameters, evaluated in double from the fp32 powers
  // base^(2i / d) that torch computes, rounded once.
  const double pi = 3.14159265358979323846;
  const double d = dim, base = rotary_base, old_len = yarn.original_max_position_embeddings;
  const auto correction_dim = [&](double rotations) {
    return d * std::log(old_len / (rotations * 2.0 * pi)) / (2.0 * std::log(base));
  };
  double low = correction_dim(yarn.beta_fast), high = correction_dim(yarn.beta_slow);
  if (yarn.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, d - 1.0);
  if (low == high) high += 0.001;  // HF's guard against a singular ramp
  std::vector<float> inv(static_cast<std::size_t>(dim / 2));
  for (int i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    const double pos_freq = std::pow(rotary_base, exponent);  // fp32, as torch
    // HF's inv_freq_extrapolation_factor: 1 below low (the frequency kept), 0 above high.
    const double extrapolate = 1.0 - std::clamp((i - low) / (high - low), 0.0, 1.0);
    inv[static_cast<std::size_t>(i)] = static_cast<float>(1.0 / (yarn.factor * pos_freq) * (1.0 - extrapolate) +
                                                          1.0 / pos_freq * extrapolate);
  }
  return inv;
}

float LayerConfig::rope_amplitude() const {
  if (!uses_yarn()) return 1.0f;
  if (yarn.mscale_all_dim > 0.0f) {
    return static_cast<float>(yarn_get_mscale(yarn.factor, yarn.mscale) /
                              yarn_get_mscale(yarn.factor, yarn.mscale_all_dim));
  }
  return static_cast<float>(yarn_get_mscale(yarn.factor, 1.0));
}

float LayerConfig::yarn_softmax_mscale() const {
  if (!uses_yarn() || yarn.mscale_all_dim <= 0.0f) return 1.0f;
  return static_cast<float>(yarn_get_mscale(yarn.factor, yarn.mscale_all_dim));
}

}  // namespace ptdp
