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

}  // namespace ptdp
