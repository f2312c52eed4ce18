// Ring attention (context parallelism, c > 1), as in Megatron-Core and TransformerEngine
// (cp_comm_type "p2p"). The input holds this context rank's s/c positions (its chunks r and
// 2c - 1 - r of the 2c chunks of the sequence), with RoPE applied at the tokens' true positions.
// The rank keeps its queries and sends its keys and values ([s/c * b, g/t * 2 * dh]) around the
// ring of context ranks: at step i it holds those of rank r - i, passes them on to r + 1 and
// receives the next from r - 1 (non-blocking, the transfer overlapping this step's block pairs),
// so two key/value blocks live at a time. For every (query chunk, key chunk) pair that causality
// allows (the diagonal pair causal, an earlier key chunk whole, a later one skipped) the
// backend's block-pair kernel (Backend::attention_block_forward, the fused kernel on a block pair
// at global positions) merges the pair's context and log-sum-exps into this rank's running fp32
// context and lse by the log-sum-exp rule. No [s/c, s] scores are kept: the slot keeps what
// flash attention keeps, qkv, the context and the lse per query row.
//
// The backward sends the keys and values around again, each step's fp32 key and value gradient
// sums following one step behind them (tag 1): rank r adds its queries' share for the block's
// owner (Backend::attention_block_backward, the flash backward: delta = rowsum(dO O),
// P = exp(S - lse), dS = P (dP - delta)) to the sum received from r - 1 and passes it on, so
// after c steps every rank holds the sum for its own keys and values; dQ accumulates locally.
//
// Packed documents pass the global document starts ([b, s]) to each pair, and the attention
// dropout draws the serial run's mask at the global (query, key) indices of the [b, a, s * s]
// probabilities.
#include <limits>

#include "base/error.h"
#include "core/layers/attention/core_attention.h"

namespace ptdp {

namespace {

// The (local query piece, key piece) pairs of ring step `owner` that causality allows: key chunk
// kc of the owner's pieces against this rank's query chunk qc when kc <= qc (kc == qc: the
// diagonal block, causal inside; kc < qc: every key before every query; kc > qc: none).
template <typename Fn>
void for_each_block_pair(const ContextParallel& cp, int owner, Fn&& fn) {
  ContextParallel o = cp;
  o.rank = owner;
  for (int kp = 0; kp < 2; ++kp) {
    for (int piece = 0; piece < 2; ++piece) {
      if (o.chunk(kp) <= cp.chunk(piece)) fn(piece, kp, cp.chunk(piece), o.chunk(kp));
    }
  }
}

// Calls visit(owner, current) for each of the c steps of the ring, `current` [s/c*b, g/t*2*dh]
// holding the keys and values of context rank owner = r - i, while they go on to r + 1 and the
// next arrive from r - 1 (tag 0; the transfer overlaps visit).
template <typename Visit>
void around_the_ring(const ContextParallel& cp, const Tensor& kv, Visit&& visit) {
  const int up = (cp.rank + 1) % cp.size, down = (cp.rank - 1 + cp.size) % cp.size;
  Tensor current = kv;  // [s/c*b, g/t*2*dh]
  for (int i = 0; i < cp.size; ++i) {
    Tensor next;  // [s/c*b, g/t*2*dh]
    WorkPtr work;
    if (i + 1 < cp.size) {
      next = empty_like(kv, kv.shape());
      work = cp.comm->batch_p2p({P2POp{P2POp::Kind::Send, current, up, 0}, P2POp{P2POp::Kind::Recv, next, down, 0}});
    }
    visit((cp.rank - i + cp.size) % cp.size, current);
    if (work) {
      work->wait();
      current = next;
    }
  }
}

class RingAttention final : public CoreAttention {
 public:
  explicit RingAttention(const CoreAttentionSpec& spec) : spec_(spec), slots_(spec.owner + " (ring)") {
    PTDP_CHECK_ARG(spec.tp.cp.size > 1, spec.owner + ": ring attention needs a context group of more than one rank");
  }

  std::string name() const override { return "ring"; }

