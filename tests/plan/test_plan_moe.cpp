// Mixture of experts in the model's counts and the planner: the MoE presets have the total and
// active parameter counts their model cards publish (and Hugging Face's module-by-module count),
// the FLOPs are Megatron-LM's num_floating_point_operations with its MoE terms (transcribed from
// its source), the experts split over e * etp ranks add up to the model's, their optimizer state
// shards over edp, the token all-to-all is priced on the cluster, and the planner picks e and
// etp and says why.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/model/model_presets.h"
#include "core/plan/planner.h"

namespace {

using namespace ptdp;
using namespace ptdp::plan;

GptConfig preset(const std::string& name) {
  const std::optional<ModelPreset> p = find_model_preset(name);
  REQUIRE(p.has_value());
  return p->config;
}

// Hugging Face's MoE decoders module by module (MixtralForCausalLM, Qwen3MoeForCausalLM,
// OlmoeForCausalLM, Qwen2MoeForCausalLM): embed_tokens and lm_head [V, h]; per layer q_proj
// [a dh, h], k_proj and v_proj [g dh, h] (biases with Qwen2), o_proj [h, a dh], the gate [E, h],
// E experts of gate_proj, up_proj [f, h] and down_proj [h, f], a shared expert of width `shared`
// with its gate [1, h] (Qwen2-MoE), two RMSNorms [h], and q_norm / k_norm: [dh] each per head
// (Qwen3) or over the whole projections, [a dh] and [g dh] (OLMoE); the final norm [h].
struct HfMoe {
  int64_t l, h, a, g, dh, V, E, f, shared = 0;
  bool qkv_bias = false;
  int qk_norm = 0;  // 0 none, 1 per head, 2 whole projections
  int64_t total() const { return count(E); }
  int64_t count(int64_t experts) const {
    int64_t layer = a * dh * h + 2 * g * dh * h + h * a * dh + E * h + experts * 3 * f * h + 2 * h;
    if (qkv_bias) layer += a * dh + 2 * g * dh;
    if (qk_norm == 1) layer += 2 * dh;
    if (qk_norm == 2) layer += a * dh + g * dh;
    if (shared > 0) layer += 3 * shared * h + h;
    return 2 * V * h + l * layer + h;
  }
};

}  // namespace

TEST_CASE("the MoE presets have their published total and active parameters", "[plan][presets][moe]") {
  struct Row {
    const char* name;
    HfMoe hf;
    double total_b, active_b;  // the model card's figures, billions
    double total_unit, active_unit;  // their last printed digit
  };
  const Row rows[] = {
      {"mixtral-8x7b", {32, 4096, 32, 8, 128, 32000, 8, 14336}, 46.7, 12.9, 0.1, 0.1},
      {"mixtral-8x22b", {56, 6144, 48, 8, 128, 32000, 8, 16384}, 141, 39, 1, 1},
      {"qwen3-30b-a3b", {48, 2048, 32, 4, 128, 151936, 128, 768, 0, false, 1}, 30.5, 3.3, 0.1, 0.1},
      {"qwen3-235b-a22b", {94, 4096, 64, 4, 128, 151936, 128, 1536, 0, false, 1}, 235, 22, 1, 1},
      {"olmoe-1b-7b", {16, 2048, 16, 16, 128, 50304, 64, 1024, 0, false, 2}, 6.9, 1.3, 0.1, 0.1},
      {"qwen2-57b-a14b", {28, 3584, 28, 4, 128, 151936, 64, 2560, 20480, true}, 57.4, 14, 0.1, 1},
  };
  for (const Row& r : rows) {
    INFO(r.name);
    const GptConfig g = preset(r.name);
    CHECK(g.moe.enabled());
    CHECK_NOTHROW(g.validate(1));
    const int64_t total = published_parameters(g);
    GptConfig unpadded = g;
    unpadded.make_vocab_size_divisible_by = 1;
    const int64_t active = unpadded.active_parameter_count(1);
    // ptdp's count is Hugging Face's, OLMoE's q/k norms over the whole projections included.
    const HfMoe& hf = r.hf;
    CHECK(total == hf.total());
    CHECK(active == hf.count(g.moe.router_topk));
    // The published figures, to their last digit (Qwen's and Mixtral's cards round down).
    CHECK(std::abs(static_cast<double>(total) / 1e9 - r.total_b) < r.total_unit);
    CHECK(std::abs(static_cast<double>(active) / 1e9 - r.active_b) < r.active_unit);
  }
  // Mixtral 8x7B exactly as its safetensors hold it.
  CHECK(published_parameters(preset("mixtral-8x7b")) == 46702792704);
  CHECK(published_parameters(preset("qwen3-235b-a22b")) == 235093634560);
  // A dense model's active count is its count.
  CHECK(preset("llama-3-8b").active_parameter_count(1) == preset("llama-3-8b").parameter_count(1));
}

