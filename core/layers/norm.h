// The normalisation layers over the last dimension: LayerNorm (weight and bias) and RMSNorm
// (weight only), Megatron's --normalization. A norm over the hidden size has the same
// parameters on every tensor rank, and so are their gradients (its input and output gradient
// are), so they need no reduction. A norm over each attention head (--qk-layernorm) sees only
// this rank's heads: its weight gradients differ between tensor ranks and are summed over the
// tensor group in the backward (Megatron's qk-layernorm all-reduce). So does a norm over the
// hidden size under sequence parallelism, which sees only this rank's rows.
#pragma once

#include <string>

#include "core/layers/layer_config.h"
#include "core/layers/layer_support.h"
#include "core/params/params.h"

namespace ptdp {

/// The group a norm over the hidden size sums its weight gradients over: the tensor group under
/// sequence parallelism, else none (a group of one).
inline TensorParallel sequence_norm_group(const TensorParallel& tp) {
  return tp.sequence_parallel && tp.size > 1 ? tp : TensorParallel{};
}

class Norm {
 public:
  /// Declares "<prefix>.weight" (ones) and, for LayerNorm, "<prefix>.bias" (zeros), [width]
  /// (h for the layer norms, dh for the q/k norms).
  /// With `tp` (size > 1) the parameters' gradients are summed over its ranks.
  Norm(ParamTable& params, const std::string& prefix, Normalization kind, int64_t width, float eps,
       TensorParallel tp = {});
  /// x [N, width] (any row count that is a multiple of width elements) -> y of x's shape.
  Tensor forward(const Tensor& x, const Step& step);
  /// dy, x's shape -> dx, x's shape; adds the parameter gradients (cheap enough not to defer).
  Tensor backward_input(const Tensor& dy, const Step& step);
  void backward_weight(const Step&) {}
  void release(const Step& step) { slots_.release(step.microbatch); }
  Normalization kind() const { return kind_; }

 private:
  struct Slot {
    Tensor x;     // [N, width]
    Tensor mean;  // [N] fp32, LayerNorm only
    Tensor rstd;  // [N] fp32
  };
  ParamTable& params_;
  Normalization kind_;
  int weight_ = -1, bias_ = -1;
  int64_t width_;
  float eps_;
  TensorParallel tp_;
  Slots<Slot> slots_;
};

/// An RMSNorm over a row that the tensor ranks split by heads (--qk-layernorm-across-heads: OLMo
/// 2's and OLMoE's q/k norms over a token's whole query projection [a*dh] or key projection
/// [g*dh]). Each rank holds its heads' columns of the row and of the weight; the row sums of
/// squares and the backward's row sums of dy * weight * x are all-reduced over the tensor group,
/// so every rank normalises by the whole row's rms. The weight is split (partition dim 0), so
/// its gradient, from this rank's columns only, needs no reduction.
class ProjectionNorm {
 public:
  /// Declares "<prefix>.weight" (ones), global [width], this rank's [width / tp.size].
  ProjectionNorm(ParamTable& params, const std::string& prefix, int64_t width, float eps, TensorParallel tp);
  /// x [N, width/t] (any shape of a multiple of width/t elements) -> y of x's shape. Collective
  /// over the tensor group.
  Tensor forward(const Tensor& x, const Step& step);
  /// dy, x's shape -> dx, x's shape; adds the weight's gradient. Collective over the tensor group.
  Tensor backward_input(const Tensor& dy, const Step& step);
  void release(const Step& step) { slots_.release(step.microbatch); }

 private:
  struct Slot {
    Tensor x;     // [N, width/t]
    Tensor rstd;  // [N] fp32, the whole row's
  };
  ParamTable& params_;
  int weight_ = -1;
  int64_t width_, local_;  // the whole row's width; this rank's columns
  float eps_;
  TensorParallel tp_;
  Slots<Slot> slots_;
};

}  // namespace ptdp
