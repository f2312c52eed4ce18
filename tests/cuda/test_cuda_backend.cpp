// The CUDA backend against the CPU reference (cpu_backend()) on random inputs: every op at a few
// shapes, including odd sizes, broadcast batch strides, causal softmax with sq != sk, and
// embedding ids and cross-entropy targets outside this rank's vocabulary slice. Tolerances per
// op: bit-exact where the CUDA kernels promise it (dropout masks, casts, fills and copies,
// embedding backward), ~1e-5 relative for elementwise math with device transcendentals,
// ~1e-4 for GEMMs and reductions. Also the caching allocator and its out-of-memory error.
//
// Every test case exits with the skip code 77 when there is no CUDA device.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_probe.h"
#include "kernels/error.h"
#include "kernels/half.h"

namespace {

using ptdp::Backend;
using ptdp::DType;
using ptdp::GemmDesc;

// Exit with ctest's SKIP_RETURN_CODE so a machine without a GPU reports "skipped", not "passed".
void require_gpu() {
  if (ptdp::cuda::device_count() == 0) {
    WARN("no CUDA device: skipping");
    std::exit(77);
  }
}

Backend& gpu() { return ptdp::cuda::backend(0); }
Backend& cpu() { return ptdp::cpu_backend(); }

/// A buffer of n T's in device 0's memory from the caching allocator.
template <typename T>
class Dev {
 public:
  explicit Dev(std::size_t n) : n_(n), p_(static_cast<T*>(ptdp::cuda::device_alloc(0, bytes()))) {}
  explicit Dev(const std::vector<T>& host) : Dev(host.size()) { upload(host); }
  ~Dev() { ptdp::cuda::device_free(0, p_, bytes()); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;

  T* get() const { return p_; }
  std::size_t bytes() const { return n_ * sizeof(T); }
  void upload(const std::vector<T>& host) { gpu().copy_from_host(p_, host.data(), bytes()); }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    gpu().copy_to_host(host.data(), p_, bytes());
    return host;
  }

 private:
  std::size_t n_;
  T* p_;
};

std::vector<float> random_floats(std::size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<int32_t> random_ints(std::size_t n, uint64_t seed, int32_t lo, int32_t hi) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

/// Every element within atol + rtol * |want| (equal values, infinities included, always pass).
void check_close(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                 double atol, const std::string& what) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0, worst = 0;
  double worst_excess = -1.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if (g == w || (std::isnan(g) && std::isnan(w))) continue;
    const double err = std::fabs(g - w), tol = atol + rtol * std::fabs(w);
    if (!(err <= tol)) {
      ++bad;
      if (!(err - tol <= worst_excess)) {
        worst_excess = err - tol;
        worst = i;
      }
    }
  }
  INFO(what << ": " << bad << " of " << got.size() << " elements differ; worst at " << worst
            << ": got " << (got.empty() ? 0.0f : got[worst]) << ", want "
            << (want.empty() ? 0.0f : want[worst]));
  CHECK(bad == 0);
}

/// Bit-for-bit equality of two buffers of T.
template <typename T>
void check_bits(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      if (bad++ == 0) first = i;
    }
  }
  INFO(what << ": " << bad << " of " << got.size() << " elements differ in their bits; first at "
            << first);
  CHECK(bad == 0);
}

// ---- GEMM ------------------------------------------------------------------------------------

// Elements a strided batch of [rows, ld] matrices spans.
std::size_t span(int64_t rows, int64_t ld, int64_t batch, int64_t stride) {
  return static_cast<std::size_t>((batch - 1) * stride + rows * ld);
}

void compare_gemm(const GemmDesc& d, uint64_t seed, const std::string& what) {
  const int64_t a_rows = d.trans_a ? d.k : d.m, a_cols = d.trans_a ? d.m : d.k;
  const int64_t b_rows = d.trans_b ? d.n : d.k, b_cols = d.trans_b ? d.k : d.n;
  const int64_t lda = d.lda ? d.lda : std::max<int64_t>(1, a_cols);
  const int64_t ldb = d.ldb ? d.ldb : std::max<int64_t>(1, b_cols);
  const int64_t ldc = d.ldc ? d.ldc : std::max<int64_t>(1, d.n);
  const auto a = random_floats(span(a_rows, lda, d.batch, d.stride_a), seed);
  const auto b = random_floats(span(b_rows, ldb, d.batch, d.stride_b), seed + 1);
  auto c = random_floats(span(d.m, ldc, d.batch, d.stride_c), seed + 2);
  Dev<float> da(a), db(b), dc(c);
  gpu().gemm(d, da.get(), db.get(), dc.get());
  cpu().gemm(d, a.data(), b.data(), c.data());
  check_close(dc.download(), c, 1e-4, 1e-4 * std::sqrt(static_cast<double>(d.k) + 1.0), what);
}

