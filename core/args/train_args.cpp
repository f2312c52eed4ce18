// ptdp-train's flags. One table describes every flag (name, group, meaning, how its value is read
// and checked, how it reads back as JSON); the parser, the help text and the JSON export all walk
// that table, so they cannot disagree. Reading the command line against the table is
// core/args/flag_table's, shared with ptdp-plan; values are converted and range-checked by the
// table, then the flags are checked against each other.
#include "core/args/train_args.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>

#include "base/checked_math.h"
#include "base/error.h"
#include "core/args/flag_table.h"
#include "core/data/tokenizer.h"
#include "core/model/model_presets.h"
#include "core/model/moe_layer_freq.h"
#include "core/model/pipeline_split.h"
#include "io/json_text.h"

namespace ptdp {

namespace {

using nlohmann::json;

using cli::bad_value;
using cli::Check;
using cli::Choices;
using cli::fail;
using cli::kAny;
using cli::kNonNegative;
using cli::kPositive;
using cli::kProbability;

const Check kUnitInterval{[](double v) { return v > 0 && v <= 1; }, "must be in (0, 1]"};
const Check kAtLeastOne{[](double v) { return v >= 1; }, "must be >= 1"};
const Check kClosedUnitInterval{[](double v) { return v >= 0 && v <= 1; }, "must be in [0, 1]"};
const Check kNsSteps{[](double v) { return v >= 1 && v <= 100; }, "must be in [1, 100]"};

enum class Group : int { Model, Moe, Parallel, Training, Optimizer, MixedPrecision, Data, Checkpoint, Logging, Ptdp };
constexpr int kNumGroups = 10;
constexpr const char* kGroupTitles[kNumGroups] = {
    "Model", "Mixture of experts", "Parallelism", "Training", "Optimizer and learning rate", "Mixed precision", "Data",
    "Checkpoints", "Logging and evaluation", "ptdp"};

struct Flag : cli::FlagSpec {
  Group group = Group::Model;
  std::string default_note;  // shown after the default in --help
  std::function<void(TrainArgs&, const std::string&)> set;  // value flags
  std::function<void(TrainArgs&)> set_on;                   // boolean flags
  std::function<json(const TrainArgs&)> get;
};

/// Whether the words of `list` (joined by spaces, as the list flags keep them) include `word`.
bool split_words_contain(const std::string& list, const char* word) {
  for (const std::string& w : split_words(list)) {
    if (w == word) return true;
  }
  return false;
}

Flag head(std::string name, Group group, std::string metavar, std::string help, std::string note = "") {
  Flag f;
  f.name = std::move(name);
  f.group = group;
  f.metavar = std::move(metavar);
  f.help = std::move(help);
  f.default_note = std::move(note);
  return f;
}

template <typename T>
T checked_integer(const std::string& flag, const std::string& value, const Check& check) {
  const T x = cli::to_integer<T>(flag, value);
  if (!check.ok(static_cast<double>(x))) bad_value(flag, value, check.want);
  return x;
}

template <typename T>
Flag integer(std::string name, Group group, std::string help, T TrainArgs::*field, Check check,
             std::string note = "") {
  Flag f = head(std::move(name), group, "N", std::move(help), std::move(note));
  f.set = [n = f.name, field, check](TrainArgs& a, const std::string& v) { a.*field = checked_integer<T>(n, v, check); };
  f.get = [field](const TrainArgs& a) { return json(a.*field); };
  return f;
}

template <typename T>
Flag optional_integer(std::string name, Group group, std::string help, std::optional<T> TrainArgs::*field,
                      Check check, std::string note) {
  Flag f = head(std::move(name), group, "N", std::move(help), std::move(note));
  f.set = [n = f.name, field, check](TrainArgs& a, const std::string& v) { a.*field = checked_integer<T>(n, v, check); };
  f.get = [field](const TrainArgs& a) { return (a.*field).has_value() ? json(*(a.*field)) : json(nullptr); };
  return f;
}

// `single`: the value ends up in a float (the model and optimizer structs), so the check applies
// to the float it becomes too (0.99999999999 is 1 as a float).
double checked_number(const std::string& flag, const std::string& value, const Check& check, bool single) {
  const double x = cli::to_number(flag, value);
  if (single) {
    const float f = static_cast<float>(x);
    if (!std::isfinite(f)) bad_value(flag, value, "is out of range for a float");
    if (!check.ok(static_cast<double>(f))) bad_value(flag, value, str_cat(check.want, " (as a float)"));
  }
  if (!check.ok(x)) bad_value(flag, value, check.want);
  return x;
}

Flag number(std::string name, Group group, std::string metavar, std::string help, double TrainArgs::*field,
            Check check, bool single, std::string note = "") {
  Flag f = head(std::move(name), group, std::move(metavar), std::move(help), std::move(note));
  f.set = [n = f.name, field, check, single](TrainArgs& a, const std::string& v) {
    a.*field = checked_number(n, v, check, single);
  };
  f.get = [field](const TrainArgs& a) { return json(a.*field); };
  return f;
}

Flag optional_number(std::string name, Group group, std::string metavar, std::string help,
                     std::optional<double> TrainArgs::*field, Check check, bool single, std::string note) {
  Flag f = head(std::move(name), group, std::move(metavar), std::move(help), std::move(note));
  f.set = [n = f.name, field, check, single](TrainArgs& a, const std::string& v) {
    a.*field = checked_number(n, v, check, single);
  };
  f.get = [field](const TrainArgs& a) { return (a.*field).has_value() ? json(*(a.*field)) : json(nullptr); };
  return f;
}

/// A path or name; empty means "not given" (an empty value never gets this far).
Flag text(std::string name, Group group, std::string metavar, std::string help, std::string TrainArgs::*field,
          std::string note = "") {
  Flag f = head(std::move(name), group, std::move(metavar), std::move(help), std::move(note));
  f.set = [field](TrainArgs& a, const std::string& v) { a.*field = v; };
  f.get = [field](const TrainArgs& a) { return (a.*field).empty() ? json(nullptr) : json(a.*field); };
  return f;
}

Flag boolean(std::string name, Group group, std::string help, bool TrainArgs::*field, std::string note = "") {
  Flag f = head(std::move(name), group, "", std::move(help), std::move(note));
  f.set_on = [field](TrainArgs& a) { a.*field = true; };
  f.get = [field](const TrainArgs& a) { return json(a.*field); };
  return f;
}

template <typename E>
Flag choice(std::string name, Group group, std::string help, E TrainArgs::*field, Choices<E> choices) {
  Flag f = head(std::move(name), group, cli::choice_metavar(choices), std::move(help));
  f.set = [n = f.name, field, choices](TrainArgs& a, const std::string& v) { a.*field = cli::to_choice(n, v, choices); };
  f.get = [field, choices](const TrainArgs& a) {
    for (const auto& c : choices) {
      if (c.second == a.*field) return json(c.first);
    }
    return json(nullptr);
  };
  return f;
}

/// The multi-latent attention flags (Megatron-Core's names and defaults).
void add_mla_flags(std::vector<Flag>& v) {
  using G = Group;
  v.push_back(boolean("multi-latent-attention", G::Model,
                      "Multi-latent attention (DeepSeek-V2/V3): low-rank query and key/value projections with a "
                      "decoupled RoPE part; needs --position-embedding-type rope, not --group-query-attention. "
                      "With --qk-layernorm the latents are normalised (q_layernorm, kv_layernorm).",
                      &TrainArgs::multi_latent_attention));
  v.push_back(optional_integer("q-lora-rank", G::Model,
                               "Rank of the query's low-rank projection (linear_q_down_proj, linear_q_up_proj).",
                               &TrainArgs::q_lora_rank, kPositive, "no query compression: linear_q_proj"));
  v.push_back(integer("kv-lora-rank", G::Model, "Rank of the keys' and values' low-rank projection.",
                      &TrainArgs::kv_lora_rank, kPositive));
  v.push_back(integer("qk-head-dim", G::Model, "Each query and key head's dims without RoPE.",
                      &TrainArgs::qk_head_dim, kPositive));
  v.push_back(integer("qk-pos-emb-head-dim", G::Model,
                      "Each query and key head's RoPE dims (one RoPE key shared by all heads).",
                      &TrainArgs::qk_pos_emb_head_dim, kPositive));
  v.push_back(integer("v-head-dim", G::Model, "Each value head's dims.", &TrainArgs::v_head_dim, kPositive));
}

/// The MoE flags (Megatron-Core's "moe" argument group).
void add_moe_flags(std::vector<Flag>& v) {
  using G = Group;
  v.push_back(integer("num-experts", G::Moe,
                      "Routed experts E of every MoE layer (Megatron-Core's MoE: a router picks --moe-router-topk "
                      "of them per token); 0 means a dense model (Megatron's None).",
                      &TrainArgs::num_experts, kNonNegative));
  Flag freq = head("moe-layer-freq", G::Moe, "N|PATTERN",
                   "Which layers are MoE: an integer N, every N-th layer from layer 0 (1: all), or Megatron's list "
                   "pattern of 1 (MoE) and 0 (dense) per layer, e.g. \"([0]*3+[1]*1)*3\" or \"[1,0,1]\" (read "
                   "without eval: digits, ',', '[', ']', '(', ')', '+', '*').");
  freq.set = [](TrainArgs& a, const std::string& value) {
    parse_moe_layer_freq(value, 0);  // the syntax now; the length against --num-layers later
    a.moe_layer_freq = value;
  };
  freq.get = [](const TrainArgs& a) { return json(a.moe_layer_freq); };
  v.push_back(std::move(freq));
  v.push_back(optional_integer("moe-ffn-hidden-size", G::Moe, "Hidden size of each routed expert's MLP.",
                               &TrainArgs::moe_ffn_hidden_size, kPositive, "ffn-hidden-size"));
  v.push_back(optional_integer("moe-shared-expert-intermediate-size", G::Moe,
                               "Total hidden size of the shared experts every token passes through "
                               "(num_shared_experts * each one's width), split over t like a dense MLP.",
                               &TrainArgs::moe_shared_expert_intermediate_size, kPositive, "no shared expert"));
  v.push_back(boolean("moe-shared-expert-gate", G::Moe,
                      "Scale the shared experts' output by sigmoid(x . gate_weight) (Qwen2-MoE's shared expert gate).",
                      &TrainArgs::moe_shared_expert_gate));
  v.push_back(integer("moe-router-topk", G::Moe, "Experts k each token is routed to, <= --num-experts.",
                      &TrainArgs::moe_router_topk, kPositive));
  v.push_back(choice("moe-router-score-function", G::Moe,
                     "softmax: the routing probabilities are a softmax of the router's logits; sigmoid: each "
                     "expert's sigmoid, the top k renormalised to sum to 1 (DeepSeek-V3).",
                     &TrainArgs::moe_router_score_function,
                     Choices<MoeScoreFunction>{{"softmax", MoeScoreFunction::Softmax},
                                               {"sigmoid", MoeScoreFunction::Sigmoid}}));
  v.push_back(boolean("moe-router-pre-softmax", G::Moe,
                      "Softmax over all E logits before the top-k selection (the probabilities are not "
                      "renormalised: Qwen2-MoE's and OLMoE's norm_topk_prob false); by default the softmax is over "
                      "the k selected logits. Needed with --moe-router-topk 1. No effect with sigmoid, as Megatron's.",
                      &TrainArgs::moe_router_pre_softmax));
  v.push_back(optional_number("moe-router-topk-scaling-factor", G::Moe, "X",
                              "Multiply the top-k routing probabilities by X.",
                              &TrainArgs::moe_router_topk_scaling_factor, kPositive, true, "no scaling"));
  v.push_back(optional_integer("moe-router-num-groups", G::Moe,
                               "Group-limited routing: the experts form this many equal groups (e.g. e, DeepSeek-V2's "
                               "device-limited routing); needs --moe-router-group-topk.",
                               &TrainArgs::moe_router_num_groups, kPositive, "none"));
  v.push_back(optional_integer("moe-router-group-topk", G::Moe,
                               "Groups each token may use: the groups with the largest sums of their top "
                               "k / group-topk scores; k must be divisible by it.",
                               &TrainArgs::moe_router_group_topk, kPositive, "none"));
  v.push_back(boolean("moe-router-enable-expert-bias", G::Moe,
                      "Aux-loss-free balancing (DeepSeek-V3): a per-expert bias added to the scores for the top-k "
                      "selection only, moved after each step by --moe-router-bias-update-rate times the sign of "
                      "the global batch's mean load minus the expert's load. Needs --moe-router-score-function "
                      "sigmoid.",
                      &TrainArgs::moe_router_enable_expert_bias));
  v.push_back(number("moe-router-bias-update-rate", G::Moe, "X",
                     "The expert bias's step per iteration (--moe-router-enable-expert-bias).",
                     &TrainArgs::moe_router_bias_update_rate, kNonNegative, true));
  Flag dtype = head("moe-router-dtype", G::Moe, "{fp32}",
                    "The router's arithmetic: ptdp's router (logits, scores, top-k, the aux and z losses and the "
                    "combine weights) always computes in fp32, which is all this flag accepts (Megatron's fp64 is "
                    "not supported).",
                    "fp32 always");
  dtype.set = [](TrainArgs& a, const std::string& value) {
    if (value != "fp32") {
      bad_value("moe-router-dtype", value,
                "is not supported: ptdp's router computes in fp32 always, the only value accepted (Megatron's "
                "fp64 is not)");
    }
    a.moe_router_dtype = value;
  };
  dtype.get = [](const TrainArgs& a) { return a.moe_router_dtype.empty() ? json(nullptr) : json(a.moe_router_dtype); };
  v.push_back(std::move(dtype));
  v.push_back(choice("moe-router-load-balancing-type", G::Moe,
                     "aux_loss: GShard's and Switch's load-balancing loss over each microbatch; seq_aux_loss: "
                     "DeepSeek-V2's, per sample; global_aux_loss: Megatron's, the loads summed over the data-parallel "
                     "replicas and averaged over the step's microbatches so far (so it depends on d); none: no loss.",
                     &TrainArgs::moe_router_load_balancing_type,
                     Choices<MoeLoadBalancing>{{"aux_loss", MoeLoadBalancing::AuxLoss},
                                               {"seq_aux_loss", MoeLoadBalancing::SeqAuxLoss},
                                               {"global_aux_loss", MoeLoadBalancing::GlobalAuxLoss},
                                               {"none", MoeLoadBalancing::None}}));
  v.push_back(number("moe-aux-loss-coeff", G::Moe, "X", "Coefficient of the load-balancing loss (1e-2 is a start).",
                     &TrainArgs::moe_aux_loss_coeff, kNonNegative, true));
  v.push_back(optional_number("moe-z-loss-coeff", G::Moe, "X",
                              "Coefficient of the router z-loss (ST-MoE; 1e-3 is a start).",
                              &TrainArgs::moe_z_loss_coeff, kNonNegative, true, "no z-loss"));
  Flag capacity = head("moe-expert-capacity-factor", G::Moe, "X",
                       "Each expert takes at most X * tokens * k / E tokens of a microbatch, the rest dropped "
                       "(docs/moe.md gives the rule, the same on every layout); a negative value means dropless, as "
                       "Megatron's.",
                       "dropless");
  capacity.set = [](TrainArgs& a, const std::string& value) {
    const double x = checked_number("moe-expert-capacity-factor", value, kAny, true);
    if (x == 0) bad_value("moe-expert-capacity-factor", value, "drops every token; leave the flag out for dropless");
    a.moe_expert_capacity_factor = x < 0 ? std::nullopt : std::optional<double>(x);
  };
  capacity.get = [](const TrainArgs& a) {
    return a.moe_expert_capacity_factor ? json(*a.moe_expert_capacity_factor) : json(nullptr);
  };
  v.push_back(std::move(capacity));
  v.push_back(choice("moe-token-drop-policy", G::Moe,
                     "With a capacity factor, which tokens an expert keeps: probs, the highest routing "
                     "probabilities; position, the first ones of the microbatch.",
                     &TrainArgs::moe_token_drop_policy,
                     Choices<MoeDropPolicy>{{"probs", MoeDropPolicy::Probs}, {"position", MoeDropPolicy::Position}}));
  v.push_back(boolean("moe-pad-expert-input-to-capacity", G::Moe,
                      "Pad each expert's tokens to its capacity (needs --moe-expert-capacity-factor).",
                      &TrainArgs::moe_pad_expert_input_to_capacity));
  v.push_back(choice("moe-token-dispatcher-type", G::Moe,
                     "How tokens reach their experts' ranks: alltoall, all-to-all-v exchanges over the e ranks; "
                     "allgather, every token gathered over the e * etp ranks. The results are the same (Megatron's "
                     "default is allgather; ptdp's alltoall is Megatron's advice with expert parallelism).",
                     &TrainArgs::moe_token_dispatcher_type,
                     Choices<MoeDispatcher>{{"alltoall", MoeDispatcher::AllToAll},
                                            {"allgather", MoeDispatcher::AllGather}}));
  v.push_back(boolean("moe-layer-recompute", G::Moe,
                      "Recompute each MoE layer in the backward (Megatron's deprecated spelling of "
                      "--recompute-granularity selective --recompute-modules moe, which it also turns on).",
                      &TrainArgs::moe_layer_recompute));
  v.push_back(optional_integer("moe-router-group-score-topk", G::Moe,
                               "[ptdp] Group-limited routing: score each group by the sum of its M best scores "
                               "instead of its top k / group-topk (Megatron's). 1: the group's maximum (DeepSeek-V2's "
                               "group_limited_greedy); 2: its top-2 sum (DeepSeek-V3's noaux_tc); k need not be "
                               "divisible by --moe-router-group-topk then.",
                               &TrainArgs::moe_router_group_score_topk, kPositive, "k / group-topk"));
  v.push_back(optional_integer("moe-router-topk-limited-devices", G::Moe,
                               "Device-limited routing (DeepSeek-V2; Megatron's deprecated flag): each token uses the "
                               "experts of at most M of the --moe-router-num-groups groups, each group the experts of "
                               "one rank at that expert-parallel size (unset: --expert-model-parallel-size, as "
                               "Megatron; the checkpoint records it). Every e dividing the groups trains the same "
                               "model, the serial run included with --moe-router-num-groups given; others are "
                               "refused. Replaces --moe-router-group-topk.",
                               &TrainArgs::moe_router_topk_limited_devices, kPositive, "none"));
}

/// Muon's flags and QK-clip's (Megatron's names; ptdp's defaults where they differ, said in the
/// help). Each is read only with --optimizer muon (check_muon).
void add_muon_flags(std::vector<Flag>& v) {
  using G = Group;
  v.push_back(number("muon-momentum", G::Optimizer, "X",
                     "[--optimizer muon] Muon's momentum, in [0, 1): the buffer moves by 1 - X towards each "
                     "gradient (Megatron's default is 0.9; ptdp's is PyTorch's torch.optim.Muon's).",
                     &TrainArgs::muon_momentum, kProbability, true));
  v.push_back(boolean("muon-nesterov", G::Optimizer,
                      "[--optimizer muon] Nesterov momentum: orthogonalise the gradient moved by the momentum "
                      "towards the buffer instead of the buffer (PyTorch's default is on).",
                      &TrainArgs::muon_nesterov));
  v.push_back(boolean("muon-use-nesterov", G::Optimizer, "Megatron's other spelling of --muon-nesterov.",
                      &TrainArgs::muon_nesterov));
  v.push_back(integer("muon-num-ns-steps", G::Optimizer,
                      "[--optimizer muon] Newton-Schulz iterations per orthogonalisation, in [1, 100].",
                      &TrainArgs::muon_num_ns_steps, kNsSteps));
  v.push_back(choice("muon-coefficient-type", G::Optimizer,
                     "[--optimizer muon] The Newton-Schulz coefficient sets (Megatron's choices), used cyclically "
                     "over the iterations: quintic; simple, the one set (3.4445, -4.775, 2.0315) of PyTorch's "
                     "torch.optim.Muon; polar_express; aol.",
                     &TrainArgs::muon_coefficient_type,
                     Choices<NsCoefficients>{{"quintic", NsCoefficients::Quintic},
                                             {"simple", NsCoefficients::Simple},
                                             {"polar_express", NsCoefficients::PolarExpress},
                                             {"aol", NsCoefficients::Aol}}));
  v.push_back(choice("muon-fp32-matmul-prec", G::Optimizer,
                     "[--optimizer muon] Precision of the Newton-Schulz products: highest, fp32; high, TF32 on CUDA "
                     "(fp32 on the CPU); medium, bf16 operands and results with fp32 accumulation, as PyTorch's "
                     "torch.optim.Muon. Megatron's default is medium; ptdp's is highest.",
                     &TrainArgs::muon_fp32_matmul_prec,
                     Choices<NsPrecision>{{"highest", NsPrecision::Highest},
                                          {"high", NsPrecision::High},
                                          {"medium", NsPrecision::Medium}}));
  v.push_back(choice("muon-scale-mode", G::Optimizer,
                     "[--optimizer muon] Scale of the orthogonalised update of an [out, in] matrix: spectral "
                     "sqrt(max(out, in)); unit_rms_norm sqrt(out / in); shape_scaling sqrt(max(1, out / in)); "
                     "times --muon-extra-scale-factor. PyTorch's adjust_lr_fn \"original\" is shape_scaling with "
                     "factor 1, \"match_rms_adamw\" spectral with factor 0.2.",
                     &TrainArgs::muon_scale_mode,
                     Choices<MuonScaleMode>{{"spectral", MuonScaleMode::Spectral},
                                            {"unit_rms_norm", MuonScaleMode::UnitRmsNorm},
                                            {"shape_scaling", MuonScaleMode::ShapeScaling}}));
  v.push_back(number("muon-extra-scale-factor", G::Optimizer, "X",
                     "[--optimizer muon] A factor on the update's scale, > 0 (0.2 with spectral matches AdamW's "
                     "update RMS, Moonlight's rule).",
                     &TrainArgs::muon_extra_scale_factor, kPositive, true));
  v.push_back(boolean("muon-split-qkv", G::Optimizer,
                      "[ptdp] [--optimizer muon] Orthogonalise q, k and v (per query group) and SwiGLU's gate and "
                      "up as separate matrices, as a model with separate projections would (the default; Megatron "
                      "has only --muon-no-split-qkv).",
                      &TrainArgs::muon_split_qkv, "unless --muon-no-split-qkv"));
  Flag no_split = head("muon-no-split-qkv", G::Optimizer, "",
                       "[--optimizer muon] Orthogonalise linear_qkv and SwiGLU's linear_fc1 each as one matrix.");
  no_split.set_on = [](TrainArgs& a) { a.muon_split_qkv = false; };
  no_split.get = [](const TrainArgs& a) { return json(!a.muon_split_qkv); };
  v.push_back(std::move(no_split));
  v.push_back(choice("muon-tp-mode", G::Optimizer,
                     "[--optimizer muon] A matrix split over the tensor group: distributed, orthogonalised as the "
                     "whole matrix, its Newton-Schulz work spread over the ranks; duplicated, the whole matrix on "
                     "every tensor rank (the same update); blockwise, each rank's piece on its own (a different "
                     "update, which depends on t). Megatron's default is blockwise; ptdp's is distributed.",
                     &TrainArgs::muon_tp_mode,
                     Choices<MuonTpMode>{{"distributed", MuonTpMode::Distributed},
                                         {"duplicated", MuonTpMode::Duplicated},
                                         {"blockwise", MuonTpMode::Blockwise}}));
  Flag scalar = head("muon-scalar-optimizer", G::Optimizer, "{adam}",
                     "[--optimizer muon] The optimizer of the parameters Muon does not take (the embeddings, the "
                     "output layer, norms and biases): adam, AdamW with --adam-beta1/2, --adam-eps, --lr and "
                     "--weight-decay. Megatron's lion is not built into ptdp.");
  scalar.set = [](TrainArgs& a, const std::string& value) {
    if (value == "lion") {
      bad_value("muon-scalar-optimizer", value,
                "is not built into ptdp (Megatron's other choice); the scalar optimizer is adam");
    }
    if (value != "adam") bad_value("muon-scalar-optimizer", value, "is not one of adam");
    a.muon_scalar_optimizer = value;
  };
  scalar.get = [](const TrainArgs& a) { return json(a.muon_scalar_optimizer); };
  v.push_back(std::move(scalar));
  v.push_back(boolean("qk-clip", G::Optimizer,
                      "[--optimizer muon] QK-clip (MuonClip, Kimi K2): after each step, the query and key weights "
                      "of every head whose largest attention logit exceeded --qk-clip-threshold are scaled down "
                      "by (threshold / max logit)^alpha and ^(1 - alpha).",
                      &TrainArgs::qk_clip));
  v.push_back(number("qk-clip-threshold", G::Optimizer, "X",
                     "[--qk-clip] The largest attention logit a head may keep, > 0.", &TrainArgs::qk_clip_threshold,
                     kPositive, true));
  v.push_back(number("qk-clip-alpha", G::Optimizer, "X",
                     "[--qk-clip] The share of the clip the query weights take, in [0, 1] (the keys take the rest).",
                     &TrainArgs::qk_clip_alpha, kClosedUnitInterval, true));
}

/// Megatron's --split: up to three non-negative weights separated by ',' or '/', padded with 0
/// (as Megatron does); returned as "w0,w1,w2" with each weight as written.
std::string normalise_split(const std::string& value) {
  const std::string flag = "split";
  const std::string want = "is not three non-negative weights separated by ',' or '/' (e.g. 969,30,1)";
  const char separator = value.find(',') != std::string::npos ? ',' : '/';
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = value.find(separator, start);
    std::string part = value.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const std::size_t lo = part.find_first_not_of(" \t");
    const std::size_t hi = part.find_last_not_of(" \t");
    part = lo == std::string::npos ? std::string() : part.substr(lo, hi - lo + 1);
    parts.push_back(part);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (parts.size() > 3) bad_value(flag, value, str_cat("has ", std::to_string(parts.size()), " weights; at most 3"));
  double total = 0;
  for (const std::string& p : parts) {
    double w = 0;
    if (cli::read_whole(p, w) != std::errc() || !std::isfinite(w) || w < 0) {
      bad_value(flag, value, want);
    }
    total += w;
  }
  if (total <= 0) bad_value(flag, value, "has only zero weights; at least one split needs samples");
  while (parts.size() < 3) parts.push_back("0");
  return str_cat(parts[0], ",", parts[1], ",", parts[2]);
}

std::vector<Flag> make_flags() {
  using G = Group;
  std::vector<Flag> v;
  // Model.
  Flag preset = head("model-preset", G::Model, "NAME",
                     str_cat("[ptdp] Start from a named model: its shape and architecture fill the model flags, and "
                             "the model flags given on the command line override them, wherever they stand. "
                             "Presets: ",
                             model_preset_names(), "."));
  preset.set = [](TrainArgs& a, const std::string& v) {
    if (!find_model_preset(v)) bad_value("model-preset", v, str_cat("is not a preset; the presets are ", model_preset_names()));
    a.model_preset = v;
  };
  preset.get = [](const TrainArgs& a) { return a.model_preset.empty() ? json(nullptr) : json(a.model_preset); };
  v.push_back(std::move(preset));
  v.push_back(integer("num-layers", G::Model, "Transformer layers.", &TrainArgs::num_layers, kPositive));
  v.push_back(integer("hidden-size", G::Model, "Hidden size h.", &TrainArgs::hidden_size, kPositive));
  v.push_back(integer("ffn-hidden-size", G::Model,
                      "MLP hidden size; 0 means 4 * hidden-size, or with --swiglu Megatron's "
                      "int(8 * hidden-size / 3 / 64) * 64.",
                      &TrainArgs::ffn_hidden_size, kNonNegative));
  v.push_back(integer("num-attention-heads", G::Model,
                      "Attention heads a; must divide hidden-size unless --kv-channels is given.",
                      &TrainArgs::num_attention_heads, kPositive));
  v.push_back(integer("seq-length", G::Model, "Tokens per sample s.", &TrainArgs::seq_length, kPositive));
  v.push_back(integer("max-position-embeddings", G::Model,
                      "Rows of the learned position table, >= seq-length; 0 means seq-length.",
                      &TrainArgs::max_position_embeddings, kNonNegative));
  v.push_back(integer("vocab-size", G::Model, "True vocabulary size V; every token id must be below it.",
                      &TrainArgs::vocab_size, kPositive));
  v.push_back(integer("make-vocab-size-divisible-by", G::Model,
                      "Pad the vocabulary to a multiple of this times tensor-model-parallel-size.",
                      &TrainArgs::make_vocab_size_divisible_by, kPositive));
  v.push_back(number("init-method-std", G::Model, "X",
                     "Standard deviation of the normal weight init (output projections: X / sqrt(2 * num-layers)).",
                     &TrainArgs::init_method_std, kPositive, true));
  v.push_back(number("hidden-dropout", G::Model, "P", "Dropout probability after attention and MLP, in [0, 1).",
                     &TrainArgs::hidden_dropout, kProbability, true));
  v.push_back(number("attention-dropout", G::Model, "P", "Dropout probability of the attention weights, in [0, 1).",
                     &TrainArgs::attention_dropout, kProbability, true));
  v.push_back(number("norm-epsilon", G::Model, "X", "Epsilon of every LayerNorm or RMSNorm.",
                     &TrainArgs::layernorm_epsilon, kPositive, true));
  v.push_back(number("layernorm-epsilon", G::Model, "X", "Megatron's older name of --norm-epsilon.",
                     &TrainArgs::layernorm_epsilon, kPositive, true));
  v.push_back(boolean("untie-embeddings-and-output-weights", G::Model,
                      "Give the LM head its own weights instead of reusing the word embedding.",
                      &TrainArgs::untie_embeddings_and_output_weights));
  v.push_back(choice("recompute-granularity", G::Model,
                     "Activation recomputation: full re-runs each layer's forward before its backward, selective "
                     "only the attention probabilities; none keeps every activation.",
                     &TrainArgs::recompute_granularity,
                     Choices<Recompute>{{"none", Recompute::None}, {"full", Recompute::Full},
                                        {"selective", Recompute::Selective}}));
  Flag modules = head("recompute-modules", G::Model, "MODULE ...",
                      "With --recompute-granularity selective, what is recomputed: core_attn, the attention "
                      "probabilities; moe, each MoE layer (Megatron's names; its other modules are not ptdp's).",
                      "core_attn");
  modules.set = [](TrainArgs& a, const std::string& value) {
    for (const std::string& word : split_words(value)) {
      if (word != "core_attn" && word != "moe") {
        bad_value("recompute-modules", value,
                  str_cat("names '", word, "'; ptdp recomputes core_attn and moe (Megatron's other modules are not "
                                           "ptdp's)"));
      }
    }
    a.recompute_modules = value;
  };
  modules.get = [](const TrainArgs& a) {
    return a.recompute_modules.empty() ? json(nullptr) : json(split_words(a.recompute_modules));
  };
  v.push_back(std::move(modules));
  v.push_back(choice("attention-backend", G::Model,
                     "fused: the device's fused (flash) attention kernel, which never stores the s x s scores; "
                     "unfused: GEMM, scale + causal mask + softmax, dropout, GEMM; auto: fused where the device "
                     "has a kernel for the precision and head dim (the CPU: always; CUDA: bf16/fp16, head dim 64 "
                     "or 128).",
                     &TrainArgs::attention_backend,
                     Choices<AttentionImpl>{{"auto", AttentionImpl::Auto}, {"fused", AttentionImpl::Fused},
                                            {"unfused", AttentionImpl::Unfused}}));
  // The Llama family's options.
  v.push_back(choice("normalization", G::Model,
                     "The norm of every norm layer (input, pre-MLP, final, q/k): LayerNorm, or RMSNorm (no bias).",
                     &TrainArgs::normalization,
                     Choices<Normalization>{{"LayerNorm", Normalization::LayerNorm},
                                            {"RMSNorm", Normalization::RMSNorm}}));
  v.push_back(boolean("swiglu", G::Model,
                      "SwiGLU MLP: linear_fc1 is [2 * ffn-hidden-size, hidden-size], the gate rows then the up "
                      "rows, and the activation silu(gate) * up instead of GeLU.",
                      &TrainArgs::swiglu));
  v.push_back(choice("position-embedding-type", G::Model,
                     "learned_absolute: a learned position table (GPT-2); rope: rotary embeddings of each query and "
                     "key head (Llama); none: no position information.",
                     &TrainArgs::position_embedding_type,
                     Choices<PositionEmbedding>{{"learned_absolute", PositionEmbedding::LearnedAbsolute},
                                                {"rope", PositionEmbedding::Rope},
                                                {"none", PositionEmbedding::None}}));
  v.push_back(number("rotary-base", G::Model, "X", "RoPE's base theta (Llama 3: 500000).", &TrainArgs::rotary_base,
                     kPositive, true));
  v.push_back(number("rotary-percent", G::Model, "P",
                     "Share of each head's dims that RoPE rotates, in (0, 1]; the rotated dims must be even.",
                     &TrainArgs::rotary_percent, kUnitInterval, true));
  v.push_back(boolean("use-rope-scaling", G::Model,
                      "Llama 3.1's scaling of the rotary frequencies (needs --position-embedding-type rope).",
                      &TrainArgs::use_rope_scaling));
  v.push_back(number("rope-scaling-factor", G::Model, "X", "The factor of --use-rope-scaling, >= 1.",
                     &TrainArgs::rope_scaling_factor, kAtLeastOne, true));
  v.push_back(number("rope-scaling-low-freq-factor", G::Model, "X",
                     "[ptdp] Llama 3.1's low_freq_factor of --use-rope-scaling: wavelengths above "
                     "original-max-position-embeddings / X are divided by the factor.",
                     &TrainArgs::rope_scaling_low_freq_factor, kPositive, true));
  v.push_back(number("rope-scaling-high-freq-factor", G::Model, "X",
                     "[ptdp] Llama 3.1's high_freq_factor of --use-rope-scaling, above the low one: wavelengths "
                     "below original-max-position-embeddings / X are kept, those between interpolated.",
                     &TrainArgs::rope_scaling_high_freq_factor, kPositive, true));
  v.push_back(integer("rope-scaling-original-max-position-embeddings", G::Model,
                      "[ptdp] The context length the rotary frequencies were trained for (Llama 3.1's "
                      "original_max_position_embeddings), for --use-rope-scaling.",
                      &TrainArgs::rope_scaling_original_max_position_embeddings, kPositive));
  v.push_back(choice("rope-type", G::Model,
                     "rope: the rotary frequencies as --rotary-base gives them; yarn: YaRN's scaling of them by "
                     "--rotary-scaling-factor (needs --position-embedding-type rope).",
                     &TrainArgs::rope_type, Choices<RopeType>{{"rope", RopeType::Rope}, {"yarn", RopeType::Yarn}}));
  v.push_back(number("rotary-scaling-factor", G::Model, "X",
                     "YaRN's factor (--rope-type yarn): the context is stretched X times over "
                     "--original-max-position-embeddings.",
                     &TrainArgs::rotary_scaling_factor, kPositive, true));
  v.push_back(number("mscale", G::Model, "X",
                     "YaRN's mscale: with --mscale-all-dim, cos and sin are scaled by (0.1 X ln(factor) + 1) / "
                     "(0.1 mscale-all-dim ln(factor) + 1).",
                     &TrainArgs::mscale, kPositive, true));
  v.push_back(number("mscale-all-dim", G::Model, "X",
                     "YaRN's mscale_all_dim; 0: unset (cos and sin scaled by 0.1 ln(factor) + 1). Multi-latent "
                     "attention also multiplies its softmax scale by (0.1 X ln(factor) + 1)^2.",
                     &TrainArgs::mscale_all_dim, kNonNegative, true));
  v.push_back(integer("original-max-position-embeddings", G::Model,
                      "The context length the rotary frequencies were trained for, YaRN's "
                      "original_max_position_embeddings (--rope-type yarn).",
                      &TrainArgs::original_max_position_embeddings, kPositive));
  v.push_back(number("beta-fast", G::Model, "X",
                     "YaRN's beta_fast: frequencies turning more than X times over the original context are kept.",
                     &TrainArgs::beta_fast, kPositive, true));
  v.push_back(number("beta-slow", G::Model, "X",
                     "YaRN's beta_slow, below --beta-fast: frequencies turning fewer than X times are divided by "
                     "the factor, those between ramped.",
                     &TrainArgs::beta_slow, kPositive, true));
  v.push_back(boolean("no-yarn-correction-range-round-to-int", G::Model,
                      "YaRN's ramp between beta_fast's and beta_slow's dims unrounded (Hugging Face's truncate "
                      "false).",
                      &TrainArgs::no_yarn_correction_range_round_to_int));
  v.push_back(boolean("group-query-attention", G::Model,
                      "Grouped-query attention: --num-query-groups key/value heads, each shared by "
                      "num-attention-heads / num-query-groups query heads.",
                      &TrainArgs::group_query_attention));
  v.push_back(optional_integer("num-query-groups", G::Model,
                               "Key/value heads g with --group-query-attention (only with it): g must divide "
                               "num-attention-heads and tensor-model-parallel-size must divide g; 1 is multi-query "
                               "attention.",
                               &TrainArgs::num_query_groups, kPositive, "1 with --group-query-attention"));
  v.push_back(optional_integer("kv-channels", G::Model, "Head dim of attention.", &TrainArgs::kv_channels, kPositive,
                               "hidden-size / num-attention-heads"));
  v.push_back(boolean("disable-bias-linear", G::Model, "No linear layer has a bias.",
                      &TrainArgs::disable_bias_linear));
  v.push_back(boolean("add-qkv-bias", G::Model,
                      "Keep the bias of linear_qkv even with --disable-bias-linear (Qwen2).", &TrainArgs::add_qkv_bias));
  v.push_back(boolean("qk-layernorm", G::Model,
                      "A norm (of --normalization's kind) over each query and key head before attention.",
                      &TrainArgs::qk_layernorm));
  v.push_back(boolean("qk-layernorm-across-heads", G::Model,
                      "[ptdp] With --qk-layernorm and RMSNorm: the q and k norms are over a token's whole query and "
                      "key projections (weights [heads x head dim], [query groups x head dim]) instead of each head "
                      "(OLMo 2, OLMoE).",
                      &TrainArgs::qk_layernorm_across_heads));
  add_moe_flags(v);
  add_mla_flags(v);
  v.push_back(integer("mtp-num-layers", G::Model,
                      "Multi-token prediction depth D (DeepSeek-V3's MTP): D modules after the decoder on the last "
                      "pipeline stage, module k predicting the token k + 1 ahead with the shared embedding and "
                      "output layer (training only). Needs --position-embedding-type rope or none. 0: none.",
                      &TrainArgs::mtp_num_layers, kNonNegative));
  v.push_back(number("mtp-loss-scaling-factor", G::Model, "X",
                     "The MTP depths' losses enter the gradient as X / D times their sum (logged apart as "
                     "\"mtp_k loss\"; the lm loss excludes them).",
                     &TrainArgs::mtp_loss_scaling_factor, kNonNegative, true));
  // Parallelism.
  v.push_back(integer("tensor-model-parallel-size", G::Parallel, "Tensor-parallel size t.",
                      &TrainArgs::tensor_model_parallel_size, kPositive));
  v.push_back(integer("pipeline-model-parallel-size", G::Parallel,
                      "Pipeline-parallel size p; must divide num-layers. The data-parallel size is "
                      "world / (t * p).",
                      &TrainArgs::pipeline_model_parallel_size, kPositive));
  v.push_back(optional_integer("num-layers-per-virtual-pipeline-stage", G::Parallel,
                               "Layers per model chunk: v = num-layers / (p * N) chunks per pipeline rank, run "
                               "with the interleaved 1F1B schedule when v > 1.",
                               &TrainArgs::num_layers_per_virtual_pipeline_stage, kPositive, "v = 1"));
  v.push_back(optional_integer("num-virtual-stages-per-pipeline-rank", G::Parallel,
                               "Model chunks per pipeline rank v, given directly (exclusive with "
                               "--num-layers-per-virtual-pipeline-stage, and the way to give v with uneven first or "
                               "last stages); interleaved 1F1B when v > 1.",
                               &TrainArgs::num_virtual_stages_per_pipeline_rank, kPositive, "v = 1"));
  v.push_back(text("pipeline-model-parallel-layout", G::Parallel, "LAYOUT",
                   "Megatron's custom pipeline layout: one entry per model chunk in chunk order (c = vp_stage * p + "
                   "pp_rank), separated by '|', of E (embedding), t (decoder layer) and L (loss); x*n repeats a "
                   "character and (...)*n a group, commas are cosmetic. E must open it and L close it; its entries / "
                   "p give v. E.g. \"Et*3|(tt|)*2,L\" at p = 2.",
                   &TrainArgs::pipeline_model_parallel_layout));
  v.push_back(optional_integer("decoder-first-pipeline-num-layers", G::Parallel,
                               "Transformer layers of the first pipeline stage (which also holds the embedding); the "
                               "stages without a count of their own share the other layers evenly, and each stage "
                               "splits its layers evenly over its v chunks (Megatron's uneven pipeline).",
                               &TrainArgs::decoder_first_pipeline_num_layers, kPositive, "an even split"));
  v.push_back(optional_integer("decoder-last-pipeline-num-layers", G::Parallel,
                               "Transformer layers of the last pipeline stage (which also holds the output layer and "
                               "the loss); as --decoder-first-pipeline-num-layers.",
                               &TrainArgs::decoder_last_pipeline_num_layers, kPositive, "an even split"));
  v.push_back(choice("pipeline-schedule", G::Parallel,
                     "[ptdp] Pipeline schedule: 1F1B (PipeDream-Flush), GPipe, or zero-bubble ZB-H1; interleaved "
                     "1F1B whenever v > 1 with 1f1b; interleaved-zb, the interleaved zero-bubble schedule (v > 1); "
                     "zb-v and dualpipev, ZB-V and DeepSeek's DualPipeV, which place 2 model chunks per rank in a "
                     "V (rank r holds chunks r and 2p-1-r; v = 2 unless given).",
                     &TrainArgs::pipeline_schedule,
                     Choices<ScheduleKind>{{"1f1b", ScheduleKind::OneFOneB},
                                           {"gpipe", ScheduleKind::GPipe},
                                           {"zb-h1", ScheduleKind::ZeroBubbleH1},
                                           {"zb-v", ScheduleKind::ZeroBubbleV},
                                           {"dualpipev", ScheduleKind::DualPipeV},
                                           {"interleaved-zb", ScheduleKind::InterleavedZeroBubble}}));
  v.push_back(boolean("sequence-parallel", G::Parallel,
                      "Sequence parallelism (Korthikanti et al. 2022): with t > 1 the norms, dropouts and residuals "
                      "work on s/t of the sequence on each tensor rank, so activation memory shrinks with t; the "
                      "tensor-parallel blocks all-gather the sequence and reduce-scatter their outputs. The results "
                      "equal those without it. Needs --seq-length divisible by t.",
                      &TrainArgs::sequence_parallel));
  v.push_back(integer("context-parallel-size", G::Parallel,
                      "Context parallelism c: each sample's sequence is cut into 2c chunks and context rank r "
                      "holds chunks r and 2c-1-r (causal load balance); the layers outside attention work on s/c "
                      "positions, attention passes the keys and values around the ring of c ranks. Megatron's "
                      "rank order (tensor, context, data, pipeline); the data-parallel size is world / (t * c * p) "
                      "and the gradients are reduced over the d * c ranks. Needs --seq-length divisible by 2c.",
                      &TrainArgs::context_parallel_size, kPositive));
  v.push_back(integer("expert-model-parallel-size", G::Parallel,
                      "Expert parallelism e: each MoE layer's experts are split over e ranks of a pipeline stage "
                      "(Megatron-Core's MoE parallel folding: the stage's t * c * d ranks, regrouped as etp * e * "
                      "edp for the experts); e must divide --num-experts and e * etp the t * c * d ranks.",
                      &TrainArgs::expert_model_parallel_size, kPositive));
  v.push_back(optional_integer("expert-tensor-parallel-size", G::Parallel,
                               "Tensor parallelism etp of each expert's linears; expert gradients are reduced over "
                               "the edp = t * c * d / (e * etp) ranks holding the same experts.",
                               &TrainArgs::expert_tensor_parallel_size, kPositive, "tensor-model-parallel-size"));
  v.push_back(boolean("use-distributed-optimizer", G::Parallel,
                      "Shard the optimizer state over the data-parallel group.",
                      &TrainArgs::use_distributed_optimizer));
  v.push_back(integer("ddp-bucket-size", G::Parallel,
                      "[ptdp] Gradient elements per data-parallel reduction bucket; 0 means one bucket per model "
                      "chunk.",
                      &TrainArgs::ddp_bucket_size, kNonNegative));
  v.push_back(boolean("overlap-grad-reduce", G::Parallel,
                      "Reduce each data-parallel gradient bucket as soon as the backward completes it, "
                      "overlapping the rest of the backward (bitwise the same results).",
                      &TrainArgs::overlap_grad_reduce));
  v.push_back(boolean("overlap-param-gather", G::Parallel,
                      "With --use-distributed-optimizer and --overlap-grad-reduce: all-gather the updated "
                      "weights bucket by bucket after the step, each waited for just before the next forward "
                      "first uses it (bitwise the same results).",
                      &TrainArgs::overlap_param_gather));
  // Training.
  v.push_back(integer("micro-batch-size", G::Training, "Samples per microbatch b.", &TrainArgs::micro_batch_size,
                      kPositive));
  v.push_back(integer("global-batch-size", G::Training,
                      "Samples per iteration B over all data-parallel replicas, a multiple of micro-batch-size; "
                      "0 means micro-batch-size * data-parallel size.",
                      &TrainArgs::global_batch_size, kNonNegative));
  v.push_back(integer("train-iters", G::Training, "Training iterations.", &TrainArgs::train_iters, kNonNegative));
  v.push_back(integer("exit-interval", G::Training,
                      "Stop after the first iteration divisible by N (saving a checkpoint first with --save); "
                      "0 means never.",
                      &TrainArgs::exit_interval, kNonNegative));
  v.push_back(integer("seed", G::Training, "Seed of weight init, dropout, mock data and data shuffling.",
                      &TrainArgs::seed, kAny));
  v.push_back(boolean("check-for-nan-in-loss-and-grad", G::Training,
                      "After the backward every rank checks its loss and its parameters' gradients (before and "
                      "after the data-parallel reduction); the first NaN (or Inf without dynamic loss scaling) "
                      "stops the run with exit status 4 and a message naming the rank, its tensor, data and "
                      "pipeline coordinates, the iteration and the parameter. Off by default (Megatron's is on).",
                      &TrainArgs::check_for_nan_in_loss_and_grad));
  v.push_back(integer("max-skipped-iterations", G::Training,
                      "[ptdp] Stop with exit status 3 after N consecutive skipped iterations (non-finite "
                      "gradients: a diverged run or a loss scale that cannot recover); 0 means never.",
                      &TrainArgs::max_skipped_iterations, kNonNegative));
  // Optimizer.
  v.push_back(choice("optimizer", G::Optimizer,
                     "adam is AdamW (decoupled weight decay); sgd has momentum; muon orthogonalises the momentum "
                     "of the hidden 2-D weights by Newton-Schulz iterations and gives the embeddings, the output "
                     "layer, norms and biases to --muon-scalar-optimizer (docs/guides/muon.md).",
                     &TrainArgs::optimizer,
                     Choices<OptimizerKind>{{"adam", OptimizerKind::Adam},
                                            {"sgd", OptimizerKind::Sgd},
                                            {"muon", OptimizerKind::Muon}}));
  v.push_back(number("lr", G::Optimizer, "X", "Peak learning rate.", &TrainArgs::lr, kNonNegative, false));
  v.push_back(number("min-lr", G::Optimizer, "X", "Learning rate at the end of the decay, <= lr.",
                     &TrainArgs::min_lr, kNonNegative, false));
  v.push_back(choice("lr-decay-style", G::Optimizer, "Decay from lr to min-lr after the warm-up.",
                     &TrainArgs::lr_decay_style,
                     Choices<LrDecayStyle>{{"constant", LrDecayStyle::Constant},
                                           {"linear", LrDecayStyle::Linear},
                                           {"cosine", LrDecayStyle::Cosine}}));
  v.push_back(integer("lr-warmup-iters", G::Optimizer, "Iterations of linear warm-up to lr.",
                      &TrainArgs::lr_warmup_iters, kNonNegative));
  v.push_back(optional_integer("lr-decay-iters", G::Optimizer, "Iteration at which min-lr is reached.",
                               &TrainArgs::lr_decay_iters, kNonNegative, "= train-iters"));
  v.push_back(number("weight-decay", G::Optimizer, "X", "Decoupled weight decay of the weights (not biases or norms).",
                     &TrainArgs::weight_decay, kNonNegative, true));
  v.push_back(number("clip-grad", G::Optimizer, "X", "Clip the global gradient L2 norm to this; 0 disables clipping.",
                     &TrainArgs::clip_grad, kNonNegative, true));
  v.push_back(number("adam-beta1", G::Optimizer, "X", "Adam's first-moment decay, in [0, 1).",
                     &TrainArgs::adam_beta1, kProbability, true));
  v.push_back(number("adam-beta2", G::Optimizer, "X", "Adam's second-moment decay, in [0, 1).",
                     &TrainArgs::adam_beta2, kProbability, true));
  v.push_back(number("adam-eps", G::Optimizer, "X", "Adam's epsilon, > 0.", &TrainArgs::adam_eps, kPositive, true));
  v.push_back(number("sgd-momentum", G::Optimizer, "X", "SGD momentum.", &TrainArgs::sgd_momentum, kNonNegative,
                     true));
  add_muon_flags(v);
  // Mixed precision.
  v.push_back(boolean("fp16", G::MixedPrecision, "Train in float16 with fp32 master weights and loss scaling.",
                      &TrainArgs::fp16));
  v.push_back(boolean("bf16", G::MixedPrecision, "Train in bfloat16 with fp32 master weights.", &TrainArgs::bf16));
  v.push_back(optional_number("loss-scale", G::MixedPrecision, "X",
                              "Constant loss scale (with --fp16 or --bf16) instead of dynamic scaling.",
                              &TrainArgs::loss_scale, kPositive, true, "dynamic with --fp16"));
  v.push_back(number("initial-loss-scale", G::MixedPrecision, "X", "Starting scale of dynamic loss scaling.",
                     &TrainArgs::initial_loss_scale, kPositive, true));
  v.push_back(number("min-loss-scale", G::MixedPrecision, "X", "Floor of dynamic loss scaling.",
                     &TrainArgs::min_loss_scale, kPositive, true));
  v.push_back(integer("loss-scale-window", G::MixedPrecision, "Clean iterations before the loss scale doubles.",
                      &TrainArgs::loss_scale_window, kPositive));
  v.push_back(integer("hysteresis", G::MixedPrecision, "Overflowing iterations before the loss scale halves.",
                      &TrainArgs::hysteresis, kPositive));
  // Data.
  v.push_back(boolean("mock-data", G::Data, "Synthetic tokens, a pure function of the seed.", &TrainArgs::mock_data,
                      "when neither --data-path nor --text-file is given"));
  v.push_back(text("data-path", G::Data, "PREFIX|W PREFIX ...",
                   "Megatron indexed data set PREFIX.idx / PREFIX.bin, pre-tokenized; or Megatron's blend: "
                   "WEIGHT PREFIX [WEIGHT PREFIX ...] (or PREFIX PREFIX ..., weighed by their sizes), each data set "
                   "split by --split and every split drawn from them by their weights (BlendedDataset).",
                   &TrainArgs::data_path));
  v.push_back(text("train-data-path", G::Data, "PREFIX|W PREFIX ...",
                   "The training split's own data sets: a prefix or a blend as --data-path, used whole (not split); "
                   "exclusive with --data-path.",
                   &TrainArgs::train_data_path));
  v.push_back(text("valid-data-path", G::Data, "PREFIX|W PREFIX ...",
                   "The validation split's own data sets, as --train-data-path.", &TrainArgs::valid_data_path));
  v.push_back(text("test-data-path", G::Data, "PREFIX|W PREFIX ...",
                   "The test split's own data sets, as --train-data-path.", &TrainArgs::test_data_path));
  v.push_back(text("text-file", G::Data, "PATH", "[ptdp] Plain text, one token per byte (needs vocab-size >= 256).",
                   &TrainArgs::text_file));
  Flag split = head("split", G::Data, "WEIGHTS",
                    "Train, validation and test weights, separated by ',' or '/'; missing ones are 0.");
  split.set = [](TrainArgs& a, const std::string& v) { a.split = normalise_split(v); };
  split.get = [](const TrainArgs& a) { return json(a.split); };
  v.push_back(std::move(split));
  Flag tokenizer = head("tokenizer-type", G::Data, "NAME",
                        "ByteLevel (bytes are tokens), NullTokenizer (ids as stored), GPT2BPETokenizer "
                        "(--vocab-file, --merge-file), HuggingFaceTokenizer or SentencePieceTokenizer "
                        "(--tokenizer-model); without --vocab-size the vocabulary is the tokenizer's.");
  tokenizer.set = [](TrainArgs& a, const std::string& v) {
    if (!tokenizer_type_from_name(v)) {
      bad_value("tokenizer-type", v,
                "is not one of ByteLevel, NullTokenizer, GPT2BPETokenizer, HuggingFaceTokenizer, "
                "SentencePieceTokenizer");
    }
    a.tokenizer_type = v;
  };
  tokenizer.get = [](const TrainArgs& a) { return a.tokenizer_type.empty() ? json(nullptr) : json(a.tokenizer_type); };
  v.push_back(std::move(tokenizer));
  v.push_back(text("vocab-file", G::Data, "PATH", "GPT2BPETokenizer's vocab.json.", &TrainArgs::vocab_file));
  v.push_back(text("merge-file", G::Data, "PATH", "GPT2BPETokenizer's merges.txt.", &TrainArgs::merge_file));
  v.push_back(text("tokenizer-model", G::Data, "PATH",
                   "HuggingFaceTokenizer's tokenizer.json or SentencePieceTokenizer's .model file.",
                   &TrainArgs::tokenizer_model));
  v.push_back(boolean("eod-mask-loss", G::Data,
                      "Leave out of the loss every position whose input is the end-of-document token (its "
                      "prediction of the next document's first token).",
                      &TrainArgs::eod_mask_loss));
  v.push_back(boolean("reset-position-ids", G::Data,
                      "Restart the position ids after every end-of-document token (learned position embeddings "
                      "and RoPE).",
                      &TrainArgs::reset_position_ids));
  v.push_back(boolean("reset-attention-mask", G::Data,
                      "Let a token attend only to its own document: no attention across an end-of-document token "
                      "(which belongs to the document it ends).",
                      &TrainArgs::reset_attention_mask));
  v.push_back(optional_integer("eod-token-id", G::Data,
                               "[ptdp] The end-of-document token id of --eod-mask-loss, --reset-position-ids and "
                               "--reset-attention-mask (e.g. 10, the newline, with --text-file).",
                               &TrainArgs::eod_token_id, kNonNegative,
                               "the eod of a tokenizer read from files"));
  // Checkpoints.
  v.push_back(text("save", G::Checkpoint, "DIR", "Save checkpoints to DIR/iter_NNNNNNN.", &TrainArgs::save));
  v.push_back(text("load", G::Checkpoint, "DIR", "Resume from the latest checkpoint in DIR.", &TrainArgs::load));
  v.push_back(boolean("finetune", G::Checkpoint,
                      "Load only the model parameters from --load (a checkpoint with or without optimizer state, "
                      "such as ptdp-convert --from-hf writes) and start from iteration 0 with a fresh optimizer "
                      "and data position.",
                      &TrainArgs::finetune));
  v.push_back(boolean("override-resume-check", G::Checkpoint,
                      "[ptdp] Resume from --load even when flags that change the training trajectory (seed, "
                      "data, tokenizer, model shape) differ from the ones the checkpoint recorded; without it "
                      "such a resume is refused, naming each flag and both values.",
                      &TrainArgs::override_resume_check));
  v.push_back(integer("save-interval", G::Checkpoint,
                      "Save every N iterations (with --save); 0 means only at the end.", &TrainArgs::save_interval,
                      kNonNegative));
  // Logging and evaluation.
  v.push_back(integer("log-interval", G::Logging, "Print a log line every N iterations.", &TrainArgs::log_interval,
                      kPositive));
  v.push_back(integer("eval-interval", G::Logging, "Evaluate on the validation split every N iterations; 0 never.",
                      &TrainArgs::eval_interval, kNonNegative));
  v.push_back(integer("eval-iters", G::Logging, "Global batches per evaluation.", &TrainArgs::eval_iters,
                      kNonNegative));
  v.push_back(text("log-json", G::Logging, "PATH", "[ptdp] Also write each log line as JSON to PATH.",
                   &TrainArgs::log_json));
  v.push_back(text("profile-trace", G::Logging, "PATH", "[ptdp] Write a Perfetto trace of one iteration to PATH.",
                   &TrainArgs::profile_trace));
  v.push_back(text("plot-file", G::Logging, "PATH",
                   "[ptdp] Draw the run's curves (loss, validation loss, learning rate, grad norm, loss scale, "
                   "tokens/s) as an SVG at PATH, refreshed at every log interval.",
                   &TrainArgs::plot_file));
  // ptdp.
  Flag device = head("device", G::Ptdp, "{auto,cpu,cuda}", "[ptdp] Engine: auto uses CUDA where this rank has a GPU.");
  device.set = [](TrainArgs& a, const std::string& v) {
    if (v != "auto" && v != "cpu" && v != "cuda") bad_value("device", v, "is not one of auto, cpu, cuda");
    a.device = v;
  };
  device.get = [](const TrainArgs& a) { return json(a.device); };
  v.push_back(std::move(device));
  v.push_back(optional_number("comm-timeout", G::Ptdp, "SECONDS",
                              "[ptdp] Deadline of every blocking communication; a rank that does not take part in "
                              "time is reported. Wins over PTDP_COMM_TIMEOUT_S.",
                              &TrainArgs::comm_timeout, kPositive, false, "PTDP_COMM_TIMEOUT_S, else 300"));
  v.push_back(number("peak-tflops", G::Ptdp, "TFLOPS",
                     "[ptdp] Dense peak TFLOP/s of one device for the MFU; 0 means the CPU's sgemm peak measured at "
                     "the start, or the GPU's datasheet figure.",
                     &TrainArgs::peak_tflops, kNonNegative, false));
  v.push_back(integer("max-restarts", G::Ptdp,
                      "Supervise the job (torchrun's flag): run outside an MPI launcher, ptdp-train launches "
                      "itself with --launcher, and relaunches the job after a failure from the latest checkpoint "
                      "of --save (as --load), at most N times; exit status 5 when they are spent. Needs --save; "
                      "ignored by the ranks of an MPI job.",
                      &TrainArgs::max_restarts, kNonNegative));
  v.push_back(text("launcher", G::Ptdp, "COMMAND",
                   "[ptdp] With --max-restarts: the command that starts the job, words split at blanks, e.g. "
                   "'mpiexec -n 8' (else PTDP_LAUNCHER; neither: one process).",
                   &TrainArgs::launcher));
  v.push_back(boolean("help", G::Ptdp, "Show this help (also -h).", &TrainArgs::help));
  return v;
}

const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = make_flags();
  return table;
}

const cli::FlagTable& flag_table() {
  static const cli::FlagTable t(flags(), {"ptdp-train", "ptdp-train's flags start with --",
                                          "flags start with -- and take at most one value"});
  return t;
}

std::string flag_value_text(const TrainArgs& a, const char* name) {
  const json j = flags()[*flag_table().index_of(name)].get(a);
  return j.is_string() ? j.get<std::string>() : json_text(j);
}

/// A float of a preset as the decimal it was written as (0.02f as 0.02, not 0.0199999995529651),
/// so that the flags and their JSON read as a user would have given them.
double decimal(float x) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
  double d = x;
  if (ec == std::errc()) std::from_chars(buf, end, d);
  return d;
}

