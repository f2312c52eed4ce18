// ParamTable: a model chunk's parameters in one flat buffer, gradients in another of the same
// layout, and a table of named views: name, global shape, partition dimension, this rank's
// slice. Data-parallel buckets, optimizer shards, grad norms and checkpoints all work on the
// two flat buffers and this table (docs/architecture.md, principle 3).
//
// Mixed precision: the flat parameters are always the fp32 master weights and the gradients
// are always fp32 (main gradients, accumulated over microbatches). With a 16-bit model dtype a
// third flat buffer of the same layout holds the bf16/f16 weights the layers compute with;
// sync_weights() rounds the masters into it (after initialisation, an optimizer step or a
// checkpoint load).
//
// Full sharding (the distributed optimizer with 16-bit weights, shard_masters()): each
// data-parallel rank then keeps the fp32 masters of its 1/d of every optimizer bucket only, and
// the full fp32 buffer is gone; the 16-bit weights and fp32 gradients stay whole. Readers of
// masters use gather_param() / masters_to_host() (collective over the data-parallel group then),
// writers set_param() / masters_from_host() (no communication: every rank passes the same
// values and keeps its part). Each range is sharded over its own group: the dense region's over
// the data(+context)-parallel group, the expert region's over the expert-data-parallel group.
//
// Pending weight gathers (--overlap-param-gather): the optimizer may hand the table the
// all-gathers of updated weights still in flight (add_pending_gather()); weight(i) and param(i)
// wait for those that cover parameter i, so each bucket is waited for just before its first use.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor/tensor.h"

namespace ptdp {

class Communicator;
class Work;

enum class ParamInit : int { Normal = 0, Zeros = 1, Ones = 2 };

struct ParamInfo {
  std::string name;
  Shape global_shape;      ///< [rows] or [rows, cols], as the unpartitioned model has it
  int partition_dim = -1;  ///< -1: the same on every tensor rank; 0: rows split; 1: columns split
  /// The partition dim holds this many equal blocks, each split over the tensor ranks; a
  /// rank's slice is its part of every block, in block order (SwiGLU's fc1: the gate rows,
  /// then the up rows, each rank holding its share of both). 1: one contiguous slice.
  int partition_blocks = 1;
  Shape local_shape;       ///< this rank's slice
  int64_t slice_start = 0; ///< first row (dim 0) or column (dim 1) of the slice (of its first block)
  /// True for a tensor-replicated parameter whose gradient differs between tensor ranks (a
  /// norm over each rank's own heads): the layer sums its gradient over the tensor group.
  bool tp_reduced_grad = false;
  int64_t offset = 0;      ///< element offset in the flat buffers
  ParamInit init = ParamInit::Normal;
  float init_std = 0.0f;
  bool weight_decay = true;  ///< false for biases and LayerNorm parameters (Megatron's rule)
  /// An MoE expert's parameter (ParamTable::set_expert): its gradient is reduced over the
  /// expert-data-parallel group (GroupKind::ExpertData) instead of the data-parallel one, and
  /// its slice along partition_dim is taken over the expert-tensor-parallel group.
  bool expert = false;
  /// The group the slice is taken over: -1 / 0 for the table's tensor rank and size.
  int split_rank = -1, split_size = 0;
  /// A fused weight whose rows (dim 0) are a repeating period of parts, part j of every period
  /// together being one projection of the unfused model: the fused QKV of grouped-query
  /// attention, [a/g*dh, dh, dh] per query group (set_row_parts). Empty: one matrix (a weight
  /// with partition_blocks > 1 is one matrix per block). Muon orthogonalises each part alone.
  std::vector<int64_t> row_parts;
};

class ParamTable {
 public:
  ParamTable(int tp_rank, int tp_size);
  /// Waits for weight gathers still in flight: they write into this table's buffers.
  ~ParamTable();
  ParamTable(ParamTable&&) = default;
  ParamTable& operator=(ParamTable&&) = default;

