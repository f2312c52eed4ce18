// How a training run ends on purpose with a failure that a restart would only repeat: the
// exit statuses ptdp-train documents for them, and the error that carries one.
#pragma once

#include <string>

#include "base/error.h"

namespace ptdp {

/// ptdp-train's exit statuses beyond 0 (done), 1 (failed) and 2 (bad flags).
inline constexpr int kExitSkippedIterations = 3;  ///< --max-skipped-iterations consecutive skips
inline constexpr int kExitNonFinite = 4;          ///< --check-for-nan-in-loss-and-grad found one
inline constexpr int kExitRestartsExhausted = 5;  ///< the supervisor gave up (--max-restarts)

/// A failure every rank agreed on that ends the run with `exit_status` (train_main returns it;
/// through the C API it is PTDP_ERR_INVALID_STATE with the message).
class RunStopped : public Error {
 public:
  RunStopped(int exit_status, const std::string& message)
      : Error(ErrorCode::InvalidState, message), exit_status_(exit_status) {}
  int exit_status() const noexcept { return exit_status_; }

 private:
  int exit_status_;
};

}  // namespace ptdp
