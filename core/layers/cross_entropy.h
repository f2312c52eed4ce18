// Cross-entropy over vocabulary-parallel logits [N, V_padded / t] that never gathers them: one
// read of the local logits (online max and sum of exponentials, target logit), then
// all-reduces of the row maximum, of the sums moved to that maximum and of the target logit
// over the tensor group. The logits may be 16-bit; the statistics and the loss are fp32.
// Columns of padded vocabulary rows (global id >= the true vocabulary) are masked
// to -inf, so the loss and its gradient are the same for every t.
#pragma once

#include "core/layers/layer_support.h"

namespace ptdp {

class VocabParallelCrossEntropy {
 public:
  /// `vocab` is the true vocabulary size; each rank holds `local_vocab` columns starting at
  /// `vocab_start`.
  VocabParallelCrossEntropy(int64_t vocab, int64_t vocab_start, int64_t local_vocab, TensorParallel tp);

  /// logits [N, local_vocab] (masked in place), labels [N] (i32, in [0, vocab)) -> losses [N].
  Tensor forward(const Tensor& logits, const Tensor& labels, const Step& step);
  /// dloss [N] -> dlogits [N, local_vocab], computed in place of the saved logits.
  Tensor backward(const Tensor& dloss, const Step& step);
  void release(const Step& step) { slots_.release(step.microbatch); }
  /// Tokens of the microbatch's forward (its loss averages over them).
  int64_t rows(const Step& step) { return slots_.get(step.microbatch).labels.numel(); }

 private:
  struct Slot {
    Tensor logits, labels, row_max, sum_exp;
  };
  int64_t vocab_, vocab_start_, local_vocab_;
  TensorParallel tp_;
  Slots<Slot> slots_;
};

}  // namespace ptdp