std::string describe(const GemmDesc& d) {
  std::ostringstream s;
  s << "gemm ta=" << d.trans_a << " tb=" << d.trans_b << " m=" << d.m << " n=" << d.n
    << " k=" << d.k << " lda=" << d.lda << " ldb=" << d.ldb << " ldc=" << d.ldc
    << " batch=" << d.batch << " strides=" << d.stride_a << "/" << d.stride_b << "/" << d.stride_c
    << " alpha=" << d.alpha << " beta=" << d.beta;
  return s.str();
}

}  // namespace

TEST_CASE("cuda gemm matches the CPU for every transpose, odd shapes and padded leading dims",
          "[gpu][cuda_backend][gemm]") {
  require_gpu();
  INFO(ptdp::cuda::device_description(0));
  const int64_t shapes[][3] = {{1, 1, 1}, {17, 33, 9}, {64, 48, 128}, {129, 67, 255}, {3, 200, 1}};
  uint64_t seed = 100;
  for (const auto& s : shapes) {
    for (int t = 0; t < 4; ++t) {
      for (int padded = 0; padded < 2; ++padded) {
        GemmDesc d;
        d.trans_a = (t & 1) != 0;
        d.trans_b = (t & 2) != 0;
        d.m = s[0];
        d.n = s[1];
        d.k = s[2];
        d.alpha = 0.75f;
        d.beta = padded ? 0.5f : 0.0f;
        if (padded) {
          d.lda = (d.trans_a ? d.m : d.k) + 3;
          d.ldb = (d.trans_b ? d.k : d.n) + 5;
          d.ldc = d.n + 7;
        }
        compare_gemm(d, seed++, describe(d));
      }
    }
  }
}

TEST_CASE("cuda gemm: strided batches, broadcast operands, attention layouts, k = 0",
          "[gpu][cuda_backend][gemm]") {
  require_gpu();
  uint64_t seed = 200;
  SECTION("strided batch with broadcast A or B") {
    for (int bcast = 0; bcast < 3; ++bcast) {
      GemmDesc d;
      d.m = 13;
      d.n = 21;
      d.k = 11;
      d.batch = 5;
      d.beta = 1.0f;
      d.stride_a = bcast == 1 ? 0 : d.m * d.k + 2;
      d.stride_b = bcast == 2 ? 0 : d.k * d.n + 1;
      d.stride_c = d.m * d.n + 3;
      compare_gemm(d, seed++, describe(d));
      d.trans_a = d.trans_b = true;
      compare_gemm(d, seed++, describe(d));
    }
  }
  SECTION("attention scores and context read straight from a [s, b*a, 3, dh] QKV tensor") {
    // dh = 5 puts K and V at 20-byte offsets: the pointers are only 4-byte aligned.
    const int64_t s = 19, ba = 6, dh = 5;
    const int64_t ld = ba * 3 * dh;
    const auto qkv = random_floats(static_cast<std::size_t>(s * ld), seed++);
    Dev<float> dqkv(qkv);
    // scores[b] = Q[b] K[b]^T: [s, s] per (batch, head).
    GemmDesc sc;
    sc.trans_b = true;
    sc.m = s;
    sc.n = s;
    sc.k = dh;
    sc.alpha = 0.125f;
    sc.lda = ld;
    sc.ldb = ld;
    sc.batch = ba;
    sc.stride_a = 3 * dh;
    sc.stride_b = 3 * dh;
    sc.stride_c = s * s;
    std::vector<float> scores(static_cast<std::size_t>(ba * s * s), 0.0f);
    Dev<float> dscores(scores);
    gpu().gemm(sc, dqkv.get(), dqkv.get() + dh, dscores.get());
    cpu().gemm(sc, qkv.data(), qkv.data() + dh, scores.data());
    check_close(dscores.download(), scores, 1e-4, 1e-5, describe(sc));
    // context[b] = P[b] V[b], written into a [s, b*a, dh] tensor with ldc = ba * dh.
    GemmDesc cx;
    cx.m = s;
    cx.n = dh;
    cx.k = s;
    cx.ldb = ld;
    cx.ldc = ba * dh;
    cx.batch = ba;
    cx.stride_a = s * s;
    cx.stride_b = 3 * dh;
    cx.stride_c = dh;
    std::vector<float> ctx(static_cast<std::size_t>(s * ba * dh), 0.0f);
    Dev<float> dctx(ctx);
    gpu().gemm(cx, dscores.get(), dqkv.get() + 2 * dh, dctx.get());
    cpu().gemm(cx, scores.data(), qkv.data() + 2 * dh, ctx.data());
    check_close(dctx.download(), ctx, 1e-4, 1e-5, describe(cx));
  }
  SECTION("k = 0 scales C by beta") {
    for (const float beta : {0.0f, 0.5f}) {
      GemmDesc d;
      d.m = 7;
      d.n = 9;
      d.k = 0;
      d.beta = beta;
      d.batch = 2;
      d.stride_c = 70;
      d.ldc = 10;
      compare_gemm(d, seed++, describe(d));
    }
  }
}