  /// Declares a parameter; its slice follows from the partition dimension. Returns its index.
  int add(const std::string& name, const Shape& global_shape, int partition_dim, ParamInit init,
          float init_std = 0.0f, bool weight_decay = true, int partition_blocks = 1);
  /// Marks parameter i (before allocate()) as an expert parameter (ParamInfo::expert) whose
  /// slice along its partition dim is rank `etp_rank`'s of `etp_size`. allocate() places the
  /// expert parameters after all the others, so the flat buffers hold a dense region
  /// [0, dense_numel()) and an expert region [dense_numel(), numel()).
  void set_expert(int i, int etp_rank, int etp_size);
  /// Elements of the dense region (== numel() without expert parameters).
  int64_t dense_numel() const;
  /// Where the expert region starts in the flat buffers (== numel() without expert parameters);
  /// [dense_numel(), expert_begin()) is zero padding.
  int64_t expert_begin() const { return expert_begin_; }
  bool has_experts() const { return expert_begin_ < numel_; }
  /// Moves the expert region (values, gradients and 16-bit weights with it) to start at the
  /// first multiple of `multiple` (and of 16) at or after dense_numel(), so that the dense
  /// region [0, expert_begin()) divides evenly over a group of `multiple` ranks. Nothing to do
  /// without expert parameters. Like reserve(), views taken before are not moved; not with
  /// sharded masters.
  void align_expert_region(int64_t multiple);
  /// Sets parameter i's ParamInfo::row_parts (2-D, the parts' sum dividing its rows).
  void set_row_parts(int i, std::vector<int64_t> parts);
  /// Marks parameter i as ParamInfo::tp_reduced_grad.
  void set_tp_reduced_grad(int i);
  /// Allocates the flat parameter and gradient buffers (gradients zeroed) and, for a bf16 or
  /// f16 `model_dtype`, the 16-bit model weights.
  void allocate(Device device, DType model_dtype = DType::F32);
  /// Grows both flat buffers to at least `numel` elements (values kept, the tail zero), e.g.
  /// so that data-parallel buckets divide evenly. Views taken before are not moved.
  void reserve(int64_t numel);
  /// Elements of the flat buffers (>= numel(), after reserve).
  int64_t capacity() const { return grads_.defined() ? grads_.numel() : 0; }
  /// Sets every parameter to its initial value: a pure function of (seed, name, global element
  /// index), so every tensor-parallel size starts from the same full weights.
  void initialize(uint64_t seed);
  /// Rounds the fp32 master weights into the 16-bit model weights (nothing to do for f32).
  /// With sharded masters each rank rounds its shard and the shards are all-gathered:
  /// collective over the data-parallel groups then.
  void sync_weights();
  /// sync_weights() for parameter i only (not with sharded masters: use set_param()).
  void sync_weight(int i);
  void zero_grads();

  int size() const { return static_cast<int>(entries_.size()); }
  const ParamInfo& info(int i) const { return entries_.at(static_cast<std::size_t>(i)); }
  /// Index of `name`, or -1.
  int find(const std::string& name) const;
  /// Index of `name`; throws Error(InvalidArgument) naming it when there is none.
  int index(const std::string& name) const;

  Tensor param(int i) const;   ///< fp32 master view with the local shape (not with sharded masters)
  Tensor grad(int i) const;    ///< fp32 gradient view
  Tensor weight(int i) const;  ///< the view the layers compute with: model dtype (== param(i) for f32)
  DType model_dtype() const { return model_dtype_; }
  /// The whole flat fp32 masters; undefined while they are sharded (masters_sharded()).
  const Tensor& flat_params() const { return params_; }
  const Tensor& flat_grads() const { return grads_; }
  /// The flat buffer the layers compute with: the 16-bit weights, or the fp32 parameters.
  const Tensor& flat_weights() const { return weights_.defined() ? weights_ : params_; }
  int64_t numel() const { return numel_; }
  int tp_rank() const { return tp_rank_; }
  int tp_size() const { return tp_size_; }

