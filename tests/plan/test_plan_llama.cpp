// The model presets and the planner for the Llama-family options: every preset has its
// published shape and parameter count (counted here module by module as Hugging Face lays the
// model out, independently of ptdp's count), the FLOPs equal Megatron-LM's
// num_floating_point_operations transcribed from its source, the per-rank parameter counts
// add up to the model's, the planner refuses tensor sizes that split a query group, ptdp-plan's
// flags read presets and the Llama options, and every preset is planned on DGX H100 nodes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/model/gpt.h"
#include "core/model/model_presets.h"
#include "core/plan/plan_args.h"
#include "core/plan/planner.h"

namespace {

using namespace ptdp;
using namespace ptdp::plan;

GptConfig preset(const std::string& name) {
  const std::optional<ModelPreset> p = find_model_preset(name);
  REQUIRE(p.has_value());
  return p->config;
}

// The parameters of a Hugging Face LlamaForCausalLM / Qwen2ForCausalLM, module by module:
// embed_tokens [V, h]; per layer q_proj [a dh, h], k_proj and v_proj [g dh, h] (with a bias
// each for Qwen2), o_proj [h, a dh], gate_proj and up_proj [ffn, h], down_proj [h, ffn],
// input_layernorm and post_attention_layernorm [h]; norm [h]; lm_head [V, h] unless tied.
int64_t hf_llama_parameters(int64_t l, int64_t h, int64_t a, int64_t g, int64_t ffn, int64_t V, bool tied,
                            bool qkv_bias) {
  const int64_t dh = h / a;
  int64_t layer = a * dh * h + 2 * g * dh * h + h * a * dh + 3 * ffn * h + 2 * h;
  if (qkv_bias) layer += a * dh + 2 * g * dh;
  return V * h + l * layer + h + (tied ? 0 : V * h);
}

// GPT2LMHeadModel: wte [V, h], wpe [1024, h]; per layer ln_1, ln_2 (weight, bias), c_attn
// [h, 3h] + 3h, c_proj [h, h] + h, c_fc [h, 4h] + 4h, mlp c_proj [4h, h] + h; ln_f; tied head.
int64_t hf_gpt2_parameters(int64_t l, int64_t h, int64_t V, int64_t positions) {
  const int64_t layer = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (4 * h * h + 4 * h) + (4 * h * h + h);
  return V * h + positions * h + l * layer + 2 * h;
}

struct Published {
  const char* name;
  int64_t parameters;  // the model card's / safetensors' count (unpadded vocabulary)
  int64_t hf;          // hf_*_parameters of the shape the test expects
};

}  // namespace

TEST_CASE("the presets: names, lookup, and every one valid", "[plan][presets]") {
  const std::vector<ModelPreset>& all = model_presets();
  REQUIRE(all.size() == 31);
  std::vector<std::string> names;
  for (const ModelPreset& p : all) {
    INFO(p.name);
    CHECK(!p.description.empty());
    for (char c : p.name) CHECK(!(c >= 'A' && c <= 'Z'));
    CHECK(std::find(names.begin(), names.end(), p.name) == names.end());
    names.push_back(p.name);
    CHECK_NOTHROW(p.config.validate(1));
    CHECK(model_preset_names().find(p.name) != std::string::npos);
  }
  CHECK(names.front() == "gpt2-124m");
  CHECK(find_model_preset("Llama-3-8B").has_value());
  CHECK(find_model_preset("QWEN2.5-7B")->name == "qwen2.5-7b");
  CHECK_FALSE(find_model_preset("llama-4-8b").has_value());
  CHECK_FALSE(find_model_preset("").has_value());
}

