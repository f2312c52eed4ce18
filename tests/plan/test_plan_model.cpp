// The planner's performance model against the paper (Narayanan et al. 2021): the parameter
// formula reproduces the weak-scaling table, ptdp's exact count agrees with it, per-rank counts
// match what GptModel allocates, closed-form in-flight counts match the simulator, and the
// planner picks t = 8 for the 145.6B and 1T rows on DGX A100 within 25 % of the published
// TFLOP/s per GPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>

#include "base/error.h"
#include "core/model/gpt.h"
#include "core/pipeline/simulator.h"
#include "core/plan/planner.h"

namespace {

using namespace ptdp;
using namespace ptdp::plan;

struct PaperRow {
  const char* params;  // as printed in the table
  int heads, h, l, t, p, gpus, batch;
  double tflops;
};

// PTDP-BRIEF.md, weak scaling on A100: V = 51200, s = 2048.
const PaperRow kRows[] = {
    {"1.7", 24, 2304, 24, 1, 1, 32, 512, 137},         {"3.6", 32, 3072, 30, 2, 1, 64, 512, 138},
    {"7.5", 32, 4096, 36, 4, 1, 128, 512, 142},        {"18.4", 48, 6144, 40, 8, 1, 256, 1024, 135},
    {"39.1", 64, 8192, 48, 8, 2, 512, 1536, 138},      {"76.1", 80, 10240, 60, 8, 4, 1024, 1792, 140},
    {"145.6", 96, 12288, 80, 8, 8, 1536, 2304, 148},   {"310.1", 128, 16384, 96, 8, 16, 1920, 2160, 155},
    {"529.6", 128, 20480, 105, 8, 35, 2520, 2520, 163}, {"1008.0", 160, 25600, 128, 8, 64, 3072, 3072, 163}};

GptConfig paper_model(const PaperRow& r) {
  GptConfig g;
  g.num_layers = r.l;
  g.hidden_size = r.h;
  g.num_attention_heads = r.heads;
  g.vocab_size = 51200;
  g.seq_length = 2048;
  // The paper's Megatron-LM stored the s x s attention probabilities (its fused kernel is the
  // scale-mask-softmax, not a flash-style attention): Korthikanti et al.'s 5 a s^2 b / t.
  g.attention = AttentionImpl::Unfused;
  return g;
}

PlanRequest paper_request(const PaperRow& r) {
  PlanRequest q;
  q.model = paper_model(r);
  q.global_batch_size = r.batch;
  q.precision = Precision::Fp16;  // the paper trained in fp16 with the (non-distributed) Adam of the time
  q.num_gpus = r.gpus;
  return q;
}

Cluster a100_nodes(int gpus) {
  Cluster c = cluster_preset("dgx-a100");
  c.nodes = (gpus + c.gpus_per_node - 1) / c.gpus_per_node;
  return c;
}

}  // namespace

TEST_CASE("the parameter formula reproduces every row of the weak-scaling table", "[plan]") {
  for (const PaperRow& r : kRows) {
    const GptConfig g = paper_model(r);
    char printed[32];
    std::snprintf(printed, sizeof printed, "%.1f", paper_parameters(g) / 1e9);
    INFO("row " << r.params << "B: formula gives " << printed << "B");
    CHECK(std::string(printed) == r.params);
    // ptdp's own model (padded vocabulary, every bias and LayerNorm) agrees to 0.1 %.
    const double exact = static_cast<double>(g.parameter_count(r.t));
    CHECK(std::abs(exact / paper_parameters(g) - 1.0) < 1e-3);
  }
}

