// QK-clip on tiny models through the core API (a world of one): the attention layers record
// each query head's largest logit in training forwards only; apply_qk_clip rescales exactly the
// query rows (by eta^alpha) and key rows (by eta^(1 - alpha)) of linear_qkv, weight and bias, of
// the groups whose largest logit exceeded the threshold (eta = threshold / the group's largest,
// grouped-query attention taking one eta per group as Megatron-Core does), and nothing else; the
// logits of a clipped head then shrink by its group's eta. With 16-bit weights the model weights
// are the rounded masters, and sharded masters give the whole masters' result. The unfused core
// attention records the fused kernel's maxima; multi-latent attention's clipped heads shrink by
// their eta (nope and rope parts split as Kimi K2 does). The JSON log line carries the figures.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/comm/runtime.h"
#include "core/model/gpt_pipeline.h"
#include "core/train/metrics_sink.h"
#include "core/train/qk_clip.h"

using namespace ptdp;

namespace {

std::vector<float> host(const Tensor& t) {
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  Tensor f = t;
  if (t.dtype() != DType::F32) {
    f = Tensor::empty(t.shape(), DType::F32, t.device());
    t.backend().cast(t.raw(), t.dtype(), f.raw(), DType::F32, t.numel());
  }
  f.copy_to_host(v.data(), v.size() * sizeof(float));
  return v;
}

GptConfig tiny(DType precision) {
  GptConfig g;
  g.num_layers = 2;
  g.hidden_size = 32;
  g.num_attention_heads = 4;
  g.num_query_groups = 2;  // 2 query heads per key head
  g.seq_length = 12;
  g.vocab_size = 29;
  g.ffn_hidden_size = 32;
  g.init_method_std = 0.2f;
  g.add_qkv_bias = true;
  g.hidden_dropout = 0.0f;
  g.attention_dropout = 0.1f;  // after the softmax: the maxima do not see it
  g.precision = precision;
  g.seed = 7;
  return g;
}

// One training forward of a fixed batch through the whole (one-chunk) model.
void forward(GptModel& m, bool training) {
  const int64_t b = 2, n = b * m.config().seq_length;
  std::vector<int32_t> tokens(static_cast<std::size_t>(n)), labels(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    tokens[static_cast<std::size_t>(i)] = static_cast<int32_t>((i * 7 + 3) % m.config().vocab_size);
    labels[static_cast<std::size_t>(i)] = static_cast<int32_t>((i * 5 + 1) % m.config().vocab_size);
  }
  Step step;
  step.training = training;
  m.forward_loss(tokens.data(), labels.data(), b, step);
}

// Layer l's linear_qkv weight and bias.
std::pair<int, int> qkv_params(const ParamTable& params, int l) {
  const std::string prefix = "decoder.layers." + std::to_string(l) + ".self_attention.linear_qkv.";
  return {params.index(prefix + "weight"), params.index(prefix + "bias")};
}

}  // namespace

