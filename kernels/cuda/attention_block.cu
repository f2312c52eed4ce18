// Ring attention's block-pair kernels on the GPU (AttentionBlockDesc, kernels/backend.h): the
// semantics of kernels/cpu/attention_block.cpp, which they are tested against (tests/cuda,
// label gpu). A warp per row and no shared memory: each lane holds dh / 32 elements (dh <= 256)
// of its row, dot products are warp reductions, and everything is fp32.
//   forward  a warp per (query row, sample, head): online softmax over the block's visible keys,
//            then the row's (output, lse) merged into out and lse by the log-sum-exp rule
//   dQ       a warp per (query row, sample, head): delta = dctx . ctx, then for each visible
//            key P = exp(scale q.k - lse), dS = P (dP - delta), dq += scale dS k
//   dK, dV   a warp per (key row, sample, key/value group): the group's query heads in order,
//            each over the block's queries that see the key; dk += scale dS q, dv += P~ dO
// Each output element is written by one warp, so results are deterministic (no atomics). The
// dropout mask is the whole-sequence kernels': probability (query q, key k) of (sample bi,
// head hi) is element (bi, hi, q * seq + k) of the DropoutDesc's block.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "base/philox.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/validate.h"

namespace ptdp::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxPerLane = 8;  // dh <= 256
constexpr unsigned kFull = 0xffffffffu;

struct BlockArgs {
  int64_t sq, sk, b, heads, groups, qpg, dh, q_start, k_start, seq;
  int64_t q_row, kv_row, o_row;
  float scale;
  const int32_t* starts;
  float* max_logit;  // [b, heads] or NULL: AttentionBlockDesc::max_logit, merged by atomic max
  // Dropout: global index of (bi, hi, idx) = ((bi + o0) * g1 + (hi + o1)) * g2 + o2 + idx.
  PhiloxStream rng;
  float p, keep_scale;
  int64_t g1, g2, o0, o1, o2;

  __device__ int64_t first_key(int64_t bi, int64_t gq) const {
    if (starts == nullptr) return 0;
    const int64_t v = starts[bi * seq + gq];
    return v < 0 ? 0 : (v > gq ? gq : v);
  }
  __device__ float keep_factor(int64_t bi, int64_t hi, int64_t gq, int64_t gk) const {
    if (p == 0.0f) return 1.0f;
    const uint64_t index =
        static_cast<uint64_t>(((bi + o0) * g1 + (hi + o1)) * g2 + o2 + gq * seq + gk);
    return philox_uniform(rng, index) >= p ? keep_scale : 0.0f;
  }
};

__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFull, v, off);
  return v;
}

template <typename T>
__device__ __forceinline__ void load_row(const T* src, int64_t dh, int lane, float* out) {
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) {
    const int64_t e = lane + 32 * k;
    out[k] = e < dh ? to_f32(src[e]) : 0.0f;
  }
}

__device__ __forceinline__ float row_dot(const float* x, const float* y) {
  float acc = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) acc += x[k] * y[k];
  return warp_sum(acc);
}

// One warp's query row of a block pair (item = i * b * heads + bh) and the block's keys it
// attends to, [lo, hi_key] relative to k_start (empty when lo > hi_key).
struct QueryRow {
  int64_t i, bh, bi, hi, jq, unit, gq, lo, hi_key;
};

__device__ inline QueryRow query_row(const BlockArgs& a, int64_t item) {
  QueryRow r;
  r.i = item / (a.b * a.heads);
  r.bh = item % (a.b * a.heads);
  r.bi = r.bh / a.heads;
  r.hi = r.bh % a.heads;
  r.jq = r.hi % a.qpg;
  r.unit = r.bi * a.groups + r.hi / a.qpg;
  r.gq = a.q_start + r.i;
  const int64_t first = a.first_key(r.bi, r.gq);
  r.lo = (first > a.k_start ? first : a.k_start) - a.k_start;
  const int64_t last = r.gq < a.k_start + a.sk - 1 ? r.gq : a.k_start + a.sk - 1;
  r.hi_key = last - a.k_start;
  return r;
}

