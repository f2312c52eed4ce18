// The full gradient of a tiny GPT against central finite differences of its loss, through the
// C API in one process (t = 1, a runtime without MPI).
//
// Every element of every parameter is perturbed with ptdp_model_set_param and the loss taken
// with ptdp_model_forward; the gradient from ptdp_model_forward_backward (ptdp_model_get_grad)
// must match the difference quotients as a whole vector and element by element. The checker is
// itself checked: a gradient scaled by 1.01 or 0.99, or with any single parameter's gradient
// zeroed, must be rejected.
//
// Numerics (the engine is fp32; the loss comes back as a float):
//   - the loss L is 2.5 .. 3.3 here; each evaluation carries a round-off error delta of about
//     an ulp (ulp(L) = 2.4e-7): half an ulp from rounding the mean to float, and the forward's
//     own fp32 round-off, which a perturbation reshuffles;
//   - the five-point central stencil (8 (L(+e) - L(-e)) - (L(+2e) - L(-2e))) / 12e, e = 1e-2,
//     has a truncation error of e^4 / 30 |L'''''| (negligible: the measured error does not
//     change between e = 1e-2 and 2e-2, while the plain 2-point difference's grows as e^2) and
//     a round-off error of at most 18 delta / 12e = 1.5 delta / e = 7e-5 for delta = 2 ulps;
//   - the perturbed values are rounded to float: the quotient divides by the actual steps.
// Per element: |fd - g| <= 1e-4 + 1e-3 |g| (that round-off bound with margin, plus 0.1% for
// the truncation and the gradient's own fp32 rounding; measured worst |fd - g| is 2.8e-5). As a
// vector: ||fd - g|| / ||g|| < 5e-4 (measured 1.1e-4 .. 1.4e-4).
// The gradients are O(0.01 .. 0.5) (init std 0.3), so a 1% scaling moves ||fd - g|| / ||g||
// to 1e-2, twenty times the bound, and zeroing a parameter whose gradient has any entry above
// 1e-4 fails the element check (the test checks that this holds for every parameter).
//
// Masks and documents (the `masked` cases): labels of PTDP_IGNORE_INDEX, position ids that
// restart inside a sample and document starts (ptdp_pipeline_options::masks of
// ptdp_model_forward_backward and ptdp_model_forward): the gradient of the masked mean loss,
// with learned positions and with RoPE and grouped-query attention, fused and unfused attention
// alike. A microbatch whose
// every label is ignored has loss 0 and leaves every gradient 0.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "ptdp/ptdp.h"

