// The planner's memory estimate against the CPU engine's measured high-water mark: a small GPT
// is trained through the C API on one process (fp32 weights, gradients and Adam moments, the
// activations of the schedule's in-flight microbatches; in bf16/f16 the 16-bit weights and
// activations plus fp32 masters), and ptdp_plan_create() pinned to the same layout must predict
// the peak within 20 %; likewise a small Llama-family decoder (RMSNorm, SwiGLU, RoPE,
// grouped-query attention, no linear bias, no dropout).
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "ptdp/ptdp.h"
#include "tests/single_process.h"

namespace {

#define OK(call) REQUIRE((call) == PTDP_SUCCESS)

struct Case {
  ptdp_schedule_kind schedule;
  ptdp_recompute recompute;
  int32_t m;
  ptdp_dtype precision = PTDP_DTYPE_F32;
  bool llama = false;
  // The engine's and the plan's attention. The CPU's auto is its fused kernel in every
  // precision, so the plan is told FUSED: the planner's own auto in 16 bits stands for the CUDA
  // engine (fused for head dim 64 or 128, here 32).
  ptdp_attention attention = PTDP_ATTENTION_FUSED;
  bool mla = false;  // the Llama options with multi-latent attention (DeepSeek-V3's, small)
};

ptdp_gpt_options small_gpt(ptdp_recompute recompute, ptdp_dtype precision, bool llama,
                           ptdp_attention attention = PTDP_ATTENTION_FUSED, bool mla = false) {
  ptdp_gpt_options o;
  ptdp_gpt_options_init(&o);
  o.num_layers = 4;
  o.hidden_size = 128;
  o.num_attention_heads = 4;
  o.seq_length = 128;
  o.vocab_size = 1000;
  o.make_vocab_size_divisible_by = 128;
  o.recompute_granularity = recompute;
  o.precision = precision;
  o.attention = attention;
  if (llama) {
    o.normalization = PTDP_NORMALIZATION_RMSNORM;
    o.swiglu = 1;
    o.ffn_hidden_size = 352;
    o.position_embedding_type = PTDP_POSITION_EMBEDDING_ROPE;
    o.num_query_groups = 2;
    o.disable_bias_linear = 1;
    o.hidden_dropout = 0.0f;
    o.attention_dropout = 0.0f;
  }
  if (mla) {
    o.num_query_groups = 0;
    o.multi_latent_attention = 1;
    o.qk_layernorm = 1;
    o.q_lora_rank = 48;
    o.kv_lora_rank = 32;
    o.qk_head_dim = 32;
    o.qk_pos_emb_head_dim = 16;
    o.v_head_dim = 32;
  }
  return o;
}

// Trains two iterations and returns the high-water mark above what was in use before.
double measured_peak(const Case& c, int32_t b) {
  sp::World world;
  ptdp_groups groups = world.groups;
  size_t before = 0;
  OK(ptdp_memory_stats(&before, nullptr));
  OK(ptdp_memory_reset_peak());
  const ptdp_gpt_options g = small_gpt(c.recompute, c.precision, c.llama, c.attention, c.mla);
  ptdp_model model = nullptr;
  ptdp_optimizer opt = nullptr;
  ptdp_schedule sched = nullptr;
  OK(ptdp_model_create(groups, &g, &model));
  OK(ptdp_optimizer_create(model, nullptr, &opt));
  OK(ptdp_schedule_create(c.schedule, 1, c.m, 1, &sched));
  const std::size_t n = static_cast<std::size_t>(c.m * b * g.seq_length);
  std::vector<int32_t> tokens(n), labels(n);
  for (std::size_t i = 0; i < n; ++i) {
    tokens[i] = static_cast<int32_t>((i * 7919u + 13u) % static_cast<std::size_t>(g.vocab_size));
    labels[i] = static_cast<int32_t>((i * 104729u + 7u) % static_cast<std::size_t>(g.vocab_size));
  }
  for (int64_t it = 0; it < 2; ++it) {
    OK(ptdp_train_iteration(model, opt, sched, tokens.data(), labels.data(), b, it, nullptr, nullptr));
  }
  size_t peak = 0;
  OK(ptdp_memory_stats(nullptr, &peak));
  ptdp_schedule_destroy(sched);
  ptdp_optimizer_destroy(opt);
  ptdp_model_destroy(model);
  return static_cast<double>(peak - before);
}

ptdp_plan_layout estimated(const Case& c, int32_t b) {
  const ptdp_gpt_options g = small_gpt(c.recompute, c.precision, c.llama, c.attention, c.mla);
  ptdp_plan_options o;
  OK(ptdp_plan_options_init(&o));
  o.num_layers = g.num_layers;
  o.hidden_size = g.hidden_size;
  o.num_attention_heads = g.num_attention_heads;
  o.seq_length = g.seq_length;
  o.vocab_size = g.vocab_size;
  o.make_vocab_size_divisible_by = g.make_vocab_size_divisible_by;
  o.attention_dropout = g.attention_dropout;
  o.ffn_hidden_size = g.ffn_hidden_size;
  o.normalization = g.normalization;
  o.swiglu = g.swiglu;
  o.position_embedding_type = g.position_embedding_type;
  o.num_query_groups = g.num_query_groups;
  o.disable_bias_linear = g.disable_bias_linear;
  o.qk_layernorm = g.qk_layernorm;
  o.multi_latent_attention = g.multi_latent_attention;
  o.q_lora_rank = g.q_lora_rank;
  o.kv_lora_rank = g.kv_lora_rank;
  o.qk_head_dim = g.qk_head_dim;
  o.qk_pos_emb_head_dim = g.qk_pos_emb_head_dim;
  o.v_head_dim = g.v_head_dim;
  o.global_batch_size = c.m * b;
  o.precision = c.precision;
  o.attention = c.attention;
  o.recompute_granularity = c.recompute;
  o.num_gpus = 1;
  o.tensor_model_parallel_size = 1;
  o.pipeline_model_parallel_size = 1;
  o.micro_batch_size = b;
  o.pipeline_schedule = c.schedule;
  ptdp_cluster cluster;
  OK(ptdp_cluster_init(&cluster));
  ptdp_plan plan = nullptr;
  OK(ptdp_plan_create(&o, &cluster, &plan));
  int32_t count = 0;
  OK(ptdp_plan_num_layouts(plan, &count));
  REQUIRE(count == 1);
  ptdp_plan_layout layout;
  layout.struct_size = sizeof layout;
  OK(ptdp_plan_get_layout(plan, 0, &layout));
  ptdp_plan_destroy(plan);
  return layout;
}

}  // namespace

