// Philox4x32-10 known-answer vectors (Random123 kat_vectors) and the element-index mapping of
// philox_bits / philox_uniform / philox_normal.
#include <catch2/catch.hpp>

#include "base/philox.h"
#include "kernels/cpu/dropout_mask.h"
#include "reference.h"

using ptdp::Philox4x32;
using ptdp::PhiloxStream;

namespace {
void check_kat(Philox4x32 ctr, uint32_t k0, uint32_t k1, Philox4x32 want) {
  const Philox4x32 got = ptdp::philox4x32_10(ctr, k0, k1);
  for (int i = 0; i < 4; ++i) {
    INFO("word " << i << " got 0x" << std::hex << got.v[i] << " expected 0x" << want.v[i]);
    CHECK(got.v[i] == want.v[i]);
  }
}
}  // namespace

TEST_CASE("philox4x32_10 known-answer vectors", "[philox]") {
  check_kat({{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}});
  check_kat({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu,
            {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}});
  check_kat({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u,
            {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}});
}

TEST_CASE("philox_bits maps an element index to a counter block and an output word",
          "[philox]") {
  const PhiloxStream s{0x0123456789abcdefull, 0xfedcba9876543210ull};
  const uint64_t idx[] = {0, 1, 2, 3, 4, 7, 1001, 0x123456789ull, 0xfffffffffffffffull};
  for (uint64_t i : idx) {
    const uint64_t blk = i / 4;
    const Philox4x32 ctr{{static_cast<uint32_t>(blk & 0xffffffffu), static_cast<uint32_t>(blk >> 32),
                          0x76543210u, 0xfedcba98u}};
    const Philox4x32 out = ptdp::philox4x32_10(ctr, 0x89abcdefu, 0x01234567u);
    INFO("index " << i);
    CHECK(ptdp::philox_bits(s, i) == out.v[i % 4]);
    CHECK(ptdp::philox_uniform(s, i) ==
          static_cast<float>(static_cast<double>(out.v[i % 4] >> 8) / 16777216.0));
  }
  // Seed and stream both matter; neighbouring indices in one block differ.
  CHECK(ptdp::philox_bits({1, 0}, 5) != ptdp::philox_bits({2, 0}, 5));
  CHECK(ptdp::philox_bits({1, 0}, 5) != ptdp::philox_bits({1, 1}, 5));
  CHECK(ptdp::philox_bits({1, 0}, 4) != ptdp::philox_bits({1, 0}, 5));
  // The zero-key, zero-counter block is the first KAT vector.
  CHECK(ptdp::philox_bits({0, 0}, 0) == 0x6627e8d5u);
  CHECK(ptdp::philox_bits({0, 0}, 3) == 0x9b00dbd8u);
}

TEST_CASE("philox_uniform is uniform on 0 <= u < 1, philox_normal is standard normal",
          "[philox]") {
  const PhiloxStream s{42, 7};
  const int n = 100000;
  double sum = 0.0, sum2 = 0.0;
  float lo = 1.0f, hi = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float u = ptdp::philox_uniform(s, static_cast<uint64_t>(i));
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
    sum2 += static_cast<double>(u) * u;
  }
  CHECK(lo >= 0.0f);
  CHECK(hi < 1.0f);
  CHECK(lo < 0.001f);
  CHECK(hi > 0.999f);
  const double mean = sum / n;
  CHECK(std::fabs(mean - 0.5) < 0.005);                           // sd of the mean ~ 0.0009
  CHECK(std::fabs(sum2 / n - mean * mean - 1.0 / 12.0) < 0.002);  // variance 1/12

  // The largest 24-bit value maps below 1.
  CHECK(static_cast<float>(0xffffffu) * (1.0f / 16777216.0f) < 1.0f);

  double ns = 0.0, ns2 = 0.0, ns4 = 0.0;
  for (int i = 0; i < n; ++i) {
    const double z = ptdp::philox_normal(s, static_cast<uint64_t>(i));
    REQUIRE(std::isfinite(z));
    ns += z;
    ns2 += z * z;
    ns4 += z * z * z * z;
  }
  CHECK(std::fabs(ns / n) < 0.02);           // sd of the mean ~ 0.003
  CHECK(std::fabs(ns2 / n - 1.0) < 0.03);    // sd ~ 0.0045
  CHECK(std::fabs(ns4 / n - 3.0) < 0.2);     // kurtosis of a normal
}

TEST_CASE("philox_words gives philox_block's words for every batch length", "[philox][dropout]") {
  // The vector versions do 4 or 8 blocks at a time: every length up to a batch, so each tail is
  // seen, and first blocks on both sides of 2^32 (the counter's second word changes there).
  const uint64_t firsts[] = {0, 5, (uint64_t{1} << 32) - 3, uint64_t{0xfffffffffffffff0}};
  const PhiloxStream streams[] = {{1234, 99}, {0xffffffffffffffffull, 0x8000000000000001ull}};
  std::size_t wrong = 0;
  for (const PhiloxStream& s : streams)
    for (uint64_t first : firsts)
      for (int n = 1; n <= ptdp::cpu::kMaskBlocksPerBatch; ++n) {
        std::vector<uint32_t> out(4 * ptdp::cpu::kMaskBlocksPerBatch + 4, 0xdeadbeefu);
        ptdp::cpu::philox_words(s, first, n, out.data());
        for (int b = 0; b < n; ++b) {
          const Philox4x32 want = ptdp::philox_block(s, first + static_cast<uint64_t>(b));
          for (int w = 0; w < 4; ++w) wrong += out[static_cast<std::size_t>(4 * b + w)] != want.v[w];
        }
        // Nothing past the n blocks is written.
        for (std::size_t i = static_cast<std::size_t>(4 * n); i < out.size(); ++i) wrong += out[i] != 0xdeadbeefu;
      }
  CHECK(wrong == 0);
}
