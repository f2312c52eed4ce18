#include "core/layers/dropout.h"

#include <algorithm>

namespace ptdp {

uint64_t dropout_stream(const Step& step, int layer, DropoutSite site) {
  // splitmix64 over the coordinates: distinct (iteration, microbatch, layer, site) give
  // unrelated streams.
  auto mix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  uint64_t h = mix(static_cast<uint64_t>(step.iteration));
  h = mix(h ^ static_cast<uint64_t>(step.microbatch));
  h = mix(h ^ static_cast<uint64_t>(static_cast<int64_t>(layer)));
  return mix(h ^ static_cast<uint64_t>(site));
}

DropoutDesc flat_dropout(int64_t n, float p, const Step& step, int layer, DropoutSite site, uint64_t seed,
                         FlatSlice slice) {
  DropoutDesc d;
  if (!step.training) return d;  // p = 0: none
  d.p = p;
  d.rng = PhiloxStream{seed, dropout_stream(step, layer, site)};
  d.block = GlobalBlock::flat(n);
  if (slice.total > 0) {
    d.block.global_shape[2] = slice.total;
    d.block.offset[2] = slice.offset;
  }
  return d;
}

FlatSlice sequence_slice(const TensorParallel& tp, bool sharded, int64_t n) {
  if (!sharded) return {};
  return {tp.rank * n, tp.size * n};
}

std::vector<FlatPiece> activation_pieces(const TensorParallel& tp, bool sharded, int64_t n) {
  if (tp.cp.size == 1) return {FlatPiece{0, n, sequence_slice(tp, sharded, n)}};
  // This tensor rank's elements [lo, lo + n) of the context rank's local activation, whose
  // halves are the chunks cp.chunk(0) and cp.chunk(1) of the whole.
  const int64_t local = sharded ? tp.size * n : n, lo = sharded ? tp.rank * n : 0, half = local / 2;
  const int64_t total = local * tp.cp.size;
  std::vector<FlatPiece> out;
  for (int k = 0; k < 2; ++k) {
    const int64_t a = std::max(lo, k * half), b = std::min(lo + n, (k + 1) * half);
    if (a >= b) continue;
    out.push_back(FlatPiece{a - lo, b - a, FlatSlice{tp.cp.chunk(k) * half + (a - k * half), total}});
  }
  return out;
}

namespace {

// in of any shape -> the dropout (or its backward) of in, in's shape; in itself when off.
Tensor apply_dropout(const Tensor& in, float p, const Step& step, int layer, DropoutSite site, uint64_t seed,
                     FlatSlice slice, bool backward) {
  if (!step.training || p == 0.0f) return in;
  Tensor out = empty_like(in, in.shape());  // in's shape, any
  const DropoutDesc d = flat_dropout(in.numel(), p, step, layer, site, seed, slice);
  if (backward) in.backend().dropout_backward(in.raw(), out.raw(), in.dtype(), d);
  else in.backend().dropout_forward(in.raw(), out.raw(), in.dtype(), d);
  return out;
}

// The same piece by piece: in [s/c*b, h] or [s/c*b/t, h] -> its shape.
Tensor apply_pieces(const Tensor& in, float p, const Step& step, int layer, DropoutSite site, uint64_t seed,
                    const std::vector<FlatPiece>& pieces, bool backward) {
  if (!step.training || p == 0.0f) return in;
  Tensor out = empty_like(in, in.shape());  // [s/c*b, h] or [s/c*b/t, h]
  for (const FlatPiece& piece : pieces) {
    const DropoutDesc d = flat_dropout(piece.n, p, step, layer, site, seed, piece.slice);
    const void* src = element_ptr(in, piece.local_offset);
    void* dst = element_ptr(out, piece.local_offset);
    if (backward) in.backend().dropout_backward(src, dst, in.dtype(), d);
    else in.backend().dropout_forward(src, dst, in.dtype(), d);
  }
  return out;
}

}  // namespace

Tensor dropout_forward(const Tensor& x, float p, const Step& step, int layer, DropoutSite site, uint64_t seed,
                       const std::vector<FlatPiece>& pieces) {
  return apply_pieces(x, p, step, layer, site, seed, pieces, false);
}

Tensor dropout_backward(const Tensor& dy, float p, const Step& step, int layer, DropoutSite site, uint64_t seed,
                        const std::vector<FlatPiece>& pieces) {
  return apply_pieces(dy, p, step, layer, site, seed, pieces, true);
}

Tensor dropout_forward(const Tensor& x, float p, const Step& step, int layer, DropoutSite site, uint64_t seed,
                       FlatSlice slice) {
  return apply_dropout(x, p, step, layer, site, seed, slice, false);
}

Tensor dropout_backward(const Tensor& dy, float p, const Step& step, int layer, DropoutSite site, uint64_t seed,
                        FlatSlice slice) {
  return apply_dropout(dy, p, step, layer, site, seed, slice, true);
}

}  // namespace ptdp
