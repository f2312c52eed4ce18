// ptdp-train's flags through the public C API only: every flag reaches the option structs it
// belongs to, the defaults with no flags, both value spellings, --help, the help text and the
// JSON, every bad value named in the message, and the argument checks of each call.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ptdp/ptdp.h"

namespace {

// Every flag with the default its --help line must show (kept by hand, so a changed default or
// a dropped flag fails here).
const std::vector<std::pair<std::string, std::string>> kFlagDefaults = {
    {"model-preset", "unset"},
    {"num-layers", "2"},
    {"hidden-size", "64"},
    {"ffn-hidden-size", "0"},
    {"num-attention-heads", "4"},
    {"seq-length", "32"},
    {"max-position-embeddings", "0"},
    {"vocab-size", "256"},
    {"make-vocab-size-divisible-by", "128"},
    {"init-method-std", "0.02"},
    {"hidden-dropout", "0.1"},
    {"attention-dropout", "0.1"},
    {"norm-epsilon", "1e-05"},
    {"layernorm-epsilon", "1e-05"},
    {"untie-embeddings-and-output-weights", "off"},
    {"recompute-granularity", "none"},
    {"recompute-modules", "unset (core_attn)"},
    {"attention-backend", "auto"},
    {"normalization", "LayerNorm"},
    {"swiglu", "off"},
    {"position-embedding-type", "learned_absolute"},
    {"rotary-base", "10000.0"},
    {"rotary-percent", "1.0"},
    {"use-rope-scaling", "off"},
    {"rope-scaling-factor", "8.0"},
    {"rope-scaling-low-freq-factor", "1.0"},
    {"rope-scaling-high-freq-factor", "4.0"},
    {"rope-scaling-original-max-position-embeddings", "8192"},
    {"rope-type", "rope"},
    {"rotary-scaling-factor", "1.0"},
    {"mscale", "1.0"},
    {"mscale-all-dim", "0.0"},
    {"original-max-position-embeddings", "4096"},
    {"beta-fast", "32.0"},
    {"beta-slow", "1.0"},
    {"no-yarn-correction-range-round-to-int", "off"},
    {"group-query-attention", "off"},
    {"num-query-groups", "unset (1 with --group-query-attention)"},
    {"kv-channels", "unset (hidden-size / num-attention-heads)"},
    {"disable-bias-linear", "off"},
    {"add-qkv-bias", "off"},
    {"qk-layernorm", "off"},
    {"qk-layernorm-across-heads", "off"},
    {"multi-latent-attention", "off"},
    {"q-lora-rank", "unset (no query compression: linear_q_proj)"},
    {"kv-lora-rank", "32"},
    {"qk-head-dim", "128"},
    {"qk-pos-emb-head-dim", "64"},
    {"v-head-dim", "128"},
    {"num-experts", "0"},
    {"moe-layer-freq", "1"},
    {"moe-ffn-hidden-size", "unset (ffn-hidden-size)"},
    {"moe-shared-expert-intermediate-size", "unset (no shared expert)"},
    {"moe-shared-expert-gate", "off"},
    {"moe-router-topk", "2"},
    {"moe-router-score-function", "softmax"},
    {"moe-router-pre-softmax", "off"},
    {"moe-router-topk-scaling-factor", "unset (no scaling)"},
    {"moe-router-num-groups", "unset (none)"},
    {"moe-router-group-topk", "unset (none)"},
    {"moe-router-enable-expert-bias", "off"},
    {"moe-router-bias-update-rate", "0.001"},
    {"moe-router-dtype", "unset (fp32 always)"},
    {"moe-router-load-balancing-type", "aux_loss"},
    {"moe-aux-loss-coeff", "0.0"},
    {"moe-z-loss-coeff", "unset (no z-loss)"},
    {"moe-expert-capacity-factor", "unset (dropless)"},
    {"moe-token-drop-policy", "probs"},
    {"moe-pad-expert-input-to-capacity", "off"},
    {"moe-token-dispatcher-type", "alltoall"},
    {"moe-layer-recompute", "off"},
    {"moe-router-group-score-topk", "unset (k / group-topk)"},
    {"moe-router-topk-limited-devices", "unset (none)"},
    {"mtp-num-layers", "0"},
    {"mtp-loss-scaling-factor", "0.1"},
    {"tensor-model-parallel-size", "1"},
    {"pipeline-model-parallel-size", "1"},
    {"num-layers-per-virtual-pipeline-stage", "unset (v = 1)"},
    {"num-virtual-stages-per-pipeline-rank", "unset (v = 1)"},
    {"pipeline-model-parallel-layout", "unset"},
    {"decoder-first-pipeline-num-layers", "unset (an even split)"},
    {"decoder-last-pipeline-num-layers", "unset (an even split)"},
    {"pipeline-schedule", "1f1b"},
    {"sequence-parallel", "off"},
    {"context-parallel-size", "1"},
    {"expert-model-parallel-size", "1"},
    {"expert-tensor-parallel-size", "unset (tensor-model-parallel-size)"},
    {"use-distributed-optimizer", "off"},
    {"ddp-bucket-size", "0"},
    {"overlap-grad-reduce", "off"},
    {"overlap-param-gather", "off"},
    {"micro-batch-size", "1"},
    {"global-batch-size", "0"},
    {"train-iters", "10"},
    {"exit-interval", "0"},
    {"seed", "1234"},
    {"check-for-nan-in-loss-and-grad", "off"},
    {"max-skipped-iterations", "100"},
    {"optimizer", "adam"},
    {"lr", "0.0001"},
    {"min-lr", "0.0"},
    {"lr-decay-style", "linear"},
    {"lr-warmup-iters", "0"},
    {"lr-decay-iters", "unset (= train-iters)"},
    {"weight-decay", "0.01"},
    {"clip-grad", "1.0"},
    {"adam-beta1", "0.9"},
    {"adam-beta2", "0.999"},
    {"adam-eps", "1e-08"},
    {"sgd-momentum", "0.9"},
    {"muon-momentum", "0.95"},
    {"muon-nesterov", "off"},
    {"muon-use-nesterov", "off"},
    {"muon-num-ns-steps", "5"},
    {"muon-coefficient-type", "quintic"},
    {"muon-fp32-matmul-prec", "highest"},
    {"muon-scale-mode", "spectral"},
    {"muon-extra-scale-factor", "1.0"},
    {"muon-split-qkv", "on (unless --muon-no-split-qkv)"},
    {"muon-no-split-qkv", "off"},
    {"muon-tp-mode", "distributed"},
    {"muon-scalar-optimizer", "adam"},
    {"qk-clip", "off"},
    {"qk-clip-threshold", "100.0"},
    {"qk-clip-alpha", "0.5"},
    {"fp16", "off"},
    {"bf16", "off"},
    {"loss-scale", "unset (dynamic with --fp16)"},
    {"initial-loss-scale", "4294967296.0"},
    {"min-loss-scale", "1.0"},
    {"loss-scale-window", "1000"},
    {"hysteresis", "2"},
    {"mock-data", "on (when neither --data-path nor --text-file is given)"},
    {"data-path", "unset"},
    {"text-file", "unset"},
    {"split", "969,30,1"},
    {"train-data-path", "unset"},
    {"valid-data-path", "unset"},
    {"test-data-path", "unset"},
    {"tokenizer-type", "unset"},
    {"vocab-file", "unset"},
    {"merge-file", "unset"},
    {"tokenizer-model", "unset"},
    {"eod-mask-loss", "off"},
    {"reset-position-ids", "off"},
    {"reset-attention-mask", "off"},
    {"eod-token-id", "unset (the eod of a tokenizer read from files)"},
    {"finetune", "off"},
    {"override-resume-check", "off"},
    {"save", "unset"},
    {"load", "unset"},
    {"save-interval", "0"},
    {"log-interval", "100"},
    {"eval-interval", "1000"},
    {"eval-iters", "100"},
    {"log-json", "unset"},
    {"profile-trace", "unset"},
    {"plot-file", "unset"},
    {"device", "auto"},
    {"comm-timeout", "unset (PTDP_COMM_TIMEOUT_S, else 300)"},
    {"peak-tflops", "0.0"},
    {"max-restarts", "0"},
    {"launcher", "unset"},
    {"help", "off"},
};

// argv with the program name in front.
struct Argv {
  std::vector<std::string> strings;
  std::vector<const char*> pointers;
  explicit Argv(std::vector<std::string> args) : strings(std::move(args)) {
    strings.insert(strings.begin(), "ptdp-train");
    for (const auto& s : strings) pointers.push_back(s.c_str());
  }
  int32_t argc() const { return static_cast<int32_t>(pointers.size()); }
  const char* const* argv() const { return pointers.data(); }
};

// A parsed configuration that frees itself.
struct Config {
  ptdp_train_config handle = nullptr;
  explicit Config(const std::vector<std::string>& args) {
    const Argv a(args);
    const ptdp_status st = ptdp_train_config_parse(a.argc(), a.argv(), &handle);
    INFO(ptdp_last_error());
    REQUIRE(st == PTDP_SUCCESS);
    REQUIRE(handle != nullptr);
  }
  ~Config() { ptdp_train_config_destroy(handle); }
  Config(const Config&) = delete;
  Config& operator=(const Config&) = delete;
};

// Everything a configuration hands out.
struct Snapshot {
  ptdp_gpt_options gpt;
  ptdp_optimizer_options opt;
  ptdp_parallel_options par;
  ptdp_runtime_options rt;
  ptdp_train_settings set;
  ptdp_gpt_data_options data;
};

Snapshot snapshot(ptdp_train_config c) {
  Snapshot s;
  std::memset(static_cast<void*>(&s), 0xab, sizeof s);  // every field must be written
  REQUIRE(ptdp_train_config_gpt_options(c, &s.gpt) == PTDP_SUCCESS);
  REQUIRE(ptdp_train_config_optimizer_options(c, &s.opt) == PTDP_SUCCESS);
  REQUIRE(ptdp_train_config_parallel_options(c, &s.par) == PTDP_SUCCESS);
  REQUIRE(ptdp_train_config_runtime_options(c, &s.rt) == PTDP_SUCCESS);
  REQUIRE(ptdp_train_config_settings(c, &s.set) == PTDP_SUCCESS);
  REQUIRE(ptdp_train_config_data_options(c, &s.data) == PTDP_SUCCESS);
  CHECK(s.gpt.struct_size == sizeof(ptdp_gpt_options));
  CHECK(s.opt.struct_size == sizeof(ptdp_optimizer_options));
  CHECK(s.par.struct_size == sizeof(ptdp_parallel_options));
  CHECK(s.rt.struct_size == sizeof(ptdp_runtime_options));
  CHECK(s.set.struct_size == sizeof(ptdp_train_settings));
  CHECK(s.data.struct_size == sizeof(ptdp_gpt_data_options));
  return s;
}

std::string str(const char* s) { return s ? std::string(s) : std::string("(NULL)"); }

// Every field as text, to compare two snapshots whole.
std::string describe(const Snapshot& s) {
  std::string d;
  const auto add = [&d](const char* name, const std::string& v) {
    d += name;
    d += '=';
    d += v;
    d += '\n';
  };
  const auto num = [](double v) { return std::to_string(v); };
  add("num_layers", num(s.gpt.num_layers));
  add("hidden_size", num(s.gpt.hidden_size));
  add("num_attention_heads", num(s.gpt.num_attention_heads));
  add("ffn_hidden_size", num(s.gpt.ffn_hidden_size));
  add("vocab_size", num(s.gpt.vocab_size));
  add("make_vocab_size_divisible_by", num(s.gpt.make_vocab_size_divisible_by));
  add("seq_length", num(s.gpt.seq_length));
  add("max_position_embeddings", num(s.gpt.max_position_embeddings));
  add("hidden_dropout", num(s.gpt.hidden_dropout));
  add("attention_dropout", num(s.gpt.attention_dropout));
  add("init_method_std", num(s.gpt.init_method_std));
  add("layernorm_epsilon", num(s.gpt.layernorm_epsilon));
  add("untie", num(s.gpt.untie_embeddings_and_output_weights));
  add("recompute", num(s.gpt.recompute_granularity));
  add("gpt.seed", num(static_cast<double>(s.gpt.seed)));
  add("normalization", num(s.gpt.normalization));
  add("swiglu", num(s.gpt.swiglu));
  add("position_embedding_type", num(s.gpt.position_embedding_type));
  add("rotary_base", num(s.gpt.rotary_base));
  add("rotary_percent", num(s.gpt.rotary_percent));
  add("use_rope_scaling", num(s.gpt.use_rope_scaling));
  add("rope_scaling_factor", num(s.gpt.rope_scaling_factor));
  add("rope_low_freq_factor", num(s.gpt.rope_low_freq_factor));
  add("rope_high_freq_factor", num(s.gpt.rope_high_freq_factor));
  add("rope_original_max_position_embeddings", num(s.gpt.rope_original_max_position_embeddings));
  add("num_query_groups", num(s.gpt.num_query_groups));
  add("kv_channels", num(s.gpt.kv_channels));
  add("disable_bias_linear", num(s.gpt.disable_bias_linear));
  add("add_qkv_bias", num(s.gpt.add_qkv_bias));
  add("qk_layernorm", num(s.gpt.qk_layernorm));
  add("qk_layernorm_across_heads", num(s.gpt.qk_layernorm_across_heads));
  add("rope_type", num(s.gpt.rope_type));
  add("rotary_scaling_factor", num(s.gpt.rotary_scaling_factor));
  add("mscale", num(s.gpt.mscale));
  add("mscale_all_dim", num(s.gpt.mscale_all_dim));
  add("original_max_position_embeddings", num(s.gpt.original_max_position_embeddings));
  add("beta_fast", num(s.gpt.beta_fast));
  add("beta_slow", num(s.gpt.beta_slow));
  add("yarn_no_round_to_int", num(s.gpt.yarn_no_round_to_int));
  add("optimizer", num(s.opt.optimizer));
  add("lr", num(s.opt.lr));
  add("min_lr", num(s.opt.min_lr));
  add("lr_decay_style", num(s.opt.lr_decay_style));
  add("lr_warmup_iters", num(static_cast<double>(s.opt.lr_warmup_iters)));
  add("lr_decay_iters", num(static_cast<double>(s.opt.lr_decay_iters)));
  add("adam_beta1", num(s.opt.adam_beta1));
  add("adam_beta2", num(s.opt.adam_beta2));
  add("adam_eps", num(s.opt.adam_eps));
  add("weight_decay", num(s.opt.weight_decay));
  add("sgd_momentum", num(s.opt.sgd_momentum));
  add("clip_grad", num(s.opt.clip_grad));
  add("dynamic_loss_scale", num(s.opt.dynamic_loss_scale));
  add("initial_loss_scale", num(s.opt.initial_loss_scale));
  add("min_loss_scale", num(s.opt.min_loss_scale));
  add("loss_scale_window", num(s.opt.loss_scale_window));
  add("hysteresis", num(s.opt.hysteresis));
  add("use_distributed_optimizer", num(s.opt.use_distributed_optimizer));
  add("ddp_bucket_size", num(static_cast<double>(s.opt.ddp_bucket_size)));
  add("overlap_grad_reduce", num(s.opt.overlap_grad_reduce));
  add("overlap_param_gather", num(s.opt.overlap_param_gather));
  add("muon_momentum", num(s.opt.muon_momentum));
  add("muon_nesterov", num(s.opt.muon_nesterov));
  add("muon_num_ns_steps", num(s.opt.muon_num_ns_steps));
  add("muon_coefficient_type", num(s.opt.muon_coefficient_type));
  add("muon_fp32_matmul_prec", num(s.opt.muon_fp32_matmul_prec));
  add("muon_scale_mode", num(s.opt.muon_scale_mode));
  add("muon_extra_scale_factor", num(s.opt.muon_extra_scale_factor));
  add("muon_split_qkv", num(s.opt.muon_split_qkv));
  add("muon_tp_mode", num(s.opt.muon_tp_mode));
  add("qk_clip", num(s.opt.qk_clip));
  add("qk_clip_threshold", num(s.opt.qk_clip_threshold));
  add("qk_clip_alpha", num(s.opt.qk_clip_alpha));
  add("t", num(s.par.tensor_model_parallel_size));
  add("p", num(s.par.pipeline_model_parallel_size));
  add("v", num(s.par.virtual_pipeline_model_parallel_size));
  add("first_stage_layers", num(static_cast<double>(s.par.decoder_first_pipeline_num_layers)));
  add("last_stage_layers", num(static_cast<double>(s.par.decoder_last_pipeline_num_layers)));
  add("sequence_parallel", num(s.par.sequence_parallel));
  add("chunk_placement", num(static_cast<double>(s.par.pipeline_chunk_placement)));
  add("comm_timeout_s", num(s.rt.comm_timeout_s));
  add("verify_collectives", num(s.rt.verify_collectives));
  add("use_mpi", num(s.rt.use_mpi));
  add("use_nccl", num(s.rt.use_nccl));
  add("help", num(s.set.help));
  add("micro_batch_size", num(s.set.micro_batch_size));
  add("global_batch_size", num(s.set.global_batch_size));
  add("train_iters", num(static_cast<double>(s.set.train_iters)));
  add("log_interval", num(static_cast<double>(s.set.log_interval)));
  add("save_interval", num(static_cast<double>(s.set.save_interval)));
  add("exit_interval", num(static_cast<double>(s.set.exit_interval)));
  add("eval_interval", num(static_cast<double>(s.set.eval_interval)));
  add("eval_iters", num(static_cast<double>(s.set.eval_iters)));
  add("pipeline_schedule", num(s.set.pipeline_schedule));
  add("data_source", num(s.set.data_source));
  add("data_path", str(s.set.data_path));
  add("split", str(s.set.split));
  add("text_file", str(s.set.text_file));
  add("tokenizer_type", str(s.set.tokenizer_type));
  add("save", str(s.set.save));
  add("load", str(s.set.load));
  add("log_json", str(s.set.log_json));
  add("profile_trace", str(s.set.profile_trace));
  add("device", str(s.set.device));
  add("fp16", num(s.set.fp16));
  add("bf16", num(s.set.bf16));
  add("settings.seed", num(static_cast<double>(s.set.seed)));
  add("check_for_nan_in_loss_and_grad", num(s.set.check_for_nan_in_loss_and_grad));
  add("max_restarts", num(s.set.max_restarts));
  add("max_skipped_iterations", num(static_cast<double>(s.set.max_skipped_iterations)));
  add("launcher", str(s.set.launcher));
  add("data.source", num(s.data.source));
  add("data.path", str(s.data.path));
  add("data.split", str(s.data.split));
  add("data.seq_length", num(s.data.seq_length));
  add("data.vocab_size", num(s.data.vocab_size));
  add("data.seed", num(static_cast<double>(s.data.seed)));
  for (int i = 0; i < 3; ++i) add("data.num_samples", num(static_cast<double>(s.data.num_samples[i])));
  return d;
}

std::string to_json(ptdp_train_config c) {
  size_t length = 0;
  CHECK(ptdp_train_config_to_json(c, nullptr, 0, &length) == PTDP_ERR_INVALID_ARGUMENT);
  std::string text(length + 1, '\0');
  REQUIRE(ptdp_train_config_to_json(c, text.data(), text.size(), &length) == PTDP_SUCCESS);
  text.resize(length);
  return text;
}

std::string help_text(const char* program) {
  size_t length = 0;
  CHECK(ptdp_train_config_help(program, nullptr, 0, &length) == PTDP_ERR_INVALID_ARGUMENT);
  REQUIRE(length > 0);
  std::string text(length + 1, '\0');
  REQUIRE(ptdp_train_config_help(program, text.data(), text.size(), &length) == PTDP_SUCCESS);
  text.resize(length);
  return text;
}

// Every flag given a value other than its default (with --data-path, --fp16 and v = 2).
const std::vector<std::string> kEveryFlag = {
    "--num-layers", "8", "--hidden-size", "96", "--ffn-hidden-size", "200", "--num-attention-heads", "6",
    "--seq-length", "48", "--max-position-embeddings", "64", "--vocab-size", "300",
    "--make-vocab-size-divisible-by", "64", "--micro-batch-size", "3", "--global-batch-size", "12",
    "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
    "--num-layers-per-virtual-pipeline-stage", "2", "--sequence-parallel", "--context-parallel-size", "2", "--use-distributed-optimizer", "--train-iters", "500", "--exit-interval", "250",
    "--lr", "3e-4", "--min-lr", "3e-5", "--lr-decay-style", "cosine", "--lr-warmup-iters", "50",
    "--lr-decay-iters", "400", "--weight-decay", "0.1", "--clip-grad", "0.5", "--adam-beta1", "0.8",
    "--adam-beta2", "0.95", "--adam-eps", "1e-6", "--optimizer", "sgd", "--seed", "42", "--init-method-std",
    "0.01", "--hidden-dropout", "0.2", "--attention-dropout", "0.3", "--fp16", "--initial-loss-scale", "65536",
    "--min-loss-scale", "4", "--loss-scale-window", "500", "--hysteresis", "3", "--recompute-granularity",
    "selective", "--attention-backend", "unfused", "--data-path", "/data/corpus_text_document", "--split", "98/2/0", "--tokenizer-type",
    "NullTokenizer", "--save", "/ckpt/out", "--load", "/ckpt/in", "--save-interval", "100", "--log-interval", "5",
    "--eval-interval", "50", "--eval-iters", "7", "--sgd-momentum", "0.8", "--layernorm-epsilon", "1e-6",
    "--untie-embeddings-and-output-weights", "--pipeline-schedule", "1f1b", "--log-json", "/tmp/log.jsonl",
    "--profile-trace", "/tmp/trace.json", "--device", "cuda", "--comm-timeout", "60", "--ddp-bucket-size",
    "1000000", "--plot-file", "/tmp/curves.svg", "--peak-tflops", "989", "--normalization", "RMSNorm", "--swiglu",
    "--position-embedding-type", "rope", "--rotary-base", "500000", "--rotary-percent", "0.5", "--use-rope-scaling",
    "--rope-scaling-factor", "32", "--rope-scaling-low-freq-factor", "2", "--rope-scaling-high-freq-factor", "8",
    "--rope-scaling-original-max-position-embeddings", "4096", "--group-query-attention", "--num-query-groups", "2",
    "--kv-channels", "24", "--disable-bias-linear", "--add-qkv-bias", "--qk-layernorm", "--qk-layernorm-across-heads",
    // YaRN's settings (unused here: --rope-type yarn excludes --use-rope-scaling).
    "--rotary-scaling-factor", "40", "--mscale", "0.707", "--mscale-all-dim", "0.707",
    "--original-max-position-embeddings", "2048", "--beta-fast", "16", "--beta-slow", "2",
    "--no-yarn-correction-range-round-to-int",
    "--eod-mask-loss", "--reset-position-ids", "--reset-attention-mask", "--eod-token-id", "5", "--finetune", "--override-resume-check",
    "--overlap-grad-reduce", "--overlap-param-gather", "--check-for-nan-in-loss-and-grad",
    "--max-skipped-iterations", "7", "--max-restarts", "2", "--launcher", "mpiexec -n 8"};

// The same command line with every value attached by '='.
std::vector<std::string> with_equals(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const bool has_value = i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0;
    out.push_back(has_value ? args[i] + "=" + args[i + 1] : args[i]);
    if (has_value) ++i;
  }
  return out;
}

}  // namespace

