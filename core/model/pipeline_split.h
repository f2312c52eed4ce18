// How the decoder layers are spread over the p pipeline stages and their v model chunks each:
// evenly (num_layers / (p * v) per chunk), or with Megatron-LM's uneven first and last stages
// (--decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers): the first (last)
// stage holds the given number of layers, the other stages share the rest evenly, and each
// stage divides its layers evenly over its v chunks. The counts, the order and the refusals are
// Megatron-Core's (TransformerConfig's checks, get_num_layers_to_build and
// get_transformer_layer_offset): chunk c = vp_stage * p + pp_rank holds the layers after those
// of chunks 0 .. c-1, so with p = 4, v = 2, 30 layers, 8 first and 10 last the chunks start at
// layers 0, 4, 7, 10 (vp_stage 0 of ranks 0..3) and 15, 19, 22, 25 (vp_stage 1).
//
// Parameters are named by global layer index whatever the split, so a checkpoint written under
// one split loads under any other.
#pragma once

#include <string>
#include <vector>

namespace ptdp {

struct ParallelConfig;  // core/parallel/layout.h

struct PipelineSplit {
  int pipeline = 1;            ///< p
  int virtual_stages = 1;      ///< v, model chunks per pipeline rank
  int first_stage_layers = 0;  ///< layers of the first stage (all its chunks together); 0: even split
  int last_stage_layers = 0;   ///< layers of the last stage; 0: even split

  bool uneven() const { return first_stage_layers != 0 || last_stage_layers != 0; }
  /// "p=4 x v=2, first stage 8, last stage 10 layers" (the parts that are set).
  std::string str() const;
};

/// The split of a rank layout (its pipeline, virtual_stages and first/last stage layers).
PipelineSplit pipeline_split(const ParallelConfig& layout);

/// Decoder layers of each of the p * v chunks, in chunk order (c = vp_stage * p + pp_rank).
/// Throws Error(InvalidArgument) naming the numbers when `num_layers` cannot be split so:
/// evenly, when p * v does not divide it or leaves a chunk without layers; unevenly, in
/// Megatron's words, when a first or last count is not > 0 or not divisible by v, when the
/// layers left for the middle stages and the middle stages are not both zero or both positive,
/// when the middle stages do not divide their layers or v does not divide a middle stage's
/// share, and (ptdp's, where Megatron builds a broken model) when the first and last counts
/// together exceed num_layers or are both given at p = 1.
std::vector<int> chunk_layer_counts(int num_layers, const PipelineSplit& split);

/// Decoder layers of each pipeline stage (the sum over its v chunks), in stage order.
std::vector<int> stage_layer_counts(int num_layers, const PipelineSplit& split);

}  // namespace ptdp
