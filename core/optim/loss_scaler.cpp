#include "core/optim/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"

namespace ptdp {

LossScaler::LossScaler(const LossScalerConfig& c) : config_(c), scale_(c.initial_scale), hysteresis_left_(c.hysteresis) {
  PTDP_CHECK_ARG(std::isfinite(c.initial_scale) && c.initial_scale > 0,
                 "initial loss scale must be > 0, got " + std::to_string(c.initial_scale));
  PTDP_CHECK_ARG(c.min_scale > 0 && c.min_scale <= c.initial_scale,
                 "min loss scale must be in (0, initial scale], got " + std::to_string(c.min_scale));
  PTDP_CHECK_ARG(c.growth > 1 && c.backoff > 0 && c.backoff < 1,
                 "loss scale growth must be > 1 and backoff in (0, 1), got " + std::to_string(c.growth) + " and " +
                     std::to_string(c.backoff));
  PTDP_CHECK_ARG(c.growth_interval > 0 && c.hysteresis > 0,
                 "loss scale growth interval and hysteresis must be > 0, got " + std::to_string(c.growth_interval) +
                     " and " + std::to_string(c.hysteresis));
}

void LossScaler::update(bool found_inf) {
  if (!config_.dynamic) return;
  if (found_inf) {
    growth_tracker_ = 0;
    if (--hysteresis_left_ <= 0) scale_ = std::max(scale_ * config_.backoff, config_.min_scale);
    return;
  }
  if (++growth_tracker_ == config_.growth_interval) {
    growth_tracker_ = 0;
    hysteresis_left_ = config_.hysteresis;
    scale_ *= config_.growth;
  }
}

void LossScaler::restore(float scale, int growth_tracker, int hysteresis_left) {
  PTDP_CHECK_ARG(std::isfinite(scale) && scale > 0, "loss scale must be finite and > 0, got " + std::to_string(scale));
  PTDP_CHECK_ARG(growth_tracker >= 0 && hysteresis_left >= 0,
                 "loss scaler counters must be >= 0, got growth tracker " + std::to_string(growth_tracker) +
                     " and hysteresis " + std::to_string(hysteresis_left));
  scale_ = scale;
  growth_tracker_ = growth_tracker;
  hysteresis_left_ = hysteresis_left;
}

}  // namespace ptdp
