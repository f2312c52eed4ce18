// Reading user files as data: the one way every reader in the core opens a path it was given
// (indexed data sets, tokenizers, checkpoints, cluster files, JSON inputs).
//
// A path is read only when it names a regular file. It is opened non-blocking, so a FIFO in its
// place never hangs the reader; the kind is checked on the open descriptor, so a directory,
// FIFO, character device (/dev/zero), socket or missing path is refused with a message that says
// what the path is. Each format passes its size limit; the size observed at open is the most
// that is ever read, so a file that keeps growing cannot make a reader read without bound.
//
// Also the checked arithmetic every size, count and offset read from a file goes through.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ptdp {

/// Per-format size limits (bytes) of the files read whole into memory.
inline constexpr uint64_t kMaxJsonFileBytes = uint64_t{256} << 20;       ///< metadata, configs, traces
inline constexpr uint64_t kMaxTokenizerFileBytes = uint64_t{1} << 30;    ///< vocab, merges, tokenizer.json, .model
inline constexpr uint64_t kMaxIndexFileBytes = uint64_t{64} << 30;       ///< Megatron .idx
inline constexpr uint64_t kMaxSmallTextFileBytes = uint64_t{64} << 20;   ///< trackers, manifests, cluster files
inline constexpr uint64_t kNoSizeLimit = UINT64_MAX;                      ///< mapped or streamed files (.bin, shards)

/// What the path `path` is when it is not a regular file: "a directory", "a FIFO", "a character
/// device", "a socket", "a block device", "missing"; "a regular file" for one.
std::string describe_path_kind(const std::string& path);

/// A regular file opened for reading (read-only, close-on-exec). Movable, not copyable.
class RegularFile {
 public:
  /// Opens `path`. `what` says what the file is for ("index file", "tokenizer file") and goes
  /// into every message. Throws Error(Io) "PATH: is a FIFO, not a regular file: only regular
  /// files are read as WHAT" (and the like) for anything but a regular file, "PATH: missing"
  /// for a missing one, and "PATH: N bytes exceeds the limit of M bytes for a WHAT" when the
  /// file is larger than `max_bytes`.
  RegularFile(const std::string& path, std::string_view what, uint64_t max_bytes);
  ~RegularFile();
  RegularFile(RegularFile&& o) noexcept;
  RegularFile& operator=(RegularFile&& o) noexcept;
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  int fd() const { return fd_; }
  /// The size observed at open; reads never go past it.
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  /// Reads [offset, offset + n) exactly; Io "truncated" when the file shrank under us, and Io
  /// when the range lies outside the size observed at open.
  void read_at(uint64_t offset, void* dst, uint64_t n) const;
  /// The whole file as observed at open.
  std::string read_all() const;
  /// Maps the whole file read-only (size() bytes; nullptr for an empty file); unmap with
  /// unmap_file(ptr, size()).
  const unsigned char* map() const;
  /// Closes the descriptor (a mapping stays valid).
  void close();
  /// Hands the descriptor over to the caller, who closes it.
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  std::string path_;
  std::string what_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

/// Unmaps what RegularFile::map returned.
void unmap_file(const unsigned char* p, uint64_t size);

/// The whole of the regular file `path` (see RegularFile for the refusals).
std::string read_regular_file(const std::string& path, std::string_view what, uint64_t max_bytes);
std::vector<unsigned char> read_regular_file_bytes(const std::string& path, std::string_view what, uint64_t max_bytes);

/// Refuses `path` as RegularFile would, without keeping it open: for libraries that open a path
/// themselves (SentencePiece).
void check_regular_file(const std::string& path, std::string_view what, uint64_t max_bytes);

// ---- checked arithmetic for numbers read from files ----------------------------------------

/// a * b, or throws Error(Io) "PATH: WHAT overflows: A * B" (path may be empty).
uint64_t checked_mul(uint64_t a, uint64_t b, const std::string& path, std::string_view what);
/// a + b, or throws Error(Io) "PATH: WHAT overflows: A + B".
uint64_t checked_add(uint64_t a, uint64_t b, const std::string& path, std::string_view what);
/// Whether a * b / a + b would overflow (no throw).
inline bool mul_overflows(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r);
}
inline bool add_overflows(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_add_overflow(a, b, &r);
}

}  // namespace ptdp