TEST_CASE("train config: the Muon flags reach the optimizer options", "[args][capi]") {
  const Config c({"--optimizer", "muon", "--muon-momentum", "0.9", "--muon-use-nesterov", "--muon-num-ns-steps", "8",
                  "--muon-coefficient-type", "aol", "--muon-fp32-matmul-prec", "medium", "--muon-scale-mode",
                  "unit_rms_norm", "--muon-extra-scale-factor", "0.2", "--muon-no-split-qkv", "--muon-tp-mode",
                  "duplicated", "--muon-scalar-optimizer", "adam", "--qk-clip", "--qk-clip-threshold", "30",
                  "--qk-clip-alpha", "0.75"});
  const Snapshot s = snapshot(c.handle);
  CHECK(s.opt.optimizer == PTDP_OPTIMIZER_MUON);
  CHECK(s.opt.muon_momentum == 0.9f);
  CHECK(s.opt.muon_nesterov == 1);
  CHECK(s.opt.muon_num_ns_steps == 8);
  CHECK(s.opt.muon_coefficient_type == PTDP_NS_COEFFICIENTS_AOL);
  CHECK(s.opt.muon_fp32_matmul_prec == PTDP_NS_PRECISION_MEDIUM);
  CHECK(s.opt.muon_scale_mode == PTDP_MUON_SCALE_UNIT_RMS_NORM);
  CHECK(s.opt.muon_extra_scale_factor == 0.2f);
  CHECK(s.opt.muon_split_qkv == 0);
  CHECK(s.opt.muon_tp_mode == PTDP_MUON_TP_DUPLICATED);
  CHECK(s.opt.qk_clip == 1);
  CHECK(s.opt.qk_clip_threshold == 30.0f);
  CHECK(s.opt.qk_clip_alpha == 0.75f);
  const nlohmann::json j = nlohmann::json::parse(to_json(c.handle));
  CHECK(j["optimizer"] == "muon");
  CHECK(j["muon-tp-mode"] == "duplicated");
  CHECK(j["muon-no-split-qkv"] == true);
  CHECK(j["qk-clip-alpha"] == 0.75);
}

