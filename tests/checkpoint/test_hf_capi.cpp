// Hugging Face checkpoints through the C API on one process, without Python: small GPT-2 and
// Llama-family models written by the test (test_hf_fixtures.h) are imported with
// ptdp_hf_read_options / ptdp_hf_load, every layout conversion is checked where its values land
// (Conv1D transpose, q|k|v and per-group rows, gate/up order, vocabulary padding), the logits of
// the imported model equal a reference forward pass computed on the Hugging Face tensors (and
// differ from the interleaved-RoPE and swapped gate/up variants, so the test sees a mix-up), and
// ptdp_hf_save writes the same tensors back, bit for bit, in one file or Hugging Face's shards.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ptdp/ptdp.h"
#include "tests/checkpoint/test_hf_fixtures.h"
#include "tests/single_process.h"

namespace {

namespace fs = std::filesystem;
using hf::json;

#define OK(call) REQUIRE((call) == PTDP_SUCCESS)

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("ptdp-hf-capi-" + std::to_string(::getpid()) + "-" + std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str(const std::string& sub) const { return (path / sub).string(); }
};

// A model built from a Hugging Face directory's options and loaded from it.
struct Imported {
  ptdp_model model = nullptr;
  ptdp_gpt_options options;
  ptdp_hf_architecture arch = PTDP_HF_ARCHITECTURE_AUTO;
  Imported(sp::World& w, const std::string& dir, bool no_dropout = true) {
    OK(ptdp_gpt_options_init(&options));
    OK(ptdp_hf_read_options(dir.c_str(), &options, &arch));
    if (no_dropout) options.hidden_dropout = options.attention_dropout = 0.0f;
    OK(ptdp_model_create(w.groups, &options, &model));
    OK(ptdp_hf_load(dir.c_str(), model));
  }
  ~Imported() { ptdp_model_destroy(model); }
  Imported(const Imported&) = delete;
  Imported& operator=(const Imported&) = delete;

  std::vector<float> param(const std::string& name, std::vector<int64_t>* shape = nullptr) const {
    int32_t n = 0;
    REQUIRE(ptdp_model_num_params(model, &n) == PTDP_SUCCESS);
    for (int32_t i = 0; i < n; ++i) {
      char buf[256];
      int32_t ndim = 0;
      int64_t dims[2] = {1, 1};
      REQUIRE(ptdp_model_param_info(model, i, buf, sizeof buf, &ndim, dims, nullptr) == PTDP_SUCCESS);
      if (name != buf) continue;
      if (shape) shape->assign(dims, dims + ndim);
      std::vector<float> v(static_cast<std::size_t>(dims[0] * (ndim > 1 ? dims[1] : 1)));
      REQUIRE(ptdp_model_get_param(model, buf, v.data(), v.size() * sizeof(float)) == PTDP_SUCCESS);
      return v;
    }
    FAIL("no parameter " << name);
    return {};
  }

