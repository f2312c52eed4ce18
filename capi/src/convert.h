// The conversions between the C API's structs and the core's types, in one place: every entry
// point that takes or returns a model, optimizer, runtime or layout description uses these.
#pragma once

#include <cstdint>

#include "core/model/gpt_config.h"
#include "core/optim/optimizer.h"
#include "ptdp/ptdp.h"

namespace ptdp::capi {

/// A model config from the C options (NULL: the defaults), validating the enum fields.
GptConfig gpt_config(const ptdp_gpt_options* options);
/// The C options of a model config (struct_size set).
void gpt_options(const GptConfig& config, ptdp_gpt_options* options);

/// Fills `out` (may be NULL) with an optimizer step's figures.
void iteration_result(const StepResult& step, int64_t skipped_total, float loss, ptdp_iteration_result* out,
                      double seconds = 0, double comm_wait_seconds = 0);

}  // namespace ptdp::capi
