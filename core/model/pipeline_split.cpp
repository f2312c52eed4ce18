#include "core/model/pipeline_split.h"

#include "core/parallel/layout.h"
#include "kernels/error.h"

namespace ptdp {

std::string PipelineSplit::str() const {
  std::string s = str_cat("p=", std::to_string(pipeline), " x v=", std::to_string(virtual_stages));
  if (first_stage_layers != 0) s += str_cat(", first stage ", std::to_string(first_stage_layers));
  if (last_stage_layers != 0) s += str_cat(", last stage ", std::to_string(last_stage_layers));
  return first_stage_layers != 0 || last_stage_layers != 0 ? s + " layers" : s;
}

PipelineSplit pipeline_split(const ParallelConfig& layout) {
  PipelineSplit s;
  s.pipeline = layout.pipeline;
  s.virtual_stages = layout.virtual_stages;
  s.first_stage_layers = layout.first_stage_layers;
  s.last_stage_layers = layout.last_stage_layers;
  return s;
}

namespace {

// Megatron-Core's TransformerConfig checks of an uneven split, in its words (the names are the
// ptdp-train flags' and the C API fields'). Returns the layers of each middle stage.
int check_uneven(int num_layers, const PipelineSplit& s) {
  const int v = s.virtual_stages;
  const std::string first = std::to_string(s.first_stage_layers), last = std::to_string(s.last_stage_layers);
  PTDP_CHECK_ARG(s.first_stage_layers >= 0,
                 "decoder_first_pipeline_num_layers must be larger than 0 (0: not set), got " + first);
  PTDP_CHECK_ARG(s.last_stage_layers >= 0,
                 "decoder_last_pipeline_num_layers must be larger than 0 (0: not set), got " + last);
  PTDP_CHECK_ARG(!(s.pipeline == 1 && s.first_stage_layers > 0 && s.last_stage_layers > 0),
                 "decoder_first_pipeline_num_layers " + first + " and decoder_last_pipeline_num_layers " + last +
                     " name one stage twice: at pipeline size 1 the first stage is the last");
  int middle_layers = num_layers, middle_stages = s.pipeline;
  if (s.first_stage_layers > 0) {
    PTDP_CHECK_ARG(s.first_stage_layers % v == 0, "number of layers at first stage: " + first +
                                                      " must be divisible by virtual pipeline parallel degree " +
                                                      std::to_string(v));
    middle_layers -= s.first_stage_layers;
    --middle_stages;
  }
  if (s.last_stage_layers > 0) {
    PTDP_CHECK_ARG(s.last_stage_layers % v == 0, "number of layers at last stage: " + last +
                                                     " must be divisible by virtual pipeline parallel degree " +
                                                     std::to_string(v));
    middle_layers -= s.last_stage_layers;
    --middle_stages;
  }
  PTDP_CHECK_ARG(middle_layers >= 0, "decoder_first_pipeline_num_layers " + first +
                                         " and decoder_last_pipeline_num_layers " + last +
                                         " add up to more than num_layers " + std::to_string(num_layers));
  PTDP_CHECK_ARG((middle_layers > 0) == (middle_stages > 0),
                 "Mismatch: " + std::to_string(middle_layers) + " middle layers remaining but " +
                     std::to_string(middle_stages) + " middle PP stages available (num_layers " +
                     std::to_string(num_layers) + ", " + s.str() + ")");
  if (middle_stages == 0) return 0;
  PTDP_CHECK_ARG(middle_layers % middle_stages == 0,
                 "number of layers at middle stage: " + std::to_string(middle_layers) +
                     " must be divisible by the middle pipeline model parallel size " + std::to_string(middle_stages));
  const int per_middle = middle_layers / middle_stages;
  PTDP_CHECK_ARG(per_middle % v == 0, "number of layers on each middle pipeline rank: " + std::to_string(per_middle) +
                                          " must be divisible by virtual pipeline parallel degree " +
                                          std::to_string(v));
  return per_middle;
}

}  // namespace

std::vector<int> stage_layer_counts(int num_layers, const PipelineSplit& s) {
  PTDP_CHECK_ARG(s.pipeline > 0 && s.virtual_stages > 0,
                 "pipeline size " + std::to_string(s.pipeline) + " and virtual pipeline size " +
                     std::to_string(s.virtual_stages) + " must be > 0");
  const int chunks = s.pipeline * s.virtual_stages;
  if (!s.uneven()) {
    PTDP_CHECK_ARG(num_layers % chunks == 0,
                   "num_layers " + std::to_string(num_layers) + " cannot be split evenly over p=" +
                       std::to_string(s.pipeline) + " x v=" + std::to_string(s.virtual_stages) + " = " +
                       std::to_string(chunks) + " model chunks");
    PTDP_CHECK_ARG(num_layers > 0, "num_layers " + std::to_string(num_layers) + " is fewer than the p=" +
                                       std::to_string(s.pipeline) + " x v=" + std::to_string(s.virtual_stages) +
                                       " = " + std::to_string(chunks) + " model chunks");
    return std::vector<int>(static_cast<std::size_t>(s.pipeline), num_layers / s.pipeline);
  }
  std::vector<int> stages(static_cast<std::size_t>(s.pipeline), check_uneven(num_layers, s));
  if (s.first_stage_layers > 0) stages.front() = s.first_stage_layers;
  if (s.last_stage_layers > 0) stages.back() = s.last_stage_layers;
  return stages;
}

std::vector<int> chunk_layer_counts(int num_layers, const PipelineSplit& s) {
  const std::vector<int> stages = stage_layer_counts(num_layers, s);
  std::vector<int> chunks;
  for (int j = 0; j < s.virtual_stages; ++j) {
    for (int r = 0; r < s.pipeline; ++r) chunks.push_back(stages[static_cast<std::size_t>(r)] / s.virtual_stages);
  }
  return chunks;
}

}  // namespace ptdp
