// The training loop's data: the run's samples (--data-path or its blends, --text-file,
// --mock-data) and this data-parallel replica's share of each global batch, read into host
// buffers with Megatron's end-of-document masks and positions when the flags ask for them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/args/train_args.h"
#include "core/data/gpt_dataset.h"
#include "core/model/gpt.h"

namespace ptdp {

class BatchReader {
 public:
  /// The samples the run reads (counted with the real global batch: --train-iters batches for
  /// training, a validation's --eval-iters batches at every --eval-interval), and buffers for m
  /// microbatches of b samples. Throws Error naming the flag for a data set that cannot be built.
  BatchReader(const TrainArgs& args, int64_t global_batch, int m, int b, int dp_rank);

  /// Reads this replica's share of the global batch that starts at sample `batch_start` of
  /// `split`: its m * b rows after the data-parallel ranks before it.
  void read(DataSplit split, int64_t batch_start);

  const int32_t* tokens() const { return tokens_.data(); }  // [m * b, s]
  const int32_t* labels() const { return labels_.data(); }  // [m * b, s]
  /// Positions and documents of the batch (--reset-position-ids / --reset-attention-mask).
  const DocumentLayout& layout() const { return layout_; }
  int64_t num_samples(DataSplit split) const { return data_->num_samples(split); }

 private:
  const TrainArgs& args_;
  std::unique_ptr<GptDataset> data_;
  int64_t rows_;      // m * b
  int64_t first_row_;  // of this replica in a global batch: dp_rank * rows_
  std::vector<int32_t> tokens_, labels_;
  std::vector<int32_t> position_ids_, document_starts_;  // [m * b, s] when asked for
  DocumentLayout layout_;
};

}  // namespace ptdp