TEST_CASE("train config: every flag reaches the option structs", "[args][capi]") {
  const Config c(kEveryFlag);
  const Snapshot s = snapshot(c.handle);
  CHECK(s.gpt.rope_type == PTDP_ROPE_TYPE_ROPE);
  CHECK(s.gpt.rotary_scaling_factor == 40.0f);
  CHECK(s.gpt.mscale == 0.707f);
  CHECK(s.gpt.mscale_all_dim == 0.707f);
  CHECK(s.gpt.original_max_position_embeddings == 2048);
  CHECK(s.gpt.beta_fast == 16.0f);
  CHECK(s.gpt.beta_slow == 2.0f);
  CHECK(s.gpt.yarn_no_round_to_int == 1);

  CHECK(s.gpt.num_layers == 8);
  CHECK(s.gpt.hidden_size == 96);
  CHECK(s.gpt.num_attention_heads == 6);
  CHECK(s.gpt.ffn_hidden_size == 200);
  CHECK(s.gpt.vocab_size == 300);
  CHECK(s.gpt.make_vocab_size_divisible_by == 64);
  CHECK(s.gpt.seq_length == 48);
  CHECK(s.gpt.max_position_embeddings == 64);
  CHECK(s.gpt.hidden_dropout == 0.2f);
  CHECK(s.gpt.attention_dropout == 0.3f);
  CHECK(s.gpt.init_method_std == 0.01f);
  CHECK(s.gpt.layernorm_epsilon == 1e-6f);
  CHECK(s.gpt.untie_embeddings_and_output_weights == 1);
  CHECK(s.gpt.recompute_granularity == PTDP_RECOMPUTE_SELECTIVE);
  CHECK(s.gpt.seed == 42);
  CHECK(s.gpt.precision == PTDP_DTYPE_F16);  // --fp16
  CHECK(s.gpt.attention == PTDP_ATTENTION_UNFUSED);
  CHECK(s.gpt.normalization == PTDP_NORMALIZATION_RMSNORM);
  CHECK(s.gpt.swiglu == 1);
  CHECK(s.gpt.position_embedding_type == PTDP_POSITION_EMBEDDING_ROPE);
  CHECK(s.gpt.rotary_base == 500000.0);
  CHECK(s.gpt.rotary_percent == 0.5f);
  CHECK(s.gpt.use_rope_scaling == 1);
  CHECK(s.gpt.rope_scaling_factor == 32.0f);
  CHECK(s.gpt.rope_low_freq_factor == 2.0f);
  CHECK(s.gpt.rope_high_freq_factor == 8.0f);
  CHECK(s.gpt.rope_original_max_position_embeddings == 4096);
  CHECK(s.gpt.num_query_groups == 2);
  CHECK(s.gpt.kv_channels == 24);
  CHECK(s.gpt.disable_bias_linear == 1);
  CHECK(s.gpt.add_qkv_bias == 1);
  CHECK(s.gpt.qk_layernorm == 1);
  CHECK(s.gpt.qk_layernorm_across_heads == 1);

  CHECK(s.opt.optimizer == PTDP_OPTIMIZER_SGD);
  CHECK(s.opt.lr == 3e-4);
  CHECK(s.opt.min_lr == 3e-5);
  CHECK(s.opt.lr_decay_style == PTDP_LR_COSINE);
  CHECK(s.opt.lr_warmup_iters == 50);
  CHECK(s.opt.lr_decay_iters == 400);
  CHECK(s.opt.adam_beta1 == 0.8f);
  CHECK(s.opt.adam_beta2 == 0.95f);
  CHECK(s.opt.adam_eps == 1e-6f);
  CHECK(s.opt.weight_decay == 0.1f);
  CHECK(s.opt.sgd_momentum == 0.8f);
  CHECK(s.opt.clip_grad == 0.5f);
  CHECK(s.opt.dynamic_loss_scale == 1);
  CHECK(s.opt.initial_loss_scale == 65536.0f);
  CHECK(s.opt.min_loss_scale == 4.0f);
  CHECK(s.opt.loss_scale_window == 500);
  CHECK(s.opt.hysteresis == 3);
  CHECK(s.opt.use_distributed_optimizer == 1);
  CHECK(s.opt.ddp_bucket_size == 1000000);
  CHECK(s.opt.overlap_grad_reduce == 1);
  CHECK(s.opt.overlap_param_gather == 1);

  CHECK(s.par.tensor_model_parallel_size == 2);
  CHECK(s.par.pipeline_model_parallel_size == 2);
  CHECK(s.par.virtual_pipeline_model_parallel_size == 2);  // 8 layers / (p = 2 * 2 per chunk)
  CHECK(s.par.decoder_first_pipeline_num_layers == 0);       // an even split
  CHECK(s.par.decoder_last_pipeline_num_layers == 0);
  CHECK(s.par.sequence_parallel == 1);
  CHECK(s.par.context_parallel_size == 2);

  CHECK(s.rt.comm_timeout_s == 60.0);
  CHECK(s.rt.verify_collectives == 1);  // no flag: the runtime's defaults
  CHECK(s.rt.use_mpi == 1);
  CHECK(s.rt.use_nccl == 1);

  CHECK(s.set.help == 0);
  CHECK(s.set.micro_batch_size == 3);
  CHECK(s.set.global_batch_size == 12);
  CHECK(s.set.train_iters == 500);
  CHECK(s.set.exit_interval == 250);
  CHECK(s.set.check_for_nan_in_loss_and_grad == 1);
  CHECK(s.set.max_restarts == 2);
  CHECK(s.set.max_skipped_iterations == 7);
  CHECK(std::string(s.set.launcher) == "mpiexec -n 8");
  CHECK(s.set.log_interval == 5);
  CHECK(s.set.save_interval == 100);
  CHECK(s.set.eval_interval == 50);
  CHECK(s.set.eval_iters == 7);
  CHECK(s.set.pipeline_schedule == PTDP_SCHEDULE_INTERLEAVED_1F1B);  // 1f1b with v = 2
  CHECK(s.set.data_source == PTDP_DATA_INDEXED);
  CHECK(str(s.set.data_path) == "/data/corpus_text_document");
  CHECK(str(s.set.split) == "98,2,0");
  CHECK(s.set.text_file == nullptr);
  CHECK(str(s.set.tokenizer_type) == "NullTokenizer");
  CHECK(str(s.set.save) == "/ckpt/out");
  CHECK(str(s.set.load) == "/ckpt/in");
  CHECK(str(s.set.log_json) == "/tmp/log.jsonl");
  CHECK(str(s.set.profile_trace) == "/tmp/trace.json");
  CHECK(str(s.set.device) == "cuda");
  CHECK(s.set.fp16 == 1);
  CHECK(s.set.bf16 == 0);
  CHECK(s.set.seed == 42);

  CHECK(s.data.source == PTDP_DATA_INDEXED);
  CHECK(str(s.data.path) == "/data/corpus_text_document");
  CHECK(str(s.data.split) == "98,2,0");
  CHECK(s.data.seq_length == 48);
  CHECK(s.data.vocab_size == 300);
  CHECK(s.data.seed == 42);
  CHECK(s.data.num_samples[0] == 500 * 12);
  CHECK(s.data.num_samples[1] == (500 / 50 + 1) * 7 * 12);
  CHECK(s.data.num_samples[2] == 7 * 12);

  SECTION("the remaining values: --text-file, --bf16 with --loss-scale, zb-h1, cpu, full recompute") {
    const Config b({"--text-file", "corpus.txt", "--tokenizer-type", "ByteLevel", "--bf16", "--loss-scale", "128",
                    "--pipeline-schedule", "zb-h1", "--device", "cpu", "--recompute-granularity", "full"});
    const Snapshot t = snapshot(b.handle);
    CHECK(t.set.data_source == PTDP_DATA_TEXT);
    CHECK(str(t.set.text_file) == "corpus.txt");
    CHECK(t.set.data_path == nullptr);
    CHECK(str(t.set.tokenizer_type) == "ByteLevel");
    CHECK(t.data.source == PTDP_DATA_TEXT);
    CHECK(str(t.data.path) == "corpus.txt");
    CHECK(t.set.bf16 == 1);
    CHECK(t.set.fp16 == 0);
    CHECK(t.opt.dynamic_loss_scale == 0);
    CHECK(t.opt.initial_loss_scale == 128.0f);
    CHECK(t.opt.min_loss_scale == 1.0f);
    CHECK(t.set.pipeline_schedule == PTDP_SCHEDULE_ZB_H1);
    CHECK(str(t.set.device) == "cpu");
    CHECK(t.gpt.recompute_granularity == PTDP_RECOMPUTE_FULL);
  }
  SECTION("--mock-data given explicitly, gpipe, no global batch, no evaluation") {
    const Config m({"--mock-data", "--pipeline-schedule", "gpipe", "--micro-batch-size", "4", "--eval-interval", "0"});
    const Snapshot t = snapshot(m.handle);
    CHECK(t.set.data_source == PTDP_DATA_MOCK);
    CHECK(t.data.source == PTDP_DATA_MOCK);
    CHECK(t.data.path == nullptr);
    CHECK(t.set.pipeline_schedule == PTDP_SCHEDULE_GPIPE);
    CHECK(t.set.global_batch_size == 0);
    // B = 0 counts as the micro-batch size: the driver, knowing d, asks for its own numbers.
    CHECK(t.data.num_samples[0] == 10 * 4);
    CHECK(t.data.num_samples[1] == 0);
    CHECK(t.data.num_samples[2] == 100 * 4);
  }
}

