// SwiGLU forward (y = silu(gate) * up over rows [gate | up]) and backward (dgate, dup) in f32,
// bf16 and f16 storage, against a double-precision reference and finite differences.
#include <catch2/catch.hpp>

#include "base/half.h"
#include "reference.h"

using namespace ptdp_test;
using ptdp::DType;

namespace {

const auto& kTypes = kStorageTypes;

/// Relative tolerance of a result rounded once to t (after fp32 math).
double tol(DType t) { return t == DType::BF16 ? 1.0 / 128.0 : t == DType::F16 ? 1.0 / 1024.0 : 1e-5; }

/// Absolute tolerance near zero: f16's subnormal spacing, fp32 round-off otherwise.
double atol(DType t) { return t == DType::F16 ? std::ldexp(1.0, -24) : t == DType::F32 ? 1e-7 : 0.0; }

double silu_ref(double g) { return g / (1.0 + std::exp(-g)); }

/// y [rows, cols] from x [rows, 2 cols] (gate, then up, per row).
dvec swiglu_ref(const dvec& x, int64_t rows, int64_t cols) {
  dvec y(static_cast<std::size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double g = x[static_cast<std::size_t>(r * 2 * cols + c)];
      const double u = x[static_cast<std::size_t>(r * 2 * cols + cols + c)];
      y[static_cast<std::size_t>(r * cols + c)] = silu_ref(g) * u;
    }
  return y;
}

/// The analytic backward in double: dgate = dy up s (1 + g (1 - s)), dup = dy silu(g).
dvec swiglu_backward_ref(const dvec& x, const dvec& dy, int64_t rows, int64_t cols) {
  dvec dx(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const std::size_t gi = static_cast<std::size_t>(r * 2 * cols + c);
      const std::size_t ui = gi + static_cast<std::size_t>(cols);
      const double g = x[gi], u = x[ui], d = dy[static_cast<std::size_t>(r * cols + c)];
      const double s = 1.0 / (1.0 + std::exp(-g));
      dx[gi] = d * u * s * (1.0 + g * (1.0 - s));
      dx[ui] = d * g * s;
    }
  return dx;
}

struct RC {
  int64_t rows, cols;
};
const RC kMats[] = {{1, 1}, {1, 7}, {3, 2}, {4, 33}, {7, 3}, {2, 70}};

}  // namespace

TEST_CASE("swiglu_forward equals silu(gate) * up in every storage type", "[swiglu]") {
  uint32_t seed = 1;
  for (DType t : kTypes) {
    for (const RC& s : kMats) {
      Rand r(seed++);
      const fvec x = rounded(r.uniform(s.rows * 2 * s.cols, -6.0f, 6.0f), t);
      const dvec want = swiglu_ref(to_d(x), s.rows, s.cols);
      Stored xs(x, t), y(fvec(static_cast<std::size_t>(s.rows * s.cols), 77.0f), t);
      INFO(ptdp::dtype_name(t) << " rows " << s.rows << " cols " << s.cols);
      be().swiglu_forward(xs.data(), y.data(), t, s.rows, s.cols);
      CHECK_ALLCLOSE(y.values(), want, atol(t), tol(t));
    }
  }
}

TEST_CASE("swiglu at extreme gates: no NaN, silu(g) -> g and -> 0", "[swiglu]") {
  const fvec gates = {0.0f, -0.0f, 1e-30f, 30.0f, -30.0f, 88.0f, -88.0f, 100.0f, -100.0f,
                      1e4f, -1e4f, 1e30f, -1e30f};
  const int64_t cols = static_cast<int64_t>(gates.size());
  fvec x = gates;
  for (int64_t c = 0; c < cols; ++c) x.push_back(c % 2 ? -1.5f : 2.0f);  // up
  dvec want = swiglu_ref(to_d(x), 1, cols);
  fvec y(static_cast<std::size_t>(cols), 9.0f);
  be().swiglu_forward(x.data(), y.data(), kF32, 1, cols);
  CHECK_ALLCLOSE(y, want, 1e-30, 1e-6);
  const fvec dy(static_cast<std::size_t>(cols), 1.0f);
  const dvec want_dx = swiglu_backward_ref(to_d(x), to_d(dy), 1, cols);
  fvec dx(x.size(), 9.0f);
  be().swiglu_backward(x.data(), dy.data(), dx.data(), kF32, 1, cols);
  CHECK_ALLCLOSE(dx, want_dx, 1e-30, 1e-6);
}

TEST_CASE("swiglu_backward: dgate and dup match finite differences", "[swiglu][backward]") {
  uint32_t seed = 100;
  for (const RC& s : kMats) {
    Rand r(seed++);
    const fvec x = r.uniform(s.rows * 2 * s.cols, -4.0f, 4.0f);
    const fvec dy = r.uniform(s.rows * s.cols);
    const dvec G = to_d(dy);
    const dvec want = fd_grad(
        [&](const dvec& xx) { return dot(G, swiglu_ref(xx, s.rows, s.cols)); }, to_d(x));
    fvec dx(x.size(), 9.0f);
    INFO("rows " << s.rows << " cols " << s.cols);
    be().swiglu_backward(x.data(), dy.data(), dx.data(), kF32, s.rows, s.cols);
    CHECK_ALLCLOSE(dx, want, kFdAtol, kFdRtol);
  }
}

TEST_CASE("swiglu_backward against the analytic double reference in every storage type",
          "[swiglu][backward]") {
  uint32_t seed = 200;
  for (DType t : kTypes) {
    for (const RC& s : kMats) {
      Rand r(seed++);
      const fvec x = rounded(r.uniform(s.rows * 2 * s.cols, -6.0f, 6.0f), t);
      const fvec dy = rounded(r.uniform(s.rows * s.cols), t);
      const dvec want = swiglu_backward_ref(to_d(x), to_d(dy), s.rows, s.cols);
      Stored xs(x, t), dys(dy, t), dx(fvec(x.size(), 77.0f), t);
      INFO(ptdp::dtype_name(t) << " rows " << s.rows << " cols " << s.cols);
      be().swiglu_backward(xs.data(), dys.data(), dx.data(), t, s.rows, s.cols);
      CHECK_ALLCLOSE(dx.values(), want, atol(t), tol(t));
    }
  }
}

TEST_CASE("swiglu with zero rows or columns writes nothing", "[swiglu]") {
  CHECK_NOTHROW(be().swiglu_forward(nullptr, nullptr, kBF16, 0, 4));
  CHECK_NOTHROW(be().swiglu_forward(nullptr, nullptr, kF32, 3, 0));
  CHECK_NOTHROW(be().swiglu_backward(nullptr, nullptr, nullptr, kF16, 0, 4));
  CHECK_NOTHROW(be().swiglu_backward(nullptr, nullptr, nullptr, kF32, 2, 0));
}
