#include "core/params/params.h"

#include <vector>

#include "kernels/error.h"
#include "kernels/philox.h"

namespace ptdp {

ParamTable::ParamTable(int tp_rank, int tp_size) : tp_rank_(tp_rank), tp_size_(tp_size) {
  PTDP_CHECK_ARG(tp_size > 0 && tp_rank >= 0 && tp_rank < tp_size,
                 "tensor rank " + std::to_string(tp_rank) + " of " + std::to_string(tp_size) + " is invalid");
}

int ParamTable::add(const std::string& name, const Shape& global_shape, int partition_dim,
                    ParamInit init, float init_std, bool weight_decay, int partition_blocks) {
  PTDP_CHECK_ARG(!params_.defined(), "add(" + name + "): the table is already allocated");
  PTDP_CHECK_ARG(by_name_.count(name) == 0, "parameter " + name + " is declared twice");
  PTDP_CHECK_ARG(global_shape.ndim() == 1 || global_shape.ndim() == 2,
                 "parameter " + name + ": shape " + global_shape.str() + " must have 1 or 2 dims");
  PTDP_CHECK_ARG(partition_dim >= -1 && partition_dim < global_shape.ndim(),
                 "parameter " + name + ": partition dim " + std::to_string(partition_dim) + " out of range");
  ParamInfo p;
  p.name = name;
  p.global_shape = global_shape;
  p.partition_dim = partition_dim;
  p.init = init;
  p.init_std = init_std;
  p.weight_decay = weight_decay;
  int64_t dims[2] = {global_shape[0], global_shape.ndim() == 2 ? global_shape[1] : 1};
  PTDP_CHECK_ARG(partition_blocks >= 1 && (partition_blocks == 1 || partition_dim == 0),
                 "parameter " + name + ": " + std::to_string(partition_blocks) +
                     " partition blocks must be >= 1, and more than one needs rows split (partition dim 0)");
  p.partition_blocks = partition_blocks;
  if (partition_dim >= 0) {
    const int64_t extent = dims[partition_dim];
    PTDP_CHECK_ARG(extent % (static_cast<int64_t>(tp_size_) * partition_blocks) == 0,
                   "parameter " + name + ": dim " + std::to_string(partition_dim) + " of " + global_shape.str() +
                       (partition_blocks > 1 ? " (" + std::to_string(partition_blocks) + " blocks)" : std::string()) +
                       " is not divisible by the tensor parallel size " + std::to_string(tp_size_));
    dims[partition_dim] = extent / tp_size_;
    p.slice_start = dims[partition_dim] / partition_blocks * tp_rank_;
  }
  p.local_shape = global_shape.ndim() == 2 ? Shape{dims[0], dims[1]} : Shape{dims[0]};
  // Keep every view 64-byte aligned inside the flat buffer (16 floats).
  p.offset = (numel_ + 15) / 16 * 16;
  numel_ = p.offset + p.local_shape.numel();
  by_name_[name] = static_cast<int>(entries_.size());
  entries_.push_back(p);
  return static_cast<int>(entries_.size()) - 1;
}

void ParamTable::set_tp_reduced_grad(int i) {
  PTDP_CHECK_ARG(i >= 0 && i < size(), "parameter index " + std::to_string(i) + " is out of range");
  PTDP_CHECK_ARG(entries_[static_cast<std::size_t>(i)].partition_dim < 0,
                 "parameter " + entries_[static_cast<std::size_t>(i)].name +
                     " is split over the tensor ranks; only a replicated one can have its gradient summed over them");
  entries_[static_cast<std::size_t>(i)].tp_reduced_grad = true;
}

std::vector<SliceRun> slice_runs(const ParamInfo& p) {
  if (p.partition_dim < 0) return {SliceRun{0, 0, p.global_shape[0]}};
  const int64_t local = p.local_shape[p.partition_dim] / p.partition_blocks;
  const int64_t global = p.global_shape[p.partition_dim] / p.partition_blocks;
  std::vector<SliceRun> runs;
  for (int k = 0; k < p.partition_blocks; ++k) runs.push_back({k * local, k * global + p.slice_start, local});
  return runs;
}

void ParamTable::allocate(Device device, DType model_dtype) {
  PTDP_CHECK_ARG(dtype_is_float(model_dtype), std::string("model dtype ") + dtype_name(model_dtype) +
                                                  " is not a floating type (f32, bf16, f16)");
  model_dtype_ = model_dtype;
  params_ = Tensor::zeros({numel_}, DType::F32, device);
  grads_ = Tensor::zeros({numel_}, DType::F32, device);
  if (model_dtype_ != DType::F32) weights_ = Tensor::zeros({numel_}, model_dtype_, device);
}

void ParamTable::sync_weights() {
  check_allocated("sync_weights");
  if (!weights_.defined()) return;
  params_.backend().cast(params_.raw(), DType::F32, weights_.raw(), model_dtype_, params_.numel());
}

void ParamTable::sync_weight(int i) {
  check_allocated("sync_weight");
  if (!weights_.defined()) return;
  const Tensor master = param(i), model = weight(i);
  master.backend().cast(master.raw(), DType::F32, model.raw(), model_dtype_, master.numel());
}

void ParamTable::reserve(int64_t numel) {
  check_allocated("reserve");
  if (numel <= params_.numel()) return;
  for (Tensor* t : {&params_, &grads_, &weights_}) {
    if (!t->defined()) continue;
    Tensor bigger = Tensor::zeros({numel}, t->dtype(), t->device());
    bigger.backend().copy(bigger.raw(), t->raw(), t->nbytes());
    *t = bigger;
  }
}

void ParamTable::check_allocated(const char* what) const {
  if (!params_.defined()) throw_error(ErrorCode::InvalidState, std::string(what) + ": parameters are not allocated");
}

void init_param_slice(const ParamInfo& p, uint64_t seed, float* out) {
  const int64_t rows = p.local_shape[0];
  const int64_t cols = p.local_shape.ndim() == 2 ? p.local_shape[1] : 1;
  const int64_t gcols = p.global_shape.ndim() == 2 ? p.global_shape[1] : 1;
  // Global row (column) of each local row (column) along the partition dim.
  std::vector<int64_t> global_of(static_cast<std::size_t>(p.partition_dim == 1 ? cols : rows));
  for (int64_t i = 0; i < static_cast<int64_t>(global_of.size()); ++i) global_of[static_cast<std::size_t>(i)] = i;
  if (p.partition_dim >= 0) {
    for (const SliceRun& r : slice_runs(p))
      for (int64_t i = 0; i < r.count; ++i) global_of[static_cast<std::size_t>(r.local_start + i)] = r.global_start + i;
  }
  const PhiloxStream stream{seed, philox_name_hash(p.name.c_str())};
  // Each element is a pure function of its global index: rows can go to any thread.
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t gi = p.partition_dim == 0 ? global_of[static_cast<std::size_t>(i)] : i;
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t gj = p.partition_dim == 1 ? global_of[static_cast<std::size_t>(j)] : j;
      float v = 0.0f;
      switch (p.init) {
        case ParamInit::Zeros: v = 0.0f; break;
        case ParamInit::Ones: v = 1.0f; break;
        case ParamInit::Normal: {
          const auto global = static_cast<uint64_t>(gi * gcols + gj);
          v = static_cast<float>(p.init_std * philox_normal(stream, global));
          break;
        }
      }
      out[i * cols + j] = v;
    }
  }
}

