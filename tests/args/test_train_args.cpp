// The core's parse_train_args(): values, defaults, both spellings, help, errors naming the flag,
// and the converters to the model, optimizer, loss-scaler and layout configs.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "base/error.h"
#include "core/args/train_args.h"
#include "core/model/model_presets.h"
#include "core/model/pipeline_split.h"
#include "core/parallel/layout.h"

namespace {

using ptdp::TrainArgs;

// The message of the InvalidArgument error parsing `args` throws ("" if it does not throw).
std::string parse_error(const std::vector<std::string>& args) {
  try {
    ptdp::parse_train_args(args);
  } catch (const ptdp::Error& e) {
    CHECK(e.code() == ptdp::ErrorCode::InvalidArgument);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("train args: no flags give Megatron's defaults", "[args]") {
  const TrainArgs a = ptdp::parse_train_args({});
  CHECK(ptdp::train_args_to_json(a) == ptdp::train_args_to_json(TrainArgs{}));
  CHECK_FALSE(a.help);
  CHECK(a.num_layers == 2);
  CHECK(a.hidden_size == 64);
  CHECK(a.micro_batch_size == 1);
  CHECK(a.global_batch_size == 0);
  CHECK(a.train_iters == 10);
  CHECK(a.lr == 1e-4);
  CHECK(a.lr_decay_style == ptdp::LrDecayStyle::Linear);
  CHECK_FALSE(a.lr_decay_iters.has_value());
  CHECK(a.initial_loss_scale == 4294967296.0);
  CHECK(a.min_loss_scale == 1.0);
  CHECK(a.loss_scale_window == 1000);
  CHECK(a.hysteresis == 2);
  CHECK(a.split == "969,30,1");
  CHECK(a.mock_data);
  CHECK(ptdp::data_source(a) == ptdp::DataSource::Mock);
  CHECK(a.tokenizer_type.empty());
  CHECK(a.log_interval == 100);
  CHECK(a.eval_interval == 1000);
  CHECK(a.eval_iters == 100);
  CHECK(!a.comm_timeout.has_value());  // unset: PTDP_COMM_TIMEOUT_S, else 300
  CHECK(a.device == "auto");
  CHECK(a.pipeline_schedule == ptdp::ScheduleKind::OneFOneB);
  // The model defaults are the GptConfig's.
  const ptdp::GptConfig g = ptdp::to_gpt_config(a), d;
  CHECK(g.num_layers == d.num_layers);
  CHECK(g.hidden_size == d.hidden_size);
  CHECK(g.num_attention_heads == d.num_attention_heads);
  CHECK(g.ffn_hidden_size == d.ffn_hidden_size);
  CHECK(g.vocab_size == d.vocab_size);
  CHECK(g.make_vocab_size_divisible_by == d.make_vocab_size_divisible_by);
  CHECK(g.seq_length == d.seq_length);
  CHECK(g.max_position_embeddings == d.max_position_embeddings);
  CHECK(g.hidden_dropout == d.hidden_dropout);
  CHECK(g.attention_dropout == d.attention_dropout);
  CHECK(g.init_method_std == d.init_method_std);
  CHECK(g.layernorm_epsilon == d.layernorm_epsilon);
  CHECK(g.tie_embeddings == d.tie_embeddings);
  CHECK(g.recompute == d.recompute);
  CHECK(g.seed == d.seed);
  // The Llama family's options are off: the GPT.
  CHECK(a.model_preset.empty());
  CHECK(g.normalization == d.normalization);
  CHECK(g.swiglu == d.swiglu);
  CHECK(g.position_embedding == d.position_embedding);
  CHECK(g.rotary_base == d.rotary_base);
  CHECK(g.rotary_percent == d.rotary_percent);
  CHECK(g.rope_scaling.enabled == d.rope_scaling.enabled);
  CHECK(g.rope_scaling.factor == d.rope_scaling.factor);
  CHECK(g.rope_scaling.low_freq_factor == d.rope_scaling.low_freq_factor);
  CHECK(g.rope_scaling.high_freq_factor == d.rope_scaling.high_freq_factor);
  CHECK(g.rope_scaling.original_max_position_embeddings == d.rope_scaling.original_max_position_embeddings);
  CHECK(g.num_query_groups == d.num_query_groups);
  CHECK(g.kv_channels == d.kv_channels);
  CHECK(g.add_bias_linear == d.add_bias_linear);
  CHECK(g.add_qkv_bias == d.add_qkv_bias);
  CHECK(g.qk_layernorm == d.qk_layernorm);
  CHECK(g.qk_layernorm_across_heads == d.qk_layernorm_across_heads);
}

TEST_CASE("train args: the Llama family's flags reach the model", "[args]") {
  const TrainArgs a = ptdp::parse_train_args(
      {"--normalization", "RMSNorm", "--norm-epsilon", "1e-6", "--swiglu", "--ffn-hidden-size", "96",
       "--position-embedding-type=rope", "--rotary-base", "500000", "--rotary-percent", "0.5", "--use-rope-scaling",
       "--rope-scaling-factor", "32", "--rope-scaling-low-freq-factor", "2", "--rope-scaling-high-freq-factor", "8",
       "--rope-scaling-original-max-position-embeddings", "4096", "--group-query-attention", "--num-query-groups", "2",
       "--kv-channels", "12", "--disable-bias-linear", "--add-qkv-bias", "--qk-layernorm",
       "--qk-layernorm-across-heads", "--untie-embeddings-and-output-weights", "--tensor-model-parallel-size", "2"});
  const ptdp::GptConfig g = ptdp::to_gpt_config(a);
  CHECK(g.normalization == ptdp::Normalization::RMSNorm);
  CHECK(g.layernorm_epsilon == 1e-6f);
  CHECK(g.swiglu);
  CHECK(g.ffn() == 96);
  CHECK(g.position_embedding == ptdp::PositionEmbedding::Rope);
  CHECK(g.rotary_base == 500000.0f);
  CHECK(g.rotary_percent == 0.5f);
  CHECK(g.rope_scaling.enabled);
  CHECK(g.rope_scaling.factor == 32.0f);
  CHECK(g.rope_scaling.low_freq_factor == 2.0f);
  CHECK(g.rope_scaling.high_freq_factor == 8.0f);
  CHECK(g.rope_scaling.original_max_position_embeddings == 4096);
  CHECK(g.num_query_groups == 2);
  CHECK(g.kv_channels == 12);
  CHECK(g.head_dim() == 12);
  CHECK(g.rotary_dim() == 6);
  CHECK_FALSE(g.add_bias_linear);
  CHECK(g.add_qkv_bias);
  CHECK(g.qk_layernorm);
  CHECK(g.qk_layernorm_across_heads);
  CHECK_FALSE(g.tie_embeddings);
  CHECK_NOTHROW(g.validate(2));
  const nlohmann::json j = ptdp::train_args_to_json(a);
  CHECK(j["normalization"] == "RMSNorm");
  CHECK(j["position-embedding-type"] == "rope");
  CHECK(j["num-query-groups"] == 2);
  CHECK(j["norm-epsilon"].get<double>() == Approx(1e-6));
  CHECK(j["layernorm-epsilon"].get<double>() == Approx(1e-6));  // the same setting

  SECTION("--group-query-attention alone is multi-query attention (Megatron's default of 1 group)") {
    const ptdp::GptConfig m = ptdp::to_gpt_config(ptdp::parse_train_args({"--group-query-attention"}));
    CHECK(m.num_query_groups == 1);
    CHECK(m.query_groups() == 1);
  }
  SECTION("--layernorm-epsilon is --norm-epsilon's older name") {
    CHECK(ptdp::to_gpt_config(ptdp::parse_train_args({"--layernorm-epsilon", "1e-3"})).layernorm_epsilon == 1e-3f);
  }
  SECTION("--swiglu without --ffn-hidden-size takes Megatron's int(8 h / 3 / 64) * 64") {
    const ptdp::GptConfig m = ptdp::to_gpt_config(ptdp::parse_train_args({"--swiglu", "--hidden-size", "192",
                                                                           "--num-attention-heads", "4"}));
    CHECK(m.ffn() == 512);
  }
  SECTION("--kv-channels lets the heads not divide the hidden size") {
    const ptdp::GptConfig m = ptdp::to_gpt_config(
        ptdp::parse_train_args({"--hidden-size", "64", "--num-attention-heads", "6", "--kv-channels", "16"}));
    CHECK(m.attention_width() == 96);
  }
  SECTION("position embeddings none") {
    CHECK_FALSE(ptdp::to_gpt_config(ptdp::parse_train_args({"--position-embedding-type", "none"})).learned_positions());
  }
}

TEST_CASE("train args: --model-preset fills the model flags, which override it wherever they stand", "[args]") {
  const std::optional<ptdp::ModelPreset> llama = ptdp::find_model_preset("llama-3.2-1b");
  REQUIRE(llama.has_value());
  const ptdp::GptConfig& p = llama->config;
  const TrainArgs a = ptdp::parse_train_args({"--model-preset", "llama-3.2-1b"});
  CHECK(a.model_preset == "llama-3.2-1b");
  const ptdp::GptConfig g = ptdp::to_gpt_config(a);
  CHECK(g.num_layers == p.num_layers);
  CHECK(g.hidden_size == p.hidden_size);
  CHECK(g.num_attention_heads == p.num_attention_heads);
  CHECK(g.num_query_groups == p.num_query_groups);
  CHECK(g.ffn_hidden_size == p.ffn_hidden_size);
  CHECK(g.vocab_size == p.vocab_size);
  CHECK(g.seq_length == p.seq_length);
  CHECK(g.max_position_embeddings == p.max_position_embeddings);
  CHECK(g.normalization == p.normalization);
  CHECK(g.swiglu == p.swiglu);
  CHECK(g.position_embedding == p.position_embedding);
  CHECK(g.rotary_base == p.rotary_base);
  CHECK(g.rope_scaling.enabled == p.rope_scaling.enabled);
  CHECK(g.rope_scaling.factor == p.rope_scaling.factor);
  CHECK(g.add_bias_linear == p.add_bias_linear);
  CHECK(g.tie_embeddings == p.tie_embeddings);
  CHECK(g.hidden_dropout == p.hidden_dropout);
  CHECK(ptdp::train_args_to_json(a)["model-preset"] == "llama-3.2-1b");

  // The flags given override the preset, before or after it; the rest stays the preset's.
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--num-layers", "2", "--hidden-size", "64", "--model-preset", "LLAMA-3.2-1B", "--seq-length", "16"},
           {"--model-preset", "llama-3.2-1b", "--num-layers", "2", "--hidden-size", "64", "--seq-length", "16"}}) {
    const ptdp::GptConfig o = ptdp::to_gpt_config(ptdp::parse_train_args(args));
    CHECK(o.num_layers == 2);
    CHECK(o.hidden_size == 64);
    CHECK(o.seq_length == 16);
    CHECK(o.num_attention_heads == p.num_attention_heads);
    CHECK(o.swiglu);
    CHECK(o.rope());
  }
  // A GPT preset leaves the Llama options off.
  const ptdp::GptConfig gpt2 = ptdp::to_gpt_config(ptdp::parse_train_args({"--model-preset", "gpt2-124m"}));
  CHECK(gpt2.hidden_size == 768);
  CHECK(gpt2.learned_positions());
  CHECK(gpt2.add_bias_linear);
  CHECK(gpt2.num_query_groups == 0);
}

TEST_CASE("train args: values in both spellings reach the fields", "[args]") {
  const TrainArgs a = ptdp::parse_train_args(
      {"--num-layers=12", "--hidden-size", "768", "--num-attention-heads=12", "--lr", "-0", "--seed=18446744073709551615",
       "--lr-decay-iters", "7", "--recompute-granularity=full", "--data-path", "/d/x", "--split=98/2/0", "--fp16",
       "--loss-scale", "1024", "--optimizer=sgd", "--comm-timeout", "12.5"});
  CHECK(a.num_layers == 12);
  CHECK(a.hidden_size == 768);
  CHECK(a.num_attention_heads == 12);
  CHECK(a.lr == 0.0);
  CHECK(a.seed == 18446744073709551615ull);
  CHECK(a.lr_decay_iters == 7);
  CHECK(a.recompute_granularity == ptdp::Recompute::Full);
  CHECK(a.data_path == "/d/x");
  CHECK_FALSE(a.mock_data);
  CHECK(ptdp::data_source(a) == ptdp::DataSource::Indexed);
  CHECK(a.split == "98,2,0");
  CHECK(a.fp16);
  CHECK(a.loss_scale == 1024.0);
  CHECK(a.optimizer == ptdp::OptimizerKind::Sgd);
  CHECK(a.comm_timeout == std::optional<double>(12.5));
  // lr 0 with the default min-lr 0 is allowed.
  CHECK(ptdp::train_args_to_json(a)["lr-decay-iters"] == 7);
}

TEST_CASE("train args: --help anywhere wins and reads nothing else", "[args]") {
  const TrainArgs a = ptdp::parse_train_args({"--num-layers", "x", "--help"});
  CHECK(a.help);
  CHECK(a.num_layers == 2);
  CHECK(ptdp::parse_train_args({"-h"}).help);
}

TEST_CASE("train args: errors name the flag and the value", "[args]") {
  CHECK(parse_error({"--hidden-size", "abc"}) == "--hidden-size: 'abc' is not an integer");
  CHECK(parse_error({"--lr-decay-style", "foo"}) == "--lr-decay-style: 'foo' is not one of constant, linear, cosine");
  CHECK(parse_error({"--hiden-size", "1"}) == "unknown flag --hiden-size (did you mean --hidden-size?)");
  CHECK(parse_error({"--fp16", "--bf16"}) == "--fp16 and --bf16 are exclusive");
  CHECK(parse_error({"--num-layers", "0"}) == "--num-layers: '0' must be > 0");
  CHECK(parse_error({"--lr", "0.001", "--min-lr", "0.01"}) == "--min-lr 0.01 is above --lr 0.001");
  CHECK(parse_error({"--global-batch-size", "6", "--micro-batch-size", "4"}) ==
        "--global-batch-size 6 is not a multiple of --micro-batch-size 4");
  CHECK(parse_error({"--num-attention-heads", "3"}) ==
        "--num-attention-heads 3 does not divide --hidden-size 64 (or give the head dim with --kv-channels)");
  CHECK(parse_error({"--split", "1:2:3"}).rfind("--split: '1:2:3' is not three non-negative weights", 0) == 0);
  CHECK(parse_error({"--tokenizer-type", "WordPieceTokenizer"})
            .rfind("--tokenizer-type: 'WordPieceTokenizer' is not one of ByteLevel, NullTokenizer, "
                   "GPT2BPETokenizer, HuggingFaceTokenizer, SentencePieceTokenizer", 0) == 0);
  CHECK(parse_error({"--tokenizer-type", "GPT2BPETokenizer"}) ==
        "--tokenizer-type GPT2BPETokenizer needs --vocab-file (vocab.json)");
  CHECK(parse_error({"--eval-iters"}) == "--eval-iters: missing value (N)");
  CHECK(parse_error({"--save="}) == "--save: empty value; expected DIR");
}

TEST_CASE("train args: YaRN's flags reach the model and round-trip through the JSON", "[args][yarn]") {
  const TrainArgs d = ptdp::parse_train_args({});
  CHECK(d.rope_type == ptdp::RopeType::Rope);  // Megatron's defaults
  CHECK(d.rotary_scaling_factor == 1.0);
  CHECK(d.mscale == 1.0);
  CHECK(d.mscale_all_dim == 0.0);
  CHECK(d.original_max_position_embeddings == 4096);
  CHECK(d.beta_fast == 32.0);
  CHECK(d.beta_slow == 1.0);
  const TrainArgs a = ptdp::parse_train_args(
      {"--normalization", "RMSNorm", "--swiglu", "--position-embedding-type", "rope", "--rope-type", "yarn",
       "--rotary-scaling-factor", "40", "--mscale", "0.707", "--mscale-all-dim", "0.707",
       "--original-max-position-embeddings", "4096", "--beta-fast", "16", "--beta-slow", "2",
       "--no-yarn-correction-range-round-to-int"});
  const ptdp::GptConfig g = ptdp::to_gpt_config(a);
  CHECK(g.rope_type == ptdp::RopeType::Yarn);
  CHECK(g.uses_yarn());
  CHECK(g.yarn.factor == 40.0f);
  CHECK(g.yarn.mscale == 0.707f);
  CHECK(g.yarn.mscale_all_dim == 0.707f);
  CHECK(g.yarn.original_max_position_embeddings == 4096);
  CHECK(g.yarn.beta_fast == 16.0f);
  CHECK(g.yarn.beta_slow == 2.0f);
  CHECK_FALSE(g.yarn.truncate);
  CHECK(g.rope_amplitude() == 1.0f);  // mscale / mscale_all_dim
  CHECK(g.yarn_softmax_mscale() > 1.0f);
  CHECK_NOTHROW(g.validate(1));
  const nlohmann::json j = ptdp::train_args_to_json(a);
  CHECK(j.at("rope-type") == "yarn");
  CHECK(j.at("rotary-scaling-factor") == 40.0);
  CHECK(j.at("no-yarn-correction-range-round-to-int") == true);
}

TEST_CASE("train args: YaRN's refusals name the flags", "[args][yarn]") {
  const std::vector<std::string> yarn = {"--position-embedding-type", "rope", "--rope-type", "yarn"};
  const auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> v = yarn;
    v.insert(v.end(), more.begin(), more.end());
    return parse_error(v);
  };
  CHECK(parse_error({"--rope-type", "ntk"}) == "--rope-type: 'ntk' is not one of rope, yarn");
  CHECK(parse_error({"--rope-type", "yarn"}) ==
        "--rope-type yarn needs --position-embedding-type rope; got --position-embedding-type learned_absolute");
  CHECK(with({"--use-rope-scaling"}) ==
        "--rope-type yarn and --use-rope-scaling both rescale the rotary frequencies: give one");
  CHECK(with({"--rotary-scaling-factor", "0"}) == "--rotary-scaling-factor: '0' must be > 0 (as a float)");
  CHECK(with({"--rotary-scaling-factor", "-4"}) == "--rotary-scaling-factor: '-4' must be > 0 (as a float)");
  CHECK(with({"--mscale", "0"}) == "--mscale: '0' must be > 0 (as a float)");
  CHECK(with({"--mscale-all-dim", "-1"}).rfind("--mscale-all-dim: '-1' must be >= 0", 0) == 0);
  CHECK(with({"--original-max-position-embeddings", "0"}) == "--original-max-position-embeddings: '0' must be > 0");
  CHECK(with({"--beta-slow", "0"}) == "--beta-slow: '0' must be > 0 (as a float)");
  CHECK(with({"--beta-fast", "1", "--beta-slow", "2"}) == "--beta-fast 1.0 is below --beta-slow 2.0");
  CHECK(with({"--mscale", "0.707"}).rfind("--mscale 0.707 needs --mscale-all-dim", 0) == 0);
  CHECK_NOTHROW(ptdp::parse_train_args({"--mscale", "0.707"}));  // without --rope-type yarn it is unused
}

