// The argument checks of every Backend op, written once for all backends: each op's entry point
// (kernels/cpu/*.cpp, kernels/cuda/*.cu) calls its check_<op> before any work, so the backends
// reject the same arguments with the same messages. Also the host-side scalars the backends
// derive from checked arguments (dropout's keep scale, AdamW's bias corrections), so their
// results agree bit for bit.
//
// Plain C++ (no CUDA): the CUDA backend includes it from nvcc host code.
#pragma once

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "base/dtype.h"
#include "base/error.h"
#include "kernels/backend.h"
#include "kernels/check.h"

namespace ptdp::kcheck {

/// Whether an op has anything to compute. With Work::none the sizes make the op empty and its
/// pointers were not checked (they may be NULL), so the op must return without touching them.
enum class Work { none, some };

// ---- GEMM ----------------------------------------------------------------------------------

/// The leading dimensions GemmDesc's defaults (0) resolve to, and whether C is empty.
struct GemmLayout {
  int64_t lda = 0, ldb = 0, ldc = 0;
  Work work = Work::none;
};

constexpr const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::None: return "none";
    case Epilogue::Bias: return "bias";
    case Epilogue::BiasGelu: return "bias_gelu";
    case Epilogue::DGelu: return "dgelu";
  }
  return "?";
}

namespace detail {
inline void check_gemm_ld(const char* what, int64_t ld, int64_t min_cols) {
  PTDP_CHECK_ARG(ld >= std::max<int64_t>(1, min_cols),
                 std::string("gemm: ") + what + " = " + std::to_string(ld) +
                     " is smaller than the row length " + std::to_string(min_cols));
}

inline void check_gemm_types(const GemmDesc& d) {
  float_type("gemm", "a_type", d.a_type);
  float_type("gemm", "b_type", d.b_type);
  float_type("gemm", "c_type", d.c_type);
  PTDP_CHECK_ARG(d.b_type == d.a_type, std::string("gemm: b_type = ") + dtype_name(d.b_type) +
                                           " differs from a_type = " + dtype_name(d.a_type));
  PTDP_CHECK_ARG(d.c_type == d.a_type || d.c_type == DType::F32,
                 std::string("gemm: c_type = ") + dtype_name(d.c_type) +
                     " must be a_type = " + dtype_name(d.a_type) + " or f32");
  const int e = static_cast<int>(d.epilogue);
  PTDP_CHECK_ARG(e >= 0 && e <= static_cast<int>(Epilogue::DGelu),
                 "gemm: epilogue = " + std::to_string(e) + " is not a valid epilogue");
  if (d.epilogue != Epilogue::None) {
    PTDP_CHECK_ARG(d.batch == 1, std::string("gemm: epilogue ") + epilogue_name(d.epilogue) +
                                     " needs batch == 1, got batch = " + std::to_string(d.batch));
  }
}
}  // namespace detail

/// Types and epilogue are checked whatever the sizes; bias and aux only when C is not empty.
inline GemmLayout check_gemm(const GemmDesc& d, const void* a, const void* b, const void* c) {
  nonneg("gemm", "m", d.m);
  nonneg("gemm", "n", d.n);
  nonneg("gemm", "k", d.k);
  nonneg("gemm", "batch", d.batch);
  nonneg("gemm", "stride_a", d.stride_a);
  nonneg("gemm", "stride_b", d.stride_b);
  nonneg("gemm", "stride_c", d.stride_c);
  detail::check_gemm_types(d);
  // Stored shapes (row-major): A is [m, k] or [k, m] when transposed; B is [k, n] or [n, k].
  const int64_t a_cols = d.trans_a ? d.m : d.k;
  const int64_t b_cols = d.trans_b ? d.k : d.n;
  GemmLayout l;
  l.lda = d.lda ? d.lda : std::max<int64_t>(1, a_cols);
  l.ldb = d.ldb ? d.ldb : std::max<int64_t>(1, b_cols);
  l.ldc = d.ldc ? d.ldc : std::max<int64_t>(1, d.n);
  detail::check_gemm_ld("lda", l.lda, a_cols);
  detail::check_gemm_ld("ldb", l.ldb, b_cols);
  detail::check_gemm_ld("ldc", l.ldc, d.n);
  if (d.m == 0 || d.n == 0 || d.batch == 0) return l;
  not_null("gemm", "c", c);
  if (d.k > 0) {
    not_null("gemm", "a", a);
    not_null("gemm", "b", b);
  }
  if (d.batch > 1) {
    PTDP_CHECK_ARG(d.stride_c > 0,
                   "gemm: stride_c must be > 0 when batch > 1 (outputs would overlap)");
  }
  if (d.epilogue == Epilogue::Bias || d.epilogue == Epilogue::BiasGelu) {
    PTDP_CHECK_ARG(d.bias != nullptr, std::string("gemm: bias is NULL (epilogue ") +
                                          epilogue_name(d.epilogue) + " reads it)");
  }
  if (d.epilogue == Epilogue::BiasGelu || d.epilogue == Epilogue::DGelu) {
    PTDP_CHECK_ARG(d.aux != nullptr, std::string("gemm: aux is NULL (epilogue ") +
                                         epilogue_name(d.epilogue) +
                                         (d.epilogue == Epilogue::DGelu ? " reads it)"
                                                                        : " writes it)"));
  }
  l.work = Work::some;
  return l;
}

// ---- bias ----------------------------------------------------------------------------------

inline void check_bias_add(const void* y, const void* bias, DType t, int64_t rows, int64_t cols) {
  float_type("bias_add", "t", t);
  nonneg("bias_add", "rows", rows);
  nonneg("bias_add", "cols", cols);
  not_null("bias_add", "y", y, rows * cols);
  not_null("bias_add", "bias", bias, rows * cols);
}

inline void check_bias_grad(const void* dy, DType t, const float* dbias, int64_t rows,
                            int64_t cols) {
  float_type("bias_grad", "t", t);
  nonneg("bias_grad", "rows", rows);
  nonneg("bias_grad", "cols", cols);
  not_null("bias_grad", "dy", dy, rows * cols);
  not_null("bias_grad", "dbias", dbias, cols);
}

// ---- GeLU ----------------------------------------------------------------------------------

inline void check_gelu_forward(const void* x, const void* y, DType t, int64_t n) {
  float_type("gelu_forward", "t", t);
  nonneg("gelu_forward", "n", n);
  not_null("gelu_forward", "x", x, n);
  not_null("gelu_forward", "y", y, n);
}

