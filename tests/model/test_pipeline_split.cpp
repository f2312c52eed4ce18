// Which decoder layers each pipeline chunk holds: the even split, and Megatron-LM's uneven first
// and last stages (--decoder-first/last-pipeline-num-layers) with the layer offsets of
// Megatron-Core's own test (tests/unit_tests/transformer/test_transformer_layer.py,
// test_get_layer_offset_parametrized) and its TransformerConfig refusals, word for word.
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "core/model/gpt.h"
#include "core/model/pipeline_split.h"

namespace {

using ptdp::GptConfig;
using ptdp::GptStage;
using ptdp::PipelineSplit;

PipelineSplit split(int p, int v, int first = 0, int last = 0) {
  return PipelineSplit{p, v, first, last, {}};
}

GptConfig layers(int n) {
  GptConfig g;
  g.num_layers = n;
  return g;
}

// Megatron's offsets as (pp_rank, vp_stage) -> first layer.
using Offsets = std::vector<std::pair<std::pair<int, int>, int>>;

void check_offsets(int num_layers, const PipelineSplit& s, const Offsets& want) {
  for (const auto& [at, first] : want) {
    const int chunk = at.second * s.pipeline + at.first;
    INFO("pp_rank " << at.first << ", vp_stage " << at.second);
    CHECK(GptStage::chunk_of(layers(num_layers), s, chunk).first_layer == first);
  }
}

std::string refusal(int num_layers, const PipelineSplit& s) {
  try {
    ptdp::chunk_layer_counts(num_layers, s);
  } catch (const ptdp::Error& e) {
    CHECK(e.code() == ptdp::ErrorCode::InvalidArgument);
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("Megatron-Core's layer offsets of uneven interleaved pipelines", "[model][pipeline_split]") {
  // 30 layers: 8 + 6 + 6 + 10 over p = 4, v = 2.
  check_offsets(30, split(4, 2, 8, 10),
                {{{0, 0}, 0}, {{0, 1}, 15}, {{1, 0}, 4}, {{1, 1}, 19}, {{2, 0}, 7}, {{2, 1}, 22}, {{3, 0}, 10},
                 {{3, 1}, 25}});
  CHECK(ptdp::chunk_layer_counts(30, split(4, 2, 8, 10)) == std::vector<int>{4, 3, 3, 5, 4, 3, 3, 5});
  CHECK(ptdp::stage_layer_counts(30, split(4, 2, 8, 10)) == std::vector<int>{8, 6, 6, 10});
  // 26 layers: 8 first, the other three stages 6 each.
  check_offsets(26, split(4, 2, 8, 0),
                {{{0, 0}, 0}, {{0, 1}, 13}, {{1, 0}, 4}, {{1, 1}, 17}, {{2, 0}, 7}, {{2, 1}, 20}, {{3, 0}, 10},
                 {{3, 1}, 23}});
  // 26 layers: 8 last.
  check_offsets(26, split(4, 2, 0, 8),
                {{{0, 0}, 0}, {{0, 1}, 13}, {{1, 0}, 3}, {{1, 1}, 16}, {{2, 0}, 6}, {{2, 1}, 19}, {{3, 0}, 9},
                 {{3, 1}, 22}});
  // 24 layers, even.
  check_offsets(24, split(4, 2),
                {{{0, 0}, 0}, {{0, 1}, 12}, {{1, 0}, 3}, {{1, 1}, 15}, {{2, 0}, 6}, {{2, 1}, 18}, {{3, 0}, 9},
                 {{3, 1}, 21}});
}

TEST_CASE("uneven stages without interleaving: contiguous layers, the ends as given", "[model][pipeline_split]") {
  CHECK(ptdp::stage_layer_counts(5, split(2, 1, 3)) == std::vector<int>{3, 2});
  CHECK(ptdp::stage_layer_counts(5, split(2, 1, 0, 1)) == std::vector<int>{4, 1});
  CHECK(ptdp::stage_layer_counts(8, split(4, 1, 1, 3)) == std::vector<int>{1, 2, 2, 3});
  CHECK(ptdp::stage_layer_counts(4, split(3, 1, 0, 2)) == std::vector<int>{1, 1, 2});  // p need not divide the layers
  CHECK(ptdp::stage_layer_counts(6, split(1, 1, 6)) == std::vector<int>{6});          // p = 1: the whole model
  const GptConfig g = layers(8);
  const PipelineSplit s = split(4, 1, 1, 3);
  const int first[4] = {0, 1, 3, 5}, count[4] = {1, 2, 2, 3};
  for (int c = 0; c < 4; ++c) {
    const GptStage st = GptStage::chunk_of(g, s, c);
    CHECK(st.first_layer == first[c]);
    CHECK(st.num_layers == count[c]);
    CHECK(st.pre_process == (c == 0));
    CHECK(st.post_process == (c == 3));
  }
  // The even split is the old one.
  for (int c = 0; c < 8; ++c) {
    const GptStage a = GptStage::chunk_of(layers(16), c, 8, 4, 2), b = GptStage::chunk_of(layers(16), split(4, 2), c);
    CHECK(a.first_layer == 2 * c);
    CHECK(b.first_layer == a.first_layer);
    CHECK(b.num_layers == 2);
  }
}

TEST_CASE("Megatron's refusals of uneven splits", "[model][pipeline_split]") {
  CHECK(refusal(30, split(4, 2, 7, 10)) ==
        "number of layers at first stage: 7 must be divisible by virtual pipeline parallel degree 2");
  CHECK(refusal(30, split(4, 2, 8, 9)) ==
        "number of layers at last stage: 9 must be divisible by virtual pipeline parallel degree 2");
  CHECK(refusal(6, split(2, 1, 4, 1)) ==
        "Mismatch: 1 middle layers remaining but 0 middle PP stages available (num_layers 6, p=2 x v=1, first "
        "stage 4, last stage 1 layers)");
  CHECK(refusal(5, split(3, 1, 3, 2)) ==
        "Mismatch: 0 middle layers remaining but 1 middle PP stages available (num_layers 5, p=3 x v=1, first "
        "stage 3, last stage 2 layers)");
  CHECK(refusal(6, split(1, 1, 4)) ==
        "Mismatch: 2 middle layers remaining but 0 middle PP stages available (num_layers 6, p=1 x v=1, first "
        "stage 4 layers)");
  CHECK(refusal(8, split(4, 1, 1, 2)) ==
        "number of layers at middle stage: 5 must be divisible by the middle pipeline model parallel size 2");
  CHECK(refusal(10, split(4, 2, 2, 2)) ==
        "number of layers on each middle pipeline rank: 3 must be divisible by virtual pipeline parallel degree 2");
  // ptdp's own, where Megatron would build a model with a negative number of layers.
  CHECK(refusal(4, split(3, 1, 3, 3)) ==
        "decoder_first_pipeline_num_layers 3 and decoder_last_pipeline_num_layers 3 add up to more than num_layers 4");
  CHECK(refusal(4, split(1, 1, 2, 2)) ==
        "decoder_first_pipeline_num_layers 2 and decoder_last_pipeline_num_layers 2 name one stage twice: at "
        "pipeline size 1 the first stage is the last");
  CHECK(refusal(4, split(2, 1, -1)) == "decoder_first_pipeline_num_layers must be larger than 0 (0: not set), got -1");
  // The even split keeps its words.
  CHECK(refusal(6, split(4, 1)) == "num_layers 6 cannot be split evenly over p=4 x v=1 = 4 model chunks");
  CHECK_THROWS_AS(GptStage::chunk_of(layers(8), split(4, 1, 1, 3), 4), ptdp::Error);
}

TEST_CASE("Megatron's --pipeline-model-parallel-layout: repetitions, chunk order and offsets", "[model][pipeline_split]") {
  // Megatron's documented DeepSeek-V3 layout "Et*3|(tt|)*29,m|L" with a decoder layer for its MTP
  // layer: 32 = 16 x 2 entries, 3 + 29 * 2 + 1 = 62 decoder layers, the loss chunk empty.
  const ptdp::PipelineLayout big = ptdp::parse_pipeline_layout("Et*3|(tt|)*29,t|L", 16);
  CHECK(big.virtual_stages == 2);
  REQUIRE(big.chunk_layers.size() == 32);
  CHECK(big.chunk_layers.front() == 3);
  CHECK(big.chunk_layers[1] == 2);
  CHECK(big.chunk_layers[29] == 2);
  CHECK(big.chunk_layers[30] == 1);
  CHECK(big.chunk_layers.back() == 0);
  // p = 2, v = 2: chunks (c = vp_stage * 2 + pp_rank) of 3, 2, 2, 1 layers.
  PipelineSplit s = split(2, 2);
  s.layout = "Et*3|(tt|)*2,tL";
  CHECK(ptdp::chunk_layer_counts(8, s) == std::vector<int>{3, 2, 2, 1});
  CHECK(ptdp::stage_layer_counts(8, s) == std::vector<int>{5, 3});
  check_offsets(8, s, {{{0, 0}, 0}, {{1, 0}, 3}, {{0, 1}, 5}, {{1, 1}, 7}});
  const GptStage first = GptStage::chunk_of(layers(8), s, 0), last = GptStage::chunk_of(layers(8), s, 3);
  CHECK(first.pre_process);
  CHECK_FALSE(first.post_process);
  CHECK(last.post_process);
  CHECK(last.num_layers == 1);
  // Chunks without decoder layers: the embedding alone and the loss alone.
  PipelineSplit ends = split(3, 1);
  ends.layout = "E|t*6|L";
  CHECK(ptdp::chunk_layer_counts(6, ends) == std::vector<int>{0, 6, 0});
  CHECK(ptdp::parse_pipeline_layout("E,t,t|t,t,L", 2).chunk_layers == std::vector<int>{2, 2});  // commas cosmetic
  CHECK(ptdp::parse_pipeline_layout("(Et|)*1tL", 1).chunk_layers == std::vector<int>{1, 1});
}

TEST_CASE("Megatron's refusals of a pipeline layout, in its words", "[model][pipeline_split]") {
  const auto refused = [](const std::string& layout, int p, int num_layers, int v, const std::string& words) {
    INFO(layout << " at p = " << p << ", v = " << v << ", " << num_layers << " layers");
    PipelineSplit s = split(p, v);
    s.layout = layout;
    try {
      ptdp::chunk_layer_counts(num_layers, s);
      FAIL("accepted");
    } catch (const ptdp::Error& e) {
      CHECK(e.code() == ptdp::ErrorCode::InvalidArgument);
      CHECK_THAT(e.what(), Catch::Contains(words));
    }
  };
  refused("Ett|ttL", 2, 5, 1, "Number of decoder layers 4 must match num_layers 5");
  refused("Ett|tt|L", 2, 4, 1, "must be divisible by pipeline_model_parallel_size (3 stages");
  refused("tEt|ttL", 2, 4, 1, "The first layer must be embedding (E)");
  refused("Ett|tLt", 2, 4, 1, "The last layer must be loss (L)");
  refused("Ett|EtL", 2, 4, 1, "Embedding must be specified exactly once");
  refused("EtLt|tL", 2, 4, 1, "Loss must be specified exactly once");
  refused("Etx|ttL", 2, 4, 1, "Invalid layer character: x");
  refused("Ett|tm|L|L", 2, 4, 2, "'m' is Megatron's multi-token prediction layer");
  refused("Et*|ttL", 2, 3, 1, "'*' must be followed by a repeat count");
  refused("E(t|t)|tL", 2, 3, 1, "a group must read (...)*n");
  refused("Ett|ttL", 2, 4, 2, "has 2 stages, 1 per pipeline rank, but the virtual pipeline size is 2");
  PipelineSplit both = split(2, 1, 2);
  both.layout = "Ett|ttL";
  CHECK_THROWS_WITH(ptdp::chunk_layer_counts(4, both), Catch::Contains("cannot be combined with"));
}
