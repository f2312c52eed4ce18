// Tensor-parallel linear layers (Megatron's ColumnParallelLinear and RowParallelLinear).
//
// Column-parallel: W [out, in] is split by output features; the input is the same on every
// tensor rank (the f operator: identity forward, all-reduce of the input gradient backward)
// and each rank produces out/t features, optionally gathered.
// Row-parallel: W [out, in] is split by input features; the input arrives already split (the
// output of a column-parallel layer) and the partial products are summed (the g operator:
// all-reduce forward, identity backward) before the bias.
// With sequence parallelism (TensorParallel::sequence_parallel) the column-parallel input is
// this rank's rows of the sequence, gathered along it (its gradient reduce-scattered back), and
// the row-parallel output is reduce-scattered along the sequence (its gradient gathered).
#pragma once

#include <string>

#include "core/layers/layer_support.h"
#include "core/params/params.h"
#include "kernels/op_scope.h"

namespace ptdp {

class ColumnParallelLinear {
 public:
  /// Declares "<prefix>.weight" [out, in] (split on dim 0) and, with bias, "<prefix>.bias".
  /// With `blocks` > 1 the output features are that many equal blocks, each split over the
  /// tensor ranks (SwiGLU's fc1: gate rows, then up rows), so this rank's [N, out/t] output is
  /// its share of each block side by side.
  ColumnParallelLinear(ParamTable& params, const std::string& prefix, int64_t in, int64_t out,
                       bool bias, bool gather_output, float init_std, TensorParallel tp,
                       int blocks = 1);
  /// Uses an existing [out, in] weight split on dim 0 (the LM head tied to the word embedding).
  ColumnParallelLinear(ParamTable& params, int shared_weight, bool gather_output, TensorParallel tp);

  /// x [N, in] (the same on every tensor rank; this rank's [N/t, in] when sequence-sharded, see
  /// TensorParallel::sequence_sharded) -> [N, out/t], or [N, out] when gathering. With
  /// `pre_gelu` (not gathering) the result is gelu(x W^T + b), fused into the GEMM (with a bias;
  /// without one, a GeLU pass follows), and *pre_gelu receives x W^T + b [N, out/t] for the
  /// backward.
  Tensor forward(const Tensor& x, const Step& step, Tensor* pre_gelu = nullptr);
  /// dy (the forward output's shape, [N, out/t] or [N, out]) -> dx [N, in] summed over the
  /// tensor group (this rank's [N/t, in] of it when sequence-sharded). Keeps dy for
  /// backward_weight.
  Tensor backward_input(const Tensor& dy, const Step& step);
  /// Adds this microbatch's weight (and bias) gradients, then frees its slot.
  void backward_weight(const Step& step);
  void release(const Step& step) { slots_.release(step.microbatch); }

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  int weight_index() const { return weight_; }
  int bias_index() const { return bias_; }
  /// Names this layer's backend calls for a profiler (kernels/op_scope.h): "qkv", "logits", ...
  /// A string literal; none by default.
  void set_profile_label(const char* label) { label_ = label; }

 private:
  struct Slot {
    Tensor x;   // [N, in], or this rank's [N/t, in] when sharded
    Tensor dy;  // [N, out/t]: this rank's columns of the output gradient
    bool sharded = false;  // sequence parallelism: x holds this rank's rows only
  };
  ParamTable& params_;
  int weight_ = -1, bias_ = -1;
  int64_t in_ = 0, out_ = 0;  // global
  bool gather_ = false;
  const char* label_ = nullptr;
  TensorParallel tp_;
  Slots<Slot> slots_;
};

class RowParallelLinear {
 public:
  /// Declares "<prefix>.weight" [out, in] (split on dim 1) and, with bias, "<prefix>.bias"
  /// (the same on every tensor rank, added once after the sum). With skip_bias_add (Megatron's
  /// name) forward leaves the bias to the caller, who fuses it into bias + dropout + residual.
  RowParallelLinear(ParamTable& params, const std::string& prefix, int64_t in, int64_t out,
                    bool bias, float init_std, TensorParallel tp, bool skip_bias_add = false);

  /// x [N, in/t] -> [N, out], summed over the tensor group (this rank's [N/t, out] of it when
  /// sequence-sharded), plus bias (unless skip_bias_add).
  Tensor forward(const Tensor& x, const Step& step);
  /// dy [N, out] (the same on every tensor rank; this rank's [N/t, out] when sequence-sharded)
  /// -> dx [N, in/t]. With `pre_gelu` [N, in/t] (the input of the GeLU that produced this
  /// layer's input) the result is the gradient before the GeLU.
  Tensor backward_input(const Tensor& dy, const Step& step, const Tensor* pre_gelu = nullptr);
  /// The bias [out] in the model's storage type (undefined without bias), for skip_bias_add
  /// callers.
  Tensor bias() const { return bias_ >= 0 ? params_.weight(bias_) : Tensor(); }
  void backward_weight(const Step& step);
  void release(const Step& step) { slots_.release(step.microbatch); }

  int weight_index() const { return weight_; }
  int bias_index() const { return bias_; }
  /// As ColumnParallelLinear::set_profile_label.
  void set_profile_label(const char* label) { label_ = label; }

 private:
  struct Slot {
    Tensor x;   // [N, in/t]
    Tensor dy;  // [N, out]: the whole output gradient, the same on every tensor rank
    bool sharded = false;  // sequence parallelism: the output was reduce-scattered along the rows
  };
  ParamTable& params_;
  int weight_ = -1, bias_ = -1;
  int64_t in_ = 0, out_ = 0;
  const char* label_ = nullptr;
  TensorParallel tp_;
  bool skip_bias_add_ = false;
  Slots<Slot> slots_;
};

}  // namespace ptdp
