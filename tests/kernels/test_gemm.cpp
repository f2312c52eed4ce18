// GEMM: forward against a double reference (transposes, alpha/beta, leading dimensions,
// strided batches, broadcasting, attention-style interleaved reads) and the linear layer's
// dgrad / wgrad computed with the gemm kernel against central finite differences.
#include <catch2/catch.hpp>

#include "reference.h"

using namespace ptdp_test;
using ptdp::GemmDesc;

namespace {

int64_t eff_lda(const GemmDesc& d) { return d.lda ? d.lda : (d.trans_a ? d.m : d.k); }
int64_t eff_ldb(const GemmDesc& d) { return d.ldb ? d.ldb : (d.trans_b ? d.k : d.n); }
int64_t eff_ldc(const GemmDesc& d) { return d.ldc ? d.ldc : d.n; }
int64_t rows_a(const GemmDesc& d) { return d.trans_a ? d.k : d.m; }
int64_t rows_b(const GemmDesc& d) { return d.trans_b ? d.n : d.k; }

/// Elements a buffer needs for `batch` entries of `rows` rows of leading dimension ld.
int64_t buf_size(int64_t batch, int64_t stride, int64_t rows, int64_t ld) {
  return (batch - 1) * stride + std::max<int64_t>(rows * ld, 1);
}

/// Reference over the whole C buffer: entries outside the [m, n] views keep their contents.
dvec gemm_ref(const GemmDesc& d, const fvec& a, const fvec& b, const fvec& c) {
  const dvec da = to_d(a), db = to_d(b);
  dvec dc = to_d(c);
  for (int64_t i = 0; i < d.batch; ++i)
    ref_gemm1(d.trans_a, d.trans_b, d.m, d.n, d.k, d.alpha, da.data() + i * d.stride_a,
              eff_lda(d), db.data() + i * d.stride_b, eff_ldb(d), d.beta,
              dc.data() + i * d.stride_c, eff_ldc(d));
  return dc;
}

/// Random A, B, C sized for d; runs the kernel and compares the whole C buffer.
void check_gemm(const GemmDesc& d, uint32_t seed) {
  Rand r(seed);
  const fvec a = r.uniform(buf_size(d.batch, d.stride_a, rows_a(d), eff_lda(d)));
  const fvec b = r.uniform(buf_size(d.batch, d.stride_b, rows_b(d), eff_ldb(d)));
  fvec c = r.uniform(buf_size(d.batch, d.stride_c, d.m, eff_ldc(d)));
  const dvec want = gemm_ref(d, a, b, c);
  INFO("trans_a " << d.trans_a << " trans_b " << d.trans_b << " m " << d.m << " n " << d.n
                  << " k " << d.k << " alpha " << d.alpha << " beta " << d.beta << " lda "
                  << d.lda << " ldb " << d.ldb << " ldc " << d.ldc << " batch " << d.batch
                  << " strides " << d.stride_a << "," << d.stride_b << "," << d.stride_c);
  be().gemm(d, a.data(), b.data(), c.data());
  CHECK_ALLCLOSE(c, want, 1e-4, 1e-5);
}

struct Shape {
  int64_t m, n, k;
};
const Shape kShapes[] = {{1, 1, 1}, {3, 7, 5}, {7, 3, 33}, {33, 17, 9}, {1, 33, 3}, {16, 1, 7}};

}  // namespace

TEST_CASE("gemm: all transpose combinations, packed", "[gemm]") {
  uint32_t seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const Shape& s : kShapes) {
        GemmDesc d;
        d.trans_a = ta;
        d.trans_b = tb;
        d.m = s.m;
        d.n = s.n;
        d.k = s.k;
        check_gemm(d, seed++);
      }
}

TEST_CASE("gemm: alpha and beta", "[gemm]") {
  uint32_t seed = 100;
  const float ab[][2] = {{0.5f, 0.0f}, {1.0f, 1.0f}, {-1.25f, 0.75f}, {2.0f, -1.5f}, {0.0f, 0.5f}};
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const auto& p : ab) {
        GemmDesc d;
        d.trans_a = ta;
        d.trans_b = tb;
        d.m = 5;
        d.n = 7;
        d.k = 3;
        d.alpha = p[0];
        d.beta = p[1];
        check_gemm(d, seed++);
      }
}

