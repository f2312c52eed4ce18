// Strided sub-matrix copy and fill against direct index arithmetic.
#include <catch2/catch.hpp>

#include <limits>
#include <vector>

#include "base/error.h"
#include "kernels/backend.h"

TEST_CASE("copy_2d moves a sub-matrix between leading dimensions", "[copy_2d]") {
  ptdp::Backend& be = ptdp::cpu_backend();
  const int64_t rows = 5, cols = 3, ld_src = 7, ld_dst = 4;
  std::vector<float> src(static_cast<size_t>(rows * ld_src)), dst(static_cast<size_t>(rows * ld_dst), -1.0f);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  be.copy_2d(dst.data(), ld_dst, src.data() + 2, ld_src, ptdp::DType::F32, rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < ld_dst; ++c) {
      const float want = c < cols ? static_cast<float>(r * ld_src + 2 + c) : -1.0f;
      REQUIRE(dst[static_cast<size_t>(r * ld_dst + c)] == want);
    }
  }
  CHECK_THROWS_AS(be.copy_2d(dst.data(), 2, src.data(), ld_src, ptdp::DType::F32, rows, cols), ptdp::Error);
  CHECK_THROWS_AS(be.copy_2d(dst.data(), ld_dst, src.data(), ld_src, ptdp::DType::F32, -1, cols), ptdp::Error);
}

TEST_CASE("fill_2d sets only the sub-matrix", "[copy_2d]") {
  ptdp::Backend& be = ptdp::cpu_backend();
  const int64_t rows = 4, ld = 6;
  std::vector<float> x(static_cast<size_t>(rows * ld), 1.0f);
  const float inf = std::numeric_limits<float>::infinity();
  be.fill_2d(x.data() + 4, ptdp::DType::F32, ld, rows, 2, -inf);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < ld; ++c) REQUIRE(x[static_cast<size_t>(r * ld + c)] == (c >= 4 ? -inf : 1.0f));
  CHECK_THROWS_AS(be.fill_2d(x.data(), ptdp::DType::F32, 1, rows, 2, 0.0f), ptdp::Error);
}

TEST_CASE("copy_2d copies elements of any dtype as they are", "[copy_2d]") {
  ptdp::Backend& be = ptdp::cpu_backend();
  const int64_t rows = 3, cols = 2, ld_src = 5, ld_dst = 3;
  std::vector<uint16_t> src16(static_cast<size_t>(rows * ld_src)),
      dst16(static_cast<size_t>(rows * ld_dst), 0xffff);
  std::vector<int64_t> src64(src16.size()), dst64(dst16.size(), -1);
  for (size_t i = 0; i < src16.size(); ++i) {
    src16[i] = static_cast<uint16_t>(0x3c00 + i);
    src64[i] = (int64_t{1} << 40) + static_cast<int64_t>(i);
  }
  be.copy_2d(dst16.data(), ld_dst, src16.data() + 1, ld_src, ptdp::DType::BF16, rows, cols);
  be.copy_2d(dst64.data(), ld_dst, src64.data() + 1, ld_src, ptdp::DType::I64, rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < ld_dst; ++c) {
      const size_t at = static_cast<size_t>(r * ld_dst + c),
                   from = static_cast<size_t>(r * ld_src + 1 + c);
      CHECK(dst16[at] == (c < cols ? src16[from] : 0xffff));
      CHECK(dst64[at] == (c < cols ? src64[from] : -1));
    }
  }
}

TEST_CASE("fill_2d rounds the value to a 16-bit storage type", "[copy_2d]") {
  ptdp::Backend& be = ptdp::cpu_backend();
  const int64_t rows = 2, ld = 4;
  std::vector<uint16_t> x(static_cast<size_t>(rows * ld), 0x1234);
  be.fill_2d(x.data() + 1, ptdp::DType::F16, ld, rows, 2, -std::numeric_limits<float>::infinity());
  be.fill_2d(x.data() + 3, ptdp::DType::BF16, ld, rows, 1, 1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    CHECK(x[static_cast<size_t>(r * ld)] == 0x1234);
    CHECK(x[static_cast<size_t>(r * ld + 1)] == 0xfc00);  // f16 -inf
    CHECK(x[static_cast<size_t>(r * ld + 2)] == 0xfc00);
    CHECK(x[static_cast<size_t>(r * ld + 3)] == 0x3f80);  // bf16 1.0
  }
  CHECK_THROWS_AS(be.fill_2d(x.data(), ptdp::DType::I32, ld, rows, 2, 0.0f), ptdp::Error);
}
