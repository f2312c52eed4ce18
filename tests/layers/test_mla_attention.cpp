// Multi-latent attention (core/layers/mla_attention.h) on one process against a double-precision
// reference written here from DeepSeek-V2's equations: the parameters' names and shapes, the
// forward (unfused and fused core attention), the input and every weight gradient against the
// reference's central finite differences, without and with query compression (the value heads
// narrower than, and as wide as, the query/key heads), and generation's latent cache against
// the whole sequence.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "attention_test.h"
#include "core/layers/kv_cache.h"
#include "core/layers/mla_attention.h"

using namespace ptdp;
using attention_test::host;
using attention_test::random;

namespace {

const std::string kPrefix = "decoder.layers.0.self_attention";

LayerConfig mla_config(bool lora, AttentionImpl impl) {
  LayerConfig c;
  c.hidden_size = 12;
  c.num_attention_heads = 3;
  c.seq_length = 6;
  c.hidden_dropout = c.attention_dropout = 0.0f;
  c.normalization = Normalization::RMSNorm;
  c.position_embedding = PositionEmbedding::Rope;
  c.add_bias_linear = false;
  c.qk_layernorm = true;
  c.attention = impl;
  c.multi_latent_attention = true;
  c.q_lora_rank = lora ? 5 : 0;
  c.kv_lora_rank = 4;
  c.qk_head_dim = lora ? 2 : 4;
  c.qk_pos_emb_head_dim = lora ? 4 : 2;
  c.v_head_dim = lora ? 6 : 3;  // without compression the value heads are padded from 3 to 6
  c.init_method_std = 0.3f;
  c.seed = 5;
  return c;
}

using Weights = std::map<std::string, std::vector<double>>;

// y = W x for W [out, in] row-major.
std::vector<double> matvec(const std::vector<double>& w, const double* x, std::size_t in) {
  std::vector<double> y(w.size() / in, 0.0);
  for (std::size_t o = 0; o < y.size(); ++o)
    for (std::size_t i = 0; i < in; ++i) y[o] += w[o * in + i] * x[i];
  return y;
}

std::vector<double> rms(std::vector<double> x, const std::vector<double>& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] *= r * w[i];
  return x;
}

// Rotate-half RoPE of the dr dims at p[0 .. dr) by position pos (base 10000 over dr dims).
void rope(double* p, int dr, int pos) {
  for (int i = 0; i < dr / 2; ++i) {
    const double inv = 1.0 / std::pow(10000.0, 2.0 * i / dr), a = pos * inv;
    const double x1 = p[i], x2 = p[i + dr / 2];
    p[i] = x1 * std::cos(a) - x2 * std::sin(a);
    p[i + dr / 2] = x2 * std::cos(a) + x1 * std::sin(a);
  }
}

// The layer's output [s*b, h] (without linear_proj's bias) for x [s*b, h], causal per sample.
std::vector<double> reference(const LayerConfig& c, const Weights& w, const std::vector<double>& x, int b) {
  const int s = c.seq_length, h = c.hidden_size, a = c.num_attention_heads, n = s * b;
  const int dn = c.qk_head_dim, dr = c.qk_pos_emb_head_dim, dv = c.v_head_dim, r = c.kv_lora_rank;
  const double eps = c.layernorm_epsilon;
  const auto at = [&](const char* name) -> const std::vector<double>& { return w.at(kPrefix + "." + name + ".weight"); };
  std::vector<std::vector<double>> q(n), k(n), v(n);  // per token: [a][dn + dr] (nope, rope), ...
  for (int t = 0; t < n; ++t) {
    const double* xt = x.data() + t * h;
    std::vector<double> qt;
    if (c.q_lora_rank > 0) {
      const std::vector<double> cq = rms(matvec(at("linear_q_down_proj"), xt, h), at("q_layernorm"), eps);
      qt = matvec(at("linear_q_up_proj"), cq.data(), cq.size());
    } else {
      qt = matvec(at("linear_q_proj"), xt, h);
    }
    const std::vector<double> ckv = matvec(at("linear_kv_down_proj"), xt, h);
    const std::vector<double> cn = rms(std::vector<double>(ckv.begin(), ckv.begin() + r), at("kv_layernorm"), eps);
    const std::vector<double> kv = matvec(at("linear_kv_up_proj"), cn.data(), r);
    std::vector<double> kpe(ckv.begin() + r, ckv.end());
    rope(kpe.data(), dr, t / b);
    for (int j = 0; j < a; ++j) {
      rope(qt.data() + j * (dn + dr) + dn, dr, t / b);
      k[t].insert(k[t].end(), kv.begin() + j * (dn + dv), kv.begin() + j * (dn + dv) + dn);
      k[t].insert(k[t].end(), kpe.begin(), kpe.end());
      v[t].insert(v[t].end(), kv.begin() + j * (dn + dv) + dn, kv.begin() + (j + 1) * (dn + dv));
    }
    q[t] = qt;
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(dn + dr));
  std::vector<double> out(static_cast<std::size_t>(n * h), 0.0);
  for (int t = 0; t < n; ++t) {
    std::vector<double> ctx(static_cast<std::size_t>(a * dv), 0.0);
    for (int j = 0; j < a; ++j) {
      std::vector<double> sc;
      double mx = -1e300;
      for (int u = t % b; u <= t; u += b) {  // the same sample's positions up to t's
        double d = 0;
        for (int e = 0; e < dn + dr; ++e) d += q[t][j * (dn + dr) + e] * k[u][j * (dn + dr) + e];
        sc.push_back(d * scale);
        mx = std::max(mx, d * scale);
      }
      double z = 0;
      for (double& e : sc) z += (e = std::exp(e - mx));
      int i = 0;
      for (int u = t % b; u <= t; u += b, ++i)
        for (int e = 0; e < dv; ++e) ctx[j * dv + e] += sc[i] / z * v[u][j * dv + e];
    }
    const std::vector<double> o = matvec(at("linear_proj"), ctx.data(), ctx.size());
    std::copy(o.begin(), o.end(), out.begin() + t * h);
  }
  return out;
}

