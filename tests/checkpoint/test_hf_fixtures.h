// Small Hugging Face checkpoints made by the tests themselves, without Python: a GPT2LMHeadModel
// and a Llama-family model (GQA, untied or tied, Qwen2's qkv bias) with seeded values, written
// by a safetensors writer of the test's own (F32 or BF16, one file or shards with an index),
// read back by a reader of its own, and reference forward passes written directly on the
// Hugging Face tensors as transformers computes them (Conv1D x @ W + b; q|k|v columns; RoPE
// rotate-half, with an interleaved variant that must differ; silu(gate) * up). Only the test's
// code touches these files, so they check ptdp's reader, writer and layouts independently.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace hf {

using json = nlohmann::json;

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
  int64_t rows() const { return shape[0]; }
  int64_t cols() const { return shape.size() > 1 ? shape[1] : 1; }
  float at(int64_t r, int64_t c) const { return values[static_cast<std::size_t>(r * cols() + c)]; }
};

/// A model as Hugging Face stores it: config.json and the state dict (ordered by name).
struct Model {
  json config;
  std::map<std::string, Tensor> tensors;
};

inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even (no NaNs here)
  return static_cast<uint16_t>(u >> 16);
}

inline float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// Seeded values in [-scale, scale] (+ offset), exact in bf16 when `bf16` (so a BF16 file holds
/// the same values as the model).
struct Rng {
  uint64_t x;
  explicit Rng(uint64_t seed) : x(seed * 0x9E3779B97F4A7C15ull + 1) {}
  float next() {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((x >> 40) & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f;
  }
  Tensor tensor(std::vector<int64_t> shape, float scale, float offset = 0.0f, bool bf16 = true) {
    Tensor t{std::move(shape), {}};
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    for (int64_t i = 0; i < n; ++i) {
      float v = offset + scale * next();
      if (bf16) v = from_bf16(to_bf16(v));
      t.values.push_back(v);
    }
    return t;
  }
};

/// GPT2LMHeadModel: n_layer 2, n_embd 8, n_head 2, vocab 11, n_positions 8.
inline Model gpt2(uint64_t seed = 1, bool prefix = true) {
  Model m;
  const int64_t h = 8, V = 11, P = 8, L = 2;
  m.config = {{"model_type", "gpt2"},
              {"architectures", {"GPT2LMHeadModel"}},
              {"n_embd", h},
              {"n_layer", L},
              {"n_head", 2},
              {"vocab_size", V},
              {"n_positions", P},
              {"n_inner", nullptr},
              {"activation_function", "gelu_new"},
              {"layer_norm_epsilon", 1e-5},
              {"resid_pdrop", 0.1},
              {"attn_pdrop", 0.1},
              {"embd_pdrop", 0.1},
              {"initializer_range", 0.02},
              {"bos_token_id", 7},
              {"eos_token_id", 7}};
  Rng r(seed);
  const std::string p = prefix ? "transformer." : "";
  m.tensors[p + "wte.weight"] = r.tensor({V, h}, 0.8f);
  m.tensors[p + "wpe.weight"] = r.tensor({P, h}, 0.5f);
  for (int i = 0; i < L; ++i) {
    const std::string H = p + "h." + std::to_string(i) + ".";
    m.tensors[H + "ln_1.weight"] = r.tensor({h}, 0.2f, 1.0f);
    m.tensors[H + "ln_1.bias"] = r.tensor({h}, 0.1f);
    m.tensors[H + "attn.c_attn.weight"] = r.tensor({h, 3 * h}, 0.6f);
    m.tensors[H + "attn.c_attn.bias"] = r.tensor({3 * h}, 0.2f);
    m.tensors[H + "attn.c_proj.weight"] = r.tensor({h, h}, 0.4f);
    m.tensors[H + "attn.c_proj.bias"] = r.tensor({h}, 0.1f);
    m.tensors[H + "ln_2.weight"] = r.tensor({h}, 0.2f, 1.0f);
    m.tensors[H + "ln_2.bias"] = r.tensor({h}, 0.1f);
    m.tensors[H + "mlp.c_fc.weight"] = r.tensor({h, 4 * h}, 0.4f);
    m.tensors[H + "mlp.c_fc.bias"] = r.tensor({4 * h}, 0.1f);
    m.tensors[H + "mlp.c_proj.weight"] = r.tensor({4 * h, h}, 0.3f);
    m.tensors[H + "mlp.c_proj.bias"] = r.tensor({h}, 0.1f);
  }
  m.tensors[p + "ln_f.weight"] = r.tensor({h}, 0.2f, 1.0f);
  m.tensors[p + "ln_f.bias"] = r.tensor({h}, 0.1f);
  return m;
}

/// A Llama-family model: hidden 16, 4 query heads in 2 groups of head dim 4, ffn 24, vocab 37,
/// 2 layers, 16 positions, RoPE base 100 (so every pair rotates noticeably). model_type "llama",
/// "mistral" or "qwen2" (q, k and v biases); tied or untied head.
inline Model llama(const std::string& type = "llama", bool tied = false, uint64_t seed = 2) {
  Model m;
  const int64_t h = 16, a = 4, g = 2, dh = 4, f = 24, V = 37, L = 2;
  const std::string cls = type == "llama"     ? "LlamaForCausalLM"
                          : type == "mistral" ? "MistralForCausalLM"
                                              : "Qwen2ForCausalLM";
  m.config = {{"model_type", type},          {"architectures", {cls}},    {"hidden_size", h},
              {"intermediate_size", f},      {"num_hidden_layers", L},    {"num_attention_heads", a},
              {"num_key_value_heads", g},    {"vocab_size", V},           {"max_position_embeddings", 16},
              {"rms_norm_eps", 1e-6},        {"rope_theta", 100.0},       {"hidden_act", "silu"},
              {"tie_word_embeddings", tied}, {"initializer_range", 0.02}, {"attention_dropout", 0.0},
              {"bos_token_id", 1},           {"eos_token_id", 2}};
  if (type == "llama") {
    m.config["head_dim"] = dh;
    m.config["attention_bias"] = false;
    m.config["mlp_bias"] = false;
    m.config["rope_scaling"] = nullptr;
  }
  if (type == "mistral") m.config["sliding_window"] = nullptr;
  Rng r(seed);
  m.tensors["model.embed_tokens.weight"] = r.tensor({V, h}, 1.0f);
  for (int i = 0; i < L; ++i) {
    const std::string H = "model.layers." + std::to_string(i) + ".";
    m.tensors[H + "input_layernorm.weight"] = r.tensor({h}, 0.2f, 1.0f);
    m.tensors[H + "self_attn.q_proj.weight"] = r.tensor({a * dh, h}, 0.7f);
    m.tensors[H + "self_attn.k_proj.weight"] = r.tensor({g * dh, h}, 0.7f);
    m.tensors[H + "self_attn.v_proj.weight"] = r.tensor({g * dh, h}, 0.5f);
    if (type == "qwen2") {
      m.tensors[H + "self_attn.q_proj.bias"] = r.tensor({a * dh}, 0.3f);
      m.tensors[H + "self_attn.k_proj.bias"] = r.tensor({g * dh}, 0.3f);
      m.tensors[H + "self_attn.v_proj.bias"] = r.tensor({g * dh}, 0.3f);
    }
    m.tensors[H + "self_attn.o_proj.weight"] = r.tensor({h, a * dh}, 0.4f);
    m.tensors[H + "post_attention_layernorm.weight"] = r.tensor({h}, 0.2f, 1.0f);
    m.tensors[H + "mlp.gate_proj.weight"] = r.tensor({f, h}, 0.5f);
    m.tensors[H + "mlp.up_proj.weight"] = r.tensor({f, h}, 0.5f);
    m.tensors[H + "mlp.down_proj.weight"] = r.tensor({h, f}, 0.4f);
  }
  m.tensors["model.norm.weight"] = r.tensor({h}, 0.2f, 1.0f);
  if (!tied) m.tensors["lm_head.weight"] = r.tensor({V, h}, 0.8f);
  return m;
}

// ---------------------------------------------------------------------------------------------
// Files

/// Writes `names` of `m` as one safetensors file, F32 or BF16, with {"format": "pt"}.
inline void write_safetensors(const std::string& path, const Model& m, const std::vector<std::string>& names,
                              const std::string& dtype) {
  const std::size_t elem = dtype == "BF16" ? 2 : 4;
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const std::string& n : names) {
    const Tensor& t = m.tensors.at(n);
    const std::size_t begin = data.size();
    for (float v : t.values) {
      if (elem == 2) {
        const uint16_t b = to_bf16(v);
        data.append(reinterpret_cast<const char*>(&b), 2);
      } else {
        data.append(reinterpret_cast<const char*>(&v), 4);
      }
    }
    header[n] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t len = text.size();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

/// Writes `m` into `dir` (created): config.json, and model.safetensors or, with shards > 1,
/// that many files (tensors dealt out in name order) and model.safetensors.index.json.
inline void write_model(const std::string& dir, const Model& m, const std::string& dtype = "F32", int shards = 1) {
  std::filesystem::create_directories(dir);
  json config = m.config;
  config["torch_dtype"] = dtype == "BF16" ? "bfloat16" : "float32";
  std::ofstream(dir + "/config.json") << config.dump(2) << "\n";
  std::vector<std::string> names;
  for (const auto& [n, t] : m.tensors) names.push_back(n);
  if (shards == 1) {
    write_safetensors(dir + "/model.safetensors", m, names, dtype);
    return;
  }
  json weight_map = json::object();
  std::vector<std::vector<std::string>> parts(static_cast<std::size_t>(shards));
  for (std::size_t i = 0; i < names.size(); ++i) parts[i % static_cast<std::size_t>(shards)].push_back(names[i]);
  for (int s = 0; s < shards; ++s) {
    char file[64];
    std::snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", s + 1, shards);
    write_safetensors(dir + "/" + file, m, parts[static_cast<std::size_t>(s)], dtype);
    for (const std::string& n : parts[static_cast<std::size_t>(s)]) weight_map[n] = file;
  }
  std::ofstream(dir + "/model.safetensors.index.json")
      << json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump(2);
}

/// One stored tensor: dtype, shape and raw bytes.
struct Stored {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

inline std::map<std::string, Stored> read_safetensors(const std::string& path, json* metadata = nullptr) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  uint64_t len = 0;
  in.read(reinterpret_cast<char*>(&len), 8);
  std::string text(len, '\0');
  in.read(text.data(), static_cast<std::streamsize>(len));
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const json header = json::parse(text);
  std::map<std::string, Stored> out;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") {
      if (metadata) *metadata = e;
      continue;
    }
    const auto b = e["data_offsets"][0].get<std::size_t>(), end = e["data_offsets"][1].get<std::size_t>();
    out[name] = Stored{e["dtype"].get<std::string>(), e["shape"].get<std::vector<int64_t>>(), data.substr(b, end - b)};
  }
  return out;
}

