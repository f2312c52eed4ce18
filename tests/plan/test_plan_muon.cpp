// The optimizer in the planner: Adam's two moments, SGD's one momentum buffer, and Muon's one
// buffer on the 2-D hidden weights with AdamW's moments for the rest, and its Newton-Schulz
// FLOPs (kernels/backend.h newton_schulz_flops) at the device's peak. The numbers are counted by
// hand below for tiny models (h 8, 2 heads of 4, ffn 32; a tiny MoE; MTP; MLA).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "base/error.h"
#include "core/plan/plan_args.h"
#include "core/plan/planner.h"
#include "tests/plan/tiny_mla.h"

namespace {

using namespace ptdp;
using namespace ptdp::plan;

// 2 layers of the GPT (LayerNorm, GeLU, biases, tied embeddings): h 8, a 2 (dh 4), ffn 4h = 32.
GptConfig tiny_gpt() {
  GptConfig g;
  g.num_layers = 2;
  g.hidden_size = 8;
  g.num_attention_heads = 2;
  g.vocab_size = 64;
  g.make_vocab_size_divisible_by = 8;
  g.seq_length = 16;
  return g;
}

// One step of Newton-Schulz on [k, n] (k <= n): 4 k^2 n + 2 k^3.
constexpr double ns_step(double k, double n) { return 4 * k * k * n + 2 * k * k * k; }

PlanRequest request(const GptConfig& g, PlanOptimizer o) {
  PlanRequest q;
  q.model = g;
  q.global_batch_size = 8;
  q.optimizer = o;
  return q;
}

plan::Layout layout(int t, int d, bool dist) {
  plan::Layout L;
  L.t = t;
  L.d = d;
  L.b = 1;
  L.m = 8 / d;
  L.distributed_optimizer = dist;
  return L;
}

}  // namespace

TEST_CASE("Muon's hidden weights and Newton-Schulz FLOPs of a tiny GPT, counted by hand", "[plan][muon]") {
  const GptConfig g = tiny_gpt();
  PipelineSplit one;
  // Per layer: linear_qkv [24, 8] 192, linear_proj [8, 8] 64, fc1 [32, 8] 256, fc2 [8, 32] 256.
  const MuonShare s = muon_stage_share(g, 1, one, 0, 1, 1, 5, true);
  CHECK(s.params == 2 * (192 + 64 + 256 + 256));
  CHECK(s.expert_params == 0);
  CHECK(s.expert_ns_flops == 0);
  // q, k, v [8, 8] apart and linear_proj: 4 square 8 x 8 (3072 a step); fc1, fc2 on [8, 32] (9216).
  CHECK(ns_step(8, 8) == 3072);
  CHECK(ns_step(8, 32) == 9216);
  const double layer_split = 5 * (4 * 3072.0 + 2 * 9216.0);
  CHECK(s.ns_flops == 2 * layer_split);
  CHECK(s.ns_flops == 307200);
  // linear_qkv whole: [24, 8] is k = 8, n = 24: 7168 a step.
  const MuonShare whole = muon_stage_share(g, 1, one, 0, 1, 1, 5, false);
  CHECK(whole.params == s.params);
  CHECK(whole.ns_flops == 2 * 5 * (7168.0 + 3072.0 + 2 * 9216.0));
  // The steps scale the FLOPs; tensor parallelism splits the weights, not the whole matrices.
  CHECK(muon_stage_share(g, 1, one, 0, 1, 1, 3, true).ns_flops == 0.6 * s.ns_flops);
  const MuonShare t2 = muon_stage_share(g, 2, one, 0, 1, 2, 5, true);
  CHECK(t2.params == s.params / 2);
  CHECK(t2.ns_flops == s.ns_flops);
  // Two pipeline stages: one layer each.
  PipelineSplit two;
  two.pipeline = 2;
  CHECK(muon_stage_share(g, 1, two, 0, 1, 1, 5, true).params == 768);
  CHECK(muon_stage_share(g, 1, two, 1, 1, 1, 5, true).ns_flops == layer_split);
  // SwiGLU: gate and up are two [32, 8] matrices (ffn = int(8 h / 3 / 64) * 64 would be 0 at h 8,
  // so the width is pinned).
  GptConfig sw = g;
  sw.swiglu = true;
  sw.ffn_hidden_size = 32;
  const MuonShare sws = muon_stage_share(sw, 1, one, 0, 1, 1, 5, true);
  CHECK(sws.params == 2 * (192 + 64 + 512 + 256));
  CHECK(sws.ns_flops == 2 * 5 * (4 * 3072.0 + 3 * 9216.0));
  // linear_fc1 whole: [64, 8], k = 8, n = 64: 4 * 64 * 64 + 1024 = 17408 a step.
  CHECK(muon_stage_share(sw, 1, one, 0, 1, 1, 5, false).ns_flops == 2 * 5 * (7168.0 + 3072.0 + 17408.0 + 9216.0));
}