TEST_CASE("every preset has its published shape and parameter count", "[plan][presets]") {
  // Llama and Qwen2.5: the counts Hugging Face reports for the checkpoints (safetensors
  // metadata), and the module-by-module count of the shapes in their config.json.
  const Published llama_family[] = {
      {"llama-3.2-1b", 1235814400, hf_llama_parameters(16, 2048, 32, 8, 8192, 128256, true, false)},
      {"llama-3.2-3b", 3212749824, hf_llama_parameters(28, 3072, 24, 8, 8192, 128256, true, false)},
      {"llama-3-8b", 8030261248, hf_llama_parameters(32, 4096, 32, 8, 14336, 128256, false, false)},
      {"llama-3-70b", 70553706496, hf_llama_parameters(80, 8192, 64, 8, 28672, 128256, false, false)},
      {"qwen2.5-0.5b", 494032768, hf_llama_parameters(24, 896, 14, 2, 4864, 151936, true, true)},
      {"qwen2.5-1.5b", 1543714304, hf_llama_parameters(28, 1536, 12, 2, 8960, 151936, true, true)},
      {"qwen2.5-7b", 7615616512, hf_llama_parameters(28, 3584, 28, 4, 18944, 152064, false, true)},
  };
  const Published gpt2[] = {
      {"gpt2-124m", 124439808, hf_gpt2_parameters(12, 768, 50257, 1024)},
      {"gpt2-355m", 354823168, hf_gpt2_parameters(24, 1024, 50257, 1024)},
      {"gpt2-774m", 774030080, hf_gpt2_parameters(36, 1280, 50257, 1024)},
      {"gpt2-1.5b", 1557611200, hf_gpt2_parameters(48, 1600, 50257, 1024)},
  };
  for (const Published* list : {static_cast<const Published*>(llama_family), static_cast<const Published*>(gpt2)}) {
    const std::size_t n = list == llama_family ? std::size(llama_family) : std::size(gpt2);
    for (std::size_t i = 0; i < n; ++i) {
      const Published& want = list[i];
      const GptConfig g = preset(want.name);
      INFO(want.name);
      CHECK(want.hf == want.parameters);  // the shape below is the published model's
      // ptdp's count with the vocabulary unpadded is the published one; with the preset's
      // padding (128, Megatron's) the extra rows are counted once per embedding table.
      CHECK(published_parameters(g) == want.parameters);
      const int64_t extra_rows = g.padded_vocab(1) - g.vocab_size;
      CHECK(g.parameter_count(1) == want.parameters + extra_rows * g.hidden_size * (g.tie_embeddings ? 1 : 2));
    }
  }
  // 128256, 151936 and 152064 are multiples of 128: no padding at t = 1; GPT-2's 50257 -> 50304.
  CHECK(preset("llama-3-8b").padded_vocab(1) == 128256);
  CHECK(preset("qwen2.5-0.5b").padded_vocab(1) == 151936);
  CHECK(preset("qwen2.5-7b").padded_vocab(1) == 152064);
  CHECK(preset("gpt2-124m").padded_vocab(1) == 50304);
  CHECK(preset("llama-3-8b").padded_vocab(8) == 129024);

  // The architecture of the families.
  const GptConfig l8 = preset("llama-3-8b");
  CHECK(l8.normalization == Normalization::RMSNorm);
  CHECK(l8.swiglu);
  CHECK(l8.ffn() == 14336);
  CHECK(l8.rope());
  CHECK(l8.rotary_base == 500000.0f);
  CHECK_FALSE(l8.rope_scaling.enabled);
  CHECK(l8.query_groups() == 8);
  CHECK(l8.head_dim() == 128);
  CHECK_FALSE(l8.add_bias_linear);
  CHECK_FALSE(l8.qkv_bias());
  CHECK_FALSE(l8.tie_embeddings);
  CHECK(l8.layernorm_epsilon == 1e-5f);
  CHECK(l8.hidden_dropout == 0.0f);
  CHECK(l8.attention_dropout == 0.0f);
  CHECK(l8.seq_length == 8192);
  CHECK(l8.max_positions() == 8192);
  const GptConfig l1 = preset("llama-3.2-1b");
  CHECK(l1.tie_embeddings);
  CHECK(l1.rope_scaling.enabled);
  CHECK(l1.rope_scaling.factor == 32.0f);
  CHECK(l1.rope_scaling.low_freq_factor == 1.0f);
  CHECK(l1.rope_scaling.high_freq_factor == 4.0f);
  CHECK(l1.rope_scaling.original_max_position_embeddings == 8192);
  CHECK(l1.max_positions() == 131072);
  CHECK(l1.head_dim() == 64);
  const GptConfig q = preset("qwen2.5-0.5b");
  CHECK(q.qkv_bias());
  CHECK_FALSE(q.add_bias_linear);
  CHECK(q.rotary_base == 1000000.0f);
  CHECK(q.layernorm_epsilon == 1e-6f);
  CHECK(q.query_groups() == 2);
  CHECK(q.head_dim() == 64);
  CHECK(q.tie_embeddings);
  CHECK_FALSE(preset("qwen2.5-7b").tie_embeddings);
  const GptConfig g2 = preset("gpt2-1.5b");
  CHECK(g2.normalization == Normalization::LayerNorm);
  CHECK(g2.learned_positions());
  CHECK(g2.max_positions() == 1024);
  CHECK(g2.ffn() == 6400);
  CHECK(g2.add_bias_linear);

  // The paper's GPTs: the parameter formula prints the row's figure.
  for (const char* row : {"1.7", "3.6", "7.5", "18.4", "39.1", "76.1", "145.6", "310.1", "529.6", "1008.0"}) {
    std::string name = std::string("gpt-") + row;
    if (name == "gpt-1008.0") name = "gpt-1008";
    const GptConfig g = preset(name + "b");
    char printed[32];
    std::snprintf(printed, sizeof printed, "%.1f", paper_parameters(g) / 1e9);
    INFO(name);
    CHECK(std::string(printed) == row);
    CHECK(g.vocab_size == 51200);
    CHECK(g.seq_length == 2048);
  }
}

