// The MoE router (RouterDesc): Megatron-Core's top-k selection with softmax (before or after the
// selection), sigmoid with and without the expert bias, group-limited routing and the scaling
// factor, against a reference in double written from moe_utils.topk_routing_with_score_function;
// ties go to the lower expert (and group) index; the backward against finite differences through
// the selected path; the load-balancing scores and the z-loss's log-sum-exp with their backwards.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>

#include "reference.h"

using namespace ptdp_test;
using ptdp::RouterDesc;
using ptdp::RouterScore;

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

dvec softmax(const dvec& v) {
  const double mx = *std::max_element(v.begin(), v.end());
  dvec s(v.size());
  double sum = 0.0;
  for (std::size_t i = 0; i < v.size(); ++i) sum += (s[i] = std::exp(v[i] - mx));
  for (double& x : s) x /= sum;
  return s;
}

/// The indices of `candidates` by value, largest first, equal values by lower index.
std::vector<int64_t> ranked(const dvec& v, std::vector<int64_t> candidates) {
  std::stable_sort(candidates.begin(), candidates.end(), [&](int64_t a, int64_t b) {
    return v[static_cast<std::size_t>(a)] > v[static_cast<std::size_t>(b)];
  });
  return candidates;
}

std::vector<int64_t> range(int64_t first, int64_t last) {
  std::vector<int64_t> r(static_cast<std::size_t>(last - first));
  std::iota(r.begin(), r.end(), first);
  return r;
}

/// One token's selection, as Megatron: selection values, group-limited top-k, top-k.
std::vector<int32_t> select_ref(const RouterDesc& d, const dvec& l, const dvec* bias) {
  dvec v = l;
  if (d.score == RouterScore::Softmax && d.pre_softmax) v = softmax(l);
  if (d.score == RouterScore::Sigmoid) {
    for (std::size_t e = 0; e < v.size(); ++e) v[e] = sigmoid(l[e]) + (bias ? (*bias)[e] : 0.0);
  }
  std::vector<int64_t> candidates = range(0, d.experts);
  if (d.num_groups > 0) {
    const int64_t per = d.experts / d.num_groups;
    dvec gs(static_cast<std::size_t>(d.num_groups), 0.0);
    for (int64_t g = 0; g < d.num_groups; ++g) {
      const auto best = ranked(v, range(g * per, (g + 1) * per));
      const int64_t best_of = d.group_score_topk > 0 ? d.group_score_topk : d.topk / d.group_topk;
      for (int64_t i = 0; i < best_of; ++i) {
        gs[static_cast<std::size_t>(g)] += v[static_cast<std::size_t>(best[static_cast<std::size_t>(i)])];
      }
    }
    const auto groups = ranked(gs, range(0, d.num_groups));
    candidates.clear();
    for (int64_t i = 0; i < d.group_topk; ++i) {
      for (int64_t e : range(groups[static_cast<std::size_t>(i)] * per, (groups[static_cast<std::size_t>(i)] + 1) * per)) candidates.push_back(e);
    }
    std::sort(candidates.begin(), candidates.end());
  }
  const auto best = ranked(v, candidates);
  return std::vector<int32_t>(best.begin(), best.begin() + d.topk);
}

/// One token's probabilities for a fixed selection.
dvec probs_ref(const RouterDesc& d, const dvec& l, const std::vector<int32_t>& idx) {
  dvec p(static_cast<std::size_t>(d.topk));
  if (d.score == RouterScore::Softmax && !d.pre_softmax) {
    dvec sel(p.size());
    for (std::size_t j = 0; j < p.size(); ++j) sel[j] = l[static_cast<std::size_t>(idx[j])];
    p = softmax(sel);
  } else if (d.score == RouterScore::Softmax) {
    const dvec s = softmax(l);
    for (std::size_t j = 0; j < p.size(); ++j) p[j] = s[static_cast<std::size_t>(idx[j])];
  } else {
    double sum = 0.0;
    for (std::size_t j = 0; j < p.size(); ++j) sum += (p[j] = sigmoid(l[static_cast<std::size_t>(idx[j])]));
    if (d.topk > 1) {
      for (double& x : p) x /= sum + 1e-20;
    }
  }
  if (d.scaling_factor != 0.0f) {
    for (double& x : p) x *= d.scaling_factor;
  }
  return p;
}