TEST_CASE("cuda bias add and bias grad match the CPU", "[gpu][cuda_backend][bias]") {
  require_gpu();
  const int64_t shapes[][2] = {{1, 1}, {37, 45}, {1000, 768}, {3, 1025}};
  uint64_t seed = 300;
  for (const auto& s : shapes) {
    const int64_t rows = s[0], cols = s[1];
    INFO("rows=" << rows << " cols=" << cols);
    auto y = random_floats(static_cast<std::size_t>(rows * cols), seed++);
    const auto bias = random_floats(static_cast<std::size_t>(cols), seed++);
    Dev<float> dy(y), dbias(bias);
    gpu().bias_add(dy.get(), dbias.get(), rows, cols);
    cpu().bias_add(y.data(), bias.data(), rows, cols);
    check_bits(dy.download(), y, "bias_add");
    for (const bool acc : {false, true}) {
      auto g = random_floats(static_cast<std::size_t>(cols), seed++);
      Dev<float> dg(g);
      gpu().bias_grad(dy.get(), dg.get(), rows, cols, acc);
      cpu().bias_grad(y.data(), g.data(), rows, cols, acc);
      check_close(dg.download(), g, 1e-5, 1e-6, acc ? "bias_grad accumulate" : "bias_grad");
    }
  }
}

TEST_CASE("cuda gelu forward and backward match the CPU", "[gpu][cuda_backend][gelu]") {
  require_gpu();
  for (const int64_t n : {1, 1001, 1 << 18}) {
    INFO("n=" << n);
    const auto x = random_floats(static_cast<std::size_t>(n), 400 + n, -6.0f, 6.0f);
    const auto dy = random_floats(static_cast<std::size_t>(n), 401 + n);
    Dev<float> dx_in(x), ddy(dy), dout(static_cast<std::size_t>(n));
    std::vector<float> y(x.size()), dx(x.size());
    gpu().gelu_forward(dx_in.get(), dout.get(), n);
    cpu().gelu_forward(x.data(), y.data(), n);
    check_close(dout.download(), y, 1e-5, 1e-6, "gelu_forward");
    gpu().gelu_backward(dx_in.get(), ddy.get(), ddy.get(), n);  // dx aliases dy
    cpu().gelu_backward(x.data(), dy.data(), dx.data(), n);
    check_close(ddy.download(), dx, 1e-5, 1e-6, "gelu_backward");
    gpu().gelu_forward(dx_in.get(), dx_in.get(), n);  // in place
    check_close(dx_in.download(), y, 1e-5, 1e-6, "gelu_forward in place");
  }
}

TEST_CASE("cuda layernorm forward and backward match the CPU", "[gpu][cuda_backend][layernorm]") {
  require_gpu();
  const int64_t shapes[][2] = {{1, 1}, {5, 37}, {65, 768}, {3, 1000}, {2, 4099}};
  uint64_t seed = 500;
  for (const auto& s : shapes) {
    const int64_t rows = s[0], cols = s[1];
    INFO("rows=" << rows << " cols=" << cols);
    const auto n = static_cast<std::size_t>(rows * cols);
    auto x = random_floats(n, seed++, -2.0f, 3.0f);
    const auto gamma = random_floats(static_cast<std::size_t>(cols), seed++, 0.5f, 1.5f);
    const auto beta = random_floats(static_cast<std::size_t>(cols), seed++);
    const auto dy = random_floats(n, seed++);
    Dev<float> dx_in(x), dgamma_in(gamma), dbeta_in(beta), ddy(dy), dyout(n), dmean(rows),
        drstd(rows), ddx(n);
    std::vector<float> y(n), mean(rows), rstd(rows), dx(n);
    gpu().layernorm_forward(dx_in.get(), dgamma_in.get(), dbeta_in.get(), dyout.get(), dmean.get(),
                            drstd.get(), rows, cols, 1e-5f);
    cpu().layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(),
                            rows, cols, 1e-5f);
    check_close(dyout.download(), y, 1e-5, 1e-5, "layernorm y");
    check_close(dmean.download(), mean, 1e-5, 1e-6, "layernorm mean");
    check_close(drstd.download(), rstd, 1e-5, 1e-6, "layernorm rstd");
    for (const bool acc : {false, true}) {
      auto dg = random_floats(static_cast<std::size_t>(cols), seed++);
      auto db = random_floats(static_cast<std::size_t>(cols), seed++);
      Dev<float> ddg(dg), ddb(db);
      // The CPU's saved statistics on both sides, so only the backward kernels are compared.
      dmean.upload(mean);
      drstd.upload(rstd);
      gpu().layernorm_backward(dx_in.get(), dgamma_in.get(), dmean.get(), drstd.get(), ddy.get(),
                               ddx.get(), ddg.get(), ddb.get(), rows, cols, acc);
      cpu().layernorm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(),
                               dx.data(), dg.data(), db.data(), rows, cols, acc);
      check_close(ddx.download(), dx, 1e-4, 1e-5, "layernorm dx");
      check_close(ddg.download(), dg, 1e-4, 1e-5, "layernorm dgamma");
      check_close(ddb.download(), db, 1e-4, 1e-5, "layernorm dbeta");
    }
  }
}