namespace {

constexpr double kEps = 1e-2;
constexpr double kTolAbs = 1e-4;
constexpr double kTolRel = 1e-3;
constexpr double kTolNorm = 5e-4;

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
double urand(uint64_t seed, uint64_t i) {
  return static_cast<double>(mix(mix(seed) ^ i) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

struct Param {
  std::string name;
  std::size_t rows = 0, cols = 1;
  std::vector<float> value, grad, fd;
};

/// The verdict of the checker on one gradient against the finite differences.
struct Verdict {
  double norm_rel = 0;     // ||fd - g|| / ||g||
  std::size_t bad = 0;     // elements outside kTolAbs + kTolRel |g|
  std::string first_bad;   // the first of them
  bool pass() const { return norm_rel < kTolNorm && bad == 0; }
};

Verdict judge(const std::vector<Param>& params, const std::vector<std::vector<float>>& grads) {
  Verdict v;
  double diff2 = 0, g2 = 0;
  for (std::size_t p = 0; p < params.size(); ++p) {
    for (std::size_t i = 0; i < params[p].fd.size(); ++i) {
      const double g = grads[p][i], fd = params[p].fd[i];
      diff2 += (fd - g) * (fd - g);
      g2 += g * g;
      if (!(std::fabs(fd - g) <= kTolAbs + kTolRel * std::fabs(g))) {
        if (v.bad++ == 0) {
          v.first_bad = params[p].name + "[" + std::to_string(i) + "]: fd " + std::to_string(fd) + " vs grad " +
                        std::to_string(g);
        }
      }
    }
  }
  v.norm_rel = std::sqrt(diff2) / std::sqrt(g2);
  return v;
}

struct Fixture {
  ptdp_runtime rt = nullptr;
  ptdp_groups groups = nullptr;
  ptdp_model model = nullptr;
  ~Fixture() {
    ptdp_model_destroy(model);
    ptdp_groups_destroy(groups);
    ptdp_runtime_destroy(rt);
  }
};

/// The decoder's options beyond the GPT's (the Llama family), each checked against finite
/// differences on its own configuration.
enum class Arch {
  Gpt,
  Llama,     // RMSNorm, SwiGLU, RoPE, grouped-query attention (4 heads, 2 groups), head dim 4 != h/a
             // (kv_channels), no biases, untied output layer
  Qwen2,     // the same with the qkv bias kept and half of each head rotated (rotary_percent 0.5)
  QkNorm,    // RMSNorm over each query and key head, multi-query attention (1 group)
  GeluNoBias, // LayerNorm q/k norms, GeLU without biases (its GeLU outside the GEMM), no positions
  QkAcross,  // RMSNorms over the whole query and key projections (OLMo 2, OLMoE), 2 groups
  // Multi-latent attention, its latents normalised (--qk-layernorm): without query compression
  // (linear_q_proj) and value heads narrower than the query/key heads (the padded core
  // attention), and with it (linear_q_down_proj, q_layernorm, linear_q_up_proj), v = dq
  Mla,
  MlaLora,
  Yarn       // Llama with YaRN: interpolated frequencies and cos/sin scaled by mscale / mscale_all_dim
};

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::Gpt: return "gpt";
    case Arch::Llama: return "llama";
    case Arch::Qwen2: return "qwen2";
    case Arch::QkNorm: return "qk-norm, multi-query";
    case Arch::QkAcross: return "qk-norm across heads";
    case Arch::GeluNoBias: return "gelu without biases, no positions";
    case Arch::Mla: return "multi-latent attention";
    case Arch::MlaLora: return "multi-latent attention, q compressed";
    case Arch::Yarn: return "yarn";
  }
  return "?";
}

void set_arch(ptdp_gpt_options& o, Arch a) {
  if (a == Arch::Gpt) return;
  o.kv_channels = 4;
  o.num_attention_heads = 4;
  o.num_query_groups = 2;
  o.disable_bias_linear = 1;
  o.position_embedding_type = PTDP_POSITION_EMBEDDING_ROPE;
  o.normalization = PTDP_NORMALIZATION_RMSNORM;
  o.swiglu = 1;
  o.ffn_hidden_size = 6;
  switch (a) {
    case Arch::Llama: o.untie_embeddings_and_output_weights = 1; break;
    case Arch::Qwen2:
      o.add_qkv_bias = 1;
      o.rotary_percent = 0.5f;
      o.rotary_base = 1000.0;
      break;
    case Arch::QkNorm:
      o.qk_layernorm = 1;
      o.num_query_groups = 1;
      break;
    case Arch::QkAcross:
      o.qk_layernorm = 1;
      o.qk_layernorm_across_heads = 1;
      break;
    case Arch::Mla:
    case Arch::MlaLora:
      o.multi_latent_attention = 1;
      o.qk_layernorm = 1;
      o.num_query_groups = 0;
      o.kv_channels = 0;
      o.kv_lora_rank = 3;
      o.q_lora_rank = a == Arch::MlaLora ? 5 : 0;
      o.qk_head_dim = a == Arch::MlaLora ? 2 : 4;
      o.qk_pos_emb_head_dim = a == Arch::MlaLora ? 4 : 2;
      o.v_head_dim = a == Arch::MlaLora ? 6 : 3;
      break;
    case Arch::Yarn:  // frequency 0 kept, frequency 1 half interpolated; cos and sin times 1.17
      o.rope_type = PTDP_ROPE_TYPE_YARN;
      o.rotary_base = 100.0;
      o.rotary_scaling_factor = 4.0f;
      o.original_max_position_embeddings = 64;
      o.beta_fast = 4.0f;
      o.mscale = 1.8f;
      o.mscale_all_dim = 0.5f;
      break;
    case Arch::GeluNoBias:
      o.qk_layernorm = 1;
      o.normalization = PTDP_NORMALIZATION_LAYERNORM;
      o.swiglu = 0;
      o.ffn_hidden_size = 12;
      o.position_embedding_type = PTDP_POSITION_EMBEDDING_NONE;
      break;
    default: break;
  }
}

/// The masked cases' batch: two samples of 4 tokens; sample 0 holds documents [0, 1] and
/// [2, 3], sample 1 documents [0] and [1, 3]; two labels are ignored.
struct Masks {
  std::vector<int32_t> positions = {0, 1, 0, 1, 0, 0, 1, 2};
  std::vector<int32_t> starts = {0, 0, 2, 2, 0, 1, 1, 1};
  ptdp_batch_masks c{};
  Masks() {
    ptdp_batch_masks_init(&c);
    c.position_ids = positions.data();
    c.document_starts = starts.data();
  }
};

void check_gradient(int32_t untie, float dropout, Arch arch = Arch::Gpt, bool masked = false,
                    ptdp_attention attention = PTDP_ATTENTION_AUTO) {
  Fixture f;
  ptdp_runtime_options ro;
  ptdp_runtime_options_init(&ro);
  ro.use_mpi = 0;
  REQUIRE(ptdp_runtime_create(&ro, &f.rt) == PTDP_SUCCESS);
  REQUIRE(ptdp_groups_create(f.rt, nullptr, &f.groups) == PTDP_SUCCESS);

  ptdp_gpt_options o;
  ptdp_gpt_options_init(&o);
  o.num_layers = 1;
  o.hidden_size = 8;
  o.num_attention_heads = 2;
  o.vocab_size = 11;
  o.make_vocab_size_divisible_by = 4;  // padded to 12: one padded row
  o.seq_length = 4;
  o.hidden_dropout = dropout;
  o.attention_dropout = dropout;
  o.init_method_std = 0.3f;
  o.untie_embeddings_and_output_weights = untie;
  o.seed = 77;
  o.attention = attention;
  set_arch(o, arch);
  REQUIRE(ptdp_model_create(f.groups, &o, &f.model) == PTDP_SUCCESS);
  ptdp_model m = f.model;

  // Parameters, moved off their trivial init (zero biases, unit LayerNorm weights).
  int32_t count = 0;
  REQUIRE(ptdp_model_num_params(m, &count) == PTDP_SUCCESS);
  std::vector<Param> params(static_cast<std::size_t>(count));
  for (int32_t i = 0; i < count; ++i) {
    Param& p = params[static_cast<std::size_t>(i)];
    char name[128];
    int32_t ndim = 0;
    int64_t shape[2] = {0, 1};
    REQUIRE(ptdp_model_param_info(m, i, name, sizeof name, &ndim, shape, nullptr) == PTDP_SUCCESS);
    p.name = name;
    p.rows = static_cast<std::size_t>(shape[0]);
    p.cols = ndim == 2 ? static_cast<std::size_t>(shape[1]) : 1;
    p.value.resize(p.rows * p.cols);
    REQUIRE(ptdp_model_get_param(m, name, p.value.data(), p.value.size() * 4) == PTDP_SUCCESS);
    for (std::size_t k = 0; k < p.value.size(); ++k) p.value[k] += static_cast<float>(0.2 * urand(1000 + static_cast<uint64_t>(i), k));
    REQUIRE(ptdp_model_set_param(m, name, p.value.data(), p.value.size() * 4) == PTDP_SUCCESS);
  }

  const int32_t b = 2;
  const std::vector<int32_t> tokens = {3, 10, 0, 7, 5, 5, 9, 1};
  const std::vector<int32_t> labels = masked ? std::vector<int32_t>{10, PTDP_IGNORE_INDEX, 7, 2, PTDP_IGNORE_INDEX, 9, 1, 4}
                                             : std::vector<int32_t>{10, 0, 7, 2, 5, 9, 1, 4};
  const int64_t iteration = 3, microbatch = 1;
  const Masks masks;
  ptdp_pipeline_options mk;
  REQUIRE(ptdp_pipeline_options_init(&mk) == PTDP_SUCCESS);
  mk.masks = masked ? &masks.c : nullptr;

  REQUIRE(ptdp_model_zero_grad(m) == PTDP_SUCCESS);
  float loss0 = 0;
  REQUIRE(ptdp_model_forward_backward(m, tokens.data(), labels.data(), b, iteration, microbatch, 1.0f, &mk, &loss0) ==
          PTDP_SUCCESS);
  for (Param& p : params) {
    p.grad.resize(p.value.size());
    REQUIRE(ptdp_model_get_grad(m, p.name.c_str(), p.grad.data(), p.grad.size() * 4) == PTDP_SUCCESS);
  }
  const auto loss_at = [&]() {
    float l = 0;
    REQUIRE(ptdp_model_forward(m, tokens.data(), labels.data(), b, iteration, microbatch, 1, &mk, &l) == PTDP_SUCCESS);
    return static_cast<double>(l);
  };
  if (masked) {
    // The masks matter: without them (the ignored labels replaced) the loss is another.
    std::vector<int32_t> plain = labels;
    for (int32_t& x : plain) x = x < 0 ? 0 : x;
    float other = 0;
    REQUIRE(ptdp_model_forward(m, tokens.data(), plain.data(), b, iteration, microbatch, 1, nullptr, &other) ==
            PTDP_SUCCESS);
    CHECK(other != loss0);
  }
  // The forward of the same step (same dropout masks) is the function being differentiated.
  REQUIRE(loss_at() == static_cast<double>(loss0));

  double worst_abs = 0, plain_diff2 = 0, plain_g2 = 0;  // and of the plain 2-point difference at e
  for (Param& p : params) {
    p.fd.assign(p.value.size(), 0.0f);
    std::vector<float> v = p.value;
    for (std::size_t k = 0; k < v.size(); ++k) {
      const float x = p.value[k];
      double l[4];
      float at[4];
      const double steps[4] = {kEps, -kEps, 2 * kEps, -2 * kEps};
      for (int s = 0; s < 4; ++s) {
        at[s] = static_cast<float>(x + steps[s]);
        v[k] = at[s];
        REQUIRE(ptdp_model_set_param(m, p.name.c_str(), v.data(), v.size() * 4) == PTDP_SUCCESS);
        l[s] = loss_at();
      }
      v[k] = x;
      // The actual steps after rounding to float: h1 = (at0 - at1) / 2, h2 = (at2 - at3) / 2
      // (both ~e and ~2e). Five-point stencil in terms of the two central differences.
      const double h1 = (static_cast<double>(at[0]) - at[1]) / 2, h2 = (static_cast<double>(at[2]) - at[3]) / 2;
      const double d1 = (l[0] - l[1]) / (2 * h1), d2 = (l[2] - l[3]) / (2 * h2);
      // d1 = L' + c h1^2, d2 = L' + c h2^2: eliminate c.
      p.fd[k] = static_cast<float>((h2 * h2 * d1 - h1 * h1 * d2) / (h2 * h2 - h1 * h1));
      const bool padded_row = p.name == "embedding.word_embeddings.weight" || p.name == "output_layer.weight";
      if (padded_row && k / p.cols >= static_cast<std::size_t>(o.vocab_size)) {
        // A padded vocabulary row takes no part: its perturbation changes no bit of the loss.
        CHECK(l[0] == static_cast<double>(loss0));
        CHECK(l[3] == static_cast<double>(loss0));
        CHECK(p.grad[k] == 0.0f);
      }
      worst_abs = std::fmax(worst_abs, std::fabs(p.fd[k] - p.grad[k]));
      plain_diff2 += (d1 - p.grad[k]) * (d1 - p.grad[k]);
      plain_g2 += static_cast<double>(p.grad[k]) * p.grad[k];
    }
    REQUIRE(ptdp_model_set_param(m, p.name.c_str(), p.value.data(), p.value.size() * 4) == PTDP_SUCCESS);
  }
  REQUIRE(loss_at() == static_cast<double>(loss0));  // every parameter restored

  std::vector<std::vector<float>> grads;
  double gmax = 0;
  for (const Param& p : params) {
    grads.push_back(p.grad);
    for (float g : p.grad) gmax = std::fmax(gmax, std::fabs(g));
  }
  const Verdict v = judge(params, grads);
  std::printf("FD (%s%s, untie %d, dropout %.1f): loss %.6f, %zu parameters, max |g| %.3g, ||fd - g|| / ||g|| = %.3g, "
              "max |fd - g| = %.3g (plain 2-point difference at e: ||fd - g|| / ||g|| = %.3g)\n",
              arch_name(arch), masked ? (attention == PTDP_ATTENTION_FUSED ? ", masks, fused" : ", masks") : "",
              o.untie_embeddings_and_output_weights, static_cast<double>(dropout), static_cast<double>(loss0),
              params.size(), gmax, v.norm_rel, worst_abs, std::sqrt(plain_diff2 / plain_g2));
  INFO("first element off: " << v.first_bad);
  CHECK(v.norm_rel < kTolNorm);
  CHECK(v.bad == 0);

  // The checker rejects wrong gradients: scaled by 1.01 or 0.99 ...
  for (double scale : {1.01, 0.99}) {
    std::vector<std::vector<float>> wrong = grads;
    for (auto& g : wrong)
      for (float& x : g) x = static_cast<float>(x * scale);
    const Verdict w = judge(params, wrong);
    INFO("gradient scaled by " << scale << ": ||fd - g|| / ||g|| = " << w.norm_rel << ", " << w.bad << " elements off");
    CHECK_FALSE(w.pass());
    CHECK(w.norm_rel >= kTolNorm);  // the norm criterion alone catches it
  }
  // ... or with any one parameter's gradient zeroed; except k_layernorm.bias without RoPE,
  // whose true gradient is zero: it adds q . bias to every score of a query row, and softmax is
  // shift-invariant (its finite differences are round-off, checked as such here).
  for (std::size_t p = 0; p < params.size(); ++p) {
    if (params[p].name.find("k_layernorm.bias") != std::string::npos &&
        o.position_embedding_type != PTDP_POSITION_EMBEDDING_ROPE) {
      for (std::size_t i = 0; i < params[p].fd.size(); ++i) {
        CHECK(std::fabs(params[p].fd[i]) <= kTolAbs);
        CHECK(std::fabs(grads[p][i]) <= 1e-6);
      }
      continue;
    }
    std::vector<std::vector<float>> wrong = grads;
    std::fill(wrong[p].begin(), wrong[p].end(), 0.0f);
    const Verdict w = judge(params, wrong);
    INFO("gradient of " << params[p].name << " zeroed: ||fd - g|| / ||g|| = " << w.norm_rel << ", " << w.bad
                        << " elements off");
    CHECK_FALSE(w.pass());
    CHECK(w.bad > 0);  // the element criterion alone catches it
  }
}

}  // namespace

