#include "core/layers/attention.h"

#include <cmath>

namespace ptdp {

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
  GemmDesc g;  // scores[j] = Q_j K_j^T for j = (batch, head)
  g.trans_b = true;
  g.m = s;
  g.n = s;
  g.k = dh;
  g.lda = row;
  g.ldb = row;
  g.ldc = s;
  g.batch = b * al;
  g.stride_a = 3 * dh;
  g.stride_b = 3 * dh;
  g.stride_c = s * s;
  const float* q = qkv.data<float>();
  be.gemm(g, q, q + dh, probs.data<float>());
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
  GemmDesc g;  // ctx_j = P_j V_j, written into [s, b, a/t, dh]
  g.m = s;
  g.n = dh;
  g.k = s;
  g.lda = s;
  g.ldb = b * al * 3 * dh;
  g.ldc = b * al * dh;
  g.batch = b * al;
  g.stride_a = s * s;
  g.stride_b = 3 * dh;
  g.stride_c = dh;
  x.backend().gemm(g, dropped.data<float>(), qkv.data<float>() + 2 * dh, ctx.data<float>());
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
  {  // dP_j = dctx_j V_j^T
    GemmDesc g;
    g.trans_b = true;
    g.m = s;
    g.n = s;
    g.k = dh;
    g.lda = row1;
    g.ldb = row3;
    g.ldc = s;
    g.batch = b * al;
    g.stride_a = dh;
    g.stride_b = 3 * dh;
    g.stride_c = s * s;
    be.gemm(g, dctx.data<float>(), q + 2 * dh, dprobs.data<float>());
  }
  {  // dV_j = P_j^T dctx_j
    GemmDesc g;
    g.trans_a = true;
    g.m = s;
    g.n = dh;
    g.k = s;
    g.lda = s;
    g.ldb = row1;
    g.ldc = row3;
    g.batch = b * al;
    g.stride_a = s * s;
    g.stride_b = dh;
    g.stride_c = 3 * dh;
    be.gemm(g, slot.probs_dropped.data<float>(), dctx.data<float>(), dq + 2 * dh);
  }
  if (step.training && cfg_.attention_dropout > 0.0f) {
    be.dropout_backward(dprobs.data<float>(), dprobs.data<float>(), probs_dropout(b, step));
  }
  // dS = softmax backward (the scale is applied inside).
  be.softmax_backward(slot.probs.data<float>(), dprobs.data<float>(), dprobs.data<float>(), b * al, s, s,
                      1.0f / std::sqrt(static_cast<float>(dh)));
  {  // dQ_j = dS_j K_j
    GemmDesc g;
    g.m = s;
    g.n = dh;
    g.k = s;
    g.lda = s;
    g.ldb = row3;
    g.ldc = row3;
    g.batch = b * al;
    g.stride_a = s * s;
    g.stride_b = 3 * dh;
    g.stride_c = 3 * dh;
    be.gemm(g, dprobs.data<float>(), q + dh, dq);
  }
  {  // dK_j = dS_j^T Q_j
    GemmDesc g;
    g.trans_a = true;
    g.m = s;
    g.n = dh;
    g.k = s;
    g.lda = s;
    g.ldb = row3;
    g.ldc = row3;
    g.batch = b * al;
    g.stride_a = s * s;
    g.stride_b = 3 * dh;
    g.stride_c = 3 * dh;
    be.gemm(g, dprobs.data<float>(), q, dq + dh);
  }
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