dvec row(const dvec& m, int64_t t, int64_t n) {
  return dvec(m.begin() + static_cast<std::ptrdiff_t>(t * n), m.begin() + static_cast<std::ptrdiff_t>((t + 1) * n));
}

struct Config {
  const char* name;
  RouterDesc d;
  bool bias;
};

RouterDesc desc(int64_t tokens, int64_t experts, int64_t topk, RouterScore score, bool pre, int64_t groups = 0,
                int64_t group_topk = 0, float scaling = 0.0f, int64_t group_score_topk = 0) {
  RouterDesc d;
  d.tokens = tokens;
  d.experts = experts;
  d.topk = topk;
  d.score = score;
  d.pre_softmax = pre;
  d.num_groups = groups;
  d.group_topk = group_topk;
  d.scaling_factor = scaling;
  d.group_score_topk = group_score_topk;
  return d;
}

std::vector<Config> configs() {
  return {
      {"softmax (Mixtral, OLMoE)", desc(21, 8, 2, RouterScore::Softmax, false), false},
      {"softmax top-1", desc(9, 6, 1, RouterScore::Softmax, false), false},
      {"softmax before top-k (Qwen2-MoE)", desc(17, 16, 4, RouterScore::Softmax, true), false},
      {"softmax before top-k, scaled", desc(11, 12, 3, RouterScore::Softmax, true, 0, 0, 2.5f), false},
      {"sigmoid", desc(13, 16, 4, RouterScore::Sigmoid, false), false},
      {"sigmoid top-1", desc(7, 5, 1, RouterScore::Sigmoid, false), false},
      {"sigmoid + expert bias, groups (DeepSeek-V3)", desc(19, 32, 8, RouterScore::Sigmoid, false, 8, 4, 2.5f), true},
      {"softmax, group-limited", desc(15, 24, 6, RouterScore::Softmax, true, 6, 3), false},
      {"softmax on logits, group-limited", desc(10, 16, 4, RouterScore::Softmax, false, 4, 2), false},
      // Group scores of a fixed size, not Megatron's k / group_topk (2 and 3 here).
      {"softmax before top-k, groups scored by their max (DeepSeek-V2)",
       desc(40, 16, 4, RouterScore::Softmax, true, 8, 2, 16.0f, 1), false},
      {"sigmoid + expert bias, groups scored by their top 2 (DeepSeek-V3)",
       desc(40, 16, 3, RouterScore::Sigmoid, false, 4, 1, 2.5f, 2), true},
      {"softmax, k not a multiple of group_topk", desc(12, 16, 3, RouterScore::Softmax, true, 8, 2, 0.0f, 1), false},
  };
}

}  // namespace

TEST_CASE("moe_router_forward selects and weighs experts as Megatron-Core", "[moe][moe_router]") {
  uint32_t seed = 100;
  for (const Config& c : configs()) {
    const RouterDesc& d = c.d;
    Rand r(++seed);
    const fvec logits = r.uniform(d.tokens * d.experts, -3.0f, 3.0f);
    const fvec bias = r.uniform(d.experts, -0.3f, 0.3f);
    std::vector<int32_t> idx(static_cast<std::size_t>(d.tokens * d.topk), -5);
    fvec probs(idx.size());
    be().moe_router_forward(d, logits.data(), c.bias ? bias.data() : nullptr, idx.data(), probs.data());
    const dvec ld = to_d(logits), bd = to_d(bias);
    std::vector<int32_t> idx_want;
    dvec probs_want;
    for (int64_t t = 0; t < d.tokens; ++t) {
      const dvec lt = row(ld, t, d.experts);
      const auto sel = select_ref(d, lt, c.bias ? &bd : nullptr);
      const dvec p = probs_ref(d, lt, sel);
      idx_want.insert(idx_want.end(), sel.begin(), sel.end());
      probs_want.insert(probs_want.end(), p.begin(), p.end());
    }
    INFO(c.name);
    CHECK(idx == idx_want);
    CHECK_ALLCLOSE(probs, probs_want, 1e-6, 1e-5);
  }
}

