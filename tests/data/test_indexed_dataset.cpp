// ptdp::IndexedDataset and ptdp::write_indexed_dataset: round trips through the writer, reading
// hand-written files, and the writer's byte layout against the documented format.
#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>

#include "base/error.h"
#include "core/data/indexed_dataset.h"
#include "idx_bytes.h"

using ptdp::IndexedDataset;
using ptdp::IndexedDType;

namespace {

std::vector<unsigned char> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

using Docs = std::vector<std::vector<std::vector<int32_t>>>;

void check_round_trip(const IndexedDataset& ds, const Docs& docs) {
  int64_t seq = 0;
  int64_t total = 0;
  REQUIRE(ds.num_documents() == static_cast<int64_t>(docs.size()));
  for (std::size_t d = 0; d < docs.size(); ++d) {
    std::vector<int32_t> concat;
    REQUIRE(ds.document_first_sequence(static_cast<int64_t>(d)) == seq);
    for (const auto& s : docs[d]) {
      CHECK(ds.sequence(seq) == s);
      CHECK(ds.sequence_length(seq) == static_cast<int64_t>(s.size()));
      concat.insert(concat.end(), s.begin(), s.end());
      total += static_cast<int64_t>(s.size());
      ++seq;
    }
    REQUIRE(ds.document_end_sequence(static_cast<int64_t>(d)) == seq);
    CHECK(ds.document(static_cast<int64_t>(d)) == concat);
    CHECK(ds.document_length(static_cast<int64_t>(d)) == static_cast<int64_t>(concat.size()));
  }
  CHECK(ds.num_sequences() == seq);
  CHECK(ds.num_tokens() == total);
}

}  // namespace

TEST_CASE("indexed dataset: writer and reader round trip (uint16 and int32)", "[data]") {
  idx_bytes::TempDir dir("roundtrip");
  const Docs docs{{{0, 1, 2}, {3}, {}}, {{65535, 7, 65534}}, {}, {{9, 9}, {10, 11, 12, 13}}};
  for (IndexedDType dt : {IndexedDType::UInt16, IndexedDType::Int32}) {
    const std::string prefix = dir.prefix(ptdp::indexed_dtype_name(dt));
    ptdp::write_indexed_dataset(prefix, docs, dt);
    IndexedDataset ds(prefix);
    CHECK(ds.dtype() == dt);
    check_round_trip(ds, docs);
    CHECK(ds.document(2).empty());
    CHECK(slurp(prefix + ".bin").size() == 13 * ptdp::indexed_dtype_size(dt));
  }
  // Large int32 ids survive.
  const Docs big{{{2147483647, 100000, 0}}};
  ptdp::write_indexed_dataset(dir.prefix("big"), big, IndexedDType::Int32);
  check_round_trip(IndexedDataset(dir.prefix("big")), big);
  // Other integer dtypes.
  const Docs small{{{1, 2}, {127}}, {{0}}};
  for (IndexedDType dt : {IndexedDType::UInt8, IndexedDType::Int8, IndexedDType::Int16, IndexedDType::Int64}) {
    const std::string prefix = dir.prefix(std::string("small_") + ptdp::indexed_dtype_name(dt));
    ptdp::write_indexed_dataset(prefix, small, dt);
    check_round_trip(IndexedDataset(prefix), small);
  }
}

TEST_CASE("indexed dataset: the writer's bytes are the documented format", "[data]") {
  idx_bytes::TempDir dir("layout");
  const idx_bytes::Sample s = idx_bytes::uint16_sample();
  ptdp::write_indexed_dataset(dir.prefix("w"), {{{1, 2, 3}}, {{4}, {5, 6}}, {{65535}}}, IndexedDType::UInt16);
  CHECK(slurp(dir.prefix("w") + ".idx") == idx_bytes::bytes_of(s.index));
  CHECK(slurp(dir.prefix("w") + ".bin") == s.bin);
}

