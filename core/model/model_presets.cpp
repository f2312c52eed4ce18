// The named model shapes. Where each number comes from:
//  - GPT-2 (Radford et al. 2019; Hugging Face openai-community/gpt2, gpt2-medium, gpt2-large,
//    gpt2-xl config.json): n_layer / n_embd / n_head 12/768/12, 24/1024/16, 36/1280/20,
//    48/1600/25; vocab_size 50257, n_positions 1024, layer_norm_epsilon 1e-5, n_inner null
//    (4 h), tied LM head, GeLU MLP, learned positions, every bias, dropout 0.1 (resid_pdrop,
//    attn_pdrop). The sequence is n_positions.
//  - The paper's GPTs (Narayanan et al. 2021, Table 1; PTDP-BRIEF.md's weak-scaling rows):
//    heads, h, l as printed, V = 51200, s = 2048, Megatron's GPT otherwise (4h MLP, learned
//    positions, biases, tied, dropout 0.1).
//  - Llama 3 / 3.2 (Hugging Face meta-llama/Meta-Llama-3-8B, Meta-Llama-3-70B, Llama-3.2-1B,
//    Llama-3.2-3B config.json): RMSNorm (rms_norm_eps 1e-5), SwiGLU (intermediate_size),
//    RoPE (rope_theta 500000; Llama 3.2's rope_scaling "llama3": factor 32, low_freq_factor 1,
//    high_freq_factor 4, original_max_position_embeddings 8192), grouped-query attention
//    (num_key_value_heads 8), no bias anywhere (attention_bias, mlp_bias false), vocabulary
//    128256; Llama 3.2 ties the LM head, Llama 3 does not. The training sequence is 8192, the
//    length Llama 3 was pretrained at (and Llama 3.2's original_max_position_embeddings);
//    max_position_embeddings is the config's (8192, or 131072 for 3.2).
//  - Qwen2.5 (Hugging Face Qwen/Qwen2.5-0.5B, -1.5B, -7B config.json): RMSNorm (1e-6),
//    SwiGLU, RoPE (rope_theta 1e6, no scaling), grouped-query attention, a bias on q/k/v only
//    (Qwen2's attention has bias=True on q_proj, k_proj, v_proj and none on o_proj or the MLP),
//    vocabulary 151936 (0.5B, 1.5B, tied) and 152064 (7B, untied). The training sequence is
//    4096, the length of Qwen2.5's main pretraining stage (the technical report; 32768 in the
//    long-context stage); max_position_embeddings is the config's (32768 or 131072).
//  - Mixture-of-experts models (Hugging Face config.json; the total and active parameter counts
//    their cards publish, which tests/model/test_model_presets.cpp checks). Every layer is MoE
//    (decoder_sparse_step 1, no mlp_only_layers), each expert a SwiGLU MLP, RMSNorm, RoPE, an
//    untied LM head, no linear bias, the router's aux-loss coefficient router_aux_loss_coef.
//    The router: Mixtral and Qwen3-MoE softmax over the k selected logits (norm_topk_prob true,
//    Megatron's default order); OLMoE and Qwen2-MoE softmax over all E then the top k, not
//    renormalised (norm_topk_prob false: --moe-router-pre-softmax).
//    Mixtral 8x7B (mistralai/Mixtral-8x7B-v0.1): l 32, h 4096, a 32, g 8, ffn 14336, E 8, k 2,
//    vocabulary 32000, rope_theta 1e6, rms_norm_eps 1e-5, max_position_embeddings 32768, aux
//    0.02; 46.7B total, 12.9B active. Mixtral 8x22B (mistralai/Mixtral-8x22B-v0.1): l 56, h 6144,
//    a 48, g 8, ffn 16384, E 8, k 2, vocabulary 32000, rope_theta 1e6, 65536 positions, aux
//    0.001; 141B total, 39B active. Qwen3-30B-A3B and Qwen3-235B-A22B (Qwen/...): head_dim 128,
//    per-head q/k RMSNorm, rms_norm_eps 1e-6, rope_theta 1e6, 40960 positions, vocabulary
//    151936, E 128, k 8, aux 0.001; l 48, h 2048, a 32, g 4, moe_intermediate_size 768 (30.5B
//    total, 3.3B active) and l 94, h 4096, a 64, g 4, moe_intermediate_size 1536 (235B, 22B).
//    OLMoE-1B-7B (allenai/OLMoE-1B-7B-0924): l 16, h 2048, a 16 (multi-head), E 64, k 8,
//    intermediate_size 1024, vocabulary 50304, rope_theta 10000, rms_norm_eps 1e-5, 4096
//    positions, q/k norms over the whole projections, aux 0.01; 6.9B total, 1.3B active.
//    Qwen2-57B-A14B
//    (Qwen/Qwen2-57B-A14B): Qwen2's attention (qkv bias), l 28, h 3584, a 28, g 4, E 64, k 8,
//    moe_intermediate_size 2560, a shared expert of 20480 with its sigmoid gate, rms_norm_eps
//    1e-6, rope_theta 1e6, 131072 positions, vocabulary 151936, aux 0.001; 57.4B total, 14.2B
//    active. The training sequence is 4096, the main pretraining stage's of OLMoE, Qwen2 and
//    Qwen3 (Mixtral published a 32k context; --seq-length overrides).
//  - The DeepSeek-V3 family (Hugging Face config.json; tests/plan/test_plan_deepseek.cpp checks
//    the cards' totals). Multi-latent attention (kv_lora_rank 512, qk_nope_head_dim 128,
//    qk_rope_head_dim 64, v_head_dim 128; q_a_layernorm and kv_a_layernorm as --qk-layernorm),
//    SwiGLU, RMSNorm, an untied LM head, no bias (attention_bias false), the first
//    first_k_dense_replace layers dense (intermediate_size), the others MoE (moe_layer_freq 1;
//    n_shared_experts shared experts of moe_intermediate_size each), the sequence-wise auxiliary
//    loss (seq_aux true, aux_loss_alpha 0.001; DeepSeek-V3's report trained with 0.0001 beside
//    its bias-based balancing). The training sequence is 4096 (DeepSeek-V2/V3's and Kimi K2's
//    pretraining context; Moonlight's 8192, its card's context length).
//    DeepSeek-V3 (deepseek-ai/DeepSeek-V3): l 61, h 7168, a 128, q_lora_rank 1536,
//    intermediate_size 18432, E 256 (n_routed_experts), k 8, moe_intermediate_size 2048, 1
//    shared, first_k_dense_replace 3, vocabulary 129280, rms_norm_eps 1e-6, rope_theta 10000,
//    163840 positions, YaRN (factor 40, original 4096, beta_fast 32, beta_slow 1, mscale 1,
//    mscale_all_dim 1), the noaux_tc router (sigmoid, e_score_correction_bias, n_group 8,
//    topk_group 4, a group scored by its top-2, norm_topk_prob, routed_scaling_factor 2.5), one
//    MTP module (num_nextn_predict_layers 1, model.layers.61: an MoE layer). The card's 671B
//    total and 37B activated (README_WEIGHTS.md: 36.6B, the 0.9B output head included) count
//    the main model (671.03B; 36.63B activated without the input embedding); the MTP module
//    adds 11.61B unique parameters (its layer 11.51B, which README_WEIGHTS.md rounds to 11.5B,
//    and eh_proj). ptdp's parameter_count() counts the module once, as ptdp allocates it
//    (682.64B); the hub's 685B also counts the module's own copies of embed_tokens and
//    shared_head.head (2 V h: 684.49B, and the FP8 weights' scales). The tests check all three.
//    DeepSeek-V2-Lite (deepseek-ai/DeepSeek-V2-Lite): l 27, h 2048, a 16, no query compression
//    (q_lora_rank null), intermediate_size 10944, E 64, k 6, moe_intermediate_size 1408, 2
//    shared, first_k_dense_replace 1, vocabulary 102400, rms_norm_eps 1e-6, rope_theta 10000,
//    163840 positions, YaRN (factor 40, original 4096, beta_fast 32, beta_slow 1, mscale and
//    mscale_all_dim 0.707), the greedy softmax router (softmax over all 64, top 6,
//    norm_topk_prob false: --moe-router-pre-softmax; routed_scaling_factor 1); 15.7B total,
//    2.4B activated (the card leaves the input embedding out of the activated count).
//    Moonlight-16B-A3B (moonshotai/Moonlight-16B-A3B): DeepSeek-V3's architecture with l 27,
//    h 2048, a 16, no query compression, intermediate_size 11264, E 64, k 6,
//    moe_intermediate_size 1408, 2 shared, first_k_dense_replace 1, vocabulary 163840,
//    rms_norm_eps 1e-5, rope_theta 50000, 8192 positions, no rope_scaling, the noaux_tc router
//    with n_group 1 (no group limit) and routed_scaling_factor 2.446; the card's 16B total, 3B
//    activated (the config's 15.96B and 2.58B without the input embedding, 2.91B with it).
//    Kimi K2 (moonshotai/Kimi-K2-Base, -Instruct): l 61, h 7168, a 64, q_lora_rank 1536,
//    intermediate_size 18432, E 384, k 8, moe_intermediate_size 2048, 1 shared,
//    first_k_dense_replace 1, vocabulary 163840, rms_norm_eps 1e-6, rope_theta 50000, 131072
//    positions, YaRN (factor 32, original 4096, beta_fast 1, beta_slow 1, mscale 1,
//    mscale_all_dim 1), noaux_tc with n_group 1 and routed_scaling_factor 2.827, no MTP
//    (num_nextn_predict_layers 0); the card's 1T total and 32B activated (the config's 1.026T
//    and 31.7B without the input embedding). Kimi K2's report gives 1.04T: the config with one
//    MTP module (an MoE layer, 17.2B) gives 1.044T; the released checkpoint has none.
//  Llama, Qwen2.5 and the MoE models train without dropout. Every preset pads the vocabulary to a multiple of
//  128 (Megatron's default): 128256, 151936 and 152064 are multiples of 128 already, so at
//  t = 1 ptdp's vocabulary is the published one; GPT-2's 50257 pads to 50304. The training
//  settings (precision, recomputation, seed) stay at ptdp's defaults; flags override anything.
#include "core/model/model_presets.h"