inline void check_gelu_backward(const void* x, const void* dy, const void* dx, DType t,
                                int64_t n) {
  float_type("gelu_backward", "t", t);
  nonneg("gelu_backward", "n", n);
  not_null("gelu_backward", "x", x, n);
  not_null("gelu_backward", "dy", dy, n);
  not_null("gelu_backward", "dx", dx, n);
}

// ---- LayerNorm -----------------------------------------------------------------------------

inline Work check_layernorm_forward(const void* x, const void* gamma, const void* beta,
                                    const void* y, DType t, const float* mean, const float* rstd,
                                    int64_t rows, int64_t cols, float eps) {
  float_type("layernorm_forward", "t", t);
  nonneg("layernorm_forward", "rows", rows);
  positive("layernorm_forward", "cols", cols);
  PTDP_CHECK_ARG(eps >= 0.0f && std::isfinite(eps),
                 "layernorm_forward: eps must be finite and >= 0, got " + std::to_string(eps));
  if (rows == 0) return Work::none;
  not_null("layernorm_forward", "x", x);
  not_null("layernorm_forward", "gamma", gamma);
  not_null("layernorm_forward", "beta", beta);
  not_null("layernorm_forward", "y", y);
  not_null("layernorm_forward", "mean", mean);
  not_null("layernorm_forward", "rstd", rstd);
  return Work::some;
}

/// With rows == 0 the op still has work: dgamma and dbeta are cleared (or kept, accumulating).
inline void check_layernorm_backward(const void* x, const void* gamma, const float* mean,
                                     const float* rstd, const void* dy, const void* dx, DType t,
                                     const float* dgamma, const float* dbeta, int64_t rows,
                                     int64_t cols) {
  float_type("layernorm_backward", "t", t);
  nonneg("layernorm_backward", "rows", rows);
  positive("layernorm_backward", "cols", cols);
  not_null("layernorm_backward", "dgamma", dgamma);
  not_null("layernorm_backward", "dbeta", dbeta);
  if (rows > 0) {
    not_null("layernorm_backward", "x", x);
    not_null("layernorm_backward", "gamma", gamma);
    not_null("layernorm_backward", "mean", mean);
    not_null("layernorm_backward", "rstd", rstd);
    not_null("layernorm_backward", "dy", dy);
    not_null("layernorm_backward", "dx", dx);
  }
}

// ---- RMSNorm -------------------------------------------------------------------------------

inline Work check_rmsnorm_forward(const void* x, const void* gamma, const void* y, DType t,
                                  const float* rstd, int64_t rows, int64_t cols, float eps) {
  const char* op = "rmsnorm_forward";
  float_type(op, "t", t);
  nonneg(op, "rows", rows);
  positive(op, "cols", cols);
  PTDP_CHECK_ARG(eps >= 0.0f && std::isfinite(eps),
                 std::string(op) + ": eps must be finite and >= 0, got " + std::to_string(eps));
  if (rows == 0) return Work::none;
  not_null(op, "x", x);
  not_null(op, "gamma", gamma);
  not_null(op, "y", y);
  not_null(op, "rstd", rstd);
  return Work::some;
}

/// With rows == 0 the op still has work: dgamma is cleared (or kept, accumulating).
inline void check_rmsnorm_backward(const void* x, const void* gamma, const float* rstd,
                                   const void* dy, const void* dx, DType t, const float* dgamma,
                                   int64_t rows, int64_t cols) {
  const char* op = "rmsnorm_backward";
  float_type(op, "t", t);
  nonneg(op, "rows", rows);
  positive(op, "cols", cols);
  not_null(op, "dgamma", dgamma);
  if (rows > 0) {
    not_null(op, "x", x);
    not_null(op, "gamma", gamma);
    not_null(op, "rstd", rstd);
    not_null(op, "dy", dy);
    not_null(op, "dx", dx);
  }
}

/// `op` is rmsnorm_split_forward or rmsnorm_split_backward: what they share beyond
/// rmsnorm_forward's and rmsnorm_backward's checks, the row's width.
inline void check_rmsnorm_split_width(const char* op, int64_t cols, int64_t width) {
  PTDP_CHECK_ARG(width >= cols, std::string(op) + ": width = " + std::to_string(width) +
                                    " is smaller than this device's cols = " + std::to_string(cols));
}

inline Work check_rmsnorm_split_forward(const void* x, const void* gamma, const float* sum_sq,
                                        const void* y, DType t, const float* rstd, int64_t rows,
                                        int64_t cols, int64_t width, float eps) {
  const char* op = "rmsnorm_split_forward";
  float_type(op, "t", t);
  nonneg(op, "rows", rows);
  positive(op, "cols", cols);
  check_rmsnorm_split_width(op, cols, width);
  PTDP_CHECK_ARG(eps >= 0.0f && std::isfinite(eps),
                 std::string(op) + ": eps must be finite and >= 0, got " + std::to_string(eps));
  if (rows == 0) return Work::none;
  not_null(op, "x", x);
  not_null(op, "gamma", gamma);
  not_null(op, "sum_sq", sum_sq);
  not_null(op, "y", y);
  not_null(op, "rstd", rstd);
  return Work::some;
}

/// With rows == 0 the op still has work: dgamma is cleared (or kept, accumulating).
inline void check_rmsnorm_split_backward(const void* x, const void* gamma, const float* rstd,
                                         const float* dot, const void* dy, const void* dx, DType t,
                                         const float* dgamma, int64_t rows, int64_t cols,
                                         int64_t width) {
  const char* op = "rmsnorm_split_backward";
  float_type(op, "t", t);
  nonneg(op, "rows", rows);
  positive(op, "cols", cols);
  check_rmsnorm_split_width(op, cols, width);
  not_null(op, "dgamma", dgamma);
  if (rows > 0) {
    not_null(op, "x", x);
    not_null(op, "gamma", gamma);
    not_null(op, "rstd", rstd);
    not_null(op, "dot", dot);
    not_null(op, "dy", dy);
    not_null(op, "dx", dx);
  }
}

// ---- SwiGLU --------------------------------------------------------------------------------

/// `op` is swiglu_forward or swiglu_backward; `in` is x, `out` is y (forward) or dx (backward),
/// `dy` the backward's output gradient (NULL and unchecked for the forward).
inline Work check_swiglu(const char* op, const void* in, const void* dy, const void* out, DType t,
                         int64_t rows, int64_t cols, bool backward) {
  float_type(op, "t", t);
  nonneg(op, "rows", rows);
  nonneg(op, "cols", cols);
  if (rows == 0 || cols == 0) return Work::none;
  not_null(op, "x", in);
  if (backward) not_null(op, "dy", dy);
  not_null(op, backward ? "dx" : "y", out);
  return Work::some;
}

