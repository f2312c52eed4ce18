// Cross-entropy over vocabulary-parallel logits [N, V_padded / t] that never gathers them: one
// read of the local logits (online max and sum of exponentials, target logit), then
// all-reduces of the row maximum, of the sums moved to that maximum and of the target logit
// over the tensor group. The logits may be 16-bit; the statistics and the loss are fp32.
// Columns of padded vocabulary rows (global id >= the true vocabulary) are masked
// to -inf, so the loss and its gradient are the same for every t.
//
// Ignored labels: a negative label (PyTorch's and Hugging Face's ignore_index, -100) takes no
// part in the loss. Its row's loss is exactly 0 and its gradient exactly 0, and the loss a
// model reports and differentiates is Megatron's masked mean, sum(loss * mask) / sum(mask) over
// the rows whose label is not ignored (mean_gradient()); a microbatch whose every label is
// ignored has loss 0 and no gradient, never NaN.
#pragma once

#include <vector>

#include "core/layers/layer_support.h"

namespace ptdp {

/// The label that takes no part in the loss (PyTorch's and Hugging Face's ignore_index); the
/// layer ignores every negative label, the model and the C API accept only this one.
inline constexpr int32_t kIgnoreIndex = -100;

class VocabParallelCrossEntropy {
 public:
  /// `vocab` is the true vocabulary size; each rank holds `local_vocab` columns starting at
  /// `vocab_start`.
  VocabParallelCrossEntropy(int64_t vocab, int64_t vocab_start, int64_t local_vocab, TensorParallel tp);

  /// logits [N, V/t] (local_vocab columns; masked in place), labels [N] (i32, in [0, vocab), or
  /// negative: ignored) -> losses [N] fp32, exactly 0 on the rows of ignored labels.
  Tensor forward(const Tensor& logits, const Tensor& labels, const Step& step);
  /// dloss [N] fp32 -> dlogits [N, V/t], computed in place of the saved logits (the rows of
  /// ignored labels get whatever dloss says times their softmax: give them 0, as
  /// mean_gradient() does).
  Tensor backward(const Tensor& dloss, const Step& step);
  void release(const Step& step) { slots_.release(step.microbatch); }
  /// Tokens of the microbatch's forward.
  int64_t rows(const Step& step) { return slots_.get(step.microbatch).labels.numel(); }
  /// Tokens of the microbatch's forward whose label is not ignored: the masked mean's
  /// denominator (under context parallelism, TensorParallel::cp, summed over the context group:
  /// the whole microbatch's).
  int64_t counted(const Step& step) { return slots_.get(step.microbatch).counted; }
  /// The gradient of `scale` times the microbatch's masked mean loss, as backward()'s dloss [N]
  /// fp32:
  /// scale / counted on the counted rows, 0 on the ignored ones (and everywhere when nothing is
  /// counted).
  Tensor mean_gradient(float scale, const Step& step);

 private:
  struct Slot {
    Tensor logits;   // [N, V/t]
    Tensor labels;   // [N] i32
    Tensor row_max;  // [N] fp32: each row's maximum over the whole vocabulary
    Tensor sum_exp;  // [N] fp32: sum of exp(logit - row_max) over the whole vocabulary
    int64_t counted = 0;
    std::vector<uint8_t> ignored;  // [N] host, 1 on ignored rows; empty when none is
  };
  int64_t vocab_, vocab_start_, local_vocab_;
  TensorParallel tp_;
  Slots<Slot> slots_;
};

}  // namespace ptdp
