// Small helpers over tensors that layers, models and the optimizer share: a new tensor like
// another, the address of an element whatever the storage type, and an element count as rows.
#pragma once

#include <cstdint>

#include "core/tensor/tensor.h"

namespace ptdp {

/// A new tensor like `like` (its storage type and device) of shape `shape`.
Tensor empty_like(const Tensor& like, const Shape& shape);
/// The address of element `offset` of t (whatever its storage type), for backend calls that
/// address a sub-matrix or a strided operand inside a tensor. Throws when outside t.
void* element_ptr(const Tensor& t, int64_t offset);

/// Element count of `t` as rows of `cols` columns; throws naming `what` when it does not divide.
int64_t rows_of(const Tensor& t, int64_t cols, const char* what);

}  // namespace ptdp
