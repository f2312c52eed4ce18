// The MLP block: h -> ffn (column-parallel, GeLU, no communication) -> h (row-parallel, one
// all-reduce).
#pragma once

#include <string>

#include "core/layers/linear.h"
#include "core/model/gpt_config.h"

namespace ptdp {

class Mlp {
 public:
  Mlp(ParamTable& params, const std::string& prefix, const GptConfig& cfg, TensorParallel tp);
  Tensor forward(const Tensor& x, const Step& step);
  Tensor backward_input(const Tensor& dy, const Step& step);
  void backward_weight(const Step& step);
  void release(const Step& step);

 private:
  struct Slot {
    Tensor pre_gelu;  // fc1's output
  };
  ColumnParallelLinear fc1_;
  RowParallelLinear fc2_;
  Slots<Slot> slots_;
};

}  // namespace ptdp