TEST_CASE("per-rank parameter counts equal what GptModel lays out", "[plan]") {
  GptConfig g;
  g.num_layers = 8;
  g.hidden_size = 64;
  g.num_attention_heads = 8;
  g.vocab_size = 300;
  g.make_vocab_size_divisible_by = 16;
  g.seq_length = 16;
  for (bool tie : {true, false}) {
    g.tie_embeddings = tie;
    for (int t : {1, 2, 4}) {
      for (int p : {1, 2, 4}) {
        for (int v : {1, 2}) {
          if (g.num_layers % (p * v) != 0 || (p == 1 && v > 1)) continue;
          for (int stage = 0; stage < p; ++stage) {
            int64_t laid_out = 0;
            for (int c = stage; c < p * v; c += p) {
              const GptModel chunk(g, TensorParallel{nullptr, 0, t}, Device{}, GptStage::chunk_of(g, c, p * v, p, v),
                                   /*materialize=*/false);
              for (int i = 0; i < chunk.params().size(); ++i) laid_out += chunk.params().info(i).local_shape.numel();
            }
            INFO("tie " << tie << " t " << t << " p " << p << " v " << v << " stage " << stage);
            CHECK(stage_parameters(g, t, p, v, stage) == laid_out);
          }
        }
      }
    }
  }
}

TEST_CASE("the FLOP counts equal the paper's closed forms", "[plan]") {
  const GptConfig g = paper_model(kRows[6]);
  // The GEMM-by-GEMM count equals the paper's closed forms (GptConfig::paper_flops, the one
  // place ptdp writes them), and those are what the paper prints.
  CHECK(iteration_flops(g, 2304, Recompute::None) == Approx(g.paper_flops(2304)).epsilon(1e-12));
  CHECK(iteration_flops(g, 2304, Recompute::Full) == Approx(g.paper_flops(2304, true)).epsilon(1e-12));
  const double B = 2304, s = g.seq_length, l = g.num_layers, h = g.hidden_size, V = g.vocab_size;
  CHECK(g.paper_flops(2304, true) == Approx(96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))).epsilon(1e-12));
}

TEST_CASE("closed-form in-flight microbatches match the schedule simulator", "[plan]") {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved1F1B,
                            ScheduleKind::ZeroBubbleH1}) {
    for (int p : {2, 4}) {
      for (int m : {1, 3, 4, 8}) {
        for (int v : {1, 2, 3}) {
          const bool interleaved = kind == ScheduleKind::Interleaved1F1B;
          if (interleaved != (v > 1) || (interleaved && m % p != 0)) continue;
          const SimulationResult sim = simulate(make_schedule(kind, p, m, v), ScheduleCosts{});
          for (int rank = 0; rank < p; ++rank) {
            INFO(schedule_kind_name(kind) << " p " << p << " m " << m << " v " << v << " rank " << rank);
            CHECK(schedule_peak_slots(kind, p, m, v, rank) == sim.peak_slots[static_cast<std::size_t>(rank)]);
          }
        }
      }
    }
  }
}

TEST_CASE("the 145.6B and 1T rows: the planner picks t = 8 (or a layout as fast within 1 percent) within 25 "
          "percent of the paper's TFLOP/s",
          "[plan][paper]") {
  for (const PaperRow& r : {kRows[6], kRows[9]}) {
    PlanRequest q = paper_request(r);
    q.top = 10;
    const PlanResult plan = make_plan(q, a100_nodes(r.gpus));
    REQUIRE(plan.feasible);
    const Estimate& best = plan.layouts.front();
    std::printf("%sB on %d A100s: chosen %s, %.1f TFLOP/s per GPU (paper: t=%d p=%d, %.0f), memory %.1f GiB\n",
                r.params, r.gpus, best.layout.str().c_str(), best.tflops_per_gpu, r.t, r.p, r.tflops,
                best.memory.total() / (1024.0 * 1024.0 * 1024.0));
    // With every GEMM priced at its shape, 145.6B's best t = 8 layout and a t = 4 one with
    // ZB-H1 (a schedule the paper did not have) are within 0.1 % of each other: the paper's t is
    // among the near-ties at the top of the table.
    const Estimate* t8 = nullptr;
    for (const Estimate& e : plan.layouts) {
      if (t8 == nullptr && e.layout.t == 8) t8 = &e;
    }
    REQUIRE(t8 != nullptr);
    CHECK(t8->iteration <= 1.01 * best.iteration);
    CHECK(best.tflops_per_gpu == Approx(r.tflops).epsilon(0.25));
    CHECK(best.simulated);
    CHECK(best.fits);
    CHECK(!plan.why.front().empty());
  }
}