TEST_CASE("Muon with MTP, MoE and MLA: eh_proj, every expert, the router, the latent projections", "[plan][muon]") {
  PipelineSplit one;
  SECTION("MTP: each module's eh_proj [8, 16] and its layer") {
    GptConfig g = tiny_gpt();
    g.mtp_num_layers = 1;
    const MuonShare s = muon_stage_share(g, 1, one, 0, 1, 1, 5, true);
    CHECK(s.params == 3 * 768 + 128);
    CHECK(s.ns_flops == 3 * 153600.0 + 5 * ns_step(8, 16));
  }
  SECTION("MoE: 4 SwiGLU experts of width 16, the router [4, 8]") {
    GptConfig g = tiny_gpt();
    g.swiglu = true;
    g.ffn_hidden_size = 32;
    g.moe.num_experts = 4;
    g.moe.router_topk = 2;
    g.moe.ffn_hidden_size = 16;
    // e = 2: each rank holds 2 experts of gate, up [16, 8] and down [8, 16] (384 each).
    const MuonShare s = muon_stage_share(g, 1, one, 0, 2, 1, 5, true);
    const double attention = 5 * 4 * 3072.0;
    CHECK(s.expert_params == 2 * 2 * 384);
    CHECK(s.params == 2 * (192 + 64 + 32) + s.expert_params);
    // Every expert its own three [8, 16] matrices (5120 a step), whatever e.
    CHECK(ns_step(8, 16) == 5120);
    CHECK(s.expert_ns_flops == 2 * 4 * 3 * 5 * 5120.0);
    CHECK(s.ns_flops == 2 * (attention + 5 * ns_step(4, 8)));
    CHECK(muon_stage_share(g, 1, one, 0, 4, 1, 5, true).expert_ns_flops == s.expert_ns_flops);
    // Per rank: the experts over their e etp ranks, or over the stage's t c d with the
    // distributed optimizer.
    plan::Layout L = layout(1, 4, false);
    L.e = 2;
    L.etp = 1;
    CHECK(rank_newton_schulz_flops(s, L) == s.ns_flops + s.expert_ns_flops / 2);
    L.distributed_optimizer = true;
    CHECK(rank_newton_schulz_flops(s, L) == (s.ns_flops + s.expert_ns_flops) / 4);
  }
  SECTION("MLA with query compression: q down [4, 16], q up [24, 4], kv down [8, 16], kv up [28, 6]") {
    const GptConfig g = ptdp::test::tiny_mla(4);  // h 16, a 4, rq 4, r 6, dn 4, dr 2, dv 3, ffn 24
    const MuonShare s = muon_stage_share(g, 1, one, 0, 1, 1, 5, true);
    // linear_proj [16, 12]; SwiGLU gate, up [24, 16] and down [16, 24].
    const double attention_params = 4 * 16 + 24 * 4 + 8 * 16 + 28 * 6 + 16 * 12;
    CHECK(s.params == 2 * (attention_params + 3 * 24 * 16));
    const double attention = ns_step(4, 16) + ns_step(4, 24) + ns_step(8, 16) + ns_step(6, 28) + ns_step(12, 16);
    CHECK(s.ns_flops == 2 * 5 * (attention + 3 * ns_step(16, 24)));
  }
}

TEST_CASE("the optimizer's memory and step time: Adam, SGD and Muon on a tiny GPT", "[plan][muon]") {
  const GptConfig g = tiny_gpt();
  Cluster c = cluster_preset("dgx-h100");
  c.nodes = 1;
  for (Precision prec : {Precision::Fp32, Precision::Bf16}) {
    INFO(precision_name(prec));
    PlanRequest adam = request(g, PlanOptimizer::Adam), sgd = request(g, PlanOptimizer::Sgd),
                muon = request(g, PlanOptimizer::Muon);
    adam.precision = sgd.precision = muon.precision = prec;
    const double master = prec == Precision::Fp32 ? 0.0 : 4.0;
    const double peak = prec == Precision::Fp32 ? c.peak_flops_fp32 : c.peak_flops_16bit;
    const double touched = prec == Precision::Fp32 ? 28.0 : 32.0;
    for (bool dist : {false, true}) {
      INFO("distributed optimizer " << dist);
      const plan::Layout L = layout(1, 2, dist);
      const Estimate a = estimate(adam, c, L, false), s = estimate(sgd, c, L, false), m = estimate(muon, c, L, false);
      const double n = static_cast<double>(a.params_per_gpu), dd = dist ? 2.0 : 1.0;
      // Adam: 8 bytes of moments (+ 4 of fp32 masters in 16-bit training), / d when sharded.
      CHECK(a.memory.optimizer == Approx(n * (8 + master) / dd).epsilon(1e-12));
      // SGD: 4 bytes of momentum.
      CHECK(s.memory.optimizer == Approx(n * (4 + master) / dd).epsilon(1e-12));
      // Muon: 4 bytes for its 1536 hidden weights, 8 for the other n - 1536.
      CHECK(m.memory.optimizer == Approx(((n - 1536) * 8 + 1536 * 4 + n * master) / dd).epsilon(1e-12));
      CHECK(a.memory.weights == m.memory.weights);
      CHECK(a.newton_schulz == 0);
      CHECK(s.newton_schulz == 0);
      // Newton-Schulz: 307200 FLOPs a step for the stage, run by each of the d replicas, or once
      // over the 2 ranks with the distributed optimizer.
      CHECK(m.newton_schulz_flops == 307200 / dd);
      CHECK(m.newton_schulz == Approx(307200 / dd / peak).epsilon(1e-12));
      // The memory-bound step: one state buffer saves 8 bytes of traffic per parameter.
      CHECK(a.optimizer == Approx(n / dd * touched / c.memory_bandwidth).epsilon(1e-12));
      CHECK(s.optimizer == Approx(n / dd * (touched - 8) / c.memory_bandwidth).epsilon(1e-12));
      CHECK(m.optimizer ==
            Approx((n * touched - 1536 * 8) / dd / c.memory_bandwidth + m.newton_schulz).epsilon(1e-12));
      CHECK(m.iteration == Approx(m.pipeline + m.data_parallel + m.embedding_sync + m.optimizer).epsilon(1e-12));
    }
  }
  // Tensor parallelism spreads the whole matrices over the t ranks.
  const Estimate t2 = estimate(request(g, PlanOptimizer::Muon), c, layout(2, 1, false), false);
  CHECK(t2.newton_schulz_flops == 307200 / 2.0);
}

