// Megatron-LM's indexed data set (the `MMIDIDX` format, version 1): PREFIX.idx holds the index,
// PREFIX.bin the tokens of every sequence back to back.
//
// PREFIX.idx, all little-endian:
//   9 bytes  magic "MMIDIDX\0\0"
//   8 bytes  version (1)
//   1 byte   dtype code of the tokens in .bin (IndexedDType)
//   8 bytes  sequence count S
//   8 bytes  document-index count D (the number of documents plus one)
//   int32[S] sequence lengths, in tokens
//   int64[S] sequence byte offsets into .bin
//   int64[D] document boundaries as sequence indices: 0, end of document 0, end of document 1, ...
// Anything after the document boundaries (Megatron's multimodal sequence modes) is ignored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ptdp {

/// Megatron's dtype codes (megatron/core/datasets/indexed_dataset.py, class DType).
enum class IndexedDType : uint8_t {
  UInt8 = 1,
  Int8 = 2,
  Int16 = 3,
  Int32 = 4,
  Int64 = 5,
  Float64 = 6,
  Float32 = 7,
  UInt16 = 8,
};

/// Bytes per element of `dtype`; throws InvalidArgument for an unknown code.
std::size_t indexed_dtype_size(IndexedDType dtype);
/// The NumPy name of `dtype` ("uint16", ...); "unknown" for an unknown code.
const char* indexed_dtype_name(IndexedDType dtype);

/// A read-only view of PREFIX.idx / PREFIX.bin. The index is validated and held in memory at
/// construction; PREFIX.bin is memory-mapped and read on access. Every file problem throws
/// Error(Io) with a message naming the file; bad indices throw Error(InvalidArgument).
/// Token data sets only: float dtypes are rejected when the file is opened. Const member
/// functions may be called from several threads at once.
class IndexedDataset {
 public:
  explicit IndexedDataset(const std::string& prefix);
  ~IndexedDataset();
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;
  IndexedDataset(IndexedDataset&& other) noexcept;
  IndexedDataset& operator=(IndexedDataset&& other) noexcept;

  const std::string& prefix() const { return prefix_; }
  IndexedDType dtype() const { return dtype_; }
  int64_t num_sequences() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t num_documents() const { return static_cast<int64_t>(doc_index_.size()) - 1; }
  /// Tokens over all sequences.
  int64_t num_tokens() const { return total_tokens_; }
  /// Tokens of sequence `i` / document `i`, without reading them.
  int64_t sequence_length(int64_t i) const;
  int64_t document_length(int64_t i) const;
  /// Sequences [first, last) of document `i`.
  int64_t document_first_sequence(int64_t i) const;
  int64_t document_end_sequence(int64_t i) const;

  /// The tokens of sequence `i`; throws Io naming the file for a negative token (or one above
  /// INT32_MAX in an int64 data set).
  std::vector<int32_t> sequence(int64_t i) const;
  /// The concatenated tokens of the sequences of document `i`.
  std::vector<int32_t> document(int64_t i) const;
  /// Tokens [first, first + count) of sequence `i` into `out`, reading only those (the same
  /// errors as sequence(); InvalidArgument for a range outside the sequence).
  void read_sequence(int64_t i, int64_t first, int64_t count, int32_t* out) const;

 private:
  void check_sequence(int64_t i) const;
  void check_document(int64_t i) const;
  void append_sequence(int64_t i, std::vector<int32_t>& out) const;
  void decode(int64_t i, int64_t first, int64_t count, int32_t* out) const;
  void unmap() noexcept;

  std::string prefix_;
  std::string bin_path_;
  IndexedDType dtype_ = IndexedDType::Int32;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> pointers_;
  std::vector<int64_t> doc_index_;
  int64_t total_tokens_ = 0;
  const unsigned char* bin_ = nullptr;  // mapped PREFIX.bin (nullptr when it is empty)
  std::size_t bin_size_ = 0;
};

/// Writes PREFIX.idx and PREFIX.bin: `documents[d]` is the list of sequences of document d,
/// each a list of tokens. `dtype` must be an integer dtype that holds every token (checked;
/// throws InvalidArgument otherwise). Throws Io naming the file when writing fails.
void write_indexed_dataset(const std::string& prefix,
                           const std::vector<std::vector<std::vector<int32_t>>>& documents,
                           IndexedDType dtype);

}  // namespace ptdp
