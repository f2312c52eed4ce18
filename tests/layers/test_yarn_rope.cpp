// YaRN rotary scaling (LayerConfig::rotary_inv_freq, rope_amplitude, yarn_softmax_mscale)
// against a double-precision transcription of Hugging Face's _compute_yarn_parameters and
// yarn_get_mscale (transformers 5.25, modeling_rope_utils.py), and validate()'s refusals.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/layers/layer_config.h"

using ptdp::LayerConfig;

namespace {

LayerConfig yarn_config(int head_dim, float percent, float base, float factor, int original) {
  LayerConfig c;
  c.hidden_size = 4 * head_dim;
  c.num_attention_heads = 4;
  c.position_embedding = ptdp::PositionEmbedding::Rope;
  c.normalization = ptdp::Normalization::RMSNorm;
  c.rotary_percent = percent;
  c.rotary_base = base;
  c.rope_type = ptdp::RopeType::Yarn;
  c.yarn.factor = factor;
  c.yarn.original_max_position_embeddings = original;
  return c;
}

double get_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

/// HF's inv_freq, all in double (torch's are fp32 steps: the kernel's result agrees to ~1 ulp).
std::vector<double> hf_inv_freq(const LayerConfig& c, int dim) {
  const double pi = 3.14159265358979323846;
  const double base = c.rotary_base, len = c.yarn.original_max_position_embeddings;
  auto corr = [&](double rot) { return dim * std::log(len / (rot * 2 * pi)) / (2 * std::log(base)); };
  double low = corr(c.yarn.beta_fast), high = corr(c.yarn.beta_slow);
  if (c.yarn.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1.0);
  if (low == high) high += 0.001;
  std::vector<double> inv(static_cast<std::size_t>(dim / 2));
  for (int i = 0; i < dim / 2; ++i) {
    const double pos = std::pow(base, 2.0 * i / dim);
    const double extra_factor = 1.0 - std::min(std::max((i - low) / (high - low), 0.0), 1.0);
    inv[static_cast<std::size_t>(i)] = 1.0 / (c.yarn.factor * pos) * (1 - extra_factor) + 1.0 / pos * extra_factor;
  }
  return inv;
}

}  // namespace

TEST_CASE("YaRN's inverse frequencies are Hugging Face's, within fp32 round-off", "[yarn]") {
  struct Case {
    int head_dim;
    float percent, base, factor;
    int original;
    float beta_fast, beta_slow;
    bool truncate;
  };
  const Case cases[] = {
      {64, 1.0f, 10000.0f, 4.0f, 4096, 32.0f, 1.0f, true},       // Qwen2.5's YaRN
      {64, 1.0f, 10000.0f, 40.0f, 4096, 32.0f, 1.0f, true},      // DeepSeek-V3's rope dim and factor
      {128, 1.0f, 1000000.0f, 8.0f, 32768, 32.0f, 1.0f, false},  // untruncated ramp
      {32, 0.5f, 500000.0f, 16.0f, 8192, 16.0f, 2.0f, true},     // partial rotation: d = 16
      {16, 1.0f, 10000.0f, 2.0f, 64, 32.0f, 1.0f, true},         // a short original context: low clamped to 0
  };
  for (const Case& k : cases) {
    LayerConfig c = yarn_config(k.head_dim, k.percent, k.base, k.factor, k.original);
    c.yarn.beta_fast = k.beta_fast;
    c.yarn.beta_slow = k.beta_slow;
    c.yarn.truncate = k.truncate;
    c.validate(1);
    const std::vector<float> got = c.rotary_inv_freq();
    const std::vector<double> want = hf_inv_freq(c, c.rotary_dim());
    REQUIRE(got.size() == want.size());
    INFO("head_dim " << k.head_dim << " factor " << k.factor << " truncate " << k.truncate);
    bool interpolated = false, extrapolated = false;
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("i " << i << " got " << got[i] << " want " << want[i]);
      CHECK(std::fabs(got[i] - want[i]) <= 4e-7 * want[i]);
      const double plain = std::pow(static_cast<double>(k.base), -2.0 * static_cast<double>(i) / c.rotary_dim());
      extrapolated |= std::fabs(got[i] / plain - 1.0) < 1e-6;
      interpolated |= std::fabs(got[i] * k.factor / plain - 1.0) < 1e-6;
    }
    CHECK(interpolated);  // the low frequencies are divided by the factor
    if (k.original > 64) CHECK(extrapolated);  // the high ones are kept
  }
}