TEST_CASE("model FD: gradient of a tiny GPT (tied embeddings) = central finite differences", "[model][fd]") {
  check_gradient(0, 0.0f);
}

TEST_CASE("model FD: gradient of a tiny GPT (untied embeddings) = central finite differences", "[model][fd]") {
  check_gradient(1, 0.0f);
}

TEST_CASE("model FD: gradient with dropout 0.1 (masks fixed by iteration, microbatch) = finite differences",
          "[model][fd]") {
  check_gradient(0, 0.1f);
}

TEST_CASE("model FD: Llama-style decoder (RMSNorm, SwiGLU, RoPE, GQA, no biases, untied) = finite differences",
          "[model][fd][llama]") {
  check_gradient(0, 0.0f, Arch::Llama);
}

TEST_CASE("model FD: Qwen2-style decoder (qkv bias, half the head rotated) with dropout = finite differences",
          "[model][fd][llama]") {
  check_gradient(0, 0.1f, Arch::Qwen2);
}

TEST_CASE("model FD: YaRN's frequencies and cos/sin amplitude = finite differences", "[model][fd][yarn]") {
  check_gradient(0, 0.0f, Arch::Yarn);
}

TEST_CASE("model FD: per-head RMSNorm of q and k with multi-query attention = finite differences",
          "[model][fd][llama]") {
  check_gradient(0, 0.0f, Arch::QkNorm);
}

