// ptdp_batch_masks (the "Loss masks and documents" section of ptdp.h) as the core's
// DocumentLayout, for the entry points that take one.
#pragma once

#include "capi/src/api_guard.h"
#include "core/model/gpt.h"

namespace ptdp::capi {

/// The layout `masks` asks for (NULL: none), read through read_options (its struct_size is
/// checked, the name in messages is "masks"). The arrays are the caller's, borrowed.
DocumentLayout document_layout(const ptdp_batch_masks* masks);

}  // namespace ptdp::capi
