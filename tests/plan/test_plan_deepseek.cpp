// The DeepSeek-V3 family in the presets and the planner: the presets' published totals and
// activated counts (and Hugging Face's module-by-module count of DeepSeek-V3), their shapes as
// ptdp-train and ptdp-plan read them, multi-latent attention's GEMMs against a hand count and
// against GptConfig's FLOPs, Megatron's num_floating_point_operations for MLA with MoE and MTP
// (transcribed from megatron/training/training.py), the MTP modules' parameters on the last
// stage, the KV cache, and DeepSeek-V3's own layout on 2048 H800s.
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/args/train_args.h"
#include "core/model/model_presets.h"
#include "core/plan/plan_args.h"
#include "core/plan/planner.h"
#include "tests/plan/tiny_mla.h"

namespace {

using namespace ptdp;
using ptdp::test::tiny_mla;
using namespace ptdp::plan;

GptConfig preset(const std::string& name) {
  const std::optional<ModelPreset> p = find_model_preset(name);
  REQUIRE(p.has_value());
  return p->config;
}

double billions(int64_t n) { return static_cast<double>(n) / 1e9; }
double round_to(double x, double unit) { return std::round(x / unit) * unit; }

// Hugging Face's DeepseekV3ForCausalLM module by module: embed_tokens and lm_head [V, h]; per
// layer q_a_proj [rq, h], q_a_layernorm [rq], q_b_proj [a (dn + dr), rq] (or q_proj [a (dn + dr),
// h]), kv_a_proj_with_mqa [r + dr, h], kv_a_layernorm [r], kv_b_proj [a (dn + dv), r], o_proj
// [h, a dv], two RMSNorms [h]; the first `dense` layers' MLP of gate, up [f, h] and down [h, f];
// the others' gate [E, h] (and e_score_correction_bias [E]), E experts and `shared` shared
// experts of width fe; the final norm. One MTP module (model.layers.61): enorm, hnorm [h],
// eh_proj [h, 2h], a decoder layer (MoE), shared_head.norm [h], and its own embed_tokens and
// shared_head.head, which ptdp shares with the model.
struct HfDeepseek {
  int64_t l, h, a, V, f, rq, E, k, fe, shared, dense;
  bool bias;
  int64_t r = 512, dn = 128, dr = 64, dv = 128;
  int64_t attention() const {
    const int64_t q = rq > 0 ? rq * h + rq + a * (dn + dr) * rq : a * (dn + dr) * h;
    return q + (r + dr) * h + r + a * (dn + dv) * r + h * a * dv + 2 * h;
  }
  int64_t moe(int64_t experts) const { return E * h + (bias ? E : 0) + (experts + shared) * 3 * fe * h; }
  int64_t count(int64_t experts) const {
    return 2 * V * h + l * attention() + dense * 3 * f * h + (l - dense) * moe(experts) + h;
  }
  int64_t mtp_module() const { return 2 * h + 2 * h * h + attention() + moe(E) + h; }
};


// Megatron-LM's num_floating_point_operations (megatron/training/training.py, transformer_flops)
// for a model with multi-latent attention, MoE after `dense` dense layers and D MTP modules,
// written out as Megatron has it, with ptdp's convention for the core attention (not halved for
// the causal mask: Megatron's current code halves it, ptdp's paper_flops follows the paper).
double megatron_flops(const GptConfig& g, double batch) {
  const double l = g.num_layers, h = g.hidden_size, s = g.seq_length, V = g.vocab_size, a = g.num_attention_heads;
  const double D = g.mtp_num_layers;
  double num_moe = g.num_moe_layers(), num_dense = l - num_moe;
  const double last_is_moe = g.moe.is_moe_layer(g.num_layers - 1) ? 1.0 : 0.0;
  num_moe += last_is_moe * D;
  num_dense += (1.0 - last_is_moe) * D;
  const double layers = l + D;
  const double rq = g.q_lora_rank, r = g.kv_lora_rank, dn = g.qk_head_dim, dr = g.qk_pos_emb_head_dim;
  const double dv = g.v_head_dim;
  const double q_term = rq > 0 ? rq * (h + a * (dn + dr) + 1) : h * a * (dn + dr);
  const double self_attn = 3 * 2 * layers *
                           (q_term + r * (h + a * (dn + dv) + 1) + h * dr + a * dv * h + s * a * (dn + dr) +
                            s * a * dv);
  const double glu = g.swiglu ? 1.5 : 1.0;
  const double k = g.moe.enabled() ? g.moe.router_topk : 0;
  const double mlp = 12 * layers * h *
                     (g.ffn() * glu * (num_dense / layers) + g.moe_ffn() * k * glu * (num_moe / layers) +
                      g.moe.shared_expert_intermediate_size * glu * (num_moe / layers));
  return batch * s * (mlp + self_attn + 3 * 2 * D * (3 * h + 2 * h * h) + 3 * 2 * h * V * (D + 1));
}

}  // namespace

