// Megatron's data blends (see blended_dataset.h).
#include "core/data/blended_dataset.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <utility>

#include "base/error.h"

namespace ptdp {
namespace {

std::string num(int64_t v) { return std::to_string(v); }

std::string joined(const std::vector<std::string>& words) {
  std::string s;
  for (const std::string& w : words) {
    if (!s.empty()) s += ' ';
    s += w;
  }
  return s;
}

// numpy's pairwise summation of a contiguous float64 array (loops_utils.h: blocks of 8
// accumulators up to 128 elements, halves above).
double pairwise_sum(const double* a, std::size_t n) {
  if (n < 8) {
    double res = -0.0;
    for (std::size_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (std::size_t j = 0; j < 8; ++j) r[j] = a[j];
    std::size_t i = 8;
    for (; i < n - (n % 8); i += 8) {
      for (std::size_t j = 0; j < 8; ++j) r[j] += a[i + j];
    }
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  std::size_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

// A split with no samples: Megatron's None split (a zero --split weight, or no per-split list).
class EmptySplit final : public SplitSamples {
 public:
  EmptySplit(int32_t seq_length, std::string why) : seq_length_(seq_length), why_(std::move(why)) {}
  int32_t seq_length() const override { return seq_length_; }
  int64_t num_samples() const override { return 0; }
  void get_batch(int64_t, int64_t, int32_t*, int32_t*) const override {
    throw_error(ErrorCode::InvalidArgument, why_ + " has no samples");
  }

 private:
  int32_t seq_length_;
  std::string why_;
};

// One data set's part of a split: documents [first, end) of an indexed data set.
struct Part {
  std::shared_ptr<const TokenSource> source;
  int64_t first = 0;
  int64_t end = 0;
};

// Megatron's BlendedMegatronDatasetBuilder for one split: the parts' GPT splits (mid-level
// data sets) with the samples the blend asks of them, and the blend over them.
std::shared_ptr<const SplitSamples> blend_split(const std::vector<Part>& parts, const std::vector<double>& weights,
                                                DataSplit split, const GptDatasetOptions& o, const std::string& what) {
  const int64_t wanted = o.num_samples[static_cast<std::size_t>(split)];
  std::vector<std::shared_ptr<const SplitSamples>> splits;
  const auto make = [&](const Part& p, int64_t samples) {
    splits.push_back(
        std::make_shared<GptSplit>(p.source, split, p.first, p.end, o.seq_length, o.seed, samples));
  };
  if (!weights.empty() && wanted > 0) {
    const std::vector<int64_t> target = blend_dataset_sizes(weights, wanted, 0.0);
    const std::vector<int64_t> buffer = blend_dataset_sizes(weights, wanted, kMidLevelDatasetSurplus);
    int64_t size = 0;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      make(parts[i], buffer[i]);
      size += target[i];
    }
    // BlendedDataset normalises again ("for bitwise identical comparison with Megatron-LM").
    return std::make_shared<BlendedSplit>(splits, normalize_weights(weights), size, what);
  }
  for (const Part& p : parts) make(p, 0);  // one epoch each
  if (wanted == 0) return std::make_shared<BlendedSplit>(splits, std::vector<double>{}, 0, what);
  std::vector<double> sizes;
  int64_t total = 0;
  for (std::size_t i = 0; i < splits.size(); ++i) {
    const int64_t n = splits[i]->num_samples();
    PTDP_CHECK_ARG(n > 0, what + ": data set " + parts[i].source->describe() + " has no samples in split " +
                              data_split_name(split) + ", so it cannot weigh in by its size");
    sizes.push_back(static_cast<double>(n));
    total += n;
  }
  return std::make_shared<BlendedSplit>(splits, normalize_weights(sizes), std::min(wanted, total), what);
}

}  // namespace

std::vector<std::string> split_words(std::string_view text) {
  std::vector<std::string> words;
  std::size_t i = 0;
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (i < text.size()) {
    while (i < text.size() && space(text[i])) ++i;
    const std::size_t start = i;
    while (i < text.size() && !space(text[i])) ++i;
    if (i > start) words.emplace_back(text.substr(start, i - start));
  }
  return words;
}

DataBlend parse_data_blend(const std::vector<std::string>& words, const std::string& flag) {
  const std::string quoted = str_cat("'", joined(words), "'");
  PTDP_CHECK_ARG(!words.empty(), flag + ": an empty list (expected PREFIX, or WEIGHT PREFIX [WEIGHT PREFIX ...])");
  DataBlend b;
  if (words.size() % 2 == 1) {
    b.prefixes = words;
    return b;
  }
  std::vector<double> weights;
  std::size_t numbers = 0;
  for (std::size_t i = 0; i < words.size(); i += 2) {
    const std::string& w = words[i];
    double v = 0;
    const auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), v);
    const bool is_number = ec == std::errc() && end == w.data() + w.size();
    weights.push_back(v);
    if (is_number) ++numbers;
  }
  if (numbers == 0) {
    b.prefixes = words;
    return b;
  }
  PTDP_CHECK_ARG(numbers == weights.size(),
                 flag + ": " + quoted +
                     " mixes weights and prefixes; expected WEIGHT PREFIX [WEIGHT PREFIX ...] or PREFIX [PREFIX ...]");
  for (std::size_t i = 0; i < weights.size(); ++i) {
    PTDP_CHECK_ARG(std::isfinite(weights[i]) && weights[i] > 0,
                   str_cat(flag, ": ", quoted, ": the weight '", words[2 * i], "' of ", words[2 * i + 1],
                           " is not a finite number > 0"));
    b.weights.push_back(weights[i]);
    b.prefixes.push_back(words[2 * i + 1]);
  }
  return b;
}

std::vector<double> normalize_weights(const std::vector<double>& weights) {
  const double sum = 0.0 + pairwise_sum(weights.data(), weights.size());
  std::vector<double> out(weights.size());
  for (std::size_t i = 0; i < weights.size(); ++i) out[i] = weights[i] / sum;
  return out;
}

std::vector<int64_t> blend_dataset_sizes(const std::vector<double>& normalized_weights, int64_t size, double surplus) {
  std::vector<int64_t> out;
  out.reserve(normalized_weights.size());
  for (const double w : normalized_weights) {
    const double target = std::ceil(static_cast<double>(size) * w);
    out.push_back(static_cast<int64_t>(std::ceil(target * (1.0 + surplus))));
  }
  return out;
}

void build_blending_indices(const std::vector<double>& weights, int64_t size, std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index) {
  PTDP_CHECK_ARG(!weights.empty() && weights.size() < 32767,
                 "a blend needs 1 to 32766 data sets, not " + num(static_cast<int64_t>(weights.size())));
  PTDP_CHECK_ARG(size >= 0, "blend size " + num(size) + " is negative");
  const std::size_t n = weights.size();
  std::vector<int64_t> current(n, 0);
  dataset_index.resize(static_cast<std::size_t>(size));
  dataset_sample_index.resize(static_cast<std::size_t>(size));
  for (int64_t j = 0; j < size; ++j) {
    const double at = std::max(static_cast<double>(j), 1.0);
    std::size_t best = 0;
    double best_error = weights[0] * at - static_cast<double>(current[0]);
    for (std::size_t i = 1; i < n; ++i) {
      const double error = weights[i] * at - static_cast<double>(current[i]);
      if (error > best_error) {
        best_error = error;
        best = i;
      }
    }
    dataset_index[static_cast<std::size_t>(j)] = static_cast<int16_t>(best);
    dataset_sample_index[static_cast<std::size_t>(j)] = current[best]++;
  }
}

void build_exhaustive_blending_indices(const std::vector<int64_t>& sizes, std::vector<int16_t>& dataset_index,
                                       std::vector<int64_t>& dataset_sample_index) {
  PTDP_CHECK_ARG(!sizes.empty() && sizes.size() < 32767,
                 "a blend needs 1 to 32766 data sets, not " + num(static_cast<int64_t>(sizes.size())));
  int64_t total = 0;
  for (const int64_t s : sizes) {
    PTDP_CHECK_ARG(s >= 0, "a data set size " + num(s) + " is negative");
    total += s;
  }
  std::vector<double> weights(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) weights[i] = static_cast<double>(sizes[i]) / static_cast<double>(total);
  std::set<std::size_t> unspent;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] > 0) unspent.insert(i);  // Megatron would draw from an empty one forever
  }
  std::vector<int64_t> counts(sizes.size(), 0);
  dataset_index.resize(static_cast<std::size_t>(total));
  dataset_sample_index.resize(static_cast<std::size_t>(total));
  for (int64_t j = 0; !unspent.empty(); ++j) {
    const double at = std::max(static_cast<double>(j), 1.0);
    std::size_t best = *unspent.begin();
    double best_error = std::numeric_limits<double>::lowest();
    for (const std::size_t i : unspent) {
      const double error = weights[i] * at - static_cast<double>(counts[i]);
      if (error > best_error) {
        best_error = error;
        best = i;
      }
    }
    dataset_index[static_cast<std::size_t>(j)] = static_cast<int16_t>(best);
    dataset_sample_index[static_cast<std::size_t>(j)] = counts[best]++;
    if (counts[best] == sizes[best]) unspent.erase(best);
  }
}

