// Mixture of experts through the public C API only: the MoE fields of ptdp_gpt_options (zero
// by default, meaning a dense model), a tiny MoE model built and its options read back, Megatron's
// refusals with messages that name the fields and flags, the MoE presets, the expert sizes of
// ptdp_parallel_options and the five expert group kinds of a layout; the MoE figures of an
// iteration (ptdp_model_moe_metrics) and the expert bias of aux-loss-free balancing.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "ptdp/ptdp.h"
#include "tests/single_process.h"

namespace {

std::string err() { return ptdp_last_error(); }

// A tiny Mixtral-shaped model: 2 layers, h 16, 4 experts of width 24, top-2 routing, SwiGLU,
// RMSNorm, RoPE, no bias, untied, no dropout.
ptdp_gpt_options tiny_moe() {
  ptdp_gpt_options o;
  REQUIRE(ptdp_gpt_options_init(&o) == PTDP_SUCCESS);
  o.num_layers = 2;
  o.hidden_size = 16;
  o.num_attention_heads = 2;
  o.ffn_hidden_size = 32;
  o.vocab_size = 64;
  o.make_vocab_size_divisible_by = 32;
  o.seq_length = 8;
  o.hidden_dropout = 0.0f;
  o.attention_dropout = 0.0f;
  o.normalization = PTDP_NORMALIZATION_RMSNORM;
  o.swiglu = 1;
  o.position_embedding_type = PTDP_POSITION_EMBEDDING_ROPE;
  o.disable_bias_linear = 1;
  o.untie_embeddings_and_output_weights = 1;
  o.num_experts = 4;
  o.moe_router_topk = 2;
  o.moe_ffn_hidden_size = 24;
  o.moe_aux_loss_coeff = 0.01f;
  return o;
}

// The refusal of ptdp_model_create for `o`: INVALID_ARGUMENT, its message, and no model made.
std::string refusal(ptdp_groups groups, const ptdp_gpt_options& o) {
  ptdp_model m = nullptr;
  CHECK(ptdp_model_create(groups, &o, &m) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(m == nullptr);
  return err();
}

std::vector<std::string> param_names(ptdp_model m) {
  int32_t n = 0;
  REQUIRE(ptdp_model_num_params(m, &n) == PTDP_SUCCESS);
  std::vector<std::string> names;
  char buffer[256];
  for (int32_t i = 0; i < n; ++i) {
    REQUIRE(ptdp_model_param_info(m, i, buffer, sizeof buffer, nullptr, nullptr, nullptr) == PTDP_SUCCESS);
    names.emplace_back(buffer);
  }
  return names;
}

}  // namespace

TEST_CASE("moe options: init leaves every MoE field zero, a dense model", "[capi][moe]") {
  ptdp_gpt_options o;
  std::memset(static_cast<void*>(&o), 0x5a, sizeof o);
  REQUIRE(ptdp_gpt_options_init(&o) == PTDP_SUCCESS);
  CHECK(o.moe_layer_freq == nullptr);
  CHECK(o.num_experts == 0);
  CHECK(o.moe_router_topk == 0);
  CHECK(o.moe_ffn_hidden_size == 0);
  CHECK(o.moe_shared_expert_intermediate_size == 0);
  CHECK(o.moe_router_score_function == PTDP_MOE_SCORE_SOFTMAX);
  CHECK(o.moe_router_bias_update_rate == 0.0f);
  CHECK(o.moe_router_load_balancing_type == PTDP_MOE_BALANCING_AUX_LOSS);
  CHECK(o.moe_expert_capacity_factor == 0.0f);
  CHECK(o.moe_token_dispatcher_type == PTDP_MOE_DISPATCHER_ALLTOALL);
  CHECK(o.moe_layer_recompute == 0);
  ptdp_parallel_options p;
  std::memset(static_cast<void*>(&p), 0x5a, sizeof p);
  REQUIRE(ptdp_parallel_options_init(&p) == PTDP_SUCCESS);
  CHECK(p.expert_model_parallel_size == 0);
  CHECK(p.expert_tensor_parallel_size == 0);
}

TEST_CASE("moe options: a tiny MoE model is built with Megatron-Core's parameters", "[capi][moe][moe_layer]") {
  sp::World w;
  ptdp_gpt_options o = tiny_moe();
  o.moe_layer_freq = "[1,0]";  // layer 0 MoE, layer 1 dense
  o.moe_shared_expert_intermediate_size = 16;
  o.moe_shared_expert_gate = 1;
  ptdp_model m = nullptr;
  REQUIRE(ptdp_model_create(w.groups, &o, &m) == PTDP_SUCCESS);
  const std::vector<std::string> names = param_names(m);
  const auto has = [&names](const std::string& n) {
    for (const std::string& x : names) {
      if (x == n) return true;
    }
    return false;
  };
  CHECK(has("decoder.layers.0.mlp.router.weight"));
  CHECK(has("decoder.layers.0.mlp.experts.linear_fc1.weight0"));
  CHECK(has("decoder.layers.0.mlp.experts.linear_fc2.weight3"));
  CHECK(has("decoder.layers.0.mlp.shared_experts.linear_fc1.weight"));
  CHECK(has("decoder.layers.0.mlp.shared_experts.gate_weight"));
  CHECK_FALSE(has("decoder.layers.0.mlp.linear_fc1.weight"));
  CHECK(has("decoder.layers.1.mlp.linear_fc1.weight"));  // the dense layer of the pattern
  CHECK_FALSE(has("decoder.layers.1.mlp.router.weight"));

  // The options read back, every default resolved; the pattern in its shortest spelling.
  ptdp_gpt_options back;
  REQUIRE(ptdp_gpt_options_init(&back) == PTDP_SUCCESS);
  REQUIRE(ptdp_model_get_options(m, &back) == PTDP_SUCCESS);
  CHECK(back.num_experts == 4);
  CHECK(back.moe_router_topk == 2);
  CHECK(back.moe_ffn_hidden_size == 24);
  CHECK(back.moe_shared_expert_intermediate_size == 16);
  CHECK(back.moe_shared_expert_gate == 1);
  CHECK(back.moe_aux_loss_coeff == 0.01f);
  CHECK(back.moe_router_bias_update_rate == 1e-3f);
  REQUIRE(back.moe_layer_freq != nullptr);
  CHECK(std::string(back.moe_layer_freq) == "2");  // [1,0] over 2 layers: every 2nd layer
  CHECK(ptdp_model_destroy(m) == PTDP_SUCCESS);
}

TEST_CASE("moe options: a layer pattern and the defaults come back through a model", "[capi][moe]") {
  sp::World w;
  ptdp_gpt_options o = tiny_moe();
  o.num_layers = 3;
  o.moe_layer_freq = "([1]+[0])*1+[1]";
  o.moe_router_score_function = PTDP_MOE_SCORE_SIGMOID;
  o.moe_router_enable_expert_bias = 1;
  o.moe_router_topk = 0;  // Megatron's default, 2
  o.moe_expert_capacity_factor = 1.25f;
  o.moe_token_drop_policy = PTDP_MOE_DROP_POSITION;
  o.moe_token_dispatcher_type = PTDP_MOE_DISPATCHER_ALLGATHER;
  ptdp_model m = nullptr;
  REQUIRE(ptdp_model_create(w.groups, &o, &m) == PTDP_SUCCESS);
  ptdp_gpt_options back;
  REQUIRE(ptdp_gpt_options_init(&back) == PTDP_SUCCESS);
  REQUIRE(ptdp_model_get_options(m, &back) == PTDP_SUCCESS);
  REQUIRE(back.moe_layer_freq != nullptr);
  CHECK(std::string(back.moe_layer_freq) == "2");  // 1, 0, 1
  CHECK(back.moe_router_topk == 2);
  CHECK(back.moe_router_score_function == PTDP_MOE_SCORE_SIGMOID);
  CHECK(back.moe_router_enable_expert_bias == 1);
  CHECK(back.moe_expert_capacity_factor == 1.25f);
  CHECK(back.moe_token_drop_policy == PTDP_MOE_DROP_POSITION);
  CHECK(back.moe_token_dispatcher_type == PTDP_MOE_DISPATCHER_ALLGATHER);
  // A struct of 0.3.0's size cannot hold an MoE model: refused, naming the first field it lacks.
  ptdp_gpt_options old;
  REQUIRE(ptdp_gpt_options_init(&old) == PTDP_SUCCESS);
  old.struct_size = offsetof(ptdp_gpt_options, moe_layer_freq);
  CHECK(ptdp_model_get_options(m, &old) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("ptdp_gpt_options::moe_layer_freq"));
  CHECK(ptdp_model_destroy(m) == PTDP_SUCCESS);
}

TEST_CASE("moe options: Megatron's refusals name the fields and flags", "[capi][moe]") {
  sp::World w;
  struct Case {
    const char* what;
    void (*edit)(ptdp_gpt_options&);
    std::vector<std::string> mentions;
  };
  const Case cases[] = {
      {"k > E", [](ptdp_gpt_options& o) { o.moe_router_topk = 5; },
       {"moe_router_topk (--moe-router-topk) 5", "larger than num_experts (--num-experts) 4"}},
      {"k = 1 without pre-softmax", [](ptdp_gpt_options& o) { o.moe_router_topk = 1; },
       {"moe_router_pre_softmax (--moe-router-pre-softmax)"}},
      {"groups not dividing E", [](ptdp_gpt_options& o) {
         o.moe_router_num_groups = 3;
         o.moe_router_group_topk = 1;
       },
       {"num_experts (--num-experts) 4 is not divisible by moe_router_num_groups (--moe-router-num-groups) 3"}},
      {"group topk above the groups", [](ptdp_gpt_options& o) {
         o.moe_router_num_groups = 2;
         o.moe_router_group_topk = 4;
         o.moe_router_topk = 4;
       },
       {"moe_router_group_topk (--moe-router-group-topk) 4 is larger than moe_router_num_groups"}},
      {"k not divisible by group topk", [](ptdp_gpt_options& o) {
         o.moe_router_num_groups = 4;
         o.moe_router_group_topk = 2;
         o.moe_router_topk = 3;
       },
       {"moe_router_topk (--moe-router-topk) 3 is not divisible by moe_router_group_topk"}},
      {"group topk without groups", [](ptdp_gpt_options& o) { o.moe_router_group_topk = 2; },
       {"needs moe_router_num_groups (--moe-router-num-groups)"}},
      {"expert bias with softmax", [](ptdp_gpt_options& o) { o.moe_router_enable_expert_bias = 1; },
       {"moe_router_enable_expert_bias (--moe-router-enable-expert-bias)", "sigmoid"}},
      {"padding without a capacity", [](ptdp_gpt_options& o) { o.moe_pad_expert_input_to_capacity = 1; },
       {"moe_pad_expert_input_to_capacity", "moe_expert_capacity_factor (--moe-expert-capacity-factor)"}},
      {"a gate without a shared expert", [](ptdp_gpt_options& o) { o.moe_shared_expert_gate = 1; },
       {"moe_shared_expert_gate (--moe-shared-expert-gate)"}},
      {"pattern of the wrong length", [](ptdp_gpt_options& o) { o.moe_layer_freq = "[1,0,1]"; },
       {"moe_layer_freq (--moe-layer-freq) gives a pattern of 3 layers", "num_layers (--num-layers) is 2"}},
      {"pattern entry 2", [](ptdp_gpt_options& o) { o.moe_layer_freq = "[1,2]"; },
       {"options->moe_layer_freq", "gives layer 1 the entry 2"}},
      {"pattern with a name", [](ptdp_gpt_options& o) { o.moe_layer_freq = "[1]*len([1])"; },
       {"options->moe_layer_freq", "has 'l'"}},
      {"layer recompute with full recomputation", [](ptdp_gpt_options& o) {
         o.moe_layer_recompute = 1;
         o.recompute_granularity = PTDP_RECOMPUTE_FULL;
       },
       {"moe_layer_recompute", "--recompute-granularity full"}},
      {"negative top-k", [](ptdp_gpt_options& o) { o.moe_router_topk = -1; }, {"options->moe_router_topk = -1"}},
      {"NaN z-loss", [](ptdp_gpt_options& o) { o.moe_z_loss_coeff = std::nanf(""); }, {"options->moe_z_loss_coeff"}},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    ptdp_gpt_options o = tiny_moe();
    c.edit(o);
    const std::string message = refusal(w.groups, o);
    INFO(message);
    for (const std::string& m : c.mentions) CHECK_THAT(message, Catch::Contains(m));
  }
}

TEST_CASE("moe options: the MoE presets fill the MoE fields", "[capi][moe]") {
  ptdp_gpt_options o;
  REQUIRE(ptdp_gpt_options_init(&o) == PTDP_SUCCESS);
  REQUIRE(ptdp_gpt_options_from_preset("Mixtral-8x7B", &o) == PTDP_SUCCESS);
  CHECK(o.num_experts == 8);
  CHECK(o.moe_router_topk == 2);
  CHECK(o.moe_ffn_hidden_size == 14336);
  CHECK(o.moe_layer_freq == nullptr);  // every layer
  REQUIRE(ptdp_gpt_options_init(&o) == PTDP_SUCCESS);
  REQUIRE(ptdp_gpt_options_from_preset("qwen2-57b-a14b", &o) == PTDP_SUCCESS);
  CHECK(o.num_experts == 64);
  CHECK(o.moe_router_topk == 8);
  CHECK(o.moe_router_pre_softmax == 1);
  CHECK(o.moe_shared_expert_intermediate_size == 20480);
  CHECK(o.moe_shared_expert_gate == 1);
  // A program built against 0.3.0's header cannot receive an MoE preset.
  REQUIRE(ptdp_gpt_options_init(&o) == PTDP_SUCCESS);
  o.struct_size = offsetof(ptdp_gpt_options, moe_layer_freq);
  CHECK(ptdp_gpt_options_from_preset("olmoe-1b-7b", &o) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("ptdp_gpt_options::num_experts"));
}

TEST_CASE("moe options: the expert group kinds follow Megatron-Core's parallel folding", "[capi][moe][layout]") {
  // t = 2, d = 4 on 8 ranks of one stage; e = 4, etp = 1: edp = 2. Local rank r: etp_rank = r % 1,
  // ep_rank = r % 4, edp_rank = r / 4.
  ptdp_parallel_options p;
  REQUIRE(ptdp_parallel_options_init(&p) == PTDP_SUCCESS);
  p.tensor_model_parallel_size = 2;
  p.expert_model_parallel_size = 4;
  p.expert_tensor_parallel_size = 1;
  const auto members = [&p](int32_t rank, ptdp_group_kind kind) {
    int32_t out[16];
    int32_t n = 0;
    REQUIRE(ptdp_layout_members(&p, 8, rank, kind, out, 16, &n) == PTDP_SUCCESS);
    return std::vector<int32_t>(out, out + n);
  };
  CHECK(members(5, PTDP_GROUP_EXPERT_MODEL) == std::vector<int32_t>{4, 5, 6, 7});
  CHECK(members(5, PTDP_GROUP_EXPERT_DATA) == std::vector<int32_t>{1, 5});
  CHECK(members(5, PTDP_GROUP_EXPERT_TENSOR) == std::vector<int32_t>{5});
  CHECK(members(5, PTDP_GROUP_EXPERT_TENSOR_AND_MODEL) == std::vector<int32_t>{4, 5, 6, 7});
  CHECK(members(5, PTDP_GROUP_TENSOR_CONTEXT) == std::vector<int32_t>{4, 5});
  // etp = 0 means t: the expert-tensor group is the tensor group, e = 2 over the rest.
  p.expert_model_parallel_size = 2;
  p.expert_tensor_parallel_size = 0;
  CHECK(members(5, PTDP_GROUP_EXPERT_TENSOR) == std::vector<int32_t>{4, 5});
  CHECK(members(5, PTDP_GROUP_EXPERT_MODEL) == std::vector<int32_t>{5, 7});
  CHECK(members(5, PTDP_GROUP_EXPERT_DATA) == std::vector<int32_t>{1, 5});
  // e * etp must divide the t * c * d ranks of a stage; negative sizes are refused by name.
  p.expert_model_parallel_size = 3;
  int32_t out[16];
  int32_t n = 0;
  CHECK(ptdp_layout_members(&p, 8, 0, PTDP_GROUP_EXPERT_MODEL, out, 16, &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("--expert-model-parallel-size"));
  p.expert_model_parallel_size = -1;
  CHECK(ptdp_layout_members(&p, 8, 0, PTDP_GROUP_EXPERT_MODEL, out, 16, &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("options->expert_model_parallel_size = -1"));
}

TEST_CASE("moe options: ptdp-train's MoE flags reach the C options", "[capi][moe][args]") {
  const char* argv[] = {"ptdp-train",           "--num-experts",          "8",
                        "--moe-router-topk",    "2",                      "--moe-layer-freq",
                        "([1]*1+[0]*1)*2",      "--num-layers",           "4",
                        "--expert-model-parallel-size", "2",              "--expert-tensor-parallel-size",
                        "1",                    "--disable-bias-linear",  "--moe-router-dtype",
                        "fp32"};
  ptdp_train_config c = nullptr;
  REQUIRE(ptdp_train_config_parse(static_cast<int32_t>(std::size(argv)), argv, &c) == PTDP_SUCCESS);
  ptdp_gpt_options o;
  REQUIRE(ptdp_gpt_options_init(&o) == PTDP_SUCCESS);
  REQUIRE(ptdp_train_config_gpt_options(c, &o) == PTDP_SUCCESS);
  CHECK(o.num_experts == 8);
  REQUIRE(o.moe_layer_freq != nullptr);
  CHECK(std::string(o.moe_layer_freq) == "2");
  ptdp_parallel_options p;
  REQUIRE(ptdp_parallel_options_init(&p) == PTDP_SUCCESS);
  REQUIRE(ptdp_train_config_parallel_options(c, &p) == PTDP_SUCCESS);
  CHECK(p.expert_model_parallel_size == 2);
  CHECK(p.expert_tensor_parallel_size == 1);
  ptdp_train_config_destroy(c);
  // E not divisible by e: Megatron's refusal, naming both flags.
  const char* bad[] = {"ptdp-train", "--num-experts", "6", "--expert-model-parallel-size", "4"};
  CHECK(ptdp_train_config_parse(5, bad, &c) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("--num-experts 6 is not a multiple of --expert-model-parallel-size 4"));
}

namespace {

std::vector<float> expert_bias(ptdp_model m, int layer) {
  std::vector<float> v(4);
  const std::string name = "decoder.layers." + std::to_string(layer) + ".mlp.router.expert_bias";
  REQUIRE(ptdp_model_get_param(m, name.c_str(), v.data(), v.size() * sizeof(float)) == PTDP_SUCCESS);
  return v;
}

}  // namespace

TEST_CASE("moe metrics: the losses, the expert loads and the expert bias's steps after each iteration",
          "[capi][moe][moe_metrics]") {
  sp::World w;
  ptdp_gpt_options o = tiny_moe();
  o.moe_router_score_function = PTDP_MOE_SCORE_SIGMOID;
  o.moe_router_enable_expert_bias = 1;
  o.moe_router_bias_update_rate = 0.01f;
  o.moe_z_loss_coeff = 0.001f;
  ptdp_model m = nullptr;
  REQUIRE(ptdp_model_create(w.groups, &o, &m) == PTDP_SUCCESS);

  // Before any iteration: no figures yet.
  ptdp_moe_metrics mm;
  mm.struct_size = sizeof mm;
  REQUIRE(ptdp_model_moe_metrics(m, &mm, nullptr, 0) == PTDP_SUCCESS);
  CHECK(mm.struct_size == sizeof mm);
  CHECK(mm.moe_layers == 0);

  ptdp_optimizer opt = nullptr;
  REQUIRE(ptdp_optimizer_create(m, nullptr, &opt) == PTDP_SUCCESS);
  ptdp_schedule sched = nullptr;
  REQUIRE(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, 2, 1, &sched) == PTDP_SUCCESS);
  constexpr int32_t kB = 2, kMicro = 2, kTokens = kMicro * kB * 8;
  const std::vector<int32_t> tokens = sp::ids(kTokens, o.vocab_size, 5), labels = sp::ids(kTokens, o.vocab_size, 6);
  bool moved_apart = false;
  for (int it = 0; it < 3; ++it) {
    const std::vector<float> before0 = expert_bias(m, 0), before1 = expert_bias(m, 1);
    ptdp_iteration_result res;
    REQUIRE(ptdp_train_iteration(m, opt, sched, tokens.data(), labels.data(), kB, it, nullptr, &res) == PTDP_SUCCESS);
    REQUIRE(ptdp_model_moe_metrics(m, &mm, nullptr, 0) == PTDP_SUCCESS);
    REQUIRE(mm.moe_layers == 2);
    CHECK(mm.exchange_seconds == 0.0);  // one rank: the dispatcher communicates nothing
    CHECK(std::isfinite(mm.load_balancing_loss));
    CHECK(mm.load_balancing_loss > 0.0);
    CHECK(std::isfinite(mm.z_loss));
    CHECK(mm.z_loss > 0.0);
    ptdp_moe_layer_load loads[3] = {};
    REQUIRE(ptdp_model_moe_metrics(m, &mm, loads, 3) == PTDP_SUCCESS);
    for (int l = 0; l < 2; ++l) {
      const ptdp_moe_layer_load& x = loads[l];
      CHECK(x.layer == l);
      // Dropless: the 2 choices of each token, the mean load between the fewest and the most.
      CHECK(x.min_tokens * 4 <= kTokens * 2);
      CHECK(x.max_tokens * 4 >= kTokens * 2);
      // Aux-loss-free balancing: every bias moved by -rate, 0 or +rate; the most loaded expert
      // down, the least loaded up.
      const std::vector<float> before = l == 0 ? before0 : before1, after = expert_bias(m, l);
      bool down = false, up = false;
      for (std::size_t e = 0; e < after.size(); ++e) {
        CHECK((after[e] == before[e] - 0.01f || after[e] == before[e] || after[e] == before[e] + 0.01f));
        down = down || after[e] == before[e] - 0.01f;
        up = up || after[e] == before[e] + 0.01f;
      }
      CHECK(down == (x.max_tokens * 4 > kTokens * 2));
      CHECK(up == (x.min_tokens * 4 < kTokens * 2));
      moved_apart = moved_apart || (down && up);
    }
    CHECK(loads[2].layer == 0);  // past moe_layers: untouched
  }
  CHECK(moved_apart);

  // Refusals: a struct_size too small, a negative capacity, NULL loads with room asked for.
  ptdp_moe_metrics small;
  small.struct_size = 4;
  CHECK(ptdp_model_moe_metrics(m, &small, nullptr, 0) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("struct_size") != std::string::npos);
  CHECK(ptdp_model_moe_metrics(m, &mm, nullptr, -1) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("capacity") != std::string::npos);
  CHECK(ptdp_model_moe_metrics(m, &mm, nullptr, 2) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("loads") != std::string::npos);
  CHECK(ptdp_model_moe_metrics(m, nullptr, nullptr, 0) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_schedule_destroy(sched) == PTDP_SUCCESS);
  CHECK(ptdp_optimizer_destroy(opt) == PTDP_SUCCESS);
  CHECK(ptdp_model_destroy(m) == PTDP_SUCCESS);
}

TEST_CASE("moe metrics: a dense model has none", "[capi][moe][moe_metrics]") {
  sp::World w;
  ptdp_gpt_options o = tiny_moe();
  o.num_experts = 0;
  o.moe_router_topk = 0;
  o.moe_ffn_hidden_size = 0;
  o.moe_aux_loss_coeff = 0.0f;
  ptdp_model m = nullptr;
  REQUIRE(ptdp_model_create(w.groups, &o, &m) == PTDP_SUCCESS);
  ptdp_optimizer opt = nullptr;
  REQUIRE(ptdp_optimizer_create(m, nullptr, &opt) == PTDP_SUCCESS);
  ptdp_schedule sched = nullptr;
  REQUIRE(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, 1, 1, &sched) == PTDP_SUCCESS);
  const std::vector<int32_t> tokens = sp::ids(16, o.vocab_size, 5), labels = sp::ids(16, o.vocab_size, 6);
  REQUIRE(ptdp_train_iteration(m, opt, sched, tokens.data(), labels.data(), 2, 0, nullptr, nullptr) == PTDP_SUCCESS);
  ptdp_moe_metrics mm;
  mm.struct_size = sizeof mm;
  REQUIRE(ptdp_model_moe_metrics(m, &mm, nullptr, 0) == PTDP_SUCCESS);
  CHECK(mm.moe_layers == 0);
  CHECK(std::isnan(mm.load_balancing_loss));
  CHECK(std::isnan(mm.z_loss));
  CHECK(ptdp_schedule_destroy(sched) == PTDP_SUCCESS);
  CHECK(ptdp_optimizer_destroy(opt) == PTDP_SUCCESS);
  CHECK(ptdp_model_destroy(m) == PTDP_SUCCESS);
}

TEST_CASE("moe metrics: global_aux_loss is aux_loss over one microbatch, a running mean over more",
          "[capi][moe][moe_metrics]") {
  sp::World w;
  constexpr int32_t kB = 2, kTokens = 2 * kB * 8;
  const std::vector<int32_t> tokens = sp::ids(kTokens, 64, 7), labels = sp::ids(kTokens, 64, 8);
  // Three iterations of `microbatches` microbatches: each iteration's loss and logged balancing loss.
  const auto train = [&](ptdp_moe_load_balancing balancing, int32_t microbatches) {
    ptdp_gpt_options o = tiny_moe();
    o.moe_router_load_balancing_type = balancing;
    ptdp_model m = nullptr;
    REQUIRE(ptdp_model_create(w.groups, &o, &m) == PTDP_SUCCESS);
    ptdp_optimizer opt = nullptr;
    REQUIRE(ptdp_optimizer_create(m, nullptr, &opt) == PTDP_SUCCESS);
    ptdp_schedule sched = nullptr;
    REQUIRE(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, microbatches, 1, &sched) == PTDP_SUCCESS);
    std::vector<double> out;
    for (int it = 0; it < 3; ++it) {
      ptdp_iteration_result res;
      REQUIRE(ptdp_train_iteration(m, opt, sched, tokens.data(), labels.data(), kB, it, nullptr, &res) ==
              PTDP_SUCCESS);
      ptdp_moe_metrics mm;
      mm.struct_size = sizeof mm;
      REQUIRE(ptdp_model_moe_metrics(m, &mm, nullptr, 0) == PTDP_SUCCESS);
      out.push_back(res.loss);
      out.push_back(mm.load_balancing_loss);
    }
    CHECK(ptdp_schedule_destroy(sched) == PTDP_SUCCESS);
    CHECK(ptdp_optimizer_destroy(opt) == PTDP_SUCCESS);
    CHECK(ptdp_model_destroy(m) == PTDP_SUCCESS);
    return out;
  };
  // One microbatch per step on one replica: the running mean is the microbatch's own counts.
  CHECK(train(PTDP_MOE_BALANCING_GLOBAL_AUX_LOSS, 1) == train(PTDP_MOE_BALANCING_AUX_LOSS, 1));
  // Two: the second microbatch's counts are the mean of both, its loss another value.
  const std::vector<double> global = train(PTDP_MOE_BALANCING_GLOBAL_AUX_LOSS, 2),
                            aux = train(PTDP_MOE_BALANCING_AUX_LOSS, 2);
  CHECK(global[0] == aux[0]);  // the first forward's lm loss: the balancing loss only moves gradients
  CHECK(global[1] > 0.0);
  CHECK(global[1] != aux[1]);
  CHECK(std::abs(global[1] - aux[1]) < 0.2 * aux[1]);
}