TEST_CASE("YaRN's frequencies for another rotated width (multi-latent attention's rope dims)", "[yarn]") {
  // DeepSeek-V3's shape scaled down: heads of 48 dims, 16 of them rotated (qk_pos_emb_head_dim).
  const LayerConfig c = yarn_config(48, 1.0f, 10000.0f, 40.0f, 4096);
  const std::vector<float> got = c.rotary_inv_freq(16);
  const std::vector<double> want = hf_inv_freq(c, 16);
  REQUIRE(got.size() == 8);
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(std::fabs(got[i] - want[i]) <= 4e-7 * want[i]);
  CHECK(c.rotary_inv_freq() == c.rotary_inv_freq(48));
}

TEST_CASE("YaRN's amplitude and softmax mscale are yarn_get_mscale's", "[yarn]") {
  LayerConfig c = yarn_config(64, 1.0f, 10000.0f, 40.0f, 4096);
  CHECK(c.rope_amplitude() == static_cast<float>(get_mscale(40.0, 1.0)));  // HF without mscale_all_dim
  CHECK(c.yarn_softmax_mscale() == 1.0f);
  c.yarn.mscale = 1.0f;
  c.yarn.mscale_all_dim = 1.0f;  // DeepSeek-V3: the ratio is 1, the softmax takes m^2
  CHECK(c.rope_amplitude() == 1.0f);
  CHECK(c.yarn_softmax_mscale() == static_cast<float>(get_mscale(40.0, 1.0)));
  c.yarn.mscale = 0.707f;
  c.yarn.mscale_all_dim = 0.8f;
  CHECK(c.rope_amplitude() == static_cast<float>(get_mscale(40.0, 0.707f) / get_mscale(40.0, 0.8f)));
  CHECK(c.yarn_softmax_mscale() == static_cast<float>(get_mscale(40.0, 0.8f)));
  c.yarn.factor = 0.5f;  // no stretch: yarn_get_mscale is 1
  CHECK(c.rope_amplitude() == 1.0f);
  CHECK(c.yarn_softmax_mscale() == 1.0f);
  // Without YaRN both are exactly 1, and the frequencies are the plain ones.
  LayerConfig plain = c;
  plain.rope_type = ptdp::RopeType::Rope;
  CHECK(plain.rope_amplitude() == 1.0f);
  CHECK(plain.yarn_softmax_mscale() == 1.0f);
  LayerConfig unscaled = plain;
  unscaled.yarn = {};
  CHECK(plain.rotary_inv_freq() == unscaled.rotary_inv_freq());
}

TEST_CASE("validate() refuses YaRN settings it cannot honour, naming the flags", "[yarn][errors]") {
  const LayerConfig good = yarn_config(64, 1.0f, 10000.0f, 4.0f, 4096);
  CHECK_NOTHROW(good.validate(1));
  auto refuses = [&](auto edit, const std::string& words) {
    LayerConfig c = good;
    edit(c);
    INFO(words);
    try {
      c.validate(1);
      FAIL("accepted");
    } catch (const ptdp::Error& e) {
      CHECK(e.code() == ptdp::ErrorCode::InvalidArgument);
      CHECK_THAT(e.what(), Catch::Contains(words));
    }
  };
  refuses([](LayerConfig& c) { c.rope_scaling.enabled = true; }, "--use-rope-scaling");
  refuses([](LayerConfig& c) { c.yarn.factor = 0.0f; }, "--rotary-scaling-factor");
  refuses([](LayerConfig& c) { c.yarn.factor = -2.0f; }, "--rotary-scaling-factor");
  refuses([](LayerConfig& c) { c.yarn.mscale = 0.0f; }, "--mscale) must be > 0");
  refuses([](LayerConfig& c) { c.yarn.mscale_all_dim = -1.0f; }, "--mscale-all-dim");
  refuses([](LayerConfig& c) { c.yarn.mscale = 0.707f; }, "without mscale_all_dim (--mscale-all-dim)");
  refuses([](LayerConfig& c) { c.yarn.original_max_position_embeddings = 0; }, "--original-max-position-embeddings");
  refuses([](LayerConfig& c) { c.yarn.beta_fast = 0.5f; }, "--beta-fast");
  refuses([](LayerConfig& c) { c.yarn.beta_slow = 0.0f; }, "--beta-slow");
  refuses([](LayerConfig& c) { c.position_embedding = ptdp::PositionEmbedding::LearnedAbsolute; },
          "--rope-type yarn) needs position_embedding_type rope");
  refuses([](LayerConfig& c) { c.rope_type = static_cast<ptdp::RopeType>(2); }, "--rope-type");
}
