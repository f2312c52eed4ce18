// The CUDA backend against the CPU reference (cpu_backend()) on random inputs: every op at a few
// shapes and for every floating storage type (f32, bf16, f16), including odd sizes, broadcast
// batch strides, causal softmax with sq != sk, embedding ids and cross-entropy targets outside
// this rank's vocabulary slice, GEMM type combinations and epilogues (fused by cuBLASLt and
// through the fallback), the fused bias + dropout + residual, the one-pass cross-entropy and the
// fused attention; Llama's RMSNorm, SwiGLU and rotary embedding (grouped-query layouts, explicit
// positions, rot_dim < dh). Also the caching allocator and its out-of-memory error.
//
// Both backends get the same stored inputs (16-bit values are rounded once, on the host), so
// they differ only by their fp32 arithmetic and the final rounding. Tolerances: bit-exact where
// both compute the same fp32 value and round it once (dropout, bias add, add, casts, fills,
// copies, embeddings); for f32 results ~1e-5 relative for elementwise math with device
// transcendentals and ~1e-4 for GEMMs and reductions (1e-6 for RoPE, whose kernel repeats the
// CPU's roundings, and 1e-5 for RMSNorm, whose sums are in double on both); for 16-bit results
// about one unit in the last place (bf16 1e-2, f16 2e-3 relative) with an absolute floor scaled
// to the results.
//
// Every test case exits with the skip code 77 when there is no CUDA device.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/half.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_probe.h"
#include "kernels/validate.h"
#include "tests/cuda/device_buffer.h"

namespace {

using ptdp::Backend;
using ptdp::DType;
using ptdp::Epilogue;
using ptdp::GemmDesc;
using Bytes = std::vector<unsigned char>;

constexpr DType kFloatTypes[] = {DType::F32, DType::BF16, DType::F16};
constexpr float kInf = std::numeric_limits<float>::infinity();

using cuda_test::cpu;
using cuda_test::Dev;
using cuda_test::gpu;
using cuda_test::require_gpu;

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

// ---- storage types ---------------------------------------------------------------------------

/// The values rounded to floating type t (by the CPU backend's cast), as stored bytes.
Bytes to_storage(const std::vector<float>& v, DType t) {
  Bytes out(v.size() * ptdp::dtype_size(t));
  cpu().cast(v.data(), DType::F32, out.data(), t, static_cast<int64_t>(v.size()));
  return out;
}

/// The fp32 values of stored bytes of floating type t.
std::vector<float> from_storage(const Bytes& b, DType t) {
  std::vector<float> out(b.size() / ptdp::dtype_size(t));
  cpu().cast(b.data(), t, out.data(), DType::F32, static_cast<int64_t>(out.size()));
  return out;
}

/// Random values in [lo, hi) stored as type t.
Bytes random_stored(std::size_t n, DType t, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  return to_storage(random_floats(n, seed, lo, hi), t);
}

std::vector<float> download_f32(const Dev<unsigned char>& d, DType t) {
  return from_storage(d.download(), t);
}

std::string type_name(DType t) { return ptdp::dtype_name(t); }

// ---- comparisons -----------------------------------------------------------------------------

struct Tol {
  double rtol, atol;
};

/// The f32 tolerance of an op, or about one unit in the last place of a 16-bit result (bf16
/// 1e-2, f16 2e-3 relative; the absolute floor is that times `scale`, the results' magnitude).
Tol tol_for(DType t, Tol f32, double scale = 1.0) {
  if (t == DType::BF16) return {1e-2, 1e-2 * scale};
  if (t == DType::F16) return {2e-3, 2e-3 * scale};
  return f32;
}

double max_abs(const std::vector<float>& v) {
  double m = 0.0;
  for (const float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

/// cuda_test::check_close where a NaN the CPU produced may be matched by a NaN.
void check_close(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                 double atol, const std::string& what) {
  cuda_test::check_close(got, want, rtol, atol, what, true);
}

void check_close(const std::vector<float>& got, const std::vector<float>& want, Tol tol,
                 const std::string& what) {
  check_close(got, want, tol.rtol, tol.atol, what);
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

/// Bit-for-bit equality of stored elements of type t (reported by element, not by byte).
void check_stored_bits(const Bytes& got, const Bytes& want, DType t, const std::string& what) {
  REQUIRE(got.size() == want.size());
  const std::size_t e = ptdp::dtype_size(t);
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size() / e; ++i) {
    if (std::memcmp(&got[i * e], &want[i * e], e) != 0) {
      if (bad++ == 0) first = i;
    }
  }
  INFO(what << " (" << type_name(t) << "): " << bad << " of " << got.size() / e
            << " elements differ in their bits; first at " << first);
  CHECK(bad == 0);
}

// ---- GEMM ------------------------------------------------------------------------------------

// Elements a strided batch of [rows, ld] matrices spans.
std::size_t span(int64_t rows, int64_t ld, int64_t batch, int64_t stride) {
  return static_cast<std::size_t>((batch - 1) * stride + rows * ld);
}

using ptdp::kcheck::epilogue_name;

std::string describe(const GemmDesc& d) {
  std::ostringstream s;
  s << "gemm " << type_name(d.a_type) << "/" << type_name(d.b_type) << "->" << type_name(d.c_type)
    << " epilogue=" << epilogue_name(d.epilogue) << " ta=" << d.trans_a << " tb=" << d.trans_b
    << " m=" << d.m << " n=" << d.n << " k=" << d.k << " lda=" << d.lda << " ldb=" << d.ldb
    << " ldc=" << d.ldc << " batch=" << d.batch << " strides=" << d.stride_a << "/" << d.stride_b
    << "/" << d.stride_c << " alpha=" << d.alpha << " beta=" << d.beta;
  return s.str();
}

/// The storage type combinations a GEMM takes: A and B share a type, C is that type or f32.
struct GemmTypes {
  DType ab, c;
};
constexpr GemmTypes kGemmTypes[] = {{DType::F32, DType::F32},
                                    {DType::BF16, DType::BF16},
                                    {DType::F16, DType::F16},
                                    {DType::BF16, DType::F32},
                                    {DType::F16, DType::F32}};

GemmDesc with_types(GemmDesc d, GemmTypes t) {
  d.a_type = d.b_type = t.ab;
  d.c_type = t.c;
  return d;
}

/// Runs d on both backends from the same random A, B, C (and bias and aux for its epilogue) and
/// compares C (and the aux a BiasGelu writes). bias_offset shifts the bias pointer by that many
/// elements (a misaligned bias).
void compare_gemm(const GemmDesc& d, uint64_t seed, int64_t bias_offset = 0) {
  const std::string what = describe(d) + (bias_offset ? " (bias offset)" : "");
  const int64_t a_rows = d.trans_a ? d.k : d.m, a_cols = d.trans_a ? d.m : d.k;
  const int64_t b_rows = d.trans_b ? d.n : d.k, b_cols = d.trans_b ? d.k : d.n;
  const int64_t lda = d.lda ? d.lda : std::max<int64_t>(1, a_cols);
  const int64_t ldb = d.ldb ? d.ldb : std::max<int64_t>(1, b_cols);
  const int64_t ldc = d.ldc ? d.ldc : std::max<int64_t>(1, d.n);
  const bool has_bias = d.epilogue == Epilogue::Bias || d.epilogue == Epilogue::BiasGelu;
  const bool has_aux = d.epilogue == Epilogue::BiasGelu || d.epilogue == Epilogue::DGelu;
  const Bytes a = random_stored(span(a_rows, lda, d.batch, d.stride_a), d.a_type, seed);
  const Bytes b = random_stored(span(b_rows, ldb, d.batch, d.stride_b), d.b_type, seed + 1);
  Bytes c = random_stored(span(d.m, ldc, d.batch, d.stride_c), d.c_type, seed + 2);
  const Bytes bias =
      random_stored(static_cast<std::size_t>(d.n + bias_offset), d.c_type, seed + 3);
  // DGelu reads the saved GeLU inputs: values where gelu' varies.
  Bytes aux = random_stored(static_cast<std::size_t>(d.m * ldc), d.c_type, seed + 4, -3.0f, 3.0f);
  Dev<unsigned char> da(a), db(b), dc(c), dbias(bias), daux(aux);
  const std::size_t ce = ptdp::dtype_size(d.c_type);
  GemmDesc g = d;
  g.bias = has_bias ? dbias.get() + bias_offset * ce : nullptr;
  g.aux = has_aux ? daux.get() : nullptr;
  gpu().gemm(g, da.get(), db.get(), dc.get());
  GemmDesc h = d;
  h.bias = has_bias ? bias.data() + bias_offset * ce : nullptr;
  h.aux = has_aux ? aux.data() : nullptr;
  cpu().gemm(h, a.data(), b.data(), c.data());
  // Results are ~sqrt(k) / 3 in size; 16-bit ones differ by about one unit in the last place.
  const double mag = 0.25 * std::sqrt(static_cast<double>(d.k) + 1.0);
  const Tol tol = tol_for(d.c_type, {1e-4, 1e-4 * std::sqrt(static_cast<double>(d.k) + 1.0)}, mag);
  check_close(download_f32(dc, d.c_type), from_storage(c, d.c_type), tol, what + ": C");
  if (d.epilogue == Epilogue::BiasGelu) {
    check_close(download_f32(daux, d.c_type), from_storage(aux, d.c_type), tol, what + ": aux");
  }
}

}  // namespace

TEST_CASE("cuda gemm matches the CPU for every storage type, transpose, odd shape and padded ld",
          "[gpu][cuda_backend][gemm]") {
  require_gpu();
  INFO(ptdp::cuda::device_description(0));
  const int64_t shapes[][3] = {{1, 1, 1}, {17, 33, 9}, {64, 48, 128}, {129, 67, 255}, {3, 200, 1}};
  uint64_t seed = 100;
  for (const GemmTypes types : kGemmTypes) {
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
          compare_gemm(with_types(d, types), seed++);
        }
      }
    }
  }
}