namespace {

// Megatron-LM's num_floating_point_operations, transcribed from megatron/training/training.py
// for a dense GPT / Llama (no MoE, MTP, MLA or linear attention), as two versions:
//  - 2024 (NVIDIA/Megatron-LM commit 86df799dc4c78e4bd7fbae972b3ee743e8b14f02):
//    12 B s l h^2 ((1 + g/a + s/h) a dh / h + ffn/h * (3/2 if swiglu) + Vp / (2 l h));
//  - 2025 (main, commit 001b00c2734d8f0fad096fe48a382fedf755d321): the same GEMMs written per
//    term, with the core attention halved for the causal mask (query_projection_size * s / 2 * 2).
// Both count the padded vocabulary (args.padded_vocab_size); ptdp's GptConfig::paper_flops
// counts the 2024 form with the unpadded vocabulary (the paper's V).
struct MegatronArgs {
  double seq_length, num_layers, hidden_size, num_attention_heads, num_query_groups, kv_channels, ffn_hidden_size,
      padded_vocab_size;
  bool group_query_attention, swiglu;
};

MegatronArgs megatron_args(const GptConfig& g, double padded_vocab) {
  return MegatronArgs{static_cast<double>(g.seq_length),
                      static_cast<double>(g.num_layers),
                      static_cast<double>(g.hidden_size),
                      static_cast<double>(g.num_attention_heads),
                      static_cast<double>(g.query_groups()),
                      static_cast<double>(g.head_dim()),
                      static_cast<double>(g.ffn()),
                      padded_vocab,
                      g.query_groups() != g.num_attention_heads,
                      g.swiglu};
}

double megatron_flops_2024(MegatronArgs args, double batch_size) {
  const double query_projection_size = args.kv_channels * args.num_attention_heads;
  const double query_projection_to_hidden_size_ratio = query_projection_size / args.hidden_size;
  if (!args.group_query_attention) args.num_query_groups = args.num_attention_heads;
  const double num_experts_routed_to = 1;
  const double gated_linear_multiplier = args.swiglu ? 3.0 / 2.0 : 1.0;
  const double expansion_factor = 3 * 2 * 2;
  return expansion_factor * batch_size * args.seq_length * args.num_layers * args.hidden_size * args.hidden_size *
         (((1 + (args.num_query_groups / args.num_attention_heads) + (args.seq_length / args.hidden_size)) *
           query_projection_to_hidden_size_ratio) +
          ((args.ffn_hidden_size / args.hidden_size) * num_experts_routed_to * gated_linear_multiplier) +
          (args.padded_vocab_size / (2 * args.num_layers * args.hidden_size)));
}

double megatron_flops_2025(MegatronArgs args, double batch_size) {
  if (!args.group_query_attention) args.num_query_groups = args.num_attention_heads;
  const double forward_backward_expansion_factor = 3, fma_expansion_factor = 2;
  const double ffn_expansion_factor = args.swiglu ? 3 : 2;
  const double query_projection_size = args.kv_channels * args.num_attention_heads;
  const double key_projection_size = args.kv_channels * args.num_query_groups;
  const double value_projection_size = args.kv_channels * args.num_query_groups;
  const double standard_self_attn_term =
      forward_backward_expansion_factor * fma_expansion_factor *
      (args.hidden_size * (query_projection_size + key_projection_size + value_projection_size) +
       query_projection_size * args.seq_length / 2 * 2 + query_projection_size * args.hidden_size);
  const double self_attn_term = standard_self_attn_term * args.num_layers;
  return batch_size * args.seq_length *
         (forward_backward_expansion_factor * fma_expansion_factor * args.hidden_size *
              (args.ffn_hidden_size * ffn_expansion_factor) * args.num_layers +
          self_attn_term +
          forward_backward_expansion_factor * fma_expansion_factor * args.hidden_size * args.padded_vocab_size);
}

// One layer's forward FLOPs per sample, GEMM by GEMM: linear_qkv, linear_proj, linear_fc1
// (2 ffn rows with SwiGLU), linear_fc2, and the products Q K^T and P V.
double layer_forward_per_sample(const GptConfig& g) {
  const double s = g.seq_length, h = g.hidden_size, a = g.num_attention_heads, q = g.query_groups(), dh = g.head_dim();
  const double f = g.ffn(), fc1 = g.swiglu ? 2 * f : f;
  return 2 * s * h * ((a + 2 * q) * dh + a * dh + fc1 + f) + 2 * 2 * s * s * a * dh;
}

}  // namespace

