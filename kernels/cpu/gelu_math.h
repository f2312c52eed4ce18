// GeLU (tanh approximation, as GPT-2 and Megatron use it) and its derivative in fp32, shared by
// the GeLU ops and the GEMM epilogues so that both paths agree bit for bit.
//
// The tanh is computed from an exp written for the vectorizer (range reduction by ln 2, a
// degree-7 polynomial, the exponent built in the bits), since the C library's scalar tanhf made
// GeLU the slowest op of a layer. Absolute error of the tanh: below 1e-7 over the whole range.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace ptdp::cpu {

inline constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
inline constexpr float kGeluCoeff = 0.044715f;

inline constexpr float kExpRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
inline constexpr int32_t kExpBitsLow = std::bit_cast<int32_t>(87.0f);   // e^-87: still a normal float
inline constexpr int32_t kExpBitsHigh = std::bit_cast<int32_t>(88.5f);  // rounds to 2^128: +inf

/// e^x for the vectorizer (range reduction by ln 2, a degree-7 polynomial, relative error ~1e-7)
/// for x in [-87, 88.3]; below, e^-87; above, +inf. The clamp and the float-to-int conversion
/// are done on the bits: under -ftrapping-math (GCC's default) a float compare or conversion
/// keeps the loop scalar. Shared by GeLU's tanh and SwiGLU's sigmoid.
inline float exp_simd(float x) {
  const int32_t a = std::bit_cast<int32_t>(std::fabs(x));  // ordered like |x|
  const int32_t neg = std::bit_cast<int32_t>(x) >> 31;      // all ones where x < 0
  const int32_t limit = (kExpBitsLow & neg) | (kExpBitsHigh & ~neg);
  const int32_t over = -static_cast<int32_t>(a > limit);    // all ones where clamped
  x = std::copysign(std::bit_cast<float>((a & ~over) | (limit & over)), x);
  // e^x = 2^n e^r with r in [-ln2/2, ln2/2].
  const float big = x * 1.44269504088896341f + kExpRound;  // n + 1.5 * 2^23, n = round(x / ln 2)
  const float n = big - kExpRound;
  const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723212e-6f;  // Cody-Waite
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // n (-126 .. 128) sits in the low mantissa bits of big; n = 128 makes the exponent all ones.
  const int32_t ni = std::bit_cast<int32_t>(big) - std::bit_cast<int32_t>(kExpRound);
  return p * std::bit_cast<float>((ni + 127) << 23);
}

inline float tanh_simd(float u) {
  const float a = std::fabs(u);
  // tanh |u| = 1 - 2 / (e^{2|u|} + 1); near 0 the odd series avoids the cancellation.
  const float big = 1.0f - 2.0f / (exp_simd(2.0f * a) + 1.0f);
  const float a2 = a * a;
  const float small =
      a * (1.0f + a2 * (-1.0f / 3.0f + a2 * (2.0f / 15.0f + a2 * (-17.0f / 315.0f))));
  const float w = static_cast<float>(a < 0.0625f);  // a blend, not a branch: the loop vectorizes
  const float t = big + w * (small - big);
  return std::copysign(t, u);
}

/// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
inline float gelu_f32(float v) {
  return 0.5f * v * (1.0f + tanh_simd(kGeluSqrt2OverPi * (v + kGeluCoeff * v * v * v)));
}

/// d gelu(x) / dx.
inline float gelu_grad_f32(float v) {
  const float t = tanh_simd(kGeluSqrt2OverPi * (v + kGeluCoeff * v * v * v));
  const float dt = kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * v * v) * (1.0f - t * t);
  return 0.5f * (1.0f + t) + 0.5f * v * dt;
}

}  // namespace ptdp::cpu