  // ---- fp32 masters sharded over the data-parallel group ----------------------------------
  /// A range of the flat buffers split evenly over the d ranks of `comm`: group rank r keeps
  /// [lo + r (hi - lo) / d, lo + (r + 1) (hi - lo) / d).
  struct ShardRange {
    int64_t lo = 0, hi = 0;
    Communicator* comm = nullptr;  ///< the data-parallel group holding the range's replicas
  };
  /// Keeps only this rank's shard of each range of the fp32 masters and frees the full buffer.
  /// `ranges` cover [0, capacity()) without overlap, each a multiple of its comm's size long.
  /// Only for 16-bit model weights (fp32 weights are their own masters and stay whole). Masters
  /// that are already sharded are gathered first: collective over their groups then. The
  /// communicators must outlive the sharding.
  void shard_masters(const std::vector<ShardRange>& ranges);
  /// Gathers the whole fp32 masters back (collective over the ranges' groups); nothing to do
  /// when they are not sharded.
  void unshard_masters();
  bool masters_sharded() const { return !master_ranges_.empty(); }
  /// Elements of fp32 masters this rank holds: capacity(), or the sum of its shards.
  int64_t master_elements() const { return masters_sharded() ? master_shard_.numel() : capacity(); }
  /// The fp32 master of flat element `e`, which must lie in this rank's shard when sharded.
  float* master_data(int64_t e) const;
  /// Parameter i's fp32 masters (local shape): a view of the flat buffer, or, when sharded, a
  /// new tensor all-gathered from the shards (collective over the data-parallel groups).
  Tensor gather_param(int i) const;
  /// Sets parameter i's fp32 masters (this rank's part when sharded) and its model weights
  /// from `values` (fp32, its local shape). No communication.
  void set_param(int i, const Tensor& values);
  /// set_param() from host memory.
  void set_param(int i, const float* host);
  /// The whole flat fp32 masters on the host (capacity() elements); collective over the
  /// data-parallel group when sharded.
  std::vector<float> masters_to_host() const;
  /// Sets the masters (this rank's part when sharded) and the model weights from the whole flat
  /// values (capacity() elements, host memory). No communication.
  void masters_from_host(const float* values);

  // ---- weight gathers in flight ------------------------------------------------------------
  /// `work` writes the model weights of flat range [lo, hi); weight(i) and param(i) wait for it
  /// when parameter i overlaps the range.
  void add_pending_gather(int64_t lo, int64_t hi, std::unique_ptr<Work> work);
  /// Waits for every pending gather that overlaps [lo, hi).
  void wait_gathers(int64_t lo, int64_t hi) const;
  /// Waits for all of them.
  void wait_all_gathers() const { wait_gathers(0, capacity()); }

 private:
  void check_allocated(const char* what) const;
  void check_not_sharded(const char* what) const;
  /// Index of the shard range holding element e, or -1 when e is outside this rank's shards.
  int shard_of(int64_t e) const;

  int tp_rank_, tp_size_;
  std::vector<ParamInfo> entries_;
  std::unordered_map<std::string, int> by_name_;
  int64_t numel_ = 0;
  int64_t expert_begin_ = 0;
  DType model_dtype_ = DType::F32;
  Tensor params_, grads_;
  Tensor weights_;  ///< 16-bit model weights; undefined for f32
  // Sharded masters: this rank's part of every range, in range order (none: not sharded).
  std::vector<ShardRange> master_ranges_;
  std::vector<int64_t> master_offset_;  // by range: where its shard starts in master_shard_
  Tensor master_shard_;
  struct PendingGather {
    int64_t lo, hi;
    std::unique_ptr<Work> work;
  };
  mutable std::vector<PendingGather> pending_;
};

/// Writes the initial values of `info`'s local slice (host memory, local-shape row-major).
void init_param_slice(const ParamInfo& info, uint64_t seed, float* out);

/// A run of consecutive slice elements along the partition dim that is also consecutive in the
/// global tensor: slice indices [local_start, local_start + count) are global indices
/// [global_start, global_start + count) (rows for partition dim 0, columns for 1).
struct SliceRun {
  int64_t local_start = 0, global_start = 0, count = 0;
};
/// The runs of `info`'s slice along its partition dim: one per block (one for a contiguous
/// slice); for a replicated parameter the whole first dim.
std::vector<SliceRun> slice_runs(const ParamInfo& info);

}  // namespace ptdp
