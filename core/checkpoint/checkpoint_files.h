// The checkpoint file layer: SHA-256 manifests, the atomic directory protocol and the
// re-sharding tensor reader. It knows nothing about models; core/train/checkpoint.cpp decides
// which tensors and metadata go in.
//
// Layout (Megatron's naming):
//   DIR/latest_checkpointed_iteration.txt   the iteration number, as Megatron writes it ("250")
//   DIR/iter_0000250/                       one checkpoint
//       *.safetensors, metadata.json, ...   the files the caller wrote
//       manifest.sha256                     "<64 hex>  <filename>\n" per file (sha256sum -c)
//
// Saving (one rank or several sharing a file system):
//   rank 0:     prepare_tmp_dir(DIR, it)                   creates DIR/iter_0000250.tmp (fresh)
//   barrier
//   every rank: writes its files into checkpoint_tmp_dir(DIR, it), each fsync'ed
//               (SafetensorsWriter::write, write_file_synced)
//   barrier
//   rank 0:     finalize_checkpoint(DIR, it, all file names)
// finalize_checkpoint hashes the files, writes manifest.sha256, syncs everything, renames the
// .tmp directory to iter_0000250 (replacing one of the same number), syncs DIR, and replaces the
// tracker file atomically, last. A save interrupted at any point before that leaves the previous
// checkpoint the latest one. CheckpointDirWriter wraps the same steps for a single writer.
//
// Loading: CheckpointReader opens the latest (or a given) iteration, verifies every file against
// the manifest before its first use, and reads blocks of global tensors from whichever pieces
// (described by a TensorMap, which the caller stores in metadata.json) cover them.
//
// File problems throw Error(Io) with the file's path in the message; bad calls throw
// Error(InvalidArgument).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/checkpoint/safetensors.h"
#include "io/file_write.h"

namespace ptdp {

// ---------------------------------------------------------------------------------------------
// SHA-256 (OpenSSL EVP)

/// SHA-256 of `n` bytes at `data`, 64 lowercase hex digits.
std::string sha256_bytes(const void* data, std::size_t n);
/// SHA-256 of the file at `path`, streamed; throws Io naming `path` when it is missing or
/// unreadable.
std::string sha256_file(const std::string& path);

// ---------------------------------------------------------------------------------------------
// Names and the directory protocol

/// Name of the manifest file inside an iteration directory.
inline constexpr const char* kManifestFile = "manifest.sha256";
/// Name of the tracker file inside DIR.
inline constexpr const char* kTrackerFile = "latest_checkpointed_iteration.txt";

/// "iter_0000250" for 250 (7 digits, zero padded, more digits when needed); InvalidArgument
/// for a negative iteration.
std::string checkpoint_iter_name(int64_t iteration);
/// DIR/iter_NNNNNNN.
std::string checkpoint_iter_dir(const std::string& dir, int64_t iteration);
/// DIR/iter_NNNNNNN.tmp, where a save is written before it is renamed.
std::string checkpoint_tmp_dir(const std::string& dir, int64_t iteration);
/// DIR/latest_checkpointed_iteration.txt.
std::string checkpoint_tracker_path(const std::string& dir);

/// Creates DIR (and its parents) if missing, removes a stale DIR/iter_NNNNNNN.tmp left by an
/// interrupted save, and creates it empty. Io naming the directory on failure.
void prepare_tmp_dir(const std::string& dir, int64_t iteration);

/// Makes the checkpoint in DIR/iter_NNNNNNN.tmp final: hashes `files` (names relative to the
/// tmp directory; each must exist there), writes manifest.sha256 listing them (sorted by name),
/// fsyncs every file and the tmp directory, removes an existing DIR/iter_NNNNNNN, renames the
/// tmp directory to it, fsyncs DIR, then atomically replaces the tracker file with
/// `iteration`. InvalidArgument for a bad or duplicate file name (empty, containing '/' or a
/// newline, "." or "..", or the manifest's own name); Io naming the file or directory that is
/// missing or cannot be written, synced or renamed.
void finalize_checkpoint(const std::string& dir, int64_t iteration, const std::vector<std::string>& files);

/// The iteration named by DIR/latest_checkpointed_iteration.txt (surrounding whitespace is
/// ignored, as Megatron does). Io "no checkpoint in DIR: DIR/latest_checkpointed_iteration.txt
/// is missing" when absent; Io naming the file and its text when it is not a non-negative
/// integer.
int64_t read_latest_iteration(const std::string& dir);


/// The directory protocol for a single writer: begin(), write files at path_for(name), then
/// finalize(names). Not thread-safe.
class CheckpointDirWriter {
 public:
  /// prepare_tmp_dir(dir, iteration) and remembers both.
  void begin(const std::string& dir, int64_t iteration);
  /// DIR/iter_NNNNNNN.tmp/filename; InvalidState before begin(), InvalidArgument for a bad name.
  std::string path_for(const std::string& filename) const;
  /// finalize_checkpoint(dir, iteration, files); InvalidState before begin() or after finalize().
  void finalize(const std::vector<std::string>& files);
  /// DIR/iter_NNNNNNN (final once finalize() has returned).
  std::string iter_dir() const;

 private:
  void check_begun(const char* what) const;