TEST_CASE("model FD: RMSNorms of q and k across the heads (OLMoE) = finite differences", "[model][fd][llama]") {
  check_gradient(0, 0.0f, Arch::QkAcross);
}

TEST_CASE("model FD: per-head LayerNorm of q and k, GeLU without biases, no positions = finite differences",
          "[model][fd][llama]") {
  check_gradient(0, 0.0f, Arch::GeluNoBias);
}

TEST_CASE("model FD: ignored labels, reset positions and documents (learned positions), unfused attention = "
          "finite differences",
          "[model][fd][masks]") {
  check_gradient(0, 0.0f, Arch::Gpt, true, PTDP_ATTENTION_UNFUSED);
}

TEST_CASE("model FD: ignored labels, reset positions and documents, fused attention with dropout = finite differences",
          "[model][fd][masks]") {
  check_gradient(1, 0.1f, Arch::Gpt, true, PTDP_ATTENTION_FUSED);
}

TEST_CASE("model FD: ignored labels and documents with RoPE and grouped-query attention = finite differences",
          "[model][fd][masks][llama]") {
  check_gradient(0, 0.0f, Arch::Llama, true);
}

TEST_CASE("model FD: multi-latent attention without query compression, value heads padded = finite differences",
          "[model][fd][mla]") {
  check_gradient(0, 0.0f, Arch::Mla);
}