/// The model flags of a preset (its shape and architecture; training settings stay as they are).
void apply_model_preset(TrainArgs& a) {
  const std::optional<ModelPreset> preset = find_model_preset(a.model_preset);
  if (!preset) bad_value("model-preset", a.model_preset, str_cat("is not a preset; the presets are ", model_preset_names()));
  const GptConfig& c = preset->config;
  a.num_layers = c.num_layers;
  a.hidden_size = c.hidden_size;
  a.ffn_hidden_size = c.ffn_hidden_size;
  a.num_attention_heads = c.num_attention_heads;
  a.seq_length = c.seq_length;
  a.max_position_embeddings = c.max_position_embeddings;
  a.vocab_size = c.vocab_size;
  a.make_vocab_size_divisible_by = c.make_vocab_size_divisible_by;
  a.init_method_std = c.init_method_std;
  a.hidden_dropout = c.hidden_dropout;
  a.attention_dropout = c.attention_dropout;
  a.layernorm_epsilon = c.layernorm_epsilon;
  a.untie_embeddings_and_output_weights = !c.tie_embeddings;
  a.normalization = c.normalization;
  a.swiglu = c.swiglu;
  a.position_embedding_type = c.position_embedding;
  a.rotary_base = c.rotary_base;
  a.rotary_percent = c.rotary_percent;
  a.use_rope_scaling = c.rope_scaling.enabled;
  a.rope_scaling_factor = c.rope_scaling.factor;
  a.rope_scaling_low_freq_factor = c.rope_scaling.low_freq_factor;
  a.rope_scaling_high_freq_factor = c.rope_scaling.high_freq_factor;
  a.rope_scaling_original_max_position_embeddings = c.rope_scaling.original_max_position_embeddings;
  a.rope_type = c.rope_type;
  a.rotary_scaling_factor = decimal(c.yarn.factor);
  a.mscale = decimal(c.yarn.mscale);
  a.mscale_all_dim = decimal(c.yarn.mscale_all_dim);
  a.original_max_position_embeddings = c.yarn.original_max_position_embeddings;
  a.beta_fast = decimal(c.yarn.beta_fast);
  a.beta_slow = decimal(c.yarn.beta_slow);
  a.no_yarn_correction_range_round_to_int = !c.yarn.truncate;
  a.group_query_attention = c.num_query_groups > 0;
  a.num_query_groups = c.num_query_groups > 0 ? std::optional<int>(c.num_query_groups) : std::nullopt;
  a.kv_channels = c.kv_channels > 0 ? std::optional<int>(c.kv_channels) : std::nullopt;
  a.disable_bias_linear = !c.add_bias_linear;
  a.add_qkv_bias = c.add_qkv_bias;
  a.qk_layernorm = c.qk_layernorm;
  a.qk_layernorm_across_heads = c.qk_layernorm_across_heads;
  a.multi_latent_attention = c.multi_latent_attention;
  if (c.multi_latent_attention) {
    a.q_lora_rank = c.q_lora_rank > 0 ? std::optional<int>(c.q_lora_rank) : std::nullopt;
    a.kv_lora_rank = c.kv_lora_rank;
    a.qk_head_dim = c.qk_head_dim;
    a.qk_pos_emb_head_dim = c.qk_pos_emb_head_dim;
    a.v_head_dim = c.v_head_dim;
  }
  a.mtp_num_layers = c.mtp_num_layers;
  a.mtp_loss_scaling_factor = c.mtp_loss_scaling_factor;
  const MoeConfig& m = c.moe;
  if (!m.enabled()) return;
  a.num_experts = m.num_experts;
  a.moe_layer_freq = format_moe_layer_freq(m.layer_pattern, c.num_layers);
  a.moe_ffn_hidden_size = m.ffn_hidden_size > 0 ? std::optional<int>(m.ffn_hidden_size) : std::nullopt;
  a.moe_shared_expert_intermediate_size =
      m.shared_expert_intermediate_size > 0 ? std::optional<int>(m.shared_expert_intermediate_size) : std::nullopt;
  a.moe_shared_expert_gate = m.shared_expert_gate;
  a.moe_router_topk = m.router_topk;
  a.moe_router_score_function = m.score_function;
  a.moe_router_pre_softmax = m.pre_softmax;
  a.moe_router_topk_scaling_factor =
      m.topk_scaling_factor > 0 ? std::optional<double>(decimal(m.topk_scaling_factor)) : std::nullopt;
  a.moe_router_num_groups = m.num_groups > 0 ? std::optional<int>(m.num_groups) : std::nullopt;
  a.moe_router_group_topk =
      m.group_topk > 0 && m.topk_limited_devices == 0 ? std::optional<int>(m.group_topk) : std::nullopt;
  a.moe_router_group_score_topk = m.group_score_topk > 0 ? std::optional<int>(m.group_score_topk) : std::nullopt;
  a.moe_router_topk_limited_devices =
      m.topk_limited_devices > 0 ? std::optional<int>(m.topk_limited_devices) : std::nullopt;
  a.moe_router_enable_expert_bias = m.enable_expert_bias;
  a.moe_router_bias_update_rate = decimal(m.bias_update_rate);
  a.moe_router_load_balancing_type = m.load_balancing;
  a.moe_aux_loss_coeff = decimal(m.aux_loss_coeff);
  a.moe_z_loss_coeff = m.z_loss_coeff > 0 ? std::optional<double>(decimal(m.z_loss_coeff)) : std::nullopt;
  a.moe_expert_capacity_factor =
      m.capacity_factor > 0 ? std::optional<double>(decimal(m.capacity_factor)) : std::nullopt;
  a.moe_token_drop_policy = m.drop_policy;
  a.moe_pad_expert_input_to_capacity = m.pad_expert_input_to_capacity;
  a.moe_token_dispatcher_type = m.dispatcher;
}

