// The MoE layer of core/layers/moe/ on one process: its output against a double-precision
// reference written here (router scores and top-k, capacity drops, the experts, the weighted
// combine, shared experts with the gate), the balancing losses' values against the formulas,
// and the whole layer's backward (input, router, experts, shared experts, with the auxiliary
// and z losses' gradients) against central finite differences.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/layers/moe/moe_layer.h"

using namespace ptdp;

namespace {

constexpr int kH = 8, kSeq = 6, kBatch = 2, kRows = kSeq * kBatch;
const std::string kPrefix = "decoder.layers.0.mlp";

LayerConfig base_config() {
  LayerConfig cfg;
  cfg.num_layers = 2;
  cfg.hidden_size = kH;
  cfg.num_attention_heads = 2;
  cfg.seq_length = kSeq;
  cfg.ffn_hidden_size = 12;
  cfg.init_method_std = 0.4f;
  cfg.moe.num_experts = 4;
  cfg.moe.router_topk = 2;
  cfg.moe.ffn_hidden_size = 6;
  return cfg;
}

struct Model {
  explicit Model(const LayerConfig& c) : cfg(c), params(0, 1), layer(params, kPrefix, cfg, TensorParallel{}) {
    params.allocate(Device{});
    params.initialize(1234);
  }
  std::vector<double> value(const std::string& name) const {
    const Tensor t = params.param(params.index(name));
    std::vector<float> v(static_cast<std::size_t>(t.numel()));
    t.copy_to_host(v.data(), v.size() * sizeof(float));
    return {v.begin(), v.end()};
  }
  float* raw(const std::string& name) { return params.param(params.index(name)).data<float>(); }
  std::vector<double> grad(const std::string& name) const {
    const Tensor t = params.grad(params.index(name));
    std::vector<float> v(static_cast<std::size_t>(t.numel()));
    t.copy_to_host(v.data(), v.size() * sizeof(float));
    return {v.begin(), v.end()};
  }
  bool has(const std::string& name) const { return params.find(name) >= 0; }
  LayerConfig cfg;
  ParamTable params;
  MoeLayer layer;
};

std::vector<float> randn(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
double silu(double x) { return x / (1.0 + std::exp(-x)); }
double sigm(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// y = W v (+ b), W [out, in] row-major.
std::vector<double> matvec(const std::vector<double>& w, const double* v, int out, int in, const std::vector<double>* b) {
  std::vector<double> y(static_cast<std::size_t>(out));
  for (int o = 0; o < out; ++o) {
    double s = b ? (*b)[static_cast<std::size_t>(o)] : 0.0;
    for (int i = 0; i < in; ++i) s += w[static_cast<std::size_t>(o * in + i)] * v[i];
    y[static_cast<std::size_t>(o)] = s;
  }
  return y;
}

// An MLP of width f on v [h] (GeLU or SwiGLU), with the parameters under `p`.
std::vector<double> mlp(const Model& m, const std::string& p, const std::string& j, int f, const double* v) {
  const bool bias = m.cfg.add_bias_linear, swiglu = m.cfg.swiglu;
  const std::vector<double> w1 = m.value(p + ".linear_fc1.weight" + j), w2 = m.value(p + ".linear_fc2.weight" + j);
  const std::vector<double> b1 = bias ? m.value(p + ".linear_fc1.bias" + j) : std::vector<double>();
  const std::vector<double> b2 = bias ? m.value(p + ".linear_fc2.bias" + j) : std::vector<double>();
  const std::vector<double> pre = matvec(w1, v, swiglu ? 2 * f : f, kH, bias ? &b1 : nullptr);
  std::vector<double> act(static_cast<std::size_t>(f));
  for (int i = 0; i < f; ++i) {
    act[static_cast<std::size_t>(i)] = swiglu ? silu(pre[static_cast<std::size_t>(i)]) * pre[static_cast<std::size_t>(f + i)]
                                              : gelu(pre[static_cast<std::size_t>(i)]);
  }
  return matvec(w2, act.data(), kH, f, bias ? &b2 : nullptr);
}

// The top k of v (ties to the lower index).
std::vector<int> top(const std::vector<double>& v, int k) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return v[static_cast<std::size_t>(a)] > v[static_cast<std::size_t>(b)]; });
  idx.resize(static_cast<std::size_t>(k));
  return idx;
}

