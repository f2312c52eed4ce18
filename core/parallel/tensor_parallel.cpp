#include "core/parallel/tensor_parallel.h"

#include <string>

#include "core/tensor/tensor_helpers.h"
#include "kernels/error.h"

namespace ptdp {

void TensorParallel::all_reduce(const Tensor& t, ReduceOp op) const {
  if (size == 1) return;
  comm->all_reduce(t, op)->wait();
}

void TensorParallel::all_gather(const Tensor& in, const Tensor& out) const {
  if (size == 1) {
    in.backend().copy(out.raw(), in.raw(), in.nbytes());
    return;
  }
  comm->all_gather(in, out)->wait();
}

void copy_to_tensor_region_backward(const TensorParallel& tp, const Tensor& dx) { tp.all_reduce(dx); }

void reduce_from_tensor_region(const TensorParallel& tp, const Tensor& y) { tp.all_reduce(y); }

Tensor gather_from_tensor_region(const TensorParallel& tp, const Tensor& y_local, int64_t cols) {
  if (tp.size == 1) return y_local;
  PTDP_CHECK_ARG(cols % tp.size == 0, "gather from the tensor region: " + std::to_string(cols) +
                                          " columns do not split over " + std::to_string(tp.size) + " ranks");
  const int64_t local = cols / tp.size;
  const int64_t n = rows_of(y_local, local, "gather from the tensor region: input");
  // The gathered chunks are [t][n][cols/t]; interleave them into [n, cols].
  Tensor chunks = empty_like(y_local, {tp.size * n * local});
  tp.all_gather(y_local.reshape({n * local}), chunks);
  Tensor full = empty_like(y_local, {n, cols});
  for (int r = 0; r < tp.size; ++r) {
    y_local.backend().copy_2d(element_ptr(full, r * local), cols, element_ptr(chunks, r * n * local), local,
                              y_local.dtype(), n, local);
  }
  return full;
}

Tensor scatter_to_tensor_region(const TensorParallel& tp, const Tensor& full, int64_t cols) {
  if (tp.size == 1) return full;
  PTDP_CHECK_ARG(cols % tp.size == 0, "scatter to the tensor region: " + std::to_string(cols) +
                                          " columns do not split over " + std::to_string(tp.size) + " ranks");
  const int64_t local = cols / tp.size;
  const int64_t n = rows_of(full, cols, "scatter to the tensor region: input");
  Tensor mine = empty_like(full, {n, local});
  full.backend().copy_2d(mine.raw(), local, element_ptr(full, tp.rank * local), cols, full.dtype(), n, local);
  return mine;
}

namespace {

// Rows of a sequence-split [n, cols] tensor: n, checked divisible by the group.
int64_t split_rows(const TensorParallel& tp, const Tensor& full, int64_t cols, const char* what) {
  const int64_t n = rows_of(full, cols, what);
  PTDP_CHECK_ARG(n % tp.size == 0, std::string(what) + ": " + std::to_string(n) +
                                       " rows (sequence positions x samples) do not split over " +
                                       std::to_string(tp.size) + " sequence-parallel ranks");
  return n;
}

}  // namespace

Tensor gather_sequence(const TensorParallel& tp, const Tensor& shard, int64_t cols) {
  if (tp.size == 1) return shard;
  const int64_t rows = rows_of(shard, cols, "gather along the sequence: input");
  Tensor full = empty_like(shard, {tp.size * rows, cols});
  tp.all_gather(shard.reshape({rows * cols}), full.reshape({tp.size * rows * cols}));
  return full;
}

Tensor reduce_scatter_sequence(const TensorParallel& tp, const Tensor& full, int64_t cols) {
  if (tp.size == 1) return full;
  const int64_t n = split_rows(tp, full, cols, "reduce-scatter along the sequence: input");
  Tensor mine = empty_like(full, {n / tp.size, cols});
  tp.comm->reduce_scatter(full.reshape({n * cols}), mine.reshape({n / tp.size * cols}), ReduceOp::Sum)->wait();
  return mine;
}

Tensor split_sequence(const TensorParallel& tp, const Tensor& full, int64_t cols) {
  if (tp.size == 1) return full;
  const int64_t n = split_rows(tp, full, cols, "split along the sequence: input");
  const int64_t rows = n / tp.size;
  Tensor mine = empty_like(full, {rows, cols});
  full.backend().copy(mine.raw(), element_ptr(full, tp.rank * rows * cols), mine.nbytes());
  return mine;
}

}  // namespace ptdp
