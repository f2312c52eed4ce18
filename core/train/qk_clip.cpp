#include "core/train/qk_clip.h"

#include <algorithm>
#include <string>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "base/error.h"

namespace ptdp {

namespace {

// Every transformer layer of this rank's chunks with its slot in the model's table: decoder
// layer i at i, multi-token prediction module k's layer at num_layers + k (as the MoE metrics
// place them), with the chunk whose parameter table holds it.
struct LayerSite {
  int slot;
  TransformerLayer* layer;
  GptModel* chunk;
};

std::vector<LayerSite> layer_sites(GptPipeline& model) {
  std::vector<LayerSite> out;
  for (auto& chunk : model.chunks()) {
    for (int j = 0; j < chunk->local_layers(); ++j)
      out.push_back({chunk->stage().first_layer + j, &chunk->layer(j), chunk.get()});
    for (int k = 0; k < chunk->mtp_modules(); ++k)
      out.push_back({model.config().num_layers + k, &chunk->mtp_layer(k), chunk.get()});
  }
  return out;
}

void max_over(std::vector<float>& table, ProcessGroups& groups, GroupKind kind) {
  if (groups.size(kind) <= 1) return;
  groups.comm(kind)
      .all_reduce(Tensor::borrow(table.data(), {static_cast<int64_t>(table.size())}, DType::F32), ReduceOp::Max)
      ->wait();
}

// Multiplies rows [first, first + count) of this rank's [rows, cols] slice of parameter i by the
// factor of each run: runs are (first row, row count, factor). The fp32 masters first (gathered
// over the data-parallel group when sharded: every rank of it passes here with the same runs),
// then the model weights rounded from them.
struct RowRun {
  int64_t first, count;
  float factor;
};

void scale_rows(ParamTable& params, int i, int64_t cols, const std::vector<RowRun>& runs) {
  if (i < 0 || runs.empty()) return;
  const bool sharded = params.masters_sharded();
  Tensor master = sharded ? params.gather_param(i) : params.param(i);  // local shape, fp32
  Backend& be = master.backend();
  for (const RowRun& r : runs) be.scale(master.data<float>() + r.first * cols, r.factor, r.count * cols);
  if (sharded) {
    params.set_param(i, master);
  } else {
    params.sync_weight(i);
  }
}

}  // namespace

void record_max_logits(GptPipeline& model, bool on) {
  for (const LayerSite& s : layer_sites(model)) s.layer->attention().record_max_logits(on);
}

QkClipMetrics apply_qk_clip(GptPipeline& model, ProcessGroups& groups, float threshold, float alpha, bool apply) {
  PTDP_CHECK_ARG(threshold > 0.0f && std::isfinite(threshold),
                 "qk_clip_threshold " + std::to_string(threshold) + " must be positive");
  PTDP_CHECK_ARG(alpha >= 0.0f && alpha <= 1.0f, "qk_clip_alpha " + std::to_string(alpha) + " must lie in [0, 1]");
  const GptConfig& cfg = model.config();
  const TensorParallel& tp = model.tensor_parallel();
  const int slots = cfg.num_layers + cfg.mtp_num_layers;
  const int64_t a = cfg.num_attention_heads, g = cfg.query_groups(), qg = cfg.queries_per_group();
  const int64_t local_heads = a / tp.size, local_groups = g / tp.size, dh = cfg.head_dim();
  // [slots, a]: each head's maximum; this rank fills its own heads of its own layers.
  std::vector<float> table(static_cast<std::size_t>(slots * a), -std::numeric_limits<float>::infinity());
  const std::vector<LayerSite> sites = layer_sites(model);
  for (const LayerSite& s : sites) {
    const std::vector<float> mine = s.layer->attention().take_max_logits();  // [a/t]
    for (std::size_t h = 0; h < mine.size(); ++h) {
      float& m = table[static_cast<std::size_t>(s.slot * a + tp.rank * local_heads) + h];
      m = std::max(m, mine[h]);
    }
  }
  // Other tokens of the step (context ranks: other positions; data ranks: other samples), other
  // heads (tensor ranks), other layers (pipeline ranks).
  max_over(table, groups, GroupKind::Context);
  max_over(table, groups, GroupKind::Data);
  max_over(table, groups, GroupKind::Tensor);
  max_over(table, groups, GroupKind::Pipeline);

  QkClipMetrics m;
  m.max_logits.assign(static_cast<std::size_t>(slots), -std::numeric_limits<float>::infinity());
  m.clipped_heads.assign(static_cast<std::size_t>(slots), 0);
  for (int l = 0; l < slots; ++l) {
    for (int64_t h = 0; h < a; ++h) {
      const float v = table[static_cast<std::size_t>(l * a + h)];
      m.max_logits[static_cast<std::size_t>(l)] = std::max(m.max_logits[static_cast<std::size_t>(l)], v);
      if (apply && v > threshold) ++m.clipped_heads[static_cast<std::size_t>(l)];
    }
  }
  if (!apply) return m;

  for (const LayerSite& s : sites) {
    // linear_qkv's rows on this rank: local group k holds its a/g query heads, then its key head,
    // then its value head, dh rows each (DESIGN.md's layout).
    std::vector<RowRun> runs;
    for (int64_t k = 0; k < local_groups; ++k) {
      const int64_t global_group = tp.rank * local_groups + k;
      float group_max = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < qg; ++j)
        group_max = std::max(group_max, table[static_cast<std::size_t>(s.slot * a + global_group * qg + j)]);
      if (!(group_max > threshold)) continue;
      const double eta = static_cast<double>(threshold) / static_cast<double>(group_max);
      const int64_t base = k * (qg + 2) * dh;
      runs.push_back({base, qg * dh, static_cast<float>(std::pow(eta, static_cast<double>(alpha)))});
      runs.push_back({base + qg * dh, dh, static_cast<float>(std::pow(eta, 1.0 - static_cast<double>(alpha)))});
    }
    const auto [weight, bias] = s.layer->attention().qkv_params();
    ParamTable& params = s.chunk->params();
    scale_rows(params, weight, cfg.hidden_size, runs);
    scale_rows(params, bias, 1, runs);
  }
  return m;
}

}  // namespace ptdp
