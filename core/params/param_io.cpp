#include "core/params/param_io.h"

namespace ptdp {

void gather_global(const ParamTable& params, int i, const Tensor& local, const TensorParallel& tp, float* host) {
  const ParamInfo& p = params.info(i);
  if (p.partition_dim < 0 || tp.size == 1) {
    local.copy_to_host(host, local.nbytes());
    return;
  }
  const int64_t n = local.numel();
  Tensor all = Tensor::empty({n * tp.size}, DType::F32, local.device());
  tp.all_gather(local.reshape({n}), all);
  if (p.partition_dim == 0) {  // row blocks in rank order are the global rows
    all.copy_to_host(host, all.nbytes());
    return;
  }
  // Column blocks [rows, cols/t] per rank: interleave into [rows, cols].
  const int64_t rows = p.local_shape[0], cols_l = p.local_shape[1], cols = p.global_shape[1];
  Tensor full = Tensor::empty({rows, cols}, DType::F32, local.device());
  for (int r = 0; r < tp.size; ++r) {
    local.backend().copy_2d(full.data<float>() + r * cols_l, cols, all.data<float>() + r * n, cols_l, DType::F32, rows,
                            cols_l);
  }
  full.copy_to_host(host, full.nbytes());
}

void scatter_global(const ParamTable& params, int i, const float* host, const Tensor& local) {
  const ParamInfo& p = params.info(i);
  const int64_t gcols = p.global_shape.ndim() == 2 ? p.global_shape[1] : 1;
  if (p.partition_dim < 0) {
    local.backend().copy_from_host(local.raw(), host, local.nbytes());
  } else if (p.partition_dim == 0) {
    local.backend().copy_from_host(local.raw(), host + p.slice_start * gcols, local.nbytes());
  } else {
    const Tensor full = Tensor::borrow(const_cast<float*>(host), p.global_shape, DType::F32);
    const Tensor staged = Tensor::empty(p.local_shape, DType::F32);
    staged.backend().copy_2d(staged.data<float>(), p.local_shape[1], full.data<float>() + p.slice_start, gcols,
                             DType::F32, p.local_shape[0], p.local_shape[1]);
    local.backend().copy_from_host(local.raw(), staged.raw(), local.nbytes());
  }
}

}  // namespace ptdp
