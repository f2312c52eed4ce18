// LayerNorm forward (y, mean, rstd) and backward (dx, dgamma, dbeta, accumulate mode).
#include <catch2/catch.hpp>

#include "reference.h"

using namespace ptdp_test;

namespace {
struct RC {
  int64_t rows, cols;
};
const RC kMats[] = {{1, 1}, {1, 7}, {3, 2}, {3, 5}, {4, 33}, {7, 3}, {2, 70}};

struct LnData {
  fvec x, gamma, beta;
};

LnData make(const RC& s, uint32_t seed) {
  Rand r(seed);
  LnData d;
  d.x = r.uniform(s.rows * s.cols, -1.0f, 1.0f);
  for (float& v : d.x) v += 2.0f;  // a non-zero mean
  d.gamma = r.uniform(s.cols, 0.5f, 1.5f);
  d.beta = r.uniform(s.cols, -0.5f, 0.5f);
  return d;
}
}  // namespace

TEST_CASE("layernorm_forward: y, mean and rstd", "[layernorm]") {
  uint32_t seed = 1;
  for (float eps : {1e-5f, 0.1f}) {  // a large eps pins down where eps goes (inside the sqrt)
    for (const RC& s : kMats) {
      const LnData d = make(s, seed++);
      dvec mean, rstd;
      const dvec want = layernorm_ref(to_d(d.x), to_d(d.gamma), to_d(d.beta), s.rows, s.cols,
                                      eps, &mean, &rstd);
      fvec y(d.x.size(), 77.0f), m(static_cast<std::size_t>(s.rows), 77.0f),
          rs(static_cast<std::size_t>(s.rows), 77.0f);
      INFO("rows " << s.rows << " cols " << s.cols << " eps " << eps);
      be().layernorm_forward(d.x.data(), d.gamma.data(), d.beta.data(), y.data(), kF32, m.data(),
                             rs.data(), s.rows, s.cols, eps);
      CHECK_ALLCLOSE(y, want, 1e-5, 1e-4);
      CHECK_ALLCLOSE(m, mean, 1e-6, 1e-6);
      CHECK_ALLCLOSE(rs, rstd, 1e-6, 1e-4);
    }
  }
}

TEST_CASE("layernorm_forward: constant rows and a large offset", "[layernorm]") {
  // A constant row has zero variance: y = beta and rstd = 1/sqrt(eps).
  const int64_t cols = 5;
  fvec x(cols, 3.0f), gamma(cols, 2.0f), beta = {0.1f, -0.2f, 0.3f, -0.4f, 0.5f};
  fvec y(cols), m(1), rs(1);
  be().layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), kF32, m.data(), rs.data(), 1,
                         cols, 1e-5f);
  CHECK_ALLCLOSE(y, to_d(beta), 1e-6, 0.0);
  CHECK(m[0] == Approx(3.0).epsilon(1e-7));
  CHECK(rs[0] == Approx(1.0 / std::sqrt(1e-5)).epsilon(1e-4));

  // Rows far from zero: a naive E[x^2] - E[x]^2 in fp32 loses the variance.
  Rand r(5);
  fvec xb = r.uniform(2 * 33, -1.0f, 1.0f);
  for (float& v : xb) v += 1000.0f;
  const fvec g = r.uniform(33, 0.5f, 1.5f), b = r.uniform(33, -0.5f, 0.5f);
  dvec mean, rstd;
  const dvec want = layernorm_ref(to_d(xb), to_d(g), to_d(b), 2, 33, 1e-5, &mean, &rstd);
  fvec yb(xb.size()), mb(2), rb(2);
  be().layernorm_forward(xb.data(), g.data(), b.data(), yb.data(), kF32, mb.data(), rb.data(), 2, 33,
                         1e-5f);
  CHECK_ALLCLOSE(yb, want, 1e-3, 1e-3);
  CHECK_ALLCLOSE(rb, rstd, 0.0, 1e-3);
}

TEST_CASE("layernorm_backward: dx, dgamma, dbeta match finite differences",
          "[layernorm][backward]") {
  uint32_t seed = 100;
  const float eps = 1e-5f;
  for (const RC& s : kMats) {
    const LnData d = make(s, seed++);
    Rand r(seed++);
    const fvec dy = r.uniform(s.rows * s.cols);
    const dvec G = to_d(dy), X = to_d(d.x), Gam = to_d(d.gamma), Bet = to_d(d.beta);
    dvec mean, rstd;
    layernorm_ref(X, Gam, Bet, s.rows, s.cols, eps, &mean, &rstd);
    auto L = [&](const dvec& x, const dvec& ga, const dvec& be_) {
      return dot(G, layernorm_ref(x, ga, be_, s.rows, s.cols, eps));
    };
    const dvec want_dx = fd_grad([&](const dvec& x) { return L(x, Gam, Bet); }, X);
    const dvec want_dg = fd_grad([&](const dvec& ga) { return L(X, ga, Bet); }, Gam);
    const dvec want_db = fd_grad([&](const dvec& bb) { return L(X, Gam, bb); }, Bet);

    const fvec m = to_f(mean), rs = to_f(rstd);
    INFO("rows " << s.rows << " cols " << s.cols);

    fvec dx(d.x.size(), 9.0f), dg(d.gamma.size(), 9.0f), db(d.beta.size(), 9.0f);
    be().layernorm_backward(d.x.data(), d.gamma.data(), m.data(), rs.data(), dy.data(),
                            dx.data(), kF32, dg.data(), db.data(), s.rows, s.cols, false);
    CHECK_ALLCLOSE(dx, want_dx, kFdAtol, kFdRtol);
    CHECK_ALLCLOSE(dg, want_dg, kFdAtol, kFdRtol);
    CHECK_ALLCLOSE(db, want_db, kFdAtol, kFdRtol);

    // Accumulate mode adds to dgamma and dbeta (dx is still overwritten).
    const fvec g0 = r.uniform(s.cols), b0 = r.uniform(s.cols);
    fvec dx2(d.x.size(), -3.0f), dg2 = g0, db2 = b0;
    be().layernorm_backward(d.x.data(), d.gamma.data(), m.data(), rs.data(), dy.data(),
                            dx2.data(), kF32, dg2.data(), db2.data(), s.rows, s.cols, true);
    dvec want_dg2(want_dg), want_db2(want_db);
    for (std::size_t j = 0; j < want_dg2.size(); ++j) {
      want_dg2[j] += g0[j];
      want_db2[j] += b0[j];
    }
    CHECK_ALLCLOSE(dx2, want_dx, kFdAtol, kFdRtol);
    CHECK_ALLCLOSE(dg2, want_dg2, kFdAtol, kFdRtol);
    CHECK_ALLCLOSE(db2, want_db2, kFdAtol, kFdRtol);
  }
}