TEST_CASE("DeepSeek-V3: 671B total, 37B activated, and the MTP module's 11.6B", "[plan][presets][deepseek]") {
  GptConfig g = preset("deepseek-v3");
  REQUIRE_NOTHROW(g.validate(1));
  CHECK(g.mtp_num_layers == 1);
  CHECK(g.mtp_moe());
  const HfDeepseek hf{61, 7168, 128, 129280, 18432, 1536, 256, 8, 2048, 1, 3, true};
  GptConfig main = g;
  main.mtp_num_layers = 0;
  // The main model, module by module as Hugging Face counts it; the card's 671B and 37B (the
  // activated count leaves the input embedding out: README_WEIGHTS.md's 36.6B).
  CHECK(published_parameters(main) == hf.count(256));
  CHECK(round_to(billions(published_parameters(main)), 1) == 671);
  const int64_t active = main.active_parameter_count(1) - 129280LL * 7168;
  CHECK(main.active_parameter_count(1) == hf.count(8));
  CHECK(round_to(billions(active), 0.1) == Approx(36.6));
  CHECK(round_to(billions(active), 1) == 37);
  // The module: ptdp counts it once (the embedding and head shared); the hub's 685B holds its
  // own copies of embed_tokens and shared_head.head too (684.5B, and the FP8 scales).
  const int64_t module = published_parameters(g) - published_parameters(main);
  CHECK(module == hf.mtp_module());
  CHECK(round_to(billions(module), 0.1) == Approx(11.6));
  CHECK(round_to(billions(published_parameters(g) + 2 * 129280LL * 7168), 0.1) == Approx(684.5));
  // What ptdp allocates at t = 1 is the padded vocabulary's count: 129280 is a multiple of 128.
  CHECK(g.parameter_count(1) == published_parameters(g));
}

