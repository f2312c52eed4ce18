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
// Or by Megatron-LM's --pipeline-model-parallel-layout string, one entry per virtual stage in
// chunk order, separated by '|': "E" the embedding, "t" a decoder layer, "L" the loss (with the
// final norm and the output layer); "x*n" repeats a character, "(...)*n" a group, commas are
// cosmetic. So "Et*3|(tt|)*2,L" at p = 2 is four chunks (v = 2) of 3, 2, 2 and 0 layers, the
// embedding on the first and the loss on the last; a chunk may hold no decoder layer at all.
// As in Megatron-Core the embedding must open the layout and the loss close it, each once, and
// the layout must hold exactly num_layers decoder layers; the number of entries sets v.
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
  /// Megatron's --pipeline-model-parallel-layout; empty: none (then the counts above apply).
  std::string layout;

  bool uneven() const { return first_stage_layers != 0 || last_stage_layers != 0 || !layout.empty(); }
  /// "p=4 x v=2, first stage 8, last stage 10 layers" (the parts that are set).
  std::string str() const;
};

/// The split of a rank layout (its pipeline, virtual_stages, first/last stage layers and layout
/// string).
PipelineSplit pipeline_split(const ParallelConfig& layout);

/// A --pipeline-model-parallel-layout string parsed for pipeline size p.
struct PipelineLayout {
  int virtual_stages = 1;        ///< entries / p
  std::vector<int> chunk_layers;  ///< decoder layers of each entry (chunk c = vp_stage * p + pp_rank)
};
/// Parses `layout` (see the top of this file) for p pipeline ranks. Throws
/// Error(InvalidArgument) in Megatron-Core's words for an unknown character ("m", Megatron's
/// multi-token prediction layer, named as such: ptdp has none), a malformed repetition, an
/// entry count p does not divide, and an embedding or loss that is missing, repeated or not at
/// the very start (end).
PipelineLayout parse_pipeline_layout(const std::string& layout, int p);

/// Decoder layers of each of the p * v chunks, in chunk order (c = vp_stage * p + pp_rank).
/// Throws Error(InvalidArgument) naming the numbers when `num_layers` cannot be split so:
/// evenly, when p * v does not divide it or leaves a chunk without layers; unevenly, in
/// Megatron's words, when a first or last count is not > 0 or not divisible by v, when the
/// layers left for the middle stages and the middle stages are not both zero or both positive,
/// when the middle stages do not divide their layers or v does not divide a middle stage's
/// share, and (ptdp's, where Megatron builds a broken model) when the first and last counts
/// together exceed num_layers or are both given at p = 1. With a layout string: its counts,
/// refused when its entries are not p * v or its decoder layers not num_layers, or when it is
/// combined with first/last counts.
std::vector<int> chunk_layer_counts(int num_layers, const PipelineSplit& split);

/// Decoder layers of each pipeline stage (the sum over its v chunks), in stage order.
std::vector<int> stage_layer_counts(int num_layers, const PipelineSplit& split);

}  // namespace ptdp
