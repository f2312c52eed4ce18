#include "core/layers/linear.h"

#include "kernels/error.h"

namespace ptdp {

// ---- column-parallel ------------------------------------------------------------------------

ColumnParallelLinear::ColumnParallelLinear(ParamTable& params, const std::string& prefix, int64_t in,
                                           int64_t out, bool bias, bool gather_output, float init_std,
                                           TensorParallel tp)
    : params_(params), in_(in), out_(out), gather_(gather_output), tp_(tp), slots_(prefix) {
  weight_ = params.add(prefix + ".weight", {out, in}, 0, ParamInit::Normal, init_std);
  if (bias) bias_ = params.add(prefix + ".bias", {out}, 0, ParamInit::Zeros, 0.0f, false);
}

ColumnParallelLinear::ColumnParallelLinear(ParamTable& params, int shared_weight, bool gather_output,
                                           TensorParallel tp)
    : params_(params), weight_(shared_weight), gather_(gather_output), tp_(tp),
      slots_(params.info(shared_weight).name + " (shared)") {
  const ParamInfo& w = params.info(shared_weight);
  PTDP_CHECK_ARG(w.global_shape.ndim() == 2 && w.partition_dim == 0,
                 "a shared column-parallel weight must be 2-D and split on dim 0: " + w.name);
  out_ = w.global_shape[0];
  in_ = w.global_shape[1];
}

Tensor ColumnParallelLinear::forward(const Tensor& x, const Step& step) {
  const Tensor w = params_.param(weight_);
  const Tensor b = bias_ >= 0 ? params_.param(bias_) : Tensor();
  const int64_t n = rows_of(x, in_, "column-parallel input");
  const int64_t out_local = out_ / tp_.size;
  Tensor y = Tensor::empty({n, out_local}, DType::F32, x.device());
  linear_forward(x, w, bias_ >= 0 ? &b : nullptr, y);
  slots_.create(step.microbatch).x = x;
  if (!gather_ || tp_.size == 1) return y;
  // The gathered chunks are [t][N][out/t]; interleave them into [N, out].
  Tensor chunks = Tensor::empty({tp_.size * n * out_local}, DType::F32, x.device());
  tp_.all_gather(y.reshape({n * out_local}), chunks);
  Tensor full = Tensor::empty({n, out_}, DType::F32, x.device());
  for (int r = 0; r < tp_.size; ++r) {
    x.backend().copy_2d(full.data<float>() + r * out_local, out_, chunks.data<float>() + r * n * out_local,
                        out_local, n, out_local);
  }
  return full;
}

Tensor ColumnParallelLinear::backward_input(const Tensor& dy_in, const Step& step) {
  Slot& s = slots_.get(step.microbatch);
  const int64_t n = rows_of(s.x, in_, "column-parallel input");
  const int64_t out_local = out_ / tp_.size;
  const int64_t want = gather_ ? n * out_ : n * out_local;
  PTDP_CHECK_ARG(dy_in.numel() == want, "column-parallel output gradient " + dy_in.str() +
                                            " does not match the output [" + std::to_string(n) + ", " +
                                            std::to_string(gather_ ? out_ : out_local) + "]");
  Tensor dy = dy_in;
  if (gather_ && tp_.size > 1) {  // keep this rank's columns of the gathered gradient
    dy = Tensor::empty({n, out_local}, DType::F32, dy_in.device());
    dy_in.backend().copy_2d(dy.data<float>(), out_local, dy_in.data<float>() + tp_.rank * out_local, out_, n,
                            out_local);
  }
  Tensor dx = Tensor::empty({n, in_}, DType::F32, dy.device());
  linear_dgrad(dy, params_.param(weight_), dx);
  tp_.all_reduce(dx);  // f's backward
  s.dy = dy;
  return dx;
}

void ColumnParallelLinear::backward_weight(const Step& step) {
  Slot& s = slots_.get(step.microbatch);
  PTDP_CHECK_ARG(s.dy.defined(), "column-parallel backward_weight before backward_input");
  const Tensor db = bias_ >= 0 ? params_.grad(bias_) : Tensor();
  linear_wgrad(s.dy, s.x, params_.grad(weight_), bias_ >= 0 ? &db : nullptr);
  slots_.release(step.microbatch);
}

// ---- row-parallel ---------------------------------------------------------------------------

RowParallelLinear::RowParallelLinear(ParamTable& params, const std::string& prefix, int64_t in, int64_t out,
                                     bool bias, float init_std, TensorParallel tp)
    : params_(params), in_(in), out_(out), tp_(tp), slots_(prefix) {
  weight_ = params.add(prefix + ".weight", {out, in}, 1, ParamInit::Normal, init_std);
  if (bias) bias_ = params.add(prefix + ".bias", {out}, -1, ParamInit::Zeros, 0.0f, false);
}

Tensor RowParallelLinear::forward(const Tensor& x, const Step& step) {
  const int64_t in_local = in_ / tp_.size;
  const int64_t n = rows_of(x, in_local, "row-parallel input");
  Tensor y = Tensor::empty({n, out_}, DType::F32, x.device());
  linear_forward(x, params_.param(weight_), nullptr, y);
  tp_.all_reduce(y);  // g's forward
  if (bias_ >= 0) x.backend().bias_add(y.data<float>(), params_.param(bias_).data<float>(), n, out_);
  slots_.create(step.microbatch).x = x;
  return y;
}

Tensor RowParallelLinear::backward_input(const Tensor& dy, const Step& step) {
  Slot& s = slots_.get(step.microbatch);
  const int64_t in_local = in_ / tp_.size;
  const int64_t n = rows_of(s.x, in_local, "row-parallel input");
  PTDP_CHECK_ARG(dy.numel() == n * out_, "row-parallel output gradient " + dy.str() + " does not match [" +
                                             std::to_string(n) + ", " + std::to_string(out_) + "]");
  Tensor dx = Tensor::empty({n, in_local}, DType::F32, dy.device());
  linear_dgrad(dy, params_.param(weight_), dx);
  s.dy = dy;
  return dx;
}

void RowParallelLinear::backward_weight(const Step& step) {
  Slot& s = slots_.get(step.microbatch);
  PTDP_CHECK_ARG(s.dy.defined(), "row-parallel backward_weight before backward_input");
  const Tensor db = bias_ >= 0 ? params_.grad(bias_) : Tensor();
  linear_wgrad(s.dy, s.x, params_.grad(weight_), bias_ >= 0 ? &db : nullptr);
  slots_.release(step.microbatch);
}

}  // namespace ptdp
