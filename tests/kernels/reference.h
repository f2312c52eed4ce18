// Shared helpers for the kernel tests: seeded random fills, double-precision reference
// implementations written straight from the semantics in kernels/backend.h, a central
// finite-difference gradient checker and array comparison helpers that report the first
// mismatches.
//
// Nothing here calls the backend: the references are the independent side of every check.
#pragma once

#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numbers>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/half.h"
#include "kernels/backend.h"

namespace ptdp_test {

using dvec = std::vector<double>;
using fvec = std::vector<float>;

inline ptdp::Backend& be() { return ptdp::cpu_backend(); }

inline constexpr ptdp::DType kF32 = ptdp::DType::F32;
inline constexpr ptdp::DType kBF16 = ptdp::DType::BF16;
inline constexpr ptdp::DType kF16 = ptdp::DType::F16;

/// Runs fn() with `threads` OpenMP threads, then restores the previous count.
template <typename Fn>
void with_threads(int threads, Fn&& fn) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  fn();
  omp_set_num_threads(saved);
}

// ---- random fills --------------------------------------------------------------------------

/// A seeded generator per test, so every test case sees the same data however it is run.
struct Rand {
  std::mt19937 g;
  explicit Rand(uint32_t seed) : g(seed) {}

  fvec uniform(int64_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    fvec v(static_cast<std::size_t>(n));
    for (auto& x : v) x = dist(g);
    return v;
  }
  std::vector<int32_t> ids(int64_t n, int32_t lo, int32_t hi_inclusive) {
    std::uniform_int_distribution<int32_t> dist(lo, hi_inclusive);
    std::vector<int32_t> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = dist(g);
    return v;
  }
  uint32_t bits() { return static_cast<uint32_t>(g()); }
};

inline dvec to_d(const fvec& v) { return dvec(v.begin(), v.end()); }
inline fvec to_f(const dvec& v) {
  fvec r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = static_cast<float>(v[i]);
  return r;
}

// ---- comparison ----------------------------------------------------------------------------

/// Empty when every |got[i] - want[i]| <= atol + rtol * |want[i]| (NaN in got fails), else a
/// description of the first few mismatches.
inline std::string allclose_report(const float* got, const double* want, std::size_t n,
                                   double atol, double rtol) {
  std::ostringstream os;
  std::size_t bad = 0;
  double worst = 0.0;
  std::size_t worst_i = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double g = static_cast<double>(got[i]);
    const double w = want[i];
    const double diff = std::fabs(g - w);
    const double tol = atol + rtol * std::fabs(w);
    if (!(diff <= tol)) {
      if (bad < 6)
        os << "  [" << i << "] got " << g << " expected " << w << " (|diff| " << diff
           << " > tol " << tol << ")\n";
      if (!(diff <= worst)) {
        worst = diff;
        worst_i = i;
      }
      ++bad;
    }
  }
  if (bad == 0) return {};
  std::ostringstream head;
  head << bad << " of " << n << " elements mismatch (worst at [" << worst_i << "], |diff| "
       << worst << "):\n"
       << os.str();
  return head.str();
}

inline std::string allclose_report(const fvec& got, const dvec& want, double atol, double rtol) {
  if (got.size() != want.size()) return "size mismatch";
  return allclose_report(got.data(), want.data(), got.size(), atol, rtol);
}

inline std::string equal_report(const fvec& got, const fvec& want) {
  if (got.size() != want.size()) return "size mismatch";
  std::ostringstream os;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    if (a != b) {
      if (bad < 6) os << "  [" << i << "] got " << got[i] << " expected " << want[i] << "\n";
      ++bad;
    }
  }
  if (bad == 0) return {};
  return std::to_string(bad) + " of " + std::to_string(got.size()) +
         " elements differ bitwise:\n" + os.str();
}

// ---- storage types ------------------------------------------------------------------------

