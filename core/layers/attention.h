// Causal self-attention with a/t query heads per tensor rank, in the [s, b, h] layout, built as
// Megatron-Core's SelfAttention: linear_qkv, the q/k norms and RoPE produce q, k and v; one core
// attention (core/layers/attention/core_attention.h), chosen when the layer is built, turns them
// into the context; linear_proj projects it back.
//
// linear_qkv is column-parallel with rows grouped per key/value group (a group's a/g query
// heads, then its key head, then its value head; for multi-head attention g = a and that is head
// 0's q, k, v, then head 1's ...), so each rank owns g/t whole groups end to end, and every core
// attention reads q, k and v straight out of the [s, b, g/t, a/g + 2, dh] projection (no
// transposes). linear_proj is row-parallel, its bias (if any) left to the caller's fused bias +
// dropout + residual.
//
// Llama-family options: --qk-layernorm normalises each query and key head (q_layernorm,
// k_layernorm, [dh], their gradients summed over the tensor group), or with
// --qk-layernorm-across-heads each token's whole query and key projections (OLMo 2, OLMoE:
// [a*dh] and [g*dh], split over the tensor ranks by heads, ProjectionNorm), then RoPE rotates the query
// and key heads in place by their positions (one fused kernel before the core attention; its
// backward rotates the gradients back).
//
// The core attention (LayerConfig::attention, context parallelism and the backend's kernels
// decide which, once): the unfused path (GEMMs and softmax; keeps the [s, s] probabilities
// unless selective recomputation rebuilds them), the backend's fused (flash) kernel (keeps a
// log-sum-exp per query row), and under context parallelism (TensorParallel::cp, c > 1) ring
// attention on the backend's block-pair kernels or, where it has none, the whole sequence
// all-gathered around one of the first two. Every one draws the same dropout mask.
//
// Packed documents (Megatron's --reset-position-ids and --reset-attention-mask): Step::positions
// gives each token's position (RoPE rotates by it) and the first position of its document; a
// query then attends only to the keys of its own document, on every path. The dropout masks keep
// their indexing.
//
// Two ways in: forward and backward over whole sequences (training, evaluation, logits), and
// decode, a generation step: the new tokens of one sequence against a key/value cache
// (KvCacheAttention), with no backward and nothing kept. The output projection is the same for
// both.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/layers/attention/core_attention.h"
#include "core/layers/layer_config.h"
#include "core/layers/linear.h"
#include "core/layers/norm.h"

namespace ptdp {

struct KvCache;

/// Where the tokens of a microbatch sit, on the activations' device (Step::positions). The model
/// builds it from the batch's position ids and document starts (core/model/gpt.h); either part
/// may be undefined, meaning the default.
struct TokenPositions {
  /// [s/c*b] i32, sequence-major (token si of sample bi at si * b + bi; this context rank's
  /// positions), as RopeDesc::positions and the position embedding read them; undefined: si.
  Tensor position_ids;
  /// [b, s] i32, the first position of each token's document (AttentionDesc::document_starts:
  /// rows non-decreasing, 0 <= start <= position); undefined: causal over the whole sample.
  Tensor document_starts;

  const int32_t* position_data() const { return position_ids.defined() ? position_ids.data<int32_t>() : nullptr; }
  const int32_t* document_data() const {
    return document_starts.defined() ? document_starts.data<int32_t>() : nullptr;
  }
};

/// What a transformer layer asks of its attention: SelfAttention (linear_qkv) or MlaAttention
/// (multi-latent attention, core/layers/mla_attention.h). The shapes are SelfAttention's.
class AttentionLayer {
 public:
  virtual ~AttentionLayer() = default;
  virtual Tensor forward(const Tensor& x, const Step& step) = 0;
  virtual Tensor backward_input(const Tensor& dy, const Step& step) = 0;
  virtual void backward_weight(const Step& step) = 0;
  virtual void release(const Step& step) = 0;
  virtual Tensor decode(const Tensor& x, KvCache& cache, const Step& step) = 0;
  virtual Tensor output_bias() const = 0;
  virtual const CoreAttention& core_attention() const = 0;

  // ---- QK-clip (MuonClip; core/train/qk_clip.h) -----------------------------------------------
  /// Starts (on) or stops recording, in every training forward, the largest pre-softmax logit
  /// of each of this rank's query heads, and clears the record.
  void record_max_logits(bool on);
  /// The largest logit of each of this rank's a/t query heads over the training forwards since
  /// the last call (-inf for a head that saw none; empty when none ran), and starts over.
  std::vector<float> take_max_logits();
  /// One run of rows of a parameter that QK-clip multiplies by `factor`: rows [first, first +
  /// rows) of this rank's [*, cols] slice of parameter `param` (the layer's table).
  struct QkClipScale {
    int param;
    int64_t cols, first, rows;
    float factor;
  };
  /// The rows that shrink this rank's query heads' logits: head_max [a/t] holds each head's
  /// largest logit over the step (reduced over the model), and the heads whose maximum exceeds
  /// `threshold` get eta = threshold / maximum, split between the query (eta^alpha) and the key
  /// (eta^(1 - alpha)) as the layer's projections allow.
  virtual std::vector<QkClipScale> qk_clip_scales(const std::vector<float>& head_max, float threshold,
                                                  float alpha) const = 0;

