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

inline float exp_simd(float x) {
  // x in [-87, 87] after clamping; e^x = 2^n e^r with r in [-ln2/2, ln2/2]. Adding and
  // subtracting 1.5 * 2^23 rounds to the nearest integer without a library call.
  x = x < -87.0f ? -87.0f : x;
  x = x > 87.0f ? 87.0f : x;
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723212e-6f;  // Cody-Waite
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
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
