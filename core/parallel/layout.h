// The PTD-P rank layout: which world ranks form the tensor, pipeline, data, model-parallel and
// embedding groups. Megatron's default order: the tensor rank varies fastest, then the context
// rank, then the data rank, then the pipeline rank (docs/architecture.md, "Rank layout"; Megatron's tp-cp-dp-pp):
//   rank = ((pp_rank * d + dp_rank) * c + cp_rank) * t + tp_rank
// (with c = 1, the context-parallel size: pp_rank * (d * t) + dp_rank * t + tp_rank).
// Pure arithmetic, no communication: it can describe layouts far larger than the job.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace ptdp {

/// Group kinds; the numbers match ptdp_group_kind in the C API.
/// Context: the c ranks that split the sequence of the same samples (context parallelism);
/// DataContext: the d * c ranks holding the same weights (Megatron's data-parallel group with
/// context parallelism), over which the optimizer reduces the gradients (Data itself when c = 1).
enum class GroupKind : int {
  World = 0,
  Tensor = 1,
  Pipeline = 2,
  Data = 3,
  Model = 4,
  Embedding = 5,
  Context = 6,
  DataContext = 7,
  // Mixture of experts, Megatron-Core's parallel folding: within a pipeline stage the t*c*d
  // ranks (local index r = (dp * c + cp) * t + tp) are regrouped for the expert layers as
  // etp x e x edp, the expert-tensor rank varying fastest: etp_rank = r % etp,
  // ep_rank = (r / etp) % e, edp_rank = r / (etp * e).
  ExpertTensor = 8,          ///< etp ranks splitting each expert's linears
  ExpertModel = 9,           ///< e ranks splitting the experts of a layer (expert parallelism)
  ExpertData = 10,           ///< edp = t*c*d / (etp*e) ranks holding the same experts
  ExpertTensorAndModel = 11, ///< etp*e ranks: the allgather dispatcher's group (Megatron's tp_ep)
  TensorContext = 12         ///< t*c ranks sharing one set of samples (the router's aux losses)
};
inline constexpr int kNumGroupKinds = 13;
const char* group_kind_name(GroupKind kind);

/// Which pipeline rank holds which model chunk. Numbers match ptdp_chunk_placement in the C API.
enum class ChunkPlacement : int {
  RoundRobin = 0,  ///< chunk c on rank c % p, as local chunk c / p (Megatron's interleaving)
  V = 1,           ///< v = 2: chunk c < p on rank c (local 0), chunk c >= p on rank 2p - 1 - c (local 1)
};
const char* chunk_placement_name(ChunkPlacement k);
/// Pipeline rank holding global chunk `chunk` of p * v.
inline int placement_rank(ChunkPlacement pl, int p, int chunk) {
  if (pl == ChunkPlacement::V) return chunk < p ? chunk : 2 * p - 1 - chunk;
  return chunk % p;
}
/// Index of global chunk `chunk` among its rank's chunks (0 .. v-1, in model order).
inline int placement_local(ChunkPlacement pl, int p, int chunk) {
  if (pl == ChunkPlacement::V) return chunk < p ? 0 : 1;
  return chunk / p;
}
/// Global chunk of rank `rank`'s local chunk `j`.
inline int placement_chunk(ChunkPlacement pl, int p, int rank, int j) {
  if (pl == ChunkPlacement::V) return j == 0 ? rank : 2 * p - 1 - rank;
  return j * p + rank;
}

