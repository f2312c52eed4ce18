// bias_add / bias_grad, GeLU forward and backward, add / axpy / scale / fill / sum_squares.
#include <catch2/catch.hpp>

#include "reference.h"

using namespace ptdp_test;

namespace {
const int64_t kSizes[] = {1, 3, 7, 33, 100};
struct RC {
  int64_t rows, cols;
};
const RC kMats[] = {{1, 1}, {1, 7}, {3, 1}, {3, 5}, {7, 33}, {33, 3}, {3, 70}, {2, 129}};
}  // namespace

// ---- memory movement -----------------------------------------------------------------------

TEST_CASE("cpu backend identity and memory movement", "[memory]") {
  CHECK(be().device_type() == ptdp::DeviceType::CPU);
  CHECK(std::string(be().name()) == "cpu");
  Rand r(3);
  const fvec src = r.uniform(33);
  fvec dev(33, 0.0f), host(33, 0.0f);
  be().copy_from_host(dev.data(), src.data(), 33 * sizeof(float));
  be().synchronize();
  CHECK_BITEQUAL(dev, src);
  be().copy_to_host(host.data(), dev.data(), 33 * sizeof(float));
  be().synchronize();
  CHECK_BITEQUAL(host, src);
  // Device-to-device copy of a sub-range.
  fvec dst(33, 7.0f);
  be().copy(dst.data() + 3, src.data() + 5, 10 * sizeof(float));
  be().synchronize();
  for (int i = 0; i < 33; ++i) {
    const float want = (i >= 3 && i < 13) ? src[static_cast<std::size_t>(i + 2)] : 7.0f;
    CHECK(dst[static_cast<std::size_t>(i)] == want);
  }
  CHECK_NOTHROW(be().copy(dst.data(), src.data(), 0));
}

// ---- bias ------------------------------------------------------------------------------------

TEST_CASE("bias_add adds the bias to every row", "[bias]") {
  uint32_t seed = 1;
  for (const RC& s : kMats) {
    Rand r(seed++);
    fvec y = r.uniform(s.rows * s.cols);
    const fvec bias = r.uniform(s.cols);
    dvec want(y.size());
    for (int64_t i = 0; i < s.rows; ++i)
      for (int64_t j = 0; j < s.cols; ++j)
        want[static_cast<std::size_t>(i * s.cols + j)] =
            static_cast<double>(y[static_cast<std::size_t>(i * s.cols + j)]) +
            bias[static_cast<std::size_t>(j)];
    INFO("rows " << s.rows << " cols " << s.cols);
    be().bias_add(y.data(), bias.data(), kF32, s.rows, s.cols);
    CHECK_ALLCLOSE(y, want, 1e-6, 1e-6);
  }
}

TEST_CASE("bias_grad sums dy over rows, overwriting or accumulating", "[bias][backward]") {
  uint32_t seed = 10;
  for (const RC& s : kMats) {
    Rand r(seed++);
    const fvec dy = r.uniform(s.rows * s.cols);
    const fvec init = r.uniform(s.cols);
    // Gradient of L(b) = sum(G * (Y + b)) with G = dy, by finite differences on the double
    // reference forward.
    const dvec base = to_d(r.uniform(s.rows * s.cols));
    const dvec g = to_d(dy);
    const dvec want = fd_grad(
        [&](const dvec& b) {
          dvec y(base);
          for (int64_t i = 0; i < s.rows; ++i)
            for (int64_t j = 0; j < s.cols; ++j)
              y[static_cast<std::size_t>(i * s.cols + j)] += b[static_cast<std::size_t>(j)];
          return dot(g, y);
        },
        to_d(init));
    INFO("rows " << s.rows << " cols " << s.cols);

    fvec db = init;  // overwrite mode ignores the contents
    be().bias_grad(dy.data(), kF32, db.data(), s.rows, s.cols, false);
    CHECK_ALLCLOSE(db, want, kFdAtol, kFdRtol);

    fvec acc = init;
    be().bias_grad(dy.data(), kF32, acc.data(), s.rows, s.cols, true);
    dvec want_acc(want);
    for (std::size_t j = 0; j < want_acc.size(); ++j) want_acc[j] += init[j];
    CHECK_ALLCLOSE(acc, want_acc, kFdAtol, kFdRtol);
  }
}

