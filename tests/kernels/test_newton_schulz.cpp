// newton_schulz (Muon's orthogonalisation) against a double-precision reference of the same
// iteration written here from NewtonSchulzDesc's contract; the orthogonality it reaches (the
// singular values of the result); bf16 mode; determinism. Its refusals are in test_errors.cpp.
#include <catch2/catch.hpp>

#include <array>
#include <cstring>
#include <limits>
#include <utility>

#include "reference.h"

using namespace ptdp_test;

namespace {

// Keller Jordan's quintic, PyTorch's torch.optim.Muon default (Megatron's "simple").
constexpr float kSimple[3] = {3.4445f, -4.775f, 2.0315f};
// The classic quintic Newton-Schulz step p(s) = (15 s - 10 s^3 + 3 s^5) / 8: p(1) = 1, p'(1) = 0,
// so it converges to 1 from anywhere in (0, sqrt(7/3)).
constexpr float kConvergent[3] = {1.875f, -1.25f, 0.375f};

ptdp::NewtonSchulzDesc desc(int64_t rows, int64_t cols, int steps,
                            std::initializer_list<std::array<float, 3>> sets, int precision = 0) {
  ptdp::NewtonSchulzDesc d;
  d.rows = rows;
  d.cols = cols;
  d.steps = steps;
  d.precision = precision;
  int i = 0;
  for (const auto& s : sets) {
    for (int j = 0; j < 3; ++j) d.coefficients[i][j] = s[static_cast<std::size_t>(j)];
    ++i;
  }
  d.num_sets = i;
  return d;
}

std::array<float, 3> set_of(const float (&c)[3]) { return {c[0], c[1], c[2]}; }

// The iteration in double, on the [k, n] orientation, with full products.
dvec ns_reference(const fvec& x, const ptdp::NewtonSchulzDesc& d) {
  const bool tall = d.rows > d.cols;
  const int64_t k = tall ? d.cols : d.rows, n = tall ? d.rows : d.cols;
  dvec X(static_cast<std::size_t>(k * n));
  for (int64_t r = 0; r < d.rows; ++r) {
    for (int64_t c = 0; c < d.cols; ++c) {
      X[static_cast<std::size_t>(tall ? c * n + r : r * n + c)] = x[static_cast<std::size_t>(r * d.cols + c)];
    }
  }
  double ss = 0.0;
  for (double v : X) ss += v * v;
  const double div = std::max(std::sqrt(ss), static_cast<double>(d.eps));
  for (double& v : X) v /= div;
  dvec A(static_cast<std::size_t>(k * k)), B(A.size()), Y(X.size());
  for (int s = 0; s < d.steps; ++s) {
    const double a = d.coefficients[s % d.num_sets][0], b = d.coefficients[s % d.num_sets][1],
                 c = d.coefficients[s % d.num_sets][2];
    for (int64_t i = 0; i < k; ++i) {
      for (int64_t j = 0; j < k; ++j) {
        double acc = 0.0;
        for (int64_t l = 0; l < n; ++l) acc += X[i * n + l] * X[j * n + l];
        A[i * k + j] = acc;
      }
    }
    for (int64_t i = 0; i < k; ++i) {
      for (int64_t j = 0; j < k; ++j) {
        double acc = 0.0;
        for (int64_t l = 0; l < k; ++l) acc += A[i * k + l] * A[l * k + j];
        B[i * k + j] = b * A[i * k + j] + c * acc;
      }
    }
    for (int64_t i = 0; i < k; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t l = 0; l < k; ++l) acc += B[i * k + l] * X[l * n + j];
        Y[static_cast<std::size_t>(i * n + j)] = a * X[static_cast<std::size_t>(i * n + j)] + acc;
      }
    }
    X.swap(Y);
  }
  dvec out(X.size());
  for (int64_t r = 0; r < d.rows; ++r) {
    for (int64_t c = 0; c < d.cols; ++c) {
      out[static_cast<std::size_t>(r * d.cols + c)] = X[static_cast<std::size_t>(tall ? c * n + r : r * n + c)];
    }
  }
  return out;
}

