// Multi-latent attention through the public C API only: its ptdp_gpt_options fields (zero by
// default, no MLA), a model built with and without query compression, its parameters' names and
// shapes, its options read back with Megatron's defaults resolved, the refusals naming the
// fields and flags, a checkpoint's round trip (its metadata names the MLA sizes), and generation with the latent cache against recomputing the whole window.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <string>

#include <unistd.h>
#include <vector>

#include "ptdp/ptdp.h"
#include "tests/single_process.h"

namespace {

std::string err() { return ptdp_last_error(); }

// A tiny DeepSeek-shaped model: 2 layers, h 16, 4 heads, RMSNorm, SwiGLU, RoPE, no biases,
// untied, MLA with its latent norms.
ptdp_gpt_options tiny_mla(int32_t q_lora_rank) {
  ptdp_gpt_options o;
  REQUIRE(ptdp_gpt_options_init(&o) == PTDP_SUCCESS);
  o.num_layers = 2;
  o.hidden_size = 16;
  o.num_attention_heads = 4;
  o.ffn_hidden_size = 32;
  o.vocab_size = 64;
  o.make_vocab_size_divisible_by = 32;
  o.seq_length = 8;
  o.hidden_dropout = 0.0f;
  o.attention_dropout = 0.0f;
  o.init_method_std = 0.2f;
  o.normalization = PTDP_NORMALIZATION_RMSNORM;
  o.swiglu = 1;
  o.position_embedding_type = PTDP_POSITION_EMBEDDING_ROPE;
  o.disable_bias_linear = 1;
  o.untie_embeddings_and_output_weights = 1;
  o.qk_layernorm = 1;
  o.multi_latent_attention = 1;
  o.q_lora_rank = q_lora_rank;
  o.kv_lora_rank = 6;
  o.qk_head_dim = 4;
  o.qk_pos_emb_head_dim = 2;
  o.v_head_dim = 3;
  return o;
}

struct Model {
  ptdp_model m = nullptr;
  Model(ptdp_groups g, const ptdp_gpt_options& o) { REQUIRE(ptdp_model_create(g, &o, &m) == PTDP_SUCCESS); }
  ~Model() { ptdp_model_destroy(m); }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
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
  ptdp_gpt_options options() const {
    ptdp_gpt_options o;
    REQUIRE(ptdp_gpt_options_init(&o) == PTDP_SUCCESS);
    REQUIRE(ptdp_model_get_options(m, &o) == PTDP_SUCCESS);
    return o;
  }
};

std::string refusal(ptdp_groups groups, const ptdp_gpt_options& o) {
  ptdp_model m = nullptr;
  CHECK(ptdp_model_create(groups, &o, &m) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(m == nullptr);
  return err();
}

const std::string kAttn = "decoder.layers.1.self_attention.";

}  // namespace

TEST_CASE("mla options: init leaves every MLA field zero, no MLA", "[capi][mla]") {
  ptdp_gpt_options o;
  std::memset(static_cast<void*>(&o), 0x5a, sizeof o);
  REQUIRE(ptdp_gpt_options_init(&o) == PTDP_SUCCESS);
  CHECK(o.multi_latent_attention == 0);
  CHECK(o.q_lora_rank == 0);
  CHECK(o.kv_lora_rank == 0);
  CHECK(o.qk_head_dim == 0);
  CHECK(o.qk_pos_emb_head_dim == 0);
  CHECK(o.v_head_dim == 0);
}

TEST_CASE("mla options: a model with Megatron-Core's MLA parameters, its options read back", "[capi][mla]") {
  sp::World w;
  SECTION("with query compression") {
    const Model m(w.groups, tiny_mla(5));
    CHECK(m.shape(kAttn + "linear_q_down_proj.weight") == std::vector<int64_t>{5, 16});
    CHECK(m.shape(kAttn + "q_layernorm.weight") == std::vector<int64_t>{5});
    CHECK(m.shape(kAttn + "linear_q_up_proj.weight") == std::vector<int64_t>{4 * 6, 5});
    CHECK(m.shape(kAttn + "linear_q_proj.weight").empty());
    CHECK(m.shape(kAttn + "linear_kv_down_proj.weight") == std::vector<int64_t>{6 + 2, 16});
    CHECK(m.shape(kAttn + "kv_layernorm.weight") == std::vector<int64_t>{6});
    CHECK(m.shape(kAttn + "linear_kv_up_proj.weight") == std::vector<int64_t>{4 * (4 + 3), 6});
    CHECK(m.shape(kAttn + "linear_proj.weight") == std::vector<int64_t>{16, 4 * 3});
    CHECK(m.shape(kAttn + "linear_qkv.weight").empty());
    const ptdp_gpt_options got = m.options();
    CHECK(got.multi_latent_attention == 1);
    CHECK(got.q_lora_rank == 5);
    CHECK(got.kv_lora_rank == 6);
    CHECK(got.qk_head_dim == 4);
    CHECK(got.qk_pos_emb_head_dim == 2);
    CHECK(got.v_head_dim == 3);
  }
  SECTION("without query compression, Megatron's default sizes, no latent norms") {
    ptdp_gpt_options o = tiny_mla(0);
    o.qk_layernorm = 0;
    o.kv_lora_rank = o.qk_head_dim = o.qk_pos_emb_head_dim = o.v_head_dim = 0;  // 32, 128, 64, 128
    o.hidden_size = 32;
    const Model m(w.groups, o);
    CHECK(m.shape(kAttn + "linear_q_proj.weight") == std::vector<int64_t>{4 * 192, 32});
    CHECK(m.shape(kAttn + "linear_q_down_proj.weight").empty());
    CHECK(m.shape(kAttn + "linear_kv_down_proj.weight") == std::vector<int64_t>{32 + 64, 32});
    CHECK(m.shape(kAttn + "kv_layernorm.weight").empty());
    CHECK(m.shape(kAttn + "linear_kv_up_proj.weight") == std::vector<int64_t>{4 * 256, 32});
    const ptdp_gpt_options got = m.options();
    CHECK(got.q_lora_rank == 0);
    CHECK(got.kv_lora_rank == 32);
    CHECK(got.qk_head_dim == 128);
    CHECK(got.qk_pos_emb_head_dim == 64);
    CHECK(got.v_head_dim == 128);
    // The resolved options build the same model.
    const Model again(w.groups, got);
    CHECK(again.shape(kAttn + "linear_kv_up_proj.weight") == std::vector<int64_t>{4 * 256, 32});
  }
  SECTION("a model without MLA reads back zeros") {
    ptdp_gpt_options o = tiny_mla(0);
    o.multi_latent_attention = 0;
    const Model m(w.groups, o);
    const ptdp_gpt_options got = m.options();
    CHECK(got.multi_latent_attention == 0);
    CHECK(got.kv_lora_rank == 0);
    CHECK(got.v_head_dim == 0);
    CHECK(m.shape(kAttn + "linear_qkv.weight") == std::vector<int64_t>{3 * 16, 16});
  }
}

TEST_CASE("mla options: refusals name the field or Megatron's flag, nothing created", "[capi][mla]") {
  sp::World w;
  struct Bad {
    const char* says;
    void (*set)(ptdp_gpt_options&);
  };
  const std::vector<Bad> cases = {
      {"options->multi_latent_attention = 2", [](ptdp_gpt_options& o) { o.multi_latent_attention = 2; }},
      {"options->q_lora_rank = -1", [](ptdp_gpt_options& o) { o.q_lora_rank = -1; }},
      {"options->kv_lora_rank = -4", [](ptdp_gpt_options& o) { o.kv_lora_rank = -4; }},
      {"options->v_head_dim = -1", [](ptdp_gpt_options& o) { o.v_head_dim = -1; }},
      {"--multi-latent-attention needs position_embedding_type rope",
       [](ptdp_gpt_options& o) { o.position_embedding_type = PTDP_POSITION_EMBEDDING_LEARNED_ABSOLUTE; }},
      {"num_query_groups (--num-query-groups) 2 must be unset or num_attention_heads 4",
       [](ptdp_gpt_options& o) { o.num_query_groups = 2; }},
      {"v_head_dim (--v-head-dim) 7 exceeds qk_head_dim + qk_pos_emb_head_dim 6",
       [](ptdp_gpt_options& o) { o.v_head_dim = 7; }},
      {"qk_pos_emb_head_dim (--qk-pos-emb-head-dim) 3 times rotary_percent",
       [](ptdp_gpt_options& o) { o.qk_pos_emb_head_dim = 3; }},
      {"--qk-layernorm-across-heads does not apply to --multi-latent-attention",
       [](ptdp_gpt_options& o) { o.qk_layernorm_across_heads = 1; }},
  };
  for (const Bad& b : cases) {
    ptdp_gpt_options o = tiny_mla(5);
    b.set(o);
    INFO(b.says);
    CHECK_THAT(refusal(w.groups, o), Catch::Contains(b.says));
  }
}

TEST_CASE("mla generation: the latent cache draws the tokens of recomputing the whole window", "[capi][mla]") {
  sp::World w;
  for (const int32_t rq : {0, 5}) {
    const Model m(w.groups, tiny_mla(rq));
    const std::vector<int32_t> prompt{3, 1, 4, 1, 5};
    ptdp_generate_options o;
    REQUIRE(ptdp_generate_options_init(&o) == PTDP_SUCCESS);
    o.max_new_tokens = 12;  // past the context of 8: the window slides
    for (const int32_t top_k : {1, 5}) {
      o.top_k = top_k;
      o.temperature = 0.8f;
      o.seed = 7;
      std::vector<int32_t> cached(12, -1), recomputed(12, -1);
      int32_t count = 0;
      o.no_kv_cache = 0;
      REQUIRE(ptdp_model_generate(m.m, prompt.data(), 5, &o, cached.data(), 12, &count) == PTDP_SUCCESS);
      CHECK(count == 12);
      o.no_kv_cache = 1;
      REQUIRE(ptdp_model_generate(m.m, prompt.data(), 5, &o, recomputed.data(), 12, &count) == PTDP_SUCCESS);
      INFO("q_lora_rank " << rq << ", top_k " << top_k);
      CHECK(cached == recomputed);
    }
  }
}

TEST_CASE("mla checkpoint: saved and loaded, the options read back, another latent width refused", "[capi][mla]") {
  sp::World w;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ptdp-mla-checkpoint-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const ptdp_gpt_options o = tiny_mla(5);
  const std::string up = kAttn + "linear_kv_up_proj.weight";
  std::vector<float> want(4 * 7 * 6), got(want.size());
  {
    const Model saved(w.groups, o);
    REQUIRE(ptdp_model_get_param(saved.m, up.c_str(), want.data(), want.size() * 4) == PTDP_SUCCESS);
    ptdp_checkpoint_state st;
    REQUIRE(ptdp_checkpoint_state_init(&st) == PTDP_SUCCESS);
    st.iteration = 3;
    REQUIRE(ptdp_checkpoint_save(dir.string().c_str(), saved.m, nullptr, nullptr, &st) == PTDP_SUCCESS);
  }
  ptdp_gpt_options read;
  REQUIRE(ptdp_gpt_options_init(&read) == PTDP_SUCCESS);
  REQUIRE(ptdp_checkpoint_read_options(dir.string().c_str(), &read, nullptr) == PTDP_SUCCESS);
  CHECK(read.multi_latent_attention == 1);
  CHECK(read.q_lora_rank == 5);
  CHECK(read.kv_lora_rank == 6);
  CHECK(read.qk_head_dim == 4);
  CHECK(read.qk_pos_emb_head_dim == 2);
  CHECK(read.v_head_dim == 3);
  {
    ptdp_gpt_options other = o;
    other.seed = 99;  // other weights, the same shapes: the load brings the saved ones back
    const Model loaded(w.groups, other);
    REQUIRE(ptdp_model_get_param(loaded.m, up.c_str(), got.data(), got.size() * 4) == PTDP_SUCCESS);
    CHECK(got != want);
    CHECK(ptdp_checkpoint_load(dir.string().c_str(), loaded.m, nullptr, nullptr) == PTDP_SUCCESS);
    REQUIRE(ptdp_model_get_param(loaded.m, up.c_str(), got.data(), got.size() * 4) == PTDP_SUCCESS);
    CHECK(got == want);
  }
  ptdp_gpt_options wider = o;
  wider.kv_lora_rank = 8;
  const Model m(w.groups, wider);
  CHECK(ptdp_checkpoint_load(dir.string().c_str(), m.m, nullptr, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(err(), Catch::Contains("kv_lora_rank (--kv-lora-rank) = 6"));
  std::filesystem::remove_all(dir);
}
