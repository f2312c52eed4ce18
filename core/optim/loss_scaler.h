// Loss scaling for reduced-precision gradients: constant, or dynamic (Megatron's
// DynamicGradScaler: back off by `backoff` after `hysteresis` steps with overflow, grow by
// `growth` after `growth_interval` clean steps). Its state is part of the optimizer state.
#pragma once

#include <cstdint>

namespace ptdp {

struct LossScalerConfig {
  bool dynamic = false;
  float initial_scale = 1.0f;  ///< Megatron's --initial-loss-scale (dynamic) or --loss-scale
  float min_scale = 1.0f;
  float growth = 2.0f;
  float backoff = 0.5f;
  int growth_interval = 1000;
  int hysteresis = 2;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig& config = {});
  float scale() const { return scale_; }
  /// After a step: `found_inf` (on any rank) means the step was skipped.
  void update(bool found_inf);

  // State, for checkpoints.
  int growth_tracker() const { return growth_tracker_; }
  int hysteresis_left() const { return hysteresis_left_; }
  /// Restores the state a checkpoint recorded (scale > 0, counters >= 0, else InvalidArgument).
  void restore(float scale, int growth_tracker, int hysteresis_left);

 private:
  LossScalerConfig config_;
  float scale_;
  int growth_tracker_ = 0;
  int hysteresis_left_;
};

}  // namespace ptdp
