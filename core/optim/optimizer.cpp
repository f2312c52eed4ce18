#include "core/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "base/error.h"
#include "core/optim/muon.h"

namespace ptdp {

void OptimizerConfig::validate() const {
  lr.validate();
  PTDP_CHECK_ARG(kind == OptimizerKind::Adam || kind == OptimizerKind::Sgd || kind == OptimizerKind::Muon,
                 "optimizer kind " + std::to_string(static_cast<int>(kind)) + " is not adam, sgd or muon");
  PTDP_CHECK_ARG(beta1 >= 0 && beta1 < 1, "adam beta1 must be in [0, 1), got " + std::to_string(beta1));
  PTDP_CHECK_ARG(beta2 >= 0 && beta2 < 1, "adam beta2 must be in [0, 1), got " + std::to_string(beta2));
  PTDP_CHECK_ARG(eps > 0, "adam eps must be > 0, got " + std::to_string(eps));
  PTDP_CHECK_ARG(weight_decay >= 0, "weight decay must be >= 0, got " + std::to_string(weight_decay));
  PTDP_CHECK_ARG(momentum >= 0, "sgd momentum must be >= 0, got " + std::to_string(momentum));
  PTDP_CHECK_ARG(clip_grad >= 0, "clip grad must be >= 0 (0: off), got " + std::to_string(clip_grad));
  PTDP_CHECK_ARG(bucket_elements >= 0, "bucket size must be >= 0, got " + std::to_string(bucket_elements));
  // Megatron's rule: the overlapped gather of updated weights exists only with the distributed
  // optimizer, and goes with the overlapped gradient reduction.
  PTDP_CHECK_ARG(!overlap_param_gather || (distributed && overlap_grad_reduce),
                 "overlap_param_gather needs use_distributed_optimizer and overlap_grad_reduce");
  // Muon's settings are checked whatever the kind, so that a bad value is named where it is set.
  const MuonConfig& m = muon;
  PTDP_CHECK_ARG(m.momentum >= 0 && m.momentum < 1,
                 "muon momentum must be in [0, 1), got " + std::to_string(m.momentum));
  PTDP_CHECK_ARG(m.ns_steps >= 1 && m.ns_steps <= 100,
                 "muon Newton-Schulz steps must be in [1, 100], got " + std::to_string(m.ns_steps));
  PTDP_CHECK_ARG(m.coefficients >= NsCoefficients::Quintic && m.coefficients <= NsCoefficients::Aol,
                 "muon coefficient type " + std::to_string(static_cast<int>(m.coefficients)) +
                     " is not quintic (0), simple (1), polar_express (2) or aol (3)");
  PTDP_CHECK_ARG(m.ns_eps > 0 && std::isfinite(m.ns_eps),
                 "muon Newton-Schulz eps must be > 0, got " + std::to_string(m.ns_eps));
  PTDP_CHECK_ARG(m.precision >= NsPrecision::Highest && m.precision <= NsPrecision::Medium,
                 "muon fp32 matmul precision " + std::to_string(static_cast<int>(m.precision)) +
                     " is not highest (0), high (1) or medium (2)");
  PTDP_CHECK_ARG(m.scale_mode >= MuonScaleMode::Spectral && m.scale_mode <= MuonScaleMode::ShapeScaling,
                 "muon scale mode " + std::to_string(static_cast<int>(m.scale_mode)) +
                     " is not spectral (0), unit_rms_norm (1) or shape_scaling (2)");
  PTDP_CHECK_ARG(m.extra_scale_factor > 0 && std::isfinite(m.extra_scale_factor),
                 "muon extra scale factor must be > 0, got " + std::to_string(m.extra_scale_factor));
  PTDP_CHECK_ARG(m.tp_mode >= MuonTpMode::Distributed && m.tp_mode <= MuonTpMode::Blockwise,
                 "muon tp mode " + std::to_string(static_cast<int>(m.tp_mode)) +
                     " is not distributed (0), duplicated (1) or blockwise (2)");
  PTDP_CHECK_ARG(m.qk_clip_threshold > 0 && std::isfinite(m.qk_clip_threshold),
                 "qk-clip threshold must be > 0, got " + std::to_string(m.qk_clip_threshold));
  PTDP_CHECK_ARG(m.qk_clip_alpha >= 0 && m.qk_clip_alpha <= 1,
                 "qk-clip alpha must be in [0, 1], got " + std::to_string(m.qk_clip_alpha));
  LossScaler check(loss_scale);  // validates
  (void)check;
}

struct Optimizer::Space {
  ParamTable* table = nullptr;
  std::vector<ParamSpace::Segment> segments;
  std::unique_ptr<GradBuckets> buckets;
  Tensor m, v;  // optimizer state over the concatenated shards
  // Muon: which parameters are matrices, and where the AdamW second moment of the others
  // starts for each (bucket, parameter) part of this rank's shard (-1: none; v holds only these).
  std::vector<bool> matrix;
  std::vector<std::vector<int64_t>> v_at;
};

namespace {

// A tensor-replicated parameter counts in the norm on tensor rank 0 only (an expert's on
// expert-tensor rank 0), and an excluded one (the last stage's tied embedding copy) nowhere:
// with the data-parallel replicas counted once (unscale_grads), each element is counted once in
// the world.
std::vector<ParamSpace::Segment> segments_of(const ParamTable& t, const std::vector<int>& excluded, int tp_rank) {
  const std::set<int> skip(excluded.begin(), excluded.end());
  std::vector<ParamSpace::Segment> segments;
  for (int i = 0; i < t.size(); ++i) {
    const ParamInfo& p = t.info(i);
    const int split_rank = p.expert ? p.split_rank : tp_rank;
    segments.push_back({p.offset, p.local_shape.numel(), p.weight_decay,
                        (p.partition_dim >= 0 || split_rank == 0) && skip.count(i) == 0});
  }
  return segments;
}

}  // namespace

Optimizer::Optimizer(std::vector<ParamTable*> spaces, const std::vector<std::vector<int>>& excluded,
                     OptimizerConfig config, ProcessGroups& groups)
    : config_(config), groups_(groups), scaler_(config.loss_scale) {
  config_.validate();
  const int tp_rank = groups.rank(GroupKind::Tensor);
  for (std::size_t si = 0; si < spaces.size(); ++si) {
    auto sp = std::make_unique<Space>();
    ParamTable& t = *spaces[si];
    sp->table = &t;
    sp->segments = segments_of(t, si < excluded.size() ? excluded[si] : std::vector<int>{}, tp_rank);
    sp->buckets = std::make_unique<GradBuckets>(t, config_.bucket_elements, config_.distributed, groups,
                                                config_.overlap_grad_reduce);
    const bool has_state = config_.kind != OptimizerKind::Sgd || config_.momentum > 0;
    const int64_t state_elems = has_state ? sp->buckets->shard_elements() : 0;
    const Device device = t.flat_grads().device();  // the state lives with the parameters
    // Full sharding: with 16-bit model weights each rank keeps the fp32 masters of its shards
    // only, each bucket's over its own group. A table another optimizer sharded differently (or
    // that this one does not shard) gets its masters back whole first.
    if (sp->buckets->sharded() && t.model_dtype() != DType::F32) {
      std::vector<ParamTable::ShardRange> ranges;
      for (const GradBucket& b : sp->buckets->buckets())
        ranges.push_back({b.lo, b.hi, &groups.comm_for_tensors(b.group, device)});
      t.shard_masters(ranges);
    } else {
      t.unshard_masters();
    }
    sp->m = Tensor::zeros({state_elems}, DType::F32, device);
    if (config_.kind == OptimizerKind::Adam) sp->v = Tensor::zeros({state_elems}, DType::F32, device);
    if (config_.kind == OptimizerKind::Muon) {
      // The momentum lives in m for every element; the AdamW second moment only for the
      // parameters that are not matrices, packed.
      for (int i = 0; i < t.size(); ++i) sp->matrix.push_back(muon_is_matrix(t.info(i)));
      int64_t v_elems = 0;
      for (const GradBucket& b : sp->buckets->buckets()) {
        sp->v_at.emplace_back(sp->segments.size(), -1);
        for (std::size_t j = 0; j < sp->segments.size(); ++j) {
          const auto& seg = sp->segments[j];
          const int64_t lo = std::max(seg.offset, b.shard_lo), hi = std::min(seg.offset + seg.numel, b.shard_hi);
          if (lo >= hi || sp->matrix[j]) continue;
          sp->v_at.back()[j] = v_elems;
          v_elems += hi - lo;
        }
      }
      sp->v = Tensor::zeros({std::max<int64_t>(v_elems, 1)}, DType::F32, device);
    }
    spaces_.push_back(std::move(sp));
  }
  if (config_.kind == OptimizerKind::Muon) muon_ = std::make_unique<MuonOrthogonalizer>(spaces, config_.muon, config_.distributed, groups);
  // The progress token is process-wide: any group of more than one rank asks for it.
  for (const GroupKind kind : {GroupKind::DataContext, GroupKind::ExpertData}) {
    if ((config_.overlap_grad_reduce || config_.overlap_param_gather) && groups.size(kind) > 1 && !spaces_.empty() &&
        !progress_)
      progress_ = groups.comm_for_tensors(kind, spaces_.front()->table->flat_grads().device()).background_progress();
  }
}

Optimizer::~Optimizer() = default;

void Optimizer::params_ready(int space, int first, int end) {
  PTDP_CHECK_ARG(space >= 0 && space < static_cast<int>(spaces_.size()), "space " + std::to_string(space) + " out of range");
  spaces_[static_cast<std::size_t>(space)]->buckets->params_ready(first, end);
}

void Optimizer::finish_grad_sync() {
  for (auto& s : spaces_) s->buckets->finish_grad_sync();
}

double Optimizer::unscale_grads(Backend& be) {
  const float inv_scale = 1.0f / scaler_.scale();
  double local = 0.0;
  for (auto& s : spaces_) {
    const GradBuckets& buckets = *s->buckets;
    for (const GradBucket& b : buckets.buckets()) {
      // The replicas of a bucket's reduced gradients: each counts its shard, or only the
      // group's first rank counts the whole bucket.
      const bool count_norm_here = config_.distributed || groups_.rank(b.group) == 0;
      float* g = buckets.reduced_grad(b, b.shard_lo);
      if (inv_scale != 1.0f) be.scale(g, inv_scale, b.shard_hi - b.shard_lo);
      for (const auto& seg : s->segments) {
        const int64_t lo = std::max(seg.offset, b.shard_lo), hi = std::min(seg.offset + seg.numel, b.shard_hi);
        if (lo >= hi) continue;
        const double sq = be.sum_squares(buckets.reduced_grad(b, lo), hi - lo);
        // Every rank checks its own gradients for inf/nan; the norm counts each element once.
        if (!std::isfinite(sq)) local = std::numeric_limits<double>::infinity();
        else if (seg.in_norm && count_norm_here) local += sq;
      }
    }
  }
  return local;
}

Optimizer::GradVerdict Optimizer::agree_on_grads(double local_norm_sq) {
  // One all-reduce over every rank: [norm^2 part, inf flag].
  float agree[2] = {std::isfinite(local_norm_sq) ? static_cast<float>(local_norm_sq) : 0.0f,
                    std::isfinite(local_norm_sq) ? 0.0f : 1.0f};
  groups_.comm(GroupKind::World).all_reduce(Tensor::borrow(agree, {2}, DType::F32), ReduceOp::Sum)->wait();
  GradVerdict verdict;
  verdict.found_inf = agree[1] > 0.0f;
  verdict.norm_sq = agree[0];
  return verdict;
}

float Optimizer::clip_coefficient(double grad_norm) const {
  return config_.clip_grad > 0 && grad_norm > config_.clip_grad ? static_cast<float>(config_.clip_grad / (grad_norm + 1e-6))
                                                               : 1.0f;
}

void Optimizer::update_shards(Backend& be, float clip, double lr) {
  for (auto& s : spaces_) {
    const GradBuckets& buckets = *s->buckets;
    for (const GradBucket& b : buckets.buckets()) {
      const std::size_t bi = static_cast<std::size_t>(&b - buckets.buckets().data());
      for (std::size_t j = 0; j < s->segments.size(); ++j) {
        const auto& seg = s->segments[j];
        const int64_t lo = std::max(seg.offset, b.shard_lo), hi = std::min(seg.offset + seg.numel, b.shard_hi);
        if (lo >= hi) continue;
        float* p = s->table->master_data(lo);  // the fp32 masters (of this rank's shard)
        float* g = buckets.reduced_grad(b, lo);
        const int64_t st = b.state_offset + (lo - b.shard_lo);
        const float wd = seg.weight_decay ? config_.weight_decay : 0.0f;
        if (config_.kind == OptimizerKind::Muon && s->matrix[j]) {
          // buf = lerp(buf, g, 1 - mu); the update to orthogonalise replaces g (PyTorch's
          // Muon: lerp(g, buf, mu) with Nesterov, else buf).
          const float mu = config_.muon.momentum;
          float* buf = s->m.data<float>() + st;
          be.scale(buf, mu, hi - lo);
          be.axpy((1.0f - mu) * clip, g, buf, hi - lo);
          if (config_.muon.nesterov) {
            be.scale(g, (1.0f - mu) * clip, hi - lo);
            be.axpy(mu, buf, g, hi - lo);
          } else {
            be.copy(g, buf, static_cast<std::size_t>(hi - lo) * sizeof(float));
          }
        } else if (config_.kind == OptimizerKind::Adam || config_.kind == OptimizerKind::Muon) {
          float* v = config_.kind == OptimizerKind::Muon ? s->v.data<float>() + s->v_at[bi][j] : s->v.data<float>() + st;
          AdamWParams a;
          a.lr = static_cast<float>(lr);
          a.beta1 = config_.beta1;
          a.beta2 = config_.beta2;
          a.eps = config_.eps;
          a.weight_decay = wd;
          a.step = steps_;
          a.grad_scale = clip;  // clipping folded into the update: no pass over the gradients
          be.adamw_step(p, g, s->m.data<float>() + st, v, hi - lo, a);
        } else {
          SgdParams q;
          q.lr = static_cast<float>(lr);
          q.momentum = config_.momentum;
          q.weight_decay = wd;
          q.nesterov = config_.nesterov;
          q.first_step = steps_ == 1;
          q.grad_scale = clip;
          be.sgd_step(p, g, config_.momentum > 0 ? s->m.data<float>() + st : nullptr, hi - lo, q);
        }
      }
    }
  }
}

void Optimizer::muon_update(Backend& be, double lr) {
  const Device device = spaces_.front()->table->flat_grads().device();
  std::vector<float*> work;
  for (auto& s : spaces_) work.push_back(s->table->flat_grads().data<float>());
  // The distributed optimizer: every rank's shard of the momentum updates to every replica...
  // Buckets without a matrix (e.g. the embedding's) need neither exchange.
  const auto has_matrix = [](const Space& s, const GradBucket& b) {
    for (std::size_t j = 0; j < s.segments.size(); ++j)
      if (s.matrix[j] && s.segments[j].offset < b.hi && s.segments[j].offset + s.segments[j].numel > b.lo) return true;
    return false;
  };
  for (auto& s : spaces_) {
    const Tensor& g = s->table->flat_grads();
    for (const GradBucket& b : s->buckets->buckets()) {
      if (!b.sharded || !has_matrix(*s, b)) continue;
      groups_.comm_for_tensors(b.group, device)
          .all_gather(g.view(b.shard_lo, {b.shard_hi - b.shard_lo}), g.view(b.lo, {b.hi - b.lo}))
          ->wait();
    }
  }
  muon_->orthogonalize(work, be);
  // ... and each matrix's result, computed by one replica (the others hold zeros), to the
  // shards: a sum with one non-zero term is exact.
  for (auto& s : spaces_) {
    const Tensor& g = s->table->flat_grads();
    for (const GradBucket& b : s->buckets->buckets()) {
      if (!b.sharded || !has_matrix(*s, b)) continue;
      groups_.comm_for_tensors(b.group, device)
          .reduce_scatter(g.view(b.lo, {b.hi - b.lo}), g.view(b.shard_lo, {b.shard_hi - b.shard_lo}), ReduceOp::Sum)
          ->wait();
    }
  }
  // p = p (1 - lr wd) - lr * scaled update (PyTorch's order: decay, then the update).
  for (auto& s : spaces_) {
    for (const GradBucket& b : s->buckets->buckets()) {
      for (std::size_t j = 0; j < s->segments.size(); ++j) {
        if (!s->matrix[j]) continue;
        const auto& seg = s->segments[j];
        const int64_t lo = std::max(seg.offset, b.shard_lo), hi = std::min(seg.offset + seg.numel, b.shard_hi);
        if (lo >= hi) continue;
        float* p = s->table->master_data(lo);
        const float wd = seg.weight_decay ? config_.weight_decay : 0.0f;
        if (wd != 0.0f) be.scale(p, static_cast<float>(1.0 - lr * wd), hi - lo);
        be.axpy(static_cast<float>(-lr), s->buckets->reduced_grad(b, lo), p, hi - lo);
      }
    }
  }
}

void Optimizer::all_gather_updated_shards(Backend& be) {
  const Device device = spaces_.front()->table->flat_grads().device();
  for (auto& s : spaces_) {
    ParamTable& t = *s->table;
    const Tensor& weights = t.flat_weights();
    const std::vector<GradBucket>& buckets = s->buckets->buckets();
    // From the start of the buffer: the order in which the next forward uses the buckets.
    for (auto it = buckets.rbegin(); it != buckets.rend(); ++it) {
      const GradBucket& b = *it;
      const int64_t n = b.shard_hi - b.shard_lo;
      // In place: this rank's part of the bucket is already in the weights (fp32: they are the
      // masters) or is rounded into them here.
      Tensor mine = weights.view(b.shard_lo, {n});
      if (weights.dtype() != DType::F32) be.cast(t.master_data(b.shard_lo), DType::F32, mine.raw(), weights.dtype(), n);
      if (!b.sharded) continue;  // a group of one (the expert region at edp = 1): the whole bucket is here
      WorkPtr work = groups_.comm_for_tensors(b.group, device).all_gather(mine, weights.view(b.lo, {b.hi - b.lo}));
      if (config_.overlap_param_gather) t.add_pending_gather(b.lo, b.hi, std::move(work));
      else work->wait();
    }
  }
}

OptimizerStepResult Optimizer::step(int64_t iteration) {
  // Weight gathers of the last step that no forward waited for (parameters it did not use).
  for (auto& s : spaces_) s->table->wait_all_gathers();
  finish_grad_sync();
  // Every space lives on one device (the model's); its backend does the arithmetic.
  Backend& be = spaces_.front()->table->flat_grads().backend();
  const GradVerdict verdict = agree_on_grads(unscale_grads(be));
  OptimizerStepResult res;
  res.lr = config_.lr.at(iteration);
  res.loss_scale = scaler_.scale();
  for (auto& s : spaces_) s->buckets->start_next_iteration();
  if (verdict.found_inf) {
    res.grad_norm = std::numeric_limits<double>::infinity();
    res.skipped = true;
    ++skipped_;
    scaler_.update(true);
    return res;
  }
  res.grad_norm = std::sqrt(verdict.norm_sq);
  ++steps_;
  update_shards(be, clip_coefficient(res.grad_norm), res.lr);
  if (muon_) muon_update(be, res.lr);
  if (std::any_of(spaces_.begin(), spaces_.end(), [](const auto& s) { return s->buckets->sharded(); }))
    all_gather_updated_shards(be);
  else
    for (auto& s : spaces_) s->table->sync_weights();  // 16-bit model weights follow the masters
  scaler_.update(false);
  return res;
}

std::vector<std::string> Optimizer::state_names() const {
  if (config_.kind == OptimizerKind::Adam) return {"exp_avg", "exp_avg_sq"};
  if (config_.kind == OptimizerKind::Muon) return {"momentum_buffer", "exp_avg", "exp_avg_sq"};
  if (config_.momentum > 0) return {"momentum_buffer"};
  return {};
}

namespace {

void check_state_index(int s, int k, int spaces, std::size_t states) {
  PTDP_CHECK_ARG(s >= 0 && s < spaces, "state space " + std::to_string(s) + " out of range [0, " +
                                           std::to_string(spaces) + ")");
  PTDP_CHECK_ARG(k >= 0 && static_cast<std::size_t>(k) < states,
                 "state buffer " + std::to_string(k) + " out of range [0, " + std::to_string(states) + ")");
}

}  // namespace

bool state_applies(const std::vector<std::string>& states, std::size_t k, const ParamInfo& p) {
  PTDP_CHECK_ARG(k < states.size(), "state buffer " + std::to_string(k) + " out of range");
  const bool muon = std::find(states.begin(), states.end(), "momentum_buffer") != states.end() &&
                    std::find(states.begin(), states.end(), "exp_avg") != states.end();
  if (!muon) return true;
  return muon_is_matrix(p) == (states[k] == "momentum_buffer");
}

bool Optimizer::has_state(int s, int param, int k) const {
  check_state_index(s, k, num_spaces(), state_names().size());
  const Space& sp = *spaces_[static_cast<std::size_t>(s)];
  PTDP_CHECK_ARG(param >= 0 && param < sp.table->size(), "parameter " + std::to_string(param) + " out of range");
  return state_applies(state_names(), static_cast<std::size_t>(k), sp.table->info(param));
}

namespace {

// Calls f(j, lo, hi) for each part [lo, hi) of parameter j inside [shard_lo, shard_hi).
template <typename F>
void for_each_part(const std::vector<ParamSpace::Segment>& segments, const GradBucket& b, F f) {
  for (std::size_t j = 0; j < segments.size(); ++j) {
    const int64_t lo = std::max(segments[j].offset, b.shard_lo), hi = std::min(segments[j].offset + segments[j].numel, b.shard_hi);
    if (lo < hi) f(j, lo, hi);
  }
}

}  // namespace

std::vector<float> Optimizer::shard_state(const Space& sp, std::size_t bi, int k) const {
  const GradBucket& b = sp.buckets->buckets()[bi];
  std::vector<float> shard(static_cast<std::size_t>(b.shard_hi - b.shard_lo), 0.0f);
  const bool muon = config_.kind == OptimizerKind::Muon;
  const Tensor& state = (k == 0 || (muon && k == 1)) ? sp.m : sp.v;
  Backend& be = state.backend();
  if (!muon) {
    be.copy_to_host(shard.data(), state.data<float>() + b.state_offset, shard.size() * sizeof(float));
    return shard;
  }
  for_each_part(sp.segments, b, [&](std::size_t j, int64_t lo, int64_t hi) {
    if (sp.matrix[j] != (k == 0)) return;  // a buffer this parameter does not keep: zeros
    const float* src = k == 2 ? state.data<float>() + sp.v_at[bi][j] : state.data<float>() + b.state_offset + (lo - b.shard_lo);
    be.copy_to_host(shard.data() + (lo - b.shard_lo), src, static_cast<std::size_t>(hi - lo) * sizeof(float));
  });
  return shard;
}

std::vector<float> Optimizer::get_state(int s, int k) {
  check_state_index(s, k, num_spaces(), state_names().size());
  Space& sp = *spaces_[static_cast<std::size_t>(s)];
  std::vector<float> out(static_cast<std::size_t>(sp.table->capacity()), 0.0f);
  const std::vector<GradBucket>& buckets = sp.buckets->buckets();
  for (std::size_t bi = 0; bi < buckets.size(); ++bi) {
    const GradBucket& b = buckets[bi];
    std::vector<float> shard = shard_state(sp, bi, k);
    if (!b.sharded) {
      std::copy(shard.begin(), shard.end(), out.begin() + b.lo);
      continue;
    }
    groups_.comm(b.group)
        .all_gather(Tensor::borrow(shard.data(), {b.shard_hi - b.shard_lo}, DType::F32),
                    Tensor::borrow(out.data() + b.lo, {b.hi - b.lo}, DType::F32))
        ->wait();
  }
  return out;
}

void Optimizer::set_state(int s, int k, const float* values) {
  check_state_index(s, k, num_spaces(), state_names().size());
  PTDP_CHECK_ARG(values != nullptr, "state values are NULL");
  Space& sp = *spaces_[static_cast<std::size_t>(s)];
  const bool muon = config_.kind == OptimizerKind::Muon;
  Tensor& state = (k == 0 || (muon && k == 1)) ? sp.m : sp.v;
  const std::vector<GradBucket>& buckets = sp.buckets->buckets();
  for (std::size_t bi = 0; bi < buckets.size(); ++bi) {
    const GradBucket& b = buckets[bi];
    if (!muon) {
      state.backend().copy_from_host(state.data<float>() + b.state_offset, values + b.shard_lo,
                                     static_cast<std::size_t>(b.shard_hi - b.shard_lo) * sizeof(float));
      continue;
    }
    for_each_part(sp.segments, b, [&](std::size_t j, int64_t lo, int64_t hi) {
      if (sp.matrix[j] != (k == 0)) return;
      float* dst = k == 2 ? state.data<float>() + sp.v_at[bi][j] : state.data<float>() + b.state_offset + (lo - b.shard_lo);
      state.backend().copy_from_host(dst, values + lo, static_cast<std::size_t>(hi - lo) * sizeof(float));
    });
  }
}

Optimizer::Counters Optimizer::counters() const {
  Counters c;
  c.steps = steps_;
  c.skipped = skipped_;
  c.loss_scale = scaler_.scale();
  c.growth_tracker = scaler_.growth_tracker();
  c.hysteresis_left = scaler_.hysteresis_left();
  return c;
}

void Optimizer::restore(const Counters& c) {
  PTDP_CHECK_ARG(c.steps >= 0 && c.skipped >= 0, "optimizer counters must be >= 0, got steps " +
                                                      std::to_string(c.steps) + " and skipped " +
                                                      std::to_string(c.skipped));
  scaler_.restore(c.loss_scale, c.growth_tracker, c.hysteresis_left);
  steps_ = c.steps;
  skipped_ = c.skipped;
}

std::size_t Optimizer::state_bytes() const {
  std::size_t bytes = 0;
  for (const auto& s : spaces_) {
    bytes += s->m.nbytes() + (s->v.defined() ? s->v.nbytes() : 0);
    // With 16-bit model weights the fp32 parameters (this rank's shards of them, with the
    // distributed optimizer) are the optimizer's master copy.
    if (s->table->model_dtype() != DType::F32)
      bytes += static_cast<std::size_t>(s->table->master_elements()) * sizeof(float);
  }
  return bytes;
}

}  // namespace ptdp
