// Generation's attention over a key/value cache (KvCacheAttention in core_attention.h): the new
// tokens' keys and values go to their positions' rows of the layer's cache, then the unfused
// path's GEMMs and causal softmax run over the whole cached prefix, batched over this rank's
// g/t groups for each query head j of a group.
#include <string>

#include "base/error.h"
#include "core/layers/attention/core_attention.h"
#include "core/layers/kv_cache.h"

namespace ptdp {

Tensor KvCacheAttention::forward(const Tensor& qkv, KvCache& cache) const {
  const int64_t heads = spec_.heads, gl = spec_.groups, dh = spec_.dh, qg = spec_.q_per_group;
  const int64_t group = spec_.group_cols(), kv_cols = gl * 2 * dh;
  const int64_t n = rows_of(qkv, spec_.qkv_cols(), "qkv"), start = cache.length, sk = start + n;
  PTDP_CHECK_ARG(sk <= cache.capacity, "key/value cache: " + std::to_string(start) + " cached + " + std::to_string(n) +
                                           " new tokens exceed its capacity " + std::to_string(cache.capacity));
  Backend& be = qkv.backend();
  const DType t = qkv.dtype();
  Tensor& kv = cache.layers[spec_.layer];  // [capacity, g/t*2*dh]
  if (!kv.defined()) kv = empty_like(qkv, {cache.capacity, kv_cols});
  // Each new token's group keys and values (adjacent in qkv) go to its position's row.
  be.copy_2d(element_ptr(kv, start * kv_cols), 2 * dh, element_ptr(qkv, qg * dh), group, t, n * gl, 2 * dh);
  // Per query head j of the groups, batched over the g/t groups: scores [a/t, n, sk] (query head
  // k * a/g + j of group k), causal over positions start + i, then the context [n, a/t, dh].
  Tensor probs = empty_like(qkv, {heads, n, sk});  // [a/t, n, sk]
  for (int64_t j = 0; j < qg; ++j) {
    strided_batched_gemm(be, t, false, true, n, sk, dh, gl, {element_ptr(qkv, j * dh), gl * group, group},
                         {kv.raw(), kv_cols, 2 * dh}, element_ptr(probs, j * n * sk), sk, qg * n * sk);
  }
  be.softmax_forward(probs.raw(), probs.raw(), t, heads, n, sk, spec_.scale(), true);
  Tensor ctx = empty_like(qkv, {n, spec_.ctx_cols()});  // [n, a/t*dh]
  for (int64_t j = 0; j < qg; ++j) {
    strided_batched_gemm(be, t, false, false, n, dh, sk, gl, {element_ptr(probs, j * n * sk), sk, qg * n * sk},
                         {element_ptr(kv, dh), kv_cols, 2 * dh}, element_ptr(ctx, j * dh), spec_.ctx_cols(), qg * dh);
  }
  return ctx;
}

}  // namespace ptdp
