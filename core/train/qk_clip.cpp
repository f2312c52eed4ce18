#include "core/train/qk_clip.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
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

// Multiplies the runs' rows of parameter i, all of whose runs these are: the fp32 masters first
// (gathered over the data-parallel group when sharded: every rank of it passes here with the same
// runs, and keeps its shard), then the model weights rounded from them.
void scale_rows(ParamTable& params, int i, const std::vector<AttentionLayer::QkClipScale>& runs) {
  const bool sharded = params.masters_sharded();
  Tensor master = sharded ? params.gather_param(i) : params.param(i);  // local shape, fp32
  Backend& be = master.backend();
  for (const auto& r : runs) be.scale(master.data<float>() + r.first * r.cols, r.factor, r.rows * r.cols);
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
  const int64_t a = cfg.num_attention_heads, local_heads = a / tp.size;
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
    const std::vector<float> mine(table.begin() + s.slot * a + tp.rank * local_heads,
                                  table.begin() + s.slot * a + (tp.rank + 1) * local_heads);
    const std::vector<AttentionLayer::QkClipScale> scales =
        s.layer->attention().qk_clip_scales(mine, threshold, alpha);
    // Parameter by parameter, in the order the layer names them (the same on every rank).
    std::vector<int> order;
    for (const auto& r : scales)
      if (std::find(order.begin(), order.end(), r.param) == order.end()) order.push_back(r.param);
    for (int i : order) {
      std::vector<AttentionLayer::QkClipScale> runs;
      for (const auto& r : scales)
        if (r.param == i) runs.push_back(r);
      scale_rows(s.chunk->params(), i, runs);
    }
  }
  return m;
}

}  // namespace ptdp
