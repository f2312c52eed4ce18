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
  Tensor y = empty_like(x, {n, h_});
  x.backend().layernorm_forward(x.raw(), params_.weight(weight_).raw(), params_.weight(bias_).raw(), y.raw(),
                                x.dtype(), s.mean.data<float>(), s.rstd.data<float>(), n, h_, eps_);
  return y;
}

Tensor LayerNorm::backward_input(const Tensor& dy, const Step& step) {
  Slot& s = slots_.get(step.microbatch);
  const int64_t n = rows_of(s.x, h_, "layernorm input");
  PTDP_CHECK_ARG(dy.dtype() == s.x.dtype(), "layernorm: gradient " + dy.str() + " and input " + s.x.str() +
                                                 " must have the same storage type");
  Tensor dx = empty_like(dy, {n, h_});
  dy.backend().layernorm_backward(s.x.raw(), params_.weight(weight_).raw(), s.mean.data<float>(), s.rstd.data<float>(),
                                  dy.raw(), dx.raw(), dy.dtype(), params_.grad(weight_).data<float>(),
                                  params_.grad(bias_).data<float>(), n, h_, true);
  slots_.release(step.microbatch);
  return dx;
}

DropoutDesc flat_dropout(int64_t n, float p, const Step& step, int layer, DropoutSite site, uint64_t seed) {
  DropoutDesc d;
  if (!step.training) return d;  // p = 0: none
  d.p = p;
  d.rng = PhiloxStream{seed, dropout_stream(step, layer, site)};
  d.block = GlobalBlock::flat(n);
  return d;
}

namespace {

Tensor apply_dropout(const Tensor& in, float p, const Step& step, int layer, DropoutSite site, uint64_t seed,
                     bool backward) {
  if (!step.training || p == 0.0f) return in;
  Tensor out = empty_like(in, in.shape());
  const DropoutDesc d = flat_dropout(in.numel(), p, step, layer, site, seed);
  if (backward) in.backend().dropout_backward(in.raw(), out.raw(), in.dtype(), d);
  else in.backend().dropout_forward(in.raw(), out.raw(), in.dtype(), d);
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
