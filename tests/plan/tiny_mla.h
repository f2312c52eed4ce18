// The tiny multi-latent attention model the planner's MLA tests count and price: 2 layers,
// h 16, 4 heads, RMSNorm latents, SwiGLU, untied, every MLA feature (query compression with
// q_lora_rank > 0, else linear_q_proj).
#pragma once

#include "core/model/gpt_config.h"

namespace ptdp::test {

inline GptConfig tiny_mla(int q_lora_rank) {
  GptConfig g;
  g.num_layers = 2;
  g.hidden_size = 16;
  g.num_attention_heads = 4;
  g.ffn_hidden_size = 24;
  g.vocab_size = 64;
  g.make_vocab_size_divisible_by = 32;
  g.seq_length = 8;
  g.normalization = Normalization::RMSNorm;
  g.swiglu = true;
  g.position_embedding = PositionEmbedding::Rope;
  g.add_bias_linear = false;
  g.tie_embeddings = false;
  g.qk_layernorm = true;
  g.multi_latent_attention = true;
  g.q_lora_rank = q_lora_rank;
  g.kv_lora_rank = 6;
  g.qk_head_dim = 4;
  g.qk_pos_emb_head_dim = 2;
  g.v_head_dim = 3;
  return g;
}

}  // namespace ptdp::test
