#include "core/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "kernels/error.h"

namespace ptdp {

void OptimizerConfig::validate() const {
  lr.validate();
  PTDP_CHECK_ARG(kind == OptimizerKind::Adam || kind == OptimizerKind::Sgd,
                 "optimizer kind " + std::to_string(static_cast<int>(kind)) + " is not adam or sgd");
  PTDP_CHECK_ARG(beta1 >= 0 && beta1 < 1, "adam beta1 must be in [0, 1), got " + std::to_string(beta1));
  PTDP_CHECK_ARG(beta2 >= 0 && beta2 < 1, "adam beta2 must be in [0, 1), got " + std::to_string(beta2));
  PTDP_CHECK_ARG(eps > 0, "adam eps must be > 0, got " + std::to_string(eps));
  PTDP_CHECK_ARG(weight_decay >= 0, "weight decay must be >= 0, got " + std::to_string(weight_decay));
  PTDP_CHECK_ARG(momentum >= 0, "sgd momentum must be >= 0, got " + std::to_string(momentum));
  PTDP_CHECK_ARG(clip_grad >= 0, "clip grad must be >= 0 (0: off), got " + std::to_string(clip_grad));
  PTDP_CHECK_ARG(bucket_elements >= 0, "bucket size must be >= 0, got " + std::to_string(bucket_elements));
  LossScaler check(loss_scale);  // validates
  (void)check;
}

struct Optimizer::Bucket {
  int64_t lo = 0, hi = 0;            // range of the flat buffers
  int64_t shard_lo = 0, shard_hi = 0;  // this rank's part of it (the whole range unless distributed)
  int64_t state_offset = 0;          // where the shard's optimizer state starts
  int pending = 0;                   // parameters overlapping the bucket not yet ready
  bool launched = false;
  Tensor shard_grad;                 // reduce-scattered gradients (distributed)
  WorkPtr work;
};

struct Optimizer::Space {
  ParamTable* table = nullptr;
  std::vector<ParamSpace::Segment> segments;
  std::vector<Bucket> buckets;
  std::vector<std::vector<int>> buckets_of_param;
  std::vector<bool> ready;
  Tensor m, v;  // optimizer state over the concatenated shards
};

Optimizer::Optimizer(std::vector<ParamTable*> spaces, const std::vector<std::vector<int>>& excluded,
                     OptimizerConfig config, ProcessGroups& groups)
    : config_(config), groups_(groups), scaler_(config.loss_scale) {
  config_.validate();
  const int d = groups.size(GroupKind::Data), r = groups.rank(GroupKind::Data);
  const int tp_rank = groups.rank(GroupKind::Tensor);
  for (std::size_t si = 0; si < spaces.size(); ++si) {
    auto sp = std::make_unique<Space>();
    ParamTable& t = *spaces[si];
    sp->table = &t;
    std::set<int> skip;
    if (si < excluded.size()) skip.insert(excluded[si].begin(), excluded[si].end());
    for (int i = 0; i < t.size(); ++i) {
      const ParamInfo& p = t.info(i);
      sp->segments.push_back({p.offset, p.local_shape.numel(), p.weight_decay,
                              (p.partition_dim >= 0 || tp_rank == 0) && skip.count(i) == 0});
    }
    // Buckets over the buffer padded to a multiple of d, from the end (the backward produces
    // the last parameters first), each a multiple of d long so it shards evenly.
    const int64_t n = (t.numel() + d - 1) / d * d;
    t.reserve(n);
    const int64_t size = config_.bucket_elements > 0 ? (config_.bucket_elements + d - 1) / d * d : n;
    for (int64_t hi = n; hi > 0;) {
      Bucket b;
      b.hi = hi;
      b.lo = std::max<int64_t>(0, hi - size);
      hi = b.lo;
      sp->buckets.push_back(std::move(b));
    }
    sp->buckets_of_param.resize(static_cast<std::size_t>(t.size()));
    int64_t state = 0;
    for (std::size_t k = 0; k < sp->buckets.size(); ++k) {
      Bucket& b = sp->buckets[k];
      const int64_t len = b.hi - b.lo;
      b.shard_lo = config_.distributed ? b.lo + r * (len / d) : b.lo;
      b.shard_hi = config_.distributed ? b.shard_lo + len / d : b.hi;
      b.state_offset = state;
      state += b.shard_hi - b.shard_lo;
      if (config_.distributed && d > 1) b.shard_grad = Tensor::zeros({len / d}, DType::F32, t.flat_params().device());
      for (int i = 0; i < t.size(); ++i) {
        const auto& s = sp->segments[static_cast<std::size_t>(i)];
        if (s.offset < b.hi && s.offset + s.numel > b.lo) {
          sp->buckets_of_param[static_cast<std::size_t>(i)].push_back(static_cast<int>(k));
          ++b.pending;
        }
      }
    }
    const int64_t state_elems = config_.kind == OptimizerKind::Adam || config_.momentum > 0 ? state : 0;
    const Device device = t.flat_params().device();  // the state lives with the parameters
    sp->m = Tensor::zeros({state_elems}, DType::F32, device);
    if (config_.kind == OptimizerKind::Adam) sp->v = Tensor::zeros({state_elems}, DType::F32, device);
    sp->ready.assign(static_cast<std::size_t>(t.size()), false);
    spaces_.push_back(std::move(sp));
  }
}

Optimizer::~Optimizer() {
  // Reductions still in flight must finish before their buffers go.
  for (auto& s : spaces_)
    for (Bucket& b : s->buckets)
      if (b.work) {
        try {
          b.work->wait();
        } catch (...) {
        }
      }
}

void Optimizer::launch(Space& s, Bucket& b) {
  b.launched = true;
  const int d = groups_.size(GroupKind::Data);
  if (d == 1) return;
  Communicator& dp = groups_.comm_for_tensors(GroupKind::Data, s.table->flat_grads().device());
  const Tensor grads = s.table->flat_grads().view(b.lo, {b.hi - b.lo});
  b.work = config_.distributed ? dp.reduce_scatter(grads, b.shard_grad, ReduceOp::Avg) : dp.all_reduce(grads, ReduceOp::Avg);
}

void Optimizer::params_ready(int space, int first, int end) {
  PTDP_CHECK_ARG(space >= 0 && space < static_cast<int>(spaces_.size()), "space " + std::to_string(space) + " out of range");
  Space& s = *spaces_[static_cast<std::size_t>(space)];
  for (int i = std::max(0, first); i < std::min(end, s.table->size()); ++i) {
    if (s.ready[static_cast<std::size_t>(i)]) continue;
    s.ready[static_cast<std::size_t>(i)] = true;
    for (int k : s.buckets_of_param[static_cast<std::size_t>(i)]) {
      Bucket& b = s.buckets[static_cast<std::size_t>(k)];
      if (--b.pending == 0 && !b.launched) launch(s, b);
    }
  }
}

void Optimizer::finish_grad_sync() {
  for (auto& s : spaces_) {
    for (Bucket& b : s->buckets) {
      if (!b.launched) launch(*s, b);
      if (b.work) {
        b.work->wait();
        b.work.reset();
      }
    }
  }
}

StepResult Optimizer::step(int64_t iteration) {
  finish_grad_sync();
  const bool sharded = config_.distributed && groups_.size(GroupKind::Data) > 1;
  const bool count_norm_here = config_.distributed || groups_.rank(GroupKind::Data) == 0;
  // Every space lives on one device (the model's); its backend does the arithmetic.
  Backend& be = spaces_.front()->table->flat_params().backend();
  // The gradient of element e of bucket b (within its shard range) lives here.
  auto grad_ptr = [&](Space& s, Bucket& b, int64_t e) {
    return sharded ? b.shard_grad.data<float>() + (e - b.shard_lo) : s.table->flat_grads().data<float>() + e;
  };
  const float inv_scale = 1.0f / scaler_.scale();
  double local = 0.0;
  for (auto& s : spaces_) {
    for (Bucket& b : s->buckets) {
      float* g = grad_ptr(*s, b, b.shard_lo);
      if (inv_scale != 1.0f) be.scale(g, inv_scale, b.shard_hi - b.shard_lo);
      for (const auto& seg : s->segments) {
        const int64_t lo = std::max(seg.offset, b.shard_lo), hi = std::min(seg.offset + seg.numel, b.shard_hi);
        if (lo >= hi) continue;
        const double sq = be.sum_squares(grad_ptr(*s, b, lo), hi - lo);
        // Every rank checks its own gradients for inf/nan; the norm counts each element once.
        if (!std::isfinite(sq)) local = std::numeric_limits<double>::infinity();
        else if (seg.in_norm && count_norm_here) local += sq;
      }
    }
  }
  // One all-reduce over every rank: [norm^2 part, inf flag].
  float agree[2] = {std::isfinite(local) ? static_cast<float>(local) : 0.0f, std::isfinite(local) ? 0.0f : 1.0f};
  groups_.comm(GroupKind::World).all_reduce(Tensor::borrow(agree, {2}, DType::F32), ReduceOp::Sum)->wait();
  StepResult res;
  res.lr = config_.lr.at(iteration);
  res.loss_scale = scaler_.scale();
  for (auto& s : spaces_) std::fill(s->ready.begin(), s->ready.end(), false);
  for (auto& s : spaces_)
    for (Bucket& b : s->buckets) {
      b.launched = false;
      b.pending = 0;
    }
  for (auto& s : spaces_)
    for (std::size_t i = 0; i < s->buckets_of_param.size(); ++i)
      for (int k : s->buckets_of_param[i]) ++s->buckets[static_cast<std::size_t>(k)].pending;
  if (agree[1] > 0.0f) {
    res.grad_norm = std::numeric_limits<double>::infinity();
    res.skipped = true;
    ++skipped_;
    scaler_.update(true);
    return res;
  }
  res.grad_norm = std::sqrt(static_cast<double>(agree[0]));
  const float clip = config_.clip_grad > 0 && res.grad_norm > config_.clip_grad
                         ? static_cast<float>(config_.clip_grad / (res.grad_norm + 1e-6))
                         : 1.0f;
  ++steps_;
  for (auto& s : spaces_) {
    for (Bucket& b : s->buckets) {
      if (clip != 1.0f) be.scale(grad_ptr(*s, b, b.shard_lo), clip, b.shard_hi - b.shard_lo);
      for (const auto& seg : s->segments) {
        const int64_t lo = std::max(seg.offset, b.shard_lo), hi = std::min(seg.offset + seg.numel, b.shard_hi);
        if (lo >= hi) continue;
        float* p = s->table->flat_params().data<float>() + lo;
        const float* g = grad_ptr(*s, b, lo);
        const int64_t st = b.state_offset + (lo - b.shard_lo);
        const float wd = seg.weight_decay ? config_.weight_decay : 0.0f;
        if (config_.kind == OptimizerKind::Adam) {
          AdamWParams a;
          a.lr = static_cast<float>(res.lr);
          a.beta1 = config_.beta1;
          a.beta2 = config_.beta2;
          a.eps = config_.eps;
          a.weight_decay = wd;
          a.step = steps_;
          be.adamw_step(p, g, s->m.data<float>() + st, s->v.data<float>() + st, hi - lo, a);
        } else {
          SgdParams q;
          q.lr = static_cast<float>(res.lr);
          q.momentum = config_.momentum;
          q.weight_decay = wd;
          q.nesterov = config_.nesterov;
          q.first_step = steps_ == 1;
          be.sgd_step(p, g, config_.momentum > 0 ? s->m.data<float>() + st : nullptr, hi - lo, q);
        }
      }
    }
  }
  if (sharded) {  // every replica gets every shard's new values
    Communicator& dp = groups_.comm_for_tensors(GroupKind::Data, spaces_.front()->table->flat_params().device());
    for (auto& s : spaces_) {
      for (Bucket& b : s->buckets) {
        Tensor mine = Tensor::empty({b.shard_hi - b.shard_lo}, DType::F32, s->table->flat_params().device());
        be.copy(mine.raw(), s->table->flat_params().data<float>() + b.shard_lo, mine.nbytes());
        dp.all_gather(mine, s->table->flat_params().view(b.lo, {b.hi - b.lo}))->wait();
      }
    }
  }
  for (auto& s : spaces_) s->table->sync_weights();  // 16-bit model weights follow the masters
  scaler_.update(false);
  return res;
}

std::vector<std::string> Optimizer::state_names() const {
  if (config_.kind == OptimizerKind::Adam) return {"exp_avg", "exp_avg_sq"};
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

std::vector<float> Optimizer::get_state(int s, int k) {
  check_state_index(s, k, num_spaces(), state_names().size());
  Space& sp = *spaces_[static_cast<std::size_t>(s)];
  const Tensor& state = k == 0 ? sp.m : sp.v;
  std::vector<float> out(static_cast<std::size_t>(sp.table->capacity()), 0.0f);
  const bool sharded = config_.distributed && groups_.size(GroupKind::Data) > 1;
  Backend& be = state.backend();
  for (Bucket& b : sp.buckets) {
    const float* mine = state.data<float>() + b.state_offset;
    if (!sharded) {
      be.copy_to_host(out.data() + b.lo, mine, static_cast<std::size_t>(b.hi - b.lo) * sizeof(float));
      continue;
    }
    Tensor shard = Tensor::empty({b.shard_hi - b.shard_lo}, DType::F32);
    be.copy_to_host(shard.raw(), mine, shard.nbytes());
    groups_.comm(GroupKind::Data)
        .all_gather(shard, Tensor::borrow(out.data() + b.lo, {b.hi - b.lo}, DType::F32))
        ->wait();
  }
  return out;
}

void Optimizer::set_state(int s, int k, const float* values) {
  check_state_index(s, k, num_spaces(), state_names().size());
  PTDP_CHECK_ARG(values != nullptr, "state values are NULL");
  Space& sp = *spaces_[static_cast<std::size_t>(s)];
  Tensor& state = k == 0 ? sp.m : sp.v;
  for (const Bucket& b : sp.buckets)
    state.backend().copy_from_host(state.data<float>() + b.state_offset, values + b.shard_lo,
                                   static_cast<std::size_t>(b.shard_hi - b.shard_lo) * sizeof(float));
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
    // With 16-bit model weights the flat fp32 parameters are the optimizer's master copy.
    if (s->table->model_dtype() != DType::F32) bytes += s->table->flat_params().nbytes();
  }
  return bytes;
}

}  // namespace ptdp
