#include "core/layers/attention.h"

#include <cmath>

namespace ptdp {

namespace {

// One strided-batched GEMM over the b * a/t (batch, head) pairs: C_j = op(A_j) op(B_j) with
// operand j at A + j * sa (leading dimension lda), and so on.
struct Operand {
  const float* p;
  int64_t ld, stride;
};

void batched(Backend& be, bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t batch, Operand a, Operand b,
             float* c, int64_t ldc, int64_t sc) {
  GemmDesc g;
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

SelfAttention::SelfAttention(ParamTable& params, const std::string& prefix, const GptConfig& cfg, int layer,
                             TensorParallel tp)
    : cfg_(cfg),
      layer_(layer),
      tp_(tp),
      heads_local_(cfg.num_attention_heads / tp.size),
      dh_(cfg.head_dim()),
      qkv_(params, prefix + ".linear_qkv", cfg.hidden_size, 3 * static_cast<int64_t>(cfg.hidden_size), true, false,
           cfg.init_method_std, tp),
      proj_(params, prefix + ".linear_proj", cfg.hidden_size, cfg.hidden_size, true,
            cfg.init_method_std / std::sqrt(2.0f * static_cast<float>(cfg.num_layers)), tp),
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

void SelfAttention::attention_probs(const Tensor& qkv, int64_t b, const Step& step, Tensor& probs,
                                    Tensor& dropped) const {
  const int64_t s = cfg_.seq_length, al = heads_local_, dh = dh_;
  const int64_t row = b * al * 3 * dh;  // distance between consecutive sequence positions
  probs = Tensor::empty({b * al, s, s}, DType::F32, qkv.device());
  Backend& be = qkv.backend();
  const float* q = qkv.data<float>();
  // scores_j = Q_j K_j^T for j = (batch, head)
  batched(be, false, true, s, s, dh, b * al, {q, row, 3 * dh}, {q + dh, row, 3 * dh}, probs.data<float>(), s, s * s);
  be.softmax_forward(probs.data<float>(), probs.data<float>(), b * al, s, s,
                     1.0f / std::sqrt(static_cast<float>(dh)), true);
  dropped = probs;
  if (step.training && cfg_.attention_dropout > 0.0f) {
    dropped = Tensor::empty(probs.shape(), DType::F32, probs.device());
    be.dropout_forward(probs.data<float>(), dropped.data<float>(), probs_dropout(b, step));
  }
}

Tensor SelfAttention::forward(const Tensor& x, const Step& step) {
  const int64_t s = cfg_.seq_length, al = heads_local_, dh = dh_;
  Tensor qkv = qkv_.forward(x, step);  // [s*b, 3 h/t]
  const int64_t b = rows_of(qkv, 3 * al * dh, "qkv") / s;
  Tensor probs, dropped;
  attention_probs(qkv, b, step, probs, dropped);
  Tensor ctx = Tensor::empty({s * b, al * dh}, DType::F32, x.device());
  // ctx_j = P_j V_j, written into [s, b, a/t, dh]
  batched(x.backend(), false, false, s, dh, s, b * al, {dropped.data<float>(), s, s * s},
          {qkv.data<float>() + 2 * dh, b * al * 3 * dh, 3 * dh}, ctx.data<float>(), b * al * dh, dh);
  Slot& slot = slots_.create(step.microbatch);
  slot.qkv = qkv;
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
  const int64_t b = rows_of(qkv, 3 * al * dh, "qkv") / s;
  if (!slot.probs.defined()) attention_probs(qkv, b, step, slot.probs, slot.probs_dropped);  // selective
  Backend& be = dy.backend();
  Tensor dctx = proj_.backward_input(dy, step);  // [s, b, a/t, dh]
  const int64_t row3 = b * al * 3 * dh, row1 = b * al * dh;
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::F32, dy.device());
  Tensor dprobs = Tensor::empty({b * al, s, s}, DType::F32, dy.device());
  const float* q = qkv.data<float>();
  float* dq = dqkv.data<float>();
  const int64_t n = b * al;
  // dP_j = dctx_j V_j^T;  dV_j = P_j^T dctx_j
  batched(be, false, true, s, s, dh, n, {dctx.data<float>(), row1, dh}, {q + 2 * dh, row3, 3 * dh},
          dprobs.data<float>(), s, s * s);
  batched(be, true, false, s, dh, s, n, {slot.probs_dropped.data<float>(), s, s * s}, {dctx.data<float>(), row1, dh},
          dq + 2 * dh, row3, 3 * dh);
  if (step.training && cfg_.attention_dropout > 0.0f) {
    be.dropout_backward(dprobs.data<float>(), dprobs.data<float>(), probs_dropout(b, step));
  }
  // dS = softmax backward (the scale is applied inside).
  be.softmax_backward(slot.probs.data<float>(), dprobs.data<float>(), dprobs.data<float>(), b * al, s, s,
                      1.0f / std::sqrt(static_cast<float>(dh)));
  // dQ_j = dS_j K_j;  dK_j = dS_j^T Q_j
  batched(be, false, false, s, dh, s, n, {dprobs.data<float>(), s, s * s}, {q + dh, row3, 3 * dh}, dq, row3, 3 * dh);
  batched(be, true, false, s, dh, s, n, {dprobs.data<float>(), s, s * s}, {q, row3, 3 * dh}, dq + dh, row3, 3 * dh);
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
