// JSON lines to Megatron's indexed data sets, and merging data sets (see preprocess.h).
#include "core/data/preprocess.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/file_read.h"

static_assert(std::endian::native == std::endian::little, "indexed data sets are little-endian");

namespace ptdp {
namespace {

constexpr unsigned char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr uint64_t kVersion = 1;
constexpr std::size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;
constexpr std::size_t kSpillChunk = 1 << 16;  // elements per read of a spilled index array

std::string errno_text() { return std::strerror(errno); }

// A FILE* that is closed when it goes out of scope.
struct FileCloser {
  void operator()(std::FILE* f) const noexcept {
    if (f) std::fclose(f);
  }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

void write_or_throw(std::FILE* f, const void* p, std::size_t n, const std::string& path) {
  if (n > 0 && std::fwrite(p, 1, n, f) != n) throw_io_error(path, "write failed: " + errno_text());
}

void read_or_throw(std::FILE* f, void* p, std::size_t n, const char* what) {
  if (n > 0 && std::fread(p, 1, n, f) != n) {
    throw_error(ErrorCode::Io, std::string("reading back the spilled ") + what + " failed: " + errno_text());
  }
}

// The range of token ids an integer dtype holds.
void dtype_range(IndexedDType d, int64_t& lo, int64_t& hi) {
  switch (d) {
    case IndexedDType::UInt8: lo = 0; hi = std::numeric_limits<uint8_t>::max(); return;
    case IndexedDType::Int8: lo = std::numeric_limits<int8_t>::min(); hi = std::numeric_limits<int8_t>::max(); return;
    case IndexedDType::Int16: lo = std::numeric_limits<int16_t>::min(); hi = std::numeric_limits<int16_t>::max(); return;
    case IndexedDType::UInt16: lo = 0; hi = std::numeric_limits<uint16_t>::max(); return;
    case IndexedDType::Int32:
    case IndexedDType::Int64: lo = std::numeric_limits<int32_t>::min(); hi = std::numeric_limits<int32_t>::max(); return;
    default: break;
  }
  throw_error(ErrorCode::InvalidArgument,
              std::string("dtype ") + indexed_dtype_name(d) + " cannot hold token ids; use an integer dtype");
}

template <typename T>
void encode_tokens(const int32_t* tokens, std::size_t n, std::vector<unsigned char>& out) {
  out.resize(n * sizeof(T));
  for (std::size_t k = 0; k < n; ++k) {
    const T v = static_cast<T>(tokens[k]);
    std::memcpy(out.data() + k * sizeof(T), &v, sizeof(T));
  }
}

// The raw index of PREFIX.idx (validated by IndexedDataset first).
struct RawIndex {
  IndexedDType dtype = IndexedDType::Int32;
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers;
  std::vector<int64_t> documents;  // boundaries, starting with 0
};

RawIndex read_raw_index(const std::string& prefix) {
  { const IndexedDataset check(prefix); }  // every malformation named, as the reader names it
  const std::string path = prefix + ".idx";
  // Read again, checked again: the file may have changed since the check.
  const std::vector<unsigned char> idx = read_regular_file_bytes(path, "index file", kMaxIndexFileBytes);
  if (idx.size() < kHeaderBytes) throw_io_error(path, "truncated (the file changed while it was merged?)");
  RawIndex r;
  r.dtype = static_cast<IndexedDType>(idx[17]);
  uint64_t s = 0, d = 0;
  std::memcpy(&s, idx.data() + 18, 8);
  std::memcpy(&d, idx.data() + 26, 8);
  const uint64_t need = checked_add(checked_add(checked_mul(s, 12, path, "the sequence table's size"),
                                                checked_mul(d, 8, path, "the document index's size"), path,
                                                "the index's size"),
                                    kHeaderBytes, path, "the index's size");
  if (need > idx.size()) throw_io_error(path, "truncated (the file changed while it was merged?)");
  r.lengths.resize(s);
  r.pointers.resize(s);
  r.documents.resize(d);
  const unsigned char* p = idx.data() + kHeaderBytes;
  if (s > 0) {
    std::memcpy(r.lengths.data(), p, s * 4);
    std::memcpy(r.pointers.data(), p + s * 4, s * 8);
  }
  if (d > 0) std::memcpy(r.documents.data(), p + s * 12, d * 8);
  return r;
}

}  // namespace

IndexedDType optimal_token_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? IndexedDType::UInt16 : IndexedDType::Int32;
}

std::string preprocess_output_prefix(const std::string& output_prefix, const std::string& key) {
  return output_prefix + "_" + key + "_document";
}

// ---- the writer ------------------------------------------------------------------------------

struct IndexedDatasetWriter::Files {
  std::string bin_tmp, idx_tmp;
  FilePtr bin;
  FilePtr lengths;    // int32 per sequence (a tmpfile)
  FilePtr documents;  // int64 per document: the sequence count after it (a tmpfile)
  std::vector<char> bin_buffer = std::vector<char>(1 << 20);
  std::vector<unsigned char> scratch;
};

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, IndexedDType dtype)
    : prefix_(std::move(prefix)), dtype_(dtype), files_(std::make_unique<Files>()) {
  PTDP_CHECK_ARG(!prefix_.empty(), "the output prefix is empty");
  const auto code = static_cast<uint8_t>(dtype);
  PTDP_CHECK_ARG(code >= 1 && code <= 8, "unknown indexed dtype code " + std::to_string(code));
  int64_t lo = 0, hi = 0;
  dtype_range(dtype, lo, hi);
  Files& f = *files_;
  f.bin_tmp = prefix_ + ".bin.tmp";
  f.idx_tmp = prefix_ + ".idx.tmp";
  f.bin.reset(std::fopen(f.bin_tmp.c_str(), "wb"));
  if (!f.bin) throw_io_error(f.bin_tmp, "cannot create the data file: " + errno_text());
  std::setvbuf(f.bin.get(), f.bin_buffer.data(), _IOFBF, f.bin_buffer.size());
  f.lengths.reset(std::tmpfile());
  f.documents.reset(std::tmpfile());
  if (!f.lengths || !f.documents) {
    const std::string why = errno_text();
    f.bin.reset();
    std::remove(f.bin_tmp.c_str());
    throw_error(ErrorCode::Io, "cannot create a temporary file for the index of " + prefix_ + ": " + why);
  }
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (finished_ || !files_) return;
  files_->bin.reset();
  std::remove(files_->bin_tmp.c_str());
  std::remove(files_->idx_tmp.c_str());
}

