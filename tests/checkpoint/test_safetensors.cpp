// The safetensors reader and writer: round trips of every dtype, the exact bytes of a tiny
// file, a file laid out by hand as the reference implementation writes it, block reads, and
// every malformed file refused with an Io error naming the file.
#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/half.h"
#include "core/checkpoint/safetensors.h"

namespace fs = std::filesystem;
using ptdp::ErrorCode;
using ptdp::SafetensorsFile;
using ptdp::SafetensorsWriter;
using ptdp::StDType;

namespace {

// A fresh directory under the system temp dir, removed with its contents at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "ptdp_safetensors_XXXXXX").string();
    REQUIRE(mkdtemp(templ.data()) != nullptr);
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

template <typename T>
std::string le_bytes(const std::vector<T>& values) {
  std::string s(values.size() * sizeof(T), '\0');
  std::memcpy(s.data(), values.data(), s.size());
  return s;
}

// A file with the given header text (length prefix computed, no padding) and buffer.
std::string st_bytes(const std::string& header, const std::string& buffer) { return u64_le(header.size()) + header + buffer; }

// Runs `f`, which must throw Error(Io) whose message contains `path` and every one of `parts`.
void require_io(const std::function<void()>& f, const std::string& path, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const ptdp::Error& e) {
    INFO("message: " << e.what());
    CHECK(e.code() == ErrorCode::Io);
    CHECK(std::string(e.what()).find(path) != std::string::npos);
    for (const std::string& p : parts) CHECK(std::string(e.what()).find(p) != std::string::npos);
    return;
  }
  FAIL("no ptdp::Error thrown");
}

void require_bad_file(const TempDir& dir, const std::string& bytes, const std::vector<std::string>& parts) {
  const std::string path = dir.file("bad.safetensors");
  write_bytes(path, bytes);
  require_io([&] { SafetensorsFile f(path); }, path, parts);
}

}  // namespace