TEST_CASE("cuda softmax forward and backward match the CPU, causal with sq != sk",
          "[gpu][cuda_backend][softmax]") {
  require_gpu();
  struct Case {
    int64_t batch, sq, sk;
    bool causal;
  };
  const Case cases[] = {{1, 1, 1, false},   {3, 5, 9, true},      {2, 7, 7, true},
                        {4, 33, 65, false}, {2, 128, 1029, true}, {1, 3, 2000, false}};
  uint64_t seed = 600;
  for (const auto& c : cases) {
    INFO("batch=" << c.batch << " sq=" << c.sq << " sk=" << c.sk << " causal=" << c.causal);
    const auto n = static_cast<std::size_t>(c.batch * c.sq * c.sk);
    const float scale = 0.3f;
    const auto x = random_floats(n, seed++, -4.0f, 4.0f);
    std::vector<float> y(n);
    Dev<float> dx_in(x), dyout(n);
    gpu().softmax_forward(dx_in.get(), dyout.get(), c.batch, c.sq, c.sk, scale, c.causal);
    cpu().softmax_forward(x.data(), y.data(), c.batch, c.sq, c.sk, scale, c.causal);
    const auto got = dyout.download();
    check_close(got, y, 1e-5, 1e-7, "softmax_forward");
    // Masked entries are exactly zero.
    std::size_t nonzero_masked = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (y[i] == 0.0f && got[i] != 0.0f) ++nonzero_masked;
    }
    CHECK(nonzero_masked == 0);
    gpu().softmax_forward(dx_in.get(), dx_in.get(), c.batch, c.sq, c.sk, scale, c.causal);
    check_close(dx_in.download(), y, 1e-5, 1e-7, "softmax_forward in place");
    const auto dy = random_floats(n, seed++);
    std::vector<float> dx(n);
    Dev<float> dyin(y), ddy(dy);
    gpu().softmax_backward(dyin.get(), ddy.get(), ddy.get(), c.batch, c.sq, c.sk, scale);
    cpu().softmax_backward(y.data(), dy.data(), dx.data(), c.batch, c.sq, c.sk, scale);
    check_close(ddy.download(), dx, 1e-5, 1e-6, "softmax_backward (dx aliases dy)");
  }
}

