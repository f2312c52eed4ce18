// Megatron-LM's tools/preprocess_data.py and tools/merge_datasets.py: JSON lines in, indexed data
// sets (core/data/indexed_dataset.h) out, that Megatron reads as its own.
//
// Preprocessing. Every line of the inputs (in the order given; plain or gzip, told apart by the
// gzip magic, so concatenated gzip members and plain text both read) is one JSON object and one
// document. For every --json-keys KEY, the object's KEY is a string (one sentence) or a list of
// strings (one sentence each, as Megatron takes them); each sentence is tokenized, sentences
// without tokens are dropped, and the document is written to PREFIX_KEY_document.{bin,idx} as
// one sequence per sentence (so one sequence without --split-sentences). With --append-eod a
// document with tokens gets the tokenizer's end-of-document id after its last token (its last
// sequence grows by one). A document without tokens has no sequences but still counts as a
// document (Megatron's add_document). The token dtype is Megatron's DType.optimal_dtype of the
// tokenizer's vocabulary size: uint16 below 65,500 ids, else int32.
//
// A line that is not a JSON object, lacks a key, or holds something else than a string or a
// list of strings under it (or text the tokenizer refuses) is an error naming FILE:LINE, unless
// skip_bad_lines, which drops the line and counts it.
//
// Streaming with bounded memory: one thread reads lines into batches, `workers` threads parse
// and tokenize them, and the reading thread writes finished batches in input order (at most a
// few batches per worker are in flight). The index arrays are spilled to temporary files, so
// memory does not grow with the input. Outputs are written to PREFIX.bin.tmp / PREFIX.idx.tmp
// and renamed when complete: a failure leaves no partial data set behind.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/data/indexed_dataset.h"
#include "core/data/tokenizer.h"

namespace ptdp {

/// Megatron's DType.optimal_dtype: uint16 when `vocab_size` < 65500, else int32.
IndexedDType optimal_token_dtype(int64_t vocab_size);

/// The prefix preprocessing writes for `key`: "PREFIX_KEY_document" (Megatron's name).
std::string preprocess_output_prefix(const std::string& output_prefix, const std::string& key);

/// Writes one indexed data set as a stream, as Megatron's IndexedDatasetBuilder does: tokens go
/// to PREFIX.bin.tmp as they come, the sequence lengths and document boundaries to temporary
/// files; finish() writes PREFIX.idx and renames both into place. Not finishing (an exception,
/// or destruction first) removes the temporaries and leaves any existing PREFIX.* untouched.
class IndexedDatasetWriter {
 public:
  /// Throws InvalidArgument for a float or unknown dtype, Io naming the file it cannot create.
  IndexedDatasetWriter(std::string prefix, IndexedDType dtype);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  IndexedDType dtype() const { return dtype_; }
  int64_t num_documents() const { return documents_; }
  int64_t num_sequences() const { return sequences_; }
  int64_t num_tokens() const { return tokens_; }

  /// One document: `sequence_lengths[i]` tokens each, taken from `tokens` in order (their sum
  /// tokens in all). Throws InvalidArgument for a token the dtype cannot hold or a negative or
  /// too long length, Io when writing fails.
  void add_document(const int32_t* tokens, const int64_t* sequence_lengths, std::size_t num_sequences);
  /// Appends every document of the data set at `prefix` (Megatron's add_index): its .bin bytes
  /// are copied as they are. Throws InvalidArgument naming the file when its dtype differs, Io
  /// for a file problem or a .bin whose sequences are not stored back to back.
  void add_dataset(const std::string& prefix);
  /// Writes PREFIX.idx and renames the files into place. Io naming the file on failure.
  void finish();

 private:
  struct Files;
  std::string prefix_;
  IndexedDType dtype_;
  std::unique_ptr<Files> files_;
  int64_t documents_ = 0;
  int64_t sequences_ = 0;
  int64_t tokens_ = 0;
  int64_t bin_bytes_ = 0;
  bool finished_ = false;
};

/// Megatron's tools/merge_datasets.py: the data sets at `prefixes`, in that order, written as
/// one data set at `output_prefix` (documents and sequences concatenated, .bin bytes copied).
/// Throws InvalidArgument for no prefixes or data sets of different dtypes (naming them), Io
/// naming the file for a missing or malformed input or an unwritable output.
void merge_datasets(const std::vector<std::string>& prefixes, const std::string& output_prefix);

/// The data sets in `directory` as merge_datasets.py finds them: every PREFIX with both
/// PREFIX.bin and PREFIX.idx, sorted by name. Throws InvalidArgument when it is not a
/// directory or a file in it has no partner (Megatron requires the pairs), naming it.
std::vector<std::string> dataset_prefixes_in(const std::string& directory);

/// What to preprocess (tools/preprocess_data.py's flags).
struct PreprocessOptions {
  std::vector<std::string> inputs;             ///< --input: JSON-lines files, plain or gzip
  std::vector<std::string> json_keys{"text"};  ///< --json-keys
  std::string output_prefix;                   ///< --output-prefix
  TokenizerConfig tokenizer;                   ///< --tokenizer-type and its files
  bool append_eod = false;                     ///< --append-eod
  int workers = 1;                             ///< --workers: tokenizing threads
  int64_t log_interval = 1000;                 ///< --log-interval: a progress line every N documents; 0: none
  bool skip_bad_lines = false;                 ///< --skip-bad-lines: drop and count bad lines
};

/// What a run did.
struct PreprocessStats {
  int64_t documents = 0;             ///< documents written (per key)
  int64_t bad_lines = 0;             ///< lines dropped by skip_bad_lines
  int64_t bytes = 0;                 ///< input bytes read (after gzip), newlines included
  int64_t tokens = 0;                ///< tokens written, over all keys
  double seconds = 0;                ///< wall time of the reading, tokenizing and writing
  IndexedDType dtype = IndexedDType::UInt16;
  std::vector<std::string> outputs;  ///< the prefixes written, one per key
};

/// Preprocesses with `tokenizer` (shared by the workers; encode must be thread-safe, as
/// tokenizer.h promises). Progress lines go to `log` every log_interval documents, in
/// Megatron's words: "Processed N documents (D docs/s, M MB/s)." (nullptr: none).
/// Throws InvalidArgument for bad options (naming the flag) or a bad line (naming FILE:LINE),
/// Io naming the file for an input that cannot be read (a truncated gzip file included) or an
/// output that cannot be written.
PreprocessStats preprocess_json_lines(const PreprocessOptions& options, const Tokenizer& tokenizer, std::FILE* log);
/// The same with make_tokenizer(options.tokenizer).
PreprocessStats preprocess_json_lines(const PreprocessOptions& options, std::FILE* log);

}  // namespace ptdp
