// The Hugging Face layout conversions and config mapping of core/checkpoint/hf_checkpoint.h on
// their own, each with values that make a mix-up visible: rows that encode (part, head, row) in
// the q|k|v grouping, [in, out] values in the Conv1D transpose, gate and up rows, padded
// vocabulary rows; config.json <-> GptConfig both ways for every architecture and the
// refusals (transformers 4's and 5's RoPE fields, the MoE classes' expert and routing fields);
// the expert tensors as on the hub; Hugging Face's shard split; the directory reader's refusals.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/checkpoint/hf_checkpoint.h"
#include "core/checkpoint/safetensors.h"

namespace {

using namespace ptdp;
using json = nlohmann::json;
namespace fs = std::filesystem;

// value = part * 1000 + head * 100 + row * 10 + col: part 1 q, 2 k, 3 v.
std::vector<float> encoded(int part, int heads, int dh, int cols) {
  std::vector<float> v;
  for (int h = 0; h < heads; ++h)
    for (int r = 0; r < dh; ++r)
      for (int c = 0; c < cols; ++c) v.push_back(static_cast<float>(part * 1000 + h * 100 + r * 10 + c));
  return v;
}

template <typename F>
ErrorCode code_of(F&& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.code();
  }
  return ErrorCode::Internal;
}

json llama_json() {
  return {{"model_type", "llama"},
          {"vocab_size", 100},
          {"hidden_size", 64},
          {"intermediate_size", 96},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 8},
          {"num_key_value_heads", 2},
          {"max_position_embeddings", 128},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 500000.0},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", true},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"head_dim", 8}};
}

json gpt2_json() {
  return {{"model_type", "gpt2"},
          {"vocab_size", 50257},
          {"n_embd", 768},
          {"n_layer", 12},
          {"n_head", 12},
          {"n_positions", 1024},
          {"n_inner", nullptr},
          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", 1e-5},
          {"resid_pdrop", 0.1},
          {"attn_pdrop", 0.1},
          {"initializer_range", 0.02}};
}

}  // namespace

TEST_CASE("q, k and v heads go to their query group's rows in the order Megatron-Core keeps", "[hf]") {
  // a = 4 query heads in g = 2 groups, head dim 3, 2 columns.
  const std::vector<float> q = encoded(1, 4, 3, 2), k = encoded(2, 2, 3, 2), v = encoded(3, 2, 3, 2);
  std::vector<float> out(8 * 3 * 2);
  hf_qkv_to_grouped(q.data(), k.data(), v.data(), 4, 2, 3, 2, out.data());
  // Written out by hand: group 0 holds q0 q1 k0 v0, group 1 q2 q3 k1 v1.
  const int part[8] = {1, 1, 2, 3, 1, 1, 2, 3}, head[8] = {0, 1, 0, 0, 2, 3, 1, 1};
  for (int blk = 0; blk < 8; ++blk)
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 2; ++c)
        CHECK(out[static_cast<std::size_t>((blk * 3 + r) * 2 + c)] == part[blk] * 1000 + head[blk] * 100 + r * 10 + c);
  std::vector<float> q2(q.size()), k2(k.size()), v2(v.size());
  hf_qkv_from_grouped(out.data(), 4, 2, 3, 2, q2.data(), k2.data(), v2.data());
  CHECK(q2 == q);
  CHECK(k2 == k);
  CHECK(v2 == v);

  // Multi-head attention (g = a = 3), as GPT-2's: q0 k0 v0 q1 k1 v1 q2 k2 v2; biases (1 column).
  const std::vector<float> bq = encoded(1, 3, 2, 1), bk = encoded(2, 3, 2, 1), bv = encoded(3, 3, 2, 1);
  std::vector<float> b(18);
  hf_qkv_to_grouped(bq.data(), bk.data(), bv.data(), 3, 3, 2, 1, b.data());
  const std::vector<float> want = {1000, 1010, 2000, 2010, 3000, 3010, 1100, 1110, 2100,
                                   2110, 3100, 3110, 1200, 1210, 2200, 2210, 3200, 3210};
  CHECK(b == want);
  CHECK_THROWS_AS(hf_qkv_to_grouped(q.data(), k.data(), v.data(), 4, 3, 3, 2, out.data()), Error);
}

TEST_CASE("GPT-2's Conv1D weights are transposed, c_attn's q | k | v columns regrouped per head", "[hf]") {
  GptConfig c;
  c.hidden_size = 4;
  c.num_attention_heads = 2;
  c.num_layers = 1;
  c.vocab_size = 5;
  c.seq_length = 4;
  const std::vector<HfMapping> maps = hf_mappings(c, HfArchitecture::Gpt2);
  const auto find = [&](const std::string& name) -> const HfMapping& {
    for (const HfMapping& m : maps)
      if (m.param == name) return m;
    FAIL("no mapping for " << name);
    return maps.front();
  };
  // c_attn.weight [in 4, out 12], value in * 100 + out.
  std::vector<float> c_attn;
  for (int i = 0; i < 4; ++i)
    for (int o = 0; o < 12; ++o) c_attn.push_back(static_cast<float>(i * 100 + o));
  const HfMapping& qkv = find("decoder.layers.0.self_attention.linear_qkv.weight");
  REQUIRE(qkv.layout == HfLayout::QkvConv1D);
  REQUIRE(qkv.tensors[0].name == "transformer.h.0.attn.c_attn.weight");
  REQUIRE(qkv.tensors[0].shape == std::vector<int64_t>{4, 12});
  std::vector<float> param(48);
  hf_to_param(qkv, c, {c_attn.data()}, 12, param.data());
  // Row r of linear_qkv is output column col[r]: head 0's q (0, 1), k (4, 5), v (8, 9), then head 1's.
  const int col[12] = {0, 1, 4, 5, 8, 9, 2, 3, 6, 7, 10, 11};
  for (int r = 0; r < 12; ++r)
    for (int i = 0; i < 4; ++i) CHECK(param[static_cast<std::size_t>(r * 4 + i)] == i * 100 + col[r]);
  std::vector<float> back(48);
  param_to_hf(qkv, c, param.data(), {back.data()});
  CHECK(back == c_attn);

  const HfMapping& fc1 = find("decoder.layers.0.mlp.linear_fc1.weight");
  REQUIRE(fc1.layout == HfLayout::Transpose);
  REQUIRE(fc1.tensors[0].shape == std::vector<int64_t>{4, 16});
  std::vector<float> c_fc;
  for (int i = 0; i < 4; ++i)
    for (int o = 0; o < 16; ++o) c_fc.push_back(static_cast<float>(i * 100 + o));
  std::vector<float> w(64);
  hf_to_param(fc1, c, {c_fc.data()}, 16, w.data());
  for (int o = 0; o < 16; ++o)
    for (int i = 0; i < 4; ++i) CHECK(w[static_cast<std::size_t>(o * 4 + i)] == i * 100 + o);

  const HfMapping& bias = find("decoder.layers.0.self_attention.linear_qkv.bias");
  REQUIRE(bias.layout == HfLayout::QkvFused);
  std::vector<float> b12(12), pb(12);
  for (int o = 0; o < 12; ++o) b12[static_cast<std::size_t>(o)] = static_cast<float>(o);
  hf_to_param(bias, c, {b12.data()}, 12, pb.data());
  for (int r = 0; r < 12; ++r) CHECK(pb[static_cast<std::size_t>(r)] == col[r]);
}