void IndexedDatasetWriter::add_document(const int32_t* tokens, const int64_t* sequence_lengths,
                                        std::size_t num_sequences) {
  PTDP_CHECK_ARG(!finished_, prefix_ + ": the data set is already finished");
  PTDP_CHECK_ARG(num_sequences == 0 || sequence_lengths != nullptr, "sequence_lengths is NULL");
  int64_t total = 0;
  for (std::size_t i = 0; i < num_sequences; ++i) {
    const int64_t n = sequence_lengths[i];
    PTDP_CHECK_ARG(n >= 0 && n <= std::numeric_limits<int32_t>::max(),
                   prefix_ + ": document " + std::to_string(documents_) + " sequence " + std::to_string(i) +
                       " has length " + std::to_string(n) + " (must be in [0, 2^31 - 1])");
    total += n;
  }
  PTDP_CHECK_ARG(total == 0 || tokens != nullptr, "tokens is NULL");
  int64_t lo = 0, hi = 0;
  dtype_range(dtype_, lo, hi);
  for (int64_t k = 0; k < total; ++k) {
    PTDP_CHECK_ARG(tokens[k] >= lo && tokens[k] <= hi,
                   prefix_ + ": document " + std::to_string(documents_) + " token " + std::to_string(k) + " = " +
                       std::to_string(tokens[k]) + " does not fit in " + indexed_dtype_name(dtype_));
  }
  Files& f = *files_;
  const auto n = static_cast<std::size_t>(total);
  switch (dtype_) {
    case IndexedDType::UInt8: encode_tokens<uint8_t>(tokens, n, f.scratch); break;
    case IndexedDType::Int8: encode_tokens<int8_t>(tokens, n, f.scratch); break;
    case IndexedDType::Int16: encode_tokens<int16_t>(tokens, n, f.scratch); break;
    case IndexedDType::UInt16: encode_tokens<uint16_t>(tokens, n, f.scratch); break;
    case IndexedDType::Int32: encode_tokens<int32_t>(tokens, n, f.scratch); break;
    case IndexedDType::Int64: encode_tokens<int64_t>(tokens, n, f.scratch); break;
    default: throw_error(ErrorCode::Internal, "float dtype in an indexed data set writer");
  }
  write_or_throw(f.bin.get(), f.scratch.data(), f.scratch.size(), f.bin_tmp);
  for (std::size_t i = 0; i < num_sequences; ++i) {
    const auto len = static_cast<int32_t>(sequence_lengths[i]);
    write_or_throw(f.lengths.get(), &len, 4, "temporary sequence lengths of " + prefix_);
  }
  sequences_ += static_cast<int64_t>(num_sequences);
  write_or_throw(f.documents.get(), &sequences_, 8, "temporary document index of " + prefix_);
  ++documents_;
  tokens_ += total;
  bin_bytes_ += static_cast<int64_t>(f.scratch.size());
}

