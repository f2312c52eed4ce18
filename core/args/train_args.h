// ptdp-train's command line: Megatron-LM's flag names, meanings and defaults, plus ptdp's own
// flags. Parsed here, in the library, so that every binding and the C driver accept exactly the
// same flags and report the same errors. Nothing in this file prints or exits.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/data/blended_dataset.h"
#include "core/data/gpt_dataset.h"
#include "core/model/gpt_config.h"
#include "core/optim/optimizer.h"
#include "core/parallel/layout.h"
#include "core/pipeline/schedule.h"

namespace ptdp {

/// Every flag of ptdp-train, under Megatron's argparse names (dashes become underscores).
/// Unset optional flags are std::nullopt; unset paths are empty strings (an empty value on the
/// command line is refused, so empty always means "not given").
struct TrainArgs {
  bool help = false;  ///< --help / -h: the caller prints train_args_help(); nothing else was read

  // Model. --model-preset fills these from a named preset first; flags given on the command
  // line then override it, wherever they stand.
  std::string model_preset;  ///< as given (any case); empty: none
  int num_layers = 2;
  int hidden_size = 64;
  int ffn_hidden_size = 0;  ///< 0: 4 * hidden_size, or with --swiglu int(8 h / 3 / 64) * 64
  int num_attention_heads = 4;
  int seq_length = 32;
  int max_position_embeddings = 0;  ///< 0: seq_length
  int vocab_size = 256;
  int make_vocab_size_divisible_by = 128;
  double init_method_std = 0.02;
  double hidden_dropout = 0.1;
  double attention_dropout = 0.1;
  double layernorm_epsilon = 1e-5;  ///< --norm-epsilon, or its older name --layernorm-epsilon
  bool untie_embeddings_and_output_weights = false;
  Recompute recompute_granularity = Recompute::None;
  AttentionImpl attention_backend = AttentionImpl::Auto;
  // The Llama family's options (Megatron's names and defaults).
  Normalization normalization = Normalization::LayerNorm;
  bool swiglu = false;
  PositionEmbedding position_embedding_type = PositionEmbedding::LearnedAbsolute;
  double rotary_base = 10000.0;
  double rotary_percent = 1.0;
  bool use_rope_scaling = false;
  double rope_scaling_factor = 8.0;
  double rope_scaling_low_freq_factor = 1.0;                ///< [ptdp] Llama 3.1's low_freq_factor
  double rope_scaling_high_freq_factor = 4.0;               ///< [ptdp] Llama 3.1's high_freq_factor
  int rope_scaling_original_max_position_embeddings = 8192;  ///< [ptdp] Llama 3.1's
  // YaRN (Megatron-Core's MLA flags, for every RoPE model; docs/deepseek.md).
  RopeType rope_type = RopeType::Rope;
  double rotary_scaling_factor = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
  int original_max_position_embeddings = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool no_yarn_correction_range_round_to_int = false;
  bool group_query_attention = false;
  std::optional<int> num_query_groups;  ///< only with --group-query-attention; unset: 1 (Megatron's)
  std::optional<int> kv_channels;       ///< unset: hidden_size / num_attention_heads
  bool disable_bias_linear = false;
  bool add_qkv_bias = false;
  bool qk_layernorm = false;
  bool qk_layernorm_across_heads = false;  ///< [ptdp] q/k norms over the whole projections (OLMo 2, OLMoE)
  // Mixture of experts (Megatron-Core's --num-experts and --moe-* flags, names and defaults;
  // docs/moe.md). Unset optional flags are Megatron's None.
  int num_experts = 0;                      ///< 0: dense (Megatron's None)
  std::string moe_layer_freq = "1";         ///< an integer N or a list pattern (core/args/moe_layer_freq.h)
  std::optional<int> moe_ffn_hidden_size;   ///< unset: ffn_hidden_size
  std::optional<int> moe_shared_expert_intermediate_size;  ///< unset: no shared expert
  bool moe_shared_expert_gate = false;
  int moe_router_topk = 2;
  MoeScoreFunction moe_router_score_function = MoeScoreFunction::Softmax;
  bool moe_router_pre_softmax = false;
  std::optional<double> moe_router_topk_scaling_factor;    ///< unset: no scaling
  std::optional<int> moe_router_num_groups;                ///< unset: no group-limited routing
  std::optional<int> moe_router_group_topk;
  bool moe_router_enable_expert_bias = false;
  double moe_router_bias_update_rate = 1e-3;
  std::string moe_router_dtype;             ///< "" or "fp32" (the router always computes in fp32)
  MoeLoadBalancing moe_router_load_balancing_type = MoeLoadBalancing::AuxLoss;
  double moe_aux_loss_coeff = 0.0;
  std::optional<double> moe_z_loss_coeff;   ///< unset: no z-loss
  std::optional<double> moe_expert_capacity_factor;  ///< unset: dropless
  MoeDropPolicy moe_token_drop_policy = MoeDropPolicy::Probs;
  bool moe_pad_expert_input_to_capacity = false;
  MoeDispatcher moe_token_dispatcher_type = MoeDispatcher::AllToAll;
  bool moe_layer_recompute = false;         ///< Megatron's deprecated spelling of --recompute-modules moe
  /// --recompute-modules, words joined by spaces (core_attn, moe); unset: core_attn. Read with
  /// --recompute-granularity selective, as Megatron's.
  std::string recompute_modules;
  /// [ptdp] --moe-router-group-score-topk: the best scores summed into a group's score; unset:
  /// k / group-topk (Megatron's). 1: DeepSeek-V2's group maximum, 2: DeepSeek-V3's top-2 sum.
  std::optional<int> moe_router_group_score_topk;
  /// --moe-router-topk-limited-devices M: group-limited routing with M groups per token over
  /// --moe-router-num-groups groups (unset: --expert-model-parallel-size, Megatron's rule).
  std::optional<int> moe_router_topk_limited_devices;