namespace {

// The paper's setting for its Table 1 runs: fp16 with full activation recomputation (the
// table's TFLOP/s count the recomputed forward, F = 96 B s l h^2 (...)), and Megatron's
// data-parallel all-reduce of 2021, after the backward (no overlap).
PlanRequest table1_request(const PaperRow& r, bool pin_tp) {
  PlanRequest q = paper_request(r);
  q.allow_recompute[0] = q.allow_recompute[2] = false;
  q.overlap_grad_reduce = false;
  q.grads_in_fp32 = false;
  if (pin_tp) {
    q.tensor = r.t;
    q.pipeline = r.p;
  }
  return q;
}

}  // namespace

TEST_CASE("Table 1: every row within 10 percent with the paper's t, p, d and batch", "[plan][paper]") {
  double worst = 0;
  int paper_t = 0;
  std::printf("Table 1 (Narayanan et al. 2021) on DGX A100, GEMM tables a100-16bit:\n");
  std::printf("%8s %3s %3s %5s %5s | %8s %9s %6s | %-40s %8s\n", "params", "t", "p", "GPUs", "B", "paper", "predicted",
              "diff", "planner's own choice", "TFLOP/s");
  for (const PaperRow& r : kRows) {
    const PlanResult pinned = make_plan(table1_request(r, true), a100_nodes(r.gpus));
    REQUIRE(pinned.feasible);
    const Estimate& e = pinned.layouts.front();
    CHECK(e.layout.t == r.t);
    CHECK(e.layout.p == r.p);
    CHECK(e.layout.d == r.gpus / (r.t * r.p));
    const double diff = e.tflops_per_gpu / r.tflops - 1.0;
    worst = std::max(worst, std::abs(diff));
    const PlanResult free = make_plan(table1_request(r, false), a100_nodes(r.gpus));
    REQUIRE(free.feasible);
    const Estimate& f = free.layouts.front();
    paper_t += f.layout.t == r.t ? 1 : 0;
    std::printf("%7sB %3d %3d %5d %5d | %8.0f %9.1f %+5.1f%% | %-40s %8.1f\n", r.params, r.t, r.p, r.gpus, r.batch,
                r.tflops, e.tflops_per_gpu, 100.0 * diff, f.layout.str().c_str(), f.tflops_per_gpu);
    INFO(r.params << "B: " << e.layout.str() << " predicts " << e.tflops_per_gpu << " TFLOP/s per GPU, the paper "
                  << r.tflops);
    CHECK(std::abs(diff) < 0.10);
  }
  std::printf("worst difference %.1f%%; the planner's own best layout uses the paper's t in %d of 10 rows\n",
              100.0 * worst, paper_t);
  // Since the search also runs pipeline sizes that do not divide the layers (uneven first and
  // last stages, which Megatron did not have in 2021), some rows' best layouts leave the paper's
  // t for one within a few percent of it (3.6B: t = 1, p = 8 with 2 layers on the last stage).
  CHECK(paper_t >= 4);
}

TEST_CASE("a model that fits nowhere is refused with the shortfall", "[plan]") {
  PlanRequest q = paper_request(kRows[9]);  // 1T on one DGX A100 node
  q.num_gpus = 0;
  const PlanResult plan = make_plan(q, cluster_preset("dgx-a100"));
  CHECK_FALSE(plan.feasible);
  CHECK(plan.layouts.empty());
  INFO(plan.reason);
  CHECK(plan.reason.find("no layout fits in memory") != std::string::npos);
  CHECK(plan.reason.find("short by") != std::string::npos);
  CHECK(plan.reason.find("GiB") != std::string::npos);
  CHECK(plan_report(plan).find("short by") != std::string::npos);
  CHECK(plan_to_json(plan)["feasible"] == false);
}