TEST_CASE("cuda gemm: wgrad accumulation of 16-bit products into f32 with beta = 1",
          "[gpu][cuda_backend][gemm]") {
  require_gpu();
  // dW[out, in] += dY^T[out, N] X[N, in], as the linear layers' weight gradient does.
  uint64_t seed = 150;
  for (const DType ab : {DType::BF16, DType::F16}) {
    GemmDesc d;
    d.trans_a = true;
    d.m = 96;
    d.n = 72;
    d.k = 256;
    d.beta = 1.0f;
    d.a_type = d.b_type = ab;
    d.c_type = DType::F32;
    compare_gemm(d, seed++);
  }
}

TEST_CASE("cuda gemm: strided batches, broadcast operands, attention layouts, k = 0",
          "[gpu][cuda_backend][gemm]") {
  require_gpu();
  uint64_t seed = 200;
  SECTION("strided batch with broadcast A or B") {
    for (const GemmTypes types : kGemmTypes) {
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
        compare_gemm(with_types(d, types), seed++);
        d.trans_a = d.trans_b = true;
        compare_gemm(with_types(d, types), seed++);
      }
    }
  }
  SECTION("attention scores and context read straight from a [s, b*a, 3, dh] QKV tensor") {
    struct Case {
      DType t;
      int64_t dh;
    };
    // f32 with dh = 5 puts K and V at 20-byte offsets (4-byte aligned pointers); 16-bit types at
    // the head dims of real models and at 16-byte offsets.
    const Case cases[] = {{DType::F32, 5}, {DType::BF16, 8}, {DType::BF16, 64}, {DType::F16, 64}};
    for (const Case& c : cases) {
      const int64_t s = 19, ba = 6, dh = c.dh;
      const int64_t ld = ba * 3 * dh;
      const std::size_t e = ptdp::dtype_size(c.t);
      const Bytes qkv = random_stored(static_cast<std::size_t>(s * ld), c.t, seed++);
      Dev<unsigned char> dqkv(qkv);
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
      sc.a_type = sc.b_type = sc.c_type = c.t;
      Bytes scores = to_storage(std::vector<float>(static_cast<std::size_t>(ba * s * s)), c.t);
      Dev<unsigned char> dscores(scores);
      gpu().gemm(sc, dqkv.get(), dqkv.get() + dh * e, dscores.get());
      cpu().gemm(sc, qkv.data(), qkv.data() + dh * e, scores.data());
      const Tol tol = tol_for(c.t, {1e-4, 1e-5}, 0.1);
      check_close(download_f32(dscores, c.t), from_storage(scores, c.t), tol, describe(sc));
      // context[b] = P[b] V[b], written into a [s, b*a, dh] tensor with ldc = ba * dh. Both sides
      // multiply the same (CPU) scores.
      dscores.upload(scores);
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
      cx.a_type = cx.b_type = cx.c_type = c.t;
      Bytes ctx = to_storage(std::vector<float>(static_cast<std::size_t>(s * ba * dh)), c.t);
      Dev<unsigned char> dctx(ctx);
      gpu().gemm(cx, dscores.get(), dqkv.get() + 2 * dh * e, dctx.get());
      cpu().gemm(cx, scores.data(), qkv.data() + 2 * dh * e, ctx.data());
      check_close(download_f32(dctx, c.t), from_storage(ctx, c.t), tol_for(c.t, {1e-4, 1e-5}, 1.0),
                  describe(cx));
    }
  }
  SECTION("k = 0 scales C by beta, then applies the epilogue") {
    for (const GemmTypes types : kGemmTypes) {
      for (const float beta : {0.0f, 0.5f}) {
        GemmDesc d;
        d.m = 7;
        d.n = 9;
        d.k = 0;
        d.beta = beta;
        d.batch = 2;
        d.stride_c = 70;
        d.ldc = 10;
        compare_gemm(with_types(d, types), seed++);
        for (const Epilogue e : {Epilogue::Bias, Epilogue::BiasGelu, Epilogue::DGelu}) {
          GemmDesc one = d;
          one.batch = 1;
          one.stride_c = 0;
          one.epilogue = e;
          compare_gemm(with_types(one, types), seed++);
        }
      }
    }
  }
}

TEST_CASE("cuda gemm epilogues match the CPU for every storage type, fused and in the fallback",
          "[gpu][cuda_backend][gemm][epilogue]") {
  require_gpu();
  struct Shape {
    int64_t m, n, k, ldc, bias_offset;
    bool trans_a;
    float beta;
    const char* why;
  };
  const Shape shapes[] = {
      {64, 96, 80, 0, 0, false, 0.0f, "aligned: cuBLASLt's epilogue for 16-bit C"},
      {64, 96, 80, 104, 0, true, 0.5f, "padded ldc (a multiple of 8), beta != 0"},
      {33, 45, 17, 0, 0, false, 0.5f, "aux ld 45 is not a multiple of 8: fallback"},
      {64, 96, 80, 0, 1, false, 0.0f, "bias not 16-byte aligned: fallback"},
      {1, 8, 3, 0, 0, true, 0.0f, "one row"},
  };
  uint64_t seed = 250;
  for (const GemmTypes types : kGemmTypes) {
    for (const Epilogue e : {Epilogue::Bias, Epilogue::BiasGelu, Epilogue::DGelu}) {
      for (const Shape& s : shapes) {
        INFO(s.why);
        GemmDesc d;
        d.m = s.m;
        d.n = s.n;
        d.k = s.k;
        d.ldc = s.ldc;
        d.trans_a = s.trans_a;
        d.alpha = 0.5f;
        d.beta = s.beta;
        d.epilogue = e;
        const bool reads_bias = e != Epilogue::DGelu;
        if (s.bias_offset != 0 && !reads_bias) continue;
        compare_gemm(with_types(d, types), seed++, s.bias_offset);
        // The second call takes the cached plan (and its fallback decision).
        compare_gemm(with_types(d, types), seed++, s.bias_offset);
      }
    }
  }
}

TEST_CASE("cuda bias add and bias grad match the CPU for every storage type",
          "[gpu][cuda_backend][bias]") {
  require_gpu();
  const int64_t shapes[][2] = {{1, 1}, {37, 45}, {1000, 768}, {3, 1025}};
  uint64_t seed = 300;
  for (const DType t : kFloatTypes) {
    for (const auto& s : shapes) {
      const int64_t rows = s[0], cols = s[1];
      INFO(type_name(t) << " rows=" << rows << " cols=" << cols);
      Bytes y = random_stored(static_cast<std::size_t>(rows * cols), t, seed++);
      const Bytes bias = random_stored(static_cast<std::size_t>(cols), t, seed++);
      Dev<unsigned char> dy(y), dbias(bias);
      gpu().bias_add(dy.get(), dbias.get(), t, rows, cols);
      cpu().bias_add(y.data(), bias.data(), t, rows, cols);
      check_stored_bits(dy.download(), y, t, "bias_add");
      for (const bool acc : {false, true}) {
        auto g = random_floats(static_cast<std::size_t>(cols), seed++);
        Dev<float> dg(g);
        gpu().bias_grad(dy.get(), t, dg.get(), rows, cols, acc);
        cpu().bias_grad(y.data(), t, g.data(), rows, cols, acc);
        check_close(dg.download(), g, 1e-5, 1e-6, acc ? "bias_grad accumulate" : "bias_grad");
      }
    }
  }
}

TEST_CASE("cuda gelu forward and backward match the CPU for every storage type",
          "[gpu][cuda_backend][gelu]") {
  require_gpu();
  for (const DType t : kFloatTypes) {
    for (const int64_t n : {1, 1001, 1 << 18}) {
      INFO(type_name(t) << " n=" << n);
      const auto sn = static_cast<std::size_t>(n);
      const Bytes x = random_stored(sn, t, 400 + n, -6.0f, 6.0f);
      const Bytes dy = random_stored(sn, t, 401 + n);
      Bytes y(x.size()), dx(x.size());
      Dev<unsigned char> dx_in(x), ddy(dy), dout(x.size());
      const Tol tol = tol_for(t, {1e-5, 1e-6}, 1e-2);
      gpu().gelu_forward(dx_in.get(), dout.get(), t, n);
      cpu().gelu_forward(x.data(), y.data(), t, n);
      check_close(download_f32(dout, t), from_storage(y, t), tol, "gelu_forward");
      gpu().gelu_backward(dx_in.get(), ddy.get(), ddy.get(), t, n);  // dx aliases dy
      cpu().gelu_backward(x.data(), dy.data(), dx.data(), t, n);
      check_close(download_f32(ddy, t), from_storage(dx, t), tol, "gelu_backward");
      gpu().gelu_forward(dx_in.get(), dx_in.get(), t, n);  // in place
      check_close(download_f32(dx_in, t), from_storage(y, t), tol, "gelu_forward in place");
    }
  }
}

