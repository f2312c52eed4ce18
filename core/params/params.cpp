#include "core/params/params.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "base/error.h"
#include "base/philox.h"
#include "core/comm/communicator.h"

namespace ptdp {

ParamTable::ParamTable(int tp_rank, int tp_size) : tp_rank_(tp_rank), tp_size_(tp_size) {
  PTDP_CHECK_ARG(tp_size > 0 && tp_rank >= 0 && tp_rank < tp_size,
                 "tensor rank " + std::to_string(tp_rank) + " of " + std::to_string(tp_size) + " is invalid");
}

ParamTable::~ParamTable() {
  for (PendingGather& p : pending_) {
    try {
      if (p.work) p.work->wait();
    } catch (...) {
    }
  }
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
  expert_begin_ = numel_;
  by_name_[name] = static_cast<int>(entries_.size());
  entries_.push_back(p);
  return static_cast<int>(entries_.size()) - 1;
}

void ParamTable::set_expert(int i, int etp_rank, int etp_size) {
  PTDP_CHECK_ARG(!params_.defined(), "set_expert: the table is already allocated");
  PTDP_CHECK_ARG(i >= 0 && i < size(), "parameter index " + std::to_string(i) + " is out of range");
  PTDP_CHECK_ARG(etp_size >= 1 && etp_rank >= 0 && etp_rank < etp_size,
                 "expert tensor rank " + std::to_string(etp_rank) + " of " + std::to_string(etp_size) + " is out of range");
  ParamInfo& p = entries_[static_cast<std::size_t>(i)];
  p.expert = true;
  p.split_rank = etp_rank;
  p.split_size = etp_size;
  if (p.partition_dim < 0) return;
  int64_t dims[2] = {p.global_shape[0], p.global_shape.ndim() == 2 ? p.global_shape[1] : 1};
  const int64_t extent = dims[p.partition_dim];
  PTDP_CHECK_ARG(extent % (static_cast<int64_t>(etp_size) * p.partition_blocks) == 0,
                 "parameter " + p.name + ": dim " + std::to_string(p.partition_dim) + " of " + p.global_shape.str() +
                     " is not divisible by the expert tensor parallel size " + std::to_string(etp_size));
  dims[p.partition_dim] = extent / etp_size;
  p.slice_start = dims[p.partition_dim] / p.partition_blocks * etp_rank;
  p.local_shape = p.global_shape.ndim() == 2 ? Shape{dims[0], dims[1]} : Shape{dims[0]};
}

int64_t ParamTable::dense_numel() const {
  int64_t end = 0;
  for (const ParamInfo& p : entries_) {
    if (!p.expert) end = std::max(end, p.offset + p.local_shape.numel());
  }
  return end;
}

void ParamTable::set_row_parts(int i, std::vector<int64_t> parts) {
  PTDP_CHECK_ARG(i >= 0 && i < size(), "parameter index " + std::to_string(i) + " out of range");
  ParamInfo& p = entries_[static_cast<std::size_t>(i)];
  int64_t period = 0;
  for (const int64_t n : parts) {
    PTDP_CHECK_ARG(n > 0, p.name + ": row parts must be > 0");
    period += n;
  }
  PTDP_CHECK_ARG(p.global_shape.ndim() == 2 && period > 0 && p.global_shape[0] % period == 0,
                 p.name + ": row parts of " + std::to_string(period) + " rows do not divide its " +
                     std::to_string(p.global_shape.ndim() == 2 ? p.global_shape[0] : 0) + " rows");
  p.row_parts = std::move(parts);
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
  wait_all_gathers();
  model_dtype_ = model_dtype;
  // Lay the views out again: the dense parameters in declaration order, then the expert ones
  // (their slices may have changed in set_expert), each view 64-byte aligned (16 floats).
  numel_ = 0;
  expert_begin_ = -1;
  for (const bool expert : {false, true}) {
    for (ParamInfo& p : entries_) {
      if (p.expert != expert) continue;
      p.offset = (numel_ + 15) / 16 * 16;
      if (expert && expert_begin_ < 0) expert_begin_ = p.offset;
      numel_ = p.offset + p.local_shape.numel();
    }
  }
  if (expert_begin_ < 0) expert_begin_ = numel_;
  master_ranges_.clear();
  master_offset_.clear();
  master_shard_ = Tensor();
  params_ = Tensor::zeros({numel_}, DType::F32, device);
  grads_ = Tensor::zeros({numel_}, DType::F32, device);
  if (model_dtype_ != DType::F32) weights_ = Tensor::zeros({numel_}, model_dtype_, device);
}

void ParamTable::sync_weights() {
  check_allocated("sync_weights");
  if (!weights_.defined()) return;
  wait_all_gathers();
  if (!masters_sharded()) {
    params_.backend().cast(params_.raw(), DType::F32, weights_.raw(), model_dtype_, params_.numel());
    return;
  }
  // Each rank rounds its shard; the shards are gathered (16-bit rounding is elementwise, so
  // this equals rounding the whole masters).
  for (std::size_t k = 0; k < master_ranges_.size(); ++k) {
    const ShardRange& r = master_ranges_[k];
    const int64_t len = (r.hi - r.lo) / r.comm->size();
    Tensor mine = weights_.view(r.lo + r.comm->rank() * len, {len});  // in place
    mine.backend().cast(master_shard_.data<float>() + master_offset_[k], DType::F32, mine.raw(), model_dtype_, len);
    r.comm->all_gather(mine, weights_.view(r.lo, {r.hi - r.lo}))->wait();
  }
}

void ParamTable::sync_weight(int i) {
  check_allocated("sync_weight");
  check_not_sharded("sync_weight");
  if (!weights_.defined()) return;
  const Tensor master = param(i), model = weight(i);
  master.backend().cast(master.raw(), DType::F32, model.raw(), model_dtype_, master.numel());
}

void ParamTable::reserve(int64_t numel) {
  check_allocated("reserve");
  if (numel <= capacity()) return;
  check_not_sharded("reserve");
  wait_all_gathers();
  for (Tensor* t : {&params_, &grads_, &weights_}) {
    if (!t->defined()) continue;
    Tensor bigger = Tensor::zeros({numel}, t->dtype(), t->device());
    bigger.backend().copy(bigger.raw(), t->raw(), t->nbytes());
    *t = bigger;
  }
}

void ParamTable::align_expert_region(int64_t multiple) {
  check_allocated("align_expert_region");
  PTDP_CHECK_ARG(multiple >= 1, "align_expert_region: multiple must be >= 1, got " + std::to_string(multiple));
  if (!has_experts()) return;
  const int64_t step = std::lcm<int64_t>(multiple, 16);  // 16: the views' 64-byte alignment
  const int64_t begin = (dense_numel() + step - 1) / step * step;
  if (begin == expert_begin_) return;  // e.g. a second optimizer over the same groups
  check_not_sharded("align_expert_region");
  wait_all_gathers();
  const int64_t shift = begin - expert_begin_, expert_elements = numel_ - expert_begin_;
  for (Tensor* t : {&params_, &grads_, &weights_}) {
    if (!t->defined()) continue;
    Tensor moved = Tensor::zeros({numel_ + shift}, t->dtype(), t->device());
    const std::size_t width = dtype_size(t->dtype());
    Backend& be = moved.backend();
    be.copy(moved.raw(), t->raw(), static_cast<std::size_t>(dense_numel()) * width);
    be.copy(static_cast<char*>(moved.raw()) + begin * static_cast<int64_t>(width),
            static_cast<const char*>(t->raw()) + expert_begin_ * static_cast<int64_t>(width),
            static_cast<std::size_t>(expert_elements) * width);
    *t = moved;
  }
  for (ParamInfo& p : entries_)
    if (p.expert) p.offset += shift;
  expert_begin_ = begin;
  numel_ += shift;
}

void ParamTable::check_allocated(const char* what) const {
  if (!grads_.defined()) throw_error(ErrorCode::InvalidState, std::string(what) + ": parameters are not allocated");
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
    set_param(i, host.data());
  }
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
  check_not_sharded("param");
  const ParamInfo& p = info(i);
  wait_gathers(p.offset, p.offset + p.local_shape.numel());
  return params_.view(p.offset, p.local_shape);
}