TEST_CASE("train args: the Llama family's refusals name the flags", "[args]") {
  CHECK(parse_error({"--normalization", "rmsnorm"}) ==
        "--normalization: 'rmsnorm' is not one of LayerNorm, RMSNorm");
  CHECK(parse_error({"--position-embedding-type", "alibi"}) ==
        "--position-embedding-type: 'alibi' is not one of learned_absolute, rope, none");
  CHECK(parse_error({"--num-query-groups", "2"}).rfind("--num-query-groups 2 is only used with --group-query-attention",
                                                       0) == 0);
  CHECK(parse_error({"--group-query-attention", "--num-query-groups", "3", "--num-attention-heads", "8"}) ==
        "--num-query-groups 3 does not divide --num-attention-heads 8");
  CHECK(parse_error({"--group-query-attention", "--num-query-groups", "2", "--num-attention-heads", "8",
                     "--tensor-model-parallel-size", "4"}) ==
        "--tensor-model-parallel-size 4 does not divide --num-query-groups 2 (each tensor rank holds whole key/value "
        "heads)");
  CHECK(parse_error({"--group-query-attention", "--tensor-model-parallel-size", "2"})
            .rfind("--tensor-model-parallel-size 2 does not divide --group-query-attention's default of 1", 0) == 0);
  CHECK(parse_error({"--group-query-attention", "--num-query-groups", "0"}) == "--num-query-groups: '0' must be > 0");
  CHECK(parse_error({"--kv-channels", "0"}) == "--kv-channels: '0' must be > 0");
  // An odd number of rotated dims: head dim 64 / 4 = 16 times 0.0625 is 1; --kv-channels 9 is odd.
  const std::string odd = parse_error({"--position-embedding-type", "rope", "--rotary-percent", "0.0625"});
  CHECK(odd.rfind("--position-embedding-type rope rotates pairs of dims", 0) == 0);
  CHECK_THAT(odd, Catch::Contains("--rotary-percent 0.0625 gives 1 rotated dims"));
  CHECK_THAT(parse_error({"--position-embedding-type", "rope", "--kv-channels", "9"}),
             Catch::Contains("--kv-channels 9 times --rotary-percent 1.0 gives 9 rotated dims"));
  CHECK(parse_error({"--rotary-percent", "1.5"}) == "--rotary-percent: '1.5' must be in (0, 1] (as a float)");
  CHECK(parse_error({"--rotary-percent", "0"}) == "--rotary-percent: '0' must be in (0, 1] (as a float)");
  CHECK(parse_error({"--rotary-base", "0"}) == "--rotary-base: '0' must be > 0 (as a float)");
  CHECK(parse_error({"--use-rope-scaling"}) ==
        "--use-rope-scaling needs --position-embedding-type rope; got --position-embedding-type learned_absolute");
  CHECK(parse_error({"--rope-scaling-factor", "0.5"}) == "--rope-scaling-factor: '0.5' must be >= 1 (as a float)");
  CHECK(parse_error({"--position-embedding-type", "rope", "--use-rope-scaling", "--rope-scaling-low-freq-factor", "4",
                     "--rope-scaling-high-freq-factor", "4"}) ==
        "--rope-scaling-high-freq-factor 4.0 must be above --rope-scaling-low-freq-factor 4.0");
  CHECK(parse_error({"--rope-scaling-original-max-position-embeddings", "0"}) ==
        "--rope-scaling-original-max-position-embeddings: '0' must be > 0");
  CHECK_THAT(parse_error({"--swiglu", "--hidden-size", "16", "--num-attention-heads", "4"}),
             Catch::Contains("the SwiGLU MLP width int(8 * --hidden-size / 3 / 64) * 64 = 0"));
  CHECK_THAT(parse_error({"--swiglu", "--hidden-size", "128", "--tensor-model-parallel-size", "4",
                          "--num-attention-heads", "4", "--ffn-hidden-size", "66"}),
             Catch::Contains("--tensor-model-parallel-size 4 does not divide --ffn-hidden-size 66"));
  CHECK(parse_error({"--num-attention-heads", "6"}) ==
        "--num-attention-heads 6 does not divide --hidden-size 64 (or give the head dim with --kv-channels)");
  CHECK(parse_error({"--norm-epsilon", "1e-6", "--layernorm-epsilon", "1e-5"}) ==
        "--norm-epsilon 1e-6 and --layernorm-epsilon 1e-5 set the same epsilon (--layernorm-epsilon is Megatron's "
        "older name); give one");
  CHECK(parse_error({"--norm-epsilon", "0"}) == "--norm-epsilon: '0' must be > 0 (as a float)");
  const std::string unknown = parse_error({"--model-preset", "llama-9"});
  CHECK(unknown.rfind("--model-preset: 'llama-9' is not a preset; the presets are ", 0) == 0);
  CHECK_THAT(unknown, Catch::Contains(ptdp::model_preset_names()));
  CHECK(parse_error({"--model-preset="}) == "--model-preset: empty value; expected NAME");
}