TEST_CASE("cuda layernorm forward and backward match the CPU for every storage type",
          "[gpu][cuda_backend][layernorm]") {
  require_gpu();
  const int64_t shapes[][2] = {{1, 1}, {5, 37}, {65, 768}, {3, 1000}, {2, 4099}};
  uint64_t seed = 500;
  for (const DType t : kFloatTypes) {
    for (const auto& s : shapes) {
      const int64_t rows = s[0], cols = s[1];
      INFO(type_name(t) << " rows=" << rows << " cols=" << cols);
      const auto n = static_cast<std::size_t>(rows * cols);
      const auto sr = static_cast<std::size_t>(rows), sc = static_cast<std::size_t>(cols);
      const Bytes x = random_stored(n, t, seed++, -2.0f, 3.0f);
      const Bytes gamma = random_stored(sc, t, seed++, 0.5f, 1.5f);
      const Bytes beta = random_stored(sc, t, seed++);
      const Bytes dy = random_stored(n, t, seed++);
      Dev<unsigned char> dx_in(x), dgamma_in(gamma), dbeta_in(beta), ddy(dy), dyout(x.size()),
          ddx(x.size());
      Dev<float> dmean(sr), drstd(sr);
      Bytes y(x.size()), dx(x.size());
      std::vector<float> mean(sr), rstd(sr);
      gpu().layernorm_forward(dx_in.get(), dgamma_in.get(), dbeta_in.get(), dyout.get(), t,
                              dmean.get(), drstd.get(), rows, cols, 1e-5f);
      cpu().layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), t, mean.data(),
                              rstd.data(), rows, cols, 1e-5f);
      check_close(download_f32(dyout, t), from_storage(y, t), tol_for(t, {1e-5, 1e-5}, 0.1),
                  "layernorm y");
      check_close(dmean.download(), mean, 1e-5, 1e-6, "layernorm mean");
      check_close(drstd.download(), rstd, 1e-5, 1e-6, "layernorm rstd");
      for (const bool acc : {false, true}) {
        auto dg = random_floats(sc, seed++);
        auto db = random_floats(sc, seed++);
        Dev<float> ddg(dg), ddb(db);
        // The CPU's saved statistics on both sides, so only the backward kernels are compared.
        dmean.upload(mean);
        drstd.upload(rstd);
        gpu().layernorm_backward(dx_in.get(), dgamma_in.get(), dmean.get(), drstd.get(),
                                 ddy.get(), ddx.get(), t, ddg.get(), ddb.get(), rows, cols, acc);
        cpu().layernorm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(),
                                 dx.data(), t, dg.data(), db.data(), rows, cols, acc);
        check_close(download_f32(ddx, t), from_storage(dx, t), tol_for(t, {1e-4, 1e-5}, 0.1),
                    "layernorm dx");
        check_close(ddg.download(), dg, 1e-4, 1e-5, "layernorm dgamma");
        check_close(ddb.download(), db, 1e-4, 1e-5, "layernorm dbeta");
      }
    }
  }
}

TEST_CASE("cuda rmsnorm forward and backward match the CPU for every storage type",
          "[gpu][cuda_backend][rmsnorm]") {
  require_gpu();
  // {700, 96} and {1025, 33}: several 256-row chunks of the dgamma reduction, the last partial;
  // {2, 4099}: a column tile cut short.
  const int64_t shapes[][2] = {{1, 1}, {5, 37}, {65, 768}, {3, 1000}, {2, 4099}, {700, 96},
                               {1025, 33}};
  uint64_t seed = 5200;
  for (const DType t : kFloatTypes) {
    for (const auto& s : shapes) {
      const int64_t rows = s[0], cols = s[1];
      INFO(type_name(t) << " rows=" << rows << " cols=" << cols);
      const auto n = static_cast<std::size_t>(rows * cols);
      const auto sr = static_cast<std::size_t>(rows), sc = static_cast<std::size_t>(cols);
      const Bytes x = random_stored(n, t, seed++, -2.0f, 3.0f);
      const Bytes gamma = random_stored(sc, t, seed++, 0.5f, 1.5f);
      const Bytes dy = random_stored(n, t, seed++);
      Dev<unsigned char> dx_in(x), dgamma_in(gamma), ddy(dy), dyout(x.size()), ddx(x.size());
      Dev<float> drstd(sr);
      Bytes y(x.size()), dx(x.size());
      std::vector<float> rstd(sr);
      gpu().rmsnorm_forward(dx_in.get(), dgamma_in.get(), dyout.get(), t, drstd.get(), rows, cols,
                            1e-5f);
      cpu().rmsnorm_forward(x.data(), gamma.data(), y.data(), t, rstd.data(), rows, cols, 1e-5f);
      check_close(download_f32(dyout, t), from_storage(y, t), tol_for(t, {1e-5, 1e-5}, 0.1),
                  "rmsnorm y");
      check_close(drstd.download(), rstd, 1e-6, 1e-7, "rmsnorm rstd");
      // The CPU's saved rstd on both sides, so only the backward kernels are compared.
      drstd.upload(rstd);
      for (const bool acc : {false, true}) {
        auto dg = random_floats(sc, seed++);
        Dev<float> ddg(dg);
        gpu().rmsnorm_backward(dx_in.get(), dgamma_in.get(), drstd.get(), ddy.get(), ddx.get(), t,
                               ddg.get(), rows, cols, acc);
        cpu().rmsnorm_backward(x.data(), gamma.data(), rstd.data(), dy.data(), dx.data(), t,
                               dg.data(), rows, cols, acc);
        check_close(download_f32(ddx, t), from_storage(dx, t), tol_for(t, {1e-5, 1e-6}, 0.1),
                    "rmsnorm dx");
        // Both sum in double; only the order differs.
        check_close(ddg.download(), dg, 1e-5, 1e-6, acc ? "rmsnorm dgamma accumulate"
                                                        : "rmsnorm dgamma");
      }
      // dx written over dy (allowed): dgamma is summed before dx is written. Twice, bit-equal
      // dgamma both times (deterministic).
      Dev<float> ddg1(sc), ddg2(sc);
      Dev<unsigned char> ddy_alias(dy);
      gpu().rmsnorm_backward(dx_in.get(), dgamma_in.get(), drstd.get(), ddy.get(), ddy.get(), t,
                             ddg1.get(), rows, cols, false);
      gpu().rmsnorm_backward(dx_in.get(), dgamma_in.get(), drstd.get(), ddy_alias.get(),
                             ddx.get(), t, ddg2.get(), rows, cols, false);
      check_close(download_f32(ddy, t), from_storage(dx, t), tol_for(t, {1e-5, 1e-6}, 0.1),
                  "rmsnorm dx over dy");
      check_bits(ddg1.download(), ddg2.download(), "rmsnorm dgamma with dx over dy");
    }
  }
  // No rows: dgamma is cleared, or kept when accumulating.
  const std::vector<float> before = random_floats(40, 5299);
  for (const bool acc : {false, true}) {
    Dev<float> ddg(before);
    gpu().rmsnorm_backward(nullptr, nullptr, nullptr, nullptr, nullptr, DType::BF16, ddg.get(), 0,
                           40, acc);
    check_bits(ddg.download(), acc ? before : std::vector<float>(40, 0.0f), "rmsnorm rows = 0");
  }
}

