// Every number a user gives is checked for overflow before a shape, a parameter count or a byte
// count is derived from it: through ptdp-train's flags (ptdp_train_config_parse), ptdp-plan's
// flags (ptdp_plan_parse_args), the GPT options (ptdp_model_create, ptdp_gpt_flops) and the
// planner's options. Each overflow is refused with the flag or field and its value named, and
// nothing is created.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "ptdp/ptdp.h"
#include "tests/single_process.h"

namespace {

struct FlagCase {
  std::vector<std::string> flags;
  std::vector<std::string> mentions;
};

// The overflowing values of every size ptdp-train multiplies, and one value outside int32.
const std::vector<FlagCase> kTrainCases = {
    // The example: 4 h wrapped into a negative MLP width.
    {{"--hidden-size", "1000000000", "--num-attention-heads", "1"}, {"--hidden-size", "1000000000", "MLP width"}},
    // SwiGLU's int(8 h / 3 / 64) * 64.
    {{"--hidden-size", "1000000000", "--num-attention-heads", "1", "--swiglu"}, {"--hidden-size", "1000000000"}},
    // The attention width a * dh with an explicit head dim.
    {{"--kv-channels", "2000000000", "--num-attention-heads", "4"}, {"--kv-channels", "2000000000"}},
    // (a + 2 g) * dh, the rows of linear_qkv, with many query groups.
    {{"--hidden-size", "1073741824", "--num-attention-heads", "1073741824", "--group-query-attention",
      "--num-query-groups", "1073741824", "--ffn-hidden-size", "8"},
     {"--num-query-groups", "1073741824"}},
    // An explicit MLP width whose activations s * h * ffn overflow.
    {{"--hidden-size", "1048576", "--num-attention-heads", "1", "--seq-length", "1073741824", "--max-position-embeddings",
      "1073741824"},
     {"--seq-length", "1073741824"}},
    {{"--ffn-hidden-size", "2000000000", "--seq-length", "2000000000", "--max-position-embeddings", "2000000000",
      "--hidden-size", "1048576", "--num-attention-heads", "1"},
     {"--ffn-hidden-size", "2000000000"}},
    // The attention scores s * s * a.
    {{"--seq-length", "2147483647", "--max-position-embeddings", "2147483647"}, {"--seq-length", "2147483647"}},
    // A microbatch's logits b * s * V.
    {{"--micro-batch-size", "1073741824", "--seq-length", "1024", "--vocab-size", "2000000000"},
     {"--micro-batch-size", "1073741824"}},
    // The tokens of the whole run.
    {{"--train-iters", "9000000000000000000", "--global-batch-size", "1024", "--micro-batch-size", "1"},
     {"--train-iters", "9000000000000000000"}},
    // The parameter count of very many wide layers.
    {{"--num-layers", "2000000000", "--hidden-size", "65536", "--num-attention-heads", "512"},
     {"--num-layers", "2000000000"}},
    // Values that do not fit the flag's integer type at all.
    {{"--hidden-size", "99999999999"}, {"--hidden-size", "99999999999"}},
    {{"--num-layers", "4294967297"}, {"--num-layers", "4294967297"}},
    {{"--micro-batch-size", "-2147483649"}, {"--micro-batch-size", "-2147483649"}},
};

}  // namespace