TEST_CASE("DeepSeek-V2-Lite, Moonlight and Kimi K2: their cards' totals", "[plan][presets][deepseek]") {
  SECTION("deepseek-v2-lite: 15.7B, 2.4B") {
    const GptConfig g = preset("deepseek-v2-lite");
    REQUIRE_NOTHROW(g.validate(1));
    const HfDeepseek hf{27, 2048, 16, 102400, 10944, 0, 64, 6, 1408, 2, 1, false};
    CHECK(published_parameters(g) == hf.count(64));
    CHECK(g.active_parameter_count(1) == hf.count(6));
    CHECK(round_to(billions(published_parameters(g)), 0.1) == Approx(15.7));
    CHECK(std::floor(billions(g.active_parameter_count(1) - 102400LL * 2048) * 10) / 10 == Approx(2.4));
  }
  SECTION("moonlight-16b-a3b: 16B, 3B") {
    const GptConfig g = preset("moonlight-16b-a3b");
    REQUIRE_NOTHROW(g.validate(1));
    const HfDeepseek hf{27, 2048, 16, 163840, 11264, 0, 64, 6, 1408, 2, 1, true};
    CHECK(published_parameters(g) == hf.count(64));
    CHECK(g.active_parameter_count(1) == hf.count(6));
    CHECK(round_to(billions(published_parameters(g)), 1) == 16);
    CHECK(round_to(billions(g.active_parameter_count(1)), 1) == 3);
    CHECK(round_to(billions(g.active_parameter_count(1) - 163840LL * 2048), 1) == 3);
  }
  SECTION("kimi-k2: 1T (1.026T), 32B; with one MTP module the report's 1.04T") {
    GptConfig g = preset("kimi-k2");
    REQUIRE_NOTHROW(g.validate(1));
    const HfDeepseek hf{61, 7168, 64, 163840, 18432, 1536, 384, 8, 2048, 1, 1, true};
    CHECK(published_parameters(g) == hf.count(384));
    CHECK(round_to(static_cast<double>(published_parameters(g)) / 1e12, 1) == 1);
    CHECK(round_to(static_cast<double>(published_parameters(g)) / 1e12, 0.01) == Approx(1.03));
    CHECK(round_to(billions(g.active_parameter_count(1) - 163840LL * 7168), 1) == 32);
    g.mtp_num_layers = 1;
    CHECK(round_to(static_cast<double>(published_parameters(g)) / 1e12, 0.01) == Approx(1.04));
  }
}

TEST_CASE("the DeepSeek presets' shapes, routers and YaRN", "[plan][presets][deepseek]") {
  const GptConfig v3 = preset("deepseek-v3");
  CHECK(v3.multi_latent_attention);
  CHECK(v3.q_lora_rank == 1536);
  CHECK(v3.kv_lora_rank == 512);
  CHECK(v3.attention_head_dim() == 192);
  CHECK(v3.num_moe_layers() == 58);
  CHECK(!v3.moe.is_moe_layer(2));
  CHECK(v3.moe.is_moe_layer(3));
  CHECK(v3.moe.score_function == MoeScoreFunction::Sigmoid);
  CHECK(v3.moe.enable_expert_bias);
  CHECK(v3.moe.num_groups == 8);
  CHECK(v3.moe.group_topk == 4);
  CHECK(v3.moe.group_score_topk == 2);
  CHECK(v3.moe.topk_scaling_factor == 2.5f);
  CHECK(v3.uses_yarn());
  CHECK(v3.yarn.factor == 40.0f);
  CHECK(v3.yarn.mscale_all_dim == 1.0f);
  CHECK(v3.yarn_softmax_mscale() == Approx(0.1 * std::log(40.0) + 1.0));
  const GptConfig lite = preset("deepseek-v2-lite");
  CHECK(lite.q_lora_rank == 0);
  CHECK(lite.moe.score_function == MoeScoreFunction::Softmax);
  CHECK(lite.moe.pre_softmax);
  CHECK(!lite.moe.enable_expert_bias);
  CHECK(lite.yarn.mscale == 0.707f);
  CHECK(lite.moe.shared_expert_intermediate_size == 2 * 1408);
  const GptConfig moon = preset("moonlight-16b-a3b");
  CHECK(!moon.uses_yarn());
  CHECK(moon.rotary_base == 50000.0f);
  CHECK(moon.moe.num_groups == 0);  // n_group 1: one group holds every expert
  CHECK(moon.moe.topk_scaling_factor == 2.446f);
  const GptConfig k2 = preset("kimi-k2");
  CHECK(k2.num_attention_heads == 64);
  CHECK(k2.moe.num_experts == 384);
  CHECK(k2.num_moe_layers() == 60);
  CHECK(k2.yarn.factor == 32.0f);
  CHECK(k2.yarn.beta_fast == 1.0f);
  CHECK(k2.mtp_num_layers == 0);
  for (const char* name : {"deepseek-v3", "deepseek-v2-lite", "moonlight-16b-a3b", "kimi-k2"}) {
    INFO(name);
    CHECK(model_preset_names().find(name) != std::string::npos);
    // ptdp-train and ptdp-plan read the preset as it is (DeepSeek-V3's MoE MTP module included).
    const GptConfig want = preset(name);
    const std::vector<std::string> train_flags = {"--model-preset", name};
    const GptConfig train = to_gpt_config(parse_train_args(train_flags));
    CHECK(train.parameter_count(1) == want.parameter_count(1));
    CHECK(train.paper_flops(1) == want.paper_flops(1));
    CHECK(train.mtp_num_layers == want.mtp_num_layers);
    CHECK(train.uses_yarn() == want.uses_yarn());
    CHECK(train.moe.group_score_topk == want.moe.group_score_topk);
    const PlanArgs plan = parse_plan_args({"--model-preset", name, "--global-batch-size", "8"});
    CHECK(plan.request.model.parameter_count(1) == preset(name).parameter_count(1));
    CHECK(plan.request.model.paper_flops(1) == preset(name).paper_flops(1));
  }
}