void IndexedDatasetWriter::add_dataset(const std::string& prefix) {
  PTDP_CHECK_ARG(!finished_, prefix_ + ": the data set is already finished");
  const RawIndex r = read_raw_index(prefix);
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  if (r.dtype != dtype_) {
    throw_error(ErrorCode::InvalidArgument, idx_path + ": dtype " + indexed_dtype_name(r.dtype) + " differs from " +
                                                indexed_dtype_name(dtype_) +
                                                " of the data sets before it (merged data sets share one dtype)");
  }
  const auto item = static_cast<int64_t>(indexed_dtype_size(dtype_));
  int64_t offset = 0;
  for (std::size_t i = 0; i < r.lengths.size(); ++i) {
    if (r.pointers[i] != offset) {
      throw_io_error(idx_path, "sequence " + std::to_string(i) + " starts at byte " + std::to_string(r.pointers[i]) +
                                   " of " + bin_path + ", not at byte " + std::to_string(offset) +
                                   " where the sequence before it ends; only data sets stored back to back "
                                   "(as Megatron writes them) can be merged");
    }
    offset += static_cast<int64_t>(r.lengths[i]) * item;
  }
  // Copy exactly the bytes the sequences cover.
  Files& f = *files_;
  const RegularFile in(bin_path, "data file", kNoSizeLimit);
  if (static_cast<uint64_t>(offset) > in.size())
    throw_io_error(bin_path, "truncated (the file changed while it was merged?)");
  std::vector<char> buffer(1 << 20);
  int64_t left = offset;
  uint64_t at = 0;
  while (left > 0) {
    const std::size_t want = static_cast<std::size_t>(std::min<int64_t>(left, static_cast<int64_t>(buffer.size())));
    in.read_at(at, buffer.data(), want);
    write_or_throw(f.bin.get(), buffer.data(), want, f.bin_tmp);
    at += want;
    left -= static_cast<int64_t>(want);
  }
  write_or_throw(f.lengths.get(), r.lengths.data(), r.lengths.size() * 4, "temporary sequence lengths of " + prefix_);
  for (std::size_t d = 1; d < r.documents.size(); ++d) {
    const int64_t end = sequences_ + r.documents[d];
    write_or_throw(f.documents.get(), &end, 8, "temporary document index of " + prefix_);
  }
  for (const int32_t len : r.lengths) tokens_ += len;
  sequences_ += static_cast<int64_t>(r.lengths.size());
  documents_ += static_cast<int64_t>(r.documents.size()) - 1;
  bin_bytes_ += offset;
}