TEST_CASE("moe plan: a planned layout names e and etp, the active parameters and the token exchanges",
          "[capi][moe][plan]") {
  ptdp_plan_options o;
  REQUIRE(ptdp_plan_options_init(&o) == PTDP_SUCCESS);
  CHECK(o.qk_layernorm_across_heads == 0);
  o.num_layers = 4;
  o.hidden_size = 512;
  o.num_attention_heads = 8;
  o.ffn_hidden_size = 1024;
  o.seq_length = 1024;
  o.vocab_size = 8192;
  o.num_experts = 8;
  o.moe_router_topk = 2;
  o.disable_bias_linear = 1;
  o.global_batch_size = 64;
  o.num_gpus = 16;
  o.sequence_parallel = 1;
  o.precision = PTDP_DTYPE_BF16;
  ptdp_cluster k;
  REQUIRE(ptdp_cluster_preset("dgx-h100", &k) == PTDP_SUCCESS);
  k.nodes = 2;
  // Pinned e = 4: the layout says so, its experts are a quarter of the routed ones per expert
  // group, and four ranks exchange tokens.
  o.expert_model_parallel_size = 4;
  ptdp_plan plan = nullptr;
  const ptdp_status made = ptdp_plan_create(&o, &k, &plan);
  INFO(err());
  REQUIRE(made == PTDP_SUCCESS);
  ptdp_plan_layout l;
  l.struct_size = sizeof l;
  REQUIRE(ptdp_plan_get_layout(plan, 0, &l) == PTDP_SUCCESS);
  CHECK(l.struct_size == sizeof l);
  CHECK(l.expert_model_parallel_size == 4);
  CHECK((l.expert_tensor_parallel_size == 1 || l.expert_tensor_parallel_size == l.t));
  CHECK(l.parameters_active < l.parameters_exact);
  CHECK(l.expert_parameters_per_gpu > 0);
  CHECK(l.expert_parameters_per_gpu < l.parameters_per_gpu);
  CHECK(l.seconds_moe_exchange > 0.0);
  CHECK(l.seconds_moe_exchange <= l.seconds_tensor_comm);
  CHECK(l.expert_crosses_nodes == 0);  // 4 * etp <= 8 GPUs of a node
  CHECK(ptdp_plan_destroy(plan) == PTDP_SUCCESS);
  // A dense model: e = etp = 1, every parameter active, no exchange.
  o.num_experts = 0;
  o.moe_router_topk = 0;
  o.expert_model_parallel_size = 0;
  REQUIRE(ptdp_plan_create(&o, &k, &plan) == PTDP_SUCCESS);
  REQUIRE(ptdp_plan_get_layout(plan, 0, &l) == PTDP_SUCCESS);
  CHECK(l.expert_model_parallel_size == 1);
  CHECK(l.parameters_active == l.parameters_exact);
  CHECK(l.expert_parameters_per_gpu == 0);
  CHECK(l.seconds_moe_exchange == 0.0);
  CHECK(ptdp_plan_destroy(plan) == PTDP_SUCCESS);
}