TEST_CASE("MoE FLOPs are Megatron's num_floating_point_operations with its MoE terms", "[plan][moe]") {
  // Megatron-LM's transformer_flops() (megatron/training/training.py), transcribed: 3 (forward
  // and backward) x 2 (FMA) x tokens x (h (ffn 3 (SwiGLU) dense layers + (moe_ffn k 3) MoE layers +
  // shared 3 MoE layers) + attention + logits), with ptdp's conventions where they differ from
  // today's Megatron outside the MoE terms: the unpadded vocabulary, and the attention products
  // over the whole s x s (the paper's count; Megatron now halves them for the causal mask).
  const auto megatron = [](const GptConfig& g, double batch) {
    const double s = g.seq_length, h = g.hidden_size, l = g.num_layers, a = g.num_attention_heads;
    const double kv = g.head_dim(), groups = g.query_groups(), V = g.vocab_size;
    const double moe_layers = g.num_moe_layers(), dense_layers = l - moe_layers;
    const double ffn_factor = g.swiglu ? 3 : 2;
    const double mlp = h * (g.ffn() * ffn_factor * dense_layers +
                            g.moe_ffn() * static_cast<double>(g.moe.router_topk) * ffn_factor * moe_layers +
                            g.moe.shared_expert_intermediate_size * ffn_factor * moe_layers);
    const double attention = l * (h * (kv * a + 2 * kv * groups) + kv * a * h);
    const double core = l * 2 * kv * a * s;  // per token: QK^T and PV over all s keys
    return 3.0 * 2.0 * batch * s * (mlp + attention + core + h * V);
  };
  for (const char* name : {"mixtral-8x7b", "qwen3-30b-a3b", "olmoe-1b-7b", "qwen2-57b-a14b"}) {
    INFO(name);
    const GptConfig g = preset(name);
    CHECK(g.paper_flops(512) == Approx(megatron(g, 512)).epsilon(1e-12));
  }
  // A mixed model: every other layer MoE.
  GptConfig mixed = preset("mixtral-8x7b");
  mixed.moe.layer_pattern.assign(static_cast<std::size_t>(mixed.num_layers), 0);
  for (std::size_t i = 0; i < mixed.moe.layer_pattern.size(); i += 2) mixed.moe.layer_pattern[i] = 1;
  CHECK(mixed.num_moe_layers() == 16);
  CHECK(mixed.paper_flops(64) == Approx(megatron(mixed, 64)).epsilon(1e-12));
  // Mixtral's experts are the dense MLP's width: with k = 2 its FLOPs are a 2 x 14336 MLP's.
  GptConfig dense = preset("mixtral-8x7b");
  dense.moe = MoeConfig{};
  dense.ffn_hidden_size = 2 * 14336;
  CHECK(preset("mixtral-8x7b").paper_flops(8) == Approx(dense.paper_flops(8)).epsilon(1e-12));
}

TEST_CASE("the experts split over e * etp ranks add up to the model's", "[plan][moe]") {
  const GptConfig g = preset("qwen2-57b-a14b");
  PipelineSplit split;
  split.pipeline = 4;
  const int64_t whole = stage_expert_parameters(g, 1, split, 1, 1, 1);
  CHECK(whole == 7 * int64_t{64} * 3 * 2560 * 3584);  // 7 layers of 64 experts
  for (const auto& [e, etp] : {std::pair{8, 1}, std::pair{4, 2}, std::pair{64, 1}, std::pair{2, 4}}) {
    INFO("e " << e << " etp " << etp);
    CHECK(stage_expert_parameters(g, 4, split, 1, e, etp) * e * etp == whole);
    // The rest of the stage is the same whatever e and etp are.
    CHECK(stage_parameters(g, 4, split, 1, e, etp) - stage_expert_parameters(g, 4, split, 1, e, etp) ==
          stage_parameters(g, 4, split, 1, 1, 1) - whole);
  }
  // The per-rank counts of the 4-argument form (experts whole) add up to the model's.
  int64_t sum = 0;
  for (int stage = 0; stage < 4; ++stage) sum += stage_parameters(g, 1, split, stage);
  CHECK(sum == g.parameter_count(1));
}

