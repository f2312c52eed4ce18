// GPT training samples (Megatron's GPTDataset) through the C API.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "capi/src/handles.h"
#include "core/data/blended_dataset.h"
#include "core/data/gpt_dataset.h"

struct ptdp_gpt_data_impl {
  static constexpr const char* kType = "ptdp_gpt_data";
  ptdp::capi::Registration<ptdp_gpt_data_impl> registration{this};  // live while it exists
  std::unique_ptr<ptdp::GptDataset> dataset;  // const after creation: readers share it freely
};

namespace {

using ptdp::capi::guard;
using ptdp::capi::live;
using ptdp::capi::require_non_null;

constexpr const char* kDefaultSplit = "969,30,1";

ptdp::DataSplit checked_split(ptdp_data_split split) {
  const int k = static_cast<int>(split);
  PTDP_CHECK_ARG(k >= 0 && k < ptdp::kNumDataSplits, "split = " + std::to_string(k) + " is not a ptdp_data_split");
  return static_cast<ptdp::DataSplit>(k);
}

// Where the samples come from; checked before anything is read.
ptdp::GptDataSpec data_spec(const ptdp_gpt_data_options& o) {
  const int k = static_cast<int>(o.source);
  PTDP_CHECK_ARG(k >= PTDP_DATA_MOCK && k <= PTDP_DATA_TEXT,
                 "options->source = " + std::to_string(k) + " is not a ptdp_data_source");
  ptdp::GptDataSpec spec;
  spec.source = static_cast<ptdp::DataSource>(k);
  const char* const per_split[3] = {o.train_data_path, o.valid_data_path, o.test_data_path};
  static const char* const kNames[3] = {"train_data_path", "valid_data_path", "test_data_path"};
  for (std::size_t i = 0; i < 3; ++i) {
    if (per_split[i] == nullptr) continue;
    PTDP_CHECK_ARG(o.source == PTDP_DATA_INDEXED, ptdp::str_cat("options->", kNames[i],
                                                                " is set but options->source is not "
                                                                "PTDP_DATA_INDEXED"));
    PTDP_CHECK_ARG(!ptdp::split_words(per_split[i]).empty(), ptdp::str_cat("options->", kNames[i], " is empty"));
    spec.split_paths[i] = per_split[i];
  }
  if (!spec.per_split()) {
    PTDP_CHECK_ARG(o.source == PTDP_DATA_MOCK || o.path != nullptr,
                   std::string("options->path is NULL (the ") +
                       (o.source == PTDP_DATA_INDEXED ? "indexed data set's prefix" : "text file") + " is needed)");
    PTDP_CHECK_ARG(o.source == PTDP_DATA_MOCK || o.path[0] != '\0', "options->path is empty");
    spec.path = o.path ? o.path : "";
  }
  return spec;
}

}  // namespace

extern "C" {

PTDP_API ptdp_status ptdp_gpt_data_options_init(ptdp_gpt_data_options* options) {
  return guard(__func__, [&] {
    ptdp::capi::reset_options(options, "options");
    options->source = PTDP_DATA_MOCK;
    options->path = nullptr;
    options->split = kDefaultSplit;
    options->seq_length = 32;
    options->vocab_size = 256;
    options->seed = 1234;
  });
}

PTDP_API ptdp_status ptdp_gpt_data_create(const ptdp_gpt_data_options* options, ptdp_gpt_data* out) {
  return guard(__func__, [&] {
    require_non_null(out, "out");
    ptdp_gpt_data_options defaults;
    ptdp_gpt_data_options_init(&defaults);
    const ptdp_gpt_data_options o = ptdp::capi::read_options(options, defaults, "options",
                                                             "ptdp_gpt_data_options_init");
    PTDP_CHECK_ARG(o.seq_length > 0, "options->seq_length = " + std::to_string(o.seq_length) + " is not > 0");
    PTDP_CHECK_ARG(o.vocab_size > 0, "options->vocab_size = " + std::to_string(o.vocab_size) + " is not > 0");
    for (int k = 0; k < ptdp::kNumDataSplits; ++k) {
      PTDP_CHECK_ARG(o.num_samples[k] >= 0, "options->num_samples[" + std::to_string(k) +
                                                "] = " + std::to_string(o.num_samples[k]) + " is negative");
    }
    ptdp::GptDatasetOptions d;
    d.split = o.split != nullptr ? o.split : kDefaultSplit;
    d.seq_length = o.seq_length;
    d.seed = o.seed;
    std::copy(std::begin(o.num_samples), std::end(o.num_samples), d.num_samples.begin());
    // The source is checked before anything is read: a bad enum or NULL path never opens a file.
    const ptdp::GptDataSpec spec = data_spec(o);
    auto h = std::make_unique<ptdp_gpt_data_impl>();
    h->dataset = ptdp::make_gpt_dataset(spec, d, o.vocab_size);
    *out = h.release();
  });
}

PTDP_API ptdp_status ptdp_gpt_data_destroy(ptdp_gpt_data data) {
  return guard(__func__, [&] {
    if (data == nullptr) return;
    live(data, "data");
    ptdp::capi::release(data);
  });
}

PTDP_API ptdp_status ptdp_gpt_data_num_samples(ptdp_gpt_data data, ptdp_data_split split, int64_t* count) {
  return guard(__func__, [&] {
    const ptdp_gpt_data_impl& d = live(data, "data");
    const ptdp::DataSplit s = checked_split(split);
    require_non_null(count, "count");
    *count = d.dataset->num_samples(s);
  });
}

PTDP_API ptdp_status ptdp_gpt_data_batch(ptdp_gpt_data data, ptdp_data_split split, int64_t first, int32_t count,
                                         int32_t* tokens, int32_t* labels) {
  return guard(__func__, [&] {
    const ptdp_gpt_data_impl& d = live(data, "data");
    const ptdp::DataSplit s = checked_split(split);
    PTDP_CHECK_ARG(first >= 0, "first = " + std::to_string(first) + " is negative");
    PTDP_CHECK_ARG(count > 0, "count = " + std::to_string(count) + " is not > 0");
    PTDP_CHECK_ARG(first <= INT64_MAX - count,
                   "first = " + std::to_string(first) + " plus count = " + std::to_string(count) + " overflows int64");
    require_non_null(tokens, "tokens");
    require_non_null(labels, "labels");
    // Read into scratch so a failure (a token outside the vocabulary, a file error) leaves the
    // caller's buffers untouched.
    const std::size_t n = static_cast<std::size_t>(count) * static_cast<std::size_t>(d.dataset->seq_length());
    std::vector<int32_t> t(n), l(n);
    d.dataset->get_batch(s, first, count, t.data(), l.data());
    std::memcpy(tokens, t.data(), n * sizeof(int32_t));
    std::memcpy(labels, l.data(), n * sizeof(int32_t));
  });
}

}  // extern "C"