TEST_CASE("train config: no flags give the documented defaults", "[args][capi]") {
  const Config c({});
  const Snapshot s = snapshot(c.handle);

  ptdp_gpt_options gpt_init;
  REQUIRE(ptdp_gpt_options_init(&gpt_init) == PTDP_SUCCESS);
  CHECK(s.gpt.num_layers == 2);
  CHECK(s.gpt.hidden_size == 64);
  CHECK(s.gpt.num_attention_heads == 4);
  CHECK(s.gpt.ffn_hidden_size == 0);
  CHECK(s.gpt.vocab_size == 256);
  CHECK(s.gpt.make_vocab_size_divisible_by == 128);
  CHECK(s.gpt.seq_length == 32);
  CHECK(s.gpt.max_position_embeddings == 0);
  CHECK(s.gpt.hidden_dropout == 0.1f);
  CHECK(s.gpt.attention_dropout == 0.1f);
  CHECK(s.gpt.init_method_std == 0.02f);
  CHECK(s.gpt.layernorm_epsilon == gpt_init.layernorm_epsilon);
  CHECK(s.gpt.untie_embeddings_and_output_weights == 0);
  CHECK(s.gpt.recompute_granularity == PTDP_RECOMPUTE_NONE);
  CHECK(s.gpt.seed == 1234);
  // The GPT: the Llama family's options off, their numbers resolved (not the init's zeros).
  CHECK(s.gpt.normalization == PTDP_NORMALIZATION_LAYERNORM);
  CHECK(s.gpt.swiglu == 0);
  CHECK(s.gpt.position_embedding_type == PTDP_POSITION_EMBEDDING_LEARNED_ABSOLUTE);
  CHECK(s.gpt.rotary_base == 10000.0);
  CHECK(s.gpt.rotary_percent == 1.0f);
  CHECK(s.gpt.use_rope_scaling == 0);
  CHECK(s.gpt.rope_scaling_factor == 8.0f);
  CHECK(s.gpt.rope_low_freq_factor == 1.0f);
  CHECK(s.gpt.rope_high_freq_factor == 4.0f);
  CHECK(s.gpt.rope_original_max_position_embeddings == 8192);
  CHECK(s.gpt.num_query_groups == 0);
  CHECK(s.gpt.kv_channels == 0);
  CHECK(s.gpt.disable_bias_linear == 0);
  CHECK(s.gpt.add_qkv_bias == 0);
  CHECK(s.gpt.qk_layernorm == 0);
  CHECK(s.gpt.qk_layernorm_across_heads == 0);

  CHECK(s.opt.optimizer == PTDP_OPTIMIZER_ADAM);
  CHECK(s.opt.lr == 1e-4);
  CHECK(s.opt.min_lr == 0.0);
  CHECK(s.opt.lr_decay_style == PTDP_LR_LINEAR);  // Megatron's default, not the struct's
  CHECK(s.opt.lr_warmup_iters == 0);
  CHECK(s.opt.lr_decay_iters == 10);  // unset: --train-iters
  CHECK(s.opt.adam_beta1 == 0.9f);
  CHECK(s.opt.adam_beta2 == 0.999f);
  CHECK(s.opt.adam_eps == 1e-8f);
  CHECK(s.opt.weight_decay == 0.01f);
  CHECK(s.opt.sgd_momentum == 0.9f);
  CHECK(s.opt.clip_grad == 1.0f);
  CHECK(s.opt.dynamic_loss_scale == 0);  // fp32: no loss scaling
  CHECK(s.opt.initial_loss_scale == 1.0f);
  CHECK(s.opt.min_loss_scale == 1.0f);
  CHECK(s.opt.loss_scale_window == 1000);
  CHECK(s.opt.hysteresis == 2);
  CHECK(s.opt.use_distributed_optimizer == 0);
  CHECK(s.opt.ddp_bucket_size == 0);
  CHECK(s.opt.overlap_grad_reduce == 0);
  CHECK(s.opt.overlap_param_gather == 0);
  // Muon's settings at MuonConfig's defaults.
  CHECK(s.opt.muon_momentum == 0.95f);
  CHECK(s.opt.muon_nesterov == 0);
  CHECK(s.opt.muon_num_ns_steps == 5);
  CHECK(s.opt.muon_coefficient_type == PTDP_NS_COEFFICIENTS_QUINTIC);
  CHECK(s.opt.muon_fp32_matmul_prec == PTDP_NS_PRECISION_HIGHEST);
  CHECK(s.opt.muon_scale_mode == PTDP_MUON_SCALE_SPECTRAL);
  CHECK(s.opt.muon_extra_scale_factor == 1.0f);
  CHECK(s.opt.muon_split_qkv == 1);
  CHECK(s.opt.muon_tp_mode == PTDP_MUON_TP_DISTRIBUTED);
  CHECK(s.opt.qk_clip == 0);
  CHECK(s.opt.qk_clip_threshold == 100.0f);
  CHECK(s.opt.qk_clip_alpha == 0.5f);

  CHECK(s.par.tensor_model_parallel_size == 1);
  CHECK(s.par.pipeline_model_parallel_size == 1);
  CHECK(s.par.virtual_pipeline_model_parallel_size == 1);
  CHECK(s.rt.comm_timeout_s == 0.0);  // unset: the runtime takes PTDP_COMM_TIMEOUT_S, else 300

  CHECK(s.set.help == 0);
  CHECK(s.set.micro_batch_size == 1);
  CHECK(s.set.global_batch_size == 0);
  CHECK(s.set.train_iters == 10);
  CHECK(s.set.exit_interval == 0);
  CHECK(s.set.check_for_nan_in_loss_and_grad == 0);
  CHECK(s.set.max_restarts == 0);
  CHECK(s.set.max_skipped_iterations == 100);
  CHECK(s.set.launcher == nullptr);
  CHECK(s.set.log_interval == 100);
  CHECK(s.set.save_interval == 0);
  CHECK(s.set.eval_interval == 1000);
  CHECK(s.set.eval_iters == 100);
  CHECK(s.set.pipeline_schedule == PTDP_SCHEDULE_1F1B);
  CHECK(s.set.data_source == PTDP_DATA_MOCK);
  CHECK(s.set.data_path == nullptr);
  CHECK(str(s.set.split) == "969,30,1");
  CHECK(s.set.text_file == nullptr);
  CHECK(s.set.tokenizer_type == nullptr);
  CHECK(s.set.save == nullptr);
  CHECK(s.set.load == nullptr);
  CHECK(s.set.log_json == nullptr);
  CHECK(s.set.profile_trace == nullptr);
  CHECK(str(s.set.device) == "auto");
  CHECK(s.set.fp16 == 0);
  CHECK(s.set.bf16 == 0);
  CHECK(s.set.seed == 1234);

  CHECK(s.data.source == PTDP_DATA_MOCK);
  CHECK(s.data.path == nullptr);
  CHECK(str(s.data.split) == "969,30,1");
  CHECK(s.data.seq_length == 32);
  CHECK(s.data.vocab_size == 256);
  CHECK(s.data.seed == 1234);
  CHECK(s.data.num_samples[0] == 10);
  CHECK(s.data.num_samples[1] == (10 / 1000 + 1) * 100);
  CHECK(s.data.num_samples[2] == 100);
}

