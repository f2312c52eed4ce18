// The safetensors file format (https://github.com/huggingface/safetensors), read and written
// byte for byte as the reference implementation does:
//
//   8 bytes   u64 little-endian N, the header length
//   N bytes   JSON object, padded with spaces to a multiple of 8:
//               {"__metadata__": {"key": "value", ...},                 (optional)
//                "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//   rest      the byte buffer; offsets are relative to its start. Every tensor is contiguous,
//             row-major, little-endian, and the tensors tile the buffer exactly: no holes, no
//             overlaps, nothing after the last one.
//
// Checkpoint shards are written with SafetensorsWriter and read with SafetensorsFile, which can
// read a row/column block of a tensor (the re-sharding reader in checkpoint_files.h is built on
// it). Every file problem throws Error(Io) with a message that starts with the file's path;
// bad calls throw Error(InvalidArgument).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/dtype.h"

namespace ptdp {

/// Element types of a safetensors file (the names are the format's own: "F32", "BF16", ...).
enum class StDType : int { F64 = 0, F32 = 1, F16 = 2, BF16 = 3, I64 = 4, I32 = 5, I16 = 6, I8 = 7, U8 = 8, BOOL = 9 };

/// Bytes per element.
std::size_t st_dtype_size(StDType dtype);
/// The format's name of `dtype` ("F32", ...).
const char* st_dtype_name(StDType dtype);
/// The dtype called `name` in a header ("F32", ...); nullopt for a name this library does not know.
std::optional<StDType> st_dtype_parse(const std::string& name);
/// True for F64, F32, F16 and BF16, the dtypes that read_f32 / read_block_f32 convert from.
bool st_dtype_is_float(StDType dtype);
/// The safetensors dtype that stores the engine's `dtype` (F32 -> F32, BF16 -> BF16, ...).
StDType st_dtype_from(DType dtype);

/// Elements of a tensor of `shape` (1 for a 0-d tensor); throws InvalidArgument for a negative
/// extent or an element count that overflows int64.
int64_t st_numel(const std::vector<int64_t>& shape);

/// One tensor of a safetensors file as its header describes it.
struct SafetensorsTensorInfo {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;  // empty for a 0-d tensor
  uint64_t begin = 0;          // byte offsets into the buffer, [begin, end)
  uint64_t end = 0;

  int64_t numel() const { return st_numel(shape); }
  /// The tensor seen as a matrix for block reads: 0-d is [1, 1], 1-d [n] is [n, 1], and
  /// [d0, d1, ...] is [d0, d1 * ...].
  int64_t rows() const;
  int64_t cols() const;
};

/// Collects tensors and writes them as one safetensors file. Data is streamed from the
/// caller's memory (add) or from buffers the writer owns (add_owned, add_from_f32), so no
/// second copy of borrowed data is made. Tensors are laid out in the reference implementation's
/// order (by dtype, widest first: I64, F64, F32, I32, BF16, F16, I16, I8, U8, BOOL; then by
/// name), which keeps every tensor aligned to its element size; the header lists
/// `__metadata__` first (only when it has entries), then the tensors in that order. Not
/// thread-safe.
class SafetensorsWriter {
 public:
  /// Adds a tensor whose bytes (numel * element size, little-endian, row-major) are at `data`;
  /// `data` must stay valid until write() returns. Throws InvalidArgument for a duplicate or
  /// empty name, the name "__metadata__", a negative extent, or NULL data with numel > 0.
  void add(const std::string& name, StDType dtype, const std::vector<int64_t>& shape, const void* data);
  /// Adds a tensor whose bytes the writer keeps; `bytes.size()` must be numel * element size.
  void add_owned(const std::string& name, StDType dtype, const std::vector<int64_t>& shape,
                 std::vector<unsigned char> bytes);
  /// Adds `numel(shape)` floats converted to `dtype` (F32, F64, F16 or BF16, rounding to
  /// nearest even); the writer keeps the converted copy.
  void add_from_f32(const std::string& name, StDType dtype, const std::vector<int64_t>& shape, const float* data);
  /// Sets a `__metadata__` entry (the format allows string values only).
  void set_metadata(const std::string& key, const std::string& value);

  /// Number of tensors added so far.
  std::size_t size() const { return tensors_.size(); }

  /// Writes the file (replacing `path`), fsyncs it and closes it; returns its size in bytes.
  /// Throws Io naming `path` when it cannot be created, written or synced.
  uint64_t write(const std::string& path) const;

 private:
  struct Pending {
    std::string name;
    StDType dtype;
    std::vector<int64_t> shape;
    const void* data;
    std::vector<unsigned char> owned;
    uint64_t nbytes;
  };
  Pending& push(const std::string& name, StDType dtype, const std::vector<int64_t>& shape);

  std::vector<Pending> tensors_;
  std::map<std::string, std::string> metadata_;
};

/// The header bytes (8-byte length prefix + padded JSON) that SafetensorsWriter writes before
/// the buffer for `tensors` (whose begin/end are filled in, in the writer's order) and
/// `metadata`. Exposed so tests and tools can check the exact layout.
std::string safetensors_header_bytes(const std::vector<SafetensorsTensorInfo>& tensors,
                                     const std::map<std::string, std::string>& metadata);

/// A read-only safetensors file. The header is read and validated completely at construction
/// (length within the file, valid JSON, every entry with a known dtype, a shape and data
/// offsets that match it, tensors tiling the buffer exactly, the file neither truncated nor
/// longer than the buffer); data is read with pread on demand. Const member functions may be
/// called from several threads at once.
class SafetensorsFile {
 public:
  /// Opens and validates `path`; throws Io naming it ("missing", "truncated: ...", "bad
  /// safetensors header: ...").
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;

  const std::string& path() const { return path_; }
  /// Size of the file in bytes.
  uint64_t file_size() const { return file_size_; }
  /// Where the buffer starts (8 + header length).
  uint64_t data_start() const { return data_start_; }
  /// Every tensor, sorted by name.
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
  /// The `__metadata__` entries (empty when the header has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  bool has(const std::string& name) const;
  /// The tensor called `name`; throws InvalidArgument naming the file and the tensor if absent.
  const SafetensorsTensorInfo& info(const std::string& name) const;

  /// Copies the raw bytes of tensor `name`; `out_bytes` must equal its byte size.
  void read_raw(const std::string& name, void* out, std::size_t out_bytes) const;
  /// Reads tensor `name` as floats (numel values); its dtype must be F64, F32, F16 or BF16.
  void read_f32(const std::string& name, float* out) const;
  /// Reads rows [r0, r1) x cols [c0, c1) of tensor `name` (seen as a matrix, see
  /// SafetensorsTensorInfo::rows) into `out`, row-major (r1 - r0) x (c1 - c0), as floats.
  /// Throws InvalidArgument for a block outside the tensor or a non-float dtype.
  void read_block_f32(const std::string& name, int64_t r0, int64_t r1, int64_t c0, int64_t c1, float* out) const;
  /// The same block as raw bytes in the tensor's own dtype.
  void read_block_raw(const std::string& name, int64_t r0, int64_t r1, int64_t c0, int64_t c1, void* out) const;

 private:
  void pread_exact(uint64_t offset, void* out, std::size_t n) const;
  void close_fd() noexcept;

  std::string path_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::map<std::string, std::size_t> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

}  // namespace ptdp
