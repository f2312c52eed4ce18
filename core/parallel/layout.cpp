#include "core/parallel/layout.h"

#include <algorithm>

#include "base/error.h"

namespace ptdp {

const char* chunk_placement_name(ChunkPlacement k) {
  switch (k) {
    case ChunkPlacement::RoundRobin: return "round-robin";
    case ChunkPlacement::V: return "V";
  }
  return "?";
}

const char* group_kind_name(GroupKind kind) {
  switch (kind) {
    case GroupKind::World: return "world";
    case GroupKind::Tensor: return "tensor";
    case GroupKind::Pipeline: return "pipeline";
    case GroupKind::Data: return "data";
    case GroupKind::Model: return "model";
    case GroupKind::Embedding: return "embedding";
    case GroupKind::Context: return "context";
    case GroupKind::DataContext: return "data+context";
    case GroupKind::ExpertTensor: return "expert-tensor";
    case GroupKind::ExpertModel: return "expert";
    case GroupKind::ExpertData: return "expert-data";
    case GroupKind::ExpertTensorAndModel: return "expert-tensor+expert";
    case GroupKind::TensorContext: return "tensor+context";
  }
  return "?";
}

Layout::Layout(const ParallelConfig& c) : config_(c) {
  PTDP_CHECK_ARG(c.world > 0, "world size must be > 0, got " + std::to_string(c.world));
  PTDP_CHECK_ARG(c.tensor > 0, "tensor parallel size must be > 0, got " + std::to_string(c.tensor));
  PTDP_CHECK_ARG(c.pipeline > 0, "pipeline parallel size must be > 0, got " + std::to_string(c.pipeline));
  PTDP_CHECK_ARG(c.virtual_stages > 0,
                 "virtual pipeline size must be > 0, got " + std::to_string(c.virtual_stages));
  PTDP_CHECK_ARG(c.context > 0, "context parallel size must be > 0, got " + std::to_string(c.context));
  const long long tp = static_cast<long long>(c.tensor) * c.pipeline * c.context;
  PTDP_CHECK_ARG(c.world % tp == 0,
                 "world size " + std::to_string(c.world) + " is not divisible by tensor size " +
                     std::to_string(c.tensor) + " x pipeline size " + std::to_string(c.pipeline) +
                     (c.context > 1 ? " x context parallel size " + std::to_string(c.context) : std::string()) +
                     " = " + std::to_string(tp));
  PTDP_CHECK_ARG(c.virtual_stages == 1 || c.pipeline > 1,
                 "virtual pipeline size " + std::to_string(c.virtual_stages) +
                     " needs pipeline parallel size > 1, got 1");
  PTDP_CHECK_ARG(c.first_stage_layers >= 0, "first pipeline stage layers must be >= 0 (0: an even split), got " +
                                                std::to_string(c.first_stage_layers));
  PTDP_CHECK_ARG(c.last_stage_layers >= 0, "last pipeline stage layers must be >= 0 (0: an even split), got " +
                                               std::to_string(c.last_stage_layers));
  PTDP_CHECK_ARG(c.chunk_placement == 0 || c.chunk_placement == 1,
                 "chunk placement " + std::to_string(c.chunk_placement) + " is not 0 (round-robin) or 1 (V)");
  PTDP_CHECK_ARG(c.chunk_placement == 0 || c.virtual_stages == 2,
                 "the V chunk placement holds 2 model chunks per pipeline rank, got virtual pipeline size " +
                     std::to_string(c.virtual_stages));
  PTDP_CHECK_ARG(c.chunk_placement == 0 || (c.first_stage_layers == 0 && c.last_stage_layers == 0),
                 "the V chunk placement takes an even split of the layers, got first pipeline stage layers " +
                     std::to_string(c.first_stage_layers) + " and last " + std::to_string(c.last_stage_layers));
  // The layout string itself is checked against p and v where the split is built
  // (core/model/pipeline_split.h); here only what it cannot be combined with.
  PTDP_CHECK_ARG(c.pipeline_layout.empty() || (c.first_stage_layers == 0 && c.last_stage_layers == 0),
                 "pipeline_model_parallel_layout places every layer; it cannot be combined with first (" +
                     std::to_string(c.first_stage_layers) + ") or last (" + std::to_string(c.last_stage_layers) +
                     ") pipeline stage layers");
  PTDP_CHECK_ARG(c.pipeline_layout.empty() || c.chunk_placement == 0,
                 "the V chunk placement takes an even split of the layers, not pipeline_model_parallel_layout \"" +
                     c.pipeline_layout + "\"");
  data_ = static_cast<int>(c.world / tp);
  PTDP_CHECK_ARG(c.expert_model > 0, "expert model parallel size (--expert-model-parallel-size) must be > 0, got " +
                                         std::to_string(c.expert_model));
  PTDP_CHECK_ARG(c.expert_tensor >= 0,
                 "expert tensor parallel size (--expert-tensor-parallel-size) must be > 0 (0: the tensor parallel size), got " +
                     std::to_string(c.expert_tensor));
  const long long stage = static_cast<long long>(c.tensor) * c.context * data_;
  const long long experts = static_cast<long long>(c.expert_model) * c.expert_tensor_size();
  PTDP_CHECK_ARG(stage % experts == 0,
                 "the " + std::to_string(stage) + " ranks of a pipeline stage (tensor " + std::to_string(c.tensor) +
                     " x context " + std::to_string(c.context) + " x data " + std::to_string(data_) +
                     ") are not divisible by expert model parallel size (--expert-model-parallel-size) " +
                     std::to_string(c.expert_model) + " x expert tensor parallel size (--expert-tensor-parallel-size) " +
                     std::to_string(c.expert_tensor_size()));
}

void Layout::check_rank(int rank) const {
  PTDP_CHECK_ARG(rank >= 0 && rank < world(), "rank " + std::to_string(rank) +
                                                  " is outside the world of " +
                                                  std::to_string(world()) + " ranks");
}

RankCoords Layout::coords(int rank) const {
  check_rank(rank);
  const int t = tensor(), d = data(), c = context();
  RankCoords x{rank / (d * c * t), (rank / (c * t)) % d, rank % t, (rank / t) % c};
  const int local = rank % (d * c * t), etp = config_.expert_tensor_size(), e = config_.expert_model;
  x.etp = local % etp;
  x.ep = (local / etp) % e;
  x.edp = local / (etp * e);
  return x;
}

int Layout::expert_data() const {
  return tensor() * context() * data() / (config_.expert_model * config_.expert_tensor_size());
}

int Layout::expert_rank_of(int pp, int etp, int ep, int edp) const {
  const int stage = tensor() * context() * data();
  return pp * stage + (edp * config_.expert_model + ep) * config_.expert_tensor_size() + etp;
}

int Layout::rank_of(RankCoords x) const { return ((x.pp * data() + x.dp) * context() + x.cp) * tensor() + x.tp; }

std::vector<int> Layout::members(GroupKind kind, int rank) const {
  const RankCoords me = coords(rank);
  std::vector<int> out;
  switch (kind) {
    case GroupKind::World:
      for (int r = 0; r < world(); ++r) out.push_back(r);
      break;
    case GroupKind::Tensor:
      for (int i = 0; i < tensor(); ++i) out.push_back(rank_of({me.pp, me.dp, i, me.cp}));
      break;
    case GroupKind::Data:
      for (int j = 0; j < data(); ++j) out.push_back(rank_of({me.pp, j, me.tp, me.cp}));
      break;
    case GroupKind::Pipeline:
      for (int k = 0; k < pipeline(); ++k) out.push_back(rank_of({k, me.dp, me.tp, me.cp}));
      break;
    case GroupKind::Model:
      for (int k = 0; k < pipeline(); ++k)
        for (int i = 0; i < tensor(); ++i) out.push_back(rank_of({k, me.dp, i, me.cp}));
      break;
    case GroupKind::Embedding:
      if (config_.chunk_placement == 1) {
        // The V placement holds the first and the last chunk on the first stage.
        if (me.pp == 0) out.push_back(rank_of({0, me.dp, me.tp, me.cp}));
      } else if (me.pp == 0 || me.pp == pipeline() - 1) {
        out.push_back(rank_of({0, me.dp, me.tp, me.cp}));
        if (pipeline() > 1) out.push_back(rank_of({pipeline() - 1, me.dp, me.tp, me.cp}));
      }
      break;
    case GroupKind::Context:
      for (int j = 0; j < context(); ++j) out.push_back(rank_of({me.pp, me.dp, me.tp, j}));
      break;
    case GroupKind::DataContext:
      for (int j = 0; j < data(); ++j)
        for (int k = 0; k < context(); ++k) out.push_back(rank_of({me.pp, j, me.tp, k}));
      break;
    case GroupKind::ExpertTensor:
      for (int i = 0; i < expert_tensor(); ++i) out.push_back(expert_rank_of(me.pp, i, me.ep, me.edp));
      break;
    case GroupKind::ExpertModel:
      for (int j = 0; j < expert_model(); ++j) out.push_back(expert_rank_of(me.pp, me.etp, j, me.edp));
      break;
    case GroupKind::ExpertData:
      for (int k = 0; k < expert_data(); ++k) out.push_back(expert_rank_of(me.pp, me.etp, me.ep, k));
      break;
    case GroupKind::ExpertTensorAndModel:
      for (int j = 0; j < expert_model(); ++j)
        for (int i = 0; i < expert_tensor(); ++i) out.push_back(expert_rank_of(me.pp, i, j, me.edp));
      break;
    case GroupKind::TensorContext:
      for (int k = 0; k < context(); ++k)
        for (int i = 0; i < tensor(); ++i) out.push_back(rank_of({me.pp, me.dp, i, k}));
      break;
    default:
      PTDP_CHECK_ARG(false, "group kind " + std::to_string(static_cast<int>(kind)) + " is not a group kind");
  }
  return out;
}

std::vector<std::vector<int>> Layout::all_groups(GroupKind kind) const {
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < world(); ++r) {
    std::vector<int> g = members(kind, r);
    if (!g.empty() && std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  }
  return groups;
}

std::string Layout::str() const {
  return "W=" + std::to_string(world()) + " (t=" + std::to_string(tensor()) + ", p=" +
         std::to_string(pipeline()) + ", d=" + std::to_string(data()) + ", v=" +
         std::to_string(virtual_stages()) + (context() > 1 ? ", c=" + std::to_string(context()) : std::string()) +
         (first_stage_layers() ? ", first=" + std::to_string(first_stage_layers()) : std::string()) +
         (last_stage_layers() ? ", last=" + std::to_string(last_stage_layers()) : std::string()) +
         (config_.pipeline_layout.empty() ? std::string() : ", layout " + config_.pipeline_layout) +
         (expert_model() > 1 ? ", e=" + std::to_string(expert_model()) : std::string()) +
         (expert_tensor() != tensor() ? ", etp=" + std::to_string(expert_tensor()) : std::string()) +
         (config_.sequence_parallel && tensor() > 1 ? ", sequence parallel" : "") + ")";
}

}  // namespace ptdp