TEST_CASE("MLA GEMMs: a hand count, and paper_flops' MLA term", "[plan][mla][deepseek]") {
  for (const int rq : {0, 5}) {
    INFO("q_lora_rank " << rq);
    const GptConfig g = tiny_mla(rq);
    const double b = 3, s = 8, h = 16, a = 4, r = 6, dn = 4, dr = 2, dv = 3, dq = 6, f = 24;
    for (const int t : {1, 2}) {
      INFO("t " << t);
      double got = 0;
      for (const Gemm& x : layer_gemms(g, t, 3)) got += 2.0 * x.m * x.n * x.k * x.count;
      // Per token: the q path (down and up, or linear_q_proj), the kv down projection (whole on
      // every rank), the kv up projection, the scores over dq and the context over dv, the
      // projection, SwiGLU's fc1 and fc2.
      const double q = rq > 0 ? rq * h + a * dq * rq / t : a * dq * h / t;
      const double per_token = q + (r + dr) * h + a * (dn + dv) * r / t + s * a * dq / t + s * a * dv / t +
                               a * dv * h / t + 2 * f * h / t + f * h / t;
      CHECK(got == Approx(2 * b * s * per_token).epsilon(1e-12));
    }
    // At t = 1 the layer's forward is paper_flops' per-layer forward less the latent norms
    // (Megatron counts 2 (rq + r) per token for them; they are not GEMMs).
    double gemms = 0;
    for (const Gemm& x : layer_gemms(g, 1, 3)) gemms += 2.0 * x.m * x.n * x.k * x.count;
    const double layer_forward = (g.paper_flops(3, true) - g.paper_flops(3, false)) / g.num_layers;
    CHECK(gemms + 2 * b * s * (rq + r) == Approx(layer_forward).epsilon(1e-12));
  }
}

TEST_CASE("MLA, MoE and MTP FLOPs are Megatron's num_floating_point_operations", "[plan][mla][mtp][deepseek]") {
  for (const char* name : {"deepseek-v3", "deepseek-v2-lite", "moonlight-16b-a3b", "kimi-k2"}) {
    INFO(name);
    const GptConfig g = preset(name);
    CHECK(g.paper_flops(16) == Approx(megatron_flops(g, 16)).epsilon(1e-12));
  }
  // MTP with a dense last layer (Megatron's last_layer_is_moe = 0), and D = 2.
  GptConfig g = preset("deepseek-v3");
  g.mtp_num_layers = 2;
  CHECK(g.paper_flops(4) == Approx(megatron_flops(g, 4)).epsilon(1e-12));
  g.moe.layer_pattern.back() = 0;
  CHECK(!g.mtp_moe());
  CHECK(g.paper_flops(4) == Approx(megatron_flops(g, 4)).epsilon(1e-12));
  // A dense MLA model with MTP.
  GptConfig dense = tiny_mla(5);
  dense.mtp_num_layers = 1;
  CHECK(dense.paper_flops(3) == Approx(megatron_flops(dense, 3)).epsilon(1e-12));
  // The planner's count is GptConfig's.
  CHECK(iteration_flops(g, 4, Recompute::None) == g.paper_flops(4));
}