Tensor ParamTable::weight(int i) const {
  check_allocated("weight");
  const ParamInfo& p = info(i);
  wait_gathers(p.offset, p.offset + p.local_shape.numel());
  return (weights_.defined() ? weights_ : params_).view(p.offset, p.local_shape);
}

Tensor ParamTable::grad(int i) const {
  check_allocated("grad");
  const ParamInfo& p = info(i);
  return grads_.view(p.offset, p.local_shape);
}

// ---- sharded masters ------------------------------------------------------------------------

void ParamTable::check_not_sharded(const char* what) const {
  if (masters_sharded())
    throw_error(ErrorCode::InvalidState,
                std::string(what) + ": the fp32 master weights are sharded over the data-parallel group "
                                    "(distributed optimizer); read them with gather_param or masters_to_host");
}

int ParamTable::shard_of(int64_t e) const {
  // The last range starting at or before e.
  const auto it = std::upper_bound(master_ranges_.begin(), master_ranges_.end(), e,
                                   [](int64_t x, const ShardRange& range) { return x < range.lo; });
  if (it == master_ranges_.begin()) return -1;
  const ShardRange& range = *(it - 1);
  const int64_t len = (range.hi - range.lo) / range.comm->size(), lo = range.lo + range.comm->rank() * len;
  return e >= lo && e < lo + len ? static_cast<int>(it - 1 - master_ranges_.begin()) : -1;
}

