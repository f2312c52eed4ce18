// ptdp-plan's flags, one table (name, meaning, how the value is read and checked) that the
// parser and the help text both walk. Reading the command line against the table (our own words
// for unknown flags and missing values; CLI11 collecting the values, the last of a repeated flag
// winning) is core/args/flag_table's, shared with ptdp-train; the table converts and checks the
// values, naming the flag and the value.
#include "core/plan/plan_args.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>

#include "base/error.h"
#include "core/args/flag_table.h"
#include "core/model/model_presets.h"
#include "core/model/moe_layer_freq.h"

namespace ptdp::plan {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

using cli::bad_value;
using cli::fail;

// ptdp-plan's wording is coarser than ptdp-train's: any integer that does not read (too large
// for int64 included) "is not an integer", any number that does not read or is not finite "is
// not a finite number".
int64_t to_int(const std::string& flag, const std::string& value, int64_t lo, int64_t hi) {
  int64_t v = 0;
  if (cli::read_whole(value, v) != std::errc()) bad_value(flag, value, cli::kNotAnInteger);
  if (v < lo || v > hi) bad_value(flag, value, cli::out_of_range(lo, hi));
  return v;
}

double to_positive(const std::string& flag, const std::string& value, bool zero_ok) {
  double v = 0;
  if (cli::read_whole(value, v) != std::errc() || !std::isfinite(v)) bad_value(flag, value, cli::kNotFinite);
  const cli::Check& check = zero_ok ? cli::kNonNegative : cli::kPositive;
  if (!check.ok(v)) bad_value(flag, value, check.want);
  return v;
}

constexpr int64_t kIntMax = std::numeric_limits<int>::max();

struct Flag : cli::FlagSpec {
  std::string default_text;
  int phase = 1;  // 0: picks the base cluster, applied before every other flag
  std::function<void(PlanArgs&, const std::string&)> set;
};

// Where --nodes and --num-gpus meet after the table is applied, and where --group-query-attention
// and --num-query-groups meet.
struct Extra {
  bool nodes_given = false;
  bool cluster_given = false;
  bool cluster_file_given = false;
  bool group_query_attention = false;
  int num_query_groups = 0;  ///< 0: not given
  std::string moe_layer_freq;  ///< --moe-layer-freq as given ("": not given), read against --num-layers
};
thread_local Extra* g_extra = nullptr;  // set while one parse runs on this thread

Flag value_flag(std::string name, std::string metavar, std::string help, std::string def,
                std::function<void(PlanArgs&, const std::string&)> set, int phase = 1) {
  Flag f;
  f.name = std::move(name);
  f.metavar = std::move(metavar);
  f.help = std::move(help);
  f.default_text = std::move(def);
  f.set = std::move(set);
  f.phase = phase;
  return f;
}

Flag bool_flag(std::string name, std::string help, std::function<void(PlanArgs&)> on) {
  Flag f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.default_text = "off";
  f.set = [on = std::move(on)](PlanArgs& a, const std::string&) { on(a); };
  return f;
}

Flag model_int(const std::string& name, const std::string& help, int GptConfig::*field, int64_t lo, std::string def) {
  return value_flag(name, "N", help, std::move(def), [name, field, lo](PlanArgs& a, const std::string& v) {
    a.request.model.*field = static_cast<int>(to_int(name, v, lo, kIntMax));
  });
}

Flag model_moe_int(const std::string& name, const std::string& help, int MoeConfig::*field, int64_t lo,
                   std::string def) {
  return value_flag(name, "N", help, std::move(def), [name, field, lo](PlanArgs& a, const std::string& v) {
    a.request.model.moe.*field = static_cast<int>(to_int(name, v, lo, kIntMax));
  });
}

Flag cluster_number(const std::string& name, const std::string& metavar, const std::string& help,
                    double Cluster::*field, double unit, bool zero_ok) {
  return value_flag(name, metavar, help, "from the cluster", [name, field, unit, zero_ok](PlanArgs& a, const std::string& v) {
    a.cluster.*field = to_positive(name, v, zero_ok) * unit;
  });
}

// A probability flag of the model (dropout).
Flag model_probability(const std::string& name, const std::string& help, float GptConfig::*field, std::string def) {
  return value_flag(name, "P", help, std::move(def), [name, field](PlanArgs& a, const std::string& s) {
    const double p = to_positive(name, s, true);
    if (!cli::kProbability.ok(p)) bad_value(name, s, cli::kProbability.want);
    a.request.model.*field = static_cast<float>(p);
  });
}

std::string preset_list() {
  std::string s;
  for (const std::string& n : cluster_preset_names()) s += str_cat(s.empty() ? "" : "|", n);
  return s;
}

std::vector<Flag> make_flags() {
  std::vector<Flag> v;
  // Model (ptdp-train's names). A preset is applied first; every model flag given overrides it.
  v.push_back(value_flag("model-preset", "NAME",
                         str_cat("Start from a named model (", model_preset_names(), "); the model flags override it."),
                         "none", [](PlanArgs& a, const std::string& s) {
                           const std::optional<ModelPreset> preset = find_model_preset(s);
                           if (!preset) bad_value("model-preset", s, str_cat("is not a preset (", model_preset_names(), ")"));
                           a.request.model = preset->config;
                         },
                         0));
  v.push_back(model_int("num-layers", "Transformer layers l.", &GptConfig::num_layers, 1, "2"));
  v.push_back(model_int("hidden-size", "Hidden size h.", &GptConfig::hidden_size, 1, "64"));
  v.push_back(model_int("ffn-hidden-size", "MLP hidden size; 0 means 4 * hidden-size.", &GptConfig::ffn_hidden_size, 0, "0"));
  v.push_back(model_int("num-attention-heads", "Attention heads a; t must divide them.", &GptConfig::num_attention_heads, 1, "4"));
  v.push_back(model_int("seq-length", "Tokens per sample s.", &GptConfig::seq_length, 1, "32"));
  v.push_back(model_int("max-position-embeddings", "Rows of the position table; 0 means seq-length.",
                        &GptConfig::max_position_embeddings, 0, "0"));
  v.push_back(model_int("vocab-size", "Vocabulary V.", &GptConfig::vocab_size, 1, "256"));
  v.push_back(model_int("make-vocab-size-divisible-by", "Pad the vocabulary to a multiple of this times t.",
                        &GptConfig::make_vocab_size_divisible_by, 1, "128"));
  v.push_back(bool_flag("untie-embeddings-and-output-weights", "The LM head has its own weights.",
                        [](PlanArgs& a) { a.request.model.tie_embeddings = false; }));
  v.push_back(model_probability("attention-dropout", "Attention dropout (its mask and output are kept for the backward).",
                                &GptConfig::attention_dropout, "0.1"));
  v.push_back(model_probability("hidden-dropout", "Dropout after the projection and fc2 (0: no masks kept).",
                                &GptConfig::hidden_dropout, "0.1"));
  const cli::Choices<AttentionImpl> attentions{
      {"auto", AttentionImpl::Auto}, {"fused", AttentionImpl::Fused}, {"unfused", AttentionImpl::Unfused}};
  v.push_back(value_flag("attention-backend", cli::choice_metavar(attentions),
                         "Attention as ptdp-train's flag: fused keeps a / t s b fp32 row statistics per layer, unfused "
                         "the a / t s^2 b probabilities; auto as the engine resolves it (fp32: the CPU's fused kernel; "
                         "bf16/fp16: CUDA's, for head dim 64 or 128).",
                         "auto", [attentions](PlanArgs& a, const std::string& s) {
                           a.request.model.attention = cli::to_choice("attention-backend", s, attentions);
                         }));
  // Llama-family options (Megatron's names).
  const cli::Choices<Normalization> norms{{"LayerNorm", Normalization::LayerNorm}, {"RMSNorm", Normalization::RMSNorm}};
  v.push_back(value_flag("normalization", cli::choice_metavar(norms), "Every norm of the model (RMSNorm has no bias).",
                         "LayerNorm", [norms](PlanArgs& a, const std::string& s) {
                           a.request.model.normalization = cli::to_choice("normalization", s, norms);
                         }));
  v.push_back(value_flag("norm-epsilon", "X", "Epsilon of every norm.", "1e-5", [](PlanArgs& a, const std::string& s) {
    a.request.model.layernorm_epsilon = static_cast<float>(to_positive("norm-epsilon", s, false));
  }));
  v.push_back(bool_flag("swiglu", "SwiGLU MLP: fc1 is [2 ffn, h]; ffn defaults to int(8h/3/64)*64.",
                        [](PlanArgs& a) { a.request.model.swiglu = true; }));
  const cli::Choices<PositionEmbedding> positions{{"learned_absolute", PositionEmbedding::LearnedAbsolute},
                                                  {"rope", PositionEmbedding::Rope},
                                                  {"none", PositionEmbedding::None}};
  v.push_back(value_flag("position-embedding-type", cli::choice_metavar(positions),
                         "Positions: a learned table, rotary (no table), or none.", "learned_absolute",
                         [positions](PlanArgs& a, const std::string& s) {
                           a.request.model.position_embedding = cli::to_choice("position-embedding-type", s, positions);
                         }));
  v.push_back(value_flag("rotary-base", "X", "RoPE base (theta).", "10000", [](PlanArgs& a, const std::string& s) {
    a.request.model.rotary_base = static_cast<float>(to_positive("rotary-base", s, false));
  }));
  v.push_back(value_flag("rotary-percent", "X", "Share of each head's dims RoPE rotates, in (0, 1].", "1.0",
                         [](PlanArgs& a, const std::string& s) {
                           const double p = to_positive("rotary-percent", s, false);
                           if (p > 1.0) bad_value("rotary-percent", s, "must be in (0, 1]");
                           a.request.model.rotary_percent = static_cast<float>(p);
                         }));
  v.push_back(bool_flag("use-rope-scaling", "Llama 3.1's RoPE frequency scaling.",
                        [](PlanArgs& a) { a.request.model.rope_scaling.enabled = true; }));
  v.push_back(value_flag("rope-scaling-factor", "X", "Llama 3.1's RoPE scaling factor (>= 1).", "8.0",
                         [](PlanArgs& a, const std::string& s) {
                           const double f = to_positive("rope-scaling-factor", s, false);
                           if (f < 1.0) bad_value("rope-scaling-factor", s, "must be >= 1");
                           a.request.model.rope_scaling.factor = static_cast<float>(f);
                         }));
  v.push_back(bool_flag("group-query-attention", "Grouped-query attention (--num-query-groups key/value heads).",
                        [](PlanArgs&) { g_extra->group_query_attention = true; }));
  v.push_back(value_flag("num-query-groups", "N", "Key/value heads g with --group-query-attention; t must divide them.",
                         "1 with --group-query-attention", [](PlanArgs&, const std::string& s) {
                           g_extra->num_query_groups = static_cast<int>(to_int("num-query-groups", s, 1, kIntMax));
                         }));
  v.push_back(model_int("kv-channels", "Head dim dh; 0 means hidden-size / num-attention-heads.", &GptConfig::kv_channels, 0, "0"));
  v.push_back(bool_flag("disable-bias-linear", "No bias in any linear layer.",
                        [](PlanArgs& a) { a.request.model.add_bias_linear = false; }));
  v.push_back(bool_flag("add-qkv-bias", "Keep the qkv bias with --disable-bias-linear (Qwen2).",
                        [](PlanArgs& a) { a.request.model.add_qkv_bias = true; }));
  v.push_back(bool_flag("qk-layernorm", "A norm over each query and key head.",
                        [](PlanArgs& a) { a.request.model.qk_layernorm = true; }));
  v.push_back(bool_flag("qk-layernorm-across-heads",
                        "With --qk-layernorm: the q and k norms are over the whole projections (OLMo 2, OLMoE).",
                        [](PlanArgs& a) { a.request.model.qk_layernorm_across_heads = true; }));
  // Multi-latent attention, YaRN and multi-token prediction (ptdp-train's names; docs/deepseek.md).
  v.push_back(bool_flag("multi-latent-attention",
                        "Multi-latent attention (DeepSeek-V2/V3): low-rank query and key/value projections with a "
                        "decoupled RoPE part; with --qk-layernorm the latents are normalised.",
                        [](PlanArgs& a) { a.request.model.multi_latent_attention = true; }));
  v.push_back(model_int("q-lora-rank", "The query latent's width; 0 means no query compression (DeepSeek-V2-Lite).",
                        &GptConfig::q_lora_rank, 0, "0"));
  v.push_back(model_int("kv-lora-rank", "The compressed key/value latent's width.", &GptConfig::kv_lora_rank, 1, "32"));
  v.push_back(model_int("qk-head-dim", "Each query/key head's dims without RoPE.", &GptConfig::qk_head_dim, 1, "128"));
  v.push_back(model_int("qk-pos-emb-head-dim", "Each query/key head's RoPE dims.", &GptConfig::qk_pos_emb_head_dim, 1,
                        "64"));
  v.push_back(model_int("v-head-dim", "Each value head's dims.", &GptConfig::v_head_dim, 1, "128"));
  const cli::Choices<RopeType> rope_types{{"rope", RopeType::Rope}, {"yarn", RopeType::Yarn}};
  v.push_back(value_flag("rope-type", cli::choice_metavar(rope_types),
                         "RoPE's frequencies: plain, or YaRN (no effect on memory or time).", "rope",
                         [rope_types](PlanArgs& a, const std::string& s) {
                           a.request.model.rope_type = cli::to_choice("rope-type", s, rope_types);
                         }));
  const auto yarn_number = [](const std::string& name, const std::string& help, float YarnScaling::*field,
                              std::string def) {
    return value_flag(name, "X", help, std::move(def), [name, field](PlanArgs& a, const std::string& s) {
      a.request.model.yarn.*field = static_cast<float>(to_positive(name, s, true));
    });
  };
  v.push_back(yarn_number("rotary-scaling-factor", "YaRN's factor.", &YarnScaling::factor, "1.0"));
  v.push_back(yarn_number("mscale", "YaRN's mscale.", &YarnScaling::mscale, "1.0"));
  v.push_back(yarn_number("mscale-all-dim", "YaRN's mscale_all_dim (0: unset).", &YarnScaling::mscale_all_dim, "0.0"));
  v.push_back(yarn_number("beta-fast", "YaRN's beta_fast.", &YarnScaling::beta_fast, "32"));
  v.push_back(yarn_number("beta-slow", "YaRN's beta_slow.", &YarnScaling::beta_slow, "1"));
  v.push_back(value_flag("original-max-position-embeddings", "N", "The context length YaRN's frequencies were trained for.",
                         "4096", [](PlanArgs& a, const std::string& s) {
                           a.request.model.yarn.original_max_position_embeddings =
                               static_cast<int>(to_int("original-max-position-embeddings", s, 1, kIntMax));
                         }));
  v.push_back(bool_flag("no-yarn-correction-range-round-to-int", "YaRN's correction range unrounded.",
                        [](PlanArgs& a) { a.request.model.yarn.truncate = false; }));
  v.push_back(model_int("mtp-num-layers",
                        "Multi-token prediction depth D: D modules (a layer, eh_proj, a logits layer each) on the "
                        "last pipeline stage.",
                        &GptConfig::mtp_num_layers, 0, "0"));
  v.push_back(value_flag("mtp-loss-scaling-factor", "X", "The MTP losses' weight (no effect on memory or time).", "0.1",
                         [](PlanArgs& a, const std::string& s) {
                           a.request.model.mtp_loss_scaling_factor =
                               static_cast<float>(to_positive("mtp-loss-scaling-factor", s, true));
                         }));
  // Mixture of experts (ptdp-train's names; the router's and the losses' flags change neither
  // memory nor time, and are ptdp-train's alone).
  v.push_back(model_moe_int("num-experts", "Routed experts E of every MoE layer; 0 means a dense model.",
                            &MoeConfig::num_experts, 0, "0"));
  v.push_back(model_moe_int("moe-router-topk", "Experts k per token.", &MoeConfig::router_topk, 1, "2"));
  v.push_back(model_moe_int("moe-ffn-hidden-size", "Each routed expert's MLP width; 0 means ffn-hidden-size.",
                            &MoeConfig::ffn_hidden_size, 0, "0"));
  v.push_back(model_moe_int("moe-shared-expert-intermediate-size", "Total width of the shared experts; 0 means none.",
                            &MoeConfig::shared_expert_intermediate_size, 0, "0"));
  v.push_back(value_flag("moe-layer-freq", "N|PATTERN",
                         "Which layers are MoE: every N-th from layer 0, or Megatron's list pattern (\"[1,0,1]\").",
                         "1", [](PlanArgs&, const std::string& s) {
                           parse_moe_layer_freq(s, 0);
                           g_extra->moe_layer_freq = s;
                         }));
  v.push_back(value_flag("expert-model-parallel-size", "N", "Pin e (MoE); 0 searches the divisors of --num-experts.",
                         "searched", [](PlanArgs& a, const std::string& s) {
                           a.request.expert_model =
                               static_cast<int>(to_int("expert-model-parallel-size", s, 0, kIntMax));
                         }));
  v.push_back(value_flag("expert-tensor-parallel-size", "N", "Pin etp (MoE); 0 searches 1 and t.", "searched",
                         [](PlanArgs& a, const std::string& s) {
                           a.request.expert_tensor =
                               static_cast<int>(to_int("expert-tensor-parallel-size", s, 0, kIntMax));
                         }));
  // Batch, precision, what may be used.
  v.push_back(value_flag("global-batch-size", "N", "Samples per iteration B over all replicas (required).", "none",
                         [](PlanArgs& a, const std::string& s) { a.request.global_batch_size = to_int("global-batch-size", s, 1, kIntMax); }));
  v.push_back(value_flag("micro-batch-size", "N", "Pin the microbatch size b.", "searched",
                         [](PlanArgs& a, const std::string& s) { a.request.micro_batch = static_cast<int>(to_int("micro-batch-size", s, 1, kIntMax)); }));
  v.push_back(value_flag("tensor-model-parallel-size", "N", "Pin t.", "searched", [](PlanArgs& a, const std::string& s) {
    a.request.tensor = static_cast<int>(to_int("tensor-model-parallel-size", s, 1, kIntMax));
  }));
  v.push_back(value_flag("pipeline-model-parallel-size", "N", "Pin p.", "searched", [](PlanArgs& a, const std::string& s) {
    a.request.pipeline = static_cast<int>(to_int("pipeline-model-parallel-size", s, 1, kIntMax));
  }));
  v.push_back(value_flag("num-layers-per-virtual-pipeline-stage", "N", "Pin v = num-layers / (p * N).", "searched",
                         [](PlanArgs& a, const std::string& s) {
                           a.request.layers_per_virtual_stage =
                               static_cast<int>(to_int("num-layers-per-virtual-pipeline-stage", s, 1, kIntMax));
                         }));
  v.push_back(value_flag("decoder-first-pipeline-num-layers", "N",
                         "Pin the layers of the first pipeline stage (Megatron's uneven stages; the stages without "
                         "a count of their own share the rest evenly).",
                         "searched: an even split, or uneven ends where they balance the stages",
                         [](PlanArgs& a, const std::string& s) {
                           a.request.first_stage_layers =
                               static_cast<int>(to_int("decoder-first-pipeline-num-layers", s, 1, kIntMax));
                         }));
  v.push_back(value_flag("decoder-last-pipeline-num-layers", "N",
                         "Pin the layers of the last pipeline stage (which also runs the logits layer and the loss).",
                         "searched: an even split, or uneven ends where they balance the stages",
                         [](PlanArgs& a, const std::string& s) {
                           a.request.last_stage_layers =
                               static_cast<int>(to_int("decoder-last-pipeline-num-layers", s, 1, kIntMax));
                         }));
  const cli::Choices<ScheduleKind> schedules{
      {"1f1b", ScheduleKind::OneFOneB},          {"gpipe", ScheduleKind::GPipe},
      {"zb-h1", ScheduleKind::ZeroBubbleH1},     {"zb-v", ScheduleKind::ZeroBubbleV},
      {"dualpipev", ScheduleKind::DualPipeV},     {"interleaved-zb", ScheduleKind::InterleavedZeroBubble}};
  v.push_back(value_flag("pipeline-schedule", cli::choice_metavar(schedules),
                         "Pin the schedule (1f1b includes interleaved 1F1B when v > 1; zb-v and dualpipev run v = 2 in a V).",
                         "1f1b, interleaved, zb-h1, interleaved-zb, zb-v, dualpipev",
                         [schedules](PlanArgs& a, const std::string& s) {
                           a.request.schedule = static_cast<int>(cli::to_choice("pipeline-schedule", s, schedules));
                         }));
  const cli::Choices<Recompute> recomputes{
      {"none", Recompute::None}, {"full", Recompute::Full}, {"selective", Recompute::Selective}};
  v.push_back(value_flag("recompute-granularity", cli::choice_metavar(recomputes), "Pin activation recomputation.",
                         "all three searched", [recomputes](PlanArgs& a, const std::string& s) {
                           const Recompute r = cli::to_choice("recompute-granularity", s, recomputes);
                           for (int i = 0; i < 3; ++i) a.request.allow_recompute[i] = i == static_cast<int>(r);
                         }));
  v.push_back(bool_flag("use-distributed-optimizer", "Allow sharding the optimizer state over the data-parallel group.",
                        [](PlanArgs& a) { a.request.allow_distributed_optimizer = true; }));
  const cli::Choices<PlanOptimizer> optimizers{
      {"adam", PlanOptimizer::Adam}, {"sgd", PlanOptimizer::Sgd}, {"muon", PlanOptimizer::Muon}};
  v.push_back(value_flag("optimizer", cli::choice_metavar(optimizers),
                         "The optimizer whose state and step are priced: adam two fp32 moments per parameter, sgd "
                         "one momentum buffer, muon one momentum buffer for the 2-D hidden weights (Adam's moments "
                         "for the embeddings, output layer, norms and biases) plus the Newton-Schulz products at the "
                         "device's peak.",
                         "adam", [optimizers](PlanArgs& a, const std::string& s) {
                           a.request.optimizer = cli::to_choice("optimizer", s, optimizers);
                         }));
  v.push_back(value_flag("muon-num-ns-steps", "N", "Newton-Schulz steps of each Muon step (with --optimizer muon).",
                         "5", [](PlanArgs& a, const std::string& s) {
                           a.request.muon_ns_steps = static_cast<int>(to_int("muon-num-ns-steps", s, 1, 100));
                         }));
  v.push_back(bool_flag("muon-no-split-qkv",
                        "Muon orthogonalises linear_qkv and SwiGLU's linear_fc1 whole, not q, k, v and gate, up "
                        "apart.",
                        [](PlanArgs& a) { a.request.muon_split_qkv = false; }));
  v.push_back(value_flag("context-parallel-size", "N",
                         "Context parallelism: 1 none, N > 1 pins c = N, 0 searches 1, 2, 4, ... (ranks ordered t, c, "
                         "d, p as Megatron's).",
                         "1", [](PlanArgs& a, const std::string& s) {
                           a.request.context_parallel = static_cast<int>(to_int("context-parallel-size", s, 0, 1 << 16));
                         }));
  v.push_back(bool_flag("sequence-parallel",
                        "Allow sequence parallelism where t > 1 (Megatron's --sequence-parallel; the planner says "
                        "why it uses it or not).",
                        [](PlanArgs& a) { a.request.allow_sequence_parallel = true; }));
  v.push_back(bool_flag("bf16", "Train in bfloat16 (fp32 master weights); default fp32 as ptdp-train.",
                        [](PlanArgs& a) { a.request.precision = Precision::Bf16; }));
  v.push_back(bool_flag("fp16", "Train in float16 (fp32 master weights).", [](PlanArgs& a) { a.request.precision = Precision::Fp16; }));
  v.push_back(bool_flag("no-scatter-gather-tensors-in-pipeline", "Send whole activations between stages.",
                        [](PlanArgs& a) { a.request.scatter_gather = false; }));
  v.push_back(bool_flag("no-overlap-grad-reduce", "Do not overlap the data-parallel reduction with the backward.",
                        [](PlanArgs& a) { a.request.overlap_grad_reduce = false; }));
  // Cluster.
  v.push_back(value_flag("cluster", str_cat("{", preset_list(), "}"), "Cluster preset (one node; see --nodes).", "dgx-a100",
                         [](PlanArgs& a, const std::string& s) {
                           try {
                             a.cluster = cluster_preset(s);
                           } catch (const Error&) {
                             bad_value("cluster", s, str_cat("is not a preset (", preset_list(), ")"));
                           }
                           g_extra->cluster_given = true;
                         },
                         0));
  v.push_back(value_flag("cluster-file", "PATH", "Cluster from a JSON file (keys as --list-clusters shows).", "none",
                         [](PlanArgs& a, const std::string& s) {
                           a.cluster = load_cluster(s);
                           g_extra->cluster_file_given = true;
                         },
                         0));
  v.push_back(value_flag("nodes", "N", "Nodes of the cluster.", "1 (or what --num-gpus needs)",
                         [](PlanArgs& a, const std::string& s) {
                           a.cluster.nodes = static_cast<int>(to_int("nodes", s, 1, 1 << 20));
                           g_extra->nodes_given = true;
                         }));
  v.push_back(value_flag("num-gpus", "N", "GPUs to plan for (the world size t * p * d).", "every GPU of the nodes",
                         [](PlanArgs& a, const std::string& s) { a.request.num_gpus = static_cast<int>(to_int("num-gpus", s, 1, 1 << 24)); }));
  v.push_back(value_flag("gpus-per-node", "N", "GPUs per node.", "from the cluster", [](PlanArgs& a, const std::string& s) {
    a.cluster.gpus_per_node = static_cast<int>(to_int("gpus-per-node", s, 1, 1 << 16));
  }));
  v.push_back(cluster_number("memory-gib", "GIB", "Memory per GPU.", &Cluster::memory_bytes, kGiB, false));
  v.push_back(cluster_number("memory-reserve-gib", "GIB", "Memory per GPU kept free (context, buffers, fragmentation).",
                             &Cluster::memory_reserve_bytes, kGiB, true));
  v.push_back(cluster_number("peak-tflops-16bit", "X", "Dense bf16/fp16 peak per GPU.", &Cluster::peak_flops_16bit, 1e12, false));
  v.push_back(cluster_number("peak-tflops-fp32", "X", "Peak per GPU for fp32 training.", &Cluster::peak_flops_fp32, 1e12, false));
  v.push_back(cluster_number("gemm-efficiency", "X", "Without a GEMM table: achieved fraction of peak for large layers, in (0, 1].",
                             &Cluster::gemm_efficiency, 1.0, false));
  v.push_back(value_flag("gemm-table-16bit", "NAME|PATH",
                         "GEMM efficiency by shape for 16-bit training: a built-in table (a100-16bit, h100-16bit, ...) "
                         "or a JSON file from bench_kernels --gemm-table; 'none': --gemm-efficiency for every GEMM.",
                         "the cluster's", [](PlanArgs& a, const std::string& s) {
                           a.cluster.gemm_table_16bit = s == "none" ? std::string() : s;
                         }));
  v.push_back(value_flag("gemm-table-fp32", "NAME|PATH",
                         "GEMM efficiency by shape for fp32 training (a100-tf32, h100-tf32, cpu, or a file); 'none' "
                         "as for --gemm-table-16bit.",
                         "the cluster's", [](PlanArgs& a, const std::string& s) {
                           a.cluster.gemm_table_fp32 = s == "none" ? std::string() : s;
                         }));
  v.push_back(cluster_number("memory-bandwidth-gbs", "X", "Achieved device-memory bandwidth.", &Cluster::memory_bandwidth, 1e9, false));
  v.push_back(cluster_number("elementwise-bandwidth-gbs", "X",
                             "With a GEMM table: bandwidth of the memory-bound kernels (0: --memory-bandwidth-gbs).",
                             &Cluster::elementwise_bandwidth, 1e9, true));
  v.push_back(cluster_number("intra-node-bandwidth-gbs", "X", "Collective bus bandwidth per GPU inside a node.",
                             &Cluster::intra_node_bandwidth, 1e9, false));
  v.push_back(cluster_number("intra-node-latency-us", "X", "Latency of a collective or transfer inside a node.",
                             &Cluster::intra_node_latency, 1e-6, true));
  v.push_back(cluster_number("inter-node-bandwidth-gbs", "X", "Bandwidth per GPU between nodes.",
                             &Cluster::inter_node_bandwidth, 1e9, false));
  v.push_back(cluster_number("inter-node-latency-us", "X", "Latency of a collective or transfer between nodes.",
                             &Cluster::inter_node_latency, 1e-6, true));
  // Output.
  v.push_back(value_flag("top", "N", "Layouts to show.", "5",
                         [](PlanArgs& a, const std::string& s) { a.request.top = static_cast<int>(to_int("top", s, 1, 1000)); }));
  v.push_back(bool_flag("json", "Print the answer as JSON.", [](PlanArgs& a) { a.json = true; }));
  v.push_back(value_flag("schedule-svg", "PATH", "Draw the chosen layout's pipeline schedule as SVG.", "none",
                         [](PlanArgs& a, const std::string& s) { a.schedule_svg = s; }));
  v.push_back(bool_flag("list-clusters", "Print the presets as JSON and exit.", [](PlanArgs& a) { a.list_clusters = true; }));
  v.push_back(bool_flag("help", "Show this help (also -h).", [](PlanArgs& a) { a.help = true; }));
  return v;
}

const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = make_flags();
  return table;
}

