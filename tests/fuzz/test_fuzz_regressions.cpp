// Inputs the fuzz targets found (fuzz/regressions/), through the parsers they crashed, now
// refused with clear errors. Each input is fed exactly as its fuzz target feeds it
// (fuzz/fuzz_support.h splits and writes it).
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/args/train_args.h"
#include "core/checkpoint/safetensors.h"
#include "core/data/indexed_dataset.h"
#include "fuzz/fuzz_support.h"
#include "kernels/error.h"

namespace {

std::string regression(const std::string& name) {
  std::ifstream in(std::string(PTDP_FUZZ_REGRESSIONS) + "/" + name, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const uint8_t* bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

// The message of the ptdp::Error that `body` throws (fails the test when it throws nothing).
template <typename F>
std::string error_of(F&& body, ptdp::ErrorCode code) {
  try {
    body();
  } catch (const ptdp::Error& e) {
    CHECK(e.code() == code);
    return e.what();
  }
  FAIL("no error thrown");
  return "";
}

}  // namespace

TEST_CASE("fuzz: an .idx whose counts need more than 2^64 bytes is refused as truncated", "[fuzz][data]") {
  // fuzz_indexed_dataset: about 2^64 sequences and document indices; the message computed their size in a long double
  // and converted it to an integer it does not fit (UBSan: float-cast-overflow).
  const std::string input = regression("indexed_dataset_huge_counts");
  const auto parts = ptdp::fuzz::split_parts(bytes(input), input.size(), 2);
  const std::string prefix = ptdp::fuzz::scratch_path("huge_counts");
  ptdp::fuzz::write_file(prefix + ".idx", parts[0]);
  ptdp::fuzz::write_file(prefix + ".bin", parts[1]);
  const std::string msg = error_of([&] { ptdp::IndexedDataset ds(prefix); }, ptdp::ErrorCode::Io);
  CHECK_THAT(msg, Catch::Contains(prefix + ".idx: truncated: the header declares 18446742974197923842 sequences and "
                                                  "18446744073709551615 document indices, which need more than 2^64 "
                                                  "bytes, but the file has 83 bytes"));
}

TEST_CASE("fuzz: an .idx whose counts fit 64 bits still names the bytes they need", "[fuzz][data]") {
  std::string idx("MMIDIDX\0\0", 9);
  const uint64_t version = 1, seqs = 1000, docs = 3;
  idx.append(reinterpret_cast<const char*>(&version), 8);
  idx.push_back(4);
  idx.append(reinterpret_cast<const char*>(&seqs), 8);
  idx.append(reinterpret_cast<const char*>(&docs), 8);
  const std::string prefix = ptdp::fuzz::scratch_path("many_counts");
  ptdp::fuzz::write_file(prefix + ".idx", idx);
  ptdp::fuzz::write_file(prefix + ".bin", "");
  const std::string msg = error_of([&] { ptdp::IndexedDataset ds(prefix); }, ptdp::ErrorCode::Io);
  // 34 + 12 * 1000 + 8 * 3
  CHECK_THAT(msg, Catch::Contains("1000 sequences and 3 document indices, which need 12058 bytes, but the file has 34 bytes"));
}

TEST_CASE("fuzz: a safetensors shape with a 0 extent whose other extents overflow int64 is refused", "[fuzz][checkpoint]") {
  // fuzz_safetensors: shape [0, 2^62, 4] holds no bytes, so the byte count passed, but the
  // tensor's columns (2^62 * 4) overflowed int64 in cols() (UBSan: signed overflow).
  const std::string input = regression("safetensors_zero_extent_overflow");
  const std::string path = ptdp::fuzz::scratch_path("zero_extent.safetensors");
  ptdp::fuzz::write_file(path, input);
  const std::string msg = error_of([&] { ptdp::SafetensorsFile f(path); }, ptdp::ErrorCode::Io);
  CHECK_THAT(msg, Catch::Contains(path + ": bad safetensors header: tensor 't': shape [0, 4611686018427387904, 4] is too large"));
}

TEST_CASE("fuzz: a safetensors shape with a 0 extent and small other extents is read", "[fuzz][checkpoint]") {
  const std::string path = ptdp::fuzz::scratch_path("zero_extent_ok.safetensors");
  ptdp::SafetensorsWriter w;
  w.add("t", ptdp::StDType::F32, {0, 1024, 4}, nullptr);
  w.write(path);
  const ptdp::SafetensorsFile f(path);
  REQUIRE(f.tensors().size() == 1);
  CHECK(f.tensors()[0].rows() == 0);
  CHECK(f.tensors()[0].cols() == 4096);
}

TEST_CASE("fuzz: ptdp-train flags whose values are not UTF-8 convert to JSON text", "[fuzz][args]") {
  // fuzz_train_args: a --data-path with the byte 0xED (no UTF-8) parsed, but dumping the
  // flags as JSON (a checkpoint's metadata.json) threw nlohmann's type_error 316.
  const std::string input = regression("train_args_not_utf8");
  const ptdp::TrainArgs args = ptdp::parse_train_args(ptdp::fuzz::split_lines(bytes(input), input.size()));
  CHECK(args.data_path.find('\xED') != std::string::npos);
  const nlohmann::json j = ptdp::train_args_to_json(args);
  CHECK_THROWS_AS(j.dump(), nlohmann::json::type_error);  // what the callers must not do
  const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  CHECK_THAT(text, Catch::Contains("\"data-path\":\"0.3 a\xEF\xBF\xBD"));
}
