// AdamW and SGD (momentum, Nesterov, weight decay, first step) over several steps against a
// double-precision reference.
#include <catch2/catch.hpp>

#include "reference.h"

using namespace ptdp_test;

namespace {

struct AdamRef {
  dvec p, m, v;
  void step(const dvec& g, const ptdp::AdamWParams& h) {
    const double lr = h.lr, b1 = h.beta1, b2 = h.beta2, eps = h.eps, wd = h.weight_decay;
    const double t = static_cast<double>(h.step);
    const double bc1 = 1.0 - std::pow(b1, t), bc2 = 1.0 - std::pow(b2, t);
    for (std::size_t i = 0; i < p.size(); ++i) {
      p[i] -= lr * wd * p[i];  // decoupled weight decay
      m[i] = b1 * m[i] + (1.0 - b1) * g[i];
      v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
      const double mhat = m[i] / bc1, vhat = v[i] / bc2;
      p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
};

struct SgdRef {
  dvec p, buf;
  void step(const dvec& g, const ptdp::SgdParams& h) {
    const double lr = h.lr, mom = h.momentum, wd = h.weight_decay;
    for (std::size_t i = 0; i < p.size(); ++i) {
      double d = g[i] + wd * p[i];
      if (mom != 0.0) {
        buf[i] = h.first_step ? d : mom * buf[i] + d;
        d = h.nesterov ? d + mom * buf[i] : buf[i];
      }
      p[i] -= lr * d;
    }
  }
};

}  // namespace

TEST_CASE("adamw_step over several steps matches the double reference", "[optimizer]") {
  struct Cfg {
    float lr, b1, b2, eps, wd, gscale;
    int64_t first_step;
  };
  const Cfg cfgs[] = {
      {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 1},
      {1e-2f, 0.8f, 0.99f, 1e-8f, 0.1f, 1.0f, 1},
      {5e-2f, 0.9f, 0.95f, 1e-3f, 0.01f, 1e-3f, 1},  // eps comparable to sqrt(vhat)
      {1e-3f, 0.9f, 0.999f, 1e-8f, 0.05f, 0.5f, 10},  // resuming at step 10 with m, v != 0
  };
  uint32_t seed = 1;
  for (const Cfg& c : cfgs) {
    for (int64_t n : {1, 7, 33}) {
      Rand r(seed++);
      fvec p = r.uniform(n), m(static_cast<std::size_t>(n), 0.0f), v(m);
      if (c.first_step > 1) {
        m = r.uniform(n, -0.1f, 0.1f);
        v = r.uniform(n, 0.0f, 0.05f);
      }
      AdamRef ref{to_d(p), to_d(m), to_d(v)};
      for (int64_t s = c.first_step; s < c.first_step + 5; ++s) {
        fvec g = r.uniform(n);
        for (float& x : g) x *= c.gscale;
        ptdp::AdamWParams h;
        h.lr = c.lr;
        h.beta1 = c.b1;
        h.beta2 = c.b2;
        h.eps = c.eps;
        h.weight_decay = c.wd;
        h.step = s;
        ref.step(to_d(g), h);
        be().adamw_step(p.data(), g.data(), m.data(), v.data(), n, h);
        INFO("lr " << c.lr << " betas " << c.b1 << "," << c.b2 << " eps " << c.eps << " wd "
                   << c.wd << " n " << n << " step " << s);
        CHECK_ALLCLOSE(p, ref.p, 1e-6, 1e-5);
        CHECK_ALLCLOSE(m, ref.m, 1e-7, 1e-5);
        CHECK_ALLCLOSE(v, ref.v, 1e-9, 1e-5);
      }
    }
  }
}

TEST_CASE("sgd_step over several steps matches the double reference", "[optimizer]") {
  struct Cfg {
    float lr, momentum, wd;
    bool nesterov;
  };
  const Cfg cfgs[] = {{0.1f, 0.0f, 0.0f, false}, {0.05f, 0.0f, 0.01f, false},
                      {0.1f, 0.9f, 0.0f, false}, {0.1f, 0.9f, 0.05f, false},
                      {0.02f, 0.8f, 0.0f, true},  {0.05f, 0.9f, 0.1f, true}};
  uint32_t seed = 100;
  for (const Cfg& c : cfgs) {
    for (int64_t n : {1, 7, 33}) {
      Rand r(seed++);
      fvec p = r.uniform(n), buf = r.uniform(n);  // garbage before the first step
      SgdRef ref{to_d(p), to_d(buf)};
      for (int s = 0; s < 5; ++s) {
        const fvec g = r.uniform(n);
        ptdp::SgdParams h;
        h.lr = c.lr;
        h.momentum = c.momentum;
        h.weight_decay = c.wd;
        h.nesterov = c.nesterov;
        h.first_step = s == 0;
        ref.step(to_d(g), h);
        be().sgd_step(p.data(), g.data(), buf.data(), n, h);
        INFO("lr " << c.lr << " momentum " << c.momentum << " wd " << c.wd << " nesterov "
                   << c.nesterov << " n " << n << " step " << s);
        CHECK_ALLCLOSE(p, ref.p, 1e-6, 1e-5);
        if (c.momentum != 0.0f) CHECK_ALLCLOSE(buf, ref.buf, 1e-6, 1e-5);
      }
    }
  }
}

TEST_CASE("adamw_step and sgd_step with grad_scale equal a step on the scaled gradients, bit for bit",
          "[optimizer]") {
  const int64_t n = 1037;
  const auto sn = static_cast<std::size_t>(n);
  std::vector<float> g(sn), scaled(sn);
  for (std::size_t i = 0; i < sn; ++i) {
    g[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
    scaled[i] = g[i] * 0.3125f;
  }
  {
    std::vector<float> p1(sn, 0.5f), m1(sn, 0.0f), v1(sn, 0.0f), p2 = p1, m2 = m1, v2 = v1;
    ptdp::AdamWParams h;
    h.weight_decay = 0.1f;
    for (int64_t step = 1; step <= 3; ++step) {
      h.step = step;
      h.grad_scale = 1.0f;
      be().adamw_step(p1.data(), scaled.data(), m1.data(), v1.data(), n, h);
      h.grad_scale = 0.3125f;
      be().adamw_step(p2.data(), g.data(), m2.data(), v2.data(), n, h);
    }
    CHECK(p1 == p2);
    CHECK(m1 == m2);
    CHECK(v1 == v2);
  }
  {
    std::vector<float> p1(sn, 0.5f), b1(sn, 0.0f), p2 = p1, b2 = b1;
    ptdp::SgdParams h;
    h.momentum = 0.9f;
    h.weight_decay = 0.01f;
    for (int step = 0; step < 3; ++step) {
      h.first_step = step == 0;
      h.grad_scale = 1.0f;
      be().sgd_step(p1.data(), scaled.data(), b1.data(), n, h);
      h.grad_scale = 0.3125f;
      be().sgd_step(p2.data(), g.data(), b2.data(), n, h);
    }
    CHECK(p1 == p2);
    CHECK(b1 == b2);
  }
  // A scale that is not finite and positive is refused, naming it.
  ptdp::AdamWParams bad;
  bad.grad_scale = 0.0f;
  std::vector<float> p(sn), m(sn), v(sn);
  CHECK_THROWS_WITH(be().adamw_step(p.data(), g.data(), m.data(), v.data(), n, bad), Catch::Contains("grad_scale"));
}

TEST_CASE("adamw_step: odd lengths, vector tails and 1 or 2 threads give the same bits",
          "[optimizer]") {
  // 70001 parameters are split over the threads (and not at a multiple of the vector width);
  // the short ones run on one thread with only a tail or only vectors.
  for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{1037}, int64_t{70001}}) {
    Rand r(static_cast<uint32_t>(n));
    const fvec p0 = r.uniform(n), m0 = r.uniform(n, -0.1f, 0.1f), v0 = r.uniform(n, 0.0f, 0.05f);
    const fvec g = r.uniform(n);
    ptdp::AdamWParams h;
    h.lr = 1e-2f;
    h.weight_decay = 0.1f;
    h.step = 7;
    h.grad_scale = 0.75f;
    fvec p[2] = {p0, p0}, m[2] = {m0, m0}, v[2] = {v0, v0};
    for (int k = 0; k < 2; ++k) {
      with_threads(k + 1, [&] { be().adamw_step(p[k].data(), g.data(), m[k].data(), v[k].data(), n, h); });
    }
    INFO("n " << n);
    CHECK_BITEQUAL(p[1], p[0]);
    CHECK_BITEQUAL(m[1], m[0]);
    CHECK_BITEQUAL(v[1], v[0]);
    AdamRef ref{to_d(p0), to_d(m0), to_d(v0)};
    dvec gd = to_d(g);
    for (double& x : gd) x *= 0.75;
    ref.step(gd, h);
    CHECK_ALLCLOSE(p[0], ref.p, 1e-6, 1e-5);
    CHECK_ALLCLOSE(m[0], ref.m, 1e-7, 1e-5);
    CHECK_ALLCLOSE(v[0], ref.v, 1e-9, 1e-5);
  }
}