TEST_CASE("train args: the layout, schedule and sample counts", "[args]") {
  TrainArgs a = ptdp::parse_train_args({"--num-layers", "8", "--pipeline-model-parallel-size", "2",
                                        "--num-layers-per-virtual-pipeline-stage", "2", "--tensor-model-parallel-size",
                                        "2", "--global-batch-size", "16", "--micro-batch-size", "2", "--train-iters",
                                        "100", "--eval-interval", "30", "--eval-iters", "5"});
  CHECK(ptdp::virtual_pipeline_size(a) == 2);
  CHECK(ptdp::schedule_kind(a) == ptdp::ScheduleKind::Interleaved1F1B);
  const ptdp::ParallelConfig p = ptdp::to_parallel_config(a, 8);
  CHECK(p.world == 8);
  CHECK(p.tensor == 2);
  CHECK(p.pipeline == 2);
  CHECK(p.virtual_stages == 2);
  CHECK(ptdp::train_num_samples(a) == std::array<int64_t, 3>{1600, (100 / 30 + 1) * 5 * 16, 80});

  a = ptdp::parse_train_args({"--num-layers", "8", "--pipeline-model-parallel-size", "2",
                              "--num-layers-per-virtual-pipeline-stage", "4", "--pipeline-schedule", "zb-h1"});
  CHECK(ptdp::virtual_pipeline_size(a) == 1);  // 8 / (2 * 4): one chunk per rank
  CHECK(ptdp::schedule_kind(a) == ptdp::ScheduleKind::ZeroBubbleH1);

  a = ptdp::parse_train_args({"--micro-batch-size", "3", "--eval-interval", "0"});
  CHECK(ptdp::global_batch_or_micro(a) == 3);
  CHECK(ptdp::train_num_samples(a) == std::array<int64_t, 3>{30, 0, 300});
}

