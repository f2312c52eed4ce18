// Bit-exact conversions between f32 and the 16-bit float formats (bfloat16, IEEE binary16),
// round-to-nearest-even, NaN stays NaN, overflow goes to infinity. Usable on host and device.
#pragma once

#include <cstdint>
#include <cstring>

#include "base/host_device.h"

namespace ptdp {

PTDP_HD uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

PTDP_HD float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

PTDP_HD uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

PTDP_HD float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

PTDP_HD uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs >= 0x38800000u) {  // normal f16 range (>= 2^-14)
    const uint32_t mant_round = abs + 0xfffu + ((abs >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((mant_round - 0x38000000u) >> 13));
  }
  if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
  // Subnormal f16: value = m * 2^-24 with m = round(abs_value * 2^24).
  const uint32_t exp = abs >> 23;                       // biased f32 exponent, 102..112
  const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;  // implicit one
  const uint32_t shift = 126u - exp;                    // 14..24
  const uint32_t m = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  const uint32_t rounded = m + ((rem > half || (rem == half && (m & 1u))) ? 1u : 0u);
  return static_cast<uint16_t>(sign | rounded);
}

PTDP_HD float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return f32_from_bits(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {
    if (mant == 0) return f32_from_bits(sign);
    // Subnormal: normalise.
    int e = -1;
    do {
      mant <<= 1;
      ++e;
    } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return f32_from_bits(sign | (static_cast<uint32_t>(112 - e) << 23) | (mant << 13));
  }
  return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace ptdp
