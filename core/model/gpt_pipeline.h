// GptPipeline: this rank's share of a GPT laid out over tensor, pipeline and virtual
// (interleaved) stages. core/train/forward_backward.h runs a global batch through it.
// Chunks are assigned round-robin (chunk c on pipeline rank c % p), or in the V placement of
// ZB-V and DualPipeV (the layout's chunk_placement; v = 2, rank r holding chunks r and
// 2p - 1 - r); with tied embeddings the first and last chunks each hold the word embedding and
// their gradients are summed after the backward passes: over the embedding group, or on the
// first stage when it holds both (V).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/model/gpt.h"
#include "core/parallel/groups.h"

namespace ptdp {

class GptPipeline {
 public:
  /// v = groups.layout().virtual_stages() chunks per pipeline rank; the layers are split over
  /// the p * v chunks evenly, or with the layout's first and last stage layers
  /// (core/model/pipeline_split.h; Error(InvalidArgument) naming the numbers when they do not
  /// split so).
  /// The chunks' parameters and activations live on `device` (CPU by default).
  GptPipeline(const GptConfig& cfg, ProcessGroups& groups, Device device = {});

  const GptConfig& config() const { return cfg_; }
  int pipeline_size() const { return p_; }
  int virtual_stages() const { return v_; }
  /// This rank's chunks, in order of their global chunk index (chunk j is c = j * p + rank
  /// round-robin; r and 2p - 1 - r under the V placement).
  std::vector<std::unique_ptr<GptModel>>& chunks() { return chunks_; }
  int chunk_index(int j) const { return placement_chunk(placement_, p_, pp_rank_, j); }
  /// Where the chunks live (the layout's chunk_placement); a schedule must have the same.
  ChunkPlacement placement() const { return placement_; }
  /// Pipeline rank holding global chunk c, and its index among that rank's chunks.
  int rank_of_chunk(int c) const { return placement_rank(placement_, p_, c); }
  int local_of_chunk(int c) const { return placement_local(placement_, p_, c); }
  int pipeline_rank() const { return pp_rank_; }
  /// How the layers are split over the p * v chunks.
  const PipelineSplit& split() const { return split_; }
  /// What global chunk c (of p * v; on pipeline rank rank_of_chunk(c)) holds, whichever rank
  /// this is.
  GptStage chunk_stage(int c) const;
  const TensorParallel& tensor_parallel() const { return tp_; }

  ProcessGroups& groups() { return groups_; }
  Device device() const { return device_; }

  /// Index of the word embedding in local chunk j's table where the first and last stages both
  /// hold a copy (p > 1 with a tied head, or with multi-token prediction), or -1.
  int tied_embedding(int j) const;
  void zero_grads();

  /// Every parameter of the whole model in model order (names unique; the last stage's copy of
  /// a tied word embedding is not listed), whichever rank holds it.
  const std::vector<ParamInfo>& all_params() const { return all_params_; }
  /// Global-shape value (or gradient) of a parameter; collective over the model-parallel group
  /// (the holding stage gathers over its tensor group, an expert's holder over its expert-tensor
  /// group and then to its expert-parallel group, and broadcasts along the pipeline).
  void get_global(const std::string& name, bool gradient, float* host);
  /// Sets a parameter from its global-shape value on every stage holding it (both copies of a
  /// tied embedding). No communication.
  void set_global(const std::string& name, const float* host);

 private:
  /// The expert-parallel rank holding an expert parameter (named with its global index).
  int expert_owner(const std::string& name) const;
  int owner_chunk(const std::string& name) const;

  GptConfig cfg_;
  ProcessGroups& groups_;
  Device device_;
  TensorParallel tp_;
  int p_, v_, pp_rank_;
  ChunkPlacement placement_ = ChunkPlacement::RoundRobin;
  PipelineSplit split_;
  std::vector<int> chunk_first_layer_;  // first decoder layer of each global chunk
  std::vector<std::unique_ptr<GptModel>> chunks_;
  std::vector<ParamInfo> all_params_;
};

}  // namespace ptdp