std::vector<double> to_double(const std::vector<float>& f) { return std::vector<double>(f.begin(), f.end()); }

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d += a[i] * b[i];
  return d;
}

// d(sum(ref(x) * dy)) / d(v[i]) by central differences of the double reference.
double fd(const std::function<double()>& loss, double& v) {
  const double e = 1e-5, x0 = v;
  v = x0 + e;
  const double lp = loss();
  v = x0 - e;
  const double lm = loss();
  v = x0;
  return (lp - lm) / (2 * e);
}

void check_layer(bool lora, AttentionImpl impl) {
  const LayerConfig cfg = mla_config(lora, impl);
  cfg.validate(1);
  ParamTable params(0, 1);
  MlaAttention mla(params, kPrefix, cfg, 0, TensorParallel{}, Device{});
  params.allocate(Device{});
  params.initialize(cfg.seed);
  CHECK(mla.core_attention().name() == (impl == AttentionImpl::Fused ? "fused" : "unfused"));

  // Megatron-Core's names and DeepSeek's shapes.
  const int64_t h = 12, a = 3, dq = cfg.mla_qk_dim(), r = 4;
  std::map<std::string, std::vector<int64_t>> want = {
      {"linear_kv_down_proj.weight", {r + cfg.qk_pos_emb_head_dim, h}},
      {"kv_layernorm.weight", {r}},
      {"linear_kv_up_proj.weight", {a * (cfg.qk_head_dim + cfg.v_head_dim), r}},
      {"linear_proj.weight", {h, a * cfg.v_head_dim}}};
  if (lora) {
    want["linear_q_down_proj.weight"] = {5, h};
    want["q_layernorm.weight"] = {5};
    want["linear_q_up_proj.weight"] = {a * dq, 5};
  } else {
    want["linear_q_proj.weight"] = {a * dq, h};
  }
  REQUIRE(params.size() == static_cast<int>(want.size()));
  Weights w;
  for (int i = 0; i < params.size(); ++i) {
    const ParamInfo& info = params.info(i);
    const std::string local = info.name.substr(kPrefix.size() + 1);
    INFO(info.name);
    REQUIRE(want.count(local) == 1);
    std::vector<int64_t> shape;
    for (int d = 0; d < info.global_shape.ndim(); ++d) shape.push_back(info.global_shape[d]);
    CHECK(shape == want[local]);
    // Off the norms' unit init, so that their gradients are tested at a general point.
    std::vector<float> v = host(params.param(i));
    for (std::size_t k = 0; k < v.size(); ++k) v[k] += 0.1f * static_cast<float>(std::sin(1.0 + 7.0 * k + i));
    params.param(i).copy_from_host(v.data(), v.size() * sizeof(float));
    w[info.name] = to_double(v);
  }

  const int b = 2, n = cfg.seq_length * b;
  const Tensor x = random(n, h, 11);    // [s*b, h]
  const Tensor dy = random(n, h, 12);   // [s*b, h]
  std::vector<double> xd = to_double(host(x));
  const std::vector<double> dyd = to_double(host(dy));
  Step step;
  const Tensor y = mla.forward(x, step);
  const std::vector<double> want_y = reference(cfg, w, xd, b);
  double worst = 0;
  const std::vector<float> got_y = host(y);
  for (std::size_t i = 0; i < want_y.size(); ++i) worst = std::max(worst, std::fabs(got_y[i] - want_y[i]));
  INFO("forward: max |y - ref| = " << worst);
  CHECK(worst < 2e-5);

  // Gradients against the reference's finite differences of sum(y * dy).
  const Tensor dx = mla.backward_input(dy, step);
  mla.backward_weight(step);
  const auto loss = [&] { return dot(reference(cfg, w, xd, b), dyd); };
  const std::vector<float> got_dx = host(dx);
  double dx_worst = 0, g_worst = 0;
  for (std::size_t i = 0; i < xd.size(); ++i) dx_worst = std::max(dx_worst, std::fabs(got_dx[i] - fd(loss, xd[i])));
  for (int i = 0; i < params.size(); ++i) {
    std::vector<double>& v = w[params.info(i).name];
    const std::vector<float> g = host(params.grad(i));
    for (std::size_t k = 0; k < v.size(); ++k) {
      const double want_g = fd(loss, v[k]);
      if (std::fabs(g[k] - want_g) > g_worst) {
        g_worst = std::fabs(g[k] - want_g);
        INFO(params.info(i).name << "[" << k << "]: " << g[k] << " vs " << want_g);
        CHECK(std::fabs(g[k] - want_g) < 1e-4 + 1e-4 * std::fabs(want_g));
      }
    }
  }
  INFO("max |dx - fd| = " << dx_worst << ", max |dW - fd| = " << g_worst);
  CHECK(dx_worst < 1e-4);
  CHECK(g_worst < 1e-4);
}

}  // namespace