TEST_CASE("train args: Megatron's uneven first and last pipeline stages", "[args]") {
  TrainArgs a = ptdp::parse_train_args({"--num-layers", "30", "--pipeline-model-parallel-size", "4",
                                        "--num-virtual-stages-per-pipeline-rank", "2",
                                        "--decoder-first-pipeline-num-layers", "8",
                                        "--decoder-last-pipeline-num-layers", "10"});
  CHECK(a.decoder_first_pipeline_num_layers == 8);
  CHECK(a.decoder_last_pipeline_num_layers == 10);
  CHECK(ptdp::virtual_pipeline_size(a) == 2);
  CHECK(ptdp::schedule_kind(a) == ptdp::ScheduleKind::Interleaved1F1B);
  ptdp::ParallelConfig p = ptdp::to_parallel_config(a, 4);
  CHECK(p.pipeline == 4);
  CHECK(p.virtual_stages == 2);
  CHECK(p.first_stage_layers == 8);
  CHECK(p.last_stage_layers == 10);
  const nlohmann::json j = ptdp::train_args_to_json(a);
  CHECK(j["decoder-first-pipeline-num-layers"] == 8);
  CHECK(j["decoder-last-pipeline-num-layers"] == 10);
  CHECK(j["num-virtual-stages-per-pipeline-rank"] == 2);
  // Unset: an even split, null in the JSON.
  a = ptdp::parse_train_args({"--num-layers", "4", "--pipeline-model-parallel-size", "2"});
  p = ptdp::to_parallel_config(a, 2);
  CHECK(p.first_stage_layers == 0);
  CHECK(p.last_stage_layers == 0);
  CHECK(ptdp::train_args_to_json(a)["decoder-first-pipeline-num-layers"].is_null());
  // p need not divide the layers once a stage has its own count.
  a = ptdp::parse_train_args({"--num-layers", "5", "--pipeline-model-parallel-size", "2",
                              "--decoder-last-pipeline-num-layers", "1"});
  CHECK(ptdp::to_parallel_config(a, 2).last_stage_layers == 1);
  CHECK(ptdp::virtual_pipeline_size(a) == 1);
  CHECK(ptdp::schedule_kind(a) == ptdp::ScheduleKind::OneFOneB);
  // --num-virtual-stages-per-pipeline-rank on its own (an even split).
  a = ptdp::parse_train_args({"--num-layers", "8", "--pipeline-model-parallel-size", "2",
                              "--num-virtual-stages-per-pipeline-rank", "4"});
  CHECK(ptdp::virtual_pipeline_size(a) == 4);
}

