// cast between f32, bf16 and f16: round to nearest even, NaN stays NaN, overflow to infinity,
// f16 subnormals. f16 is checked against GCC's _Float16 conversions (exhaustively where the
// source is 16-bit), bf16 against a distance-based reference.
#include <catch2/catch.hpp>

#include <cstdio>

#include "reference.h"

using namespace ptdp_test;
using ptdp::DType;

namespace {

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::vector<uint16_t> all_16bit() {
  std::vector<uint16_t> v(65536);
  for (uint32_t i = 0; i < 65536; ++i) v[i] = static_cast<uint16_t>(i);
  return v;
}

/// Edge-case floats for the f32 -> 16-bit direction, plus random bit patterns and random
/// values in and around the f16 range, plus exact f16 ties.
std::vector<float> test_floats() {
  std::vector<float> v;
  const float inf = std::numeric_limits<float>::infinity();
  for (float f : {0.0f, -0.0f, 1.0f, -1.0f, 0.1f, 1.0f / 3.0f, 65504.0f, -65504.0f, 65519.0f,
                  65519.996f, 65520.0f, -65520.0f, 65536.0f, 1e6f, -1e6f, 3.4028235e38f,
                  -3.4028235e38f, inf, -inf, 6.1035156e-05f /* 2^-14 */, 6.0975552e-05f,
                  std::ldexp(1.0f, -24), std::ldexp(1.0f, -25) /* tie to 0 */,
                  2.9802326e-08f, std::ldexp(1.5f, -24) /* tie to 2^-23 */,
                  std::ldexp(2.5f, -24) /* tie to 2 * 2^-24 */, std::ldexp(1.0f, -26), 1e-10f,
                  1.4e-45f /* f32 denormal */, 1.1754942e-38f, 339.8f, 2049.0f, 2051.0f,
                  4097.0f, 1.00048828125f /* 1 + 2^-11: tie to even 1 */,
                  1.00146484375f /* 1 + 3*2^-11: tie to even up */})
    v.push_back(f);
  // NaNs: quiet, signalling-looking with only low mantissa bits set, negative.
  for (uint32_t u : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0xffc00001u, 0x7f802000u})
    v.push_back(float_of(u));
  // Every f16 midpoint between neighbours (exact ties) for a spread of exponents, and the
  // values one f32 ulp either side of them.
  for (uint32_t h = 0; h < 0x7c00u; h += 37) {
    const double a = static_cast<double>(static_cast<float>(f16_of_bits(static_cast<uint16_t>(h))));
    const double b = static_cast<double>(static_cast<float>(f16_of_bits(static_cast<uint16_t>(h + 1))));
    const float mid = static_cast<float>((a + b) / 2);  // exact in f32
    v.push_back(mid);
    v.push_back(-mid);
    v.push_back(std::nextafter(mid, 0.0f));
    v.push_back(std::nextafter(mid, 1e9f));
  }
  // Ties in the bf16 sense: low 16 bits exactly 0x8000 with even and odd upper halves.
  for (uint32_t hi : {0x3f80u, 0x3f81u, 0x4049u, 0x7f7fu, 0x0001u, 0x8000u, 0xbf80u, 0xbf81u}) {
    v.push_back(float_of((hi << 16) | 0x8000u));
    v.push_back(float_of((hi << 16) | 0x7fffu));
    v.push_back(float_of((hi << 16) | 0x8001u));
  }
  Rand r(2024);
  for (int i = 0; i < 200000; ++i) v.push_back(float_of(r.bits()));  // any bit pattern
  std::uniform_real_distribution<float> wide(-70000.0f, 70000.0f), narrow(-1e-4f, 1e-4f),
      unit(-2.0f, 2.0f);
  for (int i = 0; i < 50000; ++i) {
    v.push_back(wide(r.g));
    v.push_back(narrow(r.g));  // f16 subnormal range
    v.push_back(unit(r.g));
  }
  return v;
}

bool is_f16_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool is_bf16_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

}  // namespace

TEST_CASE("cast f16 -> f32 is exact for all 65536 bit patterns", "[cast]") {
  const std::vector<uint16_t> src = all_16bit();
  std::vector<float> dst(src.size());
  be().cast(src.data(), DType::F16, dst.data(), DType::F32, static_cast<int64_t>(src.size()));
  std::size_t bad = 0;
  std::string first;
  for (std::size_t i = 0; i < src.size(); ++i) {
    const float want = static_cast<float>(f16_of_bits(src[i]));
    const bool ok = std::isnan(want) ? std::isnan(dst[i]) : bits_of(dst[i]) == bits_of(want);
    if (!ok && bad++ == 0)
      first = "f16 " + hex(src[i]) + " -> " + hex(bits_of(dst[i])) + ", expected " + hex(bits_of(want));
  }
  INFO(bad << " mismatches; first: " << first);
  CHECK(bad == 0);
}

