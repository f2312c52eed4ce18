// The settings of a transformer layer, with Megatron-LM's names and defaults. GptConfig
// (core/model/) adds the model's own: vocabulary, positions, tied embeddings.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace ptdp {

/// Megatron's --recompute-granularity.
enum class Recompute : int { None = 0, Full = 1, Selective = 2 };

/// How self-attention is computed: Auto takes the backend's fused (flash) kernel where it has
/// one for the model dtype and head dim, else the unfused GEMM + softmax + GEMM path; Fused
/// insists on the fused kernel (an error where there is none); Unfused never uses it.
enum class AttentionImpl : int { Auto = 0, Fused = 1, Unfused = 2 };

struct LayerConfig {
  int num_layers = 2;  ///< depth of the model (the output projections' init is scaled by it)
  int hidden_size = 64;
  int num_attention_heads = 4;
  int ffn_hidden_size = 0;  ///< 0: 4 * hidden_size
  int seq_length = 32;
  float hidden_dropout = 0.1f;
  float attention_dropout = 0.1f;
  float init_method_std = 0.02f;
  float layernorm_epsilon = 1e-5f;
  Recompute recompute = Recompute::None;
  uint64_t seed = 1234;
  /// Storage type of the model weights and activations: f32, or bf16/f16 with fp32 master
  /// weights and fp32 gradients (Megatron's --bf16 / --fp16).
  DType precision = DType::F32;
  AttentionImpl attention = AttentionImpl::Auto;

  int ffn() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  int head_dim() const { return hidden_size / num_attention_heads; }
};

const char* recompute_name(Recompute r);

}  // namespace ptdp