const cli::FlagTable& flag_table() {
  static const cli::FlagTable t(flags(), {"ptdp-plan", "", "flags start with -- (see --help)"});
  return t;
}

}  // namespace

PlanArgs parse_plan_args(const std::vector<std::string>& args) {
  if (cli::asks_for_help(args)) {
    PlanArgs h;
    h.help = true;
    return h;
  }
  const std::vector<std::optional<std::string>> values = flag_table().read(args);
  const std::vector<Flag>& table = flags();
  PlanArgs out;
  out.cluster = cluster_preset("dgx-a100");
  Extra extra;
  struct Scope {
    explicit Scope(Extra* e) { g_extra = e; }
    ~Scope() { g_extra = nullptr; }
  } scope(&extra);
  for (int phase = 0; phase < 2; ++phase) {
    for (std::size_t i = 0; i < table.size(); ++i) {
      if (table[i].phase == phase && values[i]) table[i].set(out, *values[i]);
    }
  }
  if (out.list_clusters) return out;
  if (extra.cluster_given && extra.cluster_file_given) fail("--cluster and --cluster-file are exclusive");
  if (values[*flag_table().index_of("bf16")] && values[*flag_table().index_of("fp16")]) {
    fail("--fp16 and --bf16 are exclusive");
  }
  PlanRequest& r = out.request;
  if (r.global_batch_size == 0) {
    fail("--global-batch-size is required: the planner splits it over d replicas and m microbatches of b");
  }
  GptConfig& g = r.model;
  // Megatron reads --num-query-groups only with --group-query-attention (whose groups default
  // to 1); a preset with grouped-query attention has it on.
  if (extra.num_query_groups > 0) {
    if (!extra.group_query_attention && g.num_query_groups == 0) {
      fail(str_cat("--num-query-groups ", extra.num_query_groups,
                   " needs --group-query-attention (Megatron ignores it otherwise)"));
    }
    g.num_query_groups = extra.num_query_groups;
  } else if (extra.group_query_attention && g.num_query_groups == 0) {
    g.num_query_groups = 1;
  }
  if (!extra.moe_layer_freq.empty()) {
    if (!g.moe.enabled()) fail(str_cat("--moe-layer-freq ", extra.moe_layer_freq, " is read only with --num-experts"));
    g.moe.layer_pattern = parse_moe_layer_freq(extra.moe_layer_freq, g.num_layers);
  }
  if (g.kv_channels == 0 && g.hidden_size % g.num_attention_heads != 0) {
    fail(str_cat("--num-attention-heads ", g.num_attention_heads, " does not divide --hidden-size ", g.hidden_size,
                 " (or set --kv-channels)"));
  }
  if (g.num_attention_heads % g.query_groups() != 0) {
    fail(str_cat("--num-query-groups ", g.query_groups(), " does not divide --num-attention-heads ", g.num_attention_heads));
  }
  if (g.max_position_embeddings > 0 && g.seq_length > g.max_position_embeddings) {
    fail(str_cat("--seq-length ", g.seq_length, " is longer than --max-position-embeddings ", g.max_position_embeddings));
  }
  if (r.micro_batch > 0 && r.global_batch_size % r.micro_batch != 0) {
    fail(str_cat("--global-batch-size ", r.global_batch_size, " is not a multiple of --micro-batch-size ", r.micro_batch));
  }
  // A p that does not divide the layers runs with uneven first and last stages (searched, or pinned).
  if (r.pipeline > 0 && r.pipeline > g.num_layers) {
    fail(str_cat("--pipeline-model-parallel-size ", r.pipeline, " exceeds --num-layers ", g.num_layers));
  }
  if (r.tensor > 0 && g.num_attention_heads % r.tensor != 0) {
    fail(str_cat("--tensor-model-parallel-size ", r.tensor, " does not divide --num-attention-heads ", g.num_attention_heads));
  }
  if (r.tensor > 0 && g.query_groups() % r.tensor != 0) {
    fail(str_cat("--tensor-model-parallel-size ", r.tensor, " does not divide --num-query-groups ", g.query_groups(),
                 " (each tensor rank holds whole key/value heads)"));
  }
  try {
    g.validate(r.tensor > 0 ? r.tensor : 1);
  } catch (const Error& e) {
    fail(str_cat("the model flags: ", e.what()));
  }
  if (r.num_gpus > 0) {
    const int needed = (r.num_gpus + out.cluster.gpus_per_node - 1) / out.cluster.gpus_per_node;
    if (!extra.nodes_given) {
      out.cluster.nodes = std::max(out.cluster.nodes, needed);
    } else if (out.cluster.nodes < needed) {
      fail(str_cat("--num-gpus ", r.num_gpus, " needs ", needed, " nodes of ", out.cluster.gpus_per_node,
                   " GPUs, but --nodes is ", out.cluster.nodes));
    }
  }
  try {
    out.cluster.validate();
  } catch (const Error& e) {
    fail(str_cat("the cluster flags: ", e.what()));
  }
  return out;
}

std::string plan_args_help(const std::string& program) {
  constexpr std::size_t kColumn = 36;
  std::string out = flag_table().usage(program);
  out +=
      "Plans how to lay out a GPT or a Llama-family decoder on a GPU cluster: searches tensor (t),\n"
      "pipeline (p, v), data (d) parallelism, the microbatch size, the schedule and recomputation,\n"
      "estimates memory per GPU and time per iteration with the performance model of Narayanan et al.\n"
      "(SC'21), and shows the fastest layouts that fit, with the reasons. Flags share ptdp-train's\n"
      "names where they overlap; --model-preset NAME starts from a named model that the other model\n"
      "flags override, whatever their order.\n"
      "Exit status: 0 with a layout, 1 when none fits (the message says what is missing), 2 on bad flags.\n\n";
  for (const Flag& f : flags()) out += cli::help_entry(f, f.default_text, kColumn);
  return out;
}

}  // namespace ptdp::plan
