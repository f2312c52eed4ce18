// Causal self-attention with a/t query heads per tensor rank, in the [s, b, h] layout: the QKV
// projection is column-parallel with rows grouped per key/value group (Megatron-Core's
// linear_qkv: a group's a/g query heads, then its key head, then its value head; for multi-head
// attention g = a and that is head 0's q, k, v, then head 1's ...), so each rank owns g/t whole
// groups end to end; scores and context are strided-batched GEMMs that read Q, K and V straight
// out of the [s, b, g/t, a/g + 2, dh] projection (no transposes; a group's key and value serve
// its query heads in place, never copied); the output projection is row-parallel, its bias (if
// any) left to the caller's fused bias + dropout + residual.
//
// Llama-family options: --qk-layernorm normalises each query and key head (q_layernorm,
// k_layernorm, [dh], their gradients summed over the tensor group), then RoPE rotates the query
// and key heads in place by their positions (one fused kernel before attention; its backward
// rotates the gradients back).
//
// Two ways to the context: the unfused path (scores GEMM, scale + causal mask + softmax,
// dropout, context GEMM; the [s, s] probabilities are kept for the backward unless selective
// recomputation rebuilds them) and the backend's fused (flash) kernel, which keeps only a
// log-sum-exp per query row. LayerConfig::attention chooses; both draw the same dropout mask.
//
// Packed documents (Megatron's --reset-position-ids and --reset-attention-mask): Step::positions
// gives each token's position (RoPE rotates by it) and the first position of its document; a
// query then attends only to the keys of its own document, in the fused kernels (which skip the
// key tiles outside it) and in the unfused path (softmax_forward_documents: the other
// probabilities are exactly 0). The dropout masks keep their indexing.
//
// Context parallelism (TensorParallel::cp, c > 1): ring attention, as in Megatron-Core and
// TransformerEngine. The input holds this context rank's s/c positions (its chunks r and
// 2c - 1 - r); after the QKV projection and RoPE (at the tokens' true positions) the rank keeps
// its queries and sends its keys and values ([s/c, b, g/t, 2, dh]) around the ring of context
// ranks: at step i it holds those of rank r - i, passes them on to r + 1 and receives the next
// from r - 1 (non-blocking, the transfer overlapping this step's block pairs), so two key/value
// blocks live at a time. For every (query chunk, key chunk) pair that causality allows (the
// diagonal pair causal, an earlier key chunk whole, a later one skipped) the backend's block-pair
// kernel (Backend::attention_block_forward, the fused kernel on a block pair at global positions)
// merges the pair's context and log-sum-exps into this rank's running fp32 context and lse by the
// log-sum-exp rule. Both attention paths run this under context parallelism (no [s/c, s] scores
// are kept). The slot keeps what flash attention keeps: qkv (this rank's), the context and the
// lse per query row. The backward sends the keys and values around again, each step's fp32 key
// and value gradient sums following one step behind them (tag 1): rank r adds its queries' share
// for the block's owner (Backend::attention_block_backward, the flash backward: delta =
// rowsum(dO O), P = exp(S - lse), dS = P (dP - delta)) to the sum received from r - 1 and passes
// it on, so after c steps every rank holds the sum for its own keys and values; dQ accumulates
// locally. Packed documents pass the global document starts ([b, s]) to each pair, and the
// attention dropout draws the serial run's mask at the global (query, key) indices of the
// [b, a, s * s] probabilities. A backend without block kernels for the dtype and head dim
// (Backend::attention_block_supported) falls back to all-gathering the whole sequence's
// projection over the context group, computing the whole sequence's attention (either path) and
// keeping this rank's rows of the context (the backward all-gathers the context gradient and
// keeps its rows of dqkv).
#pragma once

#include <memory>
#include <string>

#include "core/layers/layer_config.h"
#include "core/layers/linear.h"
#include "core/layers/norm.h"

namespace ptdp {

/// Where the tokens of a microbatch sit, on the activations' device (Step::positions). The model
/// builds it from the batch's position ids and document starts (core/model/gpt.h); either part
/// may be undefined, meaning the default.
struct TokenPositions {
  /// [s * b] i32, sequence-major (token si of sample bi at si * b + bi), as RopeDesc::positions
  /// and the position embedding read them; undefined: si.
  Tensor position_ids;
  /// [b, s] i32, the first position of each token's document (AttentionDesc::document_starts:
  /// rows non-decreasing, 0 <= start <= position); undefined: causal over the whole sample.
  Tensor document_starts;