TEST_CASE("MLA without query compression (value heads padded) = the double reference, gradients = its differences",
          "[layers][mla]") {
  check_layer(false, AttentionImpl::Unfused);
  check_layer(false, AttentionImpl::Fused);
}

TEST_CASE("MLA with query compression = the double reference, gradients = its differences", "[layers][mla]") {
  check_layer(true, AttentionImpl::Unfused);
  check_layer(true, AttentionImpl::Fused);
}

TEST_CASE("MLA generation: the latent cache gives the rows of the whole sequence", "[layers][mla]") {
  for (const bool lora : {false, true}) {
    const LayerConfig cfg = mla_config(lora, AttentionImpl::Unfused);
    ParamTable params(0, 1);
    MlaAttention mla(params, kPrefix, cfg, 3, TensorParallel{}, Device{});
    params.allocate(Device{});
    params.initialize(cfg.seed);
    const int64_t s = cfg.seq_length, h = cfg.hidden_size;
    const Tensor x = random(s, h, 21);  // [s, h]: one sample
    Step inference;
    inference.training = false;
    const Tensor whole = mla.forward(x, inference);  // [s, h]
    mla.release(inference);
    Step decoding = inference;
    decoding.decoding = true;
    KvCache cache;
    cache.capacity = s;
    std::vector<float> rows;
    for (const int64_t n : {3, 1, 2}) {
      const Tensor y = mla.decode(x.view(cache.length * h, {n, h}), cache, decoding);  // [n, h]
      mla.release(decoding);
      const std::vector<float> got = host(y);
      rows.insert(rows.end(), got.begin(), got.end());
      cache.length += n;
    }
    CHECK(attention_test::max_diff(Tensor::from_host(rows.data(), {s, h}, DType::F32), whole) < 1e-5);
    // The cache holds the normalised latent and the rotated shared RoPE key per position.
    CHECK(cache.layers.at(3).numel() == s * (cfg.kv_lora_rank + cfg.qk_pos_emb_head_dim));
    CHECK_THROWS_WITH(mla.decode(x.view(0, {1, h}), cache, decoding),
                      "key/value cache: 6 cached + 1 new tokens exceed its capacity 6");
  }
}

TEST_CASE("MLA in bf16 and fp16 follows the double reference to the storage type's precision", "[layers][mla]") {
  for (const DType type : {DType::BF16, DType::F16}) {
    for (const bool lora : {false, true}) {
      INFO(dtype_name(type) << (lora ? ", query compressed" : ""));
      LayerConfig cfg = mla_config(lora, AttentionImpl::Auto);
      cfg.precision = type;
      ParamTable params(0, 1);
      MlaAttention mla(params, kPrefix, cfg, 0, TensorParallel{}, Device{});
      params.allocate(Device{}, type);
      params.initialize(cfg.seed);
      params.sync_weights();
      Weights w;  // the 16-bit weights the layer computes with
      for (int i = 0; i < params.size(); ++i) w[params.info(i).name] = to_double(host(params.weight(i).to(DType::F32)));
      const int b = 2, n = cfg.seq_length * b;
      const Tensor x = random(n, cfg.hidden_size, 11).to(type);  // [s*b, h]
      const Tensor dy = random(n, cfg.hidden_size, 12).to(type);
      std::vector<double> xd = to_double(host(x.to(DType::F32)));
      const std::vector<double> dyd = to_double(host(dy.to(DType::F32)));
      Step step;
      const std::vector<float> y = host(mla.forward(x, step).to(DType::F32));
      const std::vector<double> want = reference(cfg, w, xd, b);
      double err = 0, scale = 0;
      for (std::size_t i = 0; i < want.size(); ++i) {
        err = std::max(err, std::fabs(y[i] - want[i]));
        scale = std::max(scale, std::fabs(want[i]));
      }
      CHECK(err <= 2e-2 * scale);
      const std::vector<float> dx = host(mla.backward_input(dy, step).to(DType::F32));
      mla.backward_weight(step);
      const auto loss = [&] { return dot(reference(cfg, w, xd, b), dyd); };
      double diff2 = 0, norm2 = 0;
      for (std::size_t i = 0; i < xd.size(); ++i) {
        const double g = fd(loss, xd[i]);
        diff2 += (dx[i] - g) * (dx[i] - g);
        norm2 += g * g;
      }
      CHECK(std::sqrt(diff2 / norm2) < 3e-2);
    }
  }
}
