// Loss masks and documents through the C API: ptdp_batch_masks and Megatron's masks from the
// end-of-document token. The entry points that run a model read the masks from their
// ptdp_pipeline_options (model_api.cpp, train_api.cpp), beside their deprecated `_masked` forms.
#include <string>

#include "capi/src/batch_masks.h"
#include "core/data/gpt_dataset.h"

static_assert(PTDP_IGNORE_INDEX == ptdp::kIgnoreIndex);

namespace ptdp::capi {

DocumentLayout document_layout(const ptdp_batch_masks* masks, const char* name) {
  ptdp_batch_masks defaults;
  ptdp_batch_masks_init(&defaults);
  const ptdp_batch_masks m = read_options(masks, defaults, name, "ptdp_batch_masks_init");
  DocumentLayout layout;
  layout.position_ids = m.position_ids;
  layout.document_starts = m.document_starts;
  return layout;
}

ptdp_pipeline_options masked_options(const ptdp_pipeline_options* options, const ptdp_batch_masks* masks) {
  ptdp_pipeline_options defaults;
  ptdp_pipeline_options_init(&defaults);
  ptdp_pipeline_options o = read_options(options, defaults, "options", "ptdp_pipeline_options_init");
  if (masks != nullptr) document_layout(masks, "masks");  // refused under the name its caller gave it
  PTDP_CHECK_ARG(o.masks == nullptr || masks == nullptr,
                 "masks and options->masks are both set; give them once, as options->masks (the `_masked` "
                 "entry points are deprecated)");
  if (masks != nullptr) o.masks = masks;
  return o;
}

}  // namespace ptdp::capi

namespace {

using ptdp::capi::guard;
using ptdp::capi::require_non_null;

}  // namespace

extern "C" {

PTDP_API ptdp_status ptdp_batch_masks_init(ptdp_batch_masks* masks) {
  return guard(__func__, [&] { ptdp::capi::reset_options(masks, "masks"); });
}

PTDP_API ptdp_status ptdp_eod_masks(const int32_t* tokens, int64_t count, int32_t seq_length, int32_t eod_token_id,
                                    int32_t flags, int32_t* labels, int32_t* position_ids,
                                    int32_t* document_starts) {
  return guard(__func__, [&] {
    require_non_null(tokens, "tokens");
    PTDP_CHECK_ARG(count >= 0, "count = " + std::to_string(count) + " is negative");
    PTDP_CHECK_ARG(seq_length > 0, "seq_length = " + std::to_string(seq_length) + " is not > 0");
    constexpr int32_t kAll = PTDP_EOD_MASK_LOSS | PTDP_EOD_RESET_POSITION_IDS | PTDP_EOD_RESET_ATTENTION_MASK;
    PTDP_CHECK_ARG((flags & ~kAll) == 0, "flags = " + std::to_string(flags) +
                                             " has bits that are not ptdp_eod_flags (PTDP_EOD_MASK_LOSS | "
                                             "PTDP_EOD_RESET_POSITION_IDS | PTDP_EOD_RESET_ATTENTION_MASK = " +
                                             std::to_string(kAll) + ")");
    const bool mask_loss = (flags & PTDP_EOD_MASK_LOSS) != 0;
    const bool positions = (flags & PTDP_EOD_RESET_POSITION_IDS) != 0;
    const bool documents = (flags & PTDP_EOD_RESET_ATTENTION_MASK) != 0;
    if (mask_loss) require_non_null(labels, "labels (PTDP_EOD_MASK_LOSS)");
    if (positions) require_non_null(position_ids, "position_ids (PTDP_EOD_RESET_POSITION_IDS)");
    if (documents) require_non_null(document_starts, "document_starts (PTDP_EOD_RESET_ATTENTION_MASK)");
    ptdp::eod_masks(tokens, count, seq_length, eod_token_id, mask_loss, mask_loss ? labels : nullptr,
                    positions ? position_ids : nullptr, documents ? document_starts : nullptr);
  });
}

}  // extern "C"