TEST_CASE("cuda row_dot and the split rmsnorm match the CPU for every storage type",
          "[gpu][cuda_backend][rmsnorm]") {
  require_gpu();
  // width > cols: this device holds part of each row; the row sums come from the CPU on both
  // sides, so each op is compared alone.
  const int64_t shapes[][3] = {{1, 1, 1}, {5, 37, 74}, {65, 768, 2048}, {700, 96, 192}, {3, 4099, 4099}};
  uint64_t seed = 5250;
  for (const DType t : kFloatTypes) {
    for (const auto& s : shapes) {
      const int64_t rows = s[0], cols = s[1], width = s[2];
      INFO(type_name(t) << " rows=" << rows << " cols=" << cols << " width=" << width);
      const auto n = static_cast<std::size_t>(rows * cols);
      const auto sr = static_cast<std::size_t>(rows), sc = static_cast<std::size_t>(cols);
      const Bytes x = random_stored(n, t, seed++, -2.0f, 3.0f);
      const Bytes gamma = random_stored(sc, t, seed++, 0.5f, 1.5f);
      const Bytes dy = random_stored(n, t, seed++);
      Dev<unsigned char> dx_in(x), dgamma_in(gamma), ddy(dy), dyout(x.size()), ddx(x.size());
      // row_dot: sums of squares, and of dy * gamma * x.
      std::vector<float> sq(sr), dot(sr);
      cpu().row_dot(x.data(), x.data(), nullptr, t, sq.data(), rows, cols);
      cpu().row_dot(dy.data(), x.data(), gamma.data(), t, dot.data(), rows, cols);
      Dev<float> dsq(sr), ddot(sr);
      gpu().row_dot(dx_in.get(), dx_in.get(), nullptr, t, dsq.get(), rows, cols);
      gpu().row_dot(ddy.get(), dx_in.get(), dgamma_in.get(), t, ddot.get(), rows, cols);
      check_close(dsq.download(), sq, 1e-6, 1e-6, "row_dot x * x");
      check_close(ddot.download(), dot, 1e-6, 1e-5, "row_dot dy * gamma * x");
      // Forward from the CPU's sums; rstd written over them on the GPU (allowed).
      Bytes y(x.size());
      std::vector<float> rstd(sr);
      cpu().rmsnorm_split_forward(x.data(), gamma.data(), sq.data(), y.data(), t, rstd.data(), rows, cols, width,
                                  1e-5f);
      Dev<float> drstd(sq);
      gpu().rmsnorm_split_forward(dx_in.get(), dgamma_in.get(), drstd.get(), dyout.get(), t, drstd.get(), rows, cols,
                                  width, 1e-5f);
      check_bits(drstd.download(), rstd, "split rmsnorm rstd");
      check_close(download_f32(dyout, t), from_storage(y, t), tol_for(t, {1e-6, 1e-6}, 0.1), "split rmsnorm y");
      ddot.upload(dot);
      for (const bool acc : {false, true}) {
        auto dg = random_floats(sc, seed++);
        Dev<float> ddg(dg);
        Bytes dx(x.size());
        gpu().rmsnorm_split_backward(dx_in.get(), dgamma_in.get(), drstd.get(), ddot.get(), ddy.get(), ddx.get(), t,
                                     ddg.get(), rows, cols, width, acc);
        cpu().rmsnorm_split_backward(x.data(), gamma.data(), rstd.data(), dot.data(), dy.data(), dx.data(), t,
                                     dg.data(), rows, cols, width, acc);
        check_close(download_f32(ddx, t), from_storage(dx, t), tol_for(t, {1e-5, 1e-6}, 0.1), "split rmsnorm dx");
        check_close(ddg.download(), dg, 1e-5, 1e-6, acc ? "split rmsnorm dgamma accumulate" : "split rmsnorm dgamma");
      }
    }
  }
}

TEST_CASE("cuda swiglu forward and backward match the CPU, vectorised or not, every type",
          "[gpu][cuda_backend][swiglu]") {
  require_gpu();
  // cols a multiple of the 16-byte pack (4 f32, 8 bf16/f16) or not; {2, 4100} packs for f32
  // only.
  const int64_t shapes[][2] = {{1, 1}, {7, 37}, {65, 256}, {3, 1000}, {2, 4100}};
  uint64_t seed = 5300;
  for (const DType t : kFloatTypes) {
    const std::size_t e = ptdp::dtype_size(t);
    for (const auto& s : shapes) {
      const int64_t rows = s[0], cols = s[1];
      const auto n = static_cast<std::size_t>(rows * cols);
      // The gate spans where silu bends and saturates; up and dy are smaller.
      std::vector<float> xf = random_floats(2 * n, seed++, -8.0f, 8.0f);
      const Bytes x = to_storage(xf, t);
      const Bytes dy = random_stored(n, t, seed++);
      Bytes y(n * e), dx(2 * n * e);
      cpu().swiglu_forward(x.data(), y.data(), t, rows, cols);
      cpu().swiglu_backward(x.data(), dy.data(), dx.data(), t, rows, cols);
      const Tol tol = tol_for(t, {1e-5, 1e-6}, 1e-2);
      // offset 1: every pointer one element past a 256-byte boundary (the scalar kernel).
      for (const int64_t offset : {0, 1}) {
        INFO(type_name(t) << " rows=" << rows << " cols=" << cols << " offset=" << offset);
        const std::size_t off = static_cast<std::size_t>(offset) * e;
        Bytes xpad(off), dypad(off);
        xpad.insert(xpad.end(), x.begin(), x.end());
        dypad.insert(dypad.end(), dy.begin(), dy.end());
        Dev<unsigned char> dxin(xpad), ddy(dypad), dy_out(off + n * e), ddx(off + 2 * n * e);
        gpu().swiglu_forward(dxin.get() + off, dy_out.get() + off, t, rows, cols);
        gpu().swiglu_backward(dxin.get() + off, ddy.get() + off, ddx.get() + off, t, rows, cols);
        const Bytes got_y = dy_out.download(), got_dx = ddx.download();
        check_close(from_storage(Bytes(got_y.begin() + static_cast<std::ptrdiff_t>(off),
                                       got_y.end()), t),
                    from_storage(y, t), tol, "swiglu_forward");
        check_close(from_storage(Bytes(got_dx.begin() + static_cast<std::ptrdiff_t>(off),
                                       got_dx.end()), t),
                    from_storage(dx, t), tol, "swiglu_backward");
      }
      // dx written over x (allowed: each pack is read before it is written).
      INFO(type_name(t) << " rows=" << rows << " cols=" << cols << " dx over x");
      Dev<unsigned char> dxin(x), ddy(dy);
      gpu().swiglu_backward(dxin.get(), ddy.get(), dxin.get(), t, rows, cols);
      check_close(download_f32(dxin, t), from_storage(dx, t), tol, "swiglu_backward over x");
    }
  }
}

namespace {

struct RopeCase {
  int64_t s, b, groups, q_per_group, dh, rot_dim, position_offset;
  bool explicit_positions;
};

std::string describe(const RopeCase& c, DType t) {
  std::ostringstream o;
  o << "rope " << type_name(t) << " s=" << c.s << " b=" << c.b << " groups=" << c.groups
    << " q_per_group=" << c.q_per_group << " dh=" << c.dh << " rot_dim=" << c.rot_dim
    << " offset=" << c.position_offset << " positions=" << c.explicit_positions;
  return o.str();
}

/// Whether element e of the [s, b, groups, q_per_group + 2, dh] activation is left alone: a
/// value head, or a feature at or past rot_dim.
bool rope_untouched(const RopeCase& c, std::size_t e) {
  const auto dh = static_cast<std::size_t>(c.dh);
  const auto slots = static_cast<std::size_t>(c.q_per_group + 2);
  return e % dh >= static_cast<std::size_t>(c.rot_dim) ||
         (e / dh) % slots == static_cast<std::size_t>(c.q_per_group + 1);
}

/// Forward and backward on both backends from the same stored activation; the GPU must leave
/// value heads and features past rot_dim bit-for-bit alone, and (f32) undo its forward with
/// its backward.
void compare_rope(const RopeCase& c, DType t, uint64_t seed, float amplitude = 1.0f) {
  INFO(describe(c, t));
  const int64_t half = c.rot_dim / 2, tokens = c.s * c.b;
  std::vector<float> inv_freq(static_cast<std::size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[static_cast<std::size_t>(i)] = static_cast<float>(
        1.0 / std::pow(10000.0, static_cast<double>(2 * i) / static_cast<double>(c.rot_dim)));
  }
  // Explicit positions: arbitrary, repeated and large (angles of thousands of radians).
  std::vector<int32_t> positions;
  if (c.explicit_positions) {
    positions = random_ints(static_cast<std::size_t>(tokens), seed, 0, 70000);
  }
  const auto n = static_cast<std::size_t>(tokens * c.groups * (c.q_per_group + 2) * c.dh);
  const Bytes x = random_stored(n, t, seed + 1, -2.0f, 2.0f);
  const Bytes dy = random_stored(n, t, seed + 2, -2.0f, 2.0f);
  Dev<float> dinv(inv_freq);
  Dev<int32_t> dpos(positions.empty() ? std::vector<int32_t>{0} : positions);
  ptdp::RopeDesc hd;
  hd.s = c.s;
  hd.b = c.b;
  hd.groups = c.groups;
  hd.q_per_group = c.q_per_group;
  hd.dh = c.dh;
  hd.rot_dim = c.rot_dim;
  hd.position_offset = c.position_offset;
  hd.inv_freq = inv_freq.data();
  hd.positions = c.explicit_positions ? positions.data() : nullptr;
  hd.amplitude = amplitude;
  ptdp::RopeDesc gd = hd;
  gd.inv_freq = dinv.get();
  gd.positions = c.explicit_positions ? dpos.get() : nullptr;

  // Both backends round each output once from the same fp32 arithmetic (cos and sin in double,
  // rounded to fp32); f32 allows the ulp a differently rounded cos or sin could move.
  const Tol tol = tol_for(t, {1e-6, 1e-6}, 1.0);
  Bytes y = x, dx = dy;
  cpu().rope_forward(y.data(), t, hd);
  cpu().rope_backward(dx.data(), t, hd);
  Dev<unsigned char> dq(x), ddq(dy);
  gpu().rope_forward(dq.get(), t, gd);
  gpu().rope_backward(ddq.get(), t, gd);
  const Bytes got_y = dq.download(), got_dx = ddq.download();
  check_close(from_storage(got_y, t), from_storage(y, t), tol, "rope_forward");
  check_close(from_storage(got_dx, t), from_storage(dx, t), tol, "rope_backward");

  const std::size_t e = ptdp::dtype_size(t);
  std::size_t moved = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (rope_untouched(c, i) && (std::memcmp(&got_y[i * e], &x[i * e], e) != 0 ||
                                 std::memcmp(&got_dx[i * e], &dy[i * e], e) != 0)) {
      ++moved;
    }
  }
  INFO(moved << " value-head or unrotated elements changed");
  CHECK(moved == 0);

