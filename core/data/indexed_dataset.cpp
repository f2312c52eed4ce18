#include "core/data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <utility>

#include "base/error.h"
#include "io/file_read.h"

static_assert(std::endian::native == std::endian::little,
              "the MMIDIDX format is little-endian; this reader assumes a little-endian host");

namespace ptdp {
namespace {

constexpr unsigned char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr uint64_t kVersion = 1;
constexpr std::size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;

bool known_dtype(uint8_t code) { return code >= 1 && code <= 8; }

bool float_dtype(IndexedDType d) { return d == IndexedDType::Float32 || d == IndexedDType::Float64; }

template <typename T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// The largest value each integer dtype can hold as a token, and the smallest.
void token_range(IndexedDType d, int64_t& lo, int64_t& hi) {
  switch (d) {
    case IndexedDType::UInt8: lo = 0; hi = std::numeric_limits<uint8_t>::max(); return;
    case IndexedDType::Int8: lo = std::numeric_limits<int8_t>::min(); hi = std::numeric_limits<int8_t>::max(); return;
    case IndexedDType::Int16: lo = std::numeric_limits<int16_t>::min(); hi = std::numeric_limits<int16_t>::max(); return;
    case IndexedDType::UInt16: lo = 0; hi = std::numeric_limits<uint16_t>::max(); return;
    case IndexedDType::Int32: lo = std::numeric_limits<int32_t>::min(); hi = std::numeric_limits<int32_t>::max(); return;
    case IndexedDType::Int64: lo = std::numeric_limits<int64_t>::min(); hi = std::numeric_limits<int64_t>::max(); return;
    default: break;
  }
  throw_error(ErrorCode::InvalidArgument,
              std::string("dtype ") + indexed_dtype_name(d) + " cannot hold token ids; use an integer dtype");
}

}  // namespace

std::size_t indexed_dtype_size(IndexedDType dtype) {
  switch (dtype) {
    case IndexedDType::UInt8:
    case IndexedDType::Int8: return 1;
    case IndexedDType::Int16:
    case IndexedDType::UInt16: return 2;
    case IndexedDType::Int32:
    case IndexedDType::Float32: return 4;
    case IndexedDType::Int64:
    case IndexedDType::Float64: return 8;
  }
  throw_error(ErrorCode::InvalidArgument,
              "unknown indexed dtype code " + std::to_string(static_cast<int>(dtype)));
}

const char* indexed_dtype_name(IndexedDType dtype) {
  switch (dtype) {
    case IndexedDType::UInt8: return "uint8";
    case IndexedDType::Int8: return "int8";
    case IndexedDType::Int16: return "int16";
    case IndexedDType::Int32: return "int32";
    case IndexedDType::Int64: return "int64";
    case IndexedDType::Float64: return "float64";
    case IndexedDType::Float32: return "float32";
    case IndexedDType::UInt16: return "uint16";
  }
  return "unknown";
}

IndexedDataset::IndexedDataset(const std::string& prefix)
    : prefix_(prefix), bin_path_(prefix + ".bin") {
  const std::string idx_path = prefix + ".idx";
  const std::vector<unsigned char> idx = read_regular_file_bytes(idx_path, "index file", kMaxIndexFileBytes);
  const std::size_t size = idx.size();

  if (size < kHeaderBytes) {
    throw_io_error(idx_path, "truncated: " + std::to_string(size) + " bytes, shorter than the " +
                           std::to_string(kHeaderBytes) + "-byte header");
  }
  if (std::memcmp(idx.data(), kMagic, sizeof(kMagic)) != 0) {
    throw_io_error(idx_path, "bad magic: not a Megatron MMIDIDX index file");
  }
  const uint64_t version = load<uint64_t>(idx.data() + 9);
  if (version != kVersion) {
    throw_io_error(idx_path, "unsupported index version " + std::to_string(version) + " (only version 1 is supported)");
  }
  const uint8_t code = idx[17];
  if (!known_dtype(code)) throw_io_error(idx_path, "unknown dtype code " + std::to_string(code) + " (expected 1..8)");
  dtype_ = static_cast<IndexedDType>(code);
  if (float_dtype(dtype_)) {
    throw_io_error(idx_path, std::string("dtype ") + indexed_dtype_name(dtype_) +
                           " is a float dtype; a token data set needs an integer dtype");
  }
  const uint64_t seq_count = load<uint64_t>(idx.data() + 18);
  const uint64_t doc_count = load<uint64_t>(idx.data() + 26);

  // Sizes implied by the counts, without overflow: each count is bounded by the file size first.
  const uint64_t body = size - kHeaderBytes;
  const bool fits = seq_count <= body / 12 && doc_count <= (body - seq_count * 12) / 8;
  if (!fits) {
    // The counts may be absurd (2^62): say what they need without an overflowing size.
    const uint64_t seq_bytes = mul_overflows(seq_count, 12) ? UINT64_MAX : seq_count * 12;
    const uint64_t doc_bytes = mul_overflows(doc_count, 8) ? UINT64_MAX : doc_count * 8;
    const bool huge = add_overflows(seq_bytes, doc_bytes) || add_overflows(seq_bytes + doc_bytes, kHeaderBytes);
    const std::string needed = huge ? std::string("more than 2^64") : std::to_string(kHeaderBytes + seq_bytes + doc_bytes);
    throw_io_error(idx_path, "truncated: the header declares " + std::to_string(seq_count) + " sequences and " +
                           std::to_string(doc_count) + " document indices, which need " + needed +
                           " bytes, but the file has " + std::to_string(size) + " bytes");
  }
  if (doc_count == 0) throw_io_error(idx_path, "the document index is empty (it must start with 0)");

  const unsigned char* p = idx.data() + kHeaderBytes;
  lengths_.resize(seq_count);
  pointers_.resize(seq_count);
  doc_index_.resize(doc_count);
  if (seq_count > 0) {
    std::memcpy(lengths_.data(), p, seq_count * 4);
    std::memcpy(pointers_.data(), p + seq_count * 4, seq_count * 8);
  }
  std::memcpy(doc_index_.data(), p + seq_count * 12, doc_count * 8);

  // The document index: 0, non-decreasing, ending at the sequence count.
  if (doc_index_[0] != 0) {
    throw_io_error(idx_path, "document index [0] = " + std::to_string(doc_index_[0]) + " (must be 0)");
  }
  const int64_t S = static_cast<int64_t>(seq_count);
  for (std::size_t k = 1; k < doc_count; ++k) {
    if (doc_index_[k] < doc_index_[k - 1]) {
      throw_io_error(idx_path, "document index [" + std::to_string(k) + "] = " + std::to_string(doc_index_[k]) +
                             " is smaller than document index [" + std::to_string(k - 1) + "] = " +
                             std::to_string(doc_index_[k - 1]) + " (must not decrease)");
    }
    if (doc_index_[k] > S) {
      throw_io_error(idx_path, "document index [" + std::to_string(k) + "] = " + std::to_string(doc_index_[k]) +
                             " is out of range: there are " + std::to_string(S) + " sequences");
    }
  }
  if (doc_index_.back() != S) {
    throw_io_error(idx_path, "the last document index is " + std::to_string(doc_index_.back()) +
                           " but there are " + std::to_string(S) + " sequences (it must equal the sequence count)");
  }

  // Map PREFIX.bin (its size as observed at open), then check every sequence lies inside it.
  {
    RegularFile bin(bin_path_, "data file", kNoSizeLimit);
    bin_ = bin.map();
    bin_size_ = static_cast<std::size_t>(bin.size());
  }

  try {
    const uint64_t item = indexed_dtype_size(dtype_);
    const uint64_t bin_size = bin_size_;
    for (uint64_t i = 0; i < seq_count; ++i) {
      const int32_t len = lengths_[i];
      const int64_t ptr = pointers_[i];
      if (len < 0) {
        throw_io_error(idx_path, "sequence " + std::to_string(i) + " has negative length " + std::to_string(len));
      }
      if (ptr < 0) {
        throw_io_error(idx_path, "sequence " + std::to_string(i) + " has negative byte offset " + std::to_string(ptr));
      }
      const uint64_t bytes = static_cast<uint64_t>(len) * item;
      if (static_cast<uint64_t>(ptr) > bin_size || bytes > bin_size - static_cast<uint64_t>(ptr)) {
        throw_io_error(bin_path_, "truncated: sequence " + std::to_string(i) + " (" + std::to_string(len) + " " +
                                indexed_dtype_name(dtype_) + " tokens at byte " + std::to_string(ptr) +
                                ") ends at byte " + std::to_string(static_cast<uint64_t>(ptr) + bytes) +
                                ", past the end of the file (" + std::to_string(bin_size) + " bytes)");
      }
      total_tokens_ += len;
    }
  } catch (...) {
    unmap();
    throw;
  }
}

IndexedDataset::~IndexedDataset() { unmap(); }

IndexedDataset::IndexedDataset(IndexedDataset&& other) noexcept
    : prefix_(std::move(other.prefix_)),
      bin_path_(std::move(other.bin_path_)),
      dtype_(other.dtype_),
      lengths_(std::move(other.lengths_)),
      pointers_(std::move(other.pointers_)),
      doc_index_(std::move(other.doc_index_)),
      total_tokens_(other.total_tokens_),
      bin_(std::exchange(other.bin_, nullptr)),
      bin_size_(std::exchange(other.bin_size_, 0)) {}

IndexedDataset& IndexedDataset::operator=(IndexedDataset&& other) noexcept {
  if (this != &other) {
    unmap();
    prefix_ = std::move(other.prefix_);
    bin_path_ = std::move(other.bin_path_);
    dtype_ = other.dtype_;
    lengths_ = std::move(other.lengths_);
    pointers_ = std::move(other.pointers_);
    doc_index_ = std::move(other.doc_index_);
    total_tokens_ = other.total_tokens_;
    bin_ = std::exchange(other.bin_, nullptr);
    bin_size_ = std::exchange(other.bin_size_, 0);
  }
  return *this;
}

void IndexedDataset::unmap() noexcept {
  unmap_file(bin_, bin_size_);
  bin_ = nullptr;
  bin_size_ = 0;
}

void IndexedDataset::check_sequence(int64_t i) const {
  PTDP_CHECK_ARG(i >= 0 && i < num_sequences(), "sequence index " + std::to_string(i) + " is out of range [0, " +
                                                    std::to_string(num_sequences()) + ") of " + prefix_);
}

void IndexedDataset::check_document(int64_t i) const {
  PTDP_CHECK_ARG(i >= 0 && i < num_documents(), "document index " + std::to_string(i) + " is out of range [0, " +
                                                    std::to_string(num_documents()) + ") of " + prefix_);
}

int64_t IndexedDataset::sequence_length(int64_t i) const {
  check_sequence(i);
  return lengths_[static_cast<std::size_t>(i)];
}

int64_t IndexedDataset::document_first_sequence(int64_t i) const {
  check_document(i);
  return doc_index_[static_cast<std::size_t>(i)];
}

int64_t IndexedDataset::document_end_sequence(int64_t i) const {
  check_document(i);
  return doc_index_[static_cast<std::size_t>(i) + 1];
}

int64_t IndexedDataset::document_length(int64_t i) const {
  int64_t n = 0;
  for (int64_t s = document_first_sequence(i); s < document_end_sequence(i); ++s) n += lengths_[static_cast<std::size_t>(s)];
  return n;
}

void IndexedDataset::decode(int64_t i, int64_t first, int64_t count, int32_t* out) const {
  const std::size_t item = indexed_dtype_size(dtype_);
  const unsigned char* p = bin_ + pointers_[static_cast<std::size_t>(i)] + static_cast<std::size_t>(first) * item;
  for (int64_t k = 0; k < count; ++k, p += item) {
    int64_t v = 0;
    switch (dtype_) {
      case IndexedDType::UInt8: v = load<uint8_t>(p); break;
      case IndexedDType::Int8: v = load<int8_t>(p); break;
      case IndexedDType::Int16: v = load<int16_t>(p); break;
      case IndexedDType::UInt16: v = load<uint16_t>(p); break;
      case IndexedDType::Int32: v = load<int32_t>(p); break;
      case IndexedDType::Int64: v = load<int64_t>(p); break;
      default: throw_error(ErrorCode::Internal, "float dtype in an opened token data set");
    }
    if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
      throw_io_error(bin_path_, "sequence " + std::to_string(i) + " token " + std::to_string(first + k) + " = " +
                                    std::to_string(v) + (v < 0 ? " is negative" : " does not fit in int32") +
                                    " (not a token id)");
    }
    out[k] = static_cast<int32_t>(v);
  }
}