// ---- rotary position embedding -------------------------------------------------------------

/// `op` is rope_forward or rope_backward; `qkv` the activation (or its gradient) rotated.
inline Work check_rope(const char* op, const void* qkv, DType t, const RopeDesc& d) {
  float_type(op, "t", t);
  nonneg(op, "s", d.s);
  nonneg(op, "b", d.b);
  positive(op, "groups", d.groups);
  positive(op, "q_per_group", d.q_per_group);
  positive(op, "dh", d.dh);
  PTDP_CHECK_ARG(d.rot_dim > 0 && d.rot_dim <= d.dh && d.rot_dim % 2 == 0,
                 std::string(op) + ": rot_dim = " + std::to_string(d.rot_dim) +
                     " must be even and in (0, dh = " + std::to_string(d.dh) + "]");
  nonneg(op, "position_offset", d.position_offset);
  PTDP_CHECK_ARG(d.amplitude > 0.0f && std::isfinite(d.amplitude),
                 std::string(op) + ": amplitude = " + std::to_string(d.amplitude) + " must be finite and > 0");
  if (d.s == 0 || d.b == 0) return Work::none;
  not_null(op, "qkv", qkv);
  not_null(op, "inv_freq", d.inv_freq);
  return Work::some;
}

// ---- softmax -------------------------------------------------------------------------------

namespace detail {
inline void check_softmax_dims(const char* op, DType t, int64_t batch, int64_t sq, int64_t sk) {
  float_type(op, "t", t);
  nonneg(op, "batch", batch);
  nonneg(op, "sq", sq);
  nonneg(op, "sk", sk);
}
}  // namespace detail

inline Work check_softmax_forward(const void* x, const void* y, DType t, int64_t batch,
                                  int64_t sq, int64_t sk, float scale, bool causal) {
  detail::check_softmax_dims("softmax_forward", t, batch, sq, sk);
  PTDP_CHECK_ARG(!causal || sq <= sk,
                 "softmax_forward: a causal mask needs sq <= sk, got sq = " + std::to_string(sq) +
                     ", sk = " + std::to_string(sk));
  PTDP_CHECK_ARG(std::isfinite(scale), "softmax_forward: scale must be finite");
  if (batch * sq == 0 || sk == 0) return Work::none;
  not_null("softmax_forward", "x", x);
  not_null("softmax_forward", "y", y);
  return Work::some;
}

inline Work check_softmax_backward(const void* y, const void* dy, const void* dx, DType t,
                                   int64_t batch, int64_t sq, int64_t sk) {
  detail::check_softmax_dims("softmax_backward", t, batch, sq, sk);
  if (batch * sq == 0 || sk == 0) return Work::none;
  not_null("softmax_backward", "y", y);
  not_null("softmax_backward", "dy", dy);
  not_null("softmax_backward", "dx", dx);
  return Work::some;
}

/// softmax_forward_documents: batch is samples * heads; the starts are [samples, s].
inline Work check_softmax_forward_documents(const void* x, const void* y, DType t, int64_t batch,
                                            int64_t heads, int64_t s, float scale,
                                            const int32_t* document_starts) {
  const char* op = "softmax_forward_documents";
  detail::check_softmax_dims(op, t, batch, s, s);
  positive(op, "heads", heads);
  PTDP_CHECK_ARG(batch % heads == 0, std::string(op) + ": batch = " + std::to_string(batch) +
                                         " is not a multiple of heads = " + std::to_string(heads));
  PTDP_CHECK_ARG(std::isfinite(scale), std::string(op) + ": scale must be finite");
  if (batch == 0 || s == 0) return Work::none;
  not_null(op, "x", x);
  not_null(op, "y", y);
  not_null(op, "document_starts", document_starts);
  return Work::some;
}

// ---- dropout -------------------------------------------------------------------------------

namespace detail {
/// A block must lie inside its global tensor (dims named "block dim k").
inline void check_block(const char* op, const GlobalBlock& b) {
  for (int k = 0; k < 3; ++k) {
    const std::string dim = "block dim " + std::to_string(k);
    nonneg(op, (dim + " shape").c_str(), b.shape[k]);
    nonneg(op, (dim + " offset").c_str(), b.offset[k]);
    PTDP_CHECK_ARG(b.offset[k] + b.shape[k] <= b.global_shape[k],
                   std::string(op) + ": " + dim + ": offset " + std::to_string(b.offset[k]) +
                       " + shape " + std::to_string(b.shape[k]) + " exceeds the global extent " +
                       std::to_string(b.global_shape[k]));
  }
}

inline void check_dropout_p(const char* op, float p) {
  PTDP_CHECK_ARG(p >= 0.0f && p <= 1.0f,
                 std::string(op) + ": p must be in [0, 1], got " + std::to_string(p));
}
}  // namespace detail

/// `op` names the entry point (dropout_forward or dropout_backward); `in` and `out` are its
/// input and output.
inline Work check_dropout(const char* op, const void* in, const void* out, DType t,
                          const DropoutDesc& d) {
  float_type(op, "t", t);
  detail::check_dropout_p(op, d.p);
  detail::check_block(op, d.block);
  if (d.block.numel() == 0) return Work::none;
  not_null(op, "input", in);
  not_null(op, "output", out);
  return Work::some;
}

/// The factor kept elements are multiplied by: 1 / (1 - p), and 0 when p == 1 (nothing is kept).
inline float dropout_keep_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

/// With dropout (p > 0) the block must cover the rows * cols elements; with p == 0 it is
/// ignored (a default DropoutDesc means "no dropout"). bias may be NULL.
inline Work check_bias_dropout_add(const void* x, const void* /*bias: may be NULL*/,
                                   const void* residual, const void* y, DType t, int64_t rows,
                                   int64_t cols, const DropoutDesc& d) {
  const char* op = "bias_dropout_add";
  float_type(op, "t", t);
  nonneg(op, "rows", rows);
  nonneg(op, "cols", cols);
  detail::check_dropout_p(op, d.p);
  if (d.p > 0.0f) {
    detail::check_block(op, d.block);
    PTDP_CHECK_ARG(d.block.numel() == rows * cols,
                   std::string(op) + ": the dropout block has " +
                       std::to_string(d.block.numel()) + " elements, rows * cols = " +
                       std::to_string(rows * cols));
  }
  if (rows == 0 || cols == 0) return Work::none;
  not_null(op, "x", x);
  not_null(op, "residual", residual);
  not_null(op, "y", y);
  return Work::some;
}

