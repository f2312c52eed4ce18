// Helpers shared by the libFuzzer targets of this folder (DEVELOPERS.md, "Fuzzing and
// sanitizers"). Every target feeds one parser of untrusted input; a ptdp::Error is the parser
// refusing the input cleanly, anything else (another exception, a sanitizer report, a crash, a
// hang, running out of memory) is a finding.
//
// Parsers that only read paths get their input written to files in a private directory under
// /dev/shm (tmpfs, so an execution costs no disk I/O), created once per process. An input that
// holds several files separates them with kSplit, a byte string that is no UTF-8 and so never
// part of a JSON or text file.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"

namespace ptdp::fuzz {

inline constexpr std::string_view kSplit = "\xff\xfe" "PTDP-FUZZ-SPLIT" "\xfe\xff";

/// The input cut at every kSplit; always at least `min_parts` parts (missing ones empty).
inline std::vector<std::string> split_parts(const uint8_t* data, std::size_t size, std::size_t min_parts) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  std::size_t at = 0;
  while (true) {
    const std::size_t next = in.find(kSplit, at);
    if (next == std::string_view::npos) {
      parts.emplace_back(in.substr(at));
      break;
    }
    parts.emplace_back(in.substr(at, next - at));
    at = next + kSplit.size();
  }
  while (parts.size() < min_parts) parts.emplace_back();
  return parts;
}

/// The input as a command line: one argument per line (a final newline adds no argument).
inline std::vector<std::string> split_lines(const uint8_t* data, std::size_t size) {
  std::vector<std::string> args;
  std::string cur;
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  if (!cur.empty()) args.push_back(cur);
  return args;
}

/// This process's scratch directory (created on first use, removed at exit).
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* base = std::getenv("PTDP_FUZZ_TMPDIR");
    std::string pattern = std::string(base && *base ? base : (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp")) +
                          "/ptdp-fuzz-XXXXXX";
    if (!mkdtemp(pattern.data())) std::abort();
    static const std::string removed_at_exit = pattern;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(removed_at_exit, ec);
    });
    return pattern;
  }();
  return dir;
}

/// scratch_dir()/name.
inline std::string scratch_path(const std::string& name) { return scratch_dir() + "/" + name; }

/// Writes `bytes` to `path` (replacing it); aborts when it cannot (a broken harness, no finding).
inline void write_file(const std::string& path, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) std::abort();
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w <= 0) std::abort();
    done += static_cast<std::size_t>(w);
  }
  ::close(fd);
}

/// Runs `body`; a ptdp::Error is a clean refusal and is swallowed, anything else escapes.
template <typename F>
void refused_cleanly_or_ok(F&& body) {
  try {
    body();
  } catch (const ptdp::Error&) {
  }
}

}  // namespace ptdp::fuzz
