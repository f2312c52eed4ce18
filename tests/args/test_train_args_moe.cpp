// ptdp-train's mixture-of-experts flags (Megatron-Core's names and semantics): the values reach
// the model and the layout, --moe-layer-freq's integer and list patterns are read without
// evaluation, every refusal Megatron makes names the flags, and the MoE presets fill the flags.
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "core/args/train_args.h"
#include "core/model/model_presets.h"
#include "core/model/moe_layer_freq.h"

namespace {

using ptdp::TrainArgs;

std::string parse_error(const std::vector<std::string>& args) {
  try {
    ptdp::parse_train_args(args);
  } catch (const ptdp::Error& e) {
    CHECK(e.code() == ptdp::ErrorCode::InvalidArgument);
    return e.what();
  }
  return "";
}

// A small MoE model the refusals start from: 4 layers, 8 experts, no linear bias.
std::vector<std::string> moe(std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"--num-layers", "4", "--num-experts", "8", "--disable-bias-linear"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

std::string layer_freq_error(const std::string& value) {
  try {
    ptdp::parse_moe_layer_freq(value, 12);
  } catch (const ptdp::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("train args moe: every flag reaches the model and the layout", "[args][moe]") {
  const TrainArgs a = ptdp::parse_train_args(
      {"--num-layers", "4", "--num-experts", "16", "--moe-router-topk", "4", "--moe-ffn-hidden-size", "96",
       "--moe-shared-expert-intermediate-size", "128", "--moe-shared-expert-gate", "--moe-router-score-function",
       "sigmoid", "--moe-router-topk-scaling-factor", "2.5", "--moe-router-num-groups", "4", "--moe-router-group-topk",
       "2", "--moe-router-enable-expert-bias", "--moe-router-bias-update-rate", "0.01", "--moe-router-dtype", "fp32",
       "--moe-router-load-balancing-type", "seq_aux_loss", "--moe-aux-loss-coeff", "0.01", "--moe-z-loss-coeff",
       "0.001", "--moe-expert-capacity-factor", "1.5", "--moe-token-drop-policy", "position",
       "--moe-pad-expert-input-to-capacity", "--moe-token-dispatcher-type", "allgather", "--moe-layer-freq", "2",
       "--expert-model-parallel-size", "4", "--expert-tensor-parallel-size", "1", "--disable-bias-linear"});
  const ptdp::GptConfig g = ptdp::to_gpt_config(a);
  const ptdp::MoeConfig& m = g.moe;
  CHECK(m.num_experts == 16);
  CHECK(m.router_topk == 4);
  CHECK(g.moe_ffn() == 96);
  CHECK(m.shared_expert_intermediate_size == 128);
  CHECK(m.shared_expert_gate);
  CHECK(m.score_function == ptdp::MoeScoreFunction::Sigmoid);
  CHECK(m.topk_scaling_factor == 2.5f);
  CHECK(m.num_groups == 4);
  CHECK(m.group_topk == 2);
  CHECK(m.enable_expert_bias);
  CHECK(m.bias_update_rate == 0.01f);
  CHECK(m.load_balancing == ptdp::MoeLoadBalancing::SeqAuxLoss);
  CHECK(m.aux_loss_coeff == 0.01f);
  CHECK(m.z_loss_coeff == 0.001f);
  CHECK(m.capacity_factor == 1.5f);
  CHECK(m.drop_policy == ptdp::MoeDropPolicy::Position);
  CHECK(m.pad_expert_input_to_capacity);
  CHECK(m.dispatcher == ptdp::MoeDispatcher::AllGather);
  CHECK(m.layer_pattern == std::vector<int>{1, 0, 1, 0});
  CHECK(g.num_moe_layers() == 2);
  const ptdp::ParallelConfig p = ptdp::to_parallel_config(a, 8);
  CHECK(p.expert_model == 4);
  CHECK(p.expert_tensor == 1);
  // Megatron's defaults: dropless, aux_loss, softmax after the top k, alltoall here, etp = t.
  const TrainArgs d = ptdp::parse_train_args(moe());
  const ptdp::GptConfig dg = ptdp::to_gpt_config(d);
  CHECK(dg.moe.router_topk == 2);
  CHECK(dg.moe.layer_pattern.empty());
  CHECK(dg.num_moe_layers() == 4);
  CHECK(dg.moe_ffn() == dg.ffn());
  CHECK(dg.moe.capacity_factor == 0.0f);
  CHECK(ptdp::to_parallel_config(d, 1).expert_tensor_size() == 1);
  // A negative capacity factor is Megatron's None: dropless.
  CHECK(ptdp::parse_train_args(moe({"--moe-expert-capacity-factor", "-1"})).moe_expert_capacity_factor == std::nullopt);
}

TEST_CASE("train args moe: --moe-layer-freq reads Megatron's patterns without eval", "[args][moe]") {
  CHECK(ptdp::parse_moe_layer_freq("1", 4).empty());
  CHECK(ptdp::parse_moe_layer_freq("3", 7) == std::vector<int>{1, 0, 0, 1, 0, 0, 1});
  CHECK(ptdp::parse_moe_layer_freq("([0]*3+[1]*1)*3", 12) == std::vector<int>{0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1});
  CHECK(ptdp::parse_moe_layer_freq("[1,0,1]", 3) == std::vector<int>{1, 0, 1});
  CHECK(ptdp::parse_moe_layer_freq("([0]+[1]*23)", 24).size() == 24);
  CHECK(ptdp::parse_moe_layer_freq("([1]*3+[0]*2)*2", 10) == std::vector<int>{1, 1, 1, 0, 0, 1, 1, 1, 0, 0});
  // int * list, and a trailing ','
  CHECK(ptdp::parse_moe_layer_freq("2*[1,0]+[1,]", 5) == std::vector<int>{1, 0, 1, 0, 1});
  CHECK(ptdp::parse_moe_layer_freq("[1]*(1+1)", 2) == std::vector<int>{1, 1});
  CHECK(ptdp::parse_moe_layer_freq("[1]*0+[0]", 1) == std::vector<int>{0});
  // The shortest spelling that reads back the same.
  CHECK(ptdp::format_moe_layer_freq({}, 4) == "1");
  CHECK(ptdp::format_moe_layer_freq({1, 0, 0, 1, 0, 0, 1}, 7) == "3");
  CHECK(ptdp::format_moe_layer_freq({1, 0, 0}, 3) == "3");
  CHECK(ptdp::format_moe_layer_freq({0, 1, 1}, 3) == "[0,1,1]");
  CHECK(ptdp::format_moe_layer_freq({1, 1}, 2) == "[1,1]");
  for (const char* v : {"2", "([0]*3+[1]*1)*3", "[1,0,1,1,0,1,1,0,1,1,0,0]"}) {
    const std::vector<int> p = ptdp::parse_moe_layer_freq(v, 12);
    CHECK(ptdp::parse_moe_layer_freq(ptdp::format_moe_layer_freq(p, 12), 12) == p);
  }
  // Refusals name the flag, the value and what is wrong where.
  CHECK_THAT(layer_freq_error("0"), Catch::Contains("--moe-layer-freq: '0' is not an integer >= 1"));
  CHECK_THAT(layer_freq_error("[1] * 2"), Catch::Contains("has ' ' (at character 4)"));
  CHECK_THAT(layer_freq_error("__import__('os')[1]"), Catch::Contains("has '_'"));
  CHECK_THAT(layer_freq_error("[1,0"), Catch::Contains("misses a ']' or ','"));
  CHECK_THAT(layer_freq_error("([1]"), Catch::Contains("misses a ')'"));
  CHECK_THAT(layer_freq_error("[1,2]"), Catch::Contains("gives layer 1 the entry 2"));
  CHECK_THAT(layer_freq_error("[[1]]"), Catch::Contains("has a list inside a list"));
  CHECK_THAT(layer_freq_error("[1]*[1]"), Catch::Contains("multiplies two lists"));
  CHECK_THAT(layer_freq_error("[1]+1"), Catch::Contains("adds a number to a list"));
  CHECK_THAT(layer_freq_error("[1][0]"), Catch::Contains("where the pattern should end"));
  CHECK_THAT(layer_freq_error("[1]*99999999999"), Catch::Contains("more than 1048576 entries"));
  CHECK_THAT(layer_freq_error("[1]*99999999999999999999"), Catch::Contains("beyond 64 bits"));
  CHECK_THAT(layer_freq_error(std::string(100, '(') + "[1]" + std::string(100, ')')), Catch::Contains("deeper than"));
  CHECK_THAT(layer_freq_error("[1]+"), Catch::Contains("ends where a number"));
  // Through the flags: the syntax at once, the length against --num-layers.
  CHECK_THAT(parse_error(moe({"--moe-layer-freq", "[1,0"})), Catch::Contains("--moe-layer-freq: '[1,0'"));
  CHECK_THAT(parse_error(moe({"--moe-layer-freq", "[1,0,1]"})),
             Catch::Contains("--moe-layer-freq [1,0,1] gives 3 layers, but --num-layers 4"));
}

TEST_CASE("train args moe: Megatron's refusals name the flags", "[args][moe]") {
  const std::pair<std::vector<std::string>, std::vector<std::string>> cases[] = {
      {moe({"--moe-router-topk", "9"}), {"--moe-router-topk 9 is larger than --num-experts 8"}},
      {moe({"--expert-model-parallel-size", "3"}),
       {"--num-experts 8 is not a multiple of --expert-model-parallel-size 3"}},
      {{"--expert-model-parallel-size", "2"}, {"--expert-model-parallel-size 2 needs --num-experts"}},
      {{"--expert-tensor-parallel-size", "1"}, {"--expert-tensor-parallel-size 1 needs --num-experts"}},
      {{"--moe-router-topk", "4"}, {"--moe-router-topk 4 is read only with --num-experts"}},
      {{"--moe-ffn-hidden-size", "32"}, {"--moe-ffn-hidden-size 32 is read only with --num-experts"}},
      {moe({"--moe-router-num-groups", "3", "--moe-router-group-topk", "1"}),
       {"--num-experts 8 is not divisible by --moe-router-num-groups 3"}},
      {moe({"--moe-router-num-groups", "2", "--moe-router-group-topk", "4", "--moe-router-topk", "4"}),
       {"--moe-router-group-topk 4 is larger than --moe-router-num-groups 2"}},
      {moe({"--moe-router-num-groups", "4", "--moe-router-group-topk", "2", "--moe-router-topk", "3"}),
       {"--moe-router-topk 3 is not divisible by --moe-router-group-topk 2"}},
      {moe({"--moe-router-num-groups", "8", "--moe-router-group-topk", "1", "--moe-router-topk", "2"}),
       {"--moe-router-group-topk 1 groups of 1 experts", "hold fewer than --moe-router-topk 2"}},
      {moe({"--moe-router-group-topk", "2"}), {"--moe-router-group-topk 2 needs --moe-router-num-groups"}},
      {moe({"--moe-router-num-groups", "2"}), {"--moe-router-num-groups 2 is read only with --moe-router-group-topk"}},
      {moe({"--moe-pad-expert-input-to-capacity"}),
       {"--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor"}},
      {moe({"--moe-token-drop-policy", "position"}),
       {"--moe-token-drop-policy position is read only with --moe-expert-capacity-factor"}},
      {moe({"--moe-expert-capacity-factor", "0"}), {"--moe-expert-capacity-factor: '0' drops every token"}},
      {moe({"--moe-router-enable-expert-bias"}),
       {"--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid",
        "--moe-router-score-function softmax"}},
      {moe({"--moe-router-topk", "1"}), {"Please use --moe-router-pre-softmax when topk is 1"}},
      {moe({"--tensor-model-parallel-size", "2", "--num-attention-heads", "4"}),
       {"--tensor-model-parallel-size 2 needs --sequence-parallel"}},
      {{"--num-experts", "8", "--tensor-model-parallel-size", "2", "--sequence-parallel", "--seq-length", "32"},
       {"Bias in MoE is only supported when ETP==1", "--disable-bias-linear"}},
      {moe({"--moe-ffn-hidden-size", "33", "--expert-tensor-parallel-size", "2"}),
       {"--moe-ffn-hidden-size 33 is not divisible by --expert-tensor-parallel-size 2"}},
      {moe({"--moe-shared-expert-gate"}), {"--moe-shared-expert-gate", "--moe-shared-expert-intermediate-size"}},
      {moe({"--moe-router-dtype", "fp64"}), {"--moe-router-dtype: 'fp64' is not supported", "fp32"}},
      {moe({"--moe-token-dispatcher-type", "flex"}), {"--moe-token-dispatcher-type: 'flex' is not one of"}},
      {moe({"--moe-router-load-balancing-type", "sinkhorn"}), {"--moe-router-load-balancing-type: 'sinkhorn'"}},
      {moe({"--moe-layer-recompute", "--recompute-granularity", "full"}),
       {"Do not set --moe-layer-recompute with full recompute granularity"}},
      {moe({"--recompute-modules", "moe"}),
       {"--recompute-modules moe is read only with --recompute-granularity selective"}},
      {moe({"--recompute-granularity", "selective", "--recompute-modules", "core_attn", "mlp"}),
       {"--recompute-modules: 'core_attn mlp' names 'mlp'"}},
      {{"--recompute-granularity", "selective", "--recompute-modules", "moe"},
       {"--recompute-modules moe needs --num-experts"}},
  };
  for (const auto& [args, mentions] : cases) {
    std::string line;
    for (const std::string& a : args) line += a + " ";
    INFO(line);
    const std::string message = parse_error(args);
    INFO(message);
    CHECK(!message.empty());
    for (const std::string& m : mentions) CHECK_THAT(message, Catch::Contains(m));
  }
  // Megatron accepts sigmoid with --moe-router-pre-softmax (DeepSeek's and Kimi's scripts): no effect.
  CHECK_NOTHROW(ptdp::parse_train_args(moe({"--moe-router-score-function", "sigmoid", "--moe-router-pre-softmax"})));
  // With the sequence parallelism it needs, MoE at t = 2 is accepted (the core's check of the
  // model sees the layout's sequence parallelism too).
  CHECK_NOTHROW(ptdp::parse_train_args(
      moe({"--tensor-model-parallel-size", "2", "--num-attention-heads", "4", "--sequence-parallel"})));
}

TEST_CASE("train args moe: --recompute-modules and --moe-layer-recompute as Megatron resolves them", "[args][moe]") {
  const auto model = [](std::vector<std::string> more) {
    return ptdp::to_gpt_config(ptdp::parse_train_args(moe(std::move(more))));
  };
  // --moe-layer-recompute: selective granularity with core_attn (the default module) and moe.
  const ptdp::GptConfig a = model({"--moe-layer-recompute"});
  CHECK(a.recompute == ptdp::Recompute::Selective);
  CHECK(a.moe.recompute);
  const ptdp::GptConfig b = model({"--recompute-granularity", "selective", "--recompute-modules", "moe"});
  CHECK(b.recompute == ptdp::Recompute::None);
  CHECK(b.moe.recompute);
  const ptdp::GptConfig c = model({"--recompute-granularity", "selective", "--recompute-modules", "core_attn", "moe"});
  CHECK(c.recompute == ptdp::Recompute::Selective);
  CHECK(c.moe.recompute);
  const ptdp::GptConfig d = model({"--recompute-granularity", "selective"});
  CHECK(d.recompute == ptdp::Recompute::Selective);
  CHECK_FALSE(d.moe.recompute);
  // The list reads back as Megatron's list in the JSON of the flags.
  const TrainArgs e =
      ptdp::parse_train_args(moe({"--recompute-granularity", "selective", "--recompute-modules", "core_attn", "moe"}));
  CHECK(ptdp::train_args_to_json(e)["recompute-modules"] == nlohmann::json({"core_attn", "moe"}));
}

TEST_CASE("train args moe: the MoE presets fill the flags and read back as the preset", "[args][moe]") {
  for (const char* name : {"mixtral-8x7b", "mixtral-8x22b", "qwen3-30b-a3b", "qwen3-235b-a22b", "olmoe-1b-7b",
                           "qwen2-57b-a14b"}) {
    INFO(name);
    const TrainArgs a = ptdp::parse_train_args({"--model-preset", name});
    const ptdp::GptConfig from_flags = ptdp::to_gpt_config(a);
    const ptdp::GptConfig preset = ptdp::find_model_preset(name)->config;
    CHECK(from_flags.parameter_count(1) == preset.parameter_count(1));
    CHECK(from_flags.active_parameter_count(1) == preset.active_parameter_count(1));
    CHECK(from_flags.moe.num_experts == preset.moe.num_experts);
    CHECK(from_flags.moe.router_topk == preset.moe.router_topk);
    CHECK(from_flags.moe.pre_softmax == preset.moe.pre_softmax);
    CHECK(from_flags.moe.aux_loss_coeff == preset.moe.aux_loss_coeff);
    CHECK(from_flags.moe_ffn() == preset.moe_ffn());
  }
  // The flags after the preset override it.
  const TrainArgs a =
      ptdp::parse_train_args({"--model-preset", "olmoe-1b-7b", "--num-experts", "16", "--num-layers", "2"});
  CHECK(ptdp::to_gpt_config(a).moe.num_experts == 16);
  CHECK(ptdp::to_gpt_config(a).moe.router_topk == 8);
}

TEST_CASE("train args moe: the JSON of the flags round-trips the MoE flags", "[args][moe]") {
  const TrainArgs a = ptdp::parse_train_args(moe({"--moe-layer-freq", "([1]+[0])*2", "--moe-expert-capacity-factor",
                                                  "1.25", "--expert-model-parallel-size", "2"}));
  const nlohmann::json j = ptdp::train_args_to_json(a);
  CHECK(j["num-experts"] == 8);
  CHECK(j["moe-layer-freq"] == "([1]+[0])*2");
  CHECK(j["moe-expert-capacity-factor"] == 1.25);
  CHECK(j["expert-model-parallel-size"] == 2);
  CHECK(j["expert-tensor-parallel-size"].is_null());
  // The values of the JSON, given back as flags, parse to the same flags.
  std::vector<std::string> again;
  for (const char* flag : {"num-layers", "num-experts", "moe-layer-freq", "moe-expert-capacity-factor",
                           "expert-model-parallel-size"}) {
    again.push_back(std::string("--") + flag);
    again.push_back(j[flag].is_string() ? j[flag].get<std::string>() : j[flag].dump());
  }
  again.push_back("--disable-bias-linear");
  CHECK(ptdp::train_args_to_json(ptdp::parse_train_args(again)) == j);
}

TEST_CASE("train args moe: DeepSeek's group scores and device-limited routing", "[args][moe][deepseek]") {
  // --moe-router-group-score-topk: k = 3 need not be a multiple of the 2 groups kept.
  const ptdp::GptConfig v2 = ptdp::to_gpt_config(ptdp::parse_train_args(
      moe({"--moe-router-topk", "3", "--moe-router-num-groups", "4", "--moe-router-group-topk", "2",
           "--moe-router-group-score-topk", "1"})));
  CHECK(v2.moe.group_score_topk == 1);
  CHECK(v2.moe.group_topk == 2);
  CHECK(v2.moe.topk_limited_devices == 0);
  // --moe-router-topk-limited-devices M: group_topk M over the groups of e ranks (Megatron's
  // default), or over --moe-router-num-groups, the same model at every e dividing it.
  const ptdp::GptConfig at_e = ptdp::to_gpt_config(ptdp::parse_train_args(
      moe({"--moe-router-topk-limited-devices", "2", "--expert-model-parallel-size", "4"})));
  CHECK(at_e.moe.topk_limited_devices == 2);
  CHECK(at_e.moe.group_topk == 2);
  CHECK(at_e.moe.num_groups == 4);
  const ptdp::GptConfig s = ptdp::to_gpt_config(
      ptdp::parse_train_args(moe({"--moe-router-topk-limited-devices", "2", "--moe-router-num-groups", "4"})));
  CHECK(s.moe.num_groups == 4);
  CHECK(s.moe.group_topk == 2);
  CHECK(s.moe.topk_limited_devices == 2);

  const std::pair<std::vector<std::string>, std::vector<std::string>> cases[] = {
      {moe({"--moe-router-topk-limited-devices", "2", "--moe-router-num-groups", "4", "--moe-router-group-topk", "2"}),
       {"--moe-router-topk-limited-devices 2 is deprecated and replaced by --moe-router-group-topk"}},
      // The serial run of an e = 4 model must name its groups.
      {moe({"--moe-router-topk-limited-devices", "2"}),
       {"--moe-router-topk-limited-devices 2 is larger than its groups, 1 (--expert-model-parallel-size",
        "give --moe-router-num-groups"}},
      {moe({"--moe-router-topk-limited-devices", "1", "--moe-router-num-groups", "2", "--expert-model-parallel-size",
            "4"}),
       {"--expert-model-parallel-size 4 does not divide --moe-router-num-groups 2",
        "a token could reach more ranks than the limit"}},
      {moe({"--moe-router-group-score-topk", "2"}),
       {"--moe-router-group-score-topk 2 scores the groups of group-limited routing"}},
  };
  for (const auto& [args, mentions] : cases) {
    const std::string message = parse_error(args);
    INFO(message);
    for (const std::string& m : mentions) CHECK_THAT(message, Catch::Contains(m));
  }
}
