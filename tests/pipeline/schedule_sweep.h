// The (kind, p, m, v) combinations the schedule tests sweep: p in 1..8, m in p..4p, v in 1..3,
// where the kind accepts them (v > 1 only for interleaved 1F1B, which also needs v > 1 and m a
// multiple of p). The training schedules only: the forward-only one has tests of its own.
#pragma once

#include <string>

#include "core/pipeline/schedule.h"

namespace ptdp_test {

inline constexpr ptdp::ScheduleKind kAllKinds[] = {
    ptdp::ScheduleKind::GPipe, ptdp::ScheduleKind::OneFOneB, ptdp::ScheduleKind::Interleaved1F1B,
    ptdp::ScheduleKind::ZeroBubbleH1};

inline bool valid_combination(ptdp::ScheduleKind kind, int p, int m, int v) {
  if (kind == ptdp::ScheduleKind::Interleaved1F1B) return v > 1 && m % p == 0;
  return v == 1;
}

/// Calls f(kind, p, m, v) for every valid combination of the sweep.
template <typename F>
void for_each_combination(F&& f) {
  for (ptdp::ScheduleKind kind : kAllKinds) {
    for (int p = 1; p <= 8; ++p) {
      for (int m = p; m <= 4 * p; ++m) {
        for (int v = 1; v <= 3; ++v) {
          if (valid_combination(kind, p, m, v)) f(kind, p, m, v);
        }
      }
    }
  }
}

inline std::string describe(ptdp::ScheduleKind kind, int p, int m, int v) {
  return std::string(ptdp::schedule_kind_name(kind)) + " p=" + std::to_string(p) +
         " m=" + std::to_string(m) + " v=" + std::to_string(v);
}

}  // namespace ptdp_test
