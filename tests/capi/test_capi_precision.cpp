// Mixed precision and the attention choice through the C API, on one process: bf16 and f16
// models keep fp32 masters (what the parameter getters and the optimizer see) and track the
// fp32 model; an f16 model under a loss scale that overflows skips its step and backs off;
// the fused attention kernel gives the unfused path's loss and gradients; bad option values are
// refused naming the field.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ptdp/ptdp.h"
#include "tests/single_process.h"

namespace {

constexpr int32_t kBatch = 2;

ptdp_gpt_options tiny(ptdp_dtype precision, ptdp_attention attention = PTDP_ATTENTION_AUTO) {
  ptdp_gpt_options o;
  REQUIRE(ptdp_gpt_options_init(&o) == PTDP_SUCCESS);
  o.num_layers = 2;
  o.hidden_size = 32;
  o.num_attention_heads = 4;
  o.vocab_size = 96;
  o.make_vocab_size_divisible_by = 32;
  o.seq_length = 16;
  o.precision = precision;
  o.attention = attention;
  return o;
}

struct Batch {
  std::vector<int32_t> tokens, labels;
  explicit Batch(uint32_t seed, int32_t vocab, int32_t s) {
    tokens = sp::ids(static_cast<std::size_t>(kBatch * s), vocab, seed);
    labels = sp::ids(static_cast<std::size_t>(kBatch * s), vocab, seed + 7);
  }
};

struct Run {
  std::vector<float> losses;
  std::vector<ptdp_iteration_result> results;
};

// `iters` AdamW steps of one microbatch each; the gradients carry the optimizer's loss scale.
Run train(sp::World& w, const ptdp_gpt_options& o, int iters, const ptdp_optimizer_options* oo,
          ptdp_model* keep = nullptr) {
  ptdp_model m = nullptr;
  REQUIRE(ptdp_model_create(w.groups, &o, &m) == PTDP_SUCCESS);
  ptdp_optimizer opt = nullptr;
  REQUIRE(ptdp_optimizer_create(m, oo, &opt) == PTDP_SUCCESS);
  ptdp_schedule sched = nullptr;
  REQUIRE(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, 1, 1, &sched) == PTDP_SUCCESS);
  Run r;
  for (int it = 0; it < iters; ++it) {
    const Batch b(100u + static_cast<uint32_t>(it), o.vocab_size, o.seq_length);
    ptdp_iteration_result res;
    REQUIRE(ptdp_train_iteration(m, opt, sched, b.tokens.data(), b.labels.data(), kBatch, it, nullptr, &res) ==
            PTDP_SUCCESS);
    r.losses.push_back(res.loss);
    r.results.push_back(res);
  }
  CHECK(ptdp_schedule_destroy(sched) == PTDP_SUCCESS);
  CHECK(ptdp_optimizer_destroy(opt) == PTDP_SUCCESS);
  if (keep) {
    *keep = m;
  } else {
    CHECK(ptdp_model_destroy(m) == PTDP_SUCCESS);
  }
  return r;
}

std::vector<float> get(ptdp_model m, const char* name, std::size_t n, bool grad = false) {
  std::vector<float> v(n);
  const ptdp_status st = grad ? ptdp_model_get_grad(m, name, v.data(), n * sizeof(float))
                              : ptdp_model_get_param(m, name, v.data(), n * sizeof(float));
  REQUIRE(st == PTDP_SUCCESS);
  return v;
}

bool representable_in_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return (u & 0xffffu) == 0;
}

}  // namespace

TEST_CASE("bad precision and attention values are refused, naming the field", "[capi][precision]") {
  sp::World w;
  ptdp_model m = nullptr;
  ptdp_gpt_options o = tiny(PTDP_DTYPE_F32);
  o.precision = PTDP_DTYPE_I32;
  CHECK(ptdp_model_create(w.groups, &o, &m) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(ptdp_last_error()).find("options->precision = 3") != std::string::npos);
  CHECK(m == nullptr);
  o = tiny(PTDP_DTYPE_F32);
  o.attention = static_cast<ptdp_attention>(9);
  CHECK(ptdp_model_create(w.groups, &o, &m) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(ptdp_last_error()).find("options->attention = 9") != std::string::npos);
  CHECK(m == nullptr);
  // Defaults: fp32, automatic attention.
  ptdp_gpt_options d;
  REQUIRE(ptdp_gpt_options_init(&d) == PTDP_SUCCESS);
  CHECK(d.precision == PTDP_DTYPE_F32);
  CHECK(d.attention == PTDP_ATTENTION_AUTO);
}