TEST_CASE("the planner prices MoE memory and all-to-alls, picks e and etp and says why", "[plan][moe][h100]") {
  PlanRequest q;
  q.model = preset("mixtral-8x7b");
  q.global_batch_size = 256;
  q.precision = Precision::Bf16;
  q.allow_distributed_optimizer = true;
  q.num_gpus = 64;
  Cluster c = cluster_preset("dgx-h100");
  c.nodes = 8;
  // One layout at two expert-parallel sizes: the experts' weights shrink by e, their optimizer
  // state is sharded over edp = t c d / (e etp), and the tokens now cross e ranks.
  plan::Layout L;
  L.t = 2;
  L.p = 4;
  L.d = 8;
  L.b = 1;
  L.m = 32;
  L.sequence_parallel = true;
  L.distributed_optimizer = true;
  L.recompute = Recompute::Full;
  L.e = 1;
  L.etp = 2;
  const Estimate one = estimate(q, c, L, false);
  L.e = 8;
  L.etp = 1;
  const Estimate eight = estimate(q, c, L, false);
  CHECK(eight.layout.expert_data() == 2);
  CHECK(eight.expert_params_per_gpu * 8 == one.expert_params_per_gpu * 2);  // e etp 8 against 2
  CHECK(eight.memory.weights < one.memory.weights);
  CHECK(eight.alltoall_seconds > 0);
  CHECK(eight.expert_comm > 0);
  CHECK(one.expert_comm == 0);
  CHECK_FALSE(eight.expert_crosses_nodes);  // 8 ranks of an 8-GPU node
  CHECK(eight.params_active == q.model.active_parameter_count(2));
  CHECK(eight.model_flops == Approx(q.model.paper_flops(256)).epsilon(1e-12));
  // Across nodes the exchange costs more.
  L.e = 4;
  L.etp = 2;
  L.t = 4;
  L.d = 4;
  L.m = 64;
  const Estimate four = estimate(q, c, L, false);
  CHECK_FALSE(four.expert_crosses_nodes);
  L.t = 2;
  L.d = 8;
  L.m = 32;
  L.e = 8;
  L.etp = 2;
  const Estimate sixteen = estimate(q, c, L, false);
  CHECK(sixteen.expert_crosses_nodes);
  CHECK(sixteen.alltoall_seconds > eight.alltoall_seconds);
  // A layout with e etp not dividing the stage's ranks, or e not dividing the experts, is refused.
  L.e = 3;
  L.etp = 1;
  CHECK_THROWS_WITH(estimate(q, c, L, false), Catch::Contains("e * etp = 3"));
  L.e = 16;
  CHECK_THROWS_WITH(estimate(q, c, L, false), Catch::Contains("--expert-model-parallel-size"));

  // The search: e and etp are chosen, with the reasons naming them and their neighbours.
  const PlanResult plan = make_plan(q, c);
  REQUIRE(plan.feasible);
  const plan::Layout& best = plan.layouts.front().layout;
  INFO(plan.why.front());
  CHECK(q.model.moe.num_experts % best.e == 0);
  CHECK(best.sequence_parallel == (best.t > 1));
  CHECK_THAT(plan.why.front(), Catch::Contains(str_cat("e = ", best.e, ", etp = ", best.expert_tensor())));
  CHECK_THAT(plan.why.front(), Catch::Contains("against e = "));
  CHECK_THAT(plan_report(plan), Catch::Contains("active per token"));
  // With t > 1 the layout runs sequence parallelism, and its reason says so (it once said "no
  // sequence parallelism" because the layout without it is refused).
  q.tensor = 2;
  const PlanResult with_t = make_plan(q, c);
  REQUIRE(with_t.feasible);
  CHECK(with_t.layouts.front().layout.sequence_parallel);
  CHECK_THAT(with_t.why.front(), Catch::Contains("sequence parallelism (--sequence-parallel), required"));
  CHECK_THAT(with_t.why.front(), !Catch::Contains("no sequence parallelism"));
  q.tensor = 0;
  // A pinned e is kept.
  q.expert_model = 2;
  const PlanResult pinned = make_plan(q, c);
  REQUIRE(pinned.feasible);
  for (const Estimate& e : pinned.layouts) CHECK(e.layout.e == 2);
  q.expert_model = 3;
  CHECK_THROWS_WITH(make_plan(q, c), Catch::Contains("is not a multiple of the pinned expert model parallel size"));
}