TEST_CASE("the MTP modules' parameters sit on the last stage and the stages add up", "[plan][mtp][deepseek]") {
  GptConfig g = tiny_mla(5);
  g.num_layers = 4;
  g.moe.num_experts = 4;
  g.moe.router_topk = 2;
  g.moe.ffn_hidden_size = 8;
  g.moe.shared_expert_intermediate_size = 8;
  g.moe.layer_pattern = {0, 1, 1, 1};
  g.moe.score_function = MoeScoreFunction::Sigmoid;
  g.moe.enable_expert_bias = true;
  g.mtp_num_layers = 1;
  REQUIRE_NOTHROW(g.validate(1));
  PipelineSplit split;
  split.pipeline = 2;
  // The untied model's last stage also keeps a copy of the word embedding for the modules'
  // inputs (as GptModel allocates it): the stages hold the model and that copy.
  const int64_t copy = g.padded_vocab(1) * g.hidden_size;
  int64_t sum = 0;
  for (int r = 0; r < 2; ++r) sum += stage_parameters(g, 1, split, r, 1, 1);
  CHECK(sum == g.parameter_count(1) + copy);
  GptConfig without = g;
  without.mtp_num_layers = 0;
  CHECK(stage_parameters(g, 1, split, 0, 1, 1) == stage_parameters(without, 1, split, 0, 1, 1));
  CHECK(stage_parameters(g, 1, split, 1, 1, 1) - stage_parameters(without, 1, split, 1, 1, 1) ==
        g.parameter_count(1) - without.parameter_count(1) + copy);
  split.pipeline = 1;  // one stage: no copy
  CHECK(stage_parameters(g, 1, split, 0, 1, 1) == g.parameter_count(1));
  // The module's experts split over e like the decoder's.
  CHECK(stage_expert_parameters(g, 1, split, 1, 2, 1) * 2 == stage_expert_parameters(g, 1, split, 1, 1, 1));
}

TEST_CASE("the MLA KV cache holds the latent and the RoPE key", "[plan][mla][deepseek]") {
  const GptConfig v3 = preset("deepseek-v3");
  CHECK(kv_cache_bytes_per_token(v3, Precision::Bf16, 1) == 61.0 * (512 + 64) * 2);
  CHECK(kv_cache_bytes_per_token(v3, Precision::Bf16, 8) == 61.0 * (512 + 64) * 2);  // whole on every rank
  const GptConfig llama = preset("llama-3-8b");
  CHECK(kv_cache_bytes_per_token(llama, Precision::Bf16, 2) == 32.0 * 2 * 8 * 128 / 2 * 2);
}

