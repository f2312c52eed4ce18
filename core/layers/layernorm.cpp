#include "core/layers/layernorm.h"

namespace ptdp {

LayerNorm::LayerNorm(ParamTable& params, const std::string& prefix, int64_t h, float eps)
    : params_(params), h_(h), eps_(eps), slots_(prefix) {
  weight_ = params.add(prefix + ".weight", {h}, -1, ParamInit::Ones, 0.0f, false);
  bias_ = params.add(prefix + ".bias", {h}, -1, ParamInit::Zeros, 0.0f, false);
}

Tensor LayerNorm::forward(const Tensor& x, const Step& step) {
  const int64_t n = rows_of(x, h_, "layernorm input");
  Slot& s = slots_.create(step.microbatch);
  s.x = x;
  s.mean = Tensor::empty({n}, DType::F32, x.device());
  s.rstd = Tensor::empty({n}, DType::F32, x.device());
  Tensor y = Tensor::empty({n, h_}, DType::F32, x.device());
  x.backend().layernorm_forward(x.data<float>(), params_.param(weight_).data<float>(),
                                params_.param(bias_).data<float>(), y.data<float>(), s.mean.data<float>(),
                                s.rstd.data<float>(), n, h_, eps_);
  return y;
}

Tensor LayerNorm::backward_input(const Tensor& dy, const Step& step) {
  Slot& s = slots_.get(step.microbatch);
  const int64_t n = rows_of(s.x, h_, "layernorm input");
  Tensor dx = Tensor::empty({n, h_}, DType::F32, dy.device());
  dy.backend().layernorm_backward(s.x.data<float>(), params_.param(weight_).data<float>(), s.mean.data<float>(),
                                  s.rstd.data<float>(), dy.data<float>(), dx.data<float>(),
                                  params_.grad(weight_).data<float>(), params_.grad(bias_).data<float>(), n, h_,
                                  true);
  slots_.release(step.microbatch);
  return dx;
}

namespace {

Tensor apply_dropout(const Tensor& in, float p, const Step& step, int layer, DropoutSite site, uint64_t seed,
                     bool backward) {
  if (!step.training || p == 0.0f) return in;
  Tensor out = Tensor::empty(in.shape(), DType::F32, in.device());
  DropoutDesc d;
  d.p = p;
  d.rng = PhiloxStream{seed, dropout_stream(step, layer, site)};
  d.block = GlobalBlock::flat(in.numel());
  if (backward) in.backend().dropout_backward(in.data<float>(), out.data<float>(), d);
  else in.backend().dropout_forward(in.data<float>(), out.data<float>(), d);
  return out;
}

}  // namespace

Tensor dropout_forward(const Tensor& x, float p, const Step& step, int layer, DropoutSite site, uint64_t seed) {
  return apply_dropout(x, p, step, layer, site, seed, false);
}

Tensor dropout_backward(const Tensor& dy, float p, const Step& step, int layer, DropoutSite site, uint64_t seed) {
  return apply_dropout(dy, p, step, layer, site, seed, true);
}

}  // namespace ptdp