template <typename T>
__global__ void block_forward_kernel(BlockArgs a, const T* q, const T* kv, float* out, float* lse) {
  const int lane = threadIdx.x % 32;
  const int64_t items = a.sq * a.b * a.heads;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t item = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32; item < items; item += warps) {
    const QueryRow r = query_row(a, item);
    const int64_t i = r.i, bh = r.bh, bi = r.bi, hi = r.hi, jq = r.jq, unit = r.unit, gq = r.gq;
    const int64_t lo = r.lo, hi_key = r.hi_key;
    if (lo > hi_key) continue;
    float qv[kMaxPerLane], kr[kMaxPerLane], acc[kMaxPerLane];
    load_row(q + i * a.q_row + (unit * (a.qpg + 2) + jq) * a.dh, a.dh, lane, qv);
#pragma unroll
    for (int k = 0; k < kMaxPerLane; ++k) acc[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = lo; j <= hi_key; ++j) {
      const T* kj = kv + j * a.kv_row + unit * 2 * a.dh;
      load_row(kj, a.dh, lane, kr);
      const float score = a.scale * row_dot(qv, kr);
      const float m_new = fmaxf(m, score);
      const float rescale = m == -INFINITY ? 0.0f : expf(m - m_new);  // 0 on the first key
      const float pj = expf(score - m_new);
      l = l * rescale + pj;  // dropped keys count too
      const float w = pj * a.keep_factor(bi, hi, gq, a.k_start + j);
      load_row(kj + a.dh, a.dh, lane, kr);
#pragma unroll
      for (int k = 0; k < kMaxPerLane; ++k) acc[k] = acc[k] * rescale + w * kr[k];
      m = m_new;
    }
    if (a.max_logit != nullptr && lane == 0) atomic_max_float(a.max_logit + bh, m);
    const float lse_b = m + logf(l), inv_l = 1.0f / l;
    float* o = out + i * a.o_row + bh * a.dh;
    float* big = lse + bh * a.sq + i;
    const float old = *big;
    __syncwarp();
    float wa = 0.0f, wb = inv_l, merged = lse_b;
    if (old != -INFINITY) {
      const float mx = fmaxf(old, lse_b);
      merged = mx + logf(expf(old - mx) + expf(lse_b - mx));
      wa = expf(old - merged);
      wb = expf(lse_b - merged) * inv_l;
    }
#pragma unroll
    for (int k = 0; k < kMaxPerLane; ++k) {
      const int64_t e = lane + 32 * k;
      if (e < a.dh) o[e] = (old != -INFINITY ? o[e] * wa : 0.0f) + acc[k] * wb;
    }
    if (lane == 0) *big = merged;
  }
}

template <typename T>
__global__ void block_dq_kernel(BlockArgs a, const T* q, const T* kv, const T* ctx, const float* lse,
                                const T* dctx, float* dq) {
  const int lane = threadIdx.x % 32;
  const int64_t items = a.sq * a.b * a.heads;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t item = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32; item < items; item += warps) {
    const QueryRow r = query_row(a, item);
    const int64_t i = r.i, bh = r.bh, bi = r.bi, hi = r.hi, jq = r.jq, unit = r.unit, gq = r.gq;
    const int64_t lo = r.lo, hi_key = r.hi_key;
    if (lo > hi_key) continue;
    float qv[kMaxPerLane], dov[kMaxPerLane], tmp[kMaxPerLane], acc[kMaxPerLane];
    load_row(q + i * a.q_row + (unit * (a.qpg + 2) + jq) * a.dh, a.dh, lane, qv);
    load_row(dctx + i * a.o_row + bh * a.dh, a.dh, lane, dov);
    load_row(ctx + i * a.o_row + bh * a.dh, a.dh, lane, tmp);
    const float delta = row_dot(dov, tmp), lse_i = lse[bh * a.sq + i];
#pragma unroll
    for (int k = 0; k < kMaxPerLane; ++k) acc[k] = 0.0f;
    for (int64_t j = lo; j <= hi_key; ++j) {
      const T* kj = kv + j * a.kv_row + unit * 2 * a.dh;
      load_row(kj + a.dh, a.dh, lane, tmp);
      const float kf = a.keep_factor(bi, hi, gq, a.k_start + j);
      const float dp = kf * row_dot(dov, tmp);
      load_row(kj, a.dh, lane, tmp);
      const float pj = expf(a.scale * row_dot(qv, tmp) - lse_i);
      const float ds = a.scale * (pj * (dp - delta));
#pragma unroll
      for (int k = 0; k < kMaxPerLane; ++k) acc[k] += ds * tmp[k];
    }
    float* out = dq + i * a.o_row + bh * a.dh;
#pragma unroll
    for (int k = 0; k < kMaxPerLane; ++k) {
      const int64_t e = lane + 32 * k;
      if (e < a.dh) out[e] += acc[k];
    }
  }
}

