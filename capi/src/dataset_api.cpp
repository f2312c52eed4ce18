// Megatron indexed data sets (PREFIX.idx / PREFIX.bin) through the C API.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "capi/src/handles.h"
#include "core/data/indexed_dataset.h"

struct ptdp_dataset_impl {
  static constexpr const char* kType = "ptdp_dataset";
  ptdp::capi::Registration<ptdp_dataset_impl> registration{this};  // live while it exists
  std::unique_ptr<ptdp::IndexedDataset> dataset;
};

namespace {

using ptdp::capi::guard;
using ptdp::capi::live;
using ptdp::capi::require_non_null;

}  // namespace

extern "C" {

PTDP_API ptdp_status ptdp_dataset_open(const char* prefix, ptdp_dataset* out) {
  return guard(__func__, [&] {
    ptdp::capi::require_path(prefix, "prefix");
    require_non_null(out, "out");
    auto h = std::make_unique<ptdp_dataset_impl>();
    h->dataset = std::make_unique<ptdp::IndexedDataset>(prefix);
    *out = h.release();
  });
}

PTDP_API ptdp_status ptdp_dataset_destroy(ptdp_dataset dataset) {
  return guard(__func__, [&] {
    if (dataset == nullptr) return;
    live(dataset, "dataset");
    ptdp::capi::release(dataset);
  });
}

PTDP_API ptdp_status ptdp_dataset_num_sequences(ptdp_dataset dataset, int64_t* count) {
  return guard(__func__, [&] {
    const ptdp_dataset_impl& d = live(dataset, "dataset");
    require_non_null(count, "count");
    *count = d.dataset->num_sequences();
  });
}

PTDP_API ptdp_status ptdp_dataset_num_documents(ptdp_dataset dataset, int64_t* count) {
  return guard(__func__, [&] {
    const ptdp_dataset_impl& d = live(dataset, "dataset");
    require_non_null(count, "count");
    *count = d.dataset->num_documents();
  });
}

PTDP_API ptdp_status ptdp_dataset_document(ptdp_dataset dataset, int64_t index, int32_t* tokens, int64_t capacity,
                                           int64_t* count) {
  return guard(__func__, [&] {
    require_non_null(count, "count");
    *count = 0;  // documented: count is always written (0 on a bad argument)
    const ptdp_dataset_impl& d = live(dataset, "dataset");
    PTDP_CHECK_ARG(index >= 0 && index < d.dataset->num_documents(),
                   "index = " + std::to_string(index) + " is out of range [0, " +
                       std::to_string(d.dataset->num_documents()) + ")");
    PTDP_CHECK_ARG(capacity >= 0, "capacity = " + std::to_string(capacity) + " is negative");
    PTDP_CHECK_ARG(tokens != nullptr || capacity == 0, "tokens is NULL but capacity = " + std::to_string(capacity));
    const int64_t length = d.dataset->document_length(index);
    *count = length;
    PTDP_CHECK_ARG(capacity >= length, "capacity = " + std::to_string(capacity) + " is smaller than document " +
                                           std::to_string(index) + "'s " + std::to_string(length) + " tokens");
    const std::vector<int32_t> v = d.dataset->document(index);  // may throw Io; tokens stay unchanged
    if (!v.empty()) std::memcpy(tokens, v.data(), v.size() * sizeof(int32_t));
  });
}

}  // extern "C"