BlendedSplit::BlendedSplit(std::vector<std::shared_ptr<const SplitSamples>> parts,
                           const std::vector<double>& normalized_weights, int64_t size, std::string what)
    : parts_(std::move(parts)), what_(std::move(what)) {
  PTDP_CHECK_ARG(!parts_.empty(), what_ + ": a blend of no data sets");
  for (const auto& p : parts_) {
    PTDP_CHECK_ARG(p != nullptr, what_ + ": a NULL part");
    PTDP_CHECK_ARG(p->seq_length() == parts_[0]->seq_length(), what_ + ": the blended data sets differ in seq_length");
  }
  seq_length_ = parts_[0]->seq_length();
  if (normalized_weights.empty()) {
    std::vector<int64_t> sizes;
    for (const auto& p : parts_) sizes.push_back(p->num_samples());
    build_exhaustive_blending_indices(sizes, dataset_index_, dataset_sample_index_);
  } else {
    PTDP_CHECK_ARG(normalized_weights.size() == parts_.size(),
                   what_ + ": " + num(static_cast<int64_t>(normalized_weights.size())) + " weights for " +
                       num(static_cast<int64_t>(parts_.size())) + " data sets");
    build_blending_indices(normalized_weights, size, dataset_index_, dataset_sample_index_);
  }
  // BlendedDataset's check: no data set is asked for more samples than it has.
  std::vector<int64_t> drawn(parts_.size(), 0);
  for (const int16_t i : dataset_index_) ++drawn[static_cast<std::size_t>(i)];
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    PTDP_CHECK_ARG(drawn[i] <= parts_[i]->num_samples(),
                   what_ + ": the blend draws " + num(drawn[i]) + " samples from data set " + num(static_cast<int64_t>(i)) +
                       ", which has " + num(parts_[i]->num_samples()));
  }
}