/// YaRN's flags against each other and --use-rope-scaling, naming them (LayerConfig::validate
/// checks the model's again in its own words).
void validate_yarn_args(const TrainArgs& a) {
  const auto value = [&a](const char* name) { return str_cat("--", name, " ", flag_value_text(a, name)); };
  if (a.rope_type != RopeType::Yarn) return;
  if (a.position_embedding_type != PositionEmbedding::Rope) {
    fail(str_cat("--rope-type yarn needs --position-embedding-type rope; got ", value("position-embedding-type")));
  }
  if (a.use_rope_scaling) {
    fail("--rope-type yarn and --use-rope-scaling both rescale the rotary frequencies: give one");
  }
  if (a.mscale != 1.0 && a.mscale_all_dim == 0.0) {
    fail(str_cat(value("mscale"), " needs --mscale-all-dim: without it Megatron scales cos and sin by "
                 "0.1 mscale ln(factor) + 1 and Hugging Face ignores mscale"));
  }
  if (a.beta_fast < a.beta_slow) fail(str_cat(value("beta-fast"), " is below ", value("beta-slow")));
}

/// The multi-latent attention flags against the others (Megatron's refusals, naming the flags).
void check_mla(const TrainArgs& a) {
  const auto value = [&a](const char* name) { return str_cat("--", name, " ", flag_value_text(a, name)); };
  if (!a.multi_latent_attention) {
    const TrainArgs d;
    for (const char* name : {"q-lora-rank", "kv-lora-rank", "qk-head-dim", "qk-pos-emb-head-dim", "v-head-dim"}) {
      if (flag_value_text(a, name) != flag_value_text(d, name))
        fail(str_cat(value(name), " is read only with --multi-latent-attention"));
    }
    return;
  }
  if (a.group_query_attention) {
    fail("--group-query-attention is mutually exclusive with --multi-latent-attention (Megatron's refusal): MLA is "
         "multi-head attention over its latents");
  }
  if (a.position_embedding_type != PositionEmbedding::Rope) {
    fail(str_cat("--multi-latent-attention needs --position-embedding-type rope (its decoupled RoPE part is the only "
                 "position signal); got ", value("position-embedding-type")));
  }
  if (a.qk_layernorm_across_heads) fail("--qk-layernorm-across-heads does not apply to --multi-latent-attention");
  if (a.add_qkv_bias) fail("--add-qkv-bias does not apply to --multi-latent-attention (it has no linear_qkv)");
  if (a.v_head_dim > a.qk_head_dim + a.qk_pos_emb_head_dim) {
    fail(str_cat(value("v-head-dim"), " exceeds ", value("qk-head-dim"), " + ", value("qk-pos-emb-head-dim"),
                 ": the core attention pads the value heads to the query/key head dim"));
  }
}