TEST_CASE("gemm: beta = 0 ignores the previous contents of C", "[gemm]") {
  GemmDesc d;
  d.m = 3;
  d.n = 4;
  d.k = 5;
  Rand r(7);
  const fvec a = r.uniform(d.m * d.k), b = r.uniform(d.k * d.n);
  fvec c(static_cast<std::size_t>(d.m * d.n), 1e30f);
  fvec zero(c.size(), 0.0f);
  const dvec want = gemm_ref(d, a, b, zero);
  be().gemm(d, a.data(), b.data(), c.data());
  CHECK_ALLCLOSE(c, want, 1e-5, 1e-5);
}

TEST_CASE("gemm: leading dimensions larger than packed", "[gemm]") {
  uint32_t seed = 200;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const Shape& s : {Shape{3, 7, 5}, Shape{7, 3, 33}, Shape{1, 1, 1}, Shape{4, 9, 2}}) {
        GemmDesc d;
        d.trans_a = ta;
        d.trans_b = tb;
        d.m = s.m;
        d.n = s.n;
        d.k = s.k;
        d.lda = (ta ? s.m : s.k) + 3;
        d.ldb = (tb ? s.k : s.n) + 2;
        d.ldc = s.n + 5;
        d.alpha = 0.75f;
        d.beta = 0.5f;
        check_gemm(d, seed++);  // padding of C must be left untouched
      }
}

TEST_CASE("gemm: strided batched", "[gemm]") {
  uint32_t seed = 300;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const Shape& s : {Shape{3, 7, 5}, Shape{1, 4, 3}, Shape{7, 7, 7}}) {
        GemmDesc d;
        d.trans_a = ta;
        d.trans_b = tb;
        d.m = s.m;
        d.n = s.n;
        d.k = s.k;
        d.batch = 3;
        d.stride_a = s.m * s.k;  // packed batches
        d.stride_b = s.k * s.n;
        d.stride_c = s.m * s.n;
        check_gemm(d, seed++);
        // Gapped batches, padded rows and alpha/beta together.
        d.lda = (ta ? s.m : s.k) + 1;
        d.ldb = (tb ? s.k : s.n) + 2;
        d.ldc = s.n + 3;
        d.stride_a = rows_a(d) * d.lda + 5;
        d.stride_b = rows_b(d) * d.ldb + 2;
        d.stride_c = s.m * d.ldc + 4;
        d.batch = 4;
        d.alpha = -0.5f;
        d.beta = 1.0f;
        check_gemm(d, seed++);
      }
}

TEST_CASE("gemm: batch stride 0 broadcasts an operand", "[gemm]") {
  uint32_t seed = 400;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      GemmDesc d;
      d.trans_a = ta;
      d.trans_b = tb;
      d.m = 5;
      d.n = 3;
      d.k = 7;
      d.batch = 3;
      d.stride_c = d.m * d.n;
      // Shared B (a weight applied to every batch entry).
      d.stride_a = d.m * d.k;
      d.stride_b = 0;
      check_gemm(d, seed++);
      // Shared A.
      d.stride_a = 0;
      d.stride_b = d.k * d.n;
      check_gemm(d, seed++);
    }
}