// ---- GeLU ------------------------------------------------------------------------------------

TEST_CASE("gelu_forward matches the tanh formula", "[gelu]") {
  uint32_t seed = 20;
  for (int64_t n : kSizes) {
    Rand r(seed++);
    fvec x = r.uniform(n, -5.0f, 5.0f);
    x[0] = 0.0f;
    dvec want(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) want[i] = gelu_ref(x[i]);
    fvec y(x.size(), 123.0f);
    INFO("n " << n);
    be().gelu_forward(x.data(), y.data(), kF32, n);
    CHECK_ALLCLOSE(y, want, 1e-6, 1e-5);
    // In place.
    fvec z = x;
    be().gelu_forward(z.data(), z.data(), kF32, n);
    CHECK_ALLCLOSE(z, want, 1e-6, 1e-5);
  }
  // Large magnitudes: gelu(x) -> x for x >> 0 and -> 0 for x << 0, no NaN from tanh/exp.
  fvec x = {-100.0f, -20.0f, -9.0f, 9.0f, 20.0f, 100.0f};
  dvec want;
  for (float v : x) want.push_back(gelu_ref(v));
  fvec y(x.size());
  be().gelu_forward(x.data(), y.data(), kF32, static_cast<int64_t>(x.size()));
  CHECK_ALLCLOSE(y, want, 1e-6, 1e-6);
}

TEST_CASE("gelu_backward matches finite differences", "[gelu][backward]") {
  uint32_t seed = 30;
  for (int64_t n : kSizes) {
    Rand r(seed++);
    const fvec x = r.uniform(n, -4.0f, 4.0f);
    const fvec dy = r.uniform(n);
    const dvec g = to_d(dy);
    const dvec want = fd_grad(
        [&](const dvec& xx) {
          double s = 0.0;
          for (std::size_t i = 0; i < xx.size(); ++i) s += g[i] * gelu_ref(xx[i]);
          return s;
        },
        to_d(x));
    INFO("n " << n);
    fvec dx(x.size(), 55.0f);
    be().gelu_backward(x.data(), dy.data(), dx.data(), kF32, n);
    CHECK_ALLCLOSE(dx, want, kFdAtol, kFdRtol);
    // dx aliasing dy.
    fvec inplace = dy;
    be().gelu_backward(x.data(), inplace.data(), inplace.data(), kF32, n);
    CHECK_ALLCLOSE(inplace, want, kFdAtol, kFdRtol);
  }
}

// ---- elementwise ---------------------------------------------------------------------------

TEST_CASE("add, including aliasing the output with an input", "[elementwise]") {
  uint32_t seed = 40;
  for (int64_t n : kSizes) {
    Rand r(seed++);
    const fvec a = r.uniform(n), b = r.uniform(n);
    dvec want(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) want[i] = static_cast<double>(a[i]) + b[i];
    INFO("n " << n);
    fvec y(a.size());
    be().add(a.data(), b.data(), y.data(), kF32, n);
    CHECK_ALLCLOSE(y, want, 1e-6, 1e-6);
    fvec ya = a;
    be().add(ya.data(), b.data(), ya.data(), kF32, n);
    CHECK_ALLCLOSE(ya, want, 1e-6, 1e-6);
    fvec yb = b;
    be().add(a.data(), yb.data(), yb.data(), kF32, n);
    CHECK_ALLCLOSE(yb, want, 1e-6, 1e-6);
  }
}