// The layer's output [kRows, h] in double, written from Megatron's definitions.
std::vector<double> reference(const Model& m, const std::vector<float>& x) {
  const MoeConfig& c = m.cfg.moe;
  const int e = c.num_experts, k = c.router_topk;
  const std::vector<double> w = m.value(kPrefix + ".router.weight");
  const std::vector<double> eb = c.enable_expert_bias ? m.value(kPrefix + ".router.expert_bias") : std::vector<double>();
  std::vector<std::vector<int>> chosen(kRows);
  std::vector<std::vector<double>> prob(kRows);
  std::vector<double> xd(x.begin(), x.end());
  for (int n = 0; n < kRows; ++n) {
    std::vector<double> lg = matvec(w, xd.data() + n * kH, e, kH, nullptr);
    std::vector<double> sm(static_cast<std::size_t>(e));
    const double mx = *std::max_element(lg.begin(), lg.end());
    double z = 0;
    for (int i = 0; i < e; ++i) z += sm[static_cast<std::size_t>(i)] = std::exp(lg[static_cast<std::size_t>(i)] - mx);
    for (double& s : sm) s /= z;
    std::vector<int> t;
    std::vector<double> p;
    if (c.score_function == MoeScoreFunction::Sigmoid) {
      std::vector<double> s(static_cast<std::size_t>(e)), sb(static_cast<std::size_t>(e));
      for (int i = 0; i < e; ++i) {
        s[static_cast<std::size_t>(i)] = sigm(lg[static_cast<std::size_t>(i)]);
        sb[static_cast<std::size_t>(i)] = s[static_cast<std::size_t>(i)] + (eb.empty() ? 0.0 : eb[static_cast<std::size_t>(i)]);
      }
      t = top(sb, k);
      double sum = 0;
      for (int i : t) sum += s[static_cast<std::size_t>(i)];
      for (int i : t) p.push_back(k > 1 ? s[static_cast<std::size_t>(i)] / sum : s[static_cast<std::size_t>(i)]);
    } else if (c.pre_softmax) {
      t = top(sm, k);
      for (int i : t) p.push_back(sm[static_cast<std::size_t>(i)]);
    } else {
      t = top(lg, k);
      double sum = 0;
      for (int i : t) sum += std::exp(lg[static_cast<std::size_t>(i)] - lg[static_cast<std::size_t>(t[0])]);
      for (int i : t) p.push_back(std::exp(lg[static_cast<std::size_t>(i)] - lg[static_cast<std::size_t>(t[0])]) / sum);
    }
    for (double& v : p) v *= c.topk_scaling_factor > 0 ? c.topk_scaling_factor : 1.0;
    chosen[static_cast<std::size_t>(n)] = t;
    prob[static_cast<std::size_t>(n)] = p;
  }
  if (c.capacity_factor > 0) {
    const auto cap = static_cast<int>(std::ceil(double(kRows) * k / e * c.capacity_factor));
    for (int x = 0; x < e; ++x) {
      std::vector<std::pair<int, int>> pairs;  // (token, choice)
      for (int n = 0; n < kRows; ++n)
        for (int j = 0; j < k; ++j)
          if (chosen[static_cast<std::size_t>(n)][static_cast<std::size_t>(j)] == x) pairs.emplace_back(n, j);
      if (c.drop_policy == MoeDropPolicy::Probs) {
        std::stable_sort(pairs.begin(), pairs.end(), [&](auto a, auto b) {
          return prob[static_cast<std::size_t>(a.first)][static_cast<std::size_t>(a.second)] >
                 prob[static_cast<std::size_t>(b.first)][static_cast<std::size_t>(b.second)];
        });
      }
      for (std::size_t i = static_cast<std::size_t>(cap); i < pairs.size(); ++i)
        prob[static_cast<std::size_t>(pairs[i].first)][static_cast<std::size_t>(pairs[i].second)] = 0.0;
    }
  }
  std::vector<double> out(static_cast<std::size_t>(kRows * kH), 0.0);
  const int f = m.cfg.moe_ffn();
  for (int n = 0; n < kRows; ++n) {
    for (int j = 0; j < k; ++j) {
      const double p = prob[static_cast<std::size_t>(n)][static_cast<std::size_t>(j)];
      if (p == 0.0) continue;
      const std::vector<double> y = mlp(m, kPrefix + ".experts", std::to_string(chosen[static_cast<std::size_t>(n)][static_cast<std::size_t>(j)]), f, xd.data() + n * kH);
      for (int c2 = 0; c2 < kH; ++c2) out[static_cast<std::size_t>(n * kH + c2)] += p * y[static_cast<std::size_t>(c2)];
    }
    if (c.shared_expert_intermediate_size > 0) {
      std::vector<double> y = mlp(m, kPrefix + ".shared_experts", "", c.shared_expert_intermediate_size, xd.data() + n * kH);
      double g = 1.0;
      if (c.shared_expert_gate) {
        const std::vector<double> gw = m.value(kPrefix + ".shared_experts.gate_weight");
        g = sigm(matvec(gw, xd.data() + n * kH, 1, kH, nullptr)[0]);
      }
      for (int c2 = 0; c2 < kH; ++c2) out[static_cast<std::size_t>(n * kH + c2)] += g * y[static_cast<std::size_t>(c2)];
    }
  }
  return out;
}