TEST_CASE("heads that no fitting tensor size divides are named", "[plan]") {
  PlanRequest q;
  q.model.num_layers = 1;
  q.model.hidden_size = 13 * 512;  // 6656, 13 heads of 512: only t = 1 divides the heads
  q.model.num_attention_heads = 13;
  q.model.vocab_size = 51200;
  q.model.seq_length = 2048;
  q.global_batch_size = 8;
  q.precision = Precision::Bf16;
  const PlanResult plan = make_plan(q, cluster_preset("dgx-a100"));
  INFO(plan.reason);
  if (plan.feasible) {
    // It fits at t = 1; the table says why larger t are out.
    bool named = false;
    for (const std::string& s : plan.ruled_out) named = named || s.find("does not divide num-attention-heads 13") != std::string::npos;
    CHECK(named);
  } else {
    CHECK(plan.reason.find("num-attention-heads 13") != std::string::npos);
  }
  // A layer too large for one GPU without tensor parallelism: nothing fits, and the reason
  // names the heads.
  q.model.hidden_size = 13 * 4096;
  q.model.num_layers = 2;
  const PlanResult none = make_plan(q, cluster_preset("dgx-a100"));
  INFO(none.reason);
  CHECK_FALSE(none.feasible);
  CHECK(none.reason.find("num-attention-heads 13") != std::string::npos);
  CHECK(none.reason.find("short by") != std::string::npos);
}

TEST_CASE("presets and cluster files", "[plan]") {
  CHECK(cluster_preset_names() == std::vector<std::string>{"dgx-a100", "dgx-h100", "dgx-h200", "hgx-h800"});
  for (const std::string& n : cluster_preset_names()) cluster_preset(n).validate();
  CHECK(cluster_preset("dgx-h200").memory_bytes > cluster_preset("dgx-h100").memory_bytes);
  const Cluster c = cluster_from_json(nlohmann::json{{"preset", "dgx-h100"}, {"nodes", 4}, {"memory_gib", 40}}, "x.json");
  CHECK(c.nodes == 4);
  CHECK(c.num_gpus() == 32);
  CHECK(c.memory_bytes == Approx(40.0 * 1024 * 1024 * 1024));
  CHECK(c.peak_flops_16bit == cluster_preset("dgx-h100").peak_flops_16bit);
  CHECK_THROWS_WITH(cluster_from_json(nlohmann::json{{"bogus", 1}}, "x.json"), Catch::Contains("unknown key \"bogus\""));
  CHECK_THROWS_WITH(cluster_from_json(nlohmann::json{{"gemm_efficiency", 2}}, "x.json"),
                    Catch::Contains("gemm_efficiency"));
  CHECK_THROWS_WITH(cluster_preset("dgx-z"), Catch::Contains("dgx-a100, dgx-h100, dgx-h200"));
  CHECK_THROWS_AS(load_cluster("/nonexistent/cluster.json"), Error);
  const Cluster back = cluster_from_json(cluster_to_json(c), "round trip");
  CHECK(back.inter_node_bandwidth == Approx(c.inter_node_bandwidth));
}

TEST_CASE("GEMM tables: log-space interpolation, the built-in tables, files", "[plan][gemm]") {
  GemmTable t;
  t.name = "test";
  t.peak_flops = 1e12;
  t.sizes = {64, 1024};
  // Efficiency 0.2 where every dimension is 64, 0.8 where all are 1024, linear in log M + log N
  // + log K in between.
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 2; ++k) t.efficiency.push_back(0.2 + 0.2 * (i + j + k));
  t.validate("test");
  CHECK(t.at(64, 64, 64) == Approx(0.2));
  CHECK(t.at(1024, 1024, 1024) == Approx(0.8));
  CHECK(t.at(256, 64, 64) == Approx(0.2 + 0.2 * 0.5));  // 256 is halfway from 64 to 1024 in log space
  CHECK(t.at(16, 1, 8) == Approx(0.2));                 // clamped below
  CHECK(t.at(1e6, 1e6, 1e6) == Approx(0.8));            // and above
  CHECK(t.seconds(1024, 1024, 1024) == Approx(2.0 * 1024 * 1024 * 1024 / 0.8e12));
  const GemmTable back = gemm_table_from_json(gemm_table_to_json(t), "round trip");
  CHECK(back.at(256, 512, 128) == Approx(t.at(256, 512, 128)).epsilon(1e-3));
  CHECK_THROWS_WITH(gemm_table_from_json(nlohmann::json{{"peak_tflops", 1}, {"sizes", {1, 2}}}, "x.json"),
                    Catch::Contains("x.json") && Catch::Contains("efficiency"));
  CHECK_THROWS_WITH(builtin_gemm_table("tpu"), Catch::Contains("a100-16bit"));
  CHECK_THROWS_AS(load_gemm_table("/nonexistent/table.json"), Error);

  // The A100 table: large GEMMs near NVIDIA's published rate, thin ones and the attention
  // products (K or N = the head size) far below.
  const GemmTable a100 = builtin_gemm_table("a100-16bit");
  CHECK(a100.peak_flops == Approx(312e12));
  CHECK(a100.at(8192, 8192, 8192) == Approx(0.72));
  CHECK(a100.at(2048, 768, 6144) < a100.at(2048, 3072, 12288));
  CHECK(a100.at(2048, 2048, 128) < 0.6 * a100.at(2048, 2048, 2048));
  // The CPU table is the one shipped as data/gemm_tables/cpu.json.
  const GemmTable cpu = builtin_gemm_table("cpu");
  cpu.validate("cpu");
  CHECK(cpu.sizes.size() >= 4);
  for (const std::string& name : gemm_table_names()) builtin_gemm_table(name).validate(name);
}

