// Validation during training (Megatron's --eval-interval and --eval-iters): every
// --eval-interval iterations, the mean loss of --eval-iters global batches of the validation
// split through the forward-only schedule, going on through the split from run to run.
#pragma once

#include <cstdint>

#include "core/args/train_args.h"
#include "core/model/gpt_pipeline.h"
#include "core/train/batch_reader.h"

namespace ptdp {

class Evaluator {
 public:
  /// Validates when --eval-interval and --eval-iters are positive and the validation split
  /// (--split) holds samples.
  Evaluator(const TrainArgs& args, GptPipeline& model, BatchReader& batches, int64_t global_batch, int m, int b);

  /// Whether a validation follows iteration `iteration` (1-based).
  bool due(int64_t iteration) const { return enabled_ && iteration % eval_interval_ == 0; }
  /// The mean loss of --eval-iters global batches read from validation sample `consumed_valid`
  /// on, which it advances past them. Collective over the world.
  float run(int64_t& consumed_valid);

 private:
  GptPipeline& model_;
  BatchReader& batches_;
  int64_t global_batch_, eval_interval_, eval_iters_;
  int m_, b_;
  bool enabled_;
};

}  // namespace ptdp
