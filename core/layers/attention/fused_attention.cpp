// The fused core attention: the backend's flash kernel (Backend::attention_forward and
// attention_backward), which never stores the s x s probabilities. The forward keeps qkv, the
// context and one fp32 log-sum-exp per query row; the backward recomputes the probabilities
// from them tile by tile. Packed documents make the kernels skip the key tiles outside a query's
// document; the attention dropout draws the unfused path's mask (the same global indices).
#include "core/layers/attention/core_attention.h"

namespace ptdp {

namespace {

class FusedAttention final : public CoreAttention {
 public:
  explicit FusedAttention(const CoreAttentionSpec& spec) : spec_(spec), slots_(spec.owner + " (fused)") {}

  std::string name() const override { return "fused"; }

  Tensor forward(const Tensor& qkv, const AttentionBatch& batch, const Step& step) override {
    const int64_t b = batch.b;
    Tensor ctx = empty_like(qkv, {spec_.seq() * b, spec_.ctx_cols()});                   // [s*b, a/t*dh]
    Tensor lse = Tensor::empty({b * spec_.heads * spec_.seq()}, DType::F32, qkv.device());  // [b*a/t*s] fp32
    qkv.backend().attention_forward(desc(batch, step), qkv.raw(), ctx.raw(), lse.data<float>(), qkv.dtype());
    Slot& slot = slots_.create(step.microbatch);
    slot.qkv = qkv;
    slot.ctx = ctx;
    slot.lse = lse;
    return ctx;
  }

  Tensor backward(const Tensor& dctx, const AttentionBatch& batch, const Step& step) override {
    Slot& slot = slots_.get(step.microbatch);
    Tensor dqkv = empty_like(slot.qkv, slot.qkv.shape());  // [s*b, g/t*(a/g+2)*dh]
    // [b*a/t*s] fp32: the kernel's scratch, rowsum(dctx * ctx) per (sample, head, query)
    Tensor delta = Tensor::empty({batch.b * spec_.heads * spec_.seq()}, DType::F32, dctx.device());
    dctx.backend().attention_backward(desc(batch, step), slot.qkv.raw(), slot.ctx.raw(), slot.lse.data<float>(),
                                      dctx.raw(), dqkv.raw(), delta.data<float>(), slot.qkv.dtype());
    slots_.release(step.microbatch);
    return dqkv;
  }

  void release(const Step& step) override { slots_.release(step.microbatch); }

 private:
  struct Slot {
    Tensor qkv;  // [s*b, g/t*(a/g+2)*dh]
    Tensor ctx;  // [s*b, a/t*dh]
    Tensor lse;  // [b*a/t*s] fp32: per (sample, head, query)
  };

  AttentionDesc desc(const AttentionBatch& batch, const Step& step) const {
    AttentionDesc d;
    d.s = spec_.seq();
    d.b = batch.b;
    d.heads = spec_.heads;
    d.groups = spec_.groups;
    d.dh = spec_.dh;
    d.scale = spec_.scale();
    if (spec_.drops(step)) d.dropout = spec_.probs_dropout(batch.b, step);
    d.document_starts = batch.document_starts;
    d.max_logit = batch.max_logit;
    return d;
  }

  CoreAttentionSpec spec_;
  Slots<Slot> slots_;
};

}  // namespace

std::unique_ptr<CoreAttention> make_fused_attention(const CoreAttentionSpec& spec) {
  return std::make_unique<FusedAttention>(spec);
}

}  // namespace ptdp
