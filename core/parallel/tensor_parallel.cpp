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

}  // namespace ptdp
