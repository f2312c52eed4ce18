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

// Megatron's group_limited_topk: the k best of `scores` [E] within the group_topk groups whose
// best k / group_topk scores sum highest.
std::vector<int> limited_top(const float* scores, const MoeConfig& m) {
  const int e = m.num_experts;
  if (m.group_topk <= 0) return top_indices(scores, e, m.router_topk);
  const int per_group = e / m.num_groups, best = m.router_topk / m.group_topk;
  std::vector<float> group_score(static_cast<std::size_t>(m.num_groups));
  for (int g = 0; g < m.num_groups; ++g) {
    float sum = 0.0f;
    for (int i : top_indices(scores + g * per_group, per_group, best)) sum += scores[g * per_group + i];
    group_score[static_cast<std::size_t>(g)] = sum;
  }
  std::vector<bool> allowed(static_cast<std::size_t>(e), false);
  for (int g : top_indices(group_score.data(), m.num_groups, m.group_topk))
    for (int i = 0; i < per_group; ++i) allowed[static_cast<std::size_t>(g * per_group + i)] = true;
  return top_indices(scores, e, m.router_topk, &allowed);
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// softmax(v[0..n)) into out, in fp32 with the max subtracted.
void softmax(const float* v, int n, float* out) {
  const float mx = *std::max_element(v, v + n);
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += out[i] = std::exp(v[i] - mx);
  for (int i = 0; i < n; ++i) out[i] /= sum;
}

// The scores the balancing losses read ([E] per token): softmax, or sigmoid normalised to sum 1.
void aux_scores(const float* logits, const MoeConfig& m, float* out) {
  const int e = m.num_experts;
  if (m.score_function == MoeScoreFunction::Softmax) {
    softmax(logits, e, out);
    return;
  }
  float sum = 0.0f;
  for (int i = 0; i < e; ++i) sum += out[i] = sigmoid(logits[i]);
  for (int i = 0; i < e; ++i) out[i] /= sum + 1e-20f;
}

// Adds to dlogits [E] the gradient of aux_scores given dscores [E].
void aux_scores_backward(const float* logits, const MoeConfig& m, const double* dscores, float* dlogits) {
  const int e = m.num_experts;
  std::vector<float> s(static_cast<std::size_t>(e));
  if (m.score_function == MoeScoreFunction::Softmax) {
    softmax(logits, e, s.data());
    double dot = 0.0;
    for (int i = 0; i < e; ++i) dot += dscores[i] * s[static_cast<std::size_t>(i)];
    for (int i = 0; i < e; ++i) dlogits[i] += static_cast<float>(s[static_cast<std::size_t>(i)] * (dscores[i] - dot));
    return;
  }
  double sum = 0.0, dot = 0.0;
  for (int i = 0; i < e; ++i) sum += s[static_cast<std::size_t>(i)] = sigmoid(logits[i]);
  const double z = sum + 1e-20;
  for (int i = 0; i < e; ++i) dot += dscores[i] * s[static_cast<std::size_t>(i)];
  for (int i = 0; i < e; ++i) {
    const double g = s[static_cast<std::size_t>(i)];
    dlogits[i] += static_cast<float>((dscores[i] / z - dot / (z * z)) * g * (1.0 - g));
  }
}

}  // namespace

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

