#include "core/train/failure_agreement.h"

#include "core/checkpoint/checkpoint.h"
#include "core/comm/flight_recorder.h"
#include "core/comm/runtime.h"
#include "core/train/run_stop.h"

namespace ptdp {

FailureAgreement::Watch::~Watch() {
  if (std::uncaught_exceptions() > unwinding_ && !agreement_.agreed_ && agreement_.world_size_ > 1) {
    abandon_mpi_finalize();
  }
  agreement_.agreed_ = false;
}

void FailureAgreement::vote(ProcessGroups& groups, const std::function<void()>& body) {
  const Agreed agreed(*this);
  agree_on_failure(groups, body);
}

void FailureAgreement::stop_run(int exit_status, const std::string& message) {
  const Agreed agreed(*this);
  throw RunStopped(exit_status, message);
}

void FailureAgreement::linger_after_timeout() const noexcept {
  if (world_size_ > 1) flight_linger_after_timeout(world_rank_, timeout_s_);
}

}  // namespace ptdp
