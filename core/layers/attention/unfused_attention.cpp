// The unfused core attention: scores GEMMs, scale + causal mask + softmax, dropout, context
// GEMMs, each GEMM strided-batched over qkv in place (no transposes).
//
// The GEMMs run once per query head j of a group, each batched over the b * g/t (sample, group)
// pairs: in the [s, b, g/t, a/g + 2, dh] projection the pairs are equally spaced, and so are the
// probabilities [b, a/t, s, s] and the context [s, b, a/t, dh] of query head j of every pair
// (query head k * a/g + j of group k). For a/g = 1 these are the multi-head GEMMs.
//
// The [b, a/t, s, s] probabilities are kept for the backward, unless selective recomputation
// (--recompute-granularity selective) rebuilds them there from q and k; the rebuild draws the
// same dropout mask, so it changes no bit. Packed documents go through
// softmax_forward_documents: a query's probabilities outside its document are exactly 0.
// QK-clip's largest logits come from the backend's block-pair kernel (record_max_logit).
#include <limits>
#include <string>

#include "base/error.h"
#include "core/layers/attention/core_attention.h"
#include "kernels/op_scope.h"

namespace ptdp {

namespace {

class UnfusedAttention final : public CoreAttention {
 public:
  explicit UnfusedAttention(const CoreAttentionSpec& spec) : spec_(spec), slots_(spec.owner + " (unfused)") {}

  std::string name() const override { return "unfused"; }

  Tensor forward(const Tensor& qkv, const AttentionBatch& batch, const Step& step) override {
    if (batch.max_logit != nullptr) record_max_logit(qkv, batch);
    const int64_t s = spec_.seq(), b = batch.b, qg = spec_.q_per_group, dh = spec_.dh;
    const int64_t pairs = b * spec_.groups, group = spec_.group_cols();
    Tensor ctx = empty_like(qkv, {s * b, spec_.ctx_cols()});  // [s*b, a/t*dh]
    Tensor probs, dropped;  // [b*a/t, s, s] after the softmax, and after the dropout
    probabilities(qkv, batch, step, probs, dropped);
    // ctx_(pair, j) = P_(pair, j) V_pair, written into [s, b, a/t, dh]
    Backend& be = qkv.backend();
    for (int64_t j = 0; j < qg; ++j) {
      const OpScope context("attn_context");
      strided_batched_gemm(be, qkv.dtype(), false, false, s, dh, s, pairs,
                           {element_ptr(dropped, j * s * s), s, qg * s * s},
                           {element_ptr(qkv, (qg + 1) * dh), pairs * group, group}, element_ptr(ctx, j * dh),
                           spec_.ctx_cols() * b, qg * dh);
    }
    Slot& slot = slots_.create(step.microbatch);
    slot.qkv = qkv;
    if (spec_.cfg->recompute != Recompute::Selective) {
      slot.probs = probs;
      slot.probs_dropped = dropped;
    }
    return ctx;
  }

  Tensor backward(const Tensor& dctx, const AttentionBatch& batch, const Step& step) override {
    Slot& slot = slots_.get(step.microbatch);
    const Tensor qkv = slot.qkv;  // [s*b, g/t*(a/g+2)*dh]
    const int64_t s = spec_.seq(), b = batch.b, qg = spec_.q_per_group, dh = spec_.dh;
    const int64_t pairs = b * spec_.groups, group = spec_.group_cols(), row3 = pairs * group;
    const int64_t row1 = b * spec_.ctx_cols();
    const DType t = qkv.dtype();
    Backend& be = dctx.backend();
    Tensor dqkv = empty_like(qkv, qkv.shape());  // [s*b, g/t*(a/g+2)*dh]
    if (!slot.probs.defined()) {  // selective recomputation
      const PhaseScope recompute(Phase::Recompute);
      probabilities(qkv, batch, step, slot.probs, slot.probs_dropped);
    }
    Tensor dprobs = empty_like(qkv, {b * spec_.heads, s, s});  // [b*a/t, s, s]
    const GemmOperand v{element_ptr(qkv, (qg + 1) * dh), row3, group};
    for (int64_t j = 0; j < qg; ++j) {
      const GemmOperand dctx_j{element_ptr(dctx, j * dh), row1, qg * dh};
      // dP_j = dctx_j V^T;  dV = sum_j P_j^T dctx_j (the group's query heads in order; with
      // 16-bit storage each partial sum is rounded, where the fused kernels sum in fp32)
      const OpScope context("attn_context");
      strided_batched_gemm(be, t, false, true, s, s, dh, pairs, dctx_j, v, element_ptr(dprobs, j * s * s), s,
                           qg * s * s);
      strided_batched_gemm(be, t, true, false, s, dh, s, pairs,
                           {element_ptr(slot.probs_dropped, j * s * s), s, qg * s * s}, dctx_j,
                           element_ptr(dqkv, (qg + 1) * dh), row3, group, j == 0 ? 0.0f : 1.0f);
    }
    if (spec_.drops(step)) be.dropout_backward(dprobs.raw(), dprobs.raw(), t, spec_.probs_dropout(b, step));
    // dS = softmax backward (the scale is applied inside).
    be.softmax_backward(slot.probs.raw(), dprobs.raw(), dprobs.raw(), t, b * spec_.heads, s, s, spec_.scale());
    const GemmOperand k{element_ptr(qkv, qg * dh), row3, group};
    for (int64_t j = 0; j < qg; ++j) {
      // dQ_j = dS_j K;  dK = sum_j dS_j^T Q_j
      const OpScope scores("attn_scores");
      const GemmOperand ds_j{element_ptr(dprobs, j * s * s), s, qg * s * s};
      strided_batched_gemm(be, t, false, false, s, dh, s, pairs, ds_j, k, element_ptr(dqkv, j * dh), row3, group);
      strided_batched_gemm(be, t, true, false, s, dh, s, pairs, ds_j, {element_ptr(qkv, j * dh), row3, group},
                           element_ptr(dqkv, qg * dh), row3, group, j == 0 ? 0.0f : 1.0f);
    }
    slots_.release(step.microbatch);
    return dqkv;
  }

