// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3",
// SC'11), the counter-based generator behind every random number the engine draws.
//
// Randomness is a pure function of global coordinates (docs/architecture.md, principle 4): the key is the
// run's seed, the upper 64 counter bits name a stream (tensor name hash, step, microbatch,
// layer), the lower 64 bits are the global element index divided by four, and the element takes
// the output word (index mod 4). Any partition of a tensor therefore draws exactly the numbers
// the serial run draws for the same elements. Header-only and usable in CUDA kernels.
#pragma once

#include <cstdint>

#include "base/host_device.h"

namespace ptdp {

struct Philox4x32 {
  uint32_t v[4];
};

PTDP_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

/// One Philox4x32-10 block: 10 rounds over the 128-bit counter with the 64-bit key.
PTDP_HD Philox4x32 philox4x32_10(Philox4x32 ctr, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kM0, ctr.v[0], hi0, lo0);
    philox_mulhilo(kM1, ctr.v[2], hi1, lo1);
    ctr = Philox4x32{{hi1 ^ ctr.v[1] ^ key0, lo1, hi0 ^ ctr.v[3] ^ key1, lo0}};
    key0 += kW0;
    key1 += kW1;
  }
  return ctr;
}

/// A stream of random numbers: the seed (key) and a 64-bit stream id (counter high words).
struct PhiloxStream {
  uint64_t seed = 0;
  uint64_t stream = 0;
};

/// The four 32-bit words of block `block` of `s`: those of global elements 4*block .. 4*block+3.
PTDP_HD Philox4x32 philox_block(PhiloxStream s, uint64_t block) {
  const Philox4x32 ctr{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                        static_cast<uint32_t>(s.stream), static_cast<uint32_t>(s.stream >> 32)}};
  return philox4x32_10(ctr, static_cast<uint32_t>(s.seed), static_cast<uint32_t>(s.seed >> 32));
}

/// The 32 random bits that belong to global element `index` of `s`.
PTDP_HD uint32_t philox_bits(PhiloxStream s, uint64_t index) {
  return philox_block(s, index >> 2).v[index & 3u];
}

/// 32 random bits to a uniform float in [0, 1) with 24 random bits.
PTDP_HD float philox_bits_to_uniform(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

/// Uniform float in [0, 1) for global element `index`.
PTDP_HD float philox_uniform(PhiloxStream s, uint64_t index) {
  return philox_bits_to_uniform(philox_bits(s, index));
}

/// Standard normal for global element `index` by Box-Muller on two 32-bit words drawn from
/// the paired stream (stream id with its top bit flipped), so one element needs one block.
PTDP_HD double philox_normal(PhiloxStream s, uint64_t index) {
  const uint32_t a = philox_bits(s, index);
  const uint32_t b = philox_bits(PhiloxStream{s.seed, s.stream ^ 0x8000000000000000ull}, index);
  // u1 in (0, 1], u2 in [0, 1): log(u1) is finite.
  const double u1 = (static_cast<double>(a) + 1.0) * (1.0 / 4294967296.0);
  const double u2 = static_cast<double>(b) * (1.0 / 4294967296.0);
#if defined(__CUDA_ARCH__)
  return sqrt(-2.0 * log(u1)) * cospi(2.0 * u2);
#else
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  return __builtin_sqrt(-2.0 * __builtin_log(u1)) * __builtin_cos(kTwoPi * u2);
#endif
}

/// 64-bit FNV-1a hash of a name, for stream ids keyed by tensor names.
PTDP_HD uint64_t philox_name_hash(const char* name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *name; ++name) {
    h ^= static_cast<unsigned char>(*name);
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace ptdp