TEST_CASE("train args: uneven stages are refused in Megatron's words, naming the flags", "[args]") {
  CHECK(parse_error({"--decoder-first-pipeline-num-layers", "0"}) ==
        "--decoder-first-pipeline-num-layers: '0' must be > 0");
  CHECK(parse_error({"--num-layers", "8", "--pipeline-model-parallel-size", "2",
                     "--num-layers-per-virtual-pipeline-stage", "2", "--decoder-first-pipeline-num-layers", "2"}) ==
        "please use --num-virtual-stages-per-pipeline-rank to specify virtual pipeline parallel degree when enable "
        "uneven pipeline parallelism (--decoder-first-pipeline-num-layers 2 with "
        "--num-layers-per-virtual-pipeline-stage 2)");
  CHECK(parse_error({"--num-layers", "8", "--pipeline-model-parallel-size", "2",
                     "--num-layers-per-virtual-pipeline-stage", "2", "--num-virtual-stages-per-pipeline-rank", "2"}) ==
        "No more than one of --num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank can "
        "be set; got --num-layers-per-virtual-pipeline-stage 2 and --num-virtual-stages-per-pipeline-rank 2");
  CHECK(parse_error({"--num-layers", "8", "--pipeline-model-parallel-size", "2",
                     "--num-virtual-stages-per-pipeline-rank", "2", "--decoder-first-pipeline-num-layers", "3"}) ==
        "--num-layers 8, --pipeline-model-parallel-size 2, --num-virtual-stages-per-pipeline-rank 2, "
        "--decoder-first-pipeline-num-layers 3: number of layers at first stage: 3 must be divisible by virtual "
        "pipeline parallel degree 2");
  CHECK(parse_error({"--num-layers", "6", "--pipeline-model-parallel-size", "2",
                     "--decoder-first-pipeline-num-layers", "4", "--decoder-last-pipeline-num-layers", "1"}) ==
        "--num-layers 6, --pipeline-model-parallel-size 2, --decoder-first-pipeline-num-layers 4, "
        "--decoder-last-pipeline-num-layers 1: Mismatch: 1 middle layers remaining but 0 middle PP stages available "
        "(num_layers 6, p=2 x v=1, first stage 4, last stage 1 layers)");
  CHECK(parse_error({"--num-layers", "8", "--pipeline-model-parallel-size", "4",
                     "--decoder-first-pipeline-num-layers", "1", "--decoder-last-pipeline-num-layers", "2"}) ==
        "--num-layers 8, --pipeline-model-parallel-size 4, --decoder-first-pipeline-num-layers 1, "
        "--decoder-last-pipeline-num-layers 2: number of layers at middle stage: 5 must be divisible by the middle "
        "pipeline model parallel size 2");
  CHECK(parse_error({"--num-layers", "5", "--pipeline-model-parallel-size", "2"}) ==
        "--num-layers 5 is not divisible by --pipeline-model-parallel-size 2");
  CHECK(parse_error({"--num-layers", "8", "--num-virtual-stages-per-pipeline-rank", "2"}) ==
        "--num-virtual-stages-per-pipeline-rank 2 gives v = 2 model chunks per pipeline rank, which needs "
        "--pipeline-model-parallel-size > 1");
  CHECK(parse_error({"--num-layers", "8", "--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank",
                     "2", "--pipeline-schedule", "gpipe"}) ==
        "--pipeline-schedule gpipe cannot run v = 2 model chunks per rank (from "
        "--num-virtual-stages-per-pipeline-rank); only 1f1b (interleaved), interleaved-zb, zb-v and dualpipev can");
}