void IndexedDatasetWriter::finish() {
  PTDP_CHECK_ARG(!finished_, prefix_ + ": the data set is already finished");
  Files& f = *files_;
  if (std::fflush(f.bin.get()) != 0 || std::ferror(f.bin.get())) throw_io_error(f.bin_tmp, "write failed: " + errno_text());
  if (std::fclose(f.bin.release()) != 0) throw_io_error(f.bin_tmp, "close failed: " + errno_text());

  FilePtr idx(std::fopen(f.idx_tmp.c_str(), "wb"));
  if (!idx) throw_io_error(f.idx_tmp, "cannot create the index file: " + errno_text());
  const uint8_t code = static_cast<uint8_t>(dtype_);
  const auto seq_count = static_cast<uint64_t>(sequences_);
  const auto doc_count = static_cast<uint64_t>(documents_ + 1);
  write_or_throw(idx.get(), kMagic, sizeof(kMagic), f.idx_tmp);
  write_or_throw(idx.get(), &kVersion, 8, f.idx_tmp);
  write_or_throw(idx.get(), &code, 1, f.idx_tmp);
  write_or_throw(idx.get(), &seq_count, 8, f.idx_tmp);
  write_or_throw(idx.get(), &doc_count, 8, f.idx_tmp);
  // Lengths as spilled, then the byte offsets they imply, then the document boundaries.
  if (std::fflush(f.lengths.get()) != 0 || std::fflush(f.documents.get()) != 0) {
    throw_error(ErrorCode::Io, "cannot flush the temporary index of " + prefix_ + ": " + errno_text());
  }
  const auto item = static_cast<int64_t>(indexed_dtype_size(dtype_));
  std::vector<int32_t> lengths(kSpillChunk);
  std::vector<int64_t> wide(kSpillChunk);
  for (int pass = 0; pass < 2; ++pass) {
    std::rewind(f.lengths.get());
    int64_t pointer = 0;
    for (int64_t done = 0; done < sequences_;) {
      const auto n = static_cast<std::size_t>(std::min<int64_t>(sequences_ - done, kSpillChunk));
      read_or_throw(f.lengths.get(), lengths.data(), n * 4, "sequence lengths");
      if (pass == 0) {
        write_or_throw(idx.get(), lengths.data(), n * 4, f.idx_tmp);
      } else {
        for (std::size_t i = 0; i < n; ++i) {
          wide[i] = pointer;
          pointer += static_cast<int64_t>(lengths[i]) * item;
        }
        write_or_throw(idx.get(), wide.data(), n * 8, f.idx_tmp);
      }
      done += static_cast<int64_t>(n);
    }
  }
  const int64_t zero = 0;
  write_or_throw(idx.get(), &zero, 8, f.idx_tmp);
  std::rewind(f.documents.get());
  for (int64_t done = 0; done < documents_;) {
    const auto n = static_cast<std::size_t>(std::min<int64_t>(documents_ - done, kSpillChunk));
    read_or_throw(f.documents.get(), wide.data(), n * 8, "document index");
    write_or_throw(idx.get(), wide.data(), n * 8, f.idx_tmp);
    done += static_cast<int64_t>(n);
  }
  if (std::fflush(idx.get()) != 0 || std::ferror(idx.get())) throw_io_error(f.idx_tmp, "write failed: " + errno_text());
  if (std::fclose(idx.release()) != 0) throw_io_error(f.idx_tmp, "close failed: " + errno_text());
  const std::string bin_path = prefix_ + ".bin", idx_path = prefix_ + ".idx";
  if (std::rename(f.bin_tmp.c_str(), bin_path.c_str()) != 0) {
    throw_io_error(bin_path, "cannot rename " + f.bin_tmp + " into place: " + errno_text());
  }
  if (std::rename(f.idx_tmp.c_str(), idx_path.c_str()) != 0) {
    throw_io_error(idx_path, "cannot rename " + f.idx_tmp + " into place: " + errno_text());
  }
  finished_ = true;
  f.lengths.reset();
  f.documents.reset();
}

// ---- merging ---------------------------------------------------------------------------------

void merge_datasets(const std::vector<std::string>& prefixes, const std::string& output_prefix) {
  PTDP_CHECK_ARG(!prefixes.empty(), "no data sets to merge");
  PTDP_CHECK_ARG(!output_prefix.empty(), "the output prefix is empty");
  const IndexedDataset first(prefixes.front());
  IndexedDatasetWriter writer(output_prefix, first.dtype());
  for (const std::string& p : prefixes) writer.add_dataset(p);
  writer.finish();
}

