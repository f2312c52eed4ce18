// LayerNorm over the hidden dimension; its parameters are the same on every tensor rank, and
// so are their gradients (its input and output gradient are), so they need no reduction.
#pragma once

#include <string>

#include "core/layers/layer_support.h"
#include "core/params/params.h"

namespace ptdp {

class LayerNorm {
 public:
  /// Declares "<prefix>.weight" (ones) and "<prefix>.bias" (zeros), [h].
  LayerNorm(ParamTable& params, const std::string& prefix, int64_t h, float eps);
  Tensor forward(const Tensor& x, const Step& step);
  /// Returns dx and adds the weight and bias gradients (cheap enough not to defer).
  Tensor backward_input(const Tensor& dy, const Step& step);
  void backward_weight(const Step&) {}
  void release(const Step& step) { slots_.release(step.microbatch); }

 private:
  struct Slot {
    Tensor x, mean, rstd;
  };
  ParamTable& params_;
  int weight_, bias_;
  int64_t h_;
  float eps_;
  Slots<Slot> slots_;
};

}  // namespace ptdp
