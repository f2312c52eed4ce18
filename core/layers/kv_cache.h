// The keys and values of every layer of a model for one sequence being generated, so that each
// new token attends to the cached prefix instead of recomputing it (inference only; read and
// extended by KvCacheAttention, core/layers/attention/core_attention.h).
#pragma once

#include <cstdint>
#include <map>

#include "core/tensor/tensor.h"

namespace ptdp {

struct KvCache {
  int64_t capacity = 0;  ///< tokens the cache holds at most (the context window)
  int64_t length = 0;    ///< tokens cached so far: the next token's position
  /// Per global layer index: [capacity, g/t*2*dh], at every position each group's key head then
  /// its value head (RoPE already applied to the keys), allocated on first use.
  std::map<int, Tensor> layers;

  void reset() { length = 0; }
};

}  // namespace ptdp