TEST_CASE("QK-clip rescales the query and key rows of the clipped groups, and only those", "[qk_clip]") {
  for (DType precision : {DType::F32, DType::BF16}) {
    for (float alpha : {0.5f, 0.25f}) {
      INFO("precision " << static_cast<int>(precision) << " alpha " << alpha);
      RuntimeOptions o;
      auto rt = Runtime::create_self(o);
      ParallelConfig pc;
      pc.world = 1;
      ProcessGroups groups(rt, pc);
      const GptConfig cfg = tiny(precision);
      GptPipeline model(cfg, groups);
      GptModel& m = *model.chunks()[0];
      ParamTable& params = m.params();
      const int64_t heads = cfg.num_attention_heads, qg = cfg.queries_per_group(), dh = cfg.head_dim(),
                    h = cfg.hidden_size, groups_n = cfg.query_groups();

      // Recording is off by default, and evaluation forwards never record.
      forward(m, true);
      CHECK(m.layer(0).attention().take_max_logits().empty());
      record_max_logits(model, true);
      forward(m, false);
      for (float v : m.layer(0).attention().take_max_logits()) CHECK(v == -std::numeric_limits<float>::infinity());

      // Each layer's per-head maxima of one training forward; the same forward again records the
      // same values for apply_qk_clip.
      forward(m, true);
      std::vector<std::vector<float>> before(2);
      for (int l = 0; l < 2; ++l) before[static_cast<std::size_t>(l)] = m.layer(l).attention().take_max_logits();
      forward(m, true);
      // The threshold between layer 0's two groups' maxima: one group clips, the other not.
      const auto group_max = [&](const std::vector<float>& mx, int64_t g) {
        return *std::max_element(mx.begin() + g * qg, mx.begin() + (g + 1) * qg);
      };
      const float g0 = group_max(before[0], 0), g1 = group_max(before[0], 1);
      REQUIRE(std::abs(g0 - g1) > 0.05f * std::max(g0, g1));
      const float tau = 0.5f * (g0 + g1);

      std::vector<std::vector<float>> weights(2), biases(2), others;
      for (int l = 0; l < 2; ++l) {
        const auto [w, bias] = qkv_params(params, l);
        weights[static_cast<std::size_t>(l)] = host(params.param(w));
        biases[static_cast<std::size_t>(l)] = host(params.param(bias));
      }
      for (int i = 0; i < params.size(); ++i)
        if (params.info(i).name.find("linear_qkv") == std::string::npos) others.push_back(host(params.weight(i)));

      const QkClipMetrics metrics = apply_qk_clip(model, groups, tau, alpha);
      REQUIRE(metrics.max_logits.size() == 2);
      int clipped_total = 0;
      for (int l = 0; l < 2; ++l) {
        const std::vector<float>& mx = before[static_cast<std::size_t>(l)];
        CHECK(metrics.max_logits[static_cast<std::size_t>(l)] == *std::max_element(mx.begin(), mx.end()));
        CHECK(metrics.clipped_heads[static_cast<std::size_t>(l)] ==
              std::count_if(mx.begin(), mx.end(), [&](float v) { return v > tau; }));
        clipped_total += metrics.clipped_heads[static_cast<std::size_t>(l)];
        // Plain variables: a lambda below captures w (C++17 lambdas cannot capture structured
        // bindings; clang refuses).
        const std::pair<int, int> wb = qkv_params(params, l);
        const int w = wb.first, bias = wb.second;
        const std::vector<float> w_after = host(params.param(w)), b_after = host(params.param(bias));
        const std::vector<float>& w0 = weights[static_cast<std::size_t>(l)];
        const std::vector<float>& b0 = biases[static_cast<std::size_t>(l)];
        for (int64_t g = 0; g < groups_n; ++g) {
          const float gm = group_max(mx, g);
          const double eta = gm > tau ? static_cast<double>(tau) / gm : 1.0;
          for (int64_t slot = 0; slot < qg + 2; ++slot) {
            // Query slots by eta^alpha, the key by eta^(1 - alpha), the value untouched.
            const float f = slot < qg ? static_cast<float>(std::pow(eta, alpha))
                                      : (slot == qg ? static_cast<float>(std::pow(eta, 1.0 - alpha)) : 1.0f);
            INFO("layer " << l << " group " << g << " slot " << slot << " factor " << f);
            for (int64_t r = (g * (qg + 2) + slot) * dh; r < (g * (qg + 2) + slot + 1) * dh; ++r) {
              CHECK(b_after[static_cast<std::size_t>(r)] == b0[static_cast<std::size_t>(r)] * f);
              int bad = 0;
              for (int64_t c = 0; c < h; ++c)
                bad += w_after[static_cast<std::size_t>(r * h + c)] != w0[static_cast<std::size_t>(r * h + c)] * f;
              CHECK(bad == 0);
            }
          }
        }
        // The model weights are the masters rounded.
        CHECK(host(params.weight(w)) == host([&] {
                Tensor r = Tensor::empty(params.param(w).shape(), precision, params.param(w).device());
                params.param(w).backend().cast(params.param(w).raw(), DType::F32, r.raw(), precision,
                                               params.param(w).numel());
                return r;
              }()));
      }
      CHECK(clipped_total > 0);
      std::size_t k = 0;
      for (int i = 0; i < params.size(); ++i)
        if (params.info(i).name.find("linear_qkv") == std::string::npos) CHECK(host(params.weight(i)) == others[k++]);

      // Layer 0's logits now: a clipped group's heads shrunk by its eta (the layer's input is
      // unchanged: the embeddings come first), the other group's as they were.
      forward(m, true);
      const std::vector<float> after = m.layer(0).attention().take_max_logits();
      for (int64_t hd = 0; hd < heads; ++hd) {
        const float gm = group_max(before[0], hd / qg);
        const double eta = gm > tau ? static_cast<double>(tau) / gm : 1.0;
        INFO("head " << hd);
        const double tol = precision == DType::F32 ? 1e-5 : 2e-2;
        CHECK(std::abs(after[static_cast<std::size_t>(hd)] - eta * before[0][static_cast<std::size_t>(hd)]) <=
              tol * std::abs(before[0][static_cast<std::size_t>(hd)]));
      }
      record_max_logits(model, false);
    }
  }
}