TEST_CASE("moe plan: qk_layernorm_across_heads reaches the planned model", "[capi][moe][plan]") {
  ptdp_plan_options o;
  REQUIRE(ptdp_plan_options_init(&o) == PTDP_SUCCESS);
  o.num_layers = 2;
  o.hidden_size = 64;
  o.num_attention_heads = 4;
  o.normalization = PTDP_NORMALIZATION_RMSNORM;
  o.position_embedding_type = PTDP_POSITION_EMBEDDING_ROPE;
  o.qk_layernorm = 1;
  o.global_batch_size = 8;
  int64_t per_head = 0, across = 0;
  REQUIRE(ptdp_plan_parameters(&o, 1, nullptr, &per_head) == PTDP_SUCCESS);
  o.qk_layernorm_across_heads = 1;
  REQUIRE(ptdp_plan_parameters(&o, 1, nullptr, &across) == PTDP_SUCCESS);
  // Per head: q and k norms of dh = 16 each; across the heads: of a * dh = 64 each (MHA), per layer.
  CHECK(across - per_head == 2 * 2 * (64 - 16));
  o.qk_layernorm_across_heads = 2;
  CHECK(ptdp_plan_parameters(&o, 1, nullptr, &across) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("qk_layernorm_across_heads"));
}

TEST_CASE("moe options: DeepSeek routing's group scores and device-limited routing", "[capi][moe][deepseek]") {
  sp::World w;
  // DeepSeek-V3's router on 8 experts: sigmoid, the 2 best of 4 groups (the experts of each rank
  // at e = 4) by their top-2 sums, k = 3, weights scaled by 2.5.
  ptdp_gpt_options o = tiny_moe();
  o.num_experts = 8;
  o.moe_router_topk = 3;
  o.moe_router_score_function = PTDP_MOE_SCORE_SIGMOID;
  o.moe_router_topk_scaling_factor = 2.5f;
  o.moe_router_num_groups = 4;
  o.moe_router_topk_limited_devices = 2;
  o.moe_router_group_score_topk = 2;
  ptdp_model m = nullptr;
  REQUIRE(ptdp_model_create(w.groups, &o, &m) == PTDP_SUCCESS);
  ptdp_gpt_options back;
  REQUIRE(ptdp_gpt_options_init(&back) == PTDP_SUCCESS);
  REQUIRE(ptdp_model_get_options(m, &back) == PTDP_SUCCESS);
  CHECK(back.moe_router_num_groups == 4);
  CHECK(back.moe_router_group_topk == 2);  // the limit is group-limited routing over M groups
  CHECK(back.moe_router_topk_limited_devices == 2);
  CHECK(back.moe_router_group_score_topk == 2);
  // A struct without the new fields cannot describe this model: refused, naming the first one.
  ptdp_gpt_options old;
  REQUIRE(ptdp_gpt_options_init(&old) == PTDP_SUCCESS);
  old.struct_size = offsetof(ptdp_gpt_options, moe_router_group_score_topk);
  CHECK(ptdp_model_get_options(m, &old) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("ptdp_gpt_options::moe_router_group_score_topk"));
  CHECK(ptdp_model_destroy(m) == PTDP_SUCCESS);

  struct Case {
    const char* what;
    void (*edit)(ptdp_gpt_options&);
    std::vector<std::string> mentions;
  };
  const Case cases[] = {
      {"limited devices without groups", [](ptdp_gpt_options& x) { x.moe_router_num_groups = 0; },
       {"options->moe_router_topk_limited_devices = 2 needs moe_router_num_groups (--moe-router-num-groups)"}},
      {"limited devices and another group topk", [](ptdp_gpt_options& x) { x.moe_router_group_topk = 1; },
       {"options->moe_router_group_topk = 1 must be 0 or moe_router_topk_limited_devices = 2"}},
      {"group score above the group", [](ptdp_gpt_options& x) { x.moe_router_group_score_topk = 3; },
       {"moe_router_group_score_topk (--moe-router-group-score-topk) 3 exceeds the 2 experts of a group"}},
      {"group score without groups", [](ptdp_gpt_options& x) {
         x.moe_router_num_groups = 0;
         x.moe_router_topk_limited_devices = 0;
       },
       {"moe_router_group_score_topk (--moe-router-group-score-topk) 2 needs group-limited routing"}},
      {"negative limit", [](ptdp_gpt_options& x) { x.moe_router_topk_limited_devices = -1; },
       {"options->moe_router_topk_limited_devices = -1 must be >= 0"}},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    ptdp_gpt_options x = o;
    c.edit(x);
    const std::string message = refusal(w.groups, x);
    INFO(message);
    for (const std::string& s : c.mentions) CHECK_THAT(message, Catch::Contains(s));
  }

  // ptdp-train's flags: the groups default to e (Megatron's rule) and are recorded; an e that
  // does not divide them is refused.
  const char* argv[] = {"ptdp-train", "--num-experts", "8", "--moe-router-topk", "3",
                        "--moe-router-topk-limited-devices", "2", "--moe-router-group-score-topk", "2",
                        "--expert-model-parallel-size", "4", "--disable-bias-linear"};
  ptdp_train_config tc = nullptr;
  REQUIRE(ptdp_train_config_parse(static_cast<int32_t>(std::size(argv)), argv, &tc) == PTDP_SUCCESS);
  ptdp_gpt_options f;
  REQUIRE(ptdp_gpt_options_init(&f) == PTDP_SUCCESS);
  REQUIRE(ptdp_train_config_gpt_options(tc, &f) == PTDP_SUCCESS);
  CHECK(f.moe_router_num_groups == 4);
  CHECK(f.moe_router_group_topk == 2);
  CHECK(f.moe_router_topk_limited_devices == 2);
  CHECK(f.moe_router_group_score_topk == 2);
  ptdp_train_config_destroy(tc);
  const char* bad[] = {"ptdp-train", "--num-experts", "8", "--moe-router-topk-limited-devices", "2",
                       "--moe-router-num-groups", "4", "--expert-model-parallel-size", "8"};
  CHECK(ptdp_train_config_parse(static_cast<int32_t>(std::size(bad)), bad, &tc) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("--expert-model-parallel-size 8 does not divide --moe-router-num-groups 4"));
}
