#include "core/layers/mlp.h"

#include <cmath>

namespace ptdp {

Mlp::Mlp(ParamTable& params, const std::string& prefix, const LayerConfig& cfg, TensorParallel tp)
    : fc1_(params, prefix + ".linear_fc1", cfg.hidden_size, cfg.ffn(), true, false, cfg.init_method_std, tp),
      fc2_(params, prefix + ".linear_fc2", cfg.ffn(), cfg.hidden_size, true,
           cfg.init_method_std / std::sqrt(2.0f * static_cast<float>(cfg.num_layers)), tp, true),
      slots_(prefix) {}

Tensor Mlp::forward(const Tensor& x, const Step& step) {
  Tensor pre;
  Tensor act = fc1_.forward(x, step, &pre);
  slots_.create(step.microbatch).pre_gelu = pre;
  return fc2_.forward(act, step);
}

Tensor Mlp::backward_input(const Tensor& dy, const Step& step) {
  Slot& s = slots_.get(step.microbatch);
  Tensor dpre = fc2_.backward_input(dy, step, &s.pre_gelu);
  slots_.release(step.microbatch);
  return fc1_.backward_input(dpre, step);
}

void Mlp::backward_weight(const Step& step) {
  fc1_.backward_weight(step);
  fc2_.backward_weight(step);
}

void Mlp::release(const Step& step) {
  fc1_.release(step);
  fc2_.release(step);
  slots_.release(step.microbatch);
}

}  // namespace ptdp
