#include "core/layers/attention/core_attention.h"

#include <cmath>

#include "base/error.h"
#include "core/layers/dropout.h"

namespace ptdp {

CoreAttentionSpec::CoreAttentionSpec(const LayerConfig& c, int layer_index, const TensorParallel& group,
                                     std::string name)
    : cfg(&c),
      layer(layer_index),
      tp(group),
      owner(std::move(name)),
      heads(c.num_attention_heads / group.size),
      groups(c.query_groups() / group.size),
      q_per_group(c.queries_per_group()),
      dh(c.head_dim()) {}

float CoreAttentionSpec::scale() const {
  const float base = 1.0f / std::sqrt(static_cast<float>(dh));
  return scale_factor == 1.0f ? base : base * scale_factor;
}

DropoutDesc CoreAttentionSpec::probs_dropout(int64_t b, const Step& step) const {
  const int64_t s = seq();
  DropoutDesc d;
  d.p = cfg->attention_dropout;
  d.rng = PhiloxStream{cfg->seed, dropout_stream(step, layer, DropoutSite::AttentionProbs)};
  // The rank's whole groups hold the consecutive query heads [rank * a/t, (rank + 1) * a/t).
  d.block.shape[0] = d.block.global_shape[0] = b;
  d.block.shape[1] = heads;
  d.block.global_shape[1] = cfg->num_attention_heads;
  d.block.shape[2] = d.block.global_shape[2] = s * s;
  d.block.offset[1] = tp.rank * heads;
  return d;
}

AttentionKernels attention_kernels(const Backend& be, DType t, int64_t dh) {
  return {be.name(), be.fused_attention_supported(t, dh), be.attention_block_supported(t, dh)};
}

namespace {

// LayerConfig::attention outside context parallelism.
bool takes_fused(const CoreAttentionSpec& spec, const AttentionKernels& kernels) {
  switch (spec.cfg->attention) {
    case AttentionImpl::Unfused: return false;
    case AttentionImpl::Fused:
      if (!kernels.fused) {
        throw_error(ErrorCode::Unsupported, str_cat("attention = fused: the ", kernels.backend,
                                                    " backend has no fused attention for ",
                                                    dtype_name(spec.cfg->precision), " with head dim ", spec.dh,
                                                    " (use auto or unfused)"));
      }
      return true;
    case AttentionImpl::Auto:
      // The fused kernel wherever the backend has one for the precision and head dim: on the
      // CPU its tile GEMMs beat the unfused path's (bench_kernels' attn/ rows), and it never
      // stores the s x s probabilities.
      return kernels.fused;
  }
  return false;
}

}  // namespace

std::unique_ptr<CoreAttention> make_core_attention(const CoreAttentionSpec& spec, const AttentionKernels& kernels) {
  const bool context_parallel = spec.tp.cp.size > 1;
  if (context_parallel && kernels.block) return make_ring_attention(spec);
  std::unique_ptr<CoreAttention> whole =
      takes_fused(spec, kernels) ? make_fused_attention(spec) : make_unfused_attention(spec);
  return context_parallel ? make_all_gather_attention(spec, std::move(whole)) : std::move(whole);
}

void strided_batched_gemm(Backend& be, DType type, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                          int64_t batch, GemmOperand a, GemmOperand b, void* c, int64_t ldc, int64_t stride_c,
                          float beta) {
  GemmDesc g;
  g.beta = beta;
  g.a_type = g.b_type = g.c_type = type;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = m;
  g.n = n;
  g.k = k;
  g.lda = a.ld;
  g.ldb = b.ld;
  g.ldc = ldc;
  g.batch = batch;
  g.stride_a = a.stride;
  g.stride_b = b.stride;
  g.stride_c = stride_c;
  be.gemm(g, a.p, b.p, c);
}

}  // namespace ptdp
