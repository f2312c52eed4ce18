#include "core/train/moe_metrics.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace ptdp {

namespace {

// The figures of every decoder layer, filled by the stages holding them and summed over ranks.
struct LayerSums {
  int experts = 0;
  std::vector<int64_t> tokens;  // [L, E] (token, expert) pairs kept per expert
  std::vector<float> losses;    // [L, 2] the balancing loss and the z-loss over their coefficients
};

// In-place sum of the sums over `kind`'s group (nothing to do for a group of one).
void sum_over(LayerSums& s, ProcessGroups& groups, GroupKind kind) {
  if (groups.size(kind) <= 1) return;
  Communicator& comm = groups.comm(kind);
  comm.all_reduce(Tensor::borrow(s.tokens.data(), {static_cast<int64_t>(s.tokens.size())}, DType::I64), ReduceOp::Sum)
      ->wait();
  comm.all_reduce(Tensor::borrow(s.losses.data(), {static_cast<int64_t>(s.losses.size())}, DType::F32), ReduceOp::Sum)
      ->wait();
}

// Every MoE layer of this rank's chunks with its slot in the sums: decoder layer i at i, the
// multi-token prediction module k's layer (GptConfig::mtp_moe()) at num_layers + k, as
// Megatron's tracker places an MTP layer after the decoder's.
std::vector<std::pair<int, MoeLayer*>> moe_layers(GptPipeline& model) {
  std::vector<std::pair<int, MoeLayer*>> out;
  for (auto& chunk : model.chunks()) {
    for (int j = 0; j < chunk->local_layers(); ++j)
      if (MoeLayer* moe = chunk->layer(j).moe()) out.emplace_back(chunk->stage().first_layer + j, moe);
    for (int k = 0; k < chunk->mtp_modules(); ++k)
      if (MoeLayer* moe = chunk->mtp_layer(k).moe()) out.emplace_back(model.config().num_layers + k, moe);
  }
  return out;
}

// This rank's routers' statistics of the iteration's microbatches into `s` (cleared after).
void collect(GptPipeline& model, LayerSums& s) {
  for (const auto& [index, moe] : moe_layers(model)) {
    const std::size_t layer = static_cast<std::size_t>(index);
    TopKRouter& router = moe->router();
    for (const auto& [microbatch, st] : router.stats()) {
      for (int x = 0; x < s.experts; ++x)
        s.tokens[layer * static_cast<std::size_t>(s.experts) + static_cast<std::size_t>(x)] +=
            std::llround(st.tokens_per_expert[static_cast<std::size_t>(x)]);
      s.losses[layer * 2] += static_cast<float>(st.load_balancing_loss);
      s.losses[layer * 2 + 1] += static_cast<float>(st.z_loss);
    }
    router.clear_stats();
  }
}

// Aux-loss-free balancing: bias += rate * sign(mean load - load) on every MoE layer of this
// rank's chunks with an expert bias (the MTP modules' included: Megatron's
// _update_router_expert_bias moves every router's, each from its own layer's counts), from the
// stage's summed counts.
void update_expert_bias(GptPipeline& model, const LayerSums& s, float rate) {
  const std::size_t e = static_cast<std::size_t>(s.experts);
  for (auto& chunk : model.chunks()) {
    ParamTable& params = chunk->params();
    std::vector<std::pair<int, MoeLayer*>> layers;
    for (int j = 0; j < chunk->local_layers(); ++j)
      layers.emplace_back(chunk->stage().first_layer + j, chunk->layer(j).moe());
    for (int k = 0; k < chunk->mtp_modules(); ++k)
      layers.emplace_back(model.config().num_layers + k, chunk->mtp_layer(k).moe());
    for (const auto& [index, moe] : layers) {
      if (moe == nullptr || moe->router().expert_bias_index() < 0) continue;
      const int i = moe->router().expert_bias_index();
      const int64_t* load = s.tokens.data() + static_cast<std::size_t>(index) * e;
      double mean = 0.0;
      for (std::size_t x = 0; x < e; ++x) mean += static_cast<double>(load[x]);
      mean /= static_cast<double>(e);
      // The fp32 masters (gathered from the data-parallel shards when sharded: the same on
      // every rank of the group, as the counts are).
      const Tensor current = params.masters_sharded() ? params.gather_param(i) : params.param(i);  // [E] fp32
      std::vector<float> bias(e);
      current.copy_to_host(bias.data(), bias.size() * sizeof(float));
      for (std::size_t x = 0; x < e; ++x) {
        const double offset = mean - static_cast<double>(load[x]);
        const float sign = offset > 0.0 ? 1.0f : (offset < 0.0 ? -1.0f : 0.0f);
        bias[x] += sign * rate;
      }
      params.set_param(i, bias.data());
    }
  }
}

}  // namespace

