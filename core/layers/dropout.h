// Dropout keyed by global coordinates: the Philox stream of a site is a pure function of
// (iteration, microbatch, layer, site) and each element is drawn at its global index, so every
// parallel layout drops the serial run's elements.
#pragma once

#include <cstdint>

#include "core/layers/layer_support.h"

namespace ptdp {

/// Dropout sites of a transformer layer (and the embedding), for dropout_stream().
enum class DropoutSite : uint32_t { Embedding = 0, AttentionProbs = 1, AttentionOutput = 2, MlpOutput = 3 };

/// The Philox stream of one dropout site: a pure function of (iteration, microbatch, layer,
/// site), so every parallel layout draws the serial run's masks.
uint64_t dropout_stream(const Step& step, int layer, DropoutSite site);

/// The dropout of a whole activation of n elements that is the same on every tensor rank, keyed
/// by dropout_stream(step, layer, site) and each element's index (p = 0 outside training).
DropoutDesc flat_dropout(int64_t n, float p, const Step& step, int layer, DropoutSite site, uint64_t seed);
/// Dropout with flat_dropout's mask. Returns x itself when off.
Tensor dropout_forward(const Tensor& x, float p, const Step& step, int layer, DropoutSite site, uint64_t seed);
Tensor dropout_backward(const Tensor& dy, float p, const Step& step, int layer, DropoutSite site, uint64_t seed);

}  // namespace ptdp