TEST_CASE("safetensors round trip of every dtype, a 0-d, a 1-element and an empty tensor", "[checkpoint][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("all.safetensors");

  const std::vector<float> f32 = {1.5f, -2.25f, 3.0f, 0.125f, 5.0f, 6.5f, -7.0f, 8.0f, 9.0f, 10.0f, 11.0f, -12.0f};  // [3, 4]
  const std::vector<double> f64 = {1.0 / 3.0, -2.5, 1e100, 4.0};                                                   // [2, 2]
  const std::vector<float> f16_src = {0.5f, -1.0f, 2.0f, 65504.0f, 0.099975586f};                                  // [5]
  const std::vector<float> bf16_src = {1.0f, -2.0f, 0.5f, 3.0f, 256.0f, -0.015625f};                               // [2, 3]
  const std::vector<int64_t> i64 = {-1, 1LL << 40, 7};                                                             // [3]
  const std::vector<int32_t> i32 = {-5, 6, 7, -8};                                                                 // [2, 2]
  const std::vector<uint8_t> u8 = {0, 1, 2, 3, 250, 254, 255};                                                     // [7]
  const float scalar = 42.0f;                                                                                      // []
  const float one = -3.5f;                                                                                         // [1]

  SafetensorsWriter w;
  w.add("f32", StDType::F32, {3, 4}, f32.data());
  w.add("f64", StDType::F64, {2, 2}, f64.data());
  w.add_from_f32("f16", StDType::F16, {5}, f16_src.data());
  w.add_from_f32("bf16", StDType::BF16, {2, 3}, bf16_src.data());
  w.add("i64", StDType::I64, {3}, i64.data());
  w.add_owned("i32", StDType::I32, {2, 2}, std::vector<unsigned char>(reinterpret_cast<const unsigned char*>(i32.data()),
                                                                     reinterpret_cast<const unsigned char*>(i32.data()) + 16));
  w.add("u8", StDType::U8, {7}, u8.data());
  w.add("scalar", StDType::F32, {}, &scalar);
  w.add("one", StDType::F32, {1}, &one);
  w.add("empty", StDType::F32, {0, 3}, nullptr);
  const uint64_t size = w.write(path);
  REQUIRE(size == fs::file_size(path));

  SafetensorsFile f(path);
  CHECK(f.metadata().empty());
  REQUIRE(f.tensors().size() == 10);
  CHECK(f.data_start() % 8 == 0);
  for (const auto& t : f.tensors()) {
    INFO(t.name);
    CHECK(t.begin % ptdp::st_dtype_size(t.dtype) == 0);  // every tensor aligned to its element size
  }
  // Names come back sorted.
  CHECK(f.tensors()[0].name == "bf16");
  CHECK(f.tensors()[9].name == "u8");

  CHECK(f.info("f32").shape == std::vector<int64_t>{3, 4});
  CHECK(f.info("scalar").shape.empty());
  CHECK(f.info("empty").shape == std::vector<int64_t>{0, 3});
  CHECK(f.info("empty").begin == f.info("empty").end);

  std::vector<float> got(12);
  f.read_f32("f32", got.data());
  CHECK(got == f32);

  std::vector<float> g64(4);
  f.read_f32("f64", g64.data());
  CHECK(g64 == std::vector<float>{static_cast<float>(1.0 / 3.0), -2.5f, static_cast<float>(1e100), 4.0f});
  std::vector<double> raw64(4);
  f.read_raw("f64", raw64.data(), 32);
  CHECK(raw64 == f64);

  std::vector<float> g16(5);
  f.read_f32("f16", g16.data());
  CHECK(g16 == std::vector<float>{0.5f, -1.0f, 2.0f, 65504.0f, ptdp::f16_to_f32(ptdp::f32_to_f16(0.099975586f))});
  std::vector<uint16_t> raw16(5);
  f.read_raw("f16", raw16.data(), 10);
  CHECK(raw16 == std::vector<uint16_t>{0x3800, 0xbc00, 0x4000, 0x7bff, 0x2e66});

  std::vector<float> gb(6);
  f.read_f32("bf16", gb.data());
  CHECK(gb == bf16_src);
  std::vector<uint16_t> rawb(6);
  f.read_raw("bf16", rawb.data(), 12);
  CHECK(rawb == std::vector<uint16_t>{0x3f80, 0xc000, 0x3f00, 0x4040, 0x4380, 0xbc80});

  std::vector<int64_t> gi64(3);
  f.read_raw("i64", gi64.data(), 24);
  CHECK(gi64 == i64);
  std::vector<int32_t> gi32(4);
  f.read_raw("i32", gi32.data(), 16);
  CHECK(gi32 == i32);
  std::vector<uint8_t> gu8(7);
  f.read_raw("u8", gu8.data(), 7);
  CHECK(gu8 == u8);

  float s = 0.0f;
  f.read_f32("scalar", &s);
  CHECK(s == 42.0f);
  f.read_f32("one", &s);
  CHECK(s == -3.5f);
  f.read_f32("empty", nullptr);  // nothing to read

  // Integers do not convert to float; unknown names and wrong buffer sizes are bad calls.
  CHECK_THROWS_MATCHES(f.read_f32("i32", got.data()), ptdp::Error,
                       Catch::Predicate<ptdp::Error>([](const ptdp::Error& e) { return e.code() == ErrorCode::InvalidArgument; }));
  CHECK_THROWS_AS(f.info("nope"), ptdp::Error);
  CHECK_THROWS_AS(f.read_raw("u8", gu8.data(), 6), ptdp::Error);
}