TEST_CASE("the FLOPs are Megatron's num_floating_point_operations", "[plan][flops]") {
  for (const char* name : {"llama-3-8b", "llama-3.2-1b", "llama-3-70b", "qwen2.5-7b", "qwen2.5-0.5b", "gpt2-355m",
                           "gpt-145.6b"}) {
    const GptConfig g = preset(name);
    INFO(name);
    const int64_t B = 512;
    const double s = g.seq_length, h = g.hidden_size, l = g.num_layers, V = g.vocab_size;
    const double a = g.num_attention_heads, dh = g.head_dim();
    // With the vocabulary unpadded, Megatron's (2024) count is ptdp's.
    CHECK(g.paper_flops(B) == Approx(megatron_flops_2024(megatron_args(g, V), B)).epsilon(1e-12));
    // Megatron counts the padded vocabulary: at t = 8 (a multiple of 128 * 8) the logit GEMMs
    // add 6 B s h (Vp - V).
    const double Vp = static_cast<double>(g.padded_vocab(8));
    CHECK(megatron_flops_2024(megatron_args(g, Vp), B) - g.paper_flops(B) ==
          Approx(6.0 * B * s * h * (Vp - V)).epsilon(1e-6).margin(1e-12 * g.paper_flops(B)));
    // Megatron's main branch halves the attention products for the causal mask: 6 B s^2 a dh l
    // less. ptdp counts the full products, as the paper and the 2024 code do.
    CHECK(megatron_flops_2024(megatron_args(g, V), B) - megatron_flops_2025(megatron_args(g, V), B) ==
          Approx(6.0 * B * s * s * a * dh * l).epsilon(1e-6));
    // The layers' GEMMs one by one: three passes (forward, input and weight gradients) plus the
    // logits; full recomputation adds one forward of every layer, selective the attention products.
    CHECK(g.paper_flops(B) == Approx(3.0 * B * l * layer_forward_per_sample(g) + 6.0 * B * s * h * V).epsilon(1e-12));
    CHECK(iteration_flops(g, B, Recompute::None) == g.paper_flops(B));
    CHECK(iteration_flops(g, B, Recompute::Full) == g.paper_flops(B, true));
    CHECK(iteration_flops(g, B, Recompute::Full) - iteration_flops(g, B, Recompute::None) ==
          Approx(B * l * layer_forward_per_sample(g)).epsilon(1e-9));
    CHECK(iteration_flops(g, B, Recompute::Selective) - iteration_flops(g, B, Recompute::None) ==
          Approx(B * l * 4.0 * s * s * a * dh).epsilon(1e-9));
  }
  // Llama 3 8B, one batch of 512 x 8192 tokens: 12 B s l h^2 ((1 + 8/32 + 2) + 3.5 * 1.5 +
  // 128256 / (2 l h)) = 2.4290e17 (6 N tokens, 2.0e17, plus the attention products).
  CHECK(preset("llama-3-8b").paper_flops(512) == Approx(2.4290410880827392e17).epsilon(1e-12));
}