TEST_CASE("the time model prices each GEMM at its shape and the memory-bound kernels at the bandwidth",
          "[plan][gemm]") {
  const GptConfig g = paper_model(kRows[0]);  // 1.7B
  for (int t : {1, 2, 4}) {
    // The layer's GEMMs are the FLOP count's: 2 m n k summed is one layer's forward on one rank.
    double flops = 0;
    for (const Gemm& x : layer_gemms(g, t, 2)) flops += 2.0 * x.m * x.n * x.k * x.count;
    const double forward_all_layers = (g.paper_flops(2, true) - g.paper_flops(2, false));
    CHECK(flops * t * g.num_layers == Approx(forward_all_layers).epsilon(1e-9));
  }
  // An estimate with the table against one priced by hand: compute = m (forward + backward +
  // recomputation of every layer, plus the logits layer) on the one stage.
  PlanRequest q = paper_request(kRows[0]);
  q.num_gpus = 1;
  q.global_batch_size = 4;
  Cluster cl = cluster_preset("dgx-a100");
  plan::Layout L;
  L.b = 2;
  L.m = 2;
  L.recompute = Recompute::Full;
  const Estimate e = estimate(q, cl, L, true);
  const GemmTable& tab = builtin_gemm_table("a100-16bit");
  double gemm = 0;
  for (const Gemm& x : layer_gemms(q.model, 1, 2)) {
    gemm += 2.0 * tab.seconds(x.m, x.n, x.k, x.count) + tab.seconds(x.m, x.k, x.n, x.count) +
            tab.seconds(x.k, x.n, x.m, x.count);  // forward, recomputed forward, input and weight gradients
  }
  const double ew = layer_elementwise_bytes(q.model, Precision::Fp16, 1, 2) / cl.memory_bandwidth;
  const Gemm lg = logit_gemm(q.model, 1, 2);
  const double loss = 2.0 * 4.0 * 2 * q.model.seq_length * static_cast<double>(q.model.padded_vocab(1)) /
                      cl.memory_bandwidth;  // the softmax over fp32 logits and its gradient
  const double logits =
      tab.seconds(lg.m, lg.n, lg.k) + tab.seconds(lg.m, lg.k, lg.n) + tab.seconds(lg.k, lg.n, lg.m) + 2 * loss;
  const double by_hand = 2 * (q.model.num_layers * (gemm + (2.0 + 1.25) * ew) + logits);
  CHECK(e.compute == Approx(by_hand).epsilon(1e-9));
  // Without a table the older single efficiency prices every GEMM.
  cl.gemm_table_16bit.clear();
  const Estimate old = estimate(q, cl, L, true);
  CHECK(old.compute != Approx(e.compute));
}