TEST_CASE("residual add backward: the gradient passes through to both inputs",
          "[elementwise][backward]") {
  // y = a + b; dL/da = dL/db = G. The backward of a residual is the identity, which the
  // engine implements by passing (or adding, with axpy) the same gradient to both branches.
  Rand r(45);
  const int64_t n = 7;
  const fvec a = r.uniform(n), b = r.uniform(n), g = r.uniform(n);
  const dvec dg = to_d(g), db_ = to_d(b), da_ = to_d(a);
  auto L = [&](const dvec& A, const dvec& B) {
    double s = 0.0;
    for (std::size_t i = 0; i < A.size(); ++i) s += dg[i] * (A[i] + B[i]);
    return s;
  };
  const dvec want_da = fd_grad([&](const dvec& A) { return L(A, db_); }, da_);
  const dvec want_db = fd_grad([&](const dvec& B) { return L(da_, B); }, db_);
  // Forward through the kernel, and the backward as the engine does it: each branch's gradient
  // buffer accumulates G with axpy(1).
  fvec y(static_cast<std::size_t>(n));
  be().add(a.data(), b.data(), y.data(), kF32, n);
  fvec ga(static_cast<std::size_t>(n), 0.0f), gb(static_cast<std::size_t>(n), 0.0f);
  be().axpy(1.0f, g.data(), ga.data(), n);
  be().axpy(1.0f, g.data(), gb.data(), n);
  CHECK_ALLCLOSE(ga, want_da, kFdAtol, kFdRtol);
  CHECK_ALLCLOSE(gb, want_db, kFdAtol, kFdRtol);
}

TEST_CASE("axpy and scale", "[elementwise]") {
  uint32_t seed = 50;
  for (int64_t n : kSizes) {
    for (float alpha : {0.0f, 1.0f, -2.5f, 0.125f}) {
      Rand r(seed++);
      const fvec x = r.uniform(n);
      fvec y = r.uniform(n);
      dvec want(y.size());
      for (std::size_t i = 0; i < y.size(); ++i)
        want[i] = static_cast<double>(y[i]) + static_cast<double>(alpha) * x[i];
      INFO("n " << n << " alpha " << alpha);
      be().axpy(alpha, x.data(), y.data(), n);
      CHECK_ALLCLOSE(y, want, 1e-6, 1e-6);

      fvec s = x;
      dvec want_s(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) want_s[i] = static_cast<double>(alpha) * x[i];
      be().scale(s.data(), alpha, n);
      CHECK_ALLCLOSE(s, want_s, 1e-7, 1e-6);
    }
  }
}

TEST_CASE("fill writes n elements of every dtype and nothing more", "[elementwise][fill]") {
  const int64_t n = 7;
  SECTION("f32") {
    for (double v : {0.0, 1.5, -3.25, 1e-3}) {
      std::vector<float> buf(n + 2, -9.0f);
      be().fill(buf.data(), ptdp::DType::F32, v, n);
      for (int64_t i = 0; i < n; ++i) CHECK(buf[static_cast<std::size_t>(i)] == static_cast<float>(v));
      CHECK(buf[n] == -9.0f);
      CHECK(buf[n + 1] == -9.0f);
    }
  }
  SECTION("bf16") {
    for (double v : {0.0, 1.5, -3.25, 3.14159, -1e-3, 1e30}) {
      std::vector<uint16_t> buf(n + 2, 0xabcd);
      be().fill(buf.data(), ptdp::DType::BF16, v, n);
      const uint16_t want = bf16_ref(static_cast<float>(v));
      INFO("value " << v);
      for (int64_t i = 0; i < n; ++i) CHECK(buf[static_cast<std::size_t>(i)] == want);
      CHECK(buf[n] == 0xabcd);
      CHECK(buf[n + 1] == 0xabcd);
    }
  }
  SECTION("f16") {
    for (double v : {0.0, 1.5, -3.25, 3.14159, -1e-3, 65504.0, 1e6}) {
      std::vector<uint16_t> buf(n + 2, 0xabcd);
      be().fill(buf.data(), ptdp::DType::F16, v, n);
      const uint16_t want = f16_bits_of(static_cast<float>(v));
      INFO("value " << v);
      for (int64_t i = 0; i < n; ++i) CHECK(buf[static_cast<std::size_t>(i)] == want);
      CHECK(buf[n] == 0xabcd);
      CHECK(buf[n + 1] == 0xabcd);
    }
  }
  SECTION("i32") {
    for (double v : {0.0, -7.0, 123456.0, 2147483647.0}) {
      std::vector<int32_t> buf(n + 2, -5);
      be().fill(buf.data(), ptdp::DType::I32, v, n);
      for (int64_t i = 0; i < n; ++i)
        CHECK(buf[static_cast<std::size_t>(i)] == static_cast<int32_t>(v));
      CHECK(buf[n] == -5);
      CHECK(buf[n + 1] == -5);
    }
  }
  SECTION("i64") {
    for (double v : {0.0, -7.0, 1099511627779.0 /* 2^40 + 3 */, -4503599627370496.0}) {
      std::vector<int64_t> buf(n + 2, -5);
      be().fill(buf.data(), ptdp::DType::I64, v, n);
      for (int64_t i = 0; i < n; ++i)
        CHECK(buf[static_cast<std::size_t>(i)] == static_cast<int64_t>(v));
      CHECK(buf[n] == -5);
      CHECK(buf[n + 1] == -5);
    }
  }
}