// ---- fused attention ---------------------------------------------------------------------

namespace detail {
// What the whole-sequence and block descriptors share: heads, groups, scale and the dropout
// mask over the [b, heads, seq * seq] probabilities (`seq` named `seq_name` in messages).
template <typename Desc>
inline void check_attention_heads(const char* op, const Desc& d, int64_t seq, const char* seq_name) {
  positive(op, "b", d.b);
  positive(op, "heads", d.heads);
  positive(op, "dh", d.dh);
  nonneg(op, "groups", d.groups);
  PTDP_CHECK_ARG(d.heads % d.kv_groups() == 0,
                 std::string(op) + ": groups = " + std::to_string(d.groups) +
                     " does not divide heads = " + std::to_string(d.heads));
  PTDP_CHECK_ARG(std::isfinite(d.scale), std::string(op) + ": scale must be finite");
  PTDP_CHECK_ARG(d.dropout.p >= 0.0f && d.dropout.p < 1.0f,
                 std::string(op) + ": dropout p must be in [0, 1), got " +
                     std::to_string(d.dropout.p));
  if (d.dropout.p == 0.0f) return;
  // The probabilities of the unfused path, [b, heads, seq * seq], indexed into the global tensor.
  check_block(op, d.dropout.block);
  const int64_t want[3] = {d.b, d.heads, seq * seq};
  for (int k = 0; k < 3; ++k) {
    PTDP_CHECK_ARG(d.dropout.block.shape[k] == want[k],
                   std::string(op) + ": dropout block dim " + std::to_string(k) + " shape " +
                       std::to_string(d.dropout.block.shape[k]) + " must be " +
                       std::to_string(want[k]) + " (the probabilities are [b, heads, " + seq_name +
                       " * " + seq_name + "])");
  }
}

inline void check_attention_desc(const char* op, const AttentionDesc& d, DType t) {
  float_type(op, "t", t);
  positive(op, "s", d.s);
  check_attention_heads(op, d, d.s, "s");
}
}  // namespace detail

inline void check_attention_forward(const AttentionDesc& d, const void* qkv, const void* ctx,
                                    const float* lse, DType t) {
  const char* op = "attention_forward";
  detail::check_attention_desc(op, d, t);
  not_null(op, "qkv", qkv);
  not_null(op, "ctx", ctx);
  not_null(op, "lse", lse);
}

inline void check_attention_backward(const AttentionDesc& d, const void* qkv, const void* ctx,
                                     const float* lse, const void* dctx, const void* dqkv,
                                     const float* delta, DType t) {
  const char* op = "attention_backward";
  detail::check_attention_desc(op, d, t);
  not_null(op, "qkv", qkv);
  not_null(op, "ctx", ctx);
  not_null(op, "lse", lse);
  not_null(op, "dctx", dctx);
  not_null(op, "dqkv", dqkv);
  not_null(op, "delta", delta);
}

namespace detail {
inline void check_attention_block_desc(const char* op, const AttentionBlockDesc& d, DType t) {
  float_type(op, "t", t);
  positive(op, "sq", d.sq);
  positive(op, "sk", d.sk);
  nonneg(op, "q_start", d.q_start);
  nonneg(op, "k_start", d.k_start);
  PTDP_CHECK_ARG(d.q_start + d.sq <= d.seq && d.k_start + d.sk <= d.seq,
                 std::string(op) + ": the blocks [" + std::to_string(d.q_start) + ", " +
                     std::to_string(d.q_start + d.sq) + ") and [" + std::to_string(d.k_start) +
                     ", " + std::to_string(d.k_start + d.sk) + ") must lie in seq = " +
                     std::to_string(d.seq));
  check_attention_heads(op, d, d.seq, "seq");
}
}  // namespace detail

inline void check_attention_block_forward(const AttentionBlockDesc& d, const void* q,
                                          const void* kv, const float* out, const float* lse,
                                          DType t) {
  const char* op = "attention_block_forward";
  detail::check_attention_block_desc(op, d, t);
  not_null(op, "q", q);
  not_null(op, "kv", kv);
  not_null(op, "out", out);
  not_null(op, "lse", lse);
}

inline void check_attention_block_backward(const AttentionBlockDesc& d, const void* q,
                                           const void* kv, const void* ctx, const float* lse,
                                           const void* dctx, const float* dq, const float* dkv,
                                           DType t) {
  const char* op = "attention_block_backward";
  detail::check_attention_block_desc(op, d, t);
  not_null(op, "q", q);
  not_null(op, "kv", kv);
  not_null(op, "ctx", ctx);
  not_null(op, "lse", lse);
  not_null(op, "dctx", dctx);
  not_null(op, "dq", dq);
  not_null(op, "dkv", dkv);
}

// ---- elementwise ---------------------------------------------------------------------------

inline void check_add(const void* a, const void* b, const void* y, DType t, int64_t n) {
  float_type("add", "t", t);
  nonneg("add", "n", n);
  not_null("add", "a", a, n);
  not_null("add", "b", b, n);
  not_null("add", "y", y, n);
}

inline void check_axpy(const float* x, const float* y, int64_t n) {
  nonneg("axpy", "n", n);
  not_null("axpy", "x", x, n);
  not_null("axpy", "y", y, n);
}

inline void check_scale(const float* x, int64_t n) {
  nonneg("scale", "n", n);
  not_null("scale", "x", x, n);
}

inline void check_fill(const void* x, DType t, int64_t n) {
  nonneg("fill", "n", n);
  not_null("fill", "x", x, n);
  PTDP_CHECK_ARG(dtype_valid(static_cast<int>(t)),
                 "fill: dtype " + std::to_string(static_cast<int>(t)) + " is not a valid dtype");
}

inline void check_sum_squares(const float* x, int64_t n) {
  nonneg("sum_squares", "n", n);
  not_null("sum_squares", "x", x, n);
}

inline Work check_row_dot(const void* a, const void* b, DType t, const float* out, int64_t rows,
                          int64_t cols) {
  const char* op = "row_dot";
  float_type(op, "t", t);
  nonneg(op, "rows", rows);
  nonneg(op, "cols", cols);
  if (rows == 0) return Work::none;
  not_null(op, "out", out);
  if (cols == 0) return Work::some;  // every sum is 0
  not_null(op, "a", a);
  not_null(op, "b", b);
  return Work::some;
}

