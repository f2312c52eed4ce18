// Test helper: PREFIX.idx / PREFIX.bin written byte by byte from explicit fields, independent
// of ptdp's writer, so each field can be corrupted on purpose.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace idx_bytes {

struct Index {
  std::string magic = std::string("MMIDIDX\0\0", 9);
  uint64_t version = 1;
  uint8_t dtype = 4;
  uint64_t sequence_count = 0;   // written as given (not derived from lengths)
  uint64_t document_count = 0;   // entries of document_indices, as given
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers;
  std::vector<int64_t> document_indices;
};

inline void append(std::vector<unsigned char>& out, const void* p, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  out.insert(out.end(), b, b + n);
}

// Little-endian bytes of `v`, `bytes` long (the host is little-endian).
inline void append_le(std::vector<unsigned char>& out, int64_t v, std::size_t bytes) { append(out, &v, bytes); }

inline std::vector<unsigned char> bytes_of(const Index& ix) {
  std::vector<unsigned char> out;
  append(out, ix.magic.data(), ix.magic.size());
  append(out, &ix.version, 8);
  append(out, &ix.dtype, 1);
  append(out, &ix.sequence_count, 8);
  append(out, &ix.document_count, 8);
  for (int32_t v : ix.lengths) append(out, &v, 4);
  for (int64_t v : ix.pointers) append(out, &v, 8);
  for (int64_t v : ix.document_indices) append(out, &v, 8);
  return out;
}

inline void write(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// A fresh directory for one test's files, removed at the end.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    path = std::filesystem::temp_directory_path() /
           ("ptdp_data_" + tag + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string prefix(const std::string& name) const { return (path / name).string(); }
};

// A valid hand-written uint16 data set: documents {[1,2,3]}, {[4],[5,6]}, {[65535]}.
// Three documents, four sequences; returns the Index so callers can corrupt it.
struct Sample {
  Index index;
  std::vector<unsigned char> bin;
  std::vector<std::vector<int32_t>> documents{{1, 2, 3}, {4, 5, 6}, {65535}};
};

inline Sample uint16_sample() {
  Sample s;
  const std::vector<std::vector<int32_t>> seqs{{1, 2, 3}, {4}, {5, 6}, {65535}};
  s.index.dtype = 8;
  int64_t offset = 0;
  for (const auto& q : seqs) {
    s.index.lengths.push_back(static_cast<int32_t>(q.size()));
    s.index.pointers.push_back(offset);
    for (int32_t t : q) append_le(s.bin, t, 2);
    offset += static_cast<int64_t>(q.size() * 2);
  }
  s.index.sequence_count = seqs.size();
  s.index.document_indices = {0, 1, 3, 4};
  s.index.document_count = 4;
  return s;
}

inline void write_sample(const std::string& prefix, const Index& ix, const std::vector<unsigned char>& bin) {
  write(prefix + ".idx", bytes_of(ix));
  write(prefix + ".bin", bin);
}

}  // namespace idx_bytes