TEST_CASE("cast f16 -> f32 -> f16 round-trips all 65536 bit patterns", "[cast]") {
  const std::vector<uint16_t> src = all_16bit();
  std::vector<float> mid(src.size());
  std::vector<uint16_t> back(src.size(), 0xdead);
  const int64_t n = static_cast<int64_t>(src.size());
  be().cast(src.data(), DType::F16, mid.data(), DType::F32, n);
  be().cast(mid.data(), DType::F32, back.data(), DType::F16, n);
  std::size_t bad = 0;
  std::string first;
  for (std::size_t i = 0; i < src.size(); ++i) {
    const bool ok = is_f16_nan(src[i]) ? is_f16_nan(back[i]) : back[i] == src[i];
    if (!ok && bad++ == 0) first = hex(src[i]) + " -> " + hex(back[i]);
  }
  INFO(bad << " mismatches; first: " << first);
  CHECK(bad == 0);
}

TEST_CASE("cast f32 -> f16 rounds like _Float16 (random, ties, subnormals, overflow, NaN)",
          "[cast]") {
  const std::vector<float> src = test_floats();
  std::vector<uint16_t> dst(src.size(), 0xdead);
  be().cast(src.data(), DType::F32, dst.data(), DType::F16, static_cast<int64_t>(src.size()));
  std::size_t bad = 0;
  std::string first;
  for (std::size_t i = 0; i < src.size(); ++i) {
    const uint16_t want = f16_bits_of(src[i]);
    const bool ok = std::isnan(src[i]) ? is_f16_nan(dst[i]) : dst[i] == want;
    if (!ok && bad++ < 5)
      first += "f32 " + hex(bits_of(src[i])) + " (" + std::to_string(src[i]) + ") -> " +
               hex(dst[i]) + ", expected " + hex(want) + "\n";
  }
  INFO(bad << " mismatches of " << src.size() << "; first:\n" << first);
  CHECK(bad == 0);
}