/// The MoE flags against each other and the layout, naming them (Megatron's refusals of
/// arguments.py and TransformerConfig.__post_init__; LayerConfig::validate checks the model's
/// again in its own words).
/// DeepSeek's routing flags: device-limited routing (its groups resolved as to_gpt_config does)
/// and the group score's size.
void check_group_routing(const TrainArgs& a) {
  const auto value = [&a](const char* name) { return str_cat("--", name, " ", flag_value_text(a, name)); };
  const int experts = a.num_experts;
  if (a.moe_router_topk_limited_devices) {
    const std::string limited = value("moe-router-topk-limited-devices");
    if (a.moe_router_group_topk) {
      fail(str_cat(limited, " is deprecated and replaced by --moe-router-group-topk and --moe-router-num-groups "
                            "(Megatron's words): give one of them, not both"));
    }
    const int groups = a.moe_router_num_groups.value_or(a.expert_model_parallel_size);
    const std::string groups_text = a.moe_router_num_groups
                                        ? value("moe-router-num-groups")
                                        : str_cat("its groups, ", groups, " (--expert-model-parallel-size; "
                                                  "--moe-router-num-groups unset)");
    if (*a.moe_router_topk_limited_devices > groups) {
      fail(str_cat(limited, " is larger than ", groups_text,
                   ": give --moe-router-num-groups, the expert-parallel size the device groups are defined at"));
    }
    if (experts % groups != 0) fail(str_cat(value("num-experts"), " is not divisible by ", groups_text));
    if (groups % a.expert_model_parallel_size != 0) {
      fail(str_cat(value("expert-model-parallel-size"), " does not divide ", groups_text, ": with ", limited,
                   " a rank must hold whole groups, or a token could reach more ranks than the limit"));
    }
  }
  if (a.moe_router_group_score_topk) {
    if (!a.moe_router_group_topk && !a.moe_router_topk_limited_devices) {
      fail(str_cat(value("moe-router-group-score-topk"),
                   " scores the groups of group-limited routing: give --moe-router-group-topk or "
                   "--moe-router-topk-limited-devices"));
    }
  }
}