std::vector<float> forward(Model& m, const std::vector<float>& x, int64_t mb, bool training = true) {
  Step step;
  step.microbatch = mb;
  step.training = training;
  const Tensor out = m.layer.forward(Tensor::from_host(x.data(), {kRows, kH}, DType::F32), step);
  std::vector<float> v(static_cast<std::size_t>(out.numel()));
  out.copy_to_host(v.data(), v.size() * sizeof(float));
  return v;
}

double max_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

std::map<std::string, LayerConfig> variants() {
  std::map<std::string, LayerConfig> v;
  LayerConfig c = base_config();
  v["gelu, biases, softmax top-2"] = c;
  c = base_config();
  c.swiglu = true;
  c.add_bias_linear = false;
  c.moe.pre_softmax = true;
  c.moe.topk_scaling_factor = 2.5f;
  v["swiglu, pre-softmax, scaling"] = c;
  c = base_config();
  c.moe.score_function = MoeScoreFunction::Sigmoid;
  c.moe.enable_expert_bias = true;
  c.moe.router_topk = 3;
  v["sigmoid top-3 with expert bias"] = c;
  c = base_config();
  c.moe.capacity_factor = 0.6f;
  v["capacity 0.6, probs policy"] = c;
  c.moe.drop_policy = MoeDropPolicy::Position;
  c.moe.pad_expert_input_to_capacity = true;
  v["capacity 0.6, position policy, padded"] = c;
  c = base_config();
  c.swiglu = true;
  c.moe.shared_expert_intermediate_size = 10;
  c.moe.shared_expert_gate = true;
  v["shared experts with the gate"] = c;
  c.moe.dispatcher = MoeDispatcher::AllGather;
  v["shared experts with the gate, allgather"] = c;
  return v;
}

}  // namespace

TEST_CASE("the MoE layer's output is the double-precision reference's", "[layers][moe]") {
  for (const auto& [name, cfg] : variants()) {
    INFO(name);
    Model m(cfg);
    if (cfg.moe.enable_expert_bias) {
      // A bias that moves the choice: expert 0 favoured, expert 1 shunned.
      float* b = m.raw(kPrefix + ".router.expert_bias");
      b[0] = 0.3f;
      b[1] = -0.3f;
    }
    const std::vector<float> x = randn(kRows * kH, 7);
    const std::vector<float> out = forward(m, x, 0, false);
    CHECK(max_diff(out, reference(m, x)) < 2e-5);
    Step step;
    m.layer.release(step);
  }
}