void ParamTable::shard_masters(const std::vector<ShardRange>& ranges) {
  check_allocated("shard_masters");
  PTDP_CHECK_ARG(model_dtype_ != DType::F32,
                 "shard_masters: fp32 model weights are their own masters and stay whole on every rank");
  unshard_masters();
  wait_all_gathers();
  std::vector<ShardRange> sorted = ranges;
  std::sort(sorted.begin(), sorted.end(), [](const ShardRange& a, const ShardRange& b) { return a.lo < b.lo; });
  int64_t at = 0, total = 0;
  for (const ShardRange& x : sorted) {
    PTDP_CHECK_ARG(x.comm != nullptr, "shard_masters: range [" + std::to_string(x.lo) + ", " + std::to_string(x.hi) +
                                          ") has no communicator");
    const int64_t d = x.comm->size();
    PTDP_CHECK_ARG(x.lo == at && x.hi > x.lo && (x.hi - x.lo) % d == 0,
                   "shard_masters: range [" + std::to_string(x.lo) + ", " + std::to_string(x.hi) +
                       ") does not continue at " + std::to_string(at) + " or is not a positive multiple of " +
                       std::to_string(d) + " long");
    at = x.hi;
    total += (x.hi - x.lo) / d;
  }
  PTDP_CHECK_ARG(at == capacity(), "shard_masters: the ranges end at " + std::to_string(at) + ", not at capacity " +
                                       std::to_string(capacity()));
  Tensor shard = Tensor::empty({total}, DType::F32, params_.device());
  std::vector<int64_t> offsets;
  int64_t off = 0;
  for (const ShardRange& x : sorted) {
    const int64_t len = (x.hi - x.lo) / x.comm->size();
    shard.backend().copy(shard.data<float>() + off, params_.data<float>() + x.lo + x.comm->rank() * len,
                         static_cast<std::size_t>(len) * sizeof(float));
    offsets.push_back(off);
    off += len;
  }
  master_shard_ = shard;
  master_ranges_ = std::move(sorted);
  master_offset_ = std::move(offsets);
  params_ = Tensor();  // the whole fp32 masters go: full sharding
}

void ParamTable::unshard_masters() {
  if (!masters_sharded()) return;
  Tensor full = Tensor::zeros({capacity()}, DType::F32, grads_.device());
  for (std::size_t k = 0; k < master_ranges_.size(); ++k) {
    const ShardRange& r = master_ranges_[k];
    r.comm->all_gather(master_shard_.view(master_offset_[k], {(r.hi - r.lo) / r.comm->size()}),
                       full.view(r.lo, {r.hi - r.lo}))
        ->wait();
  }
  params_ = full;
  master_ranges_.clear();
  master_offset_.clear();
  master_shard_ = Tensor();
}

float* ParamTable::master_data(int64_t e) const {
  check_allocated("master_data");
  if (!masters_sharded()) return params_.data<float>() + e;
  const int k = shard_of(e);
  PTDP_CHECK_ARG(k >= 0, "master_data: element " + std::to_string(e) + " is not in this rank's shard");
  const ShardRange& r = master_ranges_[static_cast<std::size_t>(k)];
  const int64_t lo = r.lo + r.comm->rank() * ((r.hi - r.lo) / r.comm->size());
  return master_shard_.data<float>() + master_offset_[static_cast<std::size_t>(k)] + (e - lo);
}

Tensor ParamTable::gather_param(int i) const {
  if (!masters_sharded()) return param(i);
  const ParamInfo& p = info(i);
  const int64_t first = p.offset, last = p.offset + p.local_shape.numel();
  Tensor out = Tensor::empty(p.local_shape, DType::F32, grads_.device());
  Backend& be = out.backend();
  for (std::size_t k = 0; k < master_ranges_.size(); ++k) {
    const ShardRange& r = master_ranges_[k];
    if (r.hi <= first || r.lo >= last) continue;
    Tensor whole = Tensor::empty({r.hi - r.lo}, DType::F32, grads_.device());
    r.comm->all_gather(master_shard_.view(master_offset_[k], {(r.hi - r.lo) / r.comm->size()}), whole)->wait();
    const int64_t lo = std::max(first, r.lo), hi = std::min(last, r.hi);
    be.copy(out.data<float>() + (lo - first), whole.data<float>() + (lo - r.lo), static_cast<std::size_t>(hi - lo) * sizeof(float));
  }
  return out;
}