TEST_CASE("cuda dropout draws exactly the CPU's masks for every block layout",
          "[gpu][cuda_backend][dropout]") {
  require_gpu();
  struct Layout {
    int64_t shape[3], global[3], offset[3];
  };
  const Layout layouts[] = {
      {{1, 1, 1001}, {1, 1, 1001}, {0, 0, 0}},    // a flat tensor
      {{1, 1, 999}, {1, 1, 5000}, {0, 0, 1003}},  // a flat slice starting mid Philox block
      {{3, 2, 37}, {8, 5, 101}, {2, 1, 13}},      // sequence, head and feature splits at once
      {{16, 4, 64}, {32, 8, 64}, {16, 4, 0}},     // [s, b, h] with sequence parallelism
      {{5, 3, 1}, {7, 9, 3}, {1, 2, 2}},          // rows of one element
  };
  const ptdp::PhiloxStream rng{0x5eed5eed12345678ull, 0xabcdef0123456789ull};
  uint64_t seed = 700;
  for (const auto& l : layouts) {
    for (const float p : {0.0f, 0.1f, 0.5f, 1.0f}) {
      ptdp::DropoutDesc d;
      d.p = p;
      d.rng = rng;
      for (int k = 0; k < 3; ++k) {
        d.block.shape[k] = l.shape[k];
        d.block.global_shape[k] = l.global[k];
        d.block.offset[k] = l.offset[k];
      }
      INFO("p=" << p << " shape=" << l.shape[0] << "x" << l.shape[1] << "x" << l.shape[2]
                << " offset=" << l.offset[0] << "," << l.offset[1] << "," << l.offset[2]);
      const auto n = static_cast<std::size_t>(d.block.numel());
      const auto x = random_floats(n, seed++);
      std::vector<float> y(n), dx(n);
      Dev<float> dxin(x), dyout(n);
      gpu().dropout_forward(dxin.get(), dyout.get(), d);
      cpu().dropout_forward(x.data(), y.data(), d);
      check_bits(dyout.download(), y, "dropout_forward");
      gpu().dropout_backward(dxin.get(), dxin.get(), d);  // in place
      cpu().dropout_backward(x.data(), dx.data(), d);
      check_bits(dxin.download(), dx, "dropout_backward");
    }
  }
}

TEST_CASE("cuda elementwise ops, fills and copies match the CPU",
          "[gpu][cuda_backend][elementwise]") {
  require_gpu();
  for (const int64_t n : {1, 4097, 1 << 20}) {
    INFO("n=" << n);
    const auto sn = static_cast<std::size_t>(n);
    const auto a = random_floats(sn, 800 + n), b = random_floats(sn, 801 + n);
    Dev<float> da(a), db(b), dy(sn);
    std::vector<float> y(sn);
    gpu().add(da.get(), db.get(), dy.get(), n);
    cpu().add(a.data(), b.data(), y.data(), n);
    check_bits(dy.download(), y, "add");
    gpu().axpy(-0.37f, da.get(), dy.get(), n);
    cpu().axpy(-0.37f, a.data(), y.data(), n);
    check_close(dy.download(), y, 1e-6, 1e-7, "axpy");
    gpu().scale(dy.get(), 1.7f, n);
    cpu().scale(y.data(), 1.7f, n);
    check_close(dy.download(), y, 1e-6, 1e-7, "scale");
    const double want = cpu().sum_squares(a.data(), n);
    const double got = gpu().sum_squares(da.get(), n);
    CHECK(std::fabs(got - want) <= 1e-12 * want);
  }
  SECTION("fill for every dtype") {
    const int64_t n = 1003;
    for (const DType t : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64}) {
      for (const double v : {0.0, -1.5, 3.14159, 70000.0}) {
        INFO("dtype=" << ptdp::dtype_name(t) << " value=" << v);
        const std::size_t bytes = static_cast<std::size_t>(n) * ptdp::dtype_size(t);
        std::vector<unsigned char> want(bytes, 0xab);
        Dev<unsigned char> dx(want);
        gpu().fill(dx.get(), t, v, n);
        cpu().fill(want.data(), t, v, n);
        check_bits(dx.download(), want, "fill");
      }
    }
  }
  SECTION("copy_2d and fill_2d with leading dimensions") {
    const int64_t rows = 37, cols = 29, ld_src = 41, ld_dst = 33;
    const auto src = random_floats(static_cast<std::size_t>(rows * ld_src), 850);
    auto dst = random_floats(static_cast<std::size_t>(rows * ld_dst), 851);
    Dev<float> dsrc(src), ddst(dst);
    gpu().copy_2d(ddst.get(), ld_dst, dsrc.get(), ld_src, rows, cols);
    cpu().copy_2d(dst.data(), ld_dst, src.data(), ld_src, rows, cols);
    check_bits(ddst.download(), dst, "copy_2d");
    const float ninf = -std::numeric_limits<float>::infinity();
    gpu().fill_2d(ddst.get() + 3, ld_dst, rows - 2, cols - 5, ninf);
    cpu().fill_2d(dst.data() + 3, ld_dst, rows - 2, cols - 5, ninf);
    check_bits(ddst.download(), dst, "fill_2d");
  }
  SECTION("copy between overlapping ranges behaves like memmove") {
    const auto v = random_floats(1000, 860);
    Dev<float> dv(v);
    gpu().copy(dv.get() + 10, dv.get(), 900 * sizeof(float));
    auto want = v;
    std::memmove(want.data() + 10, want.data(), 900 * sizeof(float));
    check_bits(dv.download(), want, "overlapping copy");
  }
}

