#include "core/train/save_policy.h"

#include <utility>

namespace ptdp {

SavePolicy::SavePolicy(const TrainArgs& args, GptPipeline& model, Optimizer& optimizer, const nlohmann::json& config,
                       FailureAgreement& failures, MetricsSink& sink,
                       std::function<void(int64_t, const std::function<void()>&)> around_save)
    : dir_(args.save), interval_(args.save_interval), model_(model), optimizer_(optimizer), config_(config),
      failures_(failures), sink_(sink), around_save_(std::move(around_save)) {}

void SavePolicy::save(const CheckpointState& state) {
  const auto write = [&] {
    const FailureAgreement::Agreed agreed(failures_);  // save_checkpoint agrees on its failures
    save_checkpoint(dir_, model_, &optimizer_, &config_, state);
  };
  if (around_save_) {
    around_save_(state.iteration, write);
  } else {
    write();
  }
  last_saved_ = state.iteration;
  sink_.note(" saved checkpoint at iteration %8lld to %s\n", static_cast<long long>(state.iteration), dir_.c_str());
}

}  // namespace ptdp