/// x rounded to bf16 or f16, as 16-bit words.
inline std::vector<uint16_t> to16(const fvec& x, ptdp::DType t) {
  std::vector<uint16_t> h(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    h[i] = t == ptdp::DType::BF16 ? ptdp::f32_to_bf16(x[i]) : ptdp::f32_to_f16(x[i]);
  return h;
}

/// 16-bit words of type t widened to f32.
inline fvec from16(const std::vector<uint16_t>& h, ptdp::DType t) {
  fvec x(h.size());
  for (std::size_t i = 0; i < h.size(); ++i)
    x[i] = t == ptdp::DType::BF16 ? ptdp::bf16_to_f32(h[i]) : ptdp::f16_to_f32(h[i]);
  return x;
}

/// A buffer of storage type t (f32, bf16, f16) holding x: the f32 values, or their 16-bit
/// roundings.
struct Stored {
  ptdp::DType t;
  fvec f;
  std::vector<uint16_t> h;

  Stored(const fvec& x, ptdp::DType type) : t(type) {
    if (t == ptdp::DType::F32) f = x;
    else h = to16(x, t);
  }
  void* data() { return t == ptdp::DType::F32 ? static_cast<void*>(f.data()) : h.data(); }
  const void* data() const { return t == ptdp::DType::F32 ? static_cast<const void*>(f.data()) : h.data(); }
  /// The values the buffer holds, widened to f32.
  fvec values() const { return t == ptdp::DType::F32 ? f : from16(h, t); }
};

/// The values a buffer of type t holds after storing x (x itself for f32).
inline fvec rounded(const fvec& x, ptdp::DType t) { return Stored(x, t).values(); }

/// The floating storage types every op takes.
inline constexpr ptdp::DType kStorageTypes[] = {ptdp::DType::F32, ptdp::DType::BF16, ptdp::DType::F16};

}  // namespace ptdp_test

/// Checks got (float vector) against want (double vector) elementwise with atol + rtol*|want|.
#define CHECK_ALLCLOSE(got, want, atol, rtol)                                          \
  do {                                                                                 \
    const std::string ptdp_report_ = ::ptdp_test::allclose_report((got), (want), (atol), (rtol)); \
    INFO(ptdp_report_);                                                                \
    CHECK(ptdp_report_.empty());                                                       \
  } while (0)

/// Checks two float vectors for bitwise equality.
#define CHECK_BITEQUAL(got, want)                                                \
  do {                                                                           \
    const std::string ptdp_report_ = ::ptdp_test::equal_report((got), (want));   \
    INFO(ptdp_report_);                                                          \
    CHECK(ptdp_report_.empty());                                                 \
  } while (0)