void check_moe(const TrainArgs& a) {
  const auto value = [&a](const char* name) { return str_cat("--", name, " ", flag_value_text(a, name)); };
  const bool modules_moe = split_words_contain(a.recompute_modules, "moe");
  if (a.num_experts == 0) {
    // A MoE flag without experts would be ignored (Megatron refuses --moe-ffn-hidden-size so).
    const json defaults = train_args_to_json(TrainArgs{});
    const json given = train_args_to_json(a);
    for (const Flag& f : flags()) {
      if (f.group == Group::Moe && f.name != "num-experts" && given[f.name] != defaults[f.name]) {
        fail(str_cat(value(f.name.c_str()), " is read only with --num-experts (a mixture-of-experts model)"));
      }
    }
    if (a.expert_model_parallel_size > 1) {
      fail(str_cat(value("expert-model-parallel-size"), " needs --num-experts: there are no experts to split"));
    }
    if (a.expert_tensor_parallel_size) {
      fail(str_cat(value("expert-tensor-parallel-size"), " needs --num-experts: there are no experts to split"));
    }
    if (modules_moe) fail("--recompute-modules moe needs --num-experts: the model has no MoE layer");
    return;
  }
  const std::string experts = value("num-experts");
  if (a.moe_router_topk > a.num_experts) fail(str_cat(value("moe-router-topk"), " is larger than ", experts));
  const std::vector<int> pattern = parse_moe_layer_freq(a.moe_layer_freq, a.num_layers);
  if (!pattern.empty() && static_cast<int>(pattern.size()) != a.num_layers) {
    fail(str_cat(value("moe-layer-freq"), " gives ", pattern.size(), " layers, but ", value("num-layers"),
                 " (a pattern has one entry per layer)"));
  }
  if (a.num_experts % a.expert_model_parallel_size != 0) {
    fail(str_cat(experts, " is not a multiple of ", value("expert-model-parallel-size")));
  }
  const int etp = a.expert_tensor_parallel_size.value_or(a.tensor_model_parallel_size);
  const std::string etp_text = a.expert_tensor_parallel_size
                                   ? value("expert-tensor-parallel-size")
                                   : str_cat("the expert tensor parallel size ", etp, " (--tensor-model-parallel-size; "
                                                                                      "--expert-tensor-parallel-size "
                                                                                      "unset)");
  const int64_t moe_ffn = to_gpt_config(a).moe_ffn();
  const std::string ffn_text = a.moe_ffn_hidden_size
                                   ? value("moe-ffn-hidden-size")
                                   : str_cat("the expert MLP width ", moe_ffn, " (--ffn-hidden-size)");
  if (moe_ffn % etp != 0) fail(str_cat(ffn_text, " is not divisible by ", etp_text));
  if (!a.disable_bias_linear && etp > 1) {
    fail(str_cat(etp_text, " splits the experts, whose biases Megatron supports only at expert tensor parallel size "
                           "1 (\"Bias in MoE is only supported when ETP==1\"): add --disable-bias-linear"));
  }
  if (a.tensor_model_parallel_size > 1 && !a.sequence_parallel) {
    fail(str_cat("MoE with ", value("tensor-model-parallel-size"),
                 " needs --sequence-parallel, as Megatron requires (the router and the experts work on the s/t "
                 "positions of each tensor rank)"));
  }
  if (a.moe_shared_expert_intermediate_size &&
      *a.moe_shared_expert_intermediate_size % a.tensor_model_parallel_size != 0) {
    fail(str_cat(value("moe-shared-expert-intermediate-size"), " is not divisible by ",
                 value("tensor-model-parallel-size"), " (the shared experts are split over t like a dense MLP)"));
  }
  if (a.moe_shared_expert_gate && !a.moe_shared_expert_intermediate_size) {
    fail("--moe-shared-expert-gate gates the shared experts: give --moe-shared-expert-intermediate-size");
  }
  if (a.moe_router_topk == 1 && a.moe_router_score_function == MoeScoreFunction::Softmax &&
      !a.moe_router_pre_softmax) {
    fail("Please use --moe-router-pre-softmax when topk is 1 (Megatron's words): --moe-router-topk 1 with the "
         "softmax over the selected logits gives a constant 1 and the router no gradient");
  }
  check_group_routing(a);
  if (a.moe_router_group_topk && !a.moe_router_num_groups) {
    fail(str_cat(value("moe-router-group-topk"), " needs --moe-router-num-groups (group-limited routing)"));
  }
  if (a.moe_router_num_groups && !a.moe_router_group_topk && !a.moe_router_topk_limited_devices) {
    fail(str_cat(value("moe-router-num-groups"), " is read only with --moe-router-group-topk"));
  }
  if (a.moe_router_group_topk) {
    const int groups = *a.moe_router_num_groups, group_topk = *a.moe_router_group_topk;
    if (a.num_experts % groups != 0) fail(str_cat(experts, " is not divisible by ", value("moe-router-num-groups")));
    if (group_topk > groups) {
      fail(str_cat(value("moe-router-group-topk"), " is larger than ", value("moe-router-num-groups")));
    }
    if (a.moe_router_topk % group_topk != 0 && !a.moe_router_group_score_topk) {
      fail(str_cat(value("moe-router-topk"), " is not divisible by ", value("moe-router-group-topk"),
                   " (each group is scored by its top k / group-topk experts)"));
    }
    if (static_cast<int64_t>(group_topk) * (a.num_experts / groups) < a.moe_router_topk) {
      fail(str_cat(value("moe-router-group-topk"), " groups of ", a.num_experts / groups, " experts (", experts,
                   " / ", value("moe-router-num-groups"), ") hold fewer than ", value("moe-router-topk")));
    }
  }
  if (a.moe_router_enable_expert_bias && a.moe_router_score_function != MoeScoreFunction::Sigmoid) {
    fail(str_cat("--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid, as Megatron's "
                 "aux-loss-free routing; got ",
                 value("moe-router-score-function")));
  }
  if (!a.moe_expert_capacity_factor) {
    if (a.moe_pad_expert_input_to_capacity) {
      fail("--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor (dropless experts have no capacity)");
    }
    if (a.moe_token_drop_policy != MoeDropPolicy::Probs) {
      fail(str_cat(value("moe-token-drop-policy"), " is read only with --moe-expert-capacity-factor (dropless "
                                                   "experts drop nothing)"));
    }
  }
  if (a.moe_layer_recompute && a.recompute_granularity == Recompute::Full) {
    fail("Do not set --moe-layer-recompute with full recompute granularity (Megatron's words): "
         "--recompute-granularity full recomputes the whole layer already");
  }
}