  // Parallelism.
  int tensor_model_parallel_size = 1;
  int pipeline_model_parallel_size = 1;
  std::optional<int> num_layers_per_virtual_pipeline_stage;  ///< unset: v = 1
  std::optional<int> num_virtual_stages_per_pipeline_rank;   ///< v itself; exclusive with the flag above
  std::optional<int> decoder_first_pipeline_num_layers;      ///< unset: an even split
  std::optional<int> decoder_last_pipeline_num_layers;       ///< unset: an even split
  bool use_distributed_optimizer = false;
  bool sequence_parallel = false;  ///< --sequence-parallel
  std::string pipeline_model_parallel_layout;  ///< --pipeline-model-parallel-layout; "" none
  int context_parallel_size = 1;   ///< --context-parallel-size
  int expert_model_parallel_size = 1;                ///< e
  std::optional<int> expert_tensor_parallel_size;    ///< etp; unset: tensor_model_parallel_size
  ScheduleKind pipeline_schedule = ScheduleKind::OneFOneB;  ///< as given; see schedule_kind()
  int64_t ddp_bucket_size = 0;                              ///< elements; 0: one bucket per chunk
  bool overlap_grad_reduce = false;   ///< reduce each bucket as the backward completes it
  bool overlap_param_gather = false;  ///< gather updated weights bucket by bucket before their first use

  // Training.
  int micro_batch_size = 1;
  int global_batch_size = 0;  ///< 0: micro_batch_size * d (one microbatch per replica)
  int64_t train_iters = 10;
  int64_t exit_interval = 0;  ///< stop after an iteration divisible by it (0: never), saving first with --save
  uint64_t seed = 1234;
  /// --check-for-nan-in-loss-and-grad (Megatron's flag, off here): stop at the first non-finite
  /// loss or local gradient, naming the rank, stage and parameter (core/train/nan_check.h).
  bool check_for_nan_in_loss_and_grad = false;
  /// Stop (exit status 3) after this many consecutive skipped iterations; 0: never.
  int64_t max_skipped_iterations = 100;