/// Expects `expr` to throw ptdp::Error with code InvalidArgument and a non-empty message.
#define CHECK_INVALID_ARG(expr)                                                        \
  do {                                                                                 \
    bool ptdp_threw_ = false;                                                          \
    ptdp::ErrorCode ptdp_code_ = ptdp::ErrorCode::Internal;                            \
    std::string ptdp_msg_;                                                             \
    try {                                                                              \
      expr;                                                                            \
    } catch (const ptdp::Error& e) {                                                   \
      ptdp_threw_ = true;                                                              \
      ptdp_code_ = e.code();                                                           \
      ptdp_msg_ = e.what();                                                            \
    } catch (...) {                                                                    \
      ptdp_msg_ = "<exception of another type>";                                       \
    }                                                                                  \
    INFO("expression: " #expr);                                                        \
    INFO("message: " << ptdp_msg_);                                                    \
    CHECK(ptdp_threw_);                                                                \
    CHECK(ptdp_code_ == ptdp::ErrorCode::InvalidArgument);                             \
    CHECK_FALSE(ptdp_msg_.empty());                                                    \
  } while (0)

/// CHECK_INVALID_ARG, and the message contains `text` (the op and the argument it names).
#define CHECK_INVALID_ARG_MSG(expr, text)                                              \
  do {                                                                                 \
    std::string ptdp_msg_;                                                             \
    bool ptdp_invalid_ = false;                                                        \
    try {                                                                              \
      expr;                                                                            \
    } catch (const ptdp::Error& e) {                                                   \
      ptdp_invalid_ = e.code() == ptdp::ErrorCode::InvalidArgument;                    \
      ptdp_msg_ = e.what();                                                            \
    } catch (...) {                                                                    \
      ptdp_msg_ = "<exception of another type>";                                       \
    }                                                                                  \
    INFO("expression: " #expr);                                                        \
    INFO("message: " << ptdp_msg_);                                                    \
    CHECK(ptdp_invalid_);                                                              \
    CHECK_THAT(ptdp_msg_, Catch::Matchers::Contains(text));                            \
  } while (0)

namespace ptdp_test {

// ---- finite differences --------------------------------------------------------------------

/// Central finite-difference gradient of a scalar function of x, in double.
inline dvec fd_grad(const std::function<double(const dvec&)>& L, dvec x, double eps = 1e-6) {
  dvec g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + eps;
    const double lp = L(x);
    x[i] = x0 - eps;
    const double lm = L(x);
    x[i] = x0;
    g[i] = (lp - lm) / (2.0 * eps);
  }
  return g;
}

/// sum(G * y) in double.
inline double dot(const dvec& g, const dvec& y) {
  double s = 0.0;
  for (std::size_t i = 0; i < g.size(); ++i) s += g[i] * y[i];
  return s;
}

// Default tolerances of an fp32 kernel against a double finite difference.
inline constexpr double kFdAtol = 1e-4;
inline constexpr double kFdRtol = 1e-3;

// ---- references ----------------------------------------------------------------------------

/// C = alpha op(A) op(B) + beta C for one batch entry, with explicit leading dimensions.
inline void ref_gemm1(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                      const double* a, int64_t lda, const double* b, int64_t ldb, double beta,
                      double* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = ta ? a[p * lda + i] : a[i * lda + p];
        const double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        s += av * bv;
      }
      c[i * ldc + j] = alpha * s + beta * c[i * ldc + j];
    }
}

inline double gelu_ref(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

/// LayerNorm over rows of [rows, cols], biased variance; returns y, fills mean and rstd.
inline dvec layernorm_ref(const dvec& x, const dvec& gamma, const dvec& beta, int64_t rows,
                          int64_t cols, double eps, dvec* mean = nullptr,
                          dvec* rstd = nullptr) {
  dvec y(x.size());
  if (mean) mean->assign(static_cast<std::size_t>(rows), 0.0);
  if (rstd) rstd->assign(static_cast<std::size_t>(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = &x[static_cast<std::size_t>(r * cols)];
    double mu = 0.0;
    for (int64_t c = 0; c < cols; ++c) mu += xr[c];
    mu /= static_cast<double>(cols);
    double var = 0.0;
    for (int64_t c = 0; c < cols; ++c) var += (xr[c] - mu) * (xr[c] - mu);
    var /= static_cast<double>(cols);
    const double rs = 1.0 / std::sqrt(var + eps);
    for (int64_t c = 0; c < cols; ++c)
      y[static_cast<std::size_t>(r * cols + c)] =
          (xr[c] - mu) * rs * gamma[static_cast<std::size_t>(c)] +
          beta[static_cast<std::size_t>(c)];
    if (mean) (*mean)[static_cast<std::size_t>(r)] = mu;
    if (rstd) (*rstd)[static_cast<std::size_t>(r)] = rs;
  }
  return y;
}

/// softmax(scale * x) over the last dim of [batch, sq, sk]; causal: row i sees j <= i + sk - sq.
inline dvec softmax_ref(const dvec& x, int64_t batch, int64_t sq, int64_t sk, double scale,
                        bool causal) {
  dvec y(x.size(), 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < sq; ++i) {
      const std::size_t row = static_cast<std::size_t>((b * sq + i) * sk);
      const int64_t last = causal ? std::min(sk - 1, i + (sk - sq)) : sk - 1;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j <= last; ++j) mx = std::max(mx, scale * x[row + static_cast<std::size_t>(j)]);
      double s = 0.0;
      for (int64_t j = 0; j <= last; ++j) s += std::exp(scale * x[row + static_cast<std::size_t>(j)] - mx);
      for (int64_t j = 0; j <= last; ++j)
        y[row + static_cast<std::size_t>(j)] = std::exp(scale * x[row + static_cast<std::size_t>(j)] - mx) / s;
    }
  return y;
}

/// Global element index of local element l of a GlobalBlock, straight from its definition.
inline uint64_t global_index(const ptdp::GlobalBlock& b, int64_t l) {
  const int64_t i2 = l % b.shape[2];
  const int64_t i1 = (l / b.shape[2]) % b.shape[1];
  const int64_t i0 = l / (b.shape[2] * b.shape[1]);
  return static_cast<uint64_t>(((i0 + b.offset[0]) * b.global_shape[1] + (i1 + b.offset[1])) *
                                   b.global_shape[2] +
                               (i2 + b.offset[2]));
}

/// keep mask of a dropout descriptor, computed from philox_uniform directly.
inline std::vector<bool> dropout_mask_ref(const ptdp::DropoutDesc& d) {
  const int64_t n = d.block.numel();
  std::vector<bool> keep(static_cast<std::size_t>(n));
  for (int64_t l = 0; l < n; ++l)
    keep[static_cast<std::size_t>(l)] = ptdp::philox_uniform(d.rng, global_index(d.block, l)) >= d.p;
  return keep;
}

/// Per-row cross-entropy of [rows, v] logits with targets in [0, v).
inline dvec ce_ref(const dvec& logits, const std::vector<int32_t>& targets, int64_t rows,
                   int64_t v) {
  dvec loss(static_cast<std::size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const double* l = &logits[static_cast<std::size_t>(r * v)];
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < v; ++j) mx = std::max(mx, l[j]);
    double s = 0.0;
    for (int64_t j = 0; j < v; ++j) s += std::exp(l[j] - mx);
    loss[static_cast<std::size_t>(r)] = std::log(s) + mx - l[targets[static_cast<std::size_t>(r)]];
  }
  return loss;
}

