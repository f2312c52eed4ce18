#include "core/layers/mlp.h"

#include <cmath>

namespace ptdp {

Mlp::Mlp(ParamTable& params, const std::string& prefix, const LayerConfig& cfg, TensorParallel tp, int ffn)
    : swiglu_(cfg.swiglu),
      fc1_(params, prefix + ".linear_fc1", cfg.hidden_size,
           (cfg.swiglu ? 2 : 1) * static_cast<int64_t>(ffn > 0 ? ffn : cfg.ffn()), cfg.add_bias_linear, false,
           cfg.init_method_std, tp, cfg.swiglu ? 2 : 1),
      fc2_(params, prefix + ".linear_fc2", ffn > 0 ? ffn : cfg.ffn(), cfg.hidden_size, cfg.add_bias_linear,
           cfg.init_method_std / std::sqrt(2.0f * static_cast<float>(cfg.num_layers)), tp, true),
      slots_(prefix) {
  fc1_.set_profile_label("fc1");
  fc2_.set_profile_label("fc2");
}

Tensor Mlp::forward(const Tensor& x, const Step& step) {
  Tensor pre;  // [N, ffn/t] (SwiGLU: [N, 2*ffn/t], this rank's gate share, then its up share)
  Tensor act;  // [N, ffn/t]
  if (swiglu_) {
    pre = fc1_.forward(x, step);
    const int64_t cols = pre.dim(pre.ndim() - 1) / 2, rows = pre.numel() / (2 * cols);
    act = empty_like(pre, {rows, cols});
    x.backend().swiglu_forward(pre.raw(), act.raw(), pre.dtype(), rows, cols);
  } else {
    act = fc1_.forward(x, step, &pre);
  }
  slots_.create(step.microbatch).pre = pre;
  return fc2_.forward(act, step);
}

Tensor Mlp::backward_input(const Tensor& dy, const Step& step) {
  Slot& s = slots_.get(step.microbatch);
  Tensor dpre;  // [N, ffn/t] (SwiGLU: [N, 2*ffn/t])
  if (swiglu_) {
    const Tensor dact = fc2_.backward_input(dy, step);  // [N, ffn/t]
    const int64_t cols = dact.dim(dact.ndim() - 1), rows = dact.numel() / cols;
    dpre = empty_like(s.pre, s.pre.shape());
    dy.backend().swiglu_backward(s.pre.raw(), dact.raw(), dpre.raw(), dact.dtype(), rows, cols);
  } else {
    dpre = fc2_.backward_input(dy, step, &s.pre);
  }
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