  std::vector<float> logits(const std::vector<int32_t>& tokens) const {
    std::vector<float> out(tokens.size() * static_cast<std::size_t>(options.vocab_size));
    REQUIRE(ptdp_model_logits(model, tokens.data(), 1, out.data(), out.size() * sizeof(float)) == PTDP_SUCCESS);
    return out;
  }
};

// Largest |a - b| over the logits, and the largest |b|.
double max_diff(const std::vector<float>& a, const hf::Mat& b, double* scale = nullptr) {
  double d = 0, s = 0;
  const std::size_t V = b[0].size();
  for (std::size_t t = 0; t < b.size(); ++t)
    for (std::size_t v = 0; v < V; ++v) {
      d = std::max(d, std::abs(static_cast<double>(a[t * V + v]) - b[t][v]));
      s = std::max(s, std::abs(b[t][v]));
    }
  if (scale) *scale = s;
  return d;
}

std::vector<int32_t> tokens(std::size_t n, int32_t vocab, uint32_t seed) { return sp::ids(n, vocab, seed); }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("hf_read_options describes GPT-2 and Llama configs", "[hf]") {
  TempDir d;
  hf::write_model(d.str("gpt2"), hf::gpt2());
  hf::Model l = hf::llama("llama", false);
  l.config["rope_theta"] = 500000.0;
  l.config["rope_scaling"] = {{"rope_type", "llama3"},
                              {"factor", 32.0},
                              {"low_freq_factor", 1.0},
                              {"high_freq_factor", 4.0},
                              {"original_max_position_embeddings", 8}};
  hf::write_model(d.str("llama"), l);

  ptdp_gpt_options o;
  ptdp_hf_architecture arch = PTDP_HF_ARCHITECTURE_AUTO;
  OK(ptdp_gpt_options_init(&o));
  OK(ptdp_hf_read_options(d.str("gpt2").c_str(), &o, &arch));
  CHECK(arch == PTDP_HF_ARCHITECTURE_GPT2);
  CHECK(o.num_layers == 2);
  CHECK(o.hidden_size == 8);
  CHECK(o.num_attention_heads == 2);
  CHECK(o.ffn_hidden_size == 32);
  CHECK(o.vocab_size == 11);
  CHECK(o.seq_length == 8);
  CHECK(o.max_position_embeddings == 8);
  CHECK(o.layernorm_epsilon == 1e-5f);
  CHECK(o.hidden_dropout == 0.1f);
  CHECK(o.normalization == PTDP_NORMALIZATION_LAYERNORM);
  CHECK(o.position_embedding_type == PTDP_POSITION_EMBEDDING_LEARNED_ABSOLUTE);
  CHECK(o.untie_embeddings_and_output_weights == 0);
  CHECK(o.disable_bias_linear == 0);

  OK(ptdp_gpt_options_init(&o));
  OK(ptdp_hf_read_options(d.str("llama").c_str(), &o, &arch));
  CHECK(arch == PTDP_HF_ARCHITECTURE_LLAMA);
  CHECK(o.hidden_size == 16);
  CHECK(o.ffn_hidden_size == 24);
  CHECK(o.num_query_groups == 2);
  CHECK(o.kv_channels == 0);  // h / a
  CHECK(o.normalization == PTDP_NORMALIZATION_RMSNORM);
  CHECK(o.swiglu == 1);
  CHECK(o.position_embedding_type == PTDP_POSITION_EMBEDDING_ROPE);
  CHECK(o.rotary_base == 500000.0);
  CHECK(o.use_rope_scaling == 1);
  CHECK(o.rope_scaling_factor == 32.0f);
  CHECK(o.rope_original_max_position_embeddings == 8);
  CHECK(o.layernorm_epsilon == 1e-6f);
  CHECK(o.disable_bias_linear == 1);
  CHECK(o.add_qkv_bias == 0);
  CHECK(o.untie_embeddings_and_output_weights == 1);
  CHECK(o.hidden_dropout == 0.0f);

  // A struct of the first published size cannot hold the Llama fields: refused, unchanged.
  ptdp_gpt_options small;
  OK(ptdp_gpt_options_init(&small));
  small.struct_size = 72;
  small.num_layers = 99;
  CHECK(ptdp_hf_read_options(d.str("llama").c_str(), &small, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(small.num_layers == 99);
  // ... but holds GPT-2's.
  OK(ptdp_hf_read_options(d.str("gpt2").c_str(), &small, nullptr));
  CHECK(small.num_layers == 2);
}

TEST_CASE("hf_load places GPT-2's Conv1D and c_attn tensors in Megatron's layout", "[hf]") {
  TempDir d;
  const hf::Model m = hf::gpt2();
  hf::write_model(d.str("gpt2"), m);
  sp::World w;
  Imported im(w, d.str("gpt2"));
  const auto& T = m.tensors;
  const int64_t h = 8;

  // Embedding: the 11 rows, then zeros up to the padded vocabulary.
  std::vector<int64_t> shape;
  const std::vector<float> wte = im.param("embedding.word_embeddings.weight", &shape);
  REQUIRE(shape == std::vector<int64_t>{128, h});
  const auto& hw = T.at("transformer.wte.weight").values;
  CHECK(std::equal(hw.begin(), hw.end(), wte.begin()));
  CHECK(
      std::all_of(wte.begin() + static_cast<std::ptrdiff_t>(hw.size()), wte.end(), [](float v) { return v == 0.0f; }));

  // c_attn [h, 3h] (columns q | k | v, heads of dh = 4 in order) -> linear_qkv [3h, h] with rows
  // head 0's q, k, v, then head 1's: row r of ptdp is output column kCol[r] of c_attn.
  const int64_t kCol[24] = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23};
  const std::vector<float> qkv = im.param("decoder.layers.1.self_attention.linear_qkv.weight", &shape);
  REQUIRE(shape == std::vector<int64_t>{3 * h, h});
  const hf::Tensor& c_attn = T.at("transformer.h.1.attn.c_attn.weight");
  const std::vector<float> qkv_bias = im.param("decoder.layers.1.self_attention.linear_qkv.bias");
  const hf::Tensor& c_attn_b = T.at("transformer.h.1.attn.c_attn.bias");
  for (int64_t r = 0; r < 3 * h; ++r) {
    for (int64_t c = 0; c < h; ++c) CHECK(qkv[static_cast<std::size_t>(r * h + c)] == c_attn.at(c, kCol[r]));
    CHECK(qkv_bias[static_cast<std::size_t>(r)] == c_attn_b.values[static_cast<std::size_t>(kCol[r])]);
  }
  // Conv1D [in, out] -> [out, in].
  const std::vector<float> fc1 = im.param("decoder.layers.0.mlp.linear_fc1.weight", &shape);
  REQUIRE(shape == std::vector<int64_t>{4 * h, h});
  const std::vector<float> fc2 = im.param("decoder.layers.0.mlp.linear_fc2.weight");
  const std::vector<float> proj = im.param("decoder.layers.0.self_attention.linear_proj.weight");
  for (int64_t o = 0; o < 4 * h; ++o)
    for (int64_t i = 0; i < h; ++i) {
      CHECK(fc1[static_cast<std::size_t>(o * h + i)] == T.at("transformer.h.0.mlp.c_fc.weight").at(i, o));
      CHECK(fc2[static_cast<std::size_t>(i * 4 * h + o)] == T.at("transformer.h.0.mlp.c_proj.weight").at(o, i));
    }
  for (int64_t o = 0; o < h; ++o)
    for (int64_t i = 0; i < h; ++i)
      CHECK(proj[static_cast<std::size_t>(o * h + i)] == T.at("transformer.h.0.attn.c_proj.weight").at(i, o));
  CHECK(im.param("embedding.position_embeddings.weight") == T.at("transformer.wpe.weight").values);
  CHECK(im.param("decoder.final_layernorm.bias") == T.at("transformer.ln_f.bias").values);
}

TEST_CASE("hf_load groups Llama's q_proj, k_proj and v_proj per query group and stacks gate over up", "[hf]") {
  TempDir d;
  const hf::Model m = hf::llama("qwen2");
  hf::write_model(d.str("qwen2"), m);
  sp::World w;
  Imported im(w, d.str("qwen2"));
  CHECK(im.arch == PTDP_HF_ARCHITECTURE_QWEN2);
  const auto& T = m.tensors;
  const int64_t h = 16, dh = 4, f = 24;
  // a = 4 query heads in g = 2 groups: ptdp's rows are q0 q1 k0 v0 q2 q3 k1 v1 (one head each).
  const char* kPart[8] = {"q", "q", "k", "v", "q", "q", "k", "v"};
  const int64_t kHead[8] = {0, 1, 0, 0, 2, 3, 1, 1};
  std::vector<int64_t> shape;
  const std::vector<float> qkv = im.param("decoder.layers.0.self_attention.linear_qkv.weight", &shape);
  REQUIRE(shape == std::vector<int64_t>{8 * dh, h});
  const std::vector<float> bias = im.param("decoder.layers.0.self_attention.linear_qkv.bias");
  for (int blk = 0; blk < 8; ++blk) {
    const std::string src = std::string("model.layers.0.self_attn.") + kPart[blk] + "_proj.";
    for (int64_t r = 0; r < dh; ++r) {
      const int64_t row = blk * dh + r, hf_row = kHead[blk] * dh + r;
      for (int64_t c = 0; c < h; ++c)
        CHECK(qkv[static_cast<std::size_t>(row * h + c)] == T.at(src + "weight").at(hf_row, c));
      CHECK(bias[static_cast<std::size_t>(row)] == T.at(src + "bias").values[static_cast<std::size_t>(hf_row)]);
    }
  }
  // linear_fc1 = [gate_proj; up_proj].
  const std::vector<float> fc1 = im.param("decoder.layers.1.mlp.linear_fc1.weight", &shape);
  REQUIRE(shape == std::vector<int64_t>{2 * f, h});
  const auto& gate = T.at("model.layers.1.mlp.gate_proj.weight").values;
  const auto& up = T.at("model.layers.1.mlp.up_proj.weight").values;
  CHECK(std::equal(gate.begin(), gate.end(), fc1.begin()));
  CHECK(std::equal(up.begin(), up.end(), fc1.begin() + static_cast<std::ptrdiff_t>(gate.size())));
  CHECK(im.param("decoder.layers.1.mlp.linear_fc2.weight") == T.at("model.layers.1.mlp.down_proj.weight").values);
  CHECK(im.param("decoder.layers.1.self_attention.linear_proj.weight") ==
        T.at("model.layers.1.self_attn.o_proj.weight").values);
  CHECK(im.param("decoder.layers.1.pre_mlp_layernorm.weight") ==
        T.at("model.layers.1.post_attention_layernorm.weight").values);
  const std::vector<float> head = im.param("output_layer.weight", &shape);
  REQUIRE(shape == std::vector<int64_t>{128, h});
  const auto& lm = T.at("lm_head.weight").values;
  CHECK(std::equal(lm.begin(), lm.end(), head.begin()));
}

TEST_CASE("GPT-2 imported from Hugging Face gives the reference logits", "[hf]") {
  TempDir d;
  const hf::Model m = hf::gpt2();
  hf::write_model(d.str("gpt2"), m);
  sp::World w;
  Imported im(w, d.str("gpt2"));
  const std::vector<int32_t> t = tokens(8, 11, 3);
  double scale = 0;
  const double diff = max_diff(im.logits(t), hf::gpt2_logits(m, t), &scale);
  INFO("max |ptdp - reference| = " << diff << ", max |logit| = " << scale);
  CHECK(scale > 1.0);
  CHECK(diff < 2e-5 * scale);
}

TEST_CASE("A Llama with GQA gives the reference logits: rotate-half RoPE and gate before up", "[hf]") {
  TempDir d;
  for (const char* type : {"llama", "mistral", "qwen2"}) {
    for (bool tied : {false, true}) {
      const hf::Model m = hf::llama(type, tied);
      const std::string dir = d.str(std::string(type) + (tied ? "-tied" : ""));
      hf::write_model(dir, m);
      sp::World w;
      Imported im(w, dir);
      const std::vector<int32_t> t = tokens(16, 37, 5);
      const std::vector<float> got = im.logits(t);
      double scale = 0;
      const double diff = max_diff(got, hf::llama_logits(m, t), &scale);
      const double interleaved = max_diff(got, hf::llama_logits(m, t, /*interleaved=*/true));
      const double swapped = max_diff(got, hf::llama_logits(m, t, false, /*swap_gate_up=*/true));
      INFO(type << (tied ? " tied" : " untied") << ": max |ptdp - reference| = " << diff << " (max |logit| " << scale
                << "); interleaved RoPE would differ by " << interleaved << ", gate/up swapped by " << swapped);
      CHECK(scale > 1.0);
      CHECK(diff < 2e-5 * scale);
      CHECK(interleaved > 1000 * diff);
      CHECK(interleaved > 0.05 * scale);
      CHECK(swapped > 1000 * diff);
    }
  }
}

TEST_CASE("Hugging Face -> ptdp -> Hugging Face gives the same tensors and config, bit for bit", "[hf]") {
  TempDir d;
  struct Case {
    std::string name;
    hf::Model model;
    std::string dtype;
    int shards;
  };
  std::vector<Case> cases;
  cases.push_back({"gpt2-f32", hf::gpt2(), "F32", 1});
  cases.push_back({"gpt2-noprefix-bf16", hf::gpt2(7, /*prefix=*/false), "BF16", 1});
  cases.push_back({"llama-f32-sharded", hf::llama("llama", false), "F32", 3});
  cases.push_back({"llama-tied-bf16", hf::llama("llama", true), "BF16", 2});
  cases.push_back({"mistral-f32", hf::llama("mistral", false), "F32", 1});
  cases.push_back({"qwen2-bf16", hf::llama("qwen2", true), "BF16", 1});
  for (const Case& c : cases) {
    INFO(c.name);
    const std::string in = d.str(c.name), out = d.str(c.name + "-out");
    hf::write_model(in, c.model, c.dtype, c.shards);
    sp::World w;
    Imported im(w, in, /*no_dropout=*/false);  // the dropout rates are config fields too
    ptdp_hf_save_options so;
    OK(ptdp_hf_save_options_init(&so));
    so.dtype = c.dtype == "BF16" ? PTDP_DTYPE_BF16 : PTDP_DTYPE_F32;
    const std::string base = in + "/config.json";
    so.base_config = base.c_str();
    OK(ptdp_hf_save(out.c_str(), im.model, &so));
    CHECK(fs::exists(out + "/model.safetensors"));
    CHECK_FALSE(fs::exists(out + "/model.safetensors.index.json"));
    const auto before = hf::read_model(in), after = hf::read_model(out);
    REQUIRE(before.size() == after.size());
    for (const auto& [name, t] : before) {
      // Base models (GPT2Model) store names without "transformer."; ptdp writes GPT2LMHeadModel's.
      const std::string full = c.name.find("noprefix") != std::string::npos ? "transformer." + name : name;
      INFO(name);
      REQUIRE(after.count(full));
      CHECK(after.at(full).dtype == t.dtype);
      CHECK(after.at(full).shape == t.shape);
      CHECK(after.at(full).bytes == t.bytes);
    }
    json meta;
    hf::read_safetensors(out + "/model.safetensors", &meta);
    CHECK(meta == json{{"format", "pt"}});
    // Every field of the original config comes back with its value.
    std::ifstream f(out + "/config.json");
    const json back = json::parse(f);
    json original = c.model.config;
    original["torch_dtype"] = c.dtype == "BF16" ? "bfloat16" : "float32";
    for (const auto& [key, value] : original.items()) {
      INFO(key);
      REQUIRE(back.contains(key));
      CHECK(back[key] == value);
    }
  }
}

TEST_CASE("hf_save splits tensors into Hugging Face's shards with an index", "[hf]") {
  TempDir d;
  hf::write_model(d.str("llama"), hf::llama("llama", false));
  sp::World w;
  Imported im(w, d.str("llama"));
  ptdp_hf_save_options so;
  OK(ptdp_hf_save_options_init(&so));
  so.dtype = PTDP_DTYPE_BF16;
  so.max_shard_size = 1500;  // bytes: the embedding (37 x 16 x 2 = 1184) alone, layers in pieces
  OK(ptdp_hf_save(d.str("out").c_str(), im.model, &so));
  std::ifstream f(d.str("out") + "/model.safetensors.index.json");
  const json index = json::parse(f);
  std::map<std::string, std::string> where;
  const auto tensors = hf::read_model(d.str("out"), &where);
  uint64_t total = 0;
  for (const auto& [name, t] : tensors) total += t.bytes.size();
  CHECK(index["metadata"]["total_size"] == total);
  REQUIRE(index["weight_map"].size() == tensors.size());
  for (const auto& [name, file] : where) CHECK(index["weight_map"][name] == file);
  // Hugging Face's split of this state dict at 1500 bytes (huggingface_hub's rule, in the order
  // LlamaForCausalLM registers its modules; bf16 sizes: embedding and head 1184, q and o 512,
  // k and v 256, gate, up and down 768, norms 32), worked out by hand: 10 files.
  const std::map<std::string, int> expected = {{"model.embed_tokens.weight", 1},
                                               {"model.layers.0.self_attn.q_proj.weight", 2},
                                               {"model.layers.0.self_attn.k_proj.weight", 2},
                                               {"model.layers.0.self_attn.v_proj.weight", 2},
                                               {"model.layers.0.self_attn.o_proj.weight", 3},
                                               {"model.layers.0.mlp.gate_proj.weight", 3},
                                               {"model.layers.0.mlp.up_proj.weight", 4},
                                               {"model.layers.0.mlp.down_proj.weight", 5},
                                               {"model.layers.0.input_layernorm.weight", 5},
                                               {"model.layers.0.post_attention_layernorm.weight", 5},
                                               {"model.layers.1.self_attn.q_proj.weight", 5},
                                               {"model.layers.1.self_attn.k_proj.weight", 6},
                                               {"model.layers.1.self_attn.v_proj.weight", 6},
                                               {"model.layers.1.self_attn.o_proj.weight", 6},
                                               {"model.layers.1.mlp.gate_proj.weight", 7},
                                               {"model.layers.1.mlp.up_proj.weight", 8},
                                               {"model.layers.1.mlp.down_proj.weight", 9},
                                               {"model.layers.1.input_layernorm.weight", 9},
                                               {"model.layers.1.post_attention_layernorm.weight", 9},
                                               {"model.norm.weight", 9},
                                               {"lm_head.weight", 10}};
  REQUIRE(where.size() == expected.size());
  for (const auto& [name, shard] : expected) {
    char file[64];
    std::snprintf(file, sizeof file, "model-%05d-of-00010.safetensors", shard);
    INFO(name);
    CHECK(where.at(name) == file);
  }
  CHECK_FALSE(fs::exists(d.str("out") + "/model.safetensors"));
  // The sharded export imports again to the same values; a later single-file save removes the shards.
  Imported again(w, d.str("out"));
  CHECK(again.param("output_layer.weight") == im.param("output_layer.weight"));
  so.max_shard_size = 0;
  OK(ptdp_hf_save(d.str("out").c_str(), im.model, &so));
  CHECK(fs::exists(d.str("out") + "/model.safetensors"));
  CHECK_FALSE(fs::exists(d.str("out") + "/model.safetensors.index.json"));
  CHECK_FALSE(fs::exists(d.str("out") + "/model-00001-of-00010.safetensors"));
}

TEST_CASE("A model trained in ptdp exports as GPT-2 and as Llama, and imports back exactly", "[hf]") {
  TempDir d;
  sp::World w;
  for (const char* preset : {"gpt", "llama"}) {
    INFO(preset);
    ptdp_gpt_options o;
    OK(ptdp_gpt_options_init(&o));
    o.num_layers = 2;
    o.hidden_size = 16;
    o.num_attention_heads = 4;
    o.seq_length = 8;
    o.vocab_size = 40;
    o.make_vocab_size_divisible_by = 32;
    o.seed = 9;
    if (std::string(preset) == "llama") {
      o.normalization = PTDP_NORMALIZATION_RMSNORM;
      o.swiglu = 1;
      o.position_embedding_type = PTDP_POSITION_EMBEDDING_ROPE;
      o.num_query_groups = 2;
      o.disable_bias_linear = 1;
      o.untie_embeddings_and_output_weights = 1;
      o.ffn_hidden_size = 32;
    }
    ptdp_model a = nullptr, b = nullptr;
    OK(ptdp_model_create(w.groups, &o, &a));
    const std::string dir = d.str(preset);
    OK(ptdp_hf_save(dir.c_str(), a, nullptr));
    ptdp_gpt_options back;
    OK(ptdp_gpt_options_init(&back));
    ptdp_hf_architecture arch = PTDP_HF_ARCHITECTURE_AUTO;
    OK(ptdp_hf_read_options(dir.c_str(), &back, &arch));
    CHECK(arch == (std::string(preset) == "gpt" ? PTDP_HF_ARCHITECTURE_GPT2 : PTDP_HF_ARCHITECTURE_LLAMA));
    back.seed = 77;                         // other initial values, all replaced by the load
    back.make_vocab_size_divisible_by = 8;  // another padding: 40 rows, not 64
    OK(ptdp_model_create(w.groups, &back, &b));
    OK(ptdp_hf_load(dir.c_str(), b));
    int32_t n = 0;
    OK(ptdp_model_num_params(a, &n));
    for (int32_t i = 0; i < n; ++i) {
      char name[256];
      int32_t ndim = 0;
      int64_t dims[2] = {1, 1}, dims_b[2] = {1, 1};
      OK(ptdp_model_param_info(a, i, name, sizeof name, &ndim, dims, nullptr));
      OK(ptdp_model_param_info(b, i, nullptr, 0, nullptr, dims_b, nullptr));
      std::vector<float> va(static_cast<std::size_t>(dims[0] * (ndim > 1 ? dims[1] : 1)));
      std::vector<float> vb(static_cast<std::size_t>(dims_b[0] * (ndim > 1 ? dims_b[1] : 1)));
      OK(ptdp_model_get_param(a, name, va.data(), va.size() * sizeof(float)));
      OK(ptdp_model_get_param(b, name, vb.data(), vb.size() * sizeof(float)));
      INFO(name);
      const std::size_t rows = static_cast<std::size_t>(std::min(dims[0], dims_b[0]));
      const std::size_t cols = ndim > 1 ? static_cast<std::size_t>(dims[1]) : 1;
      va.resize(rows * cols);  // the padded vocabulary rows differ in number; the first 40 are the model's
      vb.resize(rows * cols);
      if (std::string(name).find("word_embeddings") != std::string::npos ||
          std::string(name) == "output_layer.weight") {
        va.resize(40 * cols);
        vb.resize(40 * cols);
      }
      CHECK(same_bits(va, vb));
    }
    ptdp_model_destroy(a);
    ptdp_model_destroy(b);
  }
}

TEST_CASE("hf_load and hf_save refuse bad input and name it, leaving the model unchanged", "[hf]") {
  TempDir d;
  const hf::Model m = hf::gpt2();
  hf::write_model(d.str("gpt2"), m);
  sp::World w;
  ptdp_gpt_options o;
  OK(ptdp_gpt_options_init(&o));
  OK(ptdp_hf_read_options(d.str("gpt2").c_str(), &o, nullptr));
  ptdp_model model = nullptr;
  OK(ptdp_model_create(w.groups, &o, &model));
  std::vector<float> before(128 * 8);
  OK(ptdp_model_get_param(model, "embedding.word_embeddings.weight", before.data(), before.size() * sizeof(float)));
  const auto unchanged = [&] {
    std::vector<float> now(before.size());
    REQUIRE(ptdp_model_get_param(model, "embedding.word_embeddings.weight", now.data(), now.size() * sizeof(float)) ==
            PTDP_SUCCESS);
    return same_bits(now, before);
  };
  const auto expect = [&](ptdp_status got, ptdp_status want, const std::string& words) {
    INFO(ptdp_last_error());
    CHECK(got == want);
    CHECK_THAT(std::string(ptdp_last_error()), Catch::Contains(words));
    CHECK(unchanged());
  };

  expect(ptdp_hf_load(nullptr, model), PTDP_ERR_INVALID_ARGUMENT, "directory is NULL");
  expect(ptdp_hf_load(d.str("gpt2").c_str(), nullptr), PTDP_ERR_INVALID_ARGUMENT, "model");
  expect(ptdp_hf_load(d.str("missing").c_str(), model), PTDP_ERR_IO, "missing");
  ptdp_gpt_options o2 = o;
  o2.struct_size = o.struct_size;
  CHECK(ptdp_hf_read_options(nullptr, &o2, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_hf_read_options(d.str("gpt2").c_str(), nullptr, nullptr) == PTDP_ERR_INVALID_ARGUMENT);

  // A model of another shape.
  {
    ptdp_gpt_options other = o;
    other.hidden_size = 16;
    ptdp_model m2 = nullptr;
    OK(ptdp_model_create(w.groups, &other, &m2));
    CHECK(ptdp_hf_load(d.str("gpt2").c_str(), m2) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK_THAT(std::string(ptdp_last_error()), Catch::Contains("hidden_size = 8; the model has 16"));
    ptdp_model_destroy(m2);
  }
  // Damaged directories, each refused with the tensor or field named.
  const auto damaged = [&](const std::string& name, const std::function<void(hf::Model&)>& change, ptdp_status want,
                           const std::string& words) {
    hf::Model copy = m;
    change(copy);
    hf::write_model(d.str(name), copy);
    expect(ptdp_hf_load(d.str(name).c_str(), model), want, words);
  };
  damaged(
      "shape",
      [](hf::Model& x) {
        x.tensors["transformer.h.0.attn.c_attn.weight"].shape = {24, 8};
      },
      PTDP_ERR_IO, "'transformer.h.0.attn.c_attn.weight' has shape [24,8]; config.json calls for [8,24]");
  damaged(
      "extra",
      [](hf::Model& x) { x.tensors["transformer.h.0.attn.q_norm.weight"] = x.tensors["transformer.ln_f.bias"]; },
      PTDP_ERR_IO, "'transformer.h.0.attn.q_norm.weight'");
  damaged(
      "missing-tensor", [](hf::Model& x) { x.tensors.erase("transformer.h.1.mlp.c_fc.bias"); }, PTDP_ERR_IO,
      "no tensor 'transformer.h.1.mlp.c_fc.bias'");
  damaged(
      "act", [](hf::Model& x) { x.config["activation_function"] = "relu"; }, PTDP_ERR_UNSUPPORTED,
      "activation_function \"relu\"");
  damaged(
      "type", [](hf::Model& x) { x.config["model_type"] = "falcon"; }, PTDP_ERR_UNSUPPORTED, "\"falcon\"");
  damaged(
      "no-embd", [](hf::Model& x) { x.config.erase("n_embd"); }, PTDP_ERR_IO, "\"n_embd\" is missing");
  damaged(
      "tied-head-differs",
      [](hf::Model& x) {
        x.tensors["lm_head.weight"] = x.tensors["transformer.wte.weight"];
        x.tensors["lm_head.weight"].values[3] += 1.0f;
      },
      PTDP_ERR_IO, "differs from the word embedding");
  // Old exports' buffers are skipped, and a tied head equal to the embedding is accepted.
  {
    hf::Model copy = m;
    copy.tensors["transformer.h.0.attn.bias"] = hf::Tensor{{1, 1, 8, 8}, std::vector<float>(64, 1.0f)};
    copy.tensors["lm_head.weight"] = copy.tensors["transformer.wte.weight"];
    hf::write_model(d.str("buffers"), copy);
    OK(ptdp_hf_load(d.str("buffers").c_str(), model));
  }
  // pytorch_model.bin only.
  fs::create_directories(d.str("bin"));
  std::ofstream(d.str("bin") + "/config.json") << m.config.dump();
  std::ofstream(d.str("bin") + "/pytorch_model.bin") << "x";
  OK(ptdp_hf_load(d.str("gpt2").c_str(), model));
  OK(ptdp_model_get_param(model, "embedding.word_embeddings.weight", before.data(), before.size() * sizeof(float)));
  expect(ptdp_hf_load(d.str("bin").c_str(), model), PTDP_ERR_IO, "safe_serialization=True");

  // Save options.
  ptdp_hf_save_options so;
  CHECK(ptdp_hf_save_options_init(nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  OK(ptdp_hf_save_options_init(&so));
  so.dtype = PTDP_DTYPE_I32;
  CHECK(ptdp_hf_save(d.str("o").c_str(), model, &so) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ptdp_last_error()), Catch::Contains("options->dtype"));
  OK(ptdp_hf_save_options_init(&so));
  so.architecture = static_cast<ptdp_hf_architecture>(11);
  CHECK(ptdp_hf_save(d.str("o").c_str(), model, &so) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ptdp_last_error()), Catch::Contains("options->architecture"));
  OK(ptdp_hf_save_options_init(&so));
  so.max_shard_size = -1;
  CHECK(ptdp_hf_save(d.str("o").c_str(), model, &so) == PTDP_ERR_INVALID_ARGUMENT);
  OK(ptdp_hf_save_options_init(&so));
  so.struct_size = 0;
  CHECK(ptdp_hf_save(d.str("o").c_str(), model, &so) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ptdp_last_error()), Catch::Contains("ptdp_hf_save_options_init"));
  OK(ptdp_hf_save_options_init(&so));
  so.architecture = PTDP_HF_ARCHITECTURE_LLAMA;
  CHECK(ptdp_hf_save(d.str("o").c_str(), model, &so) == PTDP_ERR_UNSUPPORTED);
  CHECK_THAT(std::string(ptdp_last_error()), Catch::Contains("LlamaForCausalLM"));
  CHECK_FALSE(fs::exists(d.str("o")));
  CHECK(ptdp_hf_save(nullptr, model, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_hf_save(d.str("o").c_str(), nullptr, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  ptdp_model_destroy(model);
}

// DeepSeek-V2/V3 through the C API: a multi-latent-attention MoE model made in ptdp (the first
// layer dense, shared experts; V3's with an MoE multi-token prediction layer) exports as the class
// its router calls for, names DeepSeek's tensors (the MTP layer's as model.layers.{L}.*, with its
// copy of the embedding), stores the RoPE rows interleaved (V2 always, V3 with rope_interleave
// true), imports back bit for bit, and another class's export is refused naming what it lacks.
TEST_CASE("An MLA model with DeepSeek's routers exports as DeepSeek-V3 or V2 and imports back exactly", "[hf]") {
  TempDir d;
  sp::World w;
  for (const bool v3 : {true, false}) {
    INFO((v3 ? "deepseek_v3" : "deepseek_v2"));
    ptdp_gpt_options o;
    OK(ptdp_gpt_options_init(&o));
    o.num_layers = 2;
    o.hidden_size = 16;
    o.num_attention_heads = 2;
    o.seq_length = 8;
    o.vocab_size = 40;
    o.make_vocab_size_divisible_by = 8;
    o.seed = v3 ? 11 : 12;
    o.normalization = PTDP_NORMALIZATION_RMSNORM;
    o.swiglu = 1;
    o.position_embedding_type = PTDP_POSITION_EMBEDDING_ROPE;
    o.disable_bias_linear = 1;
    o.untie_embeddings_and_output_weights = 1;
    o.ffn_hidden_size = 24;
    o.multi_latent_attention = 1;
    o.qk_layernorm = 1;
    o.q_lora_rank = v3 ? 12 : 0;
    o.kv_lora_rank = 8;
    o.qk_head_dim = 8;
    o.qk_pos_emb_head_dim = 4;
    o.v_head_dim = 8;
    o.num_experts = 4;
    o.moe_router_topk = 2;
    o.moe_ffn_hidden_size = 8;
    o.moe_shared_expert_intermediate_size = 16;  // two shared experts
    o.moe_layer_freq = "[0,1]";
    o.moe_router_topk_scaling_factor = 2.5f;
    o.moe_router_num_groups = 2;
    o.moe_router_group_topk = 1;
    o.moe_router_group_score_topk = v3 ? 2 : 1;
    if (v3) {
      o.moe_router_score_function = PTDP_MOE_SCORE_SIGMOID;
      o.moe_router_enable_expert_bias = 1;
      o.mtp_num_layers = 1;  // an MoE MTP layer, DeepSeek-V3's model.layers.2.*
    } else {
      o.moe_router_pre_softmax = 1;
    }
    ptdp_model a = nullptr, b = nullptr;
    OK(ptdp_model_create(w.groups, &o, &a));
    if (v3) {  // a non-zero expert bias, as after training
      std::vector<float> bias = {0.25f, -0.5f, 0.125f, 1.0f};
      OK(ptdp_model_set_param(a, "decoder.layers.1.mlp.router.expert_bias", bias.data(), bias.size() * sizeof(float)));
    }
    const std::string dir = d.str(v3 ? "v3" : "v2");
    OK(ptdp_hf_save(dir.c_str(), a, nullptr));
    ptdp_gpt_options back;
    OK(ptdp_gpt_options_init(&back));
    ptdp_hf_architecture arch = PTDP_HF_ARCHITECTURE_AUTO;
    OK(ptdp_hf_read_options(dir.c_str(), &back, &arch));
    CHECK(arch == (v3 ? PTDP_HF_ARCHITECTURE_DEEPSEEK_V3 : PTDP_HF_ARCHITECTURE_DEEPSEEK_V2));
    CHECK(back.multi_latent_attention == 1);
    CHECK(back.q_lora_rank == o.q_lora_rank);
    CHECK(back.kv_lora_rank == 8);
    CHECK(back.qk_head_dim == 8);
    CHECK(back.qk_pos_emb_head_dim == 4);
    CHECK(back.moe_shared_expert_intermediate_size == 16);
    CHECK(back.moe_router_group_score_topk == o.moe_router_group_score_topk);
    CHECK(back.moe_router_topk_scaling_factor == 2.5f);
    CHECK(back.moe_router_enable_expert_bias == o.moe_router_enable_expert_bias);
    CHECK(back.mtp_num_layers == o.mtp_num_layers);

    std::ifstream cf(dir + "/config.json");
    const json config = json::parse(cf);
    CHECK(config["model_type"] == (v3 ? "deepseek_v3" : "deepseek_v2"));
    CHECK(config["first_k_dense_replace"] == 1);
    CHECK(config["n_shared_experts"] == 2);
    CHECK(config["qk_nope_head_dim"] == 8);
    CHECK(config["q_lora_rank"] == (v3 ? json(12) : json(nullptr)));
    if (v3) CHECK(config["rope_interleave"] == true);
    if (!v3) CHECK(config["topk_method"] == "group_limited_greedy");

    // kv_a_proj_with_mqa holds the latent rows as they are, then the RoPE key's rows interleaved:
    // stored row 8 + 2i is ptdp's row 8 + i, stored row 8 + 2i + 1 is ptdp's row 8 + 2 + i.
    const auto stored = hf::read_model(dir);
    const std::string prefix = "model.layers.0.self_attn.";
    REQUIRE(stored.count(prefix + "kv_a_proj_with_mqa.weight"));
    CHECK(stored.count(prefix + (v3 ? "q_b_proj.weight" : "q_proj.weight")));
    CHECK(stored.count("model.layers.1.mlp.shared_experts.gate_proj.weight"));
    CHECK(stored.count("model.layers.1.mlp.experts.3.down_proj.weight"));
    CHECK(stored.count("model.layers.1.mlp.gate.e_score_correction_bias") == (v3 ? 1u : 0u));
    CHECK(stored.count("model.layers.2.eh_proj.weight") == (v3 ? 1u : 0u));
    CHECK(stored.count("model.layers.2.mlp.experts.3.up_proj.weight") == (v3 ? 1u : 0u));
    CHECK(stored.count("model.layers.2.shared_head.head.weight") == (v3 ? 1u : 0u));
    if (v3) {
      CHECK(config["num_nextn_predict_layers"] == 1);
      CHECK(stored.at("model.layers.2.embed_tokens.weight").bytes == stored.at("model.embed_tokens.weight").bytes);
    }
    const std::vector<float> kv = hf::values(stored.at(prefix + "kv_a_proj_with_mqa.weight"));
    std::vector<float> kv_ptdp(12 * 16);
    OK(ptdp_model_get_param(a, "decoder.layers.0.self_attention.linear_kv_down_proj.weight", kv_ptdp.data(),
                            kv_ptdp.size() * sizeof(float)));
    const auto row = [](const std::vector<float>& m, int r) { return std::vector<float>(m.begin() + r * 16, m.begin() + (r + 1) * 16); };
    for (int r = 0; r < 8; ++r) CHECK(same_bits(row(kv, r), row(kv_ptdp, r)));
    for (int i = 0; i < 2; ++i) {
      CHECK(same_bits(row(kv, 8 + 2 * i), row(kv_ptdp, 8 + i)));
      CHECK(same_bits(row(kv, 8 + 2 * i + 1), row(kv_ptdp, 10 + i)));
    }

    back.seed = 77;  // other initial values, all replaced by the load
    back.make_vocab_size_divisible_by = 8;
    OK(ptdp_model_create(w.groups, &back, &b));
    OK(ptdp_hf_load(dir.c_str(), b));
    int32_t n = 0;
    OK(ptdp_model_num_params(a, &n));
    for (int32_t i = 0; i < n; ++i) {
      char name[256];
      int32_t ndim = 0;
      int64_t dims[2] = {1, 1};
      OK(ptdp_model_param_info(a, i, name, sizeof name, &ndim, dims, nullptr));
      std::vector<float> va(static_cast<std::size_t>(dims[0] * (ndim > 1 ? dims[1] : 1))), vb(va.size());
      INFO(name);
      OK(ptdp_model_get_param(a, name, va.data(), va.size() * sizeof(float)));
      OK(ptdp_model_get_param(b, name, vb.data(), vb.size() * sizeof(float)));
      CHECK(same_bits(va, vb));
    }

    // The other DeepSeek class, and Llama, are refused naming what the model has.
    ptdp_hf_save_options so;
    OK(ptdp_hf_save_options_init(&so));
    so.architecture = v3 ? PTDP_HF_ARCHITECTURE_DEEPSEEK_V2 : PTDP_HF_ARCHITECTURE_DEEPSEEK_V3;
    CHECK(ptdp_hf_save(d.str("other").c_str(), a, &so) == PTDP_ERR_UNSUPPORTED);
    CHECK_THAT(std::string(ptdp_last_error()), Catch::Contains(v3 ? "softmax" : "sigmoid"));
    so.architecture = PTDP_HF_ARCHITECTURE_LLAMA;
    CHECK(ptdp_hf_save(d.str("other").c_str(), a, &so) == PTDP_ERR_UNSUPPORTED);
    CHECK_THAT(std::string(ptdp_last_error()), Catch::Contains("multi-latent attention"));
    ptdp_model_destroy(a);
    ptdp_model_destroy(b);
  }
}