std::vector<std::string> dataset_prefixes_in(const std::string& directory) {
  namespace fs = std::filesystem;
  std::error_code ec;
  PTDP_CHECK_ARG(fs::is_directory(directory, ec), directory + " is not a directory (or does not exist)");
  std::set<std::string> prefixes;
  for (const fs::directory_entry& e : fs::directory_iterator(directory, ec)) {
    if (!e.is_regular_file(ec)) continue;
    const fs::path path = e.path();
    const std::string ext = path.extension().string();
    const fs::path stem = path.parent_path() / path.stem();
    const std::string partner = stem.string() + (ext == ".idx" ? ".bin" : ".idx");
    PTDP_CHECK_ARG(fs::is_regular_file(partner, ec),
                   path.string() + " has no " + fs::path(partner).filename().string() +
                       " beside it (every file in the directory must be half of a .bin/.idx pair)");
    prefixes.insert(stem.string());
  }
  if (ec) throw_io_error(directory, "cannot list the directory: " + ec.message());
  PTDP_CHECK_ARG(!prefixes.empty(), directory + " holds no .bin/.idx pairs");
  return {prefixes.begin(), prefixes.end()};
}

// ---- preprocessing ---------------------------------------------------------------------------

namespace {

// One line of input inside a batch.
struct LineRef {
  std::size_t offset = 0;  // into Batch::text
  std::size_t length = 0;  // without the newline (and a \r before it)
  int64_t input_bytes = 0; // with them: what Megatron counts as processed
  int32_t file = 0;
  int64_t line_number = 0; // 1-based
};

// What a worker made of one line for one key.
struct KeySlot {
  int64_t num_tokens = 0;
  int64_t num_sequences = 0;
};

struct Batch {
  std::string text;
  std::vector<LineRef> lines;
  // Filled by a worker.
  std::vector<int32_t> tokens;       // every good line's tokens, keys in order
  std::vector<int64_t> lengths;      // their sequence lengths
  std::vector<KeySlot> slots;        // [lines x keys]
  std::vector<std::string> errors;   // [lines]: empty for a good line
  bool done = false;
};

// Reads the inputs one line at a time through zlib (which reads plain files as they are).
class LineReader {
 public:
  LineReader(const std::vector<std::string>& inputs, std::FILE* log) : inputs_(inputs), log_(log) {}
  ~LineReader() {
    if (gz_) gzclose(gz_);
  }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // Appends up to `max_lines` lines / about `max_bytes` bytes to `b`; false when nothing is left.
  bool fill(Batch& b, std::size_t max_bytes, std::size_t max_lines) {
    while (b.lines.size() < max_lines && b.text.size() < max_bytes) {
      std::string_view line;
      int64_t bytes = 0;
      if (!next_line(line, bytes)) break;
      LineRef r;
      r.offset = b.text.size();
      r.length = line.size();
      r.input_bytes = bytes;
      r.file = file_;
      r.line_number = line_number_;
      b.text.append(line);
      b.lines.push_back(r);
    }
    return !b.lines.empty();
  }

  const std::string& path(int32_t file) const { return inputs_[static_cast<std::size_t>(file)]; }

 private:
  bool open_next() {
    if (gz_) {
      gzclose(gz_);
      gz_ = nullptr;
    }
    ++file_;
    if (static_cast<std::size_t>(file_) >= inputs_.size()) return false;
    const std::string& p = inputs_[static_cast<std::size_t>(file_)];
    if (log_) std::fprintf(log_, "Opening %s\n", p.c_str());
    // Only a regular file, read no further than its size when opened (gzoffset counts the raw
    // bytes consumed), so neither a FIFO nor a file that keeps growing holds the reader.
    const RegularFile file(p, "JSON-lines input file", kNoSizeLimit);
    raw_size_ = file.size();
    const int fd = ::dup(file.fd());
    if (fd < 0) throw_io_error(p, "cannot open: " + errno_text());
    gz_ = gzdopen(fd, "rb");
    if (!gz_) {
      ::close(fd);
      throw_io_error(p, "cannot open: " + errno_text());
    }
    gzbuffer(gz_, 1 << 18);
    buffer_.clear();
    pos_ = 0;
    eof_ = false;
    line_number_ = 0;
    return true;
  }

