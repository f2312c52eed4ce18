// Text generation with a whole model on one rank's tensor group: repeatedly the logits at the
// last position of the last seq_length tokens, divided by the temperature, cut to the top k,
// and a token drawn from them with Philox (a pure function of the seed), so every tensor rank
// draws the same token.
//
// A key/value cache (the default) keeps every layer's keys and values, so each new token costs
// one token's forward pass: the window is encoded once, then tokens are appended until it holds
// seq_length of them; only when the window must slide (the text outgrows seq_length and the
// positions of every kept token move) is the window encoded again. This draws exactly the
// tokens of recomputing the whole window for every token (use_kv_cache = false), whose logits
// it reproduces up to fp32 round-off.
#pragma once

#include <cstdint>
#include <vector>

#include "core/model/gpt.h"

namespace ptdp {

struct GenerateConfig {
  int max_new_tokens = 64;
  int top_k = 0;  ///< 0: every token; 1: greedy
  float temperature = 1.0f;
  uint64_t seed = 1234;
  bool use_kv_cache = true;  ///< false: recompute the whole window for every new token

  /// Throws Error(InvalidArgument) naming the field for a negative count or top_k, or a
  /// temperature that is not a finite number > 0.
  void validate() const;
};

/// The new tokens after `prompt` (non-empty, ids in the vocabulary; else InvalidArgument naming
/// the position). Collective over the model's tensor group.
std::vector<int32_t> generate(GptModel& model, const std::vector<int32_t>& prompt, const GenerateConfig& config);

}  // namespace ptdp
