// What the plot tests share: a fresh scratch directory under the build tree, whole-file text
// in and out, and counting the occurrences of a string in a document.
#pragma once

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace plot_test {

/// A fresh, empty directory `name` under the test's build directory (PTDP_TEST_OUTPUT_DIR).
inline std::filesystem::path scratch(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(PTDP_TEST_OUTPUT_DIR) / "plot-scratch" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

inline std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace plot_test