  const int32_t* position_data() const { return position_ids.defined() ? position_ids.data<int32_t>() : nullptr; }
  const int32_t* document_data() const {
    return document_starts.defined() ? document_starts.data<int32_t>() : nullptr;
  }
};

class SelfAttention {
 public:
  SelfAttention(ParamTable& params, const std::string& prefix, const LayerConfig& cfg, int layer,
                TensorParallel tp);

  /// x [s*b, h] (normalised) -> [s*b, h]. With step.kv_cache (inference, b = 1), x holds the
  /// new tokens [n, h], their keys and values are appended to the cache, and they attend to
  /// every cached position before them. (after the output projection, without its bias:
  /// see output_bias(), undefined with --disable-bias-linear).
  Tensor forward(const Tensor& x, const Step& step);
  /// dy is the gradient of forward's output plus bias.
  Tensor backward_input(const Tensor& dy, const Step& step);
  Tensor output_bias() const { return proj_.bias(); }
  /// Whether forward uses the fused kernel on `be` (LayerConfig::attention; Error(Unsupported)
  /// when fused is asked for and `be` has no kernel for the model dtype and head dim). Under
  /// context parallelism both settings run ring attention on the block-pair kernels where `be`
  /// has them (Backend::attention_block_supported).
  bool fused(const Backend& be) const;
  void backward_weight(const Step& step);
  void release(const Step& step);

 private:
  struct Slot {
    Tensor qkv;    // [s, b, g/t, a/g + 2, dh], after the q/k norms and RoPE
    Tensor probs;  // [b, a/t, s, s] after softmax; empty under selective recomputation
    Tensor probs_dropped;  // after attention dropout (the same tensor when dropout is off)
    Tensor ctx, lse;       // fused path: the context [s, b, a/t, dh] and log-sum-exps [b, a/t, s]
    TokenPositions positions;  // the forward's (Step::positions), for the backward
    bool ring = false;  // context parallelism's ring attention: qkv, ctx, lse are this rank's
  };
  // Context parallelism's ring attention (see the top of this file): whether it runs on `be`
  // (c > 1 and the backend has the block kernels), the block pair of query chunk query_chunk and
  // key chunk key_chunk, this rank's keys and values out of qkv, and the two passes.
  bool ring(const Backend& be) const;
  AttentionBlockDesc block_desc(int64_t b, const Step& step, const int32_t* document_starts, int64_t query_chunk,
                                int64_t key_chunk) const;
  Tensor own_kv(const Tensor& qkv) const;
  Tensor ring_forward(const Tensor& qkv, int64_t b, const Step& step, const int32_t* document_starts, Slot& slot);
  Tensor ring_backward(Slot& slot, const Tensor& dctx, int64_t b, const Step& step, const int32_t* document_starts);
  DropoutDesc probs_dropout(int64_t b, const Step& step) const;
  AttentionDesc fused_desc(int64_t b, const Step& step, const int32_t* document_starts) const;
  // Softmax (and dropout) of the scores of qkv; document_starts as AttentionDesc's (NULL: causal).
  void attention_probs(const Tensor& qkv, int64_t b, const Step& step, const int32_t* document_starts,
                       Tensor& probs, Tensor& dropped) const;

  // RoPE over the s * b tokens of `like` at `positions` ([s, b] on its device; NULL: 0 .. s-1).
  RopeDesc rope_desc(int64_t b, const Tensor& like, const int32_t* positions);
  // The same over s * b tokens (this context rank's s / c positions under context parallelism).
  RopeDesc rope_desc(int64_t s, int64_t b, const Tensor& like, const int32_t* positions);
  Tensor forward_cached(const Tensor& qkv, const Step& step);
  // The query (part 0) or key (part 1) heads of qkv, copied into / out of packed [rows, dh].
  Tensor heads_of(const Tensor& qkv, int part) const;
  void set_heads(const Tensor& qkv, int part, const Tensor& packed) const;

  const LayerConfig& cfg_;
  int layer_;
  TensorParallel tp_;
  int64_t heads_local_, groups_local_, q_per_group_, dh_;
  ColumnParallelLinear qkv_;
  RowParallelLinear proj_;
  std::unique_ptr<Norm> q_norm_, k_norm_;  // --qk-layernorm
  Tensor inv_freq_;                        // RoPE's [rotary_dim / 2], on the activations' device
  Slots<Slot> slots_;
};

}  // namespace ptdp
