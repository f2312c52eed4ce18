// ParamTable: a model chunk's parameters in one flat buffer, gradients in another of the same
// layout, and a table of named views: name, global shape, partition dimension, this rank's
// slice. Data-parallel buckets, optimizer shards, grad norms and checkpoints all work on the
// two flat buffers and this table (DESIGN.md, principle 3).
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
  Shape local_shape;       ///< this rank's slice
  int64_t slice_start = 0; ///< first row (dim 0) or column (dim 1) of the slice
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
          float init_std = 0.0f, bool weight_decay = true);
  /// Allocates the flat parameter and gradient buffers (gradients zeroed).
  void allocate(Device device);
  /// Grows both flat buffers to at least `numel` elements (values kept, the tail zero), e.g.
  /// so that data-parallel buckets divide evenly. Views taken before are not moved.
  void reserve(int64_t numel);
  /// Elements of the flat buffers (>= numel(), after reserve).
  int64_t capacity() const { return params_.defined() ? params_.numel() : 0; }
  /// Sets every parameter to its initial value: a pure function of (seed, name, global element
  /// index), so every tensor-parallel size starts from the same full weights.
  void initialize(uint64_t seed);
  void zero_grads();

  int size() const { return static_cast<int>(entries_.size()); }
  const ParamInfo& info(int i) const { return entries_.at(static_cast<std::size_t>(i)); }
  /// Index of `name`, or -1.
  int find(const std::string& name) const;
  /// Index of `name`; throws Error(InvalidArgument) naming it when there is none.
  int index(const std::string& name) const;

  Tensor param(int i) const;  ///< view with the local shape
  Tensor grad(int i) const;
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
  Tensor params_, grads_;
};

/// Writes the initial values of `info`'s local slice (host memory, local-shape row-major).
void init_param_slice(const ParamInfo& info, uint64_t seed, float* out);

}  // namespace ptdp
