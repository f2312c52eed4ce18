// GPT training samples as Megatron-LM's GPTDataset builds them
// (megatron/core/datasets/gpt_dataset.py): a token source cut into documents, the documents
// split into train/valid/test by Megatron's `--split` weights, and per split a document index
// (the split's documents repeated over enough epochs, shuffled), a sample index (where each
// sample of s + 1 tokens starts) and a shuffle index (the order samples are served in).
//
// Everything is a pure function of (source, seed, split string, s, samples wanted): every rank
// builds the same indices without communicating, and every random draw comes from Philox
// (base/philox.h), never from a standard-library distribution, so the order is the same on
// every machine and standard library.
//
// Sources:
//  - IndexedTokenSource: Megatron's indexed data set (`--data-path PREFIX`); one document per
//    Megatron document, read on demand sequence by sequence, never all held in memory. Token ids
//    >= vocab_size are found when a sample containing them is read.
//  - TextTokenSource: a text file (`--text-file PATH`), one token per byte (0..255). A document
//    is a paragraph: a maximal run of lines that are not blank (a blank line is empty or holds
//    only spaces, tabs, \r, \f, \v). A document holds its lines' bytes, each line ended by "\n"
//    (the last one too when the file has no final newline), followed by one more "\n"; so every
//    document ends in "\n\n" and the concatenation reads as the file with each run of blank
//    lines reduced to one empty line. Held in memory; token ids are checked at open.
//  - MockTokenSource: `--mock-data`, 1000 synthetic documents. Document d has a length uniform
//    in [max(1, s/2), 4s] (Philox stream "ptdp.gpt_dataset.mock_length", element d) and token k
//    uniform in [0, vocab_size) (stream "ptdp.gpt_dataset.mock_tokens" + d, element k), both
//    keyed by the seed. Nothing is stored; tokens are computed when read.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/philox.h"
#include "core/data/indexed_dataset.h"

namespace ptdp {

/// The three parts of a data set; the numbers match ptdp_data_split.
enum class DataSplit : int { Train = 0, Valid = 1, Test = 2 };
constexpr int kNumDataSplits = 3;

/// "train", "valid" or "test".
const char* data_split_name(DataSplit split);

// ---- byte-level tokenizer -----------------------------------------------------------------

/// One token per byte: the byte's value 0..255.
std::vector<int32_t> byte_encode(std::string_view text);
/// The bytes of `ids`; throws InvalidArgument naming the position of an id outside 0..255.
std::string byte_decode(const int32_t* ids, std::size_t count);
inline std::string byte_decode(const std::vector<int32_t>& ids) { return byte_decode(ids.data(), ids.size()); }

// ---- token sources --------------------------------------------------------------------------

/// A list of documents of token ids. Const member functions may be called from several threads.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual int64_t num_documents() const = 0;
  /// Tokens of document `d` (0 <= d < num_documents()), without reading them.
  virtual int64_t document_length(int64_t d) const = 0;
  /// Writes tokens [offset, offset + count) of document `d` to `out`. Throws InvalidArgument
  /// naming the source, the document and the position of a token >= the vocabulary size the
  /// source was opened with; Io for a file problem.
  virtual void read(int64_t d, int64_t offset, int64_t count, int32_t* out) const = 0;
  /// What the source is, for messages: "PREFIX.bin", "text file PATH", "mock data".
  virtual std::string describe() const = 0;
};

/// Megatron's indexed data set at `prefix`. Throws Io naming the file when it cannot be opened.
class IndexedTokenSource final : public TokenSource {
 public:
  IndexedTokenSource(const std::string& prefix, int32_t vocab_size);
  int64_t num_documents() const override { return dataset_.num_documents(); }
  int64_t document_length(int64_t d) const override;
  void read(int64_t d, int64_t offset, int64_t count, int32_t* out) const override;
  std::string describe() const override { return dataset_.prefix() + ".bin"; }