namespace detail {
inline void check_2d(const char* op, const char* what, int64_t ld, int64_t rows, int64_t cols) {
  nonneg(op, "rows", rows);
  nonneg(op, "cols", cols);
  PTDP_CHECK_ARG(ld >= cols, std::string(op) + ": " + what + " = " + std::to_string(ld) +
                                 " is smaller than cols = " + std::to_string(cols));
}
}  // namespace detail

/// t may be any dtype (integer ids are gathered too).
inline Work check_copy_2d(const void* dst, int64_t ld_dst, const void* src, int64_t ld_src,
                          DType t, int64_t rows, int64_t cols) {
  PTDP_CHECK_ARG(dtype_valid(static_cast<int>(t)),
                 "copy_2d: " + detail::dtype_arg("t", t) + " is not a valid dtype");
  detail::check_2d("copy_2d", "ld_dst", ld_dst, rows, cols);
  detail::check_2d("copy_2d", "ld_src", ld_src, rows, cols);
  if (rows == 0 || cols == 0) return Work::none;
  not_null("copy_2d", "dst", dst);
  not_null("copy_2d", "src", src);
  return Work::some;
}

inline Work check_fill_2d(const void* x, DType t, int64_t ld, int64_t rows, int64_t cols) {
  float_type("fill_2d", "t", t);
  detail::check_2d("fill_2d", "ld", ld, rows, cols);
  if (rows == 0 || cols == 0) return Work::none;
  not_null("fill_2d", "x", x);
  return Work::some;
}

// ---- cast ----------------------------------------------------------------------------------

inline void check_cast(const void* src, DType src_type, const void* dst, DType dst_type,
                       int64_t n) {
  nonneg("cast", "n", n);
  float_type("cast", "src_type", src_type);
  float_type("cast", "dst_type", dst_type);
  not_null("cast", "src", src, n);
  not_null("cast", "dst", dst, n);
}

// ---- embedding -----------------------------------------------------------------------------

namespace detail {
inline void check_embedding(const char* op, const int32_t* ids, int64_t n, DType t,
                            int64_t vocab_start, int64_t vocab_rows, int64_t h) {
  float_type(op, "t", t);
  nonneg(op, "n", n);
  nonneg(op, "vocab_start", vocab_start);
  nonneg(op, "vocab_rows", vocab_rows);
  nonneg(op, "h", h);
  not_null(op, "ids", ids, n);
}
}  // namespace detail

inline void check_embedding_forward(const int32_t* ids, int64_t n, const void* table, DType t,
                                    int64_t vocab_start, int64_t vocab_rows, int64_t h,
                                    const void* out) {
  detail::check_embedding("embedding_forward", ids, n, t, vocab_start, vocab_rows, h);
  not_null("embedding_forward", "out", out, n * h);
  not_null("embedding_forward", "table", table, vocab_rows * h);
}

inline void check_embedding_backward(const int32_t* ids, int64_t n, const void* dout, DType t,
                                     int64_t vocab_start, int64_t vocab_rows, int64_t h,
                                     const float* dtable) {
  detail::check_embedding("embedding_backward", ids, n, t, vocab_start, vocab_rows, h);
  not_null("embedding_backward", "dout", dout, n * h);
  not_null("embedding_backward", "dtable", dtable, vocab_rows * h);
}

// ---- cross-entropy -------------------------------------------------------------------------

namespace detail {
inline void check_ce_rows(const char* op, int64_t rows, int64_t v) {
  nonneg(op, "rows", rows);
  nonneg(op, "v", v);
}
}  // namespace detail

inline void check_ce_forward_local(const void* logits, DType t, const int32_t* targets,
                                   int64_t rows, int64_t v, int64_t vocab_start,
                                   const float* row_max, const float* sum_exp,
                                   const float* target_logit) {
  const char* op = "ce_forward_local";
  float_type(op, "t", t);
  detail::check_ce_rows(op, rows, v);
  nonneg(op, "vocab_start", vocab_start);
  not_null(op, "logits", logits, rows * v);
  not_null(op, "targets", targets, rows);
  not_null(op, "row_max", row_max, rows);
  not_null(op, "sum_exp", sum_exp, rows);
  not_null(op, "target_logit", target_logit, rows);
}

inline void check_ce_rescale(const float* row_max, const float* sum_exp, const float* global_max,
                             int64_t rows) {
  nonneg("ce_rescale", "rows", rows);
  not_null("ce_rescale", "row_max", row_max, rows);
  not_null("ce_rescale", "sum_exp", sum_exp, rows);
  not_null("ce_rescale", "global_max", global_max, rows);
}

inline void check_ce_loss(const float* row_max, const float* sum_exp, const float* target_logit,
                          int64_t rows, const float* loss) {
  nonneg("ce_loss", "rows", rows);
  not_null("ce_loss", "row_max", row_max, rows);
  not_null("ce_loss", "sum_exp", sum_exp, rows);
  not_null("ce_loss", "target_logit", target_logit, rows);
  not_null("ce_loss", "loss", loss, rows);
}

inline void check_ce_backward(const void* logits, DType t, const float* row_max,
                              const float* sum_exp, const int32_t* targets, const float* dloss,
                              int64_t rows, int64_t v, int64_t vocab_start, const void* dlogits) {
  float_type("ce_backward", "t", t);
  detail::check_ce_rows("ce_backward", rows, v);
  nonneg("ce_backward", "vocab_start", vocab_start);
  not_null("ce_backward", "logits", logits, rows * v);
  not_null("ce_backward", "row_max", row_max, rows);
  not_null("ce_backward", "sum_exp", sum_exp, rows);
  not_null("ce_backward", "targets", targets, rows);
  not_null("ce_backward", "dloss", dloss, rows);
  not_null("ce_backward", "dlogits", dlogits, rows * v);
}

// ---- mixture of experts --------------------------------------------------------------------

/// The most experts a router or moe_route takes: far above any published model (DeepSeek-V3 and
/// Kimi K2 route over 256 and 384), and small enough that the CUDA counting sort keeps one
/// counter per expert in shared memory.
inline constexpr int64_t kMaxExperts = 4096;

/// The leading dimensions and fixed-operand stride a GroupedGemmDesc's defaults (0) resolve to.
struct GroupedGemmLayout {
  int64_t lda = 0, ldb = 0, ldc = 0, stride = 0;
  Work work = Work::none;
};

