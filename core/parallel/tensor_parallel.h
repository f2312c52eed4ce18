// The tensor-parallel group a layer's shards are spread over, and the conjugate operators of
// Narayanan et al. (Megatron-Core's tensor_parallel/mappings.py) as named functions, each in the
// two passes an explicit backward needs:
//   f  copy to the tensor region      forward: identity       backward: all-reduce
//   g  reduce from the tensor region  forward: all-reduce     backward: identity
//      gather from the tensor region  forward: all-gather of the last dimension; backward: this
//                                     rank's slice of it (= scatter to the tensor region)
// With sequence parallelism (Korthikanti et al. 2022; Megatron's --sequence-parallel) the
// activations between the tensor-parallel blocks are split along the sequence: rank r holds
// rows [r n/t, (r+1) n/t) of the sequence-major [n = s b, h] activation (the contiguous
// sequence positions [r s/t, (r+1) s/t) of every sample), and f and g become
//   g-bar gather along the sequence  forward: all-gather of the rows; backward: reduce-scatter
//   r-bar reduce-scatter along it    forward: reduce-scatter of the rows; backward: all-gather
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
  /// Sequence parallelism: the activations outside the tensor-parallel blocks are this rank's
  /// rows only (meaningful with size > 1; see sequence_sharded()).
  bool sequence_parallel = false;

  /// Whether the activations between the blocks are split along the sequence for a pass:
  /// sequence parallelism over more than one rank, and not inference with a key/value cache
  /// (decoding runs a few tokens at a time, on every rank whole).
  bool sequence_sharded(bool decoding) const { return sequence_parallel && size > 1 && !decoding; }

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

// ---- sequence parallelism ------------------------------------------------------------------
/// Gather along the sequence, forward (and the backward of reduce-scatter along it): every
/// rank's [n/t, cols] rows, in rank order, as one [n, cols] (no copy for a group of one).
Tensor gather_sequence(const TensorParallel& tp, const Tensor& shard, int64_t cols);
/// Reduce-scatter along the sequence, forward (and the backward of gather along it): the sum
/// over the group of [n, cols] partial tensors, of which this rank keeps rows
/// [rank n/t, (rank+1) n/t). Throws Error(InvalidArgument) when t does not divide n.
Tensor reduce_scatter_sequence(const TensorParallel& tp, const Tensor& full, int64_t cols);
/// This rank's rows of a [n, cols] tensor that is the same on every rank (no communication):
/// the forward of the split after the embedding, whose backward is gather_sequence.
Tensor split_sequence(const TensorParallel& tp, const Tensor& full, int64_t cols);

}  // namespace ptdp