TEST_CASE("the planner's memory estimate matches the CPU engine's high-water mark within 20 percent",
          "[plan][memory]") {
  const int32_t b = 4;
  constexpr ptdp_attention kUnfused = PTDP_ATTENTION_UNFUSED;
  constexpr ptdp_attention kFused = PTDP_ATTENTION_FUSED;
  const Case cases[] = {{PTDP_SCHEDULE_1F1B, PTDP_RECOMPUTE_NONE, 4},
                        {PTDP_SCHEDULE_GPIPE, PTDP_RECOMPUTE_NONE, 4},
                        {PTDP_SCHEDULE_GPIPE, PTDP_RECOMPUTE_SELECTIVE, 4},
                        {PTDP_SCHEDULE_GPIPE, PTDP_RECOMPUTE_FULL, 4},
                        {PTDP_SCHEDULE_1F1B, PTDP_RECOMPUTE_NONE, 4, PTDP_DTYPE_BF16},
                        {PTDP_SCHEDULE_GPIPE, PTDP_RECOMPUTE_NONE, 4, PTDP_DTYPE_BF16},
                        {PTDP_SCHEDULE_GPIPE, PTDP_RECOMPUTE_SELECTIVE, 4, PTDP_DTYPE_BF16},
                        {PTDP_SCHEDULE_GPIPE, PTDP_RECOMPUTE_FULL, 4, PTDP_DTYPE_F16},
                        {PTDP_SCHEDULE_1F1B, PTDP_RECOMPUTE_NONE, 4, PTDP_DTYPE_F32, true},
                        {PTDP_SCHEDULE_GPIPE, PTDP_RECOMPUTE_NONE, 4, PTDP_DTYPE_F32, true},
                        {PTDP_SCHEDULE_GPIPE, PTDP_RECOMPUTE_SELECTIVE, 4, PTDP_DTYPE_F32, true},
                        {PTDP_SCHEDULE_GPIPE, PTDP_RECOMPUTE_FULL, 4, PTDP_DTYPE_F32, true},
                        {PTDP_SCHEDULE_GPIPE, PTDP_RECOMPUTE_SELECTIVE, 4, PTDP_DTYPE_BF16, true},
                        // The unfused path keeps the s x s probabilities (and their dropped copy).
                        {PTDP_SCHEDULE_1F1B, PTDP_RECOMPUTE_NONE, 4, PTDP_DTYPE_F32, false, kUnfused},
                        {PTDP_SCHEDULE_GPIPE, PTDP_RECOMPUTE_NONE, 4, PTDP_DTYPE_F32, false, kUnfused},
                        {PTDP_SCHEDULE_GPIPE, PTDP_RECOMPUTE_SELECTIVE, 4, PTDP_DTYPE_F32, false, kUnfused},
                        {PTDP_SCHEDULE_GPIPE, PTDP_RECOMPUTE_NONE, 4, PTDP_DTYPE_BF16, false, kUnfused},
                        {PTDP_SCHEDULE_GPIPE, PTDP_RECOMPUTE_NONE, 4, PTDP_DTYPE_F32, true, kUnfused},
                        // Multi-latent attention: its latents and the core attention's padded heads.
                        {PTDP_SCHEDULE_1F1B, PTDP_RECOMPUTE_NONE, 4, PTDP_DTYPE_F32, true, kFused, true},
                        {PTDP_SCHEDULE_GPIPE, PTDP_RECOMPUTE_NONE, 4, PTDP_DTYPE_F32, true, kFused, true},
                        {PTDP_SCHEDULE_GPIPE, PTDP_RECOMPUTE_FULL, 4, PTDP_DTYPE_F32, true, kFused, true},
                        {PTDP_SCHEDULE_GPIPE, PTDP_RECOMPUTE_SELECTIVE, 4, PTDP_DTYPE_BF16, true, kFused, true},
                        {PTDP_SCHEDULE_GPIPE, PTDP_RECOMPUTE_NONE, 4, PTDP_DTYPE_F32, true, kUnfused, true}};
  for (const Case& c : cases) {
    const double measured = measured_peak(c, b);
    const ptdp_plan_layout e = estimated(c, b);
    std::printf("%s%s%s%s schedule %d recompute %d m=%d b=%d: estimate %.2f MiB (weights %.2f, grads %.2f, "
                "optimizer %.2f, activations %.2f, %d slots), measured peak %.2f MiB, ratio %.3f\n",
                c.attention == PTDP_ATTENTION_UNFUSED ? "unfused " : "", c.mla ? "mla " : "", c.llama ? "llama " : "",
                c.precision == PTDP_DTYPE_F32 ? "f32" : "16-bit", static_cast<int>(c.schedule),
                static_cast<int>(c.recompute), c.m, b, e.memory_total / 1048576.0,
                e.memory_weights / 1048576.0, e.memory_gradients / 1048576.0, e.memory_optimizer / 1048576.0,
                e.memory_activations / 1048576.0, e.memory_slots, measured / 1048576.0, e.memory_total / measured);
    CHECK(e.memory_total == Approx(measured).epsilon(0.20));
  }
}