namespace detail {
inline void check_grouped_ld(const char* what, int64_t ld, int64_t min_cols) {
  PTDP_CHECK_ARG(ld >= std::max<int64_t>(1, min_cols),
                 std::string("grouped_gemm: ") + what + " = " + std::to_string(ld) +
                     " is smaller than the row length " + std::to_string(min_cols));
}
}  // namespace detail

/// Sizes are read from the host array d.sizes; pointers are checked only where the call has work.
inline GroupedGemmLayout check_grouped_gemm(const GroupedGemmDesc& d, const void* a, const void* b,
                                            const void* c) {
  const char* op = "grouped_gemm";
  nonneg(op, "groups", d.groups);
  nonneg(op, "m", d.m);
  nonneg(op, "n", d.n);
  nonneg(op, "k", d.k);
  nonneg(op, "stride", d.stride);
  const int v = static_cast<int>(d.varying);
  PTDP_CHECK_ARG(v == static_cast<int>(GroupedDim::M) || v == static_cast<int>(GroupedDim::K),
                 "grouped_gemm: varying = " + std::to_string(v) + " is neither M (0) nor K (1)");
  const bool vary_m = d.varying == GroupedDim::M;
  float_type(op, "a_type", d.a_type);
  float_type(op, "b_type", d.b_type);
  float_type(op, "c_type", d.c_type);
  PTDP_CHECK_ARG(d.b_type == d.a_type, std::string("grouped_gemm: b_type = ") +
                                           dtype_name(d.b_type) + " differs from a_type = " +
                                           dtype_name(d.a_type));
  PTDP_CHECK_ARG(d.c_type == d.a_type || d.c_type == DType::F32,
                 std::string("grouped_gemm: c_type = ") + dtype_name(d.c_type) +
                     " must be a_type = " + dtype_name(d.a_type) + " or f32");
  PTDP_CHECK_ARG(vary_m || !d.trans_b, "grouped_gemm: trans_b applies to varying M only (varying "
                                       "K reads B stacked as [sum k_g, n])");
  PTDP_CHECK_ARG(d.groups == 0 || d.sizes != nullptr, "grouped_gemm: sizes is NULL");
  int64_t total = 0;
  for (int64_t g = 0; g < d.groups; ++g) {
    PTDP_CHECK_ARG(d.sizes[g] >= 0, "grouped_gemm: sizes[" + std::to_string(g) +
                                        "] must be >= 0, got " + std::to_string(d.sizes[g]));
    total += d.sizes[g];
  }
  const int64_t declared = vary_m ? d.m : d.k;
  PTDP_CHECK_ARG(declared == total, std::string("grouped_gemm: ") + (vary_m ? "m = " : "k = ") +
                                        std::to_string(declared) + " differs from sum(sizes) = " +
                                        std::to_string(total) + " (the varying dimension's total)");
  // Stored row lengths: varying M reads A [*, k], B_g [n, k] or [k, n], C [*, n]; varying K
  // reads A [*, m], B [*, n], C_g [m, n].
  const int64_t a_cols = vary_m ? d.k : d.m;
  const int64_t b_cols = vary_m ? (d.trans_b ? d.k : d.n) : d.n;
  GroupedGemmLayout l;
  l.lda = d.lda ? d.lda : std::max<int64_t>(1, a_cols);
  l.ldb = d.ldb ? d.ldb : std::max<int64_t>(1, b_cols);
  l.ldc = d.ldc ? d.ldc : std::max<int64_t>(1, d.n);
  detail::check_grouped_ld("lda", l.lda, a_cols);
  detail::check_grouped_ld("ldb", l.ldb, b_cols);
  detail::check_grouped_ld("ldc", l.ldc, d.n);
  // The fixed operand of a group spans (rows - 1) * ld + cols elements; packed groups follow
  // each other at rows * ld.
  const int64_t fixed_rows = vary_m ? (d.trans_b ? d.n : d.k) : d.m;
  const int64_t fixed_cols = vary_m ? b_cols : d.n;
  const int64_t fixed_ld = vary_m ? l.ldb : l.ldc;
  const int64_t span = fixed_rows > 0 ? (fixed_rows - 1) * fixed_ld + fixed_cols : 0;
  l.stride = d.stride ? d.stride : fixed_rows * fixed_ld;
  PTDP_CHECK_ARG(d.stride == 0 || d.groups <= 1 || d.stride >= span,
                 std::string("grouped_gemm: stride = ") + std::to_string(d.stride) +
                     " is smaller than one " + (vary_m ? "B_g" : "C_g") + "'s span " +
                     std::to_string(span) + " (groups would overlap)");
  const bool empty = vary_m ? (total == 0 || d.n == 0) : (d.groups == 0 || d.m == 0 || d.n == 0);
  if (empty) return l;
  not_null(op, "c", c);
  if ((vary_m ? d.k : total) > 0) {
    not_null(op, "a", a);
    not_null(op, "b", b);
  }
  l.work = Work::some;
  return l;
}

inline Work check_moe_route(const int32_t* indices, int64_t tokens, int64_t k, int64_t experts,
                            const int32_t* row_of, const int64_t* counts) {
  const char* op = "moe_route";
  nonneg(op, "tokens", tokens);
  positive(op, "k", k);
  positive(op, "experts", experts);
  PTDP_CHECK_ARG(experts <= kMaxExperts, "moe_route: experts = " + std::to_string(experts) +
                                             " exceeds " + std::to_string(kMaxExperts));
  PTDP_CHECK_ARG(tokens <= INT32_MAX / k, "moe_route: tokens * k = " + std::to_string(tokens) +
                                              " * " + std::to_string(k) +
                                              " exceeds 2^31 - 1 (row_of holds int32 rows)");
  not_null(op, "counts", counts);
  if (tokens == 0) return Work::none;
  not_null(op, "indices", indices);
  not_null(op, "row_of", row_of);
  return Work::some;
}

/// The refusal of an expert index outside [-1, experts) at slot `slot` (= t * k + j), in the
/// same words on every backend.
[[noreturn]] inline void refuse_moe_route_index(int64_t slot, int64_t k, int64_t value,
                                                int64_t experts) {
  throw Error(ErrorCode::InvalidArgument,
              "moe_route: indices[" + std::to_string(slot / k) + ", " + std::to_string(slot % k) +
                  "] = " + std::to_string(value) + " is outside [-1, experts = " +
                  std::to_string(experts) + ")");
}

namespace detail {
inline void check_moe_rows(const char* op, int64_t tokens, int64_t k, int64_t h, int64_t rows) {
  nonneg(op, "tokens", tokens);
  positive(op, "k", k);
  nonneg(op, "h", h);
  nonneg(op, "rows", rows);
}
}  // namespace detail

