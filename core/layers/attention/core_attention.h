// The core attention of a self-attention layer, Megatron-Core's `core_attention` submodule
// (DotProductAttention, or TEDotProductAttention, under SelfAttention): q, k and v in, the
// context out, with the scale, the causal mask, packed documents, the softmax and the attention
// dropout in between. The layer (core/layers/attention.h) produces q, k and v (linear_qkv, the
// q/k norms, RoPE) and applies the output projection; it picks its strategy once, when it is
// built (make_core_attention), so no pass asks again which path to take.
//
// The strategies, one class each, each in its own file beside this one:
//   unfused     scores GEMMs, scale + causal mask + softmax, dropout, context GEMMs; keeps the
//               [b, a/t, s, s] probabilities for the backward (selective recomputation rebuilds
//               them there instead)
//   fused       the backend's fused (flash) kernel; keeps the context and a log-sum-exp per
//               query row
//   ring        context parallelism (c > 1) on the backend's block-pair kernels: this rank's
//               queries against every rank's keys and values passed around the ring of context
//               ranks (Megatron's cp_comm_type "p2p")
//   all-gather  context parallelism where the backend has no block-pair kernels: the whole
//               sequence's q, k and v all-gathered, an unfused or fused strategy run on it, this
//               rank's rows kept (Megatron's cp_comm_type "all_gather")
// Generation with a key/value cache is not one of them: it takes the cache, keeps nothing and
// has no backward, so it has its own class (KvCacheAttention, below) and the layer its own entry
// point (SelfAttention::decode).
//
// Every strategy reads q, k and v in Megatron-Core's linear_qkv layout, qkv [rows, g/t * (a/g +
// 2) * dh]: rows sequence-major (position si of sample bi at row si * b + bi), and in a row each
// of this tensor rank's g/t groups holds its a/g query heads, then its key head, then its value
// head; a group's key and value serve its query heads in place. The context is [rows, a/t * dh],
// query head j of group k at column (k * a/g + j) * dh. A q/k/v production other than linear_qkv
// (MLA's down and up projections with their decoupled RoPE, docs/architecture.md) plugs in by
// handing these strategies its q, k and v in this layout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/layers/layer_config.h"
#include "core/layers/layer_support.h"

namespace ptdp {

struct KvCache;

/// What every core attention of one layer shares: the model's settings, the layer (its dropout
/// stream) and this tensor rank's share of the heads.
struct CoreAttentionSpec {
  /// Layer `layer` of a model with settings `cfg` (kept by reference: it must outlive the
  /// strategies) on tensor rank tp.rank of tp.size, context rank tp.cp.rank of tp.cp.size;
  /// `owner` names the layer in errors ("decoder.layers.3.self_attention").
  CoreAttentionSpec(const LayerConfig& cfg, int layer, const TensorParallel& tp, std::string owner);

  const LayerConfig* cfg;
  int layer;
  TensorParallel tp;
  std::string owner;
  int64_t heads;        ///< a/t: this rank's query heads
  int64_t groups;       ///< g/t: this rank's key/value groups
  int64_t q_per_group;  ///< a/g
  int64_t dh;           ///< the head dim
  /// Multiplies the softmax scale 1/sqrt(dh) (MLA: YaRN's mscale squared); 1 for the others.
  float scale_factor = 1.0f;

