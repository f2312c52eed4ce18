// Writing files so that a crash never leaves a half-written one behind: every write is synced,
// and a replacement lands by rename, then the directory is synced. Checkpoints, Hugging Face
// exports and the training plots all write through these.
#pragma once

#include <string>

namespace ptdp {

/// fsyncs a file or a directory; Io naming `path` on failure.
void fsync_path(const std::string& path);
/// Writes `content` to `path` (replacing it), fsyncs and closes it. Io naming `path` on failure.
void write_file_synced(const std::string& path, const std::string& content);
/// Replaces `path` atomically with `content`: writes path.tmp, fsyncs it, renames it over
/// `path`, fsyncs the parent directory. Io naming the file on failure.
void write_file_atomic(const std::string& path, const std::string& content);

}  // namespace ptdp