  // Reads more of the current file into buffer_; false at its end.
  bool refill() {
    if (eof_) return false;
    buffer_.erase(0, pos_);
    pos_ = 0;
    const std::size_t old = buffer_.size();
    constexpr std::size_t kChunk = 1 << 20;
    buffer_.resize(old + kChunk);
    const int got = gzread(gz_, buffer_.data() + old, static_cast<unsigned>(kChunk));
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(gz_, &code);
      throw_io_error(path(file_), std::string("read failed: ") + (code == Z_ERRNO ? errno_text() : msg));
    }
    buffer_.resize(old + static_cast<std::size_t>(got));
    if (gzoffset(gz_) > static_cast<z_off_t>(raw_size_)) {
      throw_io_error(path(file_), "grew while it was read (" + std::to_string(raw_size_) +
                                      " bytes when opened); a file still being written is not read");
    }
    if (got == 0) {
      int code = 0;
      const char* msg = gzerror(gz_, &code);
      if (code != Z_OK && code != Z_STREAM_END) {
        throw_io_error(path(file_), std::string("gzip data is corrupt or truncated: ") + msg);
      }
      eof_ = true;
      return false;
    }
    return true;
  }

  bool next_line(std::string_view& line, int64_t& bytes) {
    if (file_ < 0 && !open_next()) return false;
    while (true) {
      const std::size_t nl = buffer_.find('\n', pos_);
      if (nl != std::string::npos) {
        line = std::string_view(buffer_).substr(pos_, nl - pos_);
        bytes = static_cast<int64_t>(nl - pos_ + 1);
        pos_ = nl + 1;
        break;
      }
      if (refill()) continue;
      if (pos_ < buffer_.size()) {  // a last line without a newline
        line = std::string_view(buffer_).substr(pos_);
        bytes = static_cast<int64_t>(line.size());
        pos_ = buffer_.size();
        break;
      }
      if (!open_next()) return false;
    }
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++line_number_;
    return true;
  }

  const std::vector<std::string>& inputs_;
  std::FILE* log_;
  gzFile gz_ = nullptr;
  uint64_t raw_size_ = 0;  // the current file's size when opened
  int32_t file_ = -1;
  std::string buffer_;
  std::size_t pos_ = 0;
  bool eof_ = false;
  int64_t line_number_ = 0;
};

const char* json_type_words(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::boolean: return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
    case nlohmann::json::value_t::number_float: return "a number";
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::array: return "a list with something else than strings";
    default: return "not a string";
  }
}

// The part of nlohmann's parse error after "parse error at line L, column C: ".
std::string parse_error_text(const nlohmann::json::parse_error& e) {
  std::string m = e.what();
  const std::size_t at = m.find("column ");
  if (at != std::string::npos) {
    const std::size_t colon = m.find(": ", at);
    if (colon != std::string::npos) m = m.substr(colon + 2);
  }
  return "not JSON (at byte " + std::to_string(e.byte) + "): " + m;
}