TEST_CASE("cast f32 -> f16 spot values", "[cast]") {
  struct C {
    float f;
    uint16_t h;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const C cases[] = {{1.0f, 0x3c00}, {-2.0f, 0xc000}, {65504.0f, 0x7bff}, {65519.0f, 0x7bff},
                     {65520.0f, 0x7c00}, {1e9f, 0x7c00}, {-1e9f, 0xfc00}, {inf, 0x7c00},
                     {-inf, 0xfc00}, {-0.0f, 0x8000}, {std::ldexp(1.0f, -24), 0x0001},
                     {std::ldexp(1.0f, -25), 0x0000}, {std::ldexp(1.5f, -24), 0x0002},
                     {std::ldexp(2.5f, -24), 0x0002}, {std::ldexp(1.0f, -14), 0x0400},
                     {std::ldexp(1023.0f, -24), 0x03ff}, {-std::ldexp(3.0f, -25), 0x8002},
                     {1.00048828125f, 0x3c00}, {1.00146484375f, 0x3c02}};
  std::vector<float> src;
  for (const C& c : cases) src.push_back(c.f);
  std::vector<uint16_t> dst(src.size());
  be().cast(src.data(), DType::F32, dst.data(), DType::F16, static_cast<int64_t>(src.size()));
  for (std::size_t i = 0; i < src.size(); ++i) {
    INFO("f32 " << src[i] << " -> " << hex(dst[i]) << ", expected " << hex(cases[i].h));
    CHECK(dst[i] == cases[i].h);
  }
}

TEST_CASE("cast bf16 -> f32 is exact for all 65536 bit patterns", "[cast]") {
  const std::vector<uint16_t> src = all_16bit();
  std::vector<float> dst(src.size());
  be().cast(src.data(), DType::BF16, dst.data(), DType::F32, static_cast<int64_t>(src.size()));
  std::size_t bad = 0;
  std::string first;
  for (std::size_t i = 0; i < src.size(); ++i) {
    const uint32_t want = static_cast<uint32_t>(src[i]) << 16;
    const bool ok = is_bf16_nan(src[i]) ? std::isnan(dst[i]) : bits_of(dst[i]) == want;
    if (!ok && bad++ == 0) first = hex(src[i]) + " -> " + hex(bits_of(dst[i]));
  }
  INFO(bad << " mismatches; first: " << first);
  CHECK(bad == 0);
}

TEST_CASE("cast f32 -> bf16 rounds to nearest even (random, ties, overflow, NaN)", "[cast]") {
  const std::vector<float> src = test_floats();
  std::vector<uint16_t> dst(src.size(), 0xdead);
  be().cast(src.data(), DType::F32, dst.data(), DType::BF16, static_cast<int64_t>(src.size()));
  std::size_t bad = 0;
  std::string first;
  for (std::size_t i = 0; i < src.size(); ++i) {
    const uint16_t want = bf16_ref(src[i]);
    const bool ok = std::isnan(src[i]) ? is_bf16_nan(dst[i]) : dst[i] == want;
    if (!ok && bad++ < 5)
      first += "f32 " + hex(bits_of(src[i])) + " -> " + hex(dst[i]) + ", expected " + hex(want) + "\n";
  }
  INFO(bad << " mismatches of " << src.size() << "; first:\n" << first);
  CHECK(bad == 0);
  // Spot values: ties to even, overflow of the largest finite value's upper half.
  const float spot[] = {float_of(0x3f808000u), float_of(0x3f818000u), float_of(0x7f7f8000u),
                        float_of(0x7f7f7fffu), float_of(0x7f800001u)};
  const uint16_t want_spot[] = {0x3f80, 0x3f82, 0x7f80, 0x7f7f, 0};
  std::vector<uint16_t> out(5);
  be().cast(spot, DType::F32, out.data(), DType::BF16, 5);
  for (int i = 0; i < 4; ++i) {
    INFO("f32 " << hex(bits_of(spot[i])) << " -> " << hex(out[static_cast<std::size_t>(i)]));
    CHECK(out[static_cast<std::size_t>(i)] == want_spot[i]);
  }
  INFO("NaN 0x7f800001 -> " << hex(out[4]) << " must stay NaN (truncation would give inf)");
  CHECK(is_bf16_nan(out[4]));
}

TEST_CASE("cast between bf16 and f16, and same-type copies", "[cast]") {
  const std::vector<uint16_t> src = all_16bit();
  const int64_t n = static_cast<int64_t>(src.size());
  SECTION("bf16 -> f16 (exact widening, then f16 rounding)") {
    std::vector<uint16_t> dst(src.size());
    be().cast(src.data(), DType::BF16, dst.data(), DType::F16, n);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < src.size(); ++i) {
      const float f = float_of(static_cast<uint32_t>(src[i]) << 16);
      const bool ok = std::isnan(f) ? is_f16_nan(dst[i]) : dst[i] == f16_bits_of(f);
      bad += !ok;
    }
    CHECK(bad == 0);
  }
  SECTION("f16 -> bf16") {
    std::vector<uint16_t> dst(src.size());
    be().cast(src.data(), DType::F16, dst.data(), DType::BF16, n);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < src.size(); ++i) {
      const float f = static_cast<float>(f16_of_bits(src[i]));
      const bool ok = std::isnan(f) ? is_bf16_nan(dst[i]) : dst[i] == bf16_ref(f);
      bad += !ok;
    }
    CHECK(bad == 0);
  }
  SECTION("same type copies") {
    // NaN payloads are not specified; every other pattern is copied unchanged.
    std::vector<uint16_t> dst(src.size());
    be().cast(src.data(), DType::F16, dst.data(), DType::F16, n);
    std::vector<uint16_t> dst2(src.size());
    be().cast(src.data(), DType::BF16, dst2.data(), DType::BF16, n);
    std::size_t bad16 = 0, badb = 0;
    for (std::size_t i = 0; i < src.size(); ++i) {
      bad16 += !(is_f16_nan(src[i]) ? is_f16_nan(dst[i]) : dst[i] == src[i]);
      badb += !(is_bf16_nan(src[i]) ? is_bf16_nan(dst2[i]) : dst2[i] == src[i]);
    }
    CHECK(bad16 == 0);
    CHECK(badb == 0);
    Rand r(3);
    const fvec f = r.uniform(33);
    fvec g(33);
    be().cast(f.data(), DType::F32, g.data(), DType::F32, 33);
    CHECK_BITEQUAL(g, f);
  }
}