/// Muon's and QK-clip's flags are read only with --optimizer muon (as the MoE flags only with
/// --num-experts), and QK-clip's settings only with --qk-clip: a changed value would be ignored.
void check_muon(const TrainArgs& a) {
  const auto value = [&a](const char* name) { return str_cat("--", name, " ", flag_value_text(a, name)); };
  const json defaults = train_args_to_json(TrainArgs{});
  const json given = train_args_to_json(a);
  const auto changed = [&](const std::string& name) { return given[name] != defaults[name]; };
  if (a.optimizer != OptimizerKind::Muon) {
    for (const Flag& f : flags()) {
      const bool muon = f.name.compare(0, 5, "muon-") == 0 || f.name.compare(0, 7, "qk-clip") == 0;
      // Each pair of spellings of one setting is reported once, under the spelling that sets it.
      if (!muon || f.name == "muon-use-nesterov" || f.name == "muon-split-qkv") continue;
      if (changed(f.name)) {
        const std::string shown = f.name == "muon-nesterov" ? "--muon-nesterov (or --muon-use-nesterov)"
                                  : f.is_boolean()          ? str_cat("--", f.name)
                                                            : value(f.name.c_str());
        fail(str_cat(shown, " is read only with --optimizer muon; got ", value("optimizer")));
      }
    }
    return;
  }
  if (!a.qk_clip) {
    for (const char* name : {"qk-clip-threshold", "qk-clip-alpha"}) {
      if (changed(name)) fail(str_cat(value(name), " is read only with --qk-clip"));
    }
  }
}