std::vector<float> TopKRouter::expert_bias_values() const {
  if (expert_bias_ < 0) return {};
  // The fp32 masters (Megatron keeps the bias in fp32); with sharded masters the model copy.
  const Tensor b = params_.masters_sharded() ? params_.weight(expert_bias_).to(DType::F32) : params_.param(expert_bias_);
  std::vector<float> out(static_cast<std::size_t>(b.numel()));
  b.copy_to_host(out.data(), out.size() * sizeof(float));
  return out;
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

void TopKRouter::route_token(const float* logits, const float* bias, int64_t n, Routing& r) const {
  const MoeConfig& m = cfg_.moe;
  const int e = m.num_experts, k = m.router_topk;
  int32_t* chosen = r.expert.data() + n * k;
  float* prob = r.prob.data() + n * k;
  std::vector<float> s(static_cast<std::size_t>(e));
  std::vector<int> top;
  if (m.score_function == MoeScoreFunction::Softmax && m.pre_softmax) {
    softmax(logits, e, s.data());
    top = limited_top(s.data(), m);
    for (int j = 0; j < k; ++j) prob[j] = s[static_cast<std::size_t>(top[static_cast<std::size_t>(j)])];
  } else if (m.score_function == MoeScoreFunction::Softmax) {
    top = limited_top(logits, m);
    std::vector<float> sel(static_cast<std::size_t>(k));
    for (int j = 0; j < k; ++j) sel[static_cast<std::size_t>(j)] = logits[top[static_cast<std::size_t>(j)]];
    softmax(sel.data(), k, prob);
  } else {
    for (int i = 0; i < e; ++i) s[static_cast<std::size_t>(i)] = sigmoid(logits[i]);
    std::vector<float> biased = s;
    if (bias)
      for (int i = 0; i < e; ++i) biased[static_cast<std::size_t>(i)] += bias[i];
    top = limited_top(biased.data(), m);
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum += prob[j] = s[static_cast<std::size_t>(top[static_cast<std::size_t>(j)])];
    if (k > 1)
      for (int j = 0; j < k; ++j) prob[j] /= sum + 1e-20f;
  }
  for (int j = 0; j < k; ++j) {
    chosen[j] = top[static_cast<std::size_t>(j)];
    if (m.topk_scaling_factor > 0.0f) prob[j] *= m.topk_scaling_factor;
  }
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

void TopKRouter::drop_over_capacity(Routing& r, const Tensor& like, const Step& step, int64_t b) const {
  const MoeConfig& m = cfg_.moe;
  const int e = m.num_experts, k = m.router_topk, g = group_size(step);
  const int64_t n = r.tokens, total = n * g;
  // Every rank's choices and weights, in group-rank order.
  std::vector<int32_t> all_expert(r.expert);
  std::vector<float> all_prob(r.prob);
  if (g > 1) {
    all_expert.resize(static_cast<std::size_t>(total * k));
    all_prob.resize(static_cast<std::size_t>(total * k));
    Tensor ex = Tensor::from_host(r.expert.data(), {n * k}, DType::I32, like.device());
    Tensor pr = Tensor::from_host(r.prob.data(), {n * k}, DType::F32, like.device());
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
  r.pad.assign(static_cast<std::size_t>(e), 0);
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
      r.expert[static_cast<std::size_t>(slot - me * n * k)] = -1;
      r.prob[static_cast<std::size_t>(slot - me * n * k)] = 0.0f;
    }
    // Padding to capacity: the group's first rank adds the microbatch's zero rows.
    if (m.pad_expert_input_to_capacity && me == 0) r.pad[static_cast<std::size_t>(x)] = std::min(capacity, total) - keep;
  }
}

void TopKRouter::balancing_losses(Slot& s, const Tensor& like, const Step& step, int64_t b, RouterStats& stats) const {
  const MoeConfig& m = cfg_.moe;
  const int e = m.num_experts, k = m.router_topk;
  const int64_t n = s.routing.tokens;
  const bool seq = m.load_balancing == MoeLoadBalancing::SeqAuxLoss;
  const int64_t groups = seq ? b : 1;  // samples for seq_aux_loss, else the whole microbatch
  std::vector<double> counts(static_cast<std::size_t>(groups * e), 0.0), score_sum(counts.size(), 0.0);
  std::vector<float> sc(static_cast<std::size_t>(e));
  for (int64_t j = 0; j < n; ++j) {
    const float* lg = s.logits.data() + j * e;
    aux_scores(lg, m, sc.data());
    const int64_t base = (seq ? s.sample[static_cast<std::size_t>(j)] : 0) * e;
    for (int i : top_indices(sc.data(), e, k)) counts[static_cast<std::size_t>(base + i)] += 1.0;
    for (int i = 0; i < e; ++i) score_sum[static_cast<std::size_t>(base + i)] += sc[static_cast<std::size_t>(i)];
  }
  group_sum(counts, like, step);
  // T: the tokens each count is over (a sample's s for seq_aux_loss).
  const double t = seq ? static_cast<double>(cfg_.seq_length) : s.tokens;
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
  const int64_t h = cfg_.hidden_size, e = m.num_experts;
  const int64_t n = rows_of(x_in, h, "router input");
  Slot& s = slots_.create(step.microbatch);
  s.sharded = tp_.sequence_sharded(step.decoding);
  // fp32 routing (Megatron's --moe-router-dtype fp32): the input and weight cast up.
  s.x = x_in.dtype() == DType::F32 ? x_in : x_in.to(DType::F32);  // [N, h] fp32
  const Tensor w = params_.weight(weight_);
  const Tensor w32 = w.dtype() == DType::F32 ? w : w.to(DType::F32);  // [E, h] fp32
  Tensor logits = Tensor::empty({n, e}, DType::F32, x_in.device());  // [N, E] fp32
  linear_forward(s.x, w32, nullptr, logits);
  s.logits.resize(static_cast<std::size_t>(n * e));
  logits.copy_to_host(s.logits.data(), s.logits.size() * sizeof(float));
  if (bias_ >= 0) {
    std::vector<float> b(static_cast<std::size_t>(e));
    params_.weight(bias_).to(DType::F32).copy_to_host(b.data(), b.size() * sizeof(float));
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < e; ++i) s.logits[static_cast<std::size_t>(j * e + i)] += b[static_cast<std::size_t>(i)];
  }
  const std::vector<float> expert_bias = expert_bias_values();
  Routing& r = s.routing;
  r.tokens = n;
  r.k = m.router_topk;
  r.expert.assign(static_cast<std::size_t>(n * r.k), -1);
  r.prob.assign(r.expert.size(), 0.0f);
  r.pad.assign(static_cast<std::size_t>(e), 0);
  for (int64_t j = 0; j < n; ++j)
    route_token(s.logits.data() + j * e, expert_bias.empty() ? nullptr : expert_bias.data(), j, r);
  const int g = group_size(step);
  s.tokens = static_cast<double>(n * g);
  // Samples in the microbatch: the token group holds s * b rows (decoding: one sequence).
  const int64_t b = step.decoding ? 1 : std::max<int64_t>(1, n * g / cfg_.seq_length);
  if (m.capacity_factor > 0.0f) drop_over_capacity(r, x_in, step, b);
  if (!step.training || step.decoding) return r;
  RouterStats st;
  st.tokens_per_expert.assign(static_cast<std::size_t>(e), 0.0);
  for (int32_t x : r.expert)
    if (x >= 0) st.tokens_per_expert[static_cast<std::size_t>(x)] += 1.0;
  if (m.aux_loss_coeff > 0.0f && m.load_balancing != MoeLoadBalancing::None) {
    s.sample.resize(static_cast<std::size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      const int64_t row = (s.sharded ? tp_.rank : 0) * n + j;  // in the context rank's activation
      s.sample[static_cast<std::size_t>(j)] = static_cast<int32_t>(row % b);
    }
    balancing_losses(s, x_in, step, b, st);
  }
  if (m.z_loss_coeff > 0.0f) {
    double z = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const float* lg = s.logits.data() + j * e;
      const float mx = *std::max_element(lg, lg + e);
      double sum = 0.0;
      for (int64_t i = 0; i < e; ++i) sum += std::exp(static_cast<double>(lg[i] - mx));
      const double lse = mx + std::log(sum);
      z += lse * lse;
    }
    st.z_loss = z / s.tokens;
  }
  stats_[step.microbatch] = std::move(st);
  return r;
}