 private:
  IndexedDataset dataset_;
  int32_t vocab_size_;
};

/// Paragraphs of `text` as documents, by the rule in this file's header comment.
std::vector<std::string> text_documents(std::string_view text);

/// A text file by the rule in this file's header comment. Throws Io naming the file when it
/// cannot be read, InvalidArgument naming the file, document and position of a byte >= vocab_size.
class TextTokenSource final : public TokenSource {
 public:
  TextTokenSource(const std::string& path, int32_t vocab_size);
  int64_t num_documents() const override { return static_cast<int64_t>(starts_.size()) - 1; }
  int64_t document_length(int64_t d) const override;
  void read(int64_t d, int64_t offset, int64_t count, int32_t* out) const override;
  std::string describe() const override { return "text file " + path_; }

 private:
  std::string path_;
  std::string bytes_;             // every document back to back
  std::vector<int64_t> starts_;   // [num_documents + 1] document boundaries in bytes_
};

/// Synthetic documents, by the rule in this file's header comment.
class MockTokenSource final : public TokenSource {
 public:
  static constexpr int64_t kNumDocuments = 1000;
  MockTokenSource(uint64_t seed, int32_t seq_length, int32_t vocab_size);
  int64_t num_documents() const override { return kNumDocuments; }
  int64_t document_length(int64_t d) const override;
  void read(int64_t d, int64_t offset, int64_t count, int32_t* out) const override;
  std::string describe() const override { return "mock data"; }

 private:
  uint64_t seed_;
  int32_t vocab_size_;
  std::vector<int64_t> lengths_;  // [kNumDocuments]
};

// ---- splits ---------------------------------------------------------------------------------

/// Megatron's `--split`: one to three non-negative decimal weights separated by ',' or '/'
/// (spaces allowed around them), padded with zeros to three and normalised to sum 1. Throws
/// InvalidArgument quoting the string when it is malformed, has more than three weights, a
/// negative weight, or weights summing to 0.
std::array<double, 3> parse_split(std::string_view split);

/// Megatron's get_split_indices over `num_documents`: boundaries[i + 1] = boundaries[i] +
/// round(weights[i] * num_documents) (round half to even, as Python's round), then every
/// boundary after the first shifted by the same amount so the last is num_documents. Split i is
/// documents [boundaries[i], boundaries[i + 1]). (Clamped into [0, num_documents] in the rare
/// rounding cases where Megatron's shift would leave the range.)
std::array<int64_t, 4> split_boundaries(const std::array<double, 3>& weights, int64_t num_documents);

/// The high 64 bits of the 128-bit product a * b: with `a` 64 random bits, a draw in [0, b)
/// (bias below b / 2^64).
inline uint64_t mul_high_u64(uint64_t a, uint64_t b) {
  const uint64_t a_lo = a & 0xffffffffu, a_hi = a >> 32;
  const uint64_t b_lo = b & 0xffffffffu, b_hi = b >> 32;
  const uint64_t lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo, lo_hi = a_lo * b_hi, hi_hi = a_hi * b_hi;
  const uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xffffffffu) + lo_hi;
  return hi_hi + (hi_lo >> 32) + (cross >> 32);
}

/// Shuffles `v` in place by Fisher-Yates: for i = n-1 .. 1, swap v[i] with v[j], j in [0, i]
/// drawn as mul_high_u64(bits, i + 1) from bits = words 0 (low) and 1 (high) of Philox block i
/// of `stream`.
template <typename T>
void philox_shuffle(std::vector<T>& v, PhiloxStream stream) {
  for (std::size_t i = v.size(); i-- > 1;) {
    const Philox4x32 r = philox_block(stream, i);
    const uint64_t bits = (static_cast<uint64_t>(r.v[1]) << 32) | r.v[0];
    const auto j = static_cast<std::size_t>(mul_high_u64(bits, i + 1));
    std::swap(v[i], v[j]);
  }
}