TEST_CASE("cuda casts are bit-identical to the CPU's, special values included",
          "[gpu][cuda_backend][cast]") {
  require_gpu();
  std::vector<float> f = random_floats(4096, 900, -1000.0f, 1000.0f);
  const float specials[] = {0.0f,
                            -0.0f,
                            1.0f,
                            -1.0f,
                            65504.0f,
                            65520.0f,
                            65519.99f,
                            1e30f,
                            -1e30f,
                            1e-8f,
                            -1e-8f,
                            6e-8f,
                            3e-8f,
                            2.9802322e-8f,
                            1e-40f,
                            1e-45f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::min(),
                            1.00390625f,
                            1.01171875f,
                            3.3895313892515355e38f};
  f.insert(f.end(), std::begin(specials), std::end(specials));
  for (uint32_t bits = 0x33000000u; bits < 0x33000000u + 64; ++bits)
    f.push_back(ptdp::f32_from_bits(bits));
  f.push_back(ptdp::f32_from_bits(0x7fc12345u));  // NaN with a payload
  const auto n = static_cast<int64_t>(f.size());
  const DType types[] = {DType::F32, DType::BF16, DType::F16};
  // Source data in every type: the f32 values, and their CPU conversions.
  std::vector<std::vector<unsigned char>> host(3);
  for (int s = 0; s < 3; ++s) {
    host[s].resize(static_cast<std::size_t>(n) * ptdp::dtype_size(types[s]));
    cpu().cast(f.data(), DType::F32, host[s].data(), types[s], n);
  }
  // Odd 16-bit patterns (NaNs, subnormals) as sources too.
  for (int s = 1; s < 3; ++s) {
    auto* h = reinterpret_cast<uint16_t*>(host[s].data());
    h[0] = 0x7c01;
    h[1] = 0xffff;
    h[2] = 0x0001;
    h[3] = 0x8201;
  }
  for (int s = 0; s < 3; ++s) {
    for (int t = 0; t < 3; ++t) {
      INFO(ptdp::dtype_name(types[s]) << " -> " << ptdp::dtype_name(types[t]));
      std::vector<unsigned char> want(static_cast<std::size_t>(n) * ptdp::dtype_size(types[t]));
      cpu().cast(host[s].data(), types[s], want.data(), types[t], n);
      Dev<unsigned char> dsrc(host[s]), ddst(want.size());
      gpu().cast(dsrc.get(), types[s], ddst.get(), types[t], n);
      check_bits(ddst.download(), want, "cast");
    }
  }
}

TEST_CASE("cuda embedding matches the CPU; the backward is deterministic and bit-exact",
          "[gpu][cuda_backend][embedding]") {
  require_gpu();
  struct Case {
    int64_t n, vocab_start, vocab_rows, h;
    int32_t id_max;
  };
  // Ids run beyond both ends of the slice [vocab_start, vocab_start + vocab_rows).
  const Case cases[] = {{1, 0, 1, 1, 0},
                        {50, 10, 20, 7, 40},
                        {2048, 100, 300, 64, 500},
                        {4096, 0, 50, 129, 49},
                        {300, 5, 3, 33, 9}};
  uint64_t seed = 1000;
  for (const auto& c : cases) {
    INFO("n=" << c.n << " vocab_start=" << c.vocab_start << " vocab_rows=" << c.vocab_rows
              << " h=" << c.h);
    const auto ids = random_ints(static_cast<std::size_t>(c.n), seed++, 0, c.id_max);
    const auto table = random_floats(static_cast<std::size_t>(c.vocab_rows * c.h), seed++);
    Dev<int32_t> dids(ids);
    Dev<float> dtable(table), dout(static_cast<std::size_t>(c.n * c.h));
    std::vector<float> out(static_cast<std::size_t>(c.n * c.h));
    gpu().embedding_forward(dids.get(), c.n, dtable.get(), c.vocab_start, c.vocab_rows, c.h,
                            dout.get());
    cpu().embedding_forward(ids.data(), c.n, table.data(), c.vocab_start, c.vocab_rows, c.h,
                            out.data());
    check_bits(dout.download(), out, "embedding_forward");
    const auto dy = random_floats(out.size(), seed++);
    auto grad = random_floats(table.size(), seed++);
    Dev<float> ddy(dy), dgrad(grad), dgrad2(grad);
    gpu().embedding_backward(dids.get(), c.n, ddy.get(), c.vocab_start, c.vocab_rows, c.h,
                             dgrad.get());
    gpu().embedding_backward(dids.get(), c.n, ddy.get(), c.vocab_start, c.vocab_rows, c.h,
                             dgrad2.get());
    cpu().embedding_backward(ids.data(), c.n, dy.data(), c.vocab_start, c.vocab_rows, c.h,
                             grad.data());
    const auto got = dgrad.download();
    check_bits(got, grad, "embedding_backward vs CPU");
    check_bits(dgrad2.download(), got, "embedding_backward run to run");
  }
}