#include <algorithm>
#include <cctype>

namespace ptdp {

namespace {

GptConfig gpt2(int layers, int hidden, int heads) {
  GptConfig g;
  g.num_layers = layers;
  g.hidden_size = hidden;
  g.num_attention_heads = heads;
  g.vocab_size = 50257;
  g.seq_length = 1024;
  g.max_position_embeddings = 1024;
  g.layernorm_epsilon = 1e-5f;
  g.hidden_dropout = 0.1f;
  g.attention_dropout = 0.1f;
  g.tie_embeddings = true;
  return g;
}

GptConfig paper_gpt(int heads, int hidden, int layers) {
  GptConfig g;
  g.num_layers = layers;
  g.hidden_size = hidden;
  g.num_attention_heads = heads;
  g.vocab_size = 51200;
  g.seq_length = 2048;
  g.max_position_embeddings = 2048;
  g.hidden_dropout = 0.1f;
  g.attention_dropout = 0.1f;
  g.tie_embeddings = true;
  return g;
}

// The Llama-family settings both Llama and Qwen2.5 share.
GptConfig llama_family(int layers, int hidden, int heads, int groups, int ffn, int vocab) {
  GptConfig g;
  g.num_layers = layers;
  g.hidden_size = hidden;
  g.num_attention_heads = heads;
  g.num_query_groups = groups;
  g.ffn_hidden_size = ffn;
  g.vocab_size = vocab;
  g.normalization = Normalization::RMSNorm;
  g.swiglu = true;
  g.position_embedding = PositionEmbedding::Rope;
  g.add_bias_linear = false;
  g.hidden_dropout = 0.0f;
  g.attention_dropout = 0.0f;
  return g;
}

GptConfig llama3(int layers, int hidden, int heads, int ffn, bool tied, bool llama32) {
  GptConfig g = llama_family(layers, hidden, heads, 8, ffn, 128256);
  g.layernorm_epsilon = 1e-5f;
  g.rotary_base = 500000.0f;
  g.seq_length = 8192;
  g.max_position_embeddings = llama32 ? 131072 : 8192;
  g.tie_embeddings = tied;
  if (llama32) {
    g.rope_scaling.enabled = true;
    g.rope_scaling.factor = 32.0f;
    g.rope_scaling.low_freq_factor = 1.0f;
    g.rope_scaling.high_freq_factor = 4.0f;
    g.rope_scaling.original_max_position_embeddings = 8192;
  }
  return g;
}

GptConfig qwen25(int layers, int hidden, int heads, int groups, int ffn, int vocab, bool tied, int max_positions) {
  GptConfig g = llama_family(layers, hidden, heads, groups, ffn, vocab);
  g.add_qkv_bias = true;
  g.layernorm_epsilon = 1e-6f;
  g.rotary_base = 1000000.0f;
  g.seq_length = 4096;
  g.max_position_embeddings = max_positions;
  g.tie_embeddings = tied;
  return g;
}

// A mixture-of-experts model of the Llama family: every layer MoE, experts of width `expert_ffn`.
GptConfig moe_model(GptConfig g, int experts, int topk, int expert_ffn, float aux_loss_coeff) {
  g.moe.num_experts = experts;
  g.moe.router_topk = topk;
  g.moe.ffn_hidden_size = expert_ffn;
  g.moe.aux_loss_coeff = aux_loss_coeff;
  g.tie_embeddings = false;
  g.seq_length = 4096;
  return g;
}

GptConfig mixtral(int layers, int hidden, int heads, int ffn, int max_positions, float aux_loss_coeff) {
  GptConfig g = llama_family(layers, hidden, heads, 8, ffn, 32000);
  g.layernorm_epsilon = 1e-5f;
  g.rotary_base = 1000000.0f;
  g.max_position_embeddings = max_positions;
  return moe_model(g, 8, 2, ffn, aux_loss_coeff);
}

GptConfig qwen3_moe(int layers, int hidden, int heads, int ffn, int expert_ffn) {
  GptConfig g = llama_family(layers, hidden, heads, 4, ffn, 151936);
  g.kv_channels = 128;
  g.qk_layernorm = true;
  g.layernorm_epsilon = 1e-6f;
  g.rotary_base = 1000000.0f;
  g.max_position_embeddings = 40960;
  return moe_model(g, 128, 8, expert_ffn, 0.001f);
}

GptConfig olmoe_1b_7b() {
  GptConfig g = llama_family(16, 2048, 16, 16, 1024, 50304);
  g.qk_layernorm = true;
  g.qk_layernorm_across_heads = true;
  g.layernorm_epsilon = 1e-5f;
  g.rotary_base = 10000.0f;
  g.max_position_embeddings = 4096;
  g = moe_model(g, 64, 8, 1024, 0.01f);
  g.moe.pre_softmax = true;
  return g;
}

GptConfig qwen2_57b_a14b() {
  GptConfig g = llama_family(28, 3584, 28, 4, 18944, 151936);
  g.add_qkv_bias = true;
  g.layernorm_epsilon = 1e-6f;
  g.rotary_base = 1000000.0f;
  g.max_position_embeddings = 131072;
  g = moe_model(g, 64, 8, 2560, 0.001f);
  g.moe.pre_softmax = true;
  g.moe.shared_expert_intermediate_size = 20480;
  g.moe.shared_expert_gate = true;
  return g;
}

// The DeepSeek-V3 architecture (Hugging Face's DeepseekV2/V3 config.json): multi-latent
// attention, RMSNorm over the latents, SwiGLU, RoPE (YaRN where the config has rope_scaling), an
// untied LM head, no bias; the first `dense` layers dense (first_k_dense_replace), the others MoE
// with `shared` shared experts of the expert width; the sequence-level auxiliary loss
// (seq_aux, aux_loss_alpha).
struct MlaShape {
  int layers, hidden, heads, ffn, vocab, q_lora_rank;
  int experts, topk, expert_ffn, shared, dense;
};
GptConfig deepseek_family(const MlaShape& m) {
  GptConfig g = llama_family(m.layers, m.hidden, m.heads, 0, m.ffn, m.vocab);
  g.layernorm_epsilon = 1e-6f;
  g.multi_latent_attention = true;
  g.qk_layernorm = true;  // q_a_layernorm, kv_a_layernorm
  g.q_lora_rank = m.q_lora_rank;
  g.kv_lora_rank = 512;
  g.qk_head_dim = 128;
  g.qk_pos_emb_head_dim = 64;
  g.v_head_dim = 128;
  g.tie_embeddings = false;
  g.seq_length = 4096;
  g.moe.num_experts = m.experts;
  g.moe.router_topk = m.topk;
  g.moe.ffn_hidden_size = m.expert_ffn;
  g.moe.shared_expert_intermediate_size = m.shared * m.expert_ffn;
  g.moe.layer_pattern.assign(static_cast<std::size_t>(m.layers), 1);
  for (int i = 0; i < m.dense; ++i) g.moe.layer_pattern[static_cast<std::size_t>(i)] = 0;
  g.moe.load_balancing = MoeLoadBalancing::SeqAuxLoss;
  g.moe.aux_loss_coeff = 0.001f;
  return g;
}

// YaRN as the configs' rope_scaling (type yarn).
void yarn(GptConfig& g, float factor, float mscale, float mscale_all_dim, float beta_fast, float beta_slow) {
  g.rope_type = RopeType::Yarn;
  g.yarn.factor = factor;
  g.yarn.mscale = mscale;
  g.yarn.mscale_all_dim = mscale_all_dim;
  g.yarn.original_max_position_embeddings = 4096;
  g.yarn.beta_fast = beta_fast;
  g.yarn.beta_slow = beta_slow;
}

// DeepSeek-V3's router (topk_method noaux_tc): sigmoid scores, the selection bias, normalised
// over the k chosen, times routed_scaling_factor; n_group groups of which topk_group are kept,
// each scored by its top-2 biased scores (none when n_group is 1: one group holds every expert).
void noaux_tc(GptConfig& g, float scaling, int groups, int group_topk) {
  g.moe.score_function = MoeScoreFunction::Sigmoid;
  g.moe.enable_expert_bias = true;
  g.moe.topk_scaling_factor = scaling;
  if (groups > 1) {
    g.moe.num_groups = groups;
    g.moe.group_topk = group_topk;
    g.moe.group_score_topk = 2;
  }
}

GptConfig deepseek_v3() {
  GptConfig g = deepseek_family({61, 7168, 128, 18432, 129280, 1536, 256, 8, 2048, 1, 3});
  g.rotary_base = 10000.0f;
  g.max_position_embeddings = 163840;
  yarn(g, 40.0f, 1.0f, 1.0f, 32.0f, 1.0f);
  noaux_tc(g, 2.5f, 8, 4);
  g.mtp_num_layers = 1;  // num_nextn_predict_layers
  return g;
}

GptConfig deepseek_v2_lite() {
  GptConfig g = deepseek_family({27, 2048, 16, 10944, 102400, 0, 64, 6, 1408, 2, 1});
  g.rotary_base = 10000.0f;
  g.max_position_embeddings = 163840;
  yarn(g, 40.0f, 0.707f, 0.707f, 32.0f, 1.0f);
  g.moe.pre_softmax = true;  // softmax over all 64, top 6, not renormalised (greedy, norm_topk_prob false)
  return g;
}

GptConfig moonlight_16b_a3b() {
  GptConfig g = deepseek_family({27, 2048, 16, 11264, 163840, 0, 64, 6, 1408, 2, 1});
  g.layernorm_epsilon = 1e-5f;
  g.rotary_base = 50000.0f;
  g.max_position_embeddings = 8192;
  g.seq_length = 8192;
  noaux_tc(g, 2.446f, 1, 1);
  return g;
}

GptConfig kimi_k2() {
  GptConfig g = deepseek_family({61, 7168, 64, 18432, 163840, 1536, 384, 8, 2048, 1, 1});
  g.rotary_base = 50000.0f;
  g.max_position_embeddings = 131072;
  yarn(g, 32.0f, 1.0f, 1.0f, 1.0f, 1.0f);
  noaux_tc(g, 2.827f, 1, 1);
  return g;
}

std::vector<ModelPreset> make_presets() {
  std::vector<ModelPreset> v;
  const auto add = [&v](const char* name, const char* description, const GptConfig& g) {
    v.push_back(ModelPreset{name, description, g});
  };
  add("gpt2-124m", "GPT-2 small, 124M (l 12, h 768, a 12; Hugging Face gpt2)", gpt2(12, 768, 12));
  add("gpt2-355m", "GPT-2 medium, 355M (l 24, h 1024, a 16; Hugging Face gpt2-medium)", gpt2(24, 1024, 16));
  add("gpt2-774m", "GPT-2 large, 774M (l 36, h 1280, a 20; Hugging Face gpt2-large)", gpt2(36, 1280, 20));
  add("gpt2-1.5b", "GPT-2 XL, 1.5B (l 48, h 1600, a 25; Hugging Face gpt2-xl)", gpt2(48, 1600, 25));
  add("gpt-1.7b", "the paper's 1.7B GPT (Narayanan et al. 2021, Table 1: a 24, h 2304, l 24)", paper_gpt(24, 2304, 24));
  add("gpt-3.6b", "the paper's 3.6B GPT (Table 1: a 32, h 3072, l 30)", paper_gpt(32, 3072, 30));
  add("gpt-7.5b", "the paper's 7.5B GPT (Table 1: a 32, h 4096, l 36)", paper_gpt(32, 4096, 36));
  add("gpt-18.4b", "the paper's 18.4B GPT (Table 1: a 48, h 6144, l 40)", paper_gpt(48, 6144, 40));
  add("gpt-39.1b", "the paper's 39.1B GPT (Table 1: a 64, h 8192, l 48)", paper_gpt(64, 8192, 48));
  add("gpt-76.1b", "the paper's 76.1B GPT (Table 1: a 80, h 10240, l 60)", paper_gpt(80, 10240, 60));
  add("gpt-145.6b", "the paper's 145.6B GPT (Table 1: a 96, h 12288, l 80)", paper_gpt(96, 12288, 80));
  add("gpt-310.1b", "the paper's 310.1B GPT (Table 1: a 128, h 16384, l 96)", paper_gpt(128, 16384, 96));
  add("gpt-529.6b", "the paper's 529.6B GPT (Table 1: a 128, h 20480, l 105)", paper_gpt(128, 20480, 105));
  add("gpt-1008b", "the paper's 1008B GPT (Table 1: a 160, h 25600, l 128)", paper_gpt(160, 25600, 128));
  add("llama-3.2-1b", "Llama 3.2 1B, 1.24B (l 16, h 2048, a 32, g 8, ffn 8192, tied; meta-llama/Llama-3.2-1B)",
      llama3(16, 2048, 32, 8192, true, true));
  add("llama-3.2-3b", "Llama 3.2 3B, 3.21B (l 28, h 3072, a 24, g 8, ffn 8192, tied; meta-llama/Llama-3.2-3B)",
      llama3(28, 3072, 24, 8192, true, true));
  add("llama-3-8b", "Llama 3 8B, 8.03B (l 32, h 4096, a 32, g 8, ffn 14336; meta-llama/Meta-Llama-3-8B)",
      llama3(32, 4096, 32, 14336, false, false));
  add("llama-3-70b", "Llama 3 70B, 70.6B (l 80, h 8192, a 64, g 8, ffn 28672; meta-llama/Meta-Llama-3-70B)",
      llama3(80, 8192, 64, 28672, false, false));
  add("qwen2.5-0.5b", "Qwen2.5 0.5B, 0.49B (l 24, h 896, a 14, g 2, ffn 4864, qkv bias, tied; Qwen/Qwen2.5-0.5B)",
      qwen25(24, 896, 14, 2, 4864, 151936, true, 32768));
  add("qwen2.5-1.5b", "Qwen2.5 1.5B, 1.54B (l 28, h 1536, a 12, g 2, ffn 8960, qkv bias, tied; Qwen/Qwen2.5-1.5B)",
      qwen25(28, 1536, 12, 2, 8960, 151936, true, 131072));
  add("qwen2.5-7b", "Qwen2.5 7B, 7.62B (l 28, h 3584, a 28, g 4, ffn 18944, qkv bias; Qwen/Qwen2.5-7B)",
      qwen25(28, 3584, 28, 4, 18944, 152064, false, 131072));
  add("mixtral-8x7b",
      "Mixtral 8x7B, 46.7B total, 12.9B active (l 32, h 4096, a 32, g 8, E 8, k 2, ffn 14336; "
      "mistralai/Mixtral-8x7B-v0.1)",
      mixtral(32, 4096, 32, 14336, 32768, 0.02f));
  add("mixtral-8x22b",
      "Mixtral 8x22B, 141B total, 39.2B active (l 56, h 6144, a 48, g 8, E 8, k 2, ffn 16384; "
      "mistralai/Mixtral-8x22B-v0.1)",
      mixtral(56, 6144, 48, 16384, 65536, 0.001f));
  add("qwen3-30b-a3b",
      "Qwen3-30B-A3B, 30.5B total, 3.35B active (l 48, h 2048, a 32, g 4, E 128, k 8, expert ffn 768; "
      "Qwen/Qwen3-30B-A3B)",
      qwen3_moe(48, 2048, 32, 6144, 768));
  add("qwen3-235b-a22b",
      "Qwen3-235B-A22B, 235B total, 22.2B active (l 94, h 4096, a 64, g 4, E 128, k 8, expert ffn 1536; "
      "Qwen/Qwen3-235B-A22B)",
      qwen3_moe(94, 4096, 64, 12288, 1536));
  add("olmoe-1b-7b",
      "OLMoE-1B-7B, 6.92B total, 1.28B active (l 16, h 2048, a 16, E 64, k 8, expert ffn 1024; "
      "allenai/OLMoE-1B-7B-0924)",
      olmoe_1b_7b());
  add("qwen2-57b-a14b",
      "Qwen2-57B-A14B, 57.4B total, 14.2B active (l 28, h 3584, a 28, g 4, E 64, k 8, expert ffn 2560, gated "
      "shared expert 20480; Qwen/Qwen2-57B-A14B)",
      qwen2_57b_a14b());
  add("deepseek-v3",
      "DeepSeek-V3, 671B total, 37B active, + 11.6B MTP module (l 61, h 7168, a 128, MLA, E 256, k 8, "
      "expert ffn 2048, 1 shared, 3 dense; deepseek-ai/DeepSeek-V3)",
      deepseek_v3());
  add("deepseek-v2-lite",
      "DeepSeek-V2-Lite, 15.7B total, 2.4B active (l 27, h 2048, a 16, MLA, E 64, k 6, expert ffn 1408, "
      "2 shared, 1 dense; deepseek-ai/DeepSeek-V2-Lite)",
      deepseek_v2_lite());
  add("moonlight-16b-a3b",
      "Moonlight-16B-A3B, 16B total, 3B active (l 27, h 2048, a 16, MLA, E 64, k 6, expert ffn 1408, "
      "2 shared, 1 dense; moonshotai/Moonlight-16B-A3B)",
      moonlight_16b_a3b());
  add("kimi-k2",
      "Kimi K2, 1T total (1.026T), 32B active (l 61, h 7168, a 64, MLA, E 384, k 8, expert ffn 2048, 1 shared, "
      "1 dense; moonshotai/Kimi-K2-Base)",
      kimi_k2());
  return v;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = make_presets();
  return presets;
}

std::optional<ModelPreset> find_model_preset(const std::string& name) {
  const std::string want = lower(name);
  for (const ModelPreset& p : model_presets()) {
    if (p.name == want) return p;
  }
  return std::nullopt;
}

std::string model_preset_names() {
  std::string s;
  for (const ModelPreset& p : model_presets()) s += (s.empty() ? "" : ", ") + p.name;
  return s;
}

}  // namespace ptdp