  int64_t seq() const { return cfg->seq_length; }
  /// (a/g + 2) dh: one group's query, key and value heads in a row of qkv.
  int64_t group_cols() const { return (q_per_group + 2) * dh; }
  /// g/t (a/g + 2) dh: a row of qkv.
  int64_t qkv_cols() const { return groups * group_cols(); }
  /// a/t dh: a row of the context.
  int64_t ctx_cols() const { return heads * dh; }
  /// scale_factor / sqrt(dh), in fp32.
  float scale() const;
  /// Whether the probabilities are dropped in this pass.
  bool drops(const Step& step) const { return step.training && cfg->attention_dropout > 0.0f; }
  /// The attention dropout of b samples: this rank's query heads inside the global [b, a, s * s]
  /// probabilities, so that every layout draws the serial run's mask.
  DropoutDesc probs_dropout(int64_t b, const Step& step) const;
};

/// The samples of one pass: how many, and where their documents start.
struct AttentionBatch {
  int64_t b = 0;  ///< samples
  /// [b, s] i32 on the activations' device (TokenPositions::document_starts); NULL: causal over
  /// each whole sample.
  const int32_t* document_starts = nullptr;
  /// [b, a/t] fp32 on the activations' device, or NULL: QK-clip's statistic
  /// (AttentionDesc::max_logit): each (sample, query head) entry is raised to the largest
  /// pre-softmax logit of the pass (the caller fills it with -inf). Only forward reads it.
  float* max_logit = nullptr;
};

/// One strategy of the core attention (see the top of this file). Each keeps its microbatches'
/// activations apart, so several can be in flight (pipeline schedules).
class CoreAttention {
 public:
  virtual ~CoreAttention() = default;
  /// "unfused", "fused", "ring", "all-gather of fused", ...: the path that runs.
  virtual std::string name() const = 0;
  /// qkv [s/c * b, g/t (a/g + 2) dh] (this context rank's positions, after the q/k norms and
  /// RoPE) -> the context [s/c * b, a/t dh]. Keeps what the backward needs under
  /// step.microbatch (qkv among it: the caller must not change it afterwards).
  virtual Tensor forward(const Tensor& qkv, const AttentionBatch& batch, const Step& step) = 0;
  /// The context's gradient dctx [s/c * b, a/t dh] -> dqkv [s/c * b, g/t (a/g + 2) dh]; frees
  /// what the forward kept. `batch` is the forward's.
  virtual Tensor backward(const Tensor& dctx, const AttentionBatch& batch, const Step& step) = 0;
  /// Drops what the forward kept for the microbatch (after a forward without backward).
  virtual void release(const Step& step) = 0;
};

/// The attention kernels a backend has for one storage type and head dim.
struct AttentionKernels {
  const char* backend = "";  ///< Backend::name(), for messages
  bool fused = false;        ///< Backend::fused_attention_supported
  bool block = false;        ///< Backend::attention_block_supported (ring attention's)
};
/// What `be` has for storage type t and head dim dh.
AttentionKernels attention_kernels(const Backend& be, DType t, int64_t dh);

/// The strategy a layer runs where `kernels` are what its backend has for the model's dtype and
/// head dim, chosen once: under context parallelism (spec.tp.cp.size > 1) ring attention where
/// there are block-pair kernels (whatever LayerConfig::attention says: both paths are
/// flash-style there), else the all-gather around the strategy below; without it,
/// LayerConfig::attention's: Auto takes the fused kernel where there is one, else the unfused
/// path; Fused throws Error(Unsupported) naming the backend, dtype and head dim where there is
/// none; Unfused never uses it.
std::unique_ptr<CoreAttention> make_core_attention(const CoreAttentionSpec& spec, const AttentionKernels& kernels);

// The strategies themselves (make_core_attention's choices; tests build each directly).
std::unique_ptr<CoreAttention> make_unfused_attention(const CoreAttentionSpec& spec);
std::unique_ptr<CoreAttention> make_fused_attention(const CoreAttentionSpec& spec);
/// Needs spec.tp.cp.size > 1 and the backend's block-pair kernels.
std::unique_ptr<CoreAttention> make_ring_attention(const CoreAttentionSpec& spec);
/// `whole` (an unfused or fused strategy) on the whole sequence gathered over spec.tp.cp.
std::unique_ptr<CoreAttention> make_all_gather_attention(const CoreAttentionSpec& spec,
                                                         std::unique_ptr<CoreAttention> whole);

/// Generation's attention: the n new tokens of one sequence (b = 1) attend to the keys and
/// values of every position before them in a key/value cache, their own appended first. The
/// same GEMMs and softmax as the unfused path, over the cached prefix; nothing is kept.
class KvCacheAttention {
 public:
  explicit KvCacheAttention(const CoreAttentionSpec& spec) : spec_(spec) {}
  /// qkv [n, g/t (a/g + 2) dh] of the tokens at positions cache.length, ... (RoPE applied) ->
  /// the context [n, a/t dh]. Appends their keys and values to the cache's layer (allocated on
  /// first use; the cache's length is the caller's to advance). Throws Error(InvalidArgument)
  /// when they do not fit the cache's capacity.
  Tensor forward(const Tensor& qkv, KvCache& cache) const;

 private:
  CoreAttentionSpec spec_;
};

/// One operand of strided_batched_gemm: matrix j at p + j * stride elements, leading dim ld.
struct GemmOperand {
  const void* p;
  int64_t ld, stride;
};

/// C_j = op(A_j) op(B_j) + beta C_j for j < batch, C_j at c + j * stride_c (leading dim ldc),
/// all of storage type `type`: the attention GEMMs, which read their operands in place out of
/// qkv, the probabilities and the context.
void strided_batched_gemm(Backend& be, DType type, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                          int64_t batch, GemmOperand a, GemmOperand b, void* c, int64_t ldc, int64_t stride_c,
                          float beta = 0.0f);

}  // namespace ptdp