struct ParallelConfig {
  int world = 1;     ///< W, number of ranks
  int tensor = 1;    ///< t
  int pipeline = 1;  ///< p
  int virtual_stages = 1;  ///< v, model chunks per pipeline rank
  /// Decoder layers of the first (last) pipeline stage, the other stages sharing the rest
  /// evenly (Megatron's --decoder-first/last-pipeline-num-layers); 0: an even split. The split
  /// itself, checked against the model, is core/model/pipeline_split.h's.
  int first_stage_layers = 0;
  int last_stage_layers = 0;
  /// Sequence parallelism over the tensor group (Megatron's --sequence-parallel; the model's
  /// LayerConfig::sequence_parallel follows it).
  bool sequence_parallel = false;
  /// Where the p * v model chunks live (core/pipeline/schedule.h's ChunkPlacement): 0,
  /// round-robin (chunk c on pipeline rank c % p); 1, V-shaped (v = 2, rank r holding chunks r
  /// and 2p - 1 - r, so the embedding group is the first stage alone), what the ZB-V and
  /// DualPipeV schedules run.
  int chunk_placement = 0;
  /// Megatron's --pipeline-model-parallel-layout (core/model/pipeline_split.h): the decoder
  /// layers of every model chunk; empty: none. virtual_stages must be its entries / p.
  std::string pipeline_layout = {};
  /// c, context parallelism (Megatron's --context-parallel-size): each sample's sequence is cut
  /// into 2c chunks and context rank r holds chunks r and 2c - 1 - r (causal load balance).
  int context = 1;
  /// e, Megatron's --expert-model-parallel-size: the routed experts of each MoE layer are split
  /// over e ranks of a pipeline stage. t*c*d must be divisible by e*etp.
  int expert_model = 1;
  /// etp, Megatron's --expert-tensor-parallel-size: each expert's linears are split over etp
  /// ranks; 0: t (Megatron's default).
  int expert_tensor = 0;
  /// etp with its default resolved.
  int expert_tensor_size() const { return expert_tensor > 0 ? expert_tensor : tensor; }
};

/// This rank's coordinates in the (pipeline, data, tensor) grid.
struct RankCoords {
  int pp = 0, dp = 0, tp = 0, cp = 0;
  /// The expert coordinates of the same rank (parallel folding; see GroupKind).
  int etp = 0, ep = 0, edp = 0;
};

class Layout {
 public:
  /// Throws Error(InvalidArgument) naming the numbers for an impossible layout: non-positive
  /// sizes, W not divisible by t*p*c, v > 1 with p == 1, or negative first/last stage layers.
  explicit Layout(const ParallelConfig& config);

  const ParallelConfig& config() const { return config_; }
  int world() const { return config_.world; }
  int tensor() const { return config_.tensor; }
  int pipeline() const { return config_.pipeline; }
  int data() const { return data_; }
  int context() const { return config_.context; }
  int virtual_stages() const { return config_.virtual_stages; }
  int first_stage_layers() const { return config_.first_stage_layers; }
  int last_stage_layers() const { return config_.last_stage_layers; }
  int chunk_placement() const { return config_.chunk_placement; }
  int expert_model() const { return config_.expert_model; }           ///< e
  int expert_tensor() const { return config_.expert_tensor_size(); }  ///< etp
  int expert_data() const;  ///< edp = t * c * d / (e * etp)
  /// World rank of expert coordinates (etp, ep, edp) on pipeline rank pp.
  int expert_rank_of(int pp, int etp, int ep, int edp) const;

  RankCoords coords(int rank) const;
  int rank_of(RankCoords c) const;

  /// World ranks of the group of `kind` that `rank` belongs to, in group-rank order. For the
  /// embedding group, a rank on a middle pipeline stage belongs to none: the list is empty.
  std::vector<int> members(GroupKind kind, int rank) const;
  /// Every group of `kind`, each in group-rank order (the embedding groups: one per pipeline
  /// group, holding its first and last stage).
  std::vector<std::vector<int>> all_groups(GroupKind kind) const;

  /// "W=16 (t=2, p=4, d=2, v=1)", with ", c=N" (c > 1), ", first=N", ", last=N" and ", sequence parallel" (t > 1)
  /// before the ')' when set.
  std::string str() const;

 private:
  void check_rank(int rank) const;

  ParallelConfig config_;
  int data_ = 1;
};

}  // namespace ptdp
