// The shape and training-time settings of a GPT, with Megatron-LM's names and defaults.
#pragma once

#include <cstdint>
#include <string>

#include "core/layers/layer_config.h"

namespace ptdp {

/// A transformer layer's settings (LayerConfig) and the model's own.
struct GptConfig : LayerConfig {
  int vocab_size = 256;
  int make_vocab_size_divisible_by = 128;  ///< the padded vocabulary is a multiple of this * t
  int max_position_embeddings = 0;  ///< 0: seq_length
  bool tie_embeddings = true;  ///< the LM head reuses the word embedding

  int max_positions() const { return max_position_embeddings > 0 ? max_position_embeddings : seq_length; }
  /// Vocabulary padded to a multiple of make_vocab_size_divisible_by * t (Megatron's rule);
  /// the padded rows never take part in the loss.
  int64_t padded_vocab(int tensor_parallel) const;

  /// Throws Error(InvalidArgument) naming the numbers for a config that cannot be built with
  /// tensor-parallel size t: non-positive sizes, heads not divisible by t, hidden not divisible
  /// by heads, ffn not divisible by t, dropout outside [0, 1), and the like.
  void validate(int tensor_parallel) const;

  /// The paper's FLOPs of one training iteration over `samples` sequences of seq_length tokens
  /// (Narayanan et al. 2021, the one place ptdp computes it): the model's forward and backward,
  /// 72 B s l h^2 (1 + s/(6h) + V/(12 l h)); with `full_recompute` what is executed, one more
  /// forward of the layers: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)). B = samples, V the
  /// unpadded vocabulary. MFU counts the first; TFLOP/s per device (as the paper) the second.
  double paper_flops(int64_t samples, bool full_recompute = false) const;
  /// Parameters of the unpartitioned model (with the padded vocabulary for t).
  int64_t parameter_count(int tensor_parallel) const;
};

}  // namespace ptdp