TEST_CASE("gemm: attention reads Q, K, V out of an interleaved QKV buffer", "[gemm]") {
  // QKV activation [s, heads, 3, dh] (Megatron's [s, b, a, 3, dh] with b*a = heads): the
  // query row of position i, head h starts at ((i * heads + h) * 3 + 0) * dh, keys at + dh,
  // values at + 2 dh. Row stride heads * 3 * dh, head (batch) stride 3 * dh.
  for (int64_t heads : {1, 2, 3}) {
    for (int64_t dh : {1, 3, 4}) {
      const int64_t s = 5;
      const int64_t row = heads * 3 * dh;
      Rand r(static_cast<uint32_t>(500 + heads * 10 + dh));
      const fvec qkv = r.uniform(s * row);
      const dvec dq = to_d(qkv);
      INFO("heads " << heads << " dh " << dh);

      // scores[h] = scale * Q_h K_h^T, [heads, s, s] packed.
      GemmDesc d;
      d.trans_b = true;
      d.m = s;
      d.n = s;
      d.k = dh;
      d.alpha = 0.5f;
      d.lda = row;
      d.ldb = row;
      d.batch = heads;
      d.stride_a = 3 * dh;
      d.stride_b = 3 * dh;
      d.stride_c = s * s;
      fvec scores(static_cast<std::size_t>(heads * s * s), -7.0f);
      be().gemm(d, qkv.data(), qkv.data() + dh, scores.data());
      dvec want(scores.size());
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < s; ++i)
          for (int64_t j = 0; j < s; ++j) {
            double acc = 0.0;
            for (int64_t e = 0; e < dh; ++e)
              acc += dq[static_cast<std::size_t>(((i * heads + h) * 3 + 0) * dh + e)] *
                     dq[static_cast<std::size_t>(((j * heads + h) * 3 + 1) * dh + e)];
            want[static_cast<std::size_t>((h * s + i) * s + j)] = 0.5 * acc;
          }
      CHECK_ALLCLOSE(scores, want, 1e-5, 1e-5);

      // context[i, h, :] = P_h V_h written straight into [s, heads, dh] (ldc = heads * dh,
      // batch stride dh).
      const fvec probs = r.uniform(heads * s * s, 0.0f, 1.0f);
      GemmDesc d2;
      d2.m = s;
      d2.n = dh;
      d2.k = s;
      d2.ldb = row;
      d2.ldc = heads * dh;
      d2.batch = heads;
      d2.stride_a = s * s;
      d2.stride_b = 3 * dh;
      d2.stride_c = dh;
      fvec ctx(static_cast<std::size_t>(s * heads * dh), -7.0f);
      be().gemm(d2, probs.data(), qkv.data() + 2 * dh, ctx.data());
      dvec want2(ctx.size());
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < s; ++i)
          for (int64_t e = 0; e < dh; ++e) {
            double acc = 0.0;
            for (int64_t j = 0; j < s; ++j)
              acc += static_cast<double>(probs[static_cast<std::size_t>((h * s + i) * s + j)]) *
                     dq[static_cast<std::size_t>(((j * heads + h) * 3 + 2) * dh + e)];
            want2[static_cast<std::size_t>((i * heads + h) * dh + e)] = acc;
          }
      CHECK_ALLCLOSE(ctx, want2, 1e-5, 1e-5);
    }
  }
}

TEST_CASE("gemm: k = 0 leaves beta * C", "[gemm]") {
  GemmDesc d;
  d.m = 3;
  d.n = 4;
  d.k = 0;
  d.lda = 1;
  d.ldb = 4;
  d.beta = 0.5f;
  fvec a(1, 1.0f), b(4, 1.0f);
  fvec c = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  dvec want;
  for (float x : c) want.push_back(0.5 * x);
  be().gemm(d, a.data(), b.data(), c.data());
  CHECK_ALLCLOSE(c, want, 0.0, 0.0);
}

// ---- backward: the linear layer's dgrad and wgrad are gemms with transposes ----------------

TEST_CASE("gemm backward: Y = X W^T, dX = dY W and dW = dY^T X match finite differences",
          "[gemm][backward]") {
  uint32_t seed = 600;
  for (const Shape& s : {Shape{3, 4, 5}, Shape{1, 3, 7}, Shape{7, 1, 3}, Shape{4, 7, 1}}) {
    const int64_t m = s.m, n = s.n, k = s.k;  // X [m, k], W [n, k], Y [m, n]
    Rand r(seed++);
    const fvec x = r.uniform(m * k), w = r.uniform(n * k), g = r.uniform(m * n);
    const dvec dx_ = to_d(x), dw_ = to_d(w), dg = to_d(g);
    auto fwd = [&](const dvec& X, const dvec& W) {
      dvec y(static_cast<std::size_t>(m * n), 0.0);
      ref_gemm1(false, true, m, n, k, 1.0, X.data(), k, W.data(), k, 0.0, y.data(), n);
      return dot(dg, y);
    };
    const dvec want_dx = fd_grad([&](const dvec& X) { return fwd(X, dw_); }, dx_);
    const dvec want_dw = fd_grad([&](const dvec& W) { return fwd(dx_, W); }, dw_);
    INFO("m " << m << " n " << n << " k " << k);

    // Forward itself through the kernel.
    GemmDesc f;
    f.trans_b = true;
    f.m = m;
    f.n = n;
    f.k = k;
    fvec y(static_cast<std::size_t>(m * n));
    be().gemm(f, x.data(), w.data(), y.data());
    dvec want_y(y.size(), 0.0);
    ref_gemm1(false, true, m, n, k, 1.0, dx_.data(), k, dw_.data(), k, 0.0, want_y.data(), n);
    CHECK_ALLCLOSE(y, want_y, 1e-5, 1e-5);

    // dgrad: dX [m, k] = G [m, n] W [n, k].
    GemmDesc dg_desc;
    dg_desc.m = m;
    dg_desc.n = k;
    dg_desc.k = n;
    fvec dx(static_cast<std::size_t>(m * k), 99.0f);
    be().gemm(dg_desc, g.data(), w.data(), dx.data());
    CHECK_ALLCLOSE(dx, want_dx, kFdAtol, kFdRtol);

    // wgrad: dW [n, k] = G^T [n, m] X [m, k].
    GemmDesc wg;
    wg.trans_a = true;
    wg.m = n;
    wg.n = k;
    wg.k = m;
    fvec dw(static_cast<std::size_t>(n * k), 99.0f);
    be().gemm(wg, g.data(), x.data(), dw.data());
    CHECK_ALLCLOSE(dw, want_dw, kFdAtol, kFdRtol);

    // wgrad accumulated over two microbatches with beta = 1.
    wg.beta = 1.0f;
    be().gemm(wg, g.data(), x.data(), dw.data());
    dvec twice(want_dw);
    for (double& v : twice) v *= 2.0;
    CHECK_ALLCLOSE(dw, twice, 2 * kFdAtol, kFdRtol);
  }
}

