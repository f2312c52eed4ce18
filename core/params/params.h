// ParamTable: a model chunk's parameters in one flat buffer, gradients in another of the same
// layout, and a table of named views: name, global shape, partition dimension, this rank's
// slice. Data-parallel buckets, optimizer shards, grad norms and checkpoints all work on the
// two flat buffers and this table (DESIGN.md, principle 3).
//
// Mixed precision: the flat parameters are always the fp32 master weights and the gradients
// are always fp32 (main gradients, accumulated over microbatches). With a 16-bit model dtype a
// third flat buffer of the same layout holds the bf16/f16 weights the layers compute with;
// sync_weights() rounds the masters into it (after initialisation, an optimizer step or a
// checkpoint load).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor/tensor.h"

namespace ptdp {

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
};

class ParamTable {
 public:
  ParamTable(int tp_rank, int tp_size);

  /// Declares a parameter; its slice follows from the partition dimension. Returns its index.
  int add(const std::string& name, const Shape& global_shape, int partition_dim, ParamInit init,
          float init_std = 0.0f, bool weight_decay = true, int partition_blocks = 1);
  /// Marks parameter i as ParamInfo::tp_reduced_grad.
  void set_tp_reduced_grad(int i);
  /// Allocates the flat parameter and gradient buffers (gradients zeroed) and, for a bf16 or
  /// f16 `model_dtype`, the 16-bit model weights.
  void allocate(Device device, DType model_dtype = DType::F32);
  /// Grows both flat buffers to at least `numel` elements (values kept, the tail zero), e.g.
  /// so that data-parallel buckets divide evenly. Views taken before are not moved.
  void reserve(int64_t numel);
  /// Elements of the flat buffers (>= numel(), after reserve).
  int64_t capacity() const { return params_.defined() ? params_.numel() : 0; }
  /// Sets every parameter to its initial value: a pure function of (seed, name, global element
  /// index), so every tensor-parallel size starts from the same full weights.
  void initialize(uint64_t seed);
  /// Rounds the fp32 master weights into the 16-bit model weights (nothing to do for f32).
  void sync_weights();
  /// sync_weights() for parameter i only.
  void sync_weight(int i);
  void zero_grads();

  int size() const { return static_cast<int>(entries_.size()); }
  const ParamInfo& info(int i) const { return entries_.at(static_cast<std::size_t>(i)); }
  /// Index of `name`, or -1.
  int find(const std::string& name) const;
  /// Index of `name`; throws Error(InvalidArgument) naming it when there is none.
  int index(const std::string& name) const;

  Tensor param(int i) const;   ///< fp32 master view with the local shape
  Tensor grad(int i) const;    ///< fp32 gradient view
  Tensor weight(int i) const;  ///< the view the layers compute with: model dtype (== param(i) for f32)
  DType model_dtype() const { return model_dtype_; }
  const Tensor& flat_params() const { return params_; }
  const Tensor& flat_grads() const { return grads_; }
  int64_t numel() const { return numel_; }
  int tp_rank() const { return tp_rank_; }
  int tp_size() const { return tp_size_; }

 private:
  void check_allocated(const char* what) const;

  int tp_rank_, tp_size_;
  std::vector<ParamInfo> entries_;
  std::unordered_map<std::string, int> by_name_;
  int64_t numel_ = 0;
  DType model_dtype_ = DType::F32;
  Tensor params_, grads_;
  Tensor weights_;  ///< 16-bit model weights; undefined for f32
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
