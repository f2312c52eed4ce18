// The shape and training-time settings of a GPT, with Megatron-LM's names and defaults.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/dtype.h"

namespace ptdp {

/// Megatron's --recompute-granularity.
enum class Recompute : int { None = 0, Full = 1, Selective = 2 };

/// How self-attention is computed: Auto takes the backend's fused (flash) kernel where it has
/// one for the model dtype and head dim, else the unfused GEMM + softmax + GEMM path; Fused
/// insists on the fused kernel (an error where there is none); Unfused never uses it.
enum class AttentionImpl : int { Auto = 0, Fused = 1, Unfused = 2 };

struct GptConfig {
  int num_layers = 2;
  int hidden_size = 64;
  int num_attention_heads = 4;
  int ffn_hidden_size = 0;  ///< 0: 4 * hidden_size
  int vocab_size = 256;
  int make_vocab_size_divisible_by = 128;  ///< the padded vocabulary is a multiple of this * t
  int seq_length = 32;
  int max_position_embeddings = 0;  ///< 0: seq_length
  float hidden_dropout = 0.1f;
  float attention_dropout = 0.1f;
  float init_method_std = 0.02f;
  float layernorm_epsilon = 1e-5f;
  bool tie_embeddings = true;  ///< the LM head reuses the word embedding
  Recompute recompute = Recompute::None;
  uint64_t seed = 1234;
  /// Storage type of the model weights and activations: f32, or bf16/f16 with fp32 master
  /// weights and fp32 gradients (Megatron's --bf16 / --fp16).
  DType precision = DType::F32;
  AttentionImpl attention = AttentionImpl::Auto;

  int ffn() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  int max_positions() const { return max_position_embeddings > 0 ? max_position_embeddings : seq_length; }
  int head_dim() const { return hidden_size / num_attention_heads; }
  /// Vocabulary padded to a multiple of make_vocab_size_divisible_by * t (Megatron's rule);
  /// the padded rows never take part in the loss.
  int64_t padded_vocab(int tensor_parallel) const;

  /// Throws Error(InvalidArgument) naming the numbers for a config that cannot be built with
  /// tensor-parallel size t: non-positive sizes, heads not divisible by t, hidden not divisible
  /// by heads, ffn not divisible by t, dropout outside [0, 1), and the like.
  void validate(int tensor_parallel) const;

  /// Model FLOPs of one forward+backward over `tokens` tokens without recomputation
  /// (the paper's 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) with B s = tokens).
  double flops_per_step(int64_t tokens) const;
  /// Parameters of the unpartitioned model (with the padded vocabulary for t).
  int64_t parameter_count(int tensor_parallel) const;
};

const char* recompute_name(Recompute r);

}  // namespace ptdp