template <typename T>
__global__ void block_dkv_kernel(BlockArgs a, const T* q, const T* kv, const T* ctx, const float* lse,
                                 const T* dctx, float* dkv) {
  const int lane = threadIdx.x % 32;
  const int64_t items = a.sk * a.b * a.groups;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t item = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32; item < items; item += warps) {
    const int64_t j = item / (a.b * a.groups), unit = item % (a.b * a.groups);
    const int64_t bi = unit / a.groups, g = unit % a.groups, gk = a.k_start + j;
    float kr[kMaxPerLane], vr[kMaxPerLane], qv[kMaxPerLane], dov[kMaxPerLane], tmp[kMaxPerLane];
    float dk[kMaxPerLane], dv[kMaxPerLane];
    load_row(kv + j * a.kv_row + unit * 2 * a.dh, a.dh, lane, kr);
    load_row(kv + j * a.kv_row + unit * 2 * a.dh + a.dh, a.dh, lane, vr);
#pragma unroll
    for (int k = 0; k < kMaxPerLane; ++k) dk[k] = dv[k] = 0.0f;
    const int64_t i0 = gk - a.q_start > 0 ? gk - a.q_start : 0;  // queries before the key see none of it
    for (int64_t jq = 0; jq < a.qpg; ++jq) {
      const int64_t hi = g * a.qpg + jq, bh = bi * a.heads + hi;
      for (int64_t i = i0; i < a.sq; ++i) {
        const int64_t gq = a.q_start + i;
        if (a.first_key(bi, gq) > gk) break;  // documents start after the key from here on
        load_row(q + i * a.q_row + (unit * (a.qpg + 2) + jq) * a.dh, a.dh, lane, qv);
        load_row(dctx + i * a.o_row + bh * a.dh, a.dh, lane, dov);
        load_row(ctx + i * a.o_row + bh * a.dh, a.dh, lane, tmp);
        const float delta = row_dot(dov, tmp);
        const float pj = expf(a.scale * row_dot(qv, kr) - lse[bh * a.sq + i]);
        const float kf = a.keep_factor(bi, hi, gq, gk);
        const float dp = kf * row_dot(dov, vr);
        const float ds = a.scale * (pj * (dp - delta));
#pragma unroll
        for (int k = 0; k < kMaxPerLane; ++k) {
          dv[k] += pj * kf * dov[k];
          dk[k] += ds * qv[k];
        }
      }
    }
    float* out = dkv + j * a.kv_row + unit * 2 * a.dh;
#pragma unroll
    for (int k = 0; k < kMaxPerLane; ++k) {
      const int64_t e = lane + 32 * k;
      if (e < a.dh) {
        out[e] += dk[k];
        out[a.dh + e] += dv[k];
      }
    }
  }
}