  Tensor forward(const Tensor& qkv, const AttentionBatch& batch, const Step& step) override {
    const ContextParallel& cp = spec_.tp.cp;
    const Blocks k = blocks(batch.b);
    const DType t = qkv.dtype();
    Backend& be = qkv.backend();
    const Tensor kv = own_kv(qkv);  // [s/c*b, g/t*2*dh]
    // The running context and log-sum-exps of this rank's two query chunks.
    Tensor out = Tensor::zeros({2 * k.rows, spec_.ctx_cols()}, DType::F32, qkv.device());  // [s/c*b, a/t*dh] fp32
    Tensor lse = Tensor::empty({2 * k.lse}, DType::F32, qkv.device());  // [2*b*a/t*s/(2c)] fp32
    be.fill(lse.raw(), DType::F32, -std::numeric_limits<double>::infinity(), lse.numel());
    {
      const std::shared_ptr<void> progress = cp.comm->background_progress();
      around_the_ring(cp, kv, [&](int owner, const Tensor& current) {
        for_each_block_pair(cp, owner, [&](int piece, int kp, int64_t qc, int64_t kc) {
          be.attention_block_forward(desc(batch, step, qc, kc), element_ptr(qkv, piece * k.half * k.qkv_row),
                                     element_ptr(current, kp * k.kv), out.data<float>() + piece * k.ctx,
                                     lse.data<float>() + piece * k.lse, t);
        });
      });
    }
    Tensor ctx = empty_like(qkv, {2 * k.rows, spec_.ctx_cols()});  // [s/c*b, a/t*dh]
    be.cast(out.raw(), DType::F32, ctx.raw(), t, out.numel());
    Slot& slot = slots_.create(step.microbatch);
    slot.qkv = qkv;
    slot.ctx = ctx;
    slot.lse = lse;
    return ctx;
  }

  Tensor backward(const Tensor& dctx, const AttentionBatch& batch, const Step& step) override {
    Slot& slot = slots_.get(step.microbatch);
    const Tensor qkv = slot.qkv;  // [s/c*b, g/t*(a/g+2)*dh]
    const Gradients g = second_pass(slot, dctx, batch, step);
    // dqkv: the query gradients, then each group's key and value gradients, in the storage type.
    const int64_t qg = spec_.q_per_group, dh = spec_.dh, rows = g.dq.dim(0), units = rows * spec_.groups;
    const DType t = qkv.dtype();
    Backend& be = qkv.backend();
    Tensor dqkv = empty_like(qkv, qkv.shape());               // [s/c*b, g/t*(a/g+2)*dh]
    Tensor dq_t = empty_like(qkv, {rows, spec_.ctx_cols()});  // [s/c*b, a/t*dh]
    be.cast(g.dq.raw(), DType::F32, dq_t.raw(), t, g.dq.numel());
    be.copy_2d(dqkv.raw(), spec_.group_cols(), dq_t.raw(), qg * dh, t, units, qg * dh);
    Tensor dkv_t = empty_like(qkv, {rows, spec_.groups * 2 * dh});  // [s/c*b, g/t*2*dh]
    be.cast(g.dkv.raw(), DType::F32, dkv_t.raw(), t, g.dkv.numel());
    be.copy_2d(element_ptr(dqkv, qg * dh), spec_.group_cols(), dkv_t.raw(), 2 * dh, t, units, 2 * dh);
    slots_.release(step.microbatch);
    return dqkv;
  }

  void release(const Step& step) override { slots_.release(step.microbatch); }

 private:
  struct Slot {
    Tensor qkv;  // [s/c*b, g/t*(a/g+2)*dh]
    Tensor ctx;  // [s/c*b, a/t*dh]
    Tensor lse;  // [2*b*a/t*s/(2c)] fp32: per (query chunk, sample, head, query)
  };

  // The backward's sums, fp32.
  struct Gradients {
    Tensor dq;   // [s/c*b, a/t*dh]: this rank's queries'
    Tensor dkv;  // [s/c*b, g/t*2*dh]: this rank's keys' and values', summed over every context rank
  };

  // The sizes of one chunk of s/(2c) positions of b samples (elements unless said otherwise).
  struct Blocks {
    int64_t half;     // positions of a chunk: s/(2c)
    int64_t rows;     // rows of a chunk: s/(2c)*b
    int64_t qkv_row;  // a row (position) of qkv: b*g/t*(a/g+2)*dh
    int64_t kv;       // a chunk of keys and values: s/(2c)*b*g/t*2*dh
    int64_t ctx;      // a chunk of the context: s/(2c)*b*a/t*dh
    int64_t lse;      // a chunk's log-sum-exps: b*a/t*s/(2c)
  };

  Blocks blocks(int64_t b) const {
    const int64_t half = spec_.seq() / (2 * spec_.tp.cp.size);
    return {half, half * b, b * spec_.qkv_cols(), half * b * spec_.groups * 2 * spec_.dh, half * b * spec_.ctx_cols(),
            b * spec_.heads * half};
  }

