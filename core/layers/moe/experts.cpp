#include "core/layers/moe/experts.h"

#include <cmath>

#include "base/error.h"
#include "kernels/op_scope.h"

namespace ptdp {

GroupedExperts::GroupedExperts(ParamTable& params, const std::string& prefix, const LayerConfig& cfg,
                               TensorParallel tp)
    : params_(params), swiglu_(cfg.swiglu), h_(cfg.hidden_size), slots_(prefix) {
  const ExpertParallel& ep = tp.ep;
  const int e = cfg.moe.num_experts;
  PTDP_CHECK_ARG(e % ep.ep_size == 0, "--num-experts " + std::to_string(e) +
                                          " is not divisible by --expert-model-parallel-size " + std::to_string(ep.ep_size));
  local_ = e / ep.ep_size;
  const int64_t ffn = cfg.moe_ffn(), rows = (swiglu_ ? 2 : 1) * ffn;
  PTDP_CHECK_ARG(ffn % ep.etp_size == 0, "--moe-ffn-hidden-size " + std::to_string(ffn) +
                                             " is not divisible by --expert-tensor-parallel-size " +
                                             std::to_string(ep.etp_size));
  width_ = ffn / ep.etp_size;
  bias_on_rank_ = ep.etp_rank == 0;
  const float out_std = cfg.init_method_std / std::sqrt(2.0f * static_cast<float>(cfg.num_layers));
  const int first = ep.ep_rank * local_;
  // Declared like the dense MLP's (add() slices over the tensor group), then re-sliced over the
  // ExpertTensor group.
  const auto add = [&](const std::string& name, const Shape& shape, int dim, ParamInit init, float std, bool decay,
                       int blocks) {
    const int i = params.add(name, shape, dim, init, std, decay, blocks);
    params.set_expert(i, ep.etp_rank, ep.etp_size);
    return i;
  };
  const int blocks = swiglu_ ? 2 : 1;
  for (int j = 0; j < local_; ++j) {
    fc1_w_.push_back(add(prefix + ".linear_fc1.weight" + std::to_string(first + j), {rows, h_}, 0, ParamInit::Normal,
                         cfg.init_method_std, true, blocks));
  }
  for (int j = 0; j < local_; ++j) {
    fc2_w_.push_back(add(prefix + ".linear_fc2.weight" + std::to_string(first + j), {h_, ffn}, 1, ParamInit::Normal,
                         out_std, true, 1));
  }
  for (int j = 0; j < local_; ++j) {
    fc1_b_.push_back(cfg.add_bias_linear ? add(prefix + ".linear_fc1.bias" + std::to_string(first + j), {rows}, 0,
                                               ParamInit::Zeros, 0.0f, false, blocks)
                                         : -1);
    fc2_b_.push_back(cfg.add_bias_linear ? add(prefix + ".linear_fc2.bias" + std::to_string(first + j), {h_}, -1,
                                               ParamInit::Zeros, 0.0f, false, 1)
                                         : -1);
  }
}

Tensor GroupedExperts::forward(const Tensor& x, const std::vector<int64_t>& counts, const Step& step) {
  const OpScope scope("experts");
  PTDP_CHECK_ARG(static_cast<int>(counts.size()) == local_, "experts: " + std::to_string(counts.size()) +
                                                                " row counts for " + std::to_string(local_) + " experts");
  const int64_t r = rows_of(x, h_, "experts input");
  const int64_t pre_cols = (swiglu_ ? 2 : 1) * width_;
  Slot& s = slots_.create(step.microbatch);
  s.x = x;
  s.counts = counts;
  s.pre = empty_like(x, {r, pre_cols});  // [R, ffn_e/etp] (SwiGLU: [R, 2*ffn_e/etp])
  s.act = empty_like(x, {r, width_});    // [R, ffn_e/etp]
  Tensor y = empty_like(x, {r, h_});     // [R, h]
  Backend& be = x.backend();
  int64_t row = 0;
  for (int j = 0; j < local_; ++j) {
    const int64_t n = counts[static_cast<std::size_t>(j)];
    if (n == 0) continue;
    const Tensor xj = x.view(row * h_, {n, h_});
    const Tensor pre = s.pre.view(row * pre_cols, {n, pre_cols});
    const Tensor act = s.act.view(row * width_, {n, width_});
    const Tensor b1 = fc1_b_[static_cast<std::size_t>(j)] >= 0 ? params_.weight(fc1_b_[static_cast<std::size_t>(j)]) : Tensor();
    if (swiglu_) {
      linear_forward(xj, params_.weight(fc1_w_[static_cast<std::size_t>(j)]), b1.defined() ? &b1 : nullptr, pre);
      be.swiglu_forward(pre.raw(), act.raw(), pre.dtype(), n, width_);
    } else if (b1.defined()) {
      linear_forward(xj, params_.weight(fc1_w_[static_cast<std::size_t>(j)]), &b1, act, &pre);
    } else {
      linear_forward(xj, params_.weight(fc1_w_[static_cast<std::size_t>(j)]), nullptr, pre);
      be.gelu_forward(pre.raw(), act.raw(), act.dtype(), act.numel());
    }
    const Tensor yj = y.view(row * h_, {n, h_});
    const int b2 = fc2_b_[static_cast<std::size_t>(j)];
    const Tensor bias2 = b2 >= 0 && bias_on_rank_ ? params_.weight(b2) : Tensor();
    linear_forward(act, params_.weight(fc2_w_[static_cast<std::size_t>(j)]), bias2.defined() ? &bias2 : nullptr, yj);
    row += n;
  }
  PTDP_CHECK_ARG(row == r, "experts: the row counts sum to " + std::to_string(row) + ", the input has " + std::to_string(r));
  return y;
}

Tensor GroupedExperts::backward_input(const Tensor& dy, const Step& step) {
  const OpScope scope("experts");
  Slot& s = slots_.get(step.microbatch);
  const int64_t r = rows_of(s.x, h_, "experts input");
  PTDP_CHECK_ARG(dy.numel() == r * h_, "experts: output gradient " + dy.str() + " does not match [" +
                                           std::to_string(r) + ", " + std::to_string(h_) + "]");
  const int64_t pre_cols = (swiglu_ ? 2 : 1) * width_;
  s.dy = dy;
  s.dpre = empty_like(dy, {r, pre_cols});  // [R, ffn_e/etp] (SwiGLU: [R, 2*ffn_e/etp])
  Tensor dx = empty_like(dy, {r, h_});     // [R, h]
  Backend& be = dy.backend();
  int64_t row = 0;
  for (int j = 0; j < local_; ++j) {
    const int64_t n = s.counts[static_cast<std::size_t>(j)];
    if (n == 0) continue;
    const Tensor dyj = dy.view(row * h_, {n, h_});
    const Tensor pre = s.pre.view(row * pre_cols, {n, pre_cols});
    const Tensor dpre = s.dpre.view(row * pre_cols, {n, pre_cols});
    const Tensor w2 = params_.weight(fc2_w_[static_cast<std::size_t>(j)]);
    if (swiglu_) {
      Tensor dact = empty_like(dy, {n, width_});  // [n, ffn_e/etp]
      linear_dgrad(dyj, w2, dact);
      be.swiglu_backward(pre.raw(), dact.raw(), dpre.raw(), dact.dtype(), n, width_);
    } else {
      linear_dgrad(dyj, w2, dpre, &pre);
    }
    linear_dgrad(dpre, params_.weight(fc1_w_[static_cast<std::size_t>(j)]), dx.view(row * h_, {n, h_}));
    row += n;
  }
  return dx;
}

void GroupedExperts::backward_weight(const Step& step) {
  const OpScope scope("experts");
  Slot& s = slots_.get(step.microbatch);
  PTDP_CHECK_ARG(s.dy.defined(), "experts backward_weight before backward_input");
  const int64_t pre_cols = (swiglu_ ? 2 : 1) * width_;
  int64_t row = 0;
  for (int j = 0; j < local_; ++j) {
    const std::size_t jj = static_cast<std::size_t>(j);
    const int64_t n = s.counts[jj];
    if (n == 0) continue;
    // fc2's bias gradient is the whole one on every etp rank (dy is the same on each).
    const Tensor db2 = fc2_b_[jj] >= 0 ? params_.grad(fc2_b_[jj]) : Tensor();  // [h] fp32
    const Tensor db1 = fc1_b_[jj] >= 0 ? params_.grad(fc1_b_[jj]) : Tensor();  // [ffn_e/etp (x2)] fp32
    linear_wgrad(s.dy.view(row * h_, {n, h_}), s.act.view(row * width_, {n, width_}), params_.grad(fc2_w_[jj]),
                 db2.defined() ? &db2 : nullptr);
    linear_wgrad(s.dpre.view(row * pre_cols, {n, pre_cols}), s.x.view(row * h_, {n, h_}), params_.grad(fc1_w_[jj]),
                 db1.defined() ? &db1 : nullptr);
    row += n;
  }
  slots_.release(step.microbatch);
}

}  // namespace ptdp