TEST_CASE("sum_squares accumulates in double", "[elementwise]") {
  uint32_t seed = 60;
  for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{33}, int64_t{100000}}) {
    Rand r(seed++);
    const fvec x = r.uniform(n, -2.0f, 2.0f);
    double want = 0.0;
    for (float v : x) want += static_cast<double>(v) * static_cast<double>(v);
    INFO("n " << n);
    CHECK(be().sum_squares(x.data(), n) == Approx(want).epsilon(1e-7));
  }
  CHECK(be().sum_squares(nullptr, 0) == 0.0);
  // 4096^2 = 2^24 followed by 1000 ones: a float accumulator stays at 2^24, a double one is
  // exact.
  fvec x(1001, 1.0f);
  x[0] = 4096.0f;
  CHECK(be().sum_squares(x.data(), 1001) == 16777216.0 + 1000.0);
  // Squares beyond float range.
  fvec big = {3e30f, -4e30f};
  CHECK(be().sum_squares(big.data(), 2) == Approx(25e60).epsilon(1e-6));
}

TEST_CASE("sum_squares: vector tails and 1 or 2 threads give the same bits", "[elementwise]") {
  for (int64_t n : {int64_t{7}, int64_t{8}, int64_t{9}, int64_t{16385}, int64_t{1000003}}) {
    Rand r(static_cast<uint32_t>(n) + 3);
    const fvec x = r.uniform(n, -2.0f, 2.0f);
    double got[2];
    for (int k = 0; k < 2; ++k) with_threads(k + 1, [&] { got[k] = be().sum_squares(x.data(), n); });
    double want = 0.0;
    for (float v : x) want += static_cast<double>(v) * static_cast<double>(v);
    INFO("n " << n);
    CHECK(got[1] == got[0]);
    CHECK(got[0] == Approx(want).epsilon(1e-12));
  }
}

TEST_CASE("fill: large zero fills (memset, threaded) and -0.0 on 1 and 2 threads", "[elementwise][fill]") {
  // 2^20 + 5 floats is past the 1 MiB below which one thread fills.
  for (int64_t n : {int64_t{5}, (int64_t{1} << 20) + 5}) {
    for (int threads : {1, 2}) {
      INFO("n " << n << " threads " << threads);
      std::vector<float> buf(static_cast<std::size_t>(n + 1), 3.0f);
      with_threads(threads, [&] { be().fill(buf.data(), ptdp::DType::F32, 0.0, n); });
      CHECK(std::count_if(buf.begin(), buf.end() - 1, [](float v) { return v != 0.0f || std::signbit(v); }) == 0);
      CHECK(buf.back() == 3.0f);
      with_threads(threads, [&] { be().fill(buf.data(), ptdp::DType::F32, -0.0, n); });
      CHECK(std::count_if(buf.begin(), buf.end() - 1, [](float v) { return v != 0.0f || !std::signbit(v); }) == 0);
      CHECK(buf.back() == 3.0f);
      std::vector<uint16_t> h(static_cast<std::size_t>(n + 1), 7);
      with_threads(threads, [&] { be().fill(h.data(), ptdp::DType::BF16, 0.0, n); });
      CHECK(std::count(h.begin(), h.end() - 1, uint16_t{0}) == n);
      CHECK(h.back() == 7);
    }
  }
}
