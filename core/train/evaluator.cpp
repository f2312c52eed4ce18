#include "core/train/evaluator.h"

#include "core/train/forward_backward.h"

namespace ptdp {

Evaluator::Evaluator(const TrainArgs& args, GptPipeline& model, BatchReader& batches, int64_t global_batch, int m,
                     int b)
    : model_(model), batches_(batches), global_batch_(global_batch), eval_interval_(args.eval_interval),
      eval_iters_(args.eval_iters), m_(m), b_(b),
      enabled_(args.eval_interval > 0 && args.eval_iters > 0 && batches.num_samples(DataSplit::Valid) > 0) {}

float Evaluator::run(int64_t& consumed_valid) {
  double sum = 0.0;
  for (int64_t k = 0; k < eval_iters_; ++k) {
    batches_.read(DataSplit::Valid, consumed_valid);
    sum += evaluate(model_, batches_.tokens(), batches_.labels(), b_, m_, batches_.layout());
    consumed_valid += global_batch_;
  }
  return static_cast<float>(sum / static_cast<double>(eval_iters_));
}

}  // namespace ptdp