TEST_CASE("layernorm backward uses the statistics saved by the forward", "[layernorm][backward]") {
  // Forward and backward through the kernel, as the engine runs them.
  const RC s{3, 7};
  const LnData d = make(s, 300);
  Rand r(301);
  const fvec dy = r.uniform(s.rows * s.cols);
  const float eps = 1e-5f;
  fvec y(d.x.size()), m(3), rs(3);
  be().layernorm_forward(d.x.data(), d.gamma.data(), d.beta.data(), y.data(), kF32, m.data(),
                         rs.data(), s.rows, s.cols, eps);
  fvec dx(d.x.size()), dg(d.gamma.size()), db(d.beta.size());
  be().layernorm_backward(d.x.data(), d.gamma.data(), m.data(), rs.data(), dy.data(), dx.data(), kF32,
                          dg.data(), db.data(), s.rows, s.cols, false);
  const dvec G = to_d(dy), Gam = to_d(d.gamma), Bet = to_d(d.beta);
  const dvec want_dx = fd_grad(
      [&](const dvec& x) { return dot(G, layernorm_ref(x, Gam, Bet, s.rows, s.cols, eps)); },
      to_d(d.x));
  CHECK_ALLCLOSE(dx, want_dx, kFdAtol, kFdRtol);
}

TEST_CASE("layernorm: rows wider than the lanes, against the double reference, the same bits on "
          "1, 2 and 3 threads", "[layernorm][backward]") {
  // 257 rows (nine row chunks of dgamma and dbeta, the last short) of 771 columns (eight-lane
  // sums with a tail of three): any thread-order-dependent sum would show in the low bits.
  const RC s{257, 771};
  const LnData d = make(s, 400);
  const fvec dy = Rand(401).uniform(s.rows * s.cols);
  const float eps = 1e-5f;
  dvec mean_ref, rstd_ref;
  const dvec want_y = layernorm_ref(to_d(d.x), to_d(d.gamma), to_d(d.beta), s.rows, s.cols, eps,
                                    &mean_ref, &rstd_ref);
  // dgamma = sum over rows of dy * xhat, dbeta = sum of dy, in double.
  dvec want_dg(static_cast<std::size_t>(s.cols)), want_db(static_cast<std::size_t>(s.cols));
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t c = 0; c < s.cols; ++c) {
      const std::size_t e = static_cast<std::size_t>(r * s.cols + c);
      const double xhat = (d.x[e] - mean_ref[static_cast<std::size_t>(r)]) * rstd_ref[static_cast<std::size_t>(r)];
      want_dg[static_cast<std::size_t>(c)] += dy[e] * xhat;
      want_db[static_cast<std::size_t>(c)] += dy[e];
    }
  }
  std::vector<fvec> ys, dxs, dgs, dbs;
  for (int threads : {1, 2, 3}) {
    fvec y(d.x.size()), m(static_cast<std::size_t>(s.rows)), rs(m.size());
    fvec dx(d.x.size()), dg(d.gamma.size()), db(d.beta.size());
    with_threads(threads, [&] {
      be().layernorm_forward(d.x.data(), d.gamma.data(), d.beta.data(), y.data(), kF32, m.data(),
                             rs.data(), s.rows, s.cols, eps);
      be().layernorm_backward(d.x.data(), d.gamma.data(), m.data(), rs.data(), dy.data(),
                              dx.data(), kF32, dg.data(), db.data(), s.rows, s.cols, false);
    });
    ys.push_back(y);
    dxs.push_back(dx);
    dgs.push_back(dg);
    dbs.push_back(db);
  }
  CHECK_ALLCLOSE(ys[0], want_y, 1e-5, 1e-5);
  CHECK_ALLCLOSE(dgs[0], want_dg, 1e-4, 1e-5);
  CHECK_ALLCLOSE(dbs[0], want_db, 1e-4, 1e-5);
  for (std::size_t i = 1; i < ys.size(); ++i) {
    INFO("thread count " << i + 1);
    CHECK_BITEQUAL(ys[i], ys[0]);
    CHECK_BITEQUAL(dxs[i], dxs[0]);
    CHECK_BITEQUAL(dgs[i], dgs[0]);
    CHECK_BITEQUAL(dbs[i], dbs[0]);
  }
}
