#include "core/tensor/tensor_helpers.h"

#include <string>

#include "base/error.h"

namespace ptdp {

int64_t rows_of(const Tensor& t, int64_t cols, const char* what) {
  PTDP_CHECK_ARG(cols > 0 && t.numel() % cols == 0,
                 std::string(what) + " " + t.str() + " is not a whole number of rows of " + std::to_string(cols));
  return t.numel() / cols;
}

Tensor empty_like(const Tensor& like, const Shape& shape) { return Tensor::empty(shape, like.dtype(), like.device()); }

void* element_ptr(const Tensor& t, int64_t offset) {
  PTDP_CHECK_ARG(offset >= 0 && offset < t.numel(),
                 "element " + std::to_string(offset) + " is outside " + t.str());
  return static_cast<char*>(t.raw()) + offset * static_cast<int64_t>(dtype_size(t.dtype()));
}

}  // namespace ptdp