TEST_CASE("QK-clip: the unfused attention records the fused kernel's maxima", "[qk_clip]") {
  RuntimeOptions o;
  auto rt = Runtime::create_self(o);
  ParallelConfig pc;
  pc.world = 1;
  ProcessGroups groups(rt, pc);
  std::vector<std::vector<float>> maxima;
  for (AttentionImpl impl : {AttentionImpl::Fused, AttentionImpl::Unfused}) {
    GptConfig cfg = tiny(DType::F32);
    cfg.attention = impl;
    GptPipeline model(cfg, groups);
    GptModel& m = *model.chunks()[0];
    REQUIRE(m.layer(0).attention().core_attention().name() == (impl == AttentionImpl::Fused ? "fused" : "unfused"));
    record_max_logits(model, true);
    forward(m, true);
    maxima.push_back(m.layer(1).attention().take_max_logits());
  }
  REQUIRE(maxima[0].size() == 4);
  for (std::size_t h = 0; h < 4; ++h) {
    INFO("head " << h);
    CHECK(std::isfinite(maxima[0][h]));
    CHECK(std::abs(maxima[1][h] - maxima[0][h]) <= 1e-5f * std::abs(maxima[0][h]));
  }
}

TEST_CASE("QK-clip with sharded fp32 masters (the distributed optimizer's) equals it with whole ones", "[qk_clip]") {
  RuntimeOptions o;
  auto rt = Runtime::create_self(o);
  ParallelConfig pc;
  pc.world = 1;
  ProcessGroups groups(rt, pc);
  std::vector<std::vector<float>> masters, weights;
  std::vector<QkClipMetrics> metrics;
  for (bool shard : {false, true}) {
    GptPipeline model(tiny(DType::BF16), groups);
    GptModel& m = *model.chunks()[0];
    ParamTable& params = m.params();
    // One shard over the data-parallel group of one: the gather and set_param path, whose
    // result must not depend on the sharding.
    if (shard) params.shard_masters({{0, params.capacity(), &groups.comm(GroupKind::Data)}});
    REQUIRE(params.masters_sharded() == shard);
    record_max_logits(model, true);
    forward(m, true);
    metrics.push_back(apply_qk_clip(model, groups, 0.6f, 0.5f));
    masters.push_back(params.masters_to_host());
    weights.push_back(host(params.flat_weights()));
  }
  CHECK(metrics[0].max_logits == metrics[1].max_logits);
  CHECK(metrics[0].clipped_heads == metrics[1].clipped_heads);
  CHECK(metrics[0].clipped_heads[0] + metrics[0].clipped_heads[1] > 0);
  CHECK(masters[0] == masters[1]);
  CHECK(weights[0] == weights[1]);
}