// Tokenizes one batch (a worker's job). Errors are recorded per line, never thrown.
void tokenize_batch(Batch& b, const Tokenizer& tokenizer, const std::vector<std::string>& keys, bool append_eod,
                    int32_t eod) {
  const std::size_t nkeys = keys.size();
  b.slots.assign(b.lines.size() * nkeys, KeySlot{});
  b.errors.assign(b.lines.size(), std::string());
  std::vector<std::string_view> sentences;
  for (std::size_t i = 0; i < b.lines.size(); ++i) {
    const LineRef& r = b.lines[i];
    const std::string_view text = std::string_view(b.text).substr(r.offset, r.length);
    const std::size_t tokens_before = b.tokens.size(), lengths_before = b.lengths.size();
    std::string& error = b.errors[i];
    try {
      if (text.find_first_not_of(" \t\r\f\v") == std::string_view::npos) {
        error = "an empty line, not a JSON object";
      } else {
        const nlohmann::json j = nlohmann::json::parse(text);
        if (!j.is_object()) {
          error = std::string("not a JSON object but ") + (j.is_string() ? "a string" : json_type_words(j));
        }
        for (std::size_t k = 0; k < nkeys && error.empty(); ++k) {
          const auto it = j.find(keys[k]);
          if (it == j.end()) {
            error = "key '" + keys[k] + "' is missing";
            break;
          }
          sentences.clear();
          if (it->is_string()) {
            sentences.push_back(it->get_ref<const std::string&>());
          } else if (it->is_array() && std::all_of(it->begin(), it->end(), [](const auto& s) { return s.is_string(); })) {
            for (const auto& s : *it) sentences.push_back(s.get_ref<const std::string&>());
          } else {
            error = "key '" + keys[k] + "' holds " + json_type_words(*it) + ", not a string";
            break;
          }
          KeySlot& slot = b.slots[i * nkeys + k];
          try {
            for (const std::string_view s : sentences) {
              const std::vector<int32_t> ids = tokenizer.encode(s);
              if (ids.empty()) continue;
              b.tokens.insert(b.tokens.end(), ids.begin(), ids.end());
              b.lengths.push_back(static_cast<int64_t>(ids.size()));
              slot.num_tokens += static_cast<int64_t>(ids.size());
              ++slot.num_sequences;
            }
          } catch (const Error& e) {
            error = "key '" + keys[k] + "': " + e.what();
            break;
          }
          if (append_eod && slot.num_tokens > 0) {
            b.tokens.push_back(eod);
            ++b.lengths.back();
            ++slot.num_tokens;
          }
        }
      }
    } catch (const nlohmann::json::parse_error& e) {
      error = parse_error_text(e);
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (!error.empty()) {
      b.tokens.resize(tokens_before);
      b.lengths.resize(lengths_before);
      for (std::size_t k = 0; k < nkeys; ++k) b.slots[i * nkeys + k] = KeySlot{};
    }
  }
}

// Worker threads that tokenize batches handed to them; results are picked up in order by the
// caller. Destruction stops and joins them.
class TokenizerPool {
 public:
  TokenizerPool(int workers, const Tokenizer& tokenizer, const std::vector<std::string>& keys, bool append_eod,
                int32_t eod)
      : tokenizer_(tokenizer), keys_(keys), append_eod_(append_eod), eod_(eod) {
    for (int w = 0; w < workers; ++w) threads_.emplace_back([this] { work(); });
  }
  ~TokenizerPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  TokenizerPool(const TokenizerPool&) = delete;
  TokenizerPool& operator=(const TokenizerPool&) = delete;

  void submit(Batch* b) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(b);
    }
    wake_.notify_one();
  }

  void wait(Batch* b) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [b] { return b->done; });
  }

 private:
  void work() {
    while (true) {
      Batch* b = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        b = queue_.front();
        queue_.pop_front();
      }
      tokenize_batch(*b, tokenizer_, keys_, append_eod_, eod_);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        b->done = true;
      }
      done_.notify_all();
    }
  }

  const Tokenizer& tokenizer_;
  const std::vector<std::string>& keys_;
  bool append_eod_;
  int32_t eod_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::deque<Batch*> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

void check_options(const PreprocessOptions& o) {
  namespace fs = std::filesystem;
  PTDP_CHECK_ARG(!o.inputs.empty(), "--input: no input files");
  std::error_code ec;
  for (const std::string& in : o.inputs) {
    PTDP_CHECK_ARG(!in.empty(), "--input: an empty path");
    check_regular_file(in, "JSON-lines input file", kNoSizeLimit);
  }
  PTDP_CHECK_ARG(!o.json_keys.empty(), "--json-keys: no keys");
  const std::set<std::string> unique(o.json_keys.begin(), o.json_keys.end());
  PTDP_CHECK_ARG(unique.size() == o.json_keys.size(), "--json-keys: a key is given twice");
  for (const std::string& k : o.json_keys) PTDP_CHECK_ARG(!k.empty(), "--json-keys: an empty key");
  PTDP_CHECK_ARG(!o.output_prefix.empty(), "--output-prefix: empty");
  const fs::path parent = fs::path(o.output_prefix).parent_path();
  if (!parent.empty() && !fs::is_directory(parent, ec)) {
    throw_io_error(parent.string(), "the directory of --output-prefix does not exist");
  }
  PTDP_CHECK_ARG(o.workers >= 1, "--workers: " + std::to_string(o.workers) + " must be >= 1");
  PTDP_CHECK_ARG(o.log_interval >= 0, "--log-interval: " + std::to_string(o.log_interval) + " must be >= 0");
}

}  // namespace