// ---- 16-bit float references independent of base/half.h --------------------------------

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// f16 through the compiler's own IEEE half: _Float16 (GCC; clang from 15 on x86), or clang
// 14's __fp16, a storage type that converts to and from float the same way (round to nearest
// even); clang 14 builds the sanitizer and fuzz configurations (DEVELOPERS.md).
#if defined(__clang__) && __clang_major__ < 15
#define PTDP_REF_HALF __fp16
#else
#define PTDP_REF_HALF _Float16
#endif

/// The f16 bits of `f`, rounded by the compiler.
inline uint16_t f16_bits_of(float f) {
  const PTDP_REF_HALF h = static_cast<PTDP_REF_HALF>(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
/// The value of f16 bits `u`, converted by the compiler.
inline float f16_of_bits(uint16_t u) {
  PTDP_REF_HALF h;
  std::memcpy(&h, &u, 2);
  return static_cast<float>(h);
}

/// f32 -> bf16, round to nearest even, by comparing distances to the two neighbours in double.
inline uint16_t bf16_ref(float f) {
  if (std::isnan(f)) return 0x7fc0;  // only NaN-ness is checked for NaN inputs
  const uint32_t u = bits_of(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7f80u);  // inf
  const uint16_t lo = static_cast<uint16_t>(a >> 16);                  // truncation
  if ((a & 0xffffu) == 0) return static_cast<uint16_t>(sign | lo);
  const uint16_t hi = static_cast<uint16_t>(lo + 1);
  const double x = std::fabs(static_cast<double>(f));
  const double vlo = static_cast<double>(float_of(static_cast<uint32_t>(lo) << 16));
  const double vhi = hi == 0x7f80u ? std::ldexp(1.0, 128)
                                   : static_cast<double>(float_of(static_cast<uint32_t>(hi) << 16));
  const double dlo = x - vlo, dhi = vhi - x;
  uint16_t r;
  if (dlo < dhi) r = lo;
  else if (dhi < dlo) r = hi;
  else r = (lo & 1u) ? hi : lo;
  return static_cast<uint16_t>(sign | r);
}

}  // namespace ptdp_test