TEST_CASE("train args: the V-shaped and interleaved zero-bubble schedules", "[args]") {
  for (const char* name : {"zb-v", "dualpipev"}) {
    INFO(name);
    const TrainArgs a = ptdp::parse_train_args({"--num-layers", "8", "--pipeline-model-parallel-size", "2",
                                                "--pipeline-schedule", name});
    CHECK(ptdp::virtual_pipeline_size(a) == 2);  // the V holds 2 chunks per rank unless given
    CHECK(ptdp::schedule_kind(a) ==
          (std::string(name) == "zb-v" ? ptdp::ScheduleKind::ZeroBubbleV : ptdp::ScheduleKind::DualPipeV));
    const ptdp::ParallelConfig p = ptdp::to_parallel_config(a, 4);
    CHECK(p.virtual_stages == 2);
    CHECK(p.chunk_placement == static_cast<int>(ptdp::ChunkPlacement::V));
  }
  TrainArgs a = ptdp::parse_train_args({"--num-layers", "8", "--pipeline-model-parallel-size", "2",
                                        "--num-virtual-stages-per-pipeline-rank", "2", "--pipeline-schedule",
                                        "interleaved-zb"});
  CHECK(ptdp::schedule_kind(a) == ptdp::ScheduleKind::InterleavedZeroBubble);
  CHECK(ptdp::to_parallel_config(a, 2).chunk_placement == static_cast<int>(ptdp::ChunkPlacement::RoundRobin));
  a = ptdp::parse_train_args({"--num-layers", "8", "--pipeline-model-parallel-size", "2"});
  CHECK(ptdp::to_parallel_config(a, 2).chunk_placement == static_cast<int>(ptdp::ChunkPlacement::RoundRobin));
  CHECK(parse_error({"--num-layers", "12", "--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank",
                     "3", "--pipeline-schedule", "zb-v"}) ==
        "--pipeline-schedule zb-v places 2 model chunks per rank, got v = 3 (from --num-virtual-stages-per-pipeline-rank)");
  CHECK(parse_error({"--num-layers", "8", "--pipeline-schedule", "dualpipev"}) ==
        "--pipeline-schedule dualpipev needs --pipeline-model-parallel-size > 1");
  CHECK(parse_error({"--num-layers", "8", "--pipeline-model-parallel-size", "2", "--pipeline-schedule", "interleaved-zb"}) ==
        "--pipeline-schedule interleaved-zb needs v > 1 model chunks per rank (--num-virtual-stages-per-pipeline-rank)");
  CHECK(parse_error({"--num-layers", "10", "--pipeline-model-parallel-size", "2", "--decoder-first-pipeline-num-layers",
                     "4", "--pipeline-schedule", "zb-v"}) ==
        "--pipeline-schedule zb-v takes an even split of the layers: drop --decoder-first-pipeline-num-layers, "
        "--decoder-last-pipeline-num-layers and --pipeline-model-parallel-layout");
}

TEST_CASE("train args: the optimizer and loss scaling follow Megatron", "[args]") {
  ptdp::OptimizerConfig o = ptdp::to_optimizer_config(ptdp::parse_train_args({"--train-iters", "40"}));
  CHECK(o.kind == ptdp::OptimizerKind::Adam);
  CHECK(o.lr.decay_iters == 40);  // unset --lr-decay-iters: --train-iters
  CHECK(o.lr.style == ptdp::LrDecayStyle::Linear);
  CHECK_FALSE(o.loss_scale.dynamic);  // fp32: no scaling
  CHECK(o.loss_scale.initial_scale == 1.0f);
  CHECK_NOTHROW(o.validate());

  o = ptdp::to_optimizer_config(ptdp::parse_train_args({"--fp16"}));
  CHECK(o.loss_scale.dynamic);
  CHECK(o.loss_scale.initial_scale == 4294967296.0f);
  CHECK(o.loss_scale.min_scale == 1.0f);
  CHECK(o.loss_scale.growth_interval == 1000);
  CHECK(o.loss_scale.hysteresis == 2);

  o = ptdp::to_optimizer_config(ptdp::parse_train_args({"--fp16", "--loss-scale", "0.5"}));
  CHECK_FALSE(o.loss_scale.dynamic);
  CHECK(o.loss_scale.initial_scale == 0.5f);
  CHECK(o.loss_scale.min_scale == 0.5f);  // the floor never exceeds a constant scale
  CHECK_NOTHROW(o.validate());

  o = ptdp::to_optimizer_config(ptdp::parse_train_args({"--bf16"}));
  CHECK_FALSE(o.loss_scale.dynamic);
  CHECK(o.loss_scale.initial_scale == 1.0f);

  o = ptdp::to_optimizer_config(ptdp::parse_train_args({"--bf16", "--loss-scale", "64"}));
  CHECK_FALSE(o.loss_scale.dynamic);
  CHECK(o.loss_scale.initial_scale == 64.0f);

  o = ptdp::to_optimizer_config(ptdp::parse_train_args(
      {"--adam-beta1", "0.7", "--adam-beta2", "0.9", "--adam-eps", "1e-5", "--weight-decay", "0", "--clip-grad", "0",
       "--sgd-momentum", "0.5", "--use-distributed-optimizer", "--ddp-bucket-size", "4096", "--overlap-grad-reduce",
       "--overlap-param-gather"}));
  CHECK(o.beta1 == 0.7f);
  CHECK(o.beta2 == 0.9f);
  CHECK(o.eps == 1e-5f);
  CHECK(o.weight_decay == 0.0f);
  CHECK(o.clip_grad == 0.0f);
  CHECK(o.momentum == 0.5f);
  CHECK(o.distributed);
  CHECK(o.bucket_elements == 4096);
  CHECK(o.overlap_grad_reduce);
  CHECK(o.overlap_param_gather);
  o = ptdp::to_optimizer_config(ptdp::parse_train_args({}));
  CHECK_FALSE(o.overlap_grad_reduce);  // Megatron's defaults: off
  CHECK_FALSE(o.overlap_param_gather);
  // Megatron's rule: the overlapped gather needs the distributed optimizer and the overlapped reduction.
  CHECK_THROWS_WITH(ptdp::parse_train_args({"--overlap-param-gather", "--overlap-grad-reduce"}),
                    Catch::Contains("--overlap-param-gather needs --use-distributed-optimizer and --overlap-grad-reduce"));
  CHECK_THROWS_WITH(ptdp::parse_train_args({"--overlap-param-gather", "--use-distributed-optimizer"}),
                    Catch::Contains("--overlap-param-gather needs"));
}