TEST_CASE("per-rank parameters add up to the model's for the Llama options", "[plan][presets]") {
  for (const ModelPreset& p : model_presets()) {
    const GptConfig& g = p.config;
    INFO(p.name);
    for (int pp : {1, 2, 4}) {
      if (g.num_layers % pp != 0) continue;
      int64_t sum = 0;
      for (int stage = 0; stage < pp; ++stage) sum += stage_parameters(g, 1, pp, 1, stage);
      const int64_t tied_copy = g.tie_embeddings && pp > 1 ? g.padded_vocab(1) * g.hidden_size : 0;
      CHECK(sum == g.parameter_count(1) + tied_copy);
    }
  }
  // With t ranks: each layer's split matrices (and column-parallel biases) once per rank, the
  // replicated norms and row-parallel biases on every rank.
  const GptConfig q = preset("qwen2.5-0.5b");  // t = 2 splits its 14 heads and 2 groups
  const int64_t h = q.hidden_size, f = q.ffn(), dh = q.head_dim(), rows = q.qkv_rows();
  const int64_t layer_split = rows * h + rows + 14 * dh * h + 2 * f * h + f * h;
  const int64_t layer_replicated = 2 * h;
  const int64_t vp = q.padded_vocab(2);
  CHECK(stage_parameters(q, 2, 1, 1, 0) == q.num_layers * (layer_replicated + layer_split / 2) + vp * h / 2 + h);
}

