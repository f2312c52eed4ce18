// The GPT-samples C API: defaults, the three sources end to end, buffers left alone on error,
// and every bad argument returning its status with ptdp_last_error() naming it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "idx_bytes.h"
#include "ptdp/ptdp.h"

namespace {

std::string last_error() { return ptdp_last_error(); }

ptdp_gpt_data_options defaults() {
  ptdp_gpt_data_options o;
  REQUIRE(ptdp_gpt_data_options_init(&o) == PTDP_SUCCESS);
  return o;
}

// Expects create to fail with `status`; the message names the function and each of `parts`.
void expect_create_error(const ptdp_gpt_data_options* o, ptdp_status status, const std::vector<std::string>& parts) {
  ptdp_gpt_data data = reinterpret_cast<ptdp_gpt_data>(0x1);  // must stay unchanged
  CHECK(ptdp_gpt_data_create(o, &data) == status);
  const std::string m = last_error();
  INFO(m);
  CHECK(data == reinterpret_cast<ptdp_gpt_data>(0x1));
  CHECK_THAT(m, Catch::Contains("ptdp_gpt_data_create"));
  for (const auto& p : parts) CHECK_THAT(m, Catch::Contains(p));
}

}  // namespace

TEST_CASE("gpt data C API: defaults are mock data with Megatron's split", "[data][capi]") {
  const ptdp_gpt_data_options o = defaults();
  CHECK(o.struct_size == sizeof(ptdp_gpt_data_options));
  CHECK(o.source == PTDP_DATA_MOCK);
  CHECK(o.path == nullptr);
  CHECK(std::string(o.split) == "969,30,1");
  CHECK(o.seq_length == 32);
  CHECK(o.vocab_size == 256);
  CHECK(o.seed == 1234);
  CHECK(o.num_samples[0] == 0);
  CHECK(o.num_samples[1] == 0);
  CHECK(o.num_samples[2] == 0);
  CHECK(ptdp_gpt_data_options_init(nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("options is NULL"));

  // NULL options: the defaults.
  ptdp_gpt_data data = nullptr;
  REQUIRE(ptdp_gpt_data_create(nullptr, &data) == PTDP_SUCCESS);
  int64_t n = 0;
  REQUIRE(ptdp_gpt_data_num_samples(data, PTDP_SPLIT_TRAIN, &n) == PTDP_SUCCESS);
  CHECK(n > 1000);  // 969 documents of 16..128 tokens, 32 tokens a sample
  std::vector<int32_t> tokens(4 * 32), labels(4 * 32);
  REQUIRE(ptdp_gpt_data_batch(data, PTDP_SPLIT_TRAIN, 10, 4, tokens.data(), labels.data()) == PTDP_SUCCESS);
  for (int r = 0; r < 4; ++r) {
    for (int k = 0; k < 32; ++k) {
      CHECK(tokens[r * 32 + k] >= 0);
      CHECK(tokens[r * 32 + k] < 256);
      if (k + 1 < 32) CHECK(labels[r * 32 + k] == tokens[r * 32 + k + 1]);
    }
  }
  // The same options give the same batch.
  ptdp_gpt_data again = nullptr;
  const ptdp_gpt_data_options o2 = defaults();
  REQUIRE(ptdp_gpt_data_create(&o2, &again) == PTDP_SUCCESS);
  std::vector<int32_t> t2(tokens.size()), l2(tokens.size());
  REQUIRE(ptdp_gpt_data_batch(again, PTDP_SPLIT_TRAIN, 10, 4, t2.data(), l2.data()) == PTDP_SUCCESS);
  CHECK(t2 == tokens);
  CHECK(l2 == labels);
  // Data-parallel shares: two halves of the batch are the batch.
  REQUIRE(ptdp_gpt_data_batch(again, PTDP_SPLIT_TRAIN, 12, 2, t2.data() + 64, l2.data() + 64) == PTDP_SUCCESS);
  REQUIRE(ptdp_gpt_data_batch(again, PTDP_SPLIT_TRAIN, 10, 2, t2.data(), l2.data()) == PTDP_SUCCESS);
  CHECK(t2 == tokens);
  CHECK(l2 == labels);
  CHECK(ptdp_gpt_data_destroy(again) == PTDP_SUCCESS);
  CHECK(ptdp_gpt_data_destroy(data) == PTDP_SUCCESS);
  CHECK(ptdp_gpt_data_destroy(nullptr) == PTDP_SUCCESS);
}

TEST_CASE("gpt data C API: an indexed data set, with a token outside the vocabulary", "[data][capi]") {
  idx_bytes::TempDir dir("gpt_capi_indexed");
  const idx_bytes::Sample s = idx_bytes::uint16_sample();  // {1,2,3}, {4,5,6}, {65535}
  const std::string prefix = dir.prefix("u16");
  idx_bytes::write_sample(prefix, s.index, s.bin);

  ptdp_gpt_data_options o = defaults();
  o.source = PTDP_DATA_INDEXED;
  o.path = prefix.c_str();
  o.split = "1";
  o.seq_length = 2;
  o.vocab_size = 65536;
  ptdp_gpt_data data = nullptr;
  REQUIRE(ptdp_gpt_data_create(&o, &data) == PTDP_SUCCESS);
  int64_t n = -1;
  REQUIRE(ptdp_gpt_data_num_samples(data, PTDP_SPLIT_TRAIN, &n) == PTDP_SUCCESS);
  CHECK(n == 3);  // (7 - 1) / 2
  REQUIRE(ptdp_gpt_data_num_samples(data, PTDP_SPLIT_VALID, &n) == PTDP_SUCCESS);
  CHECK(n == 0);
  // The three samples cover all 7 tokens; each document's tokens stay in order.
  std::vector<int32_t> t(6), l(6);
  REQUIRE(ptdp_gpt_data_batch(data, PTDP_SPLIT_TRAIN, 0, 3, t.data(), l.data()) == PTDP_SUCCESS);
  std::multiset<int32_t> seen;
  for (int r = 0; r < 3; ++r) {
    CHECK(l[2 * r] == t[2 * r + 1]);
    seen.insert(t[2 * r]);
    seen.insert(t[2 * r + 1]);
    seen.insert(l[2 * r + 1]);
  }
  CHECK(std::set<int32_t>(seen.begin(), seen.end()) == std::set<int32_t>{1, 2, 3, 4, 5, 6, 65535});
  CHECK(seen.size() == 9);  // 7 tokens, the two shared between consecutive samples counted twice
  CHECK(ptdp_gpt_data_destroy(data) == PTDP_SUCCESS);

  // 65535 (document 2, position 0) is outside a vocabulary of 1000: found when read, and the
  // caller's buffers stay as they were.
  o.vocab_size = 1000;
  REQUIRE(ptdp_gpt_data_create(&o, &data) == PTDP_SUCCESS);
  std::vector<int32_t> bt(6, -7), bl(6, -7);
  CHECK(ptdp_gpt_data_batch(data, PTDP_SPLIT_TRAIN, 0, 3, bt.data(), bl.data()) == PTDP_ERR_INVALID_ARGUMENT);
  const std::string m = last_error();
  CHECK_THAT(m, Catch::Contains("ptdp_gpt_data_batch") && Catch::Contains("u16.bin") &&
                    Catch::Contains("document 2") && Catch::Contains("position 0") && Catch::Contains("65535"));
  CHECK(bt == std::vector<int32_t>(6, -7));
  CHECK(bl == std::vector<int32_t>(6, -7));
  CHECK(ptdp_gpt_data_destroy(data) == PTDP_SUCCESS);

  // A split too small for the samples wanted names the split, its tokens and s + 1.
  o.vocab_size = 65536;
  o.split = "2,1";  // 2 documents (6 tokens) and 1 (1 token)
  o.num_samples[1] = 4;
  expect_create_error(&o, PTDP_ERR_INVALID_ARGUMENT, {"split valid", "1 tokens", "3 tokens"});
  // Missing files.
  const std::string missing = dir.prefix("missing");
  o.path = missing.c_str();
  expect_create_error(&o, PTDP_ERR_IO, {"missing"});
}

TEST_CASE("gpt data C API: a text file is read as bytes", "[data][capi]") {
  idx_bytes::TempDir dir("gpt_capi_text");
  const std::string path = dir.prefix("a.txt");
  {
    std::ofstream f(path, std::ios::binary);
    f << "abcdefghij\n\n\nklmnop\n";
  }
  ptdp_gpt_data_options o = defaults();
  o.source = PTDP_DATA_TEXT;
  o.path = path.c_str();
  o.split = "100, 0, 0";
  o.seq_length = 4;
  o.num_samples[0] = 10;  // one epoch has (12 + 8 - 1) / 4 = 4: three epochs
  ptdp_gpt_data data = nullptr;
  REQUIRE(ptdp_gpt_data_create(&o, &data) == PTDP_SUCCESS);
  int64_t n = 0;
  REQUIRE(ptdp_gpt_data_num_samples(data, PTDP_SPLIT_TRAIN, &n) == PTDP_SUCCESS);
  CHECK(n == (3 * 20 - 1) / 4);
  std::vector<int32_t> t(static_cast<std::size_t>(n * 4)), l(t.size());
  REQUIRE(ptdp_gpt_data_batch(data, PTDP_SPLIT_TRAIN, 0, static_cast<int32_t>(n), t.data(), l.data()) == PTDP_SUCCESS);
  const std::string docs = "abcdefghij\n\nklmnop\n\n";
  for (int32_t id : t) CHECK(docs.find(static_cast<char>(id)) != std::string::npos);
  CHECK(std::count(t.begin(), t.end(), 'a') + std::count(l.begin(), l.end(), 'a') >= 3);
  CHECK(ptdp_gpt_data_destroy(data) == PTDP_SUCCESS);

  const std::string missing = dir.prefix("none.txt");
  o.path = missing.c_str();
  expect_create_error(&o, PTDP_ERR_IO, {"none.txt"});
  o.path = path.c_str();
  o.vocab_size = 106;  // 'j' = 106 at document 0, position 9
  expect_create_error(&o, PTDP_ERR_INVALID_ARGUMENT, {"a.txt", "document 0", "position 9"});
}

TEST_CASE("gpt data C API: bad arguments are rejected and named", "[data][capi]") {
  ptdp_gpt_data_options o = defaults();
  CHECK(ptdp_gpt_data_create(&o, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("out is NULL"));

  o = defaults();
  o.seq_length = 0;
  expect_create_error(&o, PTDP_ERR_INVALID_ARGUMENT, {"seq_length"});
  o = defaults();
  o.seq_length = -3;
  expect_create_error(&o, PTDP_ERR_INVALID_ARGUMENT, {"seq_length = -3"});
  o = defaults();
  o.vocab_size = 0;
  expect_create_error(&o, PTDP_ERR_INVALID_ARGUMENT, {"vocab_size"});
  o = defaults();
  o.source = PTDP_DATA_INDEXED;
  expect_create_error(&o, PTDP_ERR_INVALID_ARGUMENT, {"path is NULL"});
  o.source = PTDP_DATA_TEXT;
  expect_create_error(&o, PTDP_ERR_INVALID_ARGUMENT, {"path is NULL"});
  o.source = static_cast<ptdp_data_source>(7);
  expect_create_error(&o, PTDP_ERR_INVALID_ARGUMENT, {"source = 7"});
  o = defaults();
  o.num_samples[2] = -1;
  expect_create_error(&o, PTDP_ERR_INVALID_ARGUMENT, {"num_samples[2]"});
  for (const char* bad : {"a,b", "-1,2,3", "0,0,0", "1,2,3,4"}) {
    o = defaults();
    o.split = bad;
    expect_create_error(&o, PTDP_ERR_INVALID_ARGUMENT, {"split", bad});
  }
  o = defaults();
  o.struct_size = 0;
  expect_create_error(&o, PTDP_ERR_INVALID_ARGUMENT, {"struct_size", "ptdp_gpt_data_options_init"});

  ptdp_gpt_data data = nullptr;
  o = defaults();
  o.seq_length = 8;
  REQUIRE(ptdp_gpt_data_create(&o, &data) == PTDP_SUCCESS);
  int64_t n = 0;
  CHECK(ptdp_gpt_data_num_samples(data, static_cast<ptdp_data_split>(3), &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("split = 3"));
  CHECK(ptdp_gpt_data_num_samples(data, PTDP_SPLIT_TRAIN, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("count is NULL"));
  CHECK(ptdp_gpt_data_num_samples(nullptr, PTDP_SPLIT_TRAIN, &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("data is NULL"));

  std::vector<int32_t> t(16, -7), l(16, -7);
  CHECK(ptdp_gpt_data_batch(data, static_cast<ptdp_data_split>(-1), 0, 1, t.data(), l.data()) ==
        PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("split = -1"));
  CHECK(ptdp_gpt_data_batch(data, PTDP_SPLIT_TRAIN, 0, 0, t.data(), l.data()) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("count = 0"));
  CHECK(ptdp_gpt_data_batch(data, PTDP_SPLIT_TRAIN, 0, -2, t.data(), l.data()) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("count = -2"));
  CHECK(ptdp_gpt_data_batch(data, PTDP_SPLIT_TRAIN, -1, 1, t.data(), l.data()) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("first = -1"));
  CHECK(ptdp_gpt_data_batch(data, PTDP_SPLIT_TRAIN, 0, 1, nullptr, l.data()) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("tokens is NULL"));
  CHECK(ptdp_gpt_data_batch(data, PTDP_SPLIT_TRAIN, 0, 1, t.data(), nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("labels is NULL"));
  CHECK(ptdp_gpt_data_batch(nullptr, PTDP_SPLIT_TRAIN, 0, 1, t.data(), l.data()) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("data is NULL"));
  CHECK(t == std::vector<int32_t>(16, -7));
  CHECK(l == std::vector<int32_t>(16, -7));
  // The handle is still usable after all that.
  CHECK(ptdp_gpt_data_batch(data, PTDP_SPLIT_TRAIN, 0, 2, t.data(), l.data()) == PTDP_SUCCESS);
  CHECK(t != std::vector<int32_t>(16, -7));
  CHECK(ptdp_gpt_data_destroy(data) == PTDP_SUCCESS);

  // An empty split that no samples were asked of: 0 samples, and reading it is an error.
  o = defaults();
  o.split = "1,0,0";
  REQUIRE(ptdp_gpt_data_create(&o, &data) == PTDP_SUCCESS);
  REQUIRE(ptdp_gpt_data_num_samples(data, PTDP_SPLIT_TEST, &n) == PTDP_SUCCESS);
  CHECK(n == 0);
  std::vector<int32_t> t32(32), l32(32);
  CHECK(ptdp_gpt_data_batch(data, PTDP_SPLIT_TEST, 0, 1, t32.data(), l32.data()) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("split test has no samples"));
  CHECK(ptdp_gpt_data_destroy(data) == PTDP_SUCCESS);
}
