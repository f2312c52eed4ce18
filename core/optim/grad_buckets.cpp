#include "core/optim/grad_buckets.h"

#include <algorithm>
#include <utility>

namespace ptdp {

GradBuckets::GradBuckets(ParamTable& table, int64_t bucket_elements, bool distributed, ProcessGroups& groups,
                         bool overlap)
    : table_(table), groups_(groups), distributed_(distributed), overlap_(overlap) {
  const int d = groups.size(GroupKind::DataContext);
  // Each region padded to a multiple of its group's size and cut into buckets from its end
  // (the backward produces the last parameters first), each a multiple of the group's size
  // long so it shards evenly. The expert region lies after the dense one.
  if (table.has_experts()) {
    const int edp = groups.size(GroupKind::ExpertData);
    table.align_expert_region(d);
    const int64_t lo = table.expert_begin(), n = lo + (table.numel() - lo + edp - 1) / edp * edp;
    table.reserve(n);
    add_region(lo, n, bucket_elements, GroupKind::ExpertData);
    add_region(0, lo, bucket_elements, GroupKind::DataContext);
    expert_scale_ = static_cast<float>(static_cast<double>(edp) / d);
  } else {
    const int64_t n = (table.numel() + d - 1) / d * d;
    table.reserve(n);
    add_region(0, n, bucket_elements, GroupKind::DataContext);
  }
  progress_.resize(buckets_.size());
  buckets_of_param_.resize(static_cast<std::size_t>(table.size()));
  for (std::size_t k = 0; k < buckets_.size(); ++k) {
    GradBucket& b = buckets_[k];
    const int g = groups.size(b.group), r = groups.rank(b.group);
    const int64_t len = b.hi - b.lo;
    b.sharded = distributed && g > 1;
    sharded_ = sharded_ || b.sharded;
    b.shard_lo = distributed ? b.lo + r * (len / g) : b.lo;
    b.shard_hi = distributed ? b.shard_lo + len / g : b.hi;
    b.state_offset = shard_elements_;
    shard_elements_ += b.shard_hi - b.shard_lo;
    for (int i = 0; i < table.size(); ++i) {
      const ParamInfo& p = table.info(i);
      if (p.offset < b.hi && p.offset + p.local_shape.numel() > b.lo) {
        buckets_of_param_[static_cast<std::size_t>(i)].push_back(static_cast<int>(k));
        ++progress_[k].pending;
      }
    }
  }
  ready_.assign(static_cast<std::size_t>(table.size()), false);
}

void GradBuckets::add_region(int64_t lo, int64_t hi, int64_t bucket_elements, GroupKind group) {
  const int g = groups_.size(group);
  const int64_t size = bucket_elements > 0 ? (bucket_elements + g - 1) / g * g : hi - lo;
  while (hi > lo) {
    GradBucket b;
    b.hi = hi;
    b.lo = std::max<int64_t>(lo, hi - size);
    b.group = group;
    hi = b.lo;
    buckets_.push_back(std::move(b));
  }
}

GradBuckets::~GradBuckets() {
  for (Progress& pr : progress_)
    if (pr.work) {
      try {
        pr.work->wait();
      } catch (...) {
      }
    }
}

void GradBuckets::launch(std::size_t k) {
  progress_[k].launched = true;
  const GradBucket& b = buckets_[k];
  if (groups_.size(b.group) == 1) return;
  Communicator& dp = groups_.comm_for_tensors(b.group, table_.flat_grads().device());
  const Tensor grads = table_.flat_grads().view(b.lo, {b.hi - b.lo});
  // The distributed optimizer reduce-scatters in place: no second gradient buffer.
  progress_[k].work = distributed_ ? dp.reduce_scatter(grads, table_.flat_grads().view(b.shard_lo, {b.shard_hi - b.shard_lo}),
                                                       ReduceOp::Avg)
                                   : dp.all_reduce(grads, ReduceOp::Avg);
}

void GradBuckets::params_ready(int first, int end) {
  for (int i = std::max(0, first); i < std::min(end, table_.size()); ++i) {
    if (ready_[static_cast<std::size_t>(i)]) continue;
    ready_[static_cast<std::size_t>(i)] = true;
    for (int k : buckets_of_param_[static_cast<std::size_t>(i)]) {
      Progress& pr = progress_[static_cast<std::size_t>(k)];
      if (--pr.pending == 0 && !pr.launched && overlap_) launch(static_cast<std::size_t>(k));
    }
  }
}

void GradBuckets::finish_grad_sync() {
  // Launch in the order the backward completes buckets (from the end of the buffer), as the
  // overlapped reduction does, then wait.
  for (std::size_t k = 0; k < buckets_.size(); ++k)
    if (!progress_[k].launched) launch(k);
  for (std::size_t k = 0; k < buckets_.size(); ++k) {
    Progress& pr = progress_[k];
    if (pr.work) {
      pr.work->wait();
      pr.work.reset();
    }
    const GradBucket& b = buckets_[k];
    if (!pr.finished && b.expert() && expert_scale_ != 1.0f) {
      Backend& be = table_.flat_grads().backend();
      be.scale(reduced_grad(b, b.shard_lo), expert_scale_, b.shard_hi - b.shard_lo);
    }
    pr.finished = true;
  }
}

void GradBuckets::start_next_iteration() {
  std::fill(ready_.begin(), ready_.end(), false);
  for (Progress& pr : progress_) {
    pr.launched = false;
    pr.finished = false;
    pr.pending = 0;
  }
  for (const std::vector<int>& of_param : buckets_of_param_)
    for (int k : of_param) ++progress_[static_cast<std::size_t>(k)].pending;
}

float* GradBuckets::reduced_grad(const GradBucket& b, int64_t e) const {
  (void)b;
  return table_.flat_grads().data<float>() + e;
}

}  // namespace ptdp