  if (t == DType::F32) {  // the backward is the forward's inverse times amplitude^2, up to fp32 rounding
    gpu().rope_backward(dq.get(), t, gd);
    std::vector<float> want = from_storage(x, t);
    for (std::size_t i = 0; i < n; ++i) {
      if (!rope_untouched(c, i)) want[i] *= amplitude * amplitude;
    }
    check_close(download_f32(dq, t), want, 1e-5, 1e-6, "rope round trip");
  }
}

}  // namespace

TEST_CASE("cuda rope forward and backward match the CPU: GQA layouts, positions, rot_dim < dh",
          "[gpu][cuda_backend][rope]") {
  require_gpu();
  const RopeCase cases[] = {
      // s, b, groups, q_per_group, dh, rot_dim, offset, explicit positions
      {7, 3, 2, 3, 64, 64, 5, false},        // grouped-query layout, offset positions
      {5, 2, 4, 1, 128, 128, 0, false},      // multi-head layout [s, b, heads, 3, dh]
      {6, 2, 1, 2, 128, 32, 0, false},       // rot_dim < dh
      {9, 2, 2, 2, 64, 48, 0, true},         // explicit positions, rot_dim < dh
      {3, 4, 1, 4, 96, 96, 100000, false},   // far positions (long context), dh not a power of 2
      {2, 1, 1, 1, 640, 640, 3, true},       // more frequencies than a block's lanes
  };
  uint64_t seed = 5400;
  for (const DType t : kFloatTypes) {
    for (const RopeCase& c : cases) {
      compare_rope(c, t, seed);
      seed += 3;
    }
  }
}

TEST_CASE("cuda rope with YaRN's amplitude matches the CPU, forward and backward",
          "[gpu][cuda_backend][rope][yarn]") {
  require_gpu();
  const RopeCase cases[] = {
      {7, 3, 2, 3, 64, 64, 5, false},     // grouped-query layout, offset positions
      {9, 2, 2, 2, 64, 48, 0, true},      // explicit positions, rot_dim < dh
      {3, 4, 1, 4, 96, 96, 100000, false},  // far positions
  };
  uint64_t seed = 5500;
  for (const DType t : kFloatTypes) {
    for (const RopeCase& c : cases) {
      compare_rope(c, t, seed, 1.1386294f);  // 0.1 ln(4) + 1
      seed += 3;
    }
  }
}

TEST_CASE("cuda softmax forward and backward match the CPU, causal with sq != sk, every type",
          "[gpu][cuda_backend][softmax]") {
  require_gpu();
  struct Case {
    int64_t batch, sq, sk;
    bool causal;
  };
  const Case cases[] = {{1, 1, 1, false},   {3, 5, 9, true},      {2, 7, 7, true},
                        {4, 33, 65, false}, {2, 128, 1029, true}, {1, 3, 2000, false}};
  uint64_t seed = 600;
  for (const DType t : kFloatTypes) {
    for (const auto& c : cases) {
      INFO(type_name(t) << " batch=" << c.batch << " sq=" << c.sq << " sk=" << c.sk
                        << " causal=" << c.causal);
      const auto n = static_cast<std::size_t>(c.batch * c.sq * c.sk);
      const float scale = 0.3f;
      const Bytes x = random_stored(n, t, seed++, -4.0f, 4.0f);
      Bytes y(x.size());
      Dev<unsigned char> dx_in(x), dyout(x.size());
      const Tol tol = tol_for(t, {1e-5, 1e-7}, 1e-3);
      gpu().softmax_forward(dx_in.get(), dyout.get(), t, c.batch, c.sq, c.sk, scale, c.causal);
      cpu().softmax_forward(x.data(), y.data(), t, c.batch, c.sq, c.sk, scale, c.causal);
      const auto got = download_f32(dyout, t), want = from_storage(y, t);
      check_close(got, want, tol, "softmax_forward");
      // Masked entries are exactly zero.
      std::size_t nonzero_masked = 0;
      for (std::size_t i = 0; i < n; ++i) {
        if (want[i] == 0.0f && got[i] != 0.0f) ++nonzero_masked;
      }
      CHECK(nonzero_masked == 0);
      gpu().softmax_forward(dx_in.get(), dx_in.get(), t, c.batch, c.sq, c.sk, scale, c.causal);
      check_close(download_f32(dx_in, t), want, tol, "softmax_forward in place");
      const Bytes dy = random_stored(n, t, seed++);
      Bytes dx(x.size());
      Dev<unsigned char> dyin(y), ddy(dy);
      gpu().softmax_backward(dyin.get(), ddy.get(), ddy.get(), t, c.batch, c.sq, c.sk, scale);
      cpu().softmax_backward(y.data(), dy.data(), dx.data(), t, c.batch, c.sq, c.sk, scale);
      check_close(download_f32(ddy, t), from_storage(dx, t), tol_for(t, {1e-5, 1e-6}, 1e-3),
                  "softmax_backward (dx aliases dy)");
    }
  }
}

namespace {

struct MaskLayout {
  int64_t shape[3], global[3], offset[3];
};

const MaskLayout kMaskLayouts[] = {
    {{1, 1, 1001}, {1, 1, 1001}, {0, 0, 0}},    // a flat tensor
    {{1, 1, 999}, {1, 1, 5000}, {0, 0, 1003}},  // a flat slice starting mid Philox block
    {{3, 2, 37}, {8, 5, 101}, {2, 1, 13}},      // sequence, head and feature splits at once
    {{16, 4, 64}, {32, 8, 64}, {16, 4, 0}},     // [s, b, h] with sequence parallelism
    {{5, 3, 1}, {7, 9, 3}, {1, 2, 2}},          // rows of one element
};

ptdp::DropoutDesc dropout_desc(const MaskLayout& l, float p) {
  ptdp::DropoutDesc d;
  d.p = p;
  d.rng = ptdp::PhiloxStream{0x5eed5eed12345678ull, 0xabcdef0123456789ull};
  for (int k = 0; k < 3; ++k) {
    d.block.shape[k] = l.shape[k];
    d.block.global_shape[k] = l.global[k];
    d.block.offset[k] = l.offset[k];
  }
  return d;
}

/// Which elements are nonzero (kept, for inputs that are never zero).
std::vector<uint8_t> nonzero(const std::vector<float>& v) {
  std::vector<uint8_t> m(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) m[i] = v[i] != 0.0f;
  return m;
}

/// Random values in +-[0.25, 1): never zero, and x + bias never cancels to zero when |bias| < 0.25.
std::vector<float> nonzero_floats(std::size_t n, uint64_t seed) {
  auto v = random_floats(n, seed, 0.25f, 1.0f);
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  for (auto& x : v) {
    if (rng() & 1) x = -x;
  }
  return v;
}

}  // namespace

TEST_CASE("cuda dropout draws exactly the CPU's masks for every block layout and type",
          "[gpu][cuda_backend][dropout]") {
  require_gpu();
  uint64_t seed = 700;
  for (const DType t : kFloatTypes) {
    for (const auto& l : kMaskLayouts) {
      for (const float p : {0.0f, 0.1f, 0.5f, 1.0f}) {
        const ptdp::DropoutDesc d = dropout_desc(l, p);
        INFO(type_name(t) << " p=" << p << " shape=" << l.shape[0] << "x" << l.shape[1] << "x"
                          << l.shape[2] << " offset=" << l.offset[0] << "," << l.offset[1] << ","
                          << l.offset[2]);
        const auto n = static_cast<std::size_t>(d.block.numel());
        const Bytes x = random_stored(n, t, seed++);
        Bytes y(x.size()), dx(x.size());
        Dev<unsigned char> dxin(x), dyout(x.size());
        gpu().dropout_forward(dxin.get(), dyout.get(), t, d);
        cpu().dropout_forward(x.data(), y.data(), t, d);
        check_stored_bits(dyout.download(), y, t, "dropout_forward");
        gpu().dropout_backward(dxin.get(), dxin.get(), t, d);  // in place
        cpu().dropout_backward(x.data(), dx.data(), t, d);
        check_stored_bits(dxin.download(), dx, t, "dropout_backward");
      }
    }
  }
}