TEST_CASE("cuda cross-entropy pieces match the CPU, targets outside the slice included",
          "[gpu][cuda_backend][cross_entropy]") {
  require_gpu();
  struct Case {
    int64_t rows, v, vocab_start;
  };
  const Case cases[] = {{1, 1, 0}, {7, 33, 0}, {64, 1000, 1000}, {5, 50257, 0}, {130, 257, 100}};
  uint64_t seed = 1100;
  for (const auto& c : cases) {
    INFO("rows=" << c.rows << " v=" << c.v << " vocab_start=" << c.vocab_start);
    const auto rs = static_cast<std::size_t>(c.rows);
    const auto logits = random_floats(rs * static_cast<std::size_t>(c.v), seed++, -8.0f, 8.0f);
    // Targets from the whole vocabulary of three such slices: some here, some elsewhere.
    const auto targets = random_ints(rs, seed++, 0, static_cast<int32_t>(c.vocab_start + 2 * c.v));
    const auto dloss = random_floats(rs, seed++);
    Dev<float> dlogits(logits), dmax(rs), dsum(rs), dtl(rs), dl(rs), ddloss(dloss);
    Dev<int32_t> dtargets(targets);
    std::vector<float> mx(rs), sum(rs), tl(rs), loss(rs), dx(logits.size());
    gpu().ce_row_max(dlogits.get(), c.rows, c.v, dmax.get());
    cpu().ce_row_max(logits.data(), c.rows, c.v, mx.data());
    check_bits(dmax.download(), mx, "ce_row_max");
    gpu().ce_sum_exp(dlogits.get(), dmax.get(), c.rows, c.v, dsum.get());
    cpu().ce_sum_exp(logits.data(), mx.data(), c.rows, c.v, sum.data());
    check_close(dsum.download(), sum, 1e-5, 0.0, "ce_sum_exp");
    dsum.upload(sum);
    gpu().ce_target_logit(dlogits.get(), dtargets.get(), c.rows, c.v, c.vocab_start, dtl.get());
    cpu().ce_target_logit(logits.data(), targets.data(), c.rows, c.v, c.vocab_start, tl.data());
    check_bits(dtl.download(), tl, "ce_target_logit");
    gpu().ce_loss(dmax.get(), dsum.get(), dtl.get(), c.rows, dl.get());
    cpu().ce_loss(mx.data(), sum.data(), tl.data(), c.rows, loss.data());
    check_close(dl.download(), loss, 1e-5, 1e-6, "ce_loss");
    gpu().ce_backward(dlogits.get(), dmax.get(), dsum.get(), dtargets.get(), ddloss.get(), c.rows,
                      c.v, c.vocab_start, dlogits.get());  // in place
    cpu().ce_backward(logits.data(), mx.data(), sum.data(), targets.data(), dloss.data(), c.rows,
                      c.v, c.vocab_start, dx.data());
    check_close(dlogits.download(), dx, 1e-5, 1e-7, "ce_backward");
  }
}

TEST_CASE("cuda AdamW and SGD steps match the CPU's", "[gpu][cuda_backend][optimizer]") {
  require_gpu();
  const int64_t n = 100003;
  const auto sn = static_cast<std::size_t>(n);
  SECTION("AdamW over several steps") {
    auto param = random_floats(sn, 1200), m = std::vector<float>(sn, 0.0f), v = m;
    Dev<float> dp(param), dm(m), dv(v), dg(sn);
    ptdp::AdamWParams p;
    p.lr = 3e-3f;
    p.weight_decay = 0.1f;
    for (int64_t step = 1; step <= 5; ++step) {
      const auto grad = random_floats(sn, 1200 + static_cast<uint64_t>(step));
      dg.upload(grad);
      p.step = step;
      gpu().adamw_step(dp.get(), dg.get(), dm.get(), dv.get(), n, p);
      cpu().adamw_step(param.data(), grad.data(), m.data(), v.data(), n, p);
    }
    check_close(dp.download(), param, 1e-6, 1e-7, "adamw param");
    check_close(dm.download(), m, 1e-6, 1e-7, "adamw m");
    check_close(dv.download(), v, 1e-6, 1e-9, "adamw v");
  }
  SECTION("SGD plain, with momentum and with Nesterov momentum") {
    for (int variant = 0; variant < 3; ++variant) {
      INFO("variant " << variant);
      auto param = random_floats(sn, 1300), buf = std::vector<float>(sn, 0.0f);
      Dev<float> dp(param), db(buf), dg(sn);
      ptdp::SgdParams p;
      p.lr = 0.05f;
      p.weight_decay = 0.01f;
      p.momentum = variant == 0 ? 0.0f : 0.9f;
      p.nesterov = variant == 2;
      for (int step = 0; step < 4; ++step) {
        const auto grad = random_floats(sn, 1300 + static_cast<uint64_t>(step) + 1);
        dg.upload(grad);
        p.first_step = step == 0;
        gpu().sgd_step(dp.get(), dg.get(), variant == 0 ? nullptr : db.get(), n, p);
        cpu().sgd_step(param.data(), grad.data(), variant == 0 ? nullptr : buf.data(), n, p);
      }
      check_close(dp.download(), param, 1e-6, 1e-7, "sgd param");
      if (variant > 0) check_close(db.download(), buf, 1e-6, 1e-7, "sgd momentum");
    }
  }
}