TEST_CASE("safetensors block reads of 2-D, 1-D and converted tensors", "[checkpoint][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("blocks.safetensors");
  std::vector<float> m(5 * 7);  // [5, 7]
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 7; ++c) m[static_cast<std::size_t>(r * 7 + c)] = static_cast<float>(r * 10 + c);
  std::vector<float> v = {0, 1, 2, 3, 4, 5};  // [6]
  SafetensorsWriter w;
  w.add("m", StDType::F32, {5, 7}, m.data());
  w.add_from_f32("m16", StDType::BF16, {5, 7}, m.data());
  w.add("v", StDType::F32, {6}, v.data());
  w.write(path);
  SafetensorsFile f(path);

  for (const char* name : {"m", "m16"}) {
    for (int r0 = 0; r0 <= 5; ++r0)
      for (int r1 = r0; r1 <= 5; ++r1)
        for (int c0 = 0; c0 <= 7; ++c0)
          for (int c1 = c0; c1 <= 7; ++c1) {
            std::vector<float> out(static_cast<std::size_t>((r1 - r0) * (c1 - c0)), -1.0f);
            f.read_block_f32(name, r0, r1, c0, c1, out.data());
            std::vector<float> want;
            for (int r = r0; r < r1; ++r)
              for (int c = c0; c < c1; ++c) want.push_back(static_cast<float>(r * 10 + c));
            INFO(name << " rows " << r0 << ".." << r1 << " cols " << c0 << ".." << c1);
            REQUIRE(out == want);
          }
  }
  std::vector<float> out(3);
  f.read_block_f32("v", 2, 5, 0, 1, out.data());
  CHECK(out == std::vector<float>{2, 3, 4});
  std::vector<unsigned char> raw(2 * 3 * 2);
  f.read_block_raw("m16", 1, 3, 2, 5, raw.data());
  uint16_t first;
  std::memcpy(&first, raw.data(), 2);
  CHECK(first == ptdp::f32_to_bf16(12.0f));

  CHECK_THROWS_AS(f.read_block_f32("m", 0, 6, 0, 1, out.data()), ptdp::Error);
  CHECK_THROWS_AS(f.read_block_f32("m", 2, 1, 0, 1, out.data()), ptdp::Error);
  CHECK_THROWS_AS(f.read_block_f32("v", 0, 1, 0, 2, out.data()), ptdp::Error);
}

TEST_CASE("safetensors exact bytes of a tiny file", "[checkpoint][safetensors]") {
  TempDir dir;
  const float data[2] = {1.0f, 2.0f};

  SECTION("no metadata") {
    SafetensorsWriter w;
    w.add("a", StDType::F32, {2}, data);
    const std::string path = dir.file("tiny.safetensors");
    CHECK(w.write(path) == 72);
    // 54 bytes of JSON padded with 2 spaces to 56 = 0x38; the buffer starts at 64.
    const std::string json = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}  ";
    REQUIRE(json.size() == 56);
    const std::string want = std::string("\x38\0\0\0\0\0\0\0", 8) + json + std::string("\0\0\x80\x3f\0\0\0\x40", 8);
    CHECK(read_bytes(path) == want);
  }
  SECTION("with metadata, which comes first") {
    SafetensorsWriter w;
    w.add("a", StDType::F32, {2}, data);
    w.set_metadata("format", "pt");
    const std::string path = dir.file("tiny_meta.safetensors");
    CHECK(w.write(path) == 8 + 88 + 8);
    const std::string json =
        "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}   ";
    REQUIRE(json.size() == 88);
    const std::string want = std::string("\x58\0\0\0\0\0\0\0", 8) + json + std::string("\0\0\x80\x3f\0\0\0\x40", 8);
    CHECK(read_bytes(path) == want);
    SafetensorsFile f(path);
    CHECK(f.metadata() == std::map<std::string, std::string>{{"format", "pt"}});
    CHECK(f.data_start() == 96);
  }
  SECTION("tensors ordered by dtype width, then name") {
    SafetensorsWriter w;
    const uint8_t b = 7;
    const int64_t l = 9;
    const uint16_t h = 0x3c00;
    w.add("z_u8", StDType::U8, {1}, &b);
    w.add("y_f16", StDType::F16, {1}, &h);
    w.add("x_f32", StDType::F32, {2}, data);
    w.add("b_i64", StDType::I64, {1}, &l);
    w.add("a_f32", StDType::F32, {1}, data);
    const std::string path = dir.file("order.safetensors");
    w.write(path);
    SafetensorsFile f(path);
    CHECK(f.info("b_i64").begin == 0);
    CHECK(f.info("a_f32").begin == 8);
    CHECK(f.info("x_f32").begin == 12);
    CHECK(f.info("y_f16").begin == 20);
    CHECK(f.info("z_u8").begin == 22);
    CHECK(f.info("z_u8").end == 23);
  }
}