TEST_CASE("train config: --model-preset gives the preset's model, the flags given override it", "[args][capi]") {
  for (const char* name : {"qwen2.5-0.5b", "llama-3.2-1b", "gpt2-124m"}) {
    INFO(name);
    const Config c({"--model-preset", name});
    const Snapshot s = snapshot(c.handle);
    ptdp_gpt_options preset;
    REQUIRE(ptdp_gpt_options_init(&preset) == PTDP_SUCCESS);
    REQUIRE(ptdp_gpt_options_from_preset(name, &preset) == PTDP_SUCCESS);
    Snapshot want = s;
    want.gpt = preset;
    CHECK(describe(s) == describe(want));
    CHECK(nlohmann::json::parse(to_json(c.handle))["model-preset"] == name);
  }
  // Before or after the preset, the flags given win; the preset's architecture stays.
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--num-layers", "2", "--model-preset", "qwen2.5-0.5b", "--seq-length", "16", "--hidden-size", "112"},
           {"--model-preset", "qwen2.5-0.5b", "--num-layers", "2", "--seq-length", "16", "--hidden-size", "112"}}) {
    const Config c(args);
    const Snapshot s = snapshot(c.handle);
    CHECK(s.gpt.num_layers == 2);
    CHECK(s.gpt.seq_length == 16);
    CHECK(s.gpt.hidden_size == 112);
    CHECK(s.gpt.num_attention_heads == 14);  // Qwen2.5 0.5B's
    CHECK(s.gpt.num_query_groups == 2);
    CHECK(s.gpt.add_qkv_bias == 1);
    CHECK(s.gpt.disable_bias_linear == 1);
    CHECK(s.gpt.normalization == PTDP_NORMALIZATION_RMSNORM);
    CHECK(s.gpt.kv_channels == 0);
  }
}

TEST_CASE("train config: the V-shaped schedules reach the parallel options and settings", "[args][capi]") {
  for (const char* name : {"zb-v", "dualpipev"}) {
    INFO(name);
    const Config c({"--num-layers", "8", "--pipeline-model-parallel-size", "2", "--pipeline-schedule", name});
    const Snapshot s = snapshot(c.handle);
    CHECK(s.par.virtual_pipeline_model_parallel_size == 2);
    CHECK(s.par.pipeline_chunk_placement == PTDP_CHUNK_PLACEMENT_V);
    CHECK(s.set.pipeline_schedule == (std::string(name) == "zb-v" ? PTDP_SCHEDULE_ZB_V : PTDP_SCHEDULE_DUALPIPE_V));
  }
  const Config c({"--num-layers", "8", "--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank",
                  "2", "--pipeline-schedule", "interleaved-zb"});
  const Snapshot s = snapshot(c.handle);
  CHECK(s.par.pipeline_chunk_placement == PTDP_CHUNK_PLACEMENT_ROUND_ROBIN);
  CHECK(s.set.pipeline_schedule == PTDP_SCHEDULE_INTERLEAVED_ZB);
}

