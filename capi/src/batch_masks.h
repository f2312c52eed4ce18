// ptdp_batch_masks (the "Loss masks and documents" section of ptdp.h) as the core's
// DocumentLayout, for the entry points that take one.
#pragma once

#include "capi/src/api_guard.h"
#include "core/model/gpt.h"

namespace ptdp::capi {

/// The layout `masks` asks for (NULL: none), read through read_options (its struct_size is
/// checked; `name` names it in messages). The arrays are the caller's, borrowed.
DocumentLayout document_layout(const ptdp_batch_masks* masks, const char* name = "options->masks");

/// The options a deprecated `_masked` entry point runs its current form with: `options` (NULL:
/// the defaults) holding `masks`, which `options` must not give too.
ptdp_pipeline_options masked_options(const ptdp_pipeline_options* options, const ptdp_batch_masks* masks);

}  // namespace ptdp::capi
