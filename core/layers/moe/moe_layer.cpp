#include "core/layers/moe/moe_layer.h"

#include <numeric>
#include <vector>

#include "kernels/op_scope.h"

namespace ptdp {

namespace {

// a + b, both [N, h].
Tensor sum(const Tensor& a, const Tensor& b) {
  Tensor y = empty_like(a, a.shape());  // [N, h]
  a.backend().add(a.raw(), b.raw(), y.raw(), a.dtype(), a.numel());
  return y;
}

// The gate as a one-expert sigmoid router: the top-1 of one sigmoid score is that score, so
// Backend::moe_router_forward and _backward compute sigmoid(l) and its gradient on the device.
RouterDesc gate_desc(int64_t tokens) {
  RouterDesc d;
  d.tokens = tokens;
  d.experts = 1;
  d.topk = 1;
  d.score = RouterScore::Sigmoid;
  return d;
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
  // Qwen2-MoE's gate: sigmoid(x . gate_weight) per token, in fp32, on the device; the rows are
  // scaled by it through moe_unpermute with one slot per token (row_of the identity).
  Backend& be = x.backend();
  const int64_t n = x.numel() / h;
  s.x32 = x.dtype() == DType::F32 ? x : x.to(DType::F32);                // [N, h] fp32
  s.gate_logit = Tensor::empty({n, 1}, DType::F32, x.device());          // [N, 1] fp32
  linear_forward(s.x32, gate_weight32(), nullptr, s.gate_logit);
  s.gate_slot = Tensor::empty({n}, DType::I32, x.device());              // [N] int32 (all 0)
  s.gate = Tensor::empty({n}, DType::F32, x.device());                   // [N] fp32
  std::vector<int32_t> iota(static_cast<std::size_t>(n));
  std::iota(iota.begin(), iota.end(), 0);
  s.identity = Tensor::from_host(iota.data(), {n}, DType::I32, x.device());  // [N] int32
  Tensor gated = empty_like(so, so.shape());  // [N, h]
  if (n > 0) {
    be.moe_router_forward(gate_desc(n), s.gate_logit.data<float>(), nullptr, s.gate_slot.data<int32_t>(),
                          s.gate.data<float>());
    be.moe_unpermute(so.raw(), so.dtype(), s.gate.data<float>(), s.identity.data<int32_t>(), n, 1, h, n, gated.raw());
  }
  return sum(out, gated);
}

Tensor MoeLayer::gate_weight32() const {
  const Tensor w = params_.weight(gate_);  // [1, h]
  return w.dtype() == DType::F32 ? w : w.to(DType::F32);
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
  Tensor dprob;  // [N * k] fp32
  const Tensor dye = dispatcher_->combine_backward(dy, step, &dprob);                     // [R, h]
  Tensor dx = dispatcher_->dispatch_backward(experts_.backward_input(dye, step), step);  // [N, h]
  dx = sum(dx, router_.backward_input(dprob, step));
  if (!shared_) return dx;
  Slot& s = slots_.get(step.microbatch);
  Tensor dso = dy;  // [N, h]: the gradient of the shared experts' output
  if (gate_ >= 0) {
    Backend& be = dy.backend();
    const int64_t n = dy.numel() / h;
    dso = empty_like(dy, dy.shape());                                // [N, h]
    Tensor dgate = Tensor::empty({n}, DType::F32, dy.device());      // [N] fp32: d loss / d gate
    s.dgate = Tensor::empty({n, 1}, DType::F32, dy.device());        // [N, 1] fp32: d loss / d gate logit
    Tensor dxg = Tensor::empty({n, h}, DType::F32, dy.device());     // [N, h] fp32
    if (n > 0) {
      be.moe_unpermute_backward(dy.raw(), s.shared.raw(), dy.dtype(), s.gate.data<float>(), s.identity.data<int32_t>(),
                                n, 1, h, n, dso.raw(), dgate.data<float>());
      be.moe_router_backward(gate_desc(n), s.gate_logit.data<float>(), s.gate_slot.data<int32_t>(), dgate.data<float>(),
                             s.dgate.data<float>(), false);
      linear_dgrad(s.dgate, gate_weight32(), dxg);
    }
    dx = sum(dx, dy.dtype() == DType::F32 ? dxg : dxg.to(dy.dtype()));
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
    const int64_t h = cfg_.hidden_size;
    const Tensor& x32 = s.x32;  // [N, h] fp32
    // Under sequence parallelism each tensor rank saw its own rows: summed over the group.
    const bool reduce = tp_.sequence_sharded(step.decoding);
    Tensor dw = reduce ? Tensor::zeros({1, h}, DType::F32, x32.device()) : params_.grad(gate_);  // [1, h] fp32
    linear_wgrad(s.dgate, x32, dw, nullptr);
    if (reduce) {
      tp_.all_reduce(dw);
      dw.backend().axpy(1.0f, dw.data<float>(), params_.grad(gate_).data<float>(), h);
    }
  }
  slots_.release(step.microbatch);
}

void MoeLayer::release(const Step& step) { release_parts(step); }

}  // namespace ptdp