/// Every tensor of a Hugging Face directory (one file or shards), and the file each came from.
inline std::map<std::string, Stored> read_model(const std::string& dir,
                                                std::map<std::string, std::string>* files = nullptr) {
  std::map<std::string, Stored> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.size() < 12 || n.compare(n.size() - 12, 12, ".safetensors") != 0) continue;
    for (auto& [name, t] : read_safetensors(e.path().string())) {
      if (files) (*files)[name] = n;
      out[name] = std::move(t);
    }
  }
  return out;
}

/// The values of a stored F32 or BF16 tensor.
inline std::vector<float> values(const Stored& s) {
  std::vector<float> v;
  if (s.dtype == "F32") {
    v.resize(s.bytes.size() / 4);
    std::memcpy(v.data(), s.bytes.data(), s.bytes.size());
  } else {
    for (std::size_t i = 0; i < s.bytes.size(); i += 2) {
      uint16_t b;
      std::memcpy(&b, s.bytes.data() + i, 2);
      v.push_back(from_bf16(b));
    }
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// Reference forward passes, in double, on the Hugging Face tensors as stored.

using Mat = std::vector<std::vector<double>>;  // [tokens][features]

inline Mat norm(const Mat& x, const Tensor& w, const Tensor* b, double eps, bool rms) {
  Mat y = x;
  for (auto& row : y) {
    const std::size_t n = row.size();
    double mean = 0, var = 0;
    if (!rms) {
      for (double v : row) mean += v;
      mean /= static_cast<double>(n);
    }
    for (double v : row) var += (v - mean) * (v - mean);
    var /= static_cast<double>(n);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (std::size_t i = 0; i < n; ++i) row[i] = (row[i] - mean) * inv * w.values[i] + (b ? b->values[i] : 0.0);
  }
  return y;
}

/// x @ W^T + b with W [out, in] (torch.nn.Linear), or x @ W + b with conv1d (W [in, out]).
inline Mat linear(const Mat& x, const Tensor& w, const Tensor* b, bool conv1d = false) {
  const int64_t out_n = conv1d ? w.cols() : w.rows(), in_n = conv1d ? w.rows() : w.cols();
  Mat y(x.size(), std::vector<double>(static_cast<std::size_t>(out_n), 0.0));
  for (std::size_t t = 0; t < x.size(); ++t)
    for (int64_t o = 0; o < out_n; ++o) {
      double s = b ? b->values[static_cast<std::size_t>(o)] : 0.0;
      for (int64_t i = 0; i < in_n; ++i) s += x[t][static_cast<std::size_t>(i)] * (conv1d ? w.at(i, o) : w.at(o, i));
      y[t][static_cast<std::size_t>(o)] = s;
    }
  return y;
}

/// Causal attention of q [s][a dh] over k, v [s][g dh] (head j uses group j / (a / g)).
inline Mat attention(const Mat& q, const Mat& k, const Mat& v, int a, int g, int dh) {
  const std::size_t s = q.size();
  Mat ctx(s, std::vector<double>(static_cast<std::size_t>(a * dh), 0.0));
  for (int head = 0; head < a; ++head) {
    const int grp = head / (a / g);
    for (std::size_t i = 0; i < s; ++i) {
      std::vector<double> p(i + 1);
      double mx = -1e300;
      for (std::size_t j = 0; j <= i; ++j) {
        double d = 0;
        for (int c = 0; c < dh; ++c)
          d += q[i][static_cast<std::size_t>(head * dh + c)] * k[j][static_cast<std::size_t>(grp * dh + c)];
        p[j] = d / std::sqrt(static_cast<double>(dh));
        mx = std::max(mx, p[j]);
      }
      double sum = 0;
      for (double& x : p) sum += (x = std::exp(x - mx));
      for (std::size_t j = 0; j <= i; ++j)
        for (int c = 0; c < dh; ++c)
          ctx[i][static_cast<std::size_t>(head * dh + c)] += p[j] / sum * v[j][static_cast<std::size_t>(grp * dh + c)];
    }
  }
  return ctx;
}

inline void add(Mat& x, const Mat& y) {
  for (std::size_t t = 0; t < x.size(); ++t)
    for (std::size_t i = 0; i < x[t].size(); ++i) x[t][i] += y[t][i];
}

/// GPT2LMHeadModel's logits [s][V] for `tokens` (one sequence).
inline Mat gpt2_logits(const Model& m, const std::vector<int32_t>& tokens) {
  const json& c = m.config;
  const int h = c["n_embd"], a = c["n_head"], L = c["n_layer"], dh = h / a;
  const double eps = c["layer_norm_epsilon"];
  const auto T = [&](const std::string& n) -> const Tensor& { return m.tensors.at("transformer." + n); };
  Mat x(tokens.size(), std::vector<double>(static_cast<std::size_t>(h)));
  for (std::size_t t = 0; t < tokens.size(); ++t)
    for (int i = 0; i < h; ++i)
      x[t][static_cast<std::size_t>(i)] =
          T("wte.weight").at(tokens[t], i) + T("wpe.weight").at(static_cast<int64_t>(t), i);
  for (int l = 0; l < L; ++l) {
    const std::string H = "h." + std::to_string(l) + ".";
    const Mat qkv = linear(norm(x, T(H + "ln_1.weight"), &T(H + "ln_1.bias"), eps, false), T(H + "attn.c_attn.weight"),
                           &T(H + "attn.c_attn.bias"), true);
    Mat q(x.size()), k(x.size()), v(x.size());
    for (std::size_t t = 0; t < x.size(); ++t) {
      q[t].assign(qkv[t].begin(), qkv[t].begin() + h);
      k[t].assign(qkv[t].begin() + h, qkv[t].begin() + 2 * h);
      v[t].assign(qkv[t].begin() + 2 * h, qkv[t].end());
    }
    add(x, linear(attention(q, k, v, a, a, dh), T(H + "attn.c_proj.weight"), &T(H + "attn.c_proj.bias"), true));
    Mat u = linear(norm(x, T(H + "ln_2.weight"), &T(H + "ln_2.bias"), eps, false), T(H + "mlp.c_fc.weight"),
                   &T(H + "mlp.c_fc.bias"), true);
    for (auto& row : u)
      for (double& z : row) z = 0.5 * z * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (z + 0.044715 * z * z * z)));
    add(x, linear(u, T(H + "mlp.c_proj.weight"), &T(H + "mlp.c_proj.bias"), true));
  }
  return linear(norm(x, T("ln_f.weight"), &T("ln_f.bias"), eps, false), T("wte.weight"), nullptr);
}

