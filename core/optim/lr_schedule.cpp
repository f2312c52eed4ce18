#include "core/optim/lr_schedule.h"

#include <cmath>
#include <string>

#include "base/error.h"

namespace ptdp {

void LrSchedule::validate() const {
  PTDP_CHECK_ARG(std::isfinite(lr) && lr >= 0, "lr must be >= 0, got " + std::to_string(lr));
  PTDP_CHECK_ARG(std::isfinite(min_lr) && min_lr >= 0 && min_lr <= lr,
                 "min_lr must be in [0, lr = " + std::to_string(lr) + "], got " + std::to_string(min_lr));
  PTDP_CHECK_ARG(static_cast<int>(style) >= 0 && static_cast<int>(style) <= 2,
                 "lr decay style " + std::to_string(static_cast<int>(style)) + " is not constant, linear or cosine");
  PTDP_CHECK_ARG(warmup_iters >= 0, "lr warmup iters must be >= 0, got " + std::to_string(warmup_iters));
  PTDP_CHECK_ARG(decay_iters >= 0, "lr decay iters must be >= 0, got " + std::to_string(decay_iters));
  PTDP_CHECK_ARG(style == LrDecayStyle::Constant || decay_iters == 0 || decay_iters > warmup_iters,
                 "lr decay iters " + std::to_string(decay_iters) + " must exceed the warmup iters " +
                     std::to_string(warmup_iters));
}

double LrSchedule::at(int64_t iteration) const {
  if (warmup_iters > 0 && iteration < warmup_iters) {
    return lr * static_cast<double>(iteration + 1) / static_cast<double>(warmup_iters);
  }
  if (style == LrDecayStyle::Constant || decay_iters == 0) return lr;
  if (iteration >= decay_iters) return min_lr;
  const double ratio = static_cast<double>(iteration - warmup_iters) / static_cast<double>(decay_iters - warmup_iters);
  const double coeff = style == LrDecayStyle::Linear ? 1.0 - ratio : 0.5 * (std::cos(M_PI * ratio) + 1.0);
  return min_lr + coeff * (lr - min_lr);
}

}  // namespace ptdp