/// The Philox streams of a split's document shuffle and sample shuffle.
PhiloxStream document_shuffle_stream(uint64_t seed, DataSplit split);
PhiloxStream sample_shuffle_stream(uint64_t seed, DataSplit split);

/// The samples of one split as the training loop reads them: a GptSplit, or a blend of the
/// splits of several data sets (core/data/blended_dataset.h).
class SplitSamples {
 public:
  virtual ~SplitSamples() = default;
  virtual int32_t seq_length() const = 0;
  virtual int64_t num_samples() const = 0;
  /// Samples [first, first + count), wrapping modulo num_samples(): tokens [count, s] = each
  /// sample's first s tokens, labels [count, s] = its last s. Thread-safe.
  virtual void get_batch(int64_t first, int64_t count, int32_t* tokens, int32_t* labels) const = 0;
};

/// One split's samples (Megatron's GPTDataset). Samples hold s + 1 tokens: sample i (in
/// sample-index order) is tokens [i*s, i*s + s + 1) of the split's documents concatenated in
/// document-index order, so consecutive samples share one token.
class GptSplit final : public SplitSamples {
 public:
  /// Documents [first_document, end_document) of `source`. `num_samples_wanted` > 0: enough
  /// epochs for at least that many samples (throws InvalidArgument naming the split, its tokens
  /// and s + 1 when one epoch cannot fill a sample); 0: exactly one epoch, which may hold no
  /// sample at all.
  GptSplit(std::shared_ptr<const TokenSource> source, DataSplit split, int64_t first_document,
           int64_t end_document, int32_t seq_length, uint64_t seed, int64_t num_samples_wanted);

  DataSplit split() const { return split_; }
  int32_t seq_length() const override { return seq_length_; }
  int64_t first_document() const { return first_document_; }
  int64_t end_document() const { return end_document_; }
  int64_t tokens_per_epoch() const { return tokens_per_epoch_; }
  int64_t num_epochs() const { return num_epochs_; }
  /// (num_epochs * tokens_per_epoch - 1) / s.
  int64_t num_samples() const override { return static_cast<int64_t>(shuffle_index_.size()); }

  /// [num_epochs * split documents]: source document ids, each split document once per epoch,
  /// shuffled as a whole by philox_shuffle with document_shuffle_stream(seed, split).
  const std::vector<int32_t>& document_index() const { return document_index_; }
  /// [num_samples]: 0 .. num_samples-1 shuffled by philox_shuffle with sample_shuffle_stream.
  const std::vector<int64_t>& shuffle_index() const { return shuffle_index_; }

  /// The s + 1 tokens of sample `i` in sample-index order (before the shuffle), to `out`.
  void read_sample(int64_t i, int32_t* out) const;
  /// Samples [first, first + count) in shuffled order, wrapping modulo num_samples():
  /// tokens [count, s] = each sample's first s tokens, labels [count, s] = its last s.
  /// Throws InvalidArgument for an empty split, first < 0 or count <= 0. Thread-safe.
  void get_batch(int64_t first, int64_t count, int32_t* tokens, int32_t* labels) const override;

 private:
  std::shared_ptr<const TokenSource> source_;
  DataSplit split_;
  int32_t seq_length_;
  int64_t first_document_;
  int64_t end_document_;
  int64_t tokens_per_epoch_ = 0;
  int64_t num_epochs_ = 1;
  std::vector<int32_t> document_index_;
  // Sample i starts at token sample_offset_[i] of document document_index_[sample_position_[i]].
  std::vector<int64_t> sample_position_;  // [num_samples]
  std::vector<int64_t> sample_offset_;    // [num_samples]
  std::vector<int64_t> shuffle_index_;    // [num_samples]
};

