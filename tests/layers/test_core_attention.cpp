// The core attention strategies of core/layers/attention/ on one process: which one a layer
// picks from its settings and its backend's kernels (once, when it is built), that the unfused
// and fused ones compute the same attention and gradients (grouped-query heads, packed
// documents, dropout), that selective recomputation changes no bit, and that generation's
// key/value-cache attention gives the rows of the whole sequence's.
#include <catch2/catch.hpp>

#include <string>

#include "attention_test.h"
#include "core/layers/attention.h"
#include "core/layers/kv_cache.h"

using namespace ptdp;
using attention_test::config;
using attention_test::max_diff;
using attention_test::random;

namespace {

std::string chosen(const LayerConfig& cfg, int c, AttentionKernels kernels) {
  TensorParallel tp;
  tp.cp.size = c;  // ring and all-gather need no communicator until they run
  return make_core_attention(CoreAttentionSpec(cfg, 0, tp, "layer"), kernels)->name();
}

std::string refusal(const LayerConfig& cfg, int c, AttentionKernels kernels) {
  try {
    chosen(cfg, c, kernels);
  } catch (const Error& e) {
    return e.code() == ErrorCode::Unsupported ? e.what() : "wrong code: " + std::string(e.what());
  }
  return "accepted";
}

// A forward and backward through `core` on qkv [s*b, qkv cols] and dctx [s*b, ctx cols].
struct Pass {
  Tensor ctx, dqkv;
};
Pass run(CoreAttention& core, const Tensor& qkv, const Tensor& dctx, const AttentionBatch& batch, const Step& step) {
  Pass p;
  p.ctx = core.forward(qkv, batch, step);
  p.dqkv = core.backward(dctx, batch, step);
  return p;
}

}  // namespace

TEST_CASE("a layer's core attention is chosen once from its settings and its backend's kernels", "[layers][attention]") {
  LayerConfig cfg = config();
  const AttentionKernels both{"gpu", true, true}, block_only{"gpu", false, true}, fused_only{"gpu", true, false},
      none{"gpu", false, false};
  SECTION("without context parallelism: --attention-backend, auto taking the fused kernel where there is one") {
    CHECK(chosen(cfg, 1, both) == "fused");
    CHECK(chosen(cfg, 1, none) == "unfused");
    cfg.attention = AttentionImpl::Unfused;
    CHECK(chosen(cfg, 1, both) == "unfused");
    cfg.attention = AttentionImpl::Fused;
    CHECK(chosen(cfg, 1, fused_only) == "fused");
  }
  SECTION("under context parallelism: ring attention on block kernels, else the all-gather around the choice above") {
    for (const AttentionImpl impl : {AttentionImpl::Auto, AttentionImpl::Fused, AttentionImpl::Unfused}) {
      cfg.attention = impl;
      CHECK(chosen(cfg, 2, both) == "ring");
      CHECK(chosen(cfg, 2, block_only) == "ring");
    }
    cfg.attention = AttentionImpl::Auto;
    CHECK(chosen(cfg, 4, fused_only) == "all-gather of fused");
    CHECK(chosen(cfg, 4, none) == "all-gather of unfused");
    cfg.attention = AttentionImpl::Unfused;
    CHECK(chosen(cfg, 2, fused_only) == "all-gather of unfused");
  }
  SECTION("--attention-backend fused without a fused kernel is refused when the layer is built, naming what is missing") {
    cfg.attention = AttentionImpl::Fused;
    cfg.precision = DType::BF16;
    const std::string want = "attention = fused: the gpu backend has no fused attention for bf16 with head dim 8 "
                             "(use auto or unfused)";
    CHECK(refusal(cfg, 1, none) == want);
    CHECK(refusal(cfg, 1, block_only) == want);
    CHECK(refusal(cfg, 2, none) == want);  // the all-gather would run the missing kernel
    CHECK(refusal(cfg, 2, block_only) == "accepted");  // ring attention needs no whole-sequence kernel
  }
  SECTION("the CPU backend has every kernel, and a self-attention layer built on it runs the fused one") {
    const AttentionKernels cpu = attention_kernels(backend_for(Device{}), DType::F32, cfg.head_dim());
    CHECK(cpu.fused);
    CHECK(cpu.block);
    ParamTable params(0, 1);
    const SelfAttention auto_layer(params, "decoder.layers.0.self_attention", cfg, 0, TensorParallel{}, Device{});
    CHECK(auto_layer.core_attention().name() == "fused");
    cfg.attention = AttentionImpl::Unfused;
    const SelfAttention unfused_layer(params, "decoder.layers.1.self_attention", cfg, 1, TensorParallel{}, Device{});
    CHECK(unfused_layer.core_attention().name() == "unfused");
  }
}

