#include "core/layers/moe/router.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/error.h"

namespace ptdp {

namespace {

// The indices of the k largest of v[0..n) (ties: the lower index first), best first.
std::vector<int> top_indices(const float* v, int n, int k, const std::vector<bool>* allowed = nullptr) {
  std::vector<int> idx;
  for (int i = 0; i < n; ++i)
    if (!allowed || (*allowed)[static_cast<std::size_t>(i)]) idx.push_back(i);
  const auto better = [&](int a, int b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
  idx.resize(static_cast<std::size_t>(k));
  return idx;
}

// f32 view of a parameter (the router computes in fp32, Megatron's --moe-router-dtype fp32).
Tensor f32(const Tensor& t) { return t.dtype() == DType::F32 ? t : t.to(DType::F32); }

}  // namespace

void route_rows(const Tensor& expert, int64_t slots, const std::vector<int64_t>& pad, int experts, Tensor* row_of,
                std::vector<int64_t>* counts) {
  Backend& be = expert.backend();
  const int64_t padding = std::accumulate(pad.begin(), pad.end(), int64_t{0});
  counts->assign(static_cast<std::size_t>(experts), 0);
  *row_of = Tensor::empty({slots + padding}, DType::I32, expert.device());  // [slots + padding] int32
  if (slots + padding == 0) return;
  Tensor idx = expert;  // [slots (+ padding)] int32
  if (padding > 0) {
    // The zero rows as extra slots after the real ones: the stable sort puts them after each
    // expert's real rows, in source order, and nothing maps to them.
    std::vector<int32_t> tail;
    for (std::size_t i = 0; i < pad.size(); ++i)
      tail.insert(tail.end(), static_cast<std::size_t>(pad[i]),
                  static_cast<int32_t>(i % static_cast<std::size_t>(experts)));
    idx = Tensor::empty({slots + padding}, DType::I32, expert.device());
    if (slots > 0) be.copy(idx.raw(), expert.raw(), static_cast<std::size_t>(slots) * sizeof(int32_t));
    be.copy_from_host(element_ptr(idx, slots), tail.data(), tail.size() * sizeof(int32_t));
  }
  be.moe_route(idx.data<int32_t>(), slots + padding, 1, experts, row_of->data<int32_t>(), counts->data());
}

TopKRouter::TopKRouter(ParamTable& params, const std::string& prefix, const LayerConfig& cfg, TensorParallel tp)
    : params_(params), cfg_(cfg), tp_(tp), slots_(prefix) {
  const int64_t e = cfg.moe.num_experts, h = cfg.hidden_size;
  weight_ = params.add(prefix + ".weight", {e, h}, -1, ParamInit::Normal, cfg.init_method_std);
  if (cfg.add_bias_linear) bias_ = params.add(prefix + ".bias", {e}, -1, ParamInit::Zeros, 0.0f, false);
  if (cfg.moe.enable_expert_bias) expert_bias_ = params.add(prefix + ".expert_bias", {e}, -1, ParamInit::Zeros, 0.0f, false);
  if (tp.sequence_parallel && tp.size > 1) {
    params.set_tp_reduced_grad(weight_);
    if (bias_ >= 0) params.set_tp_reduced_grad(bias_);
  }
}

Tensor TopKRouter::expert_bias_values() const {
  if (expert_bias_ < 0) return {};
  // The fp32 masters (Megatron keeps the bias in fp32); with sharded masters the model copy.
  return params_.masters_sharded() ? f32(params_.weight(expert_bias_)) : params_.param(expert_bias_);
}

bool TopKRouter::grouped(const Step& step) const {
  const bool sharded = tp_.sequence_sharded(step.decoding);
  PTDP_CHECK_ARG(sharded || tp_.size == 1 || tp_.cp.size == 1,
                 "MoE router: tensor ranks that hold whole copies of the tokens cannot share them over context ranks");
  return sharded || tp_.cp.size > 1;
}

int TopKRouter::group_size(const Step& step) const { return grouped(step) ? tp_.ep.tp_cp_size : 1; }

int64_t TopKRouter::global_position(int r, int64_t j, int64_t rows, int64_t b, const Step& step) const {
  if (!grouped(step)) return j;
  const bool sharded = tp_.sequence_sharded(step.decoding);
  const int t = sharded ? tp_.size : 1;
  const int64_t row = (r % t) * rows + j;  // in the context rank's [s/c * b] activation
  ContextParallel cp = tp_.cp;
  cp.rank = r / t;
  const int64_t si = cp.global_position(row / b, cfg_.seq_length / cp.size);
  return si * b + row % b;
}

RouterDesc TopKRouter::desc(int64_t tokens) const {
  const MoeConfig& m = cfg_.moe;
  RouterDesc d;
  d.tokens = tokens;
  d.experts = m.num_experts;
  d.topk = m.router_topk;
  d.score = m.score_function == MoeScoreFunction::Softmax ? RouterScore::Softmax : RouterScore::Sigmoid;
  d.pre_softmax = m.pre_softmax && d.score == RouterScore::Softmax;
  if (m.group_topk > 0) {
    d.num_groups = m.num_groups;
    d.group_topk = m.group_topk;
    d.group_score_topk = m.group_score_topk;
  }
  d.scaling_factor = m.topk_scaling_factor > 0.0f ? m.topk_scaling_factor : 0.0f;
  return d;
}

void TopKRouter::group_sum(std::vector<double>& v, const Tensor& like, const Step& step) const {
  if (group_size(step) == 1) return;
  // Counts and score sums: fp32 sums of integers below 2^24 are exact; the scores' sums are
  // summed in double on the host first.
  std::vector<float> f(v.begin(), v.end());
  Tensor t = Tensor::from_host(f.data(), {static_cast<int64_t>(f.size())}, DType::F32, like.device());
  tp_.ep.tp_cp_comm->all_reduce(t, ReduceOp::Sum)->wait();
  t.copy_to_host(f.data(), f.size() * sizeof(float));
  std::copy(f.begin(), f.end(), v.begin());
}

std::vector<double> TopKRouter::global_counts(const std::vector<double>& counts, const Tensor& like,
                                              const Step& step) {
  const auto seen = global_average_.find(step.microbatch);
  if (seen != global_average_.end()) return seen->second;  // a recomputed forward
  std::vector<double> sum(counts);
  if (tp_.ep.dp_size > 1) {
    // Integer counts: fp32 sums below 2^24 are exact.
    std::vector<float> f(sum.begin(), sum.end());
    Tensor t = Tensor::from_host(f.data(), {static_cast<int64_t>(f.size())}, DType::F32, like.device());
    tp_.ep.dp_comm->all_reduce(t, ReduceOp::Sum)->wait();
    t.copy_to_host(f.data(), f.size() * sizeof(float));
    std::copy(f.begin(), f.end(), sum.begin());
  }
  if (global_counts_.empty()) global_counts_.assign(sum.size(), 0.0);
  for (std::size_t i = 0; i < sum.size(); ++i) global_counts_[i] += sum[i];
  ++global_steps_;
  std::vector<double> mean(sum.size());
  for (std::size_t i = 0; i < sum.size(); ++i) mean[i] = global_counts_[i] / static_cast<double>(global_steps_);
  return global_average_[step.microbatch] = std::move(mean);
}

void TopKRouter::drop_over_capacity(std::vector<int32_t>& expert, std::vector<float>& prob, std::vector<int64_t>& pad,
                                    const Tensor& like, const Step& step, int64_t b) const {
  const MoeConfig& m = cfg_.moe;
  const int e = m.num_experts, k = m.router_topk, g = group_size(step);
  const int64_t n = static_cast<int64_t>(expert.size()) / k, total = n * g;
  // Every rank's choices and weights, in group-rank order.
  std::vector<int32_t> all_expert(expert);
  std::vector<float> all_prob(prob);
  if (g > 1) {
    all_expert.resize(static_cast<std::size_t>(total * k));
    all_prob.resize(static_cast<std::size_t>(total * k));
    Tensor ex = Tensor::from_host(expert.data(), {n * k}, DType::I32, like.device());
    Tensor pr = Tensor::from_host(prob.data(), {n * k}, DType::F32, like.device());
    Tensor all_ex = Tensor::empty({total * k}, DType::I32, like.device());
    Tensor all_pr = Tensor::empty({total * k}, DType::F32, like.device());
    tp_.ep.tp_cp_comm->all_gather(ex, all_ex)->wait();
    tp_.ep.tp_cp_comm->all_gather(pr, all_pr)->wait();
    all_ex.copy_to_host(all_expert.data(), all_expert.size() * sizeof(int32_t));
    all_pr.copy_to_host(all_prob.data(), all_prob.size() * sizeof(float));
  }
  const auto capacity = static_cast<int64_t>(
      std::ceil(static_cast<double>(total * k) / static_cast<double>(e) * static_cast<double>(m.capacity_factor)));
  const int me = g > 1 ? tp_.ep.tp_cp_rank : 0;
  // Per expert, its (position, slot in the gathered arrays) pairs.
  struct Pair {
    int64_t position, slot;
  };
  std::vector<std::vector<Pair>> by_expert(static_cast<std::size_t>(e));
  for (int rank = 0; rank < g; ++rank) {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t pos = global_position(rank, j, n, b, step);
      for (int c = 0; c < k; ++c) {
        const int64_t slot = (rank * n + j) * k + c;
        by_expert[static_cast<std::size_t>(all_expert[static_cast<std::size_t>(slot)])].push_back({pos, slot});
      }
    }
  }
  pad.assign(static_cast<std::size_t>(e), 0);
  for (int x = 0; x < e; ++x) {
    std::vector<Pair>& pairs = by_expert[static_cast<std::size_t>(x)];
    const auto earlier = [](const Pair& a, const Pair& c) { return a.position < c.position; };
    const auto likelier = [&](const Pair& a, const Pair& c) {
      const float pa = all_prob[static_cast<std::size_t>(a.slot)], pc = all_prob[static_cast<std::size_t>(c.slot)];
      return pa > pc || (pa == pc && a.position < c.position);
    };
    if (m.drop_policy == MoeDropPolicy::Probs) std::sort(pairs.begin(), pairs.end(), likelier);
    else std::sort(pairs.begin(), pairs.end(), earlier);
    // Megatron keeps every pair when the capacity exceeds the tokens.
    const int64_t keep = capacity > total ? static_cast<int64_t>(pairs.size())
                                          : std::min<int64_t>(capacity, static_cast<int64_t>(pairs.size()));
    for (std::size_t i = static_cast<std::size_t>(keep); i < pairs.size(); ++i) {
      const int64_t slot = pairs[i].slot;
      if (slot / (n * k) != me) continue;
      expert[static_cast<std::size_t>(slot - me * n * k)] = -1;
      prob[static_cast<std::size_t>(slot - me * n * k)] = 0.0f;
    }
    // Padding to capacity: the group's first rank adds the microbatch's zero rows.
    if (m.pad_expert_input_to_capacity && me == 0) pad[static_cast<std::size_t>(x)] = std::min(capacity, total) - keep;
  }
}

void TopKRouter::balancing_losses(Slot& s, const Tensor& like, const Step& step, int64_t b, RouterStats& stats) {
  const MoeConfig& m = cfg_.moe;
  const int e = m.num_experts, k = m.router_topk;
  const int64_t n = s.routing.tokens;
  const bool seq = m.load_balancing == MoeLoadBalancing::SeqAuxLoss;
  const int64_t groups = seq ? b : 1;  // samples for seq_aux_loss, else the whole microbatch
  std::vector<double> counts(static_cast<std::size_t>(groups * e), 0.0), score_sum(counts.size(), 0.0);
  // The scores on the device, their per-expert (and per-sample) histogram of top-k and sums on
  // the host: no Backend op bins top-k choices by sample (see the top of router.h).
  Tensor scores = Tensor::empty({n, e}, DType::F32, like.device());  // [N, E] fp32
  like.backend().moe_aux_scores_forward(desc(n).score, s.logits.data<float>(), n, e, scores.data<float>());
  std::vector<float> all(static_cast<std::size_t>(n * e));
  scores.copy_to_host(all.data(), all.size() * sizeof(float));
  for (int64_t j = 0; j < n; ++j) {
    const float* sc = all.data() + j * e;
    const int64_t base = (seq ? s.sample[static_cast<std::size_t>(j)] : 0) * e;
    for (int i : top_indices(sc, e, k)) counts[static_cast<std::size_t>(base + i)] += 1.0;
    for (int i = 0; i < e; ++i) score_sum[static_cast<std::size_t>(base + i)] += sc[i];
  }
  group_sum(counts, like, step);
  // T: the tokens each count is over (a sample's s for seq_aux_loss; the d replicas'
  // microbatches for global_aux_loss, whose counts are their running mean).
  double t = seq ? static_cast<double>(cfg_.seq_length) : s.tokens;
  if (m.load_balancing == MoeLoadBalancing::GlobalAuxLoss) {
    counts = global_counts(counts, like, step);
    t *= static_cast<double>(tp_.ep.dp_size);
  }
  const double per = static_cast<double>(e) / (static_cast<double>(k) * t * t) / static_cast<double>(groups);
  s.aux_weight.assign(counts.size(), 0.0);
  double value = 0.0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    s.aux_weight[i] = static_cast<double>(m.aux_loss_coeff) * counts[i] * per;
    value += score_sum[i] * counts[i] * per;
  }
  stats.load_balancing_loss = value;
}