TEST_CASE("train config: uneven pipeline stages reach the parallel options", "[args][capi]") {
  const Config c({"--num-layers", "30", "--pipeline-model-parallel-size", "4", "--num-virtual-stages-per-pipeline-rank",
                  "2", "--decoder-first-pipeline-num-layers", "8", "--decoder-last-pipeline-num-layers", "10"});
  const Snapshot s = snapshot(c.handle);
  CHECK(s.par.pipeline_model_parallel_size == 4);
  CHECK(s.par.virtual_pipeline_model_parallel_size == 2);
  CHECK(s.par.decoder_first_pipeline_num_layers == 8);
  CHECK(s.par.decoder_last_pipeline_num_layers == 10);
  const nlohmann::json j = nlohmann::json::parse(to_json(c.handle));
  CHECK(j["decoder-first-pipeline-num-layers"] == 8);
  CHECK(j["decoder-last-pipeline-num-layers"] == 10);
  CHECK(j["num-virtual-stages-per-pipeline-rank"] == 2);
  // The options go on to ptdp_layout_members, which takes them as they are.
  ptdp_parallel_options o = s.par;
  int32_t ranks[4] = {0}, count = 0;
  CHECK(ptdp_layout_members(&o, 4, 0, PTDP_GROUP_PIPELINE, ranks, 4, &count) == PTDP_SUCCESS);
  CHECK(count == 4);
  o.decoder_last_pipeline_num_layers = -3;
  CHECK(ptdp_layout_members(&o, 4, 0, PTDP_GROUP_PIPELINE, ranks, 4, &count) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(ptdp_last_error()) ==
        "ptdp_layout_members: options->decoder_last_pipeline_num_layers = -3 is not a layer count (>= 0; 0: an even "
        "split)");
  // A split the layers do not allow is refused by the parser in Megatron's words.
  const Argv bad({"--num-layers", "30", "--pipeline-model-parallel-size", "4", "--num-virtual-stages-per-pipeline-rank",
                  "2", "--decoder-first-pipeline-num-layers", "7"});
  ptdp_train_config out = nullptr;
  CHECK(ptdp_train_config_parse(bad.argc(), bad.argv(), &out) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(out == nullptr);
  CHECK_THAT(std::string(ptdp_last_error()),
             Catch::Contains("--decoder-first-pipeline-num-layers 7: number of layers at first stage: 7 must be "
                             "divisible by virtual pipeline parallel degree 2"));
}

TEST_CASE("train config: --flag=value reads as --flag value", "[args][capi]") {
  const std::vector<std::string> equals = with_equals(kEveryFlag);
  REQUIRE(equals.size() < kEveryFlag.size());
  const Config spaced(kEveryFlag);
  const Config joined(equals);
  CHECK(describe(snapshot(joined.handle)) == describe(snapshot(spaced.handle)));
  CHECK(to_json(joined.handle) == to_json(spaced.handle));

  SECTION("values that start with '-' or hold '=' are values") {
    const Config c({"--save", "-odd-dir", "--load=a=b", "--seed=7"});
    const Snapshot s = snapshot(c.handle);
    CHECK(str(s.set.save) == "-odd-dir");
    CHECK(str(s.set.load) == "a=b");
    CHECK(s.set.seed == 7);
  }
  SECTION("a repeated flag keeps its last value") {
    const Config c({"--hidden-size", "32", "--hidden-size=128", "--fp16", "--fp16"});
    const Snapshot s = snapshot(c.handle);
    CHECK(s.gpt.hidden_size == 128);
    CHECK(s.set.fp16 == 1);
  }
  SECTION("Megatron's split spellings") {
    for (const auto& [given, stored] : std::vector<std::pair<std::string, std::string>>{
             {"969,30,1", "969,30,1"}, {"969, 30, 1", "969,30,1"}, {"98/2/0", "98,2,0"}, {"1", "1,0,0"},
             {"0.9,0.1", "0.9,0.1,0"}}) {
      const Config c({"--split", given});
      INFO(given);
      CHECK(str(snapshot(c.handle).set.split) == stored);
    }
  }
}

TEST_CASE("train config: --help sets the help setting and checks nothing else", "[args][capi]") {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--help"}, {"-h"}, {"--hidden-size", "abc", "--help"}, {"--hiden-size", "3", "-h"}}) {
    const Config c(args);
    const Snapshot s = snapshot(c.handle);
    CHECK(s.set.help == 1);
    CHECK(s.gpt.hidden_size == 64);
  }
}

