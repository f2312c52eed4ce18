// io/file_read: regular files only, size limits, reads bounded by the size at open,
// checked arithmetic of numbers read from files.
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"
#include "io/file_read.h"
#include "io/json_number.h"

namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/ptdp-file-read-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str(const std::string& name) const { return (path / name).string(); }
};

std::string io_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ptdp::Error& e) {
    CHECK(e.code() == ptdp::ErrorCode::Io);
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("file_read: each kind of path is named in the refusal", "[tensor][files]") {
  TempDir dir;
  const std::string fifo = dir.str("fifo");
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  alarm(30);
  CHECK(io_error_of([&] { ptdp::read_regular_file(fifo, "test file", 100); }) ==
        fifo + ": is a FIFO, not a regular file: only regular files are read as test file");
  alarm(0);
  CHECK(io_error_of([&] { ptdp::read_regular_file(dir.path.string(), "test file", 100); }) ==
        dir.path.string() + ": is a directory, not a regular file: only regular files are read as test file");
  CHECK(io_error_of([&] { ptdp::read_regular_file("/dev/zero", "test file", 100); }) ==
        "/dev/zero: is a character device, not a regular file: only regular files are read as test file");
  CHECK(io_error_of([&] { ptdp::read_regular_file(dir.str("none"), "test file", 100); }) ==
        dir.str("none") + ": cannot open the test file: missing (no such file)");
  CHECK(ptdp::describe_path_kind(fifo) == "a FIFO");
  CHECK(ptdp::describe_path_kind(dir.str("none")) == "missing");
  CHECK(ptdp::describe_path_kind("/dev/zero") == "a character device");
}

TEST_CASE("file_read: the size limit and the size at open bound every read", "[tensor][files]") {
  TempDir dir;
  const std::string path = dir.str("f");
  std::ofstream(path) << "0123456789";
  CHECK(ptdp::read_regular_file(path, "test file", 10) == "0123456789");
  CHECK(io_error_of([&] { ptdp::read_regular_file(path, "test file", 9); }) ==
        path + ": 10 bytes exceeds the limit of 9 bytes for a test file");
  // A file that grows after it was opened is read as it was when opened.
  const ptdp::RegularFile f(path, "test file", 100);
  std::ofstream(path, std::ios::app) << "more bytes that arrived later";
  CHECK(f.size() == 10);
  CHECK(f.read_all() == "0123456789");
  char buf[4];
  CHECK_THAT(io_error_of([&] { f.read_at(8, buf, 4); }), Catch::Contains("truncated") && Catch::Contains(path));
  // One that shrinks is named, not read short.
  fs::resize_file(path, 5);
  CHECK_THAT(io_error_of([&] { (void)f.read_all(); }), Catch::Contains("shrank"));
}

TEST_CASE("file_read: checked arithmetic names the overflow", "[tensor][files]") {
  CHECK(ptdp::checked_mul(uint64_t{1} << 31, 12, "p", "x") == (uint64_t{12} << 31));
  CHECK(io_error_of([] { ptdp::checked_mul(uint64_t{1} << 62, 12, "f.idx", "the sequence table's size"); }) ==
        "f.idx: the sequence table's size overflows: 4611686018427387904 * 12 does not fit in 64 bits");
  CHECK(io_error_of([] { ptdp::checked_add(UINT64_MAX, 1, "f", "the end"); }) ==
        "f: the end overflows: 18446744073709551615 + 1 does not fit in 64 bits");
  CHECK(ptdp::mul_overflows(uint64_t{1} << 32, uint64_t{1} << 32));
  CHECK_FALSE(ptdp::add_overflows(1, 2));
}

TEST_CASE("json_number: values that are not finite are null, so the JSON stays valid", "[tensor][json]") {
  CHECK(ptdp::json_number(1.5) == "1.5");
  CHECK(ptdp::json_number(2.0 / 3.0, "%.3f") == "0.667");
  CHECK(ptdp::json_number(std::nan("")) == "null");
  CHECK(ptdp::json_number(HUGE_VAL) == "null");
  CHECK(ptdp::json_number(-HUGE_VAL, "%.1f") == "null");
  const std::string line = "{\"a\": " + ptdp::json_number(std::nan("")) + ", \"b\": " + ptdp::json_number(-HUGE_VAL) +
                           ", \"c\": " + ptdp::json_number(3) + "}";
  const nlohmann::json j = nlohmann::json::parse(line);
  CHECK(j["a"].is_null());
  CHECK(j["b"].is_null());
  CHECK(j["c"].get<double>() == 3);
  // nlohmann's own dump (checkpoint metadata, plans) agrees: null for NaN and infinity.
  const nlohmann::json k = {{"x", std::nan("")}, {"y", HUGE_VAL}};
  CHECK(nlohmann::json::parse(k.dump()) == nlohmann::json({{"x", nullptr}, {"y", nullptr}}));
}
