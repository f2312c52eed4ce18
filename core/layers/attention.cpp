#include "core/layers/attention.h"

#include <cmath>
#include <limits>

#include "base/error.h"
#include "core/layers/dropout.h"
#include "core/layers/kv_cache.h"
#include "kernels/op_scope.h"

namespace ptdp {

namespace {

// One strided-batched GEMM over the b * a/t (batch, head) pairs: C_j = op(A_j) op(B_j) with
// operand j at A + j * sa (leading dimension lda), and so on.
struct Operand {
  const void* p;
  int64_t ld, stride;
};

void batched(Backend& be, DType type, bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t batch, Operand a,
             Operand b, void* c, int64_t ldc, int64_t sc, float beta = 0.0f) {
  GemmDesc g;
  g.beta = beta;
  g.a_type = g.b_type = g.c_type = type;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.lda = a.ld;
  g.ldb = b.ld;
  g.ldc = ldc;
  g.batch = batch;
  g.stride_a = a.stride;
  g.stride_b = b.stride;
  g.stride_c = sc;
  be.gemm(g, a.p, b.p, c);
}

}  // namespace

SelfAttention::SelfAttention(ParamTable& params, const std::string& prefix, const LayerConfig& cfg, int layer,
                             TensorParallel tp)
    : cfg_(cfg),
      layer_(layer),
      tp_(tp),
      heads_local_(cfg.num_attention_heads / tp.size),
      groups_local_(cfg.query_groups() / tp.size),
      q_per_group_(cfg.queries_per_group()),
      dh_(cfg.head_dim()),
      qkv_(params, prefix + ".linear_qkv", cfg.hidden_size, cfg.qkv_rows(), cfg.qkv_bias(), false, cfg.init_method_std,
           tp),
      proj_(params, prefix + ".linear_proj", cfg.attention_width(), cfg.hidden_size, cfg.add_bias_linear,
            cfg.init_method_std / std::sqrt(2.0f * static_cast<float>(cfg.num_layers)), tp, true),
      slots_(prefix) {
  qkv_.set_profile_label("qkv");
  proj_.set_profile_label("proj");
  if (cfg.qk_layernorm) {
    q_norm_ = std::make_unique<Norm>(params, prefix + ".q_layernorm", cfg.normalization, dh_, cfg.layernorm_epsilon, tp);
    k_norm_ = std::make_unique<Norm>(params, prefix + ".k_layernorm", cfg.normalization, dh_, cfg.layernorm_epsilon, tp);
  }
}

DropoutDesc SelfAttention::probs_dropout(int64_t b, const Step& step) const {
  const int64_t s = cfg_.seq_length;
  DropoutDesc d;
  d.p = cfg_.attention_dropout;
  d.rng = PhiloxStream{cfg_.seed, dropout_stream(step, layer_, DropoutSite::AttentionProbs)};
  // This rank's query heads inside the global [b, a, s*s] probabilities: the serial run's mask
  // (the rank's whole groups hold the consecutive query heads [rank * a/t, (rank + 1) * a/t)).
  d.block.shape[0] = d.block.global_shape[0] = b;
  d.block.shape[1] = heads_local_;
  d.block.global_shape[1] = cfg_.num_attention_heads;
  d.block.shape[2] = d.block.global_shape[2] = s * s;
  d.block.offset[1] = tp_.rank * heads_local_;
  return d;
}

AttentionDesc SelfAttention::fused_desc(int64_t b, const Step& step, const int32_t* document_starts) const {
  AttentionDesc d;
  d.s = cfg_.seq_length;
  d.b = b;
  d.heads = heads_local_;
  d.groups = groups_local_;
  d.dh = dh_;
  d.scale = 1.0f / std::sqrt(static_cast<float>(dh_));
  if (step.training && cfg_.attention_dropout > 0.0f) d.dropout = probs_dropout(b, step);
  d.document_starts = document_starts;
  return d;
}

RopeDesc SelfAttention::rope_desc(int64_t b, const Tensor& like, const int32_t* positions) {
  return rope_desc(cfg_.seq_length, b, like, positions);
}

RopeDesc SelfAttention::rope_desc(int64_t s, int64_t b, const Tensor& like, const int32_t* positions) {
  if (!inv_freq_.defined() || !(inv_freq_.device() == like.device())) {
    const std::vector<float> inv = cfg_.rotary_inv_freq();
    inv_freq_ = Tensor::from_host(inv.data(), {static_cast<int64_t>(inv.size())}, DType::F32, like.device());
  }
  RopeDesc d;
  d.s = s;
  d.b = b;
  d.groups = groups_local_;
  d.q_per_group = q_per_group_;
  d.dh = dh_;
  d.rot_dim = cfg_.rotary_dim();
  d.inv_freq = inv_freq_.data<float>();
  d.positions = positions;
  return d;
}

Tensor SelfAttention::heads_of(const Tensor& qkv, int part) const {
  const int64_t rows = qkv.numel() / ((q_per_group_ + 2) * dh_);  // s * b * g/t
  const int64_t width = part == 0 ? q_per_group_ * dh_ : dh_;
  Tensor packed = empty_like(qkv, {rows * width / dh_, dh_});
  qkv.backend().copy_2d(packed.raw(), width, element_ptr(qkv, part == 0 ? 0 : q_per_group_ * dh_),
                        (q_per_group_ + 2) * dh_, qkv.dtype(), rows, width);
  return packed;
}

void SelfAttention::set_heads(const Tensor& qkv, int part, const Tensor& packed) const {
  const int64_t rows = qkv.numel() / ((q_per_group_ + 2) * dh_);
  const int64_t width = part == 0 ? q_per_group_ * dh_ : dh_;
  qkv.backend().copy_2d(element_ptr(qkv, part == 0 ? 0 : q_per_group_ * dh_), (q_per_group_ + 2) * dh_, packed.raw(),
                        width, qkv.dtype(), rows, width);
}

bool SelfAttention::fused(const Backend& be) const {
  switch (cfg_.attention) {
    case AttentionImpl::Unfused: return false;
    case AttentionImpl::Fused:
      if (!be.fused_attention_supported(cfg_.precision, dh_)) {
        throw_error(ErrorCode::Unsupported,
                    str_cat("attention = fused: the ", be.name(), " backend has no fused attention for ",
                            dtype_name(cfg_.precision), " with head dim ", dh_, " (use auto or unfused)"));
      }
      return true;
    case AttentionImpl::Auto:
      // The fused kernel wherever the backend has one for the precision and head dim: on the
      // CPU its tile GEMMs beat the unfused path's (bench_kernels' attn/ rows), and it never
      // stores the s x s probabilities.
      return be.fused_attention_supported(cfg_.precision, dh_);
  }
  return false;
}

// The unfused path's GEMMs run once per query head j of a group, each batched over the b * g/t
// (sample, group) pairs: in the [s, b, g/t, a/g + 2, dh] projection the pairs are equally
// spaced, and probabilities [b, a/t, s, s] and context [s, b, a/t, dh] of query head j of every
// pair are too (query head g * a/g + j). For a/g = 1 these are the multi-head GEMMs.
void SelfAttention::attention_probs(const Tensor& qkv, int64_t b, const Step& step, const int32_t* document_starts,
                                    Tensor& probs, Tensor& dropped) const {
  const int64_t s = cfg_.seq_length, al = heads_local_, dh = dh_, qg = q_per_group_;
  const int64_t pairs = b * groups_local_, group = (qg + 2) * dh;
  const int64_t row = pairs * group;  // distance between consecutive sequence positions
  const DType t = qkv.dtype();
  probs = empty_like(qkv, {b * al, s, s});
  Backend& be = qkv.backend();
  // scores_(pair, j) = Q_(pair, j) K_pair^T
  for (int64_t j = 0; j < qg; ++j) {
    const OpScope scores("attn_scores");
    batched(be, t, false, true, s, s, dh, pairs, {element_ptr(qkv, j * dh), row, group},
            {element_ptr(qkv, qg * dh), row, group}, element_ptr(probs, j * s * s), s, qg * s * s);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  if (document_starts != nullptr) {
    // Entry bi * a/t + h of the probabilities is sample bi's: a/t entries per sample.
    be.softmax_forward_documents(probs.raw(), probs.raw(), t, b * al, al, s, scale, document_starts);
  } else {
    be.softmax_forward(probs.raw(), probs.raw(), t, b * al, s, s, scale, true);
  }
  dropped = probs;
  if (step.training && cfg_.attention_dropout > 0.0f) {
    dropped = empty_like(probs, probs.shape());
    be.dropout_forward(probs.raw(), dropped.raw(), t, probs_dropout(b, step));
  }
}

Tensor SelfAttention::forward(const Tensor& x, const Step& step) {
  const int64_t s = cfg_.seq_length, al = heads_local_, dh = dh_, qg = q_per_group_;
  const ContextParallel& cp = tp_.cp;
  const int64_t sl = s / cp.size, cols = groups_local_ * (qg + 2) * dh;  // this context rank's positions
  Tensor qkv = qkv_.forward(x, step);  // [sl*b, (a + 2g)/t * dh]
  const int64_t b = step.kv_cache ? 1 : rows_of(qkv, cols, "qkv") / sl;
  Backend& be = x.backend();
  if (q_norm_) {
    set_heads(qkv, 0, q_norm_->forward(heads_of(qkv, 0), step));
    set_heads(qkv, 1, k_norm_->forward(heads_of(qkv, 1), step));
  }
  if (step.kv_cache) return forward_cached(qkv, step);
  const TokenPositions where = step.positions ? *step.positions : TokenPositions{};
  if (cfg_.rope()) be.rope_forward(qkv.raw(), qkv.dtype(), rope_desc(sl, b, qkv, where.position_data()));
  // Context parallelism: ring attention over this rank's two query chunks (either path, where
  // the backend has the block kernels); without them the whole sequence's queries, keys and
  // values are all-gathered and every context rank computes the whole sequence's attention,
  // keeping its own rows of the context.
  if (ring(be)) {
    Slot& slot = slots_.create(step.microbatch);
    slot.positions = where;
    return proj_.forward(ring_forward(qkv, b, step, where.document_data(), slot), step);
  }
  if (cp.size > 1) qkv = gather_context(cp, qkv, cols);
  Tensor ctx = empty_like(qkv, {s * b, al * dh});
  Slot& slot = slots_.create(step.microbatch);
  slot.qkv = qkv;
  slot.positions = where;
  if (fused(be)) {
    slot.lse = Tensor::empty({b * al * s}, DType::F32, x.device());
    be.attention_forward(fused_desc(b, step, where.document_data()), qkv.raw(), ctx.raw(), slot.lse.data<float>(),
                         qkv.dtype());
    slot.ctx = ctx;
    return proj_.forward(context_rows(cp, ctx, al * dh), step);
  }
  Tensor probs, dropped;
  attention_probs(qkv, b, step, where.document_data(), probs, dropped);
  // ctx_(pair, j) = P_(pair, j) V_pair, written into [s, b, a/t, dh]
  const int64_t pairs = b * groups_local_, group = (qg + 2) * dh;
  for (int64_t j = 0; j < qg; ++j) {
    const OpScope context("attn_context");
    batched(be, qkv.dtype(), false, false, s, dh, s, pairs, {element_ptr(dropped, j * s * s), s, qg * s * s},
            {element_ptr(qkv, (qg + 1) * dh), pairs * group, group}, element_ptr(ctx, j * dh), b * al * dh, qg * dh);
  }
  if (cfg_.recompute != Recompute::Selective) {
    slot.probs = probs;
    slot.probs_dropped = dropped;
  }
  return proj_.forward(context_rows(cp, ctx, al * dh), step);
}

Tensor SelfAttention::forward_cached(const Tensor& qkv, const Step& step) {
  KvCache& cache = *step.kv_cache;
  const int64_t al = heads_local_, gl = groups_local_, dh = dh_, qg = q_per_group_, group = (qg + 2) * dh;
  const int64_t n = rows_of(qkv, gl * group, "qkv"), start = cache.length, sk = start + n;
  PTDP_CHECK_ARG(sk <= cache.capacity, "key/value cache: " + std::to_string(start) + " cached + " + std::to_string(n) +
                                           " new tokens exceed its capacity " + std::to_string(cache.capacity));
  Backend& be = qkv.backend();
  if (cfg_.rope()) {
    RopeDesc r = rope_desc(1, qkv, nullptr);
    r.s = n;
    r.position_offset = start;
    be.rope_forward(qkv.raw(), qkv.dtype(), r);
  }
  Tensor& kv = cache.layers[layer_];  // [capacity, g/t, 2, dh]
  if (!kv.defined()) kv = empty_like(qkv, {cache.capacity, gl * 2 * dh});
  // Each new token's group keys and values (adjacent in qkv) go to its position's row.
  be.copy_2d(element_ptr(kv, start * gl * 2 * dh), 2 * dh, element_ptr(qkv, qg * dh), group, qkv.dtype(), n * gl, 2 * dh);
  // Per query head j of the groups, batched over the g/t groups: scores [a/t, n, sk] (query head
  // g * a/g + j), causal over positions start + i, then the context [n, a/t, dh].
  const DType t = qkv.dtype();
  Tensor probs = empty_like(qkv, {al, n, sk});
  for (int64_t j = 0; j < qg; ++j) {
    batched(be, t, false, true, n, sk, dh, gl, {element_ptr(qkv, j * dh), gl * group, group}, {kv.raw(), gl * 2 * dh, 2 * dh},
            element_ptr(probs, j * n * sk), sk, qg * n * sk);
  }
  be.softmax_forward(probs.raw(), probs.raw(), t, al, n, sk, 1.0f / std::sqrt(static_cast<float>(dh)), true);
  Tensor ctx = empty_like(qkv, {n, al * dh});
  for (int64_t j = 0; j < qg; ++j) {
    batched(be, t, false, false, n, dh, sk, gl, {element_ptr(probs, j * n * sk), sk, qg * n * sk},
            {element_ptr(kv, dh), gl * 2 * dh, 2 * dh}, element_ptr(ctx, j * dh), al * dh, qg * dh);
  }
  return proj_.forward(ctx, step);
}

Tensor SelfAttention::backward_input(const Tensor& dy, const Step& step) {
  Slot& slot = slots_.get(step.microbatch);
  const int64_t s = cfg_.seq_length, al = heads_local_, dh = dh_, qg = q_per_group_;
  const Tensor& qkv = slot.qkv;
  const TokenPositions where = slot.positions;  // the forward's, kept past the slot's release
  const DType t = qkv.dtype();
  const int64_t pairs = rows_of(qkv, groups_local_ * (qg + 2) * dh, "qkv") / s * groups_local_;
  const int64_t b = pairs / groups_local_, group = (qg + 2) * dh;
  Backend& be = dy.backend();
  if (slot.ring) {  // context parallelism: ring attention
    const int64_t bl = rows_of(qkv, groups_local_ * (qg + 2) * dh, "qkv") / (s / tp_.cp.size);
    Tensor dqkv = ring_backward(slot, proj_.backward_input(dy, step), bl, step, where.document_data());
    slots_.release(step.microbatch);
    if (cfg_.rope()) be.rope_backward(dqkv.raw(), t, rope_desc(s / tp_.cp.size, bl, dqkv, where.position_data()));
    if (q_norm_) {
      set_heads(dqkv, 0, q_norm_->backward_input(heads_of(dqkv, 0), step));
      set_heads(dqkv, 1, k_norm_->backward_input(heads_of(dqkv, 1), step));
    }
    return qkv_.backward_input(dqkv, step);
  }
  // [s, b, a/t, dh]; under context parallelism every rank's rows, for the whole sequence's
  // backward (each context rank computes it whole and keeps its rows of dqkv).
  Tensor dctx = gather_context(tp_.cp, proj_.backward_input(dy, step), al * dh);
  Tensor dqkv = empty_like(qkv, qkv.shape());
  if (slot.lse.defined()) {  // fused
    Tensor delta = Tensor::empty({b * al * s}, DType::F32, dy.device());
    be.attention_backward(fused_desc(b, step, where.document_data()), qkv.raw(), slot.ctx.raw(),
                          slot.lse.data<float>(), dctx.raw(), dqkv.raw(), delta.data<float>(), t);
  } else {
    if (!slot.probs.defined()) {  // selective recomputation
      const PhaseScope recompute(Phase::Recompute);
      attention_probs(qkv, b, step, where.document_data(), slot.probs, slot.probs_dropped);
    }
    const int64_t row3 = pairs * group, row1 = b * al * dh;
    Tensor dprobs = empty_like(qkv, {b * al, s, s});
    const Operand v{element_ptr(qkv, (qg + 1) * dh), row3, group};
    for (int64_t j = 0; j < qg; ++j) {
      const Operand dctx_j{element_ptr(dctx, j * dh), row1, qg * dh};
      // dP_j = dctx_j V^T;  dV = sum_j P_j^T dctx_j (the group's query heads in order; with
      // 16-bit storage each partial sum is rounded, where the fused kernels sum in fp32)
      const OpScope context("attn_context");
      batched(be, t, false, true, s, s, dh, pairs, dctx_j, v, element_ptr(dprobs, j * s * s), s, qg * s * s);
      batched(be, t, true, false, s, dh, s, pairs, {element_ptr(slot.probs_dropped, j * s * s), s, qg * s * s}, dctx_j,
              element_ptr(dqkv, (qg + 1) * dh), row3, group, j == 0 ? 0.0f : 1.0f);
    }
    if (step.training && cfg_.attention_dropout > 0.0f) {
      be.dropout_backward(dprobs.raw(), dprobs.raw(), t, probs_dropout(b, step));
    }
    // dS = softmax backward (the scale is applied inside).
    be.softmax_backward(slot.probs.raw(), dprobs.raw(), dprobs.raw(), t, b * al, s, s,
                        1.0f / std::sqrt(static_cast<float>(dh)));
    const Operand k{element_ptr(qkv, qg * dh), row3, group};
    for (int64_t j = 0; j < qg; ++j) {
      // dQ_j = dS_j K;  dK = sum_j dS_j^T Q_j
      const OpScope scores("attn_scores");
      batched(be, t, false, false, s, dh, s, pairs, {element_ptr(dprobs, j * s * s), s, qg * s * s}, k,
              element_ptr(dqkv, j * dh), row3, group);
      batched(be, t, true, false, s, dh, s, pairs, {element_ptr(dprobs, j * s * s), s, qg * s * s},
              {element_ptr(qkv, j * dh), row3, group}, element_ptr(dqkv, qg * dh), row3, group, j == 0 ? 0.0f : 1.0f);
    }
  }
  slots_.release(step.microbatch);
  dqkv = context_rows(tp_.cp, dqkv, group * groups_local_);
  if (cfg_.rope()) be.rope_backward(dqkv.raw(), t, rope_desc(s / tp_.cp.size, b, dqkv, where.position_data()));
  if (q_norm_) {
    set_heads(dqkv, 0, q_norm_->backward_input(heads_of(dqkv, 0), step));
    set_heads(dqkv, 1, k_norm_->backward_input(heads_of(dqkv, 1), step));
  }
  return qkv_.backward_input(dqkv, step);
}

AttentionBlockDesc SelfAttention::block_desc(int64_t b, const Step& step, const int32_t* document_starts,
                                             int64_t query_chunk, int64_t key_chunk) const {
  const int64_t s = cfg_.seq_length, half = s / (2 * tp_.cp.size);
  AttentionBlockDesc d;
  d.sq = d.sk = half;
  d.b = b;
  d.heads = heads_local_;
  d.groups = groups_local_;
  d.dh = dh_;
  d.scale = 1.0f / std::sqrt(static_cast<float>(dh_));
  d.q_start = query_chunk * half;
  d.k_start = key_chunk * half;
  d.seq = s;
  d.document_starts = document_starts;
  // The whole sequence's mask (probs_dropout's [b, a/t, s * s] block): the serial run's.
  if (step.training && cfg_.attention_dropout > 0.0f) d.dropout = probs_dropout(b, step);
  return d;
}

bool SelfAttention::ring(const Backend& be) const {
  return tp_.cp.size > 1 && be.attention_block_supported(cfg_.precision, dh_);
}

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

}  // namespace

// This rank's keys and values [s/c * b, g/t * 2 dh] (each group's key head, then its value head;
// chunk r's rows, then chunk 2c - 1 - r's), copied out of qkv.
Tensor SelfAttention::own_kv(const Tensor& qkv) const {
  const int64_t dh = dh_, qg = q_per_group_, group = (qg + 2) * dh;
  const int64_t units = rows_of(qkv, groups_local_ * group, "qkv") * groups_local_;
  Tensor kv = empty_like(qkv, {units / groups_local_, groups_local_ * 2 * dh});
  qkv.backend().copy_2d(kv.raw(), 2 * dh, element_ptr(qkv, qg * dh), group, qkv.dtype(), units, 2 * dh);
  return kv;
}

Tensor SelfAttention::ring_forward(const Tensor& qkv, int64_t b, const Step& step, const int32_t* document_starts,
                                   Slot& slot) {
  const ContextParallel& cp = tp_.cp;
  const int64_t s = cfg_.seq_length, half = s / (2 * cp.size), al = heads_local_, dh = dh_, qg = q_per_group_;
  const int64_t row = b * groups_local_ * (qg + 2) * dh;  // qkv's elements per position
  const int64_t kv_block = half * b * groups_local_ * 2 * dh, out_block = half * b * al * dh, lse_block = b * al * half;
  const DType t = qkv.dtype();
  Backend& be = qkv.backend();
  const Tensor kv = own_kv(qkv);
  // The running context (fp32) and log-sum-exps of this rank's two query chunks.
  Tensor out = Tensor::zeros({2 * half * b, al * dh}, DType::F32, qkv.device());
  Tensor lse = Tensor::empty({2 * lse_block}, DType::F32, qkv.device());
  be.fill(lse.raw(), DType::F32, -std::numeric_limits<double>::infinity(), lse.numel());
  {
    // Around the ring: at step i this rank holds the keys and values of context rank r - i and
    // passes them on to r + 1 while its block pairs run (two blocks alive: this step's and the
    // one in flight).
    const std::shared_ptr<void> progress = cp.comm->background_progress();
    Tensor current = kv;
    for (int i = 0; i < cp.size; ++i) {
      Tensor next;
      WorkPtr work;
      if (i + 1 < cp.size) {
        next = empty_like(kv, kv.shape());
        work = cp.comm->batch_p2p({P2POp{P2POp::Kind::Send, current, (cp.rank + 1) % cp.size, 0},
                                   P2POp{P2POp::Kind::Recv, next, (cp.rank - 1 + cp.size) % cp.size, 0}});
      }
      for_each_block_pair(cp, (cp.rank - i + cp.size) % cp.size, [&](int piece, int kp, int64_t qc, int64_t kc) {
        be.attention_block_forward(block_desc(b, step, document_starts, qc, kc), element_ptr(qkv, piece * half * row),
                                   element_ptr(current, kp * kv_block), out.data<float>() + piece * out_block,
                                   lse.data<float>() + piece * lse_block, t);
      });
      if (work) {
        work->wait();
        current = next;
      }
    }
  }
  Tensor ctx = empty_like(qkv, {2 * half * b, al * dh});
  be.cast(out.raw(), DType::F32, ctx.raw(), t, out.numel());
  slot.qkv = qkv;
  slot.ctx = ctx;
  slot.lse = lse;
  slot.ring = true;
  return ctx;
}

Tensor SelfAttention::ring_backward(Slot& slot, const Tensor& dctx, int64_t b, const Step& step,
                                    const int32_t* document_starts) {
  const ContextParallel& cp = tp_.cp;
  const int64_t s = cfg_.seq_length, half = s / (2 * cp.size), al = heads_local_, dh = dh_, qg = q_per_group_;
  const int64_t group = (qg + 2) * dh, row = b * groups_local_ * group, pairs = b * groups_local_;
  const int64_t kv_cols = groups_local_ * 2 * dh, kv_block = half * b * kv_cols, out_block = half * b * al * dh;
  const int64_t lse_block = b * al * half;
  const Tensor& qkv = slot.qkv;
  const DType t = qkv.dtype();
  Backend& be = qkv.backend();
  const Tensor kv = own_kv(qkv);
  Tensor dq = Tensor::zeros({2 * half * b, al * dh}, DType::F32, qkv.device());
  // The keys and values go around the ring again (tag 0); each step's key and value gradients
  // of the block's owner (fp32) follow them one step behind (tag 1): at step i this rank adds
  // its queries' share for owner o = r - i to the sum received from r - 1 (the transfer overlapped
  // this step's block pairs) and passes it on to r + 1; after the last step the sum of every
  // rank's share of this rank's keys and values arrives from r - 1.
  Tensor incoming, sending;
  WorkPtr dkv_work;
  {
    const std::shared_ptr<void> progress = cp.comm->background_progress();
    Tensor current = kv;
    const int up = (cp.rank + 1) % cp.size, down = (cp.rank - 1 + cp.size) % cp.size;
    for (int i = 0; i < cp.size; ++i) {
      Tensor next;
      WorkPtr kv_work;
      if (i + 1 < cp.size) {
        next = empty_like(kv, kv.shape());
        kv_work = cp.comm->batch_p2p(
            {P2POp{P2POp::Kind::Send, current, up, 0}, P2POp{P2POp::Kind::Recv, next, down, 0}});
      }
      Tensor part = Tensor::zeros({2 * half * b, kv_cols}, DType::F32, qkv.device());
      for_each_block_pair(cp, (cp.rank - i + cp.size) % cp.size, [&](int piece, int kp, int64_t qc, int64_t kc) {
        be.attention_block_backward(block_desc(b, step, document_starts, qc, kc), element_ptr(qkv, piece * half * row),
                                    element_ptr(current, kp * kv_block), element_ptr(slot.ctx, piece * out_block),
                                    slot.lse.data<float>() + piece * lse_block, element_ptr(dctx, piece * out_block),
                                    dq.data<float>() + piece * out_block, part.data<float>() + kp * kv_block, t);
      });
      if (dkv_work) {
        dkv_work->wait();
        be.add(part.raw(), incoming.raw(), part.raw(), DType::F32, part.numel());
      }
      sending = part;
      incoming = empty_like(part, part.shape());
      dkv_work = cp.comm->batch_p2p(
          {P2POp{P2POp::Kind::Send, sending, up, 1}, P2POp{P2POp::Kind::Recv, incoming, down, 1}});
      if (kv_work) {
        kv_work->wait();
        current = next;
      }
    }
    dkv_work->wait();
  }
  // dqkv: the query gradients, then each group's key and value gradients, in the storage type.
  Tensor dqkv = empty_like(qkv, qkv.shape());
  Tensor dq_t = empty_like(qkv, {2 * half * b, al * dh});
  be.cast(dq.raw(), DType::F32, dq_t.raw(), t, dq.numel());
  be.copy_2d(dqkv.raw(), group, dq_t.raw(), qg * dh, t, 2 * half * pairs, qg * dh);
  Tensor dkv_t = empty_like(qkv, {2 * half * b, kv_cols});
  be.cast(incoming.raw(), DType::F32, dkv_t.raw(), t, incoming.numel());
  be.copy_2d(element_ptr(dqkv, qg * dh), group, dkv_t.raw(), 2 * dh, t, 2 * half * pairs, 2 * dh);
  return dqkv;
}

void SelfAttention::backward_weight(const Step& step) {
  qkv_.backward_weight(step);
  proj_.backward_weight(step);
}

void SelfAttention::release(const Step& step) {
  qkv_.release(step);
  proj_.release(step);
  if (q_norm_) {
    q_norm_->release(step);
    k_norm_->release(step);
  }
  slots_.release(step.microbatch);
}

}  // namespace ptdp