TEST_CASE("moe_router_forward breaks ties by the lower expert and group index", "[moe][moe_router]") {
  // Token 0: all equal; token 1: 3 at experts 1, 2 and 4.
  const fvec logits = {0, 0, 0, 0, 0, 0, 1, 3, 3, 2, 3, 0};
  {
    const RouterDesc d = desc(2, 6, 2, RouterScore::Softmax, false);
    std::vector<int32_t> idx(4);
    fvec probs(4);
    be().moe_router_forward(d, logits.data(), nullptr, idx.data(), probs.data());
    CHECK(idx == std::vector<int32_t>{0, 1, 1, 2});
    CHECK_ALLCLOSE(probs, (dvec{0.5, 0.5, 0.5, 0.5}), 1e-7, 1e-6);
  }
  {
    // 3 groups of 2 experts, 2 groups kept, each scored by its best expert (topk / group_topk).
    const RouterDesc d = desc(2, 6, 2, RouterScore::Softmax, false, 3, 2);
    std::vector<int32_t> idx(4);
    fvec probs(4);
    be().moe_router_forward(d, logits.data(), nullptr, idx.data(), probs.data());
    // Token 0: every group scores 0: groups 0 and 1 are kept, experts 0 and 1 chosen. Token 1:
    // group scores (top-1) 3, 3, 3: groups 0 and 1 kept; experts 1 and 2 (both 3).
    CHECK(idx == std::vector<int32_t>{0, 1, 1, 2});
  }
  {
    // The expert bias can tie too: sigmoid(0) + 0.25 at experts 3 and 5 beats the rest.
    const fvec zeros(6, 0.0f), bias = {0, 0.1f, 0, 0.25f, 0, 0.25f};
    const RouterDesc d = desc(1, 6, 2, RouterScore::Sigmoid, false);
    std::vector<int32_t> idx(2);
    fvec probs(2);
    be().moe_router_forward(d, zeros.data(), bias.data(), idx.data(), probs.data());
    CHECK(idx == std::vector<int32_t>{3, 5});
    CHECK_ALLCLOSE(probs, (dvec{0.5, 0.5}), 1e-7, 1e-6);  // the bias selects, it does not weigh
  }
}

TEST_CASE("moe_router_backward is the finite-difference gradient through the selected path",
          "[moe][moe_router]") {
  uint32_t seed = 200;
  for (const Config& c : configs()) {
    const RouterDesc& d = c.d;
    Rand r(++seed);
    const fvec logits = r.uniform(d.tokens * d.experts, -2.0f, 2.0f);
    const fvec bias = r.uniform(d.experts, -0.3f, 0.3f);
    const fvec dprobs = r.uniform(d.tokens * d.topk);
    std::vector<int32_t> idx(static_cast<std::size_t>(d.tokens * d.topk));
    fvec probs(idx.size());
    be().moe_router_forward(d, logits.data(), c.bias ? bias.data() : nullptr, idx.data(), probs.data());
    fvec dlogits(logits.size(), 0.5f);
    be().moe_router_backward(d, logits.data(), idx.data(), dprobs.data(), dlogits.data(), false);
    // L = sum dprobs * probs(logits) with the selection held (it is piecewise constant).
    const auto L = [&](const dvec& l) {
      double s = 0.0;
      for (int64_t t = 0; t < d.tokens; ++t) {
        const std::vector<int32_t> sel(idx.begin() + t * d.topk, idx.begin() + (t + 1) * d.topk);
        const dvec p = probs_ref(d, row(l, t, d.experts), sel);
        for (int64_t j = 0; j < d.topk; ++j) s += dprobs[static_cast<std::size_t>(t * d.topk + j)] * p[static_cast<std::size_t>(j)];
      }
      return s;
    };
    const dvec want = fd_grad(L, to_d(logits));
    INFO(c.name);
    CHECK_ALLCLOSE(dlogits, want, kFdAtol, kFdRtol);
    // accumulate adds onto what dlogits holds.
    fvec acc(logits.size(), 0.5f);
    be().moe_router_backward(d, logits.data(), idx.data(), dprobs.data(), acc.data(), true);
    dvec shifted = want;
    for (double& x : shifted) x += 0.5;
    CHECK_ALLCLOSE(acc, shifted, kFdAtol, kFdRtol);
  }
}