void IndexedDataset::append_sequence(int64_t i, std::vector<int32_t>& out) const {
  const std::size_t base = out.size();
  out.resize(base + static_cast<std::size_t>(lengths_[static_cast<std::size_t>(i)]));
  try {
    decode(i, 0, lengths_[static_cast<std::size_t>(i)], out.data() + base);
  } catch (...) {
    out.resize(base);
    throw;
  }
}

void IndexedDataset::read_sequence(int64_t i, int64_t first, int64_t count, int32_t* out) const {
  check_sequence(i);
  const int64_t length = lengths_[static_cast<std::size_t>(i)];
  PTDP_CHECK_ARG(first >= 0 && count >= 0 && first + count <= length,
                 "tokens [" + std::to_string(first) + ", " + std::to_string(first + count) + ") of sequence " +
                     std::to_string(i) + " lie outside its " + std::to_string(length) + " tokens");
  PTDP_CHECK_ARG(out != nullptr || count == 0, "output buffer is NULL");
  decode(i, first, count, out);
}

std::vector<int32_t> IndexedDataset::sequence(int64_t i) const {
  check_sequence(i);
  std::vector<int32_t> out;
  append_sequence(i, out);
  return out;
}

std::vector<int32_t> IndexedDataset::document(int64_t i) const {
  check_document(i);
  std::vector<int32_t> out;
  out.reserve(static_cast<std::size_t>(document_length(i)));
  for (int64_t s = doc_index_[static_cast<std::size_t>(i)]; s < doc_index_[static_cast<std::size_t>(i) + 1]; ++s) {
    append_sequence(s, out);
  }
  return out;
}