TEST_CASE("the unfused and fused core attentions compute the same context and gradients", "[layers][attention]") {
  const int64_t b = 2;
  const bool documents = GENERATE(false, true);
  const float dropout = GENERATE(0.0f, 0.2f);
  const LayerConfig cfg = config(dropout);
  const CoreAttentionSpec spec(cfg, 3, TensorParallel{}, "layer");
  const Tensor qkv = random(cfg.seq_length * b, spec.qkv_cols(), 1);   // [s*b, g*(a/g+2)*dh]
  const Tensor dctx = random(cfg.seq_length * b, spec.ctx_cols(), 2);  // [s*b, a*dh]
  const Tensor starts = attention_test::documents(b, cfg.seq_length);  // [b, s] i32
  const AttentionBatch batch{b, documents ? starts.data<int32_t>() : nullptr};
  Step step;
  step.iteration = 5;
  step.microbatch = 1;
  INFO("documents " << documents << ", attention dropout " << dropout);
  const Pass unfused = run(*make_unfused_attention(spec), qkv, dctx, batch, step);
  const Pass fused = run(*make_fused_attention(spec), qkv, dctx, batch, step);
  CHECK(max_diff(unfused.ctx, fused.ctx) < 1e-5);
  CHECK(max_diff(unfused.dqkv, fused.dqkv) < 1e-5);
  if (documents) {
    // A query of sample 0's second document (positions 5..10) sees nothing of the first: its
    // context is the same when the first document's keys and values change.
    std::vector<float> other = attention_test::host(qkv);
    for (int64_t si = 0; si < 5; ++si) {
      for (int64_t c = 0; c < spec.qkv_cols(); ++c) other[static_cast<std::size_t>((si * b) * spec.qkv_cols() + c)] += 1.0f;
    }
    const Tensor changed = Tensor::from_host(other.data(), qkv.shape(), DType::F32);  // [s*b, g*(a/g+2)*dh]
    Step inference;
    inference.training = false;
    const Tensor a = make_unfused_attention(spec)->forward(qkv, batch, inference);      // [s*b, a*dh]
    const Tensor z = make_unfused_attention(spec)->forward(changed, batch, inference);  // [s*b, a*dh]
    const std::vector<float> x = attention_test::host(a), y = attention_test::host(z);
    for (int64_t si = 5; si < 11; ++si) {
      for (int64_t c = 0; c < spec.ctx_cols(); ++c) {
        const std::size_t at = static_cast<std::size_t>((si * b) * spec.ctx_cols() + c);
        REQUIRE(x[at] == y[at]);
      }
    }
  }
}

TEST_CASE("selective recomputation rebuilds the unfused probabilities bit for bit", "[layers][attention]") {
  const int64_t b = 2;
  LayerConfig kept = config(0.2f), rebuilt = config(0.2f);
  rebuilt.recompute = Recompute::Selective;
  const CoreAttentionSpec spec(kept, 1, TensorParallel{}, "layer"), selective(rebuilt, 1, TensorParallel{}, "layer");
  const Tensor qkv = random(kept.seq_length * b, spec.qkv_cols(), 3);   // [s*b, g*(a/g+2)*dh]
  const Tensor dctx = random(kept.seq_length * b, spec.ctx_cols(), 4);  // [s*b, a*dh]
  Step step;
  step.iteration = 2;
  const Pass a = run(*make_unfused_attention(spec), qkv, dctx, {b, nullptr}, step);
  const Pass z = run(*make_unfused_attention(selective), qkv, dctx, {b, nullptr}, step);
  CHECK(attention_test::same_bits(a.ctx, z.ctx));
  CHECK(attention_test::same_bits(a.dqkv, z.dqkv));
}

TEST_CASE("a strategy keeps one microbatch's activations until its backward or release", "[layers][attention]") {
  const LayerConfig cfg = config();
  const CoreAttentionSpec spec(cfg, 0, TensorParallel{}, "decoder.layers.0.self_attention");
  const Tensor qkv = random(cfg.seq_length, spec.qkv_cols(), 5);  // [s, g*(a/g+2)*dh]
  for (auto make : {make_unfused_attention, make_fused_attention}) {
    const std::unique_ptr<CoreAttention> core = make(spec);
    INFO(core->name());
    Step step;
    step.microbatch = 4;
    const Tensor ctx = core->forward(qkv, {1, nullptr}, step);  // [s, a*dh]
    CHECK_THROWS_WITH(core->forward(qkv, {1, nullptr}, step),
                      Catch::Contains("decoder.layers.0.self_attention") && Catch::Contains("microbatch 4") &&
                          Catch::Contains("already in flight"));
    core->release(step);
    CHECK_THROWS_WITH(core->backward(ctx, {1, nullptr}, step), Catch::Contains("no saved activations"));
  }
}

TEST_CASE("generation's key/value-cache attention gives the rows of the whole sequence's", "[layers][attention]") {
  const LayerConfig cfg = config();
  const CoreAttentionSpec spec(cfg, 2, TensorParallel{}, "layer");
  const int64_t s = cfg.seq_length;
  const Tensor qkv = random(s, spec.qkv_cols(), 6);  // [s, g*(a/g+2)*dh]: one sample
  Step inference;
  inference.training = false;
  const Tensor whole = make_unfused_attention(spec)->forward(qkv, {1, nullptr}, inference);  // [s, a*dh]
  // A prompt of 5 tokens, then one token at a time, then the last 3 at once.
  const KvCacheAttention cached(spec);
  KvCache cache;
  cache.capacity = s;
  std::vector<float> rows;
  for (const int64_t n : {5, 1, 1, 1, 1, 1, 1, 1, 1, 3}) {
    const Tensor ctx = cached.forward(qkv.view(cache.length * spec.qkv_cols(), {n, spec.qkv_cols()}), cache);  // [n, a*dh]
    const std::vector<float> got = attention_test::host(ctx);
    rows.insert(rows.end(), got.begin(), got.end());
    cache.length += n;
  }
  REQUIRE(cache.length == s);
  CHECK(max_diff(Tensor::from_host(rows.data(), {s, spec.ctx_cols()}, DType::F32), whole) < 1e-6);
  // The first call of a layer allocates its [capacity, g*2*dh] keys and values.
  CHECK(cache.layers.at(2).numel() == s * spec.groups * 2 * spec.dh);
  CHECK_THROWS_WITH(cached.forward(qkv.view(0, {1, spec.qkv_cols()}), cache),
                    "key/value cache: 16 cached + 1 new tokens exceed its capacity 16");
}
