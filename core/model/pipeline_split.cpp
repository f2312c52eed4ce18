#include "core/model/pipeline_split.h"

#include <algorithm>

#include "base/error.h"
#include "core/parallel/layout.h"

namespace ptdp {

std::string PipelineSplit::str() const {
  std::string s = str_cat("p=", std::to_string(pipeline), " x v=", std::to_string(virtual_stages));
  if (first_stage_layers != 0) s += str_cat(", first stage ", std::to_string(first_stage_layers));
  if (last_stage_layers != 0) s += str_cat(", last stage ", std::to_string(last_stage_layers));
  if (!layout.empty()) return s + ", layout \"" + layout + "\"";
  return first_stage_layers != 0 || last_stage_layers != 0 ? s + " layers" : s;
}

PipelineSplit pipeline_split(const ParallelConfig& layout) {
  PipelineSplit s;
  s.pipeline = layout.pipeline;
  s.virtual_stages = layout.virtual_stages;
  s.first_stage_layers = layout.first_stage_layers;
  s.last_stage_layers = layout.last_stage_layers;
  s.layout = layout.pipeline_layout;
  return s;
}

namespace {

// Unrolls Megatron's repetitions: "(...)*n" first (innermost groups, no nesting needed), then
// "x*n"; commas are dropped.
std::string unroll_layout(const std::string& in) {
  std::string s;
  for (char ch : in) {
    if (ch != ',' && ch != ' ') s += ch;
  }
  const auto count_at = [&](std::size_t at, std::size_t* end) {
    std::size_t e = at;
    while (e < s.size() && s[e] >= '0' && s[e] <= '9') ++e;
    PTDP_CHECK_ARG(e > at && e - at <= 6,
                   "pipeline_model_parallel_layout \"" + in + "\": '*' must be followed by a repeat count");
    *end = e;
    return std::stoi(s.substr(at, e - at));
  };
  for (std::size_t open; (open = s.find('(')) != std::string::npos;) {
    const std::size_t close = s.find(')', open);
    PTDP_CHECK_ARG(close != std::string::npos && close + 1 < s.size() && s[close + 1] == '*' &&
                       s.find('(', open + 1) > close,
                   "pipeline_model_parallel_layout \"" + in + "\": a group must read (...)*n, without nesting");
    std::size_t end = 0;
    const int n = count_at(close + 2, &end);
    std::string rep;
    for (int i = 0; i < n; ++i) rep += s.substr(open + 1, close - open - 1);
    s = s.substr(0, open) + rep + s.substr(end);
    PTDP_CHECK_ARG(s.size() <= (1u << 20), "pipeline_model_parallel_layout \"" + in + "\" unrolls to over 1 MiB");
  }
  PTDP_CHECK_ARG(s.find(')') == std::string::npos,
                 "pipeline_model_parallel_layout \"" + in + "\": ')' without its '('");
  for (std::size_t star; (star = s.find('*')) != std::string::npos;) {
    PTDP_CHECK_ARG(star > 0 && s[star - 1] != '|',
                   "pipeline_model_parallel_layout \"" + in + "\": '*' must follow a layer character or a group");
    std::size_t end = 0;
    const int n = count_at(star + 1, &end);
    s = s.substr(0, star - 1) + std::string(static_cast<std::size_t>(n), s[star - 1]) + s.substr(end);
    PTDP_CHECK_ARG(s.size() <= (1u << 20), "pipeline_model_parallel_layout \"" + in + "\" unrolls to over 1 MiB");
  }
  return s;
}

}  // namespace

PipelineLayout parse_pipeline_layout(const std::string& layout, int p) {
  PTDP_CHECK_ARG(p > 0, "pipeline size " + std::to_string(p) + " must be > 0");
  PTDP_CHECK_ARG(!layout.empty(), "pipeline_model_parallel_layout is empty");
  const std::string s = unroll_layout(layout);
  PipelineLayout out;
  std::vector<std::string> entries(1);
  for (char ch : s) {
    if (ch == '|') {
      entries.emplace_back();
      continue;
    }
    PTDP_CHECK_ARG(ch != 'm', "pipeline_model_parallel_layout \"" + layout +
                                  "\": 'm' is Megatron's multi-token prediction layer, which ptdp does not have");
    PTDP_CHECK_ARG(ch == 'E' || ch == 't' || ch == 'L',
                   std::string("Invalid layer character: ") + ch + " (pipeline_model_parallel_layout \"" + layout +
                       "\"), known layer characters: E (embedding), t (decoder layer), L (loss)");
    entries.back() += ch;
  }
  const std::size_t n = entries.size();
  PTDP_CHECK_ARG(n % static_cast<std::size_t>(p) == 0,
                 "pipeline_model_parallel_layout must be divisible by pipeline_model_parallel_size (" +
                     std::to_string(n) + " stages in \"" + layout + "\", pipeline_model_parallel_size=" +
                     std::to_string(p) + ")");
  out.virtual_stages = static_cast<int>(n / static_cast<std::size_t>(p));
  std::size_t embeddings = 0, losses = 0;
  for (std::size_t c = 0; c < n; ++c) {
    const std::string& e = entries[c];
    embeddings += static_cast<std::size_t>(std::count(e.begin(), e.end(), 'E'));
    losses += static_cast<std::size_t>(std::count(e.begin(), e.end(), 'L'));
    out.chunk_layers.push_back(static_cast<int>(std::count(e.begin(), e.end(), 't')));
  }
  PTDP_CHECK_ARG(!entries.front().empty() && entries.front().front() == 'E',
                 "The first layer must be embedding (E), but pipeline_model_parallel_layout \"" + layout +
                     "\" starts otherwise");
  PTDP_CHECK_ARG(!entries.back().empty() && entries.back().back() == 'L',
                 "The last layer must be loss (L), but pipeline_model_parallel_layout \"" + layout +
                     "\" ends otherwise");
  PTDP_CHECK_ARG(embeddings == 1, "Embedding must be specified exactly once (pipeline_model_parallel_layout \"" +
                                      layout + "\" has " + std::to_string(embeddings) + ")");
  PTDP_CHECK_ARG(losses == 1, "Loss must be specified exactly once (pipeline_model_parallel_layout \"" + layout +
                                  "\" has " + std::to_string(losses) + ")");
  return out;
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

namespace {

// The layout string's chunk counts, checked against the split and the model.
std::vector<int> layout_chunk_counts(int num_layers, const PipelineSplit& s) {
  PTDP_CHECK_ARG(s.first_stage_layers == 0 && s.last_stage_layers == 0,
                 "pipeline_model_parallel_layout \"" + s.layout +
                     "\" places every layer; it cannot be combined with decoder_first_pipeline_num_layers " +
                     std::to_string(s.first_stage_layers) + " or decoder_last_pipeline_num_layers " +
                     std::to_string(s.last_stage_layers));
  const PipelineLayout l = parse_pipeline_layout(s.layout, s.pipeline);
  PTDP_CHECK_ARG(l.virtual_stages == s.virtual_stages,
                 "pipeline_model_parallel_layout \"" + s.layout + "\" has " +
                     std::to_string(l.chunk_layers.size()) + " stages, " + std::to_string(l.virtual_stages) +
                     " per pipeline rank, but the virtual pipeline size is " + std::to_string(s.virtual_stages));
  int total = 0;
  for (int n : l.chunk_layers) total += n;
  PTDP_CHECK_ARG(total == num_layers, "Number of decoder layers " + std::to_string(total) +
                                          " must match num_layers " + std::to_string(num_layers) +
                                          " (pipeline_model_parallel_layout \"" + s.layout + "\")");
  return l.chunk_layers;
}

}  // namespace

std::vector<int> stage_layer_counts(int num_layers, const PipelineSplit& s) {
  PTDP_CHECK_ARG(s.pipeline > 0 && s.virtual_stages > 0,
                 "pipeline size " + std::to_string(s.pipeline) + " and virtual pipeline size " +
                     std::to_string(s.virtual_stages) + " must be > 0");
  if (!s.layout.empty()) {
    const std::vector<int> chunks = layout_chunk_counts(num_layers, s);
    std::vector<int> stages(static_cast<std::size_t>(s.pipeline), 0);
    for (std::size_t c = 0; c < chunks.size(); ++c) stages[c % static_cast<std::size_t>(s.pipeline)] += chunks[c];
    return stages;
  }
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
  if (!s.layout.empty()) {
    PTDP_CHECK_ARG(s.pipeline > 0 && s.virtual_stages > 0,
                   "pipeline size " + std::to_string(s.pipeline) + " and virtual pipeline size " +
                       std::to_string(s.virtual_stages) + " must be > 0");
    return layout_chunk_counts(num_layers, s);
  }
  const std::vector<int> stages = stage_layer_counts(num_layers, s);
  std::vector<int> chunks;
  for (int j = 0; j < s.virtual_stages; ++j) {
    for (int r = 0; r < s.pipeline; ++r) chunks.push_back(stages[static_cast<std::size_t>(r)] / s.virtual_stages);
  }
  return chunks;
}

}  // namespace ptdp
