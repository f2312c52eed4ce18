// exp in fp32 without branches or library calls, so the compiler can run it across vector
// registers inside `#pragma omp simd` loops (std::exp is a scalar call per element: it made
// cross-entropy compute-bound at a few GB/s).
//
// Computed in double and rounded once to float: exp(x) = 2^n exp(r), n = round(x / ln 2),
// r = x - n ln 2 (ln 2 split in two so n ln 2 is exact), |r| <= ln 2 / 2, and exp(r) by its
// Taylor series to r^11 (truncation below 1e-14, relative). The float result is the correctly
// rounded exp(x) except in a handful of cases per billion, so it agrees with glibc's expf
// (within 0.502 ulp) on all but about 0.06% of arguments, by one ulp there: the engine's
// cross-entropy moved by no more than the library's own rounding. exp(-inf) = 0,
// exp(+inf) = +inf, NaN stays NaN, results below FLT_MIN are denormal and below half the
// smallest denormal 0. Built without contraction (-ffp-contract=off) the same bits come out of
// every instruction set and of the scalar tail of a loop.
#pragma once

#include <cstdint>
#include <cstring>

namespace ptdp::cpu {

__attribute__((always_inline)) inline float exp_f32(float x) {
  constexpr double kLog2e = 1.4426950408889634074;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // 32 significant bits: n kLn2Hi exact
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  constexpr double kRound = 6755399441055744.0;  // 1.5 * 2^52: x + kRound rounds x to an integer
  // Clamped so n stays in [-159, 129] (exp(-110) and exp(89) round to 0 and inf in float);
  // comparisons with NaN are false, so NaN goes through.
  double xd = x;
  xd = xd < -110.0 ? -110.0 : xd;
  xd = xd > 89.0 ? 89.0 : xd;
  const double t = xd * kLog2e + kRound;
  const double nf = t - kRound;
  uint64_t tb, rb;
  std::memcpy(&tb, &t, sizeof tb);
  std::memcpy(&rb, &kRound, sizeof rb);
  const uint64_t n = tb - rb;  // the integer nf (two's complement), from t's low bits
  const double r = (xd - nf * kLn2Hi) - nf * kLn2Lo;
  double p = 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  // 2^n is a normal double for every n here, so p 2^n is exact and the cast rounds once.
  const uint64_t sb = (n + 1023u) << 52;
  double s;
  std::memcpy(&s, &sb, sizeof s);
  return static_cast<float>(p * s);
}

// exp in fp32 arithmetic only, for the attention kernels' probability rows: twice the vector
// width of exp_f32 and half its polynomial, within 1.4 * 2^-24 relative of exp(x) (every float
// in [-87, 88] checked against double exp) instead of correctly rounded: the probabilities feed
// fp32 GEMMs whose own rounding is larger.
// exp(x) = 2^n exp(r), n = round(x / ln 2), r = x - n ln 2 (ln 2 split in two, n ln2_hi exact),
// exp(r) by Cephes' degree-7 polynomial on |r| <= ln 2 / 2. Arguments below -87 give 0 (their
// exponentials are below FLT_MIN: no denormals), above 88 exp(88); NaN stays NaN. Built without
// contraction (-ffp-contract=off) every instruction set computes the same bits.
__attribute__((always_inline)) inline float exp_f32_fast(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // 9 significant bits: n kLn2Hi exact for |n| < 2^15
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: x + kRound rounds x to an integer
  float xc = x < -87.0f ? -87.0f : x;
  xc = xc > 88.0f ? 88.0f : xc;
  const float t = xc * kLog2e + kRound;
  const float nf = t - kRound;
  uint32_t tb, rb;
  std::memcpy(&tb, &t, sizeof tb);
  std::memcpy(&rb, &kRound, sizeof rb);
  const uint32_t n = tb - rb;  // the integer nf (two's complement), from t's low bits
  const float r = (xc - nf * kLn2Hi) - nf * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // n is in [-126, 127]: 2^n is a normal float.
  const uint32_t sb = (n + 127u) << 23;
  float s;
  std::memcpy(&s, &sb, sizeof s);
  const float y = p * s;
  return x < -87.0f ? 0.0f : y;
}

}  // namespace ptdp::cpu