TEST_CASE("train args: --sequence-parallel reaches the layout and needs s divisible by t", "[args]") {
  TrainArgs a = ptdp::parse_train_args({"--tensor-model-parallel-size", "4", "--seq-length", "64", "--sequence-parallel"});
  CHECK(a.sequence_parallel);
  CHECK(ptdp::to_parallel_config(a, 4).sequence_parallel);
  CHECK(ptdp::train_args_to_json(a)["sequence-parallel"] == true);
  CHECK_FALSE(ptdp::to_parallel_config(ptdp::parse_train_args({"--tensor-model-parallel-size", "4"}), 4).sequence_parallel);
  try {
    ptdp::parse_train_args({"--tensor-model-parallel-size", "4", "--seq-length", "30", "--sequence-parallel"});
    FAIL("s = 30 over t = 4 accepted");
  } catch (const ptdp::Error& e) {
    const std::string what = e.what();
    CHECK(what.find("--seq-length 30") != std::string::npos);
    CHECK(what.find("--tensor-model-parallel-size 4") != std::string::npos);
  }
}

TEST_CASE("train args: --pipeline-model-parallel-layout sets v and the chunks, refused in Megatron's words", "[args]") {
  TrainArgs a = ptdp::parse_train_args({"--num-layers", "6", "--pipeline-model-parallel-size", "2",
                                        "--pipeline-model-parallel-layout", "Et|(tt|)*2,tL"});
  CHECK(ptdp::virtual_pipeline_size(a) == 2);
  CHECK(ptdp::schedule_kind(a) == ptdp::ScheduleKind::Interleaved1F1B);
  const ptdp::ParallelConfig c = ptdp::to_parallel_config(a, 2);
  CHECK(c.virtual_stages == 2);
  CHECK(c.pipeline_layout == "Et|(tt|)*2,tL");
  CHECK(ptdp::chunk_layer_counts(6, ptdp::pipeline_split(c)) == std::vector<int>{1, 2, 2, 1});
  CHECK(ptdp::train_args_to_json(a)["pipeline-model-parallel-layout"] == "Et|(tt|)*2,tL");
  // Agreeing with --num-virtual-stages-per-pipeline-rank is fine.
  a = ptdp::parse_train_args({"--num-layers", "4", "--pipeline-model-parallel-size", "2",
                              "--num-virtual-stages-per-pipeline-rank", "1", "--pipeline-model-parallel-layout", "Ettt|tL"});
  CHECK(ptdp::virtual_pipeline_size(a) == 1);
  const auto refused = [](std::vector<std::string> flags, const std::string& words) {
    INFO(words);
    try {
      ptdp::parse_train_args(flags);
      FAIL("accepted");
    } catch (const ptdp::Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(words));
    }
  };
  refused({"--num-layers", "5", "--pipeline-model-parallel-size", "2", "--pipeline-model-parallel-layout", "Ett|ttL"},
          "Number of decoder layers 4 must match num_layers 5");
  refused({"--num-layers", "4", "--pipeline-model-parallel-size", "2", "--pipeline-model-parallel-layout", "Ett|tt|L"},
          "must be divisible by pipeline_model_parallel_size");
  refused({"--num-layers", "4", "--pipeline-model-parallel-size", "2", "--pipeline-model-parallel-layout", "tEt|ttL"},
          "The first layer must be embedding");
  refused({"--num-layers", "4", "--pipeline-model-parallel-size", "2", "--pipeline-model-parallel-layout", "Ett|ttL",
           "--decoder-first-pipeline-num-layers", "2"},
          "--pipeline-model-parallel-layout Ett|ttL places every layer; drop --decoder-first-pipeline-num-layers 2");
  refused({"--num-layers", "4", "--pipeline-model-parallel-size", "2", "--pipeline-model-parallel-layout", "Ett|ttL",
           "--num-layers-per-virtual-pipeline-stage", "1"},
          "sets v itself; drop --num-layers-per-virtual-pipeline-stage 1");
  refused({"--num-layers", "4", "--pipeline-model-parallel-size", "2", "--pipeline-model-parallel-layout", "Ett|ttL",
           "--num-virtual-stages-per-pipeline-rank", "2"},
          "has 2 entries, not --pipeline-model-parallel-size 2 x --num-virtual-stages-per-pipeline-rank 2");
  refused({"--num-layers", "4", "--pipeline-model-parallel-size", "2", "--pipeline-model-parallel-layout",
           "Et|t|t|tL", "--pipeline-schedule", "zb-v"},
          "takes an even split of the layers");
}

TEST_CASE("train args: --context-parallel-size reaches the layout and needs s divisible by 2c", "[args]") {
  TrainArgs a = ptdp::parse_train_args({"--context-parallel-size", "4", "--seq-length", "64"});
  CHECK(a.context_parallel_size == 4);
  CHECK(ptdp::to_parallel_config(a, 8).context == 4);
  CHECK(ptdp::train_args_to_json(a)["context-parallel-size"] == 4);
  CHECK(ptdp::to_parallel_config(ptdp::parse_train_args({}), 4).context == 1);
  CHECK_THROWS_WITH(ptdp::parse_train_args({"--context-parallel-size", "0"}), Catch::Contains("--context-parallel-size"));
  try {
    ptdp::parse_train_args({"--context-parallel-size", "4", "--seq-length", "60"});
    FAIL("s = 60 in 2c = 8 chunks accepted");
  } catch (const ptdp::Error& e) {
    const std::string what = e.what();
    CHECK(what.find("--seq-length 60") != std::string::npos);
    CHECK(what.find("8") != std::string::npos);
  }
  // With sequence parallelism each chunk is split over t as well: 2 c t = 16 must divide s.
  CHECK_THROWS_WITH(ptdp::parse_train_args({"--context-parallel-size", "2", "--tensor-model-parallel-size", "4",
                                            "--sequence-parallel", "--seq-length", "24"}),
                    Catch::Contains("--seq-length 24"));
}

TEST_CASE("train args: help and JSON cover every flag", "[args]") {
  const std::vector<std::string> names = ptdp::train_flag_names();
  CHECK(names.size() == 164);
  const std::string help = ptdp::train_args_help("prog");
  CHECK(help.rfind("Usage: prog [flags]", 0) == 0);
  const nlohmann::json j = ptdp::train_args_to_json(TrainArgs{});
  CHECK(j.size() == names.size());
  for (const std::string& n : names) {
    INFO(n);
    const bool listed = help.find("\n  --" + n + " ") != std::string::npos ||
                        help.find("\n  --" + n + "\n") != std::string::npos;
    CHECK(listed);
    CHECK(j.contains(n));
  }
}