  std::string dir_;
  int64_t iteration_ = -1;
  bool finalized_ = false;
};

// ---------------------------------------------------------------------------------------------
// Tensor map: where the pieces of each global tensor are stored

/// One stored piece of a global tensor: tensor `name` of `file` holds rows [r0, r1) x cols
/// [c0, c1) of the global tensor (cols are [0, 1) for a 1-D tensor, rows and cols [0, 1) for
/// a 0-d one). The stored tensor is that block, row-major: shape [r1 - r0, c1 - c0] for a 2-D
/// global tensor, [r1 - r0] for a 1-D one (any shape with the same rows and elements is read).
///
/// With stored_row0 >= 0 the stored tensor may be taller and the piece is its rows
/// [stored_row0, stored_row0 + r1 - r0): one stored slice holding several blocks of the global
/// tensor (a tensor rank's share of SwiGLU's gate rows and of its up rows), one piece per block.
struct TensorPiece {
  std::string file;
  std::string name;
  int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
  int64_t stored_row0 = -1;  ///< -1: the stored tensor is the block; JSON "stored_row0" otherwise
};

/// A global tensor and its pieces.
struct TensorEntry {
  std::vector<int64_t> shape;  // global shape, 0 to 2 dims
  StDType dtype = StDType::F32;
  std::vector<TensorPiece> pieces;

  int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  int64_t cols() const { return shape.size() < 2 ? 1 : shape[1]; }
};

/// For every global tensor name, its shape, dtype and pieces. Pieces may overlap or repeat
/// (replicated tensors); any covering piece is read. JSON form (stored by the caller, e.g. in
/// metadata.json):
///   {"name": {"shape": [8, 6], "dtype": "F32",
///             "pieces": [{"file": "a.safetensors", "name": "w", "rows": [0, 4], "cols": [0, 6]}]}}
class TensorMap {
 public:
  /// Declares a global tensor; declaring it again with the same shape and dtype is allowed.
  /// InvalidArgument for more than 2 dims, a negative extent, or a redeclaration that differs.
  void add_tensor(const std::string& name, const std::vector<int64_t>& shape, StDType dtype);
  /// Adds a piece of the declared tensor `global_name`; InvalidArgument if it is undeclared or
  /// the block lies outside its shape.
  void add_piece(const std::string& global_name, const TensorPiece& piece);

  bool has(const std::string& name) const { return entries_.count(name) != 0; }
  /// InvalidArgument naming the tensor if absent.
  const TensorEntry& at(const std::string& name) const;
  const std::map<std::string, TensorEntry>& entries() const { return entries_; }

  nlohmann::json to_json() const;
  /// Parses the JSON form; Io naming `source` (e.g. the metadata.json path) and the entry for
  /// anything malformed.
  static TensorMap from_json(const nlohmann::json& j, const std::string& source);

 private:
  std::map<std::string, TensorEntry> entries_;
};

// ---------------------------------------------------------------------------------------------
// Reading a checkpoint

/// One saved iteration, opened for reading. Every file is verified against manifest.sha256
/// before its first use (existence, non-empty, SHA-256), and the result is cached. Member
/// functions may be called from several threads at once, except set_tensor_map, which must
/// not run concurrently with anything else.
class CheckpointReader {
 public:
  /// Opens DIR's latest iteration (read_latest_iteration). Io when the tracker is missing or
  /// bad, the iteration directory it names is missing, or the manifest is missing or malformed.
  explicit CheckpointReader(const std::string& dir);
  /// Opens DIR/iter_NNNNNNN; same errors.
  CheckpointReader(const std::string& dir, int64_t iteration);

  int64_t iteration() const { return iteration_; }
  /// DIR/iter_NNNNNNN.
  const std::string& iter_dir() const { return iter_dir_; }
  /// iter_dir()/filename.
  std::string path_for(const std::string& filename) const;
  /// filename -> SHA-256, as listed in the manifest.
  const std::map<std::string, std::string>& manifest() const { return manifest_; }

  /// Checks `filename` once: listed in the manifest, present, non-empty, matching SHA-256.
  /// Io naming the file: "not listed in MANIFEST", "missing", "empty", "SHA-256 mismatch:
  /// expected X, found Y".
  void verify(const std::string& filename);
  /// verify() for every file in the manifest.
  void verify_all();
  /// metadata.json, verified, parsed. Io naming it when it is invalid JSON.
  nlohmann::json read_metadata();
  /// The safetensors file `filename`, verified and opened once; the reference stays valid for
  /// the reader's lifetime.
  const SafetensorsFile& file(const std::string& filename);

  /// Sets the map read_block uses (typically TensorMap::from_json of a metadata.json entry).
  void set_tensor_map(TensorMap map);
  const TensorMap& tensor_map() const { return map_; }
  bool has_tensor(const std::string& name) const { return map_.has(name); }
  /// Global shape of `name`; InvalidArgument if it is not in the map.
  std::vector<int64_t> global_shape(const std::string& name) const { return map_.at(name).shape; }

  /// Assembles rows [r0, r1) x cols [c0, c1) of global tensor `name` into `out`, row-major
  /// (r1 - r0) x (c1 - c0), as floats, from the pieces that overlap the block (each file
  /// verified before its first use). InvalidArgument naming the tensor and the block when it
  /// is outside the global shape, or when part of it is covered by no piece (nothing is read
  /// then); Io when a piece's file is bad or its stored tensor is missing or has the wrong shape.
  void read_block(const std::string& name, int64_t r0, int64_t r1, int64_t c0, int64_t c1, float* out);

  /// With `on`, read_block refuses (Io, naming the file and both dtypes) a piece stored with
  /// another dtype than its tensor's map entry declares; off (the default), any stored float
  /// dtype is converted. ptdp's own checkpoints, all F32, are read with it on.
  void require_declared_dtypes(bool on) { declared_dtypes_ = on; }

 private:
  void open(const std::string& dir, int64_t iteration, const std::string& named_by);
  void verify_locked(const std::string& filename);

  std::string dir_;
  std::string iter_dir_;
  int64_t iteration_ = -1;
  std::map<std::string, std::string> manifest_;
  TensorMap map_;
  bool declared_dtypes_ = false;
  std::mutex mutex_;  // guards verified_ and files_
  std::map<std::string, bool> verified_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
};

}  // namespace ptdp
