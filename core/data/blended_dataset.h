// Data blends as Megatron-LM builds them (megatron/core/datasets/blended_dataset.py,
// blended_megatron_dataset_builder.py and helpers.cpp): several indexed data sets, each with a
// weight, drawn into one sequence of samples per split.
//
// `--data-path` takes Megatron's list: one PREFIX; or WEIGHT PREFIX [WEIGHT PREFIX ...]; or
// PREFIX PREFIX ... (weights from the data sets' sizes). `--train-data-path`, `--valid-data-path`
// and `--test-data-path` each take such a list for one split instead (then `--split` is not used;
// a split without a list has no samples). For a split that wants N samples from a weighted list:
//
//  1. the weights are normalised (w / sum w, as numpy: pairwise summation);
//  2. data set i is asked for ceil(ceil(N * w_i) * 1.005) samples of its part of the split (the
//     0.5% surplus, mid_level_dataset_surplus) and contributes target_i = ceil(N * w_i);
//  3. the blend has size = sum_i target_i samples (marginally more than N), and sample j comes
//     from the data set whose drawn count lags its share most: argmax_i (w_i * max(j, 1) -
//     count_i), the first such i on ties; it is that data set's count_i-th sample (in the data
//     set's own shuffled order), and count_i grows by one (helpers.cpp build_blending_indices).
//
// Without weights, each data set gives one epoch, weighted by its sample count, and the blend
// has min(N, their sum) samples. A split wanting no samples (N = 0, ptdp's "one epoch") takes one
// epoch of every data set, every sample once, in proportion to their sizes (Megatron's
// build_exhaustive_blending_indices). A single PREFIX with no weight is not a blend.
//
// Everything is a pure function of (data sets, weights, split, seed, s, N): the blend, like the
// data sets it draws from, is the same on every rank and layout, so a global batch holds the
// same samples whatever t, p and d are.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/data/gpt_dataset.h"

namespace ptdp {

/// Megatron's mid_level_dataset_surplus: the share of extra samples each blended data set builds.
constexpr double kMidLevelDatasetSurplus = 0.005;

/// A parsed Megatron data-path list.
struct DataBlend {
  std::vector<std::string> prefixes;
  std::vector<double> weights;  ///< as given, one per prefix; empty: no weights
};

/// The whitespace-separated words of `text`.
std::vector<std::string> split_words(std::string_view text);

/// Megatron's get_blend_from_list over `words`: an odd count is a list of prefixes; an even
/// count is WEIGHT PREFIX pairs when every even-position word is a number, a list of prefixes
/// when none is. Throws InvalidArgument naming `flag` and quoting the list for an empty list, a
/// list mixing numbers and prefixes at the weight positions, or a weight that is not finite and
/// > 0.
DataBlend parse_data_blend(const std::vector<std::string>& words, const std::string& flag);

/// Megatron's normalize: w / sum(w), the sum as numpy's (pairwise over blocks of 8).
std::vector<double> normalize_weights(const std::vector<double>& weights);

/// Megatron's _get_size_per_split_per_dataset for one split: ceil(ceil(size * w_i) * (1 +
/// surplus)) for each normalised weight w_i.
std::vector<int64_t> blend_dataset_sizes(const std::vector<double>& normalized_weights, int64_t size,
                                         double surplus);

/// helpers.cpp build_blending_indices: for j in [0, size), dataset_index[j] = argmax_i
/// (weights_i * max(j, 1) - count_i) (first on ties) and dataset_sample_index[j] = its count
/// before j.
void build_blending_indices(const std::vector<double>& weights, int64_t size, std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index);

/// helpers.cpp build_exhaustive_blending_indices: every sample of every data set once
/// (sizes[i] of data set i), interleaved by the same error rule over the data sets not yet
/// spent (weights sizes_i / sum). Data sets of size 0 never appear.
void build_exhaustive_blending_indices(const std::vector<int64_t>& sizes, std::vector<int16_t>& dataset_index,
                                       std::vector<int64_t>& dataset_sample_index);

/// One split of a blend: sample j is sample dataset_sample_index[j] of part dataset_index[j].
class BlendedSplit final : public SplitSamples {
 public:
  /// Parts are the data sets' samples of this split (all with the same s). With
  /// `normalized_weights` (one per part), `size` samples by build_blending_indices; without, the
  /// exhaustive blend of every part's samples. Throws InvalidArgument naming `what` when the
  /// blend would draw more samples from a part than it has, or the parts disagree on s.
  BlendedSplit(std::vector<std::shared_ptr<const SplitSamples>> parts, const std::vector<double>& normalized_weights,
               int64_t size, std::string what);

  int32_t seq_length() const override { return seq_length_; }
  int64_t num_samples() const override { return static_cast<int64_t>(dataset_index_.size()); }
  /// Samples [first, first + count) in blend order, wrapping modulo num_samples().
  void get_batch(int64_t first, int64_t count, int32_t* tokens, int32_t* labels) const override;

  std::size_t num_parts() const { return parts_.size(); }
  const std::vector<int16_t>& dataset_index() const { return dataset_index_; }
  const std::vector<int64_t>& dataset_sample_index() const { return dataset_sample_index_; }

 private:
  std::vector<std::shared_ptr<const SplitSamples>> parts_;
  int32_t seq_length_ = 0;
  std::string what_;
  std::vector<int16_t> dataset_index_;
  std::vector<int64_t> dataset_sample_index_;
};

/// Where a GPT data set's samples come from.
struct GptDataSpec {
  DataSource source = DataSource::Mock;
  std::string path;                                      ///< the text file, or the --data-path list as one string
  std::array<std::string, kNumDataSplits> split_paths;   ///< --train/valid/test-data-path lists; any set: per split
  bool per_split() const { return !split_paths[0].empty() || !split_paths[1].empty() || !split_paths[2].empty(); }
};

/// Whether `path` is a Megatron list (more than one word) rather than one prefix. A path that
/// names an existing PREFIX.idx is one prefix, spaces or not.
bool is_data_blend(const std::string& path);

/// The samples of `spec`: one source as GptDataset(open_token_source(...), options) builds
/// them; a --data-path list blended per split (each data set split by options.split); or the
/// per-split lists (each data set whole in its split; options.split unused). The samples
/// wanted are options.num_samples. Throws what open_token_source and GptDataset throw, and
/// InvalidArgument for a malformed list (naming the flag).
std::unique_ptr<GptDataset> make_gpt_dataset(const GptDataSpec& spec, const GptDatasetOptions& options,
                                             int32_t vocab_size);

}  // namespace ptdp
