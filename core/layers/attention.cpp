#include "core/layers/attention.h"

#include <cmath>

#include "core/layers/dropout.h"
#include "core/layers/kv_cache.h"
#include "kernels/error.h"

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
      // On the CPU the unfused path runs on OpenBLAS GEMMs and is the faster one; the CPU's
      // fused kernel is the reference the GPU kernel is tested against.
      return be.device_type() != DeviceType::CPU && be.fused_attention_supported(cfg_.precision, dh_);
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
  // Context parallelism, first version: the queries, keys and values of the whole sequence are
  // all-gathered over the context group and every context rank computes the whole sequence's
  // attention (the serial run's, masks and dropout included), keeping its own rows of the
  // context. The layers around attention work on s/c positions.
  if (cp.size > 1 && !fused(be) && where.document_data() == nullptr) {
    Slot& slot = slots_.create(step.microbatch);
    slot.positions = where;
    return proj_.forward(forward_context(qkv, b, step, slot), step);
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
  if (slot.kv_full.defined()) {  // context parallelism, local queries
    const int64_t bl = rows_of(qkv, groups_local_ * (qg + 2) * dh, "qkv") / (s / tp_.cp.size);
    Tensor dqkv = backward_context(slot, proj_.backward_input(dy, step), bl, step);
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
      attention_probs(qkv, b, step, where.document_data(), slot.probs, slot.probs_dropped);
    }
    const int64_t row3 = pairs * group, row1 = b * al * dh;
    Tensor dprobs = empty_like(qkv, {b * al, s, s});
    const Operand v{element_ptr(qkv, (qg + 1) * dh), row3, group};
    for (int64_t j = 0; j < qg; ++j) {
      const Operand dctx_j{element_ptr(dctx, j * dh), row1, qg * dh};
      // dP_j = dctx_j V^T;  dV = sum_j P_j^T dctx_j (the group's query heads in order; with
      // 16-bit storage each partial sum is rounded, where the fused kernels sum in fp32)
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

DropoutDesc SelfAttention::piece_dropout(int64_t b, int64_t bi, int64_t q0, int64_t rows, int64_t n,
                                         const Step& step) const {
  const int64_t s = cfg_.seq_length;
  DropoutDesc d;
  d.p = cfg_.attention_dropout;
  d.rng = PhiloxStream{cfg_.seed, dropout_stream(step, layer_, DropoutSite::AttentionProbs)};
  // The serial run's [b, a, s, s] probabilities as [b a, s, s]: this rank's heads of sample bi,
  // query rows [q0, q0 + rows), keys [0, n).
  d.block.shape[0] = heads_local_;
  d.block.shape[1] = rows;
  d.block.shape[2] = n;
  d.block.global_shape[0] = b * cfg_.num_attention_heads;
  d.block.global_shape[1] = s;
  d.block.global_shape[2] = s;
  d.block.offset[0] = bi * cfg_.num_attention_heads + tp_.rank * heads_local_;
  d.block.offset[1] = q0;
  return d;
}

void SelfAttention::context_probs(const Slot& slot, int piece, int64_t b, const Step& step, Tensor& probs,
                                  Tensor& dropped, bool scores_ready) const {
  const ContextParallel& cp = tp_.cp;
  const int64_t s = cfg_.seq_length, half = s / (2 * cp.size), al = heads_local_, dh = dh_, qg = q_per_group_;
  const int64_t pairs = b * groups_local_, group = (qg + 2) * dh, row = pairs * group;
  const int64_t q0 = cp.chunk(piece) * half, n = q0 + half;
  const Tensor& qkv = slot.qkv;
  const DType t = qkv.dtype();
  Backend& be = qkv.backend();
  if (!scores_ready) probs = empty_like(qkv, {b * al, half, n});
  // scores_(pair, j) = Q_(pair, j) [this chunk's rows] K_pair[0, n)^T
  for (int64_t j = 0; j < qg && !scores_ready; ++j) {
    batched(be, t, false, true, half, n, dh, pairs, {element_ptr(qkv, piece * half * row + j * dh), row, group},
            {slot.kv_full.raw(), pairs * 2 * dh, 2 * dh}, element_ptr(probs, j * half * n), n, qg * half * n);
  }
  // Causal by global position: query q0 + i sees keys j <= q0 + i = i + (n - half).
  be.softmax_forward(probs.raw(), probs.raw(), t, b * al, half, n, 1.0f / std::sqrt(static_cast<float>(dh)), true);
  dropped = probs;
  if (step.training && cfg_.attention_dropout > 0.0f) {
    dropped = empty_like(probs, probs.shape());
    for (int64_t bi = 0; bi < b; ++bi) {
      be.dropout_forward(element_ptr(probs, bi * al * half * n), element_ptr(dropped, bi * al * half * n), t,
                         piece_dropout(b, bi, q0, half, n, step));
    }
  }
}

Tensor SelfAttention::forward_context(const Tensor& qkv, int64_t b, const Step& step, Slot& slot) {
  const ContextParallel& cp = tp_.cp;
  const int64_t s = cfg_.seq_length, half = s / (2 * cp.size), al = heads_local_, dh = dh_, qg = q_per_group_;
  const int64_t pairs = b * groups_local_, group = (qg + 2) * dh;
  slot.qkv = qkv;
  Backend& be = qkv.backend();
  const DType t = qkv.dtype();
  const int64_t row = pairs * group, kv_cols = groups_local_ * 2 * dh, block = half * b * kv_cols;
  // This rank's keys and values ([s/c * b * g/t, 2 dh]: each group's key head, then its value
  // head: chunk r's rows, then chunk 2c - 1 - r's).
  Tensor kv = empty_like(qkv, {2 * half * b, kv_cols});
  be.copy_2d(kv.raw(), 2 * dh, element_ptr(qkv, qg * dh), group, t, 2 * half * pairs, 2 * dh);
  // Around the ring: at step i this rank holds the keys and values of context rank r - i and
  // passes them on to r + 1 while it computes their score blocks (the transfer of the next
  // block overlaps this one's products); the blocks are kept, in global order, as the whole
  // sequence's [s * b, g/t * 2 dh] for the products with V and the backward.
  Tensor probs[2];
  for (int piece = 0; piece < 2; ++piece) probs[piece] = empty_like(qkv, {b * al, half, cp.chunk(piece) * half + half});
  slot.kv_full = empty_like(kv, {2 * half * b * cp.size, kv_cols});
  {
    const std::shared_ptr<void> progress = cp.comm->background_progress();
    Tensor current = kv;
    for (int i = 0; i < cp.size; ++i) {
      ContextParallel owner = cp;
      owner.rank = (cp.rank - i + cp.size) % cp.size;
      Tensor next;
      WorkPtr work;
      if (i + 1 < cp.size) {
        next = empty_like(kv, kv.shape());
        work = cp.comm->batch_p2p({P2POp{P2POp::Kind::Send, current, (cp.rank + 1) % cp.size, 0},
                                   P2POp{P2POp::Kind::Recv, next, (cp.rank - 1 + cp.size) % cp.size, 0}});
      }
      for (int kp = 0; kp < 2; ++kp) {
        const int64_t kc = owner.chunk(kp);  // the global chunk of these keys
        be.copy(element_ptr(slot.kv_full, kc * block), element_ptr(current, kp * block),
                static_cast<std::size_t>(block) * dtype_size(t));
        for (int piece = 0; piece < 2; ++piece) {
          const int64_t n = cp.chunk(piece) * half + half;
          if (kc * half >= n) continue;  // keys after every query of the chunk
          // scores_(pair, j) [this chunk's rows, keys of chunk kc] = Q_(pair, j) K_pair^T
          for (int64_t j = 0; j < qg; ++j) {
            batched(be, t, false, true, half, half, dh, pairs, {element_ptr(qkv, piece * half * row + j * dh), row, group},
                    {element_ptr(current, kp * block), pairs * 2 * dh, 2 * dh},
                    element_ptr(probs[piece], j * half * n + kc * half), n, qg * half * n);
          }
        }
      }
      if (work) {
        work->wait();
        current = next;
      }
    }
  }
  Tensor ctx = empty_like(qkv, {2 * half * b, al * dh});
  for (int piece = 0; piece < 2; ++piece) {
    const int64_t n = cp.chunk(piece) * half + half;
    Tensor dropped;
    context_probs(slot, piece, b, step, probs[piece], dropped, true);
    // ctx_(pair, j) [this chunk's rows] = P_(pair, j) V_pair[0, n)
    for (int64_t j = 0; j < qg; ++j) {
      batched(be, qkv.dtype(), false, false, half, dh, n, pairs, {element_ptr(dropped, j * half * n), n, qg * half * n},
              {element_ptr(slot.kv_full, dh), pairs * 2 * dh, 2 * dh},
              element_ptr(ctx, piece * half * b * al * dh + j * dh), b * al * dh, qg * dh);
    }
    if (cfg_.recompute != Recompute::Selective) {
      slot.piece_probs[piece] = probs[piece];
      slot.piece_dropped[piece] = dropped;
    }
  }
  return ctx;
}

Tensor SelfAttention::backward_context(Slot& slot, const Tensor& dctx, int64_t b, const Step& step) {
  const ContextParallel& cp = tp_.cp;
  const int64_t s = cfg_.seq_length, half = s / (2 * cp.size), al = heads_local_, dh = dh_, qg = q_per_group_;
  const int64_t pairs = b * groups_local_, group = (qg + 2) * dh, row = pairs * group, row1 = b * al * dh;
  const int64_t kv_row = pairs * 2 * dh;  // kv_full: [s, b, g/t, 2, dh]
  const Tensor& qkv = slot.qkv;
  const DType t = qkv.dtype();
  Backend& be = qkv.backend();
  Tensor dqkv = empty_like(qkv, qkv.shape());
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  // dS of each local chunk (the probabilities' gradient through dropout and softmax) and dQ.
  Tensor dscores[2];
  for (int piece = 0; piece < 2; ++piece) {
    const int64_t q0 = cp.chunk(piece) * half, n = q0 + half;
    if (!slot.piece_probs[piece].defined()) {  // selective recomputation
      context_probs(slot, piece, b, step, slot.piece_probs[piece], slot.piece_dropped[piece]);
    }
    const Tensor& probs = slot.piece_probs[piece];
    Tensor dprobs = empty_like(qkv, {b * al, half, n});
    const Operand v{element_ptr(slot.kv_full, dh), kv_row, 2 * dh};
    for (int64_t j = 0; j < qg; ++j) {
      // dP_j = dctx_j V[0, n)^T
      batched(be, t, false, true, half, n, dh, pairs, {element_ptr(dctx, piece * half * row1 + j * dh), row1, qg * dh},
              v, element_ptr(dprobs, j * half * n), n, qg * half * n);
    }
    if (step.training && cfg_.attention_dropout > 0.0f) {
      for (int64_t bi = 0; bi < b; ++bi) {
        be.dropout_backward(element_ptr(dprobs, bi * al * half * n), element_ptr(dprobs, bi * al * half * n), t,
                            piece_dropout(b, bi, q0, half, n, step));
      }
    }
    be.softmax_backward(probs.raw(), dprobs.raw(), dprobs.raw(), t, b * al, half, n, scale);
    const Operand k{slot.kv_full.raw(), kv_row, 2 * dh};
    for (int64_t j = 0; j < qg; ++j) {
      // dQ_j [this chunk's rows] = dS_j K[0, n)
      batched(be, t, false, false, half, dh, n, pairs, {element_ptr(dprobs, j * half * n), n, qg * half * n}, k,
              element_ptr(dqkv, piece * half * row + j * dh), row, group);
    }
    dscores[piece] = dprobs;
  }
  // The key and value gradients around the ring (a reduce-scatter): at step i this rank adds its
  // queries' part of the gradients of context rank o = r - 1 - i's keys and values to the sum
  // received from r - 1 (which the products of this step overlap) and passes it on to r + 1; at
  // the last step o = r and the sum, over every rank's queries, is this rank's own.
  const int64_t kv_cols = groups_local_ * 2 * dh, block = half * b * kv_cols;
  Tensor dkv, incoming;
  WorkPtr work;
  const std::shared_ptr<void> progress = cp.comm->background_progress();
  for (int i = 0; i < cp.size; ++i) {
    ContextParallel owner = cp;
    owner.rank = ((cp.rank - 1 - i) % cp.size + cp.size) % cp.size;
    Tensor part = Tensor::zeros({2 * half * b, kv_cols}, t, qkv.device());  // owner's two chunks
    for (int kp = 0; kp < 2; ++kp) {
      const int64_t kc = owner.chunk(kp);
      for (int piece = 0; piece < 2; ++piece) {
        const int64_t n = cp.chunk(piece) * half + half;
        if (kc * half >= n) continue;  // keys after every query of the chunk
        const Tensor& dropped = slot.piece_dropped[piece];
        for (int64_t j = 0; j < qg; ++j) {
          // dV [chunk kc] += P_j[:, chunk kc]^T dctx_j;  dK [chunk kc] += dS_j[:, chunk kc]^T Q_j
          batched(be, t, true, false, half, dh, half, pairs,
                  {element_ptr(dropped, j * half * n + kc * half), n, qg * half * n},
                  {element_ptr(dctx, piece * half * row1 + j * dh), row1, qg * dh},
                  element_ptr(part, kp * block + dh), kv_row, 2 * dh, 1.0f);
          batched(be, t, true, false, half, dh, half, pairs,
                  {element_ptr(dscores[piece], j * half * n + kc * half), n, qg * half * n},
                  {element_ptr(qkv, piece * half * row + j * dh), row, group}, element_ptr(part, kp * block), kv_row,
                  2 * dh, 1.0f);
        }
      }
    }
    if (work) {
      work->wait();
      be.add(part.raw(), incoming.raw(), part.raw(), t, part.numel());
    }
    dkv = part;
    if (i + 1 < cp.size) {
      incoming = empty_like(part, part.shape());
      work = cp.comm->batch_p2p({P2POp{P2POp::Kind::Send, part, (cp.rank + 1) % cp.size, 0},
                                 P2POp{P2POp::Kind::Recv, incoming, (cp.rank - 1 + cp.size) % cp.size, 0}});
    }
  }
  be.copy_2d(element_ptr(dqkv, qg * dh), group, dkv.raw(), 2 * dh, t, 2 * half * pairs, 2 * dh);
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