  // The block pair of query chunk query_chunk and key chunk key_chunk (global chunk indices).
  AttentionBlockDesc desc(const AttentionBatch& batch, const Step& step, int64_t query_chunk, int64_t key_chunk) const {
    const int64_t s = spec_.seq(), half = s / (2 * spec_.tp.cp.size);
    AttentionBlockDesc d;
    d.sq = d.sk = half;
    d.b = batch.b;
    d.heads = spec_.heads;
    d.groups = spec_.groups;
    d.dh = spec_.dh;
    d.scale = spec_.scale();
    d.q_start = query_chunk * half;
    d.k_start = key_chunk * half;
    d.seq = s;
    d.document_starts = batch.document_starts;
    d.max_logit = batch.max_logit;  // each block pair merges its share: this rank's queries' max
    // The whole sequence's mask (probs_dropout's [b, a/t, s * s] block): the serial run's.
    if (spec_.drops(step)) d.dropout = spec_.probs_dropout(batch.b, step);
    return d;
  }

  // This rank's keys and values [s/c*b, g/t*2*dh] (each group's key head, then its value head;
  // chunk r's rows, then chunk 2c - 1 - r's), copied out of qkv [s/c*b, g/t*(a/g+2)*dh].
  Tensor own_kv(const Tensor& qkv) const {
    const int64_t dh = spec_.dh, units = rows_of(qkv, spec_.qkv_cols(), "qkv") * spec_.groups;
    Tensor kv = empty_like(qkv, {units / spec_.groups, spec_.groups * 2 * dh});  // [s/c*b, g/t*2*dh]
    qkv.backend().copy_2d(kv.raw(), 2 * dh, element_ptr(qkv, spec_.q_per_group * dh), spec_.group_cols(), qkv.dtype(),
                          units, 2 * dh);
    return kv;
  }

  // The backward's pass around the ring: this rank's query gradients, and the sums of the
  // gradients of its keys and values over every context rank.
  Gradients second_pass(const Slot& slot, const Tensor& dctx, const AttentionBatch& batch, const Step& step) const {
    const ContextParallel& cp = spec_.tp.cp;
    const Blocks k = blocks(batch.b);
    const int64_t kv_cols = spec_.groups * 2 * spec_.dh;
    const Tensor& qkv = slot.qkv;  // [s/c*b, g/t*(a/g+2)*dh]
    const DType t = qkv.dtype();
    Backend& be = qkv.backend();
    Tensor dq = Tensor::zeros({2 * k.rows, spec_.ctx_cols()}, DType::F32, qkv.device());  // [s/c*b, a/t*dh] fp32
    // Each step's key and value gradients of the block's owner follow the keys and values one
    // step behind (tag 1): at step i this rank adds its queries' share for owner o = r - i to the
    // sum received from r - 1 (the transfer overlapped this step's block pairs) and passes it on
    // to r + 1; after the last step the sum of every rank's share of this rank's keys and values
    // arrives from r - 1.
    const int up = (cp.rank + 1) % cp.size, down = (cp.rank - 1 + cp.size) % cp.size;
    Tensor incoming, sending;  // [s/c*b, g/t*2*dh] fp32: the sums received and passed on
    WorkPtr dkv_work;
    const std::shared_ptr<void> progress = cp.comm->background_progress();
    around_the_ring(cp, own_kv(qkv), [&](int owner, const Tensor& current) {
      Tensor part = Tensor::zeros({2 * k.rows, kv_cols}, DType::F32, qkv.device());  // [s/c*b, g/t*2*dh] fp32
      for_each_block_pair(cp, owner, [&](int piece, int kp, int64_t qc, int64_t kc) {
        be.attention_block_backward(desc(batch, step, qc, kc), element_ptr(qkv, piece * k.half * k.qkv_row),
                                    element_ptr(current, kp * k.kv), element_ptr(slot.ctx, piece * k.ctx),
                                    slot.lse.data<float>() + piece * k.lse, element_ptr(dctx, piece * k.ctx),
                                    dq.data<float>() + piece * k.ctx, part.data<float>() + kp * k.kv, t);
      });
      if (dkv_work) {
        dkv_work->wait();
        be.add(part.raw(), incoming.raw(), part.raw(), DType::F32, part.numel());
      }
      sending = part;
      incoming = empty_like(part, part.shape());
      dkv_work = cp.comm->batch_p2p(
          {P2POp{P2POp::Kind::Send, sending, up, 1}, P2POp{P2POp::Kind::Recv, incoming, down, 1}});
    });
    dkv_work->wait();
    return {dq, incoming};
  }

  CoreAttentionSpec spec_;
  Slots<Slot> slots_;
};

}  // namespace

std::unique_ptr<CoreAttention> make_ring_attention(const CoreAttentionSpec& spec) {
  return std::make_unique<RingAttention>(spec);
}

}  // namespace ptdp
