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

/// Context parallelism (Megatron's --context-parallel-size c): each sample's sequence of s
/// positions is cut into 2c chunks of s/(2c) and context rank r holds chunks r and 2c - 1 - r
/// (causal load balance), in that order: its sequence-major activation [s/c * b, cols] is chunk r's
/// rows, then chunk 2c - 1 - r's. A group of one holds the whole sequence.
struct ContextParallel {
  Communicator* comm = nullptr;  ///< may be null when size == 1
  int rank = 0;
  int size = 1;

  /// The global chunk (of 2 size) of this rank's local piece 0 or 1.
  int64_t chunk(int piece) const { return piece == 0 ? rank : 2 * size - 1 - rank; }
  /// The global position of local position li of this rank's sl = s / size positions.
  int64_t global_position(int64_t li, int64_t sl) const {
    const int64_t half = sl / 2;
    return li < half ? chunk(0) * half + li : chunk(1) * half + (li - half);
  }
};

/// The groups an MoE layer's experts are spread over (Megatron-Core's parallel folding,
/// core/parallel/layout.h): the e ranks splitting the experts, the etp ranks splitting each
/// expert's linears, their product (the allgather dispatcher's group) and the t*c ranks that
/// share one set of samples (over which the router's losses and drop decisions are taken).
/// Communicators may be null for groups of one.
struct ExpertParallel {
  Communicator* ep_comm = nullptr;
  int ep_rank = 0, ep_size = 1;
  Communicator* etp_comm = nullptr;
  int etp_rank = 0, etp_size = 1;
  Communicator* tp_ep_comm = nullptr;  ///< ExpertTensorAndModel: rank = ep_rank * etp_size + etp_rank
  Communicator* tp_cp_comm = nullptr;  ///< TensorContext: the t*c ranks holding pieces of the same samples
  int tp_cp_rank = 0, tp_cp_size = 1;
  /// Data: the d replicas of this rank's (t, c) position, holding other samples (global_aux_loss
  /// sums its expert counts over them, after the TensorContext group: Megatron's tp_dp_cp group).
  Communicator* dp_comm = nullptr;
  int dp_size = 1;
};

/// The tensor-parallel group a layer's shards are spread over.
struct TensorParallel {
  Communicator* comm = nullptr;  ///< may be null when size == 1
  int rank = 0;
  int size = 1;
  /// Sequence parallelism: the activations outside the tensor-parallel blocks are this rank's
  /// rows only (meaningful with size > 1; see sequence_sharded()).
  bool sequence_parallel = false;
  /// The context-parallel group the sequence is split over (carried with the tensor group to
  /// the layers; size 1: none). Under sequence parallelism the tensor ranks split this rank's
  /// s/c positions further.
  ContextParallel cp = {};
  /// The expert groups (MoE layers only; all of size one for a dense model).
  ExpertParallel ep = {};

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

// ---- context parallelism -------------------------------------------------------------------
/// Every context rank's [n, cols] rows (its two chunks of the sequence-major activation), as
/// the whole sequence's [c n, cols] in global order: chunk k's rows at k n/2 (the input itself
/// for a group of one). Collective over the context group.
Tensor gather_context(const ContextParallel& cp, const Tensor& local, int64_t cols);
/// This rank's rows (its chunks r and 2c - 1 - r) of the whole sequence's [N, cols]
/// sequence-major tensor (no communication; the input itself for a group of one).
Tensor context_rows(const ContextParallel& cp, const Tensor& full, int64_t cols);


}  // namespace ptdp