TEST_CASE("a bf16 model trains like the fp32 model and keeps fp32 masters", "[capi][precision]") {
  sp::World w;
  ptdp_optimizer_options oo;
  REQUIRE(ptdp_optimizer_options_init(&oo) == PTDP_SUCCESS);
  oo.lr = 3e-3;
  const int iters = 5;
  const Run ref = train(w, tiny(PTDP_DTYPE_F32), iters, &oo);
  ptdp_model bf = nullptr;
  const Run half = train(w, tiny(PTDP_DTYPE_BF16), iters, &oo, &bf);
  for (int i = 0; i < iters; ++i) {
    INFO("iteration " << i << ": bf16 " << half.losses[i] << " vs fp32 " << ref.losses[i]);
    CHECK(std::fabs(half.losses[i] - ref.losses[i]) <= 2e-2 * ref.losses[i]);
    CHECK(half.results[i].skipped == 0);
    CHECK(std::isfinite(half.results[i].grad_norm));
  }
  CHECK(half.losses.back() < half.losses.front());
  // The optimizer's small steps land in the fp32 masters, which bf16 could not hold.
  const std::vector<float> w_qkv = get(bf, "decoder.layers.0.self_attention.linear_qkv.weight", 96 * 32);
  int not_bf16 = 0;
  for (float x : w_qkv) not_bf16 += representable_in_bf16(x) ? 0 : 1;
  CHECK(not_bf16 > static_cast<int>(w_qkv.size()) / 2);
  // Gradients are fp32 main gradients too.
  const std::vector<float> g = get(bf, "decoder.layers.0.mlp.linear_fc1.weight", 128 * 32, true);
  int not_bf16_grad = 0;
  for (float x : g) not_bf16_grad += representable_in_bf16(x) ? 0 : 1;
  CHECK(not_bf16_grad > static_cast<int>(g.size()) / 2);
  // A master set through the API is what the model computes with (rounded): the loss moves.
  float before = 0, after = 0;
  const Batch b(7, 96, 16);
  REQUIRE(ptdp_model_forward(bf, b.tokens.data(), b.labels.data(), kBatch, 0, 0, 0, nullptr, &before) == PTDP_SUCCESS);
  std::vector<float> zeros(96 * 32, 0.0f);
  REQUIRE(ptdp_model_set_param(bf, "decoder.layers.0.self_attention.linear_qkv.weight", zeros.data(),
                               zeros.size() * sizeof(float)) == PTDP_SUCCESS);
  REQUIRE(ptdp_model_forward(bf, b.tokens.data(), b.labels.data(), kBatch, 0, 0, 0, nullptr, &after) == PTDP_SUCCESS);
  CHECK(after != before);
  CHECK(ptdp_model_destroy(bf) == PTDP_SUCCESS);
}

TEST_CASE("the optimizer state of a 16-bit model counts its fp32 masters", "[capi][precision]") {
  sp::World w;
  std::size_t bytes[2] = {0, 0};
  const ptdp_dtype precisions[2] = {PTDP_DTYPE_F32, PTDP_DTYPE_BF16};
  for (int k = 0; k < 2; ++k) {
    const ptdp_gpt_options o = tiny(precisions[k]);
    ptdp_model m = nullptr;
    ptdp_optimizer opt = nullptr;
    REQUIRE(ptdp_model_create(w.groups, &o, &m) == PTDP_SUCCESS);
    REQUIRE(ptdp_optimizer_create(m, nullptr, &opt) == PTDP_SUCCESS);
    REQUIRE(ptdp_optimizer_state_bytes(opt, &bytes[k]) == PTDP_SUCCESS);
    CHECK(ptdp_optimizer_destroy(opt) == PTDP_SUCCESS);
    CHECK(ptdp_model_destroy(m) == PTDP_SUCCESS);
  }
  // Adam: 8 bytes of moments per parameter; bf16 adds the 4-byte master.
  CHECK(bytes[0] > 0);
  CHECK(2 * bytes[1] == 3 * bytes[0]);
}

