#include "core/layers/moe/moe_layer.h"

#include <cmath>

#include "kernels/op_scope.h"

namespace ptdp {

namespace {

std::vector<float> to_host_f32(const Tensor& t) {
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  (t.dtype() == DType::F32 ? t : t.to(DType::F32)).copy_to_host(out.data(), out.size() * sizeof(float));
  return out;
}

Tensor from_host_f32(const std::vector<float>& v, const Shape& shape, DType dtype, Device device) {
  Tensor t = Tensor::from_host(v.data(), shape, DType::F32, device);
  return dtype == DType::F32 ? t : t.to(dtype);
}

// a + b, both [N, h].
Tensor sum(const Tensor& a, const Tensor& b) {
  Tensor y = empty_like(a, a.shape());  // [N, h]
  a.backend().add(a.raw(), b.raw(), y.raw(), a.dtype(), a.numel());
  return y;
}

}  // namespace

MoeLayer::MoeLayer(ParamTable& params, const std::string& prefix, const LayerConfig& cfg, TensorParallel tp)
    : cfg_(cfg),
      params_(params),
      tp_(tp),
      recompute_(cfg.moe.recompute && cfg.recompute != Recompute::Full),
      router_(params, prefix + ".router", cfg, tp),
      dispatcher_(make_token_dispatcher(cfg, tp, prefix)),
      experts_(params, prefix + ".experts", cfg, tp),
      slots_(prefix) {
  if (cfg.moe.shared_expert_intermediate_size > 0) {
    shared_ = std::make_unique<Mlp>(params, prefix + ".shared_experts", cfg, tp, cfg.moe.shared_expert_intermediate_size);
    if (cfg.moe.shared_expert_gate) {
      gate_ = params.add(prefix + ".shared_experts.gate_weight", {1, cfg.hidden_size}, -1, ParamInit::Normal,
                         cfg.init_method_std);
      if (tp.sequence_parallel && tp.size > 1) params.set_tp_reduced_grad(gate_);
    }
  }
}

Tensor MoeLayer::run_forward(const Tensor& x, const Step& step) {
  const int64_t h = cfg_.hidden_size;
  const Routing& r = router_.forward(x, step);
  std::vector<int64_t> counts;
  const Tensor xe = dispatcher_->dispatch(x, r, step, &counts);            // [R, h]
  Tensor out = dispatcher_->combine(experts_.forward(xe, counts, step), step);  // [N, h]
  if (!shared_) return out;
  Slot& s = slots_.create(step.microbatch);
  s.x = x;
  Tensor so = shared_->forward(x, step);  // [N, h]
  const Tensor bias = shared_->output_bias();
  if (bias.defined()) so.backend().bias_add(so.raw(), bias.raw(), so.dtype(), so.numel() / h, h);
  s.shared = so;
  if (gate_ < 0) return sum(out, so);
  // Qwen2-MoE's gate: sigmoid(x . gate_weight) per token, in fp32.
  const std::vector<float> xh = to_host_f32(x), w = to_host_f32(params_.weight(gate_)), sh = to_host_f32(so);
  const int64_t n = x.numel() / h;
  s.gate.resize(static_cast<std::size_t>(n));
  std::vector<float> gated(sh.size());
  for (int64_t i = 0; i < n; ++i) {
    double dot = 0.0;
    for (int64_t c = 0; c < h; ++c) dot += static_cast<double>(xh[static_cast<std::size_t>(i * h + c)]) * w[static_cast<std::size_t>(c)];
    const float g = 1.0f / (1.0f + std::exp(-static_cast<float>(dot)));
    s.gate[static_cast<std::size_t>(i)] = g;
    for (int64_t c = 0; c < h; ++c) gated[static_cast<std::size_t>(i * h + c)] = g * sh[static_cast<std::size_t>(i * h + c)];
  }
  return sum(out, from_host_f32(gated, x.shape(), x.dtype(), x.device()));
}

void MoeLayer::release_parts(const Step& step) {
  router_.release(step);
  dispatcher_->release(step);
  experts_.release(step);
  if (shared_) shared_->release(step);
  slots_.release(step.microbatch);
}

Tensor MoeLayer::forward(const Tensor& x, const Step& step) {
  Tensor out = run_forward(x, step);  // [N, h]
  if (recompute_ && step.training && !step.decoding) {
    release_parts(step);
    slots_.create(step.microbatch).x = x;
  }
  return out;
}

Tensor MoeLayer::backward_input(const Tensor& dy, const Step& step) {
  const int64_t h = cfg_.hidden_size;
  if (recompute_) {
    const Tensor x = slots_.get(step.microbatch).x;  // [N, h]
    slots_.release(step.microbatch);
    const PhaseScope recompute(Phase::Recompute);
    run_forward(x, step);  // the same routing, the same bits
  }
  std::vector<float> dprob;
  const Tensor dye = dispatcher_->combine_backward(dy, step, &dprob);                     // [R, h]
  Tensor dx = dispatcher_->dispatch_backward(experts_.backward_input(dye, step), step);  // [N, h]
  dx = sum(dx, router_.backward_input(dprob, step));
  if (!shared_) return dx;
  Slot& s = slots_.get(step.microbatch);
  Tensor dso = dy;  // [N, h]: the gradient of the shared experts' output
  if (gate_ >= 0) {
    const std::vector<float> d = to_host_f32(dy), sh = to_host_f32(s.shared), w = to_host_f32(params_.weight(gate_));
    const int64_t n = dy.numel() / h;
    std::vector<float> ds(d.size()), dgate(static_cast<std::size_t>(n)), dxg(d.size());
    for (int64_t i = 0; i < n; ++i) {
      const float g = s.gate[static_cast<std::size_t>(i)];
      double dot = 0.0;
      for (int64_t c = 0; c < h; ++c) {
        const std::size_t at = static_cast<std::size_t>(i * h + c);
        dot += static_cast<double>(d[at]) * sh[at];
        ds[at] = g * d[at];
      }
      const float dl = static_cast<float>(dot) * g * (1.0f - g);
      dgate[static_cast<std::size_t>(i)] = dl;
      for (int64_t c = 0; c < h; ++c) dxg[static_cast<std::size_t>(i * h + c)] = dl * w[static_cast<std::size_t>(c)];
    }
    s.dgate = Tensor::from_host(dgate.data(), {n}, DType::F32, dy.device());
    dso = from_host_f32(ds, dy.shape(), dy.dtype(), dy.device());
    dx = sum(dx, from_host_f32(dxg, dy.shape(), dy.dtype(), dy.device()));
  }
  return sum(dx, shared_->backward_input(dso, step));
}

void MoeLayer::backward_weight(const Step& step) {
  router_.backward_weight(step);
  experts_.backward_weight(step);
  if (!shared_) return;
  shared_->backward_weight(step);
  Slot& s = slots_.get(step.microbatch);
  if (gate_ >= 0) {
    const int64_t h = cfg_.hidden_size, n = s.dgate.numel();
    const Tensor x32 = s.x.dtype() == DType::F32 ? s.x : s.x.to(DType::F32);  // [N, h] fp32
    // Under sequence parallelism each tensor rank saw its own rows: summed over the group.
    const bool reduce = tp_.sequence_sharded(step.decoding);
    Tensor dw = reduce ? Tensor::zeros({1, h}, DType::F32, x32.device()) : params_.grad(gate_);  // [1, h] fp32
    linear_wgrad(s.dgate.reshape({n, 1}), x32, dw, nullptr);
    if (reduce) {
      tp_.all_reduce(dw);
      dw.backend().axpy(1.0f, dw.data<float>(), params_.grad(gate_).data<float>(), h);
    }
  }
  slots_.release(step.microbatch);
}

void MoeLayer::release(const Step& step) { release_parts(step); }

}  // namespace ptdp
