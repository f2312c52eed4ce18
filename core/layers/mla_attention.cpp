#include "core/layers/mla_attention.h"

#include <cmath>

#include "base/error.h"
#include "core/layers/kv_cache.h"

namespace ptdp {

// ---- ReplicatedLinear ---------------------------------------------------------------------

ReplicatedLinear::ReplicatedLinear(ParamTable& params, const std::string& prefix, int64_t in, int64_t out,
                                   float init_std, TensorParallel reduce)
    : params_(params), in_(in), out_(out), reduce_(reduce), slots_(prefix) {
  weight_ = params.add(prefix + ".weight", {out, in}, -1, ParamInit::Normal, init_std);
  if (reduce_.size > 1) params.set_tp_reduced_grad(weight_);
}

Tensor ReplicatedLinear::forward(const Tensor& x, const Step& step) {
  const int64_t n = rows_of(x, in_, "replicated linear input");
  Tensor y = empty_like(x, {n, out_});  // [N, out]
  linear_forward(x, params_.weight(weight_), nullptr, y);
  slots_.create(step.microbatch).x = x;
  return y;
}

Tensor ReplicatedLinear::backward_input(const Tensor& dy, const Step& step) {
  Slot& s = slots_.get(step.microbatch);
  const int64_t n = rows_of(s.x, in_, "replicated linear input");
  PTDP_CHECK_ARG(dy.numel() == n * out_, "replicated linear: output gradient " + dy.str() + " does not match [" +
                                             std::to_string(n) + ", " + std::to_string(out_) + "]");
  Tensor dx = empty_like(dy, {n, in_});  // [N, in]
  linear_dgrad(dy, params_.weight(weight_), dx);
  s.dy = dy;
  return dx;
}

void ReplicatedLinear::backward_weight(const Step& step) {
  Slot& s = slots_.get(step.microbatch);
  PTDP_CHECK_ARG(s.dy.defined(), "replicated linear: backward_weight before backward_input");
  const Tensor grad = params_.grad(weight_);  // [out, in] fp32
  if (reduce_.size > 1) {
    // Only this microbatch's contribution of this rank's rows is summed over the group.
    Backend& be = s.dy.backend();
    Tensor dw = Tensor::empty({out_, in_}, DType::F32, s.dy.device());  // [out, in] fp32
    be.fill(dw.raw(), DType::F32, 0.0, dw.numel());
    linear_wgrad(s.dy, s.x, dw, nullptr);
    reduce_.all_reduce(dw);
    be.axpy(1.0f, dw.data<float>(), grad.data<float>(), dw.numel());
  } else {
    linear_wgrad(s.dy, s.x, grad, nullptr);
  }
  slots_.release(step.microbatch);
}

// ---- MlaAttention ---------------------------------------------------------------------------

namespace {

// The tensor group without sequence parallelism: the up projections read the gathered latents.
TensorParallel whole_sequence(TensorParallel tp) {
  tp.sequence_parallel = false;
  return tp;
}

// The core attention's view of MLA: a/t heads of their own key and value (g = a), head dim
// qk_head_dim + qk_pos_emb_head_dim, softmax scale times YaRN's mscale squared.
CoreAttentionSpec mla_spec(const LayerConfig& cfg, int layer, const TensorParallel& tp, const std::string& owner) {
  CoreAttentionSpec s(cfg, layer, tp, owner);
  s.groups = s.heads;
  s.q_per_group = 1;
  s.dh = cfg.mla_qk_dim();
  const float mscale = cfg.yarn_softmax_mscale();
  s.scale_factor = mscale * mscale;
  return s;
}

float output_std(const LayerConfig& cfg) {
  return cfg.init_method_std / std::sqrt(2.0f * static_cast<float>(cfg.num_layers));
}

// Columns [col, col + width) of the [rows, ld] matrix src, as a new [rows, width] tensor.
Tensor columns(const Tensor& src, int64_t col, int64_t width, int64_t ld) {
  const int64_t rows = rows_of(src, ld, "MLA latent");
  Tensor out = empty_like(src, {rows, width});  // [rows, width]
  src.backend().copy_2d(out.raw(), width, element_ptr(src, col), ld, src.dtype(), rows, width);
  return out;
}

}  // namespace

MlaAttention::MlaAttention(ParamTable& params, const std::string& prefix, const LayerConfig& cfg, int layer,
                           TensorParallel tp, Device device)
    : params_(params),
      cfg_(cfg),
      tp_(tp),
      heads_(cfg.num_attention_heads / tp.size),
      dn_(cfg.qk_head_dim),
      dr_(cfg.qk_pos_emb_head_dim),
      dv_(cfg.v_head_dim),
      dq_(cfg.mla_qk_dim()),
      r_(cfg.kv_lora_rank),
      rq_(cfg.q_lora_rank),
      spec_(mla_spec(cfg, layer, tp, prefix)),
      q_down_(rq_ > 0 ? std::make_unique<ReplicatedLinear>(params, prefix + ".linear_q_down_proj", cfg.hidden_size,
                                                           rq_, cfg.init_method_std, sequence_norm_group(tp))
                      : nullptr),
      q_norm_(rq_ > 0 && cfg.qk_layernorm ? std::make_unique<Norm>(params, prefix + ".q_layernorm", cfg.normalization,
                                                                   rq_, cfg.layernorm_epsilon)
                                          : nullptr),
      q_up_(rq_ > 0 ? std::make_unique<ColumnParallelLinear>(params, prefix + ".linear_q_up_proj", rq_,
                                                             cfg.num_attention_heads * dq_, false, false,
                                                             cfg.init_method_std, whole_sequence(tp))
                    : nullptr),
      q_proj_(rq_ > 0 ? nullptr
                      : std::make_unique<ColumnParallelLinear>(params, prefix + ".linear_q_proj", cfg.hidden_size,
                                                               cfg.num_attention_heads * dq_, false, false,
                                                               cfg.init_method_std, tp)),
      kv_down_(params, prefix + ".linear_kv_down_proj", cfg.hidden_size, r_ + dr_, cfg.init_method_std,
               sequence_norm_group(tp)),
      kv_norm_(cfg.qk_layernorm ? std::make_unique<Norm>(params, prefix + ".kv_layernorm", cfg.normalization, r_,
                                                         cfg.layernorm_epsilon)
                                : nullptr),
      kv_up_(params, prefix + ".linear_kv_up_proj", r_, cfg.num_attention_heads * (dn_ + dv_), false, false,
             cfg.init_method_std, whole_sequence(tp)),
      proj_(params, prefix + ".linear_proj", cfg.attention_width(), cfg.hidden_size, cfg.add_bias_linear,
            output_std(cfg), tp, true),
      core_(make_core_attention(spec_, attention_kernels(backend_for(device), cfg.precision, spec_.dh))),
      cached_(spec_),
      slots_(prefix) {
  if (q_up_) q_up_->set_profile_label("q_up");
  if (q_proj_) q_proj_->set_profile_label("q_proj");
  kv_up_.set_profile_label("kv_up");
  proj_.set_profile_label("proj");
}

void MlaAttention::project(const Tensor& x, const Step& step, Tensor& q, Tensor& kv, Tensor& ckv, Tensor& c) {
  // Under sequence parallelism x is this rank's rows: the down projections run on them and the
  // latents are gathered (the up projections need every row; the latents are far narrower than h).
  const bool sharded = tp_.sequence_sharded(step.decoding);
  if (q_proj_) {
    q = q_proj_->forward(x, step);  // [N, a/t*(dn+dr)]
  } else {
    Tensor cq = q_down_->forward(x, step);                 // [N, r_q] ([N/t, r_q])
    if (sharded) cq = gather_sequence(tp_, cq, rq_);       // [N, r_q]
    if (q_norm_) cq = q_norm_->forward(cq, step);          // [N, r_q]
    q = q_up_->forward(cq, step);                          // [N, a/t*(dn+dr)]
  }
  ckv = kv_down_.forward(x, step);                        // [N, r+dr] ([N/t, r+dr])
  if (sharded) ckv = gather_sequence(tp_, ckv, r_ + dr_);  // [N, r+dr]
  c = columns(ckv, 0, r_, r_ + dr_);                       // [N, r]
  if (kv_norm_) c = kv_norm_->forward(c, step);
  kv = kv_up_.forward(c, step);                            // [N, a/t*(dn+dv)]
}

void MlaAttention::write_keys_values(const Tensor& dst, int64_t unit, int64_t key, const Tensor& kv, const Tensor& kpe,
                                     int64_t kpe_col, int64_t kpe_ld, int64_t m) const {
  Backend& be = dst.backend();
  const DType t = dst.dtype();
  const int64_t units = m * heads_, kv_head = dn_ + dv_;
  // Every head's key starts with the one shared RoPE key of its token.
  for (int64_t j = 0; j < heads_; ++j) {
    be.copy_2d(element_ptr(dst, j * unit + key), heads_ * unit, element_ptr(kpe, kpe_col), kpe_ld, t, m, dr_);
  }
  be.copy_2d(element_ptr(dst, key + dr_), unit, kv.raw(), kv_head, t, units, dn_);         // k_nope
  be.copy_2d(element_ptr(dst, key + dq_), unit, element_ptr(kv, dn_), kv_head, t, units, dv_);  // v
  if (dv_ < dq_) be.fill_2d(element_ptr(dst, key + dq_ + dv_), t, unit, units, dq_ - dv_, 0.0f);
}

Tensor MlaAttention::assemble(const Tensor& q, const Tensor& kv, const Tensor& ckv, int64_t m) const {
  const int64_t unit = 3 * dq_, q_head = dn_ + dr_, units = m * heads_;
  Tensor qkv = empty_like(kv, {m, heads_ * unit});  // [M, a/t*3*dq]: per head [q_pe, q_nope], [k_pe, k_nope], [v, 0]
  Backend& be = kv.backend();
  be.copy_2d(qkv.raw(), unit, element_ptr(q, dn_), q_head, kv.dtype(), units, dr_);
  be.copy_2d(element_ptr(qkv, dr_), unit, q.raw(), q_head, kv.dtype(), units, dn_);
  write_keys_values(qkv, unit, dq_, kv, ckv, r_, r_ + dr_, m);
  return qkv;
}

void MlaAttention::disassemble(const Tensor& dqkv, Tensor& dq, Tensor& dkv, Tensor& dkpe) const {
  const int64_t unit = 3 * dq_, q_head = dn_ + dr_, kv_head = dn_ + dv_;
  const int64_t n = rows_of(dqkv, heads_ * unit, "MLA dqkv"), units = n * heads_;
  Backend& be = dqkv.backend();
  const DType t = dqkv.dtype();
  dq = empty_like(dqkv, {n, heads_ * q_head});    // [N, a/t*(dn+dr)]
  be.copy_2d(dq.raw(), q_head, element_ptr(dqkv, dr_), unit, t, units, dn_);
  be.copy_2d(element_ptr(dq, dn_), q_head, dqkv.raw(), unit, t, units, dr_);
  dkv = empty_like(dqkv, {n, heads_ * kv_head});  // [N, a/t*(dn+dv)]
  be.copy_2d(dkv.raw(), kv_head, element_ptr(dqkv, dq_ + dr_), unit, t, units, dn_);
  be.copy_2d(element_ptr(dkv, dn_), kv_head, element_ptr(dqkv, 2 * dq_), unit, t, units, dv_);
  // The shared RoPE key's gradient: the sum over this rank's heads, per token one [1, a/t] x
  // [a/t, dr] product of ones and the heads' gradients (fp32 accumulation, one rounding).
  Tensor ones = empty_like(dqkv, {heads_});  // [a/t]
  be.fill(ones.raw(), t, 1.0, heads_);
  dkpe = empty_like(dqkv, {n, dr_});  // [N, dr]
  strided_batched_gemm(be, t, false, false, 1, dr_, heads_, n, {ones.raw(), heads_, 0},
                       {element_ptr(dqkv, dq_), unit, heads_ * unit}, dkpe.raw(), dr_, dr_);
}

Tensor MlaAttention::value_columns(const Tensor& ctx) const {
  if (dv_ == dq_) return ctx;
  const int64_t units = ctx.numel() / dq_;  // N*a/t
  Tensor out = empty_like(ctx, {units / heads_, heads_ * dv_});  // [N, a/t*dv]
  ctx.backend().copy_2d(out.raw(), dv_, ctx.raw(), dq_, ctx.dtype(), units, dv_);
  return out;
}

Tensor MlaAttention::pad_value_columns(const Tensor& dctx) const {
  if (dv_ == dq_) return dctx;
  const int64_t units = dctx.numel() / dv_;  // N*a/t
  Tensor out = empty_like(dctx, {units / heads_, heads_ * dq_});  // [N, a/t*dq]
  Backend& be = dctx.backend();
  be.copy_2d(out.raw(), dq_, dctx.raw(), dv_, dctx.dtype(), units, dv_);
  be.fill_2d(element_ptr(out, dv_), dctx.dtype(), dq_, units, dq_ - dv_, 0.0f);
  return out;
}

RopeDesc MlaAttention::rope_desc(int64_t s, int64_t b, const Tensor& like, const int32_t* positions) {
  if (!inv_freq_.defined() || !(inv_freq_.device() == like.device())) {
    const std::vector<float> inv = cfg_.rotary_inv_freq();
    inv_freq_ = Tensor::from_host(inv.data(), {static_cast<int64_t>(inv.size())}, DType::F32, like.device());
  }
  RopeDesc d;  // the [pe, nope] query and key heads: RoPE rotates their first rotary dims
  d.s = s;
  d.b = b;
  d.groups = heads_;
  d.q_per_group = 1;
  d.dh = dq_;
  d.rot_dim = cfg_.rotary_dim();
  d.inv_freq = inv_freq_.data<float>();
  d.amplitude = cfg_.rope_amplitude();  // YaRN's cos/sin factor (1 without YaRN)
  d.positions = positions;
  return d;
}

Tensor MlaAttention::forward(const Tensor& x, const Step& step) {
  PTDP_CHECK_ARG(!step.decoding, spec_.owner + ": a decoding step goes through decode(), with its key/value cache");
  Tensor q, kv, ckv, c;
  project(x, step, q, kv, ckv, c);
  const int64_t rows = rows_of(kv, heads_ * (dn_ + dv_), "MLA kv");  // s/c*b
  const int64_t sl = cfg_.seq_length / tp_.cp.size;                   // this context rank's positions
  const int64_t b = rows / sl;
  const Tensor qkv = assemble(q, kv, ckv, rows);  // [s/c*b, a/t*3*dq]
  const TokenPositions where = step.positions ? *step.positions : TokenPositions{};
  qkv.backend().rope_forward(qkv.raw(), qkv.dtype(), rope_desc(sl, b, qkv, where.position_data()));
  Slot& slot = slots_.create(step.microbatch);
  slot.positions = where;
  slot.b = b;
  slot.sharded = tp_.sequence_sharded(step.decoding);
  return proj_.forward(value_columns(core_forward(*core_, qkv, {b, where.document_data()}, step, heads_)), step);
}

std::vector<AttentionLayer::QkClipScale> MlaAttention::qk_clip_scales(const std::vector<float>& head_max,
                                                                       float threshold, float alpha) const {
  std::vector<QkClipScale> out;
  if (static_cast<int64_t>(head_max.size()) != heads_) return out;
  const ColumnParallelLinear& q = q_up_ ? *q_up_ : *q_proj_;
  for (int64_t j = 0; j < heads_; ++j) {
    const float m = head_max[static_cast<std::size_t>(j)];
    if (!(m > threshold)) continue;
    const double eta = static_cast<double>(threshold) / static_cast<double>(m);
    // Local head j's rows: [nope, rope] of the query projection, [k_nope, v] of linear_kv_up_proj.
    out.push_back({q.weight_index(), q.in_features(), j * (dn_ + dr_), dn_,
                   static_cast<float>(std::pow(eta, static_cast<double>(alpha)))});
    out.push_back({q.weight_index(), q.in_features(), j * (dn_ + dr_) + dn_, dr_, static_cast<float>(eta)});
    out.push_back({kv_up_.weight_index(), kv_up_.in_features(), j * (dn_ + dv_), dn_,
                   static_cast<float>(std::pow(eta, 1.0 - static_cast<double>(alpha)))});
  }
  return out;
}

Tensor MlaAttention::backward_input(const Tensor& dy, const Step& step) {
  const Slot slot = slots_.get(step.microbatch);  // a copy: the forward's positions outlive the release
  slots_.release(step.microbatch);
  const Tensor dctx = pad_value_columns(proj_.backward_input(dy, step));  // [s/c*b, a/t*dq]
  const Tensor dqkv = core_->backward(dctx, {slot.b, slot.positions.document_data()}, step);  // [s/c*b, a/t*3*dq]
  const int64_t sl = cfg_.seq_length / tp_.cp.size;
  dqkv.backend().rope_backward(dqkv.raw(), dqkv.dtype(), rope_desc(sl, slot.b, dqkv, slot.positions.position_data()));
  Tensor dq, dkv, dkpe;
  disassemble(dqkv, dq, dkv, dkpe);
  // The shared RoPE key feeds the heads of every tensor rank (f's backward).
  copy_to_tensor_region_backward(tp_, dkpe);
  Tensor dc = kv_up_.backward_input(dkv, step);  // [s/c*b, r], summed over the tensor group
  if (kv_norm_) dc = kv_norm_->backward_input(dc, step);
  const int64_t n = rows_of(dc, r_, "MLA latent gradient");
  Tensor dckv = empty_like(dc, {n, r_ + dr_});  // [s/c*b, r+dr]
  Backend& be = dc.backend();
  be.copy_2d(dckv.raw(), r_ + dr_, dc.raw(), r_, dc.dtype(), n, r_);
  be.copy_2d(element_ptr(dckv, r_), r_ + dr_, dkpe.raw(), dr_, dc.dtype(), n, dr_);
  // The gathered latents' gradients are whole on every rank: each keeps its rows.
  if (slot.sharded) dckv = split_sequence(tp_, dckv, r_ + dr_);
  Tensor dx = kv_down_.backward_input(dckv, step);  // x's shape
  Tensor dxq;
  if (q_proj_) {
    dxq = q_proj_->backward_input(dq, step);
  } else {
    Tensor dcq = q_up_->backward_input(dq, step);  // [s/c*b, r_q], summed over the tensor group
    if (q_norm_) dcq = q_norm_->backward_input(dcq, step);
    if (slot.sharded) dcq = split_sequence(tp_, dcq, rq_);
    dxq = q_down_->backward_input(dcq, step);
  }
  be.add(dx.raw(), dxq.raw(), dx.raw(), dx.dtype(), dx.numel());
  return dx;
}

Tensor MlaAttention::decode(const Tensor& x, KvCache& cache, const Step& step) {
  PTDP_CHECK_ARG(step.decoding, spec_.owner + ": decode() needs a decoding step (Step::decoding)");
  const int64_t n = rows_of(x, cfg_.hidden_size, "MLA input"), start = cache.length, sk = start + n;
  PTDP_CHECK_ARG(sk <= cache.capacity, "key/value cache: " + std::to_string(start) + " cached + " + std::to_string(n) +
                                           " new tokens exceed its capacity " + std::to_string(cache.capacity));
  Tensor q, kv, ckv, c;
  project(x, step, q, kv, ckv, c);
  const Tensor qkv = assemble(q, kv, ckv, n);  // [n, a/t*3*dq]
  Backend& be = qkv.backend();
  const DType t = qkv.dtype();
  RopeDesc r = rope_desc(n, 1, qkv, nullptr);
  r.position_offset = start;
  be.rope_forward(qkv.raw(), t, r);
  // The cache: per position the normalised latent and the rotated shared RoPE key (head 0's).
  const int64_t lw = r_ + dr_;
  Tensor& latents = cache.layers[spec_.layer];  // [capacity, r+dr]
  if (!latents.defined()) latents = empty_like(qkv, {cache.capacity, lw});
  be.copy_2d(element_ptr(latents, start * lw), lw, c.raw(), r_, t, n, r_);
  be.copy_2d(element_ptr(latents, start * lw + r_), lw, element_ptr(qkv, dq_), heads_ * 3 * dq_, t, n, dr_);
  // The keys and values of the cached positions, rebuilt through linear_kv_up_proj into a
  // cache of KvCacheAttention's layout [sk, a/t*2*dq], to which the new tokens are appended.
  KvCache whole;
  whole.capacity = sk;
  whole.length = start;
  Tensor& keys = whole.layers[spec_.layer];
  keys = empty_like(qkv, {sk, heads_ * 2 * dq_});  // [sk, a/t*2*dq]
  if (start > 0) {
    const Tensor cached = empty_like(qkv, {start, r_});  // [start, r]: the cached positions' latents
    be.copy_2d(cached.raw(), r_, latents.raw(), lw, t, start, r_);
    Tensor kv_prefix = empty_like(qkv, {start, heads_ * (dn_ + dv_)});  // [start, a/t*(dn+dv)]
    linear_forward(cached, params_.weight(kv_up_.weight_index()), nullptr, kv_prefix);
    write_keys_values(keys, 2 * dq_, 0, kv_prefix, latents, r_, lw, start);
  }
  return proj_.forward(value_columns(cached_.forward(qkv, whole)), step);
}

void MlaAttention::backward_weight(const Step& step) {
  if (q_down_) q_down_->backward_weight(step);
  if (q_up_) q_up_->backward_weight(step);
  if (q_proj_) q_proj_->backward_weight(step);
  kv_down_.backward_weight(step);
  kv_up_.backward_weight(step);
  proj_.backward_weight(step);
}

void MlaAttention::release(const Step& step) {
  if (q_down_) q_down_->release(step);
  if (q_norm_) q_norm_->release(step);
  if (q_up_) q_up_->release(step);
  if (q_proj_) q_proj_->release(step);
  kv_down_.release(step);
  if (kv_norm_) kv_norm_->release(step);
  kv_up_.release(step);
  proj_.release(step);
  core_->release(step);
  slots_.release(step.microbatch);
}

}  // namespace ptdp
