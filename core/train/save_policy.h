// When a training run saves a checkpoint to --save, and the save itself: every --save-interval
// iterations, before leaving at --exit-interval or on an agreed stop, and at the end of the run
// unless its last iteration is saved already; as Megatron, so that a run restarted with --load
// loses nothing it logged as saved.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "core/args/train_args.h"
#include "core/checkpoint/checkpoint.h"
#include "core/train/failure_agreement.h"
#include "core/train/metrics_sink.h"

namespace ptdp {

class SavePolicy {
 public:
  /// Saves `model` and `optimizer` with the run's flags (`config`, recorded in every
  /// checkpoint); `around_save` (may be empty: TrainingHooks::around_save) runs each save.
  SavePolicy(const TrainArgs& args, GptPipeline& model, Optimizer& optimizer, const nlohmann::json& config,
             FailureAgreement& failures, MetricsSink& sink,
             std::function<void(int64_t, const std::function<void()>&)> around_save);

  /// Whether the run saves at all (--save).
  bool enabled() const { return !dir_.empty(); }
  /// Whether iteration `iteration` is saved after it runs: --save-interval, or `exiting` the
  /// run at --exit-interval.
  bool due(int64_t iteration, bool exiting) const {
    return enabled() && ((interval_ > 0 && iteration % interval_ == 0) || exiting);
  }
  /// Whether the run, ending after `iteration` having started at `first_iteration`, still has
  /// its last iteration to save.
  bool due_at_end(int64_t iteration, int64_t first_iteration) const {
    return enabled() && iteration > first_iteration && last_saved_ != iteration;
  }
  /// Saves `state` to --save (collective over the world; its failures are every rank's) and
  /// says so on the logging rank.
  void save(const CheckpointState& state);

 private:
  std::string dir_;
  int64_t interval_;
  GptPipeline& model_;
  Optimizer& optimizer_;
  const nlohmann::json& config_;
  FailureAgreement& failures_;
  MetricsSink& sink_;
  std::function<void(int64_t, const std::function<void()>&)> around_save_;
  int64_t last_saved_ = -1;
};

}  // namespace ptdp