TEST_CASE("moe_aux_scores are softmax or normalised sigmoid, with their gradients", "[moe][moe_router]") {
  const int64_t tokens = 7, experts = 9;
  Rand r(300);
  const fvec logits = r.uniform(tokens * experts, -3.0f, 3.0f), ds = r.uniform(tokens * experts);
  for (RouterScore score : {RouterScore::Softmax, RouterScore::Sigmoid}) {
    const auto ref = [&](const dvec& l) {
      dvec s;
      for (int64_t t = 0; t < tokens; ++t) {
        dvec lt = row(l, t, experts);
        if (score == RouterScore::Softmax) {
          lt = softmax(lt);
        } else {
          double sum = 0.0;
          for (double& x : lt) sum += (x = sigmoid(x));
          for (double& x : lt) x /= sum + 1e-20;
        }
        s.insert(s.end(), lt.begin(), lt.end());
      }
      return s;
    };
    fvec scores(logits.size());
    be().moe_aux_scores_forward(score, logits.data(), tokens, experts, scores.data());
    INFO((score == RouterScore::Softmax ? "softmax" : "sigmoid"));
    CHECK_ALLCLOSE(scores, ref(to_d(logits)), 1e-7, 1e-5);
    fvec dl(logits.size(), 0.25f);
    be().moe_aux_scores_backward(score, logits.data(), ds.data(), tokens, experts, dl.data(), true);
    dvec want = fd_grad([&](const dvec& l) { return dot(to_d(ds), ref(l)); }, to_d(logits));
    for (double& x : want) x += 0.25;
    CHECK_ALLCLOSE(dl, want, kFdAtol, kFdRtol);
  }
}

TEST_CASE("moe_router_lse and the z-loss's gradient", "[moe][moe_router]") {
  const int64_t tokens = 6, experts = 10;
  Rand r(400);
  const fvec logits = r.uniform(tokens * experts, -4.0f, 4.0f);
  const auto lse_ref = [&](const dvec& l) {
    dvec out;
    for (int64_t t = 0; t < tokens; ++t) {
      const dvec lt = row(l, t, experts);
      const double mx = *std::max_element(lt.begin(), lt.end());
      double s = 0.0;
      for (double x : lt) s += std::exp(x - mx);
      out.push_back(mx + std::log(s));
    }
    return out;
  };
  fvec lse(static_cast<std::size_t>(tokens));
  be().moe_router_lse(logits.data(), tokens, experts, lse.data());
  CHECK_ALLCLOSE(lse, lse_ref(to_d(logits)), 1e-6, 1e-6);
  const float scale = 1e-3f / static_cast<float>(tokens);  // coeff 1e-3, mean over the tokens
  fvec dl(logits.size(), 9.0f);
  be().moe_router_z_loss_backward(logits.data(), lse.data(), scale, tokens, experts, dl.data(), false);
  const dvec want = fd_grad(
      [&](const dvec& l) {
        double z = 0.0;
        for (double v : lse_ref(l)) z += v * v;
        return scale * z;
      },
      to_d(logits));
  CHECK_ALLCLOSE(dl, want, 1e-7, kFdRtol);
}
