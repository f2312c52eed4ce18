// Causal self-attention with a/t heads per tensor rank, in the [s, b, h] layout: the QKV
// projection is column-parallel (rows grouped per head: head 0's q, k, v, then head 1's ...),
// so each rank owns its heads end to end; scores and context are strided-batched GEMMs that
// read Q, K and V straight out of the [s, b, a/t, 3, dh] projection (no transposes); the output
// projection is row-parallel, its bias left to the caller's fused bias + dropout + residual.
//
// Two ways to the context: the unfused path (scores GEMM, scale + causal mask + softmax,
// dropout, context GEMM; the [s, s] probabilities are kept for the backward unless selective
// recomputation rebuilds them) and the backend's fused (flash) kernel, which keeps only a
// log-sum-exp per query row. LayerConfig::attention chooses; both draw the same dropout mask.
#pragma once

#include <string>

#include "core/layers/linear.h"
#include "core/layers/layer_config.h"

namespace ptdp {

class SelfAttention {
 public:
  SelfAttention(ParamTable& params, const std::string& prefix, const LayerConfig& cfg, int layer,
                TensorParallel tp);

  /// x [s*b, h] (layer-normed) -> [s*b, h] (after the output projection, without its bias:
  /// see output_bias()).
  Tensor forward(const Tensor& x, const Step& step);
  /// dy is the gradient of forward's output plus bias.
  Tensor backward_input(const Tensor& dy, const Step& step);
  Tensor output_bias() const { return proj_.bias(); }
  /// Whether forward uses the fused kernel on `be` (LayerConfig::attention; Error(Unsupported)
  /// when fused is asked for and `be` has no kernel for the model dtype and head dim).
  bool fused(const Backend& be) const;
  void backward_weight(const Step& step);
  void release(const Step& step);

 private:
  struct Slot {
    Tensor qkv;    // [s, b, a/t, 3, dh]
    Tensor probs;  // [b, a/t, s, s] after softmax; empty under selective recomputation
    Tensor probs_dropped;  // after attention dropout (the same tensor when dropout is off)
    Tensor ctx, lse;       // fused path: the context [s, b, a/t, dh] and log-sum-exps [b, a/t, s]
  };
  DropoutDesc probs_dropout(int64_t b, const Step& step) const;
  AttentionDesc fused_desc(int64_t b, const Step& step) const;
  // Softmax (and dropout) of the scores of qkv.
  void attention_probs(const Tensor& qkv, int64_t b, const Step& step, Tensor& probs, Tensor& dropped) const;

  const LayerConfig& cfg_;
  int layer_;
  TensorParallel tp_;
  int64_t heads_local_, dh_;
  ColumnParallelLinear qkv_;
  RowParallelLinear proj_;
  Slots<Slot> slots_;
};

}  // namespace ptdp
