// Embeddings. The word embedding is split by vocabulary rows over the tensor group: each rank
// looks up the tokens in its range, the others contribute zeros, and an all-reduce completes
// the rows. The position embedding is the same on every rank.
#pragma once

#include <string>

#include "core/layers/layer_support.h"
#include "core/params/params.h"

namespace ptdp {

class VocabParallelEmbedding {
 public:
  /// Declares "<name>" [padded_vocab, h], split on dim 0.
  VocabParallelEmbedding(ParamTable& params, const std::string& name, int64_t padded_vocab, int64_t h,
                         float init_std, TensorParallel tp);
  /// Looks up an existing [padded_vocab, h] weight split on dim 0 (`shared_weight`, an index of
  /// `params`): a second lookup of the same table with its own per-microbatch slots (the
  /// multi-token prediction modules'); its weight gradient adds to the table's.
  VocabParallelEmbedding(ParamTable& params, int shared_weight, TensorParallel tp);

  /// ids [N] (i32) -> [N, h], complete on every tensor rank.
  Tensor forward(const Tensor& ids, const Step& step);
  /// dout [N, h]: word embeddings have no input gradient; keeps dout for backward_weight.
  void backward_input(const Tensor& dout, const Step& step);
  void backward_weight(const Step& step);
  void release(const Step& step) { slots_.release(step.microbatch); }

  int weight_index() const { return weight_; }
  int64_t vocab_start() const { return vocab_start_; }
  int64_t vocab_rows() const { return vocab_rows_; }

 private:
  struct Slot {
    Tensor ids;   // [N] i32
    Tensor dout;  // [N, h]
  };
  ParamTable& params_;
  int weight_;
  int64_t h_, vocab_start_, vocab_rows_;
  TensorParallel tp_;
  Slots<Slot> slots_;
};

/// A lookup table that is the same on every tensor rank (learned position embeddings).
class ReplicatedEmbedding {
 public:
  /// Declares "<name>" [rows, h], the same on every rank.
  ReplicatedEmbedding(ParamTable& params, const std::string& name, int64_t rows, int64_t h, float init_std);
  /// ids [N] (i32, in [0, rows)) -> [N, h].
  Tensor forward(const Tensor& ids, const Step& step);
  /// dout [N, h]: kept for backward_weight.
  void backward_input(const Tensor& dout, const Step& step);
  void backward_weight(const Step& step);
  void release(const Step& step) { slots_.release(step.microbatch); }
  int weight_index() const { return weight_; }

 private:
  struct Slot {
    Tensor ids;   // [N] i32
    Tensor dout;  // [N, h]
  };
  ParamTable& params_;
  int weight_;
  int64_t rows_, h_;
  Slots<Slot> slots_;
};

}  // namespace ptdp