TEST_CASE("cuda backend validates sizes like the CPU backend", "[gpu][cuda_backend][errors]") {
  require_gpu();
  GemmDesc d;
  d.m = 4;
  d.n = 4;
  d.k = 4;
  d.lda = 2;  // smaller than k
  Dev<float> buf(64);
  try {
    gpu().gemm(d, buf.get(), buf.get(), buf.get());
    FAIL("gemm with lda < k did not throw");
  } catch (const ptdp::Error& e) {
    CHECK(e.code() == ptdp::ErrorCode::InvalidArgument);
    CHECK(std::string(e.what()).find("lda") != std::string::npos);
  }
  CHECK_THROWS_AS(gpu().softmax_forward(buf.get(), buf.get(), 1, 4, 2, 1.0f, true), ptdp::Error);
  CHECK_THROWS_AS(gpu().add(buf.get(), buf.get(), buf.get(), -1), ptdp::Error);
  CHECK_THROWS_AS(ptdp::cuda::backend(ptdp::cuda::device_count()), ptdp::Error);
}

TEST_CASE("the caching allocator reuses blocks: no cudaMalloc for a repeated pattern",
          "[gpu][cuda_backend][allocator]") {
  require_gpu();
  gpu().synchronize();  // the backend's own workspace is allocated before the counts start
  const std::size_t sizes[] = {1, 513, 4096, 100000, 3u << 20, 7777777, 64u << 20, 12345};
  const auto pattern = [&] {
    std::vector<void*> blocks;
    for (const std::size_t s : sizes) {
      void* p = ptdp::cuda::device_alloc(0, s);
      REQUIRE(p != nullptr);
      CHECK(reinterpret_cast<std::uintptr_t>(p) % 256 == 0);
      blocks.push_back(p);
    }
    // Touch the blocks so the pattern is real work on the stream.
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      gpu().fill(blocks[i], DType::F32, 1.0, static_cast<int64_t>(sizes[i] / 4));
    }
    for (std::size_t i = 0; i < blocks.size(); ++i) ptdp::cuda::device_free(0, blocks[i], sizes[i]);
  };
  const auto before = ptdp::cuda::allocator_stats(0);
  pattern();
  const auto first = ptdp::cuda::allocator_stats(0);
  CHECK(first.in_use == before.in_use);
  CHECK(first.cached >= before.cached);
  CHECK(first.peak_in_use >= before.in_use);
  pattern();
  const auto second = ptdp::cuda::allocator_stats(0);
  CHECK(second.cuda_mallocs == first.cuda_mallocs);
  CHECK(second.in_use == before.in_use);
  CHECK(ptdp::cuda::device_alloc(0, 0) == nullptr);
  ptdp::cuda::empty_cache(0);
  CHECK(ptdp::cuda::allocator_stats(0).cached == 0);
  gpu().synchronize();
}

TEST_CASE("an impossible allocation throws OutOfMemory naming the size",
          "[gpu][cuda_backend][allocator]") {
  require_gpu();
  const std::size_t pib = std::size_t{1} << 50;
  try {
    void* p = ptdp::cuda::device_alloc(0, pib);
    ptdp::cuda::device_free(0, p, pib);
    FAIL("a 1 PiB allocation succeeded");
  } catch (const ptdp::Error& e) {
    INFO(e.what());
    CHECK(e.code() == ptdp::ErrorCode::OutOfMemory);
    CHECK(std::string(e.what()).find(std::to_string(pib)) != std::string::npos);
  }
  // The device is still usable afterwards.
  Dev<float> ok(1024);
  gpu().fill(ok.get(), DType::F32, 2.0, 1024);
  CHECK(ok.download()[1023] == 2.0f);
}
