// The tensor-parallel group a layer's shards are spread over, and the conjugate operators of
// Narayanan et al. (Megatron-Core's tensor_parallel/mappings.py) as named functions, each in the
// two passes an explicit backward needs:
//   f  copy to the tensor region      forward: identity       backward: all-reduce
//   g  reduce from the tensor region  forward: all-reduce     backward: identity
//      gather from the tensor region  forward: all-gather of the last dimension; backward: this
//                                     rank's slice of it (= scatter to the tensor region)
// A group of one communicates nothing.
#pragma once

#include <cstdint>

#include "core/comm/communicator.h"
#include "core/tensor/tensor.h"

namespace ptdp {

/// The tensor-parallel group a layer's shards are spread over.
struct TensorParallel {
  Communicator* comm = nullptr;  ///< may be null when size == 1
  int rank = 0;
  int size = 1;

  /// Sum over the group, in place (no communication for a group of one).
  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum) const;
  /// out [size * n] = every rank's in [n], in rank order.
  void all_gather(const Tensor& in, const Tensor& out) const;
};

/// f, forward: every rank of the group holds the whole input of a column-parallel block.
inline const Tensor& copy_to_tensor_region(const TensorParallel&, const Tensor& x) { return x; }
/// f, backward: the input gradient [n, in] is summed over the group, in place.
void copy_to_tensor_region_backward(const TensorParallel& tp, const Tensor& dx);

/// g, forward: the partial sums [n, out] of a row-parallel block are summed over the group, in place.
void reduce_from_tensor_region(const TensorParallel& tp, const Tensor& y);
/// g, backward: every rank keeps the whole output gradient.
inline const Tensor& reduce_from_tensor_region_backward(const TensorParallel&, const Tensor& dy) { return dy; }

/// Gather from the tensor region, forward: each rank's [n, cols / t] columns, in rank order,
/// as one [n, cols] on every rank (the input itself for a group of one).
Tensor gather_from_tensor_region(const TensorParallel& tp, const Tensor& y_local, int64_t cols);
/// Its backward, and the forward of scatter to the tensor region: this rank's [n, cols / t]
/// columns of a [n, cols] tensor (the input itself for a group of one).
Tensor scatter_to_tensor_region(const TensorParallel& tp, const Tensor& full, int64_t cols);

}  // namespace ptdp