void ParamTable::initialize(uint64_t seed) {
  check_allocated("initialize");
  std::vector<float> host;
  for (int i = 0; i < size(); ++i) {
    const ParamInfo& p = entries_[static_cast<std::size_t>(i)];
    host.resize(static_cast<std::size_t>(p.local_shape.numel()));
    init_param_slice(p, seed, host.data());
    param(i).copy_from_host(host.data(), host.size() * sizeof(float));
  }
  sync_weights();
}

void ParamTable::zero_grads() {
  check_allocated("zero_grads");
  grads_.fill(0.0);
}

int ParamTable::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

int ParamTable::index(const std::string& name) const {
  const int i = find(name);
  PTDP_CHECK_ARG(i >= 0, "no parameter named '" + name + "'");
  return i;
}

Tensor ParamTable::param(int i) const {
  check_allocated("param");
  const ParamInfo& p = info(i);
  return params_.view(p.offset, p.local_shape);
}

Tensor ParamTable::weight(int i) const {
  check_allocated("weight");
  const ParamInfo& p = info(i);
  return (weights_.defined() ? weights_ : params_).view(p.offset, p.local_shape);
}

Tensor ParamTable::grad(int i) const {
  check_allocated("grad");
  const ParamInfo& p = info(i);
  return grads_.view(p.offset, p.local_shape);
}

}  // namespace ptdp