TEST_CASE("uneven first and last pipeline stages through the plan C API", "[plan][capi]") {
  // ptdp-plan's flags reach the options, and the layouts report the split.
  const char* argv[] = {"ptdp-plan", "--num-layers", "8", "--hidden-size", "512", "--num-attention-heads", "8",
                        "--vocab-size", "50257", "--seq-length", "1024", "--global-batch-size", "32",
                        "--num-gpus", "4", "--pipeline-model-parallel-size", "4", "--tensor-model-parallel-size", "1",
                        "--decoder-first-pipeline-num-layers", "3", "--decoder-last-pipeline-num-layers", "1"};
  ptdp_plan_options o;
  ptdp_cluster cluster;
  ptdp_plan_cli cli;
  OK(ptdp_plan_options_init(&o));
  CHECK(o.decoder_first_pipeline_num_layers == 0);  // search
  CHECK(o.decoder_last_pipeline_num_layers == 0);
  OK(ptdp_plan_parse_args(static_cast<int32_t>(sizeof argv / sizeof argv[0]), argv, &o, &cluster, &cli));
  CHECK(o.decoder_first_pipeline_num_layers == 3);
  CHECK(o.decoder_last_pipeline_num_layers == 1);
  ptdp_plan plan = nullptr;
  OK(ptdp_plan_create(&o, &cluster, &plan));
  int32_t count = 0;
  OK(ptdp_plan_num_layouts(plan, &count));
  REQUIRE(count > 0);
  for (int32_t i = 0; i < count; ++i) {
    ptdp_plan_layout layout;
    layout.struct_size = sizeof layout;
    OK(ptdp_plan_get_layout(plan, i, &layout));
    CHECK(layout.p == 4);
    CHECK(layout.decoder_first_pipeline_num_layers == 3);
    CHECK(layout.decoder_last_pipeline_num_layers == 1);
  }
  ptdp_plan_destroy(plan);
  // Searched: the last stage, which also runs the logits layer, gets fewer layers.
  o.decoder_first_pipeline_num_layers = 0;
  o.decoder_last_pipeline_num_layers = 0;
  OK(ptdp_plan_create(&o, &cluster, &plan));
  ptdp_plan_layout best;
  best.struct_size = sizeof best;
  OK(ptdp_plan_get_layout(plan, 0, &best));
  CHECK(best.decoder_last_pipeline_num_layers == 1);
  ptdp_plan_destroy(plan);
  // A negative pin is refused, naming the field.
  o.decoder_last_pipeline_num_layers = -2;
  plan = nullptr;
  CHECK(ptdp_plan_create(&o, &cluster, &plan) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(plan == nullptr);
  CHECK(std::string(ptdp_last_error()) ==
        "ptdp_plan_create: options->decoder_last_pipeline_num_layers = -2 is not >= 0 (0: search)");
}

TEST_CASE("sequence parallelism and GEMM tables through the plan C API", "[plan][capi]") {
  // ptdp-plan's --sequence-parallel reaches the options; the GEMM table flags the cluster.
  const char* argv[] = {"ptdp-plan", "--model-preset", "gpt-18.4b", "--global-batch-size", "64", "--fp16",
                        "--num-gpus", "8", "--tensor-model-parallel-size", "8", "--sequence-parallel",
                        "--gemm-table-16bit", "h100-16bit", "--elementwise-bandwidth-gbs", "1500"};
  ptdp_plan_options o;
  ptdp_cluster cluster;
  ptdp_plan_cli cli;
  OK(ptdp_plan_options_init(&o));
  CHECK(o.sequence_parallel == 0);
  OK(ptdp_plan_parse_args(static_cast<int32_t>(sizeof argv / sizeof argv[0]), argv, &o, &cluster, &cli));
  CHECK(o.sequence_parallel == 1);
  CHECK(std::string(cluster.gemm_table_16bit) == "h100-16bit");
  CHECK(std::string(cluster.gemm_table_fp32) == "a100-tf32");  // the preset's
  CHECK(cluster.elementwise_bandwidth == Approx(1500e9));
  ptdp_plan plan = nullptr;
  OK(ptdp_plan_create(&o, &cluster, &plan));
  ptdp_plan_layout with;
  with.struct_size = sizeof with;
  OK(ptdp_plan_get_layout(plan, 0, &with));
  CHECK(with.t == 8);
  CHECK(with.sequence_parallel == 1);
  std::vector<char> text(1 << 16);
  std::size_t n = 0;
  OK(ptdp_plan_report(plan, text.data(), text.size(), &n));
  CHECK(std::string(text.data()).find("sequence parallelism (--sequence-parallel): activations") != std::string::npos);
  CHECK(std::string(text.data()).find("from table h100-16bit") != std::string::npos);
  ptdp_plan_destroy(plan);
  // Not allowed: not used, and the same layout keeps more activations.
  o.sequence_parallel = 0;
  OK(ptdp_plan_create(&o, &cluster, &plan));
  ptdp_plan_layout without;
  without.struct_size = sizeof without;
  OK(ptdp_plan_get_layout(plan, 0, &without));
  CHECK(without.sequence_parallel == 0);
  if (without.b == with.b && without.recompute == with.recompute && without.p == with.p) {
    CHECK(without.memory_activations > with.memory_activations);
  }
  ptdp_plan_destroy(plan);
  // A layout struct from before the field is filled up to its size.
  ptdp_plan_layout old;
  old.struct_size = offsetof(ptdp_plan_layout, sequence_parallel);
  old.sequence_parallel = 7;
  OK(ptdp_plan_create(&o, &cluster, &plan));
  OK(ptdp_plan_get_layout(plan, 0, &old));
  CHECK(old.sequence_parallel == 7);
  ptdp_plan_destroy(plan);
  // Bad values name the argument.
  o.sequence_parallel = 2;
  plan = nullptr;
  CHECK(ptdp_plan_create(&o, &cluster, &plan) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(ptdp_last_error()) == "ptdp_plan_create: options->sequence_parallel = 2 is not 0 or 1");
  o.sequence_parallel = 1;
  std::snprintf(cluster.gemm_table_16bit, sizeof cluster.gemm_table_16bit, "%s", "tpu-v9");
  CHECK(ptdp_plan_create(&o, &cluster, &plan) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(ptdp_last_error()).find("gemm_table_16bit = 'tpu-v9'") != std::string::npos);
  CHECK(plan == nullptr);
}

TEST_CASE("context parallelism through the plan C API", "[plan][capi][cp]") {
  const char* argv[] = {"ptdp-plan", "--model-preset", "llama-3-8b", "--seq-length", "32768",
                        "--max-position-embeddings", "32768", "--global-batch-size", "16", "--bf16",
                        "--use-distributed-optimizer", "--cluster", "dgx-h100", "--num-gpus", "16",
                        "--context-parallel-size", "0"};
  ptdp_plan_options o;
  ptdp_cluster cluster;
  ptdp_plan_cli cli;
  OK(ptdp_plan_options_init(&o));
  CHECK(o.context_parallel_size == 1);  // off
  OK(ptdp_plan_parse_args(static_cast<int32_t>(sizeof argv / sizeof argv[0]), argv, &o, &cluster, &cli));
  CHECK(o.context_parallel_size == 0);  // searched
  ptdp_plan plan = nullptr;
  OK(ptdp_plan_create(&o, &cluster, &plan));
  ptdp_plan_layout best;
  best.struct_size = sizeof best;
  OK(ptdp_plan_get_layout(plan, 0, &best));
  CHECK(best.context_parallel_size > 1);
  CHECK(best.t * best.context_parallel_size * best.p * best.d == 16);
  ptdp_plan_destroy(plan);
  o.context_parallel_size = -3;
  plan = nullptr;
  CHECK(ptdp_plan_create(&o, &cluster, &plan) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(ptdp_last_error()) ==
        "ptdp_plan_create: options->context_parallel_size = -3 is negative (1: none, N > 1: pin, 0: search)");
}

TEST_CASE("the optimizer through the plan C API: Muon's state and Newton-Schulz time", "[plan][capi][muon]") {
  const char* argv[] = {"ptdp-plan", "--model-preset", "llama-3-8b", "--global-batch-size", "64", "--bf16",
                        "--use-distributed-optimizer", "--cluster", "dgx-h100", "--num-gpus", "8",
                        "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "1",
                        "--micro-batch-size", "1", "--recompute-granularity", "full"};
  ptdp_plan_options o;
  ptdp_cluster cluster;
  ptdp_plan_cli cli;
  OK(ptdp_plan_options_init(&o));
  CHECK(o.optimizer == PTDP_OPTIMIZER_ADAM);
  CHECK(o.muon_num_ns_steps == 0);
  CHECK(o.muon_no_split_qkv == 0);
  OK(ptdp_plan_parse_args(static_cast<int32_t>(sizeof argv / sizeof argv[0]), argv, &o, &cluster, &cli));
  auto best_of = [&](const ptdp_plan_options& x) {
    ptdp_plan plan = nullptr;
    OK(ptdp_plan_create(&x, &cluster, &plan));
    ptdp_plan_layout best;
    best.struct_size = sizeof best;
    OK(ptdp_plan_get_layout(plan, 0, &best));
    ptdp_plan_destroy(plan);
    return best;
  };
  const ptdp_plan_layout adam = best_of(o);
  o.optimizer = PTDP_OPTIMIZER_MUON;
  const ptdp_plan_layout muon5 = best_of(o);
  o.muon_num_ns_steps = 10;
  const ptdp_plan_layout muon10 = best_of(o);
  CHECK(adam.seconds_newton_schulz == 0);
  CHECK(muon5.seconds_newton_schulz > 0);
  CHECK(muon10.seconds_newton_schulz == Approx(2 * muon5.seconds_newton_schulz).epsilon(1e-12));
  CHECK(muon5.memory_optimizer < adam.memory_optimizer);
  CHECK(muon5.memory_weights == adam.memory_weights);
  CHECK(muon5.seconds_optimizer > muon5.seconds_newton_schulz);
  // The parser fills the fields.
  const char* argv_muon[] = {"ptdp-plan", "--model-preset", "llama-3-8b", "--global-batch-size", "64",
                             "--optimizer", "muon", "--muon-num-ns-steps", "7", "--muon-no-split-qkv"};
  OK(ptdp_plan_parse_args(static_cast<int32_t>(sizeof argv_muon / sizeof argv_muon[0]), argv_muon, &o, &cluster,
                          &cli));
  CHECK(o.optimizer == PTDP_OPTIMIZER_MUON);
  CHECK(o.muon_num_ns_steps == 7);
  CHECK(o.muon_no_split_qkv == 1);
}

TEST_CASE("the attention kind through the plan C API", "[plan][capi][attention]") {
  // GPT-2 small at s 2048 in fp32 on one CPU node: the unfused path's probabilities (two
  // [b, a, s, s] fp32 tensors per layer with attention dropout) against the fused kernel's row
  // statistics ([b, a, s] fp32).
  const char* argv[] = {"ptdp-plan", "--num-layers", "12", "--hidden-size", "768", "--num-attention-heads", "12",
                        "--seq-length", "2048", "--vocab-size", "50257", "--global-batch-size", "8",
                        "--num-gpus", "1", "--micro-batch-size", "4", "--recompute-granularity", "none",
                        "--attention-backend", "unfused"};
  ptdp_plan_options o;
  ptdp_cluster cluster;
  ptdp_plan_cli cli;
  OK(ptdp_plan_options_init(&o));
  CHECK(o.attention == PTDP_ATTENTION_AUTO);
  OK(ptdp_plan_parse_args(static_cast<int32_t>(sizeof argv / sizeof argv[0]), argv, &o, &cluster, &cli));
  CHECK(o.attention == PTDP_ATTENTION_UNFUSED);
  const auto activations = [&](ptdp_attention attention) {
    o.attention = attention;
    ptdp_plan plan = nullptr;
    OK(ptdp_plan_create(&o, &cluster, &plan));
    ptdp_plan_layout best;
    best.struct_size = sizeof best;
    OK(ptdp_plan_get_layout(plan, 0, &best));
    ptdp_plan_destroy(plan);
    REQUIRE(best.memory_slots > 0);
    return best.memory_activations / best.memory_slots;  // one microbatch's
  };
  const double unfused = activations(PTDP_ATTENTION_UNFUSED), fused = activations(PTDP_ATTENTION_FUSED);
  const double l = 12, a = 12, s = 2048, b = 4;
  // Per layer kept, and once in the backward's working memory the probabilities' gradient
  // against the fused backward's row statistics delta.
  CHECK(unfused - fused ==
        Approx(l * 4.0 * (2.0 * a * s * s * b - a * s * b) + 4.0 * (a * s * s * b - a * s * b)).epsilon(1e-9));
  // fp32 plans the CPU engine, whose auto is its fused kernel.
  CHECK(activations(PTDP_ATTENTION_AUTO) == Approx(fused).epsilon(1e-12));
  o.attention = static_cast<ptdp_attention>(3);
  ptdp_plan plan = nullptr;
  CHECK(ptdp_plan_create(&o, &cluster, &plan) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(ptdp_last_error()) == "ptdp_plan_create: options->attention = 3 is not a ptdp_attention");
  CHECK(plan == nullptr);
}

TEST_CASE("the DeepSeek-V3 family through the plan C API: MLA, YaRN and MTP fields, counts, FLOPs",
          "[plan][capi][deepseek]") {
  // --model-preset deepseek-v3 fills the new fields.
  const char* argv[] = {"ptdp-plan", "--model-preset", "deepseek-v3", "--global-batch-size", "15360", "--cluster",
                        "hgx-h800", "--nodes", "256", "--bf16", "--use-distributed-optimizer"};
  ptdp_plan_options o;
  ptdp_cluster cluster;
  ptdp_plan_cli cli;
  OK(ptdp_plan_options_init(&o));
  CHECK(o.multi_latent_attention == 0);
  CHECK(o.mtp_num_layers == 0);
  OK(ptdp_plan_parse_args(static_cast<int32_t>(sizeof argv / sizeof argv[0]), argv, &o, &cluster, &cli));
  CHECK(o.multi_latent_attention == 1);
  CHECK(o.q_lora_rank == 1536);
  CHECK(o.kv_lora_rank == 512);
  CHECK(o.qk_head_dim == 128);
  CHECK(o.qk_pos_emb_head_dim == 64);
  CHECK(o.v_head_dim == 128);
  CHECK(o.mtp_num_layers == 1);
  CHECK(o.rope_type == PTDP_ROPE_TYPE_YARN);
  CHECK(o.rotary_scaling_factor == 40.0f);
  CHECK(o.moe_router_group_score_topk == 2);
  CHECK(o.num_experts == 256);
  CHECK(cluster.nodes == 256);
  CHECK(cluster.intra_node_bandwidth == 160e9);
  // Hugging Face's count of the main model (671.03B) and the MTP module (11.61B).
  int64_t exact = 0;
  OK(ptdp_plan_parameters(&o, 1, nullptr, &exact));
  CHECK(exact == 682636487424);
  o.mtp_num_layers = 0;
  OK(ptdp_plan_parameters(&o, 1, nullptr, &exact));
  CHECK(exact == 671026419200);
  // MLA's KV cache: the latent and the RoPE key of 61 layers, 2 bytes each in bf16, on every
  // tensor rank; the same model with grouped-query attention (8 groups of 128) splits over t.
  double kv = 0;
  OK(ptdp_plan_kv_cache_bytes(&o, 8, &kv));
  CHECK(kv == 61.0 * (512 + 64) * 2);
  ptdp_plan_options gqa = o;
  gqa.multi_latent_attention = 0;
  gqa.num_query_groups = 8;
  gqa.kv_channels = 128;
  OK(ptdp_plan_kv_cache_bytes(&gqa, 8, &kv));
  CHECK(kv == 61.0 * 2 * 8 * 128 / 8 * 2);
  CHECK(ptdp_plan_kv_cache_bytes(&o, 0, &kv) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(ptdp_last_error()).find("t = 0") != std::string::npos);
  CHECK(ptdp_plan_kv_cache_bytes(&o, 1, nullptr) == PTDP_ERR_INVALID_ARGUMENT);

  // A small MLA model with one MTP module, planned on one node: the plan's FLOPs are Megatron's
  // num_floating_point_operations with its MLA and MTP terms, written out here per token.
  OK(ptdp_plan_options_init(&o));
  o.num_layers = 4;
  o.hidden_size = 64;
  o.num_attention_heads = 4;
  o.ffn_hidden_size = 96;
  o.seq_length = 32;
  o.vocab_size = 128;
  o.make_vocab_size_divisible_by = 1;
  o.untie_embeddings_and_output_weights = 1;
  o.normalization = PTDP_NORMALIZATION_RMSNORM;
  o.swiglu = 1;
  o.position_embedding_type = PTDP_POSITION_EMBEDDING_ROPE;
  o.disable_bias_linear = 1;
  o.qk_layernorm = 1;
  o.hidden_dropout = 0;
  o.attention_dropout = 0;
  o.multi_latent_attention = 1;
  o.q_lora_rank = 24;
  o.kv_lora_rank = 16;
  o.qk_head_dim = 8;
  o.qk_pos_emb_head_dim = 4;
  o.v_head_dim = 8;
  o.mtp_num_layers = 1;
  o.global_batch_size = 16;
  o.recompute_granularity = PTDP_RECOMPUTE_NONE;
  o.tensor_model_parallel_size = 1;
  o.pipeline_model_parallel_size = 2;
  o.micro_batch_size = 1;
  OK(ptdp_cluster_preset("dgx-h100", &cluster));
  o.num_gpus = 8;
  ptdp_plan plan = nullptr;
  OK(ptdp_plan_create(&o, &cluster, &plan));
  ptdp_plan_layout layout;
  layout.struct_size = sizeof layout;
  OK(ptdp_plan_get_layout(plan, 0, &layout));
  const double B = 16, s = 32, h = 64, a = 4, V = 128, l = 4, D = 1;
  const double rq = 24, r = 16, dn = 8, dr = 4, dv = 8, f = 96;
  const double attention = rq * (h + a * (dn + dr) + 1) + r * (h + a * (dn + dv) + 1) + h * dr + a * dv * h +
                           s * a * (dn + dr) + s * a * dv;
  const double megatron = B * s * (12 * (l + D) * h * f * 1.5 + 6 * (l + D) * attention + 6 * D * (3 * h + 2 * h * h) +
                                   6 * h * V * (D + 1));
  const double gpus = layout.t * layout.p * layout.d;
  CHECK(layout.p == 2);
  CHECK(layout.mfu * layout.seconds_iteration * gpus * cluster.peak_flops_fp32 == Approx(megatron).epsilon(1e-9));
  OK(ptdp_plan_parameters(&o, 1, nullptr, &exact));
  CHECK(layout.parameters_exact == exact);
  ptdp_plan_destroy(plan);
  // Bad MLA and MTP fields are named.
  o.mtp_num_layers = -1;
  CHECK(ptdp_plan_create(&o, &cluster, &plan) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(ptdp_last_error()).find("mtp_num_layers") != std::string::npos);
  o.mtp_num_layers = 1;
  o.kv_lora_rank = -2;
  CHECK(ptdp_plan_create(&o, &cluster, &plan) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(ptdp_last_error()).find("kv_lora_rank") != std::string::npos);
}