TEST_CASE("an f16 model under a loss scale that overflows skips the step and backs off", "[capi][precision]") {
  sp::World w;
  ptdp_optimizer_options oo;
  REQUIRE(ptdp_optimizer_options_init(&oo) == PTDP_SUCCESS);
  oo.lr = 3e-3;
  oo.dynamic_loss_scale = 1;
  oo.initial_loss_scale = 16777216.0f;  // 2^24: the f16 logit gradients overflow (> 65504)
  oo.hysteresis = 1;
  const Run r = train(w, tiny(PTDP_DTYPE_F16), 12, &oo);
  CHECK(r.results[0].skipped == 1);
  CHECK(r.results[0].loss_scale == 16777216.0f);
  CHECK(r.results[1].loss_scale == 8388608.0f);  // halved after one overflow (hysteresis 1)
  int skipped = 0;
  for (const auto& res : r.results) skipped += res.skipped;
  CHECK(r.results.back().skipped_iterations == skipped);
  CHECK(r.results.back().skipped == 0);  // the scale came down far enough
  CHECK(r.results.back().loss_scale < 16777216.0f);
  // Once steps succeed, f16 with a safe scale tracks fp32.
  oo.dynamic_loss_scale = 0;
  oo.initial_loss_scale = 1024.0f;
  const Run f16 = train(w, tiny(PTDP_DTYPE_F16), 4, &oo);
  oo.initial_loss_scale = 1.0f;
  const Run ref = train(w, tiny(PTDP_DTYPE_F32), 4, &oo);
  for (int i = 0; i < 4; ++i) {
    INFO("iteration " << i << ": f16 " << f16.losses[i] << " vs fp32 " << ref.losses[i]);
    CHECK(f16.results[i].skipped == 0);
    CHECK(std::fabs(f16.losses[i] - ref.losses[i]) <= 1e-2 * ref.losses[i]);
  }
}

TEST_CASE("fused attention gives the unfused path's loss and gradients", "[capi][precision]") {
  sp::World w;
  for (const ptdp_dtype precision : {PTDP_DTYPE_F32, PTDP_DTYPE_BF16}) {
    INFO("precision " << static_cast<int>(precision));
    ptdp_model a = nullptr, b = nullptr;
    const ptdp_gpt_options oa = tiny(precision, PTDP_ATTENTION_UNFUSED);
    const ptdp_gpt_options ob = tiny(precision, PTDP_ATTENTION_FUSED);
    REQUIRE(ptdp_model_create(w.groups, &oa, &a) == PTDP_SUCCESS);
    REQUIRE(ptdp_model_create(w.groups, &ob, &b) == PTDP_SUCCESS);
    const Batch batch(3, 96, 16);
    float la = 0, lb = 0;
    // Dropout on (training): both paths drop the same attention probabilities.
    REQUIRE(ptdp_model_forward_backward(a, batch.tokens.data(), batch.labels.data(), kBatch, 2, 1, 1.0f, nullptr,
                                        &la) == PTDP_SUCCESS);
    REQUIRE(ptdp_model_forward_backward(b, batch.tokens.data(), batch.labels.data(), kBatch, 2, 1, 1.0f, nullptr,
                                        &lb) == PTDP_SUCCESS);
    const double tol = precision == PTDP_DTYPE_F32 ? 1e-5 : 1e-2;
    CHECK(std::fabs(la - lb) <= tol * std::fabs(la));
    for (const char* name : {"decoder.layers.0.self_attention.linear_qkv.weight",
                             "decoder.layers.1.self_attention.linear_qkv.weight"}) {
      const std::vector<float> ga = get(a, name, 96 * 32, true), gb = get(b, name, 96 * 32, true);
      double num = 0, den = 0;
      for (std::size_t i = 0; i < ga.size(); ++i) {
        num += (ga[i] - gb[i]) * (ga[i] - gb[i]);
        den += ga[i] * ga[i];
      }
      INFO(name << ": relative gradient difference " << std::sqrt(num / den));
      CHECK(den > 0);
      CHECK(std::sqrt(num / den) <= (precision == PTDP_DTYPE_F32 ? 1e-5 : 3e-2));
    }
    CHECK(ptdp_model_destroy(a) == PTDP_SUCCESS);
    CHECK(ptdp_model_destroy(b) == PTDP_SUCCESS);
  }
}
