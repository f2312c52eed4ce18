#include "core/layers/attention.h"

#include <cmath>

#include "core/layers/dropout.h"
#include "kernels/error.h"

namespace ptdp {

namespace {

// One strided-batched GEMM over the b * a/t (batch, head) pairs: C_j = op(A_j) op(B_j) with
// operand j at A + j * sa (leading dimension lda), and so on.
struct Operand {
  const void* p;
  int64_t ld, stride;
};

void batched(Backend& be, DType type, bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t batch, Operand a,
             Operand b, void* c, int64_t ldc, int64_t sc) {
  GemmDesc g;
  g.a_type = g.b_type = g.c_type = type;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.lda = a.ld;
  g.ldb = b.ld;
  g.ldc = ldc;
  g.batch = batch;
  g.stride_a = a.stride;
  g.stride_b = b.stride;
  g.stride_c = sc;
  be.gemm(g, a.p, b.p, c);
}

}  // namespace

SelfAttention::SelfAttention(ParamTable& params, const std::string& prefix, const LayerConfig& cfg, int layer,
                             TensorParallel tp)
    : cfg_(cfg),
      layer_(layer),
      tp_(tp),
      heads_local_(cfg.num_attention_heads / tp.size),
      dh_(cfg.head_dim()),
      qkv_(params, prefix + ".linear_qkv", cfg.hidden_size, 3 * static_cast<int64_t>(cfg.hidden_size), true, false,
           cfg.init_method_std, tp),
      proj_(params, prefix + ".linear_proj", cfg.hidden_size, cfg.hidden_size, true,
            cfg.init_method_std / std::sqrt(2.0f * static_cast<float>(cfg.num_layers)), tp, true),
      slots_(prefix) {}

DropoutDesc SelfAttention::probs_dropout(int64_t b, const Step& step) const {
  const int64_t s = cfg_.seq_length;
  DropoutDesc d;
  d.p = cfg_.attention_dropout;
  d.rng = PhiloxStream{cfg_.seed, dropout_stream(step, layer_, DropoutSite::AttentionProbs)};
  // This rank's heads inside the global [b, a, s*s] probabilities: the serial run's mask.
  d.block.shape[0] = d.block.global_shape[0] = b;
  d.block.shape[1] = heads_local_;
  d.block.global_shape[1] = cfg_.num_attention_heads;
  d.block.shape[2] = d.block.global_shape[2] = s * s;
  d.block.offset[1] = tp_.rank * heads_local_;
  return d;
}

AttentionDesc SelfAttention::fused_desc(int64_t b, const Step& step) const {
  AttentionDesc d;
  d.s = cfg_.seq_length;
  d.b = b;
  d.heads = heads_local_;
  d.dh = dh_;
  d.scale = 1.0f / std::sqrt(static_cast<float>(dh_));
  if (step.training && cfg_.attention_dropout > 0.0f) d.dropout = probs_dropout(b, step);
  return d;
}

bool SelfAttention::fused(const Backend& be) const {
  switch (cfg_.attention) {
    case AttentionImpl::Unfused: return false;
    case AttentionImpl::Fused:
      if (!be.fused_attention_supported(cfg_.precision, dh_)) {
        throw_error(ErrorCode::Unsupported,
                    str_cat("attention = fused: the ", be.name(), " backend has no fused attention for ",
                            dtype_name(cfg_.precision), " with head dim ", dh_, " (use auto or unfused)"));
      }
      return true;
    case AttentionImpl::Auto:
      // On the CPU the unfused path runs on OpenBLAS GEMMs and is the faster one; the CPU's
      // fused kernel is the reference the GPU kernel is tested against.
      return be.device_type() != DeviceType::CPU && be.fused_attention_supported(cfg_.precision, dh_);
  }
  return false;
}

void SelfAttention::attention_probs(const Tensor& qkv, int64_t b, const Step& step, Tensor& probs,
                                    Tensor& dropped) const {
  const int64_t s = cfg_.seq_length, al = heads_local_, dh = dh_;
  const int64_t row = b * al * 3 * dh;  // distance between consecutive sequence positions
  const DType t = qkv.dtype();
  probs = empty_like(qkv, {b * al, s, s});
  Backend& be = qkv.backend();
  // scores_j = Q_j K_j^T for j = (batch, head)
  batched(be, t, false, true, s, s, dh, b * al, {element_ptr(qkv, 0), row, 3 * dh}, {element_ptr(qkv, dh), row, 3 * dh},
          probs.raw(), s, s * s);
  be.softmax_forward(probs.raw(), probs.raw(), t, b * al, s, s, 1.0f / std::sqrt(static_cast<float>(dh)), true);
  dropped = probs;
  if (step.training && cfg_.attention_dropout > 0.0f) {
    dropped = empty_like(probs, probs.shape());
    be.dropout_forward(probs.raw(), dropped.raw(), t, probs_dropout(b, step));
  }
}

Tensor SelfAttention::forward(const Tensor& x, const Step& step) {
  const int64_t s = cfg_.seq_length, al = heads_local_, dh = dh_;
  Tensor qkv = qkv_.forward(x, step);  // [s*b, 3 h/t]
  const int64_t b = rows_of(qkv, 3 * al * dh, "qkv") / s;
  Backend& be = x.backend();
  Tensor ctx = empty_like(qkv, {s * b, al * dh});
  Slot& slot = slots_.create(step.microbatch);
  slot.qkv = qkv;
  if (fused(be)) {
    slot.lse = Tensor::empty({b * al * s}, DType::F32, x.device());
    be.attention_forward(fused_desc(b, step), qkv.raw(), ctx.raw(), slot.lse.data<float>(), qkv.dtype());
    slot.ctx = ctx;
    return proj_.forward(ctx, step);
  }
  Tensor probs, dropped;
  attention_probs(qkv, b, step, probs, dropped);
  // ctx_j = P_j V_j, written into [s, b, a/t, dh]
  batched(be, qkv.dtype(), false, false, s, dh, s, b * al, {dropped.raw(), s, s * s},
          {element_ptr(qkv, 2 * dh), b * al * 3 * dh, 3 * dh}, ctx.raw(), b * al * dh, dh);
  if (cfg_.recompute != Recompute::Selective) {
    slot.probs = probs;
    slot.probs_dropped = dropped;
  }
  return proj_.forward(ctx, step);
}

Tensor SelfAttention::backward_input(const Tensor& dy, const Step& step) {
  Slot& slot = slots_.get(step.microbatch);
  const int64_t s = cfg_.seq_length, al = heads_local_, dh = dh_;
  const Tensor& qkv = slot.qkv;
  const DType t = qkv.dtype();
  const int64_t b = rows_of(qkv, 3 * al * dh, "qkv") / s;
  Backend& be = dy.backend();
  Tensor dctx = proj_.backward_input(dy, step);  // [s, b, a/t, dh]
  Tensor dqkv = empty_like(qkv, qkv.shape());
  if (slot.lse.defined()) {  // fused
    Tensor delta = Tensor::empty({b * al * s}, DType::F32, dy.device());
    be.attention_backward(fused_desc(b, step), qkv.raw(), slot.ctx.raw(), slot.lse.data<float>(), dctx.raw(),
                          dqkv.raw(), delta.data<float>(), t);
    slots_.release(step.microbatch);
    return qkv_.backward_input(dqkv, step);
  }
  if (!slot.probs.defined()) attention_probs(qkv, b, step, slot.probs, slot.probs_dropped);  // selective
  const int64_t row3 = b * al * 3 * dh, row1 = b * al * dh;
  Tensor dprobs = empty_like(qkv, {b * al, s, s});
  const int64_t n = b * al;
  // dP_j = dctx_j V_j^T;  dV_j = P_j^T dctx_j
  batched(be, t, false, true, s, s, dh, n, {dctx.raw(), row1, dh}, {element_ptr(qkv, 2 * dh), row3, 3 * dh},
          dprobs.raw(), s, s * s);
  batched(be, t, true, false, s, dh, s, n, {slot.probs_dropped.raw(), s, s * s}, {dctx.raw(), row1, dh},
          element_ptr(dqkv, 2 * dh), row3, 3 * dh);
  if (step.training && cfg_.attention_dropout > 0.0f) {
    be.dropout_backward(dprobs.raw(), dprobs.raw(), t, probs_dropout(b, step));
  }
  // dS = softmax backward (the scale is applied inside).
  be.softmax_backward(slot.probs.raw(), dprobs.raw(), dprobs.raw(), t, b * al, s, s,
                      1.0f / std::sqrt(static_cast<float>(dh)));
  // dQ_j = dS_j K_j;  dK_j = dS_j^T Q_j
  batched(be, t, false, false, s, dh, s, n, {dprobs.raw(), s, s * s}, {element_ptr(qkv, dh), row3, 3 * dh},
          dqkv.raw(), row3, 3 * dh);
  batched(be, t, true, false, s, dh, s, n, {dprobs.raw(), s, s * s}, {element_ptr(qkv, 0), row3, 3 * dh},
          element_ptr(dqkv, dh), row3, 3 * dh);
  slots_.release(step.microbatch);
  return qkv_.backward_input(dqkv, step);
}

void SelfAttention::backward_weight(const Step& step) {
  qkv_.backward_weight(step);
  proj_.backward_weight(step);
}

void SelfAttention::release(const Step& step) {
  qkv_.release(step);
  proj_.release(step);
  slots_.release(step.microbatch);
}

}  // namespace ptdp
