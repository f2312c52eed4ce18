#include "core/layers/norm.h"

#include <algorithm>
#include <string>

namespace ptdp {

Norm::Norm(ParamTable& params, const std::string& prefix, Normalization kind, int64_t width, float eps,
           TensorParallel tp)
    : params_(params), kind_(kind), width_(width), eps_(eps), tp_(tp), slots_(prefix) {
  weight_ = params.add(prefix + ".weight", {width}, -1, ParamInit::Ones, 0.0f, false);
  if (kind == Normalization::LayerNorm) bias_ = params.add(prefix + ".bias", {width}, -1, ParamInit::Zeros, 0.0f, false);
  if (tp_.size > 1) {
    params.set_tp_reduced_grad(weight_);
    if (bias_ >= 0) params.set_tp_reduced_grad(bias_);
  }
}

Tensor Norm::forward(const Tensor& x, const Step& step) {
  const int64_t n = rows_of(x, width_, "norm input");
  Slot& s = slots_.create(step.microbatch);
  s.x = x;
  s.rstd = Tensor::empty({n}, DType::F32, x.device());
  Tensor y = empty_like(x, x.shape());  // [N, width]
  Backend& be = x.backend();
  if (kind_ == Normalization::LayerNorm) {
    s.mean = Tensor::empty({n}, DType::F32, x.device());
    be.layernorm_forward(x.raw(), params_.weight(weight_).raw(), params_.weight(bias_).raw(), y.raw(), x.dtype(),
                         s.mean.data<float>(), s.rstd.data<float>(), n, width_, eps_);
  } else {
    be.rmsnorm_forward(x.raw(), params_.weight(weight_).raw(), y.raw(), x.dtype(), s.rstd.data<float>(), n, width_,
                       eps_);
  }
  return y;
}

Tensor Norm::backward_input(const Tensor& dy, const Step& step) {
  Slot& s = slots_.get(step.microbatch);
  const int64_t n = rows_of(s.x, width_, "norm input");
  PTDP_CHECK_ARG(dy.dtype() == s.x.dtype() && dy.numel() == s.x.numel(),
                 "norm: gradient " + dy.str() + " does not match the input " + s.x.str());
  Tensor dx = empty_like(dy, s.x.shape());  // [N, width]
  Backend& be = dy.backend();
  // Per-rank gradients that the tensor group sums go through a scratch copy first, so that only
  // this microbatch's contribution is reduced.
  const bool reduce = tp_.size > 1;
  Tensor dw = reduce ? Tensor::empty({width_}, DType::F32, dy.device()) : params_.grad(weight_);  // [width], fp32
  Tensor db;  // [width], fp32; LayerNorm only
  if (bias_ >= 0) db = reduce ? Tensor::empty({width_}, DType::F32, dy.device()) : params_.grad(bias_);
  if (kind_ == Normalization::LayerNorm) {
    be.layernorm_backward(s.x.raw(), params_.weight(weight_).raw(), s.mean.data<float>(), s.rstd.data<float>(),
                          dy.raw(), dx.raw(), dy.dtype(), dw.data<float>(), db.data<float>(), n, width_, !reduce);
  } else {
    be.rmsnorm_backward(s.x.raw(), params_.weight(weight_).raw(), s.rstd.data<float>(), dy.raw(), dx.raw(),
                        dy.dtype(), dw.data<float>(), n, width_, !reduce);
  }
  if (reduce) {
    tp_.all_reduce(dw);
    be.axpy(1.0f, dw.data<float>(), params_.grad(weight_).data<float>(), width_);
    if (db.defined()) {
      tp_.all_reduce(db);
      be.axpy(1.0f, db.data<float>(), params_.grad(bias_).data<float>(), width_);
    }
  }
  slots_.release(step.microbatch);
  return dx;
}

ProjectionNorm::ProjectionNorm(ParamTable& params, const std::string& prefix, int64_t width, float eps,
                               TensorParallel tp)
    : params_(params), width_(width), local_(width / std::max(tp.size, 1)), eps_(eps), tp_(tp), slots_(prefix) {
  PTDP_CHECK_ARG(width % std::max(tp.size, 1) == 0, prefix + ": width " + std::to_string(width) +
                                                        " is not divisible by the tensor parallel size " +
                                                        std::to_string(tp.size));
  weight_ = params.add(prefix + ".weight", {width}, 0, ParamInit::Ones, 0.0f, false);
}

Tensor ProjectionNorm::forward(const Tensor& x, const Step& step) {
  const int64_t n = rows_of(x, local_, "q/k norm input");
  Slot& s = slots_.create(step.microbatch);
  s.x = x;
  s.rstd = Tensor::empty({n}, DType::F32, x.device());  // this rank's sums of squares, then the row's rstd
  Tensor y = empty_like(x, x.shape());                   // [N, width/t]
  Backend& be = x.backend();
  const Tensor& w = params_.weight(weight_);
  be.row_dot(x.raw(), x.raw(), nullptr, x.dtype(), s.rstd.data<float>(), n, local_);
  if (tp_.size > 1) tp_.all_reduce(s.rstd);
  be.rmsnorm_split_forward(x.raw(), w.raw(), s.rstd.data<float>(), y.raw(), x.dtype(), s.rstd.data<float>(), n,
                           local_, width_, eps_);
  return y;
}

Tensor ProjectionNorm::backward_input(const Tensor& dy, const Step& step) {
  Slot& s = slots_.get(step.microbatch);
  const int64_t n = rows_of(s.x, local_, "q/k norm input");
  PTDP_CHECK_ARG(dy.dtype() == s.x.dtype() && dy.numel() == s.x.numel(),
                 "q/k norm: gradient " + dy.str() + " does not match the input " + s.x.str());
  Backend& be = dy.backend();
  const Tensor& w = params_.weight(weight_);
  Tensor dot = Tensor::empty({n}, DType::F32, dy.device());  // [N]: sum of dy * w * x over the whole row
  be.row_dot(dy.raw(), s.x.raw(), w.raw(), dy.dtype(), dot.data<float>(), n, local_);
  if (tp_.size > 1) tp_.all_reduce(dot);
  Tensor dx = empty_like(dy, s.x.shape());  // [N, width/t]
  be.rmsnorm_split_backward(s.x.raw(), w.raw(), s.rstd.data<float>(), dot.data<float>(), dy.raw(), dx.raw(),
                            dy.dtype(), params_.grad(weight_).data<float>(), n, local_, width_, true);
  slots_.release(step.microbatch);
  return dx;
}

}  // namespace ptdp