TEST_CASE("the balancing losses have Megatron's values", "[layers][moe]") {
  for (const bool seq : {false, true}) {
    LayerConfig cfg = base_config();
    cfg.moe.aux_loss_coeff = 0.1f;
    cfg.moe.z_loss_coeff = 0.01f;
    cfg.moe.load_balancing = seq ? MoeLoadBalancing::SeqAuxLoss : MoeLoadBalancing::AuxLoss;
    Model m(cfg);
    const std::vector<float> x = randn(kRows * kH, 11);
    forward(m, x, 3);
    const RouterStats& st = m.layer.router().stats().at(3);
    // aux: E / (k T^2) sum_e P_e N_e over the T tokens (seq: per sample, T = s, averaged over b).
    const int e = cfg.moe.num_experts, k = cfg.moe.router_topk;
    const std::vector<double> w = m.value(kPrefix + ".router.weight");
    const int groups = seq ? kBatch : 1;
    std::vector<double> p(static_cast<std::size_t>(groups * e)), cnt(p.size());
    double z = 0;
    for (int n = 0; n < kRows; ++n) {
      std::vector<double> xd(x.begin() + n * kH, x.begin() + (n + 1) * kH);
      std::vector<double> lg = matvec(w, xd.data(), e, kH, nullptr);
      double sum = 0;
      for (double l : lg) sum += std::exp(l);
      z += std::log(sum) * std::log(sum);
      std::vector<double> s(lg.size());
      for (std::size_t i = 0; i < s.size(); ++i) s[i] = std::exp(lg[i]) / sum;
      const int g = seq ? n % kBatch : 0;  // rows are sequence-major: row n is sample n % b
      for (int i = 0; i < e; ++i) p[static_cast<std::size_t>(g * e + i)] += s[static_cast<std::size_t>(i)];
      for (int i : top(s, k)) cnt[static_cast<std::size_t>(g * e + i)] += 1;
    }
    const double t = seq ? kSeq : kRows;
    double aux = 0;
    for (std::size_t i = 0; i < p.size(); ++i) aux += p[i] * cnt[i];
    aux *= e / (k * t * t) / groups;
    CHECK(st.load_balancing_loss == Approx(aux).epsilon(1e-5));
    CHECK(st.z_loss == Approx(z / kRows).epsilon(1e-5));
    double kept = 0;
    for (double v : st.tokens_per_expert) kept += v;
    CHECK(kept == kRows * k);
    Step step;
    step.microbatch = 3;
    m.layer.release(step);
  }
}

