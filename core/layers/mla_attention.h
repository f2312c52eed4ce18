// Multi-latent attention (DeepSeek-V2, Liu et al. 2024; Megatron-Core's MLASelfAttention with
// its local layer spec), in the [s, b, h] layout. Parameters (per layer, under
// "<prefix>" = "decoder.layers.{i}.self_attention"), with r_q = q_lora_rank, r = kv_lora_rank,
// dn = qk_head_dim, dr = qk_pos_emb_head_dim, dv = v_head_dim:
//   linear_q_down_proj.weight [r_q, h]            replicated   (q_lora_rank > 0)
//   q_layernorm.weight (.bias) [r_q]               replicated   (q_lora_rank > 0, --qk-layernorm)
//   linear_q_up_proj.weight [a (dn + dr), r_q]     column-parallel, rows per head [nope, rope]
//   linear_q_proj.weight [a (dn + dr), h]          column-parallel, instead of the three above
//                                                  when q_lora_rank = 0 (DeepSeek-V2-Lite)
//   linear_kv_down_proj.weight [r + dr, h]         replicated: the compressed kv, then the one
//                                                  RoPE key that every head shares
//   kv_layernorm.weight (.bias) [r]                replicated   (--qk-layernorm)
//   linear_kv_up_proj.weight [a (dn + dv), r]      column-parallel, rows per head [k_nope, v]
//   linear_proj.weight [h, a dv] (.bias [h])       row-parallel
// These are DeepSeek's q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm,
// kv_b_proj and o_proj with the same row orders (RoPE in the rotate-half convention: DeepSeek's
// interleaved pairs map onto it by a permutation of the RoPE rows, as Megatron's converters do).
// No projection but linear_proj has a bias.
//
// The query of head j is [q_nope_j, rope(q_pe_j)], its key [k_nope_j, rope(k_pe)] with k_pe the
// shared RoPE key, its value v_j. They are handed to the same core attentions as SelfAttention's
// (core/layers/attention/core_attention.h: unfused, fused, ring and all-gather under context
// parallelism, dropout and selective recomputation included) in linear_qkv's layout with g = a
// and head dim dq = dn + dr: a token's row holds, per head, the query [q_pe, q_nope], the key
// [k_pe, k_nope] and the value [v, 0 ... 0]. The RoPE part comes first inside the heads so that
// the existing RoPE kernel (which rotates a head's first rotary dims) applies; q . k does not
// depend on the order of the dims. The value head is padded with dq - dv zeros, and only the
// first dv columns of each context head go to linear_proj (the zeros give zero columns): the
// padding costs (dq - dv)/dq of the value's share of the attention's context GEMMs and memory
// (none for DeepSeek-V2/V3's dn = dv = 128, dr = 64 ... it is 1/3 of the value there: dq = 192);
// a kernel with a separate value head dim is a later optimisation. The softmax scale is
// LayerConfig::yarn_softmax_mscale()^2 / sqrt(dq), as Megatron-Core's.
//
// Tensor parallelism splits the heads: the up projections are column-parallel, linear_proj is
// row-parallel; the down projections and the latent norms are replicated. The latents' input
// gradients from this rank's heads are summed over the tensor group (the up projections' f
// operator; k_pe's explicitly), so the replicated parts compute the same gradients on every
// rank. Under sequence parallelism the down projections run on this rank's rows and the small
// latents [N/t, r_q] and [N/t, r + dr] are gathered along the sequence (not h, as Megatron-Core
// does); the down projections' weight gradients, from this rank's rows only, are then summed
// over the tensor group (ParamInfo::tp_reduced_grad).
//
// Generation (decode): the layer's KvCache entry holds, per position, the normalised latent and
// the rotated shared RoPE key, [capacity, r + dr], instead of every head's keys and values
// (kv_lora_rank + dr numbers per token instead of 2 a dq). Each step rebuilds the keys and
// values of the cached positions through linear_kv_up_proj (no absorption into the query: the
// same GEMMs as training, so the tokens equal the recomputed sequence's), then attends as
// KvCacheAttention does.
#pragma once

#include <memory>
#include <string>

#include "core/layers/attention.h"

namespace ptdp {

/// A linear layer [out, in] without bias whose weight is the same on every tensor rank
/// (Megatron's parallel_mode "duplicated"). With `reduce` of size > 1 (sequence parallelism:
/// each rank sees its own rows) its weight gradient is summed over that group.
class ReplicatedLinear {
 public:
  ReplicatedLinear(ParamTable& params, const std::string& prefix, int64_t in, int64_t out, float init_std,
                   TensorParallel reduce);
  /// x [N, in] -> [N, out].
  Tensor forward(const Tensor& x, const Step& step);
  /// dy [N, out] -> dx [N, in]; keeps dy for backward_weight.
  Tensor backward_input(const Tensor& dy, const Step& step);
  void backward_weight(const Step& step);
  void release(const Step& step) { slots_.release(step.microbatch); }
  int weight_index() const { return weight_; }

