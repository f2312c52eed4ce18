// The indexed-data-set C API against hand-written files: exact reads for uint16 and int32, the
// count/capacity protocol, and every malformed-file case with its status and message.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "idx_bytes.h"
#include "ptdp/ptdp.h"

namespace {

using idx_bytes::Index;

// Opens `prefix` expecting failure; returns the status and leaves the message in `message`.
ptdp_status open_fails(const std::string& prefix, std::string& message) {
  ptdp_dataset ds = nullptr;
  const ptdp_status st = ptdp_dataset_open(prefix.c_str(), &ds);
  message = ptdp_last_error();
  CHECK(ds == nullptr);
  if (ds != nullptr) ptdp_dataset_destroy(ds);
  return st;
}

std::vector<int32_t> read_document(ptdp_dataset ds, int64_t index) {
  int64_t count = -1;
  // Capacity 0 asks for the length: success for an empty document, else too small.
  const ptdp_status first = ptdp_dataset_document(ds, index, nullptr, 0, &count);
  REQUIRE(first == (count == 0 ? PTDP_SUCCESS : PTDP_ERR_INVALID_ARGUMENT));
  std::vector<int32_t> out(static_cast<std::size_t>(count));
  int64_t count2 = -1;
  REQUIRE(ptdp_dataset_document(ds, index, out.data(), count, &count2) == PTDP_SUCCESS);
  REQUIRE(count2 == count);
  return out;
}

// One malformed case: the status, and substrings the message must contain.
void expect_open_error(const std::string& prefix, ptdp_status status, const std::vector<std::string>& parts) {
  std::string message;
  CHECK(open_fails(prefix, message) == status);
  INFO(message);
  CHECK_THAT(message, Catch::Contains("ptdp_dataset_open"));
  for (const auto& p : parts) CHECK_THAT(message, Catch::Contains(p));
}

}  // namespace