TEST_CASE("cuda bias_dropout_add keeps exactly the CPU's (and dropout_forward's) elements",
          "[gpu][cuda_backend][dropout][bias_dropout_add]") {
  require_gpu();
  uint64_t seed = 750;
  for (const DType t : kFloatTypes) {
    for (const auto& l : kMaskLayouts) {
      for (const float p : {0.0f, 0.1f, 0.5f, 1.0f}) {
        const ptdp::DropoutDesc d = dropout_desc(l, p);
        // The block as a [rows, cols] matrix: cols = its contiguous extent, so the bias runs
        // along the block's rows (and across several Philox blocks of one row).
        const int64_t cols = l.shape[2], rows = l.shape[0] * l.shape[1];
        const auto n = static_cast<std::size_t>(rows * cols);
        INFO(type_name(t) << " p=" << p << " rows=" << rows << " cols=" << cols);
        const Bytes x = to_storage(nonzero_floats(n, seed++), t);
        const Bytes bias = random_stored(static_cast<std::size_t>(cols), t, seed++, -0.2f, 0.2f);
        const Bytes zeros = to_storage(std::vector<float>(n, 0.0f), t);
        Dev<unsigned char> dx(x), dbias(bias), dzero(zeros), dy(x.size()), dmask(x.size());
        {
          // With a zero residual, y != 0 exactly where the element is kept.
          Bytes y(x.size());
          gpu().bias_dropout_add(dx.get(), dbias.get(), dzero.get(), dy.get(), t, rows, cols, d);
          cpu().bias_dropout_add(x.data(), bias.data(), zeros.data(), y.data(), t, rows, cols, d);
          const auto got = nonzero(download_f32(dy, t));
          check_bits(got, nonzero(from_storage(y, t)), "kept elements vs the CPU");
          gpu().dropout_forward(dx.get(), dmask.get(), t, d);
          check_bits(got, nonzero(download_f32(dmask, t)), "kept elements vs dropout_forward");
        }
        // Values, with a residual, with and without bias; y aliases the residual.
        for (const bool with_bias : {true, false}) {
          Bytes r = random_stored(n, t, seed++, -2.0f, 2.0f), y(x.size());
          Dev<unsigned char> dr(r);
          const void* gb = with_bias ? static_cast<const void*>(dbias.get()) : nullptr;
          const void* cb = with_bias ? static_cast<const void*>(bias.data()) : nullptr;
          gpu().bias_dropout_add(dx.get(), gb, dr.get(), dr.get(), t, rows, cols, d);
          cpu().bias_dropout_add(x.data(), cb, r.data(), y.data(), t, rows, cols, d);
          check_close(download_f32(dr, t), from_storage(y, t), tol_for(t, {1e-6, 1e-6}, 1e-2),
                      with_bias ? "bias_dropout_add" : "bias_dropout_add without bias");
        }
      }
    }
  }
}

TEST_CASE("cuda elementwise ops, fills and copies match the CPU",
          "[gpu][cuda_backend][elementwise]") {
  require_gpu();
  for (const int64_t n : {1, 4097, 1 << 20}) {
    INFO("n=" << n);
    const auto sn = static_cast<std::size_t>(n);
    for (const DType t : kFloatTypes) {
      INFO(type_name(t));
      const Bytes a = random_stored(sn, t, 800 + n), b = random_stored(sn, t, 801 + n);
      Bytes y(a.size());
      Dev<unsigned char> da(a), db(b), dy(a.size());
      gpu().add(da.get(), db.get(), dy.get(), t, n);
      cpu().add(a.data(), b.data(), y.data(), t, n);
      check_stored_bits(dy.download(), y, t, "add");
      gpu().add(da.get(), db.get(), da.get(), t, n);  // y aliases a
      check_stored_bits(da.download(), y, t, "add in place");
    }
    const auto a = random_floats(sn, 802 + n);
    auto y = random_floats(sn, 803 + n);
    Dev<float> da(a), dy(y);
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
        INFO("dtype=" << type_name(t) << " value=" << v);
        const std::size_t bytes = static_cast<std::size_t>(n) * ptdp::dtype_size(t);
        Bytes want(bytes, 0xab);
        Dev<unsigned char> dx(want);
        gpu().fill(dx.get(), t, v, n);
        cpu().fill(want.data(), t, v, n);
        check_bits(dx.download(), want, "fill");
      }
    }
  }
  SECTION("copy_2d of every dtype and fill_2d of every floating dtype, with leading dimensions") {
    const int64_t rows = 37, cols = 29, ld_src = 41, ld_dst = 33;
    uint64_t seed = 850;
    for (const DType t : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64}) {
      INFO(type_name(t));
      const std::size_t e = ptdp::dtype_size(t);
      // Random bytes: copies move bits whatever they mean.
      const auto rnd = random_ints(static_cast<std::size_t>(rows * ld_src) * e, seed++, 0, 255);
      const auto rnd2 = random_ints(static_cast<std::size_t>(rows * ld_dst) * e, seed++, 0, 255);
      const Bytes src(rnd.begin(), rnd.end());
      Bytes dst(rnd2.begin(), rnd2.end());
      Dev<unsigned char> dsrc(src), ddst(dst);
      gpu().copy_2d(ddst.get(), ld_dst, dsrc.get(), ld_src, t, rows, cols);
      cpu().copy_2d(dst.data(), ld_dst, src.data(), ld_src, t, rows, cols);
      check_bits(ddst.download(), dst, "copy_2d");
      if (!ptdp::dtype_is_float(t)) continue;
      for (const float value : {-kInf, 0.5f, 1e-30f}) {
        gpu().fill_2d(ddst.get() + 3 * e, t, ld_dst, rows - 2, cols - 5, value);
        cpu().fill_2d(dst.data() + 3 * e, t, ld_dst, rows - 2, cols - 5, value);
        check_stored_bits(ddst.download(), dst, t, "fill_2d");
      }
    }
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
  std::vector<Bytes> host(3);
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
      INFO(type_name(types[s]) << " -> " << type_name(types[t]));
      Bytes want(static_cast<std::size_t>(n) * ptdp::dtype_size(types[t]));
      cpu().cast(host[s].data(), types[s], want.data(), types[t], n);
      Dev<unsigned char> dsrc(host[s]), ddst(want.size());
      gpu().cast(dsrc.get(), types[s], ddst.get(), types[t], n);
      check_bits(ddst.download(), want, "cast");
    }
  }
}

TEST_CASE("cuda embedding matches the CPU for every type, and its backward is deterministic and exact",
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
  for (const DType t : kFloatTypes) {
    for (const auto& c : cases) {
      INFO(type_name(t) << " n=" << c.n << " vocab_start=" << c.vocab_start
                        << " vocab_rows=" << c.vocab_rows << " h=" << c.h);
      const auto ids = random_ints(static_cast<std::size_t>(c.n), seed++, 0, c.id_max);
      const Bytes table = random_stored(static_cast<std::size_t>(c.vocab_rows * c.h), t, seed++);
      const auto out_n = static_cast<std::size_t>(c.n * c.h);
      Dev<int32_t> dids(ids);
      Dev<unsigned char> dtable(table), dout(out_n * ptdp::dtype_size(t));
      Bytes out(out_n * ptdp::dtype_size(t));
      gpu().embedding_forward(dids.get(), c.n, dtable.get(), t, c.vocab_start, c.vocab_rows, c.h,
                              dout.get());
      cpu().embedding_forward(ids.data(), c.n, table.data(), t, c.vocab_start, c.vocab_rows, c.h,
                              out.data());
      check_stored_bits(dout.download(), out, t, "embedding_forward");
      const Bytes dy = random_stored(out_n, t, seed++);
      auto grad = random_floats(static_cast<std::size_t>(c.vocab_rows * c.h), seed++);
      Dev<unsigned char> ddy(dy);
      Dev<float> dgrad(grad), dgrad2(grad);
      gpu().embedding_backward(dids.get(), c.n, ddy.get(), t, c.vocab_start, c.vocab_rows, c.h,
                               dgrad.get());
      gpu().embedding_backward(dids.get(), c.n, ddy.get(), t, c.vocab_start, c.vocab_rows, c.h,
                               dgrad2.get());
      cpu().embedding_backward(ids.data(), c.n, dy.data(), t, c.vocab_start, c.vocab_rows, c.h,
                               grad.data());
      const auto got = dgrad.download();
      check_bits(got, grad, "embedding_backward vs CPU");
      check_bits(dgrad2.download(), got, "embedding_backward run to run");
    }
  }
}