struct GptDatasetOptions {
  std::string split = "969,30,1";
  int32_t seq_length = 32;                 ///< s
  uint64_t seed = 1234;
  std::array<int64_t, 3> num_samples{};    ///< wanted per split; 0: one epoch
};

/// Where the training samples come from; the numbers match ptdp_data_source in the C API.
enum class DataSource : int { Mock = 0, Indexed = 1, Text = 2 };

/// The token source of `source`: Megatron's indexed data set at prefix `path`, the bytes of the
/// text file `path`, or mock documents (path unused). Throws Error(InvalidArgument) for an
/// empty path where one is needed, and what the source's constructor throws.
std::shared_ptr<const TokenSource> open_token_source(DataSource source, const std::string& path, int32_t seq_length,
                                                     int32_t vocab_size, uint64_t seed);

// ---- end-of-document masks ------------------------------------------------------------------

/// Megatron's _get_ltor_masks_and_position_ids (megatron/core/datasets/gpt_dataset.py) over
/// `count` samples of `seq_length` tokens (row-major [count, seq_length], each row on its own):
/// a document ends with its end-of-document token `eod`, which belongs to it, and the token
/// after it starts the next one.
///  - eod_mask_loss (--eod-mask-loss): labels[i] = kIgnoreIndex wherever tokens[i] == eod, so
///    the position whose input is the eod (predicting the next document's first token) takes no
///    part in the loss.
///  - position_ids (--reset-position-ids), when not NULL: each token's position within its
///    document (0 at a sample's start and after every eod).
///  - document_starts (--reset-attention-mask), when not NULL: the first position of each
///    token's document (one after the last eod before it, or 0), DocumentLayout's and
///    AttentionDesc's form.
/// labels may be NULL when eod_mask_loss is false. Throws InvalidArgument for a NULL tokens,
/// count < 0 or seq_length <= 0.
void eod_masks(const int32_t* tokens, int64_t count, int64_t seq_length, int32_t eod, bool eod_mask_loss,
               int32_t* labels, int32_t* position_ids, int32_t* document_starts);

/// The three splits of one source.
class GptDataset {
 public:
  /// Throws InvalidArgument for seq_length <= 0, a negative or too large num_samples, a
  /// malformed split string, or a split too small for the samples wanted.
  GptDataset(std::shared_ptr<const TokenSource> source, const GptDatasetOptions& options);
  /// A data set assembled from the samples of its three splits (a blend:
  /// core/data/blended_dataset.h make_gpt_dataset). It has no one source: source(), split()
  /// and boundaries() throw InvalidArgument. Throws InvalidArgument for a NULL split or splits
  /// of different s.
  explicit GptDataset(std::array<std::shared_ptr<const SplitSamples>, kNumDataSplits> splits);
  GptDataset(const GptDataset&) = delete;
  GptDataset& operator=(const GptDataset&) = delete;

  const TokenSource& source() const;
  const GptSplit& split(DataSplit split) const;
  /// The samples of a split, whichever way the data set was made.
  const SplitSamples& samples(DataSplit split) const;
  /// s, the tokens per sample (and per label row).
  int32_t seq_length() const { return samples(DataSplit::Train).seq_length(); }
  /// False for a data set assembled from blends.
  bool single_source() const { return !splits_.empty(); }
  /// Document boundaries of the splits (split_boundaries()).
  const std::array<int64_t, 4>& boundaries() const;
  int64_t num_samples(DataSplit s) const { return samples(s).num_samples(); }
  void get_batch(DataSplit s, int64_t first, int64_t count, int32_t* tokens, int32_t* labels) const {
    samples(s).get_batch(first, count, tokens, labels);
  }

 private:
  std::shared_ptr<const TokenSource> source_;
  std::array<int64_t, 4> boundaries_{};
  // Empty for an assembled data set, whose splits source_ then holds (gpt_dataset.cpp's
  // AssembledSplits), so that both kinds share one layout.
  std::vector<GptSplit> splits_;
};

}  // namespace ptdp