TEST_CASE("safetensors reads a file laid out by hand as the Python package writes it", "[checkpoint][safetensors]") {
  TempDir dir;
  // What safetensors.numpy.save_file({"w": bf16 [2, 2], "ids": int64 [2]}, metadata={"format": "np"})
  // produces: metadata first, then tensors widest dtype first, JSON padded to 8 with spaces.
  const std::string json =
      "{\"__metadata__\":{\"format\":\"np\"},\"ids\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]},"
      "\"w\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[16,24]}}";
  std::string padded = json + std::string((8 - json.size() % 8) % 8, ' ');
  const std::string buffer = le_bytes<int64_t>({-3, 1234567890123}) + le_bytes<uint16_t>({0x3f80, 0xc000, 0x3f00, 0x4040});
  const std::string path = dir.file("python.safetensors");
  write_bytes(path, st_bytes(padded, buffer));

  SafetensorsFile f(path);
  CHECK(f.metadata().at("format") == "np");
  CHECK(f.info("w").dtype == StDType::BF16);
  CHECK(f.info("w").shape == std::vector<int64_t>{2, 2});
  std::vector<float> w(4);
  f.read_f32("w", w.data());
  CHECK(w == std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f});
  std::vector<int64_t> ids(2);
  f.read_raw("ids", ids.data(), 16);
  CHECK(ids == std::vector<int64_t>{-3, 1234567890123});

  // Unpadded headers, other key orders and whitespace are valid too.
  const std::string loose = " { \"w\" : {\"shape\": [2, 2], \"data_offsets\": [16, 24], \"dtype\": \"BF16\"},\n"
                            " \"ids\": {\"data_offsets\": [0, 16], \"dtype\": \"I64\", \"shape\": [2]} }";
  const std::string path2 = dir.file("loose.safetensors");
  write_bytes(path2, st_bytes(loose, buffer));
  SafetensorsFile g(path2);
  CHECK(g.metadata().empty());
  g.read_f32("w", w.data());
  CHECK(w == std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f});
}

