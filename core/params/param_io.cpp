#include "core/params/param_io.h"

#include <algorithm>
#include <vector>

namespace ptdp {

namespace {

// Copies, for every run of the slice, rows (partition dim 0) or columns (dim 1) between a
// local-shape buffer and a global-shape one of the same parameter, on the host.
void copy_runs(const ParamInfo& p, const std::vector<SliceRun>& runs, const float* from, float* to, bool to_global) {
  const int64_t rows = p.local_shape[0];
  const int64_t lcols = p.local_shape.ndim() == 2 ? p.local_shape[1] : 1;
  const int64_t gcols = p.global_shape.ndim() == 2 ? p.global_shape[1] : 1;
  for (const SliceRun& r : runs) {
    if (p.partition_dim == 0) {
      const float* src = from + (to_global ? r.local_start : r.global_start) * gcols;
      float* dst = to + (to_global ? r.global_start : r.local_start) * gcols;
      std::copy_n(src, r.count * gcols, dst);
    } else {
      for (int64_t i = 0; i < rows; ++i) {
        const float* src = to_global ? from + i * lcols + r.local_start : from + i * gcols + r.global_start;
        float* dst = to_global ? to + i * gcols + r.global_start : to + i * lcols + r.local_start;
        std::copy_n(src, r.count, dst);
      }
    }
  }
}

// The runs of tensor rank `rank`'s slice of `p` (p is this rank's entry; every rank's slice has
// the same shape and the runs move by the rank's share of each block).
std::vector<SliceRun> runs_of_rank(const ParamInfo& p, int tp_rank, int my_rank) {
  std::vector<SliceRun> runs = slice_runs(p);
  const int64_t share = p.local_shape[p.partition_dim] / p.partition_blocks;
  for (SliceRun& r : runs) r.global_start += (tp_rank - my_rank) * share;
  return runs;
}

}  // namespace

void gather_global(const ParamTable& params, int i, const Tensor& local, const TensorParallel& layer_tp, float* host) {
  const ParamInfo& p = params.info(i);
  // An expert's slices are over the expert-tensor-parallel group (etp), not the tensor one.
  TensorParallel expert_tp;
  if (p.expert) {
    expert_tp.comm = layer_tp.ep.etp_comm;
    expert_tp.rank = layer_tp.ep.etp_rank;
    expert_tp.size = layer_tp.ep.etp_size;
  }
  const TensorParallel& tp = p.expert ? expert_tp : layer_tp;
  if (p.partition_dim < 0 || tp.size == 1) {
    local.copy_to_host(host, local.nbytes());
    return;
  }
  const int64_t n = local.numel();
  Tensor all = Tensor::empty({n * tp.size}, DType::F32, local.device());
  tp.all_gather(local.reshape({n}), all);
  std::vector<float> slices(static_cast<std::size_t>(all.numel()));
  all.copy_to_host(slices.data(), all.nbytes());
  for (int r = 0; r < tp.size; ++r) copy_runs(p, runs_of_rank(p, r, tp.rank), slices.data() + r * n, host, true);
}

void scatter_global(const ParamTable& params, int i, const float* host, const Tensor& local) {
  const ParamInfo& p = params.info(i);
  if (p.partition_dim < 0) {
    local.backend().copy_from_host(local.raw(), host, local.nbytes());
    return;
  }
  std::vector<float> staged(static_cast<std::size_t>(local.numel()));
  copy_runs(p, slice_runs(p), host, staged.data(), false);
  local.backend().copy_from_host(local.raw(), staged.data(), local.nbytes());
}

}  // namespace ptdp