// Singular values of y [rows, cols] (ascending): square roots of the eigenvalues of the [k, k]
// Gram matrix, by cyclic Jacobi rotations in double.
dvec singular_values(const fvec& y, int64_t rows, int64_t cols) {
  const bool tall = rows > cols;
  const int64_t k = tall ? cols : rows, n = tall ? rows : cols;
  auto at = [&](int64_t i, int64_t l) {
    return static_cast<double>(y[static_cast<std::size_t>(tall ? l * cols + i : i * cols + l)]);
  };
  dvec g(static_cast<std::size_t>(k * k));
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      double acc = 0.0;
      for (int64_t l = 0; l < n; ++l) acc += at(i, l) * at(j, l);
      g[static_cast<std::size_t>(i * k + j)] = acc;
    }
  }
  auto G = [&](int64_t i, int64_t j) -> double& { return g[static_cast<std::size_t>(i * k + j)]; };
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0.0;
    for (int64_t p = 0; p < k; ++p) {
      for (int64_t q = p + 1; q < k; ++q) off += G(p, q) * G(p, q);
    }
    if (off < 1e-26) break;
    for (int64_t p = 0; p < k; ++p) {
      for (int64_t q = p + 1; q < k; ++q) {
        if (std::abs(G(p, q)) < 1e-300) continue;
        const double theta = (G(q, q) - G(p, p)) / (2.0 * G(p, q));
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1.0));
        const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
        for (int64_t r = 0; r < k; ++r) {  // columns p, q
          const double gp = G(r, p), gq = G(r, q);
          G(r, p) = c * gp - s * gq;
          G(r, q) = s * gp + c * gq;
        }
        for (int64_t r = 0; r < k; ++r) {  // rows p, q
          const double gp = G(p, r), gq = G(q, r);
          G(p, r) = c * gp - s * gq;
          G(q, r) = s * gp + c * gq;
        }
      }
    }
  }
  dvec sv(static_cast<std::size_t>(k));
  for (int64_t i = 0; i < k; ++i) sv[static_cast<std::size_t>(i)] = std::sqrt(std::max(G(i, i), 0.0));
  std::sort(sv.begin(), sv.end());
  return sv;
}

double max_abs(const dvec& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

double max_diff(const fvec& got, const dvec& want) {
  double m = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) m = std::max(m, std::abs(got[i] - want[i]));
  return m;
}

}  // namespace

TEST_CASE("newton_schulz matches the double reference on tall, wide and square matrices", "[newton_schulz]") {
  struct Case {
    int64_t rows, cols;
    int steps, sets;
  };
  // Steps not a multiple of the sets: the sets are used cyclically from the first.
  const Case cases[] = {{24, 40, 5, 1}, {40, 24, 5, 1}, {32, 32, 3, 1}, {17, 61, 7, 3},
                        {61, 17, 5, 2}, {1, 9, 2, 1},   {9, 1, 3, 8},   {48, 96, 11, 8}};
  Rand rng(41);
  for (const Case& c : cases) {
    ptdp::NewtonSchulzDesc d;
    d.rows = c.rows;
    d.cols = c.cols;
    d.steps = c.steps;
    d.num_sets = c.sets;
    for (int s = 0; s < c.sets; ++s) {  // distinct sets around the simple one
      d.coefficients[s][0] = kSimple[0] - 0.1f * static_cast<float>(s);
      d.coefficients[s][1] = kSimple[1] + 0.2f * static_cast<float>(s);
      d.coefficients[s][2] = kSimple[2] - 0.05f * static_cast<float>(s);
    }
    INFO(c.rows << " x " << c.cols << ", " << c.steps << " steps, " << c.sets << " sets");
    fvec x = rng.uniform(c.rows * c.cols);
    const dvec want = ns_reference(x, d);
    be().newton_schulz(x.data(), d);
    CHECK(max_diff(x, want) <= 1e-5 * max_abs(want));
  }
}

TEST_CASE("newton_schulz: eps floors the norm of a zero matrix", "[newton_schulz]") {
  fvec x(12, 0.0f);
  be().newton_schulz(x.data(), desc(3, 4, 5, {set_of(kSimple)}));
  for (float v : x) CHECK(v == 0.0f);
  // A tiny matrix below eps is divided by eps, not by its norm: it stays tiny.
  fvec y(12, 1e-10f);
  auto d = desc(3, 4, 1, {set_of(kSimple)});
  d.eps = 1e-3f;
  const dvec want = ns_reference(y, d);
  be().newton_schulz(y.data(), d);
  for (std::size_t i = 0; i < y.size(); ++i) CHECK(y[i] == Approx(want[i]).epsilon(1e-5));
  CHECK(std::abs(y[0]) < 1e-6f);
}