TEST_CASE("indexed dataset: hand-written files read back exactly", "[data]") {
  idx_bytes::TempDir dir("hand");
  const idx_bytes::Sample s = idx_bytes::uint16_sample();
  idx_bytes::write_sample(dir.prefix("u16"), s.index, s.bin);
  IndexedDataset ds(dir.prefix("u16"));
  CHECK(ds.dtype() == IndexedDType::UInt16);
  CHECK(ds.num_sequences() == 4);
  CHECK(ds.num_documents() == 3);
  CHECK(ds.num_tokens() == 7);
  CHECK(ds.sequence(2) == std::vector<int32_t>{5, 6});
  for (int64_t d = 0; d < 3; ++d) CHECK(ds.document(d) == s.documents[static_cast<std::size_t>(d)]);

  // int32, with sequences stored out of order in .bin and trailing bytes after the index.
  idx_bytes::Index ix;
  ix.dtype = 4;
  ix.sequence_count = 2;
  ix.lengths = {2, 1};
  ix.pointers = {4, 0};
  ix.document_count = 2;
  ix.document_indices = {0, 2};
  std::vector<unsigned char> bin;
  for (int32_t t : {70000, 1, 2}) idx_bytes::append_le(bin, t, 4);
  auto bytes = idx_bytes::bytes_of(ix);
  bytes.push_back(0);  // e.g. multimodal sequence modes: ignored
  idx_bytes::write(dir.prefix("i32") + ".idx", bytes);
  idx_bytes::write(dir.prefix("i32") + ".bin", bin);
  IndexedDataset d32(dir.prefix("i32"));
  CHECK(d32.sequence(0) == std::vector<int32_t>{1, 2});
  CHECK(d32.sequence(1) == std::vector<int32_t>{70000});
  CHECK(d32.document(0) == std::vector<int32_t>{1, 2, 70000});
}

TEST_CASE("indexed dataset: bad indices, bad tokens and bad writer arguments", "[data]") {
  idx_bytes::TempDir dir("bad");
  ptdp::write_indexed_dataset(dir.prefix("a"), {{{1}}}, IndexedDType::Int32);
  IndexedDataset ds(dir.prefix("a"));
  auto code_of = [](auto&& f) {
    try {
      f();
    } catch (const ptdp::Error& e) {
      return e.code();
    }
    return ptdp::ErrorCode::Internal;
  };
  CHECK(code_of([&] { (void)ds.sequence(1); }) == ptdp::ErrorCode::InvalidArgument);
  CHECK(code_of([&] { (void)ds.document(-1); }) == ptdp::ErrorCode::InvalidArgument);
  CHECK(code_of([&] { ptdp::write_indexed_dataset(dir.prefix("b"), {{{256}}}, IndexedDType::UInt8); }) ==
        ptdp::ErrorCode::InvalidArgument);
  CHECK(code_of([&] { ptdp::write_indexed_dataset(dir.prefix("b"), {{{1}}}, IndexedDType::Float32); }) ==
        ptdp::ErrorCode::InvalidArgument);
  CHECK(code_of([&] { ptdp::write_indexed_dataset(dir.prefix("no/such/dir/x"), {{{1}}}, IndexedDType::Int32); }) ==
        ptdp::ErrorCode::Io);

  // An int64 token above INT32_MAX.
  idx_bytes::Index ix;
  ix.dtype = 5;
  ix.sequence_count = 1;
  ix.lengths = {1};
  ix.pointers = {0};
  ix.document_count = 2;
  ix.document_indices = {0, 1};
  std::vector<unsigned char> bin;
  idx_bytes::append_le(bin, int64_t{1} << 40, 8);
  idx_bytes::write_sample(dir.prefix("i64"), ix, bin);
  IndexedDataset d64(dir.prefix("i64"));
  try {
    (void)d64.document(0);
    FAIL("no error");
  } catch (const ptdp::Error& e) {
    CHECK(e.code() == ptdp::ErrorCode::Io);
    CHECK_THAT(e.what(), Catch::Contains("i64.bin") && Catch::Contains("does not fit in int32"));
  }
}

TEST_CASE("indexed dataset: moved-from and moved-to objects", "[data]") {
  idx_bytes::TempDir dir("move");
  ptdp::write_indexed_dataset(dir.prefix("a"), {{{1, 2}}}, IndexedDType::UInt16);
  ptdp::write_indexed_dataset(dir.prefix("b"), {{{3}}, {{4}}}, IndexedDType::UInt16);
  IndexedDataset a(dir.prefix("a"));
  IndexedDataset b(std::move(a));
  CHECK(b.document(0) == std::vector<int32_t>{1, 2});
  IndexedDataset c(dir.prefix("b"));
  c = std::move(b);
  CHECK(c.document(0) == std::vector<int32_t>{1, 2});
  CHECK(c.num_documents() == 1);
}