const Routing& TopKRouter::forward(const Tensor& x_in, const Step& step) {
  const MoeConfig& m = cfg_.moe;
  const int64_t h = cfg_.hidden_size, e = m.num_experts, k = m.router_topk;
  const int64_t n = rows_of(x_in, h, "router input");
  Backend& be = x_in.backend();
  Slot& s = slots_.create(step.microbatch);
  s.sharded = tp_.sequence_sharded(step.decoding);
  // fp32 routing (Megatron's --moe-router-dtype fp32): the input and weight cast up.
  s.x = f32(x_in);                                                      // [N, h] fp32
  s.logits = Tensor::empty({n, e}, DType::F32, x_in.device());          // [N, E] fp32
  const Tensor b32 = bias_ >= 0 ? f32(params_.weight(bias_)) : Tensor();  // [E] fp32
  linear_forward(s.x, f32(params_.weight(weight_)), bias_ >= 0 ? &b32 : nullptr, s.logits);
  Routing& r = s.routing;
  r.tokens = n;
  r.k = m.router_topk;
  s.selected = Tensor::empty({n, k}, DType::I32, x_in.device());  // [N, k] int32
  r.prob = Tensor::empty({n, k}, DType::F32, x_in.device());      // [N, k] fp32
  const Tensor ebias = expert_bias_values();                      // [E] fp32
  if (n > 0)
    be.moe_router_forward(desc(n), s.logits.data<float>(), ebias.defined() ? ebias.data<float>() : nullptr,
                          s.selected.data<int32_t>(), r.prob.data<float>());
  r.expert = s.selected;
  r.pad.assign(static_cast<std::size_t>(e), 0);
  const int g = group_size(step);
  s.tokens = static_cast<double>(n * g);
  // Samples in the microbatch: the token group holds s * b rows (decoding: one sequence).
  const int64_t b = step.decoding ? 1 : std::max<int64_t>(1, n * g / cfg_.seq_length);
  if (m.capacity_factor > 0.0f) {
    // The drops on the host (see the top of router.h): the slots' experts and weights come
    // back, and the kept ones go down again.
    std::vector<int32_t> ex(static_cast<std::size_t>(n * k));
    std::vector<float> pr(ex.size());
    s.selected.copy_to_host(ex.data(), ex.size() * sizeof(int32_t));
    r.prob.copy_to_host(pr.data(), pr.size() * sizeof(float));
    drop_over_capacity(ex, pr, r.pad, x_in, step, b);
    r.expert = Tensor::from_host(ex.data(), {n, k}, DType::I32, x_in.device());
    r.prob = Tensor::from_host(pr.data(), {n, k}, DType::F32, x_in.device());
  }
  // The per-expert counts come to the host here, once per layer and microbatch (as Megatron's
  // tokens_per_expert): they size the exchange and the grouped GEMMs.
  route_rows(r.expert, n * k, r.pad, static_cast<int>(e), &r.row_of, &r.counts);
  if (!step.training || step.decoding) return r;
  RouterStats st;
  st.tokens_per_expert.assign(static_cast<std::size_t>(e), 0.0);
  for (int64_t x = 0; x < e; ++x)
    st.tokens_per_expert[static_cast<std::size_t>(x)] =
        static_cast<double>(r.counts[static_cast<std::size_t>(x)] - r.pad[static_cast<std::size_t>(x)]);
  if (m.aux_loss_coeff > 0.0f && m.load_balancing != MoeLoadBalancing::None) {
    s.sample.resize(static_cast<std::size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      const int64_t row = (s.sharded ? tp_.rank : 0) * n + j;  // in the context rank's activation
      s.sample[static_cast<std::size_t>(j)] = static_cast<int32_t>(row % b);
    }
    balancing_losses(s, x_in, step, b, st);
  }
  if (m.z_loss_coeff > 0.0f) {
    s.lse = Tensor::empty({n}, DType::F32, x_in.device());  // [N] fp32
    be.moe_router_lse(s.logits.data<float>(), n, e, s.lse.data<float>());
    std::vector<float> lse(static_cast<std::size_t>(n));
    s.lse.copy_to_host(lse.data(), lse.size() * sizeof(float));
    double z = 0.0;
    for (float v : lse) z += static_cast<double>(v) * v;
    st.z_loss = z / s.tokens;
  }
  stats_[step.microbatch] = std::move(st);
  return r;
}

