#include "core/model/gpt_pipeline.h"

#include <algorithm>
#include <set>

#include "base/error.h"
#include "core/params/param_io.h"

namespace ptdp {

namespace {

TensorParallel tensor_group(ProcessGroups& g, Device device) {
  TensorParallel tp;
  tp.comm = &g.comm_for_tensors(GroupKind::Tensor, device);
  tp.rank = g.rank(GroupKind::Tensor);
  tp.size = g.size(GroupKind::Tensor);
  tp.cp.comm = &g.comm_for_tensors(GroupKind::Context, device);
  tp.cp.rank = g.rank(GroupKind::Context);
  tp.cp.size = g.size(GroupKind::Context);
  // Megatron-Core's parallel folding (core/parallel/layout.h): the MoE layers' groups.
  ExpertParallel& ep = tp.ep;
  ep.ep_comm = &g.comm_for_tensors(GroupKind::ExpertModel, device);
  ep.ep_rank = g.rank(GroupKind::ExpertModel);
  ep.ep_size = g.size(GroupKind::ExpertModel);
  ep.etp_comm = &g.comm_for_tensors(GroupKind::ExpertTensor, device);
  ep.etp_rank = g.rank(GroupKind::ExpertTensor);
  ep.etp_size = g.size(GroupKind::ExpertTensor);
  ep.tp_ep_comm = &g.comm_for_tensors(GroupKind::ExpertTensorAndModel, device);
  ep.tp_cp_comm = &g.comm_for_tensors(GroupKind::TensorContext, device);
  ep.tp_cp_rank = g.rank(GroupKind::TensorContext);
  ep.tp_cp_size = g.size(GroupKind::TensorContext);
  ep.dp_comm = &g.comm_for_tensors(GroupKind::Data, device);
  ep.dp_size = g.size(GroupKind::Data);
  return tp;
}

}  // namespace

GptPipeline::GptPipeline(const GptConfig& cfg, ProcessGroups& groups, Device device)
    : cfg_(cfg), groups_(groups), device_(device), tp_(tensor_group(groups, device)) {
  p_ = groups.layout().pipeline();
  v_ = groups.layout().virtual_stages();
  pp_rank_ = groups.rank(GroupKind::Pipeline);
  cfg_.sequence_parallel = groups.layout().config().sequence_parallel;
  tp_.sequence_parallel = cfg_.sequence_parallel;
  placement_ = static_cast<ChunkPlacement>(groups.layout().chunk_placement());
  cfg_.validate(tp_.size);
  split_ = pipeline_split(groups.layout().config());
  const int chunks = p_ * v_;
  int first = 0;
  for (const int n : chunk_layer_counts(cfg_.num_layers, split_)) {  // checks the split
    chunk_first_layer_.push_back(first);
    first += n;
  }
  for (int j = 0; j < v_; ++j) {
    const int c = chunk_index(j);
    chunks_.push_back(std::make_unique<GptModel>(cfg_, tp_, device_, chunk_stage(c)));
  }
  // The whole model's parameter list, from tables without memory: those of every expert-parallel
  // rank, so that the experts held elsewhere are listed too.
  std::set<std::string> seen;
  for (int c = 0; c < chunks; ++c) {
    for (int r = 0; r < tp_.ep.ep_size; ++r) {
      TensorParallel other = tp_;
      other.ep.ep_rank = r;
      GptModel meta(cfg_, other, Device{}, chunk_stage(c), false);
      for (int i = 0; i < meta.params().size(); ++i) {
        if (seen.insert(meta.params().info(i).name).second) all_params_.push_back(meta.params().info(i));
      }
    }
  }
}

GptStage GptPipeline::chunk_stage(int c) const { return GptStage::chunk_of(cfg_, split_, c); }

void GptPipeline::zero_grads() {
  for (auto& c : chunks_) c->params().zero_grads();
}

int GptPipeline::tied_embedding(int j) const {
  const GptModel& c = *chunks_[static_cast<std::size_t>(j)];
  // Two copies of the word embedding: the tied head's, or the MTP modules' on the last stage.
  if (p_ == 1 || (!cfg_.tie_embeddings && cfg_.mtp_num_layers == 0)) return -1;
  if (c.stage().pre_process) return c.params().index("embedding.word_embeddings.weight");
  if (c.stage().post_process) return c.tied_head_weight();
  return -1;
}

int GptPipeline::owner_chunk(const std::string& name) const {
  const int chunks = p_ * v_;
  const std::string layers = "decoder.layers.";
  if (name.rfind(layers, 0) == 0) {
    const int layer = std::stoi(name.substr(layers.size()));
    // The last chunk whose first layer is at or before `layer` (no chunk is empty).
    const auto after = std::upper_bound(chunk_first_layer_.begin(), chunk_first_layer_.end(), layer);
    return static_cast<int>(after - chunk_first_layer_.begin()) - 1;
  }
  if (name.rfind("embedding.", 0) == 0) return 0;
  return chunks - 1;  // final LayerNorm, output layer
}

void GptPipeline::get_global(const std::string& name, bool gradient, float* host) {
  int info_index = -1;
  for (std::size_t i = 0; i < all_params_.size(); ++i)
    if (all_params_[i].name == name) info_index = static_cast<int>(i);
  PTDP_CHECK_ARG(info_index >= 0, "no parameter named '" + name + "'");
  const ParamInfo& info = all_params_[static_cast<std::size_t>(info_index)];
  const int chunk = owner_chunk(name);
  const int owner = rank_of_chunk(chunk);
  if (owner == pp_rank_) {
    GptModel& g = *chunks_[static_cast<std::size_t>(local_of_chunk(chunk))];
    const int i = g.params().find(name);
    // The fp32 masters: gathered from the data-parallel shards when they are sharded. An
    // expert's are on one rank of each expert-parallel group, which sends them to the others.
    if (i >= 0) gather_global(g.params(), i, gradient ? g.params().grad(i) : g.params().gather_param(i), tp_, host);
    if (info.expert && tp_.ep.ep_size > 1) {
      groups_.comm(GroupKind::ExpertModel)
          .broadcast(Tensor::borrow(host, {info.global_shape.numel()}, DType::F32), expert_owner(name))
          ->wait();
    } else {
      if (i < 0) throw_error(ErrorCode::Internal, "get_global: the owning stage does not hold " + name);
    }
  }
  if (p_ > 1) {
    groups_.comm(GroupKind::Pipeline)
        .broadcast(Tensor::borrow(host, {info.global_shape.numel()}, DType::F32), owner)
        ->wait();
  }
}

int GptPipeline::expert_owner(const std::string& name) const {
  // Expert parameters end in their global expert index J (linear_fc1.weight{J}); rank r of the
  // expert-parallel group holds experts [r * E / e, (r + 1) * E / e).
  std::size_t digits = name.size();
  while (digits > 0 && name[digits - 1] >= '0' && name[digits - 1] <= '9') --digits;
  if (digits == name.size()) throw_error(ErrorCode::Internal, "expert parameter " + name + " has no expert index");
  const int expert = std::stoi(name.substr(digits));
  return expert / (cfg_.moe.num_experts / tp_.ep.ep_size);
}

void GptPipeline::set_global(const std::string& name, const float* host) {
  bool found = false;
  for (const ParamInfo& p : all_params_) found |= p.name == name;
  PTDP_CHECK_ARG(found, "no parameter named '" + name + "'");
  for (auto& c : chunks_) {
    const int i = c->params().find(name);
    if (i < 0) continue;
    // This rank's slice, then its masters (its shard of them when sharded) and weights.
    Tensor slice = Tensor::empty(c->params().info(i).local_shape, DType::F32, c->params().flat_grads().device());
    scatter_global(c->params(), i, host, slice);
    c->params().set_param(i, slice);
  }
}

}  // namespace ptdp
