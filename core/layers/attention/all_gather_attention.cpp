// Context parallelism where the backend has no block-pair kernels for the model's dtype and
// head dim (Backend::attention_block_supported; Megatron's cp_comm_type "all_gather"): every
// context rank all-gathers the whole sequence's q, k and v, runs an unfused or fused strategy on
// it and keeps its own rows (its chunks r and 2c - 1 - r) of the context. The backward
// all-gathers the context's gradient the same way and keeps this rank's rows of dqkv, so each
// rank's key and value gradients are the whole sequence's sums without a reduction. It costs
// c times the attention of the ring, and the [b, a/t, s, s] probabilities of the unfused path,
// but it runs wherever the whole-sequence kernels do.
#include "base/error.h"
#include "core/layers/attention/core_attention.h"

namespace ptdp {

namespace {

class AllGatherAttention final : public CoreAttention {
 public:
  AllGatherAttention(const CoreAttentionSpec& spec, std::unique_ptr<CoreAttention> whole)
      : spec_(spec), whole_(std::move(whole)) {}

  std::string name() const override { return "all-gather of " + whole_->name(); }

  Tensor forward(const Tensor& qkv, const AttentionBatch& batch, const Step& step) override {
    const Tensor all = gather_context(spec_.tp.cp, qkv, spec_.qkv_cols());   // [s*b, g/t*(a/g+2)*dh]
    const Tensor ctx = whole_->forward(all, batch, step);                    // [s*b, a/t*dh]
    return context_rows(spec_.tp.cp, ctx, spec_.ctx_cols());                 // [s/c*b, a/t*dh]
  }

  Tensor backward(const Tensor& dctx, const AttentionBatch& batch, const Step& step) override {
    const Tensor all = gather_context(spec_.tp.cp, dctx, spec_.ctx_cols());  // [s*b, a/t*dh]
    const Tensor dqkv = whole_->backward(all, batch, step);                  // [s*b, g/t*(a/g+2)*dh]
    return context_rows(spec_.tp.cp, dqkv, spec_.qkv_cols());                // [s/c*b, g/t*(a/g+2)*dh]
  }

  void release(const Step& step) override { whole_->release(step); }

 private:
  CoreAttentionSpec spec_;
  std::unique_ptr<CoreAttention> whole_;
};

}  // namespace

std::unique_ptr<CoreAttention> make_all_gather_attention(const CoreAttentionSpec& spec,
                                                         std::unique_ptr<CoreAttention> whole) {
  PTDP_CHECK_ARG(whole != nullptr, spec.owner + ": the all-gather attention needs a whole-sequence strategy");
  return std::make_unique<AllGatherAttention>(spec, std::move(whole));
}

}  // namespace ptdp