TEST_CASE("gemm backward: Y = X W, dX = dY W^T and dW = X^T dY match finite differences",
          "[gemm][backward]") {
  uint32_t seed = 700;
  for (const Shape& s : {Shape{3, 4, 5}, Shape{5, 2, 1}, Shape{1, 6, 3}}) {
    const int64_t m = s.m, n = s.n, k = s.k;  // X [m, k], W [k, n], Y [m, n]
    Rand r(seed++);
    const fvec x = r.uniform(m * k), w = r.uniform(k * n), g = r.uniform(m * n);
    const dvec dx_ = to_d(x), dw_ = to_d(w), dg = to_d(g);
    auto fwd = [&](const dvec& X, const dvec& W) {
      dvec y(static_cast<std::size_t>(m * n), 0.0);
      ref_gemm1(false, false, m, n, k, 1.0, X.data(), k, W.data(), n, 0.0, y.data(), n);
      return dot(dg, y);
    };
    const dvec want_dx = fd_grad([&](const dvec& X) { return fwd(X, dw_); }, dx_);
    const dvec want_dw = fd_grad([&](const dvec& W) { return fwd(dx_, W); }, dw_);
    INFO("m " << m << " n " << n << " k " << k);

    GemmDesc dgd;  // dX [m, k] = G [m, n] W^T
    dgd.trans_b = true;
    dgd.m = m;
    dgd.n = k;
    dgd.k = n;
    fvec dx(static_cast<std::size_t>(m * k));
    be().gemm(dgd, g.data(), w.data(), dx.data());
    CHECK_ALLCLOSE(dx, want_dx, kFdAtol, kFdRtol);

    GemmDesc wg;  // dW [k, n] = X^T G
    wg.trans_a = true;
    wg.m = k;
    wg.n = n;
    wg.k = m;
    fvec dw(static_cast<std::size_t>(k * n));
    be().gemm(wg, x.data(), g.data(), dw.data());
    CHECK_ALLCLOSE(dw, want_dw, kFdAtol, kFdRtol);
  }
}

TEST_CASE("weight-gradient GEMMs split over the threads by rows give the one-thread bits",
          "[gemm]") {
  // Aᵀ B with a short k and many rows runs as one single-threaded call per thread on its rows
  // of C (kernels/cpu/gemm.cpp); every element must still be the same dot product. Odd m, a
  // padded ldc and accumulation into C (beta = 1, as gradients accumulate).
  for (int64_t m : {int64_t{512}, int64_t{1037}}) {
    const int64_t n = 45, k = 64, ldc = 50;
    Rand r(static_cast<uint32_t>(m));
    const fvec a = r.uniform(k * m), b = r.uniform(k * n), c0 = r.uniform(m * ldc);
    ptdp::GemmDesc d;
    d.trans_a = true;
    d.m = m;
    d.n = n;
    d.k = k;
    d.ldc = ldc;
    d.beta = 1.0f;
    fvec c[3] = {c0, c0, c0};
    for (int threads : {1, 2, 3}) {
      with_threads(threads, [&] { be().gemm(d, a.data(), b.data(), c[threads - 1].data()); });
    }
    INFO("m " << m);
    CHECK_BITEQUAL(c[1], c[0]);
    CHECK_BITEQUAL(c[2], c[0]);
    dvec want = to_d(c0);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          acc += static_cast<double>(a[static_cast<std::size_t>(p * m + i)]) * b[static_cast<std::size_t>(p * n + j)];
        }
        want[static_cast<std::size_t>(i * ldc + j)] += acc;
      }
    }
    CHECK_ALLCLOSE(c[1], want, 1e-5, 1e-5);
  }
}
