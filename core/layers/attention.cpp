#include "core/layers/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "core/layers/kv_cache.h"

namespace ptdp {

SelfAttention::SelfAttention(ParamTable& params, const std::string& prefix, const LayerConfig& cfg, int layer,
                             TensorParallel tp, Device device)
    : cfg_(cfg),
      spec_(cfg, layer, tp, prefix),
      qkv_(params, prefix + ".linear_qkv", cfg.hidden_size, cfg.qkv_rows(), cfg.qkv_bias(), false, cfg.init_method_std,
           tp),
      proj_(params, prefix + ".linear_proj", cfg.attention_width(), cfg.hidden_size, cfg.add_bias_linear,
            cfg.init_method_std / std::sqrt(2.0f * static_cast<float>(cfg.num_layers)), tp, true),
      core_(make_core_attention(spec_, attention_kernels(backend_for(device), cfg.precision, spec_.dh))),
      cached_(spec_),
      slots_(prefix) {
  qkv_.set_profile_label("qkv");
  proj_.set_profile_label("proj");
  // Each query group's a/g query heads, its key head and its value head: q, k and v of the
  // unfused model (Muon orthogonalises them apart).
  params.set_row_parts(qkv_.weight_index(), {static_cast<int64_t>(cfg.num_attention_heads / cfg.query_groups()) * spec_.dh,
                                             spec_.dh, spec_.dh});
  if (cfg.qk_layernorm && cfg.qk_layernorm_across_heads) {
    const int64_t dh = spec_.dh;
    q_whole_norm_ = std::make_unique<ProjectionNorm>(params, prefix + ".q_layernorm", cfg.num_attention_heads * dh,
                                                     cfg.layernorm_epsilon, tp);
    k_whole_norm_ = std::make_unique<ProjectionNorm>(params, prefix + ".k_layernorm", cfg.query_groups() * dh,
                                                     cfg.layernorm_epsilon, tp);
  } else if (cfg.qk_layernorm) {
    const int64_t dh = spec_.dh;
    q_norm_ = std::make_unique<Norm>(params, prefix + ".q_layernorm", cfg.normalization, dh, cfg.layernorm_epsilon, tp);
    k_norm_ = std::make_unique<Norm>(params, prefix + ".k_layernorm", cfg.normalization, dh, cfg.layernorm_epsilon, tp);
  }
}

Tensor SelfAttention::forward(const Tensor& x, const Step& step) {
  PTDP_CHECK_ARG(!step.decoding, spec_.owner + ": a decoding step goes through decode(), with its key/value cache");
  const int64_t sl = cfg_.seq_length / spec_.tp.cp.size;  // this context rank's positions
  const Tensor qkv = project(x, step);                    // [s/c*b, g/t*(a/g+2)*dh]
  const int64_t b = rows_of(qkv, spec_.qkv_cols(), "qkv") / sl;
  const TokenPositions where = step.positions ? *step.positions : TokenPositions{};
  if (cfg_.rope()) qkv.backend().rope_forward(qkv.raw(), qkv.dtype(), rope_desc(sl, b, qkv, where.position_data()));
  Slot& slot = slots_.create(step.microbatch);
  slot.positions = where;
  slot.b = b;
  return proj_.forward(core_forward(*core_, qkv, {b, where.document_data()}, step, spec_.heads), step);
}

Tensor AttentionLayer::core_forward(CoreAttention& core, const Tensor& qkv, AttentionBatch batch, const Step& step,
                                    int64_t heads) {
  if (!record_max_logits_ || !step.training) return core.forward(qkv, batch, step);
  // [b*a/t] fp32: the per (sample, head) maxima of this pass, folded into the heads' record.
  Tensor max_logit = Tensor::empty({batch.b * heads}, DType::F32, qkv.device());
  qkv.backend().fill(max_logit.raw(), DType::F32, -std::numeric_limits<double>::infinity(), max_logit.numel());
  batch.max_logit = max_logit.data<float>();
  Tensor ctx = core.forward(qkv, batch, step);
  std::vector<float> host(static_cast<std::size_t>(max_logit.numel()));
  max_logit.copy_to_host(host.data(), host.size() * sizeof(float));
  max_logits_.resize(static_cast<std::size_t>(heads), -std::numeric_limits<float>::infinity());
  for (int64_t bi = 0; bi < batch.b; ++bi)
    for (int64_t h = 0; h < heads; ++h) {
      float& m = max_logits_[static_cast<std::size_t>(h)];
      m = std::max(m, host[static_cast<std::size_t>(bi * heads + h)]);
    }
  return ctx;
}

void AttentionLayer::record_max_logits(bool on) {
  record_max_logits_ = on;
  max_logits_.clear();
}

std::vector<float> AttentionLayer::take_max_logits() {
  std::vector<float> out;
  std::swap(out, max_logits_);
  return out;
}

std::vector<AttentionLayer::QkClipScale> SelfAttention::qk_clip_scales(const std::vector<float>& head_max,
                                                                        float threshold, float alpha) const {
  std::vector<QkClipScale> out;
  const int64_t qg = spec_.q_per_group, dh = spec_.dh, h = cfg_.hidden_size;
  if (static_cast<int64_t>(head_max.size()) != spec_.heads) return out;
  for (int64_t k = 0; k < spec_.groups; ++k) {
    const float group_max = *std::max_element(head_max.begin() + k * qg, head_max.begin() + (k + 1) * qg);
    if (!(group_max > threshold)) continue;
    const double eta = static_cast<double>(threshold) / static_cast<double>(group_max);
    const auto q = static_cast<float>(std::pow(eta, static_cast<double>(alpha)));
    const auto kf = static_cast<float>(std::pow(eta, 1.0 - static_cast<double>(alpha)));
    // linear_qkv's rows of local group k: its a/g query heads, then its key head (dh rows each).
    const int64_t base = k * (qg + 2) * dh;
    out.push_back({qkv_.weight_index(), h, base, qg * dh, q});
    out.push_back({qkv_.weight_index(), h, base + qg * dh, dh, kf});
    if (qkv_.bias_index() >= 0) {
      out.push_back({qkv_.bias_index(), 1, base, qg * dh, q});
      out.push_back({qkv_.bias_index(), 1, base + qg * dh, dh, kf});
    }
  }
  return out;
}

Tensor SelfAttention::backward_input(const Tensor& dy, const Step& step) {
  const Slot slot = slots_.get(step.microbatch);  // a copy: the forward's positions outlive the release
  slots_.release(step.microbatch);
  const Tensor dctx = proj_.backward_input(dy, step);  // [s/c*b, a/t*dh]
  const Tensor dqkv = core_->backward(dctx, {slot.b, slot.positions.document_data()}, step);  // [s/c*b, g/t*(a/g+2)*dh]
  if (cfg_.rope()) {
    const int64_t sl = cfg_.seq_length / spec_.tp.cp.size;
    dqkv.backend().rope_backward(dqkv.raw(), dqkv.dtype(), rope_desc(sl, slot.b, dqkv, slot.positions.position_data()));
  }
  return project_backward(dqkv, step);
}

Tensor SelfAttention::decode(const Tensor& x, KvCache& cache, const Step& step) {
  PTDP_CHECK_ARG(step.decoding, spec_.owner + ": decode() needs a decoding step (Step::decoding)");
  const Tensor qkv = project(x, step);  // [n, g/t*(a/g+2)*dh]
  if (cfg_.rope()) {
    RopeDesc r = rope_desc(rows_of(qkv, spec_.qkv_cols(), "qkv"), 1, qkv, nullptr);
    r.position_offset = cache.length;
    qkv.backend().rope_forward(qkv.raw(), qkv.dtype(), r);
  }
  return proj_.forward(cached_.forward(qkv, cache), step);
}

Tensor SelfAttention::project(const Tensor& x, const Step& step) {
  const Tensor qkv = qkv_.forward(x, step);  // [N, g/t*(a/g+2)*dh]: N = s/c*b, or n when decoding
  if (cfg_.qk_layernorm) {
    set_heads(qkv, 0, qk_norm_forward(0, heads_of(qkv, 0), step));
    set_heads(qkv, 1, qk_norm_forward(1, heads_of(qkv, 1), step));
  }
  return qkv;
}

Tensor SelfAttention::project_backward(const Tensor& dqkv, const Step& step) {
  if (cfg_.qk_layernorm) {
    set_heads(dqkv, 0, qk_norm_backward(0, heads_of(dqkv, 0), step));
    set_heads(dqkv, 1, qk_norm_backward(1, heads_of(dqkv, 1), step));
  }
  return qkv_.backward_input(dqkv, step);
}

Tensor SelfAttention::qk_norm_forward(int part, const Tensor& heads, const Step& step) {
  // heads_of packs a token's heads of this rank side by side: [N*a/t, dh] is [N, a/t*dh], the
  // row the norms across the heads take.
  if (q_whole_norm_) return (part == 0 ? *q_whole_norm_ : *k_whole_norm_).forward(heads, step);
  return (part == 0 ? *q_norm_ : *k_norm_).forward(heads, step);
}

Tensor SelfAttention::qk_norm_backward(int part, const Tensor& dheads, const Step& step) {
  if (q_whole_norm_) return (part == 0 ? *q_whole_norm_ : *k_whole_norm_).backward_input(dheads, step);
  return (part == 0 ? *q_norm_ : *k_norm_).backward_input(dheads, step);
}

RopeDesc SelfAttention::rope_desc(int64_t s, int64_t b, const Tensor& like, const int32_t* positions) {
  if (!inv_freq_.defined() || !(inv_freq_.device() == like.device())) {
    const std::vector<float> inv = cfg_.rotary_inv_freq();
    inv_freq_ = Tensor::from_host(inv.data(), {static_cast<int64_t>(inv.size())}, DType::F32, like.device());
  }
  RopeDesc d;
  d.s = s;
  d.b = b;
  d.groups = spec_.groups;
  d.q_per_group = spec_.q_per_group;
  d.dh = spec_.dh;
  d.rot_dim = cfg_.rotary_dim();
  d.inv_freq = inv_freq_.data<float>();
  d.positions = positions;
  d.amplitude = cfg_.rope_amplitude();
  return d;
}

Tensor SelfAttention::heads_of(const Tensor& qkv, int part) const {
  const int64_t qg = spec_.q_per_group, dh = spec_.dh;
  const int64_t units = qkv.numel() / spec_.group_cols();  // N*g/t: one per (row, group)
  const int64_t width = part == 0 ? qg * dh : dh;
  Tensor packed = empty_like(qkv, {units * width / dh, dh});  // [N*a/t, dh] or [N*g/t, dh]
  qkv.backend().copy_2d(packed.raw(), width, element_ptr(qkv, part == 0 ? 0 : qg * dh), spec_.group_cols(),
                        qkv.dtype(), units, width);
  return packed;
}

void SelfAttention::set_heads(const Tensor& qkv, int part, const Tensor& packed) const {
  const int64_t qg = spec_.q_per_group, dh = spec_.dh;
  const int64_t units = qkv.numel() / spec_.group_cols();
  const int64_t width = part == 0 ? qg * dh : dh;
  qkv.backend().copy_2d(element_ptr(qkv, part == 0 ? 0 : qg * dh), spec_.group_cols(), packed.raw(), width,
                        qkv.dtype(), units, width);
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
  if (q_whole_norm_) {
    q_whole_norm_->release(step);
    k_whole_norm_->release(step);
  }
  core_->release(step);
  slots_.release(step.microbatch);
}

}  // namespace ptdp