TEST_CASE("the fused attention keeps row statistics where the unfused path keeps probabilities", "[plan][memory]") {
  // How auto resolves: fp32 plans the CPU engine (a fused kernel for every head dim), 16 bits the
  // CUDA engine (flash attention for head dim 64 or 128); a pin is taken as it is.
  GptConfig g;  // h 64, a 4: head dim 16
  CHECK(fused_attention(g, Precision::Fp32));
  CHECK_FALSE(fused_attention(g, Precision::Bf16));
  for (int heads : {1, 2, 3}) {
    g.num_attention_heads = heads;  // head dim 64, 32, 21
    CHECK(fused_attention(g, Precision::Fp16) == (heads == 1));
  }
  g.hidden_size = 1536;
  g.num_attention_heads = 12;  // head dim 128
  CHECK(fused_attention(g, Precision::Bf16));
  g.attention = AttentionImpl::Unfused;
  CHECK_FALSE(fused_attention(g, Precision::Fp32));
  CHECK_FALSE(fused_attention(g, Precision::Bf16));
  g.attention = AttentionImpl::Fused;
  CHECK(fused_attention(g, Precision::Fp16));

  // fp32, GPT-2 small at s 1024, b 4, t 2: the unfused path keeps the probabilities before and
  // after attention dropout, 2 (a / t) s^2 b fp32 per layer; the fused kernel a / t s b fp32.
  GptConfig m;
  m.num_layers = 12;
  m.hidden_size = 768;
  m.num_attention_heads = 12;
  m.seq_length = 1024;
  m.attention_dropout = 0.1f;
  const double s = m.seq_length, a = m.num_attention_heads, b = 4, t = 2;
  GptConfig unfused = m, fused = m;
  unfused.attention = AttentionImpl::Unfused;
  fused.attention = AttentionImpl::Auto;
  const double u = layer_activation_bytes(unfused, Precision::Fp32, 2, 4, Recompute::None);
  const double f = layer_activation_bytes(fused, Precision::Fp32, 2, 4, Recompute::None);
  CHECK(u - f == Approx(4.0 * (2.0 * a / t * s * s * b - a / t * s * b)));
  // Selective recomputation drops the probabilities; the fused kernel has none to drop.
  CHECK(layer_activation_bytes(unfused, Precision::Fp32, 2, 4, Recompute::Selective) ==
        Approx(f - 4.0 * a / t * s * b));
  CHECK(layer_activation_bytes(fused, Precision::Fp32, 2, 4, Recompute::Selective) == Approx(f));
}

TEST_CASE("sequence parallelism: Korthikanti's activation memory, and the planner says why", "[plan][memory][sp]") {
  const GptConfig g = paper_model(kRows[6]);  // 145.6B: a = 96, h = 12288, s = 2048, with dropout
  const double s = g.seq_length, h = g.hidden_size, a = g.num_attention_heads;
  const double stats = 2 * 2 * 4 * s;  // LayerNorm's fp32 mean and rstd, two norms (beyond the paper's count)
  for (int t : {2, 4, 8}) {
    INFO("t " << t);
    // Korthikanti et al. 2022, Table 2 (b = 1): no parallelism of the sequence s h (10 + 24/t +
    // 5 a s/(h t)); sequence parallelism s h (34/t + 5 a s/(h t)); with selective recomputation
    // s h 34 / t; full recomputation keeps the layer's input, 2 s h / t.
    CHECK(layer_activation_bytes(g, Precision::Fp16, t, 1, Recompute::None, false) ==
          Approx(s * h * (10 + 24.0 / t + 5 * a * s / (h * t)) + stats));
    CHECK(layer_activation_bytes(g, Precision::Fp16, t, 1, Recompute::None, true) ==
          Approx(s * h * (34.0 / t + 5 * a * s / (h * t)) + stats / t));
    CHECK(layer_activation_bytes(g, Precision::Fp16, t, 1, Recompute::Selective, true) ==
          Approx(s * h * 34.0 / t + stats / t));
    CHECK(layer_activation_bytes(g, Precision::Fp16, t, 1, Recompute::Full, true) == Approx(2 * s * h / t));
  }
  // The 145.6B row with sequence parallelism allowed: the planner uses it (less activation
  // memory, the norms and dropouts on s / t tokens, the same bytes communicated) and says so.
  PlanRequest q = table1_request(kRows[6], true);
  q.allow_sequence_parallel = true;
  q.allow_recompute[0] = q.allow_recompute[1] = true;
  const PlanResult with = make_plan(q, a100_nodes(kRows[6].gpus));
  REQUIRE(with.feasible);
  const Estimate& best = with.layouts.front();
  CHECK(best.layout.sequence_parallel);
  INFO(with.why.front());
  CHECK(with.why.front().find("sequence parallelism (--sequence-parallel): activations") != std::string::npos);
  plan::Layout off = best.layout;
  off.sequence_parallel = false;
  const Estimate without = estimate(q, a100_nodes(kRows[6].gpus), off, true);
  CHECK(best.memory.activations < without.memory.activations);
  CHECK(best.iteration < without.iteration);
  CHECK(best.tensor_comm == Approx(without.tensor_comm));
  std::printf("145.6B with sequence parallelism: %s, activations %.1f GiB vs %.1f GiB, %.2f s vs %.2f s\n",
              best.layout.str().c_str(), best.memory.activations / (1 << 30), without.memory.activations / (1 << 30),
              best.iteration, without.iteration);
  CHECK(plan_to_json(with)["layouts"][0]["sequence_parallel"] == true);
  // Not allowed: never used; t = 1: never.
  q.allow_sequence_parallel = false;
  for (const Estimate& e : make_plan(q, a100_nodes(kRows[6].gpus)).layouts) CHECK_FALSE(e.layout.sequence_parallel);
  plan::Layout bad = best.layout;
  bad.t = 1;
  bad.d = best.layout.d * best.layout.t;
  bad.m = static_cast<int>(q.global_batch_size / (bad.d * bad.b));
  CHECK_THROWS_WITH(estimate(q, a100_nodes(kRows[6].gpus), bad, false), Catch::Contains("sequence parallelism"));
}