PreprocessStats preprocess_json_lines(const PreprocessOptions& options, std::FILE* log) {
  check_options(options);
  const std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(options.tokenizer);
  return preprocess_json_lines(options, *tokenizer, log);
}

PreprocessStats preprocess_json_lines(const PreprocessOptions& options, const Tokenizer& tokenizer, std::FILE* log) {
  using Clock = std::chrono::steady_clock;
  check_options(options);
  const int32_t eod = tokenizer.eod();
  if (options.append_eod && eod < 0) {
    throw_error(ErrorCode::InvalidArgument, std::string("--append-eod: the tokenizer ") +
                                                tokenizer_type_name(tokenizer.type()) +
                                                " has no end-of-document token");
  }
  PreprocessStats stats;
  stats.dtype = optimal_token_dtype(tokenizer.vocab_size());
  const std::size_t nkeys = options.json_keys.size();
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (const std::string& key : options.json_keys) {
    stats.outputs.push_back(preprocess_output_prefix(options.output_prefix, key));
    writers.push_back(std::make_unique<IndexedDatasetWriter>(stats.outputs.back(), stats.dtype));
  }

  const Clock::time_point start = Clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  LineReader reader(options.inputs, log);
  // Small batches keep every worker busy on small inputs; a few per worker bound the memory.
  constexpr std::size_t kBatchBytes = 1 << 19, kBatchLines = 1024;
  const std::size_t max_in_flight = 2 * static_cast<std::size_t>(options.workers) + 2;
  std::deque<std::unique_ptr<Batch>> in_flight;
  TokenizerPool pool(options.workers, tokenizer, options.json_keys, options.append_eod, eod);
  bool input_left = true;
  while (true) {
    while (input_left && in_flight.size() < max_in_flight) {
      auto b = std::make_unique<Batch>();
      if (!reader.fill(*b, kBatchBytes, kBatchLines)) {
        input_left = false;
        break;
      }
      pool.submit(b.get());
      in_flight.push_back(std::move(b));
    }
    if (in_flight.empty()) break;
    Batch& b = *in_flight.front();
    pool.wait(&b);
    std::size_t token_at = 0, length_at = 0;
    for (std::size_t i = 0; i < b.lines.size(); ++i) {
      const LineRef& r = b.lines[i];
      stats.bytes += r.input_bytes;
      if (!b.errors[i].empty()) {
        const std::string where = reader.path(r.file) + ":" + std::to_string(r.line_number) + ": ";
        if (!options.skip_bad_lines) {
          throw_error(ErrorCode::InvalidArgument,
                      where + b.errors[i] + " (--skip-bad-lines drops such lines and counts them)");
        }
        if (log && stats.bad_lines < 10) std::fprintf(log, "skipping %s%s\n", where.c_str(), b.errors[i].c_str());
        ++stats.bad_lines;
        continue;
      }
      for (std::size_t k = 0; k < nkeys; ++k) {
        const KeySlot& slot = b.slots[i * nkeys + k];
        writers[k]->add_document(b.tokens.data() + token_at, b.lengths.data() + length_at,
                                 static_cast<std::size_t>(slot.num_sequences));
        token_at += static_cast<std::size_t>(slot.num_tokens);
        length_at += static_cast<std::size_t>(slot.num_sequences);
        stats.tokens += slot.num_tokens;
      }
      ++stats.documents;
      if (log && options.log_interval > 0 && stats.documents % options.log_interval == 0) {
        const double s = std::max(elapsed(), 1e-9);
        std::fprintf(log, "Processed %lld documents (%.1f docs/s, %.2f MB/s).\n",
                     static_cast<long long>(stats.documents), static_cast<double>(stats.documents) / s,
                     static_cast<double>(stats.bytes) / s / 1024 / 1024);
        std::fflush(log);
      }
    }
    in_flight.pop_front();
  }
  for (auto& w : writers) w->finish();
  stats.seconds = elapsed();
  return stats;
}

}  // namespace ptdp
