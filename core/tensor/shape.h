// Shape: up to kMaxDims non-negative extents whose product (and byte size) fits in int64.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace ptdp {

inline constexpr int kMaxDims = 8;

class Shape {
 public:
  /// A scalar (zero dimensions, one element).
  Shape() = default;
  /// Throws Error(InvalidArgument) for more than kMaxDims dims, a negative extent or overflow.
  Shape(std::initializer_list<int64_t> dims);
  /// Same checks; `what` names the argument in error messages.
  static Shape from(const int64_t* dims, int ndim, const std::string& what = "shape");

  int ndim() const { return ndim_; }
  int64_t operator[](int i) const { return dims_[static_cast<std::size_t>(i)]; }
  int64_t numel() const { return numel_; }
  const int64_t* data() const { return dims_.data(); }
  std::string str() const;  ///< "[2, 3, 4]"

  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
  int64_t numel_ = 1;
};

}  // namespace ptdp