TEST_CASE("QK-clip refuses a bad threshold or alpha", "[qk_clip]") {
  RuntimeOptions o;
  auto rt = Runtime::create_self(o);
  ParallelConfig pc;
  pc.world = 1;
  ProcessGroups groups(rt, pc);
  GptPipeline model(tiny(DType::F32), groups);
  CHECK_THROWS_AS(apply_qk_clip(model, groups, 0.0f, 0.5f), Error);
  CHECK_THROWS_AS(apply_qk_clip(model, groups, 10.0f, 1.5f), Error);
}

TEST_CASE("QK-clip with multi-latent attention shrinks a clipped head's logits by eta", "[qk_clip]") {
  RuntimeOptions o;
  auto rt = Runtime::create_self(o);
  ParallelConfig pc;
  pc.world = 1;
  ProcessGroups groups(rt, pc);
  for (int q_lora : {6, 0}) {
    INFO("q_lora_rank " << q_lora);
    GptConfig mla = tiny(DType::F32);
    mla.num_query_groups = 0;
    mla.add_qkv_bias = false;
    mla.multi_latent_attention = true;
    mla.qk_layernorm = true;
    mla.position_embedding = PositionEmbedding::Rope;
    mla.q_lora_rank = q_lora;
    mla.kv_lora_rank = 5;
    mla.qk_head_dim = 4;
    mla.qk_pos_emb_head_dim = 2;
    mla.v_head_dim = 4;
    GptPipeline model(mla, groups);
    GptModel& m = *model.chunks()[0];
    record_max_logits(model, true);
    forward(m, true);
    const std::vector<float> before = m.layer(0).attention().take_max_logits();
    forward(m, true);
    REQUIRE(before.size() == 4);
    std::vector<float> sorted = before;
    std::sort(sorted.begin(), sorted.end());
    REQUIRE(sorted[1] < sorted[2]);
    const float tau = 0.5f * (sorted[1] + sorted[2]);  // two heads clip, two do not
    // The shared RoPE key (linear_kv_down_proj's last rows) and the values stay as they were.
    ParamTable& params = m.params();
    const int kv_down = params.index("decoder.layers.0.self_attention.linear_kv_down_proj.weight");
    const std::vector<float> kv_down0 = host(params.param(kv_down));
    const QkClipMetrics metrics = apply_qk_clip(model, groups, tau, 0.5f);
    CHECK(metrics.clipped_heads[0] == 2);
    CHECK(host(params.param(kv_down)) == kv_down0);
    forward(m, true);
    const std::vector<float> after = m.layer(0).attention().take_max_logits();
    for (std::size_t hd = 0; hd < 4; ++hd) {
      const double eta = before[hd] > tau ? static_cast<double>(tau) / before[hd] : 1.0;
      INFO("head " << hd << " eta " << eta);
      CHECK(std::abs(after[hd] - eta * before[hd]) <= 1e-5 * std::abs(before[hd]));
    }
  }
}

TEST_CASE("The JSON log line carries QK-clip's per-layer figures, and none without them", "[qk_clip]") {
  const std::string path = "test_qk_clip_log.jsonl";
  TrainArgs args;
  args.log_json = path;
  args.train_iters = 2;
  {
    MetricsSink sink(nullptr, true, args, RunFigures{}, false);
    IterationMetrics m;
    m.iteration = 1;
    m.train_iters = 2;
    m.qk_clip.max_logits = {1.5f, 0.25f};
    m.qk_clip.clipped_heads = {2, 0};
    sink.record(m, false);
    m.iteration = 2;
    m.qk_clip = {};
    sink.record(m, false);
  }
  std::ifstream in(path);
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  std::remove(path.c_str());
  CHECK_THAT(first, Catch::Matchers::Contains("\"max_attention_logit\": [1.5, 0.25], \"qk_clipped_heads\": [2, 0]}"));
  CHECK_THAT(second, !Catch::Matchers::Contains("max_attention_logit"));
  CHECK_THAT(second, !Catch::Matchers::Contains("qk_clipped_heads"));
}