TEST_CASE("model FD: multi-latent attention with query compression, dropout, documents = finite differences",
          "[model][fd][mla]") {
  check_gradient(0, 0.1f, Arch::MlaLora, true);
}

TEST_CASE("model: a microbatch whose every label is ignored has loss 0 and no gradient", "[model][masks]") {
  Fixture f;
  ptdp_runtime_options ro;
  ptdp_runtime_options_init(&ro);
  ro.use_mpi = 0;
  REQUIRE(ptdp_runtime_create(&ro, &f.rt) == PTDP_SUCCESS);
  REQUIRE(ptdp_groups_create(f.rt, nullptr, &f.groups) == PTDP_SUCCESS);
  ptdp_gpt_options o;
  ptdp_gpt_options_init(&o);
  o.num_layers = 1;
  o.hidden_size = 8;
  o.num_attention_heads = 2;
  o.vocab_size = 11;
  o.seq_length = 4;
  REQUIRE(ptdp_model_create(f.groups, &o, &f.model) == PTDP_SUCCESS);
  const std::vector<int32_t> tokens = {3, 10, 0, 7, 5, 5, 9, 1};
  const std::vector<int32_t> labels(8, PTDP_IGNORE_INDEX);
  REQUIRE(ptdp_model_zero_grad(f.model) == PTDP_SUCCESS);
  float loss = 123.0f;
  REQUIRE(ptdp_model_forward_backward(f.model, tokens.data(), labels.data(), 2, 0, 0, 1.0f, nullptr, &loss) ==
          PTDP_SUCCESS);
  CHECK(loss == 0.0f);
  REQUIRE(ptdp_model_forward(f.model, tokens.data(), labels.data(), 2, 0, 0, 0, nullptr, &loss) == PTDP_SUCCESS);
  CHECK(loss == 0.0f);
  int32_t count = 0;
  REQUIRE(ptdp_model_num_params(f.model, &count) == PTDP_SUCCESS);
  for (int32_t i = 0; i < count; ++i) {
    char name[128];
    int32_t ndim = 0;
    int64_t shape[2] = {0, 1};
    REQUIRE(ptdp_model_param_info(f.model, i, name, sizeof name, &ndim, shape, nullptr) == PTDP_SUCCESS);
    std::vector<float> g(static_cast<std::size_t>(shape[0] * (ndim == 2 ? shape[1] : 1)), 1.0f);
    REQUIRE(ptdp_model_get_grad(f.model, name, g.data(), g.size() * 4) == PTDP_SUCCESS);
    std::size_t nonzero = 0;
    for (float x : g) nonzero += x != 0.0f;  // NaN counts too
    INFO(name);
    CHECK(nonzero == 0);
  }
  // One counted label: the loss is that token's, and every other label is ignored.
  std::vector<int32_t> one = labels;
  one[5] = 9;
  float l1 = 0;
  REQUIRE(ptdp_model_forward(f.model, tokens.data(), one.data(), 2, 0, 0, 0, nullptr, &l1) == PTDP_SUCCESS);
  CHECK(std::isfinite(l1));
  CHECK(l1 > 0.0f);
}
