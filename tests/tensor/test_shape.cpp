#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

#include "base/error.h"
#include "core/tensor/shape.h"

using ptdp::Shape;

namespace {

ptdp::ErrorCode code_of(void (*f)()) {
  try {
    f();
  } catch (const ptdp::Error& e) {
    return e.code();
  }
  return ptdp::ErrorCode::Internal;  // nothing thrown
}

}  // namespace

TEST_CASE("shape counts elements and prints itself", "[shape]") {
  const Shape s{2, 3, 4};
  CHECK(s.ndim() == 3);
  CHECK(s.numel() == 24);
  CHECK(s[1] == 3);
  CHECK(s.str() == "[2, 3, 4]");
  CHECK(Shape{}.numel() == 1);
  CHECK(Shape{}.ndim() == 0);
  CHECK(Shape{5, 0, 7}.numel() == 0);
  CHECK(Shape{2, 3} == Shape{2, 3});
  CHECK(Shape{2, 3} != Shape{3, 2});
  CHECK(Shape{2, 3} != Shape{2, 3, 1});
}

TEST_CASE("shape rejects negative extents, too many dims and overflow", "[shape]") {
  CHECK(code_of([] { Shape{2, -1}; }) == ptdp::ErrorCode::InvalidArgument);
  CHECK(code_of([] { Shape{1, 1, 1, 1, 1, 1, 1, 1, 1}; }) == ptdp::ErrorCode::InvalidArgument);
  CHECK(code_of([] { Shape{int64_t{1} << 40, int64_t{1} << 40}; }) == ptdp::ErrorCode::InvalidArgument);
  // A zero extent makes even huge other extents an empty tensor, not an overflow.
  CHECK(Shape{int64_t{1} << 40, int64_t{1} << 40, 0}.numel() == 0);
  try {
    const int64_t dims[] = {4, -7};
    Shape::from(dims, 2, "shape");
    FAIL("no error");
  } catch (const ptdp::Error& e) {
    CHECK(std::string(e.what()) == "shape[1] = -7 is negative");
  }
}
