// The data-parallel gradient buckets of one flat parameter space: the flat gradient buffer cut
// into buckets, each reduced over the data-parallel group by one collective (an all-reduce, or a
// reduce-scatter into this rank's shard with the distributed optimizer) started as soon as the
// backward has produced every gradient in it, so the reduction overlaps the rest of the backward.
//
// The buckets also fix the distributed optimizer's shards: each bucket is a multiple of the
// data-parallel size d long and rank r owns its r-th 1/d, so the optimizer keeps its state and
// updates its weights bucket by bucket over the same ranges.
//
// Mixture of experts (Megatron-Core's parallel folding): a table with expert parameters has two
// regions (ParamTable::has_experts), and no bucket straddles them. The dense region's buckets
// are reduced over the data+context group as for a dense model; the expert region's over the
// expert-data-parallel group (the ranks holding the same expert slices), each region padded to
// a multiple of its own group's size. An expert's gradient on one rank holds the contributions
// of the tokens routed to it from every rank of its expert-parallel group, so the reduced
// expert gradient is the sum over the expert-data-parallel group divided by the number of
// data+context replicas (Megatron's expert_gradient_scaling_factor): the average over the
// group times edp / (d * c), which is 1 when the experts fold onto the tensor group.
#pragma once

#include <cstdint>
#include <vector>

#include "core/comm/communicator.h"
#include "core/params/params.h"
#include "core/parallel/groups.h"
#include "core/tensor/tensor.h"

namespace ptdp {

/// One bucket: a range of the flat buffers reduced by one collective.
struct GradBucket {
  int64_t lo = 0, hi = 0;              ///< range of the flat buffers
  int64_t shard_lo = 0, shard_hi = 0;  ///< this rank's part of it (the whole range unless sharded)
  int64_t state_offset = 0;            ///< where the shard's optimizer state starts
  /// The group the bucket is reduced (and sharded) over: DataContext, or ExpertData for the
  /// expert region.
  GroupKind group = GroupKind::DataContext;
  /// Whether this rank holds only [shard_lo, shard_hi) of the reduced gradients (the
  /// distributed optimizer over a group of more than one rank).
  bool sharded = false;
  bool expert() const { return group == GroupKind::ExpertData; }
};

class GradBuckets {
 public:
  /// Pads `table` to a multiple of the data-parallel size and cuts it into buckets of about
  /// `bucket_elements` (0: one bucket per region); with expert parameters, the dense region is
  /// padded first (ParamTable::align_expert_region) and the expert region to a multiple of the
  /// expert-data-parallel size. `distributed`: reduce-scatter into this rank's shard
  /// instead of all-reducing. `overlap` (Megatron's --overlap-grad-reduce): start each
  /// bucket's reduction as soon as the backward completes it; otherwise every reduction starts
  /// in finish_grad_sync(), after the backward. The same collectives run either way, in the same
  /// order on the same buffers, so the results are bitwise the same.
  GradBuckets(ParamTable& table, int64_t bucket_elements, bool distributed, ProcessGroups& groups,
              bool overlap = true);
  /// Waits for reductions still in flight: they write into buffers that go with this object.
  ~GradBuckets();
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  /// Parameters [first, end) have their final gradients for this iteration; starts the
  /// reduction of every bucket they complete. Parameters already ready are not counted twice.
  void params_ready(int first, int end);
  /// Starts the reduction of every bucket not yet started, then waits for all of them (and
  /// scales the expert buckets' shards by edp / (d * c)).
  void finish_grad_sync();
  /// Forgets which parameters were ready, so the next backward fills the buckets again.
  void start_next_iteration();

  /// Whether any bucket is sharded (GradBucket::sharded: distributed optimizer, group size > 1):
  /// the reduce-scatter runs in place in the flat gradient buffer, so the shard's reduced
  /// gradients sit at their own offsets and the rest of the bucket is left undefined.
  bool sharded() const { return sharded_; }
  /// The reduced gradient of flat element `e` of bucket `b` (inside its shard range).
  float* reduced_grad(const GradBucket& b, int64_t e) const;
  /// Elements of optimizer state this rank keeps: the sum of its shards.
  int64_t shard_elements() const { return shard_elements_; }
  const std::vector<GradBucket>& buckets() const { return buckets_; }

 private:
  // Where a bucket's reduction stands in this iteration.
  struct Progress {
    int pending = 0;  // parameters overlapping the bucket not yet ready
    bool launched = false;
    bool finished = false;  // reduced, waited for and scaled (finish_grad_sync may run twice)
    WorkPtr work;     // the reduction in flight
  };
  void launch(std::size_t k);
  /// Cuts [lo, hi) into buckets over `group`, from its end.
  void add_region(int64_t lo, int64_t hi, int64_t bucket_elements, GroupKind group);

  ParamTable& table_;
  ProcessGroups& groups_;
  bool distributed_ = false;
  bool overlap_ = true;
  bool sharded_ = false;
  int64_t shard_elements_ = 0;
  float expert_scale_ = 1.0f;  // edp / (d * c)
  std::vector<GradBucket> buckets_;                 // from the end of the buffer to its start
  std::vector<Progress> progress_;                  // by bucket
  std::vector<std::vector<int>> buckets_of_param_;  // by parameter index: the buckets it overlaps
  std::vector<bool> ready_;                         // by parameter index
};

}  // namespace ptdp