MoeMetrics finish_moe_iteration(GptPipeline& model, ProcessGroups& groups, int64_t microbatches) {
  const GptConfig& cfg = model.config();
  MoeMetrics m;
  if (!cfg.moe.enabled()) return m;
  LayerSums s;
  s.experts = cfg.moe.num_experts;
  // The decoder's layers, then the MTP modules' (MoE with GptConfig::mtp_moe()).
  const int slots = cfg.num_layers + cfg.mtp_num_layers;
  const auto is_moe = [&](int layer) { return layer < cfg.num_layers ? cfg.moe.is_moe_layer(layer) : cfg.mtp_moe(); };
  s.tokens.assign(static_cast<std::size_t>(slots) * static_cast<std::size_t>(s.experts), 0);
  s.losses.assign(static_cast<std::size_t>(slots) * 2, 0.0f);
  collect(model, s);
  // The stage's ranks: t * c hold pieces of the same samples (each its own tokens under
  // sequence parallelism, which MoE requires with t > 1), the d replicas other samples.
  sum_over(s, groups, GroupKind::TensorContext);
  sum_over(s, groups, GroupKind::Data);
  if (cfg.moe.enable_expert_bias) update_expert_bias(model, s, cfg.moe.bias_update_rate);
  sum_over(s, groups, GroupKind::Pipeline);  // each stage filled its own layers
  const double global_microbatches = static_cast<double>(microbatches * std::max(1, groups.size(GroupKind::Data)));
  // global_aux_loss: each replica's value already spans the d replicas' tokens (T = d times the
  // microbatch's); Megatron sums it over them without averaging (needs_dp_avg=False).
  const double balancing_divisor = cfg.moe.load_balancing == MoeLoadBalancing::GlobalAuxLoss
                                       ? static_cast<double>(microbatches)
                                       : global_microbatches;
  m.has_load_balancing_loss = cfg.moe.aux_loss_coeff > 0.0f && cfg.moe.load_balancing != MoeLoadBalancing::None;
  m.has_z_loss = cfg.moe.z_loss_coeff > 0.0f;
  // Megatron's track_moe_metrics: the mean over the MoE layers, the MTP modules' counted.
  for (int layer = 0; layer < slots; ++layer) {
    if (!is_moe(layer)) continue;
    const std::size_t at = static_cast<std::size_t>(layer) * static_cast<std::size_t>(s.experts);
    const auto first = s.tokens.begin() + static_cast<std::ptrdiff_t>(at);
    const auto [lo, hi] = std::minmax_element(first, first + s.experts);
    m.loads.push_back({layer, *lo, *hi});
    m.load_balancing_loss += s.losses[static_cast<std::size_t>(layer) * 2] / balancing_divisor;
    m.z_loss += s.losses[static_cast<std::size_t>(layer) * 2 + 1] / global_microbatches;
    ++m.moe_layers;
  }
  if (m.moe_layers > 0) {
    m.load_balancing_loss /= m.moe_layers;
    m.z_loss /= m.moe_layers;
  }
  return m;
}

}  // namespace ptdp
