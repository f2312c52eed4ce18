// The MLP block: h -> ffn (column-parallel, the activation, no communication) -> h (row-
// parallel, one all-reduce).
//   GeLU (GPT): fc1 is [ffn, h]; its bias and the GeLU are fused into its GEMM's epilogue (the
//     pre-GeLU values kept for the backward), the GeLU's derivative into fc2's input-gradient
//     GEMM.
//   SwiGLU (Llama, --swiglu): fc1 is [2 ffn, h], the gate rows then the up rows, and each
//     tensor rank holds its share of both (so its fc1 output is [N, gate share | up share] and
//     the activation silu(gate) * up needs no communication); one fused kernel applies it, its
//     input kept for the backward.
// fc2's bias (when the model has linear biases) is left to the caller's fused bias + dropout +
// residual add.
#pragma once

#include <string>

#include "core/layers/linear.h"
#include "core/layers/layer_config.h"

namespace ptdp {

class Mlp {
 public:
  /// `ffn` > 0 sets the width (an MoE layer's shared experts); 0: cfg.ffn().
  Mlp(ParamTable& params, const std::string& prefix, const LayerConfig& cfg, TensorParallel tp, int ffn = 0);
  /// x [N, h] -> fc2's output [N, h] without fc2's bias (see output_bias()); under sequence
  /// parallelism x and the output are this rank's [N/t, h].
  Tensor forward(const Tensor& x, const Step& step);
  /// dy, the gradient of forward's output plus bias (its shape) -> dx, x's shape.
  Tensor backward_input(const Tensor& dy, const Step& step);
  /// fc2's bias [h] in the model's storage type; undefined with --disable-bias-linear.
  Tensor output_bias() const { return fc2_.bias(); }
  void backward_weight(const Step& step);
  void release(const Step& step);

 private:
  struct Slot {
    Tensor pre;  // [N, ffn/t] (SwiGLU: [N, 2*ffn/t]): fc1's output plus bias, the activation's input
  };
  bool swiglu_;
  ColumnParallelLinear fc1_;
  RowParallelLinear fc2_;
  Slots<Slot> slots_;
};

}  // namespace ptdp