TEST_CASE("newton_schulz orthogonalises: singular values of the result", "[newton_schulz]") {
  Rand rng(7);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{32, 128}, {128, 32}, {48, 48}}) {
    INFO(rows << " x " << cols);
    const fvec g = rng.uniform(rows * cols);
    const dvec sv_in = singular_values(g, rows, cols);
    REQUIRE(sv_in.front() < 0.5 * sv_in.back());  // far from orthogonal to begin with
    // 5 steps of the simple set land in its band, about [0.68, 1.13] (p(1) = 0.701; a random
    // square matrix has singular values near 0 that 5 steps cannot lift: only the upper bound
    // holds there).
    fvec x = g;
    be().newton_schulz(x.data(), desc(rows, cols, 5, {set_of(kSimple)}));
    const dvec sv = singular_values(x, rows, cols);
    if (rows != cols) CHECK(sv.front() > 0.65);
    CHECK(sv.back() < 1.2);
    CHECK(sv.back() > 0.9);
    if (rows == cols) continue;
    // Then 3 convergent steps bring them to 1 (8 sets, one per step).
    x = g;
    be().newton_schulz(x.data(), desc(rows, cols, 8,
                                      {set_of(kSimple), set_of(kSimple), set_of(kSimple), set_of(kSimple),
                                       set_of(kSimple), set_of(kConvergent), set_of(kConvergent),
                                       set_of(kConvergent)}));
    const dvec sv8 = singular_values(x, rows, cols);
    CHECK(sv8.front() > 0.999);
    CHECK(sv8.back() < 1.001);
  }
}

TEST_CASE("newton_schulz bf16 mode: bf16 values, bf16 accuracy, not the fp32 result", "[newton_schulz]") {
  Rand rng(3);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{40, 96}, {96, 40}}) {
    INFO(rows << " x " << cols);
    const fvec g = rng.uniform(rows * cols);
    auto d = desc(rows, cols, 5, {set_of(kSimple)});
    const dvec want = ns_reference(g, d);
    fvec f32 = g, bf = g;
    be().newton_schulz(f32.data(), d);
    d.precision = 2;
    be().newton_schulz(bf.data(), d);
    for (float v : bf) REQUIRE(ptdp::bf16_to_f32(ptdp::f32_to_bf16(v)) == v);  // each result is a bf16 value
    const double scale = max_abs(want);
    const double err_bf = max_diff(bf, want), err_f32 = max_diff(f32, want);
    // bf16 carries 8 significant bits (relative rounding 2^-9) through 15 rounded products whose
    // errors the iteration amplifies near zero (slope 3.4445 per step).
    CHECK(err_bf < 0.06 * scale);
    CHECK(err_bf > 20.0 * err_f32);  // the rounding is really applied
    CHECK(err_f32 < 2e-5 * scale);
    // The result is still orthogonal to bf16 accuracy.
    const dvec sv = singular_values(bf, rows, cols);
    CHECK(sv.front() > 0.65);
    CHECK(sv.back() < 1.25);
  }
  {  // precision 1 (TF32 on CUDA) is fp32 on the CPU
    const fvec g = rng.uniform(20 * 30);
    fvec p0 = g, p1 = g;
    auto d = desc(20, 30, 5, {set_of(kSimple)});
    be().newton_schulz(p0.data(), d);
    d.precision = 1;
    be().newton_schulz(p1.data(), d);
    CHECK(std::memcmp(p0.data(), p1.data(), p0.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("newton_schulz is deterministic and reuses its scratch across shapes", "[newton_schulz]") {
  Rand rng(11);
  const fvec big = rng.uniform(96 * 160), small = rng.uniform(12 * 20);
  for (int precision : {0, 2}) {
    fvec a = big, b = big, c = small, e = small;
    be().newton_schulz(a.data(), desc(96, 160, 5, {set_of(kSimple)}, precision));
    be().newton_schulz(c.data(), desc(20, 12, 5, {set_of(kSimple)}, precision));  // smaller after larger
    be().newton_schulz(b.data(), desc(96, 160, 5, {set_of(kSimple)}, precision));
    be().newton_schulz(e.data(), desc(20, 12, 5, {set_of(kSimple)}, precision));
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(c.data(), e.data(), c.size() * sizeof(float)) == 0);
  }
}
