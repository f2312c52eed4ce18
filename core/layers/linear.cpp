#include "core/layers/linear.h"

#include "base/error.h"

namespace ptdp {

// ---- column-parallel ------------------------------------------------------------------------

ColumnParallelLinear::ColumnParallelLinear(ParamTable& params, const std::string& prefix, int64_t in,
                                           int64_t out, bool bias, bool gather_output, float init_std,
                                           TensorParallel tp, int blocks)
    : params_(params), in_(in), out_(out), gather_(gather_output), tp_(tp), slots_(prefix) {
  PTDP_CHECK_ARG(blocks == 1 || !gather_output, prefix + ": a blocked column-parallel output cannot be gathered");
  weight_ = params.add(prefix + ".weight", {out, in}, 0, ParamInit::Normal, init_std, true, blocks);
  if (bias) bias_ = params.add(prefix + ".bias", {out}, 0, ParamInit::Zeros, 0.0f, false, blocks);
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

Tensor ColumnParallelLinear::forward(const Tensor& x_in, const Step& step, Tensor* pre_gelu) {
  const OpScope scope(label_);
  // Sequence parallelism: the input is this rank's rows; the block needs all of them. Only the
  // rows are kept: backward_weight gathers them again (Korthikanti et al.'s memory saving).
  const bool sharded = tp_.sequence_sharded(step.decoding);
  const Tensor x = sharded ? gather_sequence(tp_, x_in, in_) : copy_to_tensor_region(tp_, x_in);  // [N, in]
  const Tensor w = params_.weight(weight_);                         // [out/t, in]
  const Tensor b = bias_ >= 0 ? params_.weight(bias_) : Tensor();  // [out/t]
  const int64_t n = rows_of(x, in_, "column-parallel input");
  const int64_t out_local = out_ / tp_.size;
  Tensor y = empty_like(x, {n, out_local});  // [N, out/t]
  if (pre_gelu) {
    PTDP_CHECK_ARG(!gather_, "column-parallel: a fused GeLU needs an output that is not gathered");
    *pre_gelu = empty_like(x, {n, out_local});
  }
  if (pre_gelu && bias_ < 0) {  // no GeLU-only epilogue: the product, then the GeLU
    linear_forward(x, w, nullptr, *pre_gelu);
    x.backend().gelu_forward(pre_gelu->raw(), y.raw(), y.dtype(), y.numel());
  } else {
    linear_forward(x, w, bias_ >= 0 ? &b : nullptr, y, pre_gelu);
  }
  Slot& slot = slots_.create(step.microbatch);
  slot.x = sharded ? x_in : x;
  slot.sharded = sharded;
  return gather_ ? gather_from_tensor_region(tp_, y, out_) : y;
}

Tensor ColumnParallelLinear::backward_input(const Tensor& dy_in, const Step& step) {
  const OpScope scope(label_);
  Slot& s = slots_.get(step.microbatch);
  const int64_t n = rows_of(s.x, in_, "column-parallel input") * (s.sharded ? tp_.size : 1);
  const int64_t out_local = out_ / tp_.size;
  const int64_t want = gather_ ? n * out_ : n * out_local;
  PTDP_CHECK_ARG(dy_in.numel() == want, "column-parallel output gradient " + dy_in.str() +
                                            " does not match the output [" + std::to_string(n) + ", " +
                                            std::to_string(gather_ ? out_ : out_local) + "]");
  // The gathered output's backward keeps this rank's columns.
  const Tensor dy =  // [N, out/t]
      gather_ ? scatter_to_tensor_region(tp_, dy_in.reshape({n, out_}), out_) : dy_in;
  Tensor dx = empty_like(dy, {n, in_});  // [N, in]: this rank's part of the sum
  linear_dgrad(dy, params_.weight(weight_), dx);
  s.dy = dy;
  if (s.sharded) return reduce_scatter_sequence(tp_, dx, in_);
  copy_to_tensor_region_backward(tp_, dx);
  return dx;
}

void ColumnParallelLinear::backward_weight(const Step& step) {
  const OpScope scope(label_);
  Slot& s = slots_.get(step.microbatch);
  PTDP_CHECK_ARG(s.dy.defined(), "column-parallel backward_weight before backward_input");
  const Tensor db = bias_ >= 0 ? params_.grad(bias_) : Tensor();     // [out/t] fp32
  const Tensor x = s.sharded ? gather_sequence(tp_, s.x, in_) : s.x;  // [N, in]
  linear_wgrad(s.dy, x, params_.grad(weight_), bias_ >= 0 ? &db : nullptr);
  slots_.release(step.microbatch);
}

// ---- row-parallel ---------------------------------------------------------------------------

RowParallelLinear::RowParallelLinear(ParamTable& params, const std::string& prefix, int64_t in, int64_t out,
                                     bool bias, float init_std, TensorParallel tp, bool skip_bias_add)
    : params_(params), in_(in), out_(out), tp_(tp), skip_bias_add_(skip_bias_add), slots_(prefix) {
  weight_ = params.add(prefix + ".weight", {out, in}, 1, ParamInit::Normal, init_std);
  if (bias) bias_ = params.add(prefix + ".bias", {out}, -1, ParamInit::Zeros, 0.0f, false);
}

Tensor RowParallelLinear::forward(const Tensor& x, const Step& step) {
  const OpScope scope(label_);
  const int64_t in_local = in_ / tp_.size;
  const int64_t n = rows_of(x, in_local, "row-parallel input");
  Tensor y = empty_like(x, {n, out_});  // [N, out]: partial sums, then the sum or its [N/t, out] rows
  linear_forward(x, params_.weight(weight_), nullptr, y);
  // Sequence parallelism: the partial sums are reduce-scattered, each rank keeping its rows.
  const bool sharded = tp_.sequence_sharded(step.decoding);
  if (sharded) {
    y = reduce_scatter_sequence(tp_, y, out_);
  } else {
    reduce_from_tensor_region(tp_, y);
  }
  if (bias_ >= 0 && !skip_bias_add_) {
    x.backend().bias_add(y.raw(), params_.weight(bias_).raw(), y.dtype(), y.numel() / out_, out_);
  }
  Slot& slot = slots_.create(step.microbatch);
  slot.x = x;
  slot.sharded = sharded;
  return y;
}

Tensor RowParallelLinear::backward_input(const Tensor& dy_out, const Step& step, const Tensor* pre_gelu) {
  const OpScope scope(label_);
  Slot& s = slots_.get(step.microbatch);
  // Under sequence parallelism the output gradient arrives as this rank's rows: gathered, it is
  // the whole gradient, the same on every rank (so is the bias gradient computed from it).
  const Tensor dy =  // [N, out]
      s.sharded ? gather_sequence(tp_, dy_out, out_) : reduce_from_tensor_region_backward(tp_, dy_out);
  const int64_t in_local = in_ / tp_.size;
  const int64_t n = rows_of(s.x, in_local, "row-parallel input");
  PTDP_CHECK_ARG(dy.numel() == n * out_, "row-parallel output gradient " + dy.str() + " does not match [" +
                                             std::to_string(n) + ", " + std::to_string(out_) + "]");
  Tensor dx = empty_like(dy, {n, in_local});  // [N, in/t]
  linear_dgrad(dy, params_.weight(weight_), dx, pre_gelu);
  s.dy = dy;
  return dx;
}

void RowParallelLinear::backward_weight(const Step& step) {
  const OpScope scope(label_);
  Slot& s = slots_.get(step.microbatch);
  PTDP_CHECK_ARG(s.dy.defined(), "row-parallel backward_weight before backward_input");
  const Tensor db = bias_ >= 0 ? params_.grad(bias_) : Tensor();  // [out] fp32
  linear_wgrad(s.dy, s.x, params_.grad(weight_), bias_ >= 0 ? &db : nullptr);
  slots_.release(step.microbatch);
}

}  // namespace ptdp
