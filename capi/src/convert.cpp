#include "capi/src/convert.h"

namespace ptdp::capi {

void iteration_result(const StepResult& s, int64_t skipped_total, float loss, ptdp_iteration_result* out,
                      double seconds, double comm_wait_seconds) {
  if (!out) return;
  out->seconds = seconds;
  out->comm_wait_seconds = comm_wait_seconds;
  out->loss = loss;
  out->grad_norm = s.grad_norm;
  out->learning_rate = s.lr;
  out->loss_scale = s.loss_scale;
  out->skipped = s.skipped ? 1 : 0;
  out->skipped_iterations = skipped_total;
}

}  // namespace ptdp::capi