Tensor TopKRouter::backward_input(const Tensor& dprob, const Step& step) {
  Slot& s = slots_.get(step.microbatch);
  const MoeConfig& m = cfg_.moe;
  const int64_t e = m.num_experts, k = m.router_topk, n = s.routing.tokens;
  PTDP_CHECK_ARG(dprob.numel() == n * k && dprob.dtype() == DType::F32,
                 "router: weight gradient " + dprob.str() + " for " + std::to_string(n) + " tokens of " +
                     std::to_string(k) + " choices (fp32 expected)");
  Backend& be = s.x.backend();
  s.dlogits = Tensor::empty({n, e}, DType::F32, s.x.device());  // [N, E] fp32
  if (n > 0) be.moe_router_backward(desc(n), s.logits.data<float>(), s.selected.data<int32_t>(), dprob.data<float>(),
                                    s.dlogits.data<float>(), false);
  if (!s.aux_weight.empty() && n > 0) {
    // d(loss)/d(score) is the same for every token of a sample (of the microbatch): spread to
    // [N, E] on the host and applied through the scores' backward on the device.
    const bool seq = m.load_balancing == MoeLoadBalancing::SeqAuxLoss;
    std::vector<float> ds(static_cast<std::size_t>(n * e));
    for (int64_t j = 0; j < n; ++j) {
      const int64_t base = (seq ? s.sample[static_cast<std::size_t>(j)] : 0) * e;
      for (int64_t i = 0; i < e; ++i)
        ds[static_cast<std::size_t>(j * e + i)] =
            static_cast<float>(step.grad_scale * s.aux_weight[static_cast<std::size_t>(base + i)]);
    }
    const Tensor dscores = Tensor::from_host(ds.data(), {n, e}, DType::F32, s.x.device());  // [N, E] fp32
    be.moe_aux_scores_backward(desc(n).score, s.logits.data<float>(), dscores.data<float>(), n, e,
                               s.dlogits.data<float>(), true);
  }
  if (m.z_loss_coeff > 0.0f && step.training && n > 0) {
    const auto scale = static_cast<float>(step.grad_scale * static_cast<double>(m.z_loss_coeff) / s.tokens);
    be.moe_router_z_loss_backward(s.logits.data<float>(), s.lse.data<float>(), scale, n, e, s.dlogits.data<float>(),
                                  true);
  }
  Tensor dx = Tensor::empty({n, static_cast<int64_t>(cfg_.hidden_size)}, DType::F32, s.x.device());  // [N, h] fp32
  linear_dgrad(s.dlogits, f32(params_.weight(weight_)), dx);
  return cfg_.precision == DType::F32 ? dx : dx.to(cfg_.precision);
}