TEST_CASE("dataset C API: hand-written uint16 and int32 files read back exactly", "[data][capi]") {
  idx_bytes::TempDir dir("capi_read");
  const idx_bytes::Sample s = idx_bytes::uint16_sample();
  idx_bytes::write_sample(dir.prefix("u16"), s.index, s.bin);

  ptdp_dataset ds = nullptr;
  REQUIRE(ptdp_dataset_open(dir.prefix("u16").c_str(), &ds) == PTDP_SUCCESS);
  int64_t n = 0;
  REQUIRE(ptdp_dataset_num_sequences(ds, &n) == PTDP_SUCCESS);
  CHECK(n == 4);
  REQUIRE(ptdp_dataset_num_documents(ds, &n) == PTDP_SUCCESS);
  CHECK(n == 3);
  for (int64_t d = 0; d < 3; ++d) CHECK(read_document(ds, d) == s.documents[static_cast<std::size_t>(d)]);

  // Document 1 spans two sequences ([4] and [5, 6]): too small a buffer reports the size and
  // leaves the buffer alone.
  std::vector<int32_t> buf(2, -7);
  int64_t count = -1;
  CHECK(ptdp_dataset_document(ds, 1, buf.data(), 2, &count) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(count == 3);
  CHECK_THAT(std::string(ptdp_last_error()), Catch::Contains("capacity"));
  CHECK(buf == std::vector<int32_t>{-7, -7});
  // A bigger buffer than needed is fine.
  std::vector<int32_t> big(10, -1);
  CHECK(ptdp_dataset_document(ds, 1, big.data(), 10, &count) == PTDP_SUCCESS);
  CHECK(count == 3);
  CHECK(std::vector<int32_t>(big.begin(), big.begin() + 3) == std::vector<int32_t>{4, 5, 6});
  CHECK(big[3] == -1);

  // Bad arguments: count is still set (to 0).
  count = -1;
  CHECK(ptdp_dataset_document(ds, 3, big.data(), 10, &count) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(count == 0);
  CHECK_THAT(std::string(ptdp_last_error()), Catch::Contains("index = 3"));
  CHECK(ptdp_dataset_document(ds, -1, big.data(), 10, &count) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_dataset_document(ds, 0, nullptr, 10, &count) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_dataset_document(ds, 0, big.data(), -1, &count) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_dataset_document(ds, 0, big.data(), 10, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_dataset_num_sequences(ds, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_dataset_num_documents(nullptr, &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_dataset_destroy(ds) == PTDP_SUCCESS);
  CHECK(ptdp_dataset_destroy(nullptr) == PTDP_SUCCESS);
  CHECK(ptdp_dataset_open(nullptr, &ds) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_dataset_open(dir.prefix("u16").c_str(), nullptr) == PTDP_ERR_INVALID_ARGUMENT);

  // int32 with a document of three sequences and an empty document.
  Index ix;
  ix.dtype = 4;
  std::vector<unsigned char> bin;
  const std::vector<std::vector<int32_t>> seqs{{100000, 0}, {7}, {2147483647, 1, 2}, {42}};
  int64_t offset = 0;
  for (const auto& q : seqs) {
    ix.lengths.push_back(static_cast<int32_t>(q.size()));
    ix.pointers.push_back(offset);
    for (int32_t t : q) idx_bytes::append_le(bin, t, 4);
    offset += static_cast<int64_t>(q.size() * 4);
  }
  ix.sequence_count = 4;
  ix.document_indices = {0, 3, 3, 4};
  ix.document_count = 4;
  idx_bytes::write_sample(dir.prefix("i32"), ix, bin);
  REQUIRE(ptdp_dataset_open(dir.prefix("i32").c_str(), &ds) == PTDP_SUCCESS);
  REQUIRE(ptdp_dataset_num_documents(ds, &n) == PTDP_SUCCESS);
  CHECK(n == 3);
  CHECK(read_document(ds, 0) == std::vector<int32_t>{100000, 0, 7, 2147483647, 1, 2});
  CHECK(read_document(ds, 1).empty());
  CHECK(read_document(ds, 2) == std::vector<int32_t>{42});
  CHECK(ptdp_dataset_destroy(ds) == PTDP_SUCCESS);
}

TEST_CASE("dataset C API: malformed files give PTDP_ERR_IO naming the file", "[data][capi]") {
  idx_bytes::TempDir dir("capi_bad");
  const idx_bytes::Sample good = idx_bytes::uint16_sample();
  int k = 0;
  // Writes a variant of the sample; returns its prefix.
  auto variant = [&](const Index& ix, const std::vector<unsigned char>& bin) {
    const std::string prefix = dir.prefix("case" + std::to_string(k++));
    idx_bytes::write_sample(prefix, ix, bin);
    return prefix;
  };

  SECTION("missing .idx") {
    expect_open_error(dir.prefix("absent"), PTDP_ERR_IO, {"absent.idx", "cannot open"});
  }
  SECTION("missing .bin") {
    const std::string p = variant(good.index, good.bin);
    std::filesystem::remove(p + ".bin");
    expect_open_error(p, PTDP_ERR_IO, {".bin", "cannot open"});
  }
  SECTION("truncated .idx: shorter than the header") {
    const std::string p = variant(good.index, good.bin);
    auto bytes = idx_bytes::bytes_of(good.index);
    bytes.resize(20);
    idx_bytes::write(p + ".idx", bytes);
    expect_open_error(p, PTDP_ERR_IO, {".idx", "truncated"});
  }
  SECTION("truncated .idx: the arrays are shorter than the counts imply") {
    const std::string p = variant(good.index, good.bin);
    auto bytes = idx_bytes::bytes_of(good.index);
    bytes.pop_back();
    idx_bytes::write(p + ".idx", bytes);
    expect_open_error(p, PTDP_ERR_IO, {".idx", "truncated", "4 sequences", "4 document indices"});
  }
  SECTION("truncated .idx: absurd counts") {
    Index ix = good.index;
    ix.sequence_count = ~uint64_t{0} / 2;
    expect_open_error(variant(ix, good.bin), PTDP_ERR_IO, {".idx", "truncated"});
  }
  SECTION("truncated .idx: counts of 2^62, whose sizes overflow 64 bits") {
    // 12 * 2^62 does not fit in 64 bits: the message says so instead of computing it.
    Index ix = good.index;
    ix.sequence_count = uint64_t{1} << 62;
    expect_open_error(variant(ix, good.bin), PTDP_ERR_IO,
                      {".idx", "truncated", "4611686018427387904 sequences", "need more than 2^64 bytes"});
    Index iy = good.index;
    iy.document_count = uint64_t{1} << 62;
    expect_open_error(variant(iy, good.bin), PTDP_ERR_IO,
                      {".idx", "truncated", "4611686018427387904 document indices", "need more than 2^64 bytes"});
    Index iz = good.index;
    iz.sequence_count = ~uint64_t{0};
    iz.document_count = ~uint64_t{0};
    expect_open_error(variant(iz, good.bin), PTDP_ERR_IO, {".idx", "truncated", "more than 2^64"});
  }
  SECTION("bad magic") {
    Index ix = good.index;
    ix.magic[0] = 'X';
    expect_open_error(variant(ix, good.bin), PTDP_ERR_IO, {".idx", "bad magic"});
  }
  SECTION("unsupported version") {
    Index ix = good.index;
    ix.version = 2;
    expect_open_error(variant(ix, good.bin), PTDP_ERR_IO, {".idx", "unsupported index version 2"});
  }
  SECTION("unknown dtype codes") {
    for (uint8_t code : {uint8_t{0}, uint8_t{9}, uint8_t{255}}) {
      Index ix = good.index;
      ix.dtype = code;
      expect_open_error(variant(ix, good.bin), PTDP_ERR_IO,
                        {".idx", "unknown dtype code " + std::to_string(code)});
    }
  }
  SECTION("float dtypes are not token ids") {
    for (uint8_t code : {uint8_t{6}, uint8_t{7}}) {
      Index ix = good.index;
      ix.dtype = code;
      std::vector<unsigned char> bin(64, 0);
      expect_open_error(variant(ix, bin), PTDP_ERR_IO,
                        {".idx", code == 6 ? "float64" : "float32", "integer dtype"});
    }
  }
  SECTION("truncated .bin") {
    std::vector<unsigned char> bin = good.bin;
    bin.pop_back();
    expect_open_error(variant(good.index, bin), PTDP_ERR_IO, {".bin", "truncated", "sequence 3", "past the end"});
  }
  SECTION("a pointer past the end of .bin") {
    Index ix = good.index;
    ix.pointers[1] = 1000;
    expect_open_error(variant(ix, good.bin), PTDP_ERR_IO, {".bin", "sequence 1", "past the end"});
  }
  SECTION("a huge length") {
    Index ix = good.index;
    ix.lengths[0] = 2147483647;
    expect_open_error(variant(ix, good.bin), PTDP_ERR_IO, {".bin", "sequence 0", "past the end"});
  }
  SECTION("negative length and negative pointer") {
    Index ix = good.index;
    ix.lengths[2] = -1;
    expect_open_error(variant(ix, good.bin), PTDP_ERR_IO, {".idx", "sequence 2", "negative length"});
    ix = good.index;
    ix.pointers[2] = -2;
    expect_open_error(variant(ix, good.bin), PTDP_ERR_IO, {".idx", "sequence 2", "negative byte offset"});
  }
  SECTION("document indices that decrease") {
    Index ix = good.index;
    ix.document_indices = {0, 3, 1, 4};
    expect_open_error(variant(ix, good.bin), PTDP_ERR_IO, {".idx", "document index [2] = 1", "must not decrease"});
  }
  SECTION("document indices out of range") {
    Index ix = good.index;
    ix.document_indices = {0, 1, 5, 4};
    expect_open_error(variant(ix, good.bin), PTDP_ERR_IO, {".idx", "document index [2] = 5", "out of range"});
    ix.document_indices = {0, 1, 3, 9};
    expect_open_error(variant(ix, good.bin), PTDP_ERR_IO, {".idx", "document index [3] = 9", "out of range"});
  }
  SECTION("document indices not starting at 0 or not ending at the sequence count") {
    Index ix = good.index;
    ix.document_indices = {1, 2, 3, 4};
    expect_open_error(variant(ix, good.bin), PTDP_ERR_IO, {".idx", "document index [0] = 1"});
    ix.document_indices = {0, 1, 2, 3};
    expect_open_error(variant(ix, good.bin), PTDP_ERR_IO, {".idx", "last document index is 3", "4 sequences"});
    ix.document_indices = {};
    ix.document_count = 0;
    expect_open_error(variant(ix, good.bin), PTDP_ERR_IO, {".idx", "document index is empty"});
  }
  SECTION("a negative token is reported when the document is read") {
    Index ix;
    ix.dtype = 3;  // int16
    ix.sequence_count = 2;
    ix.lengths = {1, 2};
    ix.pointers = {0, 2};
    ix.document_count = 2;
    ix.document_indices = {0, 2};
    std::vector<unsigned char> bin;
    for (int32_t t : {5, 6, -5}) idx_bytes::append_le(bin, t, 2);
    const std::string p = variant(ix, bin);
    ptdp_dataset ds = nullptr;
    REQUIRE(ptdp_dataset_open(p.c_str(), &ds) == PTDP_SUCCESS);
    std::vector<int32_t> buf(3, -9);
    int64_t count = -1;
    CHECK(ptdp_dataset_document(ds, 0, buf.data(), 3, &count) == PTDP_ERR_IO);
    const std::string message = ptdp_last_error();
    INFO(message);
    CHECK_THAT(message, Catch::Contains(".bin") && Catch::Contains("sequence 1 token 1 = -5") &&
                            Catch::Contains("negative"));
    CHECK(count == 3);
    CHECK(buf == std::vector<int32_t>{-9, -9, -9});
    CHECK(ptdp_dataset_destroy(ds) == PTDP_SUCCESS);
  }
}
