// ptdp_gpt_options through the public C API only: the defaults of ptdp_gpt_options_init (the
// Llama family's fields zero, which means the GPT), every field through ptdp_model_create and
// back through ptdp_model_get_options, every bad value refused naming its field with nothing
// created, the model presets listed and filled, and the caller-sized protocol of the getters.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ptdp/ptdp.h"
#include "tests/single_process.h"

namespace {

std::string err() { return ptdp_last_error(); }

// The size ptdp_gpt_options had in 0.2.0 (LP64): a program built against that header.
constexpr std::size_t kGptOptions_0_2 = 88;

ptdp_gpt_options defaults() {
  ptdp_gpt_options o;
  REQUIRE(ptdp_gpt_options_init(&o) == PTDP_SUCCESS);
  return o;
}

// A small GPT: two layers, h = 32, a = 4, V = 64, s = 8, no dropout.
ptdp_gpt_options tiny_gpt() {
  ptdp_gpt_options o = defaults();
  o.num_layers = 2;
  o.hidden_size = 32;
  o.num_attention_heads = 4;
  o.vocab_size = 64;
  o.make_vocab_size_divisible_by = 32;
  o.seq_length = 8;
  o.hidden_dropout = 0.0f;
  o.attention_dropout = 0.0f;
  return o;
}

// The same shape as a Llama: RMSNorm, SwiGLU, RoPE, 2 query groups, no bias, untied.
ptdp_gpt_options tiny_llama() {
  ptdp_gpt_options o = tiny_gpt();
  o.normalization = PTDP_NORMALIZATION_RMSNORM;
  o.swiglu = 1;
  o.ffn_hidden_size = 48;
  o.position_embedding_type = PTDP_POSITION_EMBEDDING_ROPE;
  o.rotary_base = 500000.0;
  o.num_query_groups = 2;
  o.disable_bias_linear = 1;
  o.untie_embeddings_and_output_weights = 1;
  o.layernorm_epsilon = 1e-6f;
  return o;
}

// Every Llama-family field away from its default (qk norms, qkv bias, partial rotation with
// Llama 3.1 scaling, an explicit head dim).
ptdp_gpt_options every_field() {
  ptdp_gpt_options o = tiny_llama();
  o.rotary_percent = 0.5f;
  o.use_rope_scaling = 1;
  o.rope_scaling_factor = 16.0f;
  o.rope_low_freq_factor = 2.0f;
  o.rope_high_freq_factor = 8.0f;
  o.rope_original_max_position_embeddings = 4096;
  o.kv_channels = 12;
  o.add_qkv_bias = 1;
  o.qk_layernorm = 1;
  return o;
}

struct Model {
  ptdp_model m = nullptr;
  Model(ptdp_groups g, const ptdp_gpt_options& o) {
    const ptdp_status s = ptdp_model_create(g, &o, &m);
    INFO(err());
    REQUIRE(s == PTDP_SUCCESS);
  }
  ~Model() { ptdp_model_destroy(m); }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  ptdp_gpt_options options() const {
    ptdp_gpt_options o = defaults();
    const ptdp_status s = ptdp_model_get_options(m, &o);
    INFO(err());
    REQUIRE(s == PTDP_SUCCESS);
    CHECK(o.struct_size == sizeof(ptdp_gpt_options));
    return o;
  }
  bool has_param(const std::string& name) const {
    int32_t n = 0;
    REQUIRE(ptdp_model_num_params(m, &n) == PTDP_SUCCESS);
    char buffer[256];
    for (int32_t i = 0; i < n; ++i) {
      REQUIRE(ptdp_model_param_info(m, i, buffer, sizeof buffer, nullptr, nullptr, nullptr) == PTDP_SUCCESS);
      if (name == buffer) return true;
    }
    return false;
  }
  std::vector<int64_t> shape(const std::string& name) const {
    int32_t n = 0;
    REQUIRE(ptdp_model_num_params(m, &n) == PTDP_SUCCESS);
    char buffer[256];
    for (int32_t i = 0; i < n; ++i) {
      int32_t ndim = 0;
      int64_t dims[2] = {0, 0};
      REQUIRE(ptdp_model_param_info(m, i, buffer, sizeof buffer, &ndim, dims, nullptr) == PTDP_SUCCESS);
      if (name == buffer) return std::vector<int64_t>(dims, dims + ndim);
    }
    return {};
  }
};

std::vector<std::string> preset_names() {
  int32_t count = 0;
  REQUIRE(ptdp_model_preset_count(&count) == PTDP_SUCCESS);
  std::vector<std::string> names;
  for (int32_t i = 0; i < count; ++i) {
    size_t length = 0;
    CHECK(ptdp_model_preset_name(i, nullptr, 0, &length) == PTDP_ERR_INVALID_ARGUMENT);
    std::string name(length + 1, '\0');
    REQUIRE(ptdp_model_preset_name(i, name.data(), name.size(), &length) == PTDP_SUCCESS);
    name.resize(length);
    names.push_back(name);
  }
  return names;
}

// Every field of the struct, compared one by one (a failure names the field).
void check_same(const ptdp_gpt_options& a, const ptdp_gpt_options& b) {
#define SAME(f)   \
  do {            \
    INFO(#f);     \
    CHECK(a.f == b.f); \
  } while (0)
  SAME(num_layers);
  SAME(hidden_size);
  SAME(num_attention_heads);
  SAME(ffn_hidden_size);
  SAME(vocab_size);
  SAME(make_vocab_size_divisible_by);
  SAME(seq_length);
  SAME(max_position_embeddings);
  SAME(hidden_dropout);
  SAME(attention_dropout);
  SAME(init_method_std);
  SAME(layernorm_epsilon);
  SAME(untie_embeddings_and_output_weights);
  SAME(recompute_granularity);
  SAME(seed);
  SAME(device);
  SAME(precision);
  SAME(attention);
  SAME(rotary_base);
  SAME(normalization);
  SAME(swiglu);
  SAME(position_embedding_type);
  SAME(rotary_percent);
  SAME(use_rope_scaling);
  SAME(rope_scaling_factor);
  SAME(rope_low_freq_factor);
  SAME(rope_high_freq_factor);
  SAME(rope_original_max_position_embeddings);
  SAME(num_query_groups);
  SAME(kv_channels);
  SAME(disable_bias_linear);
  SAME(add_qkv_bias);
  SAME(qk_layernorm);
  SAME(qk_layernorm_across_heads);
  SAME(rope_type);
  SAME(rotary_scaling_factor);
  SAME(mscale);
  SAME(mscale_all_dim);
  SAME(original_max_position_embeddings);
  SAME(beta_fast);
  SAME(beta_slow);
  SAME(yarn_no_round_to_int);
#undef SAME
}

// YaRN's zeros as a model gives them back: Megatron's defaults.
void resolve_yarn(ptdp_gpt_options& o) {
  o.rotary_scaling_factor = 1.0f;
  o.mscale = 1.0f;
  o.original_max_position_embeddings = 4096;
  o.beta_fast = 32.0f;
  o.beta_slow = 1.0f;
}

}  // namespace

TEST_CASE("gpt options: init fills the GPT's defaults, the Llama fields zero", "[capi][model]") {
  ptdp_gpt_options o;
  std::memset(static_cast<void*>(&o), 0x5a, sizeof o);
  REQUIRE(ptdp_gpt_options_init(&o) == PTDP_SUCCESS);
  CHECK(o.struct_size == sizeof(ptdp_gpt_options));
  CHECK(o.num_layers == 2);
  CHECK(o.hidden_size == 64);
  CHECK(o.num_attention_heads == 4);
  CHECK(o.ffn_hidden_size == 0);
  CHECK(o.layernorm_epsilon == 1e-5f);
  CHECK(o.untie_embeddings_and_output_weights == 0);
  // Each zero means the GPT's behaviour (so the tail a program leaves as init set it is zero).
  CHECK(o.rotary_base == 0.0);
  CHECK(o.normalization == PTDP_NORMALIZATION_LAYERNORM);
  CHECK(o.swiglu == 0);
  CHECK(o.position_embedding_type == PTDP_POSITION_EMBEDDING_LEARNED_ABSOLUTE);
  CHECK(o.rotary_percent == 0.0f);
  CHECK(o.use_rope_scaling == 0);
  CHECK(o.rope_scaling_factor == 0.0f);
  CHECK(o.rope_low_freq_factor == 0.0f);
  CHECK(o.rope_high_freq_factor == 0.0f);
  CHECK(o.rope_original_max_position_embeddings == 0);
  CHECK(o.num_query_groups == 0);
  CHECK(o.kv_channels == 0);
  CHECK(o.disable_bias_linear == 0);
  CHECK(o.add_qkv_bias == 0);
  CHECK(o.qk_layernorm == 0);
  CHECK(o.qk_layernorm_across_heads == 0);
  const auto* bytes = reinterpret_cast<const unsigned char*>(&o);
  for (std::size_t i = offsetof(ptdp_gpt_options, rotary_base); i < sizeof o; ++i) {
    INFO("byte " << i);
    CHECK(bytes[i] == 0);
  }
  // 0.2's struct ended at 88 bytes (its last 4 padding); the new fields start there.
  CHECK(offsetof(ptdp_gpt_options, rotary_base) == kGptOptions_0_2);
  CHECK(ptdp_gpt_options_init(nullptr) == PTDP_ERR_INVALID_ARGUMENT);
}

TEST_CASE("gpt options: a model gives back its options, the defaults resolved", "[capi][model]") {
  sp::World w;
  const ptdp_gpt_options gpt = tiny_gpt();
  const Model m(w.groups, gpt);
  const ptdp_gpt_options got = m.options();
  ptdp_gpt_options want = gpt;
  want.rotary_base = 10000.0;
  want.rotary_percent = 1.0f;
  want.rope_scaling_factor = 8.0f;
  want.rope_low_freq_factor = 1.0f;
  want.rope_high_freq_factor = 4.0f;
  want.rope_original_max_position_embeddings = 8192;
  resolve_yarn(want);
  check_same(got, want);
  CHECK(m.has_param("embedding.position_embeddings.weight"));
  CHECK(m.has_param("decoder.layers.0.self_attention.linear_qkv.bias"));

  // The resolved options build the same model.
  const Model again(w.groups, got);
  check_same(again.options(), got);
}

TEST_CASE("gpt options: every Llama field through ptdp_model_create and back", "[capi][model]") {
  sp::World w;
  SECTION("a Llama: RMSNorm, SwiGLU, RoPE, grouped-query attention, no bias, untied") {
    const ptdp_gpt_options o = tiny_llama();
    const Model m(w.groups, o);
    ptdp_gpt_options want = o;
    want.rotary_percent = 1.0f;
    want.rope_scaling_factor = 8.0f;
    want.rope_low_freq_factor = 1.0f;
    want.rope_high_freq_factor = 4.0f;
    want.rope_original_max_position_embeddings = 8192;
    resolve_yarn(want);
    check_same(m.options(), want);
    // Megatron-Core's names and layouts: no position table, [(a + 2g) dh, h] qkv, [2 ffn, h]
    // fc1, no biases, RMSNorm without bias, a separate LM head.
    CHECK_FALSE(m.has_param("embedding.position_embeddings.weight"));
    CHECK(m.shape("decoder.layers.0.self_attention.linear_qkv.weight") == std::vector<int64_t>{(4 + 2 * 2) * 8, 32});
    CHECK(m.shape("decoder.layers.0.mlp.linear_fc1.weight") == std::vector<int64_t>{2 * 48, 32});
    CHECK_FALSE(m.has_param("decoder.layers.0.self_attention.linear_qkv.bias"));
    CHECK_FALSE(m.has_param("decoder.layers.0.mlp.linear_fc2.bias"));
    CHECK_FALSE(m.has_param("decoder.final_layernorm.bias"));
    CHECK(m.has_param("output_layer.weight"));
  }
  SECTION("every field away from its default") {
    ptdp_gpt_options o = every_field();
    resolve_yarn(o);
    const Model m(w.groups, o);
    check_same(m.options(), o);
    CHECK(m.shape("decoder.layers.0.self_attention.linear_qkv.weight") == std::vector<int64_t>{(4 + 2 * 2) * 12, 32});
    CHECK(m.shape("decoder.layers.0.self_attention.linear_proj.weight") == std::vector<int64_t>{32, 4 * 12});
    CHECK(m.has_param("decoder.layers.0.self_attention.linear_qkv.bias"));  // --add-qkv-bias
    CHECK_FALSE(m.has_param("decoder.layers.0.self_attention.linear_proj.bias"));
  }
  SECTION("q/k norms across the heads (OLMo 2, OLMoE): weights over the whole projections") {
    ptdp_gpt_options o = tiny_llama();
    o.qk_layernorm = 1;
    o.qk_layernorm_across_heads = 1;
    const Model m(w.groups, o);
    CHECK(m.options().qk_layernorm_across_heads == 1);
    CHECK(m.shape("decoder.layers.0.self_attention.q_layernorm.weight") == std::vector<int64_t>{4 * 8});
    CHECK(m.shape("decoder.layers.0.self_attention.k_layernorm.weight") == std::vector<int64_t>{2 * 8});
  }
  SECTION("YaRN: every field through the model and back, refused with Llama 3.1's scaling") {
    ptdp_gpt_options o = tiny_llama();
    o.rope_type = PTDP_ROPE_TYPE_YARN;
    o.rotary_scaling_factor = 40.0f;
    o.mscale = 0.707f;
    o.mscale_all_dim = 0.8f;
    o.original_max_position_embeddings = 1024;
    o.beta_fast = 16.0f;
    o.beta_slow = 2.0f;
    o.yarn_no_round_to_int = 1;
    const Model m(w.groups, o);
    ptdp_gpt_options want = o;
    want.rotary_percent = 1.0f;
    want.rope_scaling_factor = 8.0f;
    want.rope_low_freq_factor = 1.0f;
    want.rope_high_freq_factor = 4.0f;
    want.rope_original_max_position_embeddings = 8192;
    check_same(m.options(), want);
    const Model again(w.groups, m.options());
    check_same(again.options(), want);
    o.use_rope_scaling = 1;
    ptdp_model bad = nullptr;
    CHECK(ptdp_model_create(w.groups, &o, &bad) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK_THAT(err(), Catch::Contains("--use-rope-scaling"));
    CHECK(bad == nullptr);
  }
  SECTION("multi-query attention and no position information") {
    ptdp_gpt_options o = tiny_gpt();
    o.num_query_groups = 1;
    o.position_embedding_type = PTDP_POSITION_EMBEDDING_NONE;
    const Model m(w.groups, o);
    CHECK(m.options().num_query_groups == 1);
    CHECK(m.options().position_embedding_type == PTDP_POSITION_EMBEDDING_NONE);
    CHECK(m.shape("decoder.layers.0.self_attention.linear_qkv.weight") == std::vector<int64_t>{(4 + 2) * 8, 32});
    CHECK_FALSE(m.has_param("embedding.position_embeddings.weight"));
  }
}

TEST_CASE("gpt options: bad values are refused naming the field, nothing created", "[capi][model]") {
  sp::World w;
  struct Bad {
    const char* field;
    void (*set)(ptdp_gpt_options&);
  };
  const std::vector<Bad> cases = {
      {"options->normalization", [](ptdp_gpt_options& o) { o.normalization = static_cast<ptdp_normalization>(2); }},
      {"options->normalization", [](ptdp_gpt_options& o) { o.normalization = static_cast<ptdp_normalization>(-1); }},
      {"options->position_embedding_type",
       [](ptdp_gpt_options& o) { o.position_embedding_type = static_cast<ptdp_position_embedding>(3); }},
      {"options->swiglu", [](ptdp_gpt_options& o) { o.swiglu = 2; }},
      {"options->use_rope_scaling", [](ptdp_gpt_options& o) { o.use_rope_scaling = -1; }},
      {"options->disable_bias_linear", [](ptdp_gpt_options& o) { o.disable_bias_linear = 2; }},
      {"options->add_qkv_bias", [](ptdp_gpt_options& o) { o.add_qkv_bias = 7; }},
      {"options->qk_layernorm", [](ptdp_gpt_options& o) { o.qk_layernorm = 2; }},
      {"options->qk_layernorm_across_heads", [](ptdp_gpt_options& o) { o.qk_layernorm_across_heads = 2; }},
      {"--qk-layernorm-across-heads changes the q/k norms of --qk-layernorm, which is not set",
       [](ptdp_gpt_options& o) { o.qk_layernorm_across_heads = 1; }},
      {"--qk-layernorm-across-heads needs --normalization RMSNorm", [](ptdp_gpt_options& o) {
         o.qk_layernorm = 1;
         o.qk_layernorm_across_heads = 1;
       }},
      {"options->rotary_base", [](ptdp_gpt_options& o) { o.rotary_base = -1.0; }},
      {"options->rotary_base", [](ptdp_gpt_options& o) { o.rotary_base = std::numeric_limits<double>::quiet_NaN(); }},
      {"options->rotary_base", [](ptdp_gpt_options& o) { o.rotary_base = 1e300; }},
      {"options->rotary_percent", [](ptdp_gpt_options& o) { o.rotary_percent = 1.5f; }},
      {"options->rotary_percent", [](ptdp_gpt_options& o) { o.rotary_percent = -0.25f; }},
      {"options->rope_scaling_factor", [](ptdp_gpt_options& o) { o.rope_scaling_factor = 0.5f; }},
      {"options->rope_scaling_factor", [](ptdp_gpt_options& o) { o.rope_scaling_factor = -8.0f; }},
      {"options->rope_low_freq_factor", [](ptdp_gpt_options& o) { o.rope_low_freq_factor = -1.0f; }},
      {"options->rope_high_freq_factor",
       [](ptdp_gpt_options& o) { o.rope_high_freq_factor = std::numeric_limits<float>::quiet_NaN(); }},
      {"options->rope_original_max_position_embeddings",
       [](ptdp_gpt_options& o) { o.rope_original_max_position_embeddings = -1; }},
      {"options->num_query_groups", [](ptdp_gpt_options& o) { o.num_query_groups = -2; }},
      {"options->kv_channels", [](ptdp_gpt_options& o) { o.kv_channels = -1; }},
      // Valid fields that do not fit together: the core names them (with Megatron's flags).
      {"num_query_groups", [](ptdp_gpt_options& o) { o.num_query_groups = 3; }},
      {"rotary", [](ptdp_gpt_options& o) {
         o.position_embedding_type = PTDP_POSITION_EMBEDDING_ROPE;
         o.kv_channels = 7;
       }},
      {"use_rope_scaling", [](ptdp_gpt_options& o) { o.use_rope_scaling = 1; }},
      {"options->rope_type", [](ptdp_gpt_options& o) { o.rope_type = static_cast<ptdp_rope_type>(2); }},
      {"options->rotary_scaling_factor", [](ptdp_gpt_options& o) { o.rotary_scaling_factor = -4.0f; }},
      {"options->mscale", [](ptdp_gpt_options& o) { o.mscale = std::numeric_limits<float>::quiet_NaN(); }},
      {"options->mscale_all_dim", [](ptdp_gpt_options& o) { o.mscale_all_dim = -1.0f; }},
      {"options->original_max_position_embeddings",
       [](ptdp_gpt_options& o) { o.original_max_position_embeddings = -1; }},
      {"options->beta_fast", [](ptdp_gpt_options& o) { o.beta_fast = -32.0f; }},
      {"options->beta_slow", [](ptdp_gpt_options& o) { o.beta_slow = -1.0f; }},
      {"options->yarn_no_round_to_int", [](ptdp_gpt_options& o) { o.yarn_no_round_to_int = 2; }},
      {"rope_type yarn (--rope-type yarn) needs position_embedding_type rope",
       [](ptdp_gpt_options& o) { o.rope_type = PTDP_ROPE_TYPE_YARN; }},
      {"--beta-fast", [](ptdp_gpt_options& o) {
         o.position_embedding_type = PTDP_POSITION_EMBEDDING_ROPE;
         o.rope_type = PTDP_ROPE_TYPE_YARN;
         o.beta_fast = 0.5f;
       }},
      {"--mscale-all-dim", [](ptdp_gpt_options& o) {
         o.position_embedding_type = PTDP_POSITION_EMBEDDING_ROPE;
         o.rope_type = PTDP_ROPE_TYPE_YARN;
         o.mscale = 0.707f;
       }},
  };
  for (const Bad& b : cases) {
    INFO(b.field);
    ptdp_gpt_options o = tiny_gpt();
    b.set(o);
    unsigned char sentinel = 0;
    const auto untouched = reinterpret_cast<ptdp_model>(&sentinel);
    ptdp_model m = untouched;
    CHECK(ptdp_model_create(w.groups, &o, &m) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(m == untouched);
    const std::string message = err();
    INFO(message);
    CHECK_THAT(message, Catch::Contains("ptdp_model_create"));
    CHECK_THAT(message, Catch::Contains(b.field));
    // The other entry points that read the struct refuse its fields the same way.
    if (std::string(b.field).rfind("options->", 0) == 0) {
      double flops = -1;
      CHECK(ptdp_gpt_flops(&o, 8, &flops, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
      CHECK_THAT(err(), Catch::Contains(b.field));
      CHECK(flops == -1);
    }
  }
  // A GQA model that does not split over t = 2 (needs two ranks) is the core's business; its
  // message is checked with the core's tests.
}

TEST_CASE("gpt options: the presets are listed and fill the options", "[capi][model]") {
  const std::vector<std::string> names = preset_names();
  REQUIRE(names.size() >= 2);
  for (const std::string& n : names) {
    INFO(n);
    ptdp_gpt_options o = defaults();
    REQUIRE(ptdp_gpt_options_from_preset(n.c_str(), &o) == PTDP_SUCCESS);
    CHECK(o.struct_size == sizeof(ptdp_gpt_options));
    CHECK(o.num_layers > 0);
    CHECK(o.hidden_size > 0);
    CHECK(o.vocab_size > 0);
    double flops = 0;
    CHECK(ptdp_gpt_flops(&o, 1, &flops, nullptr) == PTDP_SUCCESS);
    CHECK(flops > 0);
  }
  REQUIRE(std::find(names.begin(), names.end(), "llama-3.2-1b") != names.end());
  REQUIRE(std::find(names.begin(), names.end(), "gpt2-124m") != names.end());

  // Llama 3.2 1B as Hugging Face's config.json publishes it.
  ptdp_gpt_options llama = defaults();
  REQUIRE(ptdp_gpt_options_from_preset("LLaMA-3.2-1B", &llama) == PTDP_SUCCESS);  // any case
  CHECK(llama.num_layers == 16);
  CHECK(llama.hidden_size == 2048);
  CHECK(llama.num_attention_heads == 32);
  CHECK(llama.num_query_groups == 8);
  CHECK(llama.ffn_hidden_size == 8192);
  CHECK(llama.vocab_size == 128256);
  CHECK(llama.normalization == PTDP_NORMALIZATION_RMSNORM);
  CHECK(llama.swiglu == 1);
  CHECK(llama.position_embedding_type == PTDP_POSITION_EMBEDDING_ROPE);
  CHECK(llama.rotary_base == 500000.0);
  CHECK(llama.use_rope_scaling == 1);
  CHECK(llama.rope_scaling_factor == 32.0f);
  CHECK(llama.disable_bias_linear == 1);
  CHECK(llama.untie_embeddings_and_output_weights == 0);
  ptdp_gpt_options gpt2 = defaults();
  REQUIRE(ptdp_gpt_options_from_preset("gpt2-124m", &gpt2) == PTDP_SUCCESS);
  CHECK(gpt2.hidden_size == 768);
  CHECK(gpt2.normalization == PTDP_NORMALIZATION_LAYERNORM);
  CHECK(gpt2.position_embedding_type == PTDP_POSITION_EMBEDDING_LEARNED_ABSOLUTE);
  CHECK(gpt2.disable_bias_linear == 0);

  SECTION("an unknown name is refused, naming it and every preset") {
    ptdp_gpt_options o = defaults();
    const ptdp_gpt_options before = o;
    CHECK(ptdp_gpt_options_from_preset("llama-9", &o) == PTDP_ERR_INVALID_ARGUMENT);
    const std::string m = err();
    CHECK_THAT(m, Catch::Contains("ptdp_gpt_options_from_preset"));
    CHECK_THAT(m, Catch::Contains("'llama-9'"));
    for (const std::string& n : names) CHECK_THAT(m, Catch::Contains(n));
    CHECK(std::memcmp(&o, &before, sizeof o) == 0);
    CHECK(ptdp_gpt_options_from_preset(nullptr, &o) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK_THAT(err(), Catch::Contains("name"));
    CHECK(ptdp_gpt_options_from_preset("gpt2-124m", nullptr) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK_THAT(err(), Catch::Contains("options"));
  }
  SECTION("the name getters' arguments") {
    size_t length = 0;
    CHECK(ptdp_model_preset_count(nullptr) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(ptdp_model_preset_name(-1, nullptr, 0, &length) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK_THAT(err(), Catch::Contains("index = -1"));
    CHECK(ptdp_model_preset_name(static_cast<int32_t>(names.size()), nullptr, 0, &length) ==
          PTDP_ERR_INVALID_ARGUMENT);
    CHECK(ptdp_model_preset_name(0, nullptr, 0, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK_THAT(err(), Catch::Contains("length"));
    std::string small(names[0].size(), 'x');  // no room for the NUL
    CHECK(ptdp_model_preset_name(0, small.data(), small.size(), &length) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(length == names[0].size());
    CHECK(small == std::string(names[0].size(), 'x'));
  }
}

TEST_CASE("gpt options: getters write only the caller's struct_size", "[capi][model][abi]") {
  sp::World w;
  const Model gpt(w.groups, tiny_gpt());
  const Model llama(w.groups, tiny_llama());
  // A struct as a program built against 0.2 has it: 88 bytes, then memory that is not its own.
  struct Old {
    ptdp_gpt_options o;
    unsigned char beyond[8];
  };
  const auto old_struct = [] {
    Old s;
    std::memset(static_cast<void*>(&s), 0xcd, sizeof s);
    s.o.struct_size = kGptOptions_0_2;
    return s;
  };
  const auto untouched_beyond = [](const Old& s) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(&s.o);
    for (std::size_t i = kGptOptions_0_2; i < sizeof s.o; ++i) {
      if (bytes[i] != 0xcd) return false;
    }
    return true;
  };
  // A GPT fits 0.2's struct: 88 bytes written, struct_size says so.
  Old s = old_struct();
  REQUIRE(ptdp_model_get_options(gpt.m, &s.o) == PTDP_SUCCESS);
  CHECK(s.o.struct_size == kGptOptions_0_2);
  CHECK(s.o.hidden_size == 32);
  CHECK(untouched_beyond(s));
  s = old_struct();
  REQUIRE(ptdp_gpt_options_from_preset("gpt2-124m", &s.o) == PTDP_SUCCESS);
  CHECK(s.o.hidden_size == 768);
  CHECK(untouched_beyond(s));
  // A Llama does not: refused naming the first field 0.2's struct lacks, nothing written.
  s = old_struct();
  CHECK(ptdp_model_get_options(llama.m, &s.o) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("options->struct_size = 88"));
  CHECK_THAT(err(), Catch::Contains("rotary_base"));
  CHECK(s.o.hidden_size == static_cast<int32_t>(0xcdcdcdcd));
  s = old_struct();
  CHECK(ptdp_gpt_options_from_preset("llama-3.2-1b", &s.o) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("options->struct_size = 88"));
  // A size below the first published one, and NULL.
  ptdp_gpt_options o = defaults();
  o.struct_size = 71;
  CHECK(ptdp_model_get_options(gpt.m, &o) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("options->struct_size = 71"));
  o.struct_size = 0;
  CHECK(ptdp_gpt_options_from_preset("gpt2-124m", &o) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_model_get_options(gpt.m, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_model_get_options(nullptr, &o) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("model"));
  // A larger struct (a newer header's) gets this library's size.
  struct Newer {
    ptdp_gpt_options o;
    unsigned char more[16];
  } n;
  std::memset(static_cast<void*>(&n), 0, sizeof n);
  n.o.struct_size = sizeof n;
  REQUIRE(ptdp_model_get_options(llama.m, &n.o) == PTDP_SUCCESS);
  CHECK(n.o.struct_size == sizeof(ptdp_gpt_options));
  CHECK(n.o.swiglu == 1);
}