/// RoPE on each head of x [s][heads dh] at positions 0..s-1: rotate-half (dims i and i + dh/2,
/// transformers' Llama), or, to show that the layout matters, interleaved (dims 2i and 2i + 1).
inline void rope(Mat& x, int heads, int dh, double base, bool interleaved) {
  for (std::size_t t = 0; t < x.size(); ++t)
    for (int hd = 0; hd < heads; ++hd)
      for (int i = 0; i < dh / 2; ++i) {
        const double angle = static_cast<double>(t) * std::pow(base, -2.0 * i / dh);
        const std::size_t i1 = static_cast<std::size_t>(hd * dh + (interleaved ? 2 * i : i));
        const std::size_t i2 = static_cast<std::size_t>(hd * dh + (interleaved ? 2 * i + 1 : i + dh / 2));
        const double x1 = x[t][i1], x2 = x[t][i2];
        x[t][i1] = x1 * std::cos(angle) - x2 * std::sin(angle);
        x[t][i2] = x2 * std::cos(angle) + x1 * std::sin(angle);
      }
}

/// The Llama family's logits [s][V]; `interleaved` and `swap_gate_up` compute the classic
/// mix-ups instead, which the tests show ptdp does not make.
inline Mat llama_logits(const Model& m, const std::vector<int32_t>& tokens, bool interleaved = false,
                        bool swap_gate_up = false) {
  const json& c = m.config;
  const int h = c["hidden_size"], a = c["num_attention_heads"], g = c["num_key_value_heads"],
            L = c["num_hidden_layers"];
  const int dh = h / a;
  const double eps = c["rms_norm_eps"], base = c["rope_theta"];
  const auto T = [&](const std::string& n) -> const Tensor& { return m.tensors.at(n); };
  const auto B = [&](const std::string& n) -> const Tensor* {
    const auto it = m.tensors.find(n);
    return it == m.tensors.end() ? nullptr : &it->second;
  };
  Mat x(tokens.size(), std::vector<double>(static_cast<std::size_t>(h)));
  for (std::size_t t = 0; t < tokens.size(); ++t)
    for (int i = 0; i < h; ++i) x[t][static_cast<std::size_t>(i)] = T("model.embed_tokens.weight").at(tokens[t], i);
  for (int l = 0; l < L; ++l) {
    const std::string H = "model.layers." + std::to_string(l) + ".";
    const Mat n1 = norm(x, T(H + "input_layernorm.weight"), nullptr, eps, true);
    Mat q = linear(n1, T(H + "self_attn.q_proj.weight"), B(H + "self_attn.q_proj.bias"));
    Mat k = linear(n1, T(H + "self_attn.k_proj.weight"), B(H + "self_attn.k_proj.bias"));
    const Mat v = linear(n1, T(H + "self_attn.v_proj.weight"), B(H + "self_attn.v_proj.bias"));
    rope(q, a, dh, base, interleaved);
    rope(k, g, dh, base, interleaved);
    add(x, linear(attention(q, k, v, a, g, dh), T(H + "self_attn.o_proj.weight"), nullptr));
    const Mat n2 = norm(x, T(H + "post_attention_layernorm.weight"), nullptr, eps, true);
    Mat gate = linear(n2, T(H + (swap_gate_up ? "mlp.up_proj.weight" : "mlp.gate_proj.weight")), nullptr);
    const Mat up = linear(n2, T(H + (swap_gate_up ? "mlp.gate_proj.weight" : "mlp.up_proj.weight")), nullptr);
    for (std::size_t t = 0; t < gate.size(); ++t)
      for (std::size_t i = 0; i < gate[t].size(); ++i)
        gate[t][i] = gate[t][i] / (1.0 + std::exp(-gate[t][i])) * up[t][i];
    add(x, linear(gate, T(H + "mlp.down_proj.weight"), nullptr));
  }
  const bool tied = c.value("tie_word_embeddings", false);
  return linear(norm(x, T("model.norm.weight"), nullptr, eps, true),
                T(tied ? "model.embed_tokens.weight" : "lm_head.weight"), nullptr);
}

}  // namespace hf