TEST_CASE("the CPU engine's prediction: critical path with a core per rank, or all ranks' work over the cores",
          "[plan][cpu]") {
  // bench_train's default model and layouts on 4 ranks (its comparison with measurements is a
  // benchmark: bench_train prints it; here the arithmetic).
  PlanRequest q;
  q.model.num_layers = 4;
  q.model.hidden_size = 256;
  q.model.num_attention_heads = 8;
  q.model.vocab_size = 8192;
  q.model.seq_length = 128;
  q.precision = Precision::Fp32;
  const Cluster full = cpu_cluster(4, 4), half = cpu_cluster(4, 2);
  CHECK(full.gemm_table_fp32 == "cpu");
  CHECK(full.peak_flops_fp32 == Approx(builtin_gemm_table("cpu").peak_flops));
  CHECK(half.peak_flops_fp32 == Approx(0.5 * full.peak_flops_fp32));  // 4 ranks share 2 cores
  CHECK(half.elementwise_bandwidth == Approx(0.5 * full.elementwise_bandwidth));
  CHECK(half.intra_node_bandwidth == Approx(full.intra_node_bandwidth));  // measured with the ranks sharing
  for (const auto& [t, p, d] : {std::tuple{4, 1, 1}, std::tuple{1, 4, 1}, std::tuple{1, 1, 4}, std::tuple{2, 2, 1}}) {
    plan::Layout L;
    L.t = t;
    L.p = p;
    L.d = d;
    L.b = 2;
    L.m = 4;
    q.global_batch_size = 8 * d;
    const Estimate own = estimate(q, full, L, true);
    double stages = 0;
    for (double s : stage_microbatch_seconds(q, full, L)) stages += s;
    for (double cores : {0.5, 1.0, 2.0, 4.0}) {
      const double work = t * d * L.m * stages + 4 * own.optimizer;
      const double expected = std::max(own.iteration, work / cores + own.data_parallel + own.embedding_sync);
      INFO(t << "," << p << "," << d << " on " << cores << " cores");
      CHECK(cpu_iteration_seconds(q, L, cores) == Approx(expected).epsilon(1e-12));
    }
    // Never faster than the critical path with a core for every rank.
    CHECK(cpu_iteration_seconds(q, L, 4.0) >= own.iteration);
    CHECK(cpu_iteration_seconds(q, L, 1.0) > cpu_iteration_seconds(q, L, 2.0));
  }
  CHECK_THROWS_WITH(cpu_iteration_seconds(q, plan::Layout{}, 0.0), Catch::Contains("cores = 0"));
}

