#include "core/tensor/shape.h"

#include <limits>

#include "base/error.h"

namespace ptdp {

Shape Shape::from(const int64_t* dims, int ndim, const std::string& what) {
  PTDP_CHECK_ARG(ndim >= 0 && ndim <= kMaxDims,
                 what + ": ndim must be in [0, " + std::to_string(kMaxDims) + "], got " +
                     std::to_string(ndim));
  PTDP_CHECK_ARG(ndim == 0 || dims != nullptr, what + ": dims is NULL with ndim = " + std::to_string(ndim));
  Shape s;
  s.ndim_ = ndim;
  s.numel_ = 1;
  bool overflow = false;
  for (int i = 0; i < ndim; ++i) {
    const int64_t d = dims[i];
    PTDP_CHECK_ARG(d >= 0, what + "[" + std::to_string(i) + "] = " + std::to_string(d) + " is negative");
    s.dims_[static_cast<std::size_t>(i)] = d;
    if (d != 0 && s.numel_ > std::numeric_limits<int64_t>::max() / d) overflow = true;
    else s.numel_ *= d;
  }
  // A zero extent makes the tensor empty however large the others are; otherwise overflow is fatal.
  bool has_zero = false;
  for (int i = 0; i < ndim; ++i) has_zero |= s.dims_[static_cast<std::size_t>(i)] == 0;
  if (has_zero) s.numel_ = 0;
  PTDP_CHECK_ARG(has_zero || !overflow, what + " " + s.str() + ": element count overflows int64");
  return s;
}

Shape::Shape(std::initializer_list<int64_t> dims) {
  *this = from(dims.begin(), static_cast<int>(dims.size()));
}

std::string Shape::str() const {
  std::string out = "[";
  for (int i = 0; i < ndim_; ++i) {
    if (i) out += ", ";
    out += std::to_string(dims_[static_cast<std::size_t>(i)]);
  }
  return out + "]";
}

bool Shape::operator==(const Shape& o) const {
  if (ndim_ != o.ndim_) return false;
  for (int i = 0; i < ndim_; ++i) {
    if (dims_[static_cast<std::size_t>(i)] != o.dims_[static_cast<std::size_t>(i)]) return false;
  }
  return true;
}

}  // namespace ptdp