 protected:
  /// core.forward(qkv, batch, step), recording the largest logits while record_max_logits is on
  /// and the step trains.
  Tensor core_forward(CoreAttention& core, const Tensor& qkv, AttentionBatch batch, const Step& step,
                      int64_t heads);

 private:
  bool record_max_logits_ = false;
  std::vector<float> max_logits_;  // [a/t] host: the largest logit per query head since the last take
};

/// Megatron-Core's SelfAttention: q/k/v production, one core attention, the output projection.
class SelfAttention : public AttentionLayer {
 public:
  /// Declares the parameters "<prefix>.linear_qkv.*", "<prefix>.linear_proj.*" (and with
  /// --qk-layernorm "<prefix>.q_layernorm.*", "<prefix>.k_layernorm.*") and picks the core
  /// attention for the backend of `device` (make_core_attention: Error(Unsupported) when
  /// LayerConfig::attention is Fused and that backend has no fused kernel for the model's dtype
  /// and head dim).
  SelfAttention(ParamTable& params, const std::string& prefix, const LayerConfig& cfg, int layer, TensorParallel tp,
                Device device);

  /// x [s/c*b, h] (normalised; [s/c*b/t, h] under sequence parallelism) -> the output
  /// projection, x's shape, without its bias (output_bias()). Not for a decoding step.
  Tensor forward(const Tensor& x, const Step& step) override;
  /// dy [s/c*b, h] ([s/c*b/t, h] under sequence parallelism): the gradient of forward's output
  /// plus bias -> dx, x's shape.
  Tensor backward_input(const Tensor& dy, const Step& step) override;
  void backward_weight(const Step& step) override;
  void release(const Step& step) override;

  /// A generation step (step.decoding; b = 1): x [n, h], the normalised new tokens of one
  /// sequence at positions cache.length, ..., whose keys and values are appended to `cache`;
  /// each attends to every cached position up to its own. -> [n, h] without the output bias.
  /// Keeps nothing but the projections' slots (release(step) frees them); the cache's length is
  /// the caller's to advance.
  Tensor decode(const Tensor& x, KvCache& cache, const Step& step) override;

  /// linear_proj's bias [h] in the model's storage type; undefined with --disable-bias-linear.
  Tensor output_bias() const override { return proj_.bias(); }
  /// The core attention forward and backward run ("fused", "ring", "all-gather of unfused", ...).
  const CoreAttention& core_attention() const override { return *core_; }

  /// Grouped-query attention takes one eta per key head, from its query heads' largest maximum
  /// (Megatron-Core's SelfAttention.clip_qk): all the group's query rows by eta^alpha, its key
  /// rows by eta^(1 - alpha); linear_qkv's bias rows with them.
  std::vector<QkClipScale> qk_clip_scales(const std::vector<float>& head_max, float threshold,
                                          float alpha) const override;

 private:
  struct Slot {
    TokenPositions positions;  // the forward's (Step::positions), for the backward
    int64_t b = 0;             // samples
  };

  // linear_qkv, then the q/k norms: x [N, h] ([N/t, h] under sequence parallelism) -> qkv
  // [N, g/t*(a/g+2)*dh], N = s/c*b or n; and its backward, dqkv -> dx.
  Tensor project(const Tensor& x, const Step& step);
  Tensor project_backward(const Tensor& dqkv, const Step& step);
  // RoPE over the s * b tokens of `like` ([s*b, g/t*(a/g+2)*dh]; s = s/c, or n when decoding)
  // at `positions` ([s*b] on its device; NULL: the sequence index plus RopeDesc::position_offset).
  RopeDesc rope_desc(int64_t s, int64_t b, const Tensor& like, const int32_t* positions);
  // The query heads (part 0) [N*a/t, dh] or the key heads (part 1) [N*g/t, dh] of qkv
  // [N, g/t*(a/g+2)*dh], copied out of it / back into it.
  Tensor heads_of(const Tensor& qkv, int part) const;
  void set_heads(const Tensor& qkv, int part, const Tensor& packed) const;

  const LayerConfig& cfg_;
  CoreAttentionSpec spec_;
  ColumnParallelLinear qkv_;
  RowParallelLinear proj_;
  // The q/k norms of one part (0: the query heads, 1: the key heads, as heads_of packs them) and
  // their backward; the per-head norms, or those across the heads.
  Tensor qk_norm_forward(int part, const Tensor& heads, const Step& step);
  Tensor qk_norm_backward(int part, const Tensor& dheads, const Step& step);

  std::unique_ptr<Norm> q_norm_, k_norm_;                     // --qk-layernorm
  std::unique_ptr<ProjectionNorm> q_whole_norm_, k_whole_norm_;  // --qk-layernorm-across-heads
  std::unique_ptr<CoreAttention> core_;    // forward and backward
  KvCacheAttention cached_;                // decode
  Tensor inv_freq_;                        // [rotary_dim/2] fp32: RoPE's, on the activations' device
  Slots<Slot> slots_;
};

}  // namespace ptdp