TEST_CASE("train config: bad values, unknown flags and contradictions name the flag", "[args][capi]") {
  struct Bad {
    std::vector<std::string> args;
    std::vector<std::string> mentions;
  };
  const std::vector<Bad> cases = {
      {{"--hidden-size", "abc"}, {"--hidden-size", "'abc'", "is not an integer"}},
      {{"--hidden-size=12.5"}, {"--hidden-size", "'12.5'", "is not an integer"}},
      {{"--hidden-size", "99999999999"}, {"--hidden-size", "'99999999999'", "out of range"}},
      {{"--hidden-size", "0"}, {"--hidden-size", "'0'", "must be > 0"}},
      {{"--num-layers", "-2"}, {"--num-layers", "'-2'", "must be > 0"}},
      {{"--num-attention-heads", "0"}, {"--num-attention-heads", "'0'"}},
      {{"--ffn-hidden-size", "-1"}, {"--ffn-hidden-size", "'-1'", ">= 0"}},
      {{"--seq-length", "0"}, {"--seq-length", "'0'"}},
      {{"--max-position-embeddings", "-1"}, {"--max-position-embeddings", "'-1'"}},
      {{"--vocab-size", "0"}, {"--vocab-size", "'0'"}},
      {{"--make-vocab-size-divisible-by", "0"}, {"--make-vocab-size-divisible-by", "'0'"}},
      {{"--micro-batch-size", "0"}, {"--micro-batch-size", "'0'"}},
      {{"--global-batch-size", "-1"}, {"--global-batch-size", "'-1'"}},
      {{"--tensor-model-parallel-size", "0"}, {"--tensor-model-parallel-size", "'0'"}},
      {{"--pipeline-model-parallel-size", "-1"}, {"--pipeline-model-parallel-size", "'-1'"}},
      {{"--num-layers-per-virtual-pipeline-stage", "0"}, {"--num-layers-per-virtual-pipeline-stage", "'0'"}},
      {{"--train-iters", "-1"}, {"--train-iters", "'-1'"}},
      {{"--hiden-size", "64"}, {"unknown flag --hiden-size", "did you mean --hidden-size"}},
      {{"--no-such-thing"}, {"unknown flag --no-such-thing"}},
      {{"-x"}, {"unknown flag -x"}},
      {{"stray"}, {"unexpected argument 'stray'"}},
      {{"--lr-decay-style", "foo"}, {"--lr-decay-style", "'foo'", "is not one of constant, linear, cosine"}},
      {{"--optimizer", "lamb"}, {"--optimizer", "'lamb'", "adam, sgd, muon"}},
      {{"--optimizer", "muon", "--muon-momentum", "1"}, {"--muon-momentum", "'1'", "[0, 1)"}},
      {{"--optimizer", "muon", "--muon-num-ns-steps", "0"}, {"--muon-num-ns-steps", "'0'", "[1, 100]"}},
      {{"--optimizer", "muon", "--muon-extra-scale-factor", "-1"}, {"--muon-extra-scale-factor", "'-1'", "> 0"}},
      {{"--optimizer", "muon", "--muon-scalar-optimizer", "lion"}, {"--muon-scalar-optimizer", "'lion'", "not built"}},
      {{"--optimizer", "muon", "--qk-clip", "--qk-clip-alpha", "2"}, {"--qk-clip-alpha", "'2'", "[0, 1]"}},
      {{"--muon-tp-mode", "blockwise"}, {"--muon-tp-mode blockwise", "is read only with --optimizer muon"}},
      {{"--recompute-granularity", "partial"}, {"--recompute-granularity", "'partial'", "none, full, selective"}},
      {{"--attention-backend", "flash"}, {"--attention-backend", "'flash'", "auto, fused, unfused"}},
      {{"--pipeline-schedule", "interleaved"}, {"--pipeline-schedule", "'interleaved'", "1f1b, gpipe, zb-h1"}},
      {{"--device", "tpu"}, {"--device", "'tpu'", "auto, cpu, cuda"}},
      {{"--fp16", "--bf16"}, {"--fp16 and --bf16 are exclusive"}},
      {{"--fp16=1"}, {"--fp16", "takes no value", "'1'"}},
      {{"--hidden-dropout", "1"}, {"--hidden-dropout", "'1'", "[0, 1)"}},
      {{"--attention-dropout", "-0.1"}, {"--attention-dropout", "'-0.1'", "[0, 1)"}},
      {{"--lr", "-1"}, {"--lr", "'-1'", ">= 0"}},
      {{"--lr", "nan"}, {"--lr", "'nan'", "finite"}},
      {{"--lr", "fast"}, {"--lr", "'fast'", "is not a number"}},
      {{"--min-lr", "-0.5"}, {"--min-lr", "'-0.5'"}},
      {{"--lr", "0.01", "--min-lr", "0.1"}, {"--min-lr 0.1", "--lr 0.01"}},
      {{"--adam-beta1", "1.0"}, {"--adam-beta1", "'1.0'", "[0, 1)"}},
      {{"--adam-beta2", "-0.5"}, {"--adam-beta2", "'-0.5'"}},
      {{"--adam-beta2", "0.99999999999"}, {"--adam-beta2", "'0.99999999999'", "float"}},
      {{"--adam-eps", "0"}, {"--adam-eps", "'0'", "> 0"}},
      {{"--clip-grad", "-1"}, {"--clip-grad", "'-1'"}},
      {{"--weight-decay", "-0.1"}, {"--weight-decay", "'-0.1'"}},
      {{"--sgd-momentum", "-1"}, {"--sgd-momentum", "'-1'"}},
      {{"--init-method-std", "0"}, {"--init-method-std", "'0'"}},
      {{"--layernorm-epsilon", "0"}, {"--layernorm-epsilon", "'0'"}},
      {{"--seed", "-1"}, {"--seed", "'-1'", "non-negative integer"}},
      {{"--lr-warmup-iters", "-1"}, {"--lr-warmup-iters", "'-1'"}},
      {{"--lr-decay-iters", "-3"}, {"--lr-decay-iters", "'-3'"}},
      {{"--lr-warmup-iters", "20"}, {"--lr-warmup-iters 20", "--train-iters 10"}},
      {{"--lr-decay-iters", "5", "--lr-warmup-iters", "5"}, {"--lr-warmup-iters 5", "--lr-decay-iters 5"}},
      {{"--initial-loss-scale", "0"}, {"--initial-loss-scale", "'0'"}},
      {{"--initial-loss-scale", "1e39"}, {"--initial-loss-scale", "'1e39'", "float"}},
      {{"--loss-scale", "0"}, {"--loss-scale", "'0'"}},
      {{"--min-loss-scale", "8", "--initial-loss-scale", "4"}, {"--min-loss-scale 8", "--initial-loss-scale 4"}},
      {{"--loss-scale-window", "0"}, {"--loss-scale-window", "'0'"}},
      {{"--hysteresis", "0"}, {"--hysteresis", "'0'"}},
      {{"--mock-data", "--data-path", "x"}, {"--mock-data", "--data-path", "exclusive"}},
      {{"--data-path", "x", "--text-file", "y"}, {"--data-path", "--text-file", "exclusive"}},
      {{"--mock-data", "--text-file", "y"}, {"--mock-data", "--text-file", "exclusive"}},
      {{"--tokenizer-type", "WordPieceTokenizer"},
       {"--tokenizer-type", "'WordPieceTokenizer'", "NullTokenizer", "ByteLevel", "GPT2BPETokenizer",
        "HuggingFaceTokenizer", "SentencePieceTokenizer"}},
      {{"--tokenizer-type", "GPT2BPETokenizer"}, {"--tokenizer-type GPT2BPETokenizer", "--vocab-file"}},
      {{"--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", "/nonexistent/vocab.json"},
       {"--merge-file"}},
      {{"--tokenizer-type", "SentencePieceTokenizer"},
       {"--tokenizer-type SentencePieceTokenizer", "--tokenizer-model"}},
      {{"--vocab-file", "vocab.json"}, {"--vocab-file vocab.json", "needs --tokenizer-type"}},
      {{"--eod-mask-loss"}, {"--eod-mask-loss", "--eod-token-id"}},
      {{"--reset-attention-mask", "--eod-token-id", "256"}, {"--eod-token-id 256", "--vocab-size 256"}},
      {{"--text-file", "a.txt", "--vocab-size", "100"}, {"--text-file", "--vocab-size 100", "256"}},
      {{"--text-file", "a.txt", "--tokenizer-type", "NullTokenizer"}, {"--text-file", "NullTokenizer"}},
      {{"--num-layers", "6", "--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "2"},
       {"--num-layers 6", "--pipeline-model-parallel-size 2", "--num-layers-per-virtual-pipeline-stage 2"}},
      {{"--num-layers", "3", "--pipeline-model-parallel-size", "2"},
       {"--num-layers 3", "--pipeline-model-parallel-size 2"}},
      {{"--num-layers-per-virtual-pipeline-stage", "1"},
       {"--num-layers-per-virtual-pipeline-stage 1", "--pipeline-model-parallel-size"}},
      {{"--num-layers", "4", "--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1",
        "--pipeline-schedule", "gpipe"},
       {"--pipeline-schedule gpipe", "--num-layers-per-virtual-pipeline-stage"}},
      {{"--global-batch-size", "10", "--micro-batch-size", "4"},
       {"--global-batch-size 10", "--micro-batch-size 4", "multiple"}},
      {{"--num-attention-heads", "5"}, {"--num-attention-heads 5", "--hidden-size 64"}},
      {{"--tensor-model-parallel-size", "3"}, {"--tensor-model-parallel-size 3", "--num-attention-heads 4"}},
      {{"--ffn-hidden-size", "102", "--tensor-model-parallel-size", "4"},
       {"--tensor-model-parallel-size 4", "--ffn-hidden-size 102"}},
      {{"--seq-length", "64", "--max-position-embeddings", "32"},
       {"--seq-length 64", "--max-position-embeddings 32"}},
      {{"--split", "1,2,3,4"}, {"--split", "'1,2,3,4'"}},
      {{"--split", "a,b"}, {"--split", "'a,b'"}},
      {{"--split", "90,,10"}, {"--split", "'90,,10'"}},
      {{"--split", "-1,2,3"}, {"--split", "'-1,2,3'"}},
      {{"--split", "0,0,0"}, {"--split", "'0,0,0'", "zero"}},
      {{"--load="}, {"--load", "empty value"}},
      {{"--save", ""}, {"--save", "empty value"}},
      {{"--data-path="}, {"--data-path", "empty value"}},
      {{"--save", "--load", "x"}, {"--save", "missing value"}},
      {{"--hidden-size"}, {"--hidden-size", "missing value"}},
      {{"--save-interval", "-1"}, {"--save-interval", "'-1'"}},
      {{"--log-interval", "0"}, {"--log-interval", "'0'"}},
      {{"--eval-interval", "-5"}, {"--eval-interval", "'-5'"}},
      {{"--eval-iters", "-1"}, {"--eval-iters", "'-1'"}},
      {{"--comm-timeout", "0"}, {"--comm-timeout", "'0'"}},
      {{"--comm-timeout", "soon"}, {"--comm-timeout", "'soon'", "is not a number"}},
      {{"--ddp-bucket-size", "-1"}, {"--ddp-bucket-size", "'-1'"}},
      {{"--model-preset", "gpt-5"}, {"--model-preset", "'gpt-5'", "is not a preset", "llama-3.2-1b", "gpt2-124m"}},
      {{"--normalization", "RMS"}, {"--normalization", "'RMS'", "LayerNorm, RMSNorm"}},
      {{"--position-embedding-type", "rotary"}, {"--position-embedding-type", "'rotary'", "learned_absolute, rope, none"}},
      {{"--swiglu=1"}, {"--swiglu", "takes no value"}},
      {{"--rotary-base", "-1"}, {"--rotary-base", "'-1'", "> 0"}},
      {{"--rotary-percent", "2"}, {"--rotary-percent", "'2'", "(0, 1]"}},
      {{"--rope-scaling-factor", "0"}, {"--rope-scaling-factor", "'0'", ">= 1"}},
      {{"--rope-scaling-low-freq-factor", "0"}, {"--rope-scaling-low-freq-factor", "'0'", "> 0"}},
      {{"--rope-scaling-high-freq-factor", "-4"}, {"--rope-scaling-high-freq-factor", "'-4'", "> 0"}},
      {{"--rope-scaling-original-max-position-embeddings", "-1"},
       {"--rope-scaling-original-max-position-embeddings", "'-1'"}},
      {{"--num-query-groups", "0"}, {"--num-query-groups", "'0'", "> 0"}},
      {{"--kv-channels", "-8"}, {"--kv-channels", "'-8'", "> 0"}},
      {{"--norm-epsilon", "0"}, {"--norm-epsilon", "'0'"}},
      {{"--norm-epsilon", "1e-6", "--layernorm-epsilon", "1e-6"}, {"--norm-epsilon", "--layernorm-epsilon", "give one"}},
      {{"--num-query-groups", "2"}, {"--num-query-groups 2", "--group-query-attention"}},
      {{"--group-query-attention", "--num-query-groups", "3"}, {"--num-query-groups 3", "--num-attention-heads 4"}},
      {{"--group-query-attention", "--num-query-groups", "2", "--tensor-model-parallel-size", "4"},
       {"--tensor-model-parallel-size 4", "--num-query-groups 2"}},
      {{"--position-embedding-type", "rope", "--kv-channels", "7"},
       {"--position-embedding-type rope", "--kv-channels 7", "--rotary-percent", "even"}},
      {{"--position-embedding-type", "rope", "--rotary-percent", "0.1"},
       {"--position-embedding-type rope", "--hidden-size 64", "--num-attention-heads 4", "--rotary-percent 0.1"}},
      {{"--use-rope-scaling"}, {"--use-rope-scaling", "--position-embedding-type learned_absolute"}},
      {{"--position-embedding-type", "rope", "--use-rope-scaling", "--rope-scaling-high-freq-factor", "0.5"},
       {"--rope-scaling-high-freq-factor 0.5", "--rope-scaling-low-freq-factor 1.0"}},
      {{"--swiglu", "--hidden-size", "16", "--num-attention-heads", "4"}, {"--swiglu", "--hidden-size", "--ffn-hidden-size"}},
      {{"--num-attention-heads", "6"}, {"--num-attention-heads 6", "--hidden-size 64", "--kv-channels"}},
  };
  for (const Bad& b : cases) {
    std::string line;
    for (const auto& a : b.args) line += a + " ";
    INFO("ptdp-train " << line);
    const Argv a(b.args);
    unsigned char sentinel = 0;
    const auto untouched = reinterpret_cast<ptdp_train_config>(&sentinel);
    ptdp_train_config out = untouched;
    CHECK(ptdp_train_config_parse(a.argc(), a.argv(), &out) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(out == untouched);
    const std::string message = ptdp_last_error();
    INFO(message);
    CHECK_THAT(message, Catch::Contains("ptdp_train_config_parse"));
    for (const auto& m : b.mentions) CHECK_THAT(message, Catch::Contains(m));
  }
}

TEST_CASE("train config: the help text lists every flag with its default", "[args][capi]") {
  const std::string text = help_text("my-trainer");
  CHECK(text.rfind("Usage: my-trainer", 0) == 0);
  CHECK(help_text(nullptr).rfind("Usage: ptdp-train", 0) == 0);
  for (const char* group : {"\nModel:\n", "\nMixture of experts:\n", "\nParallelism:\n", "\nTraining:\n",
                            "\nOptimizer and learning rate:\n",
                            "\nMixed precision:\n", "\nData:\n", "\nCheckpoints:\n", "\nLogging and evaluation:\n",
                            "\nptdp:\n"}) {
    CHECK_THAT(text, Catch::Contains(group));
  }
  for (const auto& [flag, default_text] : kFlagDefaults) {
    INFO("--" << flag);
    // The flag's entry: from its line to the next flag or the end of its group.
    std::size_t at = text.find("\n  --" + flag + " ");
    if (at == std::string::npos) at = text.find("\n  --" + flag + "\n");
    REQUIRE(at != std::string::npos);
    const std::size_t end = std::min(text.find("\n  --", at + 1), text.find("\n\n", at + 1));
    const std::string entry = text.substr(at + 1, end - at - 1);
    INFO(entry);
    CHECK_THAT(entry, Catch::Contains("Default: " + default_text + "."));
    std::size_t longest = 0;  // wrapped at 100 columns
    for (std::size_t start = 0; start <= entry.size();) {
      const std::size_t stop = std::min(entry.find('\n', start), entry.size());
      longest = std::max(longest, stop - start);
      start = stop + 1;
    }
    CHECK(longest <= 100);
  }
  // Nothing listed that the table above does not know.
  std::size_t listed = 0;
  for (std::size_t at = text.find("\n  --"); at != std::string::npos; at = text.find("\n  --", at + 1)) ++listed;
  CHECK(listed == kFlagDefaults.size());
}

TEST_CASE("train config: the JSON holds every flag", "[args][capi]") {
  const Config d({});
  const nlohmann::json defaults = nlohmann::json::parse(to_json(d.handle));
  CHECK(defaults.size() == kFlagDefaults.size());
  for (const auto& [flag, default_text] : kFlagDefaults) {
    INFO(flag);
    CHECK(defaults.contains(flag));
  }
  CHECK(defaults["num-layers"] == 2);
  CHECK(defaults["lr-decay-iters"].is_null());
  CHECK(defaults["mock-data"] == true);
  CHECK(defaults["save"].is_null());
  CHECK(defaults["initial-loss-scale"] == 4294967296.0);

  const Config c(kEveryFlag);
  const nlohmann::json j = nlohmann::json::parse(to_json(c.handle));
  CHECK(j.size() == kFlagDefaults.size());
  // Every flag of the command line reads back with its value.
  for (std::size_t i = 0; i < kEveryFlag.size(); ++i) {
    const std::string key = kEveryFlag[i].substr(2);
    INFO(key);
    REQUIRE(j.contains(key));
    const bool has_value = i + 1 < kEveryFlag.size() && kEveryFlag[i + 1].rfind("--", 0) != 0;
    if (!has_value) {
      CHECK(j[key] == true);
      continue;
    }
    const std::string given = kEveryFlag[++i];
    if (j[key].is_string()) {
      CHECK(j[key].get<std::string>() == (key == "split" ? std::string("98,2,0") : given));
    } else {
      CHECK(j[key].get<double>() == Approx(std::stod(given)));
    }
  }
  CHECK(j["mock-data"] == false);
  CHECK(j["text-file"].is_null());
}

TEST_CASE("train config: argument errors of every call", "[args][capi]") {
  ptdp_train_config out = nullptr;
  const char* argv[] = {"ptdp-train", "--num-layers", nullptr};
  CHECK(ptdp_train_config_parse(1, nullptr, &out) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ptdp_last_error()), Catch::Contains("argv"));
  CHECK(ptdp_train_config_parse(0, argv, &out) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ptdp_last_error()), Catch::Contains("argc"));
  CHECK(ptdp_train_config_parse(-1, argv, &out) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_train_config_parse(1, argv, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ptdp_last_error()), Catch::Contains("out"));
  CHECK(ptdp_train_config_parse(3, argv, &out) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ptdp_last_error()), Catch::Contains("argv[2]"));
  CHECK(out == nullptr);
  CHECK(ptdp_train_config_destroy(nullptr) == PTDP_SUCCESS);

  // Help: NULL length, NULL buffer with room claimed, too small (length still told, buffer untouched).
  CHECK(ptdp_train_config_help(nullptr, nullptr, 0, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ptdp_last_error()), Catch::Contains("length"));
  size_t length = 0;
  CHECK(ptdp_train_config_help(nullptr, nullptr, 10, &length) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ptdp_last_error()), Catch::Contains("buffer"));
  const std::string full = help_text(nullptr);
  std::string small(full.size(), 'x');  // one byte short of the NUL
  CHECK(ptdp_train_config_help(nullptr, small.data(), small.size(), &length) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(length == full.size());
  CHECK(small == std::string(full.size(), 'x'));
  CHECK_THAT(std::string(ptdp_last_error()), Catch::Contains("capacity"));

  const Config c({});
  const std::string json = to_json(c.handle);
  CHECK(ptdp_train_config_to_json(c.handle, nullptr, 0, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  std::string short_buffer(json.size(), 'x');
  length = 0;
  CHECK(ptdp_train_config_to_json(c.handle, short_buffer.data(), short_buffer.size(), &length) ==
        PTDP_ERR_INVALID_ARGUMENT);
  CHECK(length == json.size());
  CHECK(short_buffer == std::string(json.size(), 'x'));

  // NULL outputs.
  CHECK(ptdp_train_config_gpt_options(c.handle, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_train_config_optimizer_options(c.handle, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_train_config_parallel_options(c.handle, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_train_config_runtime_options(c.handle, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_train_config_settings(c.handle, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ptdp_last_error()), Catch::Contains("settings"));
  CHECK(ptdp_train_config_data_options(c.handle, nullptr) == PTDP_ERR_INVALID_ARGUMENT);

  // NULL and dead handles (zeroed memory: the magic number does not match), outputs untouched.
  alignas(64) static unsigned char not_a_config[512] = {};
  for (ptdp_train_config bad : {static_cast<ptdp_train_config>(nullptr),
                                reinterpret_cast<ptdp_train_config>(not_a_config)}) {
    ptdp_gpt_options gpt;
    std::memset(static_cast<void*>(&gpt), 0x5a, sizeof gpt);
    CHECK(ptdp_train_config_gpt_options(bad, &gpt) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(gpt.num_layers == 0x5a5a5a5a);
    CHECK_THAT(std::string(ptdp_last_error()), Catch::Contains("config"));
    ptdp_optimizer_options opt;
    CHECK(ptdp_train_config_optimizer_options(bad, &opt) == PTDP_ERR_INVALID_ARGUMENT);
    ptdp_parallel_options par;
    CHECK(ptdp_train_config_parallel_options(bad, &par) == PTDP_ERR_INVALID_ARGUMENT);
    ptdp_runtime_options rt;
    CHECK(ptdp_train_config_runtime_options(bad, &rt) == PTDP_ERR_INVALID_ARGUMENT);
    ptdp_train_settings set;
    CHECK(ptdp_train_config_settings(bad, &set) == PTDP_ERR_INVALID_ARGUMENT);
    ptdp_gpt_data_options data;
    CHECK(ptdp_train_config_data_options(bad, &data) == PTDP_ERR_INVALID_ARGUMENT);
    length = 7;
    char buffer[16];
    CHECK(ptdp_train_config_to_json(bad, buffer, sizeof buffer, &length) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(length == 7);
  }
  CHECK(ptdp_train_config_destroy(reinterpret_cast<ptdp_train_config>(not_a_config)) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ptdp_last_error()), Catch::Contains("not a live ptdp_train_config"));

  SECTION("sample counts that overflow are refused when the flags are parsed") {
    const char* argv[] = {"ptdp-train", "--train-iters", "9223372036854775807", "--global-batch-size", "4",
                          "--micro-batch-size", "4", "--lr-decay-style", "constant"};
    ptdp_train_config huge = reinterpret_cast<ptdp_train_config>(0x5e47);
    CHECK(ptdp_train_config_parse(9, argv, &huge) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(huge == reinterpret_cast<ptdp_train_config>(0x5e47));
    CHECK_THAT(std::string(ptdp_last_error()), Catch::Contains("--train-iters (9223372036854775807)") &&
                                                   Catch::Contains("overflows"));
  }
}
