// Which decoder layers each pipeline chunk holds: the even split, and Megatron-LM's uneven first
// and last stages (--decoder-first/last-pipeline-num-layers) with the layer offsets of
// Megatron-Core's own test (tests/unit_tests/transformer/test_transformer_layer.py,
// test_get_layer_offset_parametrized) and its TransformerConfig refusals, word for word.
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "core/model/gpt.h"
#include "core/model/pipeline_split.h"
#include "kernels/error.h"

namespace {

using ptdp::GptConfig;
using ptdp::GptStage;
using ptdp::PipelineSplit;

PipelineSplit split(int p, int v, int first = 0, int last = 0) {
  return PipelineSplit{p, v, first, last};
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
