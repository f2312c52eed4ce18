#include "core/optim/grad_buckets.h"

#include <algorithm>
#include <utility>

namespace ptdp {

GradBuckets::GradBuckets(ParamTable& table, int64_t bucket_elements, bool distributed, ProcessGroups& groups,
                         bool overlap)
    : table_(table), groups_(groups), distributed_(distributed), overlap_(overlap) {
  const int d = groups.size(GroupKind::DataContext), r = groups.rank(GroupKind::DataContext);
  sharded_ = distributed && d > 1;
  // Buckets over the buffer padded to a multiple of d, from the end (the backward produces
  // the last parameters first), each a multiple of d long so it shards evenly.
  const int64_t n = (table.numel() + d - 1) / d * d;
  table.reserve(n);
  const int64_t size = bucket_elements > 0 ? (bucket_elements + d - 1) / d * d : n;
  for (int64_t hi = n; hi > 0;) {
    GradBucket b;
    b.hi = hi;
    b.lo = std::max<int64_t>(0, hi - size);
    hi = b.lo;
    buckets_.push_back(std::move(b));
  }
  progress_.resize(buckets_.size());
  buckets_of_param_.resize(static_cast<std::size_t>(table.size()));
  for (std::size_t k = 0; k < buckets_.size(); ++k) {
    GradBucket& b = buckets_[k];
    const int64_t len = b.hi - b.lo;
    b.shard_lo = distributed ? b.lo + r * (len / d) : b.lo;
    b.shard_hi = distributed ? b.shard_lo + len / d : b.hi;
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
  if (groups_.size(GroupKind::DataContext) == 1) return;
  const GradBucket& b = buckets_[k];
  Communicator& dp = groups_.comm_for_tensors(GroupKind::DataContext, table_.flat_grads().device());
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
    if (progress_[k].work) {
      progress_[k].work->wait();
      progress_[k].work.reset();
    }
  }
}

void GradBuckets::start_next_iteration() {
  std::fill(ready_.begin(), ready_.end(), false);
  for (Progress& pr : progress_) {
    pr.launched = false;
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