TEST_CASE("global_aux_loss is Megatron's: the running mean of the step's expert counts", "[layers][moe]") {
  LayerConfig cfg = base_config();
  cfg.moe.aux_loss_coeff = 0.1f;
  cfg.moe.load_balancing = MoeLoadBalancing::GlobalAuxLoss;
  Model m(cfg);
  const int e = cfg.moe.num_experts, k = cfg.moe.router_topk;
  const std::vector<double> w = m.value(kPrefix + ".router.weight");
  // One microbatch's summed softmax scores P_e and top-k counts N_e, in double.
  const auto sums = [&](const std::vector<float>& x, std::vector<double>& p, std::vector<double>& n) {
    p.assign(static_cast<std::size_t>(e), 0.0);
    n.assign(static_cast<std::size_t>(e), 0.0);
    for (int r = 0; r < kRows; ++r) {
      std::vector<double> xd(x.begin() + r * kH, x.begin() + (r + 1) * kH);
      const std::vector<double> lg = matvec(w, xd.data(), e, kH, nullptr);
      double z = 0;
      for (double l : lg) z += std::exp(l);
      std::vector<double> s(lg.size());
      for (std::size_t i = 0; i < s.size(); ++i) s[i] = std::exp(lg[i]) / z;
      for (int i = 0; i < e; ++i) p[static_cast<std::size_t>(i)] += s[static_cast<std::size_t>(i)];
      for (int i : top(s, k)) n[static_cast<std::size_t>(i)] += 1;
    }
  };
  // Three microbatches of different tokens; microbatch j's loss uses the mean counts of 0..j
  // (d = 1: T is the microbatch's tokens).
  std::vector<std::vector<float>> xs;
  for (unsigned j = 0; j < 3; ++j) xs.push_back(randn(kRows * kH, 40 + j, 1.0f + 0.5f * static_cast<float>(j)));
  std::vector<double> running(static_cast<std::size_t>(e), 0.0);
  std::vector<double> expected;
  for (std::size_t j = 0; j < xs.size(); ++j) {
    std::vector<double> p, n;
    sums(xs[j], p, n);
    double loss = 0;
    for (int i = 0; i < e; ++i) {
      running[static_cast<std::size_t>(i)] += n[static_cast<std::size_t>(i)];
      loss += p[static_cast<std::size_t>(i)] * running[static_cast<std::size_t>(i)] / static_cast<double>(j + 1);
    }
    expected.push_back(loss * e / (static_cast<double>(k) * kRows * kRows));
  }
  const auto value = [&](int64_t mb) { return m.layer.router().stats().at(mb).load_balancing_loss; };
  const auto release = [&](int64_t mb) {
    Step step;
    step.microbatch = mb;
    m.layer.release(step);
  };
  forward(m, xs[0], 0);
  CHECK(value(0) == Approx(expected[0]).epsilon(1e-5));
  release(0);
  forward(m, xs[1], 1);
  const double first = value(1);
  CHECK(first == Approx(expected[1]).epsilon(1e-5));
  // Microbatch 1 again (a recomputed forward): the same mean, not a third count.
  release(1);
  forward(m, xs[1], 1);
  CHECK(value(1) == first);
  release(1);
  forward(m, xs[2], 2);
  CHECK(value(2) == Approx(expected[2]).epsilon(1e-5));
  release(2);
  // Not the microbatch's own aux_loss: the running mean moved the value.
  std::vector<double> p2, n2;
  sums(xs[2], p2, n2);
  double own = 0;
  for (int i = 0; i < e; ++i) own += p2[static_cast<std::size_t>(i)] * n2[static_cast<std::size_t>(i)];
  own *= e / (static_cast<double>(k) * kRows * kRows);
  CHECK(std::abs(own - expected[2]) > 1e-3 * own);
  // clear_stats() ends the global batch: microbatch 2 alone again gives its own counts.
  m.layer.router().clear_stats();
  forward(m, xs[2], 0);
  CHECK(value(0) == Approx(own).epsilon(1e-5));
  release(0);
}