  // Optimizer and learning rate.
  OptimizerKind optimizer = OptimizerKind::Adam;
  double lr = 1e-4;
  double min_lr = 0.0;
  LrDecayStyle lr_decay_style = LrDecayStyle::Linear;
  int64_t lr_warmup_iters = 0;
  std::optional<int64_t> lr_decay_iters;  ///< unset: train_iters (Megatron)
  double weight_decay = 0.01;
  double clip_grad = 1.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  double sgd_momentum = 0.9;
  // Muon (--optimizer muon; Megatron's flags, ptdp's defaults where they differ; docs/guides/muon.md).
  // Read only with --optimizer muon (refused otherwise when changed from the default).
  double muon_momentum = 0.95;                                 ///< in [0, 1)
  bool muon_nesterov = false;                                  ///< --muon-nesterov or --muon-use-nesterov
  int muon_num_ns_steps = 5;                                   ///< in [1, 100]
  NsCoefficients muon_coefficient_type = NsCoefficients::Quintic;
  NsPrecision muon_fp32_matmul_prec = NsPrecision::Highest;    ///< Megatron's default: medium
  MuonScaleMode muon_scale_mode = MuonScaleMode::Spectral;
  double muon_extra_scale_factor = 1.0;                        ///< > 0
  bool muon_split_qkv = true;                                  ///< --muon-no-split-qkv: false
  MuonTpMode muon_tp_mode = MuonTpMode::Distributed;           ///< Megatron's default: blockwise
  std::string muon_scalar_optimizer = "adam";                  ///< the only one built (Megatron's lion is not)
  bool qk_clip = false;                                        ///< MuonClip (Kimi K2)
  double qk_clip_threshold = 100.0;                            ///< > 0
  double qk_clip_alpha = 0.5;                                  ///< in [0, 1]

  // Mixed precision.
  bool fp16 = false;
  bool bf16 = false;
  std::optional<double> loss_scale;   ///< constant scale (with --fp16 or --bf16); unset: dynamic with --fp16
  double initial_loss_scale = 4294967296.0;  ///< 2^32, Megatron's
  double min_loss_scale = 1.0;
  int loss_scale_window = 1000;
  int hysteresis = 2;

  // Data. Exactly one source; mock_data is true when neither of the others is given.
  bool mock_data = true;
  std::string data_path;  ///< Megatron indexed data set prefix, or its list "W1 P1 W2 P2 ..." (words joined by spaces)
  // Megatron's per-split lists (each a prefix or a list, as --data-path; exclusive with it).
  std::string train_data_path;
  std::string valid_data_path;
  std::string test_data_path;
  std::string text_file;
  std::string split = "969,30,1";  ///< normalised: three comma-separated weights
  std::string tokenizer_type;  ///< "" or a Megatron --tokenizer-type name (core/data/tokenizer.h)
  std::string vocab_file;      ///< --vocab-file: GPT2BPETokenizer's vocab.json
  std::string merge_file;      ///< --merge-file: GPT2BPETokenizer's merges.txt
  std::string tokenizer_model; ///< --tokenizer-model: tokenizer.json or a SentencePiece .model
  // Documents in a sample (Megatron's flags; core/data/gpt_dataset.h eod_masks): each needs the
  // end-of-document id: --eod-token-id, or else the eod of a tokenizer read from files
  // (--tokenizer-type HuggingFaceTokenizer, ...; ByteLevel and NullTokenizer have none that fits).
  bool eod_mask_loss = false;
  bool reset_position_ids = false;
  bool reset_attention_mask = false;
  std::optional<int> eod_token_id;  ///< [ptdp] in [0, vocab_size); required by the three flags above

  // Checkpoints.
  std::string save;
  std::string load;
  /// --finetune: --load reads the parameters only (iteration 0, a fresh optimizer and data
  /// position, as Megatron's), so a checkpoint without optimizer state (ptdp-convert's) loads.
  bool finetune = false;
  /// --override-resume-check [ptdp]: resume although trajectory flags (seed, data, tokenizer,
  /// model shape) differ from the checkpoint's recorded ones (refused otherwise).
  bool override_resume_check = false;
  int64_t save_interval = 0;  ///< 0: save only at the end (when --save is given)

  // Logging and evaluation.
  int64_t log_interval = 100;
  int64_t eval_interval = 1000;  ///< 0: never evaluate
  int64_t eval_iters = 100;
  std::string log_json;
  std::string profile_trace;
  std::string plot_file;  ///< SVG of the run's curves, refreshed at every log interval

  // ptdp.
  std::string device = "auto";  ///< "auto", "cpu" or "cuda"
  /// Seconds, every blocking wait; unset: PTDP_COMM_TIMEOUT_S when set, else 300 (the flag wins
  /// over the variable, the variable over the default).
  std::optional<double> comm_timeout;
  double peak_tflops = 0.0;      ///< one device's dense peak for the MFU; 0: measured (CPU) or datasheet (GPU)
  /// --max-restarts N (torchrun's name): outside an MPI launcher ptdp-train supervises the job,
  /// relaunching it from the latest checkpoint of --save up to N times (core/train/supervisor.h).
  int max_restarts = 0;
  std::string launcher;  ///< --launcher: the supervised job's launcher command ("mpiexec -n 8")