 private:
  struct Slot {
    Tensor x;   // [N, in]
    Tensor dy;  // [N, out]
  };
  ParamTable& params_;
  int weight_ = -1;
  int64_t in_, out_;
  TensorParallel reduce_;
  Slots<Slot> slots_;
};

/// Megatron-Core's MLASelfAttention (see the top of this file).
class MlaAttention : public AttentionLayer {
 public:
  /// Declares the parameters above under `prefix` and picks the core attention for the backend
  /// of `device` (as SelfAttention, with head dim qk_head_dim + qk_pos_emb_head_dim).
  MlaAttention(ParamTable& params, const std::string& prefix, const LayerConfig& cfg, int layer, TensorParallel tp,
               Device device);

  /// x [s/c*b, h] (normalised; [s/c*b/t, h] under sequence parallelism) -> the output
  /// projection, x's shape, without its bias.
  Tensor forward(const Tensor& x, const Step& step) override;
  /// dy, forward's output's shape -> dx, x's shape.
  Tensor backward_input(const Tensor& dy, const Step& step) override;
  void backward_weight(const Step& step) override;
  void release(const Step& step) override;
  /// A generation step (b = 1): x [n, h] at positions cache.length, ...; appends their latents
  /// to `cache` (see the top of this file). -> [n, h] without the output bias.
  Tensor decode(const Tensor& x, KvCache& cache, const Step& step) override;
  Tensor output_bias() const override { return proj_.bias(); }
  const CoreAttention& core_attention() const override { return *core_; }
  /// Megatron-Core's MLASelfAttention.clip_qk (Kimi K2): per head, eta = threshold / maximum;
  /// the query's nope rows (linear_q_up_proj, or linear_q_proj) by eta^alpha and its rope rows
  /// by eta (the shared RoPE key cannot take a head's share), the key's nope rows
  /// (linear_kv_up_proj) by eta^(1 - alpha); the value rows and the shared key untouched.
  std::vector<QkClipScale> qk_clip_scales(const std::vector<float>& head_max, float threshold,
                                          float alpha) const override;

 private:
  struct Slot {
    TokenPositions positions;  // the forward's, for the backward
    int64_t b = 0;             // samples
    bool sharded = false;      // sequence parallelism: the latents were gathered along the sequence
  };

  // The down projections, latent norms and up projections: x [N, h] ([N/t, h] under sequence
  // parallelism) -> q [N, a/t*(dn+dr)], kv [N, a/t*(dn+dv)], ckv [N, r+dr] (the latent and the
  // shared RoPE key, gathered along the sequence) and c [N, r] (the normalised latent).
  void project(const Tensor& x, const Step& step, Tensor& q, Tensor& kv, Tensor& ckv, Tensor& c);
  // The core attention's input qkv [M, a/t*3*dq] from q [M, a/t*(dn+dr)], kv [M, a/t*(dn+dv)]
  // and ckv [M, r+dr] (its last dr columns: the shared RoPE keys).
  Tensor assemble(const Tensor& q, const Tensor& kv, const Tensor& ckv, int64_t m) const;
  // The keys [k_pe, k_nope] and padded values [v, 0] of m tokens into dst, whose rows hold a/t
  // units of `unit` elements, the key at `key` elements into a unit and the value after it:
  // from kv [m, a/t*(dn+dv)] and the shared RoPE keys at column kpe_col of kpe [m, kpe_ld].
  void write_keys_values(const Tensor& dst, int64_t unit, int64_t key, const Tensor& kv, const Tensor& kpe,
                         int64_t kpe_col, int64_t kpe_ld, int64_t m) const;
  // assemble's backward: dqkv -> dq [N, a/t*(dn+dr)], dkv [N, a/t*(dn+dv)], dkpe [N, dr] (summed
  // over this rank's heads).
  void disassemble(const Tensor& dqkv, Tensor& dq, Tensor& dkv, Tensor& dkpe) const;
  RopeDesc rope_desc(int64_t s, int64_t b, const Tensor& like, const int32_t* positions);
  // The first dv columns of each context head: ctx [N, a/t*dq] -> [N, a/t*dv], and back
  // (zeros in the padding).
  Tensor value_columns(const Tensor& ctx) const;
  Tensor pad_value_columns(const Tensor& dctx) const;

  ParamTable& params_;
  const LayerConfig& cfg_;
  TensorParallel tp_;
  int64_t heads_, dn_, dr_, dv_, dq_, r_, rq_;  // a/t, qk_head_dim, qk_pos_emb_head_dim, v_head_dim, dn+dr, ranks
  CoreAttentionSpec spec_;
  std::unique_ptr<ReplicatedLinear> q_down_;         // q_lora_rank > 0
  std::unique_ptr<Norm> q_norm_;                     // q_lora_rank > 0 and --qk-layernorm
  std::unique_ptr<ColumnParallelLinear> q_up_;       // q_lora_rank > 0: on the gathered latent
  std::unique_ptr<ColumnParallelLinear> q_proj_;     // q_lora_rank = 0
  ReplicatedLinear kv_down_;
  std::unique_ptr<Norm> kv_norm_;                    // --qk-layernorm
  ColumnParallelLinear kv_up_;
  RowParallelLinear proj_;
  std::unique_ptr<CoreAttention> core_;
  KvCacheAttention cached_;
  Tensor inv_freq_;  // [rotary_dim/2] fp32, on the activations' device
  Slots<Slot> slots_;
};

}  // namespace ptdp
