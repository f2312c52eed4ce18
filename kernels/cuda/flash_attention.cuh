// Fused causal attention (flash-attention style) for the CUDA backend. Placeholder: declared
// here, implemented in flash_attention.cu.
#pragma once

#include <cuda_runtime.h>

#include "kernels/backend.h"

namespace ptdp::cuda {

/// Whether the fused kernels cover storage type t and head dim dh (bf16/f16, dh 64 or 128).
bool flash_attention_supported(DType t, int64_t dh);
/// Backend::attention_forward on `stream`.
void flash_attention_forward(const AttentionDesc& d, const void* qkv, void* ctx, float* lse, DType t,
                             cudaStream_t stream);
/// Backend::attention_backward on `stream`.
void flash_attention_backward(const AttentionDesc& d, const void* qkv, const void* ctx, const float* lse,
                              const void* dctx, void* dqkv, float* delta, DType t, cudaStream_t stream);

}  // namespace ptdp::cuda