TEST_CASE("per-rank parameter counts equal what GptModel lays out, Llama options", "[plan][presets][model]") {
  GptConfig g;
  g.num_layers = 4;
  g.hidden_size = 64;
  g.num_attention_heads = 8;
  g.num_query_groups = 2;
  g.ffn_hidden_size = 96;
  g.vocab_size = 300;
  g.make_vocab_size_divisible_by = 16;
  g.seq_length = 16;
  g.normalization = Normalization::RMSNorm;
  g.swiglu = true;
  g.position_embedding = PositionEmbedding::Rope;
  g.add_bias_linear = false;
  for (bool qkv_bias : {false, true}) {
    for (bool qk_norm : {false, true}) {
      for (bool tie : {true, false}) {
        g.add_qkv_bias = qkv_bias;
        g.qk_layernorm = qk_norm;
        g.tie_embeddings = tie;
        for (int t : {1, 2}) {
          for (int p : {1, 2}) {
            for (int v : {1, 2}) {
              if (g.num_layers % (p * v) != 0 || (p == 1 && v > 1)) continue;
              for (int stage = 0; stage < p; ++stage) {
                int64_t laid_out = 0;
                for (int c = stage; c < p * v; c += p) {
                  const GptModel chunk(g, TensorParallel{nullptr, 0, t}, Device{}, GptStage::chunk_of(g, c, p * v, p, v),
                                       /*materialize=*/false);
                  for (int i = 0; i < chunk.params().size(); ++i) laid_out += chunk.params().info(i).local_shape.numel();
                }
                INFO("qkv bias " << qkv_bias << " qk norm " << qk_norm << " tie " << tie << " t " << t << " p " << p
                                 << " v " << v << " stage " << stage);
                CHECK(stage_parameters(g, t, p, v, stage) == laid_out);
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("activation memory per layer with the Llama options", "[plan][memory]") {
  GptConfig l8 = preset("llama-3-8b");
  // Its auto in bf16 is CUDA's flash attention (head dim 128); the unfused path is pinned here
  // and the fused kernel's row statistics are checked against it below.
  REQUIRE(fused_attention(l8, Precision::Bf16));
  const GptConfig l8_fused = l8;
  l8.attention = AttentionImpl::Unfused;
  const double s = l8.seq_length, h = l8.hidden_size, f = l8.ffn(), a = l8.num_attention_heads, g = 8, dh = 128;
  for (int t : {1, 2, 4, 8}) {
    INFO("t " << t);
    const double sb = s;  // b = 1
    // Replicated: the norms' and the two GEMMs' inputs (2 s b h each, no dropout masks), RMSNorm's
    // one fp32 statistic per row for each of the two norms; per rank q, k, v, context (a, g, g, a
    // heads) and fc1's 2 ffn outputs plus the SwiGLU output, 2 bytes each; the softmax output.
    const double selective = 8 * sb * h + 2 * 4 * sb + (2 * (a + 2 * g + a) * dh + 2 * (2 * f + f)) * sb / t;
    CHECK(layer_activation_bytes(l8, Precision::Bf16, t, 1, Recompute::Selective) == Approx(selective));
    CHECK(layer_activation_bytes(l8, Precision::Bf16, t, 1, Recompute::None) == Approx(selective + 2 * a * s * s / t));
    CHECK(layer_activation_bytes(l8, Precision::Bf16, t, 1, Recompute::Full) == Approx(2 * sb * h));
    // The fused kernel keeps the fp32 log-sum-exp of every query row in place of the softmax
    // output, and selective recomputation has nothing more to drop.
    CHECK(layer_activation_bytes(l8_fused, Precision::Bf16, t, 1, Recompute::None) ==
          Approx(selective + 4 * a * s / t));
    CHECK(layer_activation_bytes(l8_fused, Precision::Bf16, t, 1, Recompute::Selective) ==
          Approx(selective + 4 * a * s / t));
    CHECK(layer_activation_bytes(l8_fused, Precision::Bf16, t, 1, Recompute::Full) == Approx(2 * sb * h));
  }
  // The GPT keeps Korthikanti's s b h (10 + 24/t) + 5 a s^2 b / t, plus LayerNorm's statistics.
  GptConfig gpt = preset("gpt-145.6b");
  gpt.attention = AttentionImpl::Unfused;  // as the paper's Megatron-LM (Korthikanti et al.'s term)
  const double S = gpt.seq_length, H = gpt.hidden_size, A = gpt.num_attention_heads;
  CHECK(layer_activation_bytes(gpt, Precision::Fp16, 8, 1, Recompute::None) ==
        Approx(S * H * (10 + 24.0 / 8) + 5 * A * S * S / 8 + 2 * 2 * 4 * S));
  // q/k norms keep the heads before the norm.
  GptConfig qk = l8;
  qk.qk_layernorm = true;
  CHECK(layer_activation_bytes(qk, Precision::Bf16, 1, 1, Recompute::Selective) -
            layer_activation_bytes(l8, Precision::Bf16, 1, 1, Recompute::Selective) ==
        Approx(s * (a + g) * (2 * dh + 4)));
}

TEST_CASE("a tensor size that splits a query group is refused", "[plan][refusal]") {
  // Qwen2.5 1.5B: 12 heads and an MLP of 8960 split over t = 4, its 2 query groups do not.
  PlanRequest q;
  q.model = preset("qwen2.5-1.5b");
  q.global_batch_size = 64;
  q.precision = Precision::Bf16;
  q.tensor = 4;
  Cluster h100 = cluster_preset("dgx-h100");
  plan::Layout L;
  L.t = 4;
  L.d = 2;
  L.m = 32;
  CHECK_THROWS_WITH(estimate(q, h100, L, false), Catch::Contains("num_query_groups") && Catch::Contains("2"));
  const PlanResult pinned = make_plan(q, h100);
  CHECK_FALSE(pinned.feasible);
  INFO(pinned.reason);
  CHECK(pinned.reason.find("num-query-groups 2") != std::string::npos);
  // Unpinned, t = 4 and 8 are named as ruled out by the groups (8 by the heads too).
  q.tensor = 0;
  const PlanResult free = make_plan(q, h100);
  REQUIRE(free.feasible);
  for (const Estimate& e : free.layouts) CHECK(e.layout.t <= 2);
  bool named = false;
  for (const std::string& s : free.ruled_out) named = named || s == "t = 4: does not divide num-query-groups 2";
  CHECK(named);
  // Llama 3 70B on 8 nodes: t = 16 and 32 divide its 64 heads and MLP but not its 8 groups.
  PlanRequest big;
  big.model = preset("llama-3-70b");
  big.global_batch_size = 512;
  big.precision = Precision::Bf16;
  big.allow_distributed_optimizer = true;
  h100.nodes = 8;
  const PlanResult plan70 = make_plan(big, h100);
  REQUIRE(plan70.feasible);
  int groups_named = 0;
  for (const std::string& s : plan70.ruled_out) {
    groups_named += s == "t = 16: does not divide num-query-groups 8" || s == "t = 32: does not divide num-query-groups 8";
  }
  CHECK(groups_named == 2);
}

TEST_CASE("ptdp-plan reads presets and the Llama flags", "[plan][args]") {
  // A preset, then flags that override it whatever their order.
  const PlanArgs a = parse_plan_args({"--num-layers", "4", "--model-preset", "LLAMA-3-8B", "--global-batch-size", "8",
                                      "--seq-length", "4096"});
  const GptConfig& g = a.request.model;
  CHECK(g.num_layers == 4);
  CHECK(g.seq_length == 4096);
  CHECK(g.hidden_size == 4096);
  CHECK(g.query_groups() == 8);
  CHECK(g.swiglu);
  CHECK(g.ffn() == 14336);
  CHECK_THROWS_WITH(parse_plan_args({"--model-preset", "llama-9", "--global-batch-size", "8"}),
                    Catch::Contains("--model-preset") && Catch::Contains("'llama-9'") && Catch::Contains("llama-3-8b") &&
                        Catch::Contains("qwen2.5-7b"));
  // Every Llama flag, by Megatron's name.
  const PlanArgs l = parse_plan_args({"--global-batch-size", "8", "--num-layers", "2", "--hidden-size", "256",
                                      "--num-attention-heads", "8", "--normalization", "RMSNorm", "--norm-epsilon",
                                      "1e-6", "--swiglu", "--position-embedding-type", "rope", "--rotary-base",
                                      "500000", "--rotary-percent", "0.5", "--use-rope-scaling",
                                      "--rope-scaling-factor", "32", "--group-query-attention", "--num-query-groups",
                                      "2", "--kv-channels", "64", "--disable-bias-linear", "--add-qkv-bias",
                                      "--qk-layernorm", "--hidden-dropout", "0", "--attention-dropout", "0"});
  const GptConfig& m = l.request.model;
  CHECK(m.normalization == Normalization::RMSNorm);
  CHECK(m.layernorm_epsilon == 1e-6f);
  CHECK(m.swiglu);
  CHECK(m.rope());
  CHECK(m.rotary_base == 500000.0f);
  CHECK(m.rotary_percent == 0.5f);
  CHECK(m.rope_scaling.enabled);
  CHECK(m.rope_scaling.factor == 32.0f);
  CHECK(m.query_groups() == 2);
  CHECK(m.head_dim() == 64);
  CHECK_FALSE(m.add_bias_linear);
  CHECK(m.qkv_bias());
  CHECK(m.qk_layernorm);
  CHECK(m.hidden_dropout == 0.0f);
  CHECK(m.attention_dropout == 0.0f);
  // Megatron's --group-query-attention defaults to one group; --num-query-groups needs it
  // unless the preset has groups already.
  CHECK(parse_plan_args({"--global-batch-size", "8", "--group-query-attention"}).request.model.query_groups() == 1);
  CHECK_THROWS_WITH(parse_plan_args({"--global-batch-size", "8", "--num-query-groups", "2"}),
                    Catch::Contains("--group-query-attention"));
  CHECK(parse_plan_args({"--global-batch-size", "8", "--model-preset", "llama-3-8b", "--num-query-groups", "4"})
            .request.model.query_groups() == 4);
  // Refusals naming the flags.
  CHECK_THROWS_WITH(parse_plan_args({"--global-batch-size", "8", "--model-preset", "qwen2.5-1.5b",
                                     "--tensor-model-parallel-size", "4"}),
                    Catch::Contains("--tensor-model-parallel-size 4") && Catch::Contains("--num-query-groups 2"));
  CHECK_THROWS_WITH(parse_plan_args({"--global-batch-size", "8", "--group-query-attention", "--num-query-groups", "3"}),
                    Catch::Contains("--num-query-groups 3"));
  CHECK_THROWS_WITH(parse_plan_args({"--global-batch-size", "8", "--normalization", "rmsnorm"}),
                    Catch::Contains("--normalization") && Catch::Contains("RMSNorm"));
  CHECK_THROWS_WITH(parse_plan_args({"--global-batch-size", "8", "--position-embedding-type", "alibi"}),
                    Catch::Contains("--position-embedding-type"));
  CHECK_THROWS_WITH(parse_plan_args({"--global-batch-size", "8", "--use-rope-scaling"}),
                    Catch::Contains("--use-rope-scaling"));
  CHECK_THROWS_WITH(parse_plan_args({"--global-batch-size", "8", "--rotary-percent", "1.5"}),
                    Catch::Contains("--rotary-percent"));
  CHECK(plan_args_help("ptdp-plan").find("--model-preset") != std::string::npos);
  CHECK(plan_args_help("ptdp-plan").find("--num-query-groups") != std::string::npos);
}

TEST_CASE("every preset is planned on DGX H100 nodes", "[plan][presets][h100]") {
  // GPT-2 and the small Llama and Qwen models on one node, Llama 3 70B on eight, the paper's
  // GPTs on the GPUs of its weak-scaling rows; bf16, the distributed optimizer allowed, global
  // batches as Megatron's recipes use (512 sequences; the paper's batches for its GPTs).
  struct Row {
    const char* name;
    int gpus;
    int64_t batch;
  };
  const Row rows[] = {{"gpt2-124m", 8, 512},      {"gpt2-355m", 8, 512},       {"gpt2-774m", 8, 512},
                      {"gpt2-1.5b", 8, 512},      {"gpt-1.7b", 32, 512},       {"gpt-3.6b", 64, 512},
                      {"gpt-7.5b", 128, 512},     {"gpt-18.4b", 256, 1024},    {"gpt-39.1b", 512, 1536},
                      {"gpt-76.1b", 1024, 1792},  {"gpt-145.6b", 1536, 2304},  {"gpt-310.1b", 1920, 2160},
                      {"gpt-529.6b", 2520, 2520}, {"gpt-1008b", 3072, 3072},   {"llama-3.2-1b", 8, 512},
                      {"llama-3.2-3b", 8, 512},   {"llama-3-8b", 8, 512},      {"llama-3-70b", 64, 512},
                      {"qwen2.5-0.5b", 8, 512},   {"qwen2.5-1.5b", 8, 512},    {"qwen2.5-7b", 8, 512},
                      // The MoE presets: their share of H100s in Megatron-style recipes (4096-token
                      // sequences, 512 of them per batch).
                      {"mixtral-8x7b", 64, 512},  {"mixtral-8x22b", 256, 512}, {"qwen3-30b-a3b", 32, 512},
                      {"qwen3-235b-a22b", 512, 512}, {"olmoe-1b-7b", 8, 512},  {"qwen2-57b-a14b", 64, 512},
                      // The DeepSeek-V3 family: DeepSeek-V3 on its 2048 GPUs and batch of 15360
                      // (its report), Kimi K2 on as many; the small ones on two nodes.
                      {"deepseek-v3", 2048, 15360}, {"deepseek-v2-lite", 16, 512},
                      {"moonlight-16b-a3b", 16, 512}, {"kimi-k2", 2048, 4096}};
  REQUIRE(std::size(rows) == model_presets().size());
  for (const Row& r : rows) {
    PlanRequest q;
    q.model = preset(r.name);
    q.global_batch_size = r.batch;
    q.precision = Precision::Bf16;
    q.allow_distributed_optimizer = true;
    q.num_gpus = r.gpus;
    Cluster c = cluster_preset("dgx-h100");
    c.nodes = (r.gpus + c.gpus_per_node - 1) / c.gpus_per_node;
    const PlanResult plan = make_plan(q, c);
    INFO(r.name << ": " << plan.reason);
    REQUIRE(plan.feasible);
    const Estimate& best = plan.layouts.front();
    std::printf("%-13s %5d H100s, B %4lld: %s, %.0f TFLOP/s per GPU, MFU %.1f%%, %.1f GiB\n", r.name, r.gpus,
                static_cast<long long>(r.batch), best.layout.str().c_str(), best.tflops_per_gpu, 100 * best.mfu,
                best.memory.total() / (1024.0 * 1024.0 * 1024.0));
    CHECK(best.fits);
    CHECK(best.mfu > 0.05);
    CHECK(best.mfu < 0.6);
    CHECK(q.model.query_groups() % best.layout.t == 0);
    CHECK(plan_report(plan).find(r.name[0] == 'g' ? "GPT" : "Decoder") != std::string::npos);
  }
}