/// t may be any dtype (the rows are copied as bytes).
inline Work check_moe_permute(const void* x, DType t, const int32_t* row_of, int64_t tokens,
                              int64_t k, int64_t h, int64_t rows, const void* out) {
  const char* op = "moe_permute";
  PTDP_CHECK_ARG(dtype_valid(static_cast<int>(t)),
                 "moe_permute: " + detail::dtype_arg("t", t) + " is not a valid dtype");
  detail::check_moe_rows(op, tokens, k, h, rows);
  if (tokens == 0 || h == 0 || rows == 0) return Work::none;
  not_null(op, "x", x);
  not_null(op, "row_of", row_of);
  not_null(op, "out", out);
  return Work::some;
}

/// probs may be NULL (weights 1).
inline Work check_moe_unpermute(const void* e, DType t, const int32_t* row_of, int64_t tokens,
                                int64_t k, int64_t h, int64_t rows, const void* y) {
  const char* op = "moe_unpermute";
  float_type(op, "t", t);
  detail::check_moe_rows(op, tokens, k, h, rows);
  if (tokens == 0 || h == 0) return Work::none;
  not_null(op, "row_of", row_of);
  not_null(op, "y", y);
  not_null(op, "e", e, rows);
  return Work::some;
}

inline Work check_moe_unpermute_backward(const void* dy, const void* e, DType t, const float* probs,
                                         const int32_t* row_of, int64_t tokens, int64_t k,
                                         int64_t h, int64_t rows, const void* de,
                                         const float* dprobs) {
  const char* op = "moe_unpermute_backward";
  float_type(op, "t", t);
  detail::check_moe_rows(op, tokens, k, h, rows);
  if (tokens == 0) return Work::none;
  not_null(op, "probs", probs);
  not_null(op, "row_of", row_of);
  not_null(op, "dprobs", dprobs);
  not_null(op, "dy", dy, h);
  not_null(op, "e", e, rows * h);
  not_null(op, "de", de, rows * h);
  return Work::some;
}

namespace detail {
inline void check_router_score(const char* op, RouterScore score) {
  const int v = static_cast<int>(score);
  PTDP_CHECK_ARG(v == static_cast<int>(RouterScore::Softmax) ||
                     v == static_cast<int>(RouterScore::Sigmoid),
                 std::string(op) + ": score = " + std::to_string(v) +
                     " is neither softmax (0) nor sigmoid (1)");
}

inline void check_router_experts(const char* op, int64_t tokens, int64_t experts) {
  nonneg(op, "tokens", tokens);
  positive(op, "experts", experts);
  PTDP_CHECK_ARG(experts <= kMaxExperts, std::string(op) + ": experts = " +
                                             std::to_string(experts) + " exceeds " +
                                             std::to_string(kMaxExperts));
}

inline void check_router_desc(const char* op, const RouterDesc& d) {
  const std::string o(op);
  check_router_experts(op, d.tokens, d.experts);
  check_router_score(op, d.score);
  PTDP_CHECK_ARG(d.topk >= 1 && d.topk <= d.experts,
                 o + ": topk = " + std::to_string(d.topk) + " must be in [1, experts = " +
                     std::to_string(d.experts) + "]");
  PTDP_CHECK_ARG(!d.pre_softmax || d.score == RouterScore::Softmax,
                 o + ": pre_softmax applies to the softmax score function only");
  PTDP_CHECK_ARG(std::isfinite(d.scaling_factor),
                 o + ": scaling_factor must be finite, got " + std::to_string(d.scaling_factor));
  nonneg(op, "num_groups", d.num_groups);
  nonneg(op, "group_topk", d.group_topk);
  nonneg(op, "group_score_topk", d.group_score_topk);
  if (d.num_groups == 0) {
    PTDP_CHECK_ARG(d.group_topk == 0, o + ": group_topk = " + std::to_string(d.group_topk) +
                                          " needs num_groups > 0");
    PTDP_CHECK_ARG(d.group_score_topk == 0, o + ": group_score_topk = " +
                                                std::to_string(d.group_score_topk) + " needs num_groups > 0");
    return;
  }
  PTDP_CHECK_ARG(d.experts % d.num_groups == 0,
                 o + ": num_groups = " + std::to_string(d.num_groups) +
                     " does not divide experts = " + std::to_string(d.experts));
  PTDP_CHECK_ARG(d.group_topk >= 1 && d.group_topk <= d.num_groups,
                 o + ": group_topk = " + std::to_string(d.group_topk) +
                     " must be in [1, num_groups = " + std::to_string(d.num_groups) + "]");
  if (d.group_score_topk != 0) {
    PTDP_CHECK_ARG(d.group_score_topk <= d.experts / d.num_groups,
                   o + ": group_score_topk = " + std::to_string(d.group_score_topk) +
                       " exceeds the experts per group, " + std::to_string(d.experts / d.num_groups));
    PTDP_CHECK_ARG(d.group_topk * (d.experts / d.num_groups) >= d.topk,
                   o + ": group_topk = " + std::to_string(d.group_topk) + " groups of " +
                       std::to_string(d.experts / d.num_groups) + " experts hold fewer than topk = " +
                       std::to_string(d.topk));
    return;
  }
  PTDP_CHECK_ARG(d.topk % d.group_topk == 0,
                 o + ": group_topk = " + std::to_string(d.group_topk) +
                     " does not divide topk = " + std::to_string(d.topk));
  PTDP_CHECK_ARG(d.topk / d.group_topk <= d.experts / d.num_groups,
                 o + ": topk / group_topk = " + std::to_string(d.topk / d.group_topk) +
                     " exceeds the experts per group, " +
                     std::to_string(d.experts / d.num_groups));
}
}  // namespace detail

inline Work check_moe_router_forward(const RouterDesc& d, const float* logits,
                                     const float* expert_bias, const int32_t* indices,
                                     const float* probs) {
  const char* op = "moe_router_forward";
  detail::check_router_desc(op, d);
  PTDP_CHECK_ARG(expert_bias == nullptr || d.score == RouterScore::Sigmoid,
                 "moe_router_forward: expert_bias needs the sigmoid score function");
  if (d.tokens == 0) return Work::none;
  not_null(op, "logits", logits);
  not_null(op, "indices", indices);
  not_null(op, "probs", probs);
  return Work::some;
}