BlockArgs block_args(const AttentionBlockDesc& d) {
  BlockArgs a{};
  a.sq = d.sq;
  a.sk = d.sk;
  a.b = d.b;
  a.heads = d.heads;
  a.groups = d.kv_groups();
  a.qpg = d.q_per_group();
  a.dh = d.dh;
  a.q_start = d.q_start;
  a.k_start = d.k_start;
  a.seq = d.seq;
  a.q_row = d.b * a.groups * (a.qpg + 2) * d.dh;
  a.kv_row = d.b * a.groups * 2 * d.dh;
  a.o_row = d.b * d.heads * d.dh;
  a.scale = d.scale;
  a.starts = d.document_starts;
  a.max_logit = d.max_logit;
  a.rng = d.dropout.rng;
  a.p = d.dropout.p;
  a.keep_scale = kcheck::dropout_keep_scale(d.dropout.p);
  a.g1 = d.dropout.block.global_shape[1];
  a.g2 = d.dropout.block.global_shape[2];
  a.o0 = d.dropout.block.offset[0];
  a.o1 = d.dropout.block.offset[1];
  a.o2 = d.dropout.block.offset[2];
  return a;
}

unsigned warp_grid(int64_t items) {
  const int64_t want = (items + kWarpsPerBlock - 1) / kWarpsPerBlock;
  constexpr int64_t kMax = 65535LL * 16;
  return static_cast<unsigned>(want < 1 ? 1 : (want < kMax ? want : kMax));
}

void require_head_dim(const char* op, const AttentionBlockDesc& d, int dev) {
  if (d.dh > 32 * kMaxPerLane) {
    throw Error(ErrorCode::Unsupported, str_cat(op, ": head dim ", d.dh, " exceeds ", 32 * kMaxPerLane,
                                                " (device ", dev, ")"));
  }
}

}  // namespace

bool CudaBackend::attention_block_supported(DType t, int64_t dh) const {
  return (t == DType::F32 || t == DType::BF16 || t == DType::F16) && dh > 0 && dh <= 32 * kMaxPerLane;
}

void CudaBackend::attention_block_forward(const AttentionBlockDesc& d, const void* q, const void* kv, float* out,
                                          float* lse, DType t) {
  kcheck::check_attention_block_forward(d, q, kv, out, lse, t);
  require_head_dim("attention_block_forward", d, dev_);
  DeviceGuard guard(dev_);
  const BlockArgs a = block_args(d);
  dispatch_float(t, "attention_block_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    block_forward_kernel<T><<<warp_grid(d.sq * d.b * d.heads), 32 * kWarpsPerBlock, 0, stream_>>>(
        a, static_cast<const T*>(q), static_cast<const T*>(kv), out, lse);
  });
  PTDP_CU_LAUNCHED("block_forward_kernel");
}

void CudaBackend::attention_block_backward(const AttentionBlockDesc& d, const void* q, const void* kv,
                                           const void* ctx, const float* lse, const void* dctx, float* dq,
                                           float* dkv, DType t) {
  kcheck::check_attention_block_backward(d, q, kv, ctx, lse, dctx, dq, dkv, t);
  require_head_dim("attention_block_backward", d, dev_);
  DeviceGuard guard(dev_);
  const BlockArgs a = block_args(d);
  dispatch_float(t, "attention_block_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    block_dq_kernel<T><<<warp_grid(d.sq * d.b * d.heads), 32 * kWarpsPerBlock, 0, stream_>>>(
        a, static_cast<const T*>(q), static_cast<const T*>(kv), static_cast<const T*>(ctx), lse,
        static_cast<const T*>(dctx), dq);
    block_dkv_kernel<T><<<warp_grid(d.sk * d.b * a.groups), 32 * kWarpsPerBlock, 0, stream_>>>(
        a, static_cast<const T*>(q), static_cast<const T*>(kv), static_cast<const T*>(ctx), lse,
        static_cast<const T*>(dctx), dkv);
  });
  PTDP_CU_LAUNCHED("block_backward_kernels");
}

}  // namespace ptdp::cuda