void TopKRouter::backward_weight(const Step& step) {
  Slot& s = slots_.get(step.microbatch);
  PTDP_CHECK_ARG(s.dlogits.defined(), "router backward_weight before backward_input");
  const int64_t e = cfg_.moe.num_experts, h = cfg_.hidden_size;
  // Under sequence parallelism each tensor rank saw its own tokens: the partial gradients go
  // through scratch and are summed over the tensor group (as the norms').
  const bool reduce = s.sharded && tp_.size > 1;
  Tensor dw = reduce ? Tensor::zeros({e, h}, DType::F32, s.x.device()) : params_.grad(weight_);  // [E, h] fp32
  Tensor db;  // [E] fp32
  if (bias_ >= 0) db = reduce ? Tensor::zeros({e}, DType::F32, s.x.device()) : params_.grad(bias_);
  linear_wgrad(s.dlogits, s.x, dw, bias_ >= 0 ? &db : nullptr);
  if (reduce) {
    Backend& be = dw.backend();
    tp_.all_reduce(dw);
    be.axpy(1.0f, dw.data<float>(), params_.grad(weight_).data<float>(), e * h);
    if (db.defined()) {
      tp_.all_reduce(db);
      be.axpy(1.0f, db.data<float>(), params_.grad(bias_).data<float>(), e);
    }
  }
  slots_.release(step.microbatch);
}

}  // namespace ptdp
