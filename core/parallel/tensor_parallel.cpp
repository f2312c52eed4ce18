#include "core/parallel/tensor_parallel.h"

#include <string>

#include "base/error.h"
#include "core/tensor/tensor_helpers.h"

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

namespace {

// Copies `rows` rows of `cols` elements from row `from` of src to row `to` of dst.
void copy_rows(const Tensor& dst, int64_t to, const Tensor& src, int64_t from, int64_t rows, int64_t cols) {
  src.backend().copy(element_ptr(dst, to * cols), element_ptr(src, from * cols),
                     static_cast<std::size_t>(rows * cols) * dtype_size(src.dtype()));
}

}  // namespace

Tensor gather_context(const ContextParallel& cp, const Tensor& local, int64_t cols) {
  if (cp.size == 1) return local;
  const int64_t n = rows_of(local, cols, "gather over the context group: input");
  PTDP_CHECK_ARG(n % 2 == 0, "context parallelism: " + std::to_string(n) + " rows are not two equal chunks");
  Tensor all = empty_like(local, {cp.size * n, cols});
  cp.comm->all_gather(local.reshape({n * cols}), all.reshape({cp.size * n * cols}))->wait();
  Tensor full = empty_like(local, {cp.size * n, cols});
  const int64_t half = n / 2;
  for (int j = 0; j < cp.size; ++j) {
    ContextParallel other = cp;
    other.rank = j;
    copy_rows(full, other.chunk(0) * half, all, j * n, half, cols);
    copy_rows(full, other.chunk(1) * half, all, j * n + half, half, cols);
  }
  return full;
}

Tensor context_rows(const ContextParallel& cp, const Tensor& full, int64_t cols) {
  if (cp.size == 1) return full;
  const int64_t N = rows_of(full, cols, "this context rank's rows: input");
  PTDP_CHECK_ARG(N % (2 * cp.size) == 0, "context parallelism: " + std::to_string(N) + " rows are not " +
                                             std::to_string(2 * cp.size) + " equal chunks");
  const int64_t half = N / (2 * cp.size);
  Tensor mine = empty_like(full, {2 * half, cols});
  copy_rows(mine, 0, full, cp.chunk(0) * half, half, cols);
  copy_rows(mine, half, full, cp.chunk(1) * half, half, cols);
  return mine;
}

}  // namespace ptdp