TEST_CASE("overflow: ptdp-train's flags whose derived sizes overflow are refused naming the flag and value",
          "[capi][args][overflow]") {
  for (const FlagCase& c : kTrainCases) {
    std::vector<const char*> argv = {"ptdp-train"};
    std::string line;
    for (const std::string& f : c.flags) {
      argv.push_back(f.c_str());
      line += " " + f;
    }
    INFO("ptdp-train" << line);
    ptdp_train_config config = reinterpret_cast<ptdp_train_config>(0x5e47);
    const ptdp_status st = ptdp_train_config_parse(static_cast<int32_t>(argv.size()), argv.data(), &config);
    const std::string msg = ptdp_last_error();
    INFO(msg);
    CHECK(st == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(config == reinterpret_cast<ptdp_train_config>(0x5e47));
    CHECK(msg.find("ptdp_train_config_parse: ") == 0);
    for (const std::string& m : c.mentions) CHECK(msg.find(m) != std::string::npos);
    CHECK(msg.find("-294967296") == std::string::npos);  // no wrapped value is shown
  }
}

TEST_CASE("overflow: ptdp-train itself refuses the issue's example before building anything", "[capi][args][overflow]") {
  const char* argv[] = {"ptdp-train", "--hidden-size", "1000000000", "--num-attention-heads", "1", "--mock-data",
                        "--train-iters", "1"};
  int32_t code = -1;
  REQUIRE(ptdp_train_main(8, argv, &code) == PTDP_SUCCESS);
  CHECK(code == 2);  // a usage error, as for any bad flag
}

TEST_CASE("overflow: ptdp-plan's flags whose derived sizes overflow are refused naming the flag", "[capi][plan][overflow]") {
  const std::vector<FlagCase> cases = {
      {{"--hidden-size", "1000000000", "--num-attention-heads", "1"}, {"--hidden-size", "1000000000"}},
      {{"--kv-channels", "2000000000", "--num-attention-heads", "4"}, {"--kv-channels", "2000000000"}},
      {{"--seq-length", "2147483647", "--max-position-embeddings", "2147483647"}, {"--seq-length", "2147483647"}},
      {{"--hidden-size", "99999999999"}, {"--hidden-size", "99999999999"}},
  };
  for (const FlagCase& c : cases) {
    std::vector<const char*> argv = {"ptdp-plan", "--global-batch-size", "8"};
    for (const std::string& f : c.flags) argv.push_back(f.c_str());
    ptdp_plan_options o;
    ptdp_cluster cluster;
    ptdp_plan_cli cli;
    cli.struct_size = sizeof cli;
    REQUIRE(ptdp_plan_options_init(&o) == PTDP_SUCCESS);
    REQUIRE(ptdp_cluster_init(&cluster) == PTDP_SUCCESS);
    const ptdp_status st = ptdp_plan_parse_args(static_cast<int32_t>(argv.size()), argv.data(), &o, &cluster, &cli);
    const std::string msg = ptdp_last_error();
    INFO(msg);
    CHECK(st == PTDP_ERR_INVALID_ARGUMENT);
    for (const std::string& m : c.mentions) CHECK(msg.find(m) != std::string::npos);
  }
}

namespace {

struct FieldCase {
  const char* what;
  void (*edit)(ptdp_gpt_options&);
  std::vector<std::string> mentions;
};

const std::vector<FieldCase> kGptCases = {
    {"4 h", [](ptdp_gpt_options& o) {
       o.hidden_size = 1000000000;
       o.num_attention_heads = 1;
     }, {"hidden_size", "1000000000"}},
    {"SwiGLU width", [](ptdp_gpt_options& o) {
       o.hidden_size = 1000000000;
       o.num_attention_heads = 1;
       o.swiglu = 1;
     }, {"hidden_size", "1000000000"}},
    {"a * kv_channels", [](ptdp_gpt_options& o) { o.kv_channels = 2000000000; }, {"kv_channels", "2000000000"}},
    {"(a + 2 g) dh", [](ptdp_gpt_options& o) {
       o.hidden_size = 1073741824;
       o.num_attention_heads = 1073741824;
       o.num_query_groups = 1073741824;
       o.ffn_hidden_size = 8;
     }, {"num_query_groups", "1073741824"}},
    {"s * h * ffn", [](ptdp_gpt_options& o) {
       o.hidden_size = 1048576;
       o.num_attention_heads = 1;
       o.seq_length = 1073741824;
       o.max_position_embeddings = 1073741824;
     }, {"seq_length", "1073741824"}},
    {"explicit ffn", [](ptdp_gpt_options& o) {
       o.hidden_size = 1048576;
       o.num_attention_heads = 1;
       o.ffn_hidden_size = 2000000000;
       o.seq_length = 2000000000;
       o.max_position_embeddings = 2000000000;
     }, {"ffn_hidden_size", "2000000000"}},
    {"s * s * a", [](ptdp_gpt_options& o) {
       o.seq_length = 2147483647;
       o.max_position_embeddings = 2147483647;
     }, {"seq_length", "2147483647"}},
    {"parameter count", [](ptdp_gpt_options& o) {
       o.num_layers = 2000000000;
       o.hidden_size = 65536;
       o.num_attention_heads = 512;
     }, {"num_layers", "2000000000"}},
};

}  // namespace

TEST_CASE("overflow: GPT options whose derived sizes overflow are refused by ptdp_model_create and ptdp_gpt_flops",
          "[capi][model][overflow]") {
  sp::World w;
  for (const FieldCase& c : kGptCases) {
    INFO(c.what);
    ptdp_gpt_options o;
    REQUIRE(ptdp_gpt_options_init(&o) == PTDP_SUCCESS);
    c.edit(o);
    ptdp_model m = reinterpret_cast<ptdp_model>(0x5e47);
    CHECK(ptdp_model_create(w.groups, &o, &m) == PTDP_ERR_INVALID_ARGUMENT);
    std::string msg = ptdp_last_error();
    INFO(msg);
    CHECK(m == reinterpret_cast<ptdp_model>(0x5e47));
    for (const std::string& s : c.mentions) CHECK(msg.find(s) != std::string::npos);
    double flops = -1;
    CHECK(ptdp_gpt_flops(&o, 8, &flops, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
    msg = ptdp_last_error();
    CHECK(flops == -1);
    for (const std::string& s : c.mentions) CHECK(msg.find(s) != std::string::npos);
  }
}

TEST_CASE("overflow: planner options whose derived sizes overflow are refused", "[capi][plan][overflow]") {
  ptdp_plan_options o;
  REQUIRE(ptdp_plan_options_init(&o) == PTDP_SUCCESS);
  o.hidden_size = 1000000000;
  o.num_attention_heads = 1;
  o.global_batch_size = 8;
  o.num_gpus = 8;
  ptdp_cluster cluster;
  REQUIRE(ptdp_cluster_init(&cluster) == PTDP_SUCCESS);
  ptdp_plan plan = nullptr;
  CHECK(ptdp_plan_create(&o, &cluster, &plan) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(plan == nullptr);
  CHECK(std::string(ptdp_last_error()).find("hidden_size") != std::string::npos);
  double formula = -1;
  int64_t exact = -1;
  CHECK(ptdp_plan_parameters(&o, 1, &formula, &exact) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(exact == -1);
  CHECK(std::string(ptdp_last_error()).find("1000000000") != std::string::npos);
}
