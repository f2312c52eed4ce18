// Strided sub-matrix copy and fill against direct index arithmetic.
#include <catch2/catch.hpp>

#include <limits>
#include <vector>

#include "kernels/backend.h"
#include "kernels/error.h"

TEST_CASE("copy_2d moves a sub-matrix between leading dimensions", "[copy_2d]") {
  ptdp::Backend& be = ptdp::cpu_backend();
  const int64_t rows = 5, cols = 3, ld_src = 7, ld_dst = 4;
  std::vector<float> src(static_cast<size_t>(rows * ld_src)), dst(static_cast<size_t>(rows * ld_dst), -1.0f);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  be.copy_2d(dst.data(), ld_dst, src.data() + 2, ld_src, rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < ld_dst; ++c) {
      const float want = c < cols ? static_cast<float>(r * ld_src + 2 + c) : -1.0f;
      REQUIRE(dst[static_cast<size_t>(r * ld_dst + c)] == want);
    }
  }
  CHECK_THROWS_AS(be.copy_2d(dst.data(), 2, src.data(), ld_src, rows, cols), ptdp::Error);
  CHECK_THROWS_AS(be.copy_2d(dst.data(), ld_dst, src.data(), ld_src, -1, cols), ptdp::Error);
}

TEST_CASE("fill_2d sets only the sub-matrix", "[copy_2d]") {
  ptdp::Backend& be = ptdp::cpu_backend();
  const int64_t rows = 4, ld = 6;
  std::vector<float> x(static_cast<size_t>(rows * ld), 1.0f);
  const float inf = std::numeric_limits<float>::infinity();
  be.fill_2d(x.data() + 4, ld, rows, 2, -inf);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < ld; ++c) REQUIRE(x[static_cast<size_t>(r * ld + c)] == (c >= 4 ? -inf : 1.0f));
  CHECK_THROWS_AS(be.fill_2d(x.data(), 1, rows, 2, 0.0f), ptdp::Error);
}