TEST_CASE("train args: the fault-tolerance flags and their refusals", "[args]") {
  const TrainArgs d = ptdp::parse_train_args({});
  CHECK_FALSE(d.check_for_nan_in_loss_and_grad);
  CHECK(d.max_skipped_iterations == 100);
  CHECK(d.max_restarts == 0);
  CHECK(d.launcher.empty());
  const TrainArgs a = ptdp::parse_train_args({"--check-for-nan-in-loss-and-grad", "--max-skipped-iterations", "0",
                                              "--max-restarts", "3", "--save", "ck", "--launcher",
                                              "mpiexec -n 8 --oversubscribe"});
  CHECK(a.check_for_nan_in_loss_and_grad);
  CHECK(a.max_skipped_iterations == 0);
  CHECK(a.max_restarts == 3);
  CHECK(a.launcher == "mpiexec -n 8 --oversubscribe");
  CHECK_THROWS_WITH(ptdp::parse_train_args({"--max-restarts", "2"}),
                    Catch::Contains("--max-restarts 2 needs --save DIR"));
  CHECK_THROWS_WITH(ptdp::parse_train_args({"--launcher", "mpiexec -n 2"}),
                    Catch::Contains("--launcher is read only with --max-restarts"));
  CHECK_THROWS_WITH(ptdp::parse_train_args({"--max-restarts", "-1"}), Catch::Contains("--max-restarts"));
  CHECK_THROWS_WITH(ptdp::parse_train_args({"--max-skipped-iterations", "-2"}),
                    Catch::Contains("--max-skipped-iterations"));
}

TEST_CASE("train args: the multi-token prediction flags reach the model, refused in Megatron's words", "[args][mtp]") {
  const TrainArgs none = ptdp::parse_train_args({});
  CHECK(none.mtp_num_layers == 0);
  CHECK(none.mtp_loss_scaling_factor == 0.1);  // Megatron's default
  CHECK(ptdp::to_gpt_config(none).mtp_num_layers == 0);
  const TrainArgs a = ptdp::parse_train_args(
      {"--position-embedding-type", "rope", "--mtp-num-layers", "2", "--mtp-loss-scaling-factor=0.3"});
  const ptdp::GptConfig g = ptdp::to_gpt_config(a);
  CHECK(g.mtp_num_layers == 2);
  CHECK(g.mtp_loss_scaling_factor == 0.3f);
  CHECK(parse_error({"--mtp-num-layers", "-1"}) == "--mtp-num-layers: '-1' must be >= 0");
  CHECK(parse_error({"--position-embedding-type", "rope", "--mtp-num-layers", "1", "--mtp-loss-scaling-factor",
                     "-2"}) == "--mtp-loss-scaling-factor: '-2' must be >= 0 (as a float)");
  CHECK(parse_error({"--mtp-num-layers", "1"})
            .rfind("Multi-Token Prediction (MTP) is not supported with learned_absolute position embedding type. The "
                   "supported position embedding types are rope and none (--mtp-num-layers 1 with "
                   "--position-embedding-type learned_absolute)",
                   0) == 0);
  // MTP with MoE: the modules' layers take the decoder's last layer's kind (GptConfig::mtp_moe()).
  const ptdp::GptConfig moe = ptdp::to_gpt_config(ptdp::parse_train_args(
      {"--position-embedding-type", "none", "--mtp-num-layers", "1", "--num-experts", "4"}));
  CHECK(moe.mtp_num_layers == 1);
  CHECK(moe.mtp_moe());
  CHECK(moe.num_moe_layers_with_mtp() == moe.num_layers + 1);
}

TEST_CASE("train args: multi-latent attention's flags, Megatron's defaults and refusals", "[args][mla]") {
  const std::vector<std::string> base = {"--position-embedding-type", "rope", "--normalization", "RMSNorm",
                                         "--num-attention-heads", "4", "--hidden-size", "64"};
  const auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> v = base;
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  };
  const TrainArgs d = ptdp::parse_train_args(with({"--multi-latent-attention"}));
  const ptdp::GptConfig g = ptdp::to_gpt_config(d);
  CHECK(g.multi_latent_attention);
  CHECK(g.q_lora_rank == 0);  // Megatron's None: linear_q_proj
  CHECK(g.kv_lora_rank == 32);
  CHECK(g.qk_head_dim == 128);
  CHECK(g.qk_pos_emb_head_dim == 64);
  CHECK(g.v_head_dim == 128);
  CHECK(g.attention_width() == 4 * 128);
  const TrainArgs a = ptdp::parse_train_args(with({"--multi-latent-attention", "--q-lora-rank", "24", "--kv-lora-rank",
                                                   "16", "--qk-head-dim", "8", "--qk-pos-emb-head-dim", "4",
                                                   "--v-head-dim", "12", "--qk-layernorm"}));
  const ptdp::GptConfig c = ptdp::to_gpt_config(a);
  CHECK(c.q_lora_rank == 24);
  CHECK(c.kv_lora_rank == 16);
  CHECK(c.qk_head_dim == 8);
  CHECK(c.qk_pos_emb_head_dim == 4);
  CHECK(c.v_head_dim == 12);
  CHECK(c.rotary_dim() == 4);
  CHECK_NOTHROW(c.validate(4));
  const nlohmann::json j = ptdp::train_args_to_json(a);
  CHECK(j["q-lora-rank"] == 24);
  CHECK(j["multi-latent-attention"] == true);
  CHECK_THROWS_WITH(ptdp::parse_train_args(with({"--kv-lora-rank", "16"})),
                    Catch::Contains("--kv-lora-rank 16 is read only with --multi-latent-attention"));
  CHECK_THROWS_WITH(ptdp::parse_train_args(with({"--multi-latent-attention", "--group-query-attention"})),
                    Catch::Contains("--group-query-attention is mutually exclusive with --multi-latent-attention"));
  CHECK_THROWS_WITH(
      ptdp::parse_train_args({"--multi-latent-attention", "--num-attention-heads", "4", "--hidden-size", "64"}),
      Catch::Contains("--multi-latent-attention needs --position-embedding-type rope"));
  CHECK_THROWS_WITH(ptdp::parse_train_args(with({"--multi-latent-attention", "--v-head-dim", "200"})),
                    Catch::Contains("--v-head-dim 200 exceeds --qk-head-dim 128 + --qk-pos-emb-head-dim 64"));
  CHECK_THROWS_WITH(ptdp::parse_train_args(with({"--multi-latent-attention", "--qk-pos-emb-head-dim", "3"})),
                    Catch::Contains("--qk-pos-emb-head-dim 3"));
  CHECK_THROWS_WITH(ptdp::parse_train_args(with({"--multi-latent-attention", "--q-lora-rank", "0"})),
                    Catch::Contains("--q-lora-rank"));
  // MLA's head dims need not divide the hidden size.
  CHECK_NOTHROW(ptdp::parse_train_args({"--multi-latent-attention", "--position-embedding-type", "rope",
                                        "--num-attention-heads", "3", "--hidden-size", "64"}));
}
