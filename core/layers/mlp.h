// The MLP block: h -> ffn (column-parallel, GeLU, no communication) -> h (row-parallel, one
// all-reduce). fc1's bias and the GeLU are fused into its GEMM's epilogue (the pre-GeLU values
// kept for the backward), the GeLU's derivative into fc2's input-gradient GEMM, and fc2's bias
// is left to the caller's fused bias + dropout + residual add.
#pragma once

#include <string>

#include "core/layers/linear.h"
#include "core/layers/layer_config.h"

namespace ptdp {

class Mlp {
 public:
  Mlp(ParamTable& params, const std::string& prefix, const LayerConfig& cfg, TensorParallel tp);
  /// x [N, h] -> fc2's output [N, h] without fc2's bias (see output_bias()).
  Tensor forward(const Tensor& x, const Step& step);
  /// dy is the gradient of forward's output plus bias.
  Tensor backward_input(const Tensor& dy, const Step& step);
  Tensor output_bias() const { return fc2_.bias(); }
  void backward_weight(const Step& step);
  void release(const Step& step);

 private:
  struct Slot {
    Tensor pre_gelu;  // fc1's output plus bias, the GeLU's input
  };
  ColumnParallelLinear fc1_;
  RowParallelLinear fc2_;
  Slots<Slot> slots_;
};

}  // namespace ptdp
