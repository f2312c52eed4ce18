// Multi-latent attention in GptConfig's counts: the parameter count against a hand count and
// against what GptModel allocates (t = 1 and 2), DeepSeek-V2-Lite's published 15.7B total and
// 2.4B activated parameters, and paper_flops' MLA attention term against Megatron's formula
// written out by hand.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/model/gpt.h"
#include "tests/plan/tiny_mla.h"

namespace {

using namespace ptdp;
using ptdp::test::tiny_mla;


}  // namespace

TEST_CASE("MLA parameter count: a hand count and what the model allocates", "[plan][mla]") {
  for (const int rq : {0, 5}) {
    INFO("q_lora_rank " << rq);
    const GptConfig g = tiny_mla(rq);
    REQUIRE_NOTHROW(g.validate(2));
    // Per layer: the q path (linear_q_proj [4*6, 16], or linear_q_down_proj [5, 16], q_layernorm
    // [5], linear_q_up_proj [4*6, 5]), linear_kv_down_proj [6+2, 16], kv_layernorm [6],
    // linear_kv_up_proj [4*(4+3), 6], linear_proj [16, 4*3]; two RMSNorms [16]; SwiGLU fc1
    // [48, 16] and fc2 [16, 24].
    const int64_t q = rq > 0 ? 5 * 16 + 5 + 24 * 5 : 24 * 16;
    const int64_t layer = q + 8 * 16 + 6 + 28 * 6 + 16 * 12 + 2 * 16 + 48 * 16 + 16 * 24;
    const int64_t want = 2 * 64 * 16 + 2 * layer + 16;  // embedding, output layer, final norm
    CHECK(g.parameter_count(1) == want);
    CHECK(g.active_parameter_count(1) == want);
    for (const int t : {1, 2}) {
      const GptStage whole = GptStage::chunk_of(g, PipelineSplit{1, 1, 0, 0, {}}, 0);
      const GptModel model(g, TensorParallel{nullptr, 0, t}, Device{}, whole, false);
      int64_t global = 0, local = 0;
      for (int i = 0; i < model.params().size(); ++i) {
        const ParamInfo& info = model.params().info(i);
        global += info.global_shape.numel();
        local += info.local_shape.numel();
      }
      CHECK(global == g.parameter_count(t));
      // The down projections and the latent norms are whole on every tensor rank.
      const int64_t replicated = 2 * ((rq > 0 ? 5 * 16 + 5 : 0) + 8 * 16 + 6 + 2 * 16) + 16;  // and the norms
      CHECK(local == (global - replicated) / t + replicated);
    }
  }
}

TEST_CASE("MLA parameter count: DeepSeek-V2-Lite's 15.7B total, 2.4B activated", "[plan][mla]") {
  GptConfig g;
  g.num_layers = 27;
  g.hidden_size = 2048;
  g.num_attention_heads = 16;
  g.ffn_hidden_size = 10944;
  g.vocab_size = 102400;
  g.make_vocab_size_divisible_by = 128;
  g.seq_length = 4096;
  g.normalization = Normalization::RMSNorm;
  g.swiglu = true;
  g.position_embedding = PositionEmbedding::Rope;
  g.add_bias_linear = false;
  g.tie_embeddings = false;
  g.qk_layernorm = true;  // kv_a_layernorm (no query compression: no q_a_layernorm)
  g.multi_latent_attention = true;
  g.q_lora_rank = 0;
  g.kv_lora_rank = 512;
  g.qk_head_dim = 128;
  g.qk_pos_emb_head_dim = 64;
  g.v_head_dim = 128;
  g.moe.num_experts = 64;
  g.moe.router_topk = 6;
  g.moe.ffn_hidden_size = 1408;
  g.moe.shared_expert_intermediate_size = 2 * 1408;
  g.moe.layer_pattern.assign(27, 1);
  g.moe.layer_pattern[0] = 0;  // first_k_dense_replace = 1
  REQUIRE_NOTHROW(g.validate(1));
  // Hugging Face's count of the checkpoint: embed_tokens and lm_head [102400, 2048], per layer
  // q_proj [16*192, 2048], kv_a_proj_with_mqa [576, 2048], kv_a_layernorm [512], kv_b_proj
  // [16*256, 512], o_proj [2048, 2048], two norms; layer 0's dense MLP (3 * 10944 * 2048), the
  // others' gate [64, 2048], 64 experts and 2 shared (3 * 1408 * 2048 each); the final norm.
  const int64_t attention = 3072 * 2048 + 576 * 2048 + 512 + 4096 * 512 + 2048 * 2048 + 2 * 2048;
  const int64_t expert = 3 * 1408 * 2048;
  const int64_t total = 2 * 102400 * 2048 + 27 * attention + 3 * 10944 * 2048 + 26 * (64 * 2048 + 66 * expert) + 2048;
  CHECK(g.parameter_count(1) == total);
  CHECK(g.active_parameter_count(1) == total - 26 * 58 * expert);
  CHECK(std::round(static_cast<double>(g.parameter_count(1)) / 1e8) / 10 == 15.7);
  // The model card's 2.4B activated leaves the input embedding out.
  const int64_t active = g.active_parameter_count(1) - 102400 * 2048;
  CHECK(std::floor(static_cast<double>(active) / 1e8) / 10 == 2.4);
}

TEST_CASE("MLA paper_flops: Megatron's MLA attention term", "[plan][mla]") {
  for (const int rq : {0, 5}) {
    GptConfig g = tiny_mla(rq);
    GptConfig dense = g;  // the same MLPs and logits with the MLA term taken out
    const double B = 3, s = 8, h = 16, l = 2, a = 4, r = 6, dn = 4, dr = 2, dv = 3, dq = 6;
    const double q = rq > 0 ? rq * (h + a * dq + 1) : h * a * dq;
    const double per_token = q + r * (h + a * (dn + dv) + 1) + h * dr + a * dv * h + s * a * (dq + dv);
    dense.multi_latent_attention = false;
    dense.kv_channels = 3;  // a dh = 12 = a dv: any dense attention; its term is subtracted below
    const double dense_attention = 12 * B * s * l * h * h * (1 + 1 + s / h) * (a * 3 / h);
    for (const bool full : {false, true}) {
      const double want = (full ? 8 : 6) * B * s * l * per_token;
      const double dense_rest = dense.paper_flops(3, full) - (full ? 16.0 / 12 : 1.0) * dense_attention;
      const double got = g.paper_flops(3, full) - dense_rest;
      CHECK(got == Approx(want).epsilon(1e-12));
    }
  }
}