TEST_CASE("SwiGLU's linear_fc1 is gate_proj's rows then up_proj's, and the vocabulary pads with zeros", "[hf]") {
  GptConfig c;
  c.hidden_size = 2;
  c.num_attention_heads = 1;
  c.ffn_hidden_size = 3;
  c.num_layers = 1;
  c.vocab_size = 3;
  c.normalization = Normalization::RMSNorm;
  c.swiglu = true;
  c.position_embedding = PositionEmbedding::Rope;
  c.add_bias_linear = false;
  const std::vector<HfMapping> maps = hf_mappings(c, HfArchitecture::Llama);
  const HfMapping* fc1 = nullptr;
  const HfMapping* emb = nullptr;
  for (const HfMapping& m : maps) {
    if (m.param == "decoder.layers.0.mlp.linear_fc1.weight") fc1 = &m;
    if (m.param == "embedding.word_embeddings.weight") emb = &m;
  }
  REQUIRE(fc1);
  REQUIRE(fc1->layout == HfLayout::GateUp);
  REQUIRE(fc1->tensors[0].name == "model.layers.0.mlp.gate_proj.weight");
  REQUIRE(fc1->tensors[1].name == "model.layers.0.mlp.up_proj.weight");
  const std::vector<float> gate = {11, 12, 21, 22, 31, 32}, up = {-11, -12, -21, -22, -31, -32};
  std::vector<float> out(12);
  hf_to_param(*fc1, c, {gate.data(), up.data()}, 6, out.data());
  CHECK(out == std::vector<float>{11, 12, 21, 22, 31, 32, -11, -12, -21, -22, -31, -32});
  std::vector<float> g2(6), u2(6);
  param_to_hf(*fc1, c, out.data(), {g2.data(), u2.data()});
  CHECK(g2 == gate);
  CHECK(u2 == up);

  REQUIRE(emb);
  REQUIRE(emb->layout == HfLayout::VocabRows);
  const std::vector<float> table = {1, 2, 3, 4, 5, 6};
  std::vector<float> padded(8 * 2, -1.0f);
  hf_to_param(*emb, c, {table.data()}, 8, padded.data());
  CHECK(padded == std::vector<float>{1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  std::vector<float> cut(6);
  padded[6] = 99;  // a padded row never reaches the export
  param_to_hf(*emb, c, padded.data(), {cut.data()});
  CHECK(cut == table);
}

TEST_CASE("The state dict is listed in the order Hugging Face saves it", "[hf]") {
  HfConfig q = hf_config_from_json({{"model_type", "qwen2"},
                                    {"vocab_size", 10},
                                    {"hidden_size", 8},
                                    {"intermediate_size", 16},
                                    {"num_hidden_layers", 1},
                                    {"num_attention_heads", 2},
                                    {"num_key_value_heads", 1},
                                    {"max_position_embeddings", 32}},
                                   "qwen2.json");
  std::vector<std::string> names;
  for (const HfTensor& t : hf_state_dict(q.model, q.architecture)) names.push_back(t.name);
  const std::vector<std::string> want = {"model.embed_tokens.weight",
                                         "model.layers.0.self_attn.q_proj.weight",
                                         "model.layers.0.self_attn.q_proj.bias",
                                         "model.layers.0.self_attn.k_proj.weight",
                                         "model.layers.0.self_attn.k_proj.bias",
                                         "model.layers.0.self_attn.v_proj.weight",
                                         "model.layers.0.self_attn.v_proj.bias",
                                         "model.layers.0.self_attn.o_proj.weight",
                                         "model.layers.0.mlp.gate_proj.weight",
                                         "model.layers.0.mlp.up_proj.weight",
                                         "model.layers.0.mlp.down_proj.weight",
                                         "model.layers.0.input_layernorm.weight",
                                         "model.layers.0.post_attention_layernorm.weight",
                                         "model.norm.weight",
                                         "lm_head.weight"};
  CHECK(names == want);
}

TEST_CASE("Hugging Face's shard split: a tensor above the limit is a shard of its own, appended at once", "[hf]") {
  CHECK(hf_shard_plan({5, 3, 4, 12, 2, 2}, 8) == std::vector<int>{0, 0, 2, 1, 2, 2});
  CHECK(hf_shard_plan({5, 3, 4}, 0) == std::vector<int>{0, 0, 0});
  CHECK(hf_shard_plan({8, 8, 1}, 8) == std::vector<int>{0, 1, 2});
  // Views of one storage (a fused experts tensor) go with its first view, which counts the whole
  // storage; an oversized storage takes its views into its own shard.
  CHECK(hf_shard_plan({5, 9, 0, 3, 0}, 8, {-1, -1, 1, -1, 3}) == std::vector<int>{1, 0, 0, 1, 1});
  CHECK(hf_shard_plan({4, 4, 0, 0, 1}, 8, {-1, -1, 1, 1, -1}) == std::vector<int>{0, 0, 0, 0, 1});
  CHECK_THROWS_AS(hf_shard_plan({4, 4}, 8, {1, -1}), Error);
  CHECK(hf_shard_name(0, 1) == "model.safetensors");
  CHECK(hf_shard_name(1, 3) == "model-00002-of-00003.safetensors");
}

TEST_CASE("config.json maps onto GptConfig and back for GPT-2, Llama, Mistral and Qwen2", "[hf]") {
  const HfConfig g = hf_config_from_json(gpt2_json(), "gpt2.json");
  CHECK(g.architecture == HfArchitecture::Gpt2);
  CHECK(g.model.hidden_size == 768);
  CHECK(g.model.ffn() == 3072);
  CHECK(g.model.max_positions() == 1024);
  CHECK(g.model.seq_length == 1024);
  CHECK(g.model.tie_embeddings);
  CHECK(g.model.padded_vocab(1) == 50304);
  CHECK(hf_default_architecture(g.model) == HfArchitecture::Gpt2);
  const json gj = hf_config_to_json(g.model, HfArchitecture::Gpt2, StDType::F32, json::object());
  const json gpt2_original = gpt2_json();
  for (const auto& [key, value] : gpt2_original.items()) {
    INFO(key);
    CHECK(gj.at(key) == value);
  }
  CHECK(gj.dump().find("1e-05") != std::string::npos);  // shortest float text, not 9.99999974737875e-06

  const HfConfig l = hf_config_from_json(llama_json(), "llama.json");
  CHECK(l.architecture == HfArchitecture::Llama);
  CHECK(l.model.query_groups() == 2);
  CHECK(l.model.head_dim() == 8);
  CHECK(l.model.kv_channels == 0);
  CHECK(l.model.rotary_base == 500000.0f);
  CHECK(l.model.ffn() == 96);
  CHECK(l.model.layernorm_epsilon == 1e-5f);
  CHECK(l.model.tie_embeddings);
  CHECK_FALSE(l.model.add_bias_linear);
  const json lj = hf_config_to_json(l.model, HfArchitecture::Llama, StDType::BF16, json{{"bos_token_id", 128000}});
  const json llama_original = llama_json();
  for (const auto& [key, value] : llama_original.items()) {
    INFO(key);
    CHECK(lj.at(key) == value);
  }
  CHECK(lj.at("bos_token_id") == 128000);
  CHECK(lj.at("torch_dtype") == "bfloat16");
  CHECK(lj.at("architectures") == json::array({"LlamaForCausalLM"}));

  // Llama 3.1's rope_scaling, both key spellings.
  json scaled = llama_json();
  scaled["rope_scaling"] = {{"type", "llama3"},
                            {"factor", 8.0},
                            {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0},
                            {"original_max_position_embeddings", 8192}};
  const HfConfig s = hf_config_from_json(scaled, "s.json");
  CHECK(s.model.rope_scaling.enabled);
  CHECK(s.model.rope_scaling.original_max_position_embeddings == 8192);
  CHECK(hf_config_to_json(s.model, HfArchitecture::Llama, StDType::F32, json::object())
            .at("rope_scaling")
            .at("rope_type") == "llama3");

  // Mistral's sliding window: the model's context is the window when it is shorter.
  json mistral = llama_json();
  mistral.erase("attention_bias");
  mistral.erase("mlp_bias");
  mistral["model_type"] = "mistral";
  mistral["sliding_window"] = 64;
  const HfConfig m = hf_config_from_json(mistral, "m.json");
  CHECK(m.architecture == HfArchitecture::Mistral);
  CHECK(m.model.seq_length == 64);
  CHECK(m.model.max_positions() == 128);
  CHECK(hf_config_to_json(m.model, HfArchitecture::Mistral, StDType::F32, mistral).at("sliding_window") == 64);

  json qwen = llama_json();
  qwen["model_type"] = "qwen2";
  qwen.erase("head_dim");
  qwen["hidden_size"] = 64;
  const HfConfig q = hf_config_from_json(qwen, "q.json");
  CHECK(q.architecture == HfArchitecture::Qwen2);
  CHECK(q.model.add_qkv_bias);
  CHECK_FALSE(q.model.add_bias_linear);
  CHECK(hf_default_architecture(q.model) == HfArchitecture::Qwen2);
  CHECK(code_of([&] { check_hf_architecture(q.model, HfArchitecture::Mistral); }) == ErrorCode::Unsupported);
  CHECK(code_of([&] { check_hf_architecture(q.model, HfArchitecture::Gpt2); }) == ErrorCode::Unsupported);
  CHECK(code_of([&] { check_hf_architecture(g.model, HfArchitecture::Llama); }) == ErrorCode::Unsupported);
}

TEST_CASE("Configs ptdp does not compute are refused with the field named", "[hf]") {
  const auto refused = [](json j, ErrorCode want, const std::string& words) {
    std::string message;
    CHECK(code_of([&] { hf_config_from_json(j, "cfg.json"); }, &message) == want);
    CHECK_THAT(message, Catch::Contains(words));
  };
  json j = llama_json();
  j["hidden_act"] = "gelu";
  refused(j, ErrorCode::Unsupported, "hidden_act \"gelu\"");
  j = llama_json();
  j["attention_bias"] = true;
  refused(j, ErrorCode::Unsupported, "attention_bias = 1 with mlp_bias = 0");
  j = llama_json();
  j["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 4.0}};
  refused(j, ErrorCode::Unsupported, "rope_scaling.rope_type \"longrope\"");
  j = llama_json();
  j["model_type"] = "gemma";
  refused(j, ErrorCode::Unsupported, "model_type \"gemma\"");
  j = llama_json();
  j.erase("model_type");
  refused(j, ErrorCode::Io, "\"model_type\" is missing");
  j = llama_json();
  j["num_hidden_layers"] = "two";
  refused(j, ErrorCode::Io, "\"num_hidden_layers\" is not an integer");
  j = llama_json();
  j["num_hidden_layers"] = 1e20;  // a double: no integer, and beyond any int
  refused(j, ErrorCode::Io, "\"num_hidden_layers\" is not an integer: 1e+20");
  j = llama_json();
  j["num_hidden_layers"] = 4294967298ull;
  refused(j, ErrorCode::Io, "\"num_hidden_layers\" = 4294967298 is outside [0, 2^31)");
  j = llama_json();
  j["rms_norm_eps"] = 1e300;
  refused(j, ErrorCode::Io, "\"rms_norm_eps\" = 1e+300 is not a finite float");
  j = llama_json();
  j["num_key_value_heads"] = 3;
  refused(j, ErrorCode::InvalidArgument, "cfg.json");
  j = gpt2_json();
  j["scale_attn_by_inverse_layer_idx"] = true;
  refused(j, ErrorCode::Unsupported, "scale_attn_by_inverse_layer_idx");
  j = gpt2_json();
  j["activation_function"] = "gelu";
  refused(j, ErrorCode::Unsupported, "tanh approximation");
}

TEST_CASE("transformers 5's rope_parameters are read as transformers 4's rope_theta and rope_scaling", "[hf]") {
  // The failure: a Llama saved by transformers 5.25 with rope_theta 500000 has no
  // top-level rope_theta, and was imported with the default 10000.
  json v5 = llama_json();
  v5.erase("rope_theta");
  v5["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "default"}};
  CHECK(hf_config_from_json(v5, "v5.json").model.rotary_base == 500000.0f);
  CHECK_FALSE(hf_config_from_json(v5, "v5.json").model.rope_scaling.enabled);

  json v5_scaled = v5;
  v5_scaled["rope_parameters"] = {{"rope_theta", 500000.0},        {"rope_type", "llama3"},
                                  {"factor", 32.0},                {"low_freq_factor", 2.0},
                                  {"high_freq_factor", 8.0},       {"original_max_position_embeddings", 16}};
  const HfConfig s = hf_config_from_json(v5_scaled, "v5s.json");
  CHECK(s.model.rotary_base == 500000.0f);
  CHECK(s.model.rope_scaling.enabled);
  CHECK(s.model.rope_scaling.factor == 32.0f);
  CHECK(s.model.rope_scaling.low_freq_factor == 2.0f);
  CHECK(s.model.rope_scaling.high_freq_factor == 8.0f);
  CHECK(s.model.rope_scaling.original_max_position_embeddings == 16);
  // transformers 5 takes the context for a missing original_max_position_embeddings.
  v5_scaled["rope_parameters"].erase("original_max_position_embeddings");
  CHECK(hf_config_from_json(v5_scaled, "v5s.json").model.rope_scaling.original_max_position_embeddings == 128);

  // The export carries both spellings, and each reads back to the same model.
  const json out = hf_config_to_json(s.model, HfArchitecture::Llama, StDType::F32, v5);
  CHECK(out.at("rope_theta") == 500000.0);
  CHECK(out.at("rope_parameters").at("rope_theta") == 500000.0);
  CHECK(out.at("rope_parameters").at("rope_type") == "llama3");
  CHECK(out.at("rope_scaling").at("factor") == 32.0);
  json only_v4 = out, only_v5 = out;
  only_v4.erase("rope_parameters");
  only_v5.erase("rope_theta");
  only_v5.erase("rope_scaling");
  for (const json& j : {out, only_v4, only_v5}) {
    const GptConfig back = hf_config_from_json(j, "back.json").model;
    CHECK(back.rotary_base == 500000.0f);
    CHECK(back.rope_scaling.factor == 32.0f);
    CHECK(back.rope_scaling.original_max_position_embeddings == 16);
  }
  // transformers 5 writes "dtype", which it reads before "torch_dtype".
  json with_dtype = v5;
  with_dtype["dtype"] = "float32";
  CHECK(hf_config_to_json(s.model, HfArchitecture::Llama, StDType::BF16, with_dtype).at("dtype") == "bfloat16");
}

TEST_CASE("YaRN's rope_parameters and rope_scaling are read as transformers reads them and written back",
          "[hf][yarn]") {
  json v5 = llama_json();
  v5.erase("rope_theta");
  v5["rope_parameters"] = {{"rope_theta", 10000.0}, {"rope_type", "yarn"}, {"factor", 40.0},
                           {"original_max_position_embeddings", 4096}, {"beta_fast", 32}, {"beta_slow", 1},
                           {"mscale", 0.707}, {"mscale_all_dim", 0.707}};
  const HfConfig y = hf_config_from_json(v5, "v3.json");
  CHECK(y.model.rope_type == ptdp::RopeType::Yarn);
  CHECK_FALSE(y.model.rope_scaling.enabled);
  CHECK(y.model.yarn.factor == 40.0f);
  CHECK(y.model.yarn.original_max_position_embeddings == 4096);
  CHECK(y.model.yarn.beta_fast == 32.0f);
  CHECK(y.model.yarn.beta_slow == 1.0f);
  CHECK(y.model.yarn.mscale == 0.707f);
  CHECK(y.model.yarn.mscale_all_dim == 0.707f);
  CHECK(y.model.yarn.truncate);
  CHECK(y.model.rope_amplitude() == 1.0f);
  // Its export holds the same fields (those the base config has, even at transformers' defaults).
  const json out = hf_config_to_json(y.model, HfArchitecture::Llama, StDType::F32, v5);
  CHECK(out.at("rope_parameters") == v5.at("rope_parameters"));
  const json bare = hf_config_to_json(y.model, HfArchitecture::Llama, StDType::F32, json());
  CHECK_FALSE(bare.at("rope_parameters").contains("beta_fast"));  // transformers' default, not in the base
  for (const json& j : {out, bare}) {
    const GptConfig back = hf_config_from_json(j, "back.json").model;
    CHECK(back.uses_yarn());
    CHECK(back.yarn.factor == 40.0f);
    CHECK(back.yarn.mscale_all_dim == 0.707f);
    CHECK(back.rotary_inv_freq() == y.model.rotary_inv_freq());
  }
  CHECK(code_of([&] { check_hf_architecture(y.model, HfArchitecture::Mistral); }) == ErrorCode::Unsupported);

  // transformers 4's spelling; beta_fast and beta_slow of 0 or null mean 32 and 1 (its `or`), a
  // missing original context the model's, truncate false kept.
  json v4 = llama_json();
  v4["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"beta_fast", 0}, {"beta_slow", nullptr},
                        {"truncate", false}};
  const GptConfig q = hf_config_from_json(v4, "qwen.json").model;
  CHECK(q.uses_yarn());
  CHECK(q.yarn.beta_fast == 32.0f);
  CHECK(q.yarn.beta_slow == 1.0f);
  CHECK(q.yarn.original_max_position_embeddings == 128);
  CHECK_FALSE(q.yarn.truncate);
  CHECK(q.rope_amplitude() == static_cast<float>(0.1 * std::log(4.0) + 1.0));
  CHECK(q.yarn_softmax_mscale() == 1.0f);
}

TEST_CASE("RoPE settings ptdp does not compute, or written twice with two values, are refused by name", "[hf]") {
  const auto refused = [](const json& j, const std::string& words) {
    std::string message;
    CHECK(code_of([&] { hf_config_from_json(j, "cfg.json"); }, &message) == ErrorCode::Unsupported);
    CHECK_THAT(message, Catch::Contains(words));
  };
  json j = llama_json();
  j["rope_parameters"] = {{"rope_theta", 10000.0}, {"rope_type", "default"}};
  refused(j, "rope_theta = 500000.0 disagrees with rope_parameters.rope_theta = 10000.0");
  j = llama_json();
  j["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "longrope"}, {"factor", 4.0}};
  refused(j, "rope_parameters.rope_type \"longrope\"");
  // YaRN's fields ptdp does not compute, or whose meaning Megatron and transformers disagree on.
  j["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "yarn"}, {"factor", 4.0}, {"attention_factor", 1.2}};
  refused(j, "rope_parameters.attention_factor = 1.2 is not computed by ptdp (rope_type \"yarn\")");
  j["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "yarn"}, {"original_max_position_embeddings", 16}};
  refused(j, "rope_parameters.factor is missing");
  j["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "yarn"}, {"factor", 4.0}, {"mscale_all_dim", 1.0}};
  refused(j, "rope_parameters.mscale_all_dim = 1.0 without mscale");
  j["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "yarn"}, {"factor", 4.0}, {"mscale", 0.707}};
  refused(j, "rope_parameters.mscale = 0.707 without mscale_all_dim");
  j["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "yarn"}, {"factor", 4.0}, {"low_freq_factor", 1.0}};
  refused(j, "rope_parameters.low_freq_factor = 1.0 is not computed by ptdp (rope_type \"yarn\")");
  j["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "dynamic"}, {"factor", 4.0}};
  refused(j, "rope_parameters.rope_type \"dynamic\"");
  j["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "default"}, {"partial_rotary_factor", 0.5}};
  refused(j, "rope_parameters.partial_rotary_factor = 0.5");
  j["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "default"}, {"attention_factor", 2.0}};
  refused(j, "rope_parameters.attention_factor = 2.0 is not computed");
  j["rope_parameters"] = {{"full_attention", {{"rope_theta", 1e4}}}, {"sliding_attention", {{"rope_theta", 1e6}}}};
  refused(j, "RoPE settings per layer type");
  j = llama_json();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  j["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "llama3"}, {"factor", 16.0}};
  refused(j, "rope_scaling.factor = 8.0 disagrees with rope_parameters.factor = 16.0");
  j = llama_json();
  j["partial_rotary_factor"] = 0.25;
  refused(j, "partial_rotary_factor = 0.25");
  j = llama_json();
  j["pruned_heads"] = {{"0", {1}}};
  refused(j, "pruned_heads");
  j = llama_json();
  j["quantization_config"] = {{"quant_method", "bitsandbytes"}};
  refused(j, "quantization_config");
  j = gpt2_json();
  j["embd_pdrop"] = 0.0;
  refused(j, "embd_pdrop = 0 differs from resid_pdrop = 0.1");
  j = gpt2_json();
  j["add_cross_attention"] = true;
  refused(j, "add_cross_attention");
}

namespace {

json moe_json(const char* type) {
  json j = llama_json();
  j.erase("attention_bias");
  j.erase("mlp_bias");
  j.erase("rope_theta");
  j["model_type"] = type;
  j["num_hidden_layers"] = 4;
  j["num_experts_per_tok"] = 2;
  j["router_aux_loss_coef"] = 0.02;
  j["rope_parameters"] = {{"rope_theta", 1e6}, {"rope_type", "default"}};
  if (std::string(type) == "mixtral") {
    j["num_local_experts"] = 8;
    j["router_jitter_noise"] = 0.0;
    j["sliding_window"] = nullptr;
  } else {
    j["num_experts"] = 8;
    j["moe_intermediate_size"] = 24;
    j["norm_topk_prob"] = false;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = json::array();
  }
  if (std::string(type) == "qwen2_moe") {
    j.erase("head_dim");
    j["shared_expert_intermediate_size"] = 40;
  }
  return j;
}

// OLMoE: every layer MoE with experts intermediate_size wide, q/k norms over the whole
// projections, head dim hidden_size / num_attention_heads.
json olmoe_json() {
  json j = moe_json("qwen3_moe");
  j["model_type"] = "olmoe";
  for (const char* key : {"moe_intermediate_size", "decoder_sparse_step", "mlp_only_layers", "head_dim"}) j.erase(key);
  j["clip_qkv"] = nullptr;
  return j;
}

}  // namespace

TEST_CASE("Mixtral, Qwen2-MoE and Qwen3-MoE configs map onto MoeConfig with Megatron's routing", "[hf]") {
  const HfConfig mx = hf_config_from_json(moe_json("mixtral"), "mixtral.json");
  CHECK(mx.architecture == HfArchitecture::Mixtral);
  CHECK(mx.model.moe.num_experts == 8);
  CHECK(mx.model.moe.router_topk == 2);
  CHECK(mx.model.moe_ffn() == 96);
  CHECK_FALSE(mx.model.moe.pre_softmax);  // top k of the softmax, renormalised
  CHECK(mx.model.moe.layer_pattern.empty());
  CHECK(mx.model.moe.aux_loss_coeff == 0.02f);
  CHECK(mx.model.rotary_base == 1e6f);
  CHECK(hf_default_architecture(mx.model) == HfArchitecture::Mixtral);
  json no_theta = moe_json("mixtral");
  no_theta.erase("rope_parameters");
  CHECK(hf_config_from_json(no_theta, "m.json").model.rotary_base == 1e6f);  // Mixtral's class default

  json q2 = moe_json("qwen2_moe");
  q2["decoder_sparse_step"] = 2;
  q2["mlp_only_layers"] = {3};
  const HfConfig q = hf_config_from_json(q2, "qwen2_moe.json");
  CHECK(q.architecture == HfArchitecture::Qwen2Moe);
  CHECK(q.model.moe.pre_softmax);  // norm_topk_prob false: the top k of the full softmax
  CHECK(q.model.moe.layer_pattern == std::vector<int>{0, 1, 0, 0});
  CHECK(q.model.moe_ffn() == 24);
  CHECK(q.model.ffn() == 96);
  CHECK(q.model.moe.shared_expert_intermediate_size == 40);
  CHECK(q.model.moe.shared_expert_gate);
  CHECK(q.model.add_qkv_bias);
  CHECK(hf_default_architecture(q.model) == HfArchitecture::Qwen2Moe);

  json q3 = moe_json("qwen3_moe");
  q3.erase("num_experts");
  q3["num_local_experts"] = 8;  // transformers 5's name
  q3["norm_topk_prob"] = true;
  const HfConfig t = hf_config_from_json(q3, "qwen3_moe.json");
  CHECK(t.architecture == HfArchitecture::Qwen3Moe);
  CHECK(t.model.moe.num_experts == 8);
  CHECK_FALSE(t.model.moe.pre_softmax);
  CHECK(t.model.qk_layernorm);
  CHECK(t.model.head_dim() == 8);
  CHECK(hf_default_architecture(t.model) == HfArchitecture::Qwen3Moe);

  // Back out: every field read comes back, in both transformers versions' names.
  for (const auto& [source, arch] : {std::pair<json, HfArchitecture>{moe_json("mixtral"), HfArchitecture::Mixtral},
                                     {q2, HfArchitecture::Qwen2Moe},
                                     {q3, HfArchitecture::Qwen3Moe}}) {
    const HfConfig in = hf_config_from_json(source, "in.json");
    const json out = hf_config_to_json(in.model, arch, StDType::F32, json::object());
    const HfConfig back = hf_config_from_json(out, "out.json");
    INFO(hf_class_name(arch));
    CHECK(back.architecture == arch);
    CHECK_NOTHROW(check_hf_model_matches(in.model, back.model, "out.json"));
    CHECK(back.model.moe.aux_loss_coeff == in.model.moe.aux_loss_coeff);
    // With the imported config as the base (as ptdp-convert exports), its own spelling is kept.
    const json kept = hf_config_to_json(in.model, arch, StDType::F32, source);
    for (const auto& [key, value] : source.items()) {
      INFO(key);
      CHECK(kept.at(key) == value);
    }
  }
  const json q3_out = hf_config_to_json(t.model, HfArchitecture::Qwen3Moe, StDType::F32, json::object());
  CHECK(q3_out.at("num_experts") == 8);
  CHECK(q3_out.at("num_local_experts") == 8);
  json q2_other = q2;
  q2_other["mlp_only_layers"] = json::array();
  GptConfig changed = q.model;
  changed.moe.layer_pattern = {1, 1, 0, 1};
  const json q2_out = hf_config_to_json(changed, HfArchitecture::Qwen2Moe, StDType::F32, q2);
  CHECK(q2_out.at("decoder_sparse_step") == 1);
  CHECK(q2_out.at("mlp_only_layers") == json({2}));
}

TEST_CASE("MoE settings ptdp or the class cannot express are refused by name", "[hf]") {
  const auto refused = [](const json& j, const std::string& words) {
    std::string message;
    CHECK(code_of([&] { hf_config_from_json(j, "cfg.json"); }, &message) == ErrorCode::Unsupported);
    CHECK_THAT(message, Catch::Contains(words));
  };
  json j = moe_json("mixtral");
  j["router_jitter_noise"] = 0.01;
  refused(j, "router_jitter_noise = 0.01");
  j = moe_json("qwen3_moe");
  j["attention_bias"] = true;
  refused(j, "attention_bias = true");
  j = moe_json("qwen3_moe");
  j["mlp_only_layers"] = {0, 1, 2, 3};
  refused(j, "leave no MoE layer");
  j = moe_json("qwen3_moe");
  j["num_local_experts"] = 4;
  refused(j, "num_local_experts = 4 disagrees with num_experts = 8");
  j = moe_json("qwen2_moe");
  j["use_sliding_window"] = false;
  j["layer_types"] = {"full_attention", "chunked_attention", "full_attention", "full_attention"};
  refused(j, "layer_types entry \"chunked_attention\"");
  j = olmoe_json();
  j["clip_qkv"] = 8.0;
  refused(j, "clip_qkv = 8.0");
  j = olmoe_json();
  j["head_dim"] = 16;  // a * dh = 128, q_norm hidden_size = 64 wide
  refused(j, "OLMoE's q_norm is hidden_size wide");
  j = moe_json("qwen3_moe");
  j["decoder_sparse_step"] = 0;
  std::string message;
  CHECK(code_of([&] { hf_config_from_json(j, "cfg.json"); }, &message) == ErrorCode::Io);
  CHECK_THAT(message, Catch::Contains("\"decoder_sparse_step\" = 0 is not >= 1"));

  const GptConfig q = hf_config_from_json(moe_json("qwen2_moe"), "q.json").model;
  const auto refused_as = [](const GptConfig& c, HfArchitecture a, const std::string& words) {
    std::string m;
    CHECK(code_of([&] { check_hf_architecture(c, a); }, &m) == ErrorCode::Unsupported);
    CHECK_THAT(m, Catch::Contains(words));
  };
  refused_as(q, HfArchitecture::Llama, "it is a mixture of experts (--num-experts)");
  refused_as(q, HfArchitecture::Mixtral, "Mixtral renormalises the top-k probabilities");
  refused_as(q, HfArchitecture::Qwen3Moe, "Qwen3-MoE has no shared experts");
  GptConfig c = q;
  c.moe.enable_expert_bias = true;
  refused_as(c, HfArchitecture::Qwen2Moe, "--moe-router-enable-expert-bias");
  c = q;
  c.moe.capacity_factor = 1.0f;
  refused_as(c, HfArchitecture::Qwen2Moe, "--moe-expert-capacity-factor");
  c = q;
  c.moe.score_function = MoeScoreFunction::Sigmoid;
  refused_as(c, HfArchitecture::Qwen2Moe, "--moe-router-score-function");
  refused_as(hf_config_from_json(llama_json(), "l.json").model, HfArchitecture::Mixtral,
             "it is a mixture of experts, the model is dense");
}

TEST_CASE("Experts map tensor by tensor as on the hub: Mixtral's w1/w3/w2, Qwen's gate/up/down and shared expert",
          "[hf]") {
  json q2 = moe_json("qwen2_moe");
  q2["num_hidden_layers"] = 2;
  q2["num_experts"] = 2;
  q2["mlp_only_layers"] = {1};
  q2["tie_word_embeddings"] = false;
  const HfConfig q = hf_config_from_json(q2, "q.json");
  std::vector<std::string> names;
  for (const HfTensor& t : hf_state_dict(q.model, q.architecture)) names.push_back(t.name);
  // transformers 5's order (its shards follow it): the in-memory names sorted by dot_natural_key,
  // each layer's fused experts expanded in place, down_proj of every expert, gate_proj, up_proj.
  const std::vector<std::string> want = {
      "lm_head.weight",
      "model.embed_tokens.weight",
      "model.layers.0.input_layernorm.weight",
      "model.layers.0.mlp.experts.0.down_proj.weight",
      "model.layers.0.mlp.experts.1.down_proj.weight",
      "model.layers.0.mlp.experts.0.gate_proj.weight",
      "model.layers.0.mlp.experts.1.gate_proj.weight",
      "model.layers.0.mlp.experts.0.up_proj.weight",
      "model.layers.0.mlp.experts.1.up_proj.weight",
      "model.layers.0.mlp.gate.weight",
      "model.layers.0.mlp.shared_expert.down_proj.weight",
      "model.layers.0.mlp.shared_expert.gate_proj.weight",
      "model.layers.0.mlp.shared_expert.up_proj.weight",
      "model.layers.0.mlp.shared_expert_gate.weight",
      "model.layers.0.post_attention_layernorm.weight",
      "model.layers.0.self_attn.k_proj.bias",
      "model.layers.0.self_attn.k_proj.weight",
      "model.layers.0.self_attn.o_proj.weight",
      "model.layers.0.self_attn.q_proj.bias",
      "model.layers.0.self_attn.q_proj.weight",
      "model.layers.0.self_attn.v_proj.bias",
      "model.layers.0.self_attn.v_proj.weight",
      "model.layers.1.input_layernorm.weight",
      "model.layers.1.mlp.down_proj.weight",
      "model.layers.1.mlp.gate_proj.weight",
      "model.layers.1.mlp.up_proj.weight",
      "model.layers.1.post_attention_layernorm.weight",
      "model.layers.1.self_attn.k_proj.bias",
      "model.layers.1.self_attn.k_proj.weight",
      "model.layers.1.self_attn.o_proj.weight",
      "model.layers.1.self_attn.q_proj.bias",
      "model.layers.1.self_attn.q_proj.weight",
      "model.layers.1.self_attn.v_proj.bias",
      "model.layers.1.self_attn.v_proj.weight",
      "model.norm.weight"};
  CHECK(names == want);
  // The down, gate and up tensors of a layer's experts are views of three storages in memory.
  const std::vector<HfTensor> dict = hf_state_dict(q.model, q.architecture);
  CHECK(dict.at(3).shares_storage_with == -1);  // experts.0.down_proj
  CHECK(dict.at(4).shares_storage_with == 3);   // experts.1.down_proj
  CHECK(dict.at(5).shares_storage_with == -1);  // experts.0.gate_proj
  CHECK(dict.at(6).shares_storage_with == 5);
  CHECK(dict.at(8).shares_storage_with == 7);   // experts.1.up_proj
  CHECK(dict.at(10).shares_storage_with == -1);  // shared_expert.down_proj: its own


  std::map<std::string, HfMapping> by_param;
  for (const HfMapping& m : hf_mappings(q.model, q.architecture)) by_param.emplace(m.param, m);
  const HfMapping& fc1 = by_param.at("decoder.layers.0.mlp.experts.linear_fc1.weight1");
  CHECK(fc1.layout == HfLayout::GateUp);
  CHECK(fc1.shape == std::vector<int64_t>{48, 64});
  CHECK(fc1.tensors.at(0).name == "model.layers.0.mlp.experts.1.gate_proj.weight");
  CHECK(fc1.tensors.at(1).name == "model.layers.0.mlp.experts.1.up_proj.weight");
  CHECK(by_param.at("decoder.layers.0.mlp.experts.linear_fc2.weight1").tensors.at(0).shape ==
        std::vector<int64_t>{64, 24});
  CHECK(by_param.at("decoder.layers.0.mlp.router.weight").shape == std::vector<int64_t>{2, 64});
  CHECK(by_param.at("decoder.layers.0.mlp.shared_experts.linear_fc1.weight").shape == std::vector<int64_t>{80, 64});
  CHECK(by_param.at("decoder.layers.0.mlp.shared_experts.gate_weight").tensors.at(0).name ==
        "model.layers.0.mlp.shared_expert_gate.weight");
  CHECK(by_param.count("decoder.layers.1.mlp.linear_fc1.weight") == 1);  // the dense layer
  CHECK(by_param.at("decoder.layers.1.mlp.linear_fc1.weight").shape == std::vector<int64_t>{192, 64});

  // An expert's [gate; up] rows and back, bit for bit.
  std::vector<float> gate(24 * 64), up(24 * 64), fused(48 * 64), gate2(gate.size()), up2(up.size());
  for (std::size_t i = 0; i < gate.size(); ++i) gate[i] = static_cast<float>(i), up[i] = -static_cast<float>(i) - 0.5f;
  hf_to_param(fc1, q.model, {gate.data(), up.data()}, 48, fused.data());
  CHECK(fused[0] == 0.0f);
  CHECK(fused[24 * 64] == -0.5f);
  param_to_hf(fc1, q.model, fused.data(), {gate2.data(), up2.data()});
  CHECK(gate2 == gate);
  CHECK(up2 == up);

  const HfConfig mx = hf_config_from_json(moe_json("mixtral"), "m.json");
  std::map<std::string, HfMapping> mixtral;
  for (const HfMapping& m : hf_mappings(mx.model, mx.architecture)) mixtral.emplace(m.param, m);
  const HfMapping& w13 = mixtral.at("decoder.layers.3.mlp.experts.linear_fc1.weight7");
  CHECK(w13.tensors.at(0).name == "model.layers.3.block_sparse_moe.experts.7.w1.weight");
  CHECK(w13.tensors.at(1).name == "model.layers.3.block_sparse_moe.experts.7.w3.weight");
  CHECK(mixtral.at("decoder.layers.3.mlp.experts.linear_fc2.weight7").tensors.at(0).name ==
        "model.layers.3.block_sparse_moe.experts.7.w2.weight");
  CHECK(mixtral.at("decoder.layers.3.mlp.router.weight").tensors.at(0).name ==
        "model.layers.3.block_sparse_moe.gate.weight");
  // Mixtral's block_sparse_moe is mlp in transformers 5's memory: it sorts after input_layernorm.
  json mx12 = moe_json("mixtral");
  mx12["num_hidden_layers"] = 12;
  mx12["num_local_experts"] = 2;
  std::vector<std::string> mixtral_order;
  for (const HfTensor& t : hf_state_dict(hf_config_from_json(mx12, "m.json").model, HfArchitecture::Mixtral))
    mixtral_order.push_back(t.name);
  const std::vector<std::string> layer2 = {"model.layers.2.input_layernorm.weight",
                                           "model.layers.2.block_sparse_moe.experts.0.w2.weight",
                                           "model.layers.2.block_sparse_moe.experts.1.w2.weight",
                                           "model.layers.2.block_sparse_moe.experts.0.w1.weight",
                                           "model.layers.2.block_sparse_moe.experts.1.w1.weight",
                                           "model.layers.2.block_sparse_moe.experts.0.w3.weight",
                                           "model.layers.2.block_sparse_moe.experts.1.w3.weight",
                                           "model.layers.2.block_sparse_moe.gate.weight",
                                           "model.layers.2.post_attention_layernorm.weight"};
  const auto at = std::find(mixtral_order.begin(), mixtral_order.end(), layer2.front());
  REQUIRE(at != mixtral_order.end());
  CHECK(std::vector<std::string>(at, at + static_cast<std::ptrdiff_t>(layer2.size())) == layer2);
  // Layer 10 after layer 9, not after layer 1 (numbers compare as numbers).
  const auto index_of = [&](const std::string& n) { return std::find(mixtral_order.begin(), mixtral_order.end(), n); };
  CHECK(index_of("model.layers.9.self_attn.v_proj.weight") < index_of("model.layers.10.input_layernorm.weight"));
  CHECK(index_of("model.layers.11.self_attn.v_proj.weight") < index_of("model.norm.weight"));

  const HfConfig q3 = hf_config_from_json(moe_json("qwen3_moe"), "q3.json");
  std::map<std::string, HfMapping> qwen3;
  for (const HfMapping& m : hf_mappings(q3.model, q3.architecture)) qwen3.emplace(m.param, m);
  CHECK(qwen3.at("decoder.layers.0.self_attention.q_layernorm.weight").tensors.at(0).name ==
        "model.layers.0.self_attn.q_norm.weight");
  CHECK(qwen3.at("decoder.layers.0.self_attention.k_layernorm.weight").shape == std::vector<int64_t>{8});
}

TEST_CASE("The directory reader follows the index and refuses what it cannot read", "[hf]") {
  const fs::path dir = fs::temp_directory_path() / ("ptdp-hf-layout-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6};
  {
    SafetensorsWriter w;
    w.add_from_f32("a", StDType::BF16, {2, 2}, a.data());
    w.write((dir / "model-00001-of-00002.safetensors").string());
    SafetensorsWriter w2;
    w2.add_from_f32("b", StDType::F16, {2}, b.data());
    w2.write((dir / "model-00002-of-00002.safetensors").string());
  }
  const auto index = [&](const json& j) { std::ofstream(dir / "model.safetensors.index.json") << j.dump(); };
  index({{"weight_map", {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}}}});
  HfCheckpointFiles files(dir.string());
  CHECK(files.names() == std::vector<std::string>{"a", "b"});
  CHECK(files.read("a") == a);
  CHECK(files.read("b") == b);
  CHECK(files.info("b").dtype == StDType::F16);

  std::string message;
  index({{"weight_map", {{"a", "model-00002-of-00002.safetensors"}}}});
  CHECK(code_of([&] { HfCheckpointFiles f(dir.string()); }, &message) == ErrorCode::Io);
  CHECK_THAT(message, Catch::Contains("has no tensor 'a'"));
  index({{"weight_map", {{"a", "../elsewhere.safetensors"}}}});
  CHECK(code_of([&] { HfCheckpointFiles f(dir.string()); }, &message) == ErrorCode::Io);
  CHECK_THAT(message, Catch::Contains("not a file beside it"));
  index({{"weight_map", {{"a", "model-00003-of-00003.safetensors"}}}});
  CHECK(code_of([&] { HfCheckpointFiles f(dir.string()); }, &message) == ErrorCode::Io);
  CHECK_THAT(message, Catch::Contains("missing"));
  std::ofstream(dir / "model.safetensors.index.json") << "{not json";
  CHECK(code_of([&] { HfCheckpointFiles f(dir.string()); }, &message) == ErrorCode::Io);
  CHECK_THAT(message, Catch::Contains("is not valid JSON"));
  fs::remove(dir / "model.safetensors.index.json");
  CHECK(code_of([&] { HfCheckpointFiles f(dir.string()); }, &message) == ErrorCode::Io);
  CHECK_THAT(message, Catch::Contains("has neither model.safetensors nor model.safetensors.index.json"));
  fs::remove_all(dir);
}

TEST_CASE("OLMoE: q/k norms across the heads, experts intermediate_size wide, the top k unrenormalised", "[hf]") {
  const HfConfig o = hf_config_from_json(olmoe_json(), "olmoe.json");
  CHECK(o.architecture == HfArchitecture::Olmoe);
  const GptConfig& c = o.model;
  CHECK(c.qk_layernorm);
  CHECK(c.qk_layernorm_across_heads);
  CHECK(c.moe.num_experts == 8);
  CHECK(c.moe.router_topk == 2);
  CHECK(c.moe_ffn() == 96);  // intermediate_size
  CHECK(c.num_moe_layers() == 4);
  CHECK(c.moe.pre_softmax);  // norm_topk_prob false: the top k of the full softmax
  CHECK(c.moe.aux_loss_coeff == 0.02f);
  CHECK(c.head_dim() == 8);
  CHECK(hf_default_architecture(c) == HfArchitecture::Olmoe);
  json renormalised = olmoe_json();
  renormalised["norm_topk_prob"] = true;
  CHECK_FALSE(hf_config_from_json(renormalised, "r.json").model.moe.pre_softmax);

  // Back out: no head_dim, intermediate_size the experts' width, clip_qkv null.
  const json out = hf_config_to_json(c, HfArchitecture::Olmoe, StDType::F32, json::object());
  CHECK(out.at("model_type") == "olmoe");
  CHECK_FALSE(out.contains("head_dim"));
  CHECK_FALSE(out.contains("moe_intermediate_size"));
  CHECK(out.at("intermediate_size") == 96);
  CHECK(out.at("norm_topk_prob") == false);
  CHECK(out.at("clip_qkv").is_null());
  const HfConfig back = hf_config_from_json(out, "out.json");
  CHECK_NOTHROW(check_hf_model_matches(c, back.model, "out.json"));
  const json source = olmoe_json();
  const json kept = hf_config_to_json(c, HfArchitecture::Olmoe, StDType::F32, source);
  for (const auto& [key, value] : source.items()) {
    INFO(key);
    CHECK(kept.at(key) == value);
  }

  // The norms map whole: q_norm [a dh], k_norm [g dh]; the experts as Qwen's.
  std::map<std::string, HfMapping> by_param;
  for (const HfMapping& m : hf_mappings(c, HfArchitecture::Olmoe)) by_param.emplace(m.param, m);
  const HfMapping& q = by_param.at("decoder.layers.0.self_attention.q_layernorm.weight");
  CHECK(q.shape == std::vector<int64_t>{64});
  CHECK(q.layout == HfLayout::Copy);
  CHECK(q.tensors.at(0).name == "model.layers.0.self_attn.q_norm.weight");
  CHECK(by_param.at("decoder.layers.0.self_attention.k_layernorm.weight").tensors.at(0).shape ==
        std::vector<int64_t>{16});
  CHECK(by_param.at("decoder.layers.3.mlp.experts.linear_fc1.weight7").tensors.at(1).name ==
        "model.layers.3.mlp.experts.7.up_proj.weight");
  CHECK(by_param.at("decoder.layers.3.mlp.router.weight").tensors.at(0).name == "model.layers.3.mlp.gate.weight");

  // What OLMoE cannot hold, and per-head norms written as OLMoE or whole ones as Qwen3-MoE.
  const auto refused_as = [](const GptConfig& g, HfArchitecture a, const std::string& words) {
    std::string m;
    CHECK(code_of([&] { check_hf_architecture(g, a); }, &m) == ErrorCode::Unsupported);
    CHECK_THAT(m, Catch::Contains(words));
  };
  const GptConfig q3 = hf_config_from_json(moe_json("qwen3_moe"), "q3.json").model;
  refused_as(q3, HfArchitecture::Olmoe, "--qk-layernorm-across-heads");
  refused_as(c, HfArchitecture::Qwen3Moe, "Qwen3-MoE's q/k norms are over each head");
  refused_as(c, HfArchitecture::Llama, "it is a mixture of experts");
  GptConfig shared = c;
  shared.moe.shared_expert_intermediate_size = 32;
  refused_as(shared, HfArchitecture::Olmoe, "OLMoE has no shared experts");
  GptConfig mixed = c;
  mixed.moe.layer_pattern = {1, 0, 1, 1};
  refused_as(mixed, HfArchitecture::Olmoe, "every OLMoE layer is MoE");
}

TEST_CASE("DeepSeek's interleaved RoPE rows become rotate-half halves per head and come back bit for bit", "[hf]") {
  // Two heads of [nope 2 rows, rope 4 rows], 3 columns: value = head * 100 + row * 10 + col.
  const std::vector<float> in = encoded(0, 2, 6, 3);
  std::vector<float> out(in.size()), back(in.size());
  hf_rope_deinterleave(in.data(), 2, 6, 2, 4, 3, out.data());
  const auto at = [](const std::vector<float>& v, int head, int row) { return v[static_cast<std::size_t>((head * 6 + row) * 3)]; };
  for (int h = 0; h < 2; ++h) {
    CHECK(at(out, h, 0) == h * 100 + 0);  // the nope rows stay
    CHECK(at(out, h, 1) == h * 100 + 10);
    CHECK(at(out, h, 2) == h * 100 + 20);  // rope pairs (2, 3), (4, 5) -> 2, 4 | 3, 5
    CHECK(at(out, h, 3) == h * 100 + 40);
    CHECK(at(out, h, 4) == h * 100 + 30);
    CHECK(at(out, h, 5) == h * 100 + 50);
  }
  hf_rope_interleave_rows(out.data(), 2, 6, 2, 4, 3, back.data());
  CHECK(back == in);
  CHECK(code_of([&] { hf_rope_deinterleave(in.data(), 2, 6, 3, 3, 3, out.data()); }) == ErrorCode::InvalidArgument);

  // The mappings use the permutation only where the rows are interleaved.
  json j = {{"model_type", "deepseek_v3"}, {"vocab_size", 32},   {"hidden_size", 16},  {"intermediate_size", 24},
            {"num_hidden_layers", 2},      {"num_attention_heads", 2}, {"max_position_embeddings", 16},
            {"q_lora_rank", 8},            {"kv_lora_rank", 8},   {"qk_nope_head_dim", 4}, {"qk_rope_head_dim", 4},
            {"v_head_dim", 4},             {"n_routed_experts", 4}, {"num_experts_per_tok", 2},
            {"moe_intermediate_size", 8}, {"n_shared_experts", 1}, {"first_k_dense_replace", 1}, {"n_group", 2},
            {"topk_group", 1}};
  const HfConfig hf = hf_config_from_json(j, "v3.json");
  CHECK(hf.architecture == HfArchitecture::DeepseekV3);
  CHECK(hf.rope_interleave);
  for (const bool interleave : {true, false}) {
    std::map<std::string, HfMapping> by;
    for (const HfMapping& m : hf_mappings(hf.model, hf.architecture, interleave)) by.emplace(m.param, m);
    const HfMapping& q = by.at("decoder.layers.0.self_attention.linear_q_up_proj.weight");
    const HfMapping& kv = by.at("decoder.layers.1.self_attention.linear_kv_down_proj.weight");
    CHECK(q.tensors[0].name == "model.layers.0.self_attn.q_b_proj.weight");
    CHECK(kv.tensors[0].name == "model.layers.1.self_attn.kv_a_proj_with_mqa.weight");
    CHECK(q.layout == (interleave ? HfLayout::MlaQRope : HfLayout::Copy));
    CHECK(kv.layout == (interleave ? HfLayout::MlaKvRope : HfLayout::Copy));
    CHECK(by.at("decoder.layers.1.mlp.router.expert_bias").tensors[0].name ==
          "model.layers.1.mlp.gate.e_score_correction_bias");
    CHECK(by.at("decoder.layers.1.mlp.shared_experts.linear_fc2.weight").tensors[0].name ==
          "model.layers.1.mlp.shared_experts.down_proj.weight");
    CHECK(by.count("decoder.layers.0.mlp.linear_fc1.weight") == 1);  // first_k_dense_replace
  }
  j["rope_interleave"] = false;
  CHECK_FALSE(hf_config_from_json(j, "v3.json").rope_interleave);
  j["model_type"] = "deepseek_v2";
  j["topk_method"] = "group_limited_greedy";
  CHECK(hf_config_from_json(j, "v2.json").rope_interleave);  // V2 always interleaves
}