  // Multi-latent attention (Megatron-Core's --multi-latent-attention group; docs/deepseek.md).
  bool multi_latent_attention = false;
  std::optional<int> q_lora_rank;  ///< unset (Megatron's None): no query compression, linear_q_proj
  int kv_lora_rank = 32;
  int qk_head_dim = 128;
  int qk_pos_emb_head_dim = 64;
  int v_head_dim = 128;
  // Multi-token prediction (Megatron-Core's flags; core/model/mtp.h).
  int mtp_num_layers = 0;                 ///< D; 0: none (Megatron's None)
  double mtp_loss_scaling_factor = 0.1;   ///< Megatron's default
};

/// Parses a command line (without the program name): `--flag value`, `--flag=value`, boolean
/// flags without a value; `--model-preset NAME` first fills the model flags from the preset
/// (core/model/model_presets.h), then every other flag given overrides it, whatever the order.
/// `--help` (or `-h`) anywhere returns the defaults with help = true and checks nothing else. Throws Error(InvalidArgument) whose message names the flag and the value:
/// unknown flags, missing, malformed or out-of-range values, and flags that contradict each
/// other. Checks that need the world size (t * p dividing it) are the driver's.
TrainArgs parse_train_args(const std::vector<std::string>& args);

/// The --help text: a usage line naming `program`, then every flag with its meaning and default,
/// grouped (model, parallelism, training, optimizer, mixed precision, data, checkpoints, logging,
/// ptdp).
std::string train_args_help(const std::string& program);

/// Every flag as one JSON object keyed by the flag's name without dashes ("num-layers"); unset
/// optional flags are null, choices are their command-line spelling. Strings are the values
/// as given, which need not be UTF-8 (paths): write them with json_text (io/json_text.h).
nlohmann::json train_args_to_json(const TrainArgs& args);

/// The names of every flag, without dashes, in help order.
std::vector<std::string> train_flag_names();

/// v: --num-virtual-stages-per-pipeline-rank, or layers / (p * layers per virtual stage) when
/// that flag is given, else 1.
int virtual_pipeline_size(const TrainArgs& args);
/// The schedule to run: interleaved 1F1B when v > 1, else the --pipeline-schedule given.
ScheduleKind schedule_kind(const TrainArgs& args);
DataSource data_source(const TrainArgs& args);
/// Where the samples come from: the source, --data-path (one prefix or a blend) or --text-file,
/// and the per-split lists (core/data/blended_dataset.h make_gpt_dataset).
GptDataSpec gpt_data_spec(const TrainArgs& args);
/// Whether any of --eod-mask-loss, --reset-position-ids, --reset-attention-mask is given (the
/// batches then get their masks from --eod-token-id).
bool uses_eod_masks(const TrainArgs& args);
/// --lr-decay-iters, or --train-iters when it is not given.
int64_t lr_decay_iters(const TrainArgs& args);
/// Global batch size B, or micro_batch_size when --global-batch-size is 0 (the driver, knowing
/// d, uses b * d instead).
int64_t global_batch_or_micro(const TrainArgs& args);
/// Samples the run reads per split (train, valid, test), with B = global_batch_or_micro():
/// train-iters * B, (train-iters / eval-interval + 1) * eval-iters * B (0 without evaluation),
/// eval-iters * B. Throws Error(InvalidArgument) when a count overflows int64.
std::array<int64_t, 3> train_num_samples(const TrainArgs& args);

/// The model of the flags: --num-query-groups g with --group-query-attention (g = 1 when only
/// that flag is given), multi-head attention without it; the MoE flags with --moe-layer-freq
/// expanded over --num-layers and --recompute-modules / --moe-layer-recompute resolved
/// (Megatron's rules: --moe-layer-recompute turns selective granularity on and adds moe to the
/// modules; with selective granularity, core_attn is ptdp's selective recomputation and moe
/// MoeConfig::recompute).
GptConfig to_gpt_config(const TrainArgs& args);
/// Loss scaling as Megatron picks it: constant --loss-scale with --fp16 or --bf16, dynamic from
/// --initial-loss-scale with --fp16, otherwise none (a constant 1).
LossScalerConfig to_loss_scaler_config(const TrainArgs& args);
OptimizerConfig to_optimizer_config(const TrainArgs& args);
/// t, p, v, c, e, etp and the first and last stage layers of the flags over `world_size` ranks
/// (not validated against it here).
ParallelConfig to_parallel_config(const TrainArgs& args, int world_size);

}  // namespace ptdp