TEST_CASE("MLA's saved activations and MTP's last stage in the memory estimate", "[plan][mla][mtp][deepseek]") {
  // 16-bit, selective recomputation (no s^2 terms), t = 1, b = 1, dense MLP: the dense layer's
  // replicated terms, the latents and their statistics, q and k of a dq, v and the context of
  // a dv, the SwiGLU MLP.
  GptConfig g = tiny_mla(5);
  g.hidden_dropout = 0;
  const double s = 8, h = 16, a = 4, dq = 6, dv = 3, f = 24;
  const double latents = 2 * 5 + (6 + 2) + 6;
  const double want = s * (8 * h + 8) + s * (2 * latents + 4 * 2) + s * (2 * (2 * a * dq + 2 * a * dv) + 2 * 3 * f);
  CHECK(layer_activation_bytes(g, Precision::Bf16, 1, 1, Recompute::Selective) == Approx(want));
  // The last stage of a model with MTP holds more and takes longer than without.
  PlanRequest q;
  q.model = preset("deepseek-v2-lite");
  q.model.mtp_num_layers = 1;
  q.global_batch_size = 64;
  q.precision = Precision::Bf16;
  PlanRequest no_mtp = q;
  no_mtp.model.mtp_num_layers = 0;
  plan::Layout L;
  L.p = 3;
  L.d = 8;
  L.m = 8;
  L.e = 8;
  L.etp = 1;
  L.recompute = Recompute::Selective;
  const Cluster cl = cluster_preset("hgx-h800");
  const std::vector<double> with = stage_microbatch_seconds(q, cl, L);
  const std::vector<double> without = stage_microbatch_seconds(no_mtp, cl, L);
  CHECK(with[0] == Approx(without[0]));
  CHECK(with[2] > without[2]);
  const StageSeconds parts = stage_seconds(q, cl, L);
  CHECK(with[2] == Approx(9 * parts.layer + parts.last));
  CHECK(parts.last > stage_seconds(no_mtp, cl, L).last + parts.layer);  // a layer, a logits layer, eh_proj
}

TEST_CASE("DeepSeek-V3 on 2048 H800s: its own layout, p = 16 with e = 64", "[plan][deepseek][h800]") {
  PlanRequest q;
  q.model = preset("deepseek-v3");
  q.global_batch_size = 15360;
  q.precision = Precision::Bf16;
  q.allow_distributed_optimizer = true;
  Cluster cl = cluster_preset("hgx-h800");
  cl.nodes = 256;
  CHECK(cl.intra_node_bandwidth == 160e9);
  // DeepSeek-V3's layout (its report, section 3.2): t = 1, p = 16 (61 layers: uneven ends), d =
  // 128 with the experts over e = 64 ranks (8 nodes), ZeRO-1 (the distributed optimizer). ptdp
  // has no DualPipe; its V-shaped schedules (ZB-V, DualPipeV) need 2p to divide the layers, and
  // interleaving v = 2 cannot split 61 layers with uneven ends either: 1F1B (ZB-H1 keeps the
  // last stage's logits of several microbatches and does not fit).
  plan::Layout L;
  L.t = 1;
  L.p = 16;
  L.d = 128;
  L.b = 1;
  L.m = 120;
  L.first = 0;
  L.last = 1;
  L.e = 64;
  L.etp = 1;
  L.schedule = ScheduleKind::OneFOneB;
  L.recompute = Recompute::Full;
  L.distributed_optimizer = true;
  const Estimate e = estimate(q, cl, L, false);
  CHECK(e.fits);
  CHECK(e.memory_stage == 15);  // the last stage: the MTP module and two logits layers
  CHECK(e.layout.expert_data() == 2);
  CHECK(e.expert_crosses_nodes);
  CHECK(e.hardware_flops == q.model.paper_flops(15360, true));  // full recomputation: the forward once more
  CHECK(e.model_flops == q.model.paper_flops(15360));
  CHECK(e.mfu > 0.05);
  CHECK(e.mfu < 0.6);
  // The planner takes p = 16 for 61 layers with uneven ends when pinned to it.
  q.tensor = 1;
  q.pipeline = 16;
  q.expert_model = 64;
  q.expert_tensor = 1;
  q.micro_batch = 1;
  q.top = 1;
  const PlanResult plan = make_plan(q, cl);
  INFO(plan.reason);
  REQUIRE(plan.feasible);
  const plan::Layout& best = plan.layouts.front().layout;
  CHECK(best.p == 16);
  CHECK(best.d == 128);
  CHECK(best.e == 64);
  CHECK((best.first > 0 || best.last > 0));
  const std::vector<int> layers = stage_layer_counts(61, best.split());
  CHECK(std::accumulate(layers.begin(), layers.end(), 0) == 61);
}