TEST_CASE("cuda one-pass cross-entropy matches the CPU, padded columns and foreign targets",
          "[gpu][cuda_backend][cross_entropy]") {
  require_gpu();
  struct Case {
    int64_t rows, v, vocab_start, pad;  // the last `pad` columns are -inf (padded vocabulary)
  };
  const Case cases[] = {{1, 1, 0, 0},       {7, 33, 0, 0},       {64, 1000, 1000, 24},
                        {5, 50257, 0, 47},  {130, 257, 100, 0},  {3, 40, 0, 40}};
  uint64_t seed = 1100;
  for (const DType t : kFloatTypes) {
    for (const auto& c : cases) {
      INFO(type_name(t) << " rows=" << c.rows << " v=" << c.v << " vocab_start=" << c.vocab_start
                        << " pad=" << c.pad);
      const auto rs = static_cast<std::size_t>(c.rows);
      const std::size_t e = ptdp::dtype_size(t);
      Bytes logits = random_stored(rs * static_cast<std::size_t>(c.v), t, seed++, -8.0f, 8.0f);
      // Targets from the whole vocabulary of three such slices: some here, some elsewhere.
      const auto targets =
          random_ints(rs, seed++, 0, static_cast<int32_t>(c.vocab_start + 2 * c.v));
      const auto dloss = random_floats(rs, seed++);
      Dev<unsigned char> dlogits(logits);
      Dev<float> dmax(rs), dsum(rs), dtl(rs), dl(rs), ddloss(dloss);
      Dev<int32_t> dtargets(targets);
      const int64_t valid = c.v - c.pad;
      gpu().fill_2d(dlogits.get() + valid * e, t, c.v, c.rows, c.pad, -kInf);
      cpu().fill_2d(logits.data() + valid * e, t, c.v, c.rows, c.pad, -kInf);
      std::vector<float> mx(rs), sum(rs), tl(rs), loss(rs);
      gpu().ce_forward_local(dlogits.get(), t, dtargets.get(), c.rows, c.v, c.vocab_start,
                             dmax.get(), dsum.get(), dtl.get());
      cpu().ce_forward_local(logits.data(), t, targets.data(), c.rows, c.v, c.vocab_start,
                             mx.data(), sum.data(), tl.data());
      check_bits(dmax.download(), mx, "ce_forward_local row_max");
      check_close(dsum.download(), sum, 1e-5, 0.0, "ce_forward_local sum_exp");
      check_bits(dtl.download(), tl, "ce_forward_local target_logit");
      if (valid == 0) continue;  // no loss over a slice without a column
      dsum.upload(sum);
      gpu().ce_loss(dmax.get(), dsum.get(), dtl.get(), c.rows, dl.get());
      cpu().ce_loss(mx.data(), sum.data(), tl.data(), c.rows, loss.data());
      check_close(dl.download(), loss, 1e-5, 1e-6, "ce_loss");
      Bytes dx(logits.size());
      gpu().ce_backward(dlogits.get(), t, dmax.get(), dsum.get(), dtargets.get(), ddloss.get(),
                        c.rows, c.v, c.vocab_start, dlogits.get());  // in place
      cpu().ce_backward(logits.data(), t, mx.data(), sum.data(), targets.data(), dloss.data(),
                        c.rows, c.v, c.vocab_start, dx.data());
      check_close(download_f32(dlogits, t), from_storage(dx, t), tol_for(t, {1e-5, 1e-7}, 1e-3),
                  "ce_backward");
    }
  }
}

TEST_CASE("cuda ce_rescale moves slice sums to the global max, and an empty slice contributes 0",
          "[gpu][cuda_backend][cross_entropy]") {
  require_gpu();
  // Two vocabulary slices of one [rows, v0 + v1] logit matrix; the first `empty_rows` rows of
  // the second slice are all -inf (a rank holding only padded vocabulary for them).
  const int64_t rows = 9, v0 = 300, v1 = 211, empty_rows = 2;
  const auto rs = static_cast<std::size_t>(rows);
  uint64_t seed = 1150;
  for (const DType t : kFloatTypes) {
    INFO(type_name(t));
    const std::size_t e = ptdp::dtype_size(t);
    const Bytes full =
        random_stored(rs * static_cast<std::size_t>(v0 + v1), t, seed++, -6.0f, 6.0f);
    const auto targets = random_ints(rs, seed++, 0, static_cast<int32_t>(v0 + v1 - 1));
    Bytes full_padded = full;
    // Split into the two slices (copy_2d on the CPU: the slices are what each rank holds).
    Bytes s0(rs * static_cast<std::size_t>(v0) * e), s1(rs * static_cast<std::size_t>(v1) * e);
    cpu().copy_2d(s0.data(), v0, full.data(), v0 + v1, t, rows, v0);
    cpu().copy_2d(s1.data(), v1, full.data() + v0 * e, v0 + v1, t, rows, v1);
    cpu().fill_2d(s1.data(), t, v1, empty_rows, v1, -kInf);
    cpu().fill_2d(full_padded.data() + v0 * e, t, v0 + v1, empty_rows, v1, -kInf);
    Dev<unsigned char> d0(s0), d1(s1);
    Dev<int32_t> dtargets(targets);
    std::vector<float> mx[2], sum[2], tl[2];
    std::vector<float> gmx[2], gsum[2];
    Dev<float> dmx0(rs), dsum0(rs), dtl0(rs), dmx1(rs), dsum1(rs), dtl1(rs);
    gpu().ce_forward_local(d0.get(), t, dtargets.get(), rows, v0, 0, dmx0.get(), dsum0.get(),
                           dtl0.get());
    gpu().ce_forward_local(d1.get(), t, dtargets.get(), rows, v1, v0, dmx1.get(), dsum1.get(),
                           dtl1.get());
    for (int k = 0; k < 2; ++k) {
      mx[k].resize(rs);
      sum[k].resize(rs);
      tl[k].resize(rs);
    }
    cpu().ce_forward_local(s0.data(), t, targets.data(), rows, v0, 0, mx[0].data(), sum[0].data(),
                           tl[0].data());
    cpu().ce_forward_local(s1.data(), t, targets.data(), rows, v1, v0, mx[1].data(),
                           sum[1].data(), tl[1].data());
    // The max over the "tensor group", as the caller's all-reduce would give it.
    std::vector<float> global(rs);
    for (std::size_t r = 0; r < rs; ++r) global[r] = std::max(mx[0][r], mx[1][r]);
    CHECK(mx[1][0] == -kInf);
    Dev<float> dglobal(global);
    gpu().ce_rescale(dmx0.get(), dsum0.get(), dglobal.get(), rows);
    gpu().ce_rescale(dmx1.get(), dsum1.get(), dglobal.get(), rows);
    for (int k = 0; k < 2; ++k) cpu().ce_rescale(mx[k].data(), sum[k].data(), global.data(), rows);
    gmx[0] = dmx0.download();
    gmx[1] = dmx1.download();
    gsum[0] = dsum0.download();
    gsum[1] = dsum1.download();
    for (int k = 0; k < 2; ++k) {
      check_bits(gmx[k], global, "ce_rescale row_max = global max");
      check_close(gsum[k], sum[k], 1e-5, 0.0, "ce_rescale sum_exp vs CPU");
    }
    for (int64_t r = 0; r < empty_rows; ++r) CHECK(gsum[1][static_cast<std::size_t>(r)] == 0.0f);
    // The rescaled sums add up to the whole row's sum and the target logits to its target.
    std::vector<float> whole_max(rs), whole_sum(rs), whole_tl(rs), added(rs), added_tl(rs);
    cpu().ce_forward_local(full_padded.data(), t, targets.data(), rows, v0 + v1, 0,
                           whole_max.data(), whole_sum.data(), whole_tl.data());
    const auto gtl0 = dtl0.download(), gtl1 = dtl1.download();
    for (std::size_t r = 0; r < rs; ++r) {
      added[r] = gsum[0][r] + gsum[1][r];
      added_tl[r] = gtl0[r] + gtl1[r];
    }
    check_bits(global, whole_max, "global max = the whole row's max");
    check_close(added, whole_sum, 1e-5, 0.0, "sum of rescaled slice sums");
    check_bits(added_tl, whole_tl, "sum of slice target logits");
  }
}