void BlendedSplit::get_batch(int64_t first, int64_t count, int32_t* tokens, int32_t* labels) const {
  const int64_t n = num_samples();
  PTDP_CHECK_ARG(n > 0, what_ + ": the blend has no samples");
  PTDP_CHECK_ARG(first >= 0, "first = " + num(first) + " is negative");
  PTDP_CHECK_ARG(count > 0, "count = " + num(count) + " is not > 0");
  PTDP_CHECK_ARG(tokens != nullptr, "tokens is NULL");
  PTDP_CHECK_ARG(labels != nullptr, "labels is NULL");
  const auto s = static_cast<std::size_t>(seq_length_);
  for (int64_t j = 0; j < count; ++j) {
    const auto at = static_cast<std::size_t>((first % n + j % n) % n);
    const auto row = static_cast<std::size_t>(j) * s;
    parts_[static_cast<std::size_t>(dataset_index_[at])]->get_batch(dataset_sample_index_[at], 1, tokens + row,
                                                                    labels + row);
  }
}

bool is_data_blend(const std::string& path) {
  if (split_words(path).size() <= 1) return false;
  std::error_code ec;
  return !std::filesystem::exists(path + ".idx", ec);
}

std::unique_ptr<GptDataset> make_gpt_dataset(const GptDataSpec& spec, const GptDatasetOptions& options,
                                             int32_t vocab_size) {
  const GptDatasetOptions& o = options;
  PTDP_CHECK_ARG(o.seq_length > 0, "seq_length = " + num(o.seq_length) + " is not > 0");
  for (std::size_t k = 0; k < 3; ++k) {
    PTDP_CHECK_ARG(o.num_samples[k] >= 0, "num_samples[" + num(static_cast<int64_t>(k)) + "] = " +
                                              num(o.num_samples[k]) + " is negative");
  }
  const bool list = spec.source == DataSource::Indexed && is_data_blend(spec.path);
  if (!spec.per_split() && !list) {
    return std::make_unique<GptDataset>(open_token_source(spec.source, spec.path, o.seq_length, vocab_size, o.seed), o);
  }
  PTDP_CHECK_ARG(spec.source == DataSource::Indexed, "per-split data paths need indexed data sets");
  std::array<std::shared_ptr<const SplitSamples>, kNumDataSplits> splits;
  const auto open = [&](const std::string& prefix) {
    return open_token_source(DataSource::Indexed, prefix, o.seq_length, vocab_size, o.seed);
  };
  if (!spec.per_split()) {
    // --data-path: every data set split by --split, each split blended.
    const DataBlend blend = parse_data_blend(split_words(spec.path), "--data-path");
    const std::array<double, 3> split_weights = parse_split(o.split);
    std::vector<std::shared_ptr<const TokenSource>> sources;
    std::vector<std::array<int64_t, 4>> bounds;
    for (const std::string& p : blend.prefixes) {
      sources.push_back(open(p));
      bounds.push_back(split_boundaries(split_weights, sources.back()->num_documents()));
    }
    const std::vector<double> weights = blend.weights.empty() ? std::vector<double>{} : normalize_weights(blend.weights);
    for (int k = 0; k < kNumDataSplits; ++k) {
      const auto split = static_cast<DataSplit>(k);
      const auto i = static_cast<std::size_t>(k);
      if (split_weights[i] == 0) {
        splits[i] = std::make_shared<EmptySplit>(o.seq_length, std::string("split ") + data_split_name(split) +
                                                                   " (weight 0 in --split " + o.split + ")");
        continue;
      }
      std::vector<Part> parts;
      for (std::size_t d = 0; d < sources.size(); ++d) parts.push_back(Part{sources[d], bounds[d][i], bounds[d][i + 1]});
      splits[i] = blend_split(parts, weights, split, o, std::string("--data-path, split ") + data_split_name(split));
    }
  } else {
    // --train-data-path, --valid-data-path, --test-data-path: each list is one split, whole.
    static const char* const kFlags[3] = {"--train-data-path", "--valid-data-path", "--test-data-path"};
    for (int k = 0; k < kNumDataSplits; ++k) {
      const auto split = static_cast<DataSplit>(k);
      const auto i = static_cast<std::size_t>(k);
      if (spec.split_paths[i].empty()) {
        splits[i] = std::make_shared<EmptySplit>(o.seq_length, std::string("split ") + data_split_name(split) +
                                                                   " (no " + kFlags[i] + ")");
        continue;
      }
      const DataBlend blend = parse_data_blend(split_words(spec.split_paths[i]), kFlags[i]);
      std::vector<Part> parts;
      for (const std::string& p : blend.prefixes) {
        std::shared_ptr<const TokenSource> source = open(p);
        const int64_t docs = source->num_documents();
        parts.push_back(Part{std::move(source), 0, docs});
      }
      if (parts.size() == 1) {  // Megatron: a single prefix is its own split, weight or not
        splits[i] = std::make_shared<GptSplit>(parts[0].source, split, 0, parts[0].end, o.seq_length, o.seed,
                                               o.num_samples[i]);
        continue;
      }
      const std::vector<double> weights =
          blend.weights.empty() ? std::vector<double>{} : normalize_weights(blend.weights);
      splits[i] = blend_split(parts, weights, split, o, kFlags[i]);
    }
  }
  return std::make_unique<GptDataset>(splits);
}

}  // namespace ptdp