inline Work check_moe_router_backward(const RouterDesc& d, const float* logits,
                                      const int32_t* indices, const float* dprobs,
                                      const float* dlogits) {
  const char* op = "moe_router_backward";
  detail::check_router_desc(op, d);
  if (d.tokens == 0) return Work::none;
  not_null(op, "logits", logits);
  not_null(op, "indices", indices);
  not_null(op, "dprobs", dprobs);
  not_null(op, "dlogits", dlogits);
  return Work::some;
}

/// `op` is moe_aux_scores_forward (in = logits, out = scores) or moe_aux_scores_backward (in =
/// logits, grad = dscores, out = dlogits).
inline Work check_moe_aux_scores(const char* op, RouterScore score, const float* logits,
                                 const float* grad, const float* out, int64_t tokens,
                                 int64_t experts, bool backward) {
  detail::check_router_score(op, score);
  detail::check_router_experts(op, tokens, experts);
  if (tokens == 0) return Work::none;
  not_null(op, "logits", logits);
  if (backward) not_null(op, "dscores", grad);
  not_null(op, backward ? "dlogits" : "scores", out);
  return Work::some;
}

inline Work check_moe_router_lse(const float* logits, int64_t tokens, int64_t experts,
                                 const float* lse) {
  const char* op = "moe_router_lse";
  detail::check_router_experts(op, tokens, experts);
  if (tokens == 0) return Work::none;
  not_null(op, "logits", logits);
  not_null(op, "lse", lse);
  return Work::some;
}

inline Work check_moe_router_z_loss_backward(const float* logits, const float* lse, float scale,
                                             int64_t tokens, int64_t experts,
                                             const float* dlogits) {
  const char* op = "moe_router_z_loss_backward";
  detail::check_router_experts(op, tokens, experts);
  PTDP_CHECK_ARG(std::isfinite(scale),
                 "moe_router_z_loss_backward: scale must be finite, got " + std::to_string(scale));
  if (tokens == 0) return Work::none;
  not_null(op, "logits", logits);
  not_null(op, "lse", lse);
  not_null(op, "dlogits", dlogits);
  return Work::some;
}

// ---- optimizer steps -----------------------------------------------------------------------

inline void check_adamw_step(const float* param, const float* grad, const float* m,
                             const float* v, int64_t n, const AdamWParams& p) {
  nonneg("adamw_step", "n", n);
  not_null("adamw_step", "param", param, n);
  not_null("adamw_step", "grad", grad, n);
  not_null("adamw_step", "m", m, n);
  not_null("adamw_step", "v", v, n);
  PTDP_CHECK_ARG(p.step >= 1, "adamw_step: step counts from 1, got " + std::to_string(p.step));
  PTDP_CHECK_ARG(p.beta1 >= 0.0f && p.beta1 < 1.0f,
                 "adamw_step: beta1 must be in [0, 1), got " + std::to_string(p.beta1));
  PTDP_CHECK_ARG(p.beta2 >= 0.0f && p.beta2 < 1.0f,
                 "adamw_step: beta2 must be in [0, 1), got " + std::to_string(p.beta2));
  PTDP_CHECK_ARG(p.eps > 0.0f, "adamw_step: eps must be > 0, got " + std::to_string(p.eps));
  PTDP_CHECK_ARG(std::isfinite(p.grad_scale) && p.grad_scale > 0.0f,
                 "adamw_step: grad_scale must be finite and > 0, got " + std::to_string(p.grad_scale));
}

/// The per-step scalars of an AdamW update, bias corrections in double:
///   param = param * decay - step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps).
struct AdamWScalars {
  float step_size;     // lr / (1 - beta1^step)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^step)
  float decay;         // 1 - lr * weight_decay
};

inline AdamWScalars adamw_scalars(const AdamWParams& p) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
  AdamWScalars s{};
  s.step_size = static_cast<float>(p.lr / bc1);
  s.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  s.decay = 1.0f - p.lr * p.weight_decay;
  return s;
}

inline void check_sgd_step(const float* param, const float* grad, const float* momentum_buf,
                           int64_t n, const SgdParams& p) {
  nonneg("sgd_step", "n", n);
  not_null("sgd_step", "param", param, n);
  not_null("sgd_step", "grad", grad, n);
  PTDP_CHECK_ARG(p.momentum >= 0.0f,
                 "sgd_step: momentum must be >= 0, got " + std::to_string(p.momentum));
  PTDP_CHECK_ARG(!p.nesterov || p.momentum > 0.0f, "sgd_step: nesterov needs momentum > 0");
  PTDP_CHECK_ARG(std::isfinite(p.grad_scale) && p.grad_scale > 0.0f,
                 "sgd_step: grad_scale must be finite and > 0, got " + std::to_string(p.grad_scale));
  if (p.momentum > 0.0f) not_null("sgd_step", "momentum_buf", momentum_buf, n);
}

inline void check_newton_schulz(const float* x, const NewtonSchulzDesc& d) {
  positive("newton_schulz", "rows", d.rows);
  positive("newton_schulz", "cols", d.cols);
  not_null("newton_schulz", "x", x);
  PTDP_CHECK_ARG(d.steps >= 1 && d.steps <= 100,
                 "newton_schulz: steps must be in [1, 100], got " + std::to_string(d.steps));
  PTDP_CHECK_ARG(d.num_sets >= 1 && d.num_sets <= 8,
                 "newton_schulz: num_sets must be in [1, 8], got " + std::to_string(d.num_sets));
  for (int i = 0; i < d.num_sets; ++i) {
    for (int j = 0; j < 3; ++j) {
      PTDP_CHECK_ARG(std::isfinite(d.coefficients[i][j]),
                     "newton_schulz: coefficients[" + std::to_string(i) + "][" + std::to_string(j) +
                         "] must be finite, got " + std::to_string(d.coefficients[i][j]));
    }
  }
  PTDP_CHECK_ARG(std::isfinite(d.eps) && d.eps > 0.0f,
                 "newton_schulz: eps must be finite and > 0, got " + std::to_string(d.eps));
  PTDP_CHECK_ARG(d.precision >= 0 && d.precision <= 2,
                 "newton_schulz: precision must be 0 (fp32), 1 (tf32) or 2 (bf16), got " +
                     std::to_string(d.precision));
  // The BLAS calls take 32-bit dimensions.
  PTDP_CHECK_ARG(d.rows <= INT_MAX && d.cols <= INT_MAX && d.rows * d.cols <= (int64_t{1} << 40),
                 "newton_schulz: rows x cols = " + std::to_string(d.rows) + " x " + std::to_string(d.cols) +
                     " is too large");
}

}  // namespace ptdp::kcheck