/// Checks of flags against each other, each naming the flags and their values.
void check_together(const TrainArgs& a) {
  const auto value = [&a](const char* name) { return str_cat("--", name, " ", flag_value_text(a, name)); };
  if (a.fp16 && a.bf16) fail("--fp16 and --bf16 are exclusive");
  if (!a.recompute_modules.empty() && a.recompute_granularity != Recompute::Selective) {
    fail(str_cat("--recompute-modules ", a.recompute_modules, " is read only with --recompute-granularity selective (",
                 a.recompute_granularity == Recompute::Full ? "full recomputes every module" : "none is given", ")"));
  }
  check_moe(a);
  check_muon(a);
  // Model shape.
  if (a.num_query_groups && !a.group_query_attention) {
    fail(str_cat(value("num-query-groups"),
                 " is only used with --group-query-attention (as in Megatron); add --group-query-attention, or "
                 "leave --num-query-groups out for multi-head attention"));
  }
  check_mla(a);
  if (!a.kv_channels && !a.multi_latent_attention && a.hidden_size % a.num_attention_heads != 0) {
    fail(str_cat(value("num-attention-heads"), " does not divide ", value("hidden-size"),
                 " (or give the head dim with --kv-channels)"));
  }
  const int t = a.tensor_model_parallel_size;
  if (a.num_attention_heads % t != 0) {
    fail(str_cat(value("tensor-model-parallel-size"), " does not divide ", value("num-attention-heads")));
  }
  if (a.group_query_attention) {
    const int g = a.num_query_groups.value_or(1);
    const std::string groups =
        a.num_query_groups ? value("num-query-groups") : "--group-query-attention's default of 1 query group";
    if (a.num_attention_heads % g != 0) fail(str_cat(groups, " does not divide ", value("num-attention-heads")));
    if (g % t != 0) {
      fail(str_cat(value("tensor-model-parallel-size"), " does not divide ", groups,
                   " (each tensor rank holds whole key/value heads)"));
    }
  }
  const GptConfig model = to_gpt_config(a);
  // Every size derived from the flags, with checked arithmetic (a huge --hidden-size would
  // otherwise wrap 4 h into a negative MLP width).
  model.check_sizes();
  {
    const CheckedSize b = sized("--micro-batch-size", a.micro_batch_size);
    const CheckedSize s = sized("--seq-length", a.seq_length);
    const CheckedSize h = sized("--hidden-size", a.hidden_size);
    const CheckedSize v = sized("--vocab-size", a.vocab_size);
    // The model-parallel ranks t * p * c (each may be large on its own).
    (void)(sized("--tensor-model-parallel-size", a.tensor_model_parallel_size) *
           sized("--pipeline-model-parallel-size", a.pipeline_model_parallel_size) *
           sized("--context-parallel-size", a.context_parallel_size));
    (void)(b * s * h);  // one microbatch's hidden states
    (void)(b * s * v);  // one microbatch's logits
    (void)(sized("--train-iters", a.train_iters) * sized("the global batch size", global_batch_or_micro(a)) * s);
    if (!model.parameter_count_fits(t)) {
      fail(str_cat("the parameter count of ", value("num-layers"), " layers of ", value("hidden-size"),
                   " (MLP width ", std::to_string(model.ffn()), ") overflows a 64-bit integer"));
    }
  }
  const int64_t ffn = model.ffn();
  const std::string ffn_text =
      a.ffn_hidden_size > 0 ? value("ffn-hidden-size")
      : a.swiglu ? str_cat("the SwiGLU MLP width int(8 * --hidden-size / 3 / 64) * 64 = ", std::to_string(ffn),
                           " (--hidden-size ", std::to_string(a.hidden_size), " with --swiglu)")
                 : str_cat("the MLP width 4 * --hidden-size = ", std::to_string(ffn));
  if (ffn <= 0) fail(str_cat(ffn_text, " is not > 0; give --ffn-hidden-size"));
  if (ffn % t != 0) fail(str_cat(value("tensor-model-parallel-size"), " does not divide ", ffn_text));
  if (a.max_position_embeddings > 0 && a.seq_length > a.max_position_embeddings) {
    fail(str_cat(value("seq-length"), " is longer than ", value("max-position-embeddings")));
  }
  if (a.overlap_param_gather && !(a.use_distributed_optimizer && a.overlap_grad_reduce)) {
    fail("--overlap-param-gather needs --use-distributed-optimizer and --overlap-grad-reduce");
  }
  // Positions.
  if (a.use_rope_scaling && a.position_embedding_type != PositionEmbedding::Rope) {
    fail(str_cat("--use-rope-scaling needs --position-embedding-type rope; got ", value("position-embedding-type")));
  }
  validate_yarn_args(a);
  if (a.position_embedding_type == PositionEmbedding::Rope) {
    const int rotated = model.rotary_dim();
    if (rotated < 2 || rotated % 2 != 0) {
      const std::string head_dim =
          a.multi_latent_attention ? value("qk-pos-emb-head-dim")
          : a.kv_channels          ? value("kv-channels")
                        : str_cat("head dim ", std::to_string(model.head_dim()), " (--hidden-size ",
                                  std::to_string(a.hidden_size), " / --num-attention-heads ",
                                  std::to_string(a.num_attention_heads), ")");
      fail(str_cat("--position-embedding-type rope rotates pairs of dims, but the ", head_dim, " times ",
                   value("rotary-percent"), " gives ", std::to_string(rotated),
                   " rotated dims; it must be even and > 0"));
    }
  }
  if (a.use_rope_scaling && a.rope_scaling_high_freq_factor <= a.rope_scaling_low_freq_factor) {
    fail(str_cat(value("rope-scaling-high-freq-factor"), " must be above ", value("rope-scaling-low-freq-factor")));
  }
  if (a.sequence_parallel && a.tensor_model_parallel_size > 1 && a.seq_length % a.tensor_model_parallel_size != 0) {
    fail(str_cat("--sequence-parallel gives each tensor rank s/t positions, but ", value("seq-length"),
                 " is not divisible by ", value("tensor-model-parallel-size")));
  }
  if (a.context_parallel_size > 1) {
    const int c2 = 2 * a.context_parallel_size * (a.sequence_parallel ? a.tensor_model_parallel_size : 1);
    if (a.seq_length % c2 != 0) {
      fail(str_cat("--context-parallel-size cuts each sample into 2c chunks", a.sequence_parallel ? " (of t sequence-parallel shards each)" : "",
                   ", but ", value("seq-length"), " is not divisible by ", std::to_string(c2)));
    }
  }
  // Pipeline split (Megatron's checks: arguments.py, then TransformerConfig's).
  const int p = a.pipeline_model_parallel_size;
  const bool first_last = a.decoder_first_pipeline_num_layers || a.decoder_last_pipeline_num_layers;
  const bool layout = !a.pipeline_model_parallel_layout.empty();
  const bool uneven = first_last || layout;
  if (layout && first_last) {
    fail(str_cat(value("pipeline-model-parallel-layout"), " places every layer; drop ",
                 value(a.decoder_first_pipeline_num_layers ? "decoder-first-pipeline-num-layers"
                                                           : "decoder-last-pipeline-num-layers")));
  }
  if (layout && a.num_layers_per_virtual_pipeline_stage) {
    fail(str_cat(value("pipeline-model-parallel-layout"), " sets v itself; drop ",
                 value("num-layers-per-virtual-pipeline-stage")));
  }
  if (layout && a.num_virtual_stages_per_pipeline_rank) {
    int entries = 1;
    for (char ch : a.pipeline_model_parallel_layout) entries += ch == '|';
    const bool simple = a.pipeline_model_parallel_layout.find('(') == std::string::npos;
    if (simple && entries != p * *a.num_virtual_stages_per_pipeline_rank) {
      fail(str_cat(value("pipeline-model-parallel-layout"), " has ", std::to_string(entries), " entries, not ",
                   value("pipeline-model-parallel-size"), " x ", value("num-virtual-stages-per-pipeline-rank")));
    }
  }
  if (a.num_layers_per_virtual_pipeline_stage && a.num_virtual_stages_per_pipeline_rank) {
    fail(str_cat("No more than one of --num-layers-per-virtual-pipeline-stage and "
                 "--num-virtual-stages-per-pipeline-rank can be set; got ",
                 value("num-layers-per-virtual-pipeline-stage"), " and ", value("num-virtual-stages-per-pipeline-rank")));
  }
  if (a.num_layers_per_virtual_pipeline_stage && uneven) {
    fail(str_cat("please use --num-virtual-stages-per-pipeline-rank to specify virtual pipeline parallel degree when "
                 "enable uneven pipeline parallelism (",
                 value(a.decoder_first_pipeline_num_layers ? "decoder-first-pipeline-num-layers"
                                                           : "decoder-last-pipeline-num-layers"),
                 " with ", value("num-layers-per-virtual-pipeline-stage"), ")"));
  }
  if (a.num_layers_per_virtual_pipeline_stage) {
    const int64_t per_rank = static_cast<int64_t>(p) * *a.num_layers_per_virtual_pipeline_stage;
    if (a.num_layers % per_rank != 0) {
      fail(str_cat(value("num-layers"), " is not divisible by ", value("pipeline-model-parallel-size"), " * ",
               value("num-layers-per-virtual-pipeline-stage"), " = ", std::to_string(per_rank)));
    }
  } else if (!uneven && a.num_layers % p != 0) {
    fail(str_cat(value("num-layers"), " is not divisible by ", value("pipeline-model-parallel-size")));
  }
  const int v = virtual_pipeline_size(a);
  const char* v_flag = a.num_virtual_stages_per_pipeline_rank ? "num-virtual-stages-per-pipeline-rank"
                       : layout                                ? "pipeline-model-parallel-layout"
                                                               : "num-layers-per-virtual-pipeline-stage";
  const bool v_from_schedule =
      !a.num_virtual_stages_per_pipeline_rank && !a.num_layers_per_virtual_pipeline_stage && !layout;
  if (v > 1 && p == 1 && v_from_schedule) {
    fail(str_cat(value("pipeline-schedule"), " needs --pipeline-model-parallel-size > 1"));
  }
  if (v > 1 && p == 1) {
    fail(str_cat(value(v_flag), " gives v = ", std::to_string(v),
                 " model chunks per pipeline rank, which needs --pipeline-model-parallel-size > 1"));
  }
  const ScheduleKind sk = a.pipeline_schedule;
  const bool v_shaped = sk == ScheduleKind::ZeroBubbleV || sk == ScheduleKind::DualPipeV;
  if (v_shaped && v != 2) {
    fail(str_cat(value("pipeline-schedule"), " places 2 model chunks per rank, got v = ", std::to_string(v),
                 " (from --", v_flag, ")"));
  } else if (v_shaped && p == 1) {
    fail(str_cat(value("pipeline-schedule"), " needs --pipeline-model-parallel-size > 1"));
  } else if (v_shaped && uneven) {
    fail(str_cat(value("pipeline-schedule"), " takes an even split of the layers: drop "
                 "--decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers and "
                 "--pipeline-model-parallel-layout"));
  } else if (sk == ScheduleKind::InterleavedZeroBubble && v < 2) {
    fail(str_cat(value("pipeline-schedule"), " needs v > 1 model chunks per rank (--num-virtual-stages-per-pipeline-rank)"));
  } else if (v > 1 && !v_shaped && sk != ScheduleKind::OneFOneB && sk != ScheduleKind::InterleavedZeroBubble) {
    fail(str_cat(value("pipeline-schedule"), " cannot run v = ", std::to_string(v), " model chunks per rank (from --",
                 v_flag, "); only 1f1b (interleaved), interleaved-zb, zb-v and dualpipev can"));
  }
  if (uneven || a.num_virtual_stages_per_pipeline_rank) {
    try {
      if (layout) parse_pipeline_layout(a.pipeline_model_parallel_layout, p);
      stage_layer_counts(a.num_layers, pipeline_split(to_parallel_config(a, p)));
    } catch (const Error& e) {
      std::string given = str_cat(value("num-layers"), ", ", value("pipeline-model-parallel-size"));
      if (a.num_virtual_stages_per_pipeline_rank) given += str_cat(", ", value("num-virtual-stages-per-pipeline-rank"));
      if (a.decoder_first_pipeline_num_layers) given += str_cat(", ", value("decoder-first-pipeline-num-layers"));
      if (a.decoder_last_pipeline_num_layers) given += str_cat(", ", value("decoder-last-pipeline-num-layers"));
      if (layout) given += str_cat(", ", value("pipeline-model-parallel-layout"));
      fail(str_cat(given, ": ", e.what()));
    }
  }
  // Batch.
  if (a.global_batch_size > 0 && a.global_batch_size % a.micro_batch_size != 0) {
    fail(str_cat(value("global-batch-size"), " is not a multiple of ", value("micro-batch-size")));
  }
  // Learning rate.
  if (a.min_lr > a.lr) fail(str_cat(value("min-lr"), " is above ", value("lr")));
  const int64_t decay = lr_decay_iters(a);
  if (a.lr_decay_style != LrDecayStyle::Constant && decay > 0 && decay <= a.lr_warmup_iters) {
    fail(str_cat(value("lr-warmup-iters"), " must be below ",
             a.lr_decay_iters ? value("lr-decay-iters")
                              : str_cat(value("train-iters"), " (--lr-decay-iters is not given)")));
  }
  // Loss scaling.
  if (a.min_loss_scale > a.initial_loss_scale) {
    fail(str_cat(value("min-loss-scale"), " is above ", value("initial-loss-scale")));
  }
  // Data.
  if (!a.text_file.empty()) {
    if (a.vocab_size < 256) {
      fail(str_cat(value("vocab-size"), " is below 256, which --text-file needs (one token per byte)"));
    }
    if (a.tokenizer_type == "NullTokenizer") {
      fail("--tokenizer-type NullTokenizer does not fit --text-file (one token per byte); use ByteLevel or "
           "leave it out");
    }
  }
  if (uses_eod_masks(a)) {
    const std::string flag = a.eod_mask_loss        ? "--eod-mask-loss"
                             : a.reset_position_ids ? "--reset-position-ids"
                                                    : "--reset-attention-mask";
    if (!a.eod_token_id) {
      fail(str_cat(flag, " needs the end-of-document token: give --eod-token-id (",
                   a.tokenizer_type.empty() ? std::string("no --tokenizer-type names one")
                                            : str_cat("--tokenizer-type ", a.tokenizer_type, " has none"),
                   ")"));
    }
    if (*a.eod_token_id >= a.vocab_size) fail(str_cat(value("eod-token-id"), " is not below ", value("vocab-size")));
  }
  // What the core checks again in its own words (nothing above should let these fail). The
  // model takes sequence parallelism from the layout; MoE's check of it needs it here.
  GptConfig checked = to_gpt_config(a);
  checked.sequence_parallel = a.sequence_parallel;
  checked.validate(a.tensor_model_parallel_size);
  to_optimizer_config(a).validate();
}

/// Reads the tokenizer files of --tokenizer-type (so a missing or bad file is named before anything
/// is built) and, unless --vocab-size was given, takes the tokenizer's vocabulary size, as Megatron
/// does before padding it. NullTokenizer keeps --vocab-size as the ids' bound.
void apply_tokenizer(TrainArgs& a, bool vocab_size_given) {
  if (a.tokenizer_type.empty()) {
    for (const auto& [flag, path] : {std::pair<const char*, const std::string*>{"--vocab-file", &a.vocab_file},
                                     {"--merge-file", &a.merge_file},
                                     {"--tokenizer-model", &a.tokenizer_model}}) {
      if (!path->empty()) fail(str_cat(flag, " ", *path, " needs --tokenizer-type"));
    }
    return;
  }
  TokenizerConfig c;
  c.type = *tokenizer_type_from_name(a.tokenizer_type);
  c.vocab_file = a.vocab_file;
  c.merge_file = a.merge_file;
  c.tokenizer_model = a.tokenizer_model;
  c.vocab_size = a.vocab_size;
  const bool from_files = c.type != TokenizerType::ByteLevel && c.type != TokenizerType::Null;
  if (from_files && !a.text_file.empty()) {
    fail(str_cat("--text-file is read one token per byte, which --tokenizer-type ", a.tokenizer_type,
                 " does not fit; tokenize the text into a --data-path (ptdp-preprocess-data), or use ByteLevel"));
  }
  const std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(c);
  const int64_t size = tokenizer->vocab_size();
  if (!from_files) return;
  if (!vocab_size_given) {
    if (size > std::numeric_limits<int>::max()) fail(str_cat("the tokenizer's vocabulary of ", size, " is too large"));
    a.vocab_size = static_cast<int>(size);
  } else if (a.vocab_size < size) {
    fail(str_cat("--vocab-size ", a.vocab_size, " is below the ", size, " ids of --tokenizer-type ",
                 a.tokenizer_type, " (leave --vocab-size out to take the tokenizer's)"));
  }
  // The eod masks' token defaults to the tokenizer's end of document (Megatron's tokenizer.eod).
  if (uses_eod_masks(a) && !a.eod_token_id && tokenizer->eod() >= 0) a.eod_token_id = tokenizer->eod();
}

/// Megatron's list flags (argparse nargs='*'): `--data-path 0.3 A 0.7 B` becomes one value, the
/// words up to the next flag joined by spaces (`--data-path=...` stays one word).
std::vector<std::string> join_data_lists(const std::vector<std::string>& args) {
  static const char* const kLists[] = {"--data-path", "--train-data-path", "--valid-data-path", "--test-data-path",
                                       "--recompute-modules"};
  std::vector<std::string> out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    out.push_back(args[i]);
    if (std::find(std::begin(kLists), std::end(kLists), args[i]) == std::end(kLists)) continue;
    std::string words;
    while (i + 1 < args.size() && args[i + 1].compare(0, 2, "--") != 0 && args[i + 1] != "-h") {
      if (!words.empty()) words += ' ';
      words += args[++i];
    }
    if (!words.empty()) out.push_back(words);
  }
  return out;
}

}  // namespace

TrainArgs parse_train_args(const std::vector<std::string>& args) {
  if (cli::asks_for_help(args)) {
    TrainArgs h;
    h.help = true;
    return h;
  }
  const std::vector<std::optional<std::string>> values = flag_table().read(join_data_lists(args));
  const std::vector<Flag>& table = flags();
  TrainArgs out;
  // The preset first: every model flag given overrides it, wherever it stands.
  const std::size_t preset = *flag_table().index_of("model-preset");
  if (values[preset]) {
    table[preset].set(out, *values[preset]);
    apply_model_preset(out);
  }
  const std::optional<std::string>& norm_epsilon = values[*flag_table().index_of("norm-epsilon")];
  const std::optional<std::string>& layernorm_epsilon = values[*flag_table().index_of("layernorm-epsilon")];
  if (norm_epsilon && layernorm_epsilon) {
    fail(str_cat("--norm-epsilon ", *norm_epsilon, " and --layernorm-epsilon ", *layernorm_epsilon,
                 " set the same epsilon (--layernorm-epsilon is Megatron's older name); give one"));
  }
  const std::size_t split_qkv = *flag_table().index_of("muon-split-qkv");
  if (values[split_qkv] && values[*flag_table().index_of("muon-no-split-qkv")]) {
    fail("--muon-split-qkv and --muon-no-split-qkv contradict each other; give one");
  }
  bool mock_given = false;
  for (std::size_t i = 0; i < table.size(); ++i) {
    const Flag& f = table[i];
    if (!values[i] || i == preset) continue;
    if (f.is_boolean()) {
      f.set_on(out);
      if (f.name == "mock-data") mock_given = true;
    } else {
      f.set(out, *values[i]);
    }
  }
  std::vector<std::string> sources;
  if (mock_given) sources.push_back("--mock-data");
  if (!out.data_path.empty()) sources.push_back("--data-path");
  if (!out.text_file.empty()) sources.push_back("--text-file");
  const bool per_split = !out.train_data_path.empty() || !out.valid_data_path.empty() || !out.test_data_path.empty();
  if (per_split) sources.push_back("--train/valid/test-data-path");
  if (sources.size() > 1) {
    std::string given;
    for (const std::string& s : sources) given += str_cat(given.empty() ? "" : " and ", s);
    fail(str_cat("--mock-data, --data-path, --train/valid/test-data-path and --text-file are exclusive; got ", given));
  }
  // Megatron's lists, checked here so that a bad one is named before anything is built.
  for (const auto& [flag, list] : {std::pair<const char*, const std::string*>{"--data-path", &out.data_path},
                                   {"--train-data-path", &out.train_data_path},
                                   {"--valid-data-path", &out.valid_data_path},
                                   {"--test-data-path", &out.test_data_path}}) {
    if (!list->empty() && (list != &out.data_path || is_data_blend(*list))) parse_data_blend(split_words(*list), flag);
  }
  out.mock_data = sources.empty() || mock_given;
  apply_tokenizer(out, values[*flag_table().index_of("vocab-size")].has_value());
  check_together(out);
  // The supervisor's flags (core/train/supervisor.h): restarts resume from --save.
  if (out.max_restarts > 0 && out.save.empty()) {
    fail(str_cat("--max-restarts ", std::to_string(out.max_restarts),
                 " needs --save DIR: each restart resumes from the latest checkpoint there"));
  }
  if (!out.launcher.empty() && out.max_restarts == 0) {
    fail("--launcher is read only with --max-restarts N (N > 0): it starts the supervised job");
  }
  return out;
}

