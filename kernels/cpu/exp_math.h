// exp in fp32 without branches or library calls, so the compiler can run it across a vector
// register inside `#pragma omp simd` loops (std::exp is a scalar call per element: it made
// cross-entropy compute-bound at a few GB/s).
//
// exp(x) = 2^n exp(r), n = round(x / ln 2), r = x - n ln 2 (ln 2 split in two so n ln 2 is
// exact), |r| <= ln 2 / 2, and exp(r) by its Taylor series to r^7 (truncation below 6e-9,
// relative). The result is within 2 ulp of the exact value over the whole float range:
// exp(-inf) = 0, exp(+inf) = +inf, NaN stays NaN, results below FLT_MIN are denormal and below
// half the smallest denormal 0. Built without contraction (-ffp-contract=off) the same bits
// come out of every instruction set and of the scalar tail of a loop.
#pragma once

#include <cstdint>
#include <cstring>

namespace ptdp::cpu {

__attribute__((always_inline)) inline float exp_f32(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // 16 significant bits: n kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723212e-6f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: x + kRound rounds x to an integer
  // Clamped so n stays in [-159, 128]; comparisons with NaN are false, so NaN goes through.
  float xc = x < -110.0f ? -110.0f : x;
  xc = xc > 89.0f ? 89.0f : xc;
  const float t = xc * kLog2e + kRound;
  const float nf = t - kRound;
  uint32_t tb, rb;
  std::memcpy(&tb, &t, sizeof tb);
  std::memcpy(&rb, &kRound, sizeof rb);
  const int32_t n = static_cast<int32_t>(tb - rb);  // the integer nf, from t's low bits
  const float r = (xc - nf * kLn2Hi) - nf * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n as two normal factors, 2^n1 2^n2 with n1, n2 in [-80, 64]: p 2^n1 is exact, and the
  // one rounding of the second product also gives the denormal results.
  const int32_t n1 = n >> 1, n2 = n - n1;
  const uint32_t s1b = static_cast<uint32_t>(n1 + 127) << 23;
  const uint32_t s2b = static_cast<uint32_t>(n2 + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &s1b, sizeof s1);
  std::memcpy(&s2, &s2b, sizeof s2);
  return p * s1 * s2;
}

}  // namespace ptdp::cpu
