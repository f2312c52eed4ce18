// The pre-norm transformer layer (GPT-2's, and Llama's with RMSNorm and SwiGLU):
//   x1 = x + dropout(attention(norm1(x)));  out = x1 + dropout(mlp(norm2(x1))).
// Recomputation (Megatron's --recompute-granularity): `full` keeps only the layer's input and
// re-runs its forward before the backward; `selective` keeps everything but the attention
// probabilities, recomputed from Q and K. Recomputation draws the same dropout masks, so it
// changes no bit of the result.
// Sequence parallelism (TensorParallel::sequence_parallel): the input and output are this
// rank's rows of the sequence; the norms, dropouts and residuals work on them (the norms'
// weight gradients summed over the tensor group), the attention and the MLP gather the rows
// and reduce-scatter their outputs (core/layers/linear.h).
#pragma once

#include <memory>
#include <string>

#include "core/layers/attention.h"
#include "core/layers/dropout.h"
#include "core/layers/norm.h"
#include "core/layers/mla_attention.h"
#include "core/layers/mlp.h"
#include "core/layers/moe/moe_layer.h"

namespace ptdp {

class TransformerLayer {
 public:
  /// Layer `layer` (global index) of the model: parameters "decoder.layers.<layer>.*"; its
  /// attention (SelfAttention, or MlaAttention with --multi-latent-attention) runs on the
  /// backend of `device` (its choice of core attention).
  TransformerLayer(ParamTable& params, const LayerConfig& cfg, int layer, TensorParallel tp, Device device);
  /// A layer outside the decoder (a multi-token prediction module's): parameters
  /// "<prefix>.*", `layer` keys its dropout masks only (a number no decoder layer has); its MLP
  /// a mixture of experts when `moe` (Megatron's MTP layer takes the decoder's last layer's
  /// spec), else dense.
  TransformerLayer(ParamTable& params, const LayerConfig& cfg, const std::string& prefix, int layer, bool moe,
                   TensorParallel tp, Device device);

  /// x [s/c*b, h] ([s/c*b/t, h] under sequence parallelism) -> x's shape.
  Tensor forward(const Tensor& x, const Step& step);
  /// dout, forward's output's shape -> dx, x's shape.
  Tensor backward_input(const Tensor& dout, const Step& step);
  void backward_weight(const Step& step);
  /// A generation step (step.decoding): x [n, h], the new tokens of one sequence, attending to
  /// `cache` (AttentionLayer::decode) -> [n, h]. Nothing is kept past release(step).
  Tensor decode(const Tensor& x, KvCache& cache, const Step& step);
  /// Drops everything kept for the microbatch (after a forward without backward).
  void release(const Step& step);
  /// The layer's mixture of experts, or nullptr for a dense MLP.
  MoeLayer* moe() { return moe_.get(); }
  /// The layer's attention (SelfAttention or MlaAttention).
  AttentionLayer& attention() { return *attn_; }

 private:
  Tensor mlp_forward(const Tensor& x, const Step& step);
  Tensor mlp_backward_input(const Tensor& dy, const Step& step);
  Tensor run_forward(const Tensor& x, const Step& step);
  // The layer after its attention: x1 = x + dropout(a + bias), x1 + dropout(mlp(norm2(x1)) +
  // bias), with x, a and the result of x's shape.
  Tensor after_attention(const Tensor& x, const Tensor& a, const Step& step);
  // Where the activation x of this pass sits in the whole one (sequence parallelism).
  std::vector<FlatPiece> slice(const Tensor& x, const Step& step) const;
  void release_sublayers(const Step& step);

  struct Slot {
    Tensor x;  // [s/c*b, h] ([s/c*b/t, h] under sequence parallelism): the input, kept under full recomputation
  };
  const LayerConfig& cfg_;
  int layer_;
  TensorParallel tp_;
  Norm ln1_;
  std::unique_ptr<AttentionLayer> attn_;  // SelfAttention or MlaAttention
  Norm ln2_;
  // The MLP: dense, or a mixture of experts where cfg.moe.is_moe_layer(layer).
  std::unique_ptr<Mlp> mlp_;
  std::unique_ptr<MoeLayer> moe_;
  Slots<Slot> slots_;
};

}  // namespace ptdp
