// Learning-rate schedules with Megatron's flags: --lr, --min-lr, --lr-decay-style
// {constant, linear, cosine}, --lr-warmup-iters, --lr-decay-iters.
#pragma once

#include <cstdint>

namespace ptdp {

enum class LrDecayStyle : int { Constant = 0, Linear = 1, Cosine = 2 };

struct LrSchedule {
  double lr = 1e-4;
  double min_lr = 0.0;
  LrDecayStyle style = LrDecayStyle::Constant;
  int64_t warmup_iters = 0;
  int64_t decay_iters = 0;  ///< 0: no decay after warm-up

  /// Throws Error(InvalidArgument) naming the numbers for an impossible schedule.
  void validate() const;
  /// Learning rate of optimizer step `iteration` (counting from 0): linear warm-up from lr/warmup
  /// to lr over the warm-up steps, then decay from lr to min_lr until decay_iters, then min_lr.
  double at(int64_t iteration) const;
};

}  // namespace ptdp
