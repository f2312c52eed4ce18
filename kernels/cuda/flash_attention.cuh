// Fused causal attention (flash-attention style) for the CUDA backend: tensor-core kernels that
// never store the [s, s] scores. Semantics are Backend::attention_forward / attention_backward's
// (kernels/backend.h, AttentionDesc), including dropout masks identical to the unfused path's.
// Design notes are in flash_attention.cu.
#pragma once

#include <cuda_runtime.h>

#include "kernels/backend.h"

namespace ptdp::cuda {

/// Whether the fused kernels cover storage type t and head dim dh (bf16/f16, dh 64 or 128).
/// Thread-safe, needs no device.
bool flash_attention_supported(DType t, int64_t dh);

/// Backend::attention_forward on `stream`, which must belong to the current device:
///   qkv [s, b, groups, heads/groups + 2, dh] -> ctx [s, b, heads, dh], lse [b, heads, s] (fp32)
/// with groups = d.kv_groups() (multi-head attention: qkv [s, b, heads, 3, dh]); each query head
/// reads its group's key and value in place. Arguments are assumed validated by the caller
/// (shapes, groups dividing heads, the dropout block [b, heads, s * s]).
/// Throws Error(Unsupported) naming the dtype and head dim where flash_attention_supported is
/// false, for s > 4194240 or b * heads > 2^30, and for qkv or ctx not 16-byte aligned; launch
/// failures throw Error(Device). Asynchronous; thread-safe for distinct output buffers.
void flash_attention_forward(const AttentionDesc& d, const void* qkv, void* ctx, float* lse,
                             DType t, cudaStream_t stream);

/// Backend::attention_backward on `stream` (the current device's): dqkv in qkv's layout (every
/// element written; a group's dK and dV summed over its query heads in head order) from the
/// forward's qkv, ctx and lse and the gradient dctx; delta [b, heads, s] fp32 is scratch and
/// receives rowsum(dctx * ctx). Deterministic (no atomics).
/// Errors as flash_attention_forward (dctx and dqkv must be 16-byte aligned too).
void flash_attention_backward(const AttentionDesc& d, const void* qkv, const void* ctx,
                              const float* lse, const void* dctx, void* dqkv, float* delta, DType t,
                              cudaStream_t stream);

}  // namespace ptdp::cuda
