#include "core/layers/dropout.h"

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

namespace {

Tensor apply_dropout(const Tensor& in, float p, const Step& step, int layer, DropoutSite site, uint64_t seed,
                     FlatSlice slice, bool backward) {
  if (!step.training || p == 0.0f) return in;
  Tensor out = empty_like(in, in.shape());
  const DropoutDesc d = flat_dropout(in.numel(), p, step, layer, site, seed, slice);
  if (backward) in.backend().dropout_backward(in.raw(), out.raw(), in.dtype(), d);
  else in.backend().dropout_forward(in.raw(), out.raw(), in.dtype(), d);
  return out;
}

}  // namespace

Tensor dropout_forward(const Tensor& x, float p, const Step& step, int layer, DropoutSite site, uint64_t seed,
                       FlatSlice slice) {
  return apply_dropout(x, p, step, layer, site, seed, slice, false);
}

Tensor dropout_backward(const Tensor& dy, float p, const Step& step, int layer, DropoutSite site, uint64_t seed,
                        FlatSlice slice) {
  return apply_dropout(dy, p, step, layer, site, seed, slice, true);
}

}  // namespace ptdp