Tensor TopKRouter::backward_input(const std::vector<float>& dprob, const Step& step) {
  Slot& s = slots_.get(step.microbatch);
  const MoeConfig& m = cfg_.moe;
  const int e = m.num_experts, k = m.router_topk;
  const int64_t n = s.routing.tokens;
  PTDP_CHECK_ARG(static_cast<int64_t>(dprob.size()) == n * k, "router: " + std::to_string(dprob.size()) +
                                                                   " weight gradients for " + std::to_string(n) +
                                                                   " tokens of " + std::to_string(k) + " choices");
  std::vector<float> dl(static_cast<std::size_t>(n * e), 0.0f);  // [N, E]
  std::vector<float> sc(static_cast<std::size_t>(e));
  const float scale = m.topk_scaling_factor > 0.0f ? m.topk_scaling_factor : 1.0f;
  const bool aux = !s.aux_weight.empty(), seq = m.load_balancing == MoeLoadBalancing::SeqAuxLoss;
  std::vector<double> dscore(static_cast<std::size_t>(e));
  const std::vector<float> ebias = expert_bias_values();
  for (int64_t j = 0; j < n; ++j) {
    const float* lg = s.logits.data() + j * e;
    float* d = dl.data() + j * e;
    const int32_t* chosen = s.routing.expert.data() + j * k;
    // The chosen experts again (drops cleared some): recompute the choice without drops.
    Routing one;
    one.k = k;
    one.expert.resize(static_cast<std::size_t>(k));
    one.prob.resize(static_cast<std::size_t>(k));
    route_token(lg, ebias.empty() ? nullptr : ebias.data(), 0, one);
    std::vector<double> dp(static_cast<std::size_t>(k), 0.0);
    for (int c = 0; c < k; ++c)
      if (chosen[c] >= 0) dp[static_cast<std::size_t>(c)] = static_cast<double>(dprob[static_cast<std::size_t>(j * k + c)]) * scale;
    if (m.score_function == MoeScoreFunction::Softmax && m.pre_softmax) {
      softmax(lg, e, sc.data());
      std::fill(dscore.begin(), dscore.end(), 0.0);
      for (int c = 0; c < k; ++c) dscore[static_cast<std::size_t>(one.expert[static_cast<std::size_t>(c)])] += dp[static_cast<std::size_t>(c)];
      double dot = 0.0;
      for (int i = 0; i < e; ++i) dot += dscore[static_cast<std::size_t>(i)] * sc[static_cast<std::size_t>(i)];
      for (int i = 0; i < e; ++i)
        d[i] += static_cast<float>(sc[static_cast<std::size_t>(i)] * (dscore[static_cast<std::size_t>(i)] - dot));
    } else if (m.score_function == MoeScoreFunction::Softmax) {
      // probs = softmax of the k chosen logits (before scaling): one.prob / scale.
      double dot = 0.0;
      for (int c = 0; c < k; ++c) dot += dp[static_cast<std::size_t>(c)] * one.prob[static_cast<std::size_t>(c)] / scale;
      for (int c = 0; c < k; ++c) {
        const double p = one.prob[static_cast<std::size_t>(c)] / scale;
        d[one.expert[static_cast<std::size_t>(c)]] += static_cast<float>(p * (dp[static_cast<std::size_t>(c)] - dot));
      }
    } else {
      double sum = 0.0, dot = 0.0;
      std::vector<double> g(static_cast<std::size_t>(k));
      for (int c = 0; c < k; ++c) sum += g[static_cast<std::size_t>(c)] = sigmoid(lg[one.expert[static_cast<std::size_t>(c)]]);
      const double z = k > 1 ? sum + 1e-20 : 1.0;
      if (k > 1)
        for (int c = 0; c < k; ++c) dot += dp[static_cast<std::size_t>(c)] * g[static_cast<std::size_t>(c)];
      for (int c = 0; c < k; ++c) {
        const double gc = g[static_cast<std::size_t>(c)];
        const double dg = k > 1 ? dp[static_cast<std::size_t>(c)] / z - dot / (z * z) : dp[static_cast<std::size_t>(c)];
        d[one.expert[static_cast<std::size_t>(c)]] += static_cast<float>(dg * gc * (1.0 - gc));
      }
    }
    if (aux) {
      const std::size_t base = static_cast<std::size_t>((seq ? s.sample[static_cast<std::size_t>(j)] : 0) * e);
      for (int i = 0; i < e; ++i) dscore[static_cast<std::size_t>(i)] = step.grad_scale * s.aux_weight[base + static_cast<std::size_t>(i)];
      aux_scores_backward(lg, m, dscore.data(), d);
    }
    if (m.z_loss_coeff > 0.0f && step.training) {
      softmax(lg, e, sc.data());
      const float mx = *std::max_element(lg, lg + e);
      double sum = 0.0;
      for (int i = 0; i < e; ++i) sum += std::exp(static_cast<double>(lg[i] - mx));
      const double lse = mx + std::log(sum);
      const double f = step.grad_scale * static_cast<double>(m.z_loss_coeff) / s.tokens * 2.0 * lse;
      for (int i = 0; i < e; ++i) d[i] += static_cast<float>(f * sc[static_cast<std::size_t>(i)]);
    }
  }
  s.dlogits = Tensor::from_host(dl.data(), {n, e}, DType::F32, s.x.device());
  const Tensor w = params_.weight(weight_);
  const Tensor w32 = w.dtype() == DType::F32 ? w : w.to(DType::F32);  // [E, h] fp32
  Tensor dx = Tensor::empty({n, static_cast<int64_t>(cfg_.hidden_size)}, DType::F32, s.x.device());  // [N, h] fp32
  linear_dgrad(s.dlogits, w32, dx);
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