TEST_CASE("ptdp-plan's --optimizer, --muon-num-ns-steps and --muon-no-split-qkv", "[plan][muon][args]") {
  const std::vector<std::string> base = {"--num-layers", "2", "--hidden-size", "8", "--num-attention-heads", "2",
                                         "--global-batch-size", "8", "--seq-length", "16"};
  auto parse = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return parse_plan_args(args);
  };
  CHECK(parse({}).request.optimizer == PlanOptimizer::Adam);
  CHECK(parse({"--optimizer", "sgd"}).request.optimizer == PlanOptimizer::Sgd);
  const PlanArgs m = parse({"--optimizer", "muon", "--muon-num-ns-steps", "7", "--muon-no-split-qkv"});
  CHECK(m.request.optimizer == PlanOptimizer::Muon);
  CHECK(m.request.muon_ns_steps == 7);
  CHECK_FALSE(m.request.muon_split_qkv);
  CHECK(parse({"--optimizer", "muon"}).request.muon_split_qkv);
  CHECK_THROWS_WITH(parse({"--optimizer", "lion"}), Catch::Contains("--optimizer") && Catch::Contains("lion"));
  CHECK_THROWS_WITH(parse({"--muon-num-ns-steps", "0"}), Catch::Contains("muon-num-ns-steps"));
  CHECK_THROWS_WITH(parse({"--muon-num-ns-steps", "101"}), Catch::Contains("muon-num-ns-steps"));
  CHECK(plan_args_help("ptdp-plan").find("--optimizer") != std::string::npos);
}

TEST_CASE("the plan's report and JSON show Muon's Newton-Schulz time", "[plan][muon]") {
  PlanRequest q = request(tiny_gpt(), PlanOptimizer::Muon);
  q.num_gpus = 1;
  Cluster c = cluster_preset("dgx-h100");
  c.nodes = 1;
  const PlanResult r = make_plan(q, c);
  REQUIRE(r.feasible);
  const Estimate& b = r.layouts.front();
  CHECK(b.newton_schulz > 0);
  CHECK(plan_report(r).find("Newton-Schulz") != std::string::npos);
  CHECK(plan_report(r).find(", muon") != std::string::npos);
  const nlohmann::json j = plan_to_json(r);
  CHECK(j["model"]["optimizer"] == "muon");
  CHECK(j["layouts"][0]["seconds"]["newton_schulz"].get<double>() == b.newton_schulz);
  PlanRequest adam = q;
  adam.optimizer = PlanOptimizer::Adam;
  const PlanResult ra = make_plan(adam, c);
  CHECK(plan_report(ra).find("Newton-Schulz") == std::string::npos);
  CHECK(ra.layouts.front().memory.optimizer > b.memory.optimizer);
}

TEST_CASE("PlanRequest refuses an unknown optimizer and Newton-Schulz steps outside [1, 100]", "[plan][muon]") {
  PlanRequest q = request(tiny_gpt(), PlanOptimizer::Muon);
  q.muon_ns_steps = 0;
  CHECK_THROWS_WITH(q.validate(), Catch::Contains("muon_ns_steps = 0"));
  q.muon_ns_steps = 5;
  q.optimizer = static_cast<PlanOptimizer>(3);
  CHECK_THROWS_WITH(q.validate(), Catch::Contains("optimizer = 3"));
}