void ParamTable::set_param(int i, const float* host) {
  check_allocated("set_param");
  PTDP_CHECK_ARG(host != nullptr, "set_param: values are NULL");
  const ParamInfo& p = info(i);
  const int64_t first = p.offset, n = p.local_shape.numel();
  if (!masters_sharded()) {
    param(i).copy_from_host(host, static_cast<std::size_t>(n) * sizeof(float));
    sync_weight(i);
    return;
  }
  Backend& be = master_shard_.backend();
  for (std::size_t k = 0; k < master_ranges_.size(); ++k) {
    const ShardRange& r = master_ranges_[k];
    const int64_t len = (r.hi - r.lo) / r.comm->size(), slo = r.lo + r.comm->rank() * len, shi = slo + len;
    const int64_t lo = std::max(first, slo), hi = std::min(first + n, shi);
    if (lo >= hi) continue;
    be.copy_from_host(master_shard_.data<float>() + master_offset_[k] + (lo - slo), host + (lo - first),
                      static_cast<std::size_t>(hi - lo) * sizeof(float));
  }
  const Tensor values = Tensor::from_host(host, p.local_shape, DType::F32, grads_.device());
  const Tensor model = weight(i);
  be.cast(values.raw(), DType::F32, model.raw(), model_dtype_, n);
}

void ParamTable::set_param(int i, const Tensor& values) {
  PTDP_CHECK_ARG(values.dtype() == DType::F32 && values.numel() == info(i).local_shape.numel(),
                 "set_param(" + info(i).name + "): values are " + values.str() + ", want " +
                     std::to_string(info(i).local_shape.numel()) + " x f32");
  std::vector<float> host(static_cast<std::size_t>(values.numel()));
  values.copy_to_host(host.data(), host.size() * sizeof(float));
  set_param(i, host.data());
}

std::vector<float> ParamTable::masters_to_host() const {
  check_allocated("masters_to_host");
  std::vector<float> out(static_cast<std::size_t>(capacity()), 0.0f);
  if (!masters_sharded()) {
    wait_all_gathers();
    params_.copy_to_host(out.data(), out.size() * sizeof(float));
    return out;
  }
  for (std::size_t k = 0; k < master_ranges_.size(); ++k) {
    const ShardRange& r = master_ranges_[k];
    Tensor whole = Tensor::empty({r.hi - r.lo}, DType::F32, grads_.device());
    r.comm->all_gather(master_shard_.view(master_offset_[k], {(r.hi - r.lo) / r.comm->size()}), whole)->wait();
    whole.copy_to_host(out.data() + r.lo, whole.nbytes());
  }
  return out;
}

void ParamTable::masters_from_host(const float* values) {
  check_allocated("masters_from_host");
  PTDP_CHECK_ARG(values != nullptr, "masters_from_host: values are NULL");
  wait_all_gathers();
  if (!masters_sharded()) {
    params_.copy_from_host(values, static_cast<std::size_t>(capacity()) * sizeof(float));
    sync_weights();
    return;
  }
  Backend& be = master_shard_.backend();
  for (std::size_t k = 0; k < master_ranges_.size(); ++k) {
    const ShardRange& r = master_ranges_[k];
    const int64_t len = (r.hi - r.lo) / r.comm->size();
    be.copy_from_host(master_shard_.data<float>() + master_offset_[k], values + r.lo + r.comm->rank() * len,
                      static_cast<std::size_t>(len) * sizeof(float));
  }
  const Tensor whole = Tensor::from_host(values, {capacity()}, DType::F32, grads_.device());
  be.cast(whole.raw(), DType::F32, weights_.raw(), model_dtype_, capacity());
}

// ---- weight gathers in flight ----------------------------------------------------------------

void ParamTable::add_pending_gather(int64_t lo, int64_t hi, std::unique_ptr<Work> work) {
  if (work) pending_.push_back({lo, hi, std::move(work)});
}

void ParamTable::wait_gathers(int64_t lo, int64_t hi) const {
  for (std::size_t k = 0; k < pending_.size();) {
    if (pending_[k].lo < hi && pending_[k].hi > lo) {
      std::unique_ptr<Work> w = std::move(pending_[k].work);
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(k));
      w->wait();
    } else {
      ++k;
    }
  }
}

}  // namespace ptdp