TEST_CASE("the MoE layer's backward is its finite differences, balancing losses included", "[layers][moe]") {
  std::map<std::string, LayerConfig> cases = variants();
  LayerConfig aux = base_config();
  aux.moe.aux_loss_coeff = 0.3f;
  aux.moe.z_loss_coeff = 0.05f;
  cases["aux loss and z loss"] = aux;
  aux.moe.load_balancing = MoeLoadBalancing::SeqAuxLoss;
  aux.moe.score_function = MoeScoreFunction::Sigmoid;
  cases["seq aux loss, sigmoid"] = aux;
  aux.moe.load_balancing = MoeLoadBalancing::GlobalAuxLoss;
  aux.moe.score_function = MoeScoreFunction::Softmax;
  cases["global aux loss (one microbatch per global batch)"] = aux;
  LayerConfig rec = base_config();
  rec.moe.recompute = true;
  rec.moe.aux_loss_coeff = 0.2f;
  cases["recomputed MoE layer"] = rec;
  for (const auto& [name, cfg] : cases) {
    INFO(name);
    Model m(cfg);
    const std::vector<float> x = randn(kRows * kH, 21), r = randn(kRows * kH, 22);
    const float coeff = cfg.moe.aux_loss_coeff, zc = cfg.moe.z_loss_coeff;
    int64_t mb = 100;
    // L = sum(out * r) + coeff aux + zc z, evaluated in double from an fp32 forward.
    const auto loss = [&](const std::vector<float>& xv) {
      m.layer.router().clear_stats();  // each evaluation its own global batch (global_aux_loss)
      const std::vector<float> out = forward(m, xv, mb);
      double l = 0;
      for (std::size_t i = 0; i < out.size(); ++i) l += static_cast<double>(out[i]) * r[i];
      const RouterStats& st = m.layer.router().stats().at(mb);
      l += coeff * st.load_balancing_loss + zc * st.z_loss;
      Step step;
      step.microbatch = mb++;
      m.layer.release(step);
      return l;
    };
    // The analytic gradients.
    Step step;
    step.microbatch = 1;
    m.layer.forward(Tensor::from_host(x.data(), {kRows, kH}, DType::F32), step);
    const Tensor dx_t = m.layer.backward_input(Tensor::from_host(r.data(), {kRows, kH}, DType::F32), step);
    m.layer.backward_weight(step);
    std::vector<float> dx(static_cast<std::size_t>(dx_t.numel()));
    dx_t.copy_to_host(dx.data(), dx.size() * sizeof(float));
    const float eps = 1e-2f;
    const auto near = [](double fd, double an) { return std::abs(fd - an) <= 2e-3 + 2e-2 * std::abs(an); };
    for (int i : {0, 5, 17, 42, 63, 90}) {
      std::vector<float> xp = x, xm = x;
      xp[static_cast<std::size_t>(i)] += eps;
      xm[static_cast<std::size_t>(i)] -= eps;
      const double fd = (loss(xp) - loss(xm)) / (2 * eps);
      INFO("dx[" << i << "]: fd " << fd << " analytic " << dx[static_cast<std::size_t>(i)]);
      CHECK(near(fd, dx[static_cast<std::size_t>(i)]));
    }
    std::vector<std::string> names = {kPrefix + ".router.weight", kPrefix + ".experts.linear_fc1.weight1",
                                      kPrefix + ".experts.linear_fc2.weight2"};
    if (m.has(kPrefix + ".shared_experts.gate_weight")) names.push_back(kPrefix + ".shared_experts.gate_weight");
    if (m.has(kPrefix + ".shared_experts.linear_fc1.weight")) names.push_back(kPrefix + ".shared_experts.linear_fc1.weight");
    if (m.has(kPrefix + ".experts.linear_fc1.bias3")) names.push_back(kPrefix + ".experts.linear_fc1.bias3");
    for (const std::string& pn : names) {
      const std::vector<double> g = m.grad(pn);
      float* p = m.raw(pn);
      for (std::size_t i : {std::size_t{0}, g.size() / 2, g.size() - 1}) {
        const float keep = p[i];
        p[i] = keep + eps;
        const double lp = loss(x);
        p[i] = keep - eps;
        const double lm = loss(x);
        p[i] = keep;
        const double fd = (lp - lm) / (2 * eps);
        INFO(pn << "[" << i << "]: fd " << fd << " analytic " << g[i]);
        CHECK(near(fd, g[i]));
      }
    }
  }
}

TEST_CASE("MoE settings Megatron refuses are refused naming the flags", "[layers][moe]") {
  const auto refusal = [](LayerConfig c, int t = 1) {
    try {
      c.validate(t);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  LayerConfig c = base_config();
  c.moe.router_topk = 5;
  CHECK_THAT(refusal(c), Catch::Contains("--moe-router-topk"));
  c = base_config();
  c.moe.router_topk = 1;
  CHECK_THAT(refusal(c), Catch::Contains("--moe-router-pre-softmax"));
  c = base_config();
  c.moe.enable_expert_bias = true;
  CHECK_THAT(refusal(c), Catch::Contains("sigmoid"));
  c = base_config();
  c.moe.load_balancing = MoeLoadBalancing::GlobalAuxLoss;  // Megatron's, accepted (d-dependent by definition)
  CHECK(refusal(c) == "accepted");
  c = base_config();
  c.moe.pad_expert_input_to_capacity = true;
  CHECK_THAT(refusal(c), Catch::Contains("--moe-expert-capacity-factor"));
  c = base_config();
  c.moe.group_topk = 2;
  CHECK_THAT(refusal(c), Catch::Contains("--moe-router-num-groups"));
  c = base_config();
  CHECK_THAT(refusal(c, 2), Catch::Contains("--sequence-parallel"));
  c.sequence_parallel = true;
  CHECK(refusal(c, 2) == "accepted");
}
