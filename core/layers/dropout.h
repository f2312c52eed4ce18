// Dropout keyed by global coordinates: the Philox stream of a site is a pure function of
// (iteration, microbatch, layer, site) and each element is drawn at its global index, so every
// parallel layout drops the serial run's elements.
#pragma once

#include <cstdint>
#include <vector>

#include "core/layers/layer_support.h"

namespace ptdp {

/// Dropout sites of a transformer layer (and the embedding), for dropout_stream().
enum class DropoutSite : uint32_t { Embedding = 0, AttentionProbs = 1, AttentionOutput = 2, MlpOutput = 3 };

/// The Philox stream of one dropout site: a pure function of (iteration, microbatch, layer,
/// site), so every parallel layout draws the serial run's masks.
uint64_t dropout_stream(const Step& step, int layer, DropoutSite site);

/// Where a flat activation of n elements sits in the whole one: elements [offset, offset + n)
/// of `total` (0: the whole, n). Sequence parallelism's shards are slices of the rows.
struct FlatSlice {
  int64_t offset = 0;
  int64_t total = 0;
};

/// The dropout of a flat activation of n elements that is the same on every tensor rank (or,
/// with `slice`, this rank's part of it), keyed by dropout_stream(step, layer, site) and each
/// element's index in the whole (p = 0 outside training): every layout drops the same elements.
DropoutDesc flat_dropout(int64_t n, float p, const Step& step, int layer, DropoutSite site, uint64_t seed,
                         FlatSlice slice = {});
/// Dropout with flat_dropout's mask: x (dy) of any shape, n elements -> its shape. Returns x
/// itself when off.
Tensor dropout_forward(const Tensor& x, float p, const Step& step, int layer, DropoutSite site, uint64_t seed,
                       FlatSlice slice = {});
Tensor dropout_backward(const Tensor& dy, float p, const Step& step, int layer, DropoutSite site, uint64_t seed,
                        FlatSlice slice = {});
/// The slice of a sequence-major activation of `n` elements that this rank holds when `tp`
/// splits the sequence (rank r: elements [r n, (r + 1) n) of t n), else the whole.
FlatSlice sequence_slice(const TensorParallel& tp, bool sharded, int64_t n);

/// A part of this rank's flat activation: elements [local_offset, local_offset + n) of it are
/// `slice` of the whole one.
struct FlatPiece {
  int64_t local_offset = 0;
  int64_t n = 0;
  FlatSlice slice;
};
/// Where this rank's sequence-major activation of `n` elements sits in the whole one: a single
/// piece (sequence_slice's) without context parallelism; with it (tp.cp), the parts of it in
/// each of the rank's two chunks of the sequence (sequence parallelism splits the context
/// rank's s/c positions further, so a tensor rank's rows may fall in one chunk or both).
std::vector<FlatPiece> activation_pieces(const TensorParallel& tp, bool sharded, int64_t n);
/// flat_dropout's mask over each piece: every layout drops the serial run's elements. x (dy):
/// this rank's sequence-major activation, [s/c*b, h] or [s/c*b/t, h] -> its shape.
Tensor dropout_forward(const Tensor& x, float p, const Step& step, int layer, DropoutSite site, uint64_t seed,
                       const std::vector<FlatPiece>& pieces);
Tensor dropout_backward(const Tensor& dy, float p, const Step& step, int layer, DropoutSite site, uint64_t seed,
                        const std::vector<FlatPiece>& pieces);

}  // namespace ptdp