  void release(const Step& step) override { slots_.release(step.microbatch); }

 private:
  struct Slot {
    Tensor qkv;            // [s*b, g/t*(a/g+2)*dh]
    Tensor probs;          // [b*a/t, s, s] after the softmax; undefined under selective recomputation
    Tensor probs_dropped;  // [b*a/t, s, s] after the dropout (probs itself when it is off)
  };

  // QK-clip's statistic (AttentionBatch::max_logit). The scores here are GEMM outputs that only
  // the softmax masks, and no backend op reduces them; the block-pair kernel of ring attention
  // (AttentionBlockDesc::max_logit) on the whole sequence as one block computes it, at the cost
  // of a second attention pass without dropout whose context is dropped. Backends without it
  // refuse QK-clip on this path.
  void record_max_logit(const Tensor& qkv, const AttentionBatch& batch) const {
    Backend& be = qkv.backend();
    const DType t = qkv.dtype();
    if (!be.attention_block_supported(t, spec_.dh)) {
      throw Error(ErrorCode::Unsupported, spec_.owner + ": QK-clip (--qk-clip) on the unfused attention needs the " +
                                              be.name() + " backend's attention block kernels, which it has not for " +
                                              dtype_name(t) + " and head dim " + std::to_string(spec_.dh));
    }
    const int64_t s = spec_.seq(), b = batch.b, dh = spec_.dh, units = s * b * spec_.groups;
    Tensor kv = empty_like(qkv, {s * b, spec_.groups * 2 * dh});  // [s*b, g/t*2*dh]: each group's key and value
    be.copy_2d(kv.raw(), 2 * dh, element_ptr(qkv, spec_.q_per_group * dh), spec_.group_cols(), t, units, 2 * dh);
    Tensor out = Tensor::zeros({s * b, spec_.ctx_cols()}, DType::F32, qkv.device());  // [s*b, a/t*dh] fp32, dropped
    Tensor lse = Tensor::empty({b * spec_.heads * s}, DType::F32, qkv.device());       // [b*a/t*s] fp32, dropped
    be.fill(lse.raw(), DType::F32, -std::numeric_limits<double>::infinity(), lse.numel());
    AttentionBlockDesc d;
    d.sq = d.sk = d.seq = s;
    d.b = b;
    d.heads = spec_.heads;
    d.groups = spec_.groups;
    d.dh = dh;
    d.scale = spec_.scale();
    d.document_starts = batch.document_starts;
    d.max_logit = batch.max_logit;
    be.attention_block_forward(d, qkv.raw(), kv.raw(), out.data<float>(), lse.data<float>(), t);
  }

  // The softmax (and dropout) of the scores of qkv [s*b, g/t*(a/g+2)*dh] into probs and dropped
  // [b*a/t, s, s].
  void probabilities(const Tensor& qkv, const AttentionBatch& batch, const Step& step, Tensor& probs,
                     Tensor& dropped) const {
    const int64_t s = spec_.seq(), b = batch.b, heads = spec_.heads, qg = spec_.q_per_group, dh = spec_.dh;
    const int64_t pairs = b * spec_.groups, group = spec_.group_cols();
    const int64_t row = pairs * group;  // distance between consecutive sequence positions
    const DType t = qkv.dtype();
    probs = empty_like(qkv, {b * heads, s, s});
    Backend& be = qkv.backend();
    // scores_(pair, j) = Q_(pair, j) K_pair^T
    for (int64_t j = 0; j < qg; ++j) {
      const OpScope scores("attn_scores");
      strided_batched_gemm(be, t, false, true, s, s, dh, pairs, {element_ptr(qkv, j * dh), row, group},
                           {element_ptr(qkv, qg * dh), row, group}, element_ptr(probs, j * s * s), s, qg * s * s);
    }
    if (batch.document_starts != nullptr) {
      // Entry bi * a/t + h of the probabilities is sample bi's: a/t entries per sample.
      be.softmax_forward_documents(probs.raw(), probs.raw(), t, b * heads, heads, s, spec_.scale(),
                                   batch.document_starts);
    } else {
      be.softmax_forward(probs.raw(), probs.raw(), t, b * heads, s, s, spec_.scale(), true);
    }
    dropped = probs;
    if (spec_.drops(step)) {
      dropped = empty_like(probs, probs.shape());
      be.dropout_forward(probs.raw(), dropped.raw(), t, spec_.probs_dropout(b, step));
    }
  }

  CoreAttentionSpec spec_;
  Slots<Slot> slots_;
};

}  // namespace

std::unique_ptr<CoreAttention> make_unfused_attention(const CoreAttentionSpec& spec) {
  return std::make_unique<UnfusedAttention>(spec);
}

}  // namespace ptdp