void write_indexed_dataset(const std::string& prefix,
                           const std::vector<std::vector<std::vector<int32_t>>>& documents,
                           IndexedDType dtype) {
  PTDP_CHECK_ARG(known_dtype(static_cast<uint8_t>(dtype)),
                 "unknown indexed dtype code " + std::to_string(static_cast<int>(dtype)));
  int64_t lo = 0;
  int64_t hi = 0;
  token_range(dtype, lo, hi);
  const std::size_t item = indexed_dtype_size(dtype);

  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers;
  std::vector<int64_t> doc_index{0};
  int64_t offset = 0;
  for (std::size_t d = 0; d < documents.size(); ++d) {
    for (std::size_t s = 0; s < documents[d].size(); ++s) {
      const auto& seq = documents[d][s];
      PTDP_CHECK_ARG(seq.size() <= static_cast<std::size_t>(std::numeric_limits<int32_t>::max()),
                     "document " + std::to_string(d) + " sequence " + std::to_string(s) + " is too long");
      for (std::size_t k = 0; k < seq.size(); ++k) {
        PTDP_CHECK_ARG(seq[k] >= lo && seq[k] <= hi,
                       "document " + std::to_string(d) + " sequence " + std::to_string(s) + " token " +
                           std::to_string(k) + " = " + std::to_string(seq[k]) + " does not fit in " +
                           indexed_dtype_name(dtype));
      }
      lengths.push_back(static_cast<int32_t>(seq.size()));
      pointers.push_back(offset);
      offset += static_cast<int64_t>(seq.size() * item);
    }
    doc_index.push_back(static_cast<int64_t>(lengths.size()));
  }

  const std::string bin_path = prefix + ".bin";
  {
    std::ofstream bin(bin_path, std::ios::binary | std::ios::trunc);
    if (!bin) throw_io_error(bin_path, std::string("cannot create the data file: ") + std::strerror(errno));
    std::vector<unsigned char> buf;
    for (const auto& doc : documents) {
      for (const auto& seq : doc) {
        buf.resize(seq.size() * item);
        for (std::size_t k = 0; k < seq.size(); ++k) {
          const int64_t v = seq[k];
          std::memcpy(buf.data() + k * item, &v, item);  // little-endian: the low bytes
        }
        bin.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
      }
    }
    bin.flush();
    if (!bin) throw_io_error(bin_path, "write failed");
  }

  const std::string idx_path = prefix + ".idx";
  std::ofstream idx(idx_path, std::ios::binary | std::ios::trunc);
  if (!idx) throw_io_error(idx_path, std::string("cannot create the index file: ") + std::strerror(errno));
  auto put = [&](const void* p, std::size_t n) { idx.write(static_cast<const char*>(p), static_cast<std::streamsize>(n)); };
  const uint8_t code = static_cast<uint8_t>(dtype);
  const uint64_t seq_count = lengths.size();
  const uint64_t doc_count = doc_index.size();
  put(kMagic, sizeof(kMagic));
  put(&kVersion, 8);
  put(&code, 1);
  put(&seq_count, 8);
  put(&doc_count, 8);
  put(lengths.data(), lengths.size() * 4);
  put(pointers.data(), pointers.size() * 8);
  put(doc_index.data(), doc_index.size() * 8);
  idx.flush();
  if (!idx) throw_io_error(idx_path, "write failed");
}

}  // namespace ptdp