std::string train_args_help(const std::string& program) {
  // argparse's layout: meanings start at a fixed column, on the next line after a long flag,
  // and wrap at kWidth; "Default: ..." is never split.
  constexpr std::size_t kColumn = 30, kWidth = 100;
  const TrainArgs defaults;
  std::string out = flag_table().usage(program);
  out +=
      "Trains a GPT with pipeline, tensor and data parallelism (mpirun -np N for several ranks).\n"
      "Flags follow Megatron-LM's names and defaults; [ptdp] marks ptdp's own. Values are given as\n"
      "--flag value or --flag=value; boolean flags take no value.\n";
  for (int g = 0; g < kNumGroups; ++g) {
    out += str_cat("\n", kGroupTitles[g], ":\n");
    for (const Flag& f : flags()) {
      if (static_cast<int>(f.group) != g) continue;
      const json d = f.get(defaults);
      std::string shown;
      if (d.is_null()) {
        shown = "unset";
      } else if (d.is_boolean()) {
        shown = d.get<bool>() ? "on" : "off";
      } else {
        shown = d.is_string() ? d.get<std::string>() : json_text(d);
      }
      if (!f.default_note.empty()) shown += str_cat(" (", f.default_note, ")");
      out += cli::help_entry(f, shown, kColumn, kWidth);
    }
  }
  return out;
}

nlohmann::json train_args_to_json(const TrainArgs& args) {
  json j = json::object();
  for (const Flag& f : flags()) j[f.name] = f.get(args);
  return j;
}

std::vector<std::string> train_flag_names() {
  std::vector<std::string> names;
  for (const Flag& f : flags()) names.push_back(f.name);
  return names;
}

int virtual_pipeline_size(const TrainArgs& args) {
  if (args.num_virtual_stages_per_pipeline_rank) return *args.num_virtual_stages_per_pipeline_rank;
  if (!args.pipeline_model_parallel_layout.empty() && !args.num_layers_per_virtual_pipeline_stage) {
    try {
      return parse_pipeline_layout(args.pipeline_model_parallel_layout, args.pipeline_model_parallel_size).virtual_stages;
    } catch (const Error&) {
      return 1;  // validate_train_args reports the layout
    }
  }
  if (!args.num_layers_per_virtual_pipeline_stage) {
    const bool v_shaped =
        args.pipeline_schedule == ScheduleKind::ZeroBubbleV || args.pipeline_schedule == ScheduleKind::DualPipeV;
    return v_shaped ? 2 : 1;
  }
  const int per_rank = args.pipeline_model_parallel_size * *args.num_layers_per_virtual_pipeline_stage;
  return per_rank > 0 ? std::max(1, args.num_layers / per_rank) : 1;
}

ScheduleKind schedule_kind(const TrainArgs& args) {
  if (args.pipeline_schedule == ScheduleKind::ZeroBubbleV || args.pipeline_schedule == ScheduleKind::DualPipeV ||
      args.pipeline_schedule == ScheduleKind::InterleavedZeroBubble) {
    return args.pipeline_schedule;
  }
  return virtual_pipeline_size(args) > 1 ? ScheduleKind::Interleaved1F1B : args.pipeline_schedule;
}

bool uses_eod_masks(const TrainArgs& args) {
  return args.eod_mask_loss || args.reset_position_ids || args.reset_attention_mask;
}

DataSource data_source(const TrainArgs& args) {
  if (!args.data_path.empty() || !args.train_data_path.empty() || !args.valid_data_path.empty() ||
      !args.test_data_path.empty()) {
    return DataSource::Indexed;
  }
  if (!args.text_file.empty()) return DataSource::Text;
  return DataSource::Mock;
}

GptDataSpec gpt_data_spec(const TrainArgs& args) {
  GptDataSpec spec;
  spec.source = data_source(args);
  spec.path = spec.source == DataSource::Text ? args.text_file : args.data_path;
  spec.split_paths = {args.train_data_path, args.valid_data_path, args.test_data_path};
  return spec;
}

int64_t lr_decay_iters(const TrainArgs& args) { return args.lr_decay_iters.value_or(args.train_iters); }

int64_t global_batch_or_micro(const TrainArgs& args) {
  return args.global_batch_size > 0 ? args.global_batch_size : args.micro_batch_size;
}

std::array<int64_t, 3> train_num_samples(const TrainArgs& args) {
  const int64_t batch = global_batch_or_micro(args);
  const auto times = [](int64_t a, int64_t b, const char* what) {
    int64_t r = 0;
    PTDP_CHECK_ARG(!__builtin_mul_overflow(a, b, &r),
                   str_cat("the number of ", what, " samples overflows int64 (", std::to_string(a), " * ",
                       std::to_string(b), ")"));
    return r;
  };
  std::array<int64_t, 3> n{};
  n[0] = times(args.train_iters, batch, "training");
  n[1] = args.eval_interval > 0
             ? times(times(args.train_iters / args.eval_interval + 1, args.eval_iters, "validation"), batch,
                     "validation")
             : 0;
  n[2] = times(args.eval_iters, batch, "test");
  return n;
}

GptConfig to_gpt_config(const TrainArgs& args) {
  GptConfig c;
  c.num_layers = args.num_layers;
  c.hidden_size = args.hidden_size;
  c.num_attention_heads = args.num_attention_heads;
  c.ffn_hidden_size = args.ffn_hidden_size;
  c.vocab_size = args.vocab_size;
  c.make_vocab_size_divisible_by = args.make_vocab_size_divisible_by;
  c.seq_length = args.seq_length;
  c.max_position_embeddings = args.max_position_embeddings;
  c.hidden_dropout = static_cast<float>(args.hidden_dropout);
  c.attention_dropout = static_cast<float>(args.attention_dropout);
  c.init_method_std = static_cast<float>(args.init_method_std);
  c.layernorm_epsilon = static_cast<float>(args.layernorm_epsilon);
  c.tie_embeddings = !args.untie_embeddings_and_output_weights;
  c.recompute = args.recompute_granularity;
  c.seed = args.seed;
  c.precision = args.bf16 ? DType::BF16 : args.fp16 ? DType::F16 : DType::F32;
  c.attention = args.attention_backend;
  c.normalization = args.normalization;
  c.swiglu = args.swiglu;
  c.position_embedding = args.position_embedding_type;
  c.rotary_base = static_cast<float>(args.rotary_base);
  c.rotary_percent = static_cast<float>(args.rotary_percent);
  c.rope_scaling.enabled = args.use_rope_scaling;
  c.rope_scaling.factor = static_cast<float>(args.rope_scaling_factor);
  c.rope_scaling.low_freq_factor = static_cast<float>(args.rope_scaling_low_freq_factor);
  c.rope_scaling.high_freq_factor = static_cast<float>(args.rope_scaling_high_freq_factor);
  c.rope_scaling.original_max_position_embeddings = args.rope_scaling_original_max_position_embeddings;
  c.rope_type = args.rope_type;
  c.yarn.factor = static_cast<float>(args.rotary_scaling_factor);
  c.yarn.mscale = static_cast<float>(args.mscale);
  c.yarn.mscale_all_dim = static_cast<float>(args.mscale_all_dim);
  c.yarn.original_max_position_embeddings = args.original_max_position_embeddings;
  c.yarn.beta_fast = static_cast<float>(args.beta_fast);
  c.yarn.beta_slow = static_cast<float>(args.beta_slow);
  c.yarn.truncate = !args.no_yarn_correction_range_round_to_int;
  c.num_query_groups = args.group_query_attention ? args.num_query_groups.value_or(1) : 0;
  c.kv_channels = args.kv_channels.value_or(0);
  c.add_bias_linear = !args.disable_bias_linear;
  c.add_qkv_bias = args.add_qkv_bias;
  c.qk_layernorm = args.qk_layernorm;
  c.qk_layernorm_across_heads = args.qk_layernorm_across_heads;
  c.multi_latent_attention = args.multi_latent_attention;
  c.q_lora_rank = args.q_lora_rank.value_or(0);
  c.kv_lora_rank = args.kv_lora_rank;
  c.qk_head_dim = args.qk_head_dim;
  c.qk_pos_emb_head_dim = args.qk_pos_emb_head_dim;
  c.v_head_dim = args.v_head_dim;
  c.mtp_num_layers = args.mtp_num_layers;
  c.mtp_loss_scaling_factor = static_cast<float>(args.mtp_loss_scaling_factor);
  MoeConfig& m = c.moe;
  m.num_experts = args.num_experts;
  if (m.num_experts > 0) m.layer_pattern = parse_moe_layer_freq(args.moe_layer_freq, args.num_layers);
  m.ffn_hidden_size = args.moe_ffn_hidden_size.value_or(0);
  m.shared_expert_intermediate_size = args.moe_shared_expert_intermediate_size.value_or(0);
  m.shared_expert_gate = args.moe_shared_expert_gate;
  m.router_topk = args.moe_router_topk;
  m.score_function = args.moe_router_score_function;
  m.pre_softmax = args.moe_router_pre_softmax;
  m.topk_scaling_factor = static_cast<float>(args.moe_router_topk_scaling_factor.value_or(0.0));
  m.num_groups = args.moe_router_num_groups.value_or(0);
  m.group_topk = args.moe_router_group_topk.value_or(0);
  m.group_score_topk = args.moe_router_group_score_topk.value_or(0);
  if (args.moe_router_topk_limited_devices) {
    m.topk_limited_devices = *args.moe_router_topk_limited_devices;
    m.group_topk = m.topk_limited_devices;
    m.num_groups = args.moe_router_num_groups.value_or(args.expert_model_parallel_size);
  }
  m.enable_expert_bias = args.moe_router_enable_expert_bias;
  m.bias_update_rate = static_cast<float>(args.moe_router_bias_update_rate);
  m.load_balancing = args.moe_router_load_balancing_type;
  m.aux_loss_coeff = static_cast<float>(args.moe_aux_loss_coeff);
  m.z_loss_coeff = static_cast<float>(args.moe_z_loss_coeff.value_or(0.0));
  m.capacity_factor = static_cast<float>(args.moe_expert_capacity_factor.value_or(0.0));
  m.drop_policy = args.moe_token_drop_policy;
  m.pad_expert_input_to_capacity = args.moe_pad_expert_input_to_capacity;
  m.dispatcher = args.moe_token_dispatcher_type;
  // Megatron's recompute_modules: --moe-layer-recompute makes the granularity selective and adds
  // moe to the modules (default core_attn); with selective granularity the modules say what is
  // recomputed.
  const bool selective = args.recompute_granularity == Recompute::Selective || args.moe_layer_recompute;
  if (selective) {
    const std::string modules = args.recompute_modules.empty() ? "core_attn" : args.recompute_modules;
    c.recompute = split_words_contain(modules, "core_attn") ? Recompute::Selective : Recompute::None;
    m.recompute = m.num_experts > 0 && (args.moe_layer_recompute || split_words_contain(modules, "moe"));
  }
  return c;
}

LossScalerConfig to_loss_scaler_config(const TrainArgs& args) {
  LossScalerConfig c;
  c.growth_interval = args.loss_scale_window;
  c.hysteresis = args.hysteresis;
  if ((args.fp16 || args.bf16) && args.loss_scale) {
    c.dynamic = false;
    c.initial_scale = static_cast<float>(*args.loss_scale);
    c.min_scale = std::min(static_cast<float>(args.min_loss_scale), c.initial_scale);
  } else if (args.fp16) {
    c.dynamic = true;
    c.initial_scale = static_cast<float>(args.initial_loss_scale);
    c.min_scale = static_cast<float>(args.min_loss_scale);
  } else {
    c.dynamic = false;
    c.initial_scale = 1.0f;
    c.min_scale = 1.0f;
  }
  return c;
}

OptimizerConfig to_optimizer_config(const TrainArgs& args) {
  OptimizerConfig c;
  c.kind = args.optimizer;
  c.lr.lr = args.lr;
  c.lr.min_lr = args.min_lr;
  c.lr.style = args.lr_decay_style;
  c.lr.warmup_iters = args.lr_warmup_iters;
  c.lr.decay_iters = lr_decay_iters(args);
  c.beta1 = static_cast<float>(args.adam_beta1);
  c.beta2 = static_cast<float>(args.adam_beta2);
  c.eps = static_cast<float>(args.adam_eps);
  c.weight_decay = static_cast<float>(args.weight_decay);
  c.momentum = static_cast<float>(args.sgd_momentum);
  c.muon.momentum = static_cast<float>(args.muon_momentum);
  c.muon.nesterov = args.muon_nesterov;
  c.muon.ns_steps = args.muon_num_ns_steps;
  c.muon.coefficients = args.muon_coefficient_type;
  c.muon.precision = args.muon_fp32_matmul_prec;
  c.muon.scale_mode = args.muon_scale_mode;
  c.muon.extra_scale_factor = static_cast<float>(args.muon_extra_scale_factor);
  c.muon.split_qkv = args.muon_split_qkv;
  c.muon.tp_mode = args.muon_tp_mode;
  c.muon.qk_clip = args.qk_clip;
  c.muon.qk_clip_threshold = static_cast<float>(args.qk_clip_threshold);
  c.muon.qk_clip_alpha = static_cast<float>(args.qk_clip_alpha);
  c.clip_grad = static_cast<float>(args.clip_grad);
  c.loss_scale = to_loss_scaler_config(args);
  c.distributed = args.use_distributed_optimizer;
  c.bucket_elements = args.ddp_bucket_size;
  c.overlap_grad_reduce = args.overlap_grad_reduce;
  c.overlap_param_gather = args.overlap_param_gather;
  return c;
}

ParallelConfig to_parallel_config(const TrainArgs& args, int world_size) {
  ParallelConfig c;
  c.world = world_size;
  c.tensor = args.tensor_model_parallel_size;
  c.pipeline = args.pipeline_model_parallel_size;
  c.virtual_stages = virtual_pipeline_size(args);
  c.first_stage_layers = args.decoder_first_pipeline_num_layers.value_or(0);
  c.last_stage_layers = args.decoder_last_pipeline_num_layers.value_or(0);
  c.sequence_parallel = args.sequence_parallel;
  c.pipeline_layout = args.pipeline_model_parallel_layout;
  c.context = args.context_parallel_size;
  c.chunk_placement = static_cast<int>(placement_of(schedule_kind(args)));
  c.expert_model = args.expert_model_parallel_size;
  c.expert_tensor = args.expert_tensor_parallel_size.value_or(0);
  return c;
}

}  // namespace ptdp