TEST_CASE("safetensors malformed files are refused naming the file", "[checkpoint][safetensors]") {
  TempDir dir;
  const std::string eight = le_bytes<float>({1.0f, 2.0f});
  const std::string one_f32 = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";

  SECTION("missing file") {
    const std::string path = dir.file("nope.safetensors");
    require_io([&] { SafetensorsFile f(path); }, path, {"missing"});
  }
  SECTION("shorter than 8 bytes") { require_bad_file(dir, "abc", {"truncated: 3 bytes, expected at least 8"}); }
  SECTION("header length beyond the file") {
    require_bad_file(dir, u64_le(1000) + one_f32, {"truncated: 62 bytes, expected at least 1008"});
  }
  SECTION("absurd header length") { require_bad_file(dir, u64_le(~0ULL) + one_f32, {"bad safetensors header", "limit"}); }
  SECTION("invalid JSON") { require_bad_file(dir, st_bytes("{\"a\": {", eight), {"bad safetensors header", "invalid JSON"}); }
  SECTION("header not an object") { require_bad_file(dir, st_bytes("[1, 2]", ""), {"bad safetensors header", "not a JSON object"}); }
  SECTION("missing dtype") {
    require_bad_file(dir, st_bytes("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", eight), {"tensor 'a' has no dtype"});
  }
  SECTION("missing shape") {
    require_bad_file(dir, st_bytes("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", eight), {"tensor 'a' has no shape"});
  }
  SECTION("missing data_offsets") {
    require_bad_file(dir, st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", eight), {"tensor 'a' has no data_offsets"});
  }
  SECTION("entry not an object") { require_bad_file(dir, st_bytes("{\"a\":3}", ""), {"tensor 'a' is not an object"}); }
  SECTION("unknown dtype") {
    require_bad_file(dir, st_bytes("{\"a\":{\"dtype\":\"F7\",\"shape\":[2],\"data_offsets\":[0,8]}}", eight),
                     {"unknown dtype 'F7'"});
  }
  SECTION("negative shape") {
    require_bad_file(dir, st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", eight),
                     {"non-negative integers"});
  }
  SECTION("bad data_offsets") {
    require_bad_file(dir, st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", eight), {"data_offsets"});
    require_bad_file(dir, st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", eight),
                     {"end before they begin"});
  }
  SECTION("offsets out of range") {
    require_bad_file(dir, st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", eight),
                     {"truncated", "data_offsets [8, 16]"});
  }
  SECTION("offsets and shapes whose sizes overflow 64 bits") {
    require_bad_file(dir,
                     st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
                              "\"data_offsets\":[18446744073709551608,18446744073709551615]}}",
                              eight),
                     {"data_offsets [18446744073709551608, 18446744073709551615]"});
    require_bad_file(dir,
                     st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
                              "\"data_offsets\":[0,8]}}",
                              eight),
                     {"tensor 'a'", "too large"});
    require_bad_file(dir,
                     st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],"
                              "\"data_offsets\":[0,0]}}",
                              eight),
                     {"tensor 'a'", "too large"});
  }
  SECTION("size mismatch") {
    require_bad_file(dir, st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", eight),
                     {"hold 8 bytes", "need 12"});
  }
  SECTION("overlapping tensors") {
    require_bad_file(dir,
                     st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                              "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                              eight + eight.substr(0, 4)),
                     {"'a' and 'b' overlap"});
  }
  SECTION("hole in the buffer") {
    require_bad_file(dir,
                     st_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                              "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                              eight + eight.substr(0, 4)),
                     {"[4, 8) belong to no tensor"});
  }
  SECTION("bytes after the last tensor") { require_bad_file(dir, st_bytes(one_f32, eight + "xx"), {"2 bytes after the last tensor"}); }
  SECTION("truncated buffer") {
    const std::string whole = st_bytes(one_f32, eight);
    require_bad_file(dir, whole.substr(0, whole.size() - 3),
                     {"truncated: " + std::to_string(whole.size() - 3) + " bytes, expected at least " +
                      std::to_string(whole.size())});
  }
  SECTION("non-string metadata") {
    require_bad_file(dir, st_bytes("{\"__metadata__\":{\"k\":1}}", ""), {"__metadata__ value of 'k' is not a string"});
  }
}

TEST_CASE("safetensors writer refuses bad tensors", "[checkpoint][safetensors]") {
  SafetensorsWriter w;
  const float x[2] = {1, 2};
  w.add("a", StDType::F32, {2}, x);
  const auto invalid = Catch::Predicate<ptdp::Error>([](const ptdp::Error& e) { return e.code() == ErrorCode::InvalidArgument; });
  CHECK_THROWS_MATCHES(w.add("a", StDType::F32, {2}, x), ptdp::Error, invalid);
  CHECK_THROWS_MATCHES(w.add("", StDType::F32, {2}, x), ptdp::Error, invalid);
  CHECK_THROWS_MATCHES(w.add("__metadata__", StDType::F32, {2}, x), ptdp::Error, invalid);
  CHECK_THROWS_MATCHES(w.add("b", StDType::F32, {-1}, x), ptdp::Error, invalid);
  CHECK_THROWS_MATCHES(w.add("c", StDType::F32, {2}, nullptr), ptdp::Error, invalid);
  CHECK_THROWS_MATCHES(w.add_owned("d", StDType::F32, {2}, std::vector<unsigned char>(7)), ptdp::Error, invalid);
  CHECK_THROWS_MATCHES(w.add_from_f32("e", StDType::I32, {2}, x), ptdp::Error, invalid);
  CHECK(w.size() == 1);
  const std::string bad_path = "/nonexistent_dir_ptdp/x.safetensors";
  require_io([&] { w.write(bad_path); }, bad_path, {"cannot create"});
}
