#include "core/model/gpt_config.h"

#include <cmath>

#include "base/checked_math.h"
#include "base/error.h"

namespace ptdp {

int64_t GptConfig::padded_vocab(int t) const {
  const int64_t multiple = static_cast<int64_t>(make_vocab_size_divisible_by) * t;
  if (multiple <= 0) return vocab_size;  // validate() refuses it
  return (static_cast<int64_t>(vocab_size) + multiple - 1) / multiple * multiple;
}

void GptConfig::validate(int t) const {
  LayerConfig::validate(t);
  PTDP_CHECK_ARG(vocab_size > 0, "vocab_size must be > 0, got " + std::to_string(vocab_size));
  PTDP_CHECK_ARG(make_vocab_size_divisible_by > 0,
                 "make_vocab_size_divisible_by must be > 0, got " + std::to_string(make_vocab_size_divisible_by));
  PTDP_CHECK_ARG(max_position_embeddings >= 0,
                 "max_position_embeddings must be >= 0 (0: seq_length), got " +
                     std::to_string(max_position_embeddings));
  // The embedding table, the logits of one sample and the parameter count, checked.
  const CheckedSize v = CheckedSize{padded_vocab(t), "the padded vocabulary of vocab_size (--vocab-size) " +
                                                         std::to_string(vocab_size)};
  const CheckedSize h = sized("hidden_size (--hidden-size)", hidden_size);
  (void)(v * h);
  (void)(v * sized("seq_length (--seq-length)", seq_length));
  (void)(sized("max_position_embeddings (--max-position-embeddings)", max_positions()) * h);
  PTDP_CHECK_ARG(parameter_count_fits(t), "the parameter count of num_layers (--num-layers) " +
                                              std::to_string(num_layers) + " layers of hidden_size " +
                                              std::to_string(hidden_size) + " overflows a 64-bit integer");
  PTDP_CHECK_ARG(mtp_num_layers >= 0,
                 "mtp_num_layers (--mtp-num-layers) must be >= 0 (0: no multi-token prediction), got " +
                     std::to_string(mtp_num_layers));
  PTDP_CHECK_ARG(std::isfinite(mtp_loss_scaling_factor) && mtp_loss_scaling_factor >= 0.0f,
                 "mtp_loss_scaling_factor (--mtp-loss-scaling-factor) must be finite and >= 0, got " +
                     std::to_string(mtp_loss_scaling_factor));
  // Megatron's words (arguments.py): the MTP modules embed the shifted tokens without a position table.
  PTDP_CHECK_ARG(mtp_num_layers == 0 || !learned_positions(),
                 "Multi-Token Prediction (MTP) is not supported with learned_absolute position embedding type. "
                 "The supported position embedding types are rope and none (--mtp-num-layers " +
                     std::to_string(mtp_num_layers) + " with --position-embedding-type learned_absolute)");
  PTDP_CHECK_ARG(seq_length <= max_positions(),
                 "seq_length " + std::to_string(seq_length) + " is longer than max_position_embeddings " +
                     std::to_string(max_positions()));
}

double GptConfig::paper_flops(int64_t samples, bool full_recompute) const {
  const double B = static_cast<double>(samples), l = num_layers, h = hidden_size, s = seq_length, V = vocab_size;
  const double a = num_attention_heads, g = query_groups(), q_ratio = static_cast<double>(attention_width()) / h;
  const double attention = multi_latent_attention ? mla_attention_factor() : (1.0 + g / a + s / h) * q_ratio;
  const double mlp = static_cast<double>(ffn()) / h * (swiglu ? 1.5 : 1.0);
  // Multi-token prediction (Megatron's terms): D more layers of the decoder's kind, each module's
  // norms and eh_proj (3h + 2h^2 per token, forward and backward), and D more logits.
  const double D = mtp_num_layers;
  const double logits = 6.0 * B * s * h * V * (1.0 + D);
  const double mtp_proj = 6.0 * B * s * D * (3.0 * h + 2.0 * h * h);
  if (!moe.enabled()) {
    const double layers = (full_recompute ? 16.0 : 12.0) * B * s * (l + D) * h * h * (attention + mlp);
    return layers + logits + mtp_proj;
  }
  // Megatron's num_floating_point_operations: dense layers ffn, MoE layers k moe_ffn + shared.
  const double moe_layers = num_moe_layers();
  const double moe_width = static_cast<double>(moe.router_topk) * moe_ffn() + moe.shared_expert_intermediate_size;
  const double moe_mlp = moe_width / h * (swiglu ? 1.5 : 1.0);
  // The MTP modules' layers are of the decoder's last layer's kind (mtp_moe()).
  const double mlp_layers = (l - moe_layers) * mlp + moe_layers * moe_mlp + D * (mtp_moe() ? moe_mlp : mlp);
  const double layers = (full_recompute ? 16.0 : 12.0) * B * s * h * h * ((l + D) * attention + mlp_layers);
  return layers + logits + mtp_proj;
}

double GptConfig::mla_attention_factor() const {
  const double h = hidden_size, s = seq_length, a = num_attention_heads, r = kv_lora_rank;
  const double dn = qk_head_dim, dr = qk_pos_emb_head_dim, dv = v_head_dim, dq = dn + dr;
  const double q = q_lora_rank > 0 ? q_lora_rank * (h + a * dq + 1.0) : h * a * dq;
  const double per_token = q + r * (h + a * (dn + dv) + 1.0) + h * dr + a * dv * h + s * a * (dq + dv);
  return 6.0 * per_token / (12.0 * h * h);
}

int64_t GptConfig::mla_projection_parameters() const {
  const int64_t h = hidden_size, a = num_attention_heads, dq = mla_qk_dim();
  const auto norm = [&](int64_t w) { return !qk_layernorm ? 0 : normalization == Normalization::RMSNorm ? w : 2 * w; };
  const int64_t rq = q_lora_rank, r = kv_lora_rank;
  const int64_t q = rq > 0 ? rq * h + norm(rq) + a * dq * rq : a * dq * h;
  const int64_t kv = (r + qk_pos_emb_head_dim) * h + norm(r) + a * (int64_t{qk_head_dim} + v_head_dim) * r;
  return q + kv;
}

bool GptConfig::parameter_count_fits(int t) const {
  // The same sum as parameter_count() in long double: exact enough to tell 2^63 apart.
  const long double h = hidden_size, f = static_cast<long double>(ffn_wide()), v = static_cast<long double>(padded_vocab(t));
  const long double qkv = static_cast<long double>(qkv_rows()), aw = static_cast<long double>(attention_width());
  const long double fc1 = swiglu ? 2 * f : f;
  // MLA's projections, bounded as their count in long double: rq, r, dn, dr, dv are ints.
  const long double a = num_attention_heads, dq = static_cast<long double>(qk_head_dim) + qk_pos_emb_head_dim;
  const long double mla = static_cast<long double>(q_lora_rank) * (2 * h + a * dq + 2) + a * dq * h +
                          (static_cast<long double>(kv_lora_rank) + qk_pos_emb_head_dim) * (h + 2) +
                          a * (static_cast<long double>(qk_head_dim) + v_head_dim) * kv_lora_rank;
  const long double attention_in = multi_latent_attention ? mla : qkv * (h + 1);
  const long double per_layer = 4 * h + attention_in + aw * h + h + fc1 * (h + 1) + f * h + h + 8 * h;
  long double total = v * h * 2 + static_cast<long double>(num_layers + mtp_num_layers) * per_layer +
                     static_cast<long double>(mtp_num_layers) * (2 * h * h + 6 * h) +
                     static_cast<long double>(max_positions()) * h + 2 * h;
  if (moe.enabled()) {
    const long double fe = moe_ffn(), sh = moe.shared_expert_intermediate_size, e = moe.num_experts;
    const long double expert = (swiglu ? 3 : 2) * fe * (h + 1) + h;
    const long double shared = (swiglu ? 3 : 2) * sh * (h + 1) + 2 * h;
    total += static_cast<long double>(num_moe_layers_with_mtp()) * (e * (h + 1) + e * expert + shared);
  }
  return total < 9.0e18L;
}

int64_t GptConfig::parameter_count(int t) const { return count_parameters(t, moe.num_experts); }

int64_t GptConfig::active_parameter_count(int t) const { return count_parameters(t, moe.router_topk); }

int64_t GptConfig::count_parameters(int t, int64_t routed) const {
  const int64_t h = hidden_size, f = ffn(), v = padded_vocab(t), dh = head_dim();
  const int64_t norm = normalization == Normalization::RMSNorm ? h : 2 * h;
  // q/k norms: per head ([dh], LayerNorm's bias too), or over the whole projections ([a*dh], [g*dh]).
  const int64_t qk_norm = !qk_layernorm             ? 0
                          : qk_layernorm_across_heads ? (int64_t{num_attention_heads} + query_groups()) * dh
                                                      : 2 * (normalization == Normalization::RMSNorm ? dh : 2 * dh);
  const int64_t fc1_rows = swiglu ? 2 * f : f;
  const int64_t qkv = qkv_rows() * h + (qkv_bias() ? qkv_rows() : 0);
  const int64_t proj = attention_width() * h + (add_bias_linear ? h : 0);
  const int64_t mlp = fc1_rows * h + (add_bias_linear ? fc1_rows : 0) + f * h + (add_bias_linear ? h : 0);
  const int64_t attention_in = multi_latent_attention ? mla_projection_parameters() : qkv + qk_norm;
  const int64_t per_layer = 2 * norm + attention_in + proj + mlp;
  int64_t total = v * h + num_layers * per_layer + norm;
  if (moe.enabled()) {
    // Each MoE layer's MLP: a router [E, h] (and its expert bias [E]), `routed` experts and the
    // shared experts (with Qwen2-MoE's gate [1, h]) instead of the dense MLP counted above.
    const int64_t fe = moe_ffn(), fe1 = swiglu ? 2 * fe : fe;
    const int64_t expert = fe1 * h + fe * h + (add_bias_linear ? fe1 + h : 0);
    const int64_t sh = moe.shared_expert_intermediate_size, sh1 = swiglu ? 2 * sh : sh;
    const int64_t shared = sh > 0 ? sh1 * h + sh * h + (add_bias_linear ? sh1 + h : 0) : 0;
    // The router's weight, its bias with linear biases (TopKRouter's "router.bias"), its expert bias.
    const int64_t router = moe.num_experts * h + (add_bias_linear ? moe.num_experts : 0) +
                           (moe.enable_expert_bias ? moe.num_experts : 0);
    const int64_t gate = moe.shared_expert_gate ? h : 0;
    // The MTP modules' layers too when they are MoE (mtp_moe(); their dense MLP is counted below).
    total += num_moe_layers_with_mtp() * (router + routed * expert + shared + gate - mlp);
  }
  if (learned_positions()) total += static_cast<int64_t>(max_positions()) * h;
  if (!tie_embeddings) total += v * h;
  // Each MTP module: enorm, hnorm, eh_proj [h, 2h], a transformer layer (its MoE MLP's
  // difference added above), final_layernorm.
  total += static_cast<int64_t>(mtp_num_layers) * (3 * norm + 2 * h * h + per_layer);
  return total;
}

}  // namespace ptdp