TEST_CASE("cuda fused attention matches the CPU reference for bf16 and f16, head dims 64 and 128",
          "[gpu][cuda_backend][attention]") {
  require_gpu();
  uint64_t seed = 1180;
  for (const DType t : {DType::BF16, DType::F16}) {
    for (const int64_t dh : {64, 128}) {
      for (const float p : {0.0f, 0.1f}) {
        INFO(type_name(t) << " dh=" << dh << " p=" << p);
        REQUIRE(gpu().fused_attention_supported(t, dh));
        ptdp::AttentionDesc d;
        d.s = 77;  // not a multiple of any tile
        d.b = 2;
        d.heads = 3;
        d.dh = dh;
        d.scale = 1.0f / std::sqrt(static_cast<float>(dh));
        if (p > 0.0f) {
          // These heads are heads 1..3 of 4 (tensor parallelism), as SelfAttention indexes them.
          d.dropout.p = p;
          d.dropout.rng = ptdp::PhiloxStream{0x1234ull, 0x5678ull};
          const int64_t shape[3] = {d.b, d.heads, d.s * d.s};
          for (int k = 0; k < 3; ++k) {
            d.dropout.block.shape[k] = shape[k];
            d.dropout.block.global_shape[k] = shape[k] + (k == 1 ? 1 : 0);
            d.dropout.block.offset[k] = k == 1 ? 1 : 0;
          }
        }
        const auto qkv_n = static_cast<std::size_t>(d.s * d.b * d.heads * 3 * dh);
        const auto ctx_n = static_cast<std::size_t>(d.s * d.b * d.heads * dh);
        const auto lse_n = static_cast<std::size_t>(d.b * d.heads * d.s);
        const std::size_t e = ptdp::dtype_size(t);
        const Bytes qkv = random_stored(qkv_n, t, seed++, -2.0f, 2.0f);
        Bytes ctx(ctx_n * e);
        std::vector<float> lse(lse_n), delta(lse_n);
        Dev<unsigned char> dqkv(qkv), dctx(ctx_n * e);
        Dev<float> dlse(lse_n), ddelta(lse_n);
        gpu().attention_forward(d, dqkv.get(), dctx.get(), dlse.get(), t);
        cpu().attention_forward(d, qkv.data(), ctx.data(), lse.data(), t);
        // The flash kernels round the probabilities to t before multiplying V: a few units in
        // the last place of t, relative to the largest output.
        const double r = t == DType::BF16 ? 2e-2 : 4e-3;
        const auto ctx_want = from_storage(ctx, t);
        check_close(download_f32(dctx, t), ctx_want, r, r * max_abs(ctx_want), "attention ctx");
        check_close(dlse.download(), lse, 1e-4, 1e-3, "attention lse");
        // Backward from the CPU's forward results on both sides.
        dctx.upload(ctx);
        dlse.upload(lse);
        const Bytes dout = random_stored(ctx_n, t, seed++);
        Bytes dqkv_want(qkv.size());
        Dev<unsigned char> ddout(dout), dgrad(qkv.size());
        gpu().attention_backward(d, dqkv.get(), dctx.get(), dlse.get(), ddout.get(), dgrad.get(),
                                 ddelta.get(), t);
        cpu().attention_backward(d, qkv.data(), ctx.data(), lse.data(), dout.data(),
                                 dqkv_want.data(), delta.data(), t);
        const auto grad_want = from_storage(dqkv_want, t);
        check_close(download_f32(dgrad, t), grad_want, 2 * r, 2 * r * max_abs(grad_want),
                    "attention dqkv");
      }
    }
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
      p.grad_scale = step % 2 == 0 ? 0.37f : 1.0f;  // clipping folded into the update
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
        p.grad_scale = step == 1 ? 0.5f : 1.0f;
        gpu().sgd_step(dp.get(), dg.get(), variant == 0 ? nullptr : db.get(), n, p);
        cpu().sgd_step(param.data(), grad.data(), variant == 0 ? nullptr : buf.data(), n, p);
      }
      check_close(dp.download(), param, 1e-6, 1e-7, "sgd param");
      if (variant > 0) check_close(db.download(), buf, 1e-6, 1e-7, "sgd momentum");
    }
  }
}

TEST_CASE("cuda newton_schulz matches the CPU's in fp32, TF32 and bf16", "[gpu][cuda_backend][newton_schulz]") {
  require_gpu();
  struct Shape {
    int64_t rows, cols;
  };
  // Tall (transposed on the device), wide, square, a single row and a tile-straddling tall one.
  const Shape shapes[] = {{96, 40}, {40, 96}, {64, 64}, {1, 9}, {77, 33}};
  for (const Shape& sh : shapes) {
    for (int precision : {0, 1, 2}) {
      INFO(sh.rows << " x " << sh.cols << ", precision " << precision);
      const auto n = static_cast<std::size_t>(sh.rows * sh.cols);
      ptdp::NewtonSchulzDesc d;
      d.rows = sh.rows;
      d.cols = sh.cols;
      d.steps = 5;
      d.num_sets = 2;  // 5 steps over 2 sets: 0, 1, 0, 1, 0
      const float sets[2][3] = {{3.4445f, -4.775f, 2.0315f}, {3.0f, -3.2f, 1.2f}};
      std::memcpy(d.coefficients, sets, sizeof sets);
      d.precision = precision;
      auto want = random_floats(n, 4100 + n);
      Dev<float> dx(want);
      gpu().newton_schulz(dx.get(), d);
      cpu().newton_schulz(want.data(), d);
      const auto got = dx.download();
      const double scale = max_abs(want);
      REQUIRE(scale > 0.0);
      // TF32 keeps 10 mantissa bits and bf16 8: each product's rounding, amplified near zero by
      // the iteration's slope (3.4 per step), differs between the devices' summation orders.
      const double atol = precision == 0 ? 1e-5 : (precision == 1 ? 2e-2 : 6e-2);
      check_close(got, want, 0.0, atol * scale, "newton_schulz");
      if (precision == 2) {
        for (float v : got) REQUIRE(ptdp::bf16_to_f32(ptdp::f32_to_bf16(v)) == v);
      }
      // The same bits again (scratch reused, a fixed reduction grid).
      Dev<float> again(random_floats(n, 4100 + n));
      gpu().newton_schulz(again.get(), d);
      const auto got2 = again.download();
      CHECK(std::memcmp(got.data(), got2.data(), n * sizeof(float)) == 0);
    }
  }
  ptdp::NewtonSchulzDesc bad;
  bad.rows = 2;
  bad.cols = 2;
  bad.num_sets = 1;
  bad.steps = 0;
  Dev<float> buf(4);
  try {
    gpu().newton_schulz(buf.get(), bad);
    FAIL("newton_schulz with steps = 0 did not throw");
  } catch (const ptdp::Error& e) {
    CHECK(e.code() == ptdp::ErrorCode::InvalidArgument);
    CHECK(std::string(e.what()).find("steps must be in [1, 100], got 0") != std::string::npos);
  }
}

TEST_CASE("cuda backend validates sizes and types like the CPU backend",
          "[gpu][cuda_backend][errors]") {
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
  GemmDesc mixed;
  mixed.m = mixed.n = mixed.k = 4;
  mixed.a_type = DType::BF16;  // b_type stays f32
  try {
    gpu().gemm(mixed, buf.get(), buf.get(), buf.get());
    FAIL("gemm with a_type != b_type did not throw");
  } catch (const ptdp::Error& e) {
    CHECK(e.code() == ptdp::ErrorCode::InvalidArgument);
    CHECK(std::string(e.what()).find("b_type") != std::string::npos);
  }
  CHECK_THROWS_AS(gpu().softmax_forward(buf.get(), buf.get(), DType::F32, 1, 4, 2, 1.0f, true),
                  ptdp::Error);
  CHECK_THROWS_AS(gpu().add(buf.get(), buf.get(), buf.get(), DType::F32, -1), ptdp::Error);
  try {
    gpu().add(buf.get(), buf.get(), buf.get(), DType::I32, 4);
    FAIL("add of i32 did not throw");
  } catch (const ptdp::Error& e) {
    CHECK(e.code() == ptdp::ErrorCode::InvalidArgument);
  }
  if (!gpu().fused_attention_supported(DType::F32, 64)) {
    ptdp::AttentionDesc a;
    a.s = a.b = a.heads = 1;
    a.dh = 64;
    try {
      gpu().attention_forward(a, buf.get(), buf.get(), buf.get(), DType::F32);
      FAIL("attention_forward without a kernel did not throw");
    } catch (const ptdp::Error& e) {
      CHECK(e.code() == ptdp::ErrorCode::Unsupported);
    }
  }
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

TEST_CASE("steady-state ops make no cudaMalloc, the GEMM fallback's scratch included",
          "[gpu][cuda_backend][allocator]") {
  require_gpu();
  // A GEMM whose epilogue takes the fp32 scratch (aux ld 45 is not a multiple of 8) and an
  // embedding backward (sort scratch), twice: the second round allocates nothing new.
  const int64_t m = 33, n = 45, k = 17;
  const Bytes a = random_stored(static_cast<std::size_t>(m * k), DType::BF16, 1400);
  const Bytes b = random_stored(static_cast<std::size_t>(k * n), DType::BF16, 1401);
  const Bytes bias = random_stored(static_cast<std::size_t>(n), DType::BF16, 1402);
  Dev<unsigned char> da(a), db(b), dbias(bias), dc(static_cast<std::size_t>(m * n) * 2),
      daux(static_cast<std::size_t>(m * n) * 2);
  const auto ids = random_ints(512, 1403, 0, 99);
  Dev<int32_t> dids(ids);
  Dev<float> dout(512 * 16), dtable(100 * 16);
  gpu().fill(dout.get(), DType::F32, 0.5, 512 * 16);
  gpu().fill(dtable.get(), DType::F32, 0.0, 100 * 16);
  const auto round = [&] {
    GemmDesc d;
    d.m = m;
    d.n = n;
    d.k = k;
    d.a_type = d.b_type = d.c_type = DType::BF16;
    d.epilogue = Epilogue::BiasGelu;
    d.bias = dbias.get();
    d.aux = daux.get();
    gpu().gemm(d, da.get(), db.get(), dc.get());
    gpu().embedding_backward(dids.get(), 512, dout.get(), DType::F32, 0, 100, 16, dtable.get());
    gpu().synchronize();
  };
  round();
  const auto first = ptdp::cuda::allocator_stats(0);
  round();
  round();
  const auto later = ptdp::cuda::allocator_stats(0);
  CHECK(later.cuda_mallocs == first.cuda_mallocs);
  CHECK(later.in_use == first.in_use);
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