TEST_CASE("context parallelism: s / c tokens per rank, keys and values around the ring, off unless allowed",
          "[plan][cp]") {
  GptConfig g = paper_model(kRows[2]);  // 7.5B: a = 32, h = 4096, 36 layers
  g.seq_length = 32768;
  g.max_position_embeddings = 32768;
  for (int c : {2, 4}) {
    INFO("c " << c);
    double flops1 = 0, flopsc = 0;
    for (const Gemm& x : layer_gemms(g, 2, 1, 1)) flops1 += 2.0 * x.m * x.n * x.k * x.count;
    for (const Gemm& x : layer_gemms(g, 2, 1, c)) flopsc += 2.0 * x.m * x.n * x.k * x.count;
    CHECK(flopsc == Approx(flops1 / c));
    CHECK(layer_gemms(g, 2, 1, c)[1].m == g.seq_length / c);  // this rank's queries
    CHECK(layer_gemms(g, 2, 1, c)[1].n == g.seq_length);      // against every key
    CHECK(layer_activation_bytes(g, Precision::Bf16, 2, 1, Recompute::Selective, true, c) ==
          Approx(layer_activation_bytes(g, Precision::Bf16, 2, 1, Recompute::Selective, true, 1) / c));
    CHECK(layer_elementwise_bytes(g, Precision::Bf16, 2, 1, false, c) ==
          Approx(layer_elementwise_bytes(g, Precision::Bf16, 2, 1, false, 1) / c));
  }
  PlanRequest q;
  q.model = g;
  q.global_batch_size = 16;
  q.precision = Precision::Bf16;
  q.allow_distributed_optimizer = true;
  q.num_gpus = 16;
  Cluster cl = cluster_preset("dgx-h100");
  cl.nodes = 2;
  // Off by default: no layout uses it.
  const PlanResult off = make_plan(q, cl);
  for (const Estimate& e : off.layouts) CHECK(e.layout.c == 1);
  // Searched: a 32k sequence is split over the ranks, and the reason says how.
  q.context_parallel = 0;
  const PlanResult on = make_plan(q, cl);
  REQUIRE(on.feasible);
  const Estimate& best = on.layouts.front();
  INFO(plan_report(on));
  CHECK(best.layout.c > 1);
  CHECK(best.layout.t * best.layout.c * best.layout.p * best.layout.d == 16);
  CHECK(on.why.front().find("context parallelism c = " + std::to_string(best.layout.c)) != std::string::npos);
  CHECK(plan_to_json(on)["layouts"][0]["context_parallel"] == best.layout.c);
  if (off.feasible) CHECK(best.iteration <= off.layouts.front().iteration);
  std::printf("7.5B at s = 32768 on 16 H100s: %s, %.1f TFLOP/s per GPU (without context parallelism: %s)\n",
              best.layout.str().c_str(), best.tflops_per_gpu,
              off.feasible ? off.layouts.front().layout.str().c_str() : off.reason.c_str());
  // The same layout without it keeps c times the activations and reduces over fewer ranks.
  plan::Layout one = best.layout;
  one.d *= one.c;
  one.c = 1;
  one.m = static_cast<int>(q.global_batch_size / (one.d * one.b));
  if (one.m > 0 && one.m * one.d * one.b == q.global_batch_size && (one.v == 1 || one.m % one.p == 0)) {
    const Estimate e1 = estimate(q, cl, one, true);
    CHECK(e1.memory.activations > best.memory.activations);
  }
  // Pinned, and a size the sequence cannot be split into is refused naming it.
  q.context_parallel = 2;
  for (const Estimate& e : make_plan(q, cl).layouts) CHECK(e.layout.c == 2);
  plan::Layout bad = best.layout;
  q.model.seq_length = 32766;
  q.model.max_position_embeddings = 32766;
  bad.c = 4;
  CHECK_THROWS_WITH(estimate(q, cl, bad, false), Catch::Contains("context parallelism c = 4"));
  q.context_parallel = -1;
  CHECK_THROWS_WITH(q.validate(), Catch::Contains("context parallel size = -1"));
}
