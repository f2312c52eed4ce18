// unfused_attention.h: the unfused causal self-attention the layer runs with --attention-backend
// unfused (core/layers/attention.cpp; the CPU's auto is the fused kernel): strided-batched GEMMs
// over the (batch, head) pairs and the causal softmax, fp32, without dropout. bench_kernels
// times it beside the fused kernel and bench_kernel_ir runs it once for callgrind; both call
// these, so they measure the same calls.
//
// Layouts as the layer's: qkv [s, pairs, 3, dh] (q, k, v of a pair side by side), ctx and dctx
// [s, pairs, dh], the probabilities and their gradient [pairs, s, s].
#pragma once

#include <cstdint>

#include "kernels/backend.h"

namespace ptdp::bench {

/// C[z] = op(A[z]) op(B[z]) for z < batch; each operand (pointer, leading dimension, stride).
inline void batched_gemm(Backend& be, int64_t batch, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                         const float* a, int64_t lda, int64_t sa, const float* b, int64_t ldb, int64_t sb,
                         float* c, int64_t ldc, int64_t sc) {
  GemmDesc g;
  g.trans_a = ta, g.trans_b = tb;
  g.m = m, g.n = n, g.k = k;
  g.lda = lda, g.ldb = ldb, g.ldc = ldc;
  g.batch = batch;
  g.stride_a = sa, g.stride_b = sb, g.stride_c = sc;
  be.gemm(g, a, b, c);
}

/// probs = causal softmax(scale Q K^T), ctx = probs V.
inline void unfused_attention_forward(Backend& be, int64_t s, int64_t pairs, int64_t dh, float scale,
                                      const float* qkv, float* probs, float* ctx) {
  const int64_t group = 3 * dh, row = pairs * group;
  const float* q = qkv;
  const float* k = qkv + dh;
  const float* v = qkv + 2 * dh;
  batched_gemm(be, pairs, false, true, s, s, dh, q, row, group, k, row, group, probs, s, s * s);
  be.softmax_forward(probs, probs, DType::F32, pairs, s, s, scale, true);
  batched_gemm(be, pairs, false, false, s, dh, s, probs, s, s * s, v, row, group, ctx, pairs * dh, dh);
}

/// dqkv from dctx and the forward's probabilities (dprobs is scratch of their size).
inline void unfused_attention_backward(Backend& be, int64_t s, int64_t pairs, int64_t dh, float scale,
                                       const float* qkv, const float* probs, const float* dctx, float* dprobs,
                                       float* dqkv) {
  const int64_t group = 3 * dh, row = pairs * group;
  const float* q = qkv;
  const float* k = qkv + dh;
  const float* v = qkv + 2 * dh;
  batched_gemm(be, pairs, false, true, s, s, dh, dctx, pairs * dh, dh, v, row, group, dprobs, s, s * s);
  batched_gemm(be, pairs, true, false, s, dh, s, probs, s, s * s, dctx, pairs * dh, dh, dqkv + 2 * dh, row, group);
  be.softmax_backward(probs, dprobs, dprobs, DType::F32, pairs, s, s, scale);
  batched_gemm(be, pairs, false, false, s, dh, s, dprobs, s, s * s, k, row, group, dqkv, row, group);
  batched_gemm(be, pairs, true, false, s, dh, s, dprobs, s, s * s, q, row, group, dqkv + dh, row, group);
}

}  // namespace ptdp::bench
